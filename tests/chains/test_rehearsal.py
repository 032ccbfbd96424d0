"""`qtg rehearse`'s work end to end (qtg_rehearsal.rehearse), forking the
local chains as a rehearsal forks real ones: a CCTP burn -> mint movement
awaiting approval, read with rehearsal_input as its creator, run on forks by
the real executors in a throwaway engine, its summary recorded on the
movement.

What an operator relies on: the rehearsal runs the movement as approved
would run it (both steps COMPLETED, the treasury's USDC moved on the forks
by the amount, the fee and gas shown) while the real chains do not move at
all (balances and nonces as they were) and the real movement stays
PENDING_APPROVAL; no key, exchange or Iris setting is read, whatever the
shell holds; a movement that cannot run as planned (more than the treasury
holds) fails its rehearsal with the reason in its lines, and its approval
says so (QT025's warning) while a passed one says nothing; one the engine
would refuse (over a value limit) fails with the refusal; a chain with no
RPC URL in the environment is a clear refusal before anything starts; an
exchange step runs against the local Bybit double on the forks, and the
exchange the shell names hears nothing. The deliveries on the
destination's fork are test_rehearsal_deliveries.py's.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chain_support import LocalChainSet
from endpoint_support import Loopback
from engine import as_person
from evm_support import register_world, superuser, usdc_balance
from psycopg.conninfo import conninfo_to_dict
from psycopg.types.json import Jsonb
from rehearsal_support import NETWORK, UNITS, real_state, rehearse_as_alice, rpc_only_env
from typer.testing import CliRunner

from qtg_cli import app
from qtg_rehearsal.rehearse import RehearsalError
from qtg_runner import signers
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.registry import registration
from qtg_world.chains.local import rpc_url_env
from qtg_world.chains.registry import register_venue
from qtg_world.local import BYBIT_KEY_FILE_ENV, BYBIT_URL_ENV

pytestmark = [pytest.mark.chain, pytest.mark.slow]


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Iterator[psycopg.Connection[Any]]:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    for executor in (CctpBurnExecutor, CctpMintExecutor):
        registration(executor).one(conn)
    for lane in ("cctp-fast", "cctp-mint"):
        procs.upsert_lane_baseline(lane, 14, min_poll_seconds=5).one(conn)
    yield conn
    conn.close()


def cctp_movement(conn: Any, chain_set: LocalChainSet, amount: Decimal, external_id: str) -> int:
    a, b = chain_set.chains
    sender, recipient = (k.address.lower() for k in chain_set.treasury)
    plan = {
        "nodes": [
            {
                "key": "burn",
                "executor": "cctp_burn",
                "config": {"lane": "cctp-fast", "chain": a.key, "destination_chain": b.key,
                           "from": sender, "to": recipient, "finality": "fast"},
                "depends_on": [],
            },
            {
                "key": "mint",
                "executor": "cctp_mint",
                "config": {"lane": "cctp-mint", "chain": b.key, "source_chain": a.key,
                           "from": sender, "to": recipient},
                "depends_on": ["burn"],
            },
        ]
    }  # fmt: skip
    with as_person(conn, "alice"):
        return int(procs.create_movement(external_id, amount, plan=plan).one(conn).movement_id)


class Canary:
    """A loopback HTTP server that records whatever reaches it."""

    def __init__(self) -> None:
        heard = self.heard = list[str]()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                heard.append(f"{self.command} {self.path}")
                self.send_response(500)
                self.end_headers()

            do_POST = do_GET

        self._loopback = Loopback(Handler)
        self.url = self._loopback.url

    def stop(self) -> None:
        self._loopback.stop()


def approval_warnings(conn: Any, movement_id: int) -> list[str]:
    notices: list[str] = []

    def keep(diag: psycopg.errors.Diagnostic) -> None:
        notices.append(f"{diag.sqlstate}: {diag.message_primary}")

    conn.add_notice_handler(keep)
    try:
        with as_person(conn, "bob"):
            conn.execute("SELECT approve_movement(%s)", (movement_id,))
    finally:
        conn.remove_notice_handler(keep)
    return notices


def test_a_rehearsal_runs_the_movement_on_forks_and_the_real_chains_do_not_move(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through `qtg rehearse`, as an operator login other than the creator, in
    a shell that holds, beside the chains' RPC URLs, AWS credentials, a
    keystore's settings, and Iris and exchange URLs that are canaries: no
    signer is loaded (the loaders refuse, boto3 cannot be imported), the
    canary hears nothing, and nothing of the rehearsal is left behind."""
    movement_id = cctp_movement(world, local_chain_set, Decimal("25"), "rehearsed-cctp")
    before = real_state(local_chain_set)
    operator = db.operator_dsn(NETWORK)
    canary = Canary()

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a signer was loaded: {args}")

    monkeypatch.setattr(signers, "load", refuse)
    monkeypatch.setattr(signers, "load_async", refuse)
    monkeypatch.setattr(evm_tx, "load_async", refuse)
    monkeypatch.setitem(sys.modules, "boto3", None)
    monkeypatch.setitem(sys.modules, "botocore", None)
    # where the rehearsal's temporary directories go: one the embedded server,
    # which may run as its own user (as root), can reach
    scratch = Path(tempfile.mkdtemp(prefix="qtg-rehearsal-test-", dir="/tmp"))
    scratch.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    environment = {
        "QTG_DATABASE_URL": operator,
        "COLUMNS": "200",
        "AWS_ACCESS_KEY_ID": "AKIACANARY",
        "AWS_SECRET_ACCESS_KEY": "canary-secret",
        "AWS_REGION": "eu-west-1",
        "QTG_KEYSTORE_DIR": str(tmp_path),
        "QTG_KEYSTORE_PASSWORD": "canary",
        "QTG_IRIS_URL": canary.url,
        "QTG_BYBIT_URL": canary.url,
        **rpc_only_env(local_chain_set),
    }

    try:
        result = CliRunner().invoke(
            app, ["rehearse", str(movement_id), "--timeout", "180"], env=environment
        )
    finally:
        canary.stop()

    left = sorted(p.name for p in scratch.iterdir())
    shutil.rmtree(scratch, ignore_errors=True)
    assert canary.heard == []
    assert left == []
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "outcome: passed" in lines
    assert any(
        line.startswith("step burn (cctp_burn): COMPLETED, 1 transaction, gas ") for line in lines
    )
    assert any(line.startswith("step mint (cctp_mint): COMPLETED, 1 transaction") for line in lines)
    row = world.execute(
        "SELECT outcome, summary, recorded_by FROM movement_rehearsals WHERE movement_id = %s",
        (movement_id,),
    ).fetchone()
    assert row is not None and row[0] == "passed"
    assert row[2] == conninfo_to_dict(operator)["user"]
    summary = row[1]
    steps = {s["key"]: s for s in summary["steps"]}
    assert steps["burn"]["state"] == steps["mint"]["state"] == "COMPLETED"
    assert steps["burn"]["transactions"][0]["gas_used"] > 0
    a, b = local_chain_set.chains
    sender, recipient = (k.address.lower() for k in local_chain_set.treasury)
    moved = {
        (x["chain"], x["address"], x["asset"]): int(x["after"]) - int(x["before"])
        for x in summary["balances"]
    }
    assert moved[a.key, sender, "USDC"] == -25 * UNITS
    # the mint pays the recipient the amount less the fee Iris executed (at most 1 bp)
    assert 25 * UNITS - 25 * UNITS // 10_000 <= moved[b.key, recipient, "USDC"] <= 25 * UNITS

    # nothing happened for real: the chains, and the movement awaiting its approval
    assert real_state(local_chain_set) == before
    state = world.execute(
        "SELECT state::text, rehearsal FROM movements WHERE movement_id = %s",
        (movement_id,),
    ).fetchone()
    assert state == ("PENDING_APPROVAL", "passed")
    assert approval_warnings(world, movement_id) == []


def test_a_movement_that_cannot_run_fails_its_rehearsal_and_its_approval_says_so(
    world: Any, local_chain_set: LocalChainSet
) -> None:
    a = local_chain_set.chains[0]
    sender = local_chain_set.treasury[0].address.lower()
    held = Decimal(usdc_balance(a, sender)) / UNITS
    movement_id = cctp_movement(world, local_chain_set, held + 1, "rehearsed-too-much")

    summary = rehearse_as_alice(world, movement_id, rpc_only_env(local_chain_set), timeout_s=12)

    text = "\n".join(summary.lines)
    assert summary.outcome == "failed", text
    burn = next(line for line in summary.lines if line.startswith("step burn"))
    assert "holds" in burn and "needs" in burn, text
    assert any(line.startswith("step mint") and "not reached" in line for line in summary.lines)

    with as_person(world, "alice"):
        procs.record_rehearsal(movement_id, summary.outcome, Jsonb(summary.record)).one(world)
    warnings = approval_warnings(world, movement_id)
    assert len(warnings) == 1 and "rehearsal" in warnings[0] and "failed" in warnings[0]


def test_a_chain_without_an_rpc_url_is_refused_before_anything_starts(
    world: Any, local_chain_set: LocalChainSet
) -> None:
    movement_id = cctp_movement(world, local_chain_set, Decimal("1"), "rehearsed-no-rpc")
    env = rpc_only_env(local_chain_set)
    missing = rpc_url_env(local_chain_set.chains[1].key)
    del env[missing]
    with pytest.raises(RehearsalError, match=f"set {missing} to the chains' RPC URLs"):
        rehearse_as_alice(world, movement_id, env)


def test_a_movement_the_engine_would_refuse_fails_its_rehearsal_with_the_reason(
    world: Any, local_chain_set: LocalChainSet
) -> None:
    """The registry's value limits go with it: a movement over the per-movement
    limit of its burn is refused on approval in the rehearsal too (QT062)."""
    procs.set_value_limit("venue", "cctp_burn", None, None, Decimal("10")).one(world)
    movement_id = cctp_movement(world, local_chain_set, Decimal("25"), "rehearsed-over-limit")

    summary = rehearse_as_alice(world, movement_id, rpc_only_env(local_chain_set))

    assert summary.outcome == "failed"
    assert summary.record["refusal"].startswith("QT062: ")
    assert any(line.startswith("the engine refused the movement: QT062") for line in summary.lines)


def test_an_exchange_step_runs_against_the_bybit_double_on_the_forks(
    world: Any, local_chain_set: LocalChainSet, tmp_path: Path
) -> None:
    """A withdrawal from the exchange to the treasury, then the same amount
    paid into the exchange's deposit address and followed to its credit: all
    three steps COMPLETED on the fork, the treasury's USDC in and out again,
    the deposit address paid; the exchange URL and key file the shell holds
    are never used (a canary hears nothing), and the real chain is untouched."""
    deposit_address = "0x" + "d5" * 20
    register_venue(world, local_chain_set.chains, deposit_address)
    for executor in (BybitWithdrawExecutor, BybitDepositExecutor):
        registration(executor).one(world)
    a = local_chain_set.chains[0]
    treasury = local_chain_set.treasury[0].address.lower()
    plan = {
        "nodes": [
            {"key": "out", "executor": "bybit_withdraw",
             "config": {"lane": "bybit-withdraw", "venue": "bybit", "coin": "USDC",
                        "chain": a.key, "to": treasury},
             "depends_on": []},
            {"key": "pay", "executor": "evm_transfer",
             "config": {"lane": "evm", "chain": a.key, "from": treasury, "to": deposit_address},
             "depends_on": ["out"]},
            {"key": "credit", "executor": "bybit_deposit",
             "config": {"lane": "bybit-deposit", "venue": "bybit", "chain": a.key},
             "depends_on": ["pay"]},
        ]
    }  # fmt: skip
    with as_person(world, "alice"):
        movement_id = (
            procs.create_movement("rehearsed-exchange", Decimal("3"), plan=plan)
            .one(world)
            .movement_id
        )
    before = real_state(local_chain_set)
    canary = Canary()
    env = rpc_only_env(local_chain_set) | {
        BYBIT_URL_ENV: canary.url,
        BYBIT_KEY_FILE_ENV: str(tmp_path / "the-real-key.json"),
    }
    try:
        summary = rehearse_as_alice(world, movement_id, env, timeout_s=120)
    finally:
        canary.stop()

    text = "\n".join(summary.lines)
    assert summary.outcome == "passed", text
    assert canary.heard == []
    steps = {s["key"]: s["state"] for s in summary.record["steps"]}
    assert steps == {"out": "COMPLETED", "pay": "COMPLETED", "credit": "COMPLETED"}, text
    assert any(
        line.startswith("step out (bybit_withdraw): COMPLETED") and "Bybit double" in line
        for line in summary.lines
    ), text
    assert any(line.startswith("exchange bybit: the local Bybit double") for line in summary.lines)
    moved = {
        (x["chain"], x["address"], x["asset"]): int(x["after"]) - int(x["before"])
        for x in summary.record["balances"]
    }
    assert moved.get((a.key, treasury, "USDC"), 0) == 0, text  # 3 in, then 3 out
    assert moved[a.key, deposit_address, "USDC"] == 3 * UNITS, text
    assert real_state(local_chain_set) == before


def test_a_request_made_on_the_page_is_served_by_the_rehearsal_service(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    """request_rehearsal (what the operator page and the API call), then
    `qtg rehearse --requested` as another operator login, with the chains'
    RPC URLs in its environment: the request is finished pointing at the
    passed rehearsal it recorded."""
    movement_id = cctp_movement(world, local_chain_set, Decimal("5"), "requested-cctp")
    with as_person(world, "bob"):
        request_id = procs.request_rehearsal(movement_id).one(world)
    operator = db.operator_dsn(NETWORK)

    result = CliRunner().invoke(
        app,
        ["rehearse", "--requested", "--timeout", "180"],
        env={"QTG_DATABASE_URL": operator, "COLUMNS": "200", **rpc_only_env(local_chain_set)},
    )

    assert result.exit_code == 0, result.output
    row = world.execute(
        "SELECT q.claimed_by, q.finished_at IS NOT NULL, q.problem, h.id, h.outcome, h.recorded_by"
        "  FROM rehearsal_requests q JOIN movement_rehearsals h ON h.id = q.rehearsal_id"
        " WHERE q.id = %s",
        (request_id,),
    ).fetchone()
    login = conninfo_to_dict(operator)["user"]
    assert row is not None and row[:3] == (login, True, None)
    assert row[4:] == ("passed", login)
    assert result.stdout.splitlines() == [
        f"request {request_id}: movement {movement_id}: rehearsal passed (rehearsal {row[3]})"
    ]
    state = world.execute(
        "SELECT state::text, rehearsal_id, outcome FROM rehearsal_status WHERE movement_id = %s",
        (movement_id,),
    ).fetchone()
    assert state == ("PENDING_APPROVAL", row[3], "passed")
