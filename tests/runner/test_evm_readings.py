"""What a chain reading means for a node, the same for every EVM executor
(evm_transfer, cctp_burn, cctp_mint, ccip, stargate: qtg_runner.executors.evm_tx's
``observed`` and ``recovered``). The chain tests drive each executor's reading
against the local chains; this pins the one rule they share: the executor's
own status of a send that landed completes the node, a revert fails it, a
nonce taken by someone else, bytes refused or a send that is not what was
recorded go to a person, and anything else is still on its way."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from decimal import Decimal

import pytest

from qtg_runner.executors.base import (
    JsonObject,
    NodeWork,
    ObserveStatus,
    RecoveryOutcome,
)
from qtg_runner.executors.evm_tx import observed, recovered


@dataclass(frozen=True)
class Reading:
    status: str
    evidence: JsonObject
    tx_hash: str | None = "0xab"
    wait_s: float | None = 12.0


def work(transactions: list[JsonObject] | None) -> NodeWork:
    intent: JsonObject = {"intent_state": "PREPARED"}
    if transactions is not None:
        intent["transactions"] = transactions
    return NodeWork(
        node_id=7, request_id=3, claim_secret="s" * 64, node_key="send",
        executor_key="evm_transfer", node_config={}, lane="evm",
        amount=Decimal(5), asset="USDC", intent=intent,
    )  # fmt: skip


MEANINGS = [
    # status, observed, recovered
    ("minted", ObserveStatus.COMPLETED, RecoveryOutcome.COMPLETED),  # the executor's done
    ("reverted", ObserveStatus.FAILED, RecoveryOutcome.FAILED),
    ("foreign", ObserveStatus.UNKNOWN, RecoveryOutcome.STILL_UNKNOWN),
    ("refused", ObserveStatus.UNKNOWN, RecoveryOutcome.STILL_UNKNOWN),
    ("mismatch", ObserveStatus.UNKNOWN, RecoveryOutcome.STILL_UNKNOWN),
    ("final", ObserveStatus.PENDING, RecoveryOutcome.IN_FLIGHT),  # another executor's done
    ("pending", ObserveStatus.PENDING, RecoveryOutcome.IN_FLIGHT),
    ("rebroadcast", ObserveStatus.PENDING, RecoveryOutcome.IN_FLIGHT),
    ("unattested", ObserveStatus.PENDING, RecoveryOutcome.IN_FLIGHT),
]


@pytest.mark.parametrize(("status", "observe", "recovery"), MEANINGS)
def test_a_reading_means_the_same_for_every_evm_executor(
    status: str, observe: ObserveStatus, recovery: RecoveryOutcome
) -> None:
    reading = Reading(status, {"seen": status})

    result = observed(reading, "minted")
    assert (result.status, result.evidence) == (observe, {"seen": status})
    # only a send still on its way is looked at again after the reading's wait
    assert result.retry_after == (12.0 if observe is ObserveStatus.PENDING else None)

    async def read(_: NodeWork) -> Reading:
        return reading

    recovered_ = asyncio.run(recovered(work([{"tx_hash": "0xab"}]), "minted", read))
    assert recovered_.outcome is recovery
    assert recovered_.evidence == {"seen": status}
    assert (recovered_.external_ref, recovered_.retry_after) == ("0xab", 12.0)


def test_a_node_with_no_recorded_transaction_was_not_submitted_and_the_chain_is_not_read() -> None:
    async def read(_: NodeWork) -> Reading:
        raise AssertionError("nothing recorded: nothing to read")

    for transactions in (None, []):
        result = asyncio.run(recovered(work(transactions), "final", read))
        assert result.outcome is RecoveryOutcome.NOT_SUBMITTED
        assert result.evidence == {"intent_state": "PREPARED"}
