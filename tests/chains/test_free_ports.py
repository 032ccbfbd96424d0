"""The ports the tests, the demo and the API pick for their servers: free when
picked, outside the range the kernel hands out to outgoing connections (a
port found free there could be taken by any connection before its server
binds it, which made a parallel test run's demo fail with "Address already in
use"), and never one a listener holds."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from qtg_runner import ports as local
from qtg_runner.ports import LOOPBACK, free_port, free_port_base


def _ephemeral() -> range:
    low, high = (int(part) for part in local.EPHEMERAL_PORTS.read_text().split())
    return range(low, high + 1)


def test_a_port_base_is_free_and_outside_the_kernels_ephemeral_range() -> None:
    for _ in range(20):
        base = free_port_base(4)
        assert not set(range(base, base + 4)) & set(_ephemeral())
        with socket.socket() as a, socket.socket() as b:
            a.bind((LOOPBACK, base))
            b.bind((LOOPBACK, base + 3))
    assert free_port() not in _ephemeral()


@pytest.fixture
def held() -> Iterator[int]:
    """A port a listener holds, outside the ephemeral range."""
    with socket.socket() as listener:
        listener.bind((LOOPBACK, free_port()))
        listener.listen()
        yield int(listener.getsockname()[1])


def test_a_range_with_a_held_port_is_passed_over(
    held: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    tries = iter([held - 2, held, held + 1])
    monkeypatch.setattr(local.random, "randrange", lambda start, stop: next(tries))
    assert free_port_base(4) == held + 1
