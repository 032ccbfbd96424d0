"""Child processes of the bench: runners and peer workers, with their memory watched."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
QTG = str(VENV_BIN / "qtg")
PYTHON = sys.executable

_SCRUBBED = (
    "QTG_FAILPOINTS",
    "PGOPTIONS",
    "QTG_DATABASE_URL",
    "QTG_CREDENTIALS_FILE",
    "QTG_DATA_DIR",
    "MG_WORKERS_ENABLED",
    "QTG_NETWORK_MODE",
)


def runner_env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(QTG_DATABASE_URL=dsn, MG_WORKERS_ENABLED="true", QTG_NETWORK_MODE="testnet")
    return env


@dataclass
class Child:
    name: str
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    rss_samples: list[tuple[float, int]] = field(default_factory=list)

    def sample_rss(self, t: float) -> None:
        with contextlib.suppress(psutil.Error):
            self.rss_samples.append((t, psutil.Process(self.proc.pid).memory_info().rss))

    def peak_rss(self) -> int:
        """VmHWM (the kernel's peak resident set) while alive, else the sampled peak."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            status = Path(f"/proc/{self.proc.pid}/status").read_text()
            kb = int(status.split("VmHWM:")[1].split()[0])
            return kb * 1024
        return max((rss for _, rss in self.rss_samples), default=0)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self.log.close()
        return code


def cpu_seconds(own: bool = False) -> float:
    """User + system CPU seconds of every child this process has spawned and
    reaped so far (and of the descendants they reaped), or with ``own`` of
    this process itself. The difference across a run whose children were all
    stopped inside it is those children's CPU, start-up and shutdown included."""
    usage = resource.getrusage(resource.RUSAGE_SELF if own else resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def spawn(name: str, argv: Sequence[str], env: dict[str, str], log_dir: Path) -> Child:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = (log_dir / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        list(argv),
        env=env,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    return Child(name, proc, log)


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    what: str,
    every: float = 0.05,
    children: Sequence[Child] = (),
    tick: Callable[[float], None] | None = None,
) -> float:
    """Poll until ``predicate()`` is truthy; returns the monotonic time it became so."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        if tick:
            tick(now)
        if predicate():
            return time.monotonic()
        for child in children:
            if child.proc.poll() is not None and child.proc.returncode not in (0, None):
                raise RuntimeError(f"{what}: {child.name} exited with {child.proc.returncode}")
        if now >= deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)
