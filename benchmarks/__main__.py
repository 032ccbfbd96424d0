"""`python -m benchmarks` (what `make bench` runs): every case, one table, JSON and plots.

Usage: python -m benchmarks [--help]. It takes no arguments; the environment
chooses what runs. A full run takes 15-25 minutes on two cores.

Cases (benchmarks/README.md says what each measures and its target):
  1 throughput    2 DAG step latency   3 history flatness   4 pacing
  5 runner memory 6 intake             7 in-flight scale    8 calls at the wire

Environment:
  QTG_DATABASE_URL   use this server (an admin login) instead of an embedded one
  QTG_BENCH_JOBS     jobs/movements in case 1 (default 20000)
  QTG_BENCH_PACING_NODES  nodes per run in case 4 (default 2000)
  QTG_BENCH_STEPS    DAG steps per mode in case 2 (default 2000)
  QTG_BENCH_CASES    a subset to run, e.g. "1,3" (default: all)
  QTG_BENCH_LOAD     movements in flight in case 2's "under load" run (default 1000)
  QTG_BENCH_INTAKE   movements created and approved in case 6 (default 20000)
  QTG_BENCH_EG_JOBS  movements per equal-guarantee peer run in case 1 (default
                     5000, at most QTG_BENCH_JOBS; DBOS Transact at most 2000:
                     the peers drain a few hundred movements/s, DBOS under 100)
  QTG_BENCH_OUT      results folder (default benchmarks/results)
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import (
    engine,
    history,
    inflight,
    intake,
    latency,
    memory,
    pacing,
    report,
    throughput,
    wire,
)
from benchmarks.cluster import open_cluster

HERE = Path(__file__).resolve().parent

# Each system at its best documented settings (see benchmarks/README.md).
ENGINE_CONCURRENCY = 8
# Each peer at its documented settings and one step above them (the best run
# of each is what the engine is compared with): Procrastinate's worker
# concurrency, PgQueuer's dequeue loops per process (its drain benchmark uses 5),
# Graphile Worker's concurrency (its performance page uses 24).
PEER_SETTINGS = {"Procrastinate": (10, 50), "PgQueuer": (5, 10), "Graphile Worker": (24, 48)}
CEILING_CONNECTIONS = (2, 4, 8)
# The equal-guarantee peers (their handlers write what a movement writes), each
# in 1 and 2 processes at its documented setting: Graphile Worker concurrency 24
# (its performance page), PgQueuer 5 dequeue loops of batch 10 (its drain
# benchmark), DBOS Transact a queue with worker_concurrency 50 per process
# (each process with its own executor_id, as DBOS's queue reference requires
# for a per-worker limit) polled every 0.1 s: at the default polling_interval_sec of 1 s a worker
# starts at most worker_concurrency workflows a second, a cap of the poll, not
# of the work.
EQUAL_SETTINGS: dict[str, Any] = {
    "Graphile Worker": 24,
    "PgQueuer": 5,
    "DBOS Transact": (50, 0.1),
    "DBOS Transact (datasource transactions)": (50, 0.1),
}
EQUAL_JOBS = 5000
DBOS_MAX_JOBS = 2000


def one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def case_throughput(cluster: Any, jobs: int, eg_jobs: int, log_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "jobs": jobs,
        "engine": [],
        "peers": [],
        "equal_peers": [],
        "ceiling": [],
    }
    say(f"case 1: creating and approving {jobs:,} one-step movements")
    source, create_s = throughput.prepare_engine_source(cluster, jobs)
    out["setup_create_approve_s"] = round(create_s, 1)
    # 1 and 2 runners with the audit chain measured after the drain (the
    # equal-guarantee figures), then 2 with the promoter beside them (as deployed)
    for processes, promoter in ((1, False), (2, False), (2, True)):
        live = f", {throughput.LIVE_CHAIN}" if promoter else ""
        say(f"case 1: engine, {processes} runner process(es){live}")
        try:
            run = throughput.run_engine(
                cluster, source, jobs, processes, ENGINE_CONCURRENCY, log_dir, promoter
            )
            say(
                f"  {run['per_s']:,.0f} movements/s,"
                f" {run['node_transitions_per_s']:,.0f} node transitions/s"
            )
        except Exception as exc:
            run = {
                "system": "QTG engine",
                "processes": processes,
                "concurrency": ENGINE_CONCURRENCY,
                "setting": f"c={ENGINE_CONCURRENCY}{live}" if promoter else None,
                "error": one_line(exc),
            }
            say(f"  failed: {run['error']}")
        out["engine"].append(run)
    cluster.drop_db(source)

    for peer, concurrencies in PEER_SETTINGS.items():
        why = (
            throughput.graphile_available()
            if peer == "Graphile Worker"
            else throughput.python_peer_available(peer.lower())
        )
        if why:
            say(f"case 1: {peer} skipped: {why}")
            out["peers"].append({"system": peer, "skipped": why})
            continue
        for processes, concurrency in itertools.product((1, 2), concurrencies):
            say(f"case 1: {peer}, {processes} process(es), concurrency {concurrency}")
            try:
                run = throughput.run_peer(cluster, peer, jobs, processes, concurrency, log_dir)
                say(f"  {run['per_s']:,.0f} jobs/s")
            except Exception as exc:
                run = {
                    "system": peer,
                    "processes": processes,
                    "concurrency": concurrency,
                    "error": one_line(exc),
                }
                say(f"  failed: {run['error']}")
            out["peers"].append(run)

    for peer, setting in EQUAL_SETTINGS.items():
        if peer == "Graphile Worker":
            why = throughput.graphile_available()
        elif peer.startswith("DBOS Transact"):
            why = throughput.dbos_available()
        else:
            why = throughput.python_peer_available(peer.lower())
        if why:
            say(f"case 1: {peer} (equal guarantees) skipped: {why}")
            out["equal_peers"].append({"system": peer, "equal_guarantees": True, "skipped": why})
            continue
        n = min(eg_jobs, DBOS_MAX_JOBS) if peer.startswith("DBOS Transact") else eg_jobs
        for processes in (1, 2):
            say(f"case 1: {peer} (equal guarantees, {n:,} movements), {processes} process(es)")
            try:
                run = throughput.run_equal_peer(cluster, peer, n, processes, setting, log_dir)
                say(
                    f"  {run['per_s']:,.0f} movements/s"
                    + (
                        f", {run['db_cpu_ms_per_job']:.3f} ms database CPU/movement"
                        if run.get("db_cpu_ms_per_job") is not None
                        else ""
                    )
                )
            except Exception as exc:
                run = {
                    "system": peer,
                    "equal_guarantees": True,
                    "processes": processes,
                    "concurrency": list(setting) if isinstance(setting, tuple) else setting,
                    "error": one_line(exc),
                }
                say(f"  failed: {run['error']}")
            out["equal_peers"].append(run)

    for connections in CEILING_CONNECTIONS:
        say(f"case 1: bare SKIP LOCKED ceiling, {connections} connections")
        run = throughput.run_bare(cluster, jobs, connections)
        say(f"  {run['per_s']:,.0f} rows/s")
        out["ceiling"].append(run)
    return out


CASES = ("1", "2", "3", "4", "5", "6", "7", "8")


class Usage(Exception):
    """A call the bench does not take: said in one line, exit 2, nothing run."""


def count_setting(name: str, default: int) -> int:
    """The whole number > 0 in environment variable ``name`` (``default`` when unset)."""
    given = os.environ.get(name, "").strip()
    if not given:
        return default
    try:
        value = int(given)
    except ValueError:
        raise Usage(f"{name} is {given!r}: give a whole number above 0") from None
    if value <= 0:
        raise Usage(f"{name} is {value}: give a whole number above 0")
    return value


def wanted_cases() -> set[str]:
    """QTG_BENCH_CASES as a set of case numbers (every case when unset)."""
    given = os.environ.get("QTG_BENCH_CASES", "").strip()
    wanted = {c.strip() for c in given.split(",") if c.strip()} if given else set(CASES)
    unknown = sorted(wanted - set(CASES))
    if unknown or not wanted:
        raise Usage(
            f"QTG_BENCH_CASES is {given!r}: name cases from {', '.join(CASES)}, "
            'separated by commas (e.g. "1,3")'
        )
    return wanted


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    try:
        if args:
            raise Usage(f"no arguments are taken ({' '.join(args)}); the environment chooses")
        jobs = count_setting("QTG_BENCH_JOBS", 20000)
        pacing_nodes = count_setting("QTG_BENCH_PACING_NODES", pacing.NODES)
        steps = count_setting("QTG_BENCH_STEPS", 2000)
        load = count_setting("QTG_BENCH_LOAD", latency.LOAD)
        intake_count = count_setting("QTG_BENCH_INTAKE", 20000)
        eg_jobs = min(count_setting("QTG_BENCH_EG_JOBS", min(jobs, EQUAL_JOBS)), jobs)
        wanted = wanted_cases()
    except Usage as exc:
        print(f"python -m benchmarks: {exc} (--help says more)", file=sys.stderr)
        return 2
    out_dir = Path(os.environ.get("QTG_BENCH_OUT", HERE / "results"))
    log_dir = out_dir / "logs"
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "targets": report.TARGETS,
        "cases": {},
    }
    with open_cluster() as cluster:
        results["machine"] = cluster.facts()
        say(report.render_machine(results["machine"]))
        say("migrating the template database")
        engine.make_template(cluster)

        def attempt(key: str, number: str, fn: Any, *args: Any) -> None:
            if number not in wanted:
                return
            say(f"case {number}: {key}")
            t = time.monotonic()
            try:
                results["cases"][key] = fn(*args)
            except Exception as exc:
                traceback.print_exc()
                results["cases"][key] = {"error": one_line(exc)}
            results["cases"].setdefault(key, {})
            if isinstance(results["cases"][key], dict):
                results["cases"][key]["duration_s"] = round(time.monotonic() - t, 1)
            say(f"case {number} done in {time.monotonic() - t:.0f} s")

        attempt("throughput", "1", case_throughput, cluster, jobs, eg_jobs, log_dir)
        attempt("latency", "2", latency.run, cluster, steps, log_dir, load)
        attempt("history", "3", history.run, cluster)
        attempt("pacing", "4", pacing.run, cluster, pacing_nodes)
        attempt("memory", "5", memory.run, cluster, jobs, log_dir)
        attempt("intake", "6", intake.run, cluster, intake_count, log_dir)
        attempt("inflight", "7", inflight.run, cluster)
        attempt("wire", "8", wire.run, cluster)

    results["duration_s"] = round(time.monotonic() - started, 1)
    rows = report.build_rows(results)
    table = report.render_table(rows)
    results["table"] = table
    json_path = report.write_json(results, out_dir)
    plots = report.write_plots(results, out_dir)
    print()
    print(report.render_machine(results["machine"]))
    print()
    print(table)
    print()
    print(
        f"results: {json_path}" + (f"; plots: {', '.join(p.name for p in plots)}" if plots else "")
    )
    print(f"total time: {results['duration_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
