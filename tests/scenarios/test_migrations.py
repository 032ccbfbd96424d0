"""Schema lifecycle: migrate, roll back, re-apply, and the migrated schema equals a fresh one."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from catalog import Snapshot, diff, snapshot
from conftest import NewDatabase, TestDatabase, create_database, drop_database, dsn_for
from engine import as_person, bind, node, plan, register_sim
from psycopg.conninfo import conninfo_to_dict
from typer.testing import CliRunner
from yoyo.connections import parse_uri

from qtg_runner.cli import app
from qtg_runner.db import procs
from qtg_runner.db.migrate import (
    INLINE_FOLDER,
    PLANNER_SETTINGS,
    MigrationError,
    applied_migrations,
    install_functions,
    migrate,
    rollback,
    rollback_all,
    sql_dir,
    yoyo_uri,
)

QTG_SCHEMAS = {"qtg", "qtg_admin", "mainnet", "testnet"}
ALL_MIGRATIONS = sorted(
    p.stem for p in (sql_dir() / "schemas").glob("*.sql") if not p.name.endswith(".rollback.sql")
)


@dataclass(frozen=True)
class FreshInstall:
    dsn: str
    catalog: Snapshot


@pytest.fixture(scope="module")
def fresh_install(pg_server: str) -> Iterator[FreshInstall]:
    """An empty database migrated once for this module, and its catalog: what
    the tests compare a cycled or cloned schema with (a migration from nothing
    takes 3-4 s, and each of them made its own)."""
    name = f"qtg_fresh_install_{os.getpid()}"
    drop_database(pg_server, name)
    create_database(pg_server, name)
    try:
        dsn = dsn_for(pg_server, dbname=name)
        migrate(dsn)
        with psycopg.connect(dsn, autocommit=True) as conn:
            catalog = snapshot(conn)
        yield FreshInstall(dsn, catalog)
    finally:
        drop_database(pg_server, name)


def _schemas(database: TestDatabase) -> set[str]:
    rows = (
        database.connect()
        .execute("SELECT nspname FROM pg_namespace WHERE nspname = ANY(%s)", [list(QTG_SCHEMAS)])
        .fetchall()
    )
    return {r[0] for r in rows}


def test_template_is_migrated(db: TestDatabase) -> None:
    assert _schemas(db) == QTG_SCHEMAS
    assert applied_migrations(db.dsn) == ALL_MIGRATIONS
    networks = (
        db.connect().execute("SELECT network_name FROM qtg_admin.networks ORDER BY 1").fetchall()
    )
    assert [r[0] for r in networks] == ["mainnet", "testnet"]


def test_migrate_rollback_all_migrate(new_database: NewDatabase) -> None:
    database = new_database(template=None)
    first = migrate(database.dsn)
    assert first.applied == ALL_MIGRATIONS
    assert set(first.routines) == {"mainnet", "testnet"}

    undone = rollback_all(database.dsn)
    assert undone == list(reversed(ALL_MIGRATIONS))
    assert _schemas(database) == set()
    assert applied_migrations(database.dsn) == []

    again = migrate(database.dsn)
    assert again.applied == ALL_MIGRATIONS
    assert again.routines == first.routines
    assert again.views == first.views
    assert _schemas(database) == QTG_SCHEMAS


def test_a_migrated_database_gives_its_logins_no_temporary_tables(
    new_database: NewDatabase,
) -> None:
    """TEMPORARY is the database's own privilege (a clone of a template does not
    inherit it): migrated, PUBLIC has it no more, so no login of a network makes
    temporary tables; the rollback gives it back."""
    database = new_database(template=None)
    migrate(database.dsn)
    reader = database.connect(database.login("dashboard", "qtg_testnet_reader").dsn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("CREATE TEMP TABLE scratch (x int)")
    rollback_all(database.dsn)
    migrate(database.dsn)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("CREATE TEMP TABLE scratch (x int)")


def test_an_admin_that_is_not_a_superuser_is_told_what_public_keeps(
    new_database: NewDatabase,
) -> None:
    """On a managed server the admin is no superuser: it cannot take from
    PUBLIC what pg_catalog's owner gave (PostgreSQL only warns), and the
    migration says so in a warning with what to ask for, instead of passing
    in silence or failing the upgrade."""
    database = new_database()
    with psycopg.connect(database.dsn, autocommit=True) as admin:
        admin.execute("GRANT EXECUTE ON FUNCTION pg_notify(text, text) TO PUBLIC")
        role = f"managed_admin_{database.name}"[:63]
        admin.execute(f'CREATE ROLE "{role}" NOSUPERUSER IN ROLE qtg_owner')
        warnings: list[str] = []
        admin.add_notice_handler(lambda d: warnings.append(d.message_primary or ""))
        try:
            with admin.transaction():
                admin.execute(f'SET LOCAL ROLE "{role}"')
                admin.execute((sql_dir() / "schemas" / "0068_public_privileges.sql").read_text())
        finally:
            admin.execute(f'DROP ROLE "{role}"')
        assert any(w.startswith("PUBLIC keeps TEMPORARY") for w in warnings), warnings
        assert admin.execute(
            "SELECT has_function_privilege('public', 'pg_notify(text, text)', 'EXECUTE')"
        ).fetchone() == (True,)


def test_rollback_one_then_migrate(db: TestDatabase) -> None:
    # a clone of the template, migrated from nothing (test_template_clone_equals_fresh_install)
    assert rollback(db.dsn, 1) == [ALL_MIGRATIONS[-1]]
    assert applied_migrations(db.dsn) == ALL_MIGRATIONS[:-1]
    assert migrate(db.dsn).applied == [ALL_MIGRATIONS[-1]]


def claimed_before(
    new_database: NewDatabase, migration: str, keys: Sequence[str], executors: Sequence[str] = ()
) -> tuple[Any, psycopg.Connection[Any], int, int]:
    """A database whose one movement's root nodes ``keys`` (sim, beside the
    ``executors`` registered as sim) are claimed by today's functions (today's
    views read the latest migrations), then its schema rolled back to before
    ``migration``: the database, a connection, the movement's id and the
    migration's index."""
    database = new_database()
    conn = bind(database.connect())
    for key in ("sim", *executors):
        register_sim(conn, key)
    with as_person(conn, "alice"):
        movement = procs.create_movement("twice", Decimal(1), plan=plan(*map(node, keys)))
        movement_id = movement.one(conn).movement_id
    with as_person(conn, "bob"):
        procs.approve_movement(movement_id).one(conn)
    procs.start_approved_movements().all(conn)
    assert len(procs.claim_ready_nodes("w1", 10, 300).all(conn)) == len(keys)
    conn.close()
    at = ALL_MIGRATIONS.index(migration)
    assert rollback(database.dsn, len(ALL_MIGRATIONS) - at)[-1] == migration
    return database, bind(database.connect()), movement_id, at


def test_deposit_steps_naming_one_transfer_twice_stop_the_migration(
    new_database: NewDatabase,
) -> None:
    """0070 makes one transfer credit one deposit step. A database where two
    deposit steps' intents already name one transfer is not migrated: the
    refusal names the transfer and the nodes, and nothing is applied."""
    database, conn, _, at = claimed_before(new_database, "0070_deposit_attribution", ("a", "b"))
    conn.execute(
        "UPDATE node_intents SET intent_state = 'PREPARED', prepared_payload ="
        """ '{"deposit_address": "0xde", "chain_key": "local-a", "tx_hash": "0xAB"}'"""
    )
    with pytest.raises(MigrationError, match=r"one transfer twice: 0xab on local-a \(nodes 1, 2\)"):
        migrate(database.dsn)
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS[:at]


def test_mints_signed_for_one_message_twice_stop_the_migration(
    new_database: NewDatabase,
) -> None:
    """0074 makes one message minted by one mint, and gives each mint already
    signed its message. A database where two signed mints' burns name one
    message is not migrated (the refusal names the message, both mints and
    the burn), and nothing is applied; settled, it is migrated, each mint
    owning its burn's message."""
    database, conn, movement_id, at = claimed_before(
        new_database,
        "0074_one_message_one_mint",
        ("burn-1", "burn-2", "mint-1", "mint-2"),
        ("cctp_burn", "cctp_mint"),
    )
    ids = dict(conn.execute("SELECT node_key, id FROM movement_request_nodes").fetchall())
    nonce = "0x" + "07" * 32
    for n in (1, 2):
        burn, mint = ids[f"burn-{n}"], ids[f"mint-{n}"]
        conn.execute(
            "UPDATE movement_request_nodes SET executor_key = 'cctp_burn',"
            " evidence = jsonb_build_object('nonce', upper(%s::text)) WHERE id = %s",
            (nonce, burn),
        )
        conn.execute(
            "UPDATE movement_request_nodes SET executor_key = 'cctp_mint' WHERE id = %s", (mint,)
        )
        conn.execute(
            "INSERT INTO movement_plan_edges VALUES (%s, %s, %s)", (movement_id, burn, mint)
        )
        conn.execute(
            "UPDATE node_intents SET signed_tx_hash = %s WHERE node_id = %s",
            ("0x" + "ab" * 32, mint),
        )
    twice = (
        rf"one message twice: {nonce} \(mint {ids['mint-2']} of burn {ids['burn-2']},"
        rf" and mint {ids['mint-1']}\)"
    )
    with pytest.raises(MigrationError, match=twice):
        migrate(database.dsn)
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS[:at]
    other = "0x" + "08" * 32
    conn.execute(
        "UPDATE movement_request_nodes SET evidence = jsonb_build_object('nonce', %s::text)"
        " WHERE id = %s",
        (other, ids["burn-2"]),
    )
    migrate(database.dsn)
    assert conn.execute(
        "SELECT nonce, burn_node_id, mint_node_id FROM cctp_message_mints ORDER BY nonce"
    ).fetchall() == [(nonce, ids["burn-1"], ids["mint-1"]), (other, ids["burn-2"], ids["mint-2"])]


def test_withdrawals_completed_on_one_transfer_stop_the_migration(
    new_database: NewDatabase,
) -> None:
    """0075 makes one Transfer settle one withdrawal, and gives each
    withdrawal already completed its Transfer. A database where two
    completed on one is not migrated (the refusal names the Transfer and both
    nodes), and nothing is applied; settled, it is migrated."""
    database, conn, _, at = claimed_before(
        new_database, "0075_one_transfer_one_withdrawal", ("w-1", "w-2"), ("bybit_withdraw",)
    )
    tx = "0x" + "ab" * 32
    conn.execute(
        "UPDATE movement_request_nodes SET executor_key = 'bybit_withdraw',"
        " node_state = 'COMPLETED', finished_at = now(),"
        ' node_config = node_config || \'{"chain": "Local-A"}\','
        " evidence = jsonb_build_object('tx_id', upper(%s::text), 'transfer',"
        " jsonb_build_object('log_index', 3))",
        (tx,),
    )
    ids = dict(conn.execute("SELECT node_key, id FROM movement_request_nodes").fetchall())
    twice = rf"one transfer twice: {tx} log 3 on local-a \(nodes {ids['w-1']} and {ids['w-2']}\)"
    with pytest.raises(MigrationError, match=twice):
        migrate(database.dsn)
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS[:at]
    conn.execute(
        "UPDATE movement_request_nodes"
        " SET evidence = jsonb_set(evidence, '{transfer,log_index}', '4') WHERE id = %s",
        (ids["w-2"],),
    )
    migrate(database.dsn)
    assert conn.execute(
        "SELECT node_id, tx_hash, log_index FROM withdrawal_transfers ORDER BY node_id"
    ).fetchall() == [(ids["w-1"], tx, 3), (ids["w-2"], tx, 4)]


def test_the_login_in_the_audit_chain_is_not_rolled_back_once_a_row_carries_it(
    new_database: NewDatabase,
) -> None:
    """A row promoted with its login has it under its hash: 0035 cannot go. One
    refused after others says which went and what to run; refused first, it
    rolls nothing back, and says that today's functions and views need the
    migrations after it (pipeline_counts reads 0039's tables)."""
    # a clone of the template, migrated from nothing (test_template_clone_equals_fresh_install)
    database = new_database()
    conn = database.connect()
    conn.execute("SET search_path = testnet, qtg")
    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute(
            "SELECT write_audit(ARRAY[('probe', 'node', '1', NULL, 'probed', NULL, NULL,"
            " NULL)::qtg.audit_event])"
        )
        assert conn.execute("SELECT promote_audit('promoter')").fetchone() == (1,)
    refused = r"0035_audit_log_login\.rollback\.sql.*cannot be rolled back"
    later = ALL_MIGRATIONS[ALL_MIGRATIONS.index("0035_audit_log_login") + 1 :]
    # the ones after it go first, then 0035 refuses: the message says what is left
    with pytest.raises(MigrationError, match=refused) as after_them:
        rollback(database.dsn, len(later) + 1)
    assert f"rolled back before it: {', '.join(reversed(later))}" in str(after_them.value)
    assert "qtg db migrate" in str(after_them.value)
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS[: -len(later)]
    # refused first: nothing rolled back; the functions cannot be installed on this schema
    with pytest.raises(MigrationError, match=refused) as first:
        rollback(database.dsn, 1)
    assert "could not be installed again" in str(first.value)
    # the error names what is missing: a table or column of a later migration
    later_tables = (
        "pipeline_rollup",
        "evm_nonce_marks",
        "balance_anchors",
        "confirmed_by",
        "ccip_lanes",
    )
    assert any(table in str(first.value) for table in later_tables)
    assert "run `qtg db migrate`" in str(first.value)
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS[: -len(later)]
    assert migrate(database.dsn).applied == later
    chain = conn.execute("SELECT ok, checked FROM verify_audit_chain()").fetchone()
    assert chain == (True, 1)
    assert conn.execute("SELECT login FROM audit_outbox").fetchone() == (conn.info.user,)


def test_a_rollback_refused_first_installs_the_functions_again(
    new_database: NewDatabase, tmp_path: Path
) -> None:
    """The newest migration's rollback refuses: nothing is rolled back, and the
    functions and views are installed again, as they were."""
    root = tmp_path / "sql"
    shutil.copytree(sql_dir(), root)
    probe = f"{int(ALL_MIGRATIONS[-1][:4]) + 1:04d}_refuses_rollback"
    (root / "schemas" / f"{probe}.sql").write_text(f"-- depends: {ALL_MIGRATIONS[-1]}\nSELECT 1;\n")
    (root / "schemas" / f"{probe}.rollback.sql").write_text(
        "DO $$ BEGIN RAISE EXCEPTION 'this one cannot be rolled back'; END $$;\n"
    )
    database = new_database(template=None)
    migrate(database.dsn, sql_root=root)
    before = snapshot(database.connect())
    with pytest.raises(MigrationError, match="cannot be rolled back") as first:
        rollback(database.dsn, 1, sql_root=root)
    assert "nothing was rolled back" in str(first.value)
    applied = applied_migrations(database.dsn)
    assert applied[:-1] == ALL_MIGRATIONS and len(applied) == len(ALL_MIGRATIONS) + 1
    after = snapshot(database.connect())
    assert after == before, "\n".join(diff(before, after))


@pytest.mark.parametrize("undo", ["all", "last"])
def test_migrated_schema_equals_fresh_install(
    new_database: NewDatabase, fresh_install: FreshInstall, undo: str
) -> None:
    expected = fresh_install.catalog
    assert expected["functions"] or expected["relations"]  # the snapshot sees something

    cycled = new_database(template=None)
    migrate(cycled.dsn)
    if undo == "all":
        rollback_all(cycled.dsn)
    else:
        rollback(cycled.dsn, 1)
    migrate(cycled.dsn)
    got = snapshot(cycled.connect())
    assert got == expected, "\n".join(diff(expected, got))

    # re-running migrate on an up-to-date database changes nothing
    result = migrate(fresh_install.dsn)
    assert result.applied == []
    with psycopg.connect(fresh_install.dsn, autocommit=True) as conn:
        again = snapshot(conn)
    assert again == expected, "\n".join(diff(expected, again))


def test_every_routine_pins_its_schemas_search_path(db: TestDatabase) -> None:
    """Installed per network with SET search_path FROM CURRENT: a network's copy only
    ever resolves names in its own schema (then qtg). The inline/ expressions keep
    none (INLINE_FOLDER), so that they are inlined into their pinned callers."""
    rows = (
        db.connect()
        .execute(
            """SELECT n.nspname, p.proname, p.oid::regprocedure::text,
                      (SELECT c FROM unnest(p.proconfig) c WHERE c LIKE 'search_path=%%'),
                      coalesce(p.proconfig, '{}')
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname IN ('qtg', 'mainnet', 'testnet')"""
        )
        .fetchall()
    )
    expected = {
        "qtg": "search_path=qtg, pg_temp",
        "mainnet": "search_path=mainnet, qtg, pg_temp",
        "testnet": "search_path=testnet, qtg, pg_temp",
    }
    inlined = {p.stem for p in (sql_dir() / "functions" / INLINE_FOLDER).glob("*.sql")}
    assert inlined, "sql/functions/inline/ is empty"
    wrong = [
        (name, path)
        for schema, proname, name, path, _ in rows
        if path != (None if proname in inlined else expected[schema])
    ]
    assert wrong == []
    # and the planner's costs of PLANNER_SETTINGS on every pinned routine
    planned = [f"{k}={v}" for k, v in PLANNER_SETTINGS.items()]
    unplanned = [
        (name, config)
        for _, proname, name, _, config in rows
        if proname not in inlined and not set(planned) <= set(config)
    ]
    assert unplanned == []


@pytest.mark.parametrize(
    "body",
    [
        "LANGUAGE plpgsql STABLE AS $$ BEGIN RETURN p || 'x'; END $$",
        "LANGUAGE sql VOLATILE AS $$ SELECT p || 'x' $$",
    ],
    ids=["plpgsql", "volatile"],
)
def test_the_installer_leaves_only_pure_sql_expressions_unpinned(
    new_database: NewDatabase, tmp_path: Path, body: str
) -> None:
    """A routine put in inline/ that PostgreSQL would not inline (another language,
    a volatile body) would only lose its pinned search_path: the install refuses
    it, names it, and leaves the installed functions as they were."""
    database = new_database()
    before = snapshot(database.connect())
    root = tmp_path / "sql"
    shutil.copytree(sql_dir(), root)
    (root / "functions" / INLINE_FOLDER / "odd_helper.sql").write_text(
        f"CREATE OR REPLACE FUNCTION odd_helper(p text) RETURNS text {body};\n"
    )
    with pytest.raises(MigrationError, match=r"inline: routine odd_helper\(text\) is not a single"):
        install_functions(database.dsn, sql_root=root)
    after = snapshot(database.connect())
    assert after == before, "\n".join(diff(before, after))


def test_the_audit_chains_hash_is_inlined_where_it_is_computed(db: TestDatabase) -> None:
    """The promoter and the verifier compute the hash of every row: inlined, it
    costs no function call per row (audit_row_hash and audit_canonical, kept
    unpinned for it, are expanded into the caller's statement)."""
    conn = db.connect()
    conn.execute("SET search_path = testnet, qtg")
    plan = "\n".join(
        row[0]
        for row in conn.execute(
            "EXPLAIN VERBOSE SELECT audit_row_hash(l.prev_hash, l) FROM audit_log l"
        ).fetchall()
    )
    assert "sha256(" in plan and "jsonb_build_object(" in plan, plan
    assert "audit_row_hash(" not in plan and "audit_canonical(" not in plan, plan


def test_template_clone_equals_fresh_install(db: TestDatabase, fresh_install: FreshInstall) -> None:
    expected = fresh_install.catalog
    got = snapshot(db.connect())
    assert got == expected, "\n".join(diff(expected, got))


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://postgres:@/postgres?host=/tmp/some%20dir/pg18",
        "postgresql://user:p%40ss@db.example:6543/qtg?sslmode=disable",
        "host=::1 port=5433 dbname=qtg user=me options='-c search_path=x'",
    ],
)
def test_yoyo_uri_keeps_every_parameter(dsn: str) -> None:
    parsed = parse_uri(yoyo_uri(dsn))
    assert parsed.scheme == "postgresql+psycopg"
    assert parsed.args == conninfo_to_dict(dsn)


def test_cli_migrate_and_url(new_database: NewDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    database = new_database(template=None)
    monkeypatch.setenv("QTG_DATABASE_URL", database.dsn)
    runner = CliRunner()

    url = runner.invoke(app, ["db", "url"])
    assert url.exit_code == 0, url.output
    assert url.stdout == database.dsn + "\n"

    result = runner.invoke(app, ["db", "migrate"])
    assert result.exit_code == 0, result.output
    assert "0001_roles_and_networks" in result.stdout
    assert applied_migrations(database.dsn) == ALL_MIGRATIONS

    result = runner.invoke(app, ["db", "rollback", "--all"])
    assert result.exit_code == 0, result.output
    assert applied_migrations(database.dsn) == []


@pytest.mark.parametrize(
    "url",
    ["not a url", "postgresql://nobody@/nodb?host=/nonexistent-qtg-socket-dir"],
)
def test_cli_reports_bad_database_url_in_one_line(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QTG_DATABASE_URL", url)
    result = CliRunner().invoke(app, ["db", "migrate"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("qtg: error: ")
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr
