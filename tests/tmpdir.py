"""Where the tests keep their temporary files: their PostgreSQL servers' data
directories above all.

Each test clones the migrated template, some 800 files. On a disk filesystem
the clone costs about 0.6 s of the server's time (file creation), on a memory
filesystem about 20 ms: the suite runs in two thirds of the time. So the tests
use `/dev/shm` when it is a tmpfs with room to spare (``ROOM``), the system's
temporary directory otherwise, and ``QTG_TEST_TMPDIR`` when it is set.

tests/conftest.py points `tempfile` (and, through TMPDIR, every process a test
starts) there.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

ENV = "QTG_TEST_TMPDIR"
MEMORY = Path("/dev/shm")
ROOM = 8 * 2**30
"""Bytes free /dev/shm must have: `make test` peaks at about 3 GB there (five
servers, two of them holding the query-plan tests' million nodes at once)."""


def _is_tmpfs(path: Path) -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text()
    except OSError:
        return False
    return any(
        fields[1] == str(path) and fields[2] == "tmpfs"
        for fields in (line.split() for line in mounts.splitlines())
        if len(fields) > 2
    )


def temporary_dir() -> str:
    """``QTG_TEST_TMPDIR``; else /dev/shm when it is a writable tmpfs with
    ``ROOM`` free; else the system's temporary directory."""
    explicit = os.environ.get(ENV, "").strip()
    if explicit:
        return explicit
    try:
        stat = os.statvfs(MEMORY)
    except OSError:
        return tempfile.gettempdir()
    roomy = stat.f_bavail * stat.f_frsize >= ROOM
    if roomy and os.access(MEMORY, os.W_OK | os.X_OK) and _is_tmpfs(MEMORY):
        return str(MEMORY)
    return tempfile.gettempdir()
