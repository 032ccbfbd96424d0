"""claim_observe: an observer takes a SUBMITTED or OBSERVING node only once it is due.

Pins: before next_observe_at the call misses (no row) and leaves the claim (its
secret's hash and the claim counter) as it was; once due it hits, hands out a
new secret and bumps the counter. Its locks and its misses under
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

from engine import observe, pin_clock
from rows import Conn, iso_at, node_row, submitted


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
    assert after["claim_token"] == 2
    assert after["claim_hash"] not in (None, before["claim_hash"])
