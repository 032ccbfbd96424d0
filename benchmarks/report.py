"""The one table, the JSON and the plots."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from benchmarks import inflight, intake

TARGETS = {
    "peer_ratio": 1.2,
    # movements/s, the engine counted until every transition has its audit row
    "equal_peer_ratio": 3.0,
    "equal_peer_cpu_ratio": 2.0,
    "ceiling_fraction": 0.6,
    "latency_p50_ms": 2.0,
    "latency_p99_ms": 5.0,
    "latency_load_p99_ms": 25.0,
    "history_ratio": 1.1,
    "inflight_ratio": 1.5,
    "polls_per_node": 3.0,  # the learned schedule (issue 14 part 5; today's phases: 4.6)
    "lag_pct": 5.0,
    "rss_mb": 100.0,
    "intake_per_s": 5000.0,
}


def _fmt(x: float | None, digits: int = 0) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if digits == 0:
        return f"{x:,.0f}"
    return f"{x:,.{digits}f}"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("HOLDS" if ok else "MISSED")


def _label(run: dict[str, Any]) -> str:
    unit = "runner" if run["system"] == "QTG engine" else "proc"
    plural = "s" if run["processes"] > 1 else ""
    setting = run.get("setting") or f"c={run['concurrency']}"
    equal = ", equal guarantees" if run.get("equal_guarantees") else ""
    return f"{run['system']}{equal} ({run['processes']} {unit}{plural}, {setting})"


def _cpu(run: dict[str, Any] | None, unit: str) -> str:
    """' database CPU N ms/<unit>, clients M ms;' when it was measured (a server on
    this machine; the clients: the run's worker processes, start-up included)."""
    ms = (run or {}).get("db_cpu_ms_per_job")
    if ms is None:
        return ""
    clients = (run or {}).get("client_cpu_ms_per_job")
    return f" database CPU {ms:.3f} ms/{unit}" + (
        ";" if clients is None else f", clients {clients:.3f} ms;"
    )


def _total_cpu(run: dict[str, Any]) -> float | None:
    """Server and clients' CPU per movement: an engine run's with its audit rows."""
    audited = run.get("with_audit_rows")
    if audited is not None:
        return audited.get("total_cpu_ms_per_job")  # type: ignore[no-any-return]
    db, clients = run.get("db_cpu_ms_per_job"), run.get("client_cpu_ms_per_job")
    return None if db is None or clients is None else db + clients


def _version(run: dict[str, Any]) -> str:
    return f"{run['system']} {run['version']}; " if run.get("version") else ""


def _writes(run: dict[str, Any], unit: str) -> str:
    """' N row writes/<unit>' from pg_stat_user_tables (inserts + updates +
    deletes), and ', N KB of WAL/<unit>' where the run measured it (the
    engine's: its drain, and with its audit chain's promotion)."""
    per = run.get("row_writes_per_job") or {}
    if not per:
        return ""
    if set(per) == {"testnet", "qtg_sim"}:
        text = (
            f" {per['testnet']:.1f} row writes/{unit} in the engine's tables"
            f" (+{per['qtg_sim']:.1f} in the sim's outside world)"
        )
    else:
        text = f" {sum(per.values()):.1f} row writes/{unit}"
    wal, chained = run.get("wal_bytes_per_job"), run.get("wal_bytes_per_job_chained")
    if wal is not None:
        text += f", {wal / 1024:.1f} KB of WAL/{unit}"
        if chained is not None and chained != wal:
            text += f" ({chained / 1024:.1f} KB with its audit chain promoted)"
    return text


def _write_rates(*runs: dict[str, Any] | None) -> str:
    """'; row writes/s: engine N, <peer> M, ...': the same figures in database writes."""
    parts = []
    for run in runs:
        per = (run or {}).get("row_writes_per_job") or {}
        if run and per:
            name = "ceiling" if "ceiling" in run["system"] else run["system"]
            engine_only = per.get("testnet", sum(per.values()))
            parts.append(f"{name} {_fmt(run['per_s'] * engine_only)}")
    return f"; row writes/s (own tables): {', '.join(parts)}" if parts else ""


def _live_chain(run: dict[str, Any]) -> bool:
    """An engine run whose audit_outbox_promoter ran beside the dispatchers."""
    return bool((run.get("audit_chain") or {}).get("live") or run.get("setting"))


def best(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in runs if "per_s" in r]
    return max(ok, key=lambda r: r["per_s"]) if ok else None


def _stages(mode: dict[str, Any]) -> str:
    """A latency run's p50 by stage (see benchmarks/latency.py), ms."""
    stages = mode.get("stages_p50_ms") or {}
    return " / ".join(f"{v:.2f}" for v in stages.values()) + " (finish>claim>intent>effect>report)"


def _report_trip(mode: dict[str, Any]) -> str:
    """The parent's report and its commit as the bench's round trip, within
    which the first stage begins."""
    trip = mode.get("report_round_trip_ms") or {}
    if not trip:
        return "parent's report + commit: not measured"
    return f"parent's report + commit round trip p50/p99 {trip['p50']:.2f} / {trip['p99']:.2f} ms"


def build_rows(results: dict[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    cases = results["cases"]

    # 1 throughput
    c1 = cases.get("throughput", {})
    if "error" in c1:
        rows.append(["1", "throughput", "could not run", "", "-", c1["error"]])
    elif c1:
        all_engine_runs = c1.get("engine", [])
        # the equal-guarantee runs: the audit chain measured after the drain
        engine_runs = [r for r in all_engine_runs if not _live_chain(r)]
        peer_runs = [r for r in c1.get("peers", []) if "per_s" in r]
        bare = best(c1.get("ceiling", []))
        best_peer = best(peer_runs)
        best_engine = best(engine_runs)
        for run in all_engine_runs:
            if "error" in run:
                rows.append(["1", _label(run), "could not run", "", "-", run["error"]])
                continue
            live = _live_chain(run)
            rows.append(
                [
                    "1",
                    f"{_label(run)}: movements/s",
                    _fmt(run["per_s"]),
                    "(as deployed)" if live else f">= {TARGETS['peer_ratio']}x best peer",
                    "-"
                    if live
                    else _verdict(
                        best_peer is not None
                        and run["per_s"] >= TARGETS["peer_ratio"] * best_peer["per_s"]
                    ),
                    f"{run['node_transitions_per_s']:,.0f} node transitions/s;"
                    + _cpu(run, "movement")
                    + f" wall {run['wall_s']:.1f} s,"
                    f" DB span {run['db_span_s']:.1f} s ({run['per_s_db_span']:,.0f}/s);"
                    + _writes(run, "movement")
                    + (
                        f"; the chain held every event {run['audit_chain']['lag_s']:.1f} s"
                        " after the last movement"
                        if live
                        else ""
                    ),
                ]
            )
            chain = None if live else run.get("audit_chain")
            if chain:
                rows.append(
                    [
                        "1",
                        f"{_label(run)}, its audit chain after the drain: movements/s",
                        _fmt(chain["movements_per_s"]),
                        "(reported)",
                        "-",
                        f"{chain['events']:,} events promoted in {chain['calls']:,} calls,"
                        f" {chain['seconds']:.1f} s ({_fmt(chain['events_per_s'])} events/s);"
                        + _cpu(chain, "movement")
                        + _writes(chain, "movement"),
                    ]
                )
        # one row per peer: its best run, the other settings beside it
        by_peer: dict[str, list[dict[str, Any]]] = {}
        for run in c1.get("peers", []):
            by_peer.setdefault(run["system"], []).append(run)
        for peer, runs in by_peer.items():
            good = [r for r in runs if "per_s" in r]
            if not good:
                why = "; ".join(str(r.get("error") or r.get("skipped", "")) for r in runs)
                rows.append(["1", peer, "could not run", "", "-", why])
                continue
            top = max(good, key=lambda r: r["per_s"])
            others = ", ".join(
                f"{r['processes']}p c={r['concurrency']}: "
                + (_fmt(r["per_s"]) if "per_s" in r else "failed")
                for r in runs
                if r is not top
            )
            rows.append(
                [
                    "1",
                    f"{_label(top)}: jobs/s",
                    _fmt(top["per_s"]),
                    "(peer, best run)",
                    "-",
                    _version(top)
                    + f"wall {top['wall_s']:.1f} s, bulk enqueue {top['enqueue_s']:.2f} s;"
                    + _cpu(top, "job")
                    + _writes(top, "job")
                    + f"; other runs {others}",
                ]
            )
        # the equal-guarantee peers: one row per peer (its best run), then the ratio
        eq_by_peer: dict[str, list[dict[str, Any]]] = {}
        for run in c1.get("equal_peers", []):
            eq_by_peer.setdefault(run["system"], []).append(run)
        eq_best: list[dict[str, Any]] = []
        for peer, runs in eq_by_peer.items():
            good = [r for r in runs if "per_s" in r]
            if not good:
                why = "; ".join(str(r.get("error") or r.get("skipped", "")) for r in runs)
                rows.append(["1", f"{peer}, equal guarantees", "could not run", "", "-", why])
                continue
            top = max(good, key=lambda r: r["per_s"])
            eq_best.append(top)
            others = ", ".join(
                f"{r['processes']}p: "
                + (_fmt(r["per_s"]) if "per_s" in r else "failed")
                + (
                    f" ({r['db_cpu_ms_per_job']:.3f} ms CPU)"
                    if r.get("db_cpu_ms_per_job") is not None
                    else ""
                )
                for r in runs
                if r is not top
            )
            rows.append(
                [
                    "1",
                    f"{_label(top)}: movements/s",
                    _fmt(top["per_s"]),
                    "(equal-guarantee peer)",
                    "-",
                    _version(top)
                    + f"{top['jobs']:,} movements;"
                    + _cpu(top, "movement")
                    + f" wall {top['wall_s']:.1f} s, enqueue {top['enqueue_s']:.1f} s;"
                    + _writes(top, "movement")
                    + f"; other runs {others}",
                ]
            )
        eq_top = max(eq_best, key=lambda r: r["per_s"]) if eq_best else None
        audited = [r for r in all_engine_runs if r.get("with_audit_rows")]
        if audited and eq_top:
            top_audited = max(audited, key=lambda r: r["with_audit_rows"]["per_s"])
            figure = top_audited["with_audit_rows"]["per_s"]
            ratio = figure / eq_top["per_s"]
            each = ", ".join(
                f"{_label(r)} {_fmt(r['with_audit_rows']['per_s'])}"
                + (" (promoted live)" if _live_chain(r) else " (drain, then promotion)")
                for r in audited
            )
            drain = (
                f"; the drain alone, its audit rows promoted later: {_label(best_engine)}"
                f" {_fmt(best_engine['per_s'])}, {best_engine['per_s'] / eq_top['per_s']:.2f}x"
                if best_engine
                else ""
            )
            rows.append(
                [
                    "1",
                    "engine, every transition's audit row written / best equal-guarantee"
                    " peer: movements/s",
                    _fmt(ratio, 2),
                    f">= {TARGETS['equal_peer_ratio']:.0f}",
                    _verdict(ratio >= TARGETS["equal_peer_ratio"]),
                    f"{_fmt(figure)} against {_label(eq_top)} {_fmt(eq_top['per_s'])};"
                    f" each engine run until its audit_log held every event: {each}{drain}",
                ]
            )
        cpu_peers = [r for r in eq_best if r.get("db_cpu_ms_per_job")]
        cpu_engine = [
            r for r in audited if r["with_audit_rows"].get("db_cpu_ms_per_job") is not None
        ]
        if cpu_peers and cpu_engine:
            lean_peer = min(cpu_peers, key=lambda r: r["db_cpu_ms_per_job"])
            lean_engine = min(cpu_engine, key=lambda r: r["with_audit_rows"]["db_cpu_ms_per_job"])
            engine_ms = lean_engine["with_audit_rows"]["db_cpu_ms_per_job"]
            ratio = lean_peer["db_cpu_ms_per_job"] / engine_ms
            rows.append(
                [
                    "1",
                    "database CPU per movement, audit rows counted: leanest equal-guarantee"
                    " peer / engine",
                    _fmt(ratio, 2),
                    f">= {TARGETS['equal_peer_cpu_ratio']:.0f}",
                    _verdict(ratio >= TARGETS["equal_peer_cpu_ratio"]),
                    f"engine {engine_ms:.3f} ms ({_label(lean_engine)}"
                    + (
                        "; its chain promoted live"
                        if _live_chain(lean_engine)
                        else f"; its drain alone {lean_engine['db_cpu_ms_per_job']:.3f} ms"
                    )
                    + "),"
                    + f" {lean_peer['system']} {lean_peer['db_cpu_ms_per_job']:.3f} ms; "
                    + ", ".join(f"{r['system']} {r['db_cpu_ms_per_job']:.3f}" for r in cpu_peers)
                    + " ms",
                ]
            )
        total_peers = [r for r in eq_best if _total_cpu(r) is not None]
        total_engine = [r for r in audited if _total_cpu(r) is not None]
        if total_peers and total_engine:
            lean_peer = min(total_peers, key=lambda r: _total_cpu(r) or 0.0)
            lean_engine = min(total_engine, key=lambda r: _total_cpu(r) or 0.0)
            peer_ms, engine_ms = _total_cpu(lean_peer) or 0.0, _total_cpu(lean_engine) or 0.0
            rows.append(
                [
                    "1",
                    "total CPU per movement (server and clients), audit rows counted:"
                    " leanest equal-guarantee peer / engine",
                    _fmt(peer_ms / engine_ms, 2),
                    "(reported)",
                    "-",
                    f"engine {engine_ms:.3f} ms ({_label(lean_engine)}),"
                    f" {lean_peer['system']} {peer_ms:.3f} ms; "
                    + ", ".join(f"{r['system']} {_total_cpu(r):.3f}" for r in total_peers)
                    + " ms; clients: every worker process of the run, start-up included",
                ]
            )
        if bare:
            others = ", ".join(
                f"{r['concurrency']} conns: {_fmt(r['per_s'])}"
                for r in c1.get("ceiling", [])
                if r is not bare
            )
            rows.append(
                [
                    "1",
                    f"bare SKIP LOCKED ceiling (10 rows/tx, {bare['concurrency']} conns): rows/s",
                    _fmt(bare["per_s"]),
                    "(reference, best)",
                    "-",
                    f"wall {bare['wall_s']:.2f} s;" + _writes(bare, "row") + f"; others {others}",
                ]
            )
        if best_engine and best_peer:
            ratio = best_engine["per_s"] / best_peer["per_s"]
            rows.append(
                [
                    "1",
                    "best engine / best peer",
                    _fmt(ratio, 2),
                    f">= {TARGETS['peer_ratio']}",
                    _verdict(ratio >= TARGETS["peer_ratio"]),
                    f"best peer: {_label(best_peer)}" + _write_rates(best_engine, best_peer, bare),
                ]
            )
        if best_engine and bare:
            frac = best_engine["per_s"] / bare["per_s"]
            rows.append(
                [
                    "1",
                    "best engine / bare ceiling",
                    _fmt(frac, 3),
                    f">= {TARGETS['ceiling_fraction']}",
                    _verdict(frac >= TARGETS["ceiling_fraction"]),
                    f"ceiling {_fmt(bare['per_s'])} rows/s",
                ]
            )

    # 2 latency
    c2 = cases.get("latency", {})
    if "error" in c2:
        rows.append(["2", "DAG step latency", "could not run", "", "-", c2["error"]])
    elif c2:
        on, off = c2["on"], c2["off"]
        rows.append(
            [
                "2",
                f"DAG step parent COMPLETED -> child SUBMITTED, notify on (n={on['n']}):"
                " p50/p95/p99 ms",
                f"{on['p50_ms']:.1f} / {on['p95_ms']:.1f} / {on['p99_ms']:.1f}",
                f"p50 <= {TARGETS['latency_p50_ms']:.0f}, p99 <= {TARGETS['latency_p99_ms']:.0f}",
                _verdict(
                    on["p50_ms"] <= TARGETS["latency_p50_ms"]
                    and on["p99_ms"] <= TARGETS["latency_p99_ms"]
                ),
                f"max {on['max_ms']:.1f} ms; p50 by stage: {_stages(on)}; {_report_trip(on)}",
            ]
        )
        for key, deployment in (
            ("under_load", "dispatcher and observer in one process"),
            ("under_load_split", "one process per worker"),
        ):
            loaded = c2.get(key)
            if not isinstance(loaded, dict):
                continue
            flight = loaded.get("in_flight", {})
            rows.append(
                [
                    "2",
                    f"same, while {flight.get('mean', 0):,} other movements"
                    f" run, {deployment} (n={loaded['n']}): p50/p95/p99 ms",
                    f"{loaded['p50_ms']:.1f} / {loaded['p95_ms']:.1f} / {loaded['p99_ms']:.1f}",
                    f"p99 <= {TARGETS['latency_load_p99_ms']:.0f}",
                    _verdict(loaded["p99_ms"] <= TARGETS["latency_load_p99_ms"]),
                    f"max {loaded['max_ms']:.1f} ms; in flight {flight.get('min', 0):,}-"
                    f"{flight.get('max', 0):,}, {loaded.get('load_finished', 0):,} finished"
                    f" ({loaded.get('load_nodes_finished_per_s', 0):,.0f} of their nodes a"
                    f" second while measured); p50 by stage: {_stages(loaded)};"
                    f" {_report_trip(loaded)}",
                ]
            )
        rows.append(
            [
                "2",
                f"same, notify off (polling 1 s, n={off['n']}): p50/p95/p99 ms",
                f"{off['p50_ms']:.0f} / {off['p95_ms']:.0f} / {off['p99_ms']:.0f}",
                "(reference)",
                "-",
                "no LISTEN: the dispatcher's two loops, each polling every 1 s",
            ]
        )

    # 3 history
    c3 = cases.get("history", {})
    if "error" in c3:
        rows.append(["3", "history flatness", "could not run", "", "-", c3["error"]])
    elif c3:
        levels = c3["levels"]
        for proc in ("claim_ready_nodes", "observe_candidates"):
            figures = " / ".join(f"{levels[k][proc]['server_ms_median']:.3f}" for k in levels)
            ratio = c3["ratio_1m_vs_0"][proc]
            rows.append(
                [
                    "3",
                    f"{proc} with 0 / 100k / 1M finished nodes: ms (server, median)",
                    figures,
                    f"1M <= {TARGETS['history_ratio']}x 0",
                    _verdict(ratio <= TARGETS["history_ratio"]),
                    f"1M/0 = {ratio:.2f}x; client round trip "
                    + " / ".join(f"{levels[k][proc]['client_ms_median']:.2f}" for k in levels)
                    + " ms",
                ]
            )

    # 4 pacing
    c4 = cases.get("pacing", {})
    if "error" in c4:
        rows.append(["4", "pacing efficiency", "could not run", "", "-", c4["error"]])
    elif c4:
        e, f = c4["engine"], c4["fixed"]
        learned = c4.get("learned")
        if learned:
            rows.append(
                [
                    "4",
                    f"polls per node, learned schedule, {c4['nodes']} nodes,"
                    f" {c4['baseline_s']:.0f} s baseline (mean / p95)",
                    f"{learned['polls_mean']:.2f} / {learned['polls_p95']}",
                    f"<= {TARGETS['polls_per_node']:.0f}",
                    _verdict(learned["polls_mean"] <= TARGETS["polls_per_node"]),
                    f"today's phases, same completions: {e['polls_mean']:.2f} / {e['polls_p95']};"
                    f" fixed {c4['fixed_interval_s']:.1f} s interval at the phases' mean lag:"
                    f" {f['polls_mean']:.2f} / {f['polls_p95']}",
                ]
            )
            rows.append(
                [
                    "4",
                    "detection lag, learned schedule, % of baseline (mean / p95)",
                    f"{learned['lag_mean_pct_of_baseline']:.1f}%"
                    f" / {learned['lag_p95_pct_of_baseline']:.1f}%",
                    f"<= {TARGETS['lag_pct']:.0f}%",
                    _verdict(learned["lag_mean_pct_of_baseline"] <= TARGETS["lag_pct"]),
                    f"today's phases: {e['lag_mean_pct_of_baseline']:.1f}%"
                    f" / {e['lag_p95_pct_of_baseline']:.1f}%; fixed interval:"
                    f" {f['lag_mean_pct_of_baseline']:.1f}% / {f['lag_p95_pct_of_baseline']:.1f}%",
                ]
            )
        else:
            rows.append(
                [
                    "4",
                    f"polls per node, {c4['nodes']} nodes, {c4['baseline_s']:.0f} s baseline"
                    " (mean / p95)",
                    f"{e['polls_mean']:.2f} / {e['polls_p95']}",
                    f"<= {TARGETS['polls_per_node']:.0f}",
                    _verdict(e["polls_mean"] <= TARGETS["polls_per_node"]),
                    f"fixed {c4['fixed_interval_s']:.1f} s interval at the same mean lag:"
                    f" {f['polls_mean']:.2f} / {f['polls_p95']}",
                ]
            )
        degraded = c4.get("degraded")
        if degraded:
            dl, dp = degraded["learned"], degraded["phases"]
            rows.append(
                [
                    "4",
                    f"lane {degraded['slowdown']:.0f}x slower than learned"
                    f" ({degraded.get('nodes', c4['nodes'])} nodes): polls per node (mean / p95)",
                    f"{dl['polls_mean']:.2f} / {dl['polls_p95']}",
                    "<= phases",
                    _verdict(degraded["nodes_polled_more_than_phases"] == 0),
                    f"phases: {dp['polls_mean']:.2f} / {dp['polls_p95']};"
                    f" nodes polled more than by the phases:"
                    f" {degraded['nodes_polled_more_than_phases']};"
                    f" lag {dl['lag_mean_pct_of_baseline']:.1f}% (phases"
                    f" {dp['lag_mean_pct_of_baseline']:.1f}%)",
                ]
            )

    # 5 memory
    c5 = cases.get("memory") or {}
    c1 = cases.get("throughput", {})
    runs = [r for r in c1.get("engine", []) if "peak_rss_mb" in r] if isinstance(c1, dict) else []
    during_case1 = "; ".join(
        f"case 1, {r['processes']} runner(s){' and the promoter' if _live_chain(r) else ''}:"
        f" {', '.join(str(x) for x in r['peak_rss_mb'])}"
        for r in runs
    )
    if isinstance(c5, dict) and "loaded" in c5:
        loaded, sim = c5["loaded"], c5.get("sim_only") or {}
        health = loaded.get("executor_health") or {}
        statuses = ", ".join(f"{k} {v['status']}" for k, v in health.items())
        rows.append(
            [
                "5",
                "runner peak RSS, every executor loaded (`qtg run`, chains + venue): MB",
                _fmt(loaded["peak_rss_mb"], 1),
                f"<= {TARGETS['rss_mb']:.0f}",
                _verdict(loaded["peak_rss_mb"] <= TARGETS["rss_mb"]),
                f"health: {statuses}",
            ]
        )
        rows.append(
            [
                "5",
                "runner peak RSS, sim only (`qtg worker node_dispatcher`): MB",
                _fmt(sim.get("peak_rss_mb"), 1),
                f"<= {TARGETS['rss_mb']:.0f}",
                _verdict(sim.get("peak_rss_mb", 1e9) <= TARGETS["rss_mb"]),
                f"{c5['movements']:,} sim movements drained by each"
                + (f"; {during_case1}" if during_case1 else ""),
            ]
        )
    elif runs:
        peak = max(max(r["peak_rss_mb"]) for r in runs)
        rows.append(
            [
                "5",
                "runner peak RSS during case 1, sim only (MB)",
                _fmt(peak, 1),
                f"<= {TARGETS['rss_mb']:.0f}",
                _verdict(peak <= TARGETS["rss_mb"]),
                during_case1,
            ]
        )
    if isinstance(c5, dict) and "error" in c5:
        rows.append(["5", "runner memory", "could not run", "", "-", c5["error"]])

    # 6 intake
    rows.extend(intake.report_rows(cases, TARGETS["intake_per_s"]))

    # 7 in-flight scale
    c7 = cases.get("inflight", {})
    if "error" in c7:
        rows.append(["7", "in-flight scale", "could not run", "", "-", c7["error"]])
    elif c7:
        levels = c7["levels"]
        names = {
            "claim": "observer claim (observe_candidates + claim_observe)",
            "complete_observe_pending": "complete_observe PENDING",
            "complete_observe_completed": "complete_observe COMPLETED",
            "chunk_claim_per_node": f"claim_observe_batch of {inflight.CHUNK}, per node",
            "chunk_complete_pending_per_node": (
                f"complete_observe_batch of {inflight.CHUNK} PENDING, per node"
            ),
        }
        for key, label in names.items():
            if key == "claim":
                figures = " / ".join(f"{c7['claim_ms'][k]:.3f}" for k in levels)
                beside = "; ".join(
                    f"{k}: candidates {levels[k]['observe_candidates']['server_ms_median']:.3f}"
                    f" + claim {levels[k]['claim_observe']['server_ms_median']:.3f}"
                    for k in levels
                )
            else:
                figures = " / ".join(f"{levels[k][key]['server_ms_median']:.3f}" for k in levels)
                beside = "p95 " + " / ".join(
                    f"{levels[k][key]['server_ms_p95']:.3f}" for k in levels
                )
            ratio = c7["ratio_100k_vs_1k"][key]
            rows.append(
                [
                    "7",
                    f"{label}, 1k / 100k in flight: ms (server, median)",
                    figures,
                    f"100k <= {TARGETS['inflight_ratio']}x 1k",
                    _verdict(ratio <= TARGETS["inflight_ratio"]),
                    f"100k/1k = {ratio:.2f}x; {beside}",
                ]
            )

        writes = {k: levels[k]["poll_writes"] for k in levels if "poll_writes" in levels[k]}
        if writes:
            most = max(w["node_versions"] for w in writes.values())
            rows.append(
                [
                    "7",
                    "a poll that finds nothing, 1k / 100k in flight: node row versions a node",
                    " / ".join(f"{w['node_versions']:g}" for w in writes.values()),
                    "<= 1",
                    _verdict(most <= 1),
                    "2 and 1.65 KB of WAL before (the claim wrote one); now the claim "
                    + " / ".join(f"{w['claim_node_versions']:g}" for w in writes.values())
                    + ", row writes "
                    + " / ".join(f"{w['row_writes']:g}" for w in writes.values())
                    + ", WAL bytes "
                    + " / ".join(f"{w['wal_bytes']:,}" for w in writes.values()),
                ]
            )

    # 8 requests at the wire
    c8 = cases.get("wire", {})
    if "error" in c8 or "skipped" in c8:
        rows.append(["8", "requests at the wire", "could not run", "", "-",
                     c8.get("error") or c8["skipped"]])  # fmt: skip
    elif c8:
        goals, before = c8["goals"], c8["before"]
        rows.append(
            [
                "8",
                "CCTP burn waiting for Iris: requests a poll",
                _fmt(c8["per_poll"], 2),
                f"<= {goals['poll']:g}",
                _verdict(c8["per_poll"] is not None and c8["per_poll"] <= goals["poll"]),
                f"{before['poll']} before; {c8['polls']} polls of {c8['batch'] + 1} final burns"
                f" over {c8['rounds']} rounds: {_asked(c8['poll_asked'])}"
                f"{_http(c8.get('http_per_poll'))}",
            ]
        )
        for name, label in (("ccip", "CCIP"), ("stargate", "Stargate taxi")):
            polled = c8.get(name)
            if not polled:
                continue
            goal = goals[f"{name}_poll"]
            rows.append(
                [
                    "8",
                    f"{label} send waiting for delivery: requests a poll",
                    _fmt(polled["per_poll"], 2),
                    f"<= {goal:g}",
                    _verdict(polled["per_poll"] is not None and polled["per_poll"] <= goal),
                    f"{before[f'{name}_poll']} before; {polled['polls']} polls of {c8['sends']}"
                    f" final sends over {c8['rounds']} rounds: {_asked(polled['asked'])}"
                    f"{_http(polled.get('http_per_poll'))}",
                ]
            )
        for key, label, figure, http in (
            (
                "submit_alone",
                "CCTP burn submitted alone: requests",
                c8["submit_alone"],
                c8.get("submit_alone_http"),
            ),
            (
                "submit_batch",
                f"CCTP burns submitted {c8['batch']} together: requests a burn",
                c8["submit_batch_per_burn"],
                c8.get("submit_batch_http_per_burn"),
            ),
        ):
            rows.append(
                [
                    "8",
                    label,
                    _fmt(figure, 2),
                    f"<= {goals['submit']:g}",
                    _verdict(figure <= goals["submit"]),
                    f"{before['submit']} before: {_asked(c8[f'{key}_asked'])}{_http(http)}",
                ]
            )

    return rows


def _http(figure: float | None) -> str:
    """The HTTP requests those calls took (JSON-RPC batches), when measured."""
    return "" if figure is None else f"; in {figure:g} HTTP requests (JSON-RPC batches)"


def _asked(counted: dict[str, int]) -> str:
    """'eth_call 3, eth_getBalance 1, ...': requests by what they asked, most first."""
    return ", ".join(f"{m} {n}" for m, n in sorted(counted.items(), key=lambda kv: -kv[1]))


def render_table(rows: list[list[str]]) -> str:
    header = ["case", "measure", "figure", "target", "verdict", "beside it"]
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header) - 1)]

    def line(r: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]

    sep = "  ".join("-" * w for w in widths) + "  " + "-" * 10
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def render_machine(machine: dict[str, Any]) -> str:
    s = machine["settings"]
    return (
        f"machine: {machine['cores']} cores ({machine['cpu']}), {machine['memory_gib']} GiB,"
        f" {machine['os']};"
        f" PostgreSQL {machine['postgres']} ({machine['server']}):"
        f" shared_buffers {s['shared_buffers']}, fsync {s['fsync']},"
        f" synchronous_commit {s['synchronous_commit']}, full_page_writes {s['full_page_writes']},"
        f" max_wal_size {s['max_wal_size']}, work_mem {s['work_mem']}, jit {s['jit']}"
    )


def write_json(results: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    path.write_text(json.dumps(results, indent=2, default=str))
    return path


def write_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made: list[Path] = []
    cases = results["cases"]

    c1 = cases.get("throughput") or {}
    if c1 and "error" not in c1:
        runs = [
            r
            for r in c1.get("engine", [])
            + c1.get("peers", [])
            + c1.get("equal_peers", [])
            + c1.get("ceiling", [])
            if "per_s" in r
        ]
        if runs:
            fig, ax = plt.subplots(figsize=(9, 0.45 * len(runs) + 1.5))
            labels = [
                _label(r)
                if r["system"] != "bare SKIP LOCKED ceiling"
                else f"bare ceiling ({r['concurrency']} conns)"
                for r in runs
            ]
            colors = [
                "tab:blue"
                if r["system"] == "QTG engine"
                else (
                    "tab:gray"
                    if "ceiling" in r["system"]
                    else ("tab:green" if r.get("equal_guarantees") else "tab:orange")
                )
                for r in runs
            ]
            ax.barh(labels, [r["per_s"] for r in runs], color=colors)
            ax.set_xscale("log")
            ax.invert_yaxis()
            ax.set_xlabel(
                "movements (engine, equal-guarantee peers in green) or no-op jobs per second (log)"
            )
            ax.set_title(f"Case 1: draining {runs[0]['jobs']:,} one-step movements / no-op jobs")
            fig.tight_layout()
            made.append(out_dir / "throughput.png")
            fig.savefig(made[-1], dpi=110)
            plt.close(fig)
    c5 = cases.get("memory") or {}
    mem = [r for r in c1.get("engine", []) if r.get("rss_samples_mb")] if "error" not in c1 else []
    mem5 = {
        label: c5[key]["rss_samples_mb"]
        for key, label in (("sim_only", "sim only"), ("loaded", "every executor loaded"))
        if isinstance(c5, dict) and isinstance(c5.get(key), dict) and c5[key].get("rss_samples_mb")
    }
    if mem or mem5:
        fig, ax = plt.subplots(figsize=(8, 4))
        for r in mem:
            for name, samples in r["rss_samples_mb"].items():
                if samples:
                    ax.plot([t for t, _ in samples], [m for _, m in samples], label=name)
        for label, samples in mem5.items():
            ax.plot([t for t, _ in samples], [m for _, m in samples], label=f"case 5: {label}")
        ax.axhline(TARGETS["rss_mb"], color="red", linestyle="--", label="target")
        ax.set_xlabel("seconds since launch")
        ax.set_ylabel("RSS (MB)")
        ax.set_title("Case 5: runner process memory (case 1's runners and case 5's)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        made.append(out_dir / "runner_memory.png")
        fig.savefig(made[-1], dpi=110)
        plt.close(fig)

    c2 = cases.get("latency") or {}
    if c2 and "error" not in c2:
        modes = [
            m
            for m in ("on", "under_load", "under_load_split", "off")
            if isinstance(c2.get(m), dict)
        ]
        fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4))
        for ax, mode in zip(axes, modes, strict=True):
            samples = sorted(c2[mode]["samples_ms"])
            if samples:
                ax.plot(samples, [i / len(samples) for i in range(1, len(samples) + 1)])
            ax.set_xlabel("parent COMPLETED -> child SUBMITTED (ms)")
            ax.set_ylabel("fraction of steps")
            ax.set_title(
                {
                    "under_load": "Case 2: under load, one process",
                    "under_load_split": "Case 2: under load, a process per worker",
                }.get(mode, f"Case 2: notifications {mode}")
            )
            if mode == "on":
                ax.axvline(
                    TARGETS["latency_p50_ms"], color="green", linestyle=":", label="p50 target"
                )
                ax.axvline(
                    TARGETS["latency_p99_ms"], color="red", linestyle="--", label="p99 target"
                )
                ax.legend(fontsize=8)
            elif mode.startswith("under_load"):
                ax.axvline(
                    TARGETS["latency_load_p99_ms"], color="red", linestyle="--", label="p99 target"
                )
                ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        made.append(out_dir / "dag_latency.png")
        fig.savefig(made[-1], dpi=110)
        plt.close(fig)

    c3 = cases.get("history") or {}
    if c3 and "error" not in c3:
        levels = list(c3["levels"])
        fig, ax = plt.subplots(figsize=(7, 4))
        width = 0.38
        for i, proc in enumerate(("claim_ready_nodes", "observe_candidates")):
            xs = [j + (i - 0.5) * width for j in range(len(levels))]
            ax.bar(
                xs, [c3["levels"][k][proc]["server_ms_median"] for k in levels], width, label=proc
            )
        ax.set_xticks(range(len(levels)), [f"{int(k):,} finished nodes" for k in levels])
        ax.set_ylabel("ms per call (server, median)")
        ax.set_title("Case 3: claim cost as history grows")
        ax.legend()
        fig.tight_layout()
        made.append(out_dir / "history_flatness.png")
        fig.savefig(made[-1], dpi=110)
        plt.close(fig)

    c4 = cases.get("pacing") or {}
    if c4 and "error" not in c4:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4))
        e, f = c4["polls_hist"]["engine"], c4["polls_hist"]["fixed"]
        lp = c4["polls_hist"].get("learned")
        top = max(max(e), max(f), max(lp or [0]))
        bins = [x - 0.5 for x in range(1, top + 2)]
        series = [e, f] + ([lp] if lp else [])
        names = ["today's phases", f"fixed {c4['fixed_interval_s']:.1f} s"]
        axes[0].hist(series, bins=bins, label=names + (["learned schedule"] if lp else []))
        axes[0].axvline(
            TARGETS["polls_per_node"], color="red", linestyle="--", label="target (mean)"
        )
        axes[0].set_xlabel("observation polls per node")
        axes[0].set_ylabel("nodes")
        axes[0].legend(fontsize=8)
        ll = c4["lags_s"].get("learned")
        axes[1].hist(
            [c4["lags_s"]["engine"], c4["lags_s"]["fixed"]] + ([ll] if ll else []),
            bins=30,
            label=["today's phases", "fixed interval"] + (["learned schedule"] if ll else []),
        )
        axes[1].axvline(
            c4["baseline_s"] * TARGETS["lag_pct"] / 100,
            color="red",
            linestyle="--",
            label=f"{TARGETS['lag_pct']:.0f}% of baseline",
        )
        axes[1].set_xlabel("detection lag (s)")
        axes[1].legend(fontsize=8)
        fig.suptitle(f"Case 4: {c4['nodes']} nodes, {c4['baseline_s']:.0f} s baseline")
        fig.tight_layout()
        made.append(out_dir / "pacing.png")
        fig.savefig(made[-1], dpi=110)
        plt.close(fig)
    return made
