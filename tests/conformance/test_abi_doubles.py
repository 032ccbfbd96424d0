"""Every function and event our local doubles expose (contracts/build/*.json)
against the real contract each stands for (REAL): the same signature (its
selector or topic), the same indexed inputs, outputs and payability, and the
same field names inside its structs. A double's own plumbing (the setters the
local world wires it with, the roles it folds in) is a mismatch like any other:
KNOWN lists those another part of issue 38 owns, as strict xfails; a fixed one
whose mark stays fails test_every_known_mismatch_is_still_there."""

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
    described,
    known,
    signature,
    usdc,
)

BUILD = REPO / "contracts" / "build"

REAL: dict[str, tuple[str | None, Callable[[], list[Contract]]]] = {
    "MessageTransmitterV2": ("cctp", lambda: [circle("MessageTransmitterV2")]),
    "TokenMessengerV2": ("cctp", lambda: [circle("TokenMessengerV2")]),
    "CcipRouter": ("ccip", lambda: [ccip("Router")]),
    "CcipOnRamp": ("ccip", lambda: [ccip("OnRamp")]),
    "CcipOffRamp": ("ccip", lambda: [ccip("OffRamp")]),
    "CcipEvm2EvmOnRamp": ("ccip", lambda: [ccip_v1_5("evm_2_evm_onramp")]),
    "CcipEvm2EvmOffRamp": ("ccip", lambda: [ccip_v1_5("evm_2_evm_offramp")]),
    "ICctpMessageTransmitterV2": ("cctp", lambda: [circle("MessageTransmitterV2")]),
    "ICctpTokenMessengerV2": ("cctp", lambda: [circle("TokenMessengerV2")]),
    "IEVM2AnyOnRampClient": ("ccip", lambda: [ccip("OnRamp")]),
    "MockUSDC": (None, lambda: [usdc()]),
}
"""Each double: the protocol whose part of issue 38 owns it (None: no part) and
the real contracts it stands for."""

ABSENT = "the double's own, absent from the real contract"

KNOWN: dict[str, dict[str, str]] = {
    "CcipOffRamp": {
        "SourceChainConfigSet": "v1.6's carries the SourceChainConfig struct, ours bytes",
        "TransmitterSet": ABSENT,
        "FAILURE": ABSENT,
        "IN_PROGRESS": ABSENT,
        "SUCCESS": ABSENT,
        "UNTOUCHED": ABSENT,
        "execute": "v1.6's takes an OCR3 report: execute(bytes32[2],bytes)",
        "executeSingleMessage": "v1.6's also takes offchainTokenData and tokenGasOverrides",
        "getExecutionStateById": "v1.6 has getExecutionState(uint64,uint64)",
        "isTransmitter": ABSENT,
        "localChainSelector": ABSENT,
        "manuallyExecute": "v1.6's is manuallyExecute(ExecutionReport[],GasLimitOverride[][])",
        "setSourceChain": ABSENT,
        "setTransmitter": ABSENT,
        "sourceOnRamp": ABSENT,
        "token": ABSENT,
    },
    "CcipOnRamp": {
        "DestChainConfigSet": "v1.6's is (uint64 indexed,uint64,address,bool)",
        "DEFAULT_GAS_LIMIT": ABSENT,
        "EVM_2_ANY_MESSAGE_HASH": ABSENT,
        "EVM_EXTRA_ARGS_V2_TAG": ABSENT,
        "FEE_BASE": ABSENT,
        "FEE_PER_GAS": ABSENT,
        "MAX_GAS_LIMIT": ABSENT,
        "destToken": ABSENT,
        "localChainSelector": ABSENT,
        "parseExtraArgs": ABSENT,
        "router": ABSENT,
        "senderNonces": ABSENT,
        "sequenceNumbers": ABSENT,
        "setDestChain": ABSENT,
        "token": ABSENT,
    },
    "CcipRouter": {
        "localChainSelector": ABSENT,
        "setOnRamp": "v1.6 sets ramps with applyRampUpdates",
    },
    "MessageTransmitterV2": {
        "TokenMessengerSet": ABSENT,
        "FINALITY_THRESHOLD_FINALIZED": ABSENT,
        "enabledAttesterCount": "Circle's is getNumEnabledAttesters()",
        "setTokenMessenger": ABSENT,
        "tokenMessenger": ABSENT,
    },
    "TokenMessengerV2": {
        "MinFeeControllerSet": ABSENT,
        "MinFeeSet": ABSENT,
        "SetBurnLimitPerMessage": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "TokenPairLinked": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "FINALITY_THRESHOLD_FINALIZED": ABSENT,
        "MIN_FEE_MULTIPLIER": ABSENT,
        "TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD": ABSENT,
        "burnLimitsPerMessage": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "getMinFeeAmount": ABSENT,
        "linkTokenPair": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "minFee": ABSENT,
        "minFeeController": ABSENT,
        "remoteTokensToLocalTokens": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "setMaxBurnAmountPerMessage": "TokenMinterV2's (folded in), not TokenMessengerV2's",
        "setMinFee": ABSENT,
        "setMinFeeController": ABSENT,
    },
}
"""Mismatches of the doubles that the owning part of issue 38 is fixing, by
double and entry name."""


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
    cases = []
    for double, entries in doubles().items():
        owner = REAL.get(double, (None, None))[0]
        for entry in entries:
            what = KNOWN.get(double, {}).get(entry["name"])
            marks = [known(owner, f"{double}.{entry['name']}: {what}")] if owner and what else []
            cases.append(pytest.param(double, entry, marks=marks, id=f"{double}.{entry['name']}"))
    return cases


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
    reals = REAL[double][1]()
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


def test_every_known_mismatch_is_still_there() -> None:
    """A mark in KNOWN whose entry the double no longer exposes, or now exposes
    as the real contract does, has done its work: take it out."""
    present = doubles()
    stale = []
    for double, names in KNOWN.items():
        try:
            reals: list[Contract] | None = REAL[double][1]()
        except pytest.skip.Exception:
            reals = None  # its real contract is not installed: judged by presence alone
        for name in names:
            entries = [e for e in present.get(double, []) if e["name"] == name]
            real = {
                described(e)
                for r in reals or []
                for x in entries
                for e in r.entries(x["type"], name)
            }
            if not entries or (reals is not None and all(described(e) in real for e in entries)):
                stale.append(f"{double}.{name}")
    assert not stale, f"fixed, remove from KNOWN: {stale}"
