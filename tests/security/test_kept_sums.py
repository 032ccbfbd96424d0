"""The sums and marks that stand in for the history are written by their
procedures alone.

A round of verify_drift reads each account's anchor (balance_anchors: the
effects decided for good, summed once), the reaper's gap search each
account's settled mark (evm_nonce_marks), pipeline_counts its roll-up
(pipeline_rollups, pipeline_rollup_totals), and the deposit followups are made
as a transfer lands (capital_transfer_followups). A login that could lower an
anchor's sum would hide a theft from the drift check; one that could move a
mark past a gap would leave a nonce unfilled and the account's later
transactions stuck; one that could drop a followup would leave a deposit
unchecked. No runner, operator or reader login may write any of them: each
attempt is refused (42501) and nothing changes.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine import assert_rejected, fingerprint
from rows import Conn, person

WRITES = [
    "UPDATE balance_anchors SET low = low - 100, high = high - 100",
    "INSERT INTO balance_anchors (account_kind, account_key, address, asset,"
    " baseline_snapshot_id, through_at, low, high, moved_at)"
    " VALUES ('chain', 'local-a', '0x' || repeat('a1', 20), 'USDC', 1, now(), -100, -100, now())",
    "DELETE FROM balance_anchors",
    "UPDATE evm_nonce_marks SET settled_below = settled_below + 5",
    "INSERT INTO evm_nonce_marks (chain_key, address, settled_below, moved_at)"
    " VALUES ('local-a', '0x' || repeat('a1', 20), 1000, now())",
    "UPDATE pipeline_rollup_totals SET total = 0",
    "UPDATE pipeline_rollups SET below_id = below_id + 1000",
    "DELETE FROM capital_transfer_followups",
    "UPDATE capital_transfer_followups SET followup_state = 'CREDITED', resolved_at = now()",
]


@pytest.mark.parametrize("role", ["runner", "operator", "reader"])
def test_no_login_writes_the_sums_that_stand_in_for_history(db: Any, conn: Conn, role: str) -> None:
    login = person(db, f"{role}1", f"qtg_testnet_{role}")
    before = fingerprint(conn)
    for write in WRITES:
        assert_rejected(login, "42501", write, tables=())
    assert fingerprint(conn) == before
