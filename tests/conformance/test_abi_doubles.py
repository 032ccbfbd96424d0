"""Every function and event our local doubles expose (contracts/build/*.json)
against the real contract each stands for (REAL): the same signature (its
selector or topic), the same indexed inputs, outputs and payability, and the
same field names inside its structs.

A double's own control surface (the setters and getters the local world wires
it with, the constants its tests read) is no part of the real contract: OWN
lists it, double by double, each entry with the reason it is the double's own,
and holds it to that: an OWN entry the real contract also names is not the
double's own but a real entry that must match, and one the double no longer
exposes is taken out. Everything else a double exposes claims to be the real
contract's and must match it.

A double may stand for more than one real contract where the local world
folds them into one: TokenMessengerV2 with its TokenMinterV2 (the minter's
token pairs and burn limits), CcipOffRamp with Chainlink's USDC pool
(releaseOrMint). Where Circle publishes an ABI on GitHub only (v2.1's
minimum fee, TokenMinterV2), the entries are read from its record in
conformance_abis.CIRCLE_GITHUB, which names the file and commit."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from conformance_abis import (
    REPO,
    Contract,
    ccip,
    ccip_v1_5,
    circle,
    circle_github,
    described,
    multicall3,
    signature,
    usdc,
)

BUILD = REPO / "contracts" / "build"


def _messenger() -> list[Contract]:
    return [
        circle("TokenMessengerV2"),
        circle_github("TokenMessengerV2 v2.1"),
        circle_github("TokenMinterV2"),
    ]


REAL: dict[str, Callable[[], list[Contract]]] = {
    "MessageTransmitterV2": lambda: [circle("MessageTransmitterV2")],
    "TokenMessengerV2": _messenger,
    "CcipRouter": lambda: [ccip("Router")],
    "CcipOnRamp": lambda: [ccip("OnRamp")],
    "CcipOffRamp": lambda: [ccip("OffRamp"), ccip("USDCTokenPoolCCTPV2")],
    "CcipEvm2EvmOnRamp": lambda: [ccip_v1_5("evm_2_evm_onramp")],
    "CcipEvm2EvmOffRamp": lambda: [ccip_v1_5("evm_2_evm_offramp")],
    "ICctpMessageTransmitterV2": lambda: [circle("MessageTransmitterV2")],
    "ICctpTokenMessengerV2": _messenger,
    "IEVM2AnyOnRampClient": lambda: [ccip("OnRamp")],
    "MockUSDC": lambda: [usdc()],
    # not a double: the published source itself, held to the published ABI
    "Multicall3": lambda: [multicall3()],
}
"""Each double and the real contracts it stands for."""

ABSENT = "absent (the double's own control surface goes into OWN, with its reason)"

_CONSTANT = "a constant of the double, public for its tests"
_TRANSMITTER = (
    "the owner's enabling of the executing network's key (no OCR: the real "
    "OffRamp's transmitters are its OCR config's)"
)

OWN: dict[str, dict[str, str]] = {
    "CcipOnRamp": {
        "FeeConfigSet": "the event of setFeeConfig",
        "setFeeConfig": "the owner's native fee, base + gasLimit * per gas wei "
        "(the real OnRamp's fee follows the FeeQuoter's prices)",
        "setDestChain": "the owner's wiring of a destination: its token, CCTP domain "
        "and OffRamp (the real OnRamp's applyDestChainConfigUpdates and its USDC "
        "pool's setDomains)",
    },
    "CcipOffRamp": {
        "TransmitterSet": "the event of setTransmitter",
        "setTransmitter": _TRANSMITTER,
    },
    "CcipEvm2EvmOffRamp": {
        "setTransmitter": _TRANSMITTER,
        "executeMessages": "the executing network's delivery of the lane's messages "
        "without commit store or proofs (the real network calls transmit with an "
        "OCR2 report of committed messages)",
        "failMessages": "records FAILURE for the given messages, for the tests of a "
        "stranded message",
    },
    "MessageTransmitterV2": {
        "TokenMessengerSet": "the event of setTokenMessenger",
        "setTokenMessenger": "the owner's wiring of the one local TokenMessengerV2 "
        "that may send (the real transmitter's sendMessage takes any sender)",
        "tokenMessenger": "setTokenMessenger's messenger",
        "FINALITY_THRESHOLD_FINALIZED": _CONSTANT + ": Circle's FinalityThresholds "
        "constant, no getter of the real contract",
    },
    "TokenMessengerV2": {
        "FINALITY_THRESHOLD_FINALIZED": _CONSTANT + ": Circle's FinalityThresholds "
        "constant, no getter of the real contract",
        "TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD": _CONSTANT + ": Circle's "
        "FinalityThresholds constant, no getter of the real contract",
    },
}
"""Each double's own additions, by double and entry name, with the reason it
is the double's own: none of them is the real contract's."""


def doubles() -> dict[str, list[dict[str, Any]]]:
    """Each compiled double's functions and events, by contract name."""
    found = {}
    for path in sorted(BUILD.glob("*.json")):
        artifact = json.loads(path.read_text())
        found[artifact["contractName"]] = [
            e for e in artifact["abi"] if e["type"] in ("function", "event")
        ]
    return found


def _cases() -> list[Any]:
    return [
        pytest.param(double, entry, id=f"{double}.{entry['name']}")
        for double, entries in doubles().items()
        for entry in entries
    ]


def struct_names(param: dict[str, Any]) -> Any:
    """The field names inside a parameter's structs (not the parameter's own name)."""
    if not str(param["type"]).startswith("tuple"):
        return None
    return [(c["name"], struct_names(c)) for c in param["components"]]


@pytest.mark.parametrize(("double", "entry"), _cases())
def test_the_double_exposes_only_the_real_contracts_functions_and_events(
    double: str, entry: dict[str, Any]
) -> None:
    assert double in REAL, f"contracts/build/{double}.json: REAL names no real contract for it"
    reals = REAL[double]()
    own = OWN.get(double, {}).get(entry["name"])
    if own is not None:
        named = [
            described(e)
            for r in reals
            for kind in ("function", "event")
            for e in r.entries(kind, entry["name"])
        ]
        assert not named, (
            f"{double}.{entry['name']} is in OWN ({own}), but "
            f"{' / '.join(str(r) for r in reals)} has {named}: not the double's own, "
            "it must match"
        )
        return
    same_name = [e for real in reals for e in real.entries(entry["type"], entry["name"])]
    matching = [e for e in same_name if described(e) == described(entry)]
    assert matching, (
        f"{double}: {described(entry)}; {' / '.join(str(r) for r in reals)}: "
        f"{[described(e) for e in same_name] or ABSENT}"
    )
    ours = [struct_names(p) for p in entry["inputs"]]
    assert any([struct_names(p) for p in e["inputs"]] == ours for e in matching), (
        f"{double}.{signature(entry)}: its structs' field names are not the real ones"
    )


def test_every_own_addition_is_the_doubles_and_still_there() -> None:
    """OWN names only entries the double exposes, each with its reason."""
    present = doubles()
    stale, unexplained = [], []
    for double, names in OWN.items():
        exposed = {e["name"] for e in present.get(double, [])}
        stale += [f"{double}.{n}" for n in names if n not in exposed]
        unexplained += [f"{double}.{n}" for n, why in names.items() if not why.strip()]
    assert not stale, f"no longer exposed, remove from OWN: {stale}"
    assert not unexplained, f"OWN gives no reason for {unexplained}"
