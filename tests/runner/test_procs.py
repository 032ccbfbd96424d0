"""The typed procedure layer (qtg_runner.db.procs) against the procedures themselves.

What the runner, the CLI, the benchmarks and tests/engine.py rely on when they
call a procedure through its wrapper:
  * every wrapper declares its procedure as pg_proc has it in the testnet
    schema: argument names and order, PostgreSQL types (arrays and the qtg
    enums included), which arguments have a default, the result columns' names
    and types (TABLE/OUT columns, a composite type's attributes) or the scalar
    return type, and the role it is granted to;
  * every routine EXECUTE-granted to qtg_testnet_runner or qtg_testnet_operator
    has a wrapper, and every wrapper names a routine that exists; a deploy
    step's wrapper (access "owner") names a routine no network role may call;
  * the StrEnums hold the labels of the qtg enum types;
  * a call is named-argument SQL with a cast per argument and server-side
    parameters, leaves DEFAULT arguments to the procedure, and runs the same on
    a sync and an async connection.
So a signature change fails here, not in a runner. And what the workers send
through the wrappers when an executor is missing or fails:
  * the dispatcher gives back a node whose executor it lacks (release_nodes:
    READY after the lane's release delay, no attempt used, intent ABANDONED);
    it submits a BatchSubmitter's nodes in one call and any other executor's
    one at a time, and reports a refusal through fail_submit;
  * a failed observe() (or no executor) is complete_observe's ERROR, looked at
    again after the lane's observe_error_retry_seconds; a failed recover() (or
    no executor) is STILL_UNKNOWN for the lane's recovery_retry_seconds;
  * the dispatcher carries each claim's secret from the claim to every report,
    and no log line, and no repr of a claim, a NodeWork or a call, shows one;
  * a node that becomes READY while one of the dispatcher's loops waits on a
    side effect is claimed and submitted by its other loop, and the two loops
    are one worker instance (one heartbeat row, stopped once both ended).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import itertools
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from engine import (
    SIM_SCHEMA,
    as_person,
    bind,
    claim,
    create_started,
    node,
    node_ids,
    node_states,
    observe,
    pin_clock,
    plan,
    register_sim,
    submit,
)
from psycopg.types.json import Jsonb

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import (
    ExecutorError,
    HealthResult,
    HealthStatus,
    NodeWork,
    ObserveResult,
    ObserveStatus,
    Prepared,
    RecoveryOutcome,
    RecoveryResult,
    SubmitResult,
)
from qtg_runner.log import event
from qtg_runner.loop import WorkerContext
from qtg_runner.runtime import supervise
from qtg_runner.workers import BY_NAME, node_dispatcher, node_observer, node_recovery

NETWORK = "testnet"
ROLES = {"runner": "qtg_testnet_runner", "operator": "qtg_testnet_operator"}


@dataclass(frozen=True)
class Routine:
    """One routine of the network schema, as pg_proc describes it."""

    name: str
    kind: str
    args: tuple[tuple[str, str], ...]  # input arguments: name, type
    defaults: int  # how many of the last inputs have a default
    returns: str
    returns_composite: bool
    out_columns: tuple[tuple[str, str], ...]  # TABLE / OUT columns
    composite_columns: tuple[tuple[str, str], ...]  # the attributes of a composite return
    granted: frozenset[str]  # 'runner', 'operator'


# format_type spells a type as our declarations do when only the network schema and
# pg_catalog are visible: network types bare (lane_baselines), qtg's qualified
ROUTINES = """
    SELECT p.proname, p.prokind, p.pronargdefaults, p.proargnames, p.proargmodes,
           ARRAY(SELECT format_type(u.type, NULL)
                   FROM unnest(coalesce(p.proallargtypes, p.proargtypes::oid[]))
                        WITH ORDINALITY AS u(type, i)
                  ORDER BY u.i) AS arg_types,
           format_type(p.prorettype, NULL) AS returns,
           t.typtype = 'c' AS returns_composite,
           ARRAY(SELECT a.attname::text FROM pg_attribute a
                  WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
                  ORDER BY a.attnum) AS composite_names,
           ARRAY(SELECT format_type(a.atttypid, NULL) FROM pg_attribute a
                  WHERE a.attrelid = t.typrelid AND a.attnum > 0 AND NOT a.attisdropped
                  ORDER BY a.attnum) AS composite_types,
           has_function_privilege(%(runner)s, p.oid, 'EXECUTE') AS runner,
           has_function_privilege(%(operator)s, p.oid, 'EXECUTE') AS operator
      FROM pg_proc p
      JOIN pg_namespace n ON n.oid = p.pronamespace
      JOIN pg_type t ON t.oid = p.prorettype
     WHERE n.nspname = %(network)s
"""


def routines(conn: psycopg.Connection[Any]) -> list[Routine]:
    with conn.transaction():
        conn.execute(f"SET LOCAL search_path = {NETWORK}, pg_catalog")
        rows = conn.execute(ROUTINES, {"network": NETWORK, **ROLES}).fetchall()
    found = []
    for row in rows:
        name, kind, defaults, names, modes, types, returns, composite = row[:8]
        composite_names, composite_types, runner, operator = row[8:]
        modes = modes or ["i"] * len(types)
        args = list(zip(names or [""] * len(types), types, modes, strict=True))
        found.append(
            Routine(
                name=name,
                kind=kind,
                args=tuple((n, t) for n, t, m in args if m in ("i", "b", "v")),
                defaults=defaults,
                returns=returns,
                returns_composite=composite,
                out_columns=tuple((n, t) for n, t, m in args if m in ("o", "b", "t")),
                composite_columns=tuple(zip(composite_names, composite_types, strict=True)),
                granted=frozenset(
                    role for role, yes in (("runner", runner), ("operator", operator)) if yes
                ),
            )
        )
    return found


def differ(what: str, declared: tuple[Any, ...], actual: tuple[Any, ...]) -> list[str]:
    """One line per position where the wrapper's ``declared`` differs from pg_proc's."""
    return [
        f"{what} #{i + 1}: wrapper {d}, pg_proc {a}"
        for i, (d, a) in enumerate(itertools.zip_longest(declared, actual, fillvalue="(none)"))
        if d != a
    ]


def mismatches(wrapper: procs.Procedure, routine: Routine) -> list[str]:
    """How ``wrapper`` differs from the routine it names (empty when it matches)."""
    declared_args = tuple((a.name, a.type) for a in wrapper.args)
    out = differ("argument", declared_args, routine.args)
    if not out:
        first_default = len(routine.args) - routine.defaults
        out += differ(
            "has a default: argument",
            tuple((a.name, a.has_default) for a in wrapper.args),
            tuple((name, i >= first_default) for i, (name, _) in enumerate(routine.args)),
        )
    declared_columns = tuple((c.name, c.type) for c in wrapper.columns)
    if wrapper.returns != routine.returns:
        out.append(f"returns: wrapper {wrapper.returns}, pg_proc {routine.returns}")
    elif routine.returns_composite:
        out += differ(f"column of {routine.returns}", declared_columns, routine.composite_columns)
    else:
        out += differ("result column", declared_columns, routine.out_columns)
    # a deploy step ("owner") is an internal routine: no network role may call it
    expected = frozenset() if wrapper.access == "owner" else frozenset({wrapper.access})
    if routine.granted != expected:
        out.append(f"granted to {sorted(routine.granted)}, the wrapper says {wrapper.access}")
    if routine.kind != "f":
        out.append(f"prokind {routine.kind!r}: the wrappers SELECT functions")
    return out


def test_every_wrapper_matches_its_procedure_in_pg_proc(db: Any) -> None:
    conn = db.connect()
    by_name: dict[str, list[Routine]] = {}
    for routine in routines(conn):
        by_name.setdefault(routine.name, []).append(routine)
    problems: list[str] = []
    for name, wrapper in sorted(procs.PROCEDURES.items()):
        found = by_name.get(name, [])
        if len(found) != 1:
            problems.append(f"{name}: {len(found)} routines of that name in {NETWORK}")
            continue
        problems += [f"{name}: {m}" for m in mismatches(wrapper, found[0])]
    assert not problems, "wrappers differ from pg_proc:\n  " + "\n  ".join(problems)


def test_every_routine_granted_to_a_runner_or_an_operator_has_a_wrapper(db: Any) -> None:
    granted = {r.name for r in routines(db.connect()) if r.granted and r.kind == "f"}
    assert granted, "no routine is granted to the network's roles: the query is wrong"
    assert granted - set(procs.PROCEDURES) == set(), "granted routines without a wrapper"
    granted_wrappers = {name for name, p in procs.PROCEDURES.items() if p.access != "owner"}
    assert granted_wrappers - granted == set(), "wrappers of routines nobody may EXECUTE"


def test_every_procedure_is_the_call_form_of_its_wrapped_function(db: Any) -> None:
    """A procedure (CALL in psql) takes its function's arguments as they are
    declared, defaults included, then the function's result as INOUT
    parameters defaulting to NULL, and is granted as the function is: so
    procs.CALL_FORMS, which the bad-input suite reads, says what each one is."""
    conn = db.connect()
    found = {r.name: r for r in routines(conn)}
    procedures = {name for name, r in found.items() if r.kind == "p"}
    assert procedures == set(procs.CALL_FORMS), "procedures and procs.CALL_FORMS differ"
    declared = dict(
        conn.execute(
            "SELECT proname, pg_get_function_arguments(oid) FROM pg_proc"
            " WHERE pronamespace = %s::regnamespace",
            [NETWORK],
        ).fetchall()
    )
    problems: list[str] = []
    for name, function in sorted(procs.CALL_FORMS.items()):
        routine, wrapper = found[name], procs.PROCEDURES[function]
        results = routine.out_columns  # the INOUT parameters
        if wrapper.columns:
            expected = tuple((c.name, c.type) for c in wrapper.columns)
            problems += [f"{name}: {m}" for m in differ("INOUT", expected, results)]
        elif tuple(t for _, t in results) != (wrapper.returns,):
            problems.append(f"{name}: INOUT {results}, {function} returns {wrapper.returns}")
        inout = ", ".join(f"INOUT {n} {t} DEFAULT NULL::{t}" for n, t in results)
        arguments = ", ".join(a for a in (declared[function], inout) if a)
        # a procedure's input arguments are spelt with their mode, IN
        if re.sub(r"(^|, )IN ", r"\1", declared[name]) != arguments:
            problems.append(f"{name}({declared[name]}): expected ({arguments})")
        if routine.granted != found[function].granted:
            problems.append(f"{name}: granted to {sorted(routine.granted)}, {function} otherwise")
    assert not problems, "procedures differ from their functions:\n  " + "\n  ".join(problems)


def test_the_state_enums_hold_the_labels_of_the_qtg_enum_types(db: Any) -> None:
    conn = db.connect()
    for enum_type, pg_type in procs.ENUM_TYPES.items():
        row = conn.execute(f"SELECT enum_range(NULL::{pg_type})::text[]").fetchone()
        assert row is not None
        assert [member.value for member in enum_type] == row[0], pg_type


# -- the calls ------------------------------------------------------------------


def test_a_call_is_named_arguments_with_a_cast_each_and_server_side_parameters() -> None:
    call = procs.claim_ready_nodes("w1", max=5)
    assert call.query == (
        "SELECT * FROM claim_ready_nodes(p_worker => %s::text, p_max => %s::integer)"
    )
    assert call.params == ("w1", 5)

    # an argument left at DEFAULT is not sent: the procedure's default applies
    assert procs.claim_ready_nodes("w1").query == (
        "SELECT * FROM claim_ready_nodes(p_worker => %s::text)"
    )
    # None is sent, as NULL
    fail = procs.fail_submit(1, "s" * 64, "boom", True, None)
    assert fail.query.endswith("p_retry_after_seconds => %s::numeric)")
    assert fail.params[-1] is None

    batch = procs.record_intent_prepared_batch(
        (1, 2), ("s3", "s4"), payloads=[{"a": 1}, None], nonces=None
    )
    assert batch.query == (
        "SELECT * FROM record_intent_prepared_batch(p_node_ids => %s::bigint[],"
        " p_claim_secrets => %s::text[], p_nonces => %s::bigint[], p_payloads => %s::jsonb[])"
    )
    node_ids, secrets, nonces, payloads = batch.params
    assert (node_ids, secrets, nonces) == ([1, 2], ["s3", "s4"], None)
    assert isinstance(payloads[0], Jsonb) and payloads[0].obj == {"a": 1}
    assert payloads[1] is None


def test_only_default_may_stand_for_a_default() -> None:
    with pytest.raises(TypeError, match="DEFAULT"):

        @procs.procedure("runner")
        def claim_ready_nodes(
            worker: procs.Text, max: procs.Integer = 10
        ) -> procs.Call[procs.ClaimedNode]: ...


def test_a_wrapper_like_another_takes_its_arguments_and_declares_none() -> None:
    like = procs.PROCEDURES["upsert_lane_baseline"]
    assert like.args == procs.PROCEDURES["propose_lane_baseline"].args
    assert like.returns == "lane_baselines"
    assert inspect.signature(procs.upsert_lane_baseline).parameters == (
        inspect.signature(procs.propose_lane_baseline).parameters
    )
    with pytest.raises(TypeError, match="declares no arguments"):

        @procs.procedure("owner", like=procs.propose_lane_baseline)
        def upsert_lane_baseline(lane: procs.Text) -> procs.Call[None]: ...


def test_the_same_calls_run_on_a_sync_and_an_async_connection(db: Any) -> None:
    conn = bind(db.connect())
    register_sim(conn)
    with as_person(conn, "alice"):
        created = procs.create_movement(
            "typed-1", Decimal("12.5"), plan=plan(node("a"), node("b", ["a"]))
        ).one(conn)
    assert created == procs.CreatedMovement(created.movement_id, True)
    state = procs.approve_movement(created.movement_id).one(conn)
    assert state is procs.RequestState.APPROVED
    assert procs.start_approved_movements().one(conn) == 1
    create_started(conn, plan(node("c")), "typed-2")

    async def scenario() -> list[procs.ClaimedNode]:
        async with await psycopg.AsyncConnection.connect(
            db.runner_dsn(NETWORK), autocommit=True
        ) as aconn:
            await aconn.execute(f"SET search_path = {NETWORK}, qtg")
            claims = await procs.claim_ready_nodes("typed-w", max=10).aall(aconn)
            for claimed in claims:
                outcome = await procs.complete_submit(
                    claimed.node_id, claimed.claim_secret, f"ref-{claimed.node_id}", settled=True
                ).aone(aconn)
                assert outcome is procs.NodeState.COMPLETED
            await procs.heartbeat("typed", "i1", "core", 1.5, pid=None).aone(aconn)
            assert await procs.worker_stopped("typed", "i1").aone(aconn) is True
            return claims

    claims = asyncio.run(scenario())
    assert sorted(c.node_key for c in claims) == ["a", "c"]
    assert all(c.amount == Decimal("12.5") for c in claims if c.node_key == "a")
    assert all(c.node_config == {"lane": "default"} for c in claims)

    # the child was readied by its parent's completion; a claim miss is None
    [child] = procs.claim_ready_nodes("typed-w").all(conn)
    assert child.node_key == "b"
    assert procs.claim_observe(child.node_id, "typed-obs").one_or_none(conn) is None

    baseline = procs.upsert_lane_baseline("typed_lane", 30, min_poll_seconds=0.5).one(conn)
    assert (baseline.lane, baseline.baseline_seconds) == ("typed_lane", Decimal(30))
    assert baseline.min_poll_seconds == Decimal("0.5")


def test_one_each_sends_many_calls_of_one_procedure_together(db: Any) -> None:
    conn = bind(db.connect())
    register_sim(conn)
    the_plan = plan(node("a"))
    with as_person(conn, "alice"):
        created = procs.one_each(
            conn, [procs.create_movement(f"bulk-{i}", 1, plan=the_plan) for i in range(6)]
        )
        assert [c.created for c in created] == [True] * 6
        # the creator's own approval, among many, is refused, not passed over
        with pytest.raises(procs.Refused, match="QT022"):
            procs.one_each(conn, [procs.approve_movement(created[5].movement_id)])
    states = procs.one_each(conn, [procs.approve_movement(c.movement_id) for c in created])
    assert states == [procs.RequestState.APPROVED] * 6
    with pytest.raises(ValueError, match="same procedure"):
        procs.one_each(conn, [procs.approve_movement(1), procs.cancel_movement(1)])


def test_a_call_between_transaction_statements_takes_one_round_trip(db: Any, tmp_path: Any) -> None:
    """What the observer relies on: its claim and its report each travel with
    their transaction's statements in one round trip (one Sync), and a call
    that fails stops the statements after it (the COMMIT), leaving the
    transaction to the caller."""
    conn = bind(db.connect())
    register_sim(conn)
    with as_person(conn, "alice"):
        created = procs.create_movement("between-1", 1, plan=plan(node("a"))).one(conn)
    trace = tmp_path / "protocol.trace"
    with trace.open("w") as sink:
        conn.pgconn.trace(sink.fileno())
        [state] = procs.approve_movement(created.movement_id).all_between(
            conn, before=("BEGIN", "SAVEPOINT s"), after=("RELEASE SAVEPOINT s", "COMMIT")
        )
        conn.pgconn.untrace()
    assert state is procs.RequestState.APPROVED
    messages = [line.split("\t") for line in trace.read_text().splitlines()]
    syncs = [m for m in messages if "F" in m and m[-1].strip() == "Sync"]
    assert len(syncs) == 1, trace.read_text()
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    other = bind(db.connect())
    assert other.execute(
        "SELECT request_state FROM movement_requests WHERE id = %s", [created.movement_id]
    ).fetchone() == ("APPROVED",)

    # a refused call: the COMMIT after it did not run, the savepoint is the caller's to undo
    with pytest.raises(psycopg.Error) as refused:
        procs.complete_submit(created.movement_id, "not-a-secret", "ref").all_between(
            conn, before=("BEGIN", "SAVEPOINT s"), after=("RELEASE SAVEPOINT s", "COMMIT")
        )
    assert (refused.value.sqlstate or "").startswith("QT")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR
    conn.execute("ROLLBACK TO SAVEPOINT s")
    conn.execute("ROLLBACK")
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- the workers' reports through the wrappers ------------------------------------
# In process, as qtg_testnet_runner: what the workers send when an executor is
# missing or fails, and the dispatcher's one submit path.


class FakeExecutor:
    """An executor whose calls are recorded and may be made to fail."""

    has_side_effect = True
    deduplicated_by = "the test's record of calls"
    node_config_schema = SIM_SCHEMA
    description = "test double"

    def __init__(self, key: str, refuse: set[str] = frozenset(), fail_calls: bool = False) -> None:
        self.key = key
        self.refuse = refuse  # node keys whose preflight is refused (retryable, 7 s hint)
        self.fail_calls = fail_calls  # observe() and recover() raise without a hint
        self.submitted: list[list[str]] = []  # node keys, one list per submit call

    async def preflight(self, work: NodeWork) -> None:
        if work.node_key in self.refuse:
            raise ExecutorError(f"{work.node_key} refused", retryable=True, retry_after=7)

    async def prepare(self, work: NodeWork) -> Prepared:
        return Prepared(external_request_id=work.idempotency_key)

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        self.submitted.append([work.node_key])
        return SubmitResult(f"ref-{work.node_id}")

    async def observe(self, work: NodeWork) -> ObserveResult:
        if self.fail_calls:
            raise ExecutorError("the service is down", retryable=True)
        return ObserveResult(ObserveStatus.PENDING)

    async def recover(self, work: NodeWork) -> RecoveryResult:
        if self.fail_calls:
            raise ExecutorError("the service is down", retryable=True)
        return RecoveryResult(RecoveryOutcome.NOT_SUBMITTED)

    async def health(self) -> HealthResult:
        return HealthResult(HealthStatus.HEALTHY)


class FakeBatchExecutor(FakeExecutor):
    """The same, submitting a group in one call (BatchSubmitter)."""

    async def submit_many(self, items: Sequence[tuple[NodeWork, Prepared]]) -> list[SubmitResult]:
        self.submitted.append([work.node_key for work, _ in items])
        return [SubmitResult(f"ref-{work.node_id}", settled=True) for work, _ in items]


@pytest.fixture
def runner_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's connection options come from the test only."""
    monkeypatch.delenv("PGOPTIONS", raising=False)


def run_batch(
    db: Any, batch: Callable[[WorkerContext, str], Awaitable[int]], *executors: FakeExecutor
) -> int:
    """One batch of a worker, as a runner carrying ``executors`` runs it."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "procs-test")
        async with open_pool(conninfo, name="procs-test") as pool:
            ctx = WorkerContext(NETWORK, pool, {e.key: e for e in executors}, "procs-test:1")
            return await batch(ctx, "worker@procs-test:1")

    return asyncio.run(scenario())


def node_row(conn: psycopg.Connection[Any], node_id: int) -> dict[str, Any]:
    cur = conn.execute(
        "SELECT node_state::text, submit_attempts, not_before - updated_at AS wait,"
        " next_observe_at - last_observed_at AS next_in, lease_until - updated_at AS lease,"
        " evidence, last_error FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    )
    names = [c.name for c in cur.description or ()]
    row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def test_a_node_whose_executor_the_runner_lacks_is_released_without_using_an_attempt(
    db: Any, runner_env: None
) -> None:
    conn = bind(db.connect())
    register_sim(conn, key="elsewhere")
    procs.upsert_lane_baseline("far", 60, release_retry_seconds=45).one(conn)
    movement_id = create_started(conn, plan(node("a", executor="elsewhere", lane="far")), "m1")
    node_id = node_ids(conn, movement_id)["a"]

    assert run_batch(db, node_dispatcher.batch) == 1

    row = node_row(conn, node_id)
    assert (row["node_state"], row["submit_attempts"]) == ("READY", 0)
    assert row["wait"] == timedelta(seconds=45)
    intents = conn.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s", (node_id,)
    ).fetchall()
    assert intents == [("ABANDONED",)]
    [audit] = conn.execute(
        "SELECT action, detail->>'reason' FROM audit_outbox"
        " WHERE entity = 'node' AND entity_id = %s AND action = 'released'",
        (str(node_id),),
    ).fetchall()
    assert audit == ("released", "no executor for the node in this runner")


def test_the_dispatcher_submits_a_batch_submitters_group_in_one_call_and_others_alone(
    db: Any, runner_env: None
) -> None:
    conn = bind(db.connect())
    plain, many = FakeExecutor("plain", refuse={"refused"}), FakeBatchExecutor("many")
    for executor in (plain, many):
        register_sim(conn, key=executor.key)
    movement_id = create_started(
        conn,
        plan(
            node("p1", executor="plain"),
            node("p2", executor="plain"),
            node("refused", executor="plain"),
            node("m1", executor="many"),
            node("m2", executor="many"),
        ),
        "m1",
    )
    ids = node_ids(conn, movement_id)

    assert run_batch(db, node_dispatcher.batch, plain, many) == 5

    # a plain executor submits each node alone; a BatchSubmitter its group at once
    assert sorted(plain.submitted) == [["p1"], ["p2"]]
    assert [sorted(keys) for keys in many.submitted] == [["m1", "m2"]]
    assert node_states(conn, movement_id) == {
        "p1": "SUBMITTED",
        "p2": "SUBMITTED",
        "refused": "READY",
        "m1": "COMPLETED",
        "m2": "COMPLETED",
    }
    # the refusal went through fail_submit, with the executor's hint
    refused = node_row(conn, ids["refused"])
    assert refused["wait"] == timedelta(seconds=7)
    assert refused["last_error"] == "refused refused"


def submitted_node(conn: psycopg.Connection[Any], executor: str, lane: str) -> int:
    """A started one-node movement whose node is SUBMITTED and due for observation."""
    movement_id = create_started(conn, plan(node("a", executor=executor, lane=lane)), executor)
    [claimed] = claim(conn)
    submit(conn, claimed)
    return node_ids(conn, movement_id)["a"]


@pytest.mark.parametrize("carried", [True, False], ids=["observe fails", "no executor"])
def test_a_failed_observation_is_reported_as_error_and_waits_the_lanes_delay(
    db: Any, runner_env: None, carried: bool
) -> None:
    conn = bind(db.connect())
    failing = FakeExecutor("flaky", fail_calls=True)
    register_sim(conn, key=failing.key)
    fast = {"min_poll_seconds": 0, "first_poll_fraction": 0.001, "poll_fraction": 0.001}
    procs.upsert_lane_baseline("flaky_lane", 5, **fast, observe_error_retry_seconds=40).one(conn)
    node_id = submitted_node(conn, failing.key, "flaky_lane")
    time.sleep(0.05)  # the first observation is due 5 ms after the submit

    assert run_batch(db, node_observer.batch, *([failing] if carried else [])) == 1

    row = node_row(conn, node_id)
    assert row["node_state"] == "OBSERVING"
    assert row["next_in"] == timedelta(seconds=40)
    expected = "the service is down" if carried else "no executor 'flaky' in this runner"
    assert row["evidence"] == {"error": expected}


@pytest.mark.parametrize("carried", [True, False], ids=["recover fails", "no executor"])
def test_a_failed_recovery_leaves_the_node_unknown_for_the_lanes_delay(
    db: Any, runner_env: None, carried: bool
) -> None:
    conn = bind(db.connect())
    failing = FakeExecutor("flaky", fail_calls=True)
    register_sim(conn, key=failing.key)
    fast = {"min_poll_seconds": 0, "first_poll_fraction": 0.001, "poll_fraction": 0.001}
    procs.upsert_lane_baseline("flaky_lane", 5, **fast, recovery_retry_seconds=50).one(conn)
    node_id = submitted_node(conn, failing.key, "flaky_lane")
    time.sleep(0.05)
    assert observe(conn, node_id, "UNKNOWN") == {
        "node_state": "UNKNOWN",
        "observe_phase": "pre_baseline",
        "next_observe_at": None,
    }

    assert run_batch(db, node_recovery.batch, *([failing] if carried else [])) == 1

    row = node_row(conn, node_id)
    assert row["node_state"] == "UNKNOWN"
    assert row["lease"] == timedelta(seconds=50)
    expected = "the service is down" if carried else "no executor 'flaky' in this runner"
    assert row["evidence"] == {"error": expected}


class SecretSeeingExecutor(FakeExecutor):
    """A FakeExecutor that records each node it submits as a log line would show
    it (its repr), with the claim secret it carries."""

    def __init__(self, key: str, refuse: set[str] = frozenset()) -> None:
        super().__init__(key, refuse)
        self.seen: list[tuple[str, str]] = []  # (repr of the work, its claim secret)

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        self.seen.append((repr(work), work.claim_secret))
        return await super().submit(work, prepared)


def test_the_dispatcher_carries_each_claims_secret_to_its_reports_and_logs_none(
    db: Any, runner_env: None, caplog: pytest.LogCaptureFixture
) -> None:
    conn = bind(db.connect())
    executor = SecretSeeingExecutor("plain", refuse={"refused"})
    register_sim(conn, key="plain")
    register_sim(conn, key="elsewhere")
    movement_id = create_started(
        conn,
        plan(
            node("sent", executor="plain"),
            node("refused", executor="plain"),
            node("away", executor="elsewhere"),
        ),
        "secret-logs",
    )
    qtg = logging.getLogger("qtg")
    qtg.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="qtg")
    try:
        assert run_batch(db, node_dispatcher.batch, executor) == 3
    finally:
        qtg.removeHandler(caplog.handler)

    # each report was accepted: the secret went from the claim to every call
    assert node_states(conn, movement_id) == {
        "sent": "SUBMITTED",
        "refused": "READY",
        "away": "READY",
    }
    [(shown, secret)] = executor.seen
    assert re.fullmatch("[0-9a-f]{64}", secret)
    assert secret not in shown
    lines = "\n".join(record.getMessage() for record in caplog.records)
    for logged in ("node_submitted", "prepare_failed", "executor_missing"):
        assert f"event={logged}" in lines
    assert not re.search("[0-9a-f]{64}", lines), lines


def test_no_log_line_or_repr_shows_a_claim_secret(caplog: pytest.LogCaptureFixture) -> None:
    secret = "ab" * 32
    qtg = logging.getLogger("qtg")
    qtg.addHandler(caplog.handler)
    caplog.set_level(logging.DEBUG, logger="qtg")
    try:
        event(logging.INFO, "claimed", node=7, claim_secret=secret, secret=secret)
    finally:
        qtg.removeHandler(caplog.handler)
    assert {r.getMessage() for r in caplog.records} == {"event=claimed node=7"}

    claimed = procs.ClaimedNode(
        7, 3, secret, 9, "t7x1", "a", "sim", True, {}, "default", Decimal(1), "USDC", 1, None
    )
    work = NodeWork.from_claim(claimed, NETWORK)
    assert work.claim_secret == secret
    for shown in (claimed, work, procs.complete_submit(7, secret, "ref")):
        assert secret not in repr(shown)


class HeldExecutor(FakeExecutor):
    """A FakeExecutor whose submit of the node keyed ``held`` waits until the
    test releases it (``holding`` says it is waiting)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def submit(self, work: NodeWork, prepared: Prepared) -> SubmitResult:
        if work.node_key == "held":
            self.holding.set()
            await self.release.wait()
        return await super().submit(work, prepared)


async def _until(what: str, condition: Callable[[], Awaitable[bool]], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def test_a_node_ready_while_a_dispatcher_loop_waits_on_a_side_effect_is_submitted_by_the_other(
    db: Any, runner_env: None
) -> None:
    conn = bind(db.connect())
    register_sim(conn, key="plain")
    executor = HeldExecutor("plain")
    held = create_started(conn, plan(node("held", executor="plain")), "loops-held")
    entry = dataclasses.replace(BY_NAME["node_dispatcher"], interval=0.1, jitter=0.0)
    assert entry.loops == 2

    def state(movement_id: int) -> Callable[[], Awaitable[bool]]:
        async def submitted() -> bool:
            states = await asyncio.to_thread(node_states, conn, movement_id)
            return set(states.values()) == {"SUBMITTED"}

        return submitted

    async def scenario() -> tuple[dict[str, str], dict[str, str], int]:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "loops-test")
        async with open_pool(conninfo, name="loops-test") as pool:
            ctx = WorkerContext(NETWORK, pool, {executor.key: executor}, "loops-test:1")
            supervisor = asyncio.create_task(supervise(ctx, [entry], install_signal_handlers=False))
            try:
                await asyncio.wait_for(executor.holding.wait(), 20)
                # one loop's batch waits on the held side effect; new work comes
                quick = await asyncio.to_thread(
                    create_started, conn, plan(node("quick", executor="plain")), "loops-quick"
                )
                await _until("the new node to be submitted", state(quick))
                during = (
                    await asyncio.to_thread(node_states, conn, held),
                    await asyncio.to_thread(node_states, conn, quick),
                )
                executor.release.set()
                await _until("the held node to be submitted", state(held))
            finally:
                ctx.stopping.set()
                code = await supervisor
            return *during, code

    held_during, quick_during, code = asyncio.run(scenario())
    # the new node was claimed and submitted while the other batch still held its own
    assert held_during == {"held": "SUBMITTING"}
    assert quick_during == {"quick": "SUBMITTED"}
    assert executor.submitted == [["quick"], ["held"]]
    assert code == 0
    # both loops are one worker instance: one heartbeat row, stopped once both ended
    rows = conn.execute(
        "SELECT instance_id, live FROM worker_heartbeats WHERE worker_name = 'node_dispatcher'"
    ).fetchall()
    assert rows == [("loops-test:1", False)]


def test_a_dispatcher_replaced_after_its_intents_does_not_send_again(
    db: Any, runner_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher freezes after committing its intents (the after_intent
    point); meanwhile recovery takes the node over (a new claim, a new secret)
    and resubmits the prepared payload itself. At wake-up the stale dispatcher
    asks whether its claims still hold before its external calls, and sends
    nothing: the payload goes out once, by recovery, and the node is not
    reported by the stale claimer."""
    conn = bind(db.connect())
    plain = FakeExecutor("plain")
    register_sim(conn, key=plain.key)
    movement_id = create_started(conn, plan(node("a", executor="plain")), "frozen")
    node_id = node_ids(conn, movement_id)["a"]
    taken: list[Any] = []

    def frozen_then_replaced(name: str) -> None:
        if name != "after_intent":
            return
        pin_clock(conn, "2099-01-01T00:00:00+00:00")  # its lease has run out by now
        taken.extend(procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn))
        pin_clock(conn, None)

    monkeypatch.setattr(node_dispatcher, "failpoint", frozen_then_replaced)
    assert run_batch(db, node_dispatcher.batch, plain) == 1
    assert [c.node_id for c in taken] == [node_id]
    assert plain.submitted == []  # the stale dispatcher sent nothing
    row = node_row(conn, node_id)
    assert row["node_state"] == "SUBMITTING"
    intent = conn.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s", (node_id,)
    ).fetchone()
    assert intent == ("PREPARED",)  # recovery's to resubmit, as it is


def test_a_report_that_fails_transiently_is_made_again_not_left_to_the_lease(
    db: Any, runner_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor refuses the node (retryable); the dispatcher's fail_submit
    meets a dropped connection once. It is made again at once rather than
    leaving the node SUBMITTING for its claim's 300 s lease."""
    conn = bind(db.connect())
    plain = FakeExecutor("plain", refuse={"a"})
    register_sim(conn, key=plain.key)
    movement_id = create_started(conn, plan(node("a", executor="plain")), "dropped")
    node_id = node_ids(conn, movement_id)["a"]
    real = procs.fail_submit
    dropped = 0

    class Dropped:
        def __init__(self, call: Any) -> None:
            self.call = call

        async def aone(self, conn: Any) -> Any:
            nonlocal dropped
            if dropped == 0:
                dropped += 1
                raise psycopg.OperationalError("server closed the connection unexpectedly")
            return await self.call.aone(conn)

    monkeypatch.setattr(procs, "fail_submit", lambda *a, **k: Dropped(real(*a, **k)))
    monkeypatch.setattr(node_dispatcher, "REPORT_RETRIES_S", (0.0, 0.0, 0.0))
    assert run_batch(db, node_dispatcher.batch, plain) == 1
    assert dropped == 1
    row = node_row(conn, node_id)
    assert (row["node_state"], row["last_error"]) == ("READY", "a refused")


class NoDedupExecutor(FakeExecutor):
    """An executor whose outside world names nothing that deduplicates a
    repeated submission."""

    deduplicated_by = ""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.recovered = 0

    async def recover(self, work: NodeWork) -> RecoveryResult:
        self.recovered += 1
        return RecoveryResult(RecoveryOutcome.IN_FLIGHT, {"resubmitted": True})


def test_recovery_never_resubmits_for_an_executor_whose_world_does_not_deduplicate(
    db: Any, runner_env: None
) -> None:
    conn = bind(db.connect())
    plain = NoDedupExecutor("plain")
    register_sim(conn, key=plain.key)
    procs.upsert_lane_baseline("nodedup_lane", 5).one(conn)
    node_id = submitted_node(conn, plain.key, "nodedup_lane")
    conn.execute(
        "UPDATE movement_request_nodes SET node_state = 'UNKNOWN', lease_until = now()"
        " WHERE id = %s",
        (node_id,),
    )
    assert run_batch(db, node_recovery.batch, plain) == 1
    assert plain.recovered == 0
    row = node_row(conn, node_id)
    assert row["node_state"] == "UNKNOWN"
    assert "deduplicates" in row["evidence"]["problem"]
