"""Rehearsals, the database side: rehearsal_input (what `qtg rehearse` reads),
load_rehearsal_registry (what it writes into its throwaway database),
record_rehearsal (what it records on the movement), and what an approval says
of a movement whose latest rehearsal failed.

Pins: rehearsal_input gives a plan create_movement takes again to make the
same nodes (keys, executors, configs, lanes, edges), from a movement made
from a template too, and every row of every configuration table, none of a
movement's state; every table of a network is either configuration
(rehearsal_registry_tables, in foreign-key order) or named here as state,
so a new table is put in one list or the other. load_rehearsal_registry
round-trips a registry into a second test database, where the routes then
answer as in the first; it refuses an unmarked database (QT042), an unknown
table or column, and a table other rows reference (QT002), each changing
nothing. record_rehearsal keeps the outcome and summary of a movement
PENDING_APPROVAL for any operator, audited, and refuses everything else
changing nothing. An approval after a failed latest rehearsal goes ahead
with a QT025 WARNING (advice, not Refused); after a passed one it says
nothing. Runner and reader logins may call none of them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import NewDatabase, TestDatabase
from engine import (
    approve,
    as_person,
    assert_rejected,
    bind,
    create,
    fingerprint,
    node,
    node_ids,
    pin_clock,
    plan,
)
from psycopg import sql
from rows import DIAMOND, Conn, audit_rows, iso_at, movement_in, notices, person, time_at
from typer.testing import CliRunner

from qtg_runner.cli import app
from qtg_runner.db import procs
from qtg_runner.db.migrate import mark_test_database
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor

NOT_CONFIGURATION = {
    # movements and what runs them
    "movement_requests",
    "movement_request_nodes",
    "movement_plan_edges",
    "node_intents",
    "node_requeues",
    "movement_rehearsals",
    "rehearsal_requests",
    "capital_transfer_followups",
    # nonces and signed transactions
    "evm_nonces",
    "evm_nonce_marks",
    "evm_closed_nonces",
    "evm_transactions",
    "ccip_manual_executions",
    "cctp_message_mints",
    "withdrawal_transfers",
    # the audit trail, and the registry's count of its changes
    "registry_revision",
    "audit_batches",
    "audit_log",
    "audit_chain_head",
    # workers and what they learned or counted
    "worker_heartbeats",
    "executor_health",
    "lane_latency_samples",
    "lane_pacing_learned",
    "pipeline_rollups",
    "pipeline_rollup_totals",
    "endpoint_leases",
    # proposals, breakers, what the limits counted
    "config_proposals",
    "breakers",
    "value_usage",
    # balances
    "balance_reads",
    "balance_snapshots",
    "balance_baselines",
    "balance_drift_alerts",
    "balance_anchors",
    # callbacks: a rehearsal sends none (and a target names where its secret is)
    "callback_outbox",
    "callback_targets",
    "callback_settings",
}
"""Every table of a network that a rehearsal does not carry: state, not configuration."""

TREASURY = {"from": "0x" + "d" * 40, "to": "0x" + "f" * 40}
CCTP_PLAN = plan(
    node("burn", [], CctpBurnExecutor.key, chain="world-a", destination_chain="world-b",
         finality="fast", **TREASURY),
    node("mint", ["burn"], CctpMintExecutor.key, chain="world-b", source_chain="world-a",
         **TREASURY),
)  # fmt: skip
SUMMARY = {"outcome": "failed", "lines": ["burn: reverted (allowance)", "mint: not run"]}


def registry_tables(conn: Conn) -> list[str]:
    row = conn.execute("SELECT rehearsal_registry_tables()").fetchone()
    assert row is not None
    return list(row[0])


def build_registry(conn: Conn) -> None:
    """Two chains with CCTP between them, a venue, an allowed destination, a
    value limit, a template, a lane: a registry of every kind of row."""
    for chain, chain_id, domain, digit in (("world-a", 1, 100, "3"), ("world-b", 2, 101, "5")):
        procs.upsert_chain(chain, chain_id, f"QTG_RPC_{chain[-1].upper()}", 2, 1000).one(conn)
        for address, signer in ((TREASURY["from"], "env:KEY_1"), (TREASURY["to"], "env:KEY_2")):
            procs.upsert_treasury_account(chain, address, signer).one(conn)
        procs.upsert_chain_token(chain, "USDC", "0x" + digit * 40, 6).one(conn)
        contracts = {
            "MessageTransmitterV2": "0x" + digit * 40,
            "TokenMessengerV2": "0x" + "4" * 39 + digit,
        }
        procs.upsert_chain_protocol(chain, "cctp", domain, contracts).one(conn)
    for cctp in (CctpBurnExecutor, CctpMintExecutor):
        procs.register_executor(cctp.key, True, cctp.node_config_schema, cctp.description).one(conn)
    procs.allow_destination("world-a", "0x" + "c" * 40, "a customer").one(conn)
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY").one(conn)
    procs.upsert_venue_chain("bybit", "world-a", "ETH").one(conn)
    procs.upsert_venue_deposit_address("bybit", "world-a", "USDC", "0x" + "e" * 40).one(conn)
    procs.set_value_limit("lane", "default", Decimal(5000), None, None).one(conn)
    procs.upsert_lane_baseline("fast", 30).one(conn)
    template = {"nodes": [{"key": "a", "executor": "sim", "config": {"lane": {"$param": "lane"}}}]}
    procs.register_template("one", template, "a lane as a parameter").one(conn)


def table_rows(conn: Conn, table: str) -> list[Any]:
    """A table's rows as JSON (but an exchange venue's request salt), in a stable order."""
    query = sql.SQL(
        "SELECT coalesce(jsonb_agg(to_jsonb(t) - 'request_salt' ORDER BY to_jsonb(t)::text), '[]')"
        " FROM {} t"
    ).format(sql.Identifier(table))
    row = conn.execute(query).fetchone()
    assert row is not None
    return list(row[0])


def made_nodes(conn: Conn, movement_id: int) -> list[tuple[Any, ...]]:
    """A movement's nodes as the plan made them, and each one's parents' keys."""
    return conn.execute(
        """SELECT n.node_key, n.executor_key, n.has_side_effect, n.node_config, n.lane,
                  n.pending_parents,
                  ARRAY(SELECT p.node_key FROM movement_plan_edges e
                          JOIN movement_request_nodes p ON p.id = e.parent_node_id
                         WHERE e.child_node_id = n.id ORDER BY p.node_key)
             FROM movement_request_nodes n WHERE n.request_id = %s ORDER BY n.id""",
        (movement_id,),
    ).fetchall()


# --- rehearsal_input -----------------------------------------------------------------------------


def test_the_input_holds_the_movement_a_plan_that_makes_the_same_nodes_and_the_registry(
    db: TestDatabase, conn: Conn
) -> None:
    build_registry(conn)
    diamond = plan(
        node("a", [], lane="fast", latency_s=3),
        node("b", ["a"]),
        node("c", ["a"], amount=2.5),
        node("d", ["b", "c", "b"]),
    )
    movements = {
        "diamond": create(conn, diamond, "diamond", amount="1250.5", expires_at=iso_at(3600)),
        "cctp": create(conn, CCTP_PLAN, "cctp"),
    }
    with as_person(conn, "alice"):
        created = procs.create_movement(
            "templated", Decimal(7), template="one", params={"lane": "fast"}
        ).one(conn)
    movements["templated"] = created.movement_id
    operator = person(db, "olga")

    inputs = {name: procs.rehearsal_input(m).one(operator) for name, m in movements.items()}

    assert inputs["diamond"]["movement"] == {
        "id": movements["diamond"],
        "external_id": "diamond",
        "amount": "1250.5",
        "asset": "USDC",
        "state": "PENDING_APPROVAL",
        "priority": 0,
        "expires_at": "2026-01-01T01:00:00+00:00",
    }
    # each plan, given to create_movement again, makes the same nodes and edges
    for name, movement_id in movements.items():
        again = procs.create_movement(f"{name}-again", Decimal(1), plan=inputs[name]["plan"])
        remade = again.one(conn).movement_id
        assert made_nodes(conn, remade) == made_nodes(conn, movement_id), name
    assert inputs["templated"]["plan"] == {
        "nodes": [{"key": "a", "executor": "sim", "config": {"lane": "fast"}, "depends_on": []}]
    }
    assert inputs["diamond"]["plan"]["nodes"][3] == {**node("d", ["b", "c", "b"])}

    # the registry: every row of every configuration table, nothing else
    registry = inputs["cctp"]["registry"]
    tables = registry_tables(conn)
    assert set(registry) == set(tables)
    for table in tables:
        rows = sorted(registry[table], key=lambda r: json.dumps(r, sort_keys=True))
        expected = sorted(table_rows(conn, table), key=lambda r: json.dumps(r, sort_keys=True))
        assert json.loads(json.dumps(rows)) == json.loads(json.dumps(expected)), table
    assert all("request_salt" not in venue for venue in registry["exchange_venues"])
    assert len(registry["chains"]) == 2 and len(registry["lane_baselines"]) >= 9
    assert all(
        set(inputs[name]) == {"movement", "plan", "registry", "registry_revision"}
        for name in inputs
    )
    assert {inputs[name]["registry_revision"] for name in inputs} == {registry_revision(conn)}


def test_a_plan_not_stored_is_rebuilt_from_the_nodes_and_edges(conn: Conn) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    stored = procs.rehearsal_input(movement_id).one(conn)["plan"]
    conn.execute("UPDATE movement_requests SET plan = '{}' WHERE id = %s", (movement_id,))
    rebuilt = procs.rehearsal_input(movement_id).one(conn)["plan"]
    assert rebuilt == stored == DIAMOND


def test_the_input_is_read_in_one_snapshot(conn: Conn) -> None:
    volatility = conn.execute(
        "SELECT provolatile FROM pg_proc WHERE oid = 'testnet.rehearsal_input'::regproc"
    ).fetchone()
    assert volatility == ("s",)  # STABLE: each statement in it reads the call's snapshot


def test_every_table_is_configuration_in_foreign_key_order_or_named_here(conn: Conn) -> None:
    tables = registry_tables(conn)
    found = {
        name
        for (name,) in conn.execute(
            "SELECT relname FROM pg_class"
            " WHERE relnamespace = 'testnet'::regnamespace AND relkind IN ('r', 'p')"
        )
    }
    assert set(tables) & NOT_CONFIGURATION == set()
    assert found - set(tables) - NOT_CONFIGURATION == set(), "new tables: put each in one list"
    assert set(tables) | NOT_CONFIGURATION == found, "tables named that the network lacks"
    # each references only configuration named before it (a registry loads in this order)
    references = conn.execute(
        "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
        " WHERE contype = 'f' AND conrelid::regclass::text = ANY (%s)",
        (tables,),
    ).fetchall()
    assert references
    for table, referenced in references:
        assert referenced in tables[: tables.index(table)], (table, referenced)


def test_the_input_is_refused_for_an_unknown_movement_a_runner_and_a_reader(
    db: TestDatabase, conn: Conn
) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    assert_rejected(conn, "QT010", "SELECT rehearsal_input(%s)", (2**62,))
    runner = bind(db.connect(db.runner_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    for login in (runner, reader):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            login.execute("SELECT rehearsal_input(%s)", (movement_id,))


# --- load_rehearsal_registry ---------------------------------------------------------------------


def test_a_registry_loads_into_another_test_database_and_its_routes_answer_the_same(
    conn: Conn, new_database: NewDatabase
) -> None:
    build_registry(conn)
    procs.upsert_lane_baseline("default", 90).one(conn)  # seeded there at 60: replaced
    source = create(conn, CCTP_PLAN, "cctp")
    data = procs.rehearsal_input(source).one(conn)
    total = sum(len(rows) for rows in data["registry"].values())

    throwaway = bind(new_database().connect())
    pin_clock(throwaway, iso_at(0))
    assert procs.load_rehearsal_registry(data["registry"]).one(throwaway) == total

    for table in registry_tables(conn):
        assert table_rows(throwaway, table) == table_rows(conn, table), table
    salts = "SELECT request_salt FROM exchange_venues"
    assert throwaway.execute(salts).fetchall() != conn.execute(salts).fetchall()
    loaded = throwaway.execute(
        "SELECT entity, entity_id, action, detail FROM audit_outbox ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert loaded is not None and loaded[:3] == ("chain", "registry", "rehearsal_registry_loaded")
    assert loaded[3]["rows"]["chains"] == 2
    # the movement made again there signs what it would sign here
    with as_person(throwaway, "alice"):
        again = procs.create_movement("again", Decimal(100), plan=data["plan"]).one(throwaway)
    here, there = node_ids(conn, source), node_ids(throwaway, again.movement_id)
    assert procs.cctp_burn_route(there["burn"]).one(throwaway) == procs.cctp_burn_route(
        here["burn"]
    ).one(conn)
    assert procs.cctp_mint_route(there["mint"]).one(throwaway) == procs.cctp_mint_route(
        here["mint"]
    ).one(conn)


def test_a_registry_is_never_loaded_into_a_database_not_marked_for_tests(
    conn: Conn, new_database: NewDatabase
) -> None:
    build_registry(conn)
    registry = procs.rehearsal_input(create(conn, DIAMOND, "m1")).one(conn)["registry"]
    production = new_database()
    mark_test_database(production.dsn, marked=False)
    other = bind(production.connect())
    before = fingerprint(other)
    error = assert_rejected(
        other, "QT042", "SELECT load_rehearsal_registry(%s)", (json.dumps(registry),)
    )
    assert "not marked a test database" in str(error)
    assert fingerprint(other) == before


def test_a_registry_of_another_shape_or_one_its_tables_refuse_changes_nothing(
    db: TestDatabase, conn: Conn
) -> None:
    build_registry(conn)
    # rows that movements' nodes reference (their executors): this database ran movements
    registry = procs.rehearsal_input(create(conn, DIAMOND, "m1")).one(conn)["registry"]
    bad = [
        {"movement_requests": []},
        {"chains": {}},
        {"chains": [{}]},
        {"chains": [{"chain_key": "x", "no_such_column": 1}]},
        {"value_limits": [{"scope": "lane", "name": "x", "max_in_flight": "lots"}]},
        {"value_limits": [{"scope": "planet", "name": "x"}]},
        {"executors": registry["executors"]},
        registry,
    ]
    before = fingerprint(conn)
    for value in bad:
        error = assert_rejected(
            conn, "QT002", "SELECT load_rehearsal_registry(%s)", (json.dumps(value),)
        )
        assert str(error).startswith("load_rehearsal_registry: "), error
    for value in ("[]", '"registry"', None):
        assert_rejected(conn, "QT002", "SELECT load_rehearsal_registry(%s)", (value,))
    assert fingerprint(conn) == before
    operator = person(db, "olga")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute("SELECT load_rehearsal_registry('{}')")


# --- record_rehearsal ----------------------------------------------------------------------------

WATCHED = ("movement_requests", "audit_outbox", "movement_rehearsals")


def test_any_operator_records_a_rehearsal_audited_and_the_latest_is_shown(
    db: TestDatabase, conn: Conn
) -> None:
    alice = person(db, "alice")
    created = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice)
    movement_id = created.movement_id
    columns = [c.name for c in conn.execute("SELECT * FROM movements LIMIT 0").description or ()]
    assert columns[-3:] == ["rehearsal", "rehearsed_at", "rehearsed_by"]
    shown = "SELECT rehearsal, rehearsed_at FROM movements WHERE movement_id = %s"
    assert conn.execute(shown, (movement_id,)).fetchone() == (None, None)

    failed = procs.record_rehearsal(movement_id, "failed", SUMMARY).one(alice)  # the creator
    bob = person(db, "bob")
    pin_clock(bob, iso_at(30))
    passed = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(bob)

    assert passed > failed
    rows = conn.execute(
        "SELECT id, outcome, summary, recorded_by, recorded_at FROM movement_rehearsals"
        " WHERE movement_id = %s ORDER BY id",
        (movement_id,),
    ).fetchall()
    assert rows == [
        (failed, "failed", SUMMARY, alice.info.user, time_at(0)),
        (passed, "passed", {"outcome": "passed"}, bob.info.user, time_at(30)),
    ]
    assert conn.execute(shown, (movement_id,)).fetchone() == ("passed", time_at(30))
    recorded = conn.execute(
        "SELECT actor, entity, entity_id, from_state, to_state, detail FROM audit_outbox"
        " WHERE action = 'rehearsal_recorded' ORDER BY id"
    ).fetchall()
    assert recorded == [
        (alice.info.user, "request", str(movement_id), "PENDING_APPROVAL", "PENDING_APPROVAL",
         {"rehearsal_id": failed, "outcome": "failed", "registry_revision": None}),
        (bob.info.user, "request", str(movement_id), "PENDING_APPROVAL", "PENDING_APPROVAL",
         {"rehearsal_id": passed, "outcome": "passed", "registry_revision": None}),
    ]  # fmt: skip
    assert audit_rows(conn, movement_id)[-1]["login"] == bob.info.user


def test_a_rehearsal_is_refused_changing_nothing(db: TestDatabase, conn: Conn) -> None:
    pending = create(conn, DIAMOND, "m1")
    approved = movement_in(conn, "APPROVED", "m2")
    record = "SELECT record_rehearsal(%s, %s, %s)"
    summary = json.dumps(SUMMARY)
    refused = [
        ("QT010", (2**62, "passed", summary)),
        ("QT010", (None, "passed", summary)),
        ("QT020", (approved, "passed", summary)),
        ("QT002", (pending, "ok", summary)),
        ("QT002", (pending, None, summary)),
        ("QT002", (pending, "PASSED", summary)),
        ("QT002", (pending, "failed", '["lines"]')),
        ("QT002", (pending, "failed", '"failed"')),
        ("QT002", (pending, "failed", None)),
        ("QT005", (pending, "failed", json.dumps({"lines": ["x" * 70_000]}))),
    ]
    for code, args in refused:
        assert_rejected(conn, code, record, args, WATCHED)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    for login in (runner, reader):
        assert_rejected(login, "42501", record, (pending, "passed", summary), WATCHED, watcher=conn)


# --- the registry a rehearsal ran on ----------------------------------------------------------


def registry_revision(conn: Conn) -> int:
    row = conn.execute("SELECT revision FROM registry_revision").fetchone()
    assert row is not None
    return int(row[0])


def test_the_registry_revision_counts_each_change_of_the_registry_and_not_a_rewrite(
    conn: Conn,
) -> None:
    before = registry_revision(conn)
    procs.upsert_lane_baseline("rehearsed", 60).one(conn)  # a row added
    assert registry_revision(conn) == before + 1
    procs.upsert_lane_baseline("rehearsed", 60).one(conn)  # the same row again: its time alone
    assert registry_revision(conn) == before + 1
    procs.upsert_lane_baseline("rehearsed", 90).one(conn)  # a value changed
    assert registry_revision(conn) == before + 2
    conn.execute("DELETE FROM lane_baselines WHERE lane = 'rehearsed'")  # a row removed
    assert registry_revision(conn) == before + 3
    conn.execute("TRUNCATE venue_deposit_addresses")  # a table emptied
    assert registry_revision(conn) == before + 4
    # every configuration table a rehearsal carries is counted, both ways
    tables = conn.execute("SELECT unnest(rehearsal_registry_tables())").fetchall()
    triggers = conn.execute(
        "SELECT c.relname, array_agg(t.tgname::text ORDER BY t.tgname) FROM pg_trigger t"
        " JOIN pg_class c ON c.oid = t.tgrelid"
        " WHERE c.relnamespace = 'testnet'::regnamespace AND t.tgname LIKE 'registry_%%'"
        " GROUP BY c.relname"
    ).fetchall()
    assert dict(triggers) == {
        table: ["registry_changes", "registry_emptied", "registry_rows"] for (table,) in tables
    }


def test_a_rehearsal_is_recorded_on_the_registry_it_read_and_said_outdated_once_it_changes(
    conn: Conn,
) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    read = procs.rehearsal_input(movement_id).one(conn)["registry_revision"]
    assert read == registry_revision(conn)
    # the registry changed while the movement was rehearsed: refused, nothing written
    procs.upsert_lane_baseline("moved", 60).one(conn)
    record = "SELECT record_rehearsal(%s, %s, %s, %s)"
    passed = json.dumps({"outcome": "passed"})
    assert_rejected(conn, "QT024", record, (movement_id, "passed", passed, read), WATCHED)

    read = procs.rehearsal_input(movement_id).one(conn)["registry_revision"]
    with as_person(conn, "carol"):
        rehearsal = procs.record_rehearsal(
            movement_id, "passed", {"outcome": "passed"}, registry_revision=read
        ).one(conn)
    status = "SELECT rehearsal_id, registry_changed FROM rehearsal_status WHERE movement_id = %s"
    assert conn.execute(status, (movement_id,)).fetchone() == (rehearsal, False)

    procs.upsert_lane_baseline("moved", 90).one(conn)  # after it ran
    assert conn.execute(status, (movement_id,)).fetchone() == (rehearsal, True)
    with as_person(conn, "bob"), procs.advice(conn) as advised:
        state = procs.approve_movement(movement_id).one(conn)  # advice, not Refused
    assert state == procs.RequestState.APPROVED
    assert [(a.sqlstate, a.message) for a in advised] == [
        (
            "QT025",
            f"movement {movement_id}: its last rehearsal (id {rehearsal}, recorded by carol at"
            " 2026-01-01 00:00:00+00) passed on a registry that has changed since;"
            " approved anyway",
        )
    ]
    assert "rehearse it again" in (advised[0].hint or "")


@pytest.mark.parametrize("again_by", ["alice", "bob"])
def test_only_another_operator_replaces_an_outdated_rehearsal(conn: Conn, again_by: str) -> None:
    """A 'passed' by carol on a registry that has changed since warns the
    approver. The creator's own 'passed' after it (alice's, recorded without
    its revision, then with today's) does not replace it: four eyes. Another
    operator's fresh one (bob's) does, and draws no advice."""
    movement_id = create(conn, DIAMOND, "m1")  # created by alice
    read = procs.rehearsal_input(movement_id).one(conn)["registry_revision"]
    with as_person(conn, "carol"):
        carols = procs.record_rehearsal(
            movement_id, "passed", {"outcome": "passed"}, registry_revision=read
        ).one(conn)
    procs.upsert_lane_baseline("moved", 90).one(conn)
    now = procs.rehearsal_input(movement_id).one(conn)["registry_revision"]
    summary = {"outcome": "passed", "lines": ["all good"]}
    with as_person(conn, again_by):
        procs.record_rehearsal(movement_id, "passed", summary).one(conn)
        again = procs.record_rehearsal(movement_id, "passed", summary, registry_revision=now).one(
            conn
        )
    status = "SELECT rehearsal_id, registry_changed FROM rehearsal_status WHERE movement_id = %s"
    counted = (carols, True) if again_by == "alice" else (again, False)
    assert conn.execute(status, (movement_id,)).fetchone() == counted
    with as_person(conn, "bob"), procs.advice(conn) as advised:
        assert procs.approve_movement(movement_id).one(conn) == procs.RequestState.APPROVED
    if again_by == "alice":
        assert [a.sqlstate for a in advised] == ["QT025"]
        assert f"(id {carols}, recorded by carol" in advised[0].message
    else:
        assert advised == []


def test_no_network_login_sets_the_registry_revision_or_bypasses_its_triggers(
    db: TestDatabase, conn: Conn
) -> None:
    # an operator who wants a stale 'passed' to read as current, a runner or a
    # dashboard: none may write the revision, nor a registry table without it
    operator = person(db, "olga")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    watched = ("registry_revision", "lane_baselines")
    for login in (operator, runner, reader):
        for attack in (
            "UPDATE registry_revision SET revision = revision - 1",
            "DELETE FROM registry_revision",
            "UPDATE lane_baselines SET baseline_seconds = baseline_seconds + 1",
            "ALTER TABLE lane_baselines DISABLE TRIGGER registry_changes",
        ):
            assert_rejected(login, "42501", attack, (), watched, watcher=conn)


def test_a_rehearsal_recorded_without_its_registry_revision_is_not_known_either_way(
    conn: Conn,
) -> None:
    # recorded by hand, or before revisions were kept: the registry it ran on
    # is not known, so it is neither taken for today's nor said outdated
    movement_id = create(conn, DIAMOND, "m1")
    with as_person(conn, "carol"):
        rehearsal = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(conn)
    assert conn.execute(
        "SELECT registry_revision FROM movement_rehearsals WHERE id = %s", (rehearsal,)
    ).fetchone() == (None,)
    procs.upsert_lane_baseline("moved", 60).one(conn)
    assert conn.execute(
        "SELECT registry_changed FROM rehearsal_status WHERE movement_id = %s", (movement_id,)
    ).fetchone() == (None,)  # not known
    seen = notices(conn)
    assert approve(conn, movement_id) == "APPROVED"
    assert seen == []


# --- the approval --------------------------------------------------------------------------------


def test_an_approval_after_a_failed_rehearsal_approves_and_warns(conn: Conn) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    with as_person(conn, "carol"):
        rehearsal = procs.record_rehearsal(movement_id, "failed", SUMMARY).one(conn)
    seen = notices(conn)
    with as_person(conn, "bob"), procs.advice(conn) as advised:
        state = procs.approve_movement(movement_id).one(conn)  # not Refused
    assert state == procs.RequestState.APPROVED
    expected = (
        f"movement {movement_id}: its last rehearsal (id {rehearsal}, recorded by carol"
        " at 2026-01-01 00:00:00+00) failed; approved anyway"
    )
    assert [(a.sqlstate, a.message) for a in advised] == [("QT025", expected)]
    assert f"qtg movement show {movement_id}" in (advised[0].hint or "")
    assert seen == [("QT025", "WARNING", expected)]


def test_an_approval_after_a_passed_rehearsal_or_none_says_nothing(conn: Conn) -> None:
    never, passed, passed_last = (create(conn, DIAMOND, f"m{i}") for i in range(3))
    with as_person(conn, "carol"):
        procs.record_rehearsal(passed, "passed", {"outcome": "passed"}).one(conn)
        procs.record_rehearsal(passed_last, "failed", SUMMARY).one(conn)
        procs.record_rehearsal(passed_last, "passed", {"outcome": "passed"}).one(conn)
    seen = notices(conn)
    for movement_id in (never, passed, passed_last):
        assert approve(conn, movement_id) == "APPROVED"
    assert seen == []


def test_a_batch_approval_warns_for_each_movement_whose_latest_rehearsal_failed(
    conn: Conn,
) -> None:
    ids = [create(conn, DIAMOND, f"m{i}") for i in range(3)]
    with as_person(conn, "carol"):
        for movement_id in (ids[0], ids[2]):
            procs.record_rehearsal(movement_id, "failed", SUMMARY).one(conn)
    with as_person(conn, "bob"), procs.advice(conn) as advised:
        outcomes = procs.approve_movements(ids).all(conn)
    assert [o.request_state for o in outcomes] == [procs.RequestState.APPROVED] * 3
    assert [a.message.split(":")[0] for a in advised] == [
        f"movement {ids[0]}",
        f"movement {ids[2]}",
    ]


def test_the_cli_prints_the_warning_on_approval_and_the_rehearsal_on_show(
    db: TestDatabase, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")

    def qtg(login: Conn, *args: str) -> Any:
        monkeypatch.setenv("QTG_DATABASE_URL", login.info.dsn + f" password={login.info.password}")
        return CliRunner().invoke(app, ["movement", *args])

    alice, bob = person(db, "alice"), person(db, "bob")
    movement_id = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice).movement_id
    procs.record_rehearsal(movement_id, "failed", SUMMARY).one(alice)

    shown = qtg(bob, "show", str(movement_id))
    assert shown.exit_code == 0, shown.output
    assert f"rehearsal failed (id 1, recorded by {alice.info.user} at 2026-01-01 00:00:00 UTC)" in (
        shown.stdout
    )
    assert "  burn: reverted (allowance)\n  mint: not run\n" in shown.stdout

    approved = qtg(bob, "approve", str(movement_id))
    assert approved.exit_code == 0, approved.output
    assert approved.stdout.splitlines() == [
        f"warning (QT025): movement {movement_id}: its last rehearsal (id 1, recorded by"
        f" {alice.info.user} at 2026-01-01 00:00:00+00) failed; approved anyway",
        f"movement {movement_id} APPROVED",
    ]


def test_the_cli_says_a_rehearsal_the_registry_changed_since_is_outdated(
    db: TestDatabase, conn: Conn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")
    alice, bob = person(db, "alice"), person(db, "bob")
    monkeypatch.setenv("QTG_DATABASE_URL", bob.info.dsn + f" password={bob.info.password}")
    movement_id = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice).movement_id
    revision = procs.rehearsal_input(movement_id).one(alice)["registry_revision"]
    procs.record_rehearsal(
        movement_id, "passed", {"outcome": "passed"}, registry_revision=revision
    ).one(alice)

    shown = CliRunner().invoke(app, ["movement", "show", str(movement_id)])
    assert shown.exit_code == 0, shown.output
    assert "rehearsal passed (id 1, recorded by" in shown.stdout
    assert "the registry has changed since" not in shown.stdout

    procs.upsert_lane_baseline("moved", 60).one(conn)
    shown = CliRunner().invoke(app, ["movement", "show", str(movement_id)])
    assert shown.exit_code == 0, shown.output
    assert (
        f"rehearsal passed (id 1, recorded by {alice.info.user} at 2026-01-01 00:00:00 UTC);"
        " the registry has changed since it ran: rehearse again"
    ) in shown.stdout
