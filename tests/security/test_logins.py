"""Logins: `qtg operator|runner add|list|remove` and `qtg executors register`, as the admin.

- add makes a login role that is a member of the network's group role, with a
  password only the credentials file holds (the server keeps its scram
  verifier); a malformed, reserved or taken name is refused with one line
  and nothing made or written.
- remove takes only a login of that group (not a superuser, not another
  network's or kind's login, not an unknown name), drops it, ends its open
  sessions and takes its line out of the credentials file.
- executors register is the deploy step: it registers what this build ships,
  and registering again changes nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from typer.testing import CliRunner, Result

from qtg_runner import credentials
from qtg_runner.cli import app
from qtg_runner.executors.registry import SHIPPED


def invoke(db: TestDatabase, passfile: Path, *args: str) -> Result:
    return CliRunner().invoke(
        app,
        list(args),
        env={
            "QTG_DATABASE_URL": db.dsn,
            "QTG_CREDENTIALS_FILE": str(passfile),
            "QTG_NETWORK_MODE": "testnet",
            "COLUMNS": "200",
        },
    )


def refused(result: Result, *words: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.stderr.startswith("qtg: error: ") and result.stderr.count("\n") == 1
    for word in words:
        assert word in result.stderr, result.stderr


def role(db: TestDatabase, name: str) -> tuple[Any, ...] | None:
    return (
        db.connect()
        .execute(
            """SELECT r.rolcanlogin, r.rolsuper, r.rolpassword LIKE 'SCRAM-SHA-256$%%',
                      array(SELECT g.rolname::text FROM pg_auth_members m
                              JOIN pg_roles g ON g.oid = m.roleid
                             WHERE m.member = r.oid ORDER BY 1)
                 FROM pg_authid r WHERE r.rolname = %s""",
            (name,),
        )
        .fetchone()
    )


@pytest.fixture
def passfile(tmp_path: Path) -> Path:
    return tmp_path / "qtg" / "pgpass"


def name_in(db: TestDatabase, person: str) -> str:
    name = f"{person}_{db.name}"
    db.logins.append(name)
    return name


@pytest.mark.parametrize("kind", ["operator", "runner"])
def test_add_makes_a_login_of_the_group_whose_password_only_the_file_holds(
    db: TestDatabase, passfile: Path, kind: str
) -> None:
    name = name_in(db, "gina")
    result = invoke(db, passfile, kind, "add", name, "--network", "mainnet")
    assert result.exit_code == 0, result.output
    assert role(db, name) == (True, False, True, [f"qtg_mainnet_{kind}"])
    [entry] = credentials.read(passfile)
    assert entry.user == name
    assert (entry.host, entry.port) == credentials.server_of(db.dsn)
    assert entry.password not in result.output
    assert oct(passfile.parent.stat().st_mode & 0o777) == "0o700"
    with psycopg.connect(credentials.login_dsn(db.dsn, name, passfile)) as conn:
        assert conn.execute("SELECT session_user").fetchone() == (name,)

    listed = invoke(db, passfile, kind, "list", "--network", "mainnet")
    assert listed.exit_code == 0, listed.output
    [line] = [line for line in listed.stdout.splitlines() if name in line]
    assert "statement_timeout=60s" in line and line.split("│")[-2].strip() == "yes"
    other = invoke(db, passfile, kind, "list", "--network", "testnet")
    assert name not in other.stdout


@pytest.mark.parametrize("kind", ["runner", "operator", "reader"])
def test_a_login_is_handed_a_file_that_holds_its_password_alone(
    db: TestDatabase, passfile: Path, kind: str
) -> None:
    """The documented hand-off: `add` writes the login's own credentials file
    (logins/NAME.pgpass, 0600), which holds that login's password and no other
    (not the admin's file, which holds every login's and, embedded, the
    superuser's); `qtg db url --login NAME` names that file, and it connects."""
    first, name = name_in(db, "mona"), name_in(db, "nell")
    assert invoke(db, passfile, "operator", "add", first).exit_code == 0
    result = invoke(db, passfile, kind, "add", name)
    assert result.exit_code == 0, result.output
    own = credentials.login_file(passfile, name)
    assert str(own) in result.stdout.replace("\n", "")
    [entry] = credentials.read(own)
    assert entry.user == name
    assert oct(own.stat().st_mode & 0o777) == "0o600"
    assert {e.user for e in credentials.read(passfile)} == {first, name}  # the admin's
    url = invoke(db, passfile, "db", "url", "--login", name)
    assert url.exit_code == 0, url.output
    assert f"passfile={own}" in url.stdout
    with psycopg.connect(url.stdout.strip()) as conn:
        assert conn.execute("SELECT session_user").fetchone() == (name,)
    assert invoke(db, passfile, kind, "remove", name).exit_code == 0
    assert credentials.read(own) == []


@pytest.mark.parametrize(
    "bad, says",
    [
        ("Alice", "not a login name"),
        ("1alice", "not a login name"),
        ("al-ice", "not a login name"),
        ("a" * 64, "not a login name"),
        ("pg_alice", "reserved"),
        ("qtg_testnet_runner", "reserved"),
        ("public", "reserved"),
    ],
)
def test_add_refuses_a_malformed_or_reserved_name(
    db: TestDatabase, passfile: Path, bad: str, says: str
) -> None:
    refused(invoke(db, passfile, "operator", "add", bad), says)
    assert not passfile.exists()


def test_add_refuses_a_name_that_is_taken_and_changes_nothing(
    db: TestDatabase, passfile: Path
) -> None:
    name = name_in(db, "hank")
    assert invoke(db, passfile, "operator", "add", name).exit_code == 0
    before = passfile.read_text(), role(db, name)
    for kind, network in (("operator", "testnet"), ("runner", "mainnet")):
        refused(invoke(db, passfile, kind, "add", name, "--network", network), "already exists")
    refused(invoke(db, passfile, "runner", "add", "postgres"), "already exists")
    assert (passfile.read_text(), role(db, name)) == before


def test_remove_takes_only_a_login_of_its_group(db: TestDatabase, passfile: Path) -> None:
    operator = name_in(db, "ivan")
    runner = name_in(db, "jade")
    assert invoke(db, passfile, "operator", "add", operator).exit_code == 0
    assert invoke(db, passfile, "runner", "add", runner).exit_code == 0
    before = passfile.read_text()

    refused(invoke(db, passfile, "operator", "remove", runner), "not a login of")
    refused(invoke(db, passfile, "operator", "remove", operator, "--network", "mainnet"))
    refused(invoke(db, passfile, "operator", "remove", "postgres"), "not a login of")
    refused(invoke(db, passfile, "runner", "remove", "nobody_at_all"), "not a login of")
    assert passfile.read_text() == before
    assert role(db, operator) is not None and role(db, runner) is not None


def test_remove_drops_the_login_ends_its_sessions_and_forgets_its_password(
    db: TestDatabase, passfile: Path
) -> None:
    name = name_in(db, "kate")
    keep = name_in(db, "liam")
    assert invoke(db, passfile, "operator", "add", name).exit_code == 0
    assert invoke(db, passfile, "operator", "add", keep).exit_code == 0
    session = psycopg.connect(credentials.login_dsn(db.dsn, name, passfile), autocommit=True)
    try:
        result = invoke(db, passfile, "operator", "remove", name)
        assert result.exit_code == 0, result.output
        assert role(db, name) is None
        assert [e.user for e in credentials.read(passfile)] == [keep]
        with pytest.raises(psycopg.OperationalError):
            session.execute("SELECT 1")
    finally:
        session.close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(credentials.login_dsn(db.dsn, name, passfile))


def test_executors_register_is_the_deploy_step_and_is_idempotent(
    db: TestDatabase, passfile: Path
) -> None:
    first = invoke(db, passfile, "executors", "register", "--network", "mainnet")
    assert first.exit_code == 0, first.output
    assert "registered" in first.stdout
    again = invoke(db, passfile, "executors", "register", "--network", "mainnet")
    assert "unchanged" in again.stdout
    conn = db.connect()
    rows = conn.execute(
        "SELECT executor_key, has_side_effect, node_config_schema FROM mainnet.executors"
        " ORDER BY executor_key"
    ).fetchall()
    assert rows == sorted((e.key, e.has_side_effect, e.node_config_schema) for e in SHIPPED)
    assert conn.execute("SELECT count(*) FROM testnet.executors").fetchone() == (0,)
    audited = conn.execute(
        "SELECT action FROM mainnet.audit_outbox WHERE entity = 'executor'"
    ).fetchall()
    assert audited == [("registered",)] * len(SHIPPED)


def test_every_login_command_explains_itself(db: TestDatabase, passfile: Path) -> None:
    for args, words in (
        (["operator", "add", "--help"], ["qtg_<network>_operator", "0600", "scram-sha-256"]),
        (["runner", "add", "--help"], ["qtg_<network>_runner", "credentials"]),
        (["runner", "remove", "--help"], ["sessions"]),
        (["executors", "register", "--help"], ["deploy", "has_side_effect"]),
        (["db", "url", "--help"], ["--login", "password"]),
        (["run", "--help"], ["--as", "runner login"]),
    ):
        result = invoke(db, passfile, *args)
        assert result.exit_code == 0, result.output
        text = " ".join(result.stdout.split())
        for word in words:
            assert word in text, (args, word)
