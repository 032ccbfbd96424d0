"""The demo's callback receiver (qtg_world.callback_receiver) as a real
HTTP server on loopback, fed by the callback_dispatcher's own signing code: a
signed POST is accepted, one signed with another secret or with its body
changed is refused with 401 and counted as a bad signature, a repeat under
the same webhook-id is one callback; and the demo's judgement of what arrived
(demo_sidecars.CallbackCheck) names a missing callback, a bad signature and a
payload that does not match its id."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import httpx

from qtg_runner.db import procs
from qtg_runner.workers import callback_dispatcher
from qtg_world.callback_receiver import CallbackReceiver, new_secret
from qtg_world.commands.demo_sidecars import CallbackCheck, callback_summary, provision_secret


def claim(key: str, movement: int, state: str, url: str, ref: str) -> procs.ClaimedCallback:
    return procs.ClaimedCallback(
        callback_id=1,
        movement_id=movement,
        idempotency_key=key,
        event_type=f"movement.{state}",
        url=url,
        payload={"movement_id": movement, "to_state": state.upper(), "network": "testnet"},
        attempt=1,
        lease_seconds=60,
        claim_secret="0" * 64,
        target_name="demo",
        secret_ref=ref,
        allow_private=True,
    )


def send(
    claims: list[procs.ClaimedCallback], env: dict[str, str], together: bool = False
) -> list[str | None]:
    """The dispatcher's own check, signing and POST of each claim, one after the
    other or all at once; the error of each (None: delivered)."""

    async def scenario() -> list[str | None]:
        async with httpx.AsyncClient(trust_env=False) as client:

            async def one(c: procs.ClaimedCallback) -> str | None:
                resolve = callback_dispatcher.system_resolve
                return (await callback_dispatcher.post(client, c, env, resolve)).error

            if together:
                return list(await asyncio.gather(*(one(c) for c in claims)))
            return [await one(c) for c in claims]

    return asyncio.run(scenario())


def test_the_receiver_accepts_what_the_dispatcher_signs_and_refuses_anything_else(
    tmp_path: Path,
) -> None:
    secret = new_secret()
    folder = tmp_path / "secrets"
    ref = provision_secret(folder, "demo", secret)
    assert ref == "file:demo"
    assert stat.S_IMODE(os.stat(folder / "demo").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    env = {callback_dispatcher.SECRETS_DIR_ENV: str(folder), "QTG_CB_OTHER": new_secret()}
    with CallbackReceiver(secret) as receiver:
        good = claim("testnet-7-approved", 7, "approved", receiver.url, ref)
        forged = claim("testnet-7-completed", 7, "completed", receiver.url, "env:QTG_CB_OTHER")
        lying = claim("testnet-8-approved", 7, "approved", receiver.url, ref)
        elsewhere = claim("testnet-9-approved", 9, "approved", receiver.url + "/x", ref)
        errors = send([good, good, forged, lying, elsewhere], env)
        deliveries = receiver.deliveries()
        # a dispatcher's batch POSTed at once: none of its connections is reset
        batch = [
            claim(f"testnet-{m}-executing", m, "executing", receiver.url, ref) for m in range(48)
        ]
        assert send(batch, env, together=True) == [None] * len(batch)
    assert errors[:2] == [None, None]
    assert errors[2] is not None and errors[2].startswith("HTTP 401")
    assert errors[3] is None  # signed right; only the demo's check reads the payload
    assert errors[4] is not None and errors[4].startswith("HTTP 404")
    assert [(d.webhook_id, d.valid) for d in deliveries] == [
        ("testnet-7-approved", True),
        ("testnet-7-approved", True),
        ("testnet-7-completed", False),
        ("testnet-8-approved", True),
    ]
    assert deliveries[0].payload == good.payload

    check = CallbackCheck(
        {
            "testnet-7-approved": (7, "approved"),
            "testnet-7-completed": (7, "completed"),
            "testnet-8-approved": (8, "approved"),
        }
    )
    check.judge(deliveries)
    assert check.missing == ["testnet-7-completed"]
    assert check.problems(receiver.url) == [
        f"callback testnet-7-completed did not arrive at {receiver.url}",
        f"1 POSTs to {receiver.url} carried a bad signature",
        "callback testnet-8-approved said movement 7 approved",
    ]
    assert check.paths() == [
        "  movement 7: approved -> completed (missing)",
        "  movement 8: approved",
    ]
    assert callback_summary(check, receiver.url) == (
        f"callbacks: 2 delivered to {receiver.url} (1 repeated under their webhook-id), "
        "1 bad signatures, 0 dead, 1 missing"
    )
