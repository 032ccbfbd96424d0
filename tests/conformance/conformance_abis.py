"""The protocols' own ABIs and published types, read from node_modules at test
time (nothing of theirs is copied into the repository), for the conformance
suite (tests/conformance): what each of our selectors, topics, layouts and
doubles must match.

    Stargate v2      @stargatefinance/stg-evm-v2 artifacts/src/**/<Contract>.json
                     (StargatePool, TokenMessaging; FiatTokenV2_2 is Circle's USDC
                     as Stargate builds it)
    LayerZero v2     @layerzerolabs/lz-evm-protocol-v2 artifacts (EndpointV2)
    CCIP v1.6        @chainlink/contracts-ccip-1.6 (1.6.2) abi/<Contract>.abi.json,
                     and its Client.sol / Internal.sol for the tags, the extra
                     args structs, the hash domains and the execution states
                     (OffRamp.sol's CommitReport, USDCTokenPool.sol's payload)
    CCIP v1.5        @chainlink/contracts-ccip (2.0.0) abi/v1_5_0/
                     evm_2_evm_onramp.json and evm_2_evm_offramp.json: the
                     EVM2EVMOnRamp and EVM2EVMOffRamp of a v1.5 lane
    CCTP v2          Circle's ABI arrays (messageTransmitterV2Abi,
                     tokenMessengerV2Abi) from the index.mjs of whichever
                     @circle-fin package holds them; Circle's response types
                     (index.d.ts) and its example attestation (index.mjs) from
                     @circle-fin/provider-cctp-v2; the message layout table of
                     Circle's IMessageTransmitter as @chainlink/contracts-ccip
                     2.0.0 ships it
    CCTP v2.1        what Circle publishes on GitHub only (v2.1's minimum fee,
                     TokenMinterV2): the entries we use, recorded in
                     CIRCLE_GITHUB with the file and commit they were read at

Where node_modules is missing (no npm on the machine) every test skips with
SKIP_REASON; a package missing from a node_modules that exists is a failure
(`make install` is behind).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from eth_utils import (
    abi_to_signature,
    event_abi_to_log_topic,
    function_abi_to_4byte_selector,
)

REPO = Path(__file__).resolve().parents[2]
NODE_MODULES = REPO / "node_modules"

SKIP_REASON = (
    "conformance tests need the protocols' packages in node_modules: "
    "`make install` installs them from npm"
)

STARGATE = "@stargatefinance/stg-evm-v2"
CCIP = "@chainlink/contracts-ccip-1.6"
CCIP_2 = "@chainlink/contracts-ccip"
CIRCLE_PROVIDER = "@circle-fin/provider-cctp-v2"
LAYERZERO = "@layerzerolabs/lz-evm-protocol-v2"
CHAINLINK = "@chainlink/contracts"

CIRCLE_ABI_PACKAGE = "@circle-fin/adapter-viem-v2"
"""Where Circle publishes the CCTP v2 contract ABIs on npm today (its
messageTransmitterV2Abi and tokenMessengerV2Abi): @circle-fin/provider-cctp-v2
carries none, only the response types."""


def node_modules() -> Path:
    if not NODE_MODULES.is_dir():
        pytest.skip(SKIP_REASON)
    return NODE_MODULES


def package_dir(package: str) -> Path:
    path = node_modules() / package
    if not (path / "package.json").is_file():
        pytest.fail(f"{package} is not in node_modules: `make install` installs it (npm ci)")
    return path


def package_version(package: str) -> str:
    return str(json.loads((package_dir(package) / "package.json").read_text())["version"])


# -- one contract's ABI -----------------------------------------------------------------


def signature(entry: dict[str, Any]) -> str:
    """``name(type,...)`` with tuples expanded: what a selector or topic hashes."""
    return str(abi_to_signature(entry))


def selector(entry: dict[str, Any]) -> str:
    return "0x" + bytes(function_abi_to_4byte_selector(entry)).hex()


def topic(entry: dict[str, Any]) -> str:
    return "0x" + bytes(event_abi_to_log_topic(entry)).hex()


def canonical(param: dict[str, Any]) -> str:
    """One parameter's canonical type, tuples expanded."""
    kind = str(param["type"])
    if kind.startswith("tuple"):
        return "(" + ",".join(canonical(c) for c in param["components"]) + ")" + kind[5:]
    return kind


def described(entry: dict[str, Any]) -> str:
    """An entry as a reader compares it: kind, signature, indexed inputs, outputs."""
    if entry["type"] == "event":
        indexed = [i for i, p in enumerate(entry["inputs"]) if p.get("indexed")]
        return f"event {signature(entry)} indexed {indexed}"
    outputs = ",".join(canonical(o) for o in entry.get("outputs", []))
    payable = " payable" if entry.get("stateMutability") == "payable" else ""
    return f"function {signature(entry)}{payable} returns ({outputs})"


@dataclass(frozen=True)
class Contract:
    """A real contract's ABI: where it was read and at which package version."""

    name: str
    package: str
    version: str
    abi: tuple[dict[str, Any], ...]

    def __str__(self) -> str:
        return f"{self.name} ({self.package} {self.version})"

    def entries(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.abi if e["type"] == kind and (name is None or e["name"] == name)]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = self.entries(kind, name)
        assert len(found) == 1, f"{self} has {len(found)} {kind}s named {name}"
        return found[0]

    def selectors(self, name: str) -> dict[str, str]:
        return {selector(e): signature(e) for e in self.entries("function", name)}

    def topics(self, name: str) -> dict[str, str]:
        return {topic(e): signature(e) for e in self.entries("event", name)}

    def web3(self) -> Any:
        from web3 import Web3

        return Web3().eth.contract(abi=list(self.abi))


def _hardhat(package: str, name: str) -> Contract:
    root = package_dir(package) / "artifacts"
    found = sorted(root.rglob(f"{name}.sol/{name}.json"))
    if not found:
        pytest.fail(f"{package} has no artifact {name}.json")
    abi = json.loads(found[0].read_text())["abi"]
    return Contract(name, package, package_version(package), tuple(abi))


@functools.cache
def stargate(name: str) -> Contract:
    """A Stargate v2 contract (StargatePool, TokenMessaging, FiatTokenV2_2, ...)."""
    return _hardhat(STARGATE, name)


@functools.cache
def ccip(name: str) -> Contract:
    """A CCIP v1.6 contract (Router, OnRamp, OffRamp) of contracts-ccip 1.6.2."""
    path = package_dir(CCIP) / "abi" / f"{name}.abi.json"
    return Contract(name, CCIP, package_version(CCIP), tuple(json.loads(path.read_text())))


@functools.cache
def layerzero(name: str) -> Contract:
    """A LayerZero v2 protocol contract (EndpointV2, ...)."""
    return _hardhat(LAYERZERO, name)


@functools.cache
def ccip_v1_5(name: str) -> Contract:
    """A CCIP v1.5 contract (evm_2_evm_onramp, evm_2_evm_offramp) as
    contracts-ccip 2.0.0 ships its ABIs (abi/v1_5_0)."""
    path = package_dir(CCIP_2) / "abi" / "v1_5_0" / f"{name}.json"
    raw = json.loads(path.read_text())
    abi = raw if isinstance(raw, list) else raw["abi"]
    return Contract(f"{name} v1.5.0", CCIP_2, package_version(CCIP_2), tuple(abi))


@functools.cache
def multicall3() -> Contract:
    """Multicall3 (mds1/multicall), as @chainlink/contracts publishes its ABI
    beside the vendored source the local world compiles."""
    path = package_dir(CHAINLINK) / "abi" / "v0.8" / "shared" / "Multicall3.abi.json"
    return Contract(
        "Multicall3", CHAINLINK, package_version(CHAINLINK), tuple(json.loads(path.read_text()))
    )


def usdc() -> Contract:
    """Circle's USDC (FiatTokenV2_2), the token our ERC-20 calls and MockUSDC stand for."""
    return stargate("FiatTokenV2_2")


# -- Circle's ABIs and types, read out of JavaScript ---------------------------------------

_JS_TOKEN = re.compile(
    r"""\s*(?:(//[^\n]*|/\*.*?\*/)|('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
    r"""|([A-Za-z_$][\w$]*)|(-?\d+)|([\[\]{}:,]))""",
    re.S,
)


def _js_tokens(text: str, start: int) -> Iterator[tuple[str, str]]:
    """The tokens of the JavaScript literal (array or object) at ``start``."""
    depth, pos = 0, start
    while True:
        match = _JS_TOKEN.match(text, pos)
        if match is None:
            raise ValueError(f"not a plain literal at {text[pos : pos + 60]!r}")
        pos = match.end()
        comment, string, ident, number, punct = match.groups()
        if comment:
            continue
        if string is not None:
            yield "str", string[1:-1]
        elif ident is not None:
            yield "id", ident
        elif number is not None:
            yield "num", number
        else:
            yield "p", punct
            depth += 1 if punct in "[{" else -1 if punct in "]}" else 0
            if depth == 0:
                return


def js_literal(text: str, name: str) -> Any:
    """``const <name> = <literal>`` of a JavaScript module, as JSON would give it
    (plain data only: objects, arrays, strings, numbers, true/false/null)."""
    match = re.search(rf"\bconst {re.escape(name)} = (?=[\[{{])", text)
    if match is None:
        raise LookupError(name)
    tokens = list(_js_tokens(text, match.end()))
    at = 0

    def value() -> Any:
        nonlocal at
        kind, raw = tokens[at]
        at += 1
        if (kind, raw) == ("p", "["):
            items = []
            while tokens[at] != ("p", "]"):
                items.append(value())
                at += tokens[at] == ("p", ",")
            at += 1
            return items
        if (kind, raw) == ("p", "{"):
            fields = {}
            while tokens[at] != ("p", "}"):
                key = tokens[at][1]
                assert tokens[at + 1] == ("p", ":"), tokens[at : at + 2]
                at += 2
                fields[key] = value()
                at += tokens[at] == ("p", ",")
            at += 1
            return fields
        if kind == "str":
            return raw
        if kind == "num":
            return int(raw)
        return {"true": True, "false": False, "null": None}[raw]

    return value()


@functools.cache
def _circle_abis() -> dict[str, tuple[str, str, tuple[dict[str, Any], ...]]]:
    """Circle's CCTP v2 contract ABIs found in the installed @circle-fin packages:
    contract name -> (package, version, abi)."""
    found: dict[str, tuple[str, str, tuple[dict[str, Any], ...]]] = {}
    wanted = {
        "MessageTransmitterV2": "messageTransmitterV2Abi",
        "TokenMessengerV2": "tokenMessengerV2Abi",
    }
    for index in sorted((node_modules() / "@circle-fin").glob("*/index.mjs")):
        text = index.read_text()
        package = f"@circle-fin/{index.parent.name}"
        for contract, const in wanted.items():
            if contract not in found and f"const {const} = [" in text:
                abi = tuple(js_literal(text, const))
                found[contract] = (package, package_version(package), abi)
    return found


@functools.cache
def circle_npm_contracts() -> frozenset[str]:
    """The contracts whose ABI an installed @circle-fin package exports
    (``const tokenMessengerV2Abi = [`` gives TokenMessengerV2)."""
    names = set()
    for index in (node_modules() / "@circle-fin").glob("*/index.mjs"):
        for const in re.findall(r"\bconst (\w+)Abi = \[", index.read_text()):
            names.add(const[0].upper() + const[1:])
    return frozenset(names)


def circle_abi_problem() -> str | None:
    """Why Circle's contract ABIs cannot be read, or None when they can."""
    missing = {"MessageTransmitterV2", "TokenMessengerV2"} - set(_circle_abis())
    if not missing:
        return None
    provider = package_version(CIRCLE_PROVIDER)
    return (
        f"Circle's {' and '.join(sorted(missing))} ABI is in no installed @circle-fin package: "
        f"{CIRCLE_PROVIDER} {provider} ships Circle's response types but no contract ABI; "
        f"Circle publishes them in {CIRCLE_ABI_PACKAGE} (messageTransmitterV2Abi, "
        "tokenMessengerV2Abi), which package.json does not install"
    )


def circle(name: str) -> Contract:
    """Circle's MessageTransmitterV2 or TokenMessengerV2; the test skips where no
    installed package holds them (test_circle_contract_abis_are_installed fails)."""
    problem = circle_abi_problem()
    if problem is not None:
        pytest.skip(f"Circle's contract ABIs are not installed: {problem}")
    package, version, abi = _circle_abis()[name]
    return Contract(name, package, version, abi)


# -- what Circle publishes on GitHub only -------------------------------------------------

CIRCLE_REPO = "github.com/circlefin/evm-cctp-contracts"


@dataclass(frozen=True)
class GithubAbi:
    """Entries of a Circle ABI that no npm package carries, as the file at
    ``path`` in CIRCLE_REPO at ``commit`` gives them (each as ``described``
    prints it): recorded here, since a test cannot reach GitHub. Only the
    entries a double or a client of ours names; ``npm`` is the installed
    contract the entries extend (they must be absent from it: once Circle
    ships them on npm the test reads them there and the record goes)."""

    name: str
    path: str
    commit: str
    npm: str | None
    entries: tuple[str, ...]


CIRCLE_GITHUB = {
    # v2.1's minimum fee ("standard fee switch"), in TokenMessengerV2 and its
    # BaseTokenMessenger; Circle's npm ABIs (adapter-viem-v2) are v2.0's
    "TokenMessengerV2 v2.1": GithubAbi(
        "TokenMessengerV2 v2.1",
        "docs/abis/cctp/v2.1/TokenMessengerV2.json",
        "3decba91696c584821af689623fd3cdf466de5e5",
        "TokenMessengerV2",
        (
            "function MIN_FEE_MULTIPLIER() returns (uint256)",
            "function getMinFeeAmount(uint256) returns (uint256)",
            "function minFee() returns (uint256)",
            "function minFeeController() returns (address)",
            "function setMinFee(uint256) returns ()",
            "function setMinFeeController(address) returns ()",
            "event MinFeeControllerSet(address) indexed []",
            "event MinFeeSet(uint256) indexed []",
        ),
    ),
    # the minter TokenMessengerV2 mints and burns through (its localMinter);
    # the same in v2 and v2.1
    "TokenMinterV2": GithubAbi(
        "TokenMinterV2",
        "docs/abis/cctp/v2/TokenMinterV2.json",
        "49a5e83fb69deee992bf65c6874ed4b12515d3ab",
        None,
        (
            "function burnLimitsPerMessage(address) returns (uint256)",
            "function linkTokenPair(address,uint32,bytes32) returns ()",
            "function remoteTokensToLocalTokens(bytes32) returns (address)",
            "function setMaxBurnAmountPerMessage(address,uint256) returns ()",
            "event SetBurnLimitPerMessage(address,uint256) indexed [0]",
            "event TokenPairLinked(address,uint32,bytes32) indexed []",
        ),
    ),
}

_DESCRIBED = re.compile(
    r"^(function|event) (\w+)\(([\w,\[\]]*)\)"
    r"(?: indexed \[([\d, ]*)\])?( payable)?(?: returns \(([\w,\[\]]*)\))?$"
)


def _entry(text: str) -> dict[str, Any]:
    """The ABI entry ``described`` prints as ``text`` (no tuples)."""
    match = _DESCRIBED.match(text)
    assert match is not None, f"not a described entry: {text!r}"
    kind, name, inputs, indexed, payable, outputs = match.groups()
    marked = {int(i) for i in indexed.split(",") if i.strip()} if indexed else set()
    params = [
        {"name": "", "type": t, **({"indexed": i in marked} if kind == "event" else {})}
        for i, t in enumerate(inputs.split(",") if inputs else [])
    ]
    entry: dict[str, Any] = {"type": kind, "name": name, "inputs": params}
    if kind == "function":
        entry["outputs"] = [
            {"name": "", "type": t} for t in (outputs.split(",") if outputs else [])
        ]
        entry["stateMutability"] = "payable" if payable else "nonpayable"
    else:
        entry["anonymous"] = False
    assert described(entry) == text, (described(entry), text)
    return entry


def circle_github(name: str) -> Contract:
    """The recorded entries of CIRCLE_GITHUB[name], as a contract."""
    record = CIRCLE_GITHUB[name]
    return Contract(
        name,
        f"{CIRCLE_REPO} {record.path}",
        record.commit[:12],
        tuple(_entry(text) for text in record.entries),
    )


@functools.cache
def _provider_text(suffix: str) -> str:
    return (package_dir(CIRCLE_PROVIDER) / f"index.{suffix}").read_text()


@dataclass(frozen=True)
class TsField:
    name: str
    optional: bool
    type: str


@functools.cache
def circle_type(interface: str) -> dict[str, TsField]:
    """The fields of one interface of Circle's provider (index.d.ts), in order."""
    text = _provider_text("d.ts")
    match = re.search(rf"^interface {re.escape(interface)} \{{\n(.*?)^\}}", text, re.S | re.M)
    if match is None:
        pytest.fail(f"{CIRCLE_PROVIDER} declares no interface {interface}")
    body = re.sub(r"/\*.*?\*/", "", match.group(1), flags=re.S)
    fields = {}
    for name, optional, kind in re.findall(r"^\s+(\w+)(\??):\s*(.+?);\s*$", body, re.M):
        fields[name] = TsField(name, optional == "?", kind.strip())
    return fields


@functools.cache
def circle_example_attestation() -> dict[str, Any]:
    """Circle's example complete attestation of a fast burn (provider's
    mockAttestationMessage): a real message with its decoded fields."""
    return dict(js_literal(_provider_text("mjs"), "mockAttestationMessage"))


@dataclass(frozen=True)
class LayoutField:
    name: str
    size: int | None
    """bytes; None for the dynamic tail"""
    type: str
    offset: int


@functools.cache
def circle_layouts() -> dict[str, tuple[LayoutField, ...]]:
    """The CCTP v2 message and burn body layouts as the table in Circle's
    IMessageTransmitter (Apache-2.0, Circle) that @chainlink/contracts-ccip ships:
    "message" and "burn body"."""
    path = package_dir(CCIP_2) / "contracts/pools/USDC/interfaces/IMessageTransmitter.sol"
    text = path.read_text()
    tables: dict[str, tuple[LayoutField, ...]] = {}
    for title, key in (
        ("Message format", "message"),
        ("CCTP burn message body format", "burn body"),
    ):
        start = text.index(f"@dev {title}.")
        rows = []
        for line in text[start:].splitlines()[2:]:
            row = re.match(r"\s*///\s+\*\s+(\w+)\s+(\d+|dynamic)\s+(\w+)\s+(\d+)\s*$", line)
            if row is None:
                break
            name, size, kind, offset = row.groups()
            rows.append(
                LayoutField(name, None if size == "dynamic" else int(size), kind, int(offset))
            )
        tables[key] = tuple(rows)
    return tables


# -- Solidity sources of CCIP 1.6 -----------------------------------------------------------


@functools.cache
def _ccip_source(file: str) -> str:
    """A CCIP 1.6 source: a library's file name (Client.sol) or a path under
    contracts/ (offRamp/OffRamp.sol)."""
    root = package_dir(CCIP) / "contracts"
    return (root / file if "/" in file else root / "libraries" / file).read_text()


def ccip_constant(file: str, name: str) -> str:
    """The literal of ``<type> ... constant <name> = <literal>;`` in a CCIP source."""
    match = re.search(rf"\bconstant {re.escape(name)}\s*=\s*([^;]+);", _ccip_source(file))
    if match is None:
        pytest.fail(f"{CCIP}'s {file} declares no constant {name}")
    return match.group(1).strip()


def ccip_struct(file: str, name: str) -> list[tuple[str, str]]:
    """(type, name) of each field of ``struct <name>`` in a CCIP source, in
    order (a qualified type by its last name: Internal.MerkleRoot[] is MerkleRoot[])."""
    match = re.search(rf"\bstruct {re.escape(name)}\s*\{{(.*?)\}}", _ccip_source(file), re.S)
    if match is None:
        pytest.fail(f"{CCIP}'s {file} declares no struct {name}")
    body = re.sub(r"//[^\n]*", "", match.group(1))
    return [(t, n) for t, n in re.findall(r"([\w\[\]]+)\s+(\w+)\s*;", body)]


def ccip_enum(file: str, name: str) -> list[str]:
    match = re.search(rf"\benum {re.escape(name)}\s*\{{(.*?)\}}", _ccip_source(file), re.S)
    if match is None:
        pytest.fail(f"{CCIP}'s {file} declares no enum {name}")
    body = re.sub(r"//[^\n]*", "", match.group(1))
    return [v.strip() for v in body.split(",") if v.strip()]


# -- sample values for round trips ------------------------------------------------------------


def sample(param: dict[str, Any], seed: int = 1) -> Any:
    """A deterministic value of ``param``'s type, distinct per seed, that
    eth_abi encodes (addresses checksummed, as web3 wants them)."""
    from eth_utils import to_checksum_address

    kind = str(param["type"])
    if kind.endswith("]"):
        inner = dict(param, type=kind[: kind.rindex("[")])
        size = kind[kind.rindex("[") + 1 : -1]
        return [sample(inner, seed * 7 + i) for i in range(int(size) if size else 2)]
    if kind == "tuple":
        return tuple(sample(c, seed * 11 + i) for i, c in enumerate(param["components"]))
    if kind.startswith("uint"):
        bits = int(kind[4:] or 256)
        return (seed * 0x1F3D5B79 + bits) % (2**bits)
    if kind.startswith("int"):
        return -((seed * 0x3B9ACA07) % 2 ** (int(kind[3:] or 256) - 1))
    if kind == "address":
        return to_checksum_address(bytes([(seed * 13 + i) % 256 for i in range(20)]))
    if kind == "bool":
        return seed % 2 == 1
    if kind == "string":
        return f"s{seed}"
    if kind == "bytes":
        return bytes([(seed + i) % 256 for i in range(seed % 5 + 3)])
    if kind.startswith("bytes"):
        return bytes([(seed * 3 + i) % 256 for i in range(int(kind[5:]))])
    raise ValueError(kind)


def event_log(entry: dict[str, Any], values: dict[str, Any]) -> tuple[list[str], bytes]:
    """(topics, data) of one emission of event ``entry`` with ``values`` by name,
    encoded as the real contract emits it."""
    from eth_abi.abi import encode

    topics = [topic(entry)]
    data_types, data_values = [], []
    for param in entry["inputs"]:
        value = values[param["name"]]
        if param.get("indexed"):
            assert not canonical(param).endswith(("]", ")")) and canonical(param) not in (
                "bytes",
                "string",
            ), "an indexed dynamic value is a hash: not sampled here"
            topics.append("0x" + encode([canonical(param)], [value]).hex())
        else:
            data_types.append(canonical(param))
            data_values.append(value)
    return topics, encode(data_types, data_values)


def samples(entry: dict[str, Any]) -> dict[str, Any]:
    return {p["name"]: sample(p, i + 1) for i, p in enumerate(entry["inputs"])}


def plain(value: Any) -> Any:
    """A value as both sides can be compared: ints as ints, bytes and addresses
    as lower-case 0x hex, sequences and mappings element by element."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, str):
        return value.lower() if value.startswith("0x") else value
    if isinstance(value, dict):
        return tuple(plain(v) for v in value.values())
    if isinstance(value, list | tuple):
        return tuple(plain(v) for v in value)
    return value
