"""POST /v1/nodes/{id}/requeue, /v1/nodes/{id}/release and
/v1/drift-alerts/{id}/acknowledge against a real uvicorn server on
loopback, as the callers' own database logins.

Pins: a requeue takes two operators (the first answers REQUESTED and the
node is untouched; the asker again is 403 QT022 and changes nothing but the
audit log; another operator's answers APPLIED, the node READY); a release
puts a quarantined node back in its state, and asked again answers 200 as
it is (released false); a node never quarantined is 409 QT021, no such node
404 QT011, no such alert 404 QT081; a body without a reason, with a blank
one or an unknown key is 422 before the database; a runner's or a reader's
login is 403; the guard's cross-site refusal holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from api_support import ApiWorld, api_world, problem
from engine import create_started, fingerprint, node_ids
from rows import ONE, claim_of, fail, prepare

from qtg_runner.db import procs


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


def untouched(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Equal but for the audit log (a four-eyes refusal is audited)."""
    return {k: v for k, v in before.items() if "audit" not in k} == {
        k: v for k, v in after.items() if "audit" not in k
    }


def test_a_requeue_takes_two_operators(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.client("bob") as bob, world.admin() as admin:
        node_id = node_ids(admin, create_started(admin, ONE, "api-requeue"))["a"]
        claimed = claim_of(admin, node_id)
        prepare(admin, claimed)
        assert fail(admin, claimed, retryable=True) == "UNKNOWN"
        path = f"/v1/nodes/{node_id}/requeue"

        asked = alice.post(path, json={"reason": "dropped by every node"})
        assert asked.status_code == 200, asked.text
        assert (asked.json()["requeue_state"], asked.json()["node_state"]) == (
            "REQUESTED",
            "UNKNOWN",
        )
        before = fingerprint(admin)
        problem(alice.post(path, json={"reason": "me again"}), 403, "QT022")
        assert untouched(before, fingerprint(admin))

        applied = bob.post(path, json={"reason": "confirmed"})
        assert applied.status_code == 200, applied.text
        assert (applied.json()["requeue_state"], applied.json()["node_state"]) == (
            "APPLIED",
            "READY",
        )


def test_a_release_and_its_repeat(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.admin() as admin:
        node_id = node_ids(admin, create_started(admin, ONE, "api-release"))["a"]
        claimed = claim_of(admin, node_id)
        procs.quarantine_nodes([node_id], [claimed["claim_secret"]], ["boom"]).all(admin)
        path = f"/v1/nodes/{node_id}/release"

        released = alice.post(path, json={"reason": "the bug is fixed"})
        assert released.status_code == 200, released.text
        assert released.json() == {"node_id": node_id, "node_state": "SUBMITTING", "released": True}
        again = alice.post(path, json={"reason": "the bug is fixed"})
        assert again.status_code == 200, again.text
        assert again.json() == {"node_id": node_id, "node_state": "SUBMITTING", "released": False}


def test_refusals_are_problems_and_write_nothing(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.admin() as admin:
        ready = node_ids(admin, create_started(admin, ONE, "api-refused"))["a"]
        before = fingerprint(admin)
        reason = {"reason": "why"}
        problem(alice.post(f"/v1/nodes/{ready}/release", json=reason), 409, "QT021")
        problem(alice.post(f"/v1/nodes/{ready}/requeue", json=reason), 409, "QT021")
        problem(alice.post("/v1/nodes/424242/release", json=reason), 404, "QT011")
        problem(alice.post("/v1/drift-alerts/424242/acknowledge", json=reason), 404, "QT081")
        for bad in ({}, {"reason": ""}, {"reason": "why", "colour": "red"}):
            problem(alice.post(f"/v1/nodes/{ready}/release", json=bad), 422)
            problem(alice.post("/v1/drift-alerts/1/acknowledge", json=bad), 422)
        problem(alice.post("/v1/nodes/0/requeue", json=reason), 422)
        for who in ("runner", "reader"):
            with world.client(who) as other:
                problem(other.post(f"/v1/nodes/{ready}/release", json=reason), 403)
        problem(
            alice.post(
                f"/v1/nodes/{ready}/release",
                json=reason,
                headers={"Origin": "https://evil.example"},
            ),
            403,
        )
        assert fingerprint(admin) == before
