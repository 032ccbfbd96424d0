"""The HTTP API against a real uvicorn server on loopback, with httpx, as the
callers' own database logins (one server and one database for the module).

Pins: identity is PostgreSQL's (no credentials, a wrong password, a token
that is not one, a revoked token: 401 with a challenge; a login without the
grant: 403); creation is idempotent on the external id (the same body: the
same movement, 200; another body: 409 QT004), approval is four-eyes across
two logins (the creator: 403 QT022, audited; the approver again: 200 as it
is) and cancel is idempotent; every error is a problem+json body with its
code and hint and never a trace; 404 and 422; pagination by cursor never
repeats or skips; callback targets are proposed by one login and registered
by a second; /healthz, /readyz and /metrics (parsed with prometheus_client);
the OpenAPI document carries the example of docs/operators.md's psql session;
every QT code of the error table (qtg_runner/errors.py) answers with its status
and title. A rehearsal is asked for over HTTP (202, the same open request
again), the movement shows it and then the rehearsal served, the approval
answers the QT025 advice it got, and a late, cross-site or reader's request
is refused as a problem.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from api_support import ONE_NODE, ApiWorld, api_world
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from qtg_runner.api import tokens
from qtg_runner.api.models import CREATE_EXAMPLE
from qtg_runner.api.problems import from_sqlstate
from qtg_runner.db import procs
from qtg_runner.db.logins import create_login
from qtg_runner.errors import QT_ERRORS

OPERATORS = Path(__file__).resolve().parents[2] / "docs" / "operators.md"


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


def problem(response: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status (and QT code)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= set(body)
    for leak in ("Traceback", 'File "', "psycopg", "PL/pgSQL", "CONTEXT:"):
        assert leak not in response.text, response.text
    if code is not None:
        assert (body["code"], body["type"]) == (code, f"/problems/{code}")
        assert "hint" in body
    return body


def create(client: httpx.Client, external_id: str, **extra: Any) -> httpx.Response:
    return client.post(
        "/v1/movements",
        json={"external_id": external_id, "amount": "100", "plan": ONE_NODE, **extra},
    )


def test_identity_is_the_databases(world: ApiWorld, tmp_path: Path) -> None:
    with httpx.Client(base_url=world.url) as anonymous:
        body = problem(anonymous.get("/v1/movements"), 401)
        assert anonymous.get("/v1/movements").headers["www-authenticate"].startswith("Basic")
        assert "password" not in body["detail"] or "login" in body["detail"]
        alice = world.people["alice"]
        problem(anonymous.get("/v1/movements", auth=(alice.login, "wrong")), 401)
        problem(anonymous.get("/v1/movements", auth=("nobody_at_all", "x")), 401)
        problem(anonymous.get("/v1/movements", auth=(alice.login, "")), 401)  # never the passfile
        problem(
            anonymous.get("/v1/movements", headers={"Authorization": "Bearer not-a-token"}), 401
        )
        problem(anonymous.get("/v1/movements", headers={"Authorization": "Digest x"}), 401)
    # a missing grant is the database's refusal: 403
    with world.client("runner") as runner:
        problem(create(runner, "by-runner"), 403)
    with world.client("alice") as alice_client:
        made = create(alice_client, "for-grants")
        assert made.status_code == 201, made.text
        movement_id = made.json()["movement_id"]
    with world.client("reader") as reader:
        assert reader.get(f"/v1/movements/{movement_id}").status_code == 200
        problem(reader.post(f"/v1/movements/{movement_id}/approve"), 403)
        problem(reader.post(f"/v1/movements/{movement_id}/cancel"), 403)
    # a bearer token: the login and a fresh password; revoked, it opens nothing
    bob = world.people["bob"]
    passfile = tmp_path / "pgpass"
    token = tokens.issue(world.dsn, bob.login, passfile, None)
    assert token.startswith(f"qtg.{bob.login}.") and bob.password not in token
    bearer = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=world.url, headers=bearer) as client:
        assert client.get(f"/v1/movements/{movement_id}").status_code == 200
        tokens.revoke(world.dsn, bob.login, passfile)
        problem(client.get(f"/v1/movements/{movement_id}"), 401)
    # bob's password is now the credentials file's: the module's people use it from here
    from qtg_runner import credentials

    bob.password = credentials.password_for(passfile, world.dsn, bob.login) or ""
    assert bob.password
    with pytest.raises(Exception, match="administrative"):
        tokens.issue(world.dsn, "postgres", passfile, None)


def test_create_is_idempotent_and_approval_four_eyes_across_two_logins(world: ApiWorld) -> None:
    with world.client("alice") as alice, world.client("bob") as bob:
        first = create(alice, "idem-1", expires_at="2099-01-01T00:00:00Z")
        assert first.status_code == 201, first.text
        movement = first.json()
        assert first.headers["location"] == f"/v1/movements/{movement['movement_id']}"
        assert (movement["state"], movement["created_by"], movement["amount"]) == (
            "PENDING_APPROVAL",
            world.people["alice"].login,
            "100",
        )
        assert movement["created"] is True
        again = create(alice, "idem-1", expires_at="2099-01-01T00:00:00Z")
        assert again.status_code == 200
        assert again.json()["movement_id"] == movement["movement_id"]
        assert again.json()["created"] is False
        body = problem(create(alice, "idem-1"), 409, "QT004")  # no expiry this time
        assert "different request" in body["detail"] and body["hint"]
        problem(
            create(alice, "idem-1", amount="101", expires_at="2099-01-01T00:00:00Z"), 409, "QT004"
        )

        mid = movement["movement_id"]
        refused = problem(alice.post(f"/v1/movements/{mid}/approve"), 403, "QT022")
        assert "cannot also approve" in refused["detail"]
        approved = bob.post(f"/v1/movements/{mid}/approve")
        assert approved.status_code == 200
        assert (approved.json()["state"], approved.json()["approved_by"]) == (
            "APPROVED",
            world.people["bob"].login,
        )
        again_approved = bob.post(f"/v1/movements/{mid}/approve")  # as it is
        assert again_approved.status_code == 200 and again_approved.json()["state"] == "APPROVED"
        problem(alice.post(f"/v1/movements/{mid}/approve"), 409, "QT020")

        cancelled = alice.post(f"/v1/movements/{mid}/cancel", json={"reason": "not today"})
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED"
        assert alice.post(f"/v1/movements/{mid}/cancel").json()["state"] == "CANCELLED"

        audit = alice.get(f"/v1/movements/{mid}/audit").json()["items"]
        actions = [(a["action"], a["to_state"], a["login"]) for a in audit]
        a_login, b_login = world.people["alice"].login, world.people["bob"].login
        assert ("created", "PENDING_APPROVAL", a_login) in actions
        assert ("approval_refused", "PENDING_APPROVAL", a_login) in actions
        assert ("state_changed", "APPROVED", b_login) in actions
        assert ("state_changed", "CANCELLED", a_login) in actions
        assert [a["action"] for a in audit].count("state_changed") == 3  # node skipped too
        # promoted into the chained log (part of it, then all), the trail reads the same
        with world.admin() as admin:
            for most in (2, 10_000):
                admin.execute("SELECT promote_audit('promoter', %s)", (most,))
                assert alice.get(f"/v1/movements/{mid}/audit").json()["items"] == audit

        nodes = alice.get(f"/v1/movements/{mid}/nodes").json()["items"]
        assert [(n["node_key"], n["state"], n["tx_hashes"]) for n in nodes] == [
            ("a", "SKIPPED", [])
        ]


def test_a_batch_is_created_whole_or_not_at_all(world: ApiWorld) -> None:
    items = [{"external_id": f"batch-{i}", "amount": "100", "plan": ONE_NODE} for i in range(3)]
    with world.client("alice") as alice, world.client("bob") as bob:
        first = alice.post("/v1/movements:batch", json={"items": items})
        assert first.status_code == 200, first.text
        made = first.json()["items"]
        assert [(m["state"], m["created"]) for m in made] == [("PENDING_APPROVAL", True)] * 3
        again = alice.post("/v1/movements:batch", json={"items": items})
        assert [(m["movement_id"], m["created"]) for m in again.json()["items"]] == [
            (m["movement_id"], False) for m in made
        ]
        changed = [*items[:2], {**items[2], "amount": "101"}]
        body = problem(alice.post("/v1/movements:batch", json={"items": changed}), 409, "QT004")
        assert "items[2]" in body["detail"]
        bad = [{"external_id": "batch-new", "amount": "5", "plan": {"nodes": []}}, *items]
        body = problem(alice.post("/v1/movements:batch", json={"items": bad}), 422, "QT001")
        assert "items[0]" in body["detail"]
        assert bob.get("/v1/movements", params={"external_id": "batch-new"}).json()["items"] == []
        too_many = {"items": [items[0]] * 1001}
        assert alice.post("/v1/movements:batch", json=too_many).status_code == 422


def test_the_readme_example_and_the_dag(world: ApiWorld) -> None:
    with world.client("alice") as alice:
        created = alice.post("/v1/movements", json=CREATE_EXAMPLE)
        assert created.status_code == 201, created.text
        nodes = alice.get(f"/v1/movements/{created.json()['movement_id']}/nodes").json()["items"]
    assert [(n["node_key"], n["depends_on"], n["state"]) for n in nodes] == [
        ("burn", [], "PENDING"),
        ("mint", ["burn"], "PENDING"),
        ("deposit", ["mint"], "PENDING"),
    ]
    assert all(n["evidence"] is None and n["intents"] == [] for n in nodes)
    # what OpenAPI shows is the psql session of docs/operators.md
    session = OPERATORS.read_text()
    assert f"p_external_id => '{CREATE_EXAMPLE['external_id']}'" in session
    assert f"p_amount      => {CREATE_EXAMPLE['amount']}," in session
    for node in CREATE_EXAMPLE["plan"]["nodes"]:
        assert f'{{"key": "{node["key"]}", ' in session
    with httpx.Client(base_url=world.url) as anonymous:
        spec = anonymous.get("/openapi.json").json()
        assert anonymous.get("/docs").status_code == 200
    post = spec["paths"]["/v1/movements"]["post"]
    example = post["requestBody"]["content"]["application/json"]["examples"]["psql-session"]
    assert example["value"] == CREATE_EXAMPLE
    assert {"200", "201", "409", "422"} <= set(post["responses"])


def test_invalid_requests_are_422_and_unknown_ones_404(world: ApiWorld) -> None:
    with world.client("alice") as alice:
        for body in (
            {"external_id": "bad", "plan": ONE_NODE},  # no amount
            {"external_id": "bad", "amount": "1e3", "plan": ONE_NODE},
            {"external_id": "bad", "amount": "-1", "plan": ONE_NODE},
            {"external_id": "bad", "amount": "1.1234567", "plan": ONE_NODE},
            {"external_id": "bad", "amount": "1", "plan": ONE_NODE, "actor": "bob"},
            {"external_id": "", "amount": "1", "plan": ONE_NODE},
            {"external_id": "bad", "amount": "1", "plan": ONE_NODE, "expires_at": "tomorrow"},
        ):
            body_ = problem(alice.post("/v1/movements", json=body), 422)
            assert body_["errors"]
        problem(
            alice.post(
                "/v1/movements", content=b"{not json", headers={"content-type": "application/json"}
            ),
            422,
        )
        cycle = {
            "nodes": [
                {"key": "a", "executor": "sim", "config": {"lane": "default"}, "depends_on": ["b"]},
                {"key": "b", "executor": "sim", "config": {"lane": "default"}, "depends_on": ["a"]},
            ]
        }
        assert "cycle" in problem(create(alice, "cyclic", plan=cycle), 422, "QT001")["detail"]
        problem(
            create(alice, "no-exec", plan={"nodes": [{"key": "a", "executor": "x"}]}), 422, "QT001"
        )
        problem(create(alice, "two-ways", template="nope"), 422, "QT002")
        problem(
            alice.post(
                "/v1/movements", json={"external_id": "tpl", "amount": "1", "template": "nope"}
            ),
            422,
            "QT003",
        )
        problem(create(alice, "huge", amount="9" * 20), 422, "QT005")
        problem(alice.get("/v1/movements/424242"), 404, "QT010")
        problem(alice.post("/v1/movements/424242/approve"), 404, "QT010")
        problem(alice.get("/v1/movements/424242/nodes"), 404, "QT010")
        assert "movement_id" in problem(alice.get(f"/v1/movements/{2**70}"), 422)["detail"]
        assert "proposal_id" in problem(alice.get("/v1/proposals/0"), 422)["detail"]
        assert "proposal_id" in problem(alice.post(f"/v1/proposals/{2**63}/approve"), 422)["detail"]
        problem(alice.get("/v1/movements/abc"), 422)
        problem(alice.get("/v1/nothing-here"), 404)
        problem(alice.get("/v1/proposals/424242"), 404, "QT013")
        problem(
            alice.post(
                "/v1/movements",
                content=b"x" * (3 * 1024 * 1024),
                headers={"content-type": "application/json"},
            ),
            413,
        )


def test_list_pages_by_cursor_newest_first(world: ApiWorld) -> None:
    with world.client("bob") as bob:
        made = [create(bob, f"page-{i}").json()["movement_id"] for i in range(7)]
        seen: list[int] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"limit": 3, "created_by": world.people["bob"].login}
            if cursor:
                params["cursor"] = cursor
            page = bob.get("/v1/movements", params=params).json()
            seen += [m["movement_id"] for m in page["items"]]
            pages += 1
            # a movement made between two pages never shifts the pages
            if pages == 1:
                create(bob, "page-late")
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == sorted(made, reverse=True) and pages == 3
        pending = bob.get(
            "/v1/movements", params={"state": "PENDING_APPROVAL", "external_id": "page-3"}
        ).json()["items"]
        assert [m["movement_id"] for m in pending] == [made[3]]
        problem(bob.get("/v1/movements", params={"cursor": "garbage!"}), 422)
        problem(bob.get("/v1/movements", params={"state": "DONE"}), 422)
        problem(bob.get("/v1/movements", params={"limit": 0}), 422)


def test_list_by_lane_and_creation_time(world: ApiWorld) -> None:
    """A lane: the movements with a node on it; a time range: created in it
    ([since, until), each with its zone; a time without one is 422)."""
    lane_plan = {
        "nodes": [
            {"key": "a", "executor": "sim", "config": {"lane": "cctp_fast"}, "depends_on": []}
        ]
    }
    with world.client("bob") as bob:
        on_lane = create(bob, "lane-1", plan=lane_plan).json()
        elsewhere = create(bob, "lane-0").json()  # the default lane
        listed = bob.get("/v1/movements", params={"lane": "cctp_fast"}).json()["items"]
        ids = [m["movement_id"] for m in listed]
        assert on_lane["movement_id"] in ids and elsewhere["movement_id"] not in ids
        made_at = on_lane["created_at"]
        since = bob.get("/v1/movements", params={"created_since": made_at}).json()["items"]
        assert on_lane["movement_id"] in [m["movement_id"] for m in since]
        until = bob.get("/v1/movements", params={"created_until": made_at}).json()["items"]
        assert on_lane["movement_id"] not in [m["movement_id"] for m in until]
        problem(bob.get("/v1/movements", params={"created_since": "2026-12-01T00:00:00"}), 422)


def test_callback_targets_are_proposed_by_one_login_and_registered_by_another(
    world: ApiWorld,
) -> None:
    target = {
        "name": "treasury-ops",
        "url": "https://hooks.example.com/qtg",
        "secret_ref": "env:QTG_CB_TREASURY_OPS",
    }
    with world.client("alice") as alice, world.client("bob") as bob:
        proposed = alice.post("/v1/callback-targets", json=target)
        assert proposed.status_code == 202, proposed.text
        proposal = proposed.json()
        assert (proposal["kind"], proposal["state"]) == ("callback_target", "PROPOSED")
        assert (
            alice.post("/v1/callback-targets", json=target).json()["proposal_id"]
            == (proposal["proposal_id"])
        )  # a retry: the same proposal
        listed = alice.get("/v1/callback-targets").json()
        assert listed["items"] == [] and len(listed["proposed"]) == 1
        problem(alice.post(f"/v1/proposals/{proposal['proposal_id']}/approve"), 403, "QT022")
        applied = bob.post(f"/v1/proposals/{proposal['proposal_id']}/approve")
        assert applied.status_code == 200 and applied.json()["state"] == "APPLIED"
        assert bob.post(f"/v1/proposals/{proposal['proposal_id']}/approve").json()["state"] == (
            "APPLIED"
        )
        [registered] = alice.get("/v1/callback-targets").json()["items"]
        assert (registered["name"], registered["url"], registered["enabled"]) == (
            "treasury-ops",
            target["url"],
            True,
        )
        assert alice.post("/v1/callback-targets", json=target).status_code == 200
        problem(
            alice.post(
                "/v1/callback-targets",
                json={**target, "name": "other", "secret_ref": "whsec_c2VjcmV0"},
            ),
            422,
            "QT002",
        )
    with world.client("runner") as runner:
        problem(runner.post("/v1/callback-targets", json={**target, "name": "x"}), 403)


def test_health_readiness_and_metrics(world: ApiWorld) -> None:
    with httpx.Client(base_url=world.url) as anonymous:
        assert anonymous.get("/healthz").json()["status"] == "ok"
        ready = anonymous.get("/readyz")
        assert ready.status_code == 200 and ready.json()["database"] == "reachable"
        problem(anonymous.get("/metrics"), 401)
    with world.client("reader") as reader:
        checked = reader.get("/readyz").json()
        schemas = Path(__file__).resolve().parents[2] / "sql" / "schemas"
        newest = max(f.name for f in schemas.glob("0*.sql") if not f.name.endswith(".rollback.sql"))
        assert checked["migrations"] == "current" and checked["newest"] == newest[: -len(".sql")]
        scraped = reader.get("/metrics")
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
        families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    expected = {
        "qtg_movements",
        "qtg_nodes",
        "qtg_nodes_in_flight",
        "qtg_nodes_stuck",
        "qtg_workers_stalled",
        "qtg_callbacks_pending",
        "qtg_callbacks_dead",
        "qtg_callbacks_refused",
        "qtg_lane_latency_seconds",
        "qtg_up",
    }
    assert expected <= set(families)
    with world.admin() as admin:
        counts = dict(
            admin.execute(
                "SELECT state, total FROM pipeline_counts WHERE entity = 'movement'"
            ).fetchall()
        )
    got = {s.labels["state"]: s.value for s in families["qtg_movements"].samples}
    assert got == {state: float(total) for state, total in counts.items()}
    assert all(s.labels["network"] == "testnet" for s in families["qtg_movements"].samples)


def test_readiness_says_when_migrations_are_pending(world: ApiWorld) -> None:
    with world.admin() as admin:
        admin.execute("SET ROLE qtg_owner")
        admin.execute("DELETE FROM qtg.schema_migrations WHERE migration_id LIKE '0029%'")
        try:
            with world.client("reader") as reader:
                body = problem(reader.get("/readyz"), 503)
            assert body["pending"] == ["0029_http_api"]
        finally:
            admin.execute("INSERT INTO qtg.schema_migrations VALUES ('0029_http_api', now())")


def test_every_documented_code_answers_with_its_status() -> None:
    """A refusal with a QT code is the problem its row of the error table names;
    a code no caller can cause (500) is left to the API's own 500."""
    assert QT_ERRORS
    for code, error in QT_ERRORS.items():
        problem = from_sqlstate(code, "the message", "the hint")
        if error.status == 500:
            assert problem is None, code
            continue
        assert problem is not None, code
        body = problem.body()
        assert (body["status"], body["title"], body["code"]) == (error.status, error.title, code)
        assert body["type"] == f"/problems/{code}"


def test_a_problem_type_says_what_it_means(world: ApiWorld) -> None:
    with httpx.Client(base_url=world.url) as anonymous:
        described = anonymous.get("/problems/QT022")
        assert described.status_code == 200
        body = described.json()
        assert (body["code"], body["status"]) == ("QT022", QT_ERRORS["QT022"].status)
        assert body["meaning"] == QT_ERRORS["QT022"].meaning
        assert body["see"] == "docs/reference/errors.md"
        assert (Path(__file__).resolve().parents[2] / body["see"]).is_file()
        problem(anonymous.get("/problems/QT999"), 404)


def test_a_login_the_server_would_let_in_unchecked_is_refused(world: ApiWorld) -> None:
    """The API's only proof of a caller is the server checking its password.
    On a server whose pg_hba.conf trusts a login (trust, peer, a client
    certificate...), that login named with any password is refused (401, as
    a wrong password): it is not let in to create or approve as that person."""
    login = f"trusted_{world.people['alice'].login}"[:63]
    with world.admin() as admin:
        with admin.transaction():
            create_login(admin, login, "qtg_testnet_operator", secrets.token_urlsafe(24))
        hba = Path(admin.execute("SHOW hba_file").fetchone()[0])
        if os.environ.get("QTG_TEST_DSN") or not hba.is_file():
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))
            pytest.skip("needs the suite's own server, its pg_hba.conf on this machine")
        rules = hba.read_text()
        try:
            hba.write_text(f"local all {login} trust\nhost all {login} 127.0.0.1/32 trust\n{rules}")
            admin.execute("SELECT pg_reload_conf()")
            wrong = httpx.Client(base_url=world.url, auth=(login, "not-its-password"), timeout=30)
            problem(wrong.get("/v1/movements"), 401)
            problem(wrong.post("/v1/movements", json=CREATE_EXAMPLE), 401)
        finally:
            hba.write_text(rules)
            admin.execute("SELECT pg_reload_conf()")
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(login)))


def test_the_api_refuses_to_start_on_a_libpq_that_cannot_require_a_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """require_auth is libpq 16's: on an older one (psycopg without its
    binary) every caller would be a 500, so the API does not start."""
    import psycopg

    from qtg_runner.api.identity import Database
    from qtg_runner.config import ConfigError

    monkeypatch.setattr(psycopg.pq, "version", lambda: 150013)
    with pytest.raises(ConfigError, match="libpq 16 or newer"):
        Database("host=/tmp dbname=qtg", "testnet")


def test_the_api_keeps_no_credential_of_whoever_started_it() -> None:
    from psycopg.conninfo import conninfo_to_dict

    from qtg_runner.api.identity import Credentials, Database, server_conninfo

    admin = "host=/run/pg port=5433 dbname=qtg user=postgres password=secret passfile=/x/pgpass"
    kept = conninfo_to_dict(server_conninfo(admin))
    assert kept == {"host": "/run/pg", "port": "5433", "dbname": "qtg"}
    caller = conninfo_to_dict(
        Database(server_conninfo(admin), "testnet").caller_conninfo(Credentials("alice", "pw"))
    )
    assert caller["user"] == "alice" and "password" not in caller
    assert caller["passfile"] == "/proc/self/qtg-no-passfile"
    assert caller["require_auth"] == "scram-sha-256"
    assert "search_path=testnet,qtg" in caller["options"]


def test_a_rehearsal_is_asked_for_shown_and_its_failure_advised_on_approval(
    world: ApiWorld,
) -> None:
    """POST /v1/movements/{id}/rehearsal asks for one (idempotent while it is
    open, 202 each time); the movement shows the open request, then the
    rehearsal a service recorded; the approval answers the QT025 advice it
    got; a movement no longer awaiting approval is 409 QT020."""
    b_login = world.people["bob"].login
    with world.client("alice") as alice, world.client("bob") as bob:
        made = create(alice, "rehearsed-1")
        assert made.status_code == 201, made.text
        assert (made.json()["rehearsal"], made.json()["rehearsal_request"]) == (None, None)
        mid = made.json()["movement_id"]

        asked = bob.post(f"/v1/movements/{mid}/rehearsal")
        assert asked.status_code == 202, asked.text
        request = asked.json()["rehearsal_request"]
        assert (request["open"], request["requested_by"], request["claimed_by"]) == (
            True,
            b_login,
            None,
        )
        again = alice.post(f"/v1/movements/{mid}/rehearsal")  # the creator may ask too
        assert again.status_code == 202
        assert again.json()["rehearsal_request"] == request  # the same, nothing written

        # a rehearsal service (here: the admin's login) serves it, and the rehearsal failed
        with world.admin() as admin:
            claimed = procs.claim_rehearsal_request().one(admin)
            assert (claimed.request_id, claimed.movement_id) == (request["request_id"], mid)
            lines = ["step a (sim): FAILED, reverted", "outcome: failed"]
            revision = procs.rehearsal_input(mid).one(admin)["registry_revision"]
            rehearsal_id = procs.record_rehearsal(
                mid, "failed", {"outcome": "failed", "lines": lines}, registry_revision=revision
            ).one(admin)
            procs.finish_rehearsal_request(
                claimed.request_id, claimed.claim, rehearsal_id, None
            ).one(admin)
            served_by = admin.info.user
        shown = alice.get(f"/v1/movements/{mid}").json()
        assert shown["rehearsal"]["rehearsal_id"] == rehearsal_id
        assert (shown["rehearsal"]["outcome"], shown["rehearsal"]["lines"]) == ("failed", lines)
        assert shown["rehearsal"]["recorded_by"] == served_by
        assert shown["rehearsal"]["registry_changed"] is False  # recorded on today's registry
        assert shown["rehearsal_request"]["open"] is False
        assert shown["rehearsal_request"]["rehearsal_id"] == rehearsal_id

        approved = bob.post(f"/v1/movements/{mid}/approve")
        assert approved.status_code == 200, approved.text
        assert approved.json()["state"] == "APPROVED"
        [advice] = approved.json()["advice"]
        assert advice["code"] == "QT025"
        assert f"its last rehearsal (id {rehearsal_id}" in advice["message"]
        assert advice["message"].endswith("failed; approved anyway") and advice["hint"]
        # the approver again: as it is, and nothing to advise this time
        assert bob.post(f"/v1/movements/{mid}/approve").json()["advice"] == []

        late = problem(bob.post(f"/v1/movements/{mid}/rehearsal"), 409, "QT020")
        assert "waits for approval" in late["detail"]
        problem(bob.post("/v1/movements/424242/rehearsal"), 404, "QT010")
        problem(bob.post(f"/v1/movements/{2**63}/rehearsal"), 422)

        plain = create(alice, "rehearsed-2").json()["movement_id"]
        assert bob.post(f"/v1/movements/{plain}/approve").json()["advice"] == []
        audit = alice.get(f"/v1/movements/{mid}/audit").json()["items"]
        asked_by = [a["login"] for a in audit if a["action"] == "rehearsal_requested"]
        assert asked_by == [b_login]  # asked once, answered twice


def test_a_rehearsal_request_is_refused_cross_site_and_to_a_reader(world: ApiWorld) -> None:
    with world.client("alice") as alice:
        mid = create(alice, "rehearsed-3").json()["movement_id"]
        with world.admin() as admin:
            before = admin.execute("SELECT count(*) FROM rehearsal_requests").fetchone()
        problem(
            alice.post(
                f"/v1/movements/{mid}/rehearsal", headers={"Origin": "https://evil.example"}
            ),
            403,
        )
        problem(
            alice.post(
                f"/v1/movements/{mid}/rehearsal",
                content=b"",
                headers={"content-type": "application/x-www-form-urlencoded"},
            ),
            415,
        )
    with world.client("reader") as reader:
        problem(reader.post(f"/v1/movements/{mid}/rehearsal"), 403)
        assert reader.get(f"/v1/movements/{mid}").json()["rehearsal_request"] is None
    with world.client("runner") as runner:
        problem(runner.post(f"/v1/movements/{mid}/rehearsal"), 403)
    with world.admin() as admin:
        assert admin.execute("SELECT count(*) FROM rehearsal_requests").fetchone() == before
