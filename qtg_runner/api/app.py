"""The HTTP API: FastAPI over the network's procedures, as the caller's login.

    POST /v1/movements                      create (idempotent on external_id)
    POST /v1/movements:batch                create up to 1,000 in one transaction
    GET  /v1/movements                      list: ?state=&external_id=&created_by=&lane=
                                            &created_since=&created_until=&limit=&cursor=
    GET  /v1/movements/{id}                 one movement
    POST /v1/movements/{id}/approve         approve (the approver again: as it is)
    POST /v1/movements/{id}/cancel          cancel (again: as it is)
    POST /v1/movements/{id}/priority        reprioritise (the same again: as it is)
    POST /v1/movements/{id}/rehearsal       ask for a rehearsal (again while open: that one)
    GET  /v1/movements/{id}/audit           its audit trail
    GET  /v1/movements/{id}/nodes           its DAG: nodes, evidence, transaction hashes
    GET  /v1/callback-targets               registered receivers and open proposals
    POST /v1/callback-targets               propose one (a second operator approves)
    GET  /v1/pauses                         the scopes paused (or tripped) now
    POST /v1/pauses                         pause a scope (paused already: as it is)
    POST /v1/pauses/{scope}/{name}/resume   resume it (another operator than its pauser)
    POST /v1/nodes/{id}/requeue             ask for a fresh side effect for an UNKNOWN
                                            node or a retry of a FAILED one of which
                                            nothing was prepared, or apply another
                                            operator's request
    POST /v1/nodes/{id}/release             release a quarantined node (not quarantined: as it is)
    POST /v1/drift-alerts/{id}/acknowledge  accept a drifted balance (two operators)
    GET  /v1/proposals                      open configuration proposals
    POST /v1/proposals/{id}/approve         approve one (four eyes)
    GET  /healthz  /readyz  /metrics        liveness, readiness, Prometheus
    GET  /docs                              Swagger UI, served offline (api/docs.py)
    GET  /  ...                             the operator page (api/page.py)

Every endpoint but /healthz (and /readyz's reachability) runs on a connection
as the caller's login (api/identity.py), which the guard (api/guard.py) opens
before the body is read and closes with the answer; the guard also bounds
bodies as they arrive, refuses cross-site and non-JSON requests that change
something, and throttles failed authentications. Every error is a
problem+json body (api/problems.py).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any

import psycopg
from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import AwareDatetime
from starlette.exceptions import HTTPException as StarletteHTTPException

from qtg_runner.api import metrics as metrics_text
from qtg_runner.api import reads
from qtg_runner.api.guard import BODY_SECONDS, CALLER, Guard, Throttle
from qtg_runner.api.identity import Credentials, Database
from qtg_runner.api.models import (
    CREATE_EXAMPLE,
    CallbackTargetProposal,
    Cancel,
    MovementBatch,
    MovementCreate,
    PauseSet,
    PrioritySet,
    Reasoned,
)
from qtg_runner.api.problems import OTHER, Problem, from_sqlstate, problem_response
from qtg_runner.db import procs
from qtg_runner.db.migrate import sql_dir

log = logging.getLogger("qtg.api")

MAX_ERRORS = 20
"""A 422 names at most this many of a body's errors (and counts them all): a
small body can hold many thousands, and the answer must stay small."""


@dataclass
class ApiConfig:
    database: Database
    workers_enabled: bool = False
    secure_cookies: bool = False
    """Mark the operator page's cookies Secure (set when serving TLS)."""
    session_seconds: float = 8 * 3600
    max_sessions: int = 40
    """Operator-page sessions at once, each holding its login's connection: well
    under the server's slots, which runners and the admin need too."""
    live_refresh_s: int = 15
    """How often the operator page's live frame reloads, while refreshing is on."""
    max_sessions_per_login: int = 3
    """Operator-page sessions of one login at once: its oldest is signed out by
    a new sign-in, so signing in again and again holds no more connections."""
    throttle: Throttle = field(default_factory=Throttle)
    """Failed authentications per login and client address (api/guard.py)."""
    body_seconds: float = BODY_SECONDS
    """How long after a request its body must have arrived whole (api/guard.py)."""
    extra: dict[str, Any] = field(default_factory=dict)


def shipped_migrations() -> list[str]:
    """The ids of the migrations this build carries (sql/schemas)."""
    return sorted(
        p.name.removesuffix(".sql")
        for p in (sql_dir() / "schemas").glob("*.sql")
        if not p.name.endswith(".rollback.sql")
    )


def db_problem(exc: psycopg.Error) -> Problem:
    """The problem for an error the database answered a call with; a 500 (with
    a request id, the details in the log) when it is not one a caller causes."""
    if isinstance(exc, procs.Refused):
        found = from_sqlstate(exc.sqlstate, exc.message, exc.hint)
    else:
        diag = exc.diag
        found = (
            from_sqlstate(exc.sqlstate or "", diag.message_primary or "", diag.message_hint)
            if exc.sqlstate
            else None
        )
        if found is not None and found.status == 422 and not (exc.sqlstate or "").startswith("QT"):
            found.detail = "a value is beyond what its type holds"  # no SQL text echoed
        if found is not None and found.status == 403 and exc.sqlstate == "42501":
            found.detail = "your login lacks the grant this call needs: " + (
                diag.message_primary or ""
            )
    if found is not None:
        return found
    ref = secrets.token_hex(6)
    log.error("event=api_internal_error ref=%s error=%r", ref, exc)
    return Problem(500, "Internal error", f"the request failed; the API's log has it as {ref}")


def caller(request: Request) -> psycopg.AsyncConnection[Any]:
    """The connection as the login the request's credentials name: the guard
    opened it before the body was read, and closes it with the answer."""
    conn: psycopg.AsyncConnection[Any] | None = request.scope.get(CALLER)
    if conn is None:  # a route the guard does not authenticate: a bug, not a caller's doing
        raise RuntimeError(f"no caller's connection for {request.url.path}: not under /v1")
    return conn


Conn = Annotated[psycopg.AsyncConnection[Any], Depends(caller)]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    await app.state.sessions.close_all()  # the operator page's signed-in connections


def create_app(config: ApiConfig) -> FastAPI:
    app = FastAPI(
        lifespan=lifespan,
        docs_url=None,  # FastAPI's /docs and /redoc load from a CDN: api/docs.py's instead
        redoc_url=None,
        title="QTG engine API",
        version="1",
        description=(
            "Treasury movements over HTTP, as your own database login: HTTP Basic (login "
            "and password) or a bearer token `qtg.<login>.<secret>` (`qtg api token issue`). "
            "Every error is an RFC 9457 problem (application/problem+json) carrying the "
            "engine's SQLSTATE and hint."
        ),
    )
    app.state.config = config

    # -- errors --------------------------------------------------------------------

    @app.exception_handler(Problem)
    async def _problem(request: Request, exc: Problem) -> Response:
        return problem_response(exc)

    @app.exception_handler(psycopg.Error)
    async def _database(request: Request, exc: psycopg.Error) -> Response:
        return problem_response(db_problem(exc))

    @app.exception_handler(procs.Refused)
    async def _refused(request: Request, exc: procs.Refused) -> Response:
        found = from_sqlstate(exc.sqlstate, exc.message, exc.hint)
        return problem_response(found or Problem(403, "Refused", exc.message))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        found = exc.errors()
        errors = [
            {
                "loc": list(e.get("loc", ()))[:10],
                "msg": str(e.get("msg", ""))[:500],
                "type": e.get("type"),
            }
            for e in found[:MAX_ERRORS]
        ]
        detail = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in errors)[
            :2000
        ]
        if len(found) > MAX_ERRORS:
            detail = f"{len(found)} errors, the first {MAX_ERRORS}: {detail}"[:2000]
        return problem_response(
            Problem(
                422,
                OTHER[422],
                detail or "invalid request",
                extra={"errors": errors, "error_count": len(found)},
            )
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        title = OTHER.get(exc.status_code, "Error")
        detail = exc.detail if isinstance(exc.detail, str) else title
        return problem_response(Problem(exc.status_code, title, detail))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        ref = secrets.token_hex(6)
        log.error("event=api_internal_error ref=%s", ref, exc_info=exc)
        return problem_response(
            Problem(500, "Internal error", f"the request failed; the API's log has it as {ref}")
        )

    app.add_middleware(
        Guard,
        database=config.database,
        throttle=config.throttle,
        body_seconds=config.body_seconds,
    )

    def id_ok(name: str, value: int) -> int:
        """A path's id within bigint's positive range, else 422 naming it."""
        if not 1 <= value < 2**63:
            raise Problem(422, OTHER[422], f"{name}: an id from 1 to 2^63-1")
        return value

    def movement_id_ok(movement_id: int) -> int:
        return id_ok("movement_id", movement_id)

    # -- movements -------------------------------------------------------------------

    @app.post(
        "/v1/movements",
        status_code=201,
        tags=["movements"],
        summary="Create a movement (idempotent on external_id)",
        responses={
            200: {"description": "The same request again: the movement it made"},
            201: {"description": "Created: PENDING_APPROVAL"},
            409: {"description": "The external id names a movement with another body (QT004)"},
            422: {"description": "An invalid body or plan (QT001, QT002, QT005, ...)"},
        },
        openapi_extra={
            "requestBody": {
                "content": {
                    "application/json": {
                        "examples": {
                            "psql-session": {
                                "summary": "docs/operators.md's psql session: burn, mint, deposit",
                                "value": CREATE_EXAMPLE,
                            }
                        }
                    }
                }
            }
        },
    )
    async def create_movement(body: MovementCreate, conn: Conn) -> Response:
        created = await procs.create_movement(
            body.external_id,
            body.decimal_amount(),
            plan=body.plan,
            template=body.template,
            params=body.params,
            asset=body.asset,
            expires_at=body.expires_at,
            callback_url=body.callback_url,
            priority=body.priority,
        ).aone(conn)
        row = await reads.movement(conn, created.movement_id)
        row["created"] = created.created
        return JSONResponse(
            row,
            status_code=201 if created.created else 200,
            headers={"Location": f"/v1/movements/{created.movement_id}"},
        )

    @app.post(
        "/v1/movements:batch",
        tags=["movements"],
        summary="Create up to 1,000 movements in one transaction (each idempotent on external_id)",
        responses={
            200: {"description": "One entry per item, in order: the movement, its state, created"},
            409: {
                "description": "An item's external id names a movement with another body (QT004)"
            },
            422: {"description": "An invalid item: the whole batch is refused, the item named"},
        },
    )
    async def create_movements(body: MovementBatch, conn: Conn) -> dict[str, Any]:
        items = [item.model_dump(mode="json") for item in body.items]
        rows = await procs.create_movements(items).aall(conn)
        return {
            "items": [
                {
                    "movement_id": row.movement_id,
                    "state": row.request_state.value,
                    "created": row.created,
                }
                for row in rows
            ]
        }

    @app.get("/v1/movements", tags=["movements"], summary="List movements, newest first")
    async def list_movements(
        conn: Conn,
        state: Annotated[list[str] | None, Query(description="One or more states")] = None,
        external_id: Annotated[str | None, Query(max_length=200)] = None,
        created_by: Annotated[str | None, Query(max_length=63)] = None,
        lane: Annotated[
            str | None, Query(max_length=200, description="A node on this lane")
        ] = None,
        created_since: Annotated[
            AwareDatetime | None, Query(description="Created at or after (ISO 8601, a zone)")
        ] = None,
        created_until: Annotated[
            AwareDatetime | None, Query(description="Created before (ISO 8601, a zone)")
        ] = None,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
    ) -> dict[str, Any]:
        states = [s.upper() for s in state or []]
        unknown = [s for s in states if s not in reads.STATES]
        if unknown:
            raise Problem(
                422, OTHER[422], f"state: {unknown[0]!r} is not one of {', '.join(reads.STATES)}"
            )
        before = reads.decode_cursor(cursor) if cursor else None
        items, next_cursor = await reads.movements(
            conn,
            states=states,
            external_id=external_id,
            created_by=created_by,
            limit=limit,
            before=before,
            lane=lane,
            created_since=created_since,
            created_until=created_until,
        )
        return {"items": items, "next_cursor": next_cursor}

    @app.get("/v1/movements/{movement_id}", tags=["movements"], summary="One movement")
    async def get_movement(movement_id: int, conn: Conn) -> dict[str, Any]:
        return await reads.movement(conn, movement_id_ok(movement_id))

    @app.post(
        "/v1/movements/{movement_id}/approve",
        tags=["movements"],
        summary="Approve a movement as your login (not its creator's: 403 QT022)",
        responses={
            200: {
                "description": "The movement; ``advice`` lists what the approval was warned of "
                "(QT025: its latest rehearsal failed), empty when nothing"
            }
        },
    )
    async def approve_movement(movement_id: int, conn: Conn) -> dict[str, Any]:
        with procs.advice(conn) as advised:
            await procs.approve_movement(movement_id_ok(movement_id)).aone(conn)
        row = await reads.movement(conn, movement_id)
        row["advice"] = [
            {"code": a.sqlstate, "message": a.message, "hint": a.hint} for a in advised
        ]
        return row

    @app.post(
        "/v1/movements/{movement_id}/rehearsal",
        status_code=202,
        tags=["movements"],
        summary="Ask for a rehearsal of a movement awaiting approval (idempotent)",
        responses={
            202: {
                "description": "Asked (or asked already, not served yet): the movement, its "
                "open ``rehearsal_request`` served by `qtg rehearse --requested`"
            },
            409: {"description": "The movement is no longer awaiting approval (QT020)"},
        },
    )
    async def request_rehearsal(movement_id: int, conn: Conn) -> Response:
        await procs.request_rehearsal(movement_id_ok(movement_id)).aone(conn)
        row = await reads.movement(conn, movement_id)
        return JSONResponse(row, status_code=202)

    @app.post(
        "/v1/movements/{movement_id}/cancel",
        tags=["movements"],
        summary="Cancel a movement (in-flight side effects settle first)",
    )
    async def cancel_movement(
        movement_id: int, conn: Conn, body: Cancel | None = None
    ) -> dict[str, Any]:
        reason = body.reason if body is not None else None
        await procs.cancel_movement(movement_id_ok(movement_id), reason=reason).aone(conn)
        return await reads.movement(conn, movement_id)

    @app.post(
        "/v1/movements/{movement_id}/priority",
        tags=["movements"],
        summary="Set the priority of a movement not finished and of its unfinished nodes",
        responses={
            200: {"description": "The movement, with its priority (the same again: as it is)"},
            409: {"description": "The movement has finished (QT020)"},
        },
    )
    async def set_priority(movement_id: int, body: PrioritySet, conn: Conn) -> dict[str, Any]:
        await procs.set_priority(movement_id_ok(movement_id), body.priority, body.reason).aone(conn)
        return await reads.movement(conn, movement_id)

    @app.get("/v1/movements/{movement_id}/audit", tags=["movements"], summary="Audit trail")
    async def movement_audit(movement_id: int, conn: Conn) -> dict[str, Any]:
        return {"items": await reads.audit(conn, movement_id_ok(movement_id))}

    @app.get(
        "/v1/movements/{movement_id}/nodes",
        tags=["movements"],
        summary="The movement's DAG: nodes, states, evidence, transaction hashes",
    )
    async def movement_nodes(movement_id: int, conn: Conn) -> dict[str, Any]:
        return {"items": await reads.nodes(conn, movement_id_ok(movement_id))}

    # -- callback targets and proposals -------------------------------------------------

    @app.get("/v1/callback-targets", tags=["callbacks"], summary="Registered callback targets")
    async def list_targets(conn: Conn) -> dict[str, Any]:
        return {
            "items": await reads.callback_targets(conn),
            "proposed": await reads.open_proposals(conn, "callback_target"),
        }

    @app.post(
        "/v1/callback-targets",
        status_code=202,
        tags=["callbacks"],
        summary="Propose a callback target; a second operator approves it",
        responses={200: {"description": "The target is registered exactly so already"}},
    )
    async def propose_target(body: CallbackTargetProposal, conn: Conn) -> Response:
        for target in await reads.callback_targets(conn):
            if target["name"] == body.name and (
                target["url"],
                target["secret_ref"],
                target["allow_private"],
                target["enabled"],
            ) == (body.url, body.secret_ref, body.allow_private, body.enabled):
                return JSONResponse({"target": target}, status_code=200)  # already so
        proposal = await procs.propose_callback_target(
            body.name, body.url, body.secret_ref, body.allow_private, body.enabled
        ).aone(conn)
        row = await reads.proposal(conn, proposal.proposal_id)
        return JSONResponse(
            row, status_code=202, headers={"Location": f"/v1/proposals/{proposal.proposal_id}"}
        )

    @app.get("/v1/proposals", tags=["proposals"], summary="Open configuration proposals")
    async def list_proposals(conn: Conn) -> dict[str, Any]:
        return {"items": await reads.open_proposals(conn)}

    @app.get("/v1/proposals/{proposal_id}", tags=["proposals"], summary="One proposal")
    async def get_proposal(proposal_id: int, conn: Conn) -> dict[str, Any]:
        return await reads.proposal(conn, id_ok("proposal_id", proposal_id))

    @app.post(
        "/v1/proposals/{proposal_id}/approve",
        tags=["proposals"],
        summary="Approve a proposal as your login (not its proposer's: 403 QT022)",
    )
    async def approve_proposal(proposal_id: int, conn: Conn) -> dict[str, Any]:
        await procs.approve_proposal(id_ok("proposal_id", proposal_id)).aone(conn)
        return await reads.proposal(conn, proposal_id)

    # -- pauses ------------------------------------------------------------------------------

    @app.get("/v1/pauses", tags=["pauses"], summary="The scopes paused (or tripped) now")
    async def list_pauses(conn: Conn) -> dict[str, Any]:
        return {"items": await reads.pauses(conn)}

    @app.post(
        "/v1/pauses",
        status_code=201,
        tags=["pauses"],
        summary="Pause a movement, lane, venue, chain or the network: no new claims",
        responses={
            200: {"description": "Paused already: that pause stays (this reason is audited)"},
            201: {"description": "Paused"},
            422: {"description": "A scope or name the network does not have (QT002, QT010)"},
        },
    )
    async def pause(body: PauseSet, conn: Conn) -> Response:
        tripped = await procs.trip_breaker(
            body.scope, body.name, body.reason, body.for_seconds
        ).aone(conn)
        row = {
            "scope": body.scope,
            "name": body.name,
            "breaker_state": tripped.breaker_state,
            "paused": tripped.tripped,
        }
        return JSONResponse(row, status_code=201 if tripped.tripped else 200)

    @app.post(
        "/v1/pauses/{scope}/{name}/resume",
        tags=["pauses"],
        summary="Resume a paused scope as your login (its pauser: 403 QT022)",
        responses={409: {"description": "Nothing is paused there (QT061)"}},
    )
    async def resume(scope: str, name: str, conn: Conn) -> dict[str, Any]:
        state = await procs.reset_breaker(scope, name).aone(conn)
        return {"scope": scope, "name": name, "breaker_state": state}

    # -- nodes and drift alerts --------------------------------------------------------

    @app.post(
        "/v1/nodes/{node_id}/requeue",
        tags=["nodes"],
        summary="Ask for, or apply, a requeue of an UNKNOWN node or a retry of a FAILED one",
        responses={
            200: {"description": "REQUESTED (the node untouched) or APPLIED (READY)"},
            403: {"description": "The asker's own second call (QT022)"},
            409: {
                "description": "Neither an UNKNOWN node with a prepared side effect nor a "
                "FAILED one of which nothing was prepared (QT021)"
            },
        },
    )
    async def requeue_node(node_id: int, body: Reasoned, conn: Conn) -> dict[str, Any]:
        row = await procs.requeue_node(id_ok("node_id", node_id), body.reason).aone(conn)
        return {
            "node_id": node_id,
            "requeue_id": row.requeue_id,
            "requeue_state": row.requeue_state,
            "node_state": row.node_state,
        }

    @app.post(
        "/v1/nodes/{node_id}/release",
        tags=["nodes"],
        summary="Release a quarantined node back into circulation in its state",
        responses={
            200: {"description": "Released, or not quarantined (as it is: released false)"},
            409: {"description": "Finished, or never quarantined (QT021)"},
        },
    )
    async def release_node(node_id: int, body: Reasoned, conn: Conn) -> dict[str, Any]:
        node_id = id_ok("node_id", node_id)
        try:
            state = await procs.release_quarantine(node_id, body.reason).aone(conn)
        except psycopg.Error as refused:
            # not quarantined: released already (as it is), or never (409)
            was = await reads.released_node(conn, node_id) if refused.sqlstate == "QT021" else None
            if was is None:
                raise
            return {"node_id": node_id, "node_state": was, "released": False}
        return {"node_id": node_id, "node_state": state, "released": True}

    @app.post(
        "/v1/drift-alerts/{alert_id}/acknowledge",
        tags=["balances"],
        summary="Accept a drifted balance: the first operator asks, another re-baselines",
        responses={
            200: {"description": "ACK_REQUESTED, or ACKNOWLEDGED (the account re-baselined)"},
            403: {"description": "The asker's own second call (QT022)"},
        },
    )
    async def acknowledge_drift(alert_id: int, body: Reasoned, conn: Conn) -> dict[str, Any]:
        state = await procs.acknowledge_drift_alert(id_ok("alert_id", alert_id), body.reason).aone(
            conn
        )
        return {"alert_id": alert_id, "alert_state": state}

    # -- health, readiness, metrics -------------------------------------------------------

    @app.get("/healthz", tags=["operations"], summary="The process answers")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "network": config.database.network,
            "workers_enabled": config.workers_enabled,
        }

    @app.get(
        "/readyz",
        tags=["operations"],
        summary="Database reachable; with a login, also the migrations current",
        responses={503: {"description": "Not ready: the reason in the problem"}},
    )
    async def readyz(request: Request) -> Response:
        conn: psycopg.AsyncConnection[Any] | None = request.scope.get(CALLER)
        if conn is None:  # no credentials: the guard opened nothing
            reachable = await server_answers(config.database)
            if not reachable:
                raise Problem(
                    503, "Not ready", "the database does not answer", headers={"Retry-After": "5"}
                )
            return JSONResponse(
                {
                    "status": "ready",
                    "database": "reachable",
                    "migrations": "not checked: send a login (e.g. a reader's)",
                }
            )
        cur = await conn.execute(
            "SELECT coalesce(array_agg(migration_id ORDER BY migration_id), '{}')"
            " FROM qtg.schema_migrations"
        )
        row = await cur.fetchone()
        applied = list(row[0]) if row else []
        shipped = shipped_migrations()
        pending = [m for m in shipped if m not in applied]
        unknown = [m for m in applied if m not in shipped]
        if pending or unknown:
            raise Problem(
                503,
                "Not ready",
                ("migrations pending: " + ", ".join(pending))
                if pending
                else ("the database has migrations this build lacks: " + ", ".join(unknown)),
                extra={"pending": pending, "unknown": unknown},
                headers={"Retry-After": "30"},
            )
        return JSONResponse(
            {
                "status": "ready",
                "database": "reachable",
                "migrations": "current",
                "newest": shipped[-1],
            }
        )

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus text format, read from the views as the scraper's login",
        response_class=Response,
    )
    async def metrics(conn: Conn) -> Response:
        text = await metrics_text.render(conn, config.database.network)
        return Response(text, media_type=metrics_text.CONTENT_TYPE)

    @app.get("/problems/{code}", tags=["operations"], summary="What a problem type means")
    async def problem_type(code: str) -> dict[str, Any]:
        from qtg_runner.api.problems import SQLSTATE_STATUS
        from qtg_runner.errors import QT_ERRORS

        kind = SQLSTATE_STATUS.get(code)
        if kind is None:
            raise Problem(404, "Not found", f"no problem type {code[:10]!r}")
        described = QT_ERRORS.get(code)
        return {
            "type": f"/problems/{code}",
            "code": code,
            "title": kind.title,
            "status": kind.status,
            **({"meaning": described.meaning} if described is not None else {}),
            "see": "docs/reference/errors.md",
        }

    from qtg_runner.api.docs import mount_docs
    from qtg_runner.api.page import mount_page

    mount_docs(app)
    mount_page(app, config)
    return app


async def server_answers(database: Database) -> bool:
    """Whether the server answers a connection's start (asking for a password
    counts: it is up), without any credential."""
    probe = Credentials("qtg_readiness_probe", "-")
    try:
        conn = await psycopg.AsyncConnection.connect(
            database.caller_conninfo(probe), password="", autocommit=True
        )
    except psycopg.OperationalError as exc:
        text = str(exc)
        return "password" in text or "authentication" in text or "does not exist" in text
    await conn.close()
    return True
