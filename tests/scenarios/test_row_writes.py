"""What a one-step movement writes over its whole life, row by row.

Counted with the database's own counters (pg_stat_get_xact_tuples_*: rows
inserted, updated and deleted in every table of the network) around each
step of a movement's life as the runners and the promoter make it: created
and approved, started and claimed, its intent prepared, submitted and
settled at submit (the sim's instant lane), and its audit events chained
into audit_log by promote_audit. Every guarantee is counted: the intent
row, the audit event of every transition and its place in the hash chain.

Measured with 20 movements, no callback receiver named:
  created and approved in batches (create_movements, approve_movements):
      18.95 rows a movement (18.4 in batches of 50): 3 intake, 3 start and
      claim, 1 prepared, 3 submit and settle, 8 audit events chained, and
      the batches' outbox rows; the goal is at most 20 (27.2 before)
  created and approved one call each (create_movement, approve_movement):
      22.75: each call writes an audit batch of its own, inserted and then
      deleted by the promotion (the goal is missed by these)
Each counter is read as a change in one transaction: they hold the backend's
writes not yet reported to the statistics.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from engine import add_lanes, as_person, node, plan
from rows import Conn

from qtg_runner.db import procs

MOVEMENTS = 20

WRITES = """SELECT sum(pg_stat_get_xact_tuples_inserted(c.oid)
                       + pg_stat_get_xact_tuples_updated(c.oid)
                       + pg_stat_get_xact_tuples_deleted(c.oid))::int
              FROM pg_class c
             WHERE c.relnamespace = 'testnet'::regnamespace AND c.relkind = 'r'"""


def writes(conn: Conn) -> int:
    row = conn.execute(WRITES).fetchone()
    assert row is not None
    return int(row[0])


def whole_life(conn: Conn, batched: bool) -> float:
    """Rows written a movement from its creation to its audit chain."""
    add_lanes(conn, "instant")
    one_step = plan(node("a", lane="instant"))
    with conn.transaction():
        before = writes(conn)
        with as_person(conn, "alice"):
            if batched:
                items = [
                    {"external_id": f"m{i}", "amount": "100", "plan": one_step}
                    for i in range(MOVEMENTS)
                ]
                ids = [r.movement_id for r in procs.create_movements(items).all(conn)]
            else:
                ids = [
                    procs.create_movement(f"m{i}", Decimal(100), plan=one_step)
                    .one(conn)
                    .movement_id
                    for i in range(MOVEMENTS)
                ]
        with as_person(conn, "bob"):
            if batched:
                procs.approve_movements(ids).all(conn)
            else:
                for movement_id in ids:
                    procs.approve_movement(movement_id).one(conn)
        claims = procs.claim_ready_nodes("w1", 1000, start=1000).all(conn)
        assert len(claims) == MOVEMENTS
        nodes, secrets = [c.node_id for c in claims], [c.claim_secret for c in claims]
        prepared = procs.record_intent_prepared_batch(
            nodes, secrets, signed_tx_hashes=[f"0x{i:064x}" for i in range(MOVEMENTS)]
        ).all(conn)
        assert all(r.error_code is None for r in prepared)
        submitted = procs.complete_submit_batch(
            nodes, secrets, [f"ref-{i}" for i in nodes], settled=[True] * MOVEMENTS
        ).all(conn)
        assert {r.node_state for r in submitted} == {procs.NodeState.COMPLETED}
        while procs.promote_audit("promoter", 10000).one(conn):
            pass
        after = writes(conn)
    finished = conn.execute(
        "SELECT count(*) FROM movement_requests WHERE request_state = 'COMPLETED'"
    ).fetchone()
    assert finished == (MOVEMENTS,)
    assert conn.execute("SELECT count(*) FROM audit_batches").fetchone() == (0,)
    return (after - before) / MOVEMENTS


@pytest.mark.parametrize(
    ("batched", "at_most"), [(True, 20), (False, 23)], ids=["batch", "per-call"]
)
def test_a_one_step_movement_writes_at_most_its_budget_of_rows(
    conn: Conn, batched: bool, at_most: int
) -> None:
    rows = whole_life(conn, batched)
    assert rows <= at_most, f"{rows:.2f} rows a movement"
    assert rows > 15  # the counters counted: every step writes its rows
