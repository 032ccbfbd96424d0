"""`qtg audit verify|export` as an operator's login: export writes the chained
rows as JSON lines and names the head to keep off the host; verify says the
chain holds (exit 0), finds an edit (exit 1, the row and why), checks an
export file with SHA-256 alone and, by the row kept off the host, finds it
cut at either end; it refuses a malformed --expect (exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import TestDatabase
from engine import claim, create_started, submit
from rows import ONE, Conn, iso_at, person
from typer.testing import CliRunner

from qtg_runner.cli import app
from qtg_runner.db import procs


@pytest.fixture
def cli(db: TestDatabase, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")
    operator = person(db, "auditor")

    def run(*args: str) -> Any:
        monkeypatch.setenv(
            "QTG_DATABASE_URL", operator.info.dsn + f" password={operator.info.password}"
        )
        return CliRunner().invoke(app, ["audit", *args])

    return run


def test_export_then_verify_the_database_and_the_file(conn: Conn, cli: Any, tmp_path: Path) -> None:
    for i in range(2):
        create_started(conn, ONE, f"m{i}")
    for claimed in claim(conn):
        submit(conn, claimed)
    promoted = procs.promote_audit("promoter").one(conn)

    export = tmp_path / "audit.jsonl"
    exported = cli("export", "-o", str(export))
    assert exported.exit_code == 0, exported.output
    head = procs.verify_audit_chain().one(conn)
    assert f"exported {promoted} audit rows" in exported.stderr
    assert f"keep {head.head_seq}:{head.head_hash} off the host" in exported.stderr
    assert len(export.read_text().splitlines()) == promoted

    held = cli("verify", "--expect", f"{head.head_seq}:{head.head_hash}")
    assert held.exit_code == 0, held.output
    assert f"the audit chain holds: {promoted} rows" in held.stdout
    from_file = cli("verify", "--file", str(export))
    assert from_file.exit_code == 0, from_file.output
    assert (
        head.head_hash in from_file.stdout and "cut at its tail looks the same" in from_file.stdout
    )
    kept = f"{head.head_seq}:{head.head_hash}"
    proven = cli("verify", "--file", str(export), "--expect", kept)
    assert proven.exit_code == 0 and "looks the same" not in proven.stdout, proven.output
    cut = tmp_path / "cut.jsonl"
    cut.write_text("".join(export.read_text().splitlines(keepends=True)[:-1]))
    tail_cut = cli("verify", "--file", str(cut), "--expect", kept)
    assert tail_cut.exit_code == 1 and "its tail was cut" in tail_cut.stdout
    cut.write_text("".join(export.read_text().splitlines(keepends=True)[1:]))
    head_cut = cli("verify", "--file", str(cut), "--expect", kept)
    assert head_cut.exit_code == 1 and "starts at row 2" in head_cut.stdout

    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        conn.execute("UPDATE audit_log SET actor = 'mallory' WHERE seq = 2")
        conn.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only")
    broken = cli("verify")
    assert broken.exit_code == 1
    assert "breaks at row 2" in broken.stdout

    lines = export.read_text().splitlines()
    lines[0] = lines[0].replace('\\"actor\\": \\"', '\\"actor\\": \\"x', 1)
    export.write_text("\n".join(lines) + "\n")
    bad_file = cli("verify", "--file", str(export))
    assert bad_file.exit_code == 1 and "breaks at row 1" in bad_file.stdout

    malformed = cli("verify", "--expect", "2:abc")
    assert malformed.exit_code == 2 and "--expect" in malformed.stderr
    twice = cli("verify", "--expect", f"2:{'ab' * 32}", "--expect", f"2:{'cd' * 32}")
    assert twice.exit_code == 2 and "twice" in twice.stderr
