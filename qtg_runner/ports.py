"""Free loopback ports for the servers a process starts: the API in a thread
(qtg_runner.api.server), the local world's chains and doubles, the tests'."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["EPHEMERAL_PORTS", "LOOPBACK", "free_port", "free_port_base"]

LOOPBACK = "127.0.0.1"


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Where Linux says which ports it hands out itself: to a socket bound to port 0
and to every outgoing connection (32768-60999 by default)."""


def _assignable_ports() -> range:
    """The loopback ports the kernel never hands out on its own, so that a port
    found free stays free until its server binds it (an ephemeral one may be
    taken meanwhile by any outgoing connection on the machine)."""
    try:
        low, high = (int(part) for part in EPHEMERAL_PORTS.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    below, above = range(10000, low), range(high + 1, 65536)
    return below if len(below) >= len(above) else above


def free_port(host: str = LOOPBACK) -> int:
    """A port of ``host`` free right now, outside the kernel's ephemeral range."""
    return free_port_base(1, host)


def free_port_base(count: int, host: str = LOOPBACK) -> int:
    """The first of ``count`` consecutive ports of ``host`` all free right now
    (for a `--port-base` that starts several chains and services), outside the
    kernel's ephemeral range, picked at random so that concurrent callers
    rarely try the same."""
    ports = _assignable_ports()
    for _ in range(200):
        base = random.randrange(ports.start, ports.stop - count + 1)
        sockets: list[socket.socket] = []
        try:
            for port in range(base, base + count):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(s)
                s.bind((host, port))
            return base
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports found on {host}")
