"""CCTP v2 against what Circle publishes: the message and burn body layouts our
codec (qtg_runner.chains.cctp) reads and writes, against the layout table of
Circle's IMessageTransmitter and Circle's own example attestation (a real
attested fast burn, in @circle-fin/provider-cctp-v2); the JSON the fake Iris
(qtg_world.iris) serves and the fields our client (cctp_client,
cctp_burn) reads, against Circle's response types (AttestationMessage,
DecodedMessage, DecodedMessageBody in the provider's index.d.ts) and its fee
tiers' check. No chain and no database: the fake Iris answers from memory."""

from __future__ import annotations

import re
from dataclasses import fields
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from conformance_abis import (
    CIRCLE_GITHUB,
    CIRCLE_PROVIDER,
    circle,
    circle_abi_problem,
    circle_example_attestation,
    circle_github,
    circle_layouts,
    circle_npm_contracts,
    circle_type,
    node_modules,
)

from qtg_runner.chains.cctp import BURN_BODY_LENGTH, MESSAGE_HEADER_LENGTH, BurnBody, CctpMessage
from qtg_world import iris
from qtg_world.chains.cctp import Attester

OURS = {"message": (CctpMessage, MESSAGE_HEADER_LENGTH), "burn body": (BurnBody, BURN_BODY_LENGTH)}
RENAMED = {"messageBody": "body"}
"""Circle's field names whose snake_case is not our field's name."""


def snake(name: str) -> str:
    return RENAMED.get(name) or re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def test_circle_contract_abis_are_installed() -> None:
    """The CCTP selectors, topics, calls and the doubles' ABIs are checked
    against Circle's MessageTransmitterV2 / TokenMessengerV2 ABIs: they must be
    in node_modules."""
    node_modules()
    problem = circle_abi_problem()
    assert problem is None, problem


@pytest.mark.parametrize("record", sorted(CIRCLE_GITHUB))
def test_what_circle_publishes_on_github_only_is_not_on_npm(record: str) -> None:
    """Each entry recorded from Circle's GitHub extends an installed contract
    that lacks it: where Circle's npm ABI names one, the test reads it there,
    and the record is taken out."""
    extends = CIRCLE_GITHUB[record].npm
    if extends is None:
        assert "TokenMinterV2" not in circle_npm_contracts(), (
            f"Circle now ships {record} on npm: read it there, remove the record"
        )
        return
    installed = circle(extends)
    shipped = [
        text
        for text, entry in zip(
            CIRCLE_GITHUB[record].entries, circle_github(record).abi, strict=True
        )
        if installed.entries(entry["type"], entry["name"])
    ]
    assert not shipped, (
        f"{installed} now names {shipped}: read them there, remove them from {record}"
    )


@pytest.mark.parametrize("layout", ["message", "burn body"])
def test_our_codec_has_circles_layout(layout: str) -> None:
    """Each field of Circle's table, written at its offset with a value of its
    own, is read by our codec as that field, and our encoding gives the bytes back."""
    table = circle_layouts()[layout]
    codec, fixed = OURS[layout]
    assert [snake(f.name) for f in table] == [f.name for f in fields(codec)]
    assert table[-1].size is None and table[-1].offset == fixed
    raw = bytearray(fixed)
    expected: dict[str, Any] = {}
    for i, f in enumerate(table):
        if f.size is None:
            value = bytes(range(7, 7 + 40 + i))
            raw += value
        else:
            assert f.offset + f.size <= fixed, f
            value = bytes((i * 37 + j) % 251 + 1 for j in range(f.size))
            raw[f.offset : f.offset + f.size] = value
            if f.type.startswith("uint"):
                value = int.from_bytes(value, "big")
        expected[snake(f.name)] = value
    decoded = codec.decode(bytes(raw))  # type: ignore[attr-defined]
    assert {k: getattr(decoded, k) for k in expected} == expected
    assert decoded.encode() == bytes(raw)


def _word_value(text: str) -> int:
    return int(text, 16)


def test_circles_example_attestation_reads_as_circle_decoded_it() -> None:
    """Circle's example message, read by our codec, has the values Circle's
    decodedMessage gives it (compared as numbers: the texts' widths differ)."""
    example = circle_example_attestation()
    message = CctpMessage.decode(bytes.fromhex(example["message"][2:]))
    body = BurnBody.decode(message.body)
    circle_message, circle_body = example["decodedMessage"], example["decodedMessage"]
    for name, text in circle_message.items():
        if name == "decodedMessageBody":
            continue
        ours = getattr(message, snake(name))
        assert (int.from_bytes(ours, "big") if isinstance(ours, bytes) else ours) == (
            _word_value(text) if text.startswith("0x") else int(text)
        ), name
    circle_body = circle_message["decodedMessageBody"]
    for name, text in circle_body.items():
        ours = getattr(body, snake(name))
        if text is None:
            assert ours == b"", name
            continue
        assert (int.from_bytes(ours, "big") if isinstance(ours, bytes) else ours) == (
            _word_value(text) if text.startswith("0x") else int(text)
        ), name
    assert example["eventNonce"] == "0x" + message.nonce.hex()


def test_the_fake_iris_decodes_a_message_as_circle_does() -> None:
    """Circle's example message, rendered by the fake Iris, is Circle's decodedMessage."""
    example = circle_example_attestation()
    message = CctpMessage.decode(bytes.fromhex(example["message"][2:]))
    assert iris._decoded(message) == example["decodedMessage"]


TS_TYPES = {"string": str, "number": int, "null": type(None)}


def conforms(value: Any, interface: str, where: str) -> list[str]:
    """What in ``value`` is not Circle's ``interface``: missing required fields,
    fields Circle's type does not have, values of another type."""
    shape = circle_type(interface)
    problems = [
        f"{where}.{n} is missing" for n, f in shape.items() if not f.optional and n not in value
    ]
    for name, item in value.items():
        field = shape.get(name)
        if field is None:
            problems.append(f"{where}.{name} is no field of Circle's {interface}")
            continue
        kinds = [k.strip() for k in field.type.split("|")]
        if kinds[0][:1].isupper() and isinstance(item, dict):
            problems += conforms(item, kinds[0], f"{where}.{name}")
        elif not any(k in TS_TYPES and isinstance(item, TS_TYPES[k]) for k in kinds):
            problems.append(f"{where}.{name} = {item!r} is not {field.type}")
    return problems


def test_circles_example_conforms_to_circles_types() -> None:
    """The checker itself, on Circle's own example: nothing to say."""
    assert conforms(circle_example_attestation(), "AttestationMessage", "example") == []


def _burn_message(min_finality: int) -> bytes:
    """A MessageSent as the source TokenMessengerV2 emits it: nonce and execution fields zero."""
    body = BurnBody(
        1,
        bytes(12) + b"\x11" * 20,
        bytes(12) + b"\x22" * 20,
        2_500_000,
        bytes(12) + b"\x33" * 20,
        250,
        0,
        0,
        b"",
    ).encode()
    return CctpMessage(
        1,
        0,
        6,
        bytes(32),
        bytes(12) + b"\x44" * 20,
        bytes(12) + b"\x55" * 20,
        bytes(32),
        min_finality,
        0,
        body,
    ).encode()


def _answer(min_finality: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The fake Iris's complete answer for one burn, its destination chain's head at 0x100."""
    monkeypatch.setattr(iris, "rpc", lambda url, method, params: "0x100")
    chain: Any = SimpleNamespace(rpc_url="http://127.0.0.1:9")
    state = iris._State(iris.IrisConfig(time_scale=0.0), {6: chain}, [Attester(b"\x01" * 32)])
    burn = iris._Burn(0, "0x" + "ab" * 32, 0, [(0, _burn_message(min_finality))])
    return iris._entry(state, burn, 0, _burn_message(min_finality))


@pytest.mark.parametrize("finality", [1000, 2000], ids=["fast", "standard"])
def test_the_fake_iris_answers_circles_attestation_message(
    finality: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = _answer(finality, monkeypatch)
    assert conforms(answer, "AttestationMessage", "answer") == []
    assert answer["status"] == "complete"
    assert answer["cctpVersion"] == circle_example_attestation()["cctpVersion"]


def test_a_fast_attestation_expires_as_circles_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Circle's fast attestations carry an expirationBlock (its example's is
    32944472, in the message and in decodedMessageBody); standard ones 0."""
    example = circle_example_attestation()
    expiry = example["decodedMessage"]["decodedMessageBody"]["expirationBlock"]
    assert (
        BurnBody.decode(
            CctpMessage.decode(bytes.fromhex(example["message"][2:])).body
        ).expiration_block
        == int(expiry)
        > 0
    )
    for finality, expires in ((1000, True), (2000, False)):
        answer = _answer(finality, monkeypatch)
        text = answer["decodedMessage"]["decodedMessageBody"]["expirationBlock"]
        sent = BurnBody.decode(CctpMessage.decode(bytes.fromhex(answer["message"][2:])).body)
        assert sent.expiration_block == int(text)
        assert (int(text) > 0) == expires, (finality, text)


def test_what_our_client_reads_of_iris_is_in_circles_type() -> None:
    """cctp_client reads messages[].status; cctp_burn messages[].message and
    .attestation: all of them fields of Circle's AttestationMessage, not optional."""
    shape = circle_type("AttestationMessage")
    for name in ("status", "message", "attestation"):
        assert name in shape and not shape[name].optional, name
    assert "complete" in str(circle_example_attestation()["status"])


def test_the_fake_iris_fees_are_what_circles_provider_accepts() -> None:
    """GET /v2/burn/USDC/fees/{src}/{dst}: a list of {finalityThreshold: number,
    minimumFee: string or number} with a tier at 1000 (the provider's check)."""
    mjs = (node_modules() / CIRCLE_PROVIDER / "index.mjs").read_text()
    assert "'finalityThreshold' in item && 'minimumFee' in item" in mjs
    handle = iris.serve([], [Attester(b"\x01" * 32)])
    try:
        tiers = httpx.get(f"{handle.url}/v2/burn/USDC/fees/0/6", timeout=10).json()
    finally:
        handle.stop()
    assert isinstance(tiers, list) and tiers
    for tier in tiers:
        assert isinstance(tier["finalityThreshold"], int)
        assert isinstance(tier["minimumFee"], int | float | str)
    assert 1000 in [t["finalityThreshold"] for t in tiers]
