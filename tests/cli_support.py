"""`qtg` run in the test's process as a person's own login, and how its
errors read: the helpers the CLI tests share."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rows import Conn, iso_at
from typer.testing import CliRunner, Result

from qtg_cli import app

Cli = Callable[..., Result]
"""``cli(login, *args)``: `qtg <prefix> *args` as ``login``."""


def cli_as(monkeypatch: pytest.MonkeyPatch, *prefix: str) -> Cli:
    """Runs `qtg <prefix> ...` as a given login (its own DSN, as `qtg db url
    --login NAME` prints it), on the testnet, the database's clock pinned at T0."""
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")

    def run(login: Conn, *args: str) -> Result:
        monkeypatch.setenv("QTG_DATABASE_URL", login.info.dsn + f" password={login.info.password}")
        return CliRunner().invoke(app, [*prefix, *args])

    return run


def one_line_error(result: Result, says: str, code: int = 2) -> None:
    """The command failed with ``code``: nothing on stdout, one `qtg: error:`
    line on stderr that says ``says``."""
    shown = f"exit {result.exit_code}; stdout {result.stdout!r}; stderr {result.stderr!r}"
    assert result.exit_code == code, shown
    assert result.stdout == "", shown
    assert result.stderr.startswith("qtg: error: ") and result.stderr.count("\n") == 1, shown
    assert says in result.stderr, shown
