"""The operator's setup step for CCTP burns: a bounded standing allowance of a
treasury account to its chain's TokenMessengerV2, signed through the account's
Signer (the same interface a KMS or HSM implements).

Why a setup step and not an approve per burn: a node's side effect is one
recorded transaction at one nonce (the intent), recovered from its recorded
hashes; an approve beside each burn would be a second side effect per node with
its own nonce, recording and recovery, for no safety gain. The allowance is
bounded (``amount``, e.g. a day's burn budget), never unbounded; the
cctp_burn executor's preflight refuses, retryably and with this hint, while it
is short, so nothing is signed that would revert. The local world sets one
for every treasury account (qtg_world.chains.cctp.allow_local_burns, called
by ``prepare_treasury``).
"""

from __future__ import annotations

import asyncio
import time

from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak

from qtg_runner.chains.errors import ChainError
from qtg_runner.chains.evm import (
    allowance,
    build_call,
    estimate_gas,
    normalize_address,
    suggest_fees,
)
from qtg_runner.chains.evm_rpc import EvmRpc
from qtg_runner.signers import Signer

__all__ = ["approve_calldata", "set_burn_allowance"]

_APPROVE = keccak(text="approve(address,uint256)")[:4]


def approve_calldata(spender: str, amount: int) -> bytes:
    return _APPROVE + abi_encode(["address", "uint256"], [normalize_address(spender), amount])


async def set_burn_allowance(
    rpc: EvmRpc,
    signer: Signer,
    chain_id: int,
    token: str,
    token_messenger: str,
    amount: int,
    *,
    max_fee_cap: int,
    priority_fee_cap: int,
    timeout: float = 60.0,
) -> str | None:
    """Set ``signer``'s allowance of ``token`` to ``token_messenger`` to
    ``amount`` when it is below; the approve's hash once mined, or None when
    nothing was needed. ChainError when it reverts or is not mined in time."""
    if await allowance(rpc, token, signer.address, token_messenger) >= amount:
        return None
    data = approve_calldata(token_messenger, amount)
    nonce = await rpc.transaction_count(signer.address, "pending")
    fees = await suggest_fees(rpc, max_fee_cap=max_fee_cap, priority_fee_cap=priority_fee_cap)
    gas = await estimate_gas(rpc, signer.address, token, data)
    signed = await signer.sign_transaction(build_call(chain_id, token, data, nonce, fees, gas))
    await rpc.send_raw_transaction(bytes.fromhex(signed.raw_hex[2:]))
    deadline = time.monotonic() + timeout
    while (receipt := await rpc.receipt(signed.tx_hash)) is None:
        if time.monotonic() > deadline:
            raise ChainError(f"the approve {signed.tx_hash} was not mined within {timeout} s")
        await asyncio.sleep(0.1)
    if not receipt.succeeded:
        raise ChainError(f"the approve {signed.tx_hash} reverted")
    return signed.tx_hash
