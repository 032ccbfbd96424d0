"""The evm_nonce_reaper's procedures (SQL only): which nonces are gaps, who may
record a fill, a fee bump recorded before it is broadcast.

What a treasury relies on: a nonce allocated to an intent that failed or was
abandoned, or skipped, is listed until a fill closes it or the chain is found
to have consumed it, and a live intent's nonce is never listed; a runner's
login cannot record a "fill" over the nonce a prepared intent holds, nor one
that is not a zero-value self-transfer (it would move money outside any
movement); a replacement is appended to its intent's hashes before anything is
broadcast, only at the intent's own nonce, doing what the intent does, while
its node is still at work.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import evm_rows
import pytest
from conftest import TestDatabase
from engine import (
    as_person,
    assert_rejected,
    bind,
    create_started,
    fingerprint,
    node_ids,
    observe,
    pin_clock,
)
from evm_rows import AMOUNT_UNITS, FEES, KEY, register_transfers, signed, transfer_plan
from plans import explained, rows_read
from psycopg.types.json import Jsonb
from rows import T0, Conn, intent_row, iso_at, node_row, plant_history, set_clock

from qtg_runner.chains.evm import Fees, self_transfer
from qtg_runner.db import procs

CHAIN = "test-a"
CHAIN_ID = 31401
SENDER = KEY.address.lower()
TOKEN = "0x" + "70" * 20
RECIPIENT = "0x" + "b2" * 20
FIVE = transfer_plan(CHAIN, SENDER, RECIPIENT, "a", "b", "c", "d", "e")


def transfer(nonce: int, fees: Fees = FEES, amount: int = AMOUNT_UNITS) -> tuple[str, str]:
    return evm_rows.transfer(CHAIN_ID, TOKEN, RECIPIENT, nonce, fees, amount)


def fill(nonce: int, fees: Fees = FEES) -> tuple[str, str]:
    return signed(self_transfer(CHAIN_ID, SENDER, nonce, fees))


@pytest.fixture
def world(conn: Conn) -> dict[str, dict[str, Any]]:
    """Five nodes with intents at nonces 5..8 and 10 (9 skipped): a FAILED
    without a broadcast, b PREPARED, c SUBMITTED, d SUBMITTED, e PREPARED."""
    register_transfers(conn, CHAIN, CHAIN_ID, SENDER, TOKEN, RECIPIENT)
    movement = create_started(conn, FIVE, "m1")
    ids = node_ids(conn, movement)
    claimed = {c.node_id: asdict(c) for c in procs.claim_ready_nodes("w1", 100, 300).all(conn)}
    c = {key: claimed[node_id] for key, node_id in ids.items()}
    for key, nonce in (("a", 5), ("b", 6), ("c", 7), ("d", 8), ("e", 10)):
        tx_hash, raw = transfer(nonce)
        c[key]["tx_hash"], c[key]["nonce"] = tx_hash, nonce
        c[key]["intent_id"] = procs.record_intent_prepared(
            c[key]["node_id"],
            c[key]["claim_secret"],
            nonce=nonce,
            signed_tx_hash=tx_hash,
            chain_key=CHAIN,
            sender=SENDER,
            raw_tx=raw,
        ).one(conn)
    procs.fail_submit(c["a"]["node_id"], c["a"]["claim_secret"], "insufficient funds", False).one(
        conn
    )
    for key in ("c", "d"):
        procs.complete_submit(c[key]["node_id"], c[key]["claim_secret"], c[key]["tx_hash"]).one(
            conn
        )
    return c


def gaps(conn: Conn) -> list[tuple[int, list[str]]]:
    return [(g.nonce, g.tx_hashes) for g in procs.evm_nonce_gaps().all(conn)]


def refused(r: Conn, conn: Conn, sqlstate: str, query: str, params: tuple[Any, ...]) -> Any:
    """assert_rejected for a runner's login (which reads no table): every table of
    the database, read on the superuser's ``conn``, is as it was."""
    before = fingerprint(conn)
    error = assert_rejected(r, sqlstate, query, params, tables=())
    assert fingerprint(conn) == before
    return error


def runner(db: TestDatabase) -> Conn:
    r = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(r, T0.isoformat())
    return r


def open_nonces(db: TestDatabase) -> tuple[Any, ...]:
    """evm_accounts as an operator reads it: the account's next nonce and the
    nonces it left open (held only by failed or abandoned intents)."""
    with bind(db.connect(db.operator_dsn("testnet"))) as operator:
        row = operator.execute(
            "SELECT next_nonce, open_nonces FROM evm_accounts"
            " WHERE chain_key = %s AND address = %s",
            (CHAIN, SENDER),
        ).fetchone()
    assert row is not None
    return tuple(row)


def test_gaps_are_the_failed_and_skipped_nonces_until_filled_or_found_consumed(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    assert intent_row(conn, world["a"]["node_id"])["intent_state"] == "FAILED"
    assert open_nonces(db) == (11, 1)
    # 5: a FAILED intent's; 9: skipped by the allocation; 6, 7, 8, 10 are live
    assert gaps(conn) == [(5, [world["a"]["tx_hash"]]), (9, [])]
    row = procs.evm_nonce_gaps(1).one(conn)
    assert (row.chain_key, row.sender, row.signer_id, row.chain_id) == (
        CHAIN,
        SENDER,
        "env:TEST_KEY",
        CHAIN_ID,
    )
    tx_hash, raw = fill(5)
    assert procs.record_nonce_fill(CHAIN, SENDER, 5, tx_hash, raw).one(conn) is True
    assert procs.record_nonce_fill(CHAIN, SENDER, 5, tx_hash, raw).one(conn) is False
    assert gaps(conn) == [(9, [])]
    assert open_nonces(db) == (11, 0)
    assert conn.execute(
        "SELECT purpose, intent_id, nonce FROM evm_transactions WHERE tx_hash = %s", (tx_hash,)
    ).fetchone() == ("fill", None, 5)
    # the chain is past 9 with nothing of ours there: reported, no longer listed
    assert procs.record_nonce_closed(CHAIN, SENDER, 9, "consumed", {"latest": 11}).one(conn)
    assert gaps(conn) == []
    assert not procs.record_nonce_closed(CHAIN, SENDER, 9, "consumed", {"latest": 11}).one(conn)
    assert conn.execute(
        "SELECT nonce, how, evidence FROM evm_closed_nonces WHERE chain_key = %s AND address = %s",
        (CHAIN, SENDER),
    ).fetchall() == [(9, "consumed", {"latest": 11})]


def test_a_fill_over_a_live_intents_nonce_is_refused_and_changes_nothing(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    r = runner(db)
    before = fingerprint(conn)
    for nonce in (6, 7, 10):  # PREPARED, SUBMITTED, PREPARED
        tx_hash, raw = fill(nonce)
        error = refused(
            r,
            conn,
            "QT033",
            "SELECT record_nonce_fill(%s, %s, %s, %s, %s)",
            (CHAIN, SENDER, nonce, tx_hash, raw),
        )
        assert "is not a gap" in str(error)
    # not allocated at all (at or past the next nonce), or below the first one
    for nonce in (11, 4):
        tx_hash, raw = fill(nonce)
        refused(
            r,
            conn,
            "QT033",
            "SELECT record_nonce_fill(%s, %s, %s, %s, %s)",
            (CHAIN, SENDER, nonce, tx_hash, raw),
        )
    # a "fill" that moves money, or sits at another nonce than it claims
    for tx_hash, raw, nonce in (
        (*transfer(5), 5),
        (*fill(6), 5),
        (*fill(5, Fees(300 * 10**9, 10**9)), 5),  # above the chain's fee cap
    ):
        refused(
            r,
            conn,
            "QT002",
            "SELECT record_nonce_fill(%s, %s, %s, %s, %s)",
            (CHAIN, SENDER, nonce, tx_hash, raw),
        )
    assert fingerprint(conn) == before
    assert gaps(conn)[0][0] == 5


def test_a_second_fill_at_a_nonce_only_replaces_the_newest(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    r = runner(db)
    first, first_raw = fill(5)
    procs.record_nonce_fill(CHAIN, SENDER, 5, first, first_raw).one(r)
    bumped, bumped_raw = fill(5, Fees(3 * 10**9, 2 * 10**9))
    refused(
        r,
        conn,
        "QT033",
        "SELECT record_nonce_fill(%s, %s, %s, %s, %s)",
        (CHAIN, SENDER, 5, bumped, bumped_raw),
    )
    refused(
        r,
        conn,
        "QT033",
        "SELECT record_nonce_fill(%s, %s, %s, %s, %s, p_replaces => %s)",
        (CHAIN, SENDER, 9, *fill(9), first),
    )
    assert procs.record_nonce_fill(CHAIN, SENDER, 5, bumped, bumped_raw, replaces=first).one(r)
    # the fills wait in evm_stale_transactions until reported mined
    pin_clock(conn, "2026-01-01T01:00:00+00:00")
    stale = [
        (s.kind, s.nonce, s.tx_hash)
        for s in procs.evm_stale_transactions().all(conn)
        if s.kind == "fill"
    ]
    assert stale == [("fill", 5, bumped)]
    assert_rejected(
        conn,
        "QT033",
        "SELECT record_nonce_closed(%s, %s, 5, 'fill_mined', %s)",
        (CHAIN, SENDER, Jsonb({"tx_hash": world["b"]["tx_hash"]})),
    )
    procs.record_nonce_closed(CHAIN, SENDER, 5, "fill_mined", {"tx_hash": bumped}).one(conn)
    assert not [s for s in procs.evm_stale_transactions().all(conn) if s.kind == "fill"]


def test_a_failed_intents_transaction_found_mined_is_recorded_for_an_operator(
    conn: Conn, world: dict[str, Any]
) -> None:
    # only a failed or abandoned intent's recorded hash counts as found mined
    assert_rejected(
        conn,
        "QT033",
        "SELECT record_nonce_closed(%s, %s, 6, 'found_mined', %s)",
        (CHAIN, SENDER, Jsonb({"tx_hash": world["b"]["tx_hash"]})),
    )
    evidence = {"tx_hash": world["a"]["tx_hash"], "block_number": 12}
    assert procs.record_nonce_closed(CHAIN, SENDER, 5, "found_mined", evidence).one(conn)
    row = conn.execute(
        "SELECT entity, entity_id, detail FROM audit_outbox WHERE action = 'nonce_found_mined'"
    ).fetchone()
    assert row[:2] == ("chain", CHAIN)
    assert row[2] | {} == {"sender": SENDER, "nonce": 5, **evidence}
    assert [n for n, _ in gaps(conn)] == [9]


def test_stale_transactions_are_sent_intents_past_their_age(
    conn: Conn, world: dict[str, Any]
) -> None:
    assert procs.evm_stale_transactions().all(conn) == []
    # 20 blocks of a second: 20 s, but at least 60 s
    pin_clock(conn, "2026-01-01T00:00:59+00:00")
    assert procs.evm_stale_transactions().all(conn) == []
    pin_clock(conn, "2026-01-01T00:01:00+00:00")
    rows = procs.evm_stale_transactions().all(conn)
    assert sorted((s.kind, s.nonce, s.intent_id) for s in rows) == [
        ("intent", 7, world["c"]["intent_id"]),
        ("intent", 8, world["d"]["intent_id"]),
    ]
    assert procs.evm_stale_transactions(blocks=100, min_seconds=0).all(conn) == []


def test_a_replacement_is_appended_at_its_intents_nonce_while_its_node_is_at_work(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    r = runner(db)
    c = world["c"]
    bumped, raw = transfer(7, Fees(3 * 10**9, 2 * 10**9))
    assert procs.record_evm_replacement(c["intent_id"], bumped, raw).one(r) is True
    assert procs.record_evm_replacement(c["intent_id"], bumped, raw).one(r) is False
    row = intent_row(conn, c["node_id"])
    assert row["signed_tx_hashes"] == [c["tx_hash"], bumped]
    assert conn.execute(
        "SELECT purpose, intent_id, nonce FROM evm_transactions WHERE tx_hash = %s", (bumped,)
    ).fetchone() == ("replacement", c["intent_id"], 7)

    call = "SELECT record_evm_replacement(%s, %s, %s)"
    # another nonce
    refused(r, conn, "QT033", call, (c["intent_id"], *transfer(8, Fees(3 * 10**9, 2 * 10**9))))
    # another transfer (amount) at the same nonce
    refused(r, conn, "QT002", call, (c["intent_id"], *transfer(7, Fees(4 * 10**9, 2 * 10**9), 999)))
    # the hash of another transaction (a reverted one on the chain, say) with
    # the bytes of a real replacement: the hash must be the bytes' own
    other, _ = transfer(7, Fees(5 * 10**9, 2 * 10**9))
    _, raw_bumped = transfer(7, Fees(6 * 10**9, 2 * 10**9))
    error = refused(r, conn, "QT002", call, (c["intent_id"], other, raw_bumped))
    assert "is not the hash of the raw transaction given" in str(error)
    # a finished node (a FAILED), and no such intent
    refused(
        r, conn, "QT021", call, (world["a"]["intent_id"], *transfer(5, Fees(3 * 10**9, 2 * 10**9)))
    )
    refused(r, conn, "QT011", call, (10**12, *transfer(5)))


def test_a_long_history_of_nonces_is_compared_once_each(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    """The reaper lists gaps every 15 s over every nonce its accounts ever used:
    each is compared once with what holds it. (A NOT EXISTS planned as a merge
    on the account alone compared each nonce with every intent of the account:
    20 s a call at 10,000 nonces, past the runner's statement timeout at a few
    tens of thousands, after which no gap would ever be listed and filled.)"""
    history = 5_000
    with conn.transaction():
        conn.execute("SET LOCAL session_replication_role = replica")  # one node holds them all
        conn.execute(
            "INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,"
            " intent_state, nonce, chain_key, sender, created_at)"
            " SELECT %s, 1000 + g, 'history-' || g, 'w1', 'SUBMITTED', 10 + g, %s, %s, clock()"
            " FROM generate_series(1, %s) g",
            (world["d"]["node_id"], CHAIN, SENDER, history),
        )
        conn.execute(
            "UPDATE evm_nonces SET next_nonce = %s WHERE chain_key = %s AND address = %s",
            (11 + history, CHAIN, SENDER),
        )
    conn.execute("ANALYZE node_intents")

    assert gaps(conn) == [(5, [world["a"]["tx_hash"]]), (9, [])]
    nodes = explained(db.dsn, "SELECT * FROM evm_nonce_gaps()", analyze=True, at=T0.isoformat())
    compared = sum(
        (n.get("Rows Removed by Join Filter", 0) + n.get("Rows Removed by Filter", 0))
        * n.get("Actual Loops", 1)
        for n in nodes
    )
    assert compared <= 4 * history


def settle(conn: Conn, max: int = 10_000) -> tuple[int, int, bool]:
    """settle_evm_nonces for the one account: its mark, how far it moved, behind."""
    (mark,) = procs.settle_evm_nonces(max).all(conn)
    assert (mark.chain_key, mark.address) == (CHAIN, SENDER)
    return mark.settled_below, mark.moved, mark.behind


def gaps_read_from_the_first_nonce(conn: Conn) -> list[tuple[int, list[str]]]:
    """evm_nonce_gaps as it answers with no settled mark: every nonce read."""
    with conn.transaction(force_rollback=True):
        conn.execute("DELETE FROM evm_nonce_marks")
        return gaps(conn)


def test_the_settled_mark_stops_at_the_first_nonce_that_may_still_be_a_gap(
    db: TestDatabase, conn: Conn, world: dict[str, Any]
) -> None:
    """The mark moves over a nonce only once nothing can make it a gap again: a
    fill, a closed nonce, a SUBMITTED intent of a finished node. A SUBMITTED
    intent of a node still observed is not enough (a requeue may abandon it),
    and the gap search answers the same with the mark as without it."""

    def step(expected: tuple[int, int, bool]) -> None:
        assert settle(conn) == expected
        assert gaps(conn) == gaps_read_from_the_first_nonce(conn)

    def in_flight() -> tuple[int, int]:
        """evm_accounts: the account's transactions out (prepared or sent, node
        not finished), and its open nonces."""
        row = conn.execute("SELECT in_flight, open_nonces FROM evm_accounts").fetchone()
        assert row is not None
        return row[0], row[1]

    assert in_flight() == (4, 1)  # b prepared, c and d sent, e prepared; 5 open
    step((5, 0, False))  # 5: a FAILED intent's nonce, a gap
    procs.record_nonce_fill(CHAIN, SENDER, 5, *fill(5)).one(conn)
    step((6, 1, False))  # 6: a prepared transaction, out
    b = world["b"]
    procs.complete_submit(b["node_id"], b["claim_secret"], b["tx_hash"], settled=True).one(conn)
    step((7, 1, False))  # 7, 8: SUBMITTED, their nodes still observed
    assert open_nonces(db) == (11, 0) and in_flight() == (3, 0)
    set_clock(conn, 3600)
    for key in ("c", "d"):
        assert observe(conn, world[key]["node_id"], "COMPLETED") is not None
    step((9, 2, False))  # 9: skipped by an allocation, a gap
    assert in_flight() == (1, 0)
    assert gaps(conn) == [(9, [])]
    procs.record_nonce_closed(CHAIN, SENDER, 9, "consumed", {"latest": 11}).one(conn)
    step((10, 1, False))  # 10: prepared, out
    e = world["e"]
    procs.complete_submit(e["node_id"], e["claim_secret"], e["tx_hash"], settled=True).one(conn)
    step((11, 1, False))  # the account's next nonce: nothing left to settle
    step((11, 0, False))
    assert gaps(conn) == [] and open_nonces(db) == (11, 0) and in_flight() == (0, 0)
    # the runner's login moves it; an operator's may not
    assert procs.settle_evm_nonces().all(runner(db))[0].settled_below == 11
    with bind(db.connect(db.operator_dsn("testnet"))) as operator:
        assert_rejected(operator, "42501", "SELECT * FROM settle_evm_nonces()", ())


@pytest.fixture
def settled_history(conn: Conn) -> dict[str, Any]:
    """An account whose nonces 0..4,999 are settled (each the SUBMITTED intent of
    a finished node of its own, with its transaction), then 5,000 SUBMITTED and
    still observed, 5,001 FAILED (a gap), 5,002 SUBMITTED of a finished node."""
    history = 5_000
    register_transfers(conn, CHAIN, CHAIN_ID, SENDER, TOKEN, RECIPIENT)
    movement = create_started(
        conn, transfer_plan(CHAIN, SENDER, RECIPIENT, "live", "gap", "done"), "h"
    )
    ids = node_ids(conn, movement)
    claimed = {c.node_id: c for c in procs.claim_ready_nodes("w1", 100, 300).all(conn)}
    for key, nonce in (("live", history), ("gap", history + 1), ("done", history + 2)):
        c = claimed[ids[key]]
        tx_hash, raw = transfer(nonce)
        procs.record_intent_prepared(
            c.node_id, c.claim_secret, nonce=nonce, signed_tx_hash=tx_hash, chain_key=CHAIN,
            sender=SENDER, raw_tx=raw,
        ).one(conn)  # fmt: skip
        if key == "gap":
            procs.fail_submit(c.node_id, c.claim_secret, "insufficient funds", False).one(conn)
        else:
            procs.complete_submit(c.node_id, c.claim_secret, tx_hash, settled=key == "done").one(
                conn
            )
    plant_history(
        conn,
        ids["done"],
        history,
        """, intents AS (
              INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by,
                                        intent_state, nonce, chain_key, sender, signed_tx_hash,
                                        external_ref, created_at, prepared_at, finished_at)
              SELECT id, 1, node_key, 'w1', 'SUBMITTED', substr(node_key, 9)::bigint - 1,
                     %(chain)s, %(sender)s, external_ref, external_ref, finished_at, finished_at,
                     finished_at
                FROM nodes
              RETURNING id, nonce, signed_tx_hash, created_at
            )
            INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose,
                                          raw_tx, recorded_by, recorded_at)
            SELECT signed_tx_hash, %(chain)s, %(sender)s, nonce, id, 'intent', '0x00', 'w1',
                   created_at
              FROM intents""",
        {"chain": CHAIN, "sender": SENDER},
    )
    return {"history": history, "ids": ids}


def test_a_settled_history_is_not_read_again(
    db: TestDatabase, conn: Conn, settled_history: dict[str, Any]
) -> None:
    """Once settled, an account's history costs the reaper's gap search and the
    evm_accounts view nothing: they read from the mark up (each read every
    nonce the account ever used, 0.3 s a gap search at 100,000)."""
    history = settled_history["history"]
    expected = gaps(conn)
    assert [nonce for nonce, _ in expected] == [history + 1]
    # at most p_max nonces a call, then behind; it stops at the nonce still out
    assert settle(conn, 2_000) == (2_000, 2_000, True)
    assert settle(conn, 2_000) == (4_000, 2_000, True)
    assert settle(conn, 2_000) == (history, 1_000, False)
    assert settle(conn, 2_000) == (history, 0, False)

    assert gaps(conn) == expected
    # a settle with nothing new to settle reads from the mark
    nodes = explained(db.dsn, "SELECT * FROM settle_evm_nonces()", analyze=True, at=T0.isoformat())
    assert rows_read(nodes, "node_intents") <= 20
    nodes = explained(db.dsn, "SELECT * FROM evm_nonce_gaps()", analyze=True, at=T0.isoformat())
    assert rows_read(nodes, "node_intents") <= 20
    view = "SELECT * FROM evm_accounts"
    nodes = explained(db.dsn, view, analyze=True, at=T0.isoformat())
    assert rows_read(nodes, "node_intents") <= 20
    stale = "SELECT * FROM evm_stale_transactions(1, 0)"
    nodes = explained(db.dsn, stale, analyze=True, at=iso_at(3600))
    assert rows_read(nodes, "node_intents") <= 20
    assert rows_read(nodes, "evm_transactions") <= 20
    row = conn.execute(
        "SELECT next_nonce, in_flight, open_nonces FROM evm_accounts WHERE address = %s", (SENDER,)
    ).fetchone()
    assert row == (history + 3, 1, 1)


def requeued(conn: Conn, node: dict[str, Any]) -> None:
    """``node``'s PREPARED intent goes UNKNOWN, and two operators requeue it."""
    state = procs.fail_submit(node["node_id"], node["claim_secret"], "timeout", True).one(conn)
    assert state == "UNKNOWN"
    for person in ("alice", "bob"):
        with as_person(conn, person):
            procs.requeue_node(node["node_id"], "the transaction was dropped").one(conn)


def test_a_requeued_transfer_signs_again_only_once_its_nonce_is_consumed(
    conn: Conn, world: dict[str, Any]
) -> None:
    """Operators judge a dropped transaction can never land; its signed bytes
    are valid while its nonce is, for anyone who holds them (a mempool that
    kept it, whoever saw it broadcast). A fresh transfer signed meanwhile at
    the next nonce would wait behind it, and both would be mined: twice the
    approved amount. The requeued node waits, unclaimed, until the chain has
    consumed the nonce: by the reaper's fill, it signs again; by its own old
    transaction, it paid, and it stays held, saying so."""
    b, e = world["b"], world["e"]
    requeued(conn, b)
    held = node_row(conn, b["node_id"])
    assert (held["node_state"], held["awaits_nonce_of"]) == ("READY", b["intent_id"])
    assert "waits until nonce 6 of" in held["last_error"]
    assert procs.claim_ready_nodes("w2", 10, 300).all(conn) == []
    waiting = conn.execute("SELECT node_id, seconds_left FROM waiting_nodes").fetchall()
    assert waiting == [(b["node_id"], None)]  # no time: until the nonce is consumed
    assert 6 in [nonce for nonce, _ in gaps(conn)]  # the reaper's to fill
    tx_hash, raw = fill(6)
    procs.record_nonce_fill(CHAIN, SENDER, 6, tx_hash, raw).one(conn)
    assert procs.claim_ready_nodes("w2", 10, 300).all(conn) == []  # a fill sent is not a fill mined
    procs.record_nonce_closed(CHAIN, SENDER, 6, "fill_mined", {"tx_hash": tx_hash}).one(conn)
    released = node_row(conn, b["node_id"])
    assert (released["awaits_nonce_of"], released["last_error"]) == (None, None)
    assert [c.node_id for c in procs.claim_ready_nodes("w2", 10, 300).all(conn)] == [b["node_id"]]

    requeued(conn, e)
    procs.record_nonce_closed(CHAIN, SENDER, 10, "found_mined", {"tx_hash": e["tx_hash"]}).one(conn)
    paid = node_row(conn, e["node_id"])
    assert paid["awaits_nonce_of"] == e["intent_id"]
    assert "its side effect happened" in paid["last_error"]
    assert procs.claim_ready_nodes("w2", 10, 300).all(conn) == []

    # taken by its own transaction, which reverted: it moved nothing but its gas
    d = world["d"]
    due = (
        "UPDATE movement_request_nodes SET next_observe_at = clock() - interval '1 s' WHERE id = %s"
    )
    conn.execute(due, (d["node_id"],))
    assert observe(conn, d["node_id"], "UNKNOWN", evidence={"why": "dropped"}) is not None
    assert node_row(conn, d["node_id"])["node_state"] == "UNKNOWN"
    for person in ("alice", "bob"):
        with as_person(conn, person):
            procs.requeue_node(d["node_id"], "the transaction was dropped").one(conn)
    reverted = {"tx_hash": d["tx_hash"], "status": 0}
    procs.record_nonce_closed(CHAIN, SENDER, 8, "found_mined", reverted).one(conn)
    assert node_row(conn, d["node_id"])["awaits_nonce_of"] is None
