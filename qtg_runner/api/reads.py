"""What the API reads, as the caller's login: the movement, its nodes with
their evidence and transaction hashes, its audit trail, the callback targets.
Every query reads tables and views the network's reader role may SELECT
(operators are members); nothing here writes."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from qtg_runner.api.problems import Problem
from qtg_runner.db import procs

MOVEMENT_COLUMNS = """
       r.id AS movement_id, r.external_id, r.request_state::text AS state,
       r.stop_reason::text AS stop_reason, r.amount, r.asset, r.template_name,
       r.template_params, r.plan, r.priority, r.callback_url, r.created_by, r.approved_by,
       r.created_at, r.approved_at, r.started_at, r.finished_at, r.expires_at,
       n.nodes_total, n.nodes_completed, n.nodes_failed, n.nodes_skipped,
       n.nodes_in_flight, n.nodes_waiting"""

NODE_COUNTS = """
  CROSS JOIN LATERAL (
       SELECT count(*) AS nodes_total,
              count(*) FILTER (WHERE node_state = 'COMPLETED') AS nodes_completed,
              count(*) FILTER (WHERE node_state = 'FAILED') AS nodes_failed,
              count(*) FILTER (WHERE node_state = 'SKIPPED') AS nodes_skipped,
              count(*) FILTER (WHERE node_state IN ('SUBMITTING', 'SUBMITTED', 'OBSERVING',
                                                    'UNKNOWN')) AS nodes_in_flight,
              count(*) FILTER (WHERE node_state IN ('PENDING', 'READY')) AS nodes_waiting
         FROM movement_request_nodes WHERE request_id = r.id) n"""

STATES = tuple(procs.RequestState)


def jsonable(value: Any) -> Any:
    """A value read from the database as JSON carries it: amounts as decimal
    strings (exact), times in ISO 8601, durations in seconds."""
    if isinstance(value, Decimal):
        return format(value.normalize(), "f") if value == value.to_integral() else str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def movement_not_found(movement_id: int) -> Problem:
    return Problem(
        404,
        "Movement not found",
        f"movement {movement_id} does not exist",
        code="QT010",
        hint="Check the movement id and the network the API serves.",
    )


async def movement(conn: psycopg.AsyncConnection[Any], movement_id: int) -> dict[str, Any]:
    """One movement, with its latest rehearsal and its latest rehearsal request
    (``rehearsals``)."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            f"SELECT {MOVEMENT_COLUMNS} FROM movement_requests r {NODE_COUNTS} WHERE r.id = %s",
            (movement_id,),
        )
        row = await cur.fetchone()
    if row is None:
        raise movement_not_found(movement_id)
    return dict(jsonable(row)) | await rehearsals(conn, movement_id)


async def rehearsals(conn: psycopg.AsyncConnection[Any], movement_id: int) -> dict[str, Any]:
    """The movement's latest rehearsal and latest rehearsal request, from the
    rehearsal_status view: ``rehearsal`` (id, outcome, recorded_by,
    recorded_at, its summary's lines, and registry_changed: the registry
    changed since it ran, None when not known) and ``rehearsal_request`` (id,
    requested_by, requested_at, claimed_by, claimed_at, finished_at, the
    rehearsal it gave or its problem, and ``open``: not finished yet, a
    rehearsal service, `qtg rehearse --requested`, is to serve it), each
    None when there is none."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute("SELECT * FROM rehearsal_status WHERE movement_id = %s", (movement_id,))
        row = await cur.fetchone()
    found = dict(jsonable(row)) if row is not None else {}
    rehearsal = None
    if found.get("rehearsal_id") is not None:
        rehearsal = {
            "rehearsal_id": found["rehearsal_id"],
            "outcome": found["outcome"],
            "recorded_by": found["recorded_by"],
            "recorded_at": found["recorded_at"],
            "lines": found["lines"] or [],
            "registry_changed": found["registry_changed"],
        }
    request = None
    if found.get("request_id") is not None:
        request = {
            "request_id": found["request_id"],
            "open": found["request_finished_at"] is None,
            "requested_by": found["requested_by"],
            "requested_at": found["requested_at"],
            "claimed_by": found["claimed_by"],
            "claimed_at": found["claimed_at"],
            "finished_at": found["request_finished_at"],
            "rehearsal_id": found["request_rehearsal_id"],
            "problem": found["request_problem"],
        }
    return {"rehearsal": rehearsal, "rehearsal_request": request}


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode("ascii")))
        before = value["before"]
        if not isinstance(before, int) or isinstance(before, bool) or not 0 < before < 2**63:
            raise ValueError
        return before
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeError):
        raise Problem(
            422, "Invalid request", "cursor is not one this API handed out (next_cursor)"
        ) from None


PAGE_FILTERS = {
    "external_id": "external_id = %(external_id)s",
    "created_by": "created_by = %(created_by)s",
    "lane": "EXISTS (SELECT 1 FROM movement_request_nodes n"
    " WHERE n.request_id = movement_requests.id AND n.lane = %(lane)s)",
    "created_since": "created_at >= %(created_since)s",
    "created_until": "created_at < %(created_until)s",
    "before": "id < %(before)s",
}
"""The filters of a page of movements, each written into the statement only
when given (see movements_page)."""


def movements_page(states: list[str], filters: Collection[str] = ()) -> sql.Composed:
    """The statement of a page of movements, newest first, in ``states`` (all
    when empty) and with the ``filters`` named (of PAGE_FILTERS: ``external_id``,
    ``created_by``, ``lane``: a node of it on the lane, ``created_since`` and
    ``created_until``: its creation time in [since, until), ``before``: an id,
    the page starts under it); its parameters are those filters' and ``limit``.
    (A time bound walks the primary key down from the newest: a search of the
    distant past reads the movements made since.)

    Only the filters given are in the statement, and the states (names of
    procs.RequestState, checked by the caller) are written into it as the
    enum's constants, not passed as parameters: a statement the driver
    prepares after a few calls is then planned for what it filters on. A list
    without COMPLETED is served by the index of the movements not completed
    (``movement_requests_state_idx``, by state and id), whose rows are the open
    movements and the rare outcomes; a list by creator by the index by creator
    and id (``movement_requests_creator_idx``): neither walks the primary key
    through the whole history. A list of COMPLETED movements walks the primary
    key, where nearly every row is one."""
    unknown = set(filters) - set(PAGE_FILTERS)
    if unknown:
        raise ValueError(f"movements_page: no filter {sorted(unknown)[0]!r}")
    conditions: list[sql.Composable] = [
        sql.SQL(PAGE_FILTERS[name]) for name in PAGE_FILTERS if name in filters
    ]
    if states:
        constants = (sql.SQL("{}::qtg.request_state").format(sql.Literal(s)) for s in states)
        conditions.append(sql.SQL("request_state IN ({})").format(sql.SQL(", ").join(constants)))
    where = sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("true")
    return sql.SQL(
        f"""SELECT {MOVEMENT_COLUMNS}
              FROM (SELECT * FROM movement_requests
                     WHERE {{where}}
                     ORDER BY id DESC LIMIT %(limit)s) r
             {NODE_COUNTS}
             ORDER BY r.id DESC"""
    ).format(where=where)


async def movements(
    conn: psycopg.AsyncConnection[Any],
    *,
    states: list[str],
    external_id: str | None,
    created_by: str | None,
    limit: int,
    before: int | None,
    lane: str | None = None,
    created_since: datetime | None = None,
    created_until: datetime | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page, newest first (keyset on the id: a page never repeats or skips a
    movement made meanwhile), and the cursor of the next page."""
    given = {
        name: value
        for name, value in (
            ("external_id", external_id),
            ("created_by", created_by),
            ("lane", lane),
            ("created_since", created_since),
            ("created_until", created_until),
            ("before", before),
        )
        if value is not None
    }
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(movements_page(states, given), {**given, "limit": limit + 1})
        rows = await cur.fetchall()
    more = len(rows) > limit
    page = [dict(jsonable(row)) for row in rows[:limit]]
    return page, encode_cursor(page[-1]["movement_id"]) if more else None


async def nodes(conn: psycopg.AsyncConnection[Any], movement_id: int) -> list[dict[str, Any]]:
    """The movement's nodes (its DAG: each with the keys it depends on), their
    states, evidence, external reference, and every transaction hash their
    intents signed."""
    await movement(conn, movement_id)  # 404 for an unknown movement
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT v.node_id, v.node_key, v.executor_key, v.route, v.lane,
                      v.node_state::text AS state,
                      v.depends_on, v.has_side_effect, v.submit_attempts, v.recovery_attempts,
                      v.observe_phase::text AS observe_phase, v.observe_count, v.next_observe_at,
                      v.external_ref, v.last_error, v.submitted_at, v.finished_at,
                      node.evidence,
                      coalesce((SELECT array_agg(h ORDER BY i.id, o)
                                  FROM node_intents i
                                 CROSS JOIN LATERAL unnest(
                                       CASE WHEN cardinality(i.signed_tx_hashes) > 0
                                            THEN i.signed_tx_hashes
                                            ELSE array_remove(ARRAY[i.signed_tx_hash], NULL) END)
                                       WITH ORDINALITY AS t(h, o)
                                 WHERE i.node_id = v.node_id), '{}') AS tx_hashes,
                      coalesce((SELECT jsonb_agg(jsonb_build_object(
                                       'intent_id', i.id, 'state', i.intent_state,
                                       'nonce', i.nonce, 'signed_tx_hashes', i.signed_tx_hashes,
                                       'external_request_id', i.external_request_id,
                                       'external_ref', i.external_ref,
                                       'created_at', i.created_at, 'prepared_at', i.prepared_at,
                                       'finished_at', i.finished_at) ORDER BY i.id)
                                  FROM node_intents i WHERE i.node_id = v.node_id),
                               '[]') AS intents
                 FROM movement_nodes v
                 JOIN movement_request_nodes node ON node.id = v.node_id
                WHERE v.movement_id = %s
                ORDER BY v.node_id""",
            (movement_id,),
        )
        return [dict(jsonable(row)) for row in await cur.fetchall()]


async def audit(conn: psycopg.AsyncConnection[Any], movement_id: int) -> list[dict[str, Any]]:
    """The movement's audit rows (its own and its nodes'), oldest first: the
    audit_outbox trail, promoted (audit_log, by its request index) or not."""
    await movement(conn, movement_id)
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT id AS audit_id, occurred_at, entity, entity_id, action,
                      from_state, to_state, actor, login, detail
                 FROM audit_outbox WHERE request_id = %s
                ORDER BY id""",
            (movement_id,),
        )
        return [dict(jsonable(row)) for row in await cur.fetchall()]


async def callback_targets(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT target_name AS name, url, secret_ref, allow_private, enabled,
                      created_at, updated_at
                 FROM callback_targets ORDER BY target_name"""
        )
        return [dict(jsonable(row)) for row in await cur.fetchall()]


async def open_proposals(
    conn: psycopg.AsyncConnection[Any], kind: str | None = None
) -> list[dict[str, Any]]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT proposal_id, kind::text AS kind, subject, before_value, proposed_value,
                      changes, proposed_by, proposed_at, expires_at
                 FROM open_proposals
                WHERE %(kind)s::text IS NULL OR kind::text = %(kind)s
                ORDER BY proposal_id""",
            {"kind": kind},
        )
        return [dict(jsonable(row)) for row in await cur.fetchall()]


async def proposal(conn: psycopg.AsyncConnection[Any], proposal_id: int) -> dict[str, Any]:
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT id AS proposal_id, kind::text AS kind, subject,
                      proposal_state::text AS state, proposed_value, before_value, proposed_by,
                      proposed_at, expires_at, decided_by, decided_at, reason
                 FROM config_proposals WHERE id = %s""",
            (proposal_id,),
        )
        row = await cur.fetchone()
    if row is None:
        raise Problem(
            404,
            "Configuration proposal not found",
            f"proposal {proposal_id} does not exist",
            code="QT013",
            hint=None,
        )
    return dict(jsonable(row))


HEALTH_ROWS = 50
"""The most rows of each kind the operator page's health panel lists."""


async def health(conn: psycopg.AsyncConnection[Any]) -> dict[str, list[dict[str, Any]]]:
    """What an operator acts on, and what they watch: the quarantined nodes,
    the UNKNOWN nodes (with a requeue asked for, and by whom), the FAILED
    nodes that may be retried (retryable_nodes, newest first), the open drift
    alerts; the workers running (the unhealthy first, with their last beat),
    the stuck nodes and why, the dead callbacks (newest first); at most
    HEALTH_ROWS of each, oldest first otherwise."""
    queries = {
        "quarantined": """SELECT node_id, movement_id, node_key, executor_key, node_state, reason,
                                 quarantined_at
                            FROM quarantined_nodes LIMIT %(n)s""",
        "unknown": """SELECT node.id AS node_id, node.request_id AS movement_id, node.node_key,
                             node.executor_key, node.last_error, node.updated_at,
                             (SELECT r.requested_by FROM requeue_requests r
                               WHERE r.node_id = node.id AND r.still_applies
                               ORDER BY r.requeue_id DESC LIMIT 1) AS requeue_asked_by
                        FROM movement_request_nodes node
                       WHERE node.node_state = 'UNKNOWN' AND node.quarantined_at IS NULL
                       ORDER BY node.updated_at, node.id LIMIT %(n)s""",
        "retryable": """SELECT node_id, movement_id, node_key, executor_key, last_error, failed_at,
                               retry_asked_by
                          FROM retryable_nodes LIMIT %(n)s""",
        "workers": """SELECT worker_name, instance_id, status, last_tick_at, consecutive_errors,
                             last_error
                        FROM worker_status
                       WHERE status <> 'stopped'
                       ORDER BY status <> 'healthy' DESC, worker_name, instance_id LIMIT %(n)s""",
        "stuck": """SELECT node_id, movement_id, node_key, executor_key, node_state, reason
                      FROM stuck_nodes LIMIT %(n)s""",
        "dead_callbacks": """SELECT callback_id, movement_id, event_type, delivery_state, attempts,
                                    last_status, dead_at
                               FROM dead_callbacks ORDER BY dead_at DESC LIMIT %(n)s""",
        "drift": """SELECT alert_id, account_key, address, asset, actual, unexplained, raised_at,
                           ack_requested_by
                      FROM drift_alerts WHERE alert_state = 'OPEN'
                     ORDER BY alert_id LIMIT %(n)s""",
    }
    found: dict[str, list[dict[str, Any]]] = {}
    async with conn.cursor(row_factory=dict_row) as cur:
        for name, query in queries.items():
            await cur.execute(query, {"n": HEALTH_ROWS})
            found[name] = [dict(jsonable(row)) for row in await cur.fetchall()]
    return found


async def released_node(conn: psycopg.AsyncConnection[Any], node_id: int) -> str | None:
    """The state of a node released from quarantine and not quarantined again
    (a release asked for twice: the first did it), else None."""
    cur = await conn.execute(
        """SELECT node.node_state::text
             FROM movement_request_nodes node
            WHERE node.id = %s
              AND node.quarantined_at IS NULL
              AND EXISTS (SELECT 1 FROM audit_outbox a
                           WHERE a.request_id = node.request_id AND a.entity = 'node'
                             AND a.entity_id = node.id::text
                             AND a.action = 'quarantine_released')""",
        (node_id,),
    )
    row = await cur.fetchone()
    return None if row is None else str(row[0])


async def pauses(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
    """The scopes paused or tripped now (value_limit_status), oldest first."""
    async with conn.cursor(row_factory=dict_row) as cur:
        await cur.execute(
            """SELECT scope, name, tripped_at AS paused_at, tripped_by AS paused_by,
                      tripped_because AS reason, expires_at, paused_by_operator,
                      reset_requested_by
                 FROM value_limit_status
                WHERE breaker = 'TRIPPED'
                ORDER BY tripped_at, scope, name"""
        )
        return [dict(jsonable(row)) for row in await cur.fetchall()]
