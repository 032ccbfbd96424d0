"""A login may change its own session defaults (ALTER ROLE itself SET ...):
PostgreSQL allows it and no trigger sees it. login_limits shows each login of
the network beside its group's limit and defaults, and says which differ, so
a login that turned its own timeouts off shows; and what it could then hold
is bounded all the same (tests/security/test_stalled_sessions.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import TestDatabase
from engine import bind, register_sim
from typer.testing import CliRunner

from qtg_runner.cli import app
from qtg_runner.credentials import login_dsn


def test_a_login_that_changed_its_own_defaults_shows(db: TestDatabase, tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    name = f"rory_{db.name}"
    db.logins.append(name)
    result = CliRunner().invoke(
        app,
        ["runner", "add", name, "--network", "testnet"],
        env={"QTG_DATABASE_URL": db.dsn, "QTG_CREDENTIALS_FILE": str(passfile)},
    )
    assert result.exit_code == 0, result.output
    admin = bind(db.connect())

    def row() -> tuple[object, ...] | None:
        return admin.execute(
            "SELECT group_role, connection_limit, differs FROM login_limits WHERE login = %s",
            (name,),
        ).fetchone()

    assert row() == ("qtg_testnet_runner", 30, False)
    login = db.connect(login_dsn(db.dsn, name, passfile))
    login.execute(f'ALTER ROLE "{name}" SET statement_timeout = 0')  # its own, allowed
    assert row() == ("qtg_testnet_runner", 30, True)
    # the other network's view does not list it
    assert bind(db.connect(), "mainnet").execute(
        "SELECT count(*) FROM login_limits WHERE login = %s", (name,)
    ).fetchone() == (0,)


def test_a_dashboard_reads_it(db: TestDatabase) -> None:
    dashboard = bind(db.connect(db.login("dash", "qtg_testnet_reader").dsn))
    rows = dashboard.execute("SELECT login, group_role FROM login_limits").fetchall()
    assert any(group == "qtg_testnet_reader" for _, group in rows)


def test_an_operator_in_psql_finds_movements_by_the_names_they_guess(
    db: TestDatabase, tmp_path: Path
) -> None:
    """A login lands in its network (its default search_path): `movements`
    lists the movements and the procedures answer by name, no SET first."""
    passfile = tmp_path / "pgpass"
    names = {}
    for person in ("sana", "tom"):
        name = f"{person}_{db.name}"
        db.logins.append(name)
        result = CliRunner().invoke(
            app,
            ["operator", "add", name, "--network", "testnet"],
            env={"QTG_DATABASE_URL": db.dsn, "QTG_CREDENTIALS_FILE": str(passfile)},
        )
        assert result.exit_code == 0, result.output
        names[person] = name
    admin = bind(db.connect())
    register_sim(admin)
    admin.execute("SELECT upsert_lane_baseline('psql_lane', 5)")
    sana = db.connect(login_dsn(db.dsn, names["sana"], passfile))
    tom = db.connect(login_dsn(db.dsn, names["tom"], passfile))
    plan = '{"nodes": [{"key": "a", "executor": "sim", "config": {"lane": "psql_lane"}}]}'
    row = sana.execute(
        "SELECT movement_id FROM create_movement('psql-1', 5, %s::jsonb)", (plan,)
    ).fetchone()
    assert row is not None
    assert tom.execute("SELECT approve_movement(%s)::text", (row[0],)).fetchone() == ("APPROVED",)
    assert sana.execute(
        "SELECT state::text, created_by, approved_by FROM movements WHERE movement_id = %s",
        (row[0],),
    ).fetchone() == ("APPROVED", names["sana"], names["tom"])
