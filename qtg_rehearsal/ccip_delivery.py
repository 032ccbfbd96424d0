"""CCIP's part in a rehearsal: a message sent on the source chain's fork,
committed and executed on the destination chain's fork through the lane's
own v1.6 OffRamp, as CCIP's committing and executing DONs do on the real
chains.

No DON signs for a fork, and only its commit needs one: the OffRamp keeps
each committed merkle root's time in ``s_roots[sourceChainSelector][root]``
and executes a message whose one-leaf root is there. The rehearsal writes
that entry (``anvil_setStorageAt``) as a commit old enough that anyone may
execute it, then calls ``manuallyExecute`` with the message as the OnRamp
emitted it and, for a USDC transfer, the CCTP attestation of its burn from
the rehearsal's Iris double (its attesters trusted on the forks). All the
rest is the OffRamp's own: the leaf it hashes from the message, the root it
looks up, the curse check, the token pool's release, the receiver's call,
and the ``ExecutionStateChanged`` the engine's observer waits for.

Where ``s_roots`` sits is found, not assumed: the slots of the contract are
tried in turn, each entry written, read back through ``getMerkleRoot`` and
put back as it was unless that read finds it. The same steps serve a fork
of a real chain (its OffRamp 1.6) and of the local chains (the double). A
v1.5 lane's OffRamp reads its roots from a commit store instead: its
messages are not delivered on a fork, and the rehearsal says so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eth_abi.abi import encode
from eth_utils.crypto import keccak

from qtg_rehearsal.forks import ForkError, ForkUnreachable, rpc, send_as
from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    SentMessage,
    attested_token_data,
    execution_state_calldata,
    manually_execute_calldata,
    merkle_root_calldata,
)
from qtg_runner.chains.cctp_client import IrisClient

DELIVERED_VERSION = "1.6"
"""The lanes whose messages a rehearsal delivers."""
OLD_COMMIT = 1
"""The commit time written: older than any permissionless-execution
threshold, so manuallyExecute takes the message at once."""
MAX_ROOTS_SLOT = 256
"""How many of the OffRamp's top-level slots are tried for s_roots."""
EXECUTE_GAS = 5_000_000
"""The least gas of a manual execution: the message's own limits and the
OffRamp's work around them (execute_gas)."""
MAX_EXECUTE_GAS = 30_000_000
STATES = {0: "UNTOUCHED", 1: "IN_PROGRESS", 2: "SUCCESS", 3: "FAILURE"}


class NotYet(Exception):
    """The message cannot be executed yet: its burn is not attested."""


class NoRoots(Exception):
    """The OffRamp keeps no s_roots where a v1.6 OffRamp does: no message can
    be committed on it, however often it is tried."""


@dataclass(frozen=True)
class Lane:
    source: str
    dest: str
    version: str
    onramp: str
    offramp: str
    token_data: str
    """'cctp': each USDC transfer carries its burn's attestation; 'none'."""


def lanes_between(rows: Iterable[Mapping[str, Any]], chains: Iterable[str]) -> list[Lane]:
    """The registry's CCIP lanes (ccip_lanes rows) whose both ends are in ``chains``."""
    forked = set(chains)
    return [
        Lane(
            str(r["source_chain_key"]),
            str(r["dest_chain_key"]),
            str(r["version"]),
            str(r["onramp"]).lower(),
            str(r["offramp"]).lower(),
            str(r["token_data"]),
        )
        for r in rows
        if r["source_chain_key"] in forked and r["dest_chain_key"] in forked
    ]


@dataclass(frozen=True)
class Undecodable:
    """A CCIPMessageSent that is not the v1.6 event its topic says: why."""

    tx_hash: str
    why: str


def sent(url: str, onramp: str, start: int, end: int) -> list[SentMessage | Undecodable]:
    """The CCIPMessageSent of a v1.6 ``onramp`` in blocks ``start`` to ``end``
    (``url``: the fork's proxy, so that each names the transaction by the hash
    the engine recorded, as the Iris double is asked for it)."""
    logs = rpc(
        url,
        "eth_getLogs",
        [{"address": onramp, "topics": [CCIP_MESSAGE_SENT_TOPIC],
          "fromBlock": hex(start), "toBlock": hex(end)}],
    )  # fmt: skip
    found: list[SentMessage | Undecodable] = []
    for log in logs:
        if log.get("removed"):
            continue
        tx_hash = str(log["transactionHash"])
        try:
            found.append(
                SentMessage.from_log(
                    str(log["address"]),
                    [str(t) for t in log["topics"]],
                    bytes.fromhex(str(log["data"])[2:]),
                    tx_hash,
                    int(str(log["blockNumber"]), 16),
                    int(str(log["logIndex"]), 16),
                )
            )
        except (ValueError, TypeError, KeyError) as exc:
            found.append(Undecodable(tx_hash, f"its CCIPMessageSent cannot be read: {exc}"))
    return found


def token_data(iris_url: str | None, lane: Lane, message: SentMessage) -> list[bytes]:
    """Each token's offchain data for the OffRamp: on a 'cctp' lane a USDC
    transfer's burn message and attestation, as the Iris double answers for
    the send's transaction (qtg_runner.chains.ccip.attested_token_data, as
    the stranded reaper and the local DON ask; NotYet while it has not attested)."""
    if lane.token_data != "cctp" or all(p is None for p in message.usdc_payloads()):
        return [b""] * len(message.tokens)
    if iris_url is None:
        raise RuntimeError("no attestation service runs: a USDC transfer cannot execute")

    async def ask() -> list[bytes] | None:
        iris = IrisClient(iris_url, timeout=10.0)
        try:
            return await attested_token_data(iris, message)
        finally:
            await iris.aclose()

    data = asyncio.run(ask())
    if data is None:
        raise NotYet("its burn is not attested by the Iris double yet")
    return data


def _call(url: str, to: str, data: bytes) -> int:
    return int(str(rpc(url, "eth_call", [{"to": to, "data": "0x" + data.hex()}, "latest"])), 16)


def execution_state(url: str, offramp: str, message: SentMessage) -> int:
    return _call(url, offramp, execution_state_calldata(message))


def _word(value: int) -> str:
    return "0x" + value.to_bytes(32, "big").hex()


def _roots_entry(slot: int, source_selector: int, root: bytes) -> str:
    """Where s_roots[source][root] lies when s_roots is the mapping at ``slot``."""
    inner = keccak(encode(["uint64", "uint256"], [source_selector, slot]))
    return "0x" + keccak(root + inner).hex()


def commit(url: str, offramp: str, message: SentMessage, slot: int | None = None) -> int | None:
    """Make ``message``'s one-leaf root committed on ``offramp`` at OLD_COMMIT
    (see the module), at s_roots' ``slot`` when known (found otherwise):
    the slot (None: the root was committed already, by a try that did not
    return its slot). NoRoots where the OffRamp answers getMerkleRoot with
    an error, or no slot holds s_roots; ForkUnreachable (try again) where the
    fork does not answer."""
    root, source = message.leaf(), message.source_selector
    try:
        committed = _call(url, offramp, merkle_root_calldata(source, root))
    except ForkUnreachable:
        raise
    except ForkError as exc:
        raise NoRoots(
            f"{offramp} does not answer getMerkleRoot ({exc}): not a v1.6 OffRamp"
        ) from None
    if committed != 0:
        return slot  # committed by an earlier try
    for candidate in [slot] if slot is not None else range(MAX_ROOTS_SLOT):
        entry = _roots_entry(candidate, source, root)
        was = str(rpc(url, "eth_getStorageAt", [offramp, entry, "latest"]))
        rpc(url, "anvil_setStorageAt", [offramp, entry, _word(OLD_COMMIT)])
        if _call(url, offramp, merkle_root_calldata(source, root)) == OLD_COMMIT:
            return candidate
        rpc(url, "anvil_setStorageAt", [offramp, entry, _word(int(was, 16))])
    raise NoRoots(
        f"the OffRamp {offramp} keeps no s_roots in its first {MAX_ROOTS_SLOT} slots "
        "(getMerkleRoot never read the root written): not a v1.6 OffRamp?"
    )


def execute_gas(message: SentMessage) -> int:
    """The gas of ``message``'s manual execution: its receiver's limit and each
    token's release gas with room around them, at least EXECUTE_GAS, at most
    MAX_EXECUTE_GAS (under a block's limit)."""
    needed = (message.gas_limit or 0) + sum(t.dest_gas_amount for t in message.tokens) + 500_000
    return min(max(EXECUTE_GAS, needed), MAX_EXECUTE_GAS)


def execute(url: str, offramp: str, executor: str, message: SentMessage, data: list[bytes]) -> None:
    """``manuallyExecute`` of ``message`` on ``offramp``, sent and mined as
    ``executor`` (impersonated, with ether) with execute_gas: a gas estimate
    would find the least gas at which the call does not revert, and a
    release that fails inside it does not revert it. ForkError on a revert,
    its reason read first through eth_call."""
    calldata = "0x" + manually_execute_calldata(message, data).hex()
    gas = execute_gas(message)
    call = {"from": executor, "to": offramp, "data": calldata, "gas": hex(gas)}
    rpc(url, "eth_call", [call, "latest"])
    send_as(url, executor, offramp, calldata, gas)
