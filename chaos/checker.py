"""The invariants a run must leave behind, checked on the database as it is.

``check(conn, ledger)`` reads one network's tables (and the sim executor's
outside world, ``qtg_sim.side_effects``) on a superuser connection and counts
every violation of:

  terminal          every movement is terminal (COMPLETED, FAILED, CANCELLED,
                    EXPIRED), unless it is legitimately in flight: a node of it
                    is parked where an operator sees it (a quarantine, when the
                    engine has one: a node state or a column named so)
  duplicate_effect  at most one side effect per node ...
  foreign_effect    ... and per idempotency key: every side effect's key is an
                    intent of the node it was made for
  unstarted_effect  no side effect on a node that never started (PENDING, READY)
                    or was skipped (SKIPPED)
  completed_effect  every COMPLETED node has exactly its effect: one, COMPLETED,
                    for the movement's amount; a FAILED node has no COMPLETED one
  open_intent       no intent still CLAIMED or PREPARED on a finished node
  node_audit        every node's state is the to_state of its last audit row
                    (a node without one is PENDING: creation audits the movement)
  movement_audit    the same for every movement (its stop_requested rows name
                    the stop asked for, not a transition: the movement runs on
                    until its nodes settle, and its transition comes then)
  counters          open_nodes and failed_nodes equal what the nodes say
  final_callback    every terminal movement has its final callback
                    (callback_outbox: movement.<state>)
  pipeline_counts   the pipeline_counts view (finished rows rolled up by the
                    pipeline_rollup sidecar, the rest counted) says what the
                    tables hold, state by state
  lost              every movement whose creation was acknowledged exists

and the figures: tried (creations attempted), created (found), terminal, in
flight (legitimately), stuck (neither), lost, duplicates, resubmits (a side
effect's key arriving again, recognised by the executor: not a duplicate).
created = terminal + in flight + stuck, so `stuck == 0` is "created = terminal
+ legitimately in flight".
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

TERMINAL_MOVEMENT_STATES = ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED")
FINISHED_NODE_STATES = ("COMPLETED", "FAILED", "SKIPPED")
UNSTARTED_NODE_STATES = ("PENDING", "READY", "SKIPPED")
OPEN_INTENT_STATES = ("CLAIMED", "PREPARED")

INVARIANTS: dict[str, str] = {
    "terminal": "every movement terminal (or legitimately in flight)",
    "lost": "every acknowledged movement exists",
    "duplicate_effect": "at most one side effect per node",
    "foreign_effect": "a side effect's idempotency key is an intent of its node",
    "unstarted_effect": "no side effect on a skipped or unstarted node",
    "completed_effect": "a completed node has exactly its effect, right amount",
    "open_intent": "no open intent on a finished node",
    "node_audit": "node state = its last audit transition",
    "movement_audit": "movement state = its last audit transition",
    "counters": "open_nodes and failed_nodes match the nodes",
    "final_callback": "every terminal movement has its final callback",
    "pipeline_counts": "pipeline_counts = the tables, per state",
}
EXAMPLES_KEPT = 5


class Ledger:
    """What the harness asked for, kept while it runs (thread-safe): every
    creation tried (by external id, with its kind), the movement id of each one
    the database acknowledged, the ones it refused (with the SQLSTATE), and
    which were planted as poison."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tried: dict[str, str] = {}
        self.acknowledged: dict[str, int] = {}
        self.refused: dict[str, str] = {}
        self.poison: set[str] = set()

    def try_(self, external_id: str, kind: str, poison: bool = False) -> None:
        with self._lock:
            self.tried[external_id] = kind
            if poison:
                self.poison.add(external_id)

    def ack(self, external_id: str, movement_id: int) -> None:
        with self._lock:
            self.acknowledged[external_id] = movement_id

    def refuse(self, external_id: str, sqlstate: str) -> None:
        with self._lock:
            self.refused[external_id] = sqlstate

    def snapshot(self) -> tuple[dict[str, str], dict[str, int], dict[str, str], set[str]]:
        with self._lock:
            return dict(self.tried), dict(self.acknowledged), dict(self.refused), set(self.poison)


@dataclass
class CheckResult:
    tried: int = 0
    created: int = 0
    terminal: int = 0
    in_flight: int = 0
    stuck: int = 0
    stuck_nodes: int = 0
    lost: int = 0
    duplicates: int = 0
    resubmits: int = 0
    most_submits: int = 0
    """The most submissions one idempotency key got (the sim counts every submit)."""
    side_effects: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    violations: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def failed(self) -> list[str]:
        return [name for name, count in self.violations.items() if count]

    def add(self, invariant: str, examples: Iterable[str], count: int | None = None) -> None:
        """Record ``count`` violations of ``invariant`` (default: one per example)."""
        found = list(examples)
        self.violations[invariant] = self.violations.get(invariant, 0) + (
            len(found) if count is None else count
        )
        kept = self.examples.setdefault(invariant, [])
        kept.extend(found[: max(0, EXAMPLES_KEPT - len(kept))])

    def describe(self) -> list[str]:
        """One line per failed invariant, with examples."""
        return [
            f"{name} ({INVARIANTS[name]}): {self.violations[name]} violation(s), e.g. "
            + "; ".join(self.examples.get(name, []))
            for name in self.failed()
        ]


def _rows(conn: psycopg.Connection[Any], query: sql.Composed, *params: Any) -> list[Any]:
    rows: list[Any] = conn.execute(query, params or None).fetchall()
    return rows


def parked_condition(conn: psycopg.Connection[Any], network: str) -> sql.Composable | None:
    """SQL over ``node`` that is true for a node the engine parked for an
    operator (quarantined), or None when the engine has no such notion: a
    node_state label or a column of movement_request_nodes whose name says
    quarantine."""
    labels = [
        r[0]
        for r in conn.execute(
            "SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid"
            " WHERE t.typname = 'node_state' AND t.typnamespace = 'qtg'::regnamespace"
        ).fetchall()
    ]
    for label in labels:
        if "QUARANTIN" in label.upper() or label.upper() == "PARKED":
            return sql.SQL("node.node_state::text = {}").format(sql.Literal(label))
    columns = conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'movement_request_nodes'"
        " AND column_name ILIKE '%%quarantin%%' ORDER BY ordinal_position",
        (network,),
    ).fetchall()
    for name, data_type in columns:
        column = sql.SQL("node.{}").format(sql.Identifier(name))
        if data_type == "boolean":
            return sql.SQL("coalesce({}, false)").format(column)
        return sql.SQL("{} IS NOT NULL").format(column)
    return None


def check(
    conn: psycopg.Connection[Any], ledger: Ledger | None = None, network: str = "testnet"
) -> CheckResult:
    """Every invariant on ``network``'s rows; ``conn`` is a superuser connection
    (the sim's side effects are behind row-level security for other roles)."""
    tried, acknowledged, _refused, _poison = (
        ledger.snapshot() if ledger is not None else ({}, {}, {}, set())
    )
    net = sql.Identifier(network)
    result = CheckResult(tried=len(tried))
    parked = parked_condition(conn, network) or sql.SQL("false")
    terminal = sql.Literal(list(TERMINAL_MOVEMENT_STATES))
    finished = sql.Literal(list(FINISHED_NODE_STATES))

    # -- movements: terminal, in flight, stuck, lost --------------------------------
    movements = _rows(
        conn,
        sql.SQL(
            """
        SELECT r.id, r.external_id, r.request_state::text,
               r.request_state::text = ANY({terminal}),
               EXISTS (SELECT 1 FROM {net}.movement_request_nodes node
                        WHERE node.request_id = r.id AND node.node_state::text <> ALL({finished})
                          AND {parked}),
               (SELECT count(*) FROM {net}.movement_request_nodes node
                 WHERE node.request_id = r.id AND node.node_state::text <> ALL({finished})),
               (SELECT string_agg(node.node_key || ' ' || node.node_state::text, ', '
                                  ORDER BY node.id)
                  FROM {net}.movement_request_nodes node
                 WHERE node.request_id = r.id AND node.node_state::text <> ALL({finished}))
          FROM {net}.movement_requests r ORDER BY r.id
        """
        ).format(net=net, terminal=terminal, finished=finished, parked=parked),
    )
    result.created = len(movements)
    stuck_examples = []
    for movement_id, external_id, state, is_terminal, is_parked, open_nodes, open_desc in movements:
        result.by_state[state] = result.by_state.get(state, 0) + 1
        if is_terminal:
            result.terminal += 1
        elif is_parked:
            result.in_flight += 1
        else:
            result.stuck += 1
            result.stuck_nodes += open_nodes
            stuck_examples.append(
                f"movement {movement_id} ({external_id}) {state}: {open_desc or 'no open node'}"
            )
    result.add("terminal", stuck_examples)

    found = {
        r[0]
        for r in _rows(
            conn,
            sql.SQL(
                "SELECT external_id FROM {net}.movement_requests WHERE external_id = ANY(%s)"
            ).format(net=net),
            list(acknowledged),
        )
    }
    lost = [f"{ext} (movement {acknowledged[ext]})" for ext in acknowledged if ext not in found]
    result.lost = len(lost)
    result.add("lost", lost)

    # -- side effects ----------------------------------------------------------------
    effects = sql.SQL("(SELECT * FROM qtg_sim.side_effects WHERE network = {}) se").format(
        sql.Literal(network)
    )
    totals = _rows(
        conn,
        sql.SQL(
            "SELECT count(*), count(*) FILTER (WHERE submit_count > 1),"
            " coalesce(max(submit_count), 0) FROM {effects}"
        ).format(effects=effects),
    )[0]
    result.side_effects, result.resubmits = int(totals[0]), int(totals[1])
    result.most_submits = int(totals[2])

    duplicates = _rows(
        conn,
        sql.SQL(
            "SELECT node_id, count(*), string_agg(idempotency_key, ',' ORDER BY idempotency_key)"
            " FROM {effects} GROUP BY node_id HAVING count(*) > 1 ORDER BY node_id"
        ).format(effects=effects),
    )
    result.duplicates = sum(int(count) - 1 for _, count, _ in duplicates)
    result.add(
        "duplicate_effect",
        [f"node {n}: {c} side effects ({keys})" for n, c, keys in duplicates],
        count=result.duplicates,
    )

    foreign = _rows(
        conn,
        sql.SQL(
            """
        SELECT se.node_id, se.idempotency_key FROM {effects}
         WHERE NOT EXISTS (SELECT 1 FROM {net}.node_intents i
                            WHERE i.idempotency_key = se.idempotency_key AND i.node_id = se.node_id)
         ORDER BY se.node_id
        """
        ).format(effects=effects, net=net),
    )
    result.add("foreign_effect", [f"node {n}: key {k} is none of its intents" for n, k in foreign])

    unstarted = _rows(
        conn,
        sql.SQL(
            """
        SELECT node.id, node.node_state::text, count(*) FROM {net}.movement_request_nodes node
          JOIN {effects} ON se.node_id = node.id
         WHERE node.node_state::text = ANY({states})
         GROUP BY node.id, node.node_state ORDER BY node.id
        """
        ).format(net=net, effects=effects, states=sql.Literal(list(UNSTARTED_NODE_STATES))),
    )
    result.add(
        "unstarted_effect", [f"node {n} is {s} with {c} side effect(s)" for n, s, c in unstarted]
    )

    completed = _rows(
        conn,
        sql.SQL(
            """
        SELECT node.id, node.node_state::text, r.amount,
               count(se.idempotency_key),
               count(se.idempotency_key) FILTER (WHERE se.outcome = 'COMPLETED'),
               array_agg(se.amount) FILTER (WHERE se.idempotency_key IS NOT NULL)
          FROM {net}.movement_request_nodes node
          JOIN {net}.movement_requests r ON r.id = node.request_id
          LEFT JOIN {effects} ON se.node_id = node.id
         WHERE node.has_side_effect AND node.node_state IN ('COMPLETED', 'FAILED')
         GROUP BY node.id, node.node_state, r.amount
        HAVING (node.node_state = 'COMPLETED'
                AND (count(se.idempotency_key) <> 1
                     OR count(se.idempotency_key) FILTER (WHERE se.outcome = 'COMPLETED') <> 1
                     OR bool_or(se.amount <> r.amount)))
            OR (node.node_state = 'FAILED'
                AND count(se.idempotency_key) FILTER (WHERE se.outcome = 'COMPLETED') > 0)
         ORDER BY node.id
        """
        ).format(net=net, effects=effects),
    )
    result.add(
        "completed_effect",
        [
            f"node {n} {s}: {c} side effect(s), {ok} completed, amounts {amounts} for {amount}"
            for n, s, amount, c, ok, amounts in completed
        ],
    )

    # -- intents ---------------------------------------------------------------------
    open_intents = _rows(
        conn,
        sql.SQL(
            """
        SELECT node.id, node.node_state::text, i.idempotency_key, i.intent_state
          FROM {net}.movement_request_nodes node
          JOIN {net}.node_intents i ON i.node_id = node.id
         WHERE node.node_state::text = ANY({finished}) AND i.intent_state = ANY({open})
         ORDER BY node.id, i.id
        """
        ).format(net=net, finished=finished, open=sql.Literal(list(OPEN_INTENT_STATES))),
    )
    result.add(
        "open_intent",
        [f"node {n} is {s}, intent {k} still {st}" for n, s, k, st in open_intents],
    )

    # -- the audit trail ---------------------------------------------------------------
    node_audit = _rows(
        conn,
        sql.SQL(
            """
        WITH last AS (SELECT DISTINCT ON (a.entity_id) a.entity_id, a.to_state
                        FROM {net}.audit_outbox a
                       WHERE a.entity = 'node' AND a.to_state IS NOT NULL
                       ORDER BY a.entity_id, a.id DESC)
        SELECT node.id, node.node_state::text, last.to_state
          FROM {net}.movement_request_nodes node
          LEFT JOIN last ON last.entity_id = node.id::text
         WHERE last.to_state IS DISTINCT FROM node.node_state::text
           AND NOT (last.to_state IS NULL AND node.node_state = 'PENDING')
         ORDER BY node.id
        """
        ).format(net=net),
    )
    result.add(
        "node_audit",
        [f"node {n} is {s}, its last audit row says {a or 'nothing'}" for n, s, a in node_audit],
    )
    movement_audit = _rows(
        conn,
        sql.SQL(
            """
        WITH last AS (SELECT DISTINCT ON (a.entity_id) a.entity_id, a.to_state
                        FROM {net}.audit_outbox a
                       WHERE a.entity = 'request' AND a.to_state IS NOT NULL
                         AND a.action <> 'stop_requested'
                       ORDER BY a.entity_id, a.id DESC)
        SELECT r.id, r.request_state::text, last.to_state
          FROM {net}.movement_requests r
          LEFT JOIN last ON last.entity_id = r.id::text
         WHERE last.to_state IS DISTINCT FROM r.request_state::text
         ORDER BY r.id
        """
        ).format(net=net),
    )
    result.add(
        "movement_audit",
        [
            f"movement {m} is {s}, its last audit row says {a or 'nothing'}"
            for m, s, a in movement_audit
        ],
    )

    # -- counters and callbacks --------------------------------------------------------
    counters = _rows(
        conn,
        sql.SQL(
            """
        SELECT r.id, r.open_nodes, r.failed_nodes, c.open, c.failed
          FROM {net}.movement_requests r
          JOIN LATERAL (
                   SELECT count(*) FILTER (WHERE node.node_state::text <> ALL({finished})) AS open,
                          count(*) FILTER (WHERE node.node_state = 'FAILED') AS failed
                     FROM {net}.movement_request_nodes node
                    WHERE node.request_id = r.id) c ON true
         WHERE r.open_nodes <> c.open OR r.failed_nodes <> c.failed
         ORDER BY r.id
        """
        ).format(net=net, finished=finished),
    )
    result.add(
        "counters",
        [
            f"movement {m}: open_nodes {o} / failed_nodes {f}, its nodes say {co} / {cf}"
            for m, o, f, co, cf in counters
        ],
    )
    callbacks = _rows(
        conn,
        sql.SQL(
            """
        SELECT r.id, r.request_state::text FROM {net}.movement_requests r
         WHERE r.request_state::text = ANY({terminal})
           AND NOT EXISTS (SELECT 1 FROM {net}.callback_outbox cb
                            WHERE cb.request_id = r.id
                              AND cb.event_type = 'movement.' || lower(r.request_state::text))
         ORDER BY r.id
        """
        ).format(net=net, terminal=terminal),
    )
    result.add(
        "final_callback",
        [f"movement {m} is {s} without a movement.{s.lower()} callback" for m, s in callbacks],
    )

    # -- the dashboards' counts --------------------------------------------------------
    miscounted = _rows(
        conn,
        sql.SQL(
            """
        WITH counted AS (SELECT entity, state, total FROM {net}.pipeline_counts),
             held AS (SELECT 'movement' AS entity, request_state::text AS state, count(*) AS total
                        FROM {net}.movement_requests GROUP BY 2
                      UNION ALL
                      SELECT 'node', node_state::text, count(*)
                        FROM {net}.movement_request_nodes GROUP BY 2)
        SELECT entity, state, coalesce(c.total, 0), coalesce(h.total, 0)
          FROM counted c FULL JOIN held h USING (entity, state)
         WHERE c.total IS DISTINCT FROM h.total
         ORDER BY 1, 2
        """
        ).format(net=net),
    )
    result.add(
        "pipeline_counts",
        [f"{e} {st}: pipeline_counts says {c}, the table holds {h}" for e, st, c, h in miscounted],
    )
    for name in INVARIANTS:
        result.violations.setdefault(name, 0)
    return result
