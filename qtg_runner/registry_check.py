"""The chain registry held to the chains themselves (`qtg registry check`).

What a network's registry says (chains, chain_tokens, chain_protocols,
ccip_lanes) is what every executor signs from: a chain id typed wrong signs
for another chain, an address typed wrong sends money to whoever holds it.
This reads the registry, asks each chain's RPC (the URL from the environment
variable the registry names) what can be asked of it, and answers one Fact a
question, registered beside found:

    chain id           eth_chainId
    code at ADDRESS    eth_getCode: a contract at every token, protocol
                       contract and CCIP ramp the registry names
    SYMBOL decimals    the token's decimals() and symbol()
    CCTP domain        MessageTransmitterV2's localDomain(), and the
                       TokenMessengerV2's localMessageTransmitter()
    CCIP lane          the Router's isChainSupported(destination selector)
                       and getOnRamp(destination selector) per lane
    Stargate pool      the pool's token(): the chain's registered USDC
    Multicall3         code at MULTICALL3, where the runner asks its reads
                       together; a note, not a mismatch, when there is none
                       (the runner then asks them one call at a time)

A chain whose RPC cannot be reached (or whose variable is unset) answers one
failing fact and is not asked more. Nothing here signs or writes anything.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import psycopg
from eth_abi.abi import decode, encode
from eth_utils.crypto import keccak

from qtg_runner.chains.evm_rpc import MULTICALL3, EvmRpc, EvmRpcError

__all__ = ["Fact", "RegisteredChain", "UnknownChain", "check_registry", "read_registry"]


@dataclass(frozen=True)
class Fact:
    """One question put to a chain: what the registry says and what the chain answered."""

    chain_key: str
    subject: str
    registered: str
    found: str
    required: bool = True
    """False for what the engine works without, more slowly (Multicall3): a
    finding that differs is a note, and does not fail the check."""

    @property
    def ok(self) -> bool:
        return self.registered == self.found

    @property
    def fails(self) -> bool:
        """A mismatch that fails the check."""
        return self.required and not self.ok


@dataclass(frozen=True)
class Lane:
    """A CCIP lane from this chain: its destination's selector and the OnRamp."""

    dest_chain_key: str
    dest_selector: int
    onramp: str


@dataclass(frozen=True)
class RegisteredChain:
    """One chain as the registry has it, with what names a contract on it."""

    chain_key: str
    chain_id: int
    rpc_url_env: str
    tokens: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """symbol -> (address, decimals)."""
    protocols: Mapping[str, tuple[str, Mapping[str, str]]] = field(default_factory=dict)
    """protocol -> (remote id, contract name -> address)."""
    lanes: Sequence[Lane] = ()
    offramps: Sequence[tuple[str, str]] = ()
    """(source chain key, OffRamp) of the CCIP lanes into this chain."""

    def contracts(self) -> dict[str, str]:
        """Every address the registry names on this chain, once, with what names it."""
        named: dict[str, list[str]] = {}
        for symbol, (address, _) in self.tokens.items():
            named.setdefault(address.lower(), []).append(f"{symbol} token")
        for protocol, (_, contracts) in self.protocols.items():
            for name, address in contracts.items():
                named.setdefault(address.lower(), []).append(f"{protocol} {name}")
        for lane in self.lanes:
            named.setdefault(lane.onramp.lower(), []).append(
                f"CCIP OnRamp to {lane.dest_chain_key}"
            )
        for source, offramp in self.offramps:
            named.setdefault(offramp.lower(), []).append(f"CCIP OffRamp from {source}")
        return {address: ", ".join(names) for address, names in named.items()}


class UnknownChain(ValueError):
    """A chain asked for by key that the registry does not have."""


def read_registry(conn: psycopg.Connection[Any], only: Sequence[str] = ()) -> list[RegisteredChain]:
    """The network's registered chains (``only`` these keys, when given), in key
    order; UnknownChain for a key the registry does not have."""
    chains = conn.execute(
        "SELECT chain_key, chain_id, rpc_url_env FROM chains"
        " WHERE cardinality(%s::text[]) = 0 OR chain_key = ANY(%s::text[]) ORDER BY chain_key",
        [list(only), list(only)],
    ).fetchall()
    missing = sorted(set(only) - {row[0] for row in chains})
    if missing:
        raise UnknownChain(f"no chain {missing[0]} in this network's chain registry")
    tokens: dict[str, dict[str, tuple[str, int]]] = {}
    for key, symbol, address, decimals in conn.execute(
        "SELECT chain_key, symbol, address, decimals FROM chain_tokens ORDER BY 1, 2"
    ):
        tokens.setdefault(key, {})[symbol] = (address, decimals)
    protocols: dict[str, dict[str, tuple[str, Mapping[str, str]]]] = {}
    for key, protocol, remote_id, contracts in conn.execute(
        "SELECT chain_key, protocol, remote_id, contracts FROM chain_protocols ORDER BY 1, 2"
    ):
        protocols.setdefault(key, {})[protocol] = (str(remote_id), contracts)
    lanes: dict[str, list[Lane]] = {}
    offramps: dict[str, list[tuple[str, str]]] = {}
    for source, dest, selector, onramp, offramp in conn.execute(
        "SELECT l.source_chain_key, l.dest_chain_key, p.remote_id, l.onramp, l.offramp"
        "  FROM ccip_lanes l"
        "  LEFT JOIN chain_protocols p ON p.chain_key = l.dest_chain_key AND p.protocol = 'ccip'"
        " ORDER BY 1, 2"
    ):
        lanes.setdefault(source, []).append(Lane(dest, int(selector or 0), onramp))
        offramps.setdefault(dest, []).append((source, offramp))
    return [
        RegisteredChain(
            key,
            int(chain_id),
            rpc_url_env,
            tokens.get(key, {}),
            protocols.get(key, {}),
            lanes.get(key, []),
            offramps.get(key, []),
        )
        for key, chain_id, rpc_url_env in chains
    ]


def _selector(signature: str) -> bytes:
    return keccak(text=signature)[:4]


class _Reader:
    """eth_call and eth_getCode on one chain, decoded."""

    def __init__(self, rpc: EvmRpc) -> None:
        self.rpc = rpc

    async def code(self, address: str) -> str:
        """ "a contract" when ``address`` holds code, else "no code"."""
        code = await self.rpc.request("eth_getCode", [address, "latest"])
        return "a contract" if isinstance(code, str) and len(code) > 2 else "no code"

    async def read(
        self, address: str, signature: str, out: str, args: Sequence[tuple[str, Any]] = ()
    ) -> Any:
        data = _selector(signature)
        if args:
            data += encode([t for t, _ in args], [v for _, v in args])
        (value,) = decode([out], await self.rpc.call(address, data))
        return value


async def _ask(
    chain: RegisteredChain, subject: str, registered: str, answer: Awaitable[Any]
) -> Fact:
    """A fact whose finding is ``answer``; a call that reverts, or answers what
    cannot be decoded (not the contract registered), finds what went wrong."""
    try:
        found = await answer
    except EvmRpcError as exc:
        found = f"no answer: {exc}"
    except Exception as exc:  # eth_abi's refusal of the bytes answered
        found = f"no readable answer ({type(exc).__name__})"
    return Fact(
        chain.chain_key,
        subject,
        registered,
        str(found).lower() if _is_address(found) else str(found),
    )


def _is_address(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("0x") and len(value) == 42


async def check_chain(chain: RegisteredChain, rpc: EvmRpc) -> list[Fact]:
    """Every fact of ``chain``: its id first, and nothing more when the RPC does
    not answer or answers for another chain (its addresses say nothing of this one)."""
    reader = _Reader(rpc)
    facts = [await _ask(chain, "chain id", str(chain.chain_id), rpc.chain_id())]
    if not facts[0].ok:
        return facts
    for address, what in chain.contracts().items():
        facts.append(
            await _ask(chain, f"code at {address} ({what})", "a contract", reader.code(address))
        )
    subject = f"code at {MULTICALL3} (Multicall3: reads asked together)"
    multicall = await _ask(chain, subject, "a contract", reader.code(MULTICALL3))
    facts.append(replace(multicall, required=False))
    for symbol, (address, decimals) in chain.tokens.items():
        facts.append(
            await _ask(
                chain,
                f"{symbol} decimals()",
                str(decimals),
                reader.read(address, "decimals()", "uint8"),
            )
        )
        facts.append(
            await _ask(
                chain, f"{symbol} symbol()", symbol, reader.read(address, "symbol()", "string")
            )
        )
    return facts + await _protocol_facts(chain, reader)


async def _protocol_facts(chain: RegisteredChain, reader: _Reader) -> list[Fact]:
    facts: list[Fact] = []
    domain, cctp = chain.protocols.get("cctp", ("", {}))
    transmitter, messenger = cctp.get("MessageTransmitterV2"), cctp.get("TokenMessengerV2")
    if transmitter:
        question = reader.read(transmitter, "localDomain()", "uint32")
        facts.append(
            await _ask(chain, "CCTP domain: MessageTransmitterV2 localDomain()", domain, question)
        )
    if transmitter and messenger:
        question = reader.read(messenger, "localMessageTransmitter()", "address")
        subject = "CCTP: TokenMessengerV2 localMessageTransmitter()"
        facts.append(await _ask(chain, subject, transmitter.lower(), question))
    router = chain.protocols.get("ccip", ("", {}))[1].get("CcipRouter")
    if router is not None:
        for lane in chain.lanes:
            facts += await _lane_facts(chain, reader, router, lane)
    pool = chain.protocols.get("stargate", ("", {}))[1].get("StargatePool")
    usdc = chain.tokens.get("USDC")
    if pool and usdc:
        question = reader.read(pool, "token()", "address")
        facts.append(
            await _ask(chain, "Stargate pool token(): the chain's USDC", usdc[0].lower(), question)
        )
    return facts


async def _lane_facts(
    chain: RegisteredChain, reader: _Reader, router: str, lane: Lane
) -> list[Fact]:
    """A CCIP lane out of ``chain``: its Router supports the destination and
    sends there through the registered OnRamp."""
    to = [("uint64", lane.dest_selector)]
    supported = reader.read(router, "isChainSupported(uint64)", "bool", to)
    onramp = reader.read(router, "getOnRamp(uint64)", "address", to)
    where = lane.dest_chain_key
    return [
        await _ask(chain, f"CCIP Router isChainSupported({where})", "True", supported),
        await _ask(chain, f"CCIP Router getOnRamp({where})", lane.onramp.lower(), onramp),
    ]


async def check_registry(
    chains: Sequence[RegisteredChain],
    env: Mapping[str, str] | None = None,
    *,
    timeout: float = 10.0,
) -> list[Fact]:
    """The facts of every chain, the chains asked at once, each in its own order."""
    environ = os.environ if env is None else env

    async def one(chain: RegisteredChain) -> list[Fact]:
        url = environ.get(chain.rpc_url_env, "")
        if not url:
            return [Fact(chain.chain_key, f"RPC URL in {chain.rpc_url_env}", "set", "not set")]
        try:
            rpc = EvmRpc(url, timeout=timeout)
        except ValueError as exc:
            return [Fact(chain.chain_key, f"RPC URL in {chain.rpc_url_env}", "set", str(exc))]
        async with rpc:
            return await check_chain(chain, rpc)

    answers = await asyncio.gather(*(one(chain) for chain in chains))
    return [fact for facts in answers for fact in facts]
