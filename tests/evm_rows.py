"""Signed EVM transactions for procedure tests, without a chain: the bytes a
runner records (record_intent_prepared) are read in SQL, so a test signs real
type-2 transactions with a throwaway key and records them against a chain, a
token and evm_transfer nodes registered here."""

from __future__ import annotations

from typing import Any

import psycopg
from engine import node, plan
from eth_account import Account
from eth_utils import to_checksum_address

from qtg_runner.chains.evm import Fees, build_transfer, transfer_calldata, tx_hash_of
from qtg_runner.db import procs
from qtg_runner.executors.evm_transfer import EvmTransferExecutor

KEY = Account.from_key("0x" + "4f" * 32)
"""Signs every test transaction (SQL reads the bytes, never recovers the sender)."""
FEES = Fees(2 * 10**9, 10**9)
AMOUNT_UNITS = 100 * 10**6
"""The movements' default amount (engine.create: 100) in USDC base units."""


def signed(tx: dict[str, Any]) -> tuple[str, str]:
    """(hash, raw 0x hex) of ``tx`` signed by KEY."""
    raw = bytes(KEY.sign_transaction(tx).raw_transaction)
    return tx_hash_of(raw), "0x" + raw.hex()


def call(
    chain_id: int,
    nonce: int,
    to: str | None,
    data: bytes = b"",
    value: int = 0,
    fees: Fees = FEES,
) -> tuple[str, str]:
    """Any type-2 call (``to`` None: a contract creation), signed."""
    tx: dict[str, Any] = {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "value": value,
        "data": data,
        "gas": 100_000,
        "maxFeePerGas": fees.max_fee_per_gas,
        "maxPriorityFeePerGas": fees.max_priority_fee_per_gas,
    }
    if to is not None:
        tx["to"] = to_checksum_address(to)
    return signed(tx)


def approve_calldata(spender: str, amount: int) -> bytes:
    """ERC-20 approve(spender, amount): the transfer layout under another selector."""
    return bytes.fromhex("095ea7b3") + transfer_calldata(spender, amount)[4:]


def transfer(
    chain_id: int,
    token: str,
    recipient: str,
    nonce: int,
    fees: Fees = FEES,
    amount: int = AMOUNT_UNITS,
) -> tuple[str, str]:
    """token.transfer(recipient, amount) at ``nonce``, signed; distinct ``fees``
    make distinct bytes at one nonce (a replacement)."""
    return signed(build_transfer(chain_id, token, recipient, amount, nonce, fees, 60_000))


def register_transfers(
    conn: psycopg.Connection[Any],
    chain: str,
    chain_id: int,
    sender: str,
    token: str,
    recipient: str,
) -> None:
    """The admin's steps for evm_transfer nodes from ``sender`` (a treasury
    account) to ``recipient`` (allow-listed) in ``token`` (USDC, 6 decimals) on
    ``chain``."""
    procs.upsert_chain(chain, chain_id, "QTG_RPC_" + chain.upper().replace("-", "_"), 2, 1000).one(
        conn
    )
    procs.upsert_chain_token(chain, "USDC", token, 6).one(conn)
    procs.upsert_treasury_account(chain, sender, "env:TEST_KEY").one(conn)
    procs.allow_destination(chain, recipient, "a test recipient").one(conn)
    evm = EvmTransferExecutor
    procs.register_executor(evm.key, True, evm.node_config_schema, evm.description).one(conn)


def transfer_plan(chain: str, sender: str, recipient: str, *keys: str) -> dict[str, Any]:
    """Independent evm_transfer nodes ``keys``, each moving the movement's amount."""
    return plan(
        *(
            node(key, executor="evm_transfer", chain=chain, **{"from": sender, "to": recipient})
            for key in keys
        )
    )
