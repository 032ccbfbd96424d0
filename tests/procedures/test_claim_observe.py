"""claim_observe: an observer takes a SUBMITTED or OBSERVING node only once it is due.

Pins: before next_observe_at the call misses (no row) and leaves the claim (its
secret's hash and the claim counter) as it was; once due it hits and hands out
a new secret, and writes nothing (the secret proves the claim of its
transaction, test_claim_secret.py); the report bumps the counter. Its locks and its misses under
contention are in scenarios/test_concurrency.py; observe_candidates, which
lists the due nodes, is pinned with the pacing in test_complete_observe_pacing.py.

A legal call runs in one transaction (``in_one_transaction``) and the test reads
back the audit_outbox and callback_outbox rows that this same transaction wrote:
every transition audits itself, and every request state change enqueues its
callback, atomically with the change. An illegal call must raise its stable
SQLSTATE and leave every table as it was (``assert_rejected``). The procedure's
file under sql/functions is the specification; each test names the from-state
and to-state it checks.
"""

from __future__ import annotations

from engine import assert_rejected, claim, create_started, node, node_ids, observe, pin_clock, plan
from rows import Conn, iso_at, node_row, submitted

from qtg_runner.db import procs


def test_observe_claims_only_when_due(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(41))
    before = node_row(conn, node_id)
    assert observe(conn, node_id, "PENDING") is None
    after = node_row(conn, node_id)  # a miss does not touch the claim
    assert (after["claim_token"], after["claim_hash"]) == (1, before["claim_hash"])
    pin_clock(conn, iso_at(42))
    assert observe(conn, node_id, "PENDING") is not None
    after = node_row(conn, node_id)
    # the report bumped the counter and no secret handed out before holds the node
    assert (after["claim_token"], after["claim_hash"]) == (2, None)


def test_a_batch_claims_the_due_nodes_each_once_and_passes_over_the_rest(conn: Conn) -> None:
    movement_id = create_started(conn, plan(node("a"), node("b"), node("c")), "m3")
    ids = node_ids(conn, movement_id)
    for claimed in claim(conn, "dispatcher", 10):
        if claimed["node_id"] != ids["c"]:  # c stays SUBMITTING: not an observer's
            procs.complete_submit(claimed["node_id"], claimed["claim_secret"], "ref").one(conn)
    pin_clock(conn, iso_at(42))
    before = {key: node_row(conn, node_id) for key, node_id in ids.items()}
    with conn.transaction():
        claims = procs.claim_observe_batch(
            [ids["b"], ids["c"], ids["a"], ids["b"], None, -1], "obs"
        ).all(conn)
    assert [c.node_id for c in claims] == sorted([ids["a"], ids["b"]])
    assert len({c.claim_secret for c in claims}) == 2
    # the claims wrote nothing: every node is as it was
    assert {key: node_row(conn, node_id) for key, node_id in ids.items()} == before
    assert node_row(conn, ids["c"])["node_state"] == "SUBMITTING"


def test_a_batch_of_more_than_32_ids_is_refused_whole(conn: Conn) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    assert_rejected(
        conn,
        "QT002",
        "SELECT * FROM claim_observe_batch(%s, 'obs')",
        ([node_id, *range(-32, 0)],),
    )


def test_a_poll_that_finds_nothing_writes_one_version_of_the_node_and_nothing_else(
    conn: Conn,
) -> None:
    _, node_id = submitted(conn)
    pin_clock(conn, iso_at(42))
    observe(conn, node_id, "PENDING")  # SUBMITTED -> OBSERVING: a state change, audited
    due = node_row(conn, node_id)["next_observe_at"]
    pin_clock(conn, due.isoformat())
    writes = """SELECT sum(pg_stat_get_xact_tuples_inserted(c.oid)
                           + pg_stat_get_xact_tuples_updated(c.oid)
                           + pg_stat_get_xact_tuples_deleted(c.oid))::int,
                       sum(pg_stat_get_xact_tuples_updated(c.oid))
                           FILTER (WHERE c.relname = 'movement_request_nodes')::int
                  FROM pg_class c
                 WHERE c.relnamespace = 'testnet'::regnamespace AND c.relkind = 'r'"""

    def counted() -> tuple[int, int] | None:
        return conn.execute(writes).fetchone()

    with conn.transaction():
        # the counters hold this backend's writes not yet reported: read the change
        (rows0, nodes0) = counted()
        [claimed] = procs.claim_observe_batch([node_id], "observer-2").all(conn)
        assert counted() == (rows0, nodes0)  # the claim writes nothing
        [row] = procs.complete_observe_batch(
            [node_id], [claimed.claim_secret], ["PENDING"], worker="observer-2"
        ).all(conn)
        assert (row.node_state, row.error_code) == ("OBSERVING", None)
        assert counted() == (rows0 + 1, nodes0 + 1)  # the report: one version of the node
    after = node_row(conn, node_id)
    assert (after["claimed_by"], after["claim_token"], after["observe_count"]) == (
        "observer-2",
        3,
        2,
    )
