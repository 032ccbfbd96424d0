"""docs/reference/ is what the code generates from itself (qtg_runner/reference.py,
`make docs`): the procedures and views as the migrated database installs them,
the `qtg` commands as the Typer app declares them, the QT codes as
qtg_runner/errors.py describes them. A file that differs fails with its name,
what to run, and the start of the difference.
"""

from __future__ import annotations

import difflib

import psycopg
from conftest import TestDatabase

from qtg_cli import app
from qtg_runner import reference

DIFF_LINES = 40


def assert_current(name: str, generated: str) -> None:
    path = reference.REFERENCE_DIR / name
    committed = path.read_text() if path.is_file() else ""
    if committed == generated:
        return
    diff = difflib.unified_diff(
        committed.splitlines(),
        generated.splitlines(),
        f"docs/reference/{name} (committed)",
        f"docs/reference/{name} (generated)",
        lineterm="",
    )
    shown = "\n".join(list(diff)[:DIFF_LINES])
    raise AssertionError(f"docs/reference/{name} is stale: run make docs\n{shown}")


def test_the_procedures_reference_is_current(db: TestDatabase) -> None:
    with psycopg.connect(db.dsn) as conn:
        assert_current("procedures.md", reference.procedures_md(conn))


def test_the_cli_reference_is_current() -> None:
    assert_current("cli.md", reference.cli_md(app))


def test_the_errors_reference_is_current() -> None:
    assert_current("errors.md", reference.errors_md())


def test_the_index_is_current() -> None:
    assert_current("README.md", reference.index_md())


def test_every_file_of_the_reference_is_generated() -> None:
    """Nothing in docs/reference/ that `make docs` does not write (and so no
    test checks): a hand-written page there would go stale unseen."""
    assert sorted(p.name for p in reference.REFERENCE_DIR.iterdir()) == sorted(reference.FILES)
