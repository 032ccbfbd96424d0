"""LayerZero v2 on the local chains: LayerZero's own ``EndpointV2`` on every
chain with LayerZero's ``SimpleMessageLib`` as its send and receive library on
every path (both from the npm package @layerzerolabs/lz-evm-protocol-v2, their
bytecode and ABI read from node_modules when they are deployed: nothing of
theirs is copied here), and what LayerZero's off-chain workers do with a
packet: the packet an endpoint emits (``PacketSent``), the executor options it
carries, its verification (``SimpleMessageLib.validatePacket``, which calls
the destination endpoint's ``verify``: the DVN's part) and its execution
(``EndpointV2.lzReceive``, then ``lzCompose`` for each compose the receiver
queued: the executor's part).

Deployed by qtg_world.chains.stargate before the Stargate contracts, on the
chain's LayerZero endpoint id. On each chain: the endpoint owned by the
deployer; the library registered and made the default send and receive
library to and from every other chain, its message fee ``MESSAGE_FEE`` (the
native fee of every message it sends), and the relayer's account (anvil's
unlocked account) the only one that may verify a packet with it
(``setWhitelistCaller``): no other account can make a destination endpoint
accept a message. Execution is permissionless, as on LayerZero. The addresses
go into the chain's ``contracts`` (``EndpointV2``, ``SimpleMessageLib``).

The world's relayer (qtg_world.stargate) reads the packets and delivers
them; ``deliver_now`` does the same at once, waiting for each step (the deploy
step uses it for the credit messages that open the Stargate paths).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eth_utils.crypto import keccak

from qtg_runner.chains.errors import ChainError
from qtg_world.chains.local import REPO_ROOT, RunningChain

__all__ = [
    "COMPOSE_SENT_TOPIC",
    "ENDPOINT_ARTIFACT",
    "LAYERZERO_CONTRACTS",
    "MESSAGE_FEE",
    "PACKET_SENT_TOPIC",
    "SIMPLE_LIB_ARTIFACT",
    "ComposeMessage",
    "ExecutorOptions",
    "Packet",
    "address_word",
    "compose_call",
    "compose_messages",
    "deliver_now",
    "delivered",
    "deploy_endpoints",
    "endpoint_contract",
    "execute_now",
    "lib_contract",
    "npm_artifact",
    "packets_sent",
    "receive_call",
    "send_estimated",
    "verified",
    "verify_call",
    "wait_mined",
]

NODE_MODULES = REPO_ROOT / "node_modules"

ENDPOINT_ARTIFACT = (
    "@layerzerolabs/lz-evm-protocol-v2",
    "artifacts/contracts/EndpointV2.sol/EndpointV2.json",
)
SIMPLE_LIB_ARTIFACT = (
    "@layerzerolabs/lz-evm-protocol-v2",
    "artifacts/contracts/messagelib/SimpleMessageLib.sol/SimpleMessageLib.json",
)

LAYERZERO_CONTRACTS = ("EndpointV2", "SimpleMessageLib")

MESSAGE_FEE = 10**14
"""The library's native fee for any message (0.0001 ETH): what a taxi's
``quoteSend`` and a bus's ``quoteDriveBus`` come to."""


def _topic(signature: str) -> str:
    return "0x" + keccak(text=signature).hex()


PACKET_SENT_TOPIC = _topic("PacketSent(bytes,bytes,address)")
COMPOSE_SENT_TOPIC = _topic("ComposeSent(address,address,bytes32,uint16,bytes)")

_ARTIFACTS: dict[tuple[str, str], dict[str, Any]] = {}


def npm_artifact(package: str, path: str) -> dict[str, Any]:
    """A Hardhat artifact (abi, bytecode) of an npm package in the repository's
    node_modules, read once; ChainError where `make install` has not put it there."""
    key = (package, path)
    if key not in _ARTIFACTS:
        file = NODE_MODULES / package / path
        try:
            raw = json.loads(file.read_text())
        except (OSError, ValueError) as exc:
            raise ChainError(
                f"{package}'s artifact {path} is missing from node_modules ({exc}): "
                "`make install` installs it (npm ci)"
            ) from exc
        if not str(raw.get("bytecode", "0x"))[2:] or raw.get("linkReferences"):
            raise ChainError(f"{file} has no deployable bytecode")
        _ARTIFACTS[key] = {"abi": raw["abi"], "bytecode": raw["bytecode"]}
    return _ARTIFACTS[key]


def address_word(address: str) -> bytes:
    """An address as LayerZero's bytes32 (left-padded)."""
    return bytes(12) + bytes.fromhex(address[2:].lower())


def _w3(chain: RunningChain) -> Any:
    from web3 import HTTPProvider, Web3

    return Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))


def wait_mined(w3: Any, chain: RunningChain, tx_hash: Any, what: str) -> Any:
    """The receipt of ``tx_hash``; ChainError when it reverted."""
    receipt = w3.eth.wait_for_transaction_receipt(
        tx_hash, timeout=max(10.0, chain.block_time * 5.0), poll_latency=0.1
    )
    if receipt["status"] != 1:
        raise ChainError(f"{what} on {chain.key} failed: {receipt}")
    return receipt


def deploy_endpoints(
    chains: Sequence[RunningChain], eids: Mapping[str, int], verifier: Mapping[str, str]
) -> None:
    """An EndpointV2 with endpoint id ``eids[chain.key]`` and a SimpleMessageLib
    on each of ``chains``, wired as the module says, ``verifier[chain.key]`` the
    only account that may verify. Owned by the chain's deployer."""
    from web3 import Web3

    endpoint_art = npm_artifact(*ENDPOINT_ARTIFACT)
    lib_art = npm_artifact(*SIMPLE_LIB_ARTIFACT)
    w3s = [_w3(c) for c in chains]
    owners = [c.deployer or w3.eth.accounts[0] for c, w3 in zip(chains, w3s, strict=True)]

    sent = [
        w3.eth.contract(abi=endpoint_art["abi"], bytecode=endpoint_art["bytecode"])
        .constructor(eids[c.key], owner)
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, w3, tx_hash in zip(chains, w3s, sent, strict=True):
        receipt = wait_mined(w3, chain, tx_hash, "deploying LayerZero's EndpointV2")
        chain.contracts["EndpointV2"] = str(receipt["contractAddress"])
    sent = [
        w3.eth.contract(abi=lib_art["abi"], bytecode=lib_art["bytecode"])
        .constructor(Web3.to_checksum_address(c.contracts["EndpointV2"]), owner)
        .transact({"from": owner})
        for c, w3, owner in zip(chains, w3s, owners, strict=True)
    ]
    for chain, w3, tx_hash in zip(chains, w3s, sent, strict=True):
        receipt = wait_mined(w3, chain, tx_hash, "deploying LayerZero's SimpleMessageLib")
        chain.contracts["SimpleMessageLib"] = str(receipt["contractAddress"])

    pending: list[tuple[Any, RunningChain, Any]] = []
    for chain, w3, owner in zip(chains, w3s, owners, strict=True):
        endpoint = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["EndpointV2"]),
            abi=endpoint_art["abi"],
        )
        lib = w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["SimpleMessageLib"]),
            abi=lib_art["abi"],
        )
        calls = [
            endpoint.functions.registerLibrary(lib.address),
            lib.functions.setMessagingFee(MESSAGE_FEE, 0),
            lib.functions.setWhitelistCaller(Web3.to_checksum_address(verifier[chain.key])),
        ]
        for other in chains:
            if other is not chain:
                eid = eids[other.key]
                calls.append(endpoint.functions.setDefaultSendLibrary(eid, lib.address))
                calls.append(endpoint.functions.setDefaultReceiveLibrary(eid, lib.address, 0))
        # one after another from one account: each mined in its order
        for call in calls:
            tx_hash = call.transact({"from": owner, "gas": 500_000})
            pending.append((w3, chain, tx_hash))
    for w3, chain, tx_hash in pending:
        wait_mined(w3, chain, tx_hash, "wiring LayerZero's endpoint")


# -- packets --------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutorOptions:
    """What a packet's type-3 options ask of LayerZero's executor (worker 1):
    the gas and value of ``lzReceive``, and per compose index those of ``lzCompose``."""

    lz_receive_gas: int = 0
    lz_receive_value: int = 0
    compose: dict[int, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def decode(cls, options: bytes) -> ExecutorOptions:
        """Options ``0x0003`` then [worker id u8][size u16][type u8][option]...;
        anything else (legacy types 1 and 2) asks for nothing here."""
        gas = value = 0
        compose: dict[int, tuple[int, int]] = {}
        if len(options) < 2 or int.from_bytes(options[:2], "big") != 3:
            return cls()
        cursor = 2
        while cursor + 3 <= len(options):
            worker = options[cursor]
            size = int.from_bytes(options[cursor + 1 : cursor + 3], "big")
            body = options[cursor + 3 : cursor + 3 + size]
            cursor += 3 + size
            if worker != 1 or not body:
                continue  # a DVN's option (worker 2), or an empty one
            kind, option = body[0], body[1:]
            if kind == 1 and len(option) in (16, 32):  # lzReceive: gas, value?
                gas += int.from_bytes(option[:16], "big")
                value += int.from_bytes(option[16:], "big") if len(option) == 32 else 0
            elif kind == 3 and len(option) in (18, 34):  # lzCompose: index, gas, value?
                index = int.from_bytes(option[:2], "big")
                c_gas, c_value = compose.get(index, (0, 0))
                c_gas += int.from_bytes(option[2:18], "big")
                c_value += int.from_bytes(option[18:], "big") if len(option) == 34 else 0
                compose[index] = (c_gas, c_value)
        return cls(gas, value, compose)


@dataclass(frozen=True)
class Packet:
    """A packet as an endpoint's ``PacketSent`` carries it (PacketV1Codec):
    version, nonce, source eid, sender, destination eid, receiver, guid, message."""

    encoded: bytes
    options: bytes
    nonce: int
    src_eid: int
    sender: bytes
    dst_eid: int
    receiver: str
    guid: bytes
    message: bytes
    block_number: int = 0
    tx_hash: str = ""

    @classmethod
    def decode(
        cls, encoded: bytes, options: bytes = b"", block_number: int = 0, tx_hash: str = ""
    ) -> Packet:
        if len(encoded) < 113 or encoded[0] != 1:
            raise ValueError(f"not a v1 LayerZero packet ({len(encoded)} bytes)")
        from web3 import Web3

        return cls(
            encoded=encoded,
            options=options,
            nonce=int.from_bytes(encoded[1:9], "big"),
            src_eid=int.from_bytes(encoded[9:13], "big"),
            sender=encoded[13:45],
            dst_eid=int.from_bytes(encoded[45:49], "big"),
            receiver=Web3.to_checksum_address(encoded[49 + 12 : 81]),
            guid=encoded[81:113],
            message=encoded[113:],
            block_number=block_number,
            tx_hash=tx_hash,
        )

    @property
    def origin(self) -> tuple[int, bytes, int]:
        """LayerZero's ``Origin{srcEid, sender, nonce}``."""
        return (self.src_eid, self.sender, self.nonce)

    @property
    def path(self) -> tuple[int, bytes, int, str]:
        """The channel its nonce counts on: (source eid, sender, destination eid, receiver)."""
        return (self.src_eid, self.sender, self.dst_eid, self.receiver)

    @property
    def executor(self) -> ExecutorOptions:
        return ExecutorOptions.decode(self.options)

    @property
    def guid_hex(self) -> str:
        return "0x" + self.guid.hex()


def packets_sent(w3: Any, endpoint: str, from_block: int, to_block: int) -> list[Packet]:
    """The packets ``endpoint`` sent in the blocks from ``from_block`` to ``to_block``."""
    from eth_abi.abi import decode

    logs = w3.eth.get_logs(
        {
            "address": endpoint,
            "fromBlock": from_block,
            "toBlock": to_block,
            "topics": [PACKET_SENT_TOPIC],
        }
    )
    out = []
    for entry in logs:
        encoded, options, _lib = decode(["bytes", "bytes", "address"], bytes(entry["data"]))
        out.append(
            Packet.decode(
                bytes(encoded),
                bytes(options),
                int(entry["blockNumber"]),
                "0x" + bytes(entry["transactionHash"]).hex(),
            )
        )
    return out


@dataclass(frozen=True)
class ComposeMessage:
    """A compose an OApp queued on its endpoint (``ComposeSent``) for LayerZero's executor."""

    sender: str
    to: str
    guid: bytes
    index: int
    message: bytes


def compose_messages(receipt: Any, endpoint: str) -> list[ComposeMessage]:
    """The composes queued on ``endpoint`` in a transaction (an lzReceive's receipt)."""
    from eth_abi.abi import decode
    from web3 import Web3

    out = []
    for entry in receipt["logs"]:
        topics = ["0x" + bytes(t).hex() for t in entry["topics"]]
        if entry["address"].lower() != endpoint.lower() or topics[:1] != [COMPOSE_SENT_TOPIC]:
            continue
        sender, to, guid, index, message = decode(
            ["address", "address", "bytes32", "uint16", "bytes"], bytes(entry["data"])
        )
        out.append(
            ComposeMessage(
                Web3.to_checksum_address(sender),
                Web3.to_checksum_address(to),
                bytes(guid),
                int(index),
                bytes(message),
            )
        )
    return out


# -- delivery ---------------------------------------------------------------------------


def endpoint_contract(w3: Any, chain: RunningChain) -> Any:
    from web3 import Web3

    return w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["EndpointV2"]),
        abi=npm_artifact(*ENDPOINT_ARTIFACT)["abi"],
    )


def lib_contract(w3: Any, chain: RunningChain) -> Any:
    from web3 import Web3

    return w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["SimpleMessageLib"]),
        abi=npm_artifact(*SIMPLE_LIB_ARTIFACT)["abi"],
    )


def delivered(endpoint: Any, packet: Packet) -> bool:
    """Whether the destination ``endpoint`` executed ``packet`` already (its
    nonce is cleared: no longer verifiable)."""
    return not bool(endpoint.functions.verifiable(packet.origin, packet.receiver).call())


def verified(endpoint: Any, packet: Packet) -> bool:
    """Whether ``packet``'s payload hash waits on the destination ``endpoint``."""
    stored = endpoint.functions.inboundPayloadHash(
        packet.receiver, packet.src_eid, packet.sender, packet.nonce
    ).call()
    return bytes(stored) != bytes(32)


def verify_call(lib: Any, packet: Packet) -> Any:
    """The DVN's step: the receive library verifies the packet on its endpoint."""
    return lib.functions.validatePacket(packet.encoded)


def receive_call(endpoint: Any, packet: Packet) -> Any:
    """The executor's step: the endpoint hands the verified message to its receiver."""
    return endpoint.functions.lzReceive(
        packet.origin, packet.receiver, packet.guid, packet.message, b""
    )


def compose_call(endpoint: Any, compose: ComposeMessage) -> Any:
    return endpoint.functions.lzCompose(
        compose.sender, compose.to, compose.guid, compose.index, compose.message, b""
    )


GAS_HEADROOM = 1.3


def send_estimated(call: Any, sender: str, value: int = 0) -> Any:
    """``call`` sent from ``sender`` with ``value`` and the gas it takes (with
    headroom): a call that would revert raises here, before anything is sent."""
    tx: Any = {"from": sender, "value": value}
    gas = int(call.estimate_gas(tx) * GAS_HEADROOM)
    return call.transact(tx | {"gas": gas})


def deliver_now(
    packet: Packet,
    chain: RunningChain,
    sender: str,
    log: Callable[[str], None] = lambda _m: None,
) -> Any:
    """Verify ``packet`` on its destination ``chain`` and execute it there, from
    ``sender`` (the verifier the library trusts), waiting for each step; then
    each compose it queued. The lzReceive receipt, or None when it was executed
    before."""
    w3 = _w3(chain)
    endpoint, lib = endpoint_contract(w3, chain), lib_contract(w3, chain)
    if delivered(endpoint, packet):
        return None
    if not verified(endpoint, packet):
        wait_mined(w3, chain, verify_call(lib, packet).transact({"from": sender}), "verifying")
    receipt = execute_now(
        w3, endpoint, packet, sender, lambda tx, what: wait_mined(w3, chain, tx, what)
    )
    log(f"layerzero: packet {packet.guid_hex} executed on {chain.key}")
    return receipt


def execute_now(
    w3: Any, endpoint: Any, packet: Packet, sender: str, mined: Callable[[Any, str], Any]
) -> Any:
    """The executor's part of a verified ``packet`` on its destination
    ``endpoint``: lzReceive from ``sender`` with the value its options ask
    for, then each compose the execution queued, each awaited by ``mined``
    (the transaction, what it was). The lzReceive receipt."""
    options = packet.executor
    call = receive_call(endpoint, packet)
    receipt = mined(send_estimated(call, sender, options.lz_receive_value), "lzReceive")
    for compose in compose_messages(receipt, endpoint.address):
        if not w3.eth.get_code(compose.to):
            continue  # nothing to call: an account without code composes nothing
        _gas, value = options.compose.get(compose.index, (0, 0))
        mined(send_estimated(compose_call(endpoint, compose), sender, value), "lzCompose")
    return receipt
