"""CCTP v2 messages as MessageTransmitterV2 sends and receives them: the
codec the cctp executors, the CCTP client (cctp_client) and the local world's
attestation service (qtg_world.iris) share: the message header, the v2 burn
body, an address as the 32 bytes a message carries, and the finality
thresholds. The local double's deployment and attesters are the world's
(qtg_world.chains.cctp).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Annotated, ClassVar, Self

__all__ = [
    "BURN_BODY_LENGTH",
    "FINALITY_FAST",
    "FINALITY_STANDARD",
    "MESSAGE_HEADER_LENGTH",
    "BurnBody",
    "CctpMessage",
    "address_to_bytes32",
]

FINALITY_FAST = 1000
FINALITY_STANDARD = 2000
"""A v2 burn's finality thresholds: fast (confirmed) and standard (finalized)."""

MESSAGE_HEADER_LENGTH = 148
BURN_BODY_LENGTH = 228


def address_to_bytes32(address: str) -> bytes:
    """An EVM address left-padded to the 32 bytes CCTP messages carry."""
    raw = bytes.fromhex(address.removeprefix("0x"))
    if len(raw) != 20:
        raise ValueError(f"{address!r} is not a 20-byte address")
    return bytes(12) + raw


Uint32 = Annotated[int, 4]
Uint256 = Annotated[int, 32]
Bytes32 = Annotated[bytes, 32]
"""The widths of a message's fixed fields; its last field, plain ``bytes``, is the rest."""


_Layout = tuple[tuple[str, int | None, bool], ...]
_LAYOUTS: dict[type, _Layout] = {}


def _layout(cls: type) -> _Layout:
    """(name, width, is an integer) of each field of ``cls`` in order, from its
    annotations; the width None for the last, which takes the rest. Read once
    per class."""
    known = _LAYOUTS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for field in dataclasses.fields(cls):
        hint = hints[field.name]
        if typing.get_origin(hint) is Annotated:
            base, width = typing.get_args(hint)
            fields.append((field.name, width, base is int))
        else:
            fields.append((field.name, None, False))
    assert all(width is not None for _, width, _ in fields[:-1]), "only the last field is open"
    layout = _LAYOUTS[cls] = tuple(fields)
    return layout


class _Packed:
    """A part of a CCTP message, its fields one after another as its annotations
    lay them out: big-endian integers and byte strings of a fixed width
    (Uint32, Uint256, Bytes32), then the rest. One codec for the header and the
    burn body, so that neither writes its offsets by hand."""

    what: ClassVar[str]
    """How an error names it ("a CCTP v2 message")."""

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        layout = _layout(cls)
        fixed = sum(width or 0 for _, width, _ in layout)
        if len(raw) < fixed:
            raise ValueError(f"{cls.what} is at least {fixed} bytes, not {len(raw)}")
        values: dict[str, int | bytes] = {}
        start = 0
        for name, width, is_int in layout:
            end = len(raw) if width is None else start + width
            values[name] = int.from_bytes(raw[start:end], "big") if is_int else raw[start:end]
            start = end
        return cls(**values)

    def encode(self) -> bytes:
        parts = []
        for name, width, is_int in _layout(type(self)):
            value = getattr(self, name)
            parts.append(value.to_bytes(width, "big") if is_int else value)
        return b"".join(parts)


@dataclass(frozen=True)
class CctpMessage(_Packed):
    """A CCTP v2 message (the layout MessageTransmitterV2 sends and receives)."""

    what = "a CCTP v2 message"

    version: Uint32
    source_domain: Uint32
    destination_domain: Uint32
    nonce: Bytes32
    sender: Bytes32
    recipient: Bytes32
    destination_caller: Bytes32
    min_finality_threshold: Uint32
    finality_threshold_executed: Uint32
    body: bytes


@dataclass(frozen=True)
class BurnBody(_Packed):
    """The body of a v2 burn message (TokenMessengerV2's)."""

    what = "a v2 burn body"

    version: Uint32
    burn_token: Bytes32
    mint_recipient: Bytes32
    amount: Uint256
    message_sender: Bytes32
    max_fee: Uint256
    fee_executed: Uint256
    expiration_block: Uint256
    hook_data: bytes
