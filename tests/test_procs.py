"""The typed procedure layer (qtg_runner.db.procs) against the procedures themselves.

What the runner, the CLI, the benchmarks and tests/engine.py rely on when they
call a procedure through its wrapper:
  * every wrapper declares its procedure as pg_proc has it in the testnet
    schema: argument names and order, PostgreSQL types (arrays and the qtg
    enums included), which arguments have a default, the result columns' names
    and types (TABLE/OUT columns, a composite type's attributes) or the scalar
    return type, and the role it is granted to;
  * every routine EXECUTE-granted to qtg_testnet_runner or qtg_testnet_operator
    has a wrapper, and every wrapper names a routine that exists;
  * the StrEnums hold the labels of the qtg enum types;
  * a call is named-argument SQL with a cast per argument and server-side
    parameters, leaves DEFAULT arguments to the procedure, and runs the same on
    a sync and an async connection.
So a signature change fails here, not in a runner.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from engine import bind, create_started, node, plan, register_sim
from psycopg.types.json import Jsonb

from qtg_runner.db import procs

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
    if routine.granted != {wrapper.access}:
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
    granted = {r.name for r in routines(db.connect()) if r.granted}
    assert granted, "no routine is granted to the network's roles: the query is wrong"
    assert granted - set(procs.PROCEDURES) == set(), "granted routines without a wrapper"
    assert set(procs.PROCEDURES) - granted == set(), "wrappers of routines nobody may EXECUTE"


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
    fail = procs.fail_submit(1, 2, "boom", True, None)
    assert fail.query.endswith("p_retry_after_seconds => %s::numeric)")
    assert fail.params[-1] is None

    batch = procs.record_intent_prepared_batch(
        (1, 2), [3, 4], payloads=[{"a": 1}, None], nonces=None
    )
    assert batch.query == (
        "SELECT * FROM record_intent_prepared_batch(p_node_ids => %s::bigint[],"
        " p_claim_tokens => %s::bigint[], p_nonces => %s::bigint[], p_payloads => %s::jsonb[])"
    )
    node_ids, tokens, nonces, payloads = batch.params
    assert (node_ids, tokens, nonces) == ([1, 2], [3, 4], None)
    assert isinstance(payloads[0], Jsonb) and payloads[0].obj == {"a": 1}
    assert payloads[1] is None


def test_only_default_may_stand_for_a_default() -> None:
    with pytest.raises(TypeError, match="DEFAULT"):

        @procs.procedure("runner")
        def claim_ready_nodes(
            worker: procs.Text, max: procs.Integer = 10
        ) -> procs.Call[procs.ClaimedNode]: ...


def test_the_same_calls_run_on_a_sync_and_an_async_connection(db: Any) -> None:
    conn = bind(db.connect())
    register_sim(conn)
    created = procs.create_movement(
        "typed-1", Decimal("12.5"), plan=plan(node("a"), node("b", ["a"])), actor="alice"
    ).one(conn)
    assert created == procs.CreatedMovement(created.movement_id, True)
    state = procs.approve_movement(created.movement_id, "bob").one(conn)
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
                    claimed.node_id, claimed.claim_token, f"ref-{claimed.node_id}", settled=True
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
    created = procs.one_each(
        conn,
        [procs.create_movement(f"bulk-{i}", 1, plan=the_plan, actor="alice") for i in range(5)],
    )
    assert [c.created for c in created] == [True] * 5
    states = procs.one_each(conn, [procs.approve_movement(c.movement_id, "bob") for c in created])
    assert states == [procs.RequestState.APPROVED] * 5
    with pytest.raises(ValueError, match="same procedure"):
        procs.one_each(conn, [procs.approve_movement(1, "bob"), procs.cancel_movement(1, "bob")])
