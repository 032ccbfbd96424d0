"""The runner processes of a scenario, kept up the way a service manager would.

A fleet is several real `qtg run` / `qtg worker NAME` processes on one
scenario database. A watcher thread restarts any that ends (killed or
crashed) after a short delay, as systemd's Restart=always would, and records
how each one ended: the harness's own kill -9s apart from every other exit
(a crashed core worker exits 1). Each process's stderr goes to a file in the
scenario's log folder.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

QTG = str(Path(sys.executable).with_name("qtg"))
RESTART_DELAY_SECONDS = 1.0
# what the harness's own environment may carry that must not reach a runner
_SCRUBBED = (
    "QTG_FAILPOINTS",
    "PGOPTIONS",
    "QTG_RUNNER_DATABASE_URL",
    "QTG_OPERATOR_DATABASE_URL",
    "QTG_DATABASE_URL",
    "QTG_DATA_DIR",
    "MG_WORKERS_ENABLED",
    "QTG_NETWORK_MODE",
)


def runner_env(dsn: str, network: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
    env.update(QTG_DATABASE_URL=dsn, QTG_NETWORK_MODE=network, MG_WORKERS_ENABLED="true")
    return env


@dataclass
class Runner:
    label: str
    args: list[str]
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    ended_at: float | None = None
    killed: bool = False  # the harness sent the SIGKILL that ended the current process

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class Fleet:
    """``specs``: label -> qtg arguments; ``envs``: label -> its environment.
    ``start`` starts them all and the watcher."""

    specs: dict[str, list[str]]
    envs: dict[str, dict[str, str]]
    log_dir: Path
    runners: list[Runner] = field(default_factory=list)
    kills: int = 0
    freezes: int = 0
    exits: Counter[str] = field(default_factory=Counter)
    """How processes ended, other than by the harness's kill -9: 'exit 1', ..."""
    crash_logs: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.runners = [Runner(label, args) for label, args in self.specs.items()]
        for runner in self.runners:
            self._spawn(runner)
        self._watcher = threading.Thread(target=self._watch, name="chaos-fleet", daemon=True)
        self._watcher.start()

    def _spawn(self, runner: Runner) -> None:
        runner.starts += 1
        stderr = self.log_dir / f"{runner.label}.{runner.starts:03d}.stderr"
        with stderr.open("wb") as err:
            runner.proc = subprocess.Popen(
                [QTG, *runner.args],
                env=self.envs[runner.label],
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        runner.ended_at = None
        runner.killed = False

    def _watch(self) -> None:
        while not self._stop.wait(0.2):
            with self._lock:
                for runner in self.runners:
                    self._reap(runner)
                    if (
                        runner.ended_at is not None
                        and time.monotonic() - runner.ended_at >= RESTART_DELAY_SECONDS
                        and not self._stop.is_set()
                    ):
                        self._spawn(runner)

    def _reap(self, runner: Runner) -> None:
        if runner.proc is None or runner.ended_at is not None:
            return
        code = runner.proc.poll()
        if code is None:
            return
        runner.ended_at = time.monotonic()
        if not runner.killed:
            self.exits[f"exit {code}"] += 1
            self.crash_logs.append(str(self.log_dir / f"{runner.label}.{runner.starts:03d}.stderr"))

    def _signal_random(self, rng: random.Random, signum: int) -> Runner | None:
        """Send ``signum`` to one live runner process (the caller holds the lock);
        it, or None when none is up."""
        alive = [r for r in self.runners if r.alive() and r.ended_at is None]
        if not alive:
            return None
        runner = rng.choice(alive)
        assert runner.proc is not None
        runner.killed = runner.killed or signum == signal.SIGKILL
        with contextlib.suppress(ProcessLookupError):
            os.kill(runner.proc.pid, signum)
        return runner

    def kill_random(self, rng: random.Random) -> str | None:
        """kill -9 one live runner process; its label, or None when none is up."""
        with self._lock:
            runner = self._signal_random(rng, signal.SIGKILL)
            if runner is None:
                return None
            self.kills += 1
            return runner.label

    def freeze_random(self, rng: random.Random, seconds: float) -> str | None:
        """SIGSTOP one live runner process for ``seconds``, then SIGCONT it: a
        process that froze (a stalled VM, a debugger, swap) inside whatever it
        was doing, and wakes up later believing its claims are still its own.
        Its label, or None when none is up."""
        with self._lock:
            runner = self._signal_random(rng, signal.SIGSTOP)
            if runner is None:
                return None
            assert runner.proc is not None
            pid = runner.proc.pid
            self.freezes += 1

        def thaw() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

        timer = threading.Timer(seconds, thaw)
        timer.daemon = True
        timer.start()
        return runner.label

    def pids(self) -> list[int]:
        with self._lock:
            return [r.proc.pid for r in self.runners if r.proc is not None and r.alive()]

    def stop(self, timeout: float = 40) -> None:
        """SIGTERM every process (a clean stop), SIGKILL what is left after ``timeout``."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=5)
        with self._lock:
            live = [r for r in self.runners if r.alive()]
            for runner in live:
                assert runner.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    runner.proc.send_signal(signal.SIGCONT)  # a frozen one hears its SIGTERM
                    runner.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout
            for runner in live:
                assert runner.proc is not None
                try:
                    runner.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    runner.proc.kill()
                    runner.proc.wait(timeout=10)
                    self.exits["stop timed out"] += 1
                    continue
                code = runner.proc.returncode
                if code == -signal.SIGTERM:
                    # restarted a moment ago: SIGTERM came before its handler was up
                    self.exits["SIGTERM while starting"] += 1
                elif code != 0:
                    self.exits[f"exit {code} at stop"] += 1

    def log_text(self) -> str:
        parts = []
        for path in sorted(self.log_dir.glob("*.stderr")):
            with contextlib.suppress(OSError):
                parts.append(path.read_text(errors="replace"))
        return "\n".join(parts)
