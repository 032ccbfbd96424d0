"""The capital_transfer_followup's procedures (SQL only): claim_capital_transfers
finds the evm_transfer nodes COMPLETED into a venue's deposit address (not one
to another recipient, not one still in flight, not one whose plan has a
bybit_deposit step after it), hands the due ones out under a lease;
record_capital_transfer_check moves a followup from WAITING to CREDITED,
MISMATCH or FAILED (audited) or keeps it WAITING; capital_transfer_mismatches
shows an amount mismatch, a failed deposit and a deposit never credited past
its deadline. The drift check's balance_candidates reads the deposits whose
credit is open from these followups and the bybit_deposit steps."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from conftest import TestDatabase
from engine import assert_rejected, claim, create_started, node, node_ids, observe, plan
from plans import explained, rows_read
from rows import T0, Conn, migrations_from, plant_history, set_clock

from qtg_runner.db import procs
from qtg_runner.db.migrate import migrate, rollback
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor

SENDER = "0x" + "7a" * 20
DEPOSIT = "0x" + "de" * 20
OTHER = "0x" + "0e" * 20
TOKEN = "0x" + "0c" * 20


@pytest.fixture
def venue(conn: Conn) -> str:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 2, 1000).one(conn)
    procs.upsert_chain_token("local-a", "USDC", TOKEN, 6).one(conn)
    procs.upsert_treasury_account("local-a", SENDER, "env:TREASURY").one(conn)
    procs.allow_destination("local-a", OTHER, "someone").one(conn)
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain("bybit", "local-a", "ETH").one(conn)
    procs.upsert_venue_deposit_address("bybit", "local-a", "USDC", DEPOSIT).one(conn)
    for e in (EvmTransferExecutor, BybitDepositExecutor):
        procs.register_executor(e.key, e.has_side_effect, e.node_config_schema, "x").one(conn)
    procs.upsert_lane_baseline("bybit-deposit", 100).one(conn)
    return "bybit"


def transfer(key: str, to: str, after: tuple[str, ...] = ()) -> dict[str, Any]:
    return node(key, after, executor="evm_transfer", chain="local-a", **{"from": SENDER, "to": to})


def landed(
    conn: Conn, external_id: str, *nodes: dict[str, Any], amount: str = "100"
) -> dict[str, int]:
    """A started movement of ``nodes`` whose root transfers are submitted and
    settled at once (COMPLETED, their hash as the external reference)."""
    movement = create_started(conn, plan(*nodes), external_id, amount=amount)
    ids = node_ids(conn, movement)
    for claimed in claim(conn):
        if claimed["node_id"] in ids.values():
            procs.complete_submit(
                claimed["node_id"], claimed["claim_secret"], f"0x{claimed['node_id']:064x}",
                settled=True,
            ).one(conn)  # fmt: skip
    return ids


def followup(conn: Conn, node_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT followup_state, credited_amount, checks, next_check_at - clock(), resolved_at"
        " FROM capital_transfer_followups WHERE node_id = %s",
        (node_id,),
    ).fetchone()
    assert row is not None
    return dict(zip(("state", "credited", "checks", "due_in", "resolved_at"), row, strict=True))


def test_only_completed_transfers_into_a_deposit_address_without_a_deposit_step_are_followed(
    conn: Conn, venue: str
) -> None:
    bare = landed(conn, "bare", transfer("pay", DEPOSIT), amount="12.5")["pay"]
    landed(conn, "elsewhere", transfer("pay", OTHER))
    stepped = landed(
        conn,
        "stepped",
        transfer("pay", DEPOSIT),
        node("credit", ["pay"], executor="bybit_deposit", venue=venue, chain="local-a"),
    )["pay"]
    in_flight = node_ids(conn, create_started(conn, plan(transfer("pay", DEPOSIT)), "flying"))
    assert conn.execute(
        "SELECT node_state::text FROM movement_request_nodes WHERE id = %s", (stepped,)
    ).fetchone() == ("COMPLETED",)

    rows = procs.claim_capital_transfers(10, 60).all(conn)
    assert [r.node_id for r in rows] == [bare]
    row = rows[0]
    assert (row.venue_key, row.kind, row.base_url_env, row.key_file_env) == (
        venue, "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE",
    )  # fmt: skip
    assert (row.chain_key, row.venue_chain, row.coin, row.deposit_address) == (
        "local-a", "ETH", "USDC", DEPOSIT,
    )  # fmt: skip
    assert row.tx_hash == f"0x{bare:064x}" and row.expected_amount == Decimal("12.5")
    assert (row.deadline_at - row.landed_at).total_seconds() == 300  # 3 lane baselines
    assert row.checks == 1 and in_flight["pay"] not in [r.node_id for r in rows]

    # held for the lease, then due again
    assert procs.claim_capital_transfers(10, 60).all(conn) == []
    set_clock(conn, 61)
    assert [(r.node_id, r.checks) for r in procs.claim_capital_transfers(10, 60).all(conn)] == [
        (bare, 2)
    ]


def test_a_report_resolves_a_followup_once_and_the_view_shows_the_problems(
    conn: Conn, venue: str
) -> None:
    ids = [landed(conn, f"m{i}", transfer("pay", DEPOSIT), amount="5")["pay"] for i in range(4)]
    credited, mismatched, failed, waiting = ids
    procs.claim_capital_transfers(10, 60).all(conn)

    assert (
        procs.record_capital_transfer_check(waiting, "PENDING", retry_after_seconds=7).one(conn)
        == "WAITING"
    )
    assert followup(conn, waiting)["due_in"].total_seconds() == 7
    record = {"deposits": [{"status": 3, "amount": "5"}]}
    assert (
        procs.record_capital_transfer_check(credited, "CREDITED", Decimal(5), record).one(conn)
        == "CREDITED"
    )
    assert (
        procs.record_capital_transfer_check(mismatched, "CREDITED", Decimal("4.9")).one(conn)
        == "MISMATCH"
    )
    assert (
        procs.record_capital_transfer_check(
            failed, "FAILED", None, {"deposits": [{"status": 4}]}
        ).one(conn)
        == "FAILED"
    )
    # a late report changes nothing
    assert procs.record_capital_transfer_check(credited, "FAILED").one(conn) == "CREDITED"
    assert followup(conn, credited)["credited"] == Decimal(5)
    actions = conn.execute(
        "SELECT entity_id::bigint, action FROM audit_outbox"
        " WHERE action LIKE 'deposit_%' ORDER BY id"
    ).fetchall()
    assert actions == [
        (credited, "deposit_credited"),
        (mismatched, "deposit_amount_mismatch"),
        (failed, "deposit_failed"),
    ]

    def problems() -> dict[int, str]:
        return dict(
            conn.execute("SELECT node_id, problem FROM capital_transfer_mismatches").fetchall()
        )

    assert problems() == {mismatched: "amount mismatch", failed: "deposit failed"}
    set_clock(conn, 301)  # past the deadline, three lane baselines after it landed
    assert problems() == {
        mismatched: "amount mismatch", failed: "deposit failed", waiting: "not credited",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ((None, "PENDING", None, None), "QT011"),
        ((-1, "PENDING", None, None), "QT011"),
        ((0, "MAYBE", None, None), "QT002"),
        ((0, None, None, None), "QT002"),
        ((0, "CREDITED", None, None), "QT002"),
        ((0, "CREDITED", "NaN", None), "QT005"),
        ((0, "CREDITED", -1, None), "QT005"),
        ((0, "PENDING", None, -5), "QT002"),
    ],
)
def test_a_bad_report_is_refused_and_changes_nothing(
    conn: Conn, venue: str, args: tuple[Any, ...], code: str
) -> None:
    node_id = landed(conn, "one", transfer("pay", DEPOSIT))["pay"]
    procs.claim_capital_transfers(10, 60).all(conn)
    args = (node_id if args[0] == 0 else args[0], *args[1:])
    assert_rejected(
        conn,
        code,
        "SELECT record_capital_transfer_check(%s, %s, %s::numeric, NULL, NULL, %s::numeric)",
        args,
    )


def test_a_bad_claim_is_refused(conn: Conn, venue: str) -> None:
    for args, code in (((0, 60), "QT002"), ((1001, 60), "QT002"), ((10, None), "QT002"),
                       ((10, 0.1), "QT005")):  # fmt: skip
        assert_rejected(
            conn, code, "SELECT * FROM claim_capital_transfers(%s::integer, %s::numeric)", args
        )


def followed(conn: Conn, node_id: int) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM capital_transfer_followups WHERE node_id = %s", (node_id,)
    ).fetchone()
    return row is not None and row[0] == 1


def test_a_transfer_is_followed_as_it_lands_whichever_call_completes_it(
    conn: Conn, venue: str
) -> None:
    """The followup is made in the transaction that completes the transfer,
    before any claim: settled at its submit, or observed later."""
    at_submit = landed(conn, "at-submit", transfer("pay", DEPOSIT))["pay"]
    assert followup(conn, at_submit)["state"] == "WAITING"

    movement = create_started(conn, plan(transfer("pay", DEPOSIT)), "observed")
    node_id = node_ids(conn, movement)["pay"]
    (claimed,) = [c for c in claim(conn) if c["node_id"] == node_id]
    procs.complete_submit(node_id, claimed["claim_secret"], f"0x{node_id:064x}").one(conn)
    assert not followed(conn, node_id)  # sent, not landed
    set_clock(conn, 3600)
    assert observe(conn, node_id, "COMPLETED") is not None
    row = followup(conn, node_id)
    assert (row["state"], row["checks"], row["due_in"].total_seconds()) == ("WAITING", 0, 0)


def test_a_deposit_address_registered_later_follows_what_landed_in_it(
    conn: Conn, venue: str
) -> None:
    later = "0x" + "1a" * 20
    procs.allow_destination("local-a", later, "an address the venue gives later").one(conn)
    early = landed(conn, "early", transfer("pay", later))["pay"]
    assert not followed(conn, early)

    procs.upsert_venue_deposit_address(venue, "local-a", "USDC", later).one(conn)
    assert followup(conn, early)["state"] == "WAITING"
    assert [r.node_id for r in procs.claim_capital_transfers(10, 60).all(conn)] == [early]


def plant_credited_deposits(conn: Conn, template_id: int, count: int) -> None:
    """``count`` copies of the transfer ``template_id`` into DEPOSIT, each with a
    followup CREDITED as it landed: a history of deposits for the plan tests."""
    plant_history(
        conn,
        template_id,
        count,
        """INSERT INTO capital_transfer_followups (node_id, request_id, venue_key, chain_key, coin,
                                                   deposit_address, tx_hash, expected_amount,
                                                   followup_state, credited_amount, landed_at,
                                                   deadline_at, next_check_at, resolved_at)
           SELECT id, request_id, 'bybit', 'local-a', 'USDC', %(deposit)s, external_ref, 100,
                  'CREDITED', 100, finished_at, finished_at, finished_at, finished_at
             FROM nodes""",
        {"deposit": DEPOSIT},
    )


def test_the_claim_reads_the_due_followups_not_the_history_of_transfers(
    db: TestDatabase, conn: Conn, venue: str
) -> None:
    """Every 15 s the sidecar's claim searched every transfer ever completed into
    a deposit address for one not followed yet; now it reads the due followups
    alone."""
    history = 5_000
    done = landed(conn, "done", transfer("pay", DEPOSIT))["pay"]
    plant_credited_deposits(conn, done, history)

    call = "SELECT * FROM claim_capital_transfers(10, 60)"
    nodes = explained(db.dsn, call, analyze=True, at=T0.isoformat())
    assert rows_read(nodes, "movement_request_nodes") == 0
    assert rows_read(nodes, "capital_transfer_followups") <= 20
    assert [r.node_id for r in procs.claim_capital_transfers(10, 60).all(conn)] == [done]


def test_the_migration_follows_what_landed_before_it_unfollowed(
    db: TestDatabase, conn: Conn, venue: str
) -> None:
    """A transfer that landed under the earlier function layer was followed by
    the sidecar's next search; the migration that ends the search follows the
    ones it had not reached."""
    node_id = landed(conn, "before", transfer("pay", DEPOSIT), amount="7")["pay"]
    conn.execute("DELETE FROM capital_transfer_followups")
    since = migrations_from("0041_capital_transfer_followups_at_landing")
    assert rollback(db.dsn, len(since)) == since[::-1]
    migrate(db.dsn)

    row = followup(conn, node_id)
    assert (row["state"], row["checks"], row["due_in"].total_seconds() <= 0) == ("WAITING", 0, True)
    (claimed,) = procs.claim_capital_transfers(10, 60).all(conn)
    assert (claimed.node_id, claimed.expected_amount) == (node_id, Decimal("7"))
    assert (claimed.deadline_at - claimed.landed_at).total_seconds() == 300  # 3 lane baselines


SIDE_EFFECTS = """
    SELECT n.id FROM movement_request_nodes n
     WHERE n.has_side_effect AND (n.finished_at IS NULL OR n.finished_at >= %(since)s)"""

DEPOSITS_BEFORE_0043 = """
    SELECT n.id
      FROM venue_deposit_addresses d
      JOIN movement_request_nodes n
        ON n.executor_key = 'evm_transfer' AND n.node_state = 'COMPLETED'
       AND n.node_config ->> 'chain' = d.chain_key AND lower(n.node_config ->> 'to') = d.address
     WHERE NOT EXISTS (SELECT 1 FROM capital_transfer_followups f
                        WHERE f.node_id = n.id AND f.followup_state IN ('CREDITED', 'MISMATCH')
                          AND f.resolved_at < %(since)s)
       AND NOT EXISTS (SELECT 1 FROM movement_plan_edges e
                         JOIN movement_request_nodes k ON k.id = e.child_node_id
                        WHERE e.parent_node_id = n.id AND k.executor_key = 'bybit_deposit'
                          AND k.node_state = 'COMPLETED' AND k.finished_at < %(since)s)"""
"""The transfers into a deposit address whose credit was not certain at
``since``, as balance_candidates read them before 0043: every transfer ever
completed into a deposit address, two probes each."""


def deposit_candidates(conn: Conn, query: str, since: float) -> set[int]:
    """What ``query`` (balance_candidates, or a reference) gives beyond the
    side-effect nodes not finished before ``since`` (seconds after T0)."""
    at = {"since": T0 + timedelta(seconds=since)}
    rows = conn.execute(f"({query}) EXCEPT ({SIDE_EFFECTS})", at).fetchall()
    return {r[0] for r in rows}


def test_the_uncredited_deposits_are_read_from_their_followups_and_steps(
    conn: Conn, venue: str
) -> None:
    """balance_candidates reads the transfers into a deposit address whose credit
    is not certain from their followups, their bybit_deposit steps and the
    transfers without a hash: the same transfers as the read of every transfer
    ever made into a deposit address that it replaces, at every time."""
    step = {"executor": "bybit_deposit", "lane": "bybit-deposit", "venue": "bybit",
            "chain": "local-a", "coin": "USDC"}  # fmt: skip
    movements = {
        name: node_ids(conn, create_started(conn, plan(*nodes), name, amount="5"))
        for name, nodes in {
            "waiting": [transfer("pay", DEPOSIT)],
            "credited": [transfer("pay", DEPOSIT)],
            "mismatched": [transfer("pay", DEPOSIT)],
            "refused": [transfer("pay", DEPOSIT)],
            "no-hash": [transfer("pay", DEPOSIT)],
            "elsewhere": [transfer("pay", OTHER)],
            "stepped": [transfer("pay", DEPOSIT), node("credit", ["pay"], **step)],
            "step-failed": [transfer("pay", DEPOSIT), node("credit", ["pay"], **step)],
            "step-open": [transfer("pay", DEPOSIT), node("credit", ["pay"], **step)],
        }.items()
    }
    pay = {name: ids["pay"] for name, ids in movements.items()}
    set_clock(conn, 10)
    for c in claim(conn):
        procs.complete_submit(
            c["node_id"], c["claim_secret"], f"0x{c['node_id']:064x}", settled=True
        ).one(conn)
    with conn.transaction():  # landed by a recovery that found no hash: nothing to follow
        conn.execute("SET LOCAL session_replication_role = replica")
        conn.execute("DELETE FROM capital_transfer_followups WHERE node_id = %s", (pay["no-hash"],))
        conn.execute(
            "UPDATE movement_request_nodes SET external_ref = NULL WHERE id = %s", (pay["no-hash"],)
        )
    set_clock(conn, 20)
    procs.claim_capital_transfers(10, 60).all(conn)
    procs.record_capital_transfer_check(pay["credited"], "CREDITED", Decimal(5)).one(conn)
    procs.record_capital_transfer_check(pay["mismatched"], "CREDITED", Decimal("4.9")).one(conn)
    procs.record_capital_transfer_check(pay["refused"], "FAILED").one(conn)
    secrets = {c["node_id"]: c["claim_secret"] for c in claim(conn)}
    set_clock(conn, 30)
    credit = {name: movements[name]["credit"] for name in ("stepped", "step-failed", "step-open")}
    procs.complete_submit(
        credit["stepped"], secrets[credit["stepped"]], "credited", settled=True
    ).one(conn)
    procs.fail_submit(credit["step-failed"], secrets[credit["step-failed"]], "no", False).one(conn)

    never_certain = {pay[n] for n in ("waiting", "refused", "no-hash", "step-failed", "step-open")}
    expected = {
        15: never_certain | {pay["credited"], pay["mismatched"], pay["stepped"]},
        25: never_certain | {pay["stepped"]},
        35: never_certain,
        100: never_certain,
    }
    for since, transfers in expected.items():
        read = deposit_candidates(conn, "SELECT balance_candidates(%(since)s)", since)
        assert read == transfers, since
        assert read == deposit_candidates(conn, DEPOSITS_BEFORE_0043, since), since


def test_the_candidates_read_no_deposit_credited_long_ago(
    db: TestDatabase, conn: Conn, venue: str
) -> None:
    """verify_drift's candidates (every 10 s) read every transfer ever made into a
    deposit address, with two probes each; those credited before the round's
    horizon are now never read."""
    history = 5_000
    done = landed(conn, "done", transfer("pay", DEPOSIT))["pay"]
    plant_credited_deposits(conn, done, history)
    stepped = landed(
        conn, "stepped", transfer("pay", DEPOSIT),
        node("credit", ["pay"], executor="bybit_deposit", lane="bybit-deposit", venue="bybit",
             chain="local-a", coin="USDC"),
    )["pay"]  # fmt: skip
    # and as many edges (the plans' DAGs), none to a bybit_deposit step
    conn.execute(
        """INSERT INTO movement_plan_edges (request_id, parent_node_id, child_node_id)
           SELECT n.request_id, n.id, m.id
             FROM movement_request_nodes n
             JOIN movement_request_nodes m ON m.id = n.id + 1 AND m.node_key LIKE 'history-%'
            WHERE n.node_key LIKE 'history-%'"""
    )
    conn.execute("ANALYZE movement_plan_edges")
    later = (T0 + timedelta(hours=1)).isoformat()
    call = f"SELECT * FROM balance_candidates('{later}')"
    nodes = explained(db.dsn, call, analyze=True, at=later)
    assert rows_read(nodes, "movement_request_nodes") <= 20
    assert rows_read(nodes, "movement_plan_edges") <= 20
    assert rows_read(nodes, "capital_transfer_followups") <= 20
    # done: still WAITING; stepped: its step not finished
    assert {r[0] for r in conn.execute(call).fetchall()} == {done, stepped}
