"""One rehearsal: a movement run on forks of its chains before it is
approved, and what it did.

From ``rehearsal_input`` (the movement, its plan and the registry, as the
real database has them) and the RPC URLs of the environment: a fork of each
chain the plan names, pinned to the chain's head (or the block given), the
treasury's accounts impersonated through stand-ins (qtg_rehearsal.forks,
.proxy, .stand_ins); where a chain has CCTP, attesters made for the
rehearsal trusted by its transmitter and the local Iris double attesting
with them; a throwaway engine running the movement with the real executors
(qtg_rehearsal.engine). The summary says each step's outcome, its
transactions' gas and fees, and every balance the movement touches before
and after, as lines to print and as the object recorded on the movement.

An exchange step runs against the local Bybit double on the forks
(qtg_rehearsal.venues): a rehearsal never calls an exchange. A Stargate
taxi's packet is verified and executed on the destination's fork as
LayerZero's DVNs and executor would (qtg_rehearsal.deliveries: the path's
receive library impersonated), and a bus ride's bus is driven first, as
Stargate's planner would. A CCIP message on a v1.6 lane is committed and
executed on the destination's fork by the lane's OffRamp
(qtg_rehearsal.ccip_delivery: the commit written, as no DON signs for a
fork). What does not run on a fork is said, never passed over: a send on a
v1.5 lane is rehearsed up to its source transaction.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from qtg_rehearsal import engine as throwaway
from qtg_rehearsal.ccip_delivery import DELIVERED_VERSION, lanes_between
from qtg_rehearsal.deliveries import CcipForks, ForkDeliveries
from qtg_rehearsal.engine import NODE_TERMINAL, EngineRun, NodeRun
from qtg_rehearsal.forks import (
    Fork,
    ForkError,
    fork_env,
    head_block,
    rpc,
    running,
    start_fork,
    trust_attesters,
)
from qtg_rehearsal.stand_ins import StandIns
from qtg_rehearsal.venues import EXCHANGE_PREFIX, serving
from qtg_runner.chains.evm_rpc import redact_url
from qtg_runner.config import NetworkMode
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV
from qtg_world import iris
from qtg_world.chains.local import RunningChain

FAR_SIDE = {
    "ccip": "delivery not rehearsed: its lane is not a registered v1.6 lane between the forks "
    "(a v1.5 OffRamp reads its roots from a commit store the rehearsal does not write)",
}
"""Sends rehearsed up to their source transaction, their delivery not: why
(far_side)."""
AT_THE_DOUBLE = "against the local Bybit double (no exchange called)"
SETTLE_S = 5.0
"""How long a run must look settled (only what cannot finish on a fork left)
before the rehearsal ends it."""
IRIS_TIME_SCALE = 0.01
"""The Iris double's delays on the rehearsal's clock: a standard burn is
attested after 9 s instead of 15 minutes."""
MAX_LINES = 200
MAX_LINE = 300
"""The longest line of a summary (record_rehearsal takes up to 1000)."""
MAX_RECORD_BYTES = 60_000
"""What a summary may weigh: under record_rehearsal's 64 KiB."""
RPC_VARIABLE_PREFIX = "QTG_RPC_"
"""A rehearsal reads the RPC URLs of these variables only, whatever the
registry names (the URL goes to a relay and to messages, redacted)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ADDRESS = re.compile(r"^0x[0-9a-fA-F]{40}$")


class RehearsalError(Exception):
    """The rehearsal could not be run (not: it ran and failed); the message says why."""


@dataclass
class Summary:
    outcome: str
    lines: list[str]
    record: dict[str, Any] = field(default_factory=dict)


def plan_chains(plan: Mapping[str, Any], chain_keys: Iterable[str]) -> list[str]:
    """The registered chains the plan's steps name, in the plan's order."""
    known, found = set(chain_keys), []
    for node in plan.get("nodes", []):
        for value in dict(node.get("config") or {}).values():
            if isinstance(value, str) and value in known and value not in found:
                found.append(value)
    return found


def plan_addresses(plan: Mapping[str, Any]) -> set[str]:
    return {
        value.lower()
        for node in plan.get("nodes", [])
        for value in dict(node.get("config") or {}).values()
        if isinstance(value, str) and _ADDRESS.match(value)
    }


def units(value: int, decimals: int) -> str:
    return f"{Decimal(value).scaleb(-decimals).normalize():f}"


def token_balance(url: str, token: str, holder: str) -> int:
    data = "0x70a08231" + holder[2:].lower().rjust(64, "0")
    return int(str(rpc(url, "eth_call", [{"to": token, "data": data}, "latest"])), 16)


def read_balances(
    forks: Mapping[str, Fork],
    tokens: Mapping[str, list[Mapping[str, Any]]],
    holders: Mapping[str, set[str]],
) -> dict[tuple[str, str, str], int]:
    """(chain, address, asset) -> base units, read on each fork: the native
    coin and every registered token."""
    out: dict[tuple[str, str, str], int] = {}
    for chain, fork in forks.items():
        for holder in sorted(holders.get(chain, ())):
            out[chain, holder, "native"] = int(
                str(rpc(fork.anvil_url, "eth_getBalance", [holder, "latest"])), 16
            )
            for token in tokens.get(chain, []):
                out[chain, holder, str(token["symbol"])] = token_balance(
                    fork.anvil_url, str(token["address"]), holder
                )
    return out


def far_side(plan: Mapping[str, Any], lanes: Iterable[Mapping[str, Any]] = ()) -> dict[str, str]:
    """The plan's steps whose delivery does not run on a fork, by key: why
    (FAR_SIDE): a CCIP send whose lane (``lanes``: the registry's ccip_lanes)
    is not v1.6 (a Stargate taxi is delivered, a bus driven and delivered,
    and a v1.6 CCIP message committed and executed: qtg_rehearsal.deliveries)."""
    delivered = {
        (str(lane["source_chain_key"]), str(lane["dest_chain_key"]))
        for lane in lanes
        if lane["version"] == DELIVERED_VERSION
    }
    return {
        str(node["key"]): FAR_SIDE["ccip"]
        for node in plan.get("nodes", [])
        if node.get("executor") == "ccip"
        and (
            str((node.get("config") or {}).get("chain")),
            str((node.get("config") or {}).get("destination_chain")),
        )
        not in delivered
    }


class Deliveries(Protocol):
    def busy(self) -> bool: ...

    def given_up(self, recorded: Sequence[str]) -> str | None: ...


def settled_after(
    seconds: float, far: Mapping[str, str] | None = None, deliveries: Deliveries | None = None
) -> Callable[[list[NodeRun]], bool]:
    """Whether a run has nothing left that can finish on a fork, and has looked
    so for ``seconds``: every step done, or a far-side send (``far``, or one
    whose message ``deliveries`` gave up on) waiting for its delivery, or a
    step waiting behind one; and no message still being delivered."""
    since: list[float] = []
    far = far or {}

    def waits_for_nothing(n: NodeRun) -> bool:
        return n.key in far or (deliveries is not None and bool(deliveries.given_up(n.tx_hashes)))

    def settled(nodes: list[NodeRun]) -> bool:
        quiet = (deliveries is None or not deliveries.busy()) and all(
            n.state in NODE_TERMINAL
            or n.state == "PENDING"
            or (n.state in ("SUBMITTED", "OBSERVING") and waits_for_nothing(n))
            for n in nodes
        )
        if not quiet:
            since.clear()
            return False
        if not since:
            since.append(time.monotonic())
        return time.monotonic() - since[0] >= seconds

    return settled


def step_line(
    node: NodeRun, fees: Mapping[str, tuple[int, int]], far: Mapping[str, str] | None = None
) -> str:
    gas = sum(fees[h][0] for h in node.tx_hashes if h in fees)
    paid = sum(fees[h][1] for h in node.tx_hashes if h in fees)
    sent = (
        f", {len(node.tx_hashes)} transaction{'s' if len(node.tx_hashes) != 1 else ''}, "
        f"gas {gas:,}, fee {units(paid, 18)} (native)"
        if node.tx_hashes
        else ""
    )
    line = f"step {node.key} ({node.executor}): {node.state}{sent}"
    if far and node.key in far and node.state in ("SUBMITTED", "OBSERVING"):
        return f"{line}; {far[node.key]}"
    if node.state == "PENDING":
        return f"step {node.key} ({node.executor}): not reached (its parents did not finish here)"
    if node.state in ("FAILED", "UNKNOWN") or (node.error and node.state != "COMPLETED"):
        line = f"{line}: {node.error or 'no error recorded'}"
    if node.executor.startswith(EXCHANGE_PREFIX):
        return f"{line}; {AT_THE_DOUBLE}"
    return line


def outcome_of(run: EngineRun, undelivered: Sequence[str] = ()) -> str:
    """'failed' where the run failed, timed out or a message that should have
    been delivered on the forks was not (``undelivered``: why)."""
    failed = run.movement_state in ("FAILED", "REFUSED") or any(
        n.state in ("FAILED", "UNKNOWN") for n in run.nodes
    )
    return "failed" if failed or run.timed_out or undelivered else "passed"


async def rehearse(
    data: Mapping[str, Any],
    env: Mapping[str, str],
    network: NetworkMode,
    *,
    blocks: Mapping[str, int] | None = None,
    timeout_s: float = 600.0,
    say: Callable[[str], None] = print,
) -> Summary:
    """Rehearse the movement ``data`` (rehearsal_input's object) on forks of the
    chains whose RPC URLs ``env`` has under the registry's names."""
    movement, plan, registry = data["movement"], data["plan"], data["registry"]
    chains = {str(c["chain_key"]): c for c in registry.get("chains", [])}
    used = plan_chains(plan, chains)
    if not used:
        raise RehearsalError("the movement's plan names no registered chain: nothing to fork")
    foreign = [
        f"{c} names {chains[c]['rpc_url_env']}"
        for c in used
        if not str(chains[c]["rpc_url_env"]).startswith(RPC_VARIABLE_PREFIX)
    ]
    if foreign:
        raise RehearsalError(
            f"the registry's {'; '.join(foreign)} as its RPC variable: a rehearsal reads only "
            f"{RPC_VARIABLE_PREFIX}* variables (fix the chain's rpc_url_env)"
        )
    missing = [chains[c]["rpc_url_env"] for c in used if not env.get(str(chains[c]["rpc_url_env"]))]
    if missing:
        raise RehearsalError(
            f"set {', '.join(missing)} to the chains' RPC URLs: the rehearsal forks them"
        )
    accounts = [
        (str(a["signer_id"]), str(a["address"]))
        for a in registry.get("treasury_accounts", [])
        if a["chain_key"] in used
    ]
    stand_ins = StandIns(accounts)
    tokens: dict[str, list[Mapping[str, Any]]] = {}
    for token in registry.get("chain_tokens", []):
        tokens.setdefault(str(token["chain_key"]), []).append(token)
    holders = {c: {a for _, a in accounts} | plan_addresses(plan) for c in used}
    cctp = {
        str(p["chain_key"]): str(p["contracts"]["MessageTransmitterV2"]).lower()
        for p in registry.get("chain_protocols", [])
        if p["protocol"] == "cctp"
        and p["chain_key"] in used
        and "MessageTransmitterV2" in p["contracts"]
    }
    logs = Path(tempfile.mkdtemp(prefix="qtg-rehearsal-logs-"))
    try:
        return await _rehearse_on_forks(
            movement, plan, registry, env, network, used, chains, stand_ins, tokens, holders,
            cctp, logs, blocks or {}, timeout_s, say,
        )  # fmt: skip
    finally:
        shutil.rmtree(logs, ignore_errors=True)


async def _rehearse_on_forks(
    movement: Mapping[str, Any],
    plan: Mapping[str, Any],
    registry: Mapping[str, Any],
    env: Mapping[str, str],
    network: NetworkMode,
    used: list[str],
    chains: Mapping[str, Mapping[str, Any]],
    stand_ins: StandIns,
    tokens: Mapping[str, list[Mapping[str, Any]]],
    holders: Mapping[str, set[str]],
    cctp: Mapping[str, str],
    logs: Path,
    blocks: Mapping[str, int],
    timeout_s: float,
    say: Callable[[str], None],
) -> Summary:
    forks_started: list[Fork] = []
    with running(forks_started):
        for chain in used:
            source = env[str(chains[chain]["rpc_url_env"])]
            block = blocks.get(chain)
            if block is None:
                block = head_block(source)
            say(f"forking {chain} ({redact_url(source)}) at block {block}")
            forks_started.append(
                start_fork(
                    chain, int(chains[chain]["chain_id"]), source, block, stand_ins.senders(), logs
                )
            )
        forks = {f.chain_key: f for f in forks_started}
        run_env = fork_env(forks_started, {c: str(chains[c]["rpc_url_env"]) for c in used})
        attesting = None
        try:  # the Iris double, once started, is stopped whatever follows
            if cctp:
                attesters = trust_attesters([forks[c] for c in cctp], cctp)
                attesting = iris.serve(
                    [
                        RunningChain(
                            c,
                            forks[c].chain_id,
                            0,
                            1,
                            forks[c].process.pid,
                            forks[c].url,
                            str(forks[c].log_file),
                            contracts={"MessageTransmitterV2": cctp[c]},
                        )
                        for c in cctp
                    ],
                    attesters,
                    iris.IrisConfig(time_scale=IRIS_TIME_SCALE),
                )
                run_env[IRIS_URL_ENV] = attesting.url
                say(
                    f"CCTP on {', '.join(cctp)}: {len(attesters)} attesters of the rehearsal "
                    "trusted, the local Iris double attesting"
                )
            executors = {n.get("executor") for n in plan.get("nodes", [])}
            stargate = [
                p
                for p in registry.get("chain_protocols", [])
                if "stargate" in executors
                and p["protocol"] == "stargate"
                and p["chain_key"] in used
            ]
            ccip = CcipForks(
                lanes_between(registry.get("ccip_lanes", []) if "ccip" in executors else [], used),
                {
                    int(p["remote_id"]): str(p["chain_key"])
                    for p in registry.get("chain_protocols", [])
                    if p["protocol"] == "ccip"
                },
                attesting.url if attesting is not None else None,
            )
            far = far_side(plan, registry.get("ccip_lanes", []))
            venues = serving(
                plan, registry, forks, Decimal(str(movement["amount"])),
                sorted(plan_addresses(plan)), logs,
            )  # fmt: skip
            with venues as served, ForkDeliveries(forks, stargate, ccip) as deliveries:
                run_env.update(served.env)
                for line in served.lines:
                    say(line)
                before = read_balances(forks, tokens, holders)
                root = Path(tempfile.mkdtemp(prefix="qtg-rehearsal-"))
                with throwaway.throwaway_engine(root, network, registry) as engine:
                    say(
                        "the movement runs in a throwaway engine (its own database), "
                        "core workers only"
                    )
                    run = await throwaway.run_movement(
                        engine,
                        movement,
                        plan,
                        run_env,
                        stand_ins.by_signer,
                        settled_after(SETTLE_S, far, deliveries),
                        timeout_s,
                        progress=say,
                    )
                after = read_balances(forks, tokens, holders)
                fees = receipts_fees(forks_started)
                notes = served.lines + served.troubles() + deliveries.lines()
                undelivered = deliveries.failures()
                for node in run.nodes:
                    why = deliveries.given_up(node.tx_hashes)
                    if why is not None:
                        far = {**far, node.key: f"its message not delivered on the fork: {why}"}
        finally:
            if attesting is not None:
                attesting.stop()
    return summarise(movement, run, forks, before, after, fees, tokens, notes, far, undelivered)


def receipts_fees(forks: Iterable[Fork]) -> dict[str, tuple[int, int]]:
    """recorded hash -> (gas used, fee in wei) of every transaction the forks sent."""
    out: dict[str, tuple[int, int]] = {}
    for fork in forks:
        for recorded, fork_hash in fork.proxy.recorded_hashes().items():
            receipt = rpc(fork.anvil_url, "eth_getTransactionReceipt", [fork_hash])
            if receipt is not None:
                gas = int(str(receipt["gasUsed"]), 16)
                out[recorded] = (gas, gas * int(str(receipt.get("effectiveGasPrice", "0x0")), 16))
    return out


def summarise(
    movement: Mapping[str, Any],
    run: EngineRun,
    forks: Mapping[str, Fork],
    before: Mapping[tuple[str, str, str], int],
    after: Mapping[tuple[str, str, str], int],
    fees: Mapping[str, tuple[int, int]],
    tokens: Mapping[str, list[Mapping[str, Any]]],
    notes: Iterable[str] = (),
    far: Mapping[str, str] | None = None,
    undelivered: Sequence[str] = (),
) -> Summary:
    outcome = outcome_of(run, undelivered)
    decimals = {(c, str(t["symbol"])): int(t["decimals"]) for c, ts in tokens.items() for t in ts}
    lines = [
        f"rehearsal of movement {movement['id']} on forks: "
        + ", ".join(f"{c} at block {f.block}" for c, f in forks.items())
    ]
    lines += [step_line(n, fees, far) for n in run.nodes]
    balances = []
    for key, value in sorted(after.items()):
        chain, holder, asset = key
        was = before.get(key, 0)
        places = 18 if asset == "native" else decimals.get((chain, asset), 0)
        delta = value - was
        balances.append(
            {
                "chain": chain,
                "address": holder,
                "asset": asset,
                "before": str(was),
                "after": str(value),
            }
        )
        lines.append(
            f"{holder} on {chain}: {asset} {units(was, places)} -> {units(value, places)} "
            f"({'+' if delta >= 0 else '-'}{units(abs(delta), places)})"
            if delta
            else f"{holder} on {chain}: {asset} {units(value, places)} (unchanged)"
        )
    if run.refusal is not None:
        lines.append(f"the engine refused the movement: {run.refusal}")
    else:
        lines.append(
            f"movement in the rehearsal: {run.movement_state} after {run.elapsed_s:.0f} s"
            + ("; timed out before it settled" if run.timed_out else "")
        )
    lines.append(
        f"as rehearsed: finality depth at most {throwaway.REHEARSAL_FINALITY_DEPTH} blocks, lanes "
        f"paced at {throwaway.LANE_BASELINE_S:g} s, attestations by the local Iris double"
    )
    lines.extend(notes)
    if len(lines) >= MAX_LINES:  # the outcome stays the last line
        lines = [*lines[: MAX_LINES - 2], f"({len(lines) - MAX_LINES + 2} more lines left out)"]
    lines.append(f"outcome: {outcome}")
    lines = [printable(line) for line in lines]
    record = {
        "outcome": outcome,
        "lines": lines,
        "forks": [{"chain": c, "block": f.block} for c, f in forks.items()],
        "steps": [
            {
                "key": n.key,
                "executor": n.executor,
                "state": n.state,
                "error": printable(n.error or "") or None,
                "transactions": [
                    {"hash": h, "gas_used": fees[h][0], "fee_wei": str(fees[h][1])}
                    for h in n.tx_hashes
                    if h in fees
                ],
            }
            for n in run.nodes
        ],
        # the balances that moved first: what a cut to fit keeps
        "balances": sorted(balances, key=lambda b: b["before"] == b["after"])[:100],
        "movement_state": run.movement_state,
        "refusal": run.refusal,
        "timed_out": run.timed_out,
    }
    return Summary(outcome, fitted(record, lines), record)


def printable(text: str, limit: int = MAX_LINE) -> str:
    """``text`` as one printable line of at most ``limit`` characters: a
    control character (a terminal escape, a line break) as \\xNN, the rest
    cut with an ellipsis (a node's error may hold anything its chain said)."""
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def fitted(record: dict[str, Any], lines: list[str]) -> list[str]:
    """``record`` cut until it fits record_rehearsal's bound: the balances
    first, then the steps' errors, then lines from the middle (the first and
    the last kept, and a line saying how many went). Returns its lines."""

    def size() -> int:
        return len(json.dumps(record, separators=(",", ":")).encode())

    record["lines"] = lines
    if size() > MAX_RECORD_BYTES:
        record["balances"] = record["balances"][:10]
    for step in record["steps"]:
        if size() <= MAX_RECORD_BYTES:
            break
        step["error"] = (step["error"] or "")[:80] or None
    kept, cut = list(lines), 0
    while size() > MAX_RECORD_BYTES and len(kept) > 4:
        del kept[len(kept) // 2]
        cut += 1
        middle = len(kept) // 2
        record["lines"] = [*kept[:middle], f"({cut} lines cut to fit)", *kept[middle:]]
    shown: list[str] = record["lines"]
    return shown


def run(
    data: Mapping[str, Any],
    env: Mapping[str, str],
    network: NetworkMode,
    **options: Any,
) -> Summary:
    try:
        return asyncio.run(rehearse(data, env, network, **options))
    except ForkError as exc:
        raise RehearsalError(str(exc)) from None
