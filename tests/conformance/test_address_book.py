"""The address book (networks/<class>.toml, read by qtg_runner.networks) against
the packages that publish the same facts, wherever one does:

    Circle's @circle-fin/provider-cctp-v2   each chain's id and network class,
        (its chain definitions, read        CCTP domain, TokenMessengerV2 and
        through node)                       MessageTransmitterV2, USDC, and the
                                            confirmations of a chain whose
                                            finality_depth the book takes from
                                            it; the Iris URLs (its constants)
    @layerzerolabs/lz-definitions           each Stargate endpoint id is a v2 id
                                            of the chain (its network is the
                                            Stargate deployment of that chain id)
    @stargatefinance/stg-evm-v2             each chain's StargatePoolUSDC, the
        (deployments/<network>)             token that pool moves, TokenMessaging;
                                            a chain without a stargate entry has
                                            no USDC pool there
    @stargatefinance/stg-definitions-v2     the USDC asset of each endpoint id
    pybit (Bybit's SDK)                     Bybit's testnet and production URLs

and to itself: each v1.6 CCIP lane's ramps are its chains' CcipOnRamp and
CcipOffRamp, and each package the book cites is cited at the version installed.
What no package carries (CCIP selectors, routers and lanes; finality rules)
is held to its public source by review only: the source strings name it.

The loader's refusals are here too: a bad address, a missing field, a key
given twice, each a BookError naming the file, the entry and what is wrong.

Where node_modules is missing every package test skips (conformance_abis's
convention); so does the Circle test where node is not on PATH."""

from __future__ import annotations

import functools
import importlib.metadata
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conformance_abis import REPO, node_modules, package_dir, package_version

from qtg_runner.networks import NETWORK_CLASSES, AddressBook, BookError, Chain, load_book

CIRCLE = "@circle-fin/provider-cctp-v2"
LZ_DEFINITIONS = "@layerzerolabs/lz-definitions"
STARGATE = "@stargatefinance/stg-evm-v2"
STARGATE_DEFINITIONS = "@stargatefinance/stg-definitions-v2"

CITATION = re.compile(r"(npm|pypi):((?:@[\w.-]+/)?[\w.-]+)@([0-9][\w.+-]*)")


def same(a: str | None, b: str | None) -> bool:
    """Two addresses are one (the packages mix checksummed and lower case)."""
    return a is not None and b is not None and a.lower() == b.lower()


@functools.cache
def book(network_class: str) -> AddressBook:
    return load_book(network_class)


def chains() -> list[tuple[str, Chain]]:
    return [(n, c) for n in NETWORK_CLASSES for c in book(n).chains]


CHAIN_IDS = [f"{n}:{c.chain_key}" for n, c in chains()]


def node_json(script: str) -> Any:
    """What ``script`` prints as JSON, run by node in the repository (so its
    require() finds node_modules)."""
    node_modules()
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not on PATH: Circle's chain definitions are read through it")
    done = subprocess.run(
        [node, "-e", script], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"node could not read the package: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


@functools.cache
def circle_chains() -> dict[int, dict[str, Any]]:
    """Circle's EVM chain definitions (CCTPV2BridgingProvider.supportedChains),
    by chain id."""
    package_dir(CIRCLE)
    rows = node_json(
        f"const m = require('{CIRCLE}');"
        "const p = new m.CCTPV2BridgingProvider();"
        "console.log(JSON.stringify(p.supportedChains.filter(c => c.type === 'evm').map(c => ({"
        "chain: c.chain, chainId: c.chainId, isTestnet: c.isTestnet, usdc: c.usdcAddress,"
        "cctp: c.cctp ? {domain: c.cctp.domain, v2: c.cctp.contracts.v2} : null}))));"
    )
    return {int(row["chainId"]): row for row in rows}


@functools.cache
def layerzero_networks(eids: tuple[int, ...]) -> dict[int, dict[str, str]]:
    """Each endpoint id's network and endpoint version, as lz-definitions names them."""
    package_dir(LZ_DEFINITIONS)
    rows = node_json(
        f"const d = require('{LZ_DEFINITIONS}');"
        f"console.log(JSON.stringify({json.dumps(list(eids))}.map(e => ({{"
        "eid: e, network: d.endpointIdToNetwork(e), version: d.endpointIdToVersion(e)}))));"
    )
    return {int(row["eid"]): row for row in rows}


@functools.cache
def stargate_usdc_assets() -> dict[int, dict[str, Any]]:
    """stg-definitions-v2's USDC asset, by endpoint id."""
    package_dir(STARGATE_DEFINITIONS)
    networks = node_json(
        f"const d = require('{STARGATE_DEFINITIONS}');"
        "console.log(JSON.stringify(d.ASSETS[d.TokenName.USDC].networks));"
    )
    return {int(eid): asset for eid, asset in networks.items()}


def stargate_deployment(network: str) -> Path:
    return package_dir(STARGATE) / "deployments" / network


def deployed(network: str, contract: str) -> dict[str, Any] | None:
    path = stargate_deployment(network) / f"{contract}.json"
    return json.loads(path.read_text()) if path.is_file() else None


# -- the book holds together ---------------------------------------------------


@pytest.mark.parametrize("network_class", NETWORK_CLASSES)
def test_the_book_lists_the_supported_chains(network_class: str) -> None:
    wanted = {
        "testnet": {
            "ethereum-sepolia",
            "base-sepolia",
            "arbitrum-sepolia",
            "op-sepolia",
            "avalanche-fuji",
        },
        "mainnet": {"ethereum", "base", "arbitrum", "op", "avalanche"},
    }[network_class]
    found = book(network_class)
    assert {c.chain_key for c in found.chains} == wanted
    for chain in found.chains:
        usdc = chain.token("USDC")
        assert usdc is not None and usdc.decimals == 6, chain.chain_key
        assert {"cctp", "ccip"} <= chain.protocols.keys(), chain.chain_key
        assert chain.rpc_url_env == "QTG_RPC_" + chain.chain_key.upper().replace("-", "_")


@pytest.mark.parametrize("network_class", NETWORK_CLASSES)
def test_each_v1_6_lane_uses_its_chains_ramps(network_class: str) -> None:
    """A v1.6 lane's OnRamp is its source's CcipOnRamp and its OffRamp its
    destination's CcipOffRamp (upsert_ccip_lane's default), and a lane's two
    ramps are not one contract of one chain."""
    found = book(network_class)
    assert found.ccip_lanes
    for lane in found.ccip_lanes:
        source = found.chain(lane.source_chain_key).protocols["ccip"].contracts
        dest = found.chain(lane.dest_chain_key).protocols["ccip"].contracts
        if lane.version == "1.6":
            assert same(lane.onramp, source.get("CcipOnRamp")), lane
            assert same(lane.offramp, dest.get("CcipOffRamp")), lane
        else:
            assert not same(lane.onramp, source.get("CcipOnRamp")), lane


def test_each_package_is_cited_at_the_version_installed() -> None:
    """A citation ``npm:<package>@<version>`` or ``pypi:<package>@<version>``
    names what is installed, so a bump of the lock file brings the book back
    to review (and to this test)."""
    node_modules()
    cited: set[tuple[str, str, str]] = set()
    for network_class in NETWORK_CLASSES:
        text = book(network_class).path.read_text()
        cited |= {m.groups() for m in CITATION.finditer(text)}
    assert cited
    for registry, package, version in sorted(cited):
        if registry == "npm":
            installed = package_version(package)
        else:
            installed = importlib.metadata.version(package)
        assert installed == version, (
            f"{registry}:{package} is cited at {version}, installed {installed}"
        )


# -- against the packages ------------------------------------------------------


@pytest.mark.parametrize(("network_class", "chain"), chains(), ids=CHAIN_IDS)
def test_cctp_and_usdc_against_circle(network_class: str, chain: Chain) -> None:
    circle = circle_chains().get(chain.chain_id)
    assert circle is not None, f"{CIRCLE} defines no chain {chain.chain_id}"
    assert circle["isTestnet"] is (network_class == "testnet"), circle["chain"]
    cctp = chain.protocols["cctp"]
    assert circle["cctp"] is not None, circle["chain"]
    assert cctp.remote_id == circle["cctp"]["domain"]
    assert same(cctp.contracts["TokenMessengerV2"], circle["cctp"]["v2"]["tokenMessenger"])
    assert same(cctp.contracts["MessageTransmitterV2"], circle["cctp"]["v2"]["messageTransmitter"])
    usdc = chain.token("USDC")
    assert usdc is not None and same(usdc.address, circle["usdc"])
    if chain.finality_depth is not None and CIRCLE in chain.source:
        assert chain.finality_depth == circle["cctp"]["v2"]["confirmations"]


@pytest.mark.parametrize("network_class", NETWORK_CLASSES)
def test_iris_url_against_circle(network_class: str) -> None:
    text = (package_dir(CIRCLE) / "index.cjs").read_text()
    constant = {"testnet": "IRIS_API_SANDBOX_BASE_URL", "mainnet": "IRIS_API_BASE_URL"}[
        network_class
    ]
    found = re.findall(rf"const {constant} = '([^']+)'", text)
    assert len(found) == 1, f"{CIRCLE} defines {constant} {len(found)} times"
    assert book(network_class).iris.url == found[0]


@pytest.mark.parametrize(("network_class", "chain"), chains(), ids=CHAIN_IDS)
def test_stargate_against_layerzero_and_stargate(network_class: str, chain: Chain) -> None:
    """The endpoint id is a v2 id whose network Stargate deployed on this chain
    id; the pool, its token and TokenMessaging are the deployment's; the pool's
    token is Stargate's USDC asset there. A chain the book gives no stargate
    entry has no USDC pool in the package."""
    stargate = chain.protocols.get("stargate")
    if stargate is None:
        by_chain_id = [
            path.parent.name
            for path in (package_dir(STARGATE) / "deployments").glob("*/.chainId")
            if path.read_text().strip() == str(chain.chain_id)
        ]
        pools = [n for n in by_chain_id if deployed(n, "StargatePoolUSDC") is not None]
        assert not pools, f"{STARGATE} deploys a USDC pool on {chain.chain_key}: {pools}"
        return
    eid = stargate.remote_id
    network = layerzero_networks((eid,))[eid]
    assert network["version"] == "v2", network
    assert network["network"].endswith("-" + network_class), network
    chain_id = (stargate_deployment(network["network"]) / ".chainId").read_text().strip()
    assert chain_id == str(chain.chain_id), network
    pool = deployed(network["network"], "StargatePoolUSDC")
    messaging = deployed(network["network"], "TokenMessaging")
    assert pool is not None and messaging is not None, network
    assert same(stargate.contracts["StargatePool"], pool["address"])
    assert same(stargate.contracts["TokenMessaging"], messaging["address"])
    assert same(stargate.pool_token, pool["args"][2]), "the pool's token (its constructor's)"
    asset = stargate_usdc_assets().get(eid)
    assert asset is not None and same(stargate.pool_token, asset.get("address")), asset


@pytest.mark.parametrize("network_class", NETWORK_CLASSES)
def test_bybit_url_against_pybit(network_class: str) -> None:
    from pybit.unified_trading import HTTP

    (venue,) = book(network_class).venues
    assert venue.base_url == HTTP(testnet=network_class == "testnet").endpoint


# -- the loader's refusals -----------------------------------------------------


def refused(tmp_path: Path, text: str) -> str:
    path = tmp_path / "testnet.toml"
    path.write_text(text)
    with pytest.raises(BookError) as caught:
        load_book("testnet", path)
    message = str(caught.value)
    assert str(path) in message
    return message


@pytest.fixture
def testnet_text() -> str:
    return (REPO / "networks" / "testnet.toml").read_text()


def test_a_bad_address_is_refused(tmp_path: Path, testnet_text: str) -> None:
    short = testnet_text.replace(
        'TokenMessengerV2 = "0x8FE6B999Dc680CcFDD5Bf7EB0974218be2542DAA"',
        'TokenMessengerV2 = "0x8FE6B999Dc680CcFDD5Bf7EB0974218be2542DA"',
        1,
    )
    assert short != testnet_text
    message = refused(tmp_path, short)
    assert "chain 'ethereum-sepolia' protocol cctp contracts" in message
    assert "TokenMessengerV2 must be an address of 20 bytes" in message

    mistyped = testnet_text.replace(
        '"0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7238"',
        '"0x1c7D4B196Cb0C7B01d743Fbc6116a902379C7239"',
        1,
    )
    message = refused(tmp_path, mistyped)
    assert "chain 'ethereum-sepolia' tokens[0]" in message and "EIP-55 checksum" in message


def test_a_missing_field_is_refused(tmp_path: Path, testnet_text: str) -> None:
    without = testnet_text.replace(
        'MessageTransmitterV2 = "0xE737e5cEBEEBa77EFE34D4aa090756590b1CE275"\n', "", 1
    )
    message = refused(tmp_path, without)
    assert (
        "chain 'ethereum-sepolia' protocol cctp contracts: missing MessageTransmitterV2" in message
    )

    without = testnet_text.replace('rpc_url_env = "QTG_RPC_BASE_SEPOLIA"\n', "", 1)
    message = refused(tmp_path, without)
    assert "chains[1]: missing rpc_url_env" in message


def test_a_key_given_twice_is_refused(tmp_path: Path, testnet_text: str) -> None:
    twice = testnet_text.replace('chain_key = "op-sepolia"', 'chain_key = "base-sepolia"', 1)
    assert "chains: chain_key base-sepolia is given twice" in refused(tmp_path, twice)

    lane = testnet_text[testnet_text.index("[[ccip_lanes]]") :].split("\n\n")[0]
    message = refused(tmp_path, testnet_text + "\n" + lane + "\n")
    assert "ccip_lanes: lane ethereum-sepolia -> base-sepolia is given twice" in message


def test_an_unknown_field_or_chain_is_refused(tmp_path: Path, testnet_text: str) -> None:
    typo = testnet_text.replace("finality_depth = 65", "finalty_depth = 65", 1)
    assert "unknown field finalty_depth (a typo?)" in refused(tmp_path, typo)

    stray = testnet_text.replace('dest_chain_key = "base-sepolia"', 'dest_chain_key = "base"', 1)
    message = refused(tmp_path, stray)
    assert "ccip lane 'ethereum-sepolia' -> 'base'" in message
    assert "dest_chain_key 'base' is not a chain of this book" in message
