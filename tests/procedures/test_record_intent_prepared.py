"""record_intent_prepared and record_intent_prepared_batch: an intent is PREPARED
before anything is broadcast.

The single call stores the nonce and the signed hash (or an exchange's request
id, or a payload) on the node's intent, keeps every hash of a replacement
transaction, and is audited (intent_prepared) in its transaction
(``in_one_transaction``); the node stays SUBMITTING. It is refused (QT030) once
the lease ran out, and (QT002) with nothing to record, changing nothing
(``assert_rejected``).

record_intent_prepared_batch: record_intent_prepared for many nodes in one call
and one transaction (record_intent_prepared is its one-node form): each
executor's hand-over (a nonce and signed hash, a request id, a payload) on its
node's intent with one intent_prepared event by the claimer, every hash ever
signed kept once; a node it refuses (an expired lease above all: such a node
must not be broadcast) reported in its own row and left as it was while the
rest is recorded; a malformed call refused whole (QT002).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    create_started,
    forged_secret,
    in_one_transaction,
    node,
    node_ids,
    pin_clock,
    plan,
)
from rows import ONE, T0, Conn, claim_of, intent_row, iso_at, node_row, plant_rule

BATCH = (
    "SELECT node_id, intent_id, error_code, error_message FROM record_intent_prepared_batch("
    "%s::bigint[], %s::text[], %s::bigint[], %s::text[], %s::text[], %s::jsonb[])"
)
SINGLE = "SELECT record_intent_prepared(%s, %s, %s, %s, %s, %s::jsonb)"

# what an executor may hand over: a nonce and a signed hash (a chain), an
# exchange's request id, only a payload, or all of them
PREPARED = [
    (7, "0xaaa", None, None),
    (None, None, "withdrawal-1", None),
    (None, None, None, {"route": "bus"}),
    (8, "0xbbb", "req-2", {"gas": 21000}),
]


# --- record_intent_prepared ------------------------------------------------------------------


def test_prepare_records_the_intent_and_every_signed_hash(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    node_id, secret = claimed["node_id"], claimed["claim_secret"]
    written = in_one_transaction(
        conn,
        "SELECT record_intent_prepared(%s, %s, p_nonce => 7, p_signed_tx_hash => '0xaa')",
        (node_id, secret),
    )
    assert written.rows == [(claimed["intent_id"],)]
    assert written.audit == [("node", str(node_id), "intent_prepared", "SUBMITTING", "SUBMITTING")]
    # a replacement transaction (same nonce, new fee): both hashes are kept for recovery
    conn.execute(
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xbb')", (node_id, secret)
    )
    intent = intent_row(conn, node_id, 1)
    assert (intent["intent_state"], intent["nonce"], intent["signed_tx_hash"]) == (
        "PREPARED",
        7,
        "0xbb",
    )
    assert intent["signed_tx_hashes"] == ["0xaa", "0xbb"]
    assert node_row(conn, node_id)["node_state"] == "SUBMITTING"


@pytest.mark.parametrize(
    ("first", "again"),
    [
        # another nonce is another transaction
        ("p_nonce => 7, p_signed_tx_hash => '0xaa'", "p_nonce => 8, p_signed_tx_hash => '0xcc'"),
        # another exchange request is another withdrawal
        ("p_external_request_id => 'wd-1'", "p_external_request_id => 'wd-2'"),
        # without either, another hash or payload is another side effect
        ('p_payload => \'{"to": "0x01"}\'', 'p_payload => \'{"to": "0x02"}\''),
        ("p_signed_tx_hash => '0xaa'", "p_signed_tx_hash => '0xbb'"),
    ],
)
def test_a_prepared_intent_is_recorded_again_only_as_the_same_side_effect(
    conn: Conn, first: str, again: str
) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    node_id, secret = claimed["node_id"], claimed["claim_secret"]
    conn.execute(f"SELECT record_intent_prepared(%s, %s, {first})", (node_id, secret))
    error = assert_rejected(
        conn, "QT021", f"SELECT record_intent_prepared(%s, %s, {again})", (node_id, secret)
    )
    assert "already has a prepared side effect" in str(error)
    # the same record again is accepted and changes nothing that matters
    conn.execute(f"SELECT record_intent_prepared(%s, %s, {first})", (node_id, secret))
    assert intent_row(conn, node_id, 1)["intent_state"] == "PREPARED"


def test_prepare_is_refused_once_the_lease_ran_out(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"], lease=60)
    pin_clock(conn, iso_at(60))
    assert_rejected(
        conn,
        "QT030",
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xaa')",
        (claimed["node_id"], claimed["claim_secret"]),
    )


def test_prepare_needs_something_to_record(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "m1")
    claimed = claim_of(conn, node_ids(conn, movement_id)["a"])
    assert_rejected(
        conn,
        "QT002",
        "SELECT record_intent_prepared(%s, %s)",
        (claimed["node_id"], claimed["claim_secret"]),
    )


# --- record_intent_prepared_batch ------------------------------------------------------------


def _claimed(conn: Conn, count: int, prefix: str, lease: float = 300) -> list[tuple[int, str]]:
    movements = [create_started(conn, plan(node("a")), f"{prefix}{i}") for i in range(count)]
    ids = [node_ids(conn, m)["a"] for m in movements]
    rows = conn.execute(
        "SELECT node_id, claim_secret FROM claim_ready_nodes('dispatcher-1', 1000, %s)", (lease,)
    ).fetchall()
    secrets = dict(rows)
    return [(i, secrets[i]) for i in ids]


def _record(
    conn: Conn, nodes: list[tuple[int, str]], prepared: list[tuple[Any, ...]]
) -> list[tuple[Any, ...]]:
    return conn.execute(
        BATCH,
        (
            [n for n, _ in nodes],
            [t for _, t in nodes],
            [p[0] for p in prepared],
            [p[1] for p in prepared],
            [p[2] for p in prepared],
            [json.dumps(p[3]) if p[3] is not None else None for p in prepared],
        ),
    ).fetchall()


def _intent(conn: Conn, node_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        """SELECT intent_state, nonce, signed_tx_hash, signed_tx_hashes, external_request_id,
                  prepared_payload, prepared_at, claimed_by
             FROM node_intents WHERE node_id = %s ORDER BY claim_token DESC LIMIT 1""",
        (node_id,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def _audit(conn: Conn, node_id: int) -> list[tuple[Any, ...]]:
    rows = conn.execute(
        """SELECT actor, action, from_state, to_state, detail - 'intent_id', occurred_at,
                  (detail ->> 'intent_id')::bigint = i.id
             FROM audit_outbox a
             JOIN node_intents i ON i.node_id = a.entity_id::bigint
            WHERE a.entity = 'node' AND a.entity_id = %s::text AND a.action = 'intent_prepared'
            ORDER BY a.id""",
        (node_id,),
    ).fetchall()
    return [tuple(r) for r in rows]


def test_a_batch_records_what_each_executor_handed_over_and_audits_it(conn: Conn) -> None:
    nodes = _claimed(conn, len(PREPARED), "batch-")
    pin_clock(conn, (T0 + timedelta(seconds=3)).isoformat())

    rows = _record(conn, nodes, PREPARED)

    assert [(r[0], r[2], r[3]) for r in rows] == [(n, None, None) for n, _ in nodes]
    prepared_at = T0 + timedelta(seconds=3)
    expected = [
        ("PREPARED", 7, "0xaaa", ["0xaaa"], None, None, prepared_at, "dispatcher-1"),
        ("PREPARED", None, None, [], "withdrawal-1", None, prepared_at, "dispatcher-1"),
        ("PREPARED", None, None, [], None, {"route": "bus"}, prepared_at, "dispatcher-1"),
        ("PREPARED", 8, "0xbbb", ["0xbbb"], "req-2", {"gas": 21000}, prepared_at, "dispatcher-1"),
    ]
    for (node_id, _), row, want, (nonce, tx, ext, _) in zip(
        nodes, rows, expected, PREPARED, strict=True
    ):
        assert _intent(conn, node_id) == want
        intent_id = conn.execute(
            "SELECT id FROM node_intents WHERE node_id = %s", (node_id,)
        ).fetchone()
        assert intent_id == (row[1],)
        # one intent_prepared event, by the claimer, naming the intent and what it holds
        assert _audit(conn, node_id) == [
            (
                "dispatcher-1",
                "intent_prepared",
                "SUBMITTING",
                "SUBMITTING",
                {"nonce": nonce, "signed_tx_hash": tx, "external_request_id": ext},
                prepared_at,
                True,
            )
        ]
    # the nodes stay SUBMITTING: recording is not a transition
    states = conn.execute(
        "SELECT DISTINCT node_state::text FROM movement_request_nodes WHERE id = ANY(%s)",
        ([n for n, _ in nodes],),
    ).fetchall()
    assert states == [("SUBMITTING",)]


def test_a_replacement_transaction_keeps_every_signed_hash_once(conn: Conn) -> None:
    [(node_id, secret)] = _claimed(conn, 1, "m")

    for tx in ("0x1", "0x2", "0x1"):
        [row] = _record(conn, [(node_id, secret)], [(5, tx, None, None)])
        assert row[2] is None

    assert _intent(conn, node_id)[:4] == ("PREPARED", 5, "0x1", ["0x1", "0x2"])
    assert len(_audit(conn, node_id)) == 3


def test_a_refused_node_is_reported_and_left_as_it_was_while_the_rest_is_recorded(
    conn: Conn,
) -> None:
    nodes = _claimed(conn, 4, "m")
    (ok, ok_secret), (stale, _), (empty, empty_secret), (done, done_secret) = nodes
    conn.execute("SELECT complete_submit(%s, %s, 'ref')", (done, done_secret))
    missing = 10**9

    rows = _record(
        conn,
        [
            (ok, ok_secret),
            (stale, forged_secret()),
            (empty, empty_secret),
            (done, done_secret),
            (missing, forged_secret()),
        ],
        [
            (1, "0x1", None, None),
            (2, "0x2", None, None),
            (None, None, None, None),
            (4, "0x4", None, None),
            (5, "0x5", None, None),
        ],
    )

    assert [(r[0], r[1] is not None, r[2]) for r in rows] == [
        (ok, True, None),
        (stale, False, "QT030"),
        (empty, False, "QT002"),
        (done, False, "QT021"),
        (missing, False, "QT011"),
    ]
    assert _intent(conn, ok)[0] == "PREPARED"
    assert _intent(conn, stale)[0] == _intent(conn, empty)[0] == "CLAIMED"
    assert _intent(conn, done)[0] == "SUBMITTED"
    assert [len(_audit(conn, n)) for n, _ in nodes] == [1, 0, 0, 0]


def test_a_record_the_engine_cannot_apply_is_refused_alone_and_the_others_are_recorded(
    conn: Conn,
) -> None:
    plant_rule(conn, "node_intents", "NEW.external_request_id = 'poison'")
    nodes = _claimed(conn, 3, "m")
    (ok, _), (poison, _), (also_ok, _) = nodes

    rows = _record(
        conn,
        nodes,
        [(None, None, "req-1", None), (None, None, "poison", None), (None, None, "req-3", None)],
    )

    assert [(r[0], r[1] is not None, r[2]) for r in rows] == [
        (ok, True, None),
        (poison, False, "QT050"),
        (also_ok, True, None),
    ]
    assert "planted rule" in rows[1][3]
    assert [_intent(conn, n)[0] for n, _ in nodes] == ["PREPARED", "CLAIMED", "PREPARED"]
    assert [len(_audit(conn, n)) for n, _ in nodes] == [1, 0, 1]


def test_an_expired_lease_is_refused_so_the_node_is_never_broadcast(conn: Conn) -> None:
    short = _claimed(conn, 1, "short-", lease=10)
    long = _claimed(conn, 1, "long-", lease=600)
    pin_clock(conn, (T0 + timedelta(seconds=11)).isoformat())

    rows = _record(conn, short + long, [(1, "0x1", None, None), (2, "0x2", None, None)])

    assert rows[0][2] == "QT030" and "expired" in rows[0][3]
    assert rows[1][2] is None
    assert _intent(conn, short[0][0])[0] == "CLAIMED"
    assert _intent(conn, long[0][0])[0] == "PREPARED"


@pytest.mark.parametrize(
    ("why", "ids", "secrets", "nonces"),
    [
        ("arrays of different lengths", [1, 2], [1], None),
        ("a nonce too many", [1], [1], [1, 2]),
        ("a node twice", [1, 1], [1, 1], None),
        ("a NULL node id", [None], [1], None),
        ("more than 1000 nodes", list(range(1, 1002)), [1] * 1001, None),
    ],
)
def test_a_malformed_batch_is_refused_whole(
    conn: Conn, why: str, ids: list[Any], secrets: list[int], nonces: Any
) -> None:
    [(node_id, secret)] = _claimed(conn, 1, "m")
    ids = [node_id if i == 1 else i for i in ids]
    secrets = [secret for _ in secrets]  # as many well-formed secrets as the case has

    assert_rejected(conn, "QT002", BATCH, (ids, secrets, nonces, ["0x1"] * len(ids), None, None))
    assert _intent(conn, node_id)[0] == "CLAIMED", why


def test_an_empty_batch_returns_nothing(conn: Conn) -> None:
    assert conn.execute(BATCH, ([], [], None, None, None, None)).fetchall() == []


def test_a_runner_may_call_it_and_an_operator_may_not(db: TestDatabase, conn: Conn) -> None:
    [(node_id, secret)] = _claimed(conn, 1, "m")
    args = ([node_id], [secret], None, ["0x1"], None, None)

    operator = bind(db.connect(db.operator_dsn("testnet")))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        operator.execute(BATCH, args)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, T0.isoformat())
    [row] = runner.execute(BATCH, args).fetchall()
    assert row[2] is None
    assert _intent(conn, node_id)[0] == "PREPARED"
