"""A login may change its own session defaults (ALTER ROLE itself SET ...):
PostgreSQL allows it and no trigger sees it. login_limits shows each login of
the network beside its group's limit and defaults, and says which differ, so
a login that turned its own timeouts off shows; and what it could then hold
is bounded all the same (tests/security/test_stalled_sessions.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import TestDatabase
from engine import bind, register_sim
from test_role_limits import add


def test_a_login_that_changed_its_own_defaults_shows(db: TestDatabase, tmp_path: Path) -> None:
    dsn = add(db, "runner", "rory", "testnet", tmp_path / "pgpass")
    name = f"rory_{db.name}"
    admin = bind(db.connect())

    def row() -> tuple[object, ...] | None:
        return admin.execute(
            "SELECT group_role, connection_limit, differs FROM login_limits WHERE login = %s",
            (name,),
        ).fetchone()

    assert row() == ("qtg_testnet_runner", 30, False)
    login = db.connect(dsn)
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
    sana = db.connect(add(db, "operator", "sana", "testnet", passfile))
    tom = db.connect(add(db, "operator", "tom", "testnet", passfile))
    names = {"sana": f"sana_{db.name}", "tom": f"tom_{db.name}"}
    admin = bind(db.connect())
    register_sim(admin)
    admin.execute("SELECT upsert_lane_baseline('psql_lane', 5)")
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
