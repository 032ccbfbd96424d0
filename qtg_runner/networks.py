"""The address book of the supported networks (networks/<class>.toml), read and
checked: ``load_book("testnet")`` or ``load_book("mainnet")``.

The book is data in the repository, one file per network class: each chain's
ids, finality rule, USDC and bridge contracts, the CCIP lanes between the
chains, and the URLs of Circle's attestation service and of Bybit. Its names
are the chain registry's (upsert_chain, upsert_chain_token,
upsert_chain_protocol, upsert_ccip_lane, upsert_exchange_venue), so what this
module returns is what a registry load records. Every entry names its public
source (``source``); networks/README.md says which test holds it to which
package.

The loader refuses a book that is malformed, naming the file, the entry and
what is wrong (BookError): a type, a missing field, an unknown field (a typo
would otherwise drop a fact silently), an address that is not 20 bytes of hex
or whose EIP-55 checksum is wrong, a chain key or protocol id given twice, a
protocol without one of its contracts, a lane between chains it does not list.
Facts no public source gave are left out of the book, so ``finality_depth``,
``block_time_ms``, a chain's protocols and the CcipOnRamp/CcipOffRamp pair are
optional here; ``qtg registry check`` holds a deployment to the live chains.

No database, no chain, no network: this module reads one file."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from eth_utils.address import is_checksum_address

__all__ = [
    "NETWORK_CLASSES",
    "AddressBook",
    "BookError",
    "CcipLane",
    "Chain",
    "Endpoint",
    "Protocol",
    "Token",
    "Venue",
    "book_path",
    "load_book",
    "networks_dir",
]

NETWORK_CLASSES: Final = ("testnet", "mainnet")

PROTOCOL_CONTRACTS: Final[Mapping[str, tuple[frozenset[str], frozenset[str]]]] = MappingProxyType(
    {
        "cctp": (frozenset({"TokenMessengerV2", "MessageTransmitterV2"}), frozenset()),
        "ccip": (frozenset({"CcipRouter"}), frozenset({"CcipOnRamp", "CcipOffRamp"})),
        "stargate": (frozenset({"StargatePool", "TokenMessaging"}), frozenset()),
    }
)
"""Each protocol's contracts as the registry keys them: (required, optional)."""

REMOTE_ID_MAX: Final[Mapping[str, int]] = MappingProxyType(
    {"cctp": 2**32 - 1, "ccip": 2**64 - 1, "stargate": 2**32 - 1}
)
"""The CCTP domain and the LayerZero endpoint id are uint32, the CCIP selector uint64."""

FINALITY_RULES: Final = ("confirmations", "ethereum-finalized")
CCIP_VERSIONS: Final = ("1.5", "1.6")
TOKEN_DATA: Final = ("cctp", "none")

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
_CHAIN_KEY = re.compile(r"[a-z][a-z0-9-]{0,62}")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]{0,127}")
_SYMBOL = re.compile(r"[A-Za-z0-9.]{1,16}")


class BookError(ValueError):
    """A book that cannot be used as it is: the message names the file, the
    entry and what is wrong."""


@dataclass(frozen=True)
class Endpoint:
    """A service's URL for this network class and the NAME of the variable
    that holds it where runners run."""

    url: str
    url_env: str
    source: str


@dataclass(frozen=True)
class Venue:
    """An exchange venue (upsert_exchange_venue): its key, kind, base URL, and
    the NAMES of the variables of its URL and API key file."""

    venue_key: str
    kind: str
    base_url: str
    base_url_env: str
    key_file_env: str
    source: str


@dataclass(frozen=True)
class Token:
    """A token contract on a chain (upsert_chain_token)."""

    symbol: str
    address: str
    decimals: int
    source: str


@dataclass(frozen=True)
class Protocol:
    """A bridge protocol on a chain (upsert_chain_protocol): the chain's id in
    it (CCTP domain, CCIP selector, LayerZero endpoint id) and its contracts by
    the registry's names. ``pool_token`` (stargate): the token its pool moves."""

    protocol: str
    remote_id: int
    contracts: Mapping[str, str]
    source: str
    pool_token: str | None = None


@dataclass(frozen=True)
class Chain:
    """A chain (upsert_chain) with its tokens and protocols. ``finality_depth``
    and ``block_time_ms`` are None where no public source gave them."""

    chain_key: str
    name: str
    chain_id: int
    rpc_url_env: str
    finality_rule: str
    finality_depth: int | None
    block_time_ms: int | None
    source: str
    tokens: tuple[Token, ...]
    protocols: Mapping[str, Protocol]

    def token(self, symbol: str) -> Token | None:
        return next((t for t in self.tokens if t.symbol == symbol), None)


@dataclass(frozen=True)
class CcipLane:
    """A CCIP lane from one chain of the book to another (upsert_ccip_lane)."""

    source_chain_key: str
    dest_chain_key: str
    version: str
    onramp: str
    offramp: str
    token_data: str
    source: str


@dataclass(frozen=True)
class AddressBook:
    """One network class's book, as read from ``path``."""

    network_class: str
    path: Path
    iris: Endpoint
    venues: tuple[Venue, ...]
    chains: tuple[Chain, ...]
    ccip_lanes: tuple[CcipLane, ...]

    def chain(self, chain_key: str) -> Chain:
        for chain in self.chains:
            if chain.chain_key == chain_key:
                return chain
        raise KeyError(f"{self.path.name} has no chain {chain_key!r}")


def networks_dir() -> Path:
    """The repository's networks/ tree (the package is installed editable, beside it)."""
    path = Path(__file__).resolve().parent.parent / "networks"
    if not path.is_dir():
        raise BookError(
            f"networks/ not found at {path}; install the project editable: pip install -e ."
        )
    return path


def book_path(network_class: str) -> Path:
    if network_class not in NETWORK_CLASSES:
        raise BookError(
            f"no address book for {network_class!r}: the classes are {', '.join(NETWORK_CLASSES)}"
        )
    return networks_dir() / f"{network_class}.toml"


def load_book(network_class: str, path: Path | None = None) -> AddressBook:
    """The book of ``network_class`` (networks/<class>.toml, or ``path``),
    checked; BookError names the file, the entry and what is wrong."""
    path = book_path(network_class) if path is None else path
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BookError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise BookError(f"{path}: not valid TOML: {exc}") from exc
    return _Reader(path).book(raw, network_class)


class _Reader:
    """Reads the tables of one file, each error prefixed with the file and entry."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, what: str) -> BookError:
        return BookError(f"{self.path}: {where}: {what}")

    def fields(
        self,
        where: str,
        table: object,
        required: AbstractSet[str],
        optional: AbstractSet[str] = frozenset(),
    ) -> dict[str, Any]:
        if not isinstance(table, dict):
            raise self.fail(where, f"must be a table, got {type(table).__name__}")
        missing = sorted(required - table.keys())
        if missing:
            raise self.fail(where, f"missing {', '.join(missing)}")
        unknown = sorted(table.keys() - required - optional)
        if unknown:
            raise self.fail(where, f"unknown field {', '.join(unknown)} (a typo?)")
        return table

    def text(
        self, where: str, table: Mapping[str, Any], key: str, pattern: re.Pattern[str] | None = None
    ) -> str:
        value = table[key]
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, f"{key} must be a non-empty string, got {value!r}")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(where, f"{key} {value!r} does not match {pattern.pattern}")
        return value

    def integer(
        self,
        where: str,
        table: Mapping[str, Any],
        key: str,
        low: int,
        high: int,
        *,
        decimal: bool = False,
    ) -> int:
        """``table[key]``, a whole number from ``low`` to ``high``; ``decimal``: or
        one written as a string of digits (a CCIP selector may exceed TOML's
        64-bit integers)."""
        value = table[key]
        if decimal and isinstance(value, str) and re.fullmatch(r"[0-9]{1,20}", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(
                where, f"{key} must be a whole number from {low} to {high}, got {value!r}"
            )
        return value

    def address(self, where: str, name: str, value: object) -> str:
        if not isinstance(value, str) or not _ADDRESS.fullmatch(value):
            raise self.fail(
                where,
                f"{name} must be an address of 20 bytes (0x and 40 hex digits), got {value!r}",
            )
        body = value[2:]
        if body != body.lower() and body != body.upper() and not is_checksum_address(value):
            raise self.fail(where, f"{name} {value} fails its EIP-55 checksum (a mistyped digit?)")
        return value

    def book(self, raw: dict[str, Any], network_class: str) -> AddressBook:
        top = self.fields(
            "the file", raw, {"network_class", "iris", "chains"}, {"venues", "ccip_lanes"}
        )
        if top["network_class"] != network_class:
            raise self.fail(
                "network_class", f"is {top['network_class']!r}, expected {network_class!r}"
            )
        iris_raw = self.fields("[iris]", top["iris"], {"url", "url_env", "source"})
        iris = Endpoint(
            url=self.url("[iris]", iris_raw, "url"),
            url_env=self.text("[iris]", iris_raw, "url_env", _ENV_NAME),
            source=self.text("[iris]", iris_raw, "source"),
        )
        venues = tuple(
            self.venue(i, v) for i, v in enumerate(self.array("venues", top.get("venues", [])))
        )
        self.unique("venues", [v.venue_key for v in venues], "venue_key")
        chains = tuple(self.chain(i, c) for i, c in enumerate(self.array("chains", top["chains"])))
        if not chains:
            raise self.fail("chains", "the book lists no chain")
        self.unique("chains", [c.chain_key for c in chains], "chain_key")
        self.unique("chains", [str(c.chain_id) for c in chains], "chain_id")
        for protocol in PROTOCOL_CONTRACTS:
            ids = [str(c.protocols[protocol].remote_id) for c in chains if protocol in c.protocols]
            self.unique("chains", ids, f"{protocol} remote_id")
        by_key = {c.chain_key: c for c in chains}
        lanes = tuple(
            self.lane(i, lane, by_key)
            for i, lane in enumerate(self.array("ccip_lanes", top.get("ccip_lanes", [])))
        )
        self.unique(
            "ccip_lanes", [f"{x.source_chain_key} -> {x.dest_chain_key}" for x in lanes], "lane"
        )
        return AddressBook(network_class, self.path, iris, venues, chains, lanes)

    def array(self, where: str, value: object) -> list[Any]:
        if not isinstance(value, list):
            raise self.fail(
                where, f"must be an array of tables ([[{where}]]), got {type(value).__name__}"
            )
        return value

    def unique(self, where: str, values: list[str], what: str) -> None:
        seen: set[str] = set()
        for value in values:
            if value in seen:
                raise self.fail(where, f"{what} {value} is given twice")
            seen.add(value)

    def url(self, where: str, table: Mapping[str, Any], key: str) -> str:
        value = self.text(where, table, key)
        if not re.fullmatch(r"https://[A-Za-z0-9.-]+(:[0-9]+)?(/[^\s]*)?", value):
            raise self.fail(where, f"{key} must be an https:// URL, got {value!r}")
        return value

    def venue(self, index: int, raw: object) -> Venue:
        where = f"venues[{index}]"
        t = self.fields(
            where, raw, {"venue_key", "kind", "base_url", "base_url_env", "key_file_env", "source"}
        )
        where = f"venue {t['venue_key']!r}"
        if t["kind"] != "bybit":
            raise self.fail(where, f"kind must be bybit, got {t['kind']!r}")
        return Venue(
            venue_key=self.text(where, t, "venue_key", _CHAIN_KEY),
            kind="bybit",
            base_url=self.url(where, t, "base_url"),
            base_url_env=self.text(where, t, "base_url_env", _ENV_NAME),
            key_file_env=self.text(where, t, "key_file_env", _ENV_NAME),
            source=self.text(where, t, "source"),
        )

    def chain(self, index: int, raw: object) -> Chain:
        t = self.fields(
            f"chains[{index}]",
            raw,
            {"chain_key", "name", "chain_id", "rpc_url_env", "finality_rule", "source", "tokens"},
            {"finality_depth", "block_time_ms", "protocols"},
        )
        key = self.text(f"chains[{index}]", t, "chain_key", _CHAIN_KEY)
        where = f"chain {key!r}"
        rule = self.text(where, t, "finality_rule")
        if rule not in FINALITY_RULES:
            raise self.fail(
                where, f"finality_rule must be one of {', '.join(FINALITY_RULES)}, got {rule!r}"
            )
        tokens = tuple(
            self.token(where, i, x)
            for i, x in enumerate(self.array(f"{where} tokens", t["tokens"]))
        )
        self.unique(f"{where} tokens", [x.symbol for x in tokens], "symbol")
        protocols_raw = t.get("protocols", {})
        self.fields(f"{where} protocols", protocols_raw, set(), set(PROTOCOL_CONTRACTS))
        return Chain(
            chain_key=key,
            name=self.text(where, t, "name"),
            chain_id=self.integer(where, t, "chain_id", 1, 2**63 - 1),
            rpc_url_env=self.text(where, t, "rpc_url_env", _ENV_NAME),
            finality_rule=rule,
            finality_depth=None
            if "finality_depth" not in t
            else self.integer(where, t, "finality_depth", 0, 10000),
            block_time_ms=None
            if "block_time_ms" not in t
            else self.integer(where, t, "block_time_ms", 1, 3_600_000),
            source=self.text(where, t, "source"),
            tokens=tokens,
            protocols=MappingProxyType(
                {
                    name: self.protocol(where, name, value)
                    for name, value in sorted(protocols_raw.items())
                }
            ),
        )

    def token(self, chain: str, index: int, raw: object) -> Token:
        where = f"{chain} tokens[{index}]"
        t = self.fields(where, raw, {"symbol", "address", "decimals", "source"})
        return Token(
            symbol=self.text(where, t, "symbol", _SYMBOL),
            address=self.address(where, "address", t["address"]),
            decimals=self.integer(where, t, "decimals", 0, 36),
            source=self.text(where, t, "source"),
        )

    def protocol(self, chain: str, name: str, raw: object) -> Protocol:
        where = f"{chain} protocol {name}"
        t = self.fields(
            where,
            raw,
            {"remote_id", "contracts", "source"},
            {"pool_token"} if name == "stargate" else set(),
        )
        required, optional = PROTOCOL_CONTRACTS[name]
        contracts = self.fields(f"{where} contracts", t["contracts"], set(required), set(optional))
        if optional and 0 < len(optional & contracts.keys()) < len(optional):
            raise self.fail(
                f"{where} contracts", f"give {' and '.join(sorted(optional))} together, or neither"
            )
        return Protocol(
            protocol=name,
            remote_id=self.integer(where, t, "remote_id", 0, REMOTE_ID_MAX[name], decimal=True),
            contracts=MappingProxyType(
                {k: self.address(f"{where} contracts", k, v) for k, v in sorted(contracts.items())}
            ),
            source=self.text(where, t, "source"),
            pool_token=None
            if "pool_token" not in t
            else self.address(where, "pool_token", t["pool_token"]),
        )

    def lane(self, index: int, raw: object, chains: Mapping[str, Chain]) -> CcipLane:
        where = f"ccip_lanes[{index}]"
        t = self.fields(
            where,
            raw,
            {
                "source_chain_key",
                "dest_chain_key",
                "version",
                "onramp",
                "offramp",
                "token_data",
                "source",
            },
        )
        where = f"ccip lane {t['source_chain_key']!r} -> {t['dest_chain_key']!r}"
        for end in ("source_chain_key", "dest_chain_key"):
            chain = chains.get(t[end]) if isinstance(t[end], str) else None
            if chain is None:
                raise self.fail(where, f"{end} {t[end]!r} is not a chain of this book")
            if "ccip" not in chain.protocols:
                raise self.fail(where, f"{t[end]} has no ccip protocol entry")
        if t["source_chain_key"] == t["dest_chain_key"]:
            raise self.fail(where, "a lane goes from one chain to another")
        if t["version"] not in CCIP_VERSIONS:
            raise self.fail(
                where, f"version must be one of {', '.join(CCIP_VERSIONS)}, got {t['version']!r}"
            )
        if t["token_data"] not in TOKEN_DATA:
            raise self.fail(
                where, f"token_data must be one of {', '.join(TOKEN_DATA)}, got {t['token_data']!r}"
            )
        return CcipLane(
            source_chain_key=t["source_chain_key"],
            dest_chain_key=t["dest_chain_key"],
            version=t["version"],
            onramp=self.address(where, "onramp", t["onramp"]),
            offramp=self.address(where, "offramp", t["offramp"]),
            token_data=t["token_data"],
            source=self.text(where, t, "source"),
        )
