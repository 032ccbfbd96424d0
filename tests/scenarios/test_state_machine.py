"""Random operation sequences never reach an illegal state or lose a node.

A hypothesis rule-based state machine drives the procedures of one network with
random small DAGs and random operations (approve, start, claim, prepare, submit,
fail, observe, recover, cancel, expire, the clock moving on). An operation the
state machine refuses may raise a QT0xx error and nothing else; where the model
can tell what the answer must be (a fenced call, a wrong from-state, an approval)
it checks that too. After every step the invariants below are read back from
the tables.

One database per test function; between examples the movement tables are
emptied (TRUNCATE ... RESTART IDENTITY), the executors stay.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from engine import (
    TERMINAL_NODE_STATES,
    TERMINAL_REQUEST_STATES,
    as_person,
    node,
    observe,
    pin_clock,
    plan,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from rows import T0, Conn

MOVEMENT_TABLES = (
    "movement_requests",
    "movement_request_nodes",
    "movement_plan_edges",
    "node_intents",
    "callback_outbox",
    "audit_batches",
    "worker_heartbeats",
    "movement_templates",
    "pipeline_rollup_totals",
)

SHAPES: dict[str, list[tuple[str, list[str]]]] = {
    "single": [("a", [])],
    "chain": [("a", []), ("b", ["a"]), ("c", ["b"])],
    "diamond": [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])],
    "fan_out": [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["a"])],
    "two_roots": [("a", []), ("b", []), ("c", ["a", "b"])],
}

QT_ERROR = re.compile(r"QT0\d\d")
HINTS = st.sampled_from([None, None, 0, 10])
OBSERVED = st.sampled_from(["PENDING", "PENDING", "COMPLETED", "COMPLETED", "FAILED", "UNKNOWN"])
RECOVERED = st.sampled_from(["COMPLETED", "FAILED", "IN_FLIGHT", "NOT_SUBMITTED", "STILL_UNKNOWN"])
DISPATCH_ACTIONS = [
    "submit",
    "settle",
    "prepare+submit",
    "prepare+submit",
    "retry",
    "prepare+retry",
    "fail",
    "hang",
    "prepare+hang",
]


class MovementMachine(RuleBasedStateMachine):
    def __init__(self, conn: Conn) -> None:
        super().__init__()
        self.conn = conn
        conn.execute(
            sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
                sql.SQL(", ").join(map(sql.Identifier, MOVEMENT_TABLES))
            )
        )
        # the roll-up's fences name ids of the rows just emptied
        conn.execute(
            "UPDATE pipeline_rollups SET below_id = 1, open_ids = '{}', fence_id = NULL,"
            " fence_xacts = NULL, rolled_at = NULL"
        )
        self.now = 0.0
        pin_clock(conn, self.at(0))
        self.plan_sizes: dict[int, int] = {}  # movement id -> nodes in its plan
        self.tokens: dict[int, int] = {}  # node id -> highest claim token seen
        self.dispatch_claims: list[tuple[int, str]] = []  # (node id, secret), stale ones too
        self.recovery_claims: list[tuple[int, str]] = []
        self.created = 0
        self.before: dict[str, Any] = {}  # the node a completion call was made on, as it was

    # --- helpers ---------------------------------------------------------------------------

    def at(self, seconds: float) -> str:
        return (T0 + timedelta(seconds=seconds)).isoformat()

    def call(
        self, query: str, params: tuple[Any, ...] = (), person: str | None = None
    ) -> tuple[list[tuple[Any, ...]] | None, str | None]:
        """(rows, None) on success, (None, sqlstate) when the engine refused the call
        with an error, (rows, sqlstate) when it refused with a QT warning (a refusal
        it records, such as the creator's approval). ``person``: see ``as_person``."""
        warned: list[str] = []

        def on_notice(diag: psycopg.errors.Diagnostic) -> None:
            if diag.severity_nonlocalized == "WARNING" and (diag.sqlstate or "").startswith("QT"):
                warned.append(diag.sqlstate or "")

        self.conn.add_notice_handler(on_notice)
        try:
            with as_person(self.conn, person):
                cur = self.conn.execute(query, params)
                return (cur.fetchall() if cur.description else []), (warned or [None])[0]
        except psycopg.Error as exc:
            assert exc.sqlstate is not None and QT_ERROR.fullmatch(exc.sqlstate), (
                f"{query} {params} raised {exc.sqlstate}: {exc}"
            )
            assert exc.sqlstate != "QT099", "the observer's internal miss signal leaked"
            return None, exc.sqlstate
        finally:
            self.conn.remove_notice_handler(on_notice)

    def node_row(self, node_id: int) -> dict[str, Any]:
        with self.conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                "SELECT n.*, r.stop_reason FROM movement_request_nodes n"
                " JOIN movement_requests r ON r.id = n.request_id WHERE n.id = %s",
                (node_id,),
            ).fetchone()
        assert row is not None
        return row

    def completion(
        self,
        query: str,
        node_id: int,
        secret: str,
        accepted: set[str],
        *args: Any,
        lease_checked: bool = False,
        refused_once_prepared: bool = False,
    ) -> tuple[list[tuple[Any, ...]] | None, str | None]:
        """A completion call, checked against what the fencing guard must answer
        for the node as it was: a stale secret QT030, a wrong state QT021, else success
        (or QT030 for a call that also checks the lease, once it ran out; or QT021
        for a call that must not follow a prepared or sent side effect)."""
        self.before = before = self.node_row(node_id)
        prepared = refused_once_prepared and self.prepared_side_effect(node_id)
        rows, error = self.call(query, (node_id, secret, *args))
        if hashlib.sha256(secret.encode()).digest() != before["claim_hash"]:
            assert error == "QT030", f"stale secret on {before}: got {error}"
        elif before["node_state"] not in accepted:
            assert error == "QT021", f"{before['node_state']} not in {accepted}: got {error}"
        elif prepared:
            assert error == "QT021", f"a prepared side effect on {before}: got {error}"
        elif lease_checked and before["lease_until"] <= self.clock():
            assert error == "QT030", f"lease ran out on {before}: got {error}"
        else:
            assert error is None, f"{query} on {before} refused: {error}"
        return rows, error

    def prepared_side_effect(self, node_id: int) -> bool:
        """The node has a side effect and its latest intent is PREPARED or SUBMITTED."""
        row = self.conn.execute(
            """SELECT n.has_side_effect AND i.intent_state IN ('PREPARED', 'SUBMITTED')
                 FROM movement_request_nodes n
                 JOIN LATERAL (SELECT intent_state FROM node_intents WHERE node_id = n.id
                                ORDER BY claim_token DESC LIMIT 1) i ON true
                WHERE n.id = %s""",
            (node_id,),
        ).fetchone()
        return bool(row and row[0])

    def clock(self) -> datetime:
        return T0 + timedelta(seconds=self.now)

    def movements(self) -> list[int]:
        return sorted(self.plan_sizes)

    def movements_in(self, *states: str) -> list[int]:
        rows = self.conn.execute(
            "SELECT id FROM movement_requests WHERE request_state::text = ANY(%s) ORDER BY id",
            (list(states),),
        ).fetchall()
        return [r[0] for r in rows]

    def live_claims(self, claims: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """The claims whose secret is still the node's current one."""
        current = set(
            self.conn.execute(
                "SELECT id, claim_hash FROM movement_request_nodes WHERE claim_hash IS NOT NULL"
            ).fetchall()
        )
        return [c for c in claims if (c[0], hashlib.sha256(c[1].encode()).digest()) in current]

    @staticmethod
    def pick(likely: list[Any], anything: list[Any]) -> st.SearchStrategy[Any]:
        """Mostly one of ``likely`` (when there is one), sometimes anything at all."""
        if not likely:
            return st.sampled_from(anything)
        return st.one_of(
            st.sampled_from(likely),
            st.sampled_from(likely),
            st.sampled_from(likely),
            st.sampled_from(anything),
        )

    def nodes_in(self, *states: str) -> list[int]:
        rows = self.conn.execute(
            "SELECT id FROM movement_request_nodes WHERE node_state::text = ANY(%s) ORDER BY id",
            (list(states),),
        ).fetchall()
        return [r[0] for r in rows]

    # --- rules -----------------------------------------------------------------------------

    @initialize(
        shapes=st.lists(st.sampled_from(sorted(SHAPES)), min_size=1, max_size=3),
        executors=st.lists(st.sampled_from(["sim", "nosfx"]), min_size=4, max_size=4),
    )
    def started_movements(self, shapes: list[str], executors: list[str]) -> None:
        """Every example starts with work to dispatch."""
        for shape in shapes:
            self.create(shape, executors, None, "start")

    @rule(
        shape=st.sampled_from(sorted(SHAPES)),
        executors=st.lists(st.sampled_from(["sim", "nosfx"]), min_size=4, max_size=4),
        expires_in=st.sampled_from([None, None, 30, 300, 3600]),
        then=st.sampled_from(["stay", "approve", "start", "start"]),
    )
    def create(self, shape: str, executors: list[str], expires_in: int | None, then: str) -> None:
        """Create a movement and, mostly, approve and start it at once (a second
        operator approves), so that sequences reach the dispatch states."""
        nodes = [
            node(key, deps, executor=executors[i]) for i, (key, deps) in enumerate(SHAPES[shape])
        ]
        expires_at = None if expires_in is None else self.at(self.now + expires_in)
        self.created += 1
        rows, error = self.call(
            "SELECT movement_id, created FROM create_movement(%s, 10, %s,"
            " p_expires_at => %s::timestamptz)",
            (f"m{self.created}", Jsonb(plan(*nodes)), expires_at),
            person="alice",
        )
        assert error is None and rows is not None and rows[0][1] is True
        movement_id = rows[0][0]
        self.plan_sizes[movement_id] = len(nodes)
        if then != "stay":
            _, error = self.call("SELECT approve_movement(%s)", (movement_id,))
            assert error is None, error
        if then == "start":
            self.start()

    @precondition(lambda self: self.plan_sizes)
    @rule(data=st.data(), approver=st.sampled_from(["bob", "bob", "alice"]))
    def approve(self, data: st.DataObject, approver: str) -> None:
        movement_id = data.draw(self.pick(self.movements_in("PENDING_APPROVAL"), self.movements()))
        row = self.conn.execute(
            "SELECT request_state::text, expires_at <= qtg.clock(), approved_by"
            " FROM movement_requests WHERE id = %s",
            (movement_id,),
        ).fetchone()
        assert row is not None
        state, expired, approved_by = row
        rows, error = self.call("SELECT approve_movement(%s)", (movement_id,), person=approver)
        if state != "PENDING_APPROVAL" and approved_by == approver:
            # idempotent for its approver: the state as it is, nothing written
            assert error is None and rows == [(state,)], (state, rows, error)
        elif state != "PENDING_APPROVAL" or expired:
            assert error == "QT020", (state, expired, error)
        elif approver == "alice":
            assert error == "QT022", error
        else:
            assert error is None, error

    @rule()
    def start(self) -> None:
        _, error = self.call("SELECT start_approved_movements(100)")
        assert error is None
        assert not self.conn.execute(
            "SELECT 1 FROM movement_requests WHERE request_state = 'APPROVED'"
        ).fetchall()

    # --- the calls, each checked against what the engine must answer --------------------

    def do_claim(self, max_nodes: int, lease: int) -> list[tuple[int, str]]:
        states = dict(
            self.conn.execute("SELECT id, node_state::text FROM movement_request_nodes").fetchall()
        )
        rows, error = self.call(
            "SELECT node_id, claim_secret FROM claim_ready_nodes('w', %s, %s)", (max_nodes, lease)
        )
        assert error is None and rows is not None
        assert len(rows) <= max_nodes
        for node_id, secret in rows:
            # only READY work is handed out: never UNKNOWN, never anything in flight
            assert states[node_id] == "READY", (node_id, states[node_id])
            self.dispatch_claims.append((node_id, secret))
        return [(node_id, secret) for node_id, secret in rows]

    def do_prepare(self, node_id: int, secret: str) -> None:
        self.completion(
            "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => %s)",
            node_id,
            secret,
            {"SUBMITTING"},
            f"0x{node_id:x}{secret[:8]}",
            lease_checked=True,
        )

    def do_submit(self, node_id: int, secret: str, settled: bool) -> None:
        rows, error = self.completion(
            "SELECT complete_submit(%s, %s, 'ref', NULL, %s)::text",
            node_id,
            secret,
            {"SUBMITTING"},
            settled,
        )
        if error is None:
            assert rows == [("COMPLETED" if settled else "SUBMITTED",)]

    def do_fail(self, node_id: int, secret: str, retryable: bool, hint: int | None) -> None:
        # the intent of the node's latest dispatch: this claim's, when the call is accepted
        intent = self.conn.execute(
            "SELECT intent_state FROM node_intents WHERE node_id = %s"
            " ORDER BY claim_token DESC LIMIT 1",
            (node_id,),
        ).fetchone()
        rows, error = self.completion(
            "SELECT fail_submit(%s, %s, 'boom', %s, %s)::text",
            node_id,
            secret,
            {"SUBMITTING"},
            retryable,
            hint,
        )
        if error is None:
            assert rows is not None and intent is not None
            if not retryable:
                assert rows == [("FAILED",)]
            elif self.before["has_side_effect"] and intent[0] == "PREPARED":
                # a broadcast may have happened: never a blind retry
                assert rows == [("UNKNOWN",)]
            else:
                assert rows[0][0] in ("READY", "SKIPPED", "FAILED")

    def do_observe(self, node_id: int, outcome: str, hint: int | None) -> None:
        before = self.node_row(node_id)
        try:
            result = observe(self.conn, node_id, outcome, retry_after=hint)
        except psycopg.Error as exc:
            raise AssertionError(f"observe of node {node_id} raised {exc.sqlstate}: {exc}") from exc
        due = before["next_observe_at"] <= self.clock()
        assert (result is not None) == due, (before, result)
        if result is not None and outcome in ("COMPLETED", "FAILED"):
            assert result["node_state"] == outcome

    def do_recovery_claim(self) -> list[tuple[int, str]]:
        rows, error = self.call(
            "SELECT node_id, claim_secret, node_state::text FROM claim_recovery_nodes('r', 10, 60)"
        )
        assert error is None and rows is not None
        for node_id, secret, state in rows:
            assert state in ("UNKNOWN", "SUBMITTING")
            self.recovery_claims.append((node_id, secret))
        return [(node_id, secret) for node_id, secret, _ in rows]

    def do_recover(self, node_id: int, secret: str, outcome: str, hint: int | None) -> None:
        rows, error = self.completion(
            'SELECT complete_recovery(%s, %s, %s, \'{"seen": "the sim"}\', NULL, %s)::text',
            node_id,
            secret,
            {"UNKNOWN", "SUBMITTING"},
            outcome,
            hint,
            refused_once_prepared=outcome == "NOT_SUBMITTED",
        )
        if error is None and outcome in ("COMPLETED", "FAILED"):
            assert rows == [(outcome,)]

    # --- rules: single calls, in any order, on any claim (stale ones too) ---------------

    @rule(max_nodes=st.integers(1, 4), lease=st.sampled_from([30, 300]))
    def claim(self, max_nodes: int, lease: int) -> None:
        self.do_claim(max_nodes, lease)

    def a_dispatch_claim(self, data: st.DataObject) -> tuple[int, str]:
        claim: tuple[int, str] = data.draw(
            self.pick(self.live_claims(self.dispatch_claims), self.dispatch_claims)
        )
        return claim

    @precondition(lambda self: self.dispatch_claims)
    @rule(data=st.data())
    def prepare(self, data: st.DataObject) -> None:
        self.do_prepare(*self.a_dispatch_claim(data))

    @precondition(lambda self: self.dispatch_claims)
    @rule(data=st.data(), settled=st.booleans())
    def submit(self, data: st.DataObject, settled: bool) -> None:
        self.do_submit(*self.a_dispatch_claim(data), settled)

    @precondition(lambda self: self.dispatch_claims)
    @rule(data=st.data(), retryable=st.booleans(), hint=HINTS)
    def fail(self, data: st.DataObject, retryable: bool, hint: int | None) -> None:
        self.do_fail(*self.a_dispatch_claim(data), retryable, hint)

    @precondition(lambda self: self.nodes_in("SUBMITTED", "OBSERVING"))
    @rule(data=st.data(), outcome=OBSERVED, hint=HINTS)
    def observe(self, data: st.DataObject, outcome: str, hint: int | None) -> None:
        self.do_observe(
            data.draw(st.sampled_from(self.nodes_in("SUBMITTED", "OBSERVING"))), outcome, hint
        )

    @rule()
    def recovery_claim(self) -> None:
        self.do_recovery_claim()

    @precondition(lambda self: self.recovery_claims)
    @rule(data=st.data(), outcome=RECOVERED, hint=HINTS)
    def recover(self, data: st.DataObject, outcome: str, hint: int | None) -> None:
        node_id, secret = data.draw(
            self.pick(self.live_claims(self.recovery_claims), self.recovery_claims)
        )
        self.do_recover(node_id, secret, outcome, hint)

    # --- rules: one worker round each, as the runners do it ------------------------------

    @rule(data=st.data(), max_nodes=st.integers(1, 4), lease=st.sampled_from([30, 300]))
    def dispatcher_round(self, data: st.DataObject, max_nodes: int, lease: int) -> None:
        for node_id, secret in self.do_claim(max_nodes, lease):
            action = data.draw(st.sampled_from(DISPATCH_ACTIONS))
            if action.startswith("prepare"):
                self.do_prepare(node_id, secret)
            if action.endswith("submit"):
                self.do_submit(node_id, secret, settled=False)
            elif action.endswith("settle"):
                self.do_submit(node_id, secret, settled=True)
            elif action.endswith("retry"):
                self.do_fail(node_id, secret, retryable=True, hint=data.draw(HINTS))
            elif action.endswith("fail"):
                self.do_fail(node_id, secret, retryable=False, hint=None)
            # "hang": the dispatcher dies holding the claim; recovery takes it after the lease

    @rule(data=st.data(), wait=st.sampled_from([0, 45, 120]))
    def observer_round(self, data: st.DataObject, wait: int) -> None:
        self.advance_clock(wait)
        for node_id in self.nodes_in("SUBMITTED", "OBSERVING"):
            self.do_observe(node_id, data.draw(OBSERVED), data.draw(HINTS))

    @rule(data=st.data(), wait=st.sampled_from([0, 60, 400]))
    def recovery_round(self, data: st.DataObject, wait: int) -> None:
        self.advance_clock(wait)
        for node_id, secret in self.do_recovery_claim():
            self.do_recover(node_id, secret, data.draw(RECOVERED), data.draw(HINTS))

    @precondition(lambda self: self.plan_sizes)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        in_flight = [
            r[0]
            for r in self.conn.execute(
                "SELECT DISTINCT request_id FROM movement_request_nodes WHERE node_state IN"
                " ('SUBMITTING', 'SUBMITTED', 'OBSERVING', 'UNKNOWN') ORDER BY 1"
            ).fetchall()
        ]
        movement_id = data.draw(self.pick(in_flight, self.movements()))
        row = self.conn.execute(
            "SELECT request_state::text, stop_reason::text FROM movement_requests WHERE id = %s",
            (movement_id,),
        ).fetchone()
        assert row is not None
        state, stop = row
        rows, error = self.call("SELECT cancel_movement(%s)::text", (movement_id,))
        if stop == "CANCELLED" and state in ("EXECUTING", "CANCELLED"):
            assert error is None  # a second cancel changes nothing
        elif state in TERMINAL_REQUEST_STATES or stop is not None:
            assert error == "QT020", (state, stop, error)
        else:
            assert error is None, error
            assert rows is not None and rows[0][0] in ("CANCELLED", "EXECUTING", "FAILED")

    @rule(seconds=st.sampled_from([1, 3, 10, 45, 120, 700, 3600]))
    def advance_clock(self, seconds: int) -> None:
        self.now += seconds
        pin_clock(self.conn, self.at(self.now))

    @rule()
    def expire(self) -> None:
        _, error = self.call("SELECT expire_movements(100)")
        assert error is None
        overdue = self.conn.execute(
            "SELECT id FROM movement_requests WHERE expires_at <= qtg.clock()"
            " AND request_state IN ('PENDING_APPROVAL', 'APPROVED', 'EXECUTING')"
            " AND stop_reason IS NULL AND expiry_waived_at IS NULL"
        ).fetchall()
        assert overdue == []

    @rule()
    def roll_up_counts(self) -> None:
        rows, error = self.call("SELECT entity, rolled FROM roll_up_pipeline_counts()")
        assert error is None and rows is not None and len(rows) == 2

    # --- invariants ------------------------------------------------------------------------

    @invariant()
    def pipeline_counts_match_the_rows(self) -> None:
        """The view's totals (finished rows rolled up, the rest counted) are the tables'."""
        counted = self.conn.execute(
            "SELECT entity, state, total FROM pipeline_counts ORDER BY 1, 2"
        ).fetchall()
        rows = self.conn.execute("""
            SELECT 'movement', request_state::text, count(*) FROM movement_requests GROUP BY 2
            UNION ALL
            SELECT 'node', node_state::text, count(*) FROM movement_request_nodes GROUP BY 2
             ORDER BY 1, 2
        """).fetchall()
        assert counted == rows

    @invariant()
    def ready_nodes_are_really_ready(self) -> None:
        bad = self.conn.execute("""
            SELECT n.id, n.pending_parents, r.request_state::text, r.stop_reason::text
              FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
             WHERE n.node_state = 'READY'
               AND (r.request_state <> 'EXECUTING' OR r.stop_reason IS NOT NULL
                    OR n.pending_parents <> 0
                    OR EXISTS (SELECT 1 FROM movement_plan_edges e
                                 JOIN movement_request_nodes p ON p.id = e.parent_node_id
                                WHERE e.child_node_id = n.id AND p.node_state <> 'COMPLETED'))
        """).fetchall()
        assert bad == [], f"READY nodes that must not be: {bad}"

    @invariant()
    def pending_parents_count_unfinished_parents(self) -> None:
        bad = self.conn.execute("""
            SELECT n.id, n.pending_parents, count(p.id) FILTER (WHERE p.node_state <> 'COMPLETED')
              FROM movement_request_nodes n
              LEFT JOIN movement_plan_edges e ON e.child_node_id = n.id
              LEFT JOIN movement_request_nodes p ON p.id = e.parent_node_id
             WHERE n.node_state = 'PENDING'
             GROUP BY n.id
            HAVING n.pending_parents <> count(p.id) FILTER (WHERE p.node_state <> 'COMPLETED')
        """).fetchall()
        assert bad == [], f"pending_parents out of step: {bad}"

    @invariant()
    def no_pending_node_is_stranded(self) -> None:
        """A PENDING node whose parent FAILED or was SKIPPED could never run: it must
        have been SKIPPED with it, or its movement would never settle."""
        bad = self.conn.execute("""
            SELECT n.id, p.id, p.node_state::text
              FROM movement_request_nodes n
              JOIN movement_plan_edges e ON e.child_node_id = n.id
              JOIN movement_request_nodes p ON p.id = e.parent_node_id
             WHERE n.node_state = 'PENDING' AND p.node_state IN ('FAILED', 'SKIPPED')
        """).fetchall()
        assert bad == [], f"PENDING nodes under a FAILED or SKIPPED parent: {bad}"

    @invariant()
    def request_counters_and_states_agree_with_nodes(self) -> None:
        rows = self.conn.execute("""
            SELECT r.id, r.request_state::text, r.stop_reason::text, r.open_nodes, r.failed_nodes,
                   jsonb_array_length(r.plan -> 'nodes'),
                   count(n.id),
                   count(n.id) FILTER (WHERE n.node_state NOT IN ('COMPLETED', 'FAILED',
                                                                  'SKIPPED')),
                   count(n.id) FILTER (WHERE n.node_state = 'FAILED'),
                   count(n.id) FILTER (WHERE n.node_state = 'COMPLETED'),
                   count(n.id) FILTER (WHERE n.node_state <> 'PENDING')
              FROM movement_requests r LEFT JOIN movement_request_nodes n ON n.request_id = r.id
             GROUP BY r.id
        """).fetchall()
        assert {r[0] for r in rows} == set(self.plan_sizes), "a movement appeared or vanished"
        for (
            movement_id,
            state,
            stop,
            open_nodes,
            failed_nodes,
            planned,
            total,
            open_count,
            failed,
            completed,
            started,
        ) in rows:
            where = f"movement {movement_id} ({state}, stop {stop})"
            assert total == planned == self.plan_sizes[movement_id], f"{where} lost a node"
            assert open_nodes == open_count, f"{where}: open_nodes {open_nodes} != {open_count}"
            assert failed_nodes == failed, f"{where}: failed_nodes {failed_nodes} != {failed}"
            if state in TERMINAL_REQUEST_STATES:
                assert open_count == 0, f"{where} is terminal with open nodes"
            if state == "COMPLETED":
                assert completed == total, f"{where} completed with unfinished nodes"
            if state == "FAILED":
                assert failed > 0, f"{where} failed with no failed node"
            if state in ("CANCELLED", "EXPIRED"):
                assert stop == state and failed == 0, where
            if state == "EXECUTING":
                assert open_count > 0, f"{where} has nothing open but did not settle"
            if state in ("PENDING_APPROVAL", "APPROVED"):
                assert started == 0 and stop is None, f"{where} has started nodes"

    @invariant()
    def skipped_nodes_have_a_reason(self) -> None:
        bad = self.conn.execute("""
            WITH RECURSIVE ancestry(node_id, ancestor) AS (
                SELECT child_node_id, parent_node_id FROM movement_plan_edges
                UNION
                SELECT ancestry.node_id, e.parent_node_id
                  FROM ancestry JOIN movement_plan_edges e ON e.child_node_id = ancestry.ancestor
            )
            SELECT n.id
              FROM movement_request_nodes n JOIN movement_requests r ON r.id = n.request_id
             WHERE n.node_state = 'SKIPPED' AND r.stop_reason IS NULL
               AND NOT EXISTS (SELECT 1 FROM ancestry a
                                 JOIN movement_request_nodes f ON f.id = a.ancestor
                                WHERE a.node_id = n.id AND f.node_state = 'FAILED')
        """).fetchall()
        assert bad == [], f"SKIPPED with no stop and no failed ancestor: {bad}"

    @invariant()
    def node_fields_match_their_state(self) -> None:
        rows = self.conn.execute(
            "SELECT id, node_state::text, claim_token, next_observe_at, lease_until, finished_at"
            " FROM movement_request_nodes"
        ).fetchall()
        for node_id, state, token, next_observe_at, lease_until, finished_at in rows:
            if state in ("SUBMITTED", "OBSERVING"):
                assert next_observe_at is not None, f"node {node_id} {state} is never observed"
            if state in ("SUBMITTING", "UNKNOWN"):
                assert lease_until is not None, f"node {node_id} {state} has no lease"
            assert (finished_at is not None) == (state in TERMINAL_NODE_STATES), node_id
            assert token >= self.tokens.get(node_id, 0), f"node {node_id} claim token went back"
            self.tokens[node_id] = token


@pytest.mark.slow  # 40 examples of up to 30 steps: several seconds
@pytest.mark.usefixtures("nosfx_executor")
def test_random_operation_sequences_keep_the_state_machine_consistent(conn: Conn) -> None:
    class OnThisDatabase(MovementMachine):
        def __init__(self) -> None:
            super().__init__(conn)

    run_state_machine_as_test(
        OnThisDatabase,
        settings=settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
