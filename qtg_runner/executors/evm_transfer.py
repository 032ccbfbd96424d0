"""The `evm_transfer` executor: an ERC-20 transfer from a treasury account to
another treasury account or to an allow-listed address, on an EVM chain of the
network's chain registry.

What it may sign is the registry's word, read again before every signature
(evm_transfer_route, in SQL): the chain, the token contract, the sender (a
treasury account and its signer's id), a recipient that is a treasury account
or allow-listed, and the amount in the token's base units. The RPC URL comes
from the environment variable the registry names; the key from the signer
(qtg_runner.signers), never the database.

    preflight  the route; the sender holds the amount of the token and the
               ETH for the gas at the fee cap.
    prepare    EIP-1559 fees under the chain's caps, gas from the node's
               estimate, the nonce at the greater of the chain's pending count
               and the engine's next one, signed. The dispatcher records the
               signed bytes (the engine allocates the nonce there) before
               anything is broadcast; resign() signs the same transfer again at
               another nonce when the engine says the nonce was taken.
    submit     eth_sendRawTransaction of the recorded bytes. "already known" is
               the same transaction: accepted. "nonce too low" is resolved by
               the recorded hashes: one of them mined is ours; none is a nonce
               taken by a transaction the engine never recorded, which recovery
               reports for an operator.
    observe    the receipt of any recorded hash (replacements included), still
               in the canonical chain and at least ``finality_depth`` blocks
               deep, with exactly one Transfer log of the token from the sender
               to the recipient for the amount: COMPLETED. Mined but not final:
               PENDING. Reverted and final: FAILED. Not mined, nonce still free
               and nothing in the pool (dropped, or reorganised away): the
               identical recorded raw transaction is broadcast again, PENDING.
               Nonce consumed by none of our hashes: UNKNOWN, with the evidence.
    recover    the same reading from the recorded hashes and the account nonce:
               final -> COMPLETED / FAILED; mined, pending or rebroadcast ->
               IN_FLIGHT; never prepared -> NOT_SUBMITTED; the nonce taken by a
               hash never recorded -> STILL_UNKNOWN, for an operator.
    health     every registered chain whose RPC URL this runner has: the node
               answers with the chain id registered, and its head block is fresh.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qtg_runner.chains.evm import (
    balance_of,
    decode_transfers,
    transfer_calldata,
)
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import (
    BIG,
    NodeWork,
    config_schema,
)


@dataclass(frozen=True)
class _Route(evm_tx.CallRoute):
    """The registry's word on one node (evm_transfer_route), as recorded in the
    intent's payload at prepare so that observation never depends on a registry
    changed since the transaction was signed."""

    procedure = procs.evm_transfer_route

    token: str
    token_address: str
    recipient: str
    amount_units: int = field(metadata=BIG)

    @property
    def chain_key(self) -> str:
        return self.leg.chain_key

    @property
    def sender(self) -> str:
        return self.leg.sender

    def send(self) -> evm_tx.Send:
        return evm_tx.Send(self.token_address, transfer_calldata(self.recipient, self.amount_units))


class EvmTransferExecutor(evm_tx.CallExecutor):
    route_type = _Route
    key = "evm_transfer"
    landed = "final"
    sends = "transfer"
    description = (
        "ERC-20 transfer from a treasury account to a treasury account or an allow-listed "
        "address, signed at a nonce the engine allocates, final at the chain's finality depth"
    )
    node_config_schema = config_schema(("chain", "from", "to"), optional=("token",))

    # -- what the registry and the environment say -----------------------------

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        route = await _Route.of(self._pool, work)
        rpc = self._evm.leg_rpc(route.leg)
        recent = evm_tx.shared_for(route.leg)
        async with evm_tx.chain_errors(route.chain_key):
            (held,) = await evm_tx.read_together(
                route.leg,
                rpc,
                balance_of(rpc, route.token_address, route.sender, max_age_s=recent),
            )
            evm_tx.require_tokens(route.leg, held, route.amount_units, route.token, self.sends)

    async def read(self, work: NodeWork) -> evm_tx.TxReading:
        """The chain's word on the node's transaction, from its recorded hashes;
        a final receipt must show exactly the transfer the intent recorded."""
        route = _Route.from_payload(evm_tx.recorded_payload(work))
        reading = await evm_tx.read_recorded(self._evm.leg_rpc(route.leg), route.leg, work)
        if reading.status != "final" or reading.receipt is None:
            return reading
        return _checked_transfer(route, reading)


def _checked_transfer(route: _Route, reading: evm_tx.TxReading) -> evm_tx.TxReading:
    """A final receipt with exactly one Transfer log of the token from the
    sender, to the recipient for the amount: final; anything else: refused."""
    assert reading.receipt is not None
    transfers = [
        t
        for t in decode_transfers(reading.receipt)
        if t.token == route.token_address and t.sender == route.sender
    ]
    expected = [
        t for t in transfers if t.recipient == route.recipient and t.value == route.amount_units
    ]
    if len(transfers) != 1 or len(expected) != 1:
        return evm_tx.TxReading(
            "refused",
            reading.evidence
            | {
                "problem": "the receipt does not show exactly the transfer the intent recorded",
                "expected": {
                    "token": route.token_address,
                    "from": route.sender,
                    "to": route.recipient,
                    "value": str(route.amount_units),
                },
                "transfers": [
                    {"token": t.token, "from": t.sender, "to": t.recipient, "value": str(t.value)}
                    for t in transfers
                ],
            },
            reading.tx_hash,
        )
    transfer = expected[0]
    return evm_tx.TxReading(
        "final",
        reading.evidence
        | {
            "transfer": {
                "token": transfer.token,
                "from": transfer.sender,
                "to": transfer.recipient,
                "value": str(transfer.value),
                "log_index": transfer.log_index,
            }
        },
        reading.tx_hash,
        receipt=reading.receipt,
    )
