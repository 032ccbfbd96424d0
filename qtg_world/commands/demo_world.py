"""`qtg demo` on the local outside world: real transactions on the local chains
and real HTTP to the local services, through the whole engine.

As the admin it brings the local outside world up (`qtg world up`'s work: the
chains, the doubles' serve process, the chain registry) unless it runs, sets
the protocol lanes' baselines to the real timings divided by the world's time
scale (a deploy step), and runs a set of movements over the demo's logins
(alice creates, bob approves, the workers run as runner1). One movement is
first handed to a dispatcher process that kills itself right after its
broadcast (the `after_submit` failpoint): the lost receipt is found again from
chain evidence by the recovery of the runtime that follows. At the end every
movement's state is checked against what it should be, every node's
transactions are printed, and the treasury's balances on each chain are
checked against what the movements moved. The demo (not a drill) also checks
the sidecars' work (demo_sidecars): one signed callback per movement state
change received by a local receiver, and the audit chain verified.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from psycopg import AsyncConnection
from rich.console import Console

from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WorkerContext, WorkerEntry
from qtg_runner.runtime import Runtime, supervise
from qtg_runner.wakeup import Wakeup
from qtg_runner.workers import balance_snapshot, verify_drift_worker
from qtg_world.callback_receiver import CallbackReceiver
from qtg_world.chains.local import RunningChain, load_artifact
from qtg_world.chains.stargate import FEE_MILLIONTH as STARGATE_FEE_MILLIONTH
from qtg_world.commands.demo_logins import DemoLogins
from qtg_world.commands.demo_sidecars import (
    callback_summary,
    check_callbacks,
    finish_audit,
    start_receiver,
)

out = Console(highlight=False)

USDC_UNITS = Decimal(10) ** 6

TRANSFER_LANE = "evm"
"""The lane of plain transfers: a transfer is final after the chain's finality
depth, so its baseline is a few blocks."""

REAL_TIMINGS: dict[str, float] = {
    "cctp-fast": 14,
    "cctp-standard": 960,
    "ccip": 1200,
    "stargate-taxi": 60,
    "stargate-bus": 600,
    "bybit-withdraw": 300,
    "bybit-deposit": 600,
}
"""The protocol lanes' baselines in real seconds (migration 0020 seeds the same):
the demo sets each to its timing divided by the world's time scale."""

CCTP_MAX_FEE_BPS = 10
"""The most a demo burn may pay for a fast attestation (0.1%)."""

STARGATE_FEE_BPS = Decimal(STARGATE_FEE_MILLIONTH) / 100
STARGATE_FEE_ROUNDING = Decimal("0.000001")
"""The local Stargate pools' fee: 1 basis point (their fee library's), which
it rounds up by a base unit."""

CRASH_DEADLINE_S = 60.0
"""How long the crashing dispatcher may take to claim, broadcast and die."""

DEMO_CONCURRENCY = 8
"""The demo's runtime: its pools (runtime.pool_connections: 23 connections) fit
in the runner login's connection limit (30) with room for the balance reads."""


@dataclass(frozen=True)
class Change:
    """A balance change a movement makes, in USDC: at least ``low``, at most ``high``."""

    chain: str
    address: str
    low: Decimal
    high: Decimal


@dataclass(frozen=True)
class WorldMovement:
    name: str
    amount: Decimal
    nodes: list[dict[str, Any]]
    expected: str
    changes: list[Change] = field(default_factory=list)
    crash_after_submit: bool = False
    """Handed first to a dispatcher process that dies right after its broadcast."""
    exchange_change: Decimal = Decimal(0)
    """What it moves on the exchange's FUND account (USDC): deposits credited in,
    withdrawals out."""


@dataclass(frozen=True)
class WorldView:
    """What the movements are built from: the running chains by key, the
    treasury accounts (the same on every chain) and an address on no
    allow-list."""

    chains: dict[str, RunningChain]
    treasury: list[str]
    deposit: str = ""
    """The exchange's USDC deposit address (the same on every local chain)."""
    outsider: str = "0x" + "0bad" * 10


def transfer(key: str, chain: str, sender: str, recipient: str, *after: str) -> dict[str, Any]:
    return {
        "key": key,
        "executor": "evm_transfer",
        "depends_on": list(after),
        "config": {"lane": TRANSFER_LANE, "chain": chain, "from": sender, "to": recipient},
    }


def cctp(
    key: str, source: str, destination: str, sender: str, recipient: str, finality: str, *after: str
) -> list[dict[str, Any]]:
    """A CCTP v2 transfer: the burn on ``source`` (its lane waits for the
    attestation), then the mint on ``destination`` with the attested message."""
    return [
        {
            "key": f"{key}-burn",
            "executor": "cctp_burn",
            "depends_on": list(after),
            "config": {
                "lane": f"cctp-{finality}",
                "chain": source,
                "destination_chain": destination,
                "from": sender,
                "to": recipient,
                "finality": finality,
                "max_fee_bps": CCTP_MAX_FEE_BPS,
            },
        },
        {
            "key": f"{key}-mint",
            "executor": "cctp_mint",
            "depends_on": [f"{key}-burn"],
            "config": {
                "lane": TRANSFER_LANE,
                "chain": destination,
                "source_chain": source,
                "from": sender,
                "to": recipient,
            },
        },
    ]


def stargate(
    key: str,
    source: str,
    destination: str,
    sender: str,
    recipient: str,
    mode: str,
    *after: str,
    max_slippage_bps: int | None = None,
) -> dict[str, Any]:
    """A Stargate v2 send: a taxi goes at once, a bus when it is driven; the
    least received is the route's default unless ``max_slippage_bps`` says."""
    config: dict[str, Any] = {
        "lane": f"stargate-{mode}",
        "source": source,
        "destination": destination,
        "from": sender,
        "to": recipient,
        "mode": mode,
    }
    if max_slippage_bps is not None:
        config["max_slippage_bps"] = max_slippage_bps
    return {"key": key, "executor": "stargate", "depends_on": list(after), "config": config}


def ccip(key: str, source: str, destination: str, sender: str, recipient: str) -> dict[str, Any]:
    """A CCIP token transfer: ccipSend on the source, executed on the destination
    by the executing network (a failed execution is the reaper's)."""
    return {
        "key": key,
        "executor": "ccip",
        "depends_on": [],
        "config": {
            "lane": "ccip",
            "chain": source,
            "destination_chain": destination,
            "from": sender,
            "to": recipient,
        },
    }


def venue_step(key: str, executor: str, chain: str, *after: str, **config: str) -> dict[str, Any]:
    """A step at the exchange venue ``bybit``: a withdrawal to ``to`` on
    ``chain``, or the confirmation that a transfer into its deposit address is
    credited."""
    lane = "bybit-withdraw" if executor == "bybit_withdraw" else "bybit-deposit"
    return {
        "key": key,
        "executor": executor,
        "depends_on": list(after),
        "config": {"lane": lane, "venue": "bybit", "chain": chain, **config},
    }


def bridged(
    source: str,
    destination: str,
    sender: str,
    recipient: str,
    amount: Decimal,
    fee_bps: Decimal | int,
    fee_rounding: Decimal = Decimal(0),
) -> list[Change]:
    """What a bridge moves: the amount leaves the sender, the amount less at most
    its fee (``fee_bps`` of it, and ``fee_rounding`` USDC more) arrives."""
    fee = amount * fee_bps / 10_000 + fee_rounding
    return [
        Change(source, sender, -amount, -amount),
        Change(destination, recipient, amount - fee, amount),
    ]


def moved(chain: str, sender: str, recipient: str, amount: Decimal) -> list[Change]:
    return [Change(chain, sender, -amount, -amount), Change(chain, recipient, amount, amount)]


def world_movements(w: WorldView) -> list[WorldMovement]:
    t1, t2 = w.treasury[0], w.treasury[1]
    a, b = sorted(w.chains)[:2]
    return [
        WorldMovement(
            "Lost receipt: the dispatcher dies after its broadcast, recovered from chain evidence",
            Decimal("125"),
            [transfer("pay", a, t1, t2)],
            "COMPLETED",
            moved(a, t1, t2, Decimal("125")),
            crash_after_submit=True,
        ),
        WorldMovement(
            "CCTP fast burn -> mint -> Bybit deposit, credited by the exchange",
            Decimal("250"),
            [
                *cctp("usdc", a, b, t1, t2, "fast"),
                transfer("deposit", b, t2, w.deposit, "usdc-mint"),
                venue_step("credited", "bybit_deposit", b, "deposit", coin="USDC"),
            ],
            "COMPLETED",
            [
                Change(a, t1, Decimal("-250"), Decimal("-250")),
                # the mint brings the amount less the fee, the deposit takes the amount
                Change(b, t2, Decimal("-250") * CCTP_MAX_FEE_BPS / 10_000, Decimal(0)),
            ],
            exchange_change=Decimal("250"),
        ),
        WorldMovement(
            "CCTP standard: burn, attested after finality, minted",
            Decimal("1000"),
            cctp("usdc", b, a, t2, t1, "standard"),
            "COMPLETED",
            bridged(b, a, t2, t1, Decimal("1000"), CCTP_MAX_FEE_BPS),
        ),
        WorldMovement(
            "CCIP: ccipSend, executed on the other chain's OffRamp",
            Decimal("500"),
            [ccip("send", b, a, t2, t1)],
            "COMPLETED",
            bridged(b, a, t2, t1, Decimal("500"), 0),
        ),
        WorldMovement(
            "Stargate bus ride, then a Bybit withdrawal to the same account",
            Decimal("75"),
            [
                stargate("bus", a, b, t1, t2, "bus"),
                venue_step("withdraw", "bybit_withdraw", b, "bus", coin="USDC", to=t2),
            ],
            "COMPLETED",
            [
                *bridged(a, b, t1, t2, Decimal("75"), STARGATE_FEE_BPS, STARGATE_FEE_ROUNDING),
                Change(b, t2, Decimal("75"), Decimal("75")),
            ],
            exchange_change=Decimal("-75"),
        ),
        WorldMovement(
            "Rejected path: the exchange refuses a withdrawal beyond its balance; "
            "the transfer after it never runs",
            Decimal("5000000"),
            [
                venue_step("withdraw", "bybit_withdraw", a, coin="USDC", to=t1),
                transfer("onward", a, t1, t2, "withdraw"),
            ],
            "FAILED",
        ),
        WorldMovement(
            "Bridge-refused path: the Stargate pool quotes less than the node's minimum "
            "(its fee against no slippage allowed); nothing is signed, the transfer after "
            "it never runs",
            Decimal("60"),
            [
                stargate("taxi", b, a, t2, t1, "taxi", max_slippage_bps=0),
                transfer("onward", a, t1, t2, "taxi"),
            ],
            "FAILED",
        ),
        WorldMovement(
            "Fan-out over both chains, then a settlement",
            Decimal("40"),
            [
                transfer("fund", a, t1, t2),
                transfer("left", b, t1, t2, "fund"),
                transfer("right", a, t2, t1, "fund"),
                transfer("settle", b, t2, t1, "left", "right"),
            ],
            "COMPLETED",
            [
                *moved(a, t1, t2, Decimal("40")),
                *moved(b, t1, t2, Decimal("40")),
                *moved(a, t2, t1, Decimal("40")),
                *moved(b, t2, t1, Decimal("40")),
            ],
        ),
        WorldMovement(
            "Refused path: a recipient on no allow-list (nothing signed)",
            Decimal("10"),
            [transfer("pay", b, t1, w.outsider)],
            "FAILED",
        ),
    ]


def scaled_lanes(time_scale: float, finality_s: float) -> dict[str, float]:
    """Every lane the world movements use, with its baseline on the world's clock."""
    lanes = {lane: max(1.0, seconds / time_scale) for lane, seconds in REAL_TIMINGS.items()}
    lanes[TRANSFER_LANE] = max(2.0, finality_s)
    return lanes


def usdc_balance(chain: RunningChain, address: str) -> Decimal:
    from web3 import HTTPProvider, Web3

    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    usdc = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
        abi=load_artifact("MockUSDC")["abi"],
    )
    units = int(usdc.functions.balanceOf(Web3.to_checksum_address(address)).call())
    return Decimal(units) / USDC_UNITS


def balances(chains: dict[str, RunningChain], accounts: set[tuple[str, str]]) -> dict[Any, Decimal]:
    return {(c, addr): usdc_balance(chains[c], addr) for c, addr in sorted(accounts)}


def balance_problems(
    movements: Sequence[WorldMovement],
    before: dict[Any, Decimal],
    after: dict[Any, Decimal],
) -> list[str]:
    """One line per account whose change is outside the sum of what the
    movements should have moved."""
    low: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    high: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for movement in movements:
        for change in movement.changes:
            low[change.chain, change.address] += change.low
            high[change.chain, change.address] += change.high
    problems = []
    for account in sorted(before):
        delta = after[account] - before[account]
        if not low[account] <= delta <= high[account]:
            problems.append(
                f"{account[1]} on {account[0]} moved {delta:+} USDC, expected "
                + (f"{low[account]:+}" if low[account] == high[account]
                   else f"{low[account]:+} to {high[account]:+}")
            )  # fmt: skip
    return problems


async def exchange_fund() -> Decimal:
    """The local exchange's FUND balance of USDC, read over its signed API as the
    engine reads it (QTG_BYBIT_URL, QTG_BYBIT_KEY_FILE)."""
    from qtg_runner.exchanges.bybit import BybitClient
    from qtg_runner.venue_keys import load_api_key
    from qtg_world.local import BYBIT_KEY_FILE_ENV, BYBIT_URL_ENV

    key, secret = load_api_key(os.environ[BYBIT_KEY_FILE_ENV])
    async with BybitClient(os.environ[BYBIT_URL_ENV], key, secret) as client:
        return await client.fund_balance("USDC")


async def reconcile_balances(
    people: DemoLogins, admin: str, network: NetworkMode
) -> tuple[int, list[str]]:
    """One balance_snapshot and one verify_drift_worker pass as the runner login:
    the accounts read, and one line per open drift alert."""
    conninfo = bound_conninfo(people.runner.dsn, network, "qtg-demo-balances")
    async with open_pool(conninfo, name="qtg-demo-balances") as pool:
        ctx = WorkerContext(network, pool, {}, "qtg-demo-balances")
        accounts = await balance_snapshot.run_round(ctx)
        await verify_drift_worker.run_round(ctx, ctx.worker_id(verify_drift_worker.WORKER))
    async with await AsyncConnection.connect(admin, autocommit=True) as conn:
        alerts = await (
            await conn.execute(
                "SELECT alert_id, address, account_key, actual, expected_low, expected_high,"
                " breakers FROM drift_alerts WHERE alert_state = 'OPEN' ORDER BY alert_id"
            )
        ).fetchall()
    return accounts, [
        f"drift alert {a[0]}: {a[1]} on {a[2]} holds {a[3]:,} USDC, expected {a[4]:,} to "
        f"{a[5]:,}; " + (f"breakers tripped: {', '.join(a[6])}" if a[6] else "no breaker tripped")
        for a in alerts
    ]


async def accept_drift(people: DemoLogins, admin: str, network: NetworkMode) -> None:
    """The demo's two operators accept the open drift alerts (re-baselining the
    accounts) and reset the breakers tripped: what a drift found before the demo
    started (the local world changed outside this database) takes."""
    creator = bound_conninfo(people.creator.dsn, network, "qtg-demo-creator")
    approver = bound_conninfo(people.approver.dsn, network, "qtg-demo-approver")
    reason = (
        "the demo found USDC moved on the local chains outside the engine before it "
        "started, and accepts the balances as they are so that it can run"
    )
    async with (
        await AsyncConnection.connect(admin, autocommit=True) as conn,
        await AsyncConnection.connect(creator, autocommit=True) as alice,
        await AsyncConnection.connect(approver, autocommit=True) as bob,
    ):
        cur = await conn.execute("SELECT alert_id FROM drift_alerts WHERE alert_state = 'OPEN'")
        for (alert_id,) in await cur.fetchall():
            for person in (alice, bob):
                await procs.acknowledge_drift_alert(alert_id, reason).aone(person)
        tripped = await (await conn.execute("SELECT scope, name FROM breakers")).fetchall()
        for scope, name in tripped:
            for person in (alice, bob):
                await procs.reset_breaker(scope, name).aone(person)


async def _create(
    alice: AsyncConnection[Any],
    bob: AsyncConnection[Any],
    tag: str,
    i: int,
    m: WorldMovement,
    callback_url: str | None,
) -> int:
    created = await procs.create_movement(
        f"demo-world-{tag}-{i}", m.amount, plan={"nodes": m.nodes}, callback_url=callback_url
    ).aone(alice)
    await procs.approve_movement(created.movement_id).aone(bob)
    return created.movement_id


def crash_dispatcher(network: str, runner_login: str, log: Path) -> subprocess.Popen[bytes]:
    """A dispatcher process as the runner login with the after_submit failpoint
    armed: it claims what is READY, broadcasts, and SIGKILLs itself."""
    env = dict(os.environ, QTG_FAILPOINTS="after_submit", QTG_WORKERS_ENABLED="true")
    qtg = str(Path(sys.executable).with_name("qtg"))
    args = [qtg, "worker", "node_dispatcher", "--network", network, "--as", runner_login]
    with log.open("ab") as sink:
        return subprocess.Popen(args, env=env, stdout=sink, stderr=subprocess.STDOUT)


async def wait_for_crash(proc: subprocess.Popen[bytes], deadline_s: float) -> bool:
    """True once the process died by SIGKILL within the deadline; a process still
    running at the deadline is stopped and False returned."""
    deadline = time.monotonic() + deadline_s
    while proc.poll() is None and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)
        return False
    return proc.returncode == -signal.SIGKILL


async def _states(conn: AsyncConnection[Any], ids: Sequence[int]) -> dict[int, str]:
    rows = await (
        await conn.execute(
            "SELECT movement_id, request_state::text FROM movement_progress"
            " WHERE movement_id = ANY(%s)",
            (list(ids),),
        )
    ).fetchall()
    return {int(r[0]): str(r[1]) for r in rows}


async def node_report(conn: AsyncConnection[Any], ids: Sequence[int]) -> list[str]:
    """One line per node of the movements: its state and path through the
    states (from its audit rows; a recovery shows as such), then its recorded
    transactions (chain and full hash) or external reference, or why it failed."""
    rows = await (
        await conn.execute(
            "SELECT n.request_id, n.node_key, n.executor_key, n.node_state::text, n.external_ref,"
            "       n.last_error,"
            "       (SELECT array_agg(t.chain_key || ' ' || t.tx_hash ORDER BY t.id)"
            "          FROM node_intents i JOIN evm_transactions t ON t.intent_id = i.id"
            "         WHERE i.node_id = n.id),"
            "       (SELECT string_agg(a.to_state || CASE WHEN a.actor LIKE 'node_recovery%%'"
            "                                             THEN ' (recovery)' ELSE '' END,"
            "                          ' -> ' ORDER BY a.id)"
            "          FROM audit_outbox a"
            "         WHERE a.entity = 'node' AND a.entity_id = n.id::text"
            "           AND a.to_state IS NOT NULL AND a.to_state IS DISTINCT FROM a.from_state)"
            "  FROM movement_request_nodes n WHERE n.request_id = ANY(%s)"
            " ORDER BY n.request_id, n.id",
            (list(ids),),
        )
    ).fetchall()
    lines = []
    for request_id, key, executor, state, ref, error, txs, path in rows:
        lines.append(f"movement {request_id} {key} ({executor}): {path or state}")
        lines.extend(f"    tx {tx}" for tx in txs or [])
        if not txs and ref:
            lines.append(f"    ref {ref}")
        if state == "FAILED" and error:
            lines.append(f"    {error[:300]}")
    return lines


async def run_world_demo(
    admin_dsn: str,
    people: DemoLogins,
    network: NetworkMode,
    view: WorldView,
    movements: Sequence[WorldMovement],
    entries: Sequence[WorkerEntry],
    lanes: dict[str, float],
    timeout: float,
    log_dir: Path,
    receiver_data_dir: Path | None = None,
) -> int:
    """The movements run and checked. With ``receiver_data_dir`` (the demo, not a
    drill) they also report to a local callback receiver, whose secret is kept
    beside that data directory, and the end checks the callbacks and the audit
    chain (demo_sidecars)."""
    admin = bound_conninfo(admin_dsn, network, "qtg-demo-admin")
    receiver: CallbackReceiver | None = None
    async with await AsyncConnection.connect(admin, autocommit=True) as conn:
        for lane, baseline in lanes.items():
            await procs.upsert_lane_baseline(lane, baseline, min_poll_seconds=0.5).aone(conn)
        if receiver_data_dir is not None:
            receiver = await start_receiver(conn, receiver_data_dir)
    try:
        return await _run_world_demo(
            admin, people, network, view, movements, entries, timeout, log_dir, receiver
        )
    finally:
        if receiver is not None:
            receiver.stop()


async def _run_world_demo(
    admin: str,
    people: DemoLogins,
    network: NetworkMode,
    view: WorldView,
    movements: Sequence[WorldMovement],
    entries: Sequence[WorkerEntry],
    timeout: float,
    log_dir: Path,
    receiver: CallbackReceiver | None,
) -> int:
    callback_url = receiver.url if receiver is not None else None
    read, drift = await reconcile_balances(people, admin, network)
    if drift:
        out.print(
            "[yellow]Before the demo started, the treasury's balances differ from what this "
            "database expected: USDC moved on the local chains outside the engine (by hand, "
            "or by another tool). On a real treasury an operator finds out why before "
            "anything moves; so that the demo can run, alice and bob acknowledge each alert "
            "(two operators, audited with that reason) and reset the breakers it tripped:"
            "[/yellow]"
        )
        for line in drift:
            out.print(f"[yellow]  {line}[/yellow]")
        await accept_drift(people, admin, network)
    else:
        out.print(f"balances reconciled: {read} accounts, no drift")
    accounts = {(c.chain, c.address) for m in movements for c in m.changes}
    before = balances(view.chains, accounts)
    fund_before = await exchange_fund()

    tag = time.strftime("%Y%m%d-%H%M%S")
    creator = bound_conninfo(people.creator.dsn, network, "qtg-demo-creator")
    approver = bound_conninfo(people.approver.dsn, network, "qtg-demo-approver")
    ids: dict[int, WorldMovement] = {}
    started = time.monotonic()
    async with (
        await AsyncConnection.connect(creator, autocommit=True) as alice,
        await AsyncConnection.connect(approver, autocommit=True) as bob,
    ):
        for i, m in enumerate(movements):
            if m.crash_after_submit:
                ids[await _create(alice, bob, tag, i, m, callback_url)] = m
        if ids:
            proc = crash_dispatcher(network, people.runner.name, log_dir / "demo-crash.log")
            died = await wait_for_crash(proc, CRASH_DEADLINE_S)
            out.print(
                "a dispatcher process broadcast the first movement's transaction and was "
                "killed before reporting it (SIGKILL after the side effect)"
                if died
                else "[yellow]the crashing dispatcher did not die as planned; the runtime "
                "takes the movement as it is[/yellow]"
            )
        for i, m in enumerate(movements):
            if not m.crash_after_submit:
                ids[await _create(alice, bob, tag, i, m, callback_url)] = m
    failing = [str(mid) for mid, m in ids.items() if m.expected != "COMPLETED"]
    if failing:
        out.print(
            f"movements {', '.join(sorted(failing, key=int))} are meant to end "
            f"{'/'.join(sorted({ids[int(f)].expected for f in failing}))}: the WARNING lines "
            "the workers log about them are those refusals, as they happen",
            soft_wrap=True,
        )
    out.print(
        f"{len(ids)} movements created by {people.creator.name} and approved by "
        f"{people.approver.name}; the workers run as {people.runner.name}"
        + (f"; callbacks to {callback_url}" if callback_url else ""),
        soft_wrap=True,
    )

    runtime = await Runtime.open(
        people.runner.dsn, network, name="qtg-demo", max_concurrency=DEMO_CONCURRENCY
    )
    ctx = runtime.context(DEMO_CONCURRENCY)
    supervisor = asyncio.create_task(supervise(ctx, entries, Wakeup(runtime.conninfo, network)))
    finished = False
    async with await AsyncConnection.connect(admin, autocommit=True) as conn:
        shown: dict[int, str] = {}
        while not supervisor.done() and time.monotonic() - started < timeout:
            states = await _states(conn, list(ids))
            for movement_id, state in states.items():
                if shown.get(movement_id) != state:
                    shown[movement_id] = state
                    out.print(f"  movement {movement_id} {state}: {ids[movement_id].name}")
            finished = all(
                s in ("COMPLETED", "FAILED", "CANCELLED", "EXPIRED") for s in states.values()
            )
            if finished:
                break
            await asyncio.sleep(0.5)
        callbacks = None
        if receiver is not None and finished and not supervisor.done():
            callbacks = await check_callbacks(conn, receiver, network, list(ids))
        ctx.stopping.set()
        code = await supervisor
        audit = None
        if receiver is not None:
            async with await AsyncConnection.connect(creator, autocommit=True) as alice:
                audit = await finish_audit(ctx, alice)
        await runtime.close()
        states = await _states(conn, list(ids))
        for line in await node_report(conn, list(ids)):
            out.print(line, soft_wrap=True)
    after = balances(view.chains, accounts)
    fund_after = await exchange_fund()

    elapsed = time.monotonic() - started
    wrong = [
        f"movement {mid} ({ids[mid].name}) is {state}, expected {ids[mid].expected}"
        for mid, state in states.items()
        if state != ids[mid].expected
    ]
    problems = balance_problems(list(ids.values()), before, after)
    read, drift = await reconcile_balances(people, admin, network)
    problems.extend(drift)
    out.print(
        f"balances reconciled: {read} accounts, "
        + ("no drift" if not drift else f"{len(drift)} drift alerts")
    )
    fund_expected = sum((m.exchange_change for m in ids.values()), Decimal(0))
    out.print(
        f"the exchange's FUND account: {fund_before:,} -> {fund_after:,} USDC "
        f"({fund_after - fund_before:+,}, expected {fund_expected:+,})"
    )
    if fund_after - fund_before != fund_expected:
        problems.append(
            f"the exchange's FUND account moved {fund_after - fund_before:+}, "
            f"expected {fund_expected:+}"
        )
    for (chain, address), value in sorted(after.items()):
        delta = value - before[chain, address]
        out.print(
            f"{address} on {chain}: {before[chain, address]:,} -> {value:,} USDC ({delta:+,})"
        )
    if callbacks is not None and receiver is not None:
        out.print("callbacks received, per movement:")
        for line in callbacks.paths():
            out.print(line)
        out.print(callback_summary(callbacks, receiver.url), soft_wrap=True)
        problems.extend(callbacks.problems(receiver.url))
    if audit is not None:
        out.print(audit.summary())
        if not audit.chain.ok:
            problems.append(f"the audit chain breaks at row {audit.chain.first_bad_seq}")
    if code != 0:
        out.print(f"[red]a core worker crashed (exit {code})[/red]")
        return code
    if not finished or wrong or problems:
        for line in wrong + problems or ["movements still running at the timeout"]:
            out.print(f"[red]{line}[/red]")
        return 1
    out.print(
        f"[green]all {len(ids)} movements ended as expected in {elapsed:.0f}s, and every "
        "balance moved by exactly what they moved[/green]"
    )
    return 0


def drill_movements(w: WorldView) -> dict[str, list[WorldMovement]]:
    """One path each, for `qtg drill <path>`."""
    t1, t2 = w.treasury[0], w.treasury[1]
    a, b = sorted(w.chains)[:2]
    return {
        "bybit": [
            WorldMovement(
                "Bybit: a withdrawal from the exchange to a treasury account",
                Decimal("15"),
                [venue_step("withdraw", "bybit_withdraw", a, coin="USDC", to=t1)],
                "COMPLETED",
                [Change(a, t1, Decimal("15"), Decimal("15"))],
                exchange_change=Decimal("-15"),
            )
        ],
        "ccip": [
            WorldMovement(
                "CCIP: ccipSend, executed on the other chain's OffRamp",
                Decimal("30"),
                [ccip("send", a, b, t1, t2)],
                "COMPLETED",
                bridged(a, b, t1, t2, Decimal("30"), 0),
            )
        ],
        "stargate": [
            WorldMovement(
                "Stargate taxi: sent and delivered at once",
                Decimal("20"),
                [stargate("taxi", a, b, t1, t2, "taxi")],
                "COMPLETED",
                bridged(a, b, t1, t2, Decimal("20"), STARGATE_FEE_BPS, STARGATE_FEE_ROUNDING),
            )
        ],
        "cctp": [
            WorldMovement(
                "CCTP fast: burn, attestation, mint",
                Decimal("25"),
                cctp("usdc", a, b, t1, t2, "fast"),
                "COMPLETED",
                bridged(a, b, t1, t2, Decimal("25"), CCTP_MAX_FEE_BPS),
            )
        ],
    }
