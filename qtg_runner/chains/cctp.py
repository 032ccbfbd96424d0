"""CCTP v2 messages as MessageTransmitterV2 sends and receives them: the
codec the cctp executors, the CCTP client (cctp_client) and the local world's
attestation service (qtg_world.iris) share: the message header, the v2 burn
body, an address as the 32 bytes a message carries, and the finality
thresholds. The local double's deployment and attesters are the world's
(qtg_world.chains.cctp).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def _u(raw: bytes, start: int, size: int) -> int:
    return int.from_bytes(raw[start : start + size], "big")


@dataclass(frozen=True)
class CctpMessage:
    """A CCTP v2 message (the layout MessageTransmitterV2 sends and receives)."""

    version: int
    source_domain: int
    destination_domain: int
    nonce: bytes
    sender: bytes
    recipient: bytes
    destination_caller: bytes
    min_finality_threshold: int
    finality_threshold_executed: int
    body: bytes

    @classmethod
    def decode(cls, raw: bytes) -> CctpMessage:
        if len(raw) < MESSAGE_HEADER_LENGTH:
            raise ValueError(f"a CCTP v2 message is at least 148 bytes, not {len(raw)}")
        return cls(
            version=_u(raw, 0, 4),
            source_domain=_u(raw, 4, 4),
            destination_domain=_u(raw, 8, 4),
            nonce=raw[12:44],
            sender=raw[44:76],
            recipient=raw[76:108],
            destination_caller=raw[108:140],
            min_finality_threshold=_u(raw, 140, 4),
            finality_threshold_executed=_u(raw, 144, 4),
            body=raw[148:],
        )

    def encode(self) -> bytes:
        return b"".join(
            (
                self.version.to_bytes(4, "big"),
                self.source_domain.to_bytes(4, "big"),
                self.destination_domain.to_bytes(4, "big"),
                self.nonce,
                self.sender,
                self.recipient,
                self.destination_caller,
                self.min_finality_threshold.to_bytes(4, "big"),
                self.finality_threshold_executed.to_bytes(4, "big"),
                self.body,
            )
        )


@dataclass(frozen=True)
class BurnBody:
    """The body of a v2 burn message (TokenMessengerV2's)."""

    version: int
    burn_token: bytes
    mint_recipient: bytes
    amount: int
    message_sender: bytes
    max_fee: int
    fee_executed: int
    expiration_block: int
    hook_data: bytes

    @classmethod
    def decode(cls, raw: bytes) -> BurnBody:
        if len(raw) < BURN_BODY_LENGTH:
            raise ValueError(f"a v2 burn body is at least 228 bytes, not {len(raw)}")
        return cls(
            version=_u(raw, 0, 4),
            burn_token=raw[4:36],
            mint_recipient=raw[36:68],
            amount=_u(raw, 68, 32),
            message_sender=raw[100:132],
            max_fee=_u(raw, 132, 32),
            fee_executed=_u(raw, 164, 32),
            expiration_block=_u(raw, 196, 32),
            hook_data=raw[228:],
        )

    def encode(self) -> bytes:
        return b"".join(
            (
                self.version.to_bytes(4, "big"),
                self.burn_token,
                self.mint_recipient,
                self.amount.to_bytes(32, "big"),
                self.message_sender,
                self.max_fee.to_bytes(32, "big"),
                self.fee_executed.to_bytes(32, "big"),
                self.expiration_block.to_bytes(32, "big"),
                self.hook_data,
            )
        )
