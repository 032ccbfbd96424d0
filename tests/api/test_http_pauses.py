"""GET/POST /v1/pauses and POST /v1/pauses/{scope}/{name}/resume against a
real uvicorn server on loopback, as the callers' own database logins.

Pins: an operator pauses a scope (201, listed with the pauser's login,
reason and end); a second pause of the same scope answers 200 and keeps the
first; the pauser's resume is 403 QT022 and changes nothing but the audit
log; another operator's resume answers CLOSED and the list is empty again;
resuming what is not paused is 409 QT061; a scope the network does not have
is 422 QT002; a body with another scope, a time out of bounds or not whole,
or an unknown key is 422 before the database; a runner's or a reader's
login is 403; the guard's cross-site and non-JSON refusals hold.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from api_support import ApiWorld, api_world, problem
from engine import fingerprint


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


NETWORK = {"scope": "network", "name": "*", "reason": "incident 42"}


def untouched(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Equal but for the audit log (a four-eyes refusal is audited)."""
    return {k: v for k, v in before.items() if "audit" not in k} == {
        k: v for k, v in after.items() if "audit" not in k
    }


def test_an_operator_pauses_and_another_resumes(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.client("bob") as bob, world.admin() as admin:
        paused = alice.post("/v1/pauses", json=NETWORK | {"for_seconds": 3600})
        assert paused.status_code == 201, paused.text
        assert paused.json() == {
            "scope": "network",
            "name": "*",
            "breaker_state": "TRIPPED",
            "paused": True,
        }
        (listed,) = bob.get("/v1/pauses").json()["items"]
        assert (listed["scope"], listed["paused_by"], listed["reason"]) == (
            "network",
            world.people["alice"].login,
            "incident 42",
        )
        assert listed["expires_at"] is not None and listed["paused_by_operator"] is True

        again = bob.post("/v1/pauses", json=NETWORK | {"reason": "still on"})
        assert again.status_code == 200 and again.json()["paused"] is False

        before = fingerprint(admin)
        problem(alice.post("/v1/pauses/network/*/resume"), 403, "QT022")
        assert untouched(before, fingerprint(admin))

        resumed = bob.post("/v1/pauses/network/*/resume")
        assert resumed.status_code == 200, resumed.text
        assert resumed.json()["breaker_state"] == "CLOSED"
        assert alice.get("/v1/pauses").json()["items"] == []


def test_a_refused_pause_is_a_problem_and_writes_nothing(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.admin() as admin:
        before = fingerprint(admin)
        problem(alice.post("/v1/pauses/lane/nowhere/resume"), 409, "QT061")
        problem(
            alice.post("/v1/pauses", json={"scope": "chain", "name": "nowhere", "reason": "x"}),
            422,
            "QT002",
        )
        problem(
            alice.post("/v1/pauses", json={"scope": "movement", "name": "424242", "reason": "x"}),
            404,
            "QT010",
        )
        for bad in (
            NETWORK | {"scope": "everything"},
            NETWORK | {"for_seconds": 0},
            NETWORK | {"for_seconds": 30 * 86400 + 1},
            NETWORK | {"for_seconds": 1.5},
            NETWORK | {"colour": "red"},
            {"scope": "network", "name": "*"},
        ):
            problem(alice.post("/v1/pauses", json=bad), 422)
        for who in ("runner", "reader"):
            with world.client(who) as other:
                problem(other.post("/v1/pauses", json=NETWORK), 403)
        problem(
            alice.post("/v1/pauses", json=NETWORK, headers={"Origin": "https://evil.example"}), 403
        )
        problem(
            alice.post(
                "/v1/pauses",
                content=b'{"scope": "network", "name": "*", "reason": "x"}',
                headers={"content-type": "text/plain"},
            ),
            415,
        )
        assert fingerprint(admin) == before
