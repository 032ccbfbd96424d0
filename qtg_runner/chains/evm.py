"""What an EVM executor stands on: the node's JSON-RPC (``EvmRpc``, from
evm_rpc.py, re-exported here), the ERC-20 codec, EIP-1559 fees under caps, and
the transactions it signs.

    ERC-20     transfer_calldata, balance_of, TRANSFER_TOPIC, decode_transfers
    fees       suggest_fees (priority = min(node's tip, cap); max = min(2 * base
               + priority, cap); FeeCapExceeded when the base fee alone passes
               the cap: nothing is signed then), bump (a replacement's fees)
    txs        build_transfer, self_transfer (closes a nonce), estimate_gas,
               sign (through the Signer interface only), decode_raw (and
               DecodedTransaction.to_tx: sign again at another nonce or fee), tx_hash_of

Addresses in our types are 0x + 40 lower-case hex digits; the dicts handed to a
Signer carry the checksummed form eth-account requires. Nothing here holds a key.
"""

from __future__ import annotations

import asyncio
import functools
import math
from dataclasses import dataclass
from typing import Any

from eth_utils.address import to_checksum_address
from eth_utils.crypto import keccak
from hexbytes import HexBytes

from qtg_runner.chains.evm_rpc import (
    MAX_RESPONSE_BYTES,
    Block,
    BlockTag,
    EvmRpc,
    EvmRpcError,
    Log,
    NonceTag,
    Receipt,
    RpcBadResponse,
    RpcError,
    RpcErrorKind,
    RpcUnavailable,
    Transaction,
    TransactionCall,
    classify,
    redact_url,
)
from qtg_runner.signers import SignedTransaction, Signer

__all__ = [
    "ERC20_BALANCE_OF",
    "ERC20_TRANSFER",
    "MAX_RESPONSE_BYTES",
    "REPLACEMENT_BUMP",
    "SELF_TRANSFER_GAS",
    "TRANSFER_TOPIC",
    "Block",
    "BlockTag",
    "DecodedTransaction",
    "EvmRpc",
    "EvmRpcError",
    "FeeCapExceeded",
    "Fees",
    "Log",
    "NonceTag",
    "Receipt",
    "RpcBadResponse",
    "RpcError",
    "RpcErrorKind",
    "RpcUnavailable",
    "Transaction",
    "TransactionCall",
    "Transfer",
    "balance_of",
    "build_call",
    "build_transfer",
    "bump",
    "classify",
    "decode_raw",
    "decode_transfers",
    "eip1559_transaction",
    "estimate_gas",
    "normalize_address",
    "redact_url",
    "self_transfer",
    "sign",
    "suggest_fees",
    "transfer_calldata",
    "tx_hash_of",
]

UINT256_MAX = 2**256 - 1


def normalize_address(address: str) -> str:
    """``address`` as 0x + 40 lower-case hex digits (ValueError otherwise). A
    mixed-case address must carry a valid EIP-55 checksum."""
    if not isinstance(address, str) or len(address) != 42 or address[:2] not in ("0x", "0X"):
        raise ValueError(f"not an address (0x + 40 hex digits): {str(address)[:60]!r}")
    body = address[2:]
    try:
        int(body, 16)
    except ValueError:
        raise ValueError(f"not an address (0x + 40 hex digits): {address!r}") from None
    lower = "0x" + body.lower()
    if body != body.lower() and body != body.upper() and to_checksum_address(lower) != address:
        raise ValueError(f"address {address} has a wrong EIP-55 checksum")
    return lower


def tx_hash_of(raw: bytes) -> str:
    """A signed transaction's hash: keccak-256 of its raw bytes (typed ones included)."""
    return "0x" + keccak(raw).hex()


# -- ERC-20 ----------------------------------------------------------------------------

ERC20_TRANSFER = keccak(text="transfer(address,uint256)")[:4]
"""0xa9059cbb"""
ERC20_BALANCE_OF = keccak(text="balanceOf(address)")[:4]
ERC20_ALLOWANCE = keccak(text="allowance(address,address)")[:4]
"""0x70a08231"""
TRANSFER_TOPIC = "0x" + keccak(text="Transfer(address,address,uint256)").hex()
"""topic0 of ``Transfer(address indexed from, address indexed to, uint256 value)``."""


def _word_address(address: str) -> bytes:
    return bytes(12) + bytes.fromhex(normalize_address(address)[2:])


def _word_uint(value: int) -> bytes:
    if not 0 <= value <= UINT256_MAX:
        raise ValueError(f"{value} is not a uint256")
    return value.to_bytes(32, "big")


def transfer_calldata(to: str, amount: int) -> bytes:
    """``transfer(to, amount)``'s calldata (amount in the token's base units)."""
    return ERC20_TRANSFER + _word_address(to) + _word_uint(amount)


def _erc20_word(out: bytes, view: str, token: str) -> int:
    """An ERC-20 view's one-word answer; RpcBadResponse for any other (no
    ERC-20 contract at ``token``)."""
    if len(out) != 32:
        raise RpcBadResponse(
            f"{view} on {normalize_address(token)} answered {len(out)} bytes, not 32: "
            "is it an ERC-20 contract on this chain?"
        )
    return int.from_bytes(out, "big")


async def balance_of(
    rpc: EvmRpc,
    token: str,
    owner: str,
    *,
    tag: int | BlockTag = "latest",
    max_age_s: float = 0.0,
) -> int:
    """``token.balanceOf(owner)`` (the latest at most once per ``max_age_s``:
    EvmRpc.call); RpcBadResponse when ``token`` answers no word (no contract
    there)."""
    out = await rpc.call(
        normalize_address(token),
        ERC20_BALANCE_OF + _word_address(owner),
        tag=tag,
        max_age_s=max_age_s,
    )
    return _erc20_word(out, "balanceOf", token)


async def allowance(
    rpc: EvmRpc, token: str, owner: str, spender: str, *, max_age_s: float = 0.0
) -> int:
    """``token.allowance(owner, spender)``: what ``spender`` may pull from
    ``owner`` (the latest at most once per ``max_age_s``: EvmRpc.call);
    RpcBadResponse when ``token`` answers no word (no contract there)."""
    out = await rpc.call(
        normalize_address(token),
        ERC20_ALLOWANCE + _word_address(owner) + _word_address(spender),
        max_age_s=max_age_s,
    )
    return _erc20_word(out, "allowance", token)


@dataclass(frozen=True)
class Transfer:
    """One ERC-20 ``Transfer`` log."""

    token: str
    sender: str
    recipient: str
    value: int
    log_index: int


def _topic_address(topic: str) -> str | None:
    word = bytes.fromhex(topic[2:])
    if len(word) != 32 or any(word[:12]):
        return None
    return "0x" + word[12:].hex()


def decode_transfers(receipt: Receipt) -> list[Transfer]:
    """The ERC-20 transfers a receipt's logs record: topic0 ``Transfer``, three
    topics (an ERC-721 ``Transfer`` has four) and a 32-byte value; removed logs
    and malformed ones are left out."""
    transfers: list[Transfer] = []
    for log in receipt.logs:
        if log.removed or len(log.topics) != 3 or log.topics[0] != TRANSFER_TOPIC:
            continue
        sender, recipient = _topic_address(log.topics[1]), _topic_address(log.topics[2])
        if sender is None or recipient is None or len(log.data) != 32:
            continue
        transfers.append(
            Transfer(
                token=log.address,
                sender=sender,
                recipient=recipient,
                value=int.from_bytes(log.data, "big"),
                log_index=log.log_index,
            )
        )
    return transfers


# -- fees ------------------------------------------------------------------------------

REPLACEMENT_BUMP = (9, 8)
"""A replacement raises both fee caps by at least 1/8 (12.5%): geth refuses under
10%; other pools ask a little more."""


class FeeCapExceeded(Exception):
    """The fees the chain asks for now pass the configured cap: do not sign."""


@dataclass(frozen=True)
class Fees:
    """EIP-1559 fee caps, in wei per gas."""

    max_fee_per_gas: int
    max_priority_fee_per_gas: int

    def __post_init__(self) -> None:
        if self.max_priority_fee_per_gas < 0 or self.max_fee_per_gas < 0:
            raise ValueError(f"fees are not negative: {self}")
        if self.max_priority_fee_per_gas > self.max_fee_per_gas:
            raise ValueError(
                f"the priority fee {self.max_priority_fee_per_gas} is above the max fee "
                f"{self.max_fee_per_gas}"
            )


def _check_caps(max_fee_cap: int, priority_fee_cap: int) -> None:
    if max_fee_cap <= 0 or priority_fee_cap < 0:
        raise ValueError(f"fee caps are positive: max {max_fee_cap}, priority {priority_fee_cap}")


async def suggest_fees(
    rpc: EvmRpc, *, max_fee_cap: int, priority_fee_cap: int, max_age_s: float = 0.0
) -> Fees:
    """Fees for a new transaction: priority = min(node's suggestion, cap), max =
    min(2 * base fee + priority, cap). FeeCapExceeded when the latest base fee
    alone is above ``max_fee_cap`` (a transaction signed then would sit unmined).
    The node's base fee and suggestion are read at most once per ``max_age_s``
    (EvmRpc.recent): the nodes of one chain prepared together read them once."""
    _check_caps(max_fee_cap, priority_fee_cap)
    base, suggested = await rpc.recent("fees", max_age_s, functools.partial(_fee_quote, rpc))
    if base > max_fee_cap:
        raise FeeCapExceeded(
            f"the base fee {base} wei/gas on {rpc.display_url} is above the max fee cap "
            f"{max_fee_cap}: nothing is signed until it falls or the cap is raised"
        )
    priority = min(suggested, priority_fee_cap)
    max_fee = min(2 * base + priority, max_fee_cap)
    return Fees(max_fee_per_gas=max_fee, max_priority_fee_per_gas=min(priority, max_fee))


async def _fee_quote(rpc: EvmRpc) -> tuple[int, int]:
    """The latest base fee and the node's suggested priority fee, in wei/gas,
    asked together (one JSON-RPC batch)."""
    base, suggested = await asyncio.gather(rpc.base_fee(), rpc.max_priority_fee())
    return base, suggested


def _raised(value: int) -> int:
    num, den = REPLACEMENT_BUMP
    return max(value + 1, math.ceil(value * num / den))


def bump(
    fees: Fees, *, max_fee_cap: int, priority_fee_cap: int, at_least: Fees | None = None
) -> Fees:
    """A replacement's fees: both caps raised by REPLACEMENT_BUMP (12.5%, rounded
    up, at least 1 wei), and to ``at_least`` (fresh suggest_fees) where that is
    higher. FeeCapExceeded when either would pass its cap: a smaller raise would
    be refused as underpriced, so none is offered."""
    _check_caps(max_fee_cap, priority_fee_cap)
    priority = _raised(fees.max_priority_fee_per_gas)
    max_fee = _raised(fees.max_fee_per_gas)
    if at_least is not None:
        priority = max(priority, at_least.max_priority_fee_per_gas)
        max_fee = max(max_fee, at_least.max_fee_per_gas)
    if max_fee > max_fee_cap or priority > priority_fee_cap:
        raise FeeCapExceeded(
            f"a replacement needs max fee {max_fee} and priority fee {priority} wei/gas, "
            f"above the caps {max_fee_cap} / {priority_fee_cap}"
        )
    return Fees(max_fee_per_gas=max_fee, max_priority_fee_per_gas=priority)


# -- transactions ----------------------------------------------------------------------

SELF_TRANSFER_GAS = 21_000


def eip1559_transaction(
    chain_id: int, nonce: int, to: str, value: int, data: bytes, gas: int, fees: Fees
) -> dict[str, Any]:
    """An EIP-1559 transaction calling ``to`` with ``data`` and ``value`` wei, as
    eth-account (Signer.sign_transaction) takes it: the one builder of every
    transaction the runner signs (transfers, burns, mints, CCIP sends)."""
    if chain_id <= 0 or nonce < 0 or gas <= 0 or value < 0:
        raise ValueError(
            f"a transaction needs a chain id > 0, a nonce >= 0, gas > 0 and a value >= 0: "
            f"chain {chain_id}, nonce {nonce}, gas {gas}, value {value}"
        )
    return {
        "type": 2,
        "chainId": chain_id,
        "nonce": nonce,
        "to": to_checksum_address(normalize_address(to)),
        "value": value,
        "data": "0x" + data.hex(),
        "gas": gas,
        "maxFeePerGas": fees.max_fee_per_gas,
        "maxPriorityFeePerGas": fees.max_priority_fee_per_gas,
        "accessList": [],
    }


def build_transfer(
    chain_id: int, token: str, to: str, amount: int, nonce: int, fees: Fees, gas: int
) -> dict[str, Any]:
    """An EIP-1559 transaction calling ``token.transfer(to, amount)``, as
    eth-account (Signer.sign_transaction) takes it."""
    return eip1559_transaction(chain_id, nonce, token, 0, transfer_calldata(to, amount), gas, fees)


def build_call(
    chain_id: int, to: str, data: bytes, nonce: int, fees: Fees, gas: int
) -> dict[str, Any]:
    """An EIP-1559 transaction calling contract ``to`` with ``data`` (no value)."""
    return eip1559_transaction(chain_id, nonce, to, 0, data, gas, fees)


def self_transfer(chain_id: int, address: str, nonce: int, fees: Fees) -> dict[str, Any]:
    """A zero-value transfer from ``address`` to itself at ``nonce``: closes a
    nonce that nothing else will use, so later transactions are not stuck."""
    return eip1559_transaction(chain_id, nonce, address, 0, b"", SELF_TRANSFER_GAS, fees)


async def estimate_gas(
    rpc: EvmRpc, sender: str, to: str, data: bytes, *, value: int = 0, headroom: float = 1.25
) -> int:
    """The node's gas estimate for the call, times ``headroom`` (rounded up): a
    transfer to an account holding none of the token costs more than one to a
    holder, and state moves between estimate and inclusion. RpcError(REVERTED)
    when the call would revert (an insufficient token balance, say)."""
    if headroom < 1:
        raise ValueError(f"headroom is at least 1: {headroom}")
    estimate = await rpc.estimate_gas(normalize_address(sender), normalize_address(to), data, value)
    return math.ceil(estimate * headroom)


async def sign(signer: Signer, tx: dict[str, Any]) -> SignedTransaction:
    """Sign through the Signer interface (a KMS or HSM signer can replace the local one)."""
    return await signer.sign_transaction(tx)


@dataclass(frozen=True)
class DecodedTransaction(TransactionCall):
    """A signed raw EIP-1559 transaction read back: what it does and who signed
    it (TransactionCall's fields), on which chain and at what fees."""

    chain_id: int
    fees: Fees

    def to_tx(
        self, *, nonce: int | None = None, fees: Fees | None = None, gas: int | None = None
    ) -> dict[str, Any]:
        """The same transaction as a dict to sign again: at another ``nonce``
        (another dispatcher took this one), with other ``fees`` (a replacement)
        or another ``gas`` limit."""
        if self.to is None:
            raise ValueError("a contract creation is not re-signed here")
        return eip1559_transaction(
            self.chain_id,
            self.nonce if nonce is None else nonce,
            self.to,
            self.value,
            self.data,
            self.gas if gas is None else gas,
            self.fees if fees is None else fees,
        )


def decode_raw(raw: bytes) -> DecodedTransaction:
    """Read a signed EIP-1559 raw transaction (ValueError when it is not one): to
    check a recorded raw transaction against its hash, its nonce and its sender."""
    from eth_account import Account
    from eth_account.typed_transactions.typed_transaction import TypedTransaction

    if not raw or raw[0] != 2:
        raise ValueError("not an EIP-1559 (type 2) raw transaction")
    try:
        fields = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
        sender = Account.recover_transaction(raw)
    except Exception as exc:  # rlp and eth-keys raise their own types
        raise ValueError(f"not a signed EIP-1559 transaction: {type(exc).__name__}") from None
    to = bytes(fields["to"])
    return DecodedTransaction(
        tx_hash=tx_hash_of(raw),
        chain_id=int(fields["chainId"]),
        nonce=int(fields["nonce"]),
        sender=normalize_address(str(sender)),
        to=None if not to else "0x" + to.hex(),
        value=int(fields["value"]),
        data=bytes(fields["data"]),
        gas=int(fields["gas"]),
        fees=Fees(
            max_fee_per_gas=int(fields["maxFeePerGas"]),
            max_priority_fee_per_gas=int(fields["maxPriorityFeePerGas"]),
        ),
    )
