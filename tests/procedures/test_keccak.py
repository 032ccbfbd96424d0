"""keccak256 in SQL (sql/functions/internal/keccak256.sql): Ethereum's Keccak-256,
checked against the published vectors and against eth-hash, the hash the runner
and every EVM client compute, at the lengths around each padding edge."""

from __future__ import annotations

import random

import pytest
from eth_hash.auto import keccak
from rows import Conn


def in_sql(conn: Conn, data: bytes) -> bytes:
    row = conn.execute("SELECT keccak256(%s)", (data,)).fetchone()
    assert row is not None
    return bytes(row[0])


@pytest.mark.parametrize(
    ("data", "digest"),
    [
        (b"", "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"),
        (b"abc", "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"),
    ],
)
def test_the_published_vectors(conn: Conn, data: bytes, digest: str) -> None:
    assert in_sql(conn, data).hex() == digest


def test_every_length_around_the_padding_edges_agrees_with_eth_hash(conn: Conn) -> None:
    rng = random.Random(7)
    for length in (1, 7, 8, 9, 134, 135, 136, 137, 271, 272, 273, 600):
        data = bytes(rng.getrandbits(8) for _ in range(length))
        assert in_sql(conn, data) == keccak(data), length
    assert conn.execute("SELECT keccak256(NULL)").fetchone() == (None,)
