"""POST /v1/movements/{id}/priority against a real uvicorn server on loopback,
as the callers' own database logins.

Pins: an operator sets a movement's priority with a reason (200, the movement
with its new priority; the nodes not finished follow; audited as that
login); the same priority again answers the same and writes nothing; a
refusal is a problem+json body with its code, and writes nothing: an unknown
movement 404 QT010, a finished one 409 QT020, a blank reason 422 QT002, a
reason beyond engine_limits 422 QT005; a body without a reason or with a
priority that is not a whole number within integer's bounds 422 before the
database; a runner's or a reader's login 403; the guard's cross-site and
non-JSON refusals hold here as on every action.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from api_support import ONE_NODE, ApiWorld, api_world, problem
from engine import fingerprint


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


def movement(client: httpx.Client, external_id: str) -> int:
    made = client.post(
        "/v1/movements", json={"external_id": external_id, "amount": "100", "plan": ONE_NODE}
    )
    assert made.status_code == 201, made.text
    return int(made.json()["movement_id"])


def test_an_operator_sets_a_priority_once(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.admin() as admin:
        mid = movement(alice, "prio-1")
        path = f"/v1/movements/{mid}/priority"
        answer = alice.post(path, json={"priority": 12, "reason": "payroll is due at noon"})
        assert answer.status_code == 200, answer.text
        assert (answer.json()["movement_id"], answer.json()["priority"]) == (mid, 12)
        assert admin.execute(
            "SELECT priority FROM movement_request_nodes WHERE request_id = %s", (mid,)
        ).fetchall() == [(12,)]

        before = fingerprint(admin)
        again = alice.post(path, json={"priority": 12, "reason": "asked twice"})
        assert again.status_code == 200 and again.json()["priority"] == 12
        assert fingerprint(admin) == before

        audit = alice.get(f"/v1/movements/{mid}/audit").json()["items"]
        assert [(a["action"], a["from_state"], a["to_state"], a["login"]) for a in audit][-1] == (
            "priority_set",
            "0",
            "12",
            world.people["alice"].login,
        )


def test_a_refused_priority_is_a_problem_and_writes_nothing(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.admin() as admin:
        mid = movement(alice, "prio-refused")
        done = movement(alice, "prio-cancelled")
        assert alice.post(f"/v1/movements/{done}/cancel").json()["state"] == "CANCELLED"
        admin.execute("UPDATE engine_limits SET max_text_bytes = 50")
        try:
            before = fingerprint(admin)
            path = f"/v1/movements/{mid}/priority"
            unknown = "/v1/movements/424242/priority"
            problem(alice.post(unknown, json={"priority": 1, "reason": "x"}), 404, "QT010")
            body = problem(
                alice.post(f"/v1/movements/{done}/priority", json={"priority": 1, "reason": "x"}),
                409,
                "QT020",
            )
            assert "CANCELLED" in body["detail"]
            problem(alice.post(path, json={"priority": 1, "reason": "  "}), 422, "QT002")
            problem(alice.post(path, json={"priority": 1, "reason": "x" * 51}), 422, "QT005")
            for bad in (
                {"priority": 1},
                {"reason": "why"},
                {"priority": 2**31, "reason": "why"},
                {"priority": -(2**31) - 1, "reason": "why"},
                {"priority": 1.5, "reason": "why"},
                {"priority": "1", "reason": "why"},
                {"priority": True, "reason": "why"},
                {"priority": 1, "reason": "why", "colour": "red"},
            ):
                problem(alice.post(path, json=bad), 422)
            problem(alice.post(path), 422)  # no body at all
            for who in ("runner", "reader"):
                with world.client(who) as other:
                    problem(other.post(path, json={"priority": 1, "reason": "mine"}), 403)
            problem(
                alice.post(
                    path,
                    json={"priority": 1, "reason": "x"},
                    headers={"Origin": "https://evil.example"},
                ),
                403,
            )
            problem(
                alice.post(
                    path,
                    content=b'{"priority": 1, "reason": "x"}',
                    headers={"content-type": "text/plain"},
                ),
                415,
            )
            assert fingerprint(admin) == before
        finally:
            admin.execute("UPDATE engine_limits SET max_text_bytes = DEFAULT")
