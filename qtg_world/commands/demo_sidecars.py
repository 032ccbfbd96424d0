"""What the demos show of the sidecars: signed callbacks received by a local
receiver, and the audit log's hash chain verified.

Before the movements are created the demo (as the admin) starts a
CallbackReceiver on loopback, provisions its signing secret the way a
deployment does (a 0600 file in QTG_CALLBACK_SECRETS_DIR, named by the target
as ``file:qtg-demo-receiver``: the secret never enters the database) and
registers the receiver as a callback target (``allow_private``: it is on
loopback); every movement names it as its ``callback_url``.

Once the movements have ended, the callbacks it expects are one per movement
state change, read from the audit rows of those movements (their creation
and each ``state_changed``), each under its webhook-id
``<network>-<movement>-<state>``. The runtime keeps running until every one
of them arrived with a valid signature, or CALLBACK_DEADLINE_S passed; then
the demo fails for any missing, any bad signature, any payload that does not
match its id, and any of the movements' callbacks DEAD or REFUSED.

After the workers stop, the audit_outbox_promoter's batch runs until the
outbox is empty, and verify_audit_chain (as the operator) must find no broken
link in the network's whole chain.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection

from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import audit_outbox_promoter
from qtg_runner.workers.callback_dispatcher import SECRETS_DIR_ENV
from qtg_world.callback_receiver import CallbackReceiver, Delivery, new_secret

TARGET = "qtg-demo-receiver"
"""The demo receiver's callback target, and its secret's file name."""

CALLBACK_DEADLINE_S = 30.0
"""How long after the movements ended every callback has to arrive (the
callback_dispatcher ticks every second)."""


def secrets_dir(data_dir: Path) -> Path:
    """QTG_CALLBACK_SECRETS_DIR when set, else ``callback-secrets`` beside the data
    directory (set in this process's environment, where its runners read it)."""
    folder = os.environ.get(SECRETS_DIR_ENV)
    if folder:
        return Path(folder)
    path = data_dir.parent / "callback-secrets"
    os.environ[SECRETS_DIR_ENV] = str(path)
    return path


def provision_secret(folder: Path, name: str, secret: str) -> str:
    """Write ``secret`` to ``folder/name`` (folder 0700, file 0600, never readable
    by others in between) and return the target's reference to it."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as sink:
        os.fchmod(sink.fileno(), 0o600)
        sink.write(secret + "\n")
    return f"file:{name}"


async def start_receiver(admin: AsyncConnection[Any], data_dir: Path) -> CallbackReceiver:
    """A receiver on a free loopback port, its secret provisioned, registered as
    the callback target TARGET (as the admin: a deploy step)."""
    secret = new_secret()
    ref = provision_secret(secrets_dir(data_dir), TARGET, secret)
    receiver = CallbackReceiver(secret).start()
    try:
        await procs.upsert_callback_target(TARGET, receiver.url, ref, True, True).aone(admin)
    except BaseException:
        receiver.stop()
        raise
    return receiver


@dataclass
class CallbackCheck:
    expected: dict[str, tuple[int, str]]
    """webhook-id -> (movement, state), one per state change, in the order made."""
    received: set[str] = field(default_factory=set)
    bad_signatures: int = 0
    mismatched: list[str] = field(default_factory=list)
    repeats: int = 0
    dead: list[str] = field(default_factory=list)

    def judge(self, deliveries: Sequence[Delivery]) -> None:
        """What the receiver got: the ids that arrived signed right, the POSTs
        with a bad signature, the repeats, and the payloads that say another
        movement or state than their webhook-id."""
        valid = [d for d in deliveries if d.valid]
        self.received = {d.webhook_id for d in valid}
        self.bad_signatures = len(deliveries) - len(valid)
        self.repeats = len(valid) - len(self.received)
        self.mismatched = []
        for delivery in valid:
            expected = self.expected.get(delivery.webhook_id)
            payload = delivery.payload or {}
            said = (payload.get("movement_id"), str(payload.get("to_state", "")).lower())
            if expected is not None and said != expected:
                self.mismatched.append(
                    f"callback {delivery.webhook_id} said movement {said[0]} {said[1]}"
                )

    @property
    def missing(self) -> list[str]:
        return [key for key in self.expected if key not in self.received]

    def problems(self, url: str) -> list[str]:
        out = [f"callback {key} did not arrive at {url}" for key in self.missing]
        if self.bad_signatures:
            out.append(f"{self.bad_signatures} POSTs to {url} carried a bad signature")
        out.extend(self.mismatched)
        out.extend(self.dead)
        return out

    def paths(self) -> list[str]:
        """One line per movement: the states it went through, in order, each
        marked "(missing)" when its callback did not arrive."""
        states: dict[int, list[str]] = {}
        for key, (movement, state) in self.expected.items():
            mark = "" if key in self.received else " (missing)"
            states.setdefault(movement, []).append(state + mark)
        return [f"  movement {m}: {' -> '.join(s)}" for m, s in states.items()]


async def expected_callbacks(
    conn: AsyncConnection[Any], network: str, ids: Sequence[int]
) -> dict[str, tuple[int, str]]:
    """One webhook-id per state change of the movements, from their audit rows."""
    rows = await (
        await conn.execute(
            "SELECT request_id, lower(to_state) FROM audit_outbox"
            " WHERE entity = 'request' AND request_id = ANY(%s)"
            "   AND action IN ('created', 'state_changed') ORDER BY id",
            (list(ids),),
        )
    ).fetchall()
    return {f"{network}-{m}-{state}": (int(m), str(state)) for m, state in rows}


async def check_callbacks(
    conn: AsyncConnection[Any],
    receiver: CallbackReceiver,
    network: str,
    ids: Sequence[int],
    deadline_s: float = CALLBACK_DEADLINE_S,
) -> CallbackCheck:
    """Wait (while the workers run) until every expected callback arrived with a
    valid signature, or the deadline; then what arrived, what did not, and the
    movements' dead letters."""
    check = CallbackCheck(await expected_callbacks(conn, network, ids))
    deadline = time.monotonic() + deadline_s
    while True:
        check.judge(receiver.deliveries())
        if not check.missing or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.25)
    rows = await (
        await conn.execute(
            "SELECT idempotency_key, delivery_state::text, last_error FROM callback_outbox"
            " WHERE request_id = ANY(%s) AND delivery_state IN ('DEAD', 'REFUSED') ORDER BY id",
            (list(ids),),
        )
    ).fetchall()
    check.dead = [f"callback {key} is {state}: {error}" for key, state, error in rows]
    return check


def callback_summary(check: CallbackCheck, url: str) -> str:
    signatures = (
        "all signatures valid"
        if not check.bad_signatures
        else f"{check.bad_signatures} bad signatures"
    )
    repeats = f" ({check.repeats} repeated under their webhook-id)" if check.repeats else ""
    arrived = len(set(check.expected) & check.received)
    return (
        f"callbacks: {arrived} delivered to {url}{repeats}, {signatures}, {len(check.dead)} dead"
        + (f", {len(check.missing)} missing" if check.missing else "")
    )


@dataclass(frozen=True)
class AuditCheck:
    promoted: int
    chain: procs.AuditChainCheck

    def summary(self) -> str:
        broken = (
            "none" if self.chain.ok else f"row {self.chain.first_bad_seq} ({self.chain.problem})"
        )
        return f"audit chain: {self.chain.checked} rows verified, first broken link: {broken}"


async def finish_audit(ctx: WorkerContext, operator: AsyncConnection[Any]) -> AuditCheck:
    """The audit_outbox_promoter's batch until the outbox is empty (the workers
    stopped: nothing else writes it), then the chain verified as ``operator``."""
    worker_id = ctx.worker_id("audit_outbox_promoter")
    promoted = 0
    while count := await audit_outbox_promoter.batch(ctx, worker_id):
        promoted += count
    chain = await procs.verify_audit_chain().aone(operator)
    return AuditCheck(promoted, chain)
