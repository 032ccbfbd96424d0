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

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from eth_keys.datatypes import PrivateKey

from qtg_runner.chains.cctp import address_to_bytes32
from qtg_runner.chains.cctp_allowance import set_burn_allowance
from qtg_runner.chains.errors import ChainError
from qtg_runner.chains.evm import allowance
from qtg_runner.chains.evm_rpc import EvmRpc
from qtg_runner.signers import Signer, load_async
from qtg_world.chains.keys import LocalKey, ensure_treasury_keys, read_password
from qtg_world.chains.local import (
    RunningChain,
    keystore_dir,
    load_artifact,
    password_file,
    wait_all,
)

__all__ = [
    "ATTESTER_KEYS",
    "BURN_LIMIT_PER_MESSAGE",
    "CCTP_CONTRACTS",
    "LOCAL_BURN_ALLOWANCE",
    "LOCAL_CCTP_DOMAINS",
    "SIGNATURE_THRESHOLD",
    "Attester",
    "allow_local_burns",
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
        chains, wait_all(w3s, chains, sent, "deploying MessageTransmitterV2"), strict=True
    ):
        chain.contracts["MessageTransmitterV2"] = str(r["contractAddress"])
    sent = [
        w3.eth.contract(abi=tm_art["abi"], bytecode=tm_art["bytecode"])
        .constructor(Web3.to_checksum_address(c.contracts["MessageTransmitterV2"]), owner)
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, r in zip(
        chains, wait_all(w3s, chains, sent, "deploying TokenMessengerV2"), strict=True
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
    wait_all(
        [p[0] for p in pending], [p[1] for p in pending], [p[2] for p in pending], "wiring CCTP"
    )


LOCAL_BURN_ALLOWANCE = 1_000_000 * 10**6
"""The local treasury accounts' allowance to TokenMessengerV2: their USDC funding."""


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
