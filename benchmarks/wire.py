"""Case 8: what the runner asks its providers, counted at the wire.

Two local anvil chains (the local world's contracts), the first chain's RPC
and the fake Iris each behind a counting double (qtg_world.throttle, its
limit far away), the runner's CCTP burn and mint executors kept across the
rounds as a runner process keeps them. Three measures:

  submit, alone    one burn dispatched by itself: every request its prepare
                   and broadcast make (fee quote, head, pending count,
                   balances, allowance, the messenger's minimum fee, the gas
                   estimate, the broadcast)
  submit, batch    BATCH burns from one account dispatched together: the
                   requests per burn (the shared reads made once for all)
  poll             the burns, final and waiting for an attestation that
                   comes in an hour, observed ROUNDS times, a block mined
                   on each chain between rounds: the chains' and Iris's
                   requests per observation
  CCIP, Stargate   SENDS CCIP sends and SENDS Stargate taxi sends from the
                   first chain to the second, final and waiting for a
                   delivery that never comes (no DON, no DVN here), observed
                   ROUNDS times each in the same way (each protocol's
                   rounds on their own: only its nodes are due)

Each figure is printed beside the count before issue 44 (a CCTP poll 4.0,
a CCIP poll 4.3, a Stargate poll 5 to 6, a submit 9 to 15) and its goal (a
CCTP poll at most 1.1, a CCIP or Stargate poll at most 1.5, a submit at
most 4). Both chains' RPCs are counted. The
counts do not depend on the machine's speed, save the shared reads: a read
is shared for half a block time, so a round stretched past it by a loaded
machine reads the head again.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg

from benchmarks import engine
from benchmarks.cluster import Cluster
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import Executor
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV, CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.stargate import StargateExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.ports import free_port
from qtg_runner.workers import node_dispatcher, node_observer

NETWORK = engine.NETWORK
BATCH = 8
SENDS = 4
ROUNDS = 20
FINALITY_DEPTH = 2
KDF_ITERATIONS = 2**10
"""The throwaway keystore's scrypt n (the default, 2^18, takes 0.7 s a key)."""
CHAINS = (("bench-a", 31501, 1), ("bench-b", 31502, 2))
"""(key, chain id, block time in seconds)."""
LANES = ("cctp-fast", "cctp-mint", "wire-ccip", "wire-stargate")
EXECUTORS = (CctpBurnExecutor, CctpMintExecutor, CcipExecutor, StargateExecutor)
FAR_AWAY = 100_000
BEFORE = {"poll": "4.0", "ccip_poll": "4.3", "stargate_poll": "5 to 6", "submit": "9 to 15"}
GOALS = {"poll": 1.1, "ccip_poll": 1.5, "stargate_poll": 1.5, "submit": 4.0}


def run(cluster: Cluster) -> dict[str, Any]:
    from qtg_world.chains.local import AnvilNotFound, find_anvil

    try:
        anvil = find_anvil()
    except AnvilNotFound as exc:
        return {"skipped": f"anvil is not installed ({exc}): `make install` installs it"}
    state_dir = Path(tempfile.mkdtemp(prefix="qtg-bench-wire-"))
    try:
        return _run(cluster, anvil, state_dir)
    finally:
        from qtg_world.chains.local import stop_chains

        stop_chains(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


def _run(cluster: Cluster, anvil: Path, state_dir: Path) -> dict[str, Any]:
    from qtg_world.chains.cctp import load_attesters
    from qtg_world.chains.local import ChainSpec, rpc, rpc_url_env, runner_env
    from qtg_world.chains.registry import prepare_treasury, register_chain
    from qtg_world.chains.start import start_chains
    from qtg_world.iris import IrisConfig
    from qtg_world.iris import serve as serve_iris
    from qtg_world.throttle import serve as serve_throttle

    specs = [ChainSpec(key, chain_id, free_port(), bt) for key, chain_id, bt in CHAINS]
    chains = start_chains(state_dir, specs, anvil=anvil, kdf_iterations=KDF_ITERATIONS)
    treasury = prepare_treasury(state_dir, chains, kdf_iterations=KDF_ITERATIONS)
    dsn = engine.clone(cluster, "qtg_bench_wire")
    with psycopg.connect(dsn, autocommit=True) as conn:
        engine.bind(conn)
        for chain in chains:
            register_chain(conn, chain, treasury, FINALITY_DEPTH)
        for lane in LANES:
            procs.upsert_lane_baseline(lane, 10, min_poll_seconds=1).one(conn)
        iris = serve_iris(
            chains,
            load_attesters(state_dir),
            IrisConfig(fast_delay_s=3600, rate_limit_per_s=1_000_000),
        )
        chain_double, dest_double = (
            serve_throttle(chain.rpc_url, FAR_AWAY, apart=True) for chain in chains
        )
        iris_double = serve_throttle(iris.url, FAR_AWAY, apart=True)
        env = runner_env(state_dir) | {
            rpc_url_env(chains[0].key): chain_double.url,
            rpc_url_env(chains[1].key): dest_double.url,
            IRIS_URL_ENV: iris_double.url,
        }
        doubles = (chain_double, dest_double, iris_double)

        def mine() -> None:
            for chain in chains:
                rpc(chain.rpc_url, "evm_mine")

        def asked(*doubles: Any) -> dict[str, int]:
            counted: dict[str, int] = {}
            for double in doubles:
                for method, n in double.counts().asked.items():
                    counted[method] = counted.get(method, 0) + n
            return counted

        async def scenario() -> dict[str, Any]:
            conninfo = bound_conninfo(cluster.runner_dsn(dsn), NETWORK, "bench-wire")
            async with open_pool(conninfo, name="bench-wire") as pool:
                executors: dict[str, Executor] = {
                    e.key: e(pool, NETWORK, env=env) for e in EXECUTORS
                }
                ctx = WorkerContext(NETWORK, pool, executors, "bench-wire:1")
                worker = "worker@bench-wire:1"
                try:
                    burns = []
                    submits = {}
                    http = {}
                    for label, count in (("alone", 1), ("batch", BATCH)):
                        burns += _start_burns(conn, chains, treasury, count, label)
                        chain_double.reset_counts()
                        dispatched = await node_dispatcher.batch(ctx, worker)
                        if dispatched != count:
                            raise RuntimeError(f"{label}: {dispatched} burns dispatched of {count}")
                        submits[label] = asked(chain_double)
                        http[label] = len(chain_double.counts().admitted)
                        mine()
                    sends = {
                        "ccip": _start_sends(conn, chains, treasury, "ccip", SENDS),
                        "stargate": _start_sends(conn, chains, treasury, "stargate", SENDS),
                    }
                    dispatched = await node_dispatcher.batch(ctx, worker)
                    if dispatched != 2 * SENDS:
                        raise RuntimeError(f"{dispatched} sends dispatched of {2 * SENDS}")
                    for _ in range(FINALITY_DEPTH + 2):  # every send final
                        mine()
                    everyone = burns + sends["ccip"] + sends["stargate"]
                    measured: dict[str, Any] = {"submits": submits, "http": http}
                    for name, nodes in (("cctp", burns), *sends.items()):
                        for double in doubles:
                            double.reset_counts()
                        before = _observations(conn, nodes)
                        for _ in range(ROUNDS):
                            # only this protocol's nodes due: its requests alone
                            conn.execute(
                                "UPDATE movement_request_nodes"
                                "   SET next_observe_at = CASE WHEN id = ANY(%s)"
                                "       THEN clock() - interval '1 second'"
                                "       ELSE clock() + interval '1 day' END"
                                " WHERE id = ANY(%s)",
                                (nodes, everyone),
                            )
                            await node_observer.batch(ctx, worker)
                            mine()
                        measured[name] = {
                            "polls": _observations(conn, nodes) - before,
                            "asked": asked(*doubles),
                            "http": sum(len(d.counts().admitted) for d in doubles),
                        }
                    return measured
                finally:
                    for executor in executors.values():
                        await executor.aclose()  # type: ignore[attr-defined]

        try:
            measured = asyncio.run(scenario())
        finally:
            for handle in (*doubles, iris):
                handle.stop()
    cluster.drop_db("qtg_bench_wire")
    submits = measured["submits"]

    def per_poll(name: str) -> dict[str, Any]:
        polls, asked_for = measured[name]["polls"], measured[name]["asked"]
        return {
            "polls": polls,
            "per_poll": round(sum(asked_for.values()) / polls, 3) if polls else None,
            "http_per_poll": round(measured[name]["http"] / polls, 3) if polls else None,
            "asked": asked_for,
        }

    return {
        "chains": [c.key for c in chains],
        "batch": BATCH,
        "sends": SENDS,
        "rounds": ROUNDS,
        "polls": measured["cctp"]["polls"],
        "per_poll": per_poll("cctp")["per_poll"],
        "poll_asked": measured["cctp"]["asked"],
        "ccip": per_poll("ccip"),
        "stargate": per_poll("stargate"),
        "submit_alone": sum(submits["alone"].values()),
        "submit_alone_http": measured["http"]["alone"],
        "submit_batch_http_per_burn": round(measured["http"]["batch"] / BATCH, 3),
        "http_per_poll": per_poll("cctp")["http_per_poll"],
        "submit_alone_asked": submits["alone"],
        "submit_batch_per_burn": round(sum(submits["batch"].values()) / BATCH, 3),
        "submit_batch_asked": submits["batch"],
        "before": BEFORE,
        "goals": GOALS,
    }


def _start_burns(
    conn: psycopg.Connection[Any], chains: list[Any], treasury: list[Any], count: int, tag: str
) -> list[int]:
    """``count`` fast burn -> mint movements started: their burns' node ids."""
    (a, b), (sender, recipient) = chains, (k.address for k in treasury[:2])
    plan = {
        "nodes": [
            {"key": "burn", "executor": CctpBurnExecutor.key,
             "config": {"lane": "cctp-fast", "chain": a.key, "destination_chain": b.key,
                        "from": sender, "to": recipient, "finality": "fast"},
             "depends_on": []},
            {"key": "mint", "executor": CctpMintExecutor.key,
             "config": {"lane": "cctp-mint", "chain": b.key, "source_chain": a.key,
                        "from": sender, "to": recipient},
             "depends_on": ["burn"]},
        ]
    }  # fmt: skip
    movements = _approved(conn, plan, count, tag)
    rows = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = ANY(%s) AND node_key = 'burn'",
        (movements,),
    ).fetchall()
    return [int(r[0]) for r in rows]


def _start_sends(
    conn: psycopg.Connection[Any], chains: list[Any], treasury: list[Any], kind: str, count: int
) -> list[int]:
    """``count`` one-send movements of ``kind`` (ccip, or a stargate taxi)
    from the first chain to the second, started: their node ids."""
    (a, b), (sender, recipient) = chains, (k.address for k in treasury[:2])
    if kind == "ccip":
        config = {"lane": "wire-ccip", "chain": a.key, "destination_chain": b.key,
                  "from": sender, "to": recipient}  # fmt: skip
    else:
        config = {"lane": "wire-stargate", "source": a.key, "destination": b.key,
                  "from": sender, "to": recipient, "mode": "taxi",
                  "max_slippage_bps": 10}  # fmt: skip
    plan = {"nodes": [{"key": "send", "executor": kind, "config": config, "depends_on": []}]}
    movements = _approved(conn, plan, count, kind)
    rows = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = ANY(%s)", (movements,)
    ).fetchall()
    return [int(r[0]) for r in rows]


def _approved(
    conn: psycopg.Connection[Any], plan: dict[str, Any], count: int, tag: str
) -> list[int]:
    """``count`` movements of ``plan`` created and approved (four eyes: the
    admin session creates, the owner approves), then started."""
    movements = []
    for i in range(count):
        created = procs.create_movement(f"wire-{tag}-{i}", Decimal("0.01"), plan=plan).one(conn)
        conn.execute("SET SESSION AUTHORIZATION qtg_owner")
        try:
            procs.approve_movement(created.movement_id).one(conn)
        finally:
            conn.execute("RESET SESSION AUTHORIZATION")
        movements.append(created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    return movements


def _observations(conn: psycopg.Connection[Any], burns: list[int]) -> int:
    row = conn.execute(
        "SELECT sum(observe_count) FROM movement_request_nodes WHERE id = ANY(%s)", (burns,)
    ).fetchone()
    return int(row[0] or 0) if row else 0
