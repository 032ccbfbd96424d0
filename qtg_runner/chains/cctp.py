"""The CCTP v2 local double on the local chains: MessageTransmitterV2 and
TokenMessengerV2 (contracts/, the token minter's role folded into the
messenger) deployed and wired on every chain by `start_chains`, so `qtg chains
up` and the test fixtures get the same.

On each chain: the transmitter with the chain's CCTP domain, the messenger
with the deployer as its fee recipient, the messenger the transmitter's only
sender and a minter of the chain's MockUSDC (burn limit 10M USDC a message,
as Circle's), the two local attesters enabled with a signature threshold of 2;
then every messenger knows every other chain's messenger and links its USDC to
theirs. The addresses go into the chain's ``contracts`` in state.json
(``MessageTransmitterV2``, ``TokenMessengerV2``); the domain is the
transmitter's ``localDomain()`` (``read_domain``) and ``cctp_domain`` picks it.

The attesters are fresh keys in the chains' encrypted keystore beside the
treasury's (``keystore/cctp-attester-N.json``, the same password file):
``load_attesters`` decrypts them for the attestation service
(qtg_world.iris). No key is logged or shown: an ``Attester`` prints its
address only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from eth_keys.datatypes import PrivateKey

from qtg_world.chains.keys import LocalKey, ensure_treasury_keys, read_password
from qtg_world.chains.local import (
    ChainError,
    RunningChain,
    keystore_dir,
    load_artifact,
)

__all__ = [
    "ATTESTER_KEYS",
    "BURN_LIMIT_PER_MESSAGE",
    "CCTP_CONTRACTS",
    "FINALITY_FAST",
    "FINALITY_STANDARD",
    "LOCAL_CCTP_DOMAINS",
    "SIGNATURE_THRESHOLD",
    "Attester",
    "BurnBody",
    "CctpMessage",
    "address_to_bytes32",
    "attest",
    "cctp_domain",
    "deploy_cctp",
    "ensure_attester_keys",
    "load_attesters",
    "read_domain",
]

ATTESTER_KEYS = ("cctp-attester-1", "cctp-attester-2")
"""The keystore names of the local attesters the transmitters trust."""

SIGNATURE_THRESHOLD = 2
"""Signatures an attestation needs (every local attester)."""

FINALITY_FAST = 1000
FINALITY_STANDARD = 2000

BURN_LIMIT_PER_MESSAGE = 10_000_000 * 10**6
"""The most one burn message may carry: 10M USDC (6 decimals), as Circle's limit."""

CCTP_CONTRACTS = ("MessageTransmitterV2", "TokenMessengerV2")

LOCAL_CCTP_DOMAINS: dict[str, int] = {
    "local-a": 100,
    "local-b": 101,
    "test-a": 110,
    "test-b": 111,
}
"""The CCTP domains of the known local chains: far from Circle's real domains
(0-14 today) so a local message is never mistaken for a real one."""


def cctp_domain(chain: RunningChain) -> int:
    """The CCTP domain ``chain`` is deployed with: its key's in LOCAL_CCTP_DOMAINS,
    else its chain id (unique among the chains, and fits a uint32)."""
    return LOCAL_CCTP_DOMAINS.get(chain.key, chain.chain_id)


class Attester:
    """One local attester's key in this process's memory: signs a raw digest
    (no prefix) as the transmitter verifies it. Prints its address only."""

    __slots__ = ("__key", "_address")

    def __init__(self, key: bytes) -> None:
        self.__key = PrivateKey(bytes(key))
        self._address = str(self.__key.public_key.to_checksum_address())

    @property
    def address(self) -> str:
        return self._address

    def sign_digest(self, digest: bytes) -> bytes:
        """65 bytes r ‖ s ‖ v (v 27 or 28, s in the lower half) over ``digest``."""
        if len(digest) != 32:
            raise ValueError("a digest is 32 bytes")
        sig = self.__key.sign_msg_hash(digest)
        r, s, v = int(sig.r), int(sig.s), int(sig.v)
        return r.to_bytes(32, "big") + s.to_bytes(32, "big") + bytes([v + 27])

    def __repr__(self) -> str:
        return f"Attester(address={self._address!r})"

    __str__ = __repr__

    def __reduce__(self) -> NoReturn:
        raise TypeError(f"{self!r} is not pickled or copied: its key stays in this process")


MESSAGE_HEADER_LENGTH = 148
BURN_BODY_LENGTH = 228


def address_to_bytes32(address: str) -> bytes:
    """An EVM address left-padded to the 32 bytes CCTP messages carry."""
    raw = bytes.fromhex(address.removeprefix("0x"))
    if len(raw) != 20:
        raise ValueError(f"{address!r} is not a 20-byte address")
    return bytes(12) + raw


def _u(raw: bytes, start: int, size: int) -> int:
    return int.from_bytes(raw[start : start + size], "big")


@dataclass(frozen=True)
class CctpMessage:
    """A CCTP v2 message (the layout MessageTransmitterV2 sends and receives)."""

    version: int
    source_domain: int
    destination_domain: int
    nonce: bytes
    sender: bytes
    recipient: bytes
    destination_caller: bytes
    min_finality_threshold: int
    finality_threshold_executed: int
    body: bytes

    @classmethod
    def decode(cls, raw: bytes) -> CctpMessage:
        if len(raw) < MESSAGE_HEADER_LENGTH:
            raise ValueError(f"a CCTP v2 message is at least 148 bytes, not {len(raw)}")
        return cls(
            version=_u(raw, 0, 4),
            source_domain=_u(raw, 4, 4),
            destination_domain=_u(raw, 8, 4),
            nonce=raw[12:44],
            sender=raw[44:76],
            recipient=raw[76:108],
            destination_caller=raw[108:140],
            min_finality_threshold=_u(raw, 140, 4),
            finality_threshold_executed=_u(raw, 144, 4),
            body=raw[148:],
        )

    def encode(self) -> bytes:
        return b"".join(
            (
                self.version.to_bytes(4, "big"),
                self.source_domain.to_bytes(4, "big"),
                self.destination_domain.to_bytes(4, "big"),
                self.nonce,
                self.sender,
                self.recipient,
                self.destination_caller,
                self.min_finality_threshold.to_bytes(4, "big"),
                self.finality_threshold_executed.to_bytes(4, "big"),
                self.body,
            )
        )


@dataclass(frozen=True)
class BurnBody:
    """The body of a v2 burn message (TokenMessengerV2's)."""

    version: int
    burn_token: bytes
    mint_recipient: bytes
    amount: int
    message_sender: bytes
    max_fee: int
    fee_executed: int
    expiration_block: int
    hook_data: bytes

    @classmethod
    def decode(cls, raw: bytes) -> BurnBody:
        if len(raw) < BURN_BODY_LENGTH:
            raise ValueError(f"a v2 burn body is at least 228 bytes, not {len(raw)}")
        return cls(
            version=_u(raw, 0, 4),
            burn_token=raw[4:36],
            mint_recipient=raw[36:68],
            amount=_u(raw, 68, 32),
            message_sender=raw[100:132],
            max_fee=_u(raw, 132, 32),
            fee_executed=_u(raw, 164, 32),
            expiration_block=_u(raw, 196, 32),
            hook_data=raw[228:],
        )

    def encode(self) -> bytes:
        return b"".join(
            (
                self.version.to_bytes(4, "big"),
                self.burn_token,
                self.mint_recipient,
                self.amount.to_bytes(32, "big"),
                self.message_sender,
                self.max_fee.to_bytes(32, "big"),
                self.fee_executed.to_bytes(32, "big"),
                self.expiration_block.to_bytes(32, "big"),
                self.hook_data,
            )
        )


def attest(message: bytes, attesters: Sequence[Attester]) -> bytes:
    """The attestation of ``message``: each attester's signature over
    keccak256(message), concatenated in ascending signer address order."""
    from eth_utils.crypto import keccak

    digest = keccak(message)
    ordered = sorted(attesters, key=lambda a: int(a.address, 16))
    return b"".join(a.sign_digest(digest) for a in ordered)


def ensure_attester_keys(state_dir: Path, kdf_iterations: int | None = None) -> list[LocalKey]:
    """The local attesters' keystore files (made where missing, reused where there)."""
    return ensure_treasury_keys(state_dir, ATTESTER_KEYS, kdf_iterations=kdf_iterations)


def load_attesters(state_dir: Path) -> list[Attester]:
    """The local attesters of ``state_dir``, decrypted, in ascending address order."""
    from eth_account import Account  # imported here: see signers.local

    password = read_password(state_dir)
    attesters = []
    for name in ATTESTER_KEYS:
        path = keystore_dir(state_dir) / f"{name}.json"
        try:
            key = Account.decrypt(json.loads(path.read_text()), password)
        except (OSError, ValueError) as exc:
            raise ChainError(
                f"the attester keystore {path} is missing or unreadable ({type(exc).__name__}): "
                "`qtg chains up` makes it"
            ) from None
        attesters.append(Attester(bytes(key)))
        del key
    return sorted(attesters, key=lambda a: int(a.address, 16))


def read_domain(chain: RunningChain) -> int:
    """The ``localDomain()`` of ``chain``'s MessageTransmitterV2."""
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    transmitter = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MessageTransmitterV2"]),
        abi=load_artifact("MessageTransmitterV2")["abi"],
    )
    return int(transmitter.functions.localDomain().call())


def _wait_all(
    w3s: Sequence[Any], chains: Sequence[RunningChain], sent: Sequence[Any], what: str
) -> list[Any]:
    receipts = []
    for w3, chain, tx_hash in zip(w3s, chains, sent, strict=True):
        receipt = w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
        )
        if receipt["status"] != 1:
            raise ChainError(f"{what} on {chain.key} failed: {receipt}")
        receipts.append(receipt)
    return receipts


def deploy_cctp(
    state_dir: Path, chains: Sequence[RunningChain], kdf_iterations: int | None = None
) -> None:
    """Deploy and wire the CCTP double on ``chains`` (each already has MockUSDC):
    the transactions of each round go out on every chain before any is awaited,
    so the whole takes a few blocks. The addresses go into each ``chain.contracts``."""
    from web3 import HTTPProvider, Web3

    attesters = ensure_attester_keys(state_dir, kdf_iterations=kdf_iterations)
    w3s = [Web3(HTTPProvider(c.rpc_url, request_kwargs={"timeout": 10})) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]
    mt_art = load_artifact("MessageTransmitterV2")
    tm_art = load_artifact("TokenMessengerV2")
    usdc_abi = load_artifact("MockUSDC")["abi"]

    sent = [
        w3.eth.contract(abi=mt_art["abi"], bytecode=mt_art["bytecode"])
        .constructor(cctp_domain(c))
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, r in zip(
        chains, _wait_all(w3s, chains, sent, "deploying MessageTransmitterV2"), strict=True
    ):
        chain.contracts["MessageTransmitterV2"] = str(r["contractAddress"])
    sent = [
        w3.eth.contract(abi=tm_art["abi"], bytecode=tm_art["bytecode"])
        .constructor(Web3.to_checksum_address(c.contracts["MessageTransmitterV2"]), owner)
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, r in zip(
        chains, _wait_all(w3s, chains, sent, "deploying TokenMessengerV2"), strict=True
    ):
        chain.contracts["TokenMessengerV2"] = str(r["contractAddress"])

    # the wiring: every transaction of every chain sent, then each awaited
    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        # a set gas: estimating would run each call before the ones it follows are mined
        tx: Any = {"from": owner, "gas": 500_000}
        mt = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["MessageTransmitterV2"]),
            abi=mt_art["abi"],
        )
        tm = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["TokenMessengerV2"]),
            abi=tm_art["abi"],
        )
        usdc_address = Web3.to_checksum_address(chain.contracts["MockUSDC"])
        usdc = w3.eth.contract(address=usdc_address, abi=usdc_abi)
        calls = [
            mt.functions.setTokenMessenger(tm.address),
            *(mt.functions.enableAttester(Web3.to_checksum_address(a.address)) for a in attesters),
            mt.functions.setSignatureThreshold(SIGNATURE_THRESHOLD),
            usdc.functions.configureMinter(tm.address, 2**256 - 1),
            tm.functions.setMaxBurnAmountPerMessage(usdc_address, BURN_LIMIT_PER_MESSAGE),
        ]
        for other in chains:
            if other is chain:
                continue
            domain = cctp_domain(other)
            calls.append(
                tm.functions.addRemoteTokenMessenger(
                    domain, address_to_bytes32(other.contracts["TokenMessengerV2"])
                )
            )
            calls.append(
                tm.functions.linkTokenPair(
                    usdc_address, domain, address_to_bytes32(other.contracts["MockUSDC"])
                )
            )
        pending.extend((w3, chain, call.transact(tx)) for call in calls)
    _wait_all(
        [p[0] for p in pending], [p[1] for p in pending], [p[2] for p in pending], "wiring CCTP"
    )
