"""The operator's setup step for CCTP burns: a bounded standing allowance of a
treasury account to its chain's TokenMessengerV2, signed through the account's
Signer (the same interface a KMS or HSM implements).

Why a setup step and not an approve per burn: a node's side effect is one
recorded transaction at one nonce (the intent), recovered from its recorded
hashes; an approve beside each burn would be a second side effect per node with
its own nonce, recording and recovery, for no safety gain. The allowance is
bounded (``amount``, e.g. a day's burn budget), never unbounded; the
cctp_burn executor's preflight refuses, retryably and with this hint, while it
is short, so nothing is signed that would revert. The local world sets
``LOCAL_BURN_ALLOWANCE`` for every treasury account (``allow_local_burns``,
called by ``prepare_treasury``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

from eth_abi.abi import encode as abi_encode
from eth_utils.crypto import keccak

from qtg_runner.chains.cctp_client import allowance
from qtg_runner.chains.evm import build_call, estimate_gas, normalize_address, suggest_fees
from qtg_runner.chains.evm_rpc import EvmRpc
from qtg_runner.signers import Signer, load_async
from qtg_world.chains.keys import LocalKey
from qtg_world.chains.local import ChainError, RunningChain, keystore_dir, password_file

__all__ = ["LOCAL_BURN_ALLOWANCE", "allow_local_burns", "approve_calldata", "set_burn_allowance"]

LOCAL_BURN_ALLOWANCE = 1_000_000 * 10**6
"""The local treasury accounts' allowance to TokenMessengerV2: their USDC funding."""

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


def allow_local_burns(
    state_dir: Path,
    chains: Sequence[RunningChain],
    treasury: Sequence[LocalKey],
    amount: int = LOCAL_BURN_ALLOWANCE,
) -> None:
    """The local world's setup step: every treasury account allows its chain's
    TokenMessengerV2 ``amount`` of USDC (chains without the CCTP double are
    left alone), set again only where burns took it below half: the approval
    is the account's own transaction, and one sent on every `up` would take
    the nonce the engine hands out next. A keystore is decrypted only for an
    account whose allowance is short: `up` again decrypts none."""
    from qtg_runner.signers.local import KEYSTORE_DIR_ENV, KEYSTORE_PASSWORD_FILE_ENV

    env = {
        KEYSTORE_DIR_ENV: str(keystore_dir(state_dir).resolve()),
        KEYSTORE_PASSWORD_FILE_ENV: str(password_file(state_dir).resolve()),
    }

    async def run() -> None:
        signers: dict[str, Signer] = {}  # each decrypted once, and only when it must sign
        for chain in chains:
            if "TokenMessengerV2" not in chain.contracts or "MockUSDC" not in chain.contracts:
                continue
            token, messenger = chain.contracts["MockUSDC"], chain.contracts["TokenMessengerV2"]
            async with EvmRpc(chain.rpc_url) as rpc:
                chain_id = await rpc.chain_id()
                for key in treasury:
                    if await allowance(rpc, token, key.address, messenger) >= amount // 2:
                        continue
                    if key.signer_id not in signers:
                        signers[key.signer_id] = await load_async(key.signer_id, env)
                    await set_burn_allowance(
                        rpc,
                        signers[key.signer_id],
                        chain_id,
                        token,
                        messenger,
                        amount,
                        max_fee_cap=10**12,
                        priority_fee_cap=10**11,
                        timeout=max(10.0, chain.block_time * 10.0),
                    )

    asyncio.run(run())
