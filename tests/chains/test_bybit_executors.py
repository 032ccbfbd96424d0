"""The Bybit executors end to end: the real dispatcher, observer and recovery
batches as a runner login, carrying bybit_withdraw, bybit_deposit and
evm_transfer, against the fake Bybit (a real HTTP server, HMAC checked) that
sends real USDC from its hot wallet on the session's local chains.

What a treasury relies on: a withdrawal pays its recipient exactly once and
completes only when the chain shows the transfer at its finality depth; its
requestId is on the intent before the request; a repeated request (the venue
answering the original id, or 131082) and a crash at any step are recovered to
ONE withdrawal; an answer that does not say whether the withdrawal exists
(131082 to the first request, a code nobody documents) leaves the node to
recovery and says so, never FAILED; the venue's waits (10006's reset, the
withdrawal interval) are recovery's, on the database's clock; the recipient
goes to the venue spelled as its address book holds it; the venue's refusals
fail the node; a recipient off the allow-list is never requested; a transfer
into the exchange's deposit address is followed until credited, by a
bybit_deposit step or by the capital_transfer_followup sidecar.

One fake exchange for the module, at time scale 0.005 (a minute of its walk
is 0.3 s); every wait is a poll bounded by a deadline."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chain_support import TEST_KDF_ITERATIONS, LocalChainSet
from engine import add_lanes, approve, as_person, node, observe, pin_clock, register_sim
from eth_account import Account
from eth_utils import to_checksum_address
from evm_support import (
    head,
    make_due,
    node_state,
    register_world,
    superuser,
    transfers_from,
    usdc_balance,
)

from qtg_runner import signers
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.exchanges import bybit_codes
from qtg_runner.exchanges.bybit import BybitClient, request_id_for
from qtg_runner.executors.base import NodeWork
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import (
    capital_transfer_followup,
    node_dispatcher,
    node_observer,
    node_recovery,
)
from qtg_world.bybit import (
    BybitConfig,
    BybitHandle,
    bybit_chain,
    ensure_exchange_keys,
    serve,
)
from qtg_world.chains.registry import fund_treasury, register_venue
from qtg_world.local import BYBIT_KEY_FILE_ENV, BYBIT_URL_ENV

pytestmark = [pytest.mark.chain, pytest.mark.slow]

NETWORK = "testnet"
KEY = "execkey1"
SECRET = "exec-secret-not-for-logs-0123456789"
DEADLINE_S = 40.0
FINISHED = {"COMPLETED", "FAILED", "UNKNOWN"}
WITHDRAW_LANE = "bybit-withdraw"
DEPOSIT_LANE = "bybit-deposit"


@dataclass
class Exchange:
    chain_set: LocalChainSet
    handle: BybitHandle
    env: dict[str, str]
    deposit_address: str
    hot_wallet: str

    def withdrawals(self) -> int:
        return int(self.handle.status()["withdrawals"])

    def requests(self) -> int:
        return int(self.handle.status()["requests"])


@pytest.fixture(scope="module")
def exchange(local_chain_set: LocalChainSet, tmp_path_factory: Any) -> Iterator[Exchange]:
    keys = ensure_exchange_keys(local_chain_set.state_dir, kdf_iterations=TEST_KDF_ITERATIONS)
    for chain in local_chain_set.chains:
        fund_treasury(chain, [keys.hot])
    hot = signers.load(keys.hot.signer_id, env=local_chain_set.runner_env())
    chains = [
        bybit_chain(c, keys.deposit.address, deposit_confirmations=2)
        for c in local_chain_set.chains
    ]
    handle = serve(chains, {KEY: SECRET}, hot, BybitConfig(time_scale=0.005, tick_s=0.02))
    for account in local_chain_set.treasury:
        handle.whitelist(account.address)
    handle.credit(Decimal(100_000))
    key_file = Path(tmp_path_factory.mktemp("bybit-key")) / "key.json"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"api_key": KEY, "api_secret": SECRET}, f)
    env = local_chain_set.runner_env() | {
        BYBIT_URL_ENV: handle.url,
        BYBIT_KEY_FILE_ENV: str(key_file),
    }
    try:
        yield Exchange(local_chain_set, handle, env, keys.deposit.address, keys.hot.address)
    finally:
        handle.stop()


@pytest.fixture
def world(db: Any, exchange: Exchange) -> psycopg.Connection[Any]:
    """The test database's registry: the chains, the local venue, the executors."""
    conn = superuser(db)
    register_world(conn, exchange.chain_set)
    register_venue(conn, exchange.chain_set.chains, exchange.deposit_address)
    for executor in (BybitWithdrawExecutor, BybitDepositExecutor):
        procs.register_executor(
            executor.key,
            executor.has_side_effect,
            executor.node_config_schema,
            executor.description,
        ).one(conn)
    return conn


# -- helpers ---------------------------------------------------------------------


def fresh_recipient(conn: Any, exchange: Exchange, chain: str) -> str:
    """A new address, allow-listed in the registry and on the venue's address book."""
    address = str(Account.create().address).lower()
    procs.allow_destination(chain, address, "a counterparty").one(conn)
    exchange.handle.whitelist(address)
    return address


def withdraw_node(chain: str, to: str, key: str = "out") -> dict[str, Any]:
    return {
        "key": key,
        "executor": BybitWithdrawExecutor.key,
        "config": {
            "lane": WITHDRAW_LANE,
            "venue": "bybit",
            "coin": "USDC",
            "chain": chain,
            "to": to,
        },
        "depends_on": [],
    }


def paying_in(chain: str, sender: str, deposit_address: str) -> dict[str, Any]:
    """The step "pay": an evm_transfer from ``sender`` into the venue's deposit address."""
    return {
        "key": "pay",
        "executor": EvmTransferExecutor.key,
        "config": {"lane": "evm", "chain": chain, "from": sender, "to": deposit_address},
        "depends_on": [],
    }


def start(
    conn: Any, nodes: list[dict[str, Any]], amount: Decimal, external_id: str
) -> dict[str, int]:
    with as_person(conn, "alice"):
        created = procs.create_movement(external_id, amount, plan={"nodes": nodes}).one(conn)
    approve(conn, created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    rows = conn.execute(
        "SELECT node_key, id FROM movement_request_nodes WHERE request_id = %s",
        (created.movement_id,),
    ).fetchall()
    return {key: int(node_id) for key, node_id in rows}


Hook = Callable[[dict[str, Any]], None]


class ProcessDied(BaseException):
    """The runner process dies here: nothing after it in the process runs."""


def executors_of(pool: Any, env: dict[str, str]) -> dict[str, Any]:
    return {
        e.key: e
        for e in (
            EvmTransferExecutor(pool, NETWORK, env=env),
            BybitWithdrawExecutor(pool, NETWORK, env=env),
            BybitDepositExecutor(pool, NETWORK, env=env),
        )
    }


def run(
    db: Any, exchange: Exchange, job: Callable[[WorkerContext], Any], hook: Hook | None = None
) -> Any:
    """``job`` on a worker context of a real runner login carrying the three executors."""

    async def scenario() -> Any:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "bybit-test")
        async with open_pool(conninfo, name="bybit-test") as pool:
            executors = executors_of(pool, exchange.env)
            if hook is not None:
                hook(executors)
            ctx = WorkerContext(NETWORK, pool, executors, "bybit-test:1")
            try:
                return await job(ctx)
            finally:
                for e in executors.values():
                    await e.aclose()

    return asyncio.run(scenario())


def dispatch(db: Any, exchange: Exchange, hook: Hook | None = None) -> int:
    return int(run(db, exchange, lambda ctx: node_dispatcher.batch(ctx, "d@bybit-test:1"), hook))


def observe_once(
    db: Any, conn: Any, exchange: Exchange, node_id: int, hook: Hook | None = None
) -> str:
    make_due(conn, node_id)
    run(db, exchange, lambda ctx: node_observer.batch(ctx, "o@bybit-test:1"), hook)
    return node_state(conn, node_id)


def observe_until(db: Any, conn: Any, exchange: Exchange, node_id: int) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        state = observe_once(db, conn, exchange, node_id)
        if state in FINISHED:
            return state
        assert time.monotonic() < deadline, f"node {node_id} stayed {state}"
        time.sleep(0.2)


def recover(db: Any, conn: Any, exchange: Exchange) -> list[str]:
    """One recovery batch once the claims' leases ran out (the recovery claim's
    clock moved past them): the nodes' states afterwards."""
    pin_clock(conn, "2099-01-01T00:00:00+00:00")
    try:
        claims = procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn)
    finally:
        pin_clock(conn, None)
    assert claims, "nothing to recover"

    async def job(ctx: WorkerContext) -> None:
        for claim in claims:
            await node_recovery.recover_one(
                ctx, NodeWork.from_claim(claim, NETWORK), claim.node_state
            )

    run(db, exchange, job)
    return [node_state(conn, c.node_id) for c in claims]


def recover_at(db: Any, conn: Any, exchange: Exchange, seconds: float) -> list[str]:
    """One recovery batch with the database's clock ``seconds`` ahead of now:
    the states of the nodes it claimed (none: their waits have not passed)."""
    (now,) = conn.execute("SELECT clock_timestamp()").fetchone()
    pin_clock(conn, (now + timedelta(seconds=seconds)).isoformat())
    try:
        claims = procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn)
    finally:
        pin_clock(conn, None)

    async def job(ctx: WorkerContext) -> None:
        for claim in claims:
            await node_recovery.recover_one(
                ctx, NodeWork.from_claim(claim, NETWORK), claim.node_state
            )

    run(db, exchange, job)
    return [node_state(conn, c.node_id) for c in claims]


def node_row(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT node_state::text, evidence, last_error, external_ref, next_observe_at - now(),"
        " lease_until - now(), observe_held_reason FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    assert row is not None
    keys = ("state", "evidence", "last_error", "external_ref", "observe_in", "lease_in", "held")
    return dict(zip(keys, row, strict=True))


def intent_of(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT intent_document(%s)", (node_id,)).fetchone()
    assert row is not None and row[0] is not None
    return dict(row[0])


def dies_in(method: str, before: bool = True) -> Hook:
    """The runner process dies in the withdrawal executor's ``method``: before
    the call reaches the venue (``before``), or right after it answered."""

    def hook(executors: dict[str, Any]) -> None:
        executor = executors[BybitWithdrawExecutor.key]
        real = getattr(executor, method)

        async def dying(*args: Any) -> Any:
            if not before:
                await real(*args)
            raise ProcessDied(method)

        setattr(executor, method, dying)

    return hook


# -- withdrawals -----------------------------------------------------------------


def test_a_withdrawal_pays_its_recipient_once_and_completes_when_the_chain_shows_it(
    db: Any, world: Any, exchange: Exchange
) -> None:
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    start_block, count = head(chain), exchange.withdrawals()
    nodes = start(world, [withdraw_node(chain.key, recipient)], Decimal("12.345678"), "w1")
    node_id = nodes["out"]

    assert dispatch(db, exchange) == 1
    row = node_row(world, node_id)
    assert row["state"] == "SUBMITTED"
    intent = intent_of(world, node_id)
    # the requestId derived from the intent's idempotency key and the venue's
    # salt in this database, recorded on it
    salt = world.execute("SELECT request_salt FROM exchange_venues").fetchone()[0]
    assert len(salt) == 32
    key = f"{salt}:{intent['idempotency_key']}"
    assert intent["external_request_id"] == request_id_for(key)
    assert intent["prepared_payload"]["request_id"] == intent["external_request_id"]
    assert row["external_ref"] == intent["external_ref"]

    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    evidence = node_row(world, node_id)["evidence"]
    assert evidence["withdraw_id"] == row["external_ref"]
    assert evidence["status"] == "success" and evidence["amount"] == "12.345678"
    assert evidence["fee"] == "0"
    assert evidence["tx_id"].startswith("0x")
    assert evidence["confirmations"] >= evidence["finality_depth"] + 1
    assert evidence["transfer"]["to"] == recipient and evidence["transfer"]["value"] == "12345678"
    assert evidence["transfer"]["from"] == exchange.hot_wallet
    assert usdc_balance(chain, recipient) == 12_345_678
    assert (recipient, 12_345_678) in transfers_from(chain, exchange.hot_wallet, start_block)
    assert exchange.withdrawals() == count + 1


@pytest.mark.parametrize("mode", ["original", "error"])
def test_a_request_repeated_by_recovery_finds_the_one_withdrawal(
    db: Any, world: Any, exchange: Exchange, mode: Any
) -> None:
    """The runner dies right after the venue accepted the withdrawal, before it
    reported the id. Recovery repeats the request with the recorded requestId:
    the venue answers the original id, or 131082 and the withdrawal is found by
    query-record; either way one withdrawal, one payment."""
    chain = exchange.chain_set.chains[1]
    recipient = fresh_recipient(world, exchange, chain.key)
    exchange.handle.set_repeat_mode(mode)
    count = exchange.withdrawals()
    try:
        node_id = start(
            world, [withdraw_node(chain.key, recipient)], Decimal("2.5"), f"rep-{mode}"
        )["out"]
        with pytest.raises(BaseException):  # noqa: B017 - the "process" dies after the request
            dispatch(db, exchange, dies_in("submit", before=False))
        assert node_state(world, node_id) == "SUBMITTING"
        assert intent_of(world, node_id)["intent_state"] == "PREPARED"
        assert exchange.withdrawals() == count + 1

        assert recover(db, world, exchange) == ["SUBMITTED"]
        row = node_row(world, node_id)
        if mode == "original":
            assert row["evidence"]["requested_again"] is True
        else:  # the repeat's answer says nothing; the venue's one matching record does
            assert "131082" in row["evidence"]["repeat_answer"]
        wid = row["external_ref"]
        assert exchange.handle.withdrawal(wid)["toAddress"] == recipient
        assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    finally:
        exchange.handle.set_repeat_mode("original")
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 2_500_000


@pytest.mark.parametrize("crash", ["after_intent", "observing"])
def test_a_crash_is_recovered_to_exactly_one_withdrawal(
    db: Any, world: Any, exchange: Exchange, crash: str
) -> None:
    """after_intent: the requestId is recorded, the process dies before the
    request; recovery makes it with that requestId. observing: the process dies
    while observing; the next observer completes it. One withdrawal each."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.75"), crash)["out"]
    if crash == "after_intent":
        with pytest.raises(BaseException):  # noqa: B017 - the "process" dies before the request
            dispatch(db, exchange, dies_in("submit"))
        assert intent_of(world, node_id)["external_request_id"]
        assert exchange.withdrawals() == count
        assert recover(db, world, exchange) == ["SUBMITTED"]
    else:
        assert dispatch(db, exchange) == 1
        with pytest.raises(BaseException):  # noqa: B017 - the "process" dies observing
            observe_once(db, world, exchange, node_id, dies_in("observe", before=False))
        assert node_state(world, node_id) == "SUBMITTED"  # its transaction rolled back
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 750_000


@pytest.mark.parametrize(("code", "ends"), [("131093", "FAILED"), ("131212", "UNKNOWN")])
def test_a_refused_repeat_fails_the_node_only_when_the_first_request_could_not_cause_it(
    db: Any, world: Any, exchange: Exchange, code: str, ends: str
) -> None:
    """The process dies before its request; recovery repeats it and the venue
    refuses the repeat, and shows no matching withdrawal. An address off the
    venue's book (131093) is refused whatever came first: nothing was made,
    FAILED. Too little balance (131212) may be the first request's own doing,
    had it reached the venue and its record not been listed yet: recovery
    does not conclude, an operator does (the node stays UNKNOWN, saying so)."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.5"), f"rr-{code}")[
        "out"
    ]
    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies before the request
        dispatch(db, exchange, dies_in("submit"))
    exchange.handle.inject_error(int(code), path="/v5/asset/withdraw/create")
    assert recover(db, world, exchange) == [ends]
    row = node_row(world, node_id)
    assert code in row["evidence"]["repeat_answer"]
    if ends == "UNKNOWN":
        assert "an operator decides" in row["evidence"]["problem"]
    assert exchange.withdrawals() == count


def test_the_rate_limit_reset_becomes_the_nodes_pacing(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """10006 carries X-Bapi-Limit-Reset-Timestamp: the request is repeated by
    recovery (its intent is recorded) only once the database's clock has passed
    the reset, as the submit's and as the repeat's wait."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    # the request refused with 10006 twice (the submit, then recovery's repeat)
    exchange.handle.inject_rate_limit(2, reset_in_ms=9000, path="/v5/asset/withdraw/create")
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("1.5"), "limited")["out"]
    dispatch(db, exchange)
    row = node_row(world, node_id)
    # the intent was recorded, so a failed request goes to recovery, never a blind retry
    assert row["state"] == "UNKNOWN" and "10006" in row["last_error"]
    assert 7 <= row["lease_in"].total_seconds() <= 9, row["lease_in"]  # the reset, not at once
    assert recover_at(db, world, exchange, 5) == []
    assert recover_at(db, world, exchange, 10) == ["UNKNOWN"]
    row = node_row(world, node_id)
    assert 7 <= row["lease_in"].total_seconds() <= 10, row["lease_in"]  # the reset, not a default
    assert exchange.withdrawals() == count
    assert recover_at(db, world, exchange, 5) == []
    assert recover_at(db, world, exchange, 10) == ["SUBMITTED"]

    # while observing: the next observation waits for the reset, and the
    # wait is the venue's (THROTTLED: the node is held back, not observed)
    exchange.handle.inject_rate_limit(1, reset_in_ms=8000, path="/v5/asset/withdraw/query-record")
    assert observe_once(db, world, exchange, node_id) == "SUBMITTED"
    row = node_row(world, node_id)
    assert "10006" in row["held"]
    assert 6 <= row["observe_in"].total_seconds() <= 9, row["observe_in"]
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1


def test_the_withdrawal_interval_is_waited_for_not_failed(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """One withdrawal per chain and coin every 10 s (withdraw/create docs): the
    second within it is answered 90040; the node waits in UNKNOWN for the
    documented 10 s on the database's clock and recovery repeats the same
    request then. Two withdrawals, one each."""
    chain = exchange.chain_set.chains[1]
    first, second = (fresh_recipient(world, exchange, chain.key) for _ in range(2))
    count = exchange.withdrawals()
    a = start(world, [withdraw_node(chain.key, first)], Decimal("1.1"), "interval-a")["out"]
    assert dispatch(db, exchange) == 1
    assert node_state(world, a) == "SUBMITTED"
    exchange.handle.set_withdraw_interval(60)
    try:
        b = start(world, [withdraw_node(chain.key, second)], Decimal("2.2"), "interval-b")["out"]
        dispatch(db, exchange)
        row = node_row(world, b)
        assert row["state"] == "UNKNOWN", row
        assert str(bybit_codes.WITHDRAW_INTERVAL) in row["last_error"]
        assert 9 <= row["lease_in"].total_seconds() <= 10, row["lease_in"]
        assert exchange.withdrawals() == count + 1
        assert recover_at(db, world, exchange, 5) == []
    finally:
        exchange.handle.set_withdraw_interval(None)
    assert recover_at(db, world, exchange, 11) == ["SUBMITTED"]
    for node_id in (a, b):
        assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 2
    assert (usdc_balance(chain, first), usdc_balance(chain, second)) == (1_100_000, 2_200_000)


def requested_before(exchange: Exchange) -> Hook:
    """The request with the node's recorded requestId was made once already,
    its answer lost (a runner that died, a database restored from a backup):
    the dispatcher's submit is the venue's second sight of the requestId."""

    def hook(executors: dict[str, Any]) -> None:
        executor = executors[BybitWithdrawExecutor.key]
        real = executor.submit

        async def submit(work: NodeWork, prepared: Any) -> Any:
            route = prepared.payload
            async with BybitClient(exchange.handle.url, KEY, SECRET) as client:
                await client.withdraw(
                    coin=route["coin"],
                    chain=route["venue_chain"],
                    address=route["recipient"],
                    amount=Decimal(route["amount"]),
                    request_id=prepared.external_request_id,
                )
            return await real(work, prepared)

        executor.submit = submit

    return hook


def test_a_duplicate_request_answer_is_left_to_recovery_which_finds_the_one_withdrawal(
    db: Any, world: Any, exchange: Exchange, caplog: pytest.LogCaptureFixture
) -> None:
    """131082 "Do not repeat the request" to the dispatcher's submit does not
    say whether a withdrawal exists: the node goes to recovery, never FAILED and
    never adopting a look-alike; the answer is logged and is the node's error.
    Recovery repeats the request with the recorded requestId (131082 again)
    and settles the node from the venue's one record of it. One withdrawal."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    exchange.handle.set_repeat_mode("error")
    caplog.set_level(logging.WARNING, logger="qtg")
    try:
        node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("3.3"), "dup")["out"]
        dispatch(db, exchange, requested_before(exchange))
        row = node_row(world, node_id)
        assert row["state"] == "UNKNOWN", row
        assert "131082" in row["last_error"] and "unknown" in row["last_error"]
        assert row["external_ref"] is None
        reported = [r.getMessage() for r in caplog.records if "unknown_answer" in r.getMessage()]
        assert any(f"node={node_id}" in m and "ret_code=131082" in m for m in reported)
        assert exchange.withdrawals() == count + 1

        assert recover(db, world, exchange) == ["SUBMITTED"]
        row = node_row(world, node_id)
        assert "131082" in row["evidence"]["repeat_answer"]
        assert exchange.handle.withdrawal(row["external_ref"])["toAddress"] == recipient
    finally:
        exchange.handle.set_repeat_mode("original")
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 3_300_000


def test_an_undocumented_answer_is_left_to_recovery_never_failed(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """A code the table does not know answers the withdrawal: UNKNOWN with the
    venue's words, for recovery; its repeat with the recorded requestId is
    the venue's first sight of it here, so it makes the one withdrawal."""
    chain = exchange.chain_set.chains[1]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    code = 131_999
    assert code not in bybit_codes.CODES
    exchange.handle.inject_error(
        code, path="/v5/asset/withdraw/create", message="a new kind of trouble"
    )
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.6"), "undoc")["out"]
    dispatch(db, exchange)
    row = node_row(world, node_id)
    assert row["state"] == "UNKNOWN", row
    assert str(code) in row["last_error"] and "a new kind of trouble" in row["last_error"]
    assert exchange.withdrawals() == count
    assert recover(db, world, exchange) == ["SUBMITTED"]
    assert node_row(world, node_id)["evidence"]["requested_again"] is True
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1


def test_the_recipient_goes_to_the_venue_as_its_address_book_spells_it(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """The registry keeps EVM addresses lower-case; the venue's address book
    holds this one checksummed and compares case-sensitively ("use the exact
    same address added in address book"). The request names it as the book
    does; the chain's Transfer is to the same address."""
    chain = exchange.chain_set.chains[0]
    recipient = str(Account.create().address).lower()
    spelled = to_checksum_address(recipient)
    assert spelled != recipient
    procs.allow_destination(chain.key, spelled, "a counterparty").one(world)
    exchange.handle.whitelist(spelled, chain=chain.key)
    count = exchange.withdrawals()
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("4.4"), "case")["out"]
    assert dispatch(db, exchange) == 1
    row = node_row(world, node_id)
    assert row["state"] == "SUBMITTED", row
    assert exchange.handle.withdrawal(row["external_ref"])["toAddress"] == spelled
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert node_row(world, node_id)["evidence"]["transfer"]["to"] == recipient
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 4_400_000


@pytest.mark.parametrize("code", ["131093", "131212"])
def test_the_venues_refusal_fails_the_node_with_its_reason(
    db: Any, world: Any, exchange: Exchange, code: str
) -> None:
    chain = exchange.chain_set.chains[0]
    count = exchange.withdrawals()
    if code == "131093":  # allow-listed by us, not on the venue's address book
        recipient = str(Account.create().address).lower()
        procs.allow_destination(chain.key, recipient, "not at the venue").one(world)
        amount = Decimal("1")
    else:  # more than the FUND account holds
        recipient = fresh_recipient(world, exchange, chain.key)
        amount = exchange.handle.balance() + 1
    node_id = start(world, [withdraw_node(chain.key, recipient)], amount, f"refused-{code}")["out"]
    dispatch(db, exchange)
    row = node_row(world, node_id)
    assert row["state"] == "FAILED"
    assert code in row["last_error"] and "refused the withdrawal" in row["last_error"]
    assert exchange.withdrawals() == count


def test_a_recipient_off_the_allow_list_is_never_requested(
    db: Any, world: Any, exchange: Exchange
) -> None:
    chain = exchange.chain_set.chains[0]
    outsider = str(Account.create().address).lower()
    exchange.handle.whitelist(outsider)  # the venue would pay it: the engine must not ask
    node_id = start(world, [withdraw_node(chain.key, outsider)], Decimal("3"), "outsider")["out"]
    requests = exchange.requests()
    # the route itself, as the runner login
    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "bybit-test")
    with psycopg.connect(conninfo) as runner, pytest.raises(psycopg.Error) as refused:
        procs.bybit_withdraw_route(node_id).one(runner)
    assert refused.value.sqlstate == "QT032"
    dispatch(db, exchange)
    row = node_row(world, node_id)
    assert row["state"] == "FAILED" and "QT032" in row["last_error"]
    assert exchange.requests() == requests  # nothing reached the venue
    assert (
        world.execute(
            "SELECT count(*) FROM node_intents"
            " WHERE node_id = %s AND external_request_id IS NOT NULL",
            (node_id,),
        ).fetchone()[0]
        == 0
    )


# -- deposits --------------------------------------------------------------------


def test_a_transfer_into_the_exchange_completes_its_deposit_step_when_credited(
    db: Any, world: Any, exchange: Exchange
) -> None:
    chain = exchange.chain_set.chains[0]
    sender = exchange.chain_set.treasury[0].address
    balance = exchange.handle.balance()
    nodes = start(
        world,
        [
            paying_in(chain.key, sender, exchange.deposit_address),
            {
                "key": "credit",
                "executor": BybitDepositExecutor.key,
                "config": {"lane": DEPOSIT_LANE, "venue": "bybit", "chain": chain.key},
                "depends_on": ["pay"],
            },
        ],
        Decimal("4.2"),
        "deposit",
    )
    assert dispatch(db, exchange) == 1  # the transfer
    assert observe_until(db, world, exchange, nodes["pay"]) == "COMPLETED"
    tx_hash = node_row(world, nodes["pay"])["external_ref"]

    assert dispatch(db, exchange) == 1  # the deposit step, with its parent's evidence
    row = node_row(world, nodes["credit"])
    assert row["state"] == "SUBMITTED" and row["external_ref"] == tx_hash
    assert observe_until(db, world, exchange, nodes["credit"]) == "COMPLETED"
    evidence = node_row(world, nodes["credit"])["evidence"]
    assert evidence["credited_amount"] == "4.2"
    (record,) = evidence["deposits"]
    assert record["tx_id"] == tx_hash and record["status"] == 3
    assert exchange.handle.balance() == balance + Decimal("4.2")
    # a plan with its own deposit step is not the followup's
    run(db, exchange, lambda ctx: capital_transfer_followup.run_round(ctx, exchange.env))
    assert world.execute("SELECT count(*) FROM capital_transfer_followups").fetchone()[0] == 0


@pytest.mark.parametrize("deposit", ["credited", "forged_transfer", "forged_credit"])
def test_a_withdrawal_after_a_deposit_pays_only_what_the_venue_credited(
    db: Any, world: Any, exchange: Exchange, deposit: str
) -> None:
    """Pay into the venue, wait for its credit, withdraw it to a counterparty.
    credited: the three steps run, one withdrawal pays the recipient.
    forged_transfer: a runner login reports the transfer settled with a
    transaction it never signed: the deposit step's record is refused (a
    transfer pays with a transaction its intent signed), the step is set aside
    for an operator, and nothing is withdrawn. forged_credit: a paying step
    whose transaction the engine cannot check (a sim step here, as a bridge's
    delivery by others), reported
    settled, and the deposit step reported COMPLETED, by the runner login,
    before the venue credits anything: the withdrawal reads its deposit at
    the venue first (verify before spending) and requests nothing; recovery
    of it, had it been prepared, would not repeat its request either."""
    chain = exchange.chain_set.chains[0]
    sender = exchange.chain_set.treasury[0].address
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    if deposit == "forged_credit":
        register_sim(world)
        paying = node("pay", lane="instant")
        add_lanes(world, "instant")
    else:
        paying = paying_in(chain.key, sender, exchange.deposit_address)
    nodes = start(
        world,
        [
            paying,
            {
                "key": "credit",
                "executor": BybitDepositExecutor.key,
                "config": {"lane": DEPOSIT_LANE, "venue": "bybit", "chain": chain.key},
                "depends_on": ["pay"],
            },
            withdraw_node(chain.key, recipient) | {"depends_on": ["credit"]},
        ],
        Decimal("4.2"),
        f"spend-{deposit}",
    )
    if deposit == "credited":
        assert dispatch(db, exchange) == 1  # the transfer
        assert observe_until(db, world, exchange, nodes["pay"]) == "COMPLETED"
        assert dispatch(db, exchange) == 1  # the deposit step
        assert observe_until(db, world, exchange, nodes["credit"]) == "COMPLETED"
        dispatch(db, exchange)  # the withdrawal
        assert observe_until(db, world, exchange, nodes["out"]) == "COMPLETED"
        assert exchange.withdrawals() == count + 1
        assert usdc_balance(chain, recipient) == 4_200_000
        return
    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "forger")
    with psycopg.connect(conninfo, autocommit=True) as runner:
        [claimed] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
        never = "0x" + "5f" * 32
        told = {"tx_hash": never, "transfer": {"to": exchange.deposit_address.lower(),
                                               "value": "4200000"}}  # fmt: skip
        procs.complete_submit(nodes["pay"], claimed.claim_secret, never, told, settled=True).one(
            runner
        )
        dispatch(db, exchange)  # the deposit step records what it waits for, or is refused
        if deposit == "forged_transfer":
            (reason,) = world.execute(
                "SELECT reason FROM quarantined_nodes WHERE node_id = %s", (nodes["credit"],)
            ).fetchone()
            assert "one its intent signed" in reason  # set aside for an operator
            assert node_row(world, nodes["out"])["state"] == "PENDING"
            assert exchange.withdrawals() == count
            return
        make_due(world, nodes["credit"])
        with runner.transaction():
            [seen] = procs.claim_observe_batch([nodes["credit"]], "node_observer").all(runner)
            procs.complete_observe_batch(
                [nodes["credit"]], [seen.claim_secret], ["COMPLETED"], [{"credited": "yes"}]
            ).all(runner)
    assert node_row(world, nodes["credit"])["state"] == "COMPLETED"
    dispatch(db, exchange)  # the withdrawal
    row = node_row(world, nodes["out"])
    assert row["state"] == "READY", row  # waits: the venue may not show it yet
    assert "shows its deposit" in row["last_error"] and "nothing is requested" in row["last_error"]
    assert exchange.withdrawals() == count

    # a runner login that runs the executor's code without the check prepares
    # the withdrawal (its requestId recorded) and stops before the request
    def unchecked_then_dies(executors: dict[str, Any]) -> None:
        async def funded(work: Any) -> None:
            return None

        executors[BybitWithdrawExecutor.key]._unfunded = funded
        dies_in("submit")(executors)

    world.execute(
        "UPDATE movement_request_nodes SET not_before = NULL WHERE id = %s", (nodes["out"],)
    )
    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies before the request
        dispatch(db, exchange, unchecked_then_dies)
    assert intent_of(world, nodes["out"])["external_request_id"]
    # recovery does not repeat the request of an unfunded withdrawal
    assert recover(db, world, exchange) == ["UNKNOWN"]
    assert exchange.withdrawals() == count
    evidence = node_row(world, nodes["out"])["evidence"]
    assert "deposits do not stand" in evidence["problem"], evidence
    assert "pending" in evidence["unfunded"]


def test_the_followup_sees_a_bare_transfer_into_the_exchange_credited(
    db: Any, world: Any, exchange: Exchange
) -> None:
    chain = exchange.chain_set.chains[1]
    sender = exchange.chain_set.treasury[1].address
    node_id = start(
        world,
        [
            {
                "key": "pay",
                "executor": EvmTransferExecutor.key,
                "config": {
                    "lane": "evm",
                    "chain": chain.key,
                    "from": sender,
                    "to": exchange.deposit_address,
                },
                "depends_on": [],
            }
        ],
        Decimal("1.25"),
        "bare",
    )["pay"]
    dispatch(db, exchange)
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    tx_hash = node_row(world, node_id)["external_ref"]

    def followup_round() -> tuple[str, Any]:
        world.execute(
            "UPDATE capital_transfer_followups SET next_check_at = now() - interval '1 s'"
        )
        run(db, exchange, lambda ctx: capital_transfer_followup.run_round(ctx, exchange.env))
        row = world.execute(
            "SELECT followup_state, credited_amount, tx_hash FROM capital_transfer_followups"
            " WHERE node_id = %s",
            (node_id,),
        ).fetchone()
        assert row is not None and row[2] == tx_hash
        return str(row[0]), row[1]

    deadline = time.monotonic() + DEADLINE_S
    state, amount = followup_round()
    while state == "WAITING":
        assert time.monotonic() < deadline, "the deposit was never credited"
        time.sleep(0.3)
        state, amount = followup_round()
    assert (state, amount) == ("CREDITED", Decimal("1.25"))
    assert world.execute("SELECT count(*) FROM capital_transfer_mismatches").fetchone()[0] == 0


def test_health_says_whether_the_venue_answers(db: Any, world: Any, exchange: Exchange) -> None:
    from qtg_runner.executors.base import HealthStatus
    from qtg_runner.ports import free_port

    def health(env: dict[str, str]) -> Any:
        async def job(ctx: WorkerContext) -> Any:
            executor = BybitWithdrawExecutor(ctx.pool, NETWORK, env=env, timeout=2)
            try:
                return await executor.health()
            finally:
                await executor.aclose()

        return run(db, exchange, job)

    result = health(exchange.env)
    assert result.status is HealthStatus.HEALTHY and "answers" in result.detail["bybit"]
    # the venue's coin info shows USDC withdrawals suspended on a chain
    suspended = exchange.chain_set.chains[1].key
    exchange.handle.suspend_withdrawals(suspended)
    try:
        result = health(exchange.env)
    finally:
        exchange.handle.suspend_withdrawals(suspended, False)
    assert result.status is HealthStatus.DEGRADED
    assert f"USDC withdrawals suspended on {suspended}" in result.detail["bybit"]
    unset = {k: v for k, v in exchange.env.items() if k != BYBIT_URL_ENV}
    result = health(unset)
    assert result.status is HealthStatus.DEGRADED and BYBIT_URL_ENV in result.detail["bybit"]
    down = exchange.env | {BYBIT_URL_ENV: f"http://127.0.0.1:{free_port()}"}
    result = health(down)
    assert result.status is HealthStatus.DOWN and result.detail["bybit"].startswith("down:")
    assert SECRET not in str(result.detail)


# -- a runner login that forges what is sent -------------------------------------


def test_a_runner_login_cannot_redirect_a_withdrawal_through_recovery(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """The attack with the runner's database login alone (no exchange key):
    claim a freshly approved withdrawal, record a payload of its own (another
    recipient, another amount, another venue URL's or key file's variable,
    another requestId) and fail the submit as retryable, hoping the recovery
    worker, which holds the key, repeats "the prepared request". Each forged
    record is refused (QT032) and changes nothing; the failed submit leaves
    nothing prepared, so the honest dispatcher prepares the approved route and
    the venue pays the approved recipient the approved amount, once."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    thief = fresh_recipient(world, exchange, chain.key)  # even allow-listed everywhere
    count = exchange.withdrawals()
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("10"), "forged")["out"]

    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "evil")
    with psycopg.connect(conninfo, autocommit=True) as runner:
        [claimed] = procs.claim_ready_nodes("node_dispatcher", 1).all(runner)
        assert claimed.node_id == node_id
        route = procs.bybit_withdraw_route(node_id).one(runner)
        salt = route.request_salt
        request_id = request_id_for(f"{salt}:{claimed.idempotency_key}")
        honest = {
            "venue_key": route.venue_key,
            "kind": route.kind,
            "base_url_env": route.base_url_env,
            "key_file_env": route.key_file_env,
            "chain_key": route.chain_key,
            "venue_chain": route.venue_chain,
            "rpc_url_env": route.rpc_url_env,
            "finality_depth": route.finality_depth,
            "coin": route.coin,
            "token_address": route.token_address,
            "recipient": route.recipient,
            "amount": route.amount,
            "amount_units": str(int(route.amount_units)),
            "request_id": request_id,
        }
        forgeries = [
            (honest | {"recipient": thief}, request_id),
            (honest | {"amount": "500", "amount_units": "500000000"}, request_id),
            (honest | {"base_url_env": "EVIL_BYBIT_URL"}, request_id),
            (honest | {"key_file_env": "HOME"}, request_id),
            (honest | {"prepared_at_ms": 4_102_444_800_000}, request_id),
            (honest, "0" * 32),
            ({k: v for k, v in honest.items() if k != "recipient"}, request_id),
        ]
        before = intent_of(world, node_id)
        for payload, external_id in forgeries:
            with pytest.raises(psycopg.Error) as refused:
                runner.execute(
                    "SELECT record_intent_prepared(%s, %s, p_external_request_id => %s,"
                    " p_payload => %s::jsonb)",
                    (node_id, claimed.claim_secret, external_id, json.dumps(payload)),
                )
            assert refused.value.sqlstate == "QT032", payload
            assert intent_of(world, node_id) == before
        # the submit "fails": nothing was prepared, so nothing is for recovery to repeat
        runner.execute(
            "SELECT fail_submit(%s, %s, 'the venue is down', true)",
            (node_id, claimed.claim_secret),
        )
    assert node_state(world, node_id) == "READY"
    assert intent_of(world, node_id)["intent_state"] == "FAILED"  # never prepared
    world.execute("UPDATE movement_request_nodes SET not_before = NULL WHERE id = %s", (node_id,))

    assert dispatch(db, exchange) == 1
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 10_000_000
    assert usdc_balance(chain, thief) == 0


def test_a_withdrawal_id_the_venue_does_not_know_gives_way_to_the_request(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """The requestId recorded, the process dead before the request; a runner
    login then hands recovery a withdrawal id of its own making
    (STILL_UNKNOWN). The venue knows no such withdrawal: within the repeat
    window recovery asks by the recorded requestId, the venue makes the one
    withdrawal, and the node completes with the venue's id (it used to wait
    for an operator for ever)."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    count = exchange.withdrawals()
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.35"), "madeup")["out"]
    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies before the request
        dispatch(db, exchange, dies_in("submit"))
    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "madeup")
    with psycopg.connect(conninfo, autocommit=True) as runner:
        pin_clock(runner, "2098-01-01T00:00:00+00:00")  # the dead claim's lease ran out
        [claim] = procs.claim_recovery_nodes("node_recovery", 16, 120).all(runner)
        runner.execute(
            "SELECT complete_recovery(%s, %s, 'STILL_UNKNOWN', '{\"said\": \"so\"}', 'made-up-1')",
            (node_id, claim.claim_secret),
        )
    assert node_row(world, node_id)["external_ref"] == "made-up-1"
    assert recover(db, world, exchange) == ["SUBMITTED"]
    assert node_row(world, node_id)["external_ref"] != "made-up-1"
    assert observe_until(db, world, exchange, node_id) == "COMPLETED"
    assert exchange.withdrawals() == count + 1
    assert usdc_balance(chain, recipient) == 350_000


@pytest.mark.parametrize("outcome", ["COMPLETED", "IN_FLIGHT", "STILL_UNKNOWN"])
def test_one_withdrawal_never_settles_two_nodes(
    db: Any, world: Any, exchange: Exchange, outcome: str
) -> None:
    """Two withdrawals of the same amount to the same address: the first paid and
    COMPLETED; the second's request recorded, its process dead before it. A
    recovery verdict that names the first's withdrawal for the second (a
    look-alike record, or a forged verdict with the second's requestId and the
    first's Transfer) is refused: one withdrawal settles one node. So is one
    that hands it to the observer (IN_FLIGHT, STILL_UNKNOWN), which would
    read the first's withdrawal as the second's; and no other path may give
    the second the first's id (a unique index)."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    first = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.5"), "twin-1")["out"]
    assert dispatch(db, exchange) == 1
    assert observe_until(db, world, exchange, first) == "COMPLETED"
    paid = node_row(world, first)
    second = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.5"), "twin-2")["out"]
    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies before the request
        dispatch(db, exchange, dies_in("submit"))
    intent = intent_of(world, second)
    evidence = dict(paid["evidence"], request_id=intent["external_request_id"])
    # the verdict as the runner login would report it: refused, nothing changed
    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "twin")
    with psycopg.connect(conninfo, autocommit=True) as runner:
        pin_clock(runner, "2099-01-01T00:00:00+00:00")  # the dead claim's lease ran out
        [claim] = procs.claim_recovery_nodes("node_recovery", 16, 120).all(runner)
        assert claim.node_id == second
        before = node_row(world, second)
        with pytest.raises(psycopg.Error) as refused:
            runner.execute(
                "SELECT complete_recovery(%s, %s, %s, %s::jsonb, %s)",
                (second, claim.claim_secret, outcome, json.dumps(evidence), paid["external_ref"]),
            )
        assert refused.value.sqlstate == "QT032"
        assert f"belongs to node {first} already" in str(refused.value)
        assert node_row(world, second)["state"] == before["state"]
        assert node_row(world, second)["external_ref"] is None
    with pytest.raises(psycopg.errors.UniqueViolation), world.transaction():
        world.execute(
            "UPDATE movement_request_nodes SET external_ref = %s WHERE id = %s",
            (paid["external_ref"], second),
        )
    for ref, refused in ((paid["external_ref"], True), ("a-withdrawal-nobody-holds", False)):
        problem = world.execute(
            "SELECT recovery_evidence_problem(%s, 'COMPLETED', %s::jsonb, %s)",
            (second, json.dumps(evidence), ref),
        ).fetchone()[0]
        if refused:
            assert problem.startswith("QT032") and f"belongs to node {first} already" in problem
        else:
            assert problem is None or "belongs to node" not in problem, problem


def test_one_transfer_never_settles_two_withdrawals(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """Two withdrawals of the same amount to the same address, each paid; the
    first COMPLETED on its Transfer. An observation of the second that names
    the first's Transfer (a stale, replayed or hostile venue record, or a
    runner login's word) is refused and changes nothing: one Transfer
    settles one withdrawal; so is one that names no Transfer at all. The
    second then completes on its own."""
    chain = exchange.chain_set.chains[0]
    recipient = fresh_recipient(world, exchange, chain.key)
    first = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.75"), "paid-1")["out"]
    assert dispatch(db, exchange) == 1
    assert observe_until(db, world, exchange, first) == "COMPLETED"
    paid = node_row(world, first)["evidence"]
    second = start(world, [withdraw_node(chain.key, recipient)], Decimal("0.75"), "paid-2")["out"]
    assert dispatch(db, exchange) == 1
    before = node_row(world, second)
    evidence = paid | {
        "withdraw_id": before["external_ref"],
        "request_id": intent_of(world, second)["external_request_id"],
    }
    conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "paid")
    make_due(world, second)
    bare = {k: v for k, v in evidence.items() if k not in ("tx_id", "transfer")}
    with psycopg.connect(conninfo, autocommit=True) as runner:
        for forged, says in (
            (evidence, f"settled node {first}'s withdrawal already"),
            (bare, "and it names none"),  # no Transfer at all: the runner's word alone
        ):
            with pytest.raises(psycopg.Error) as refused:
                observe(runner, second, "COMPLETED", evidence=forged)
            assert refused.value.sqlstate == "QT050"
            assert says in str(refused.value)
    assert node_row(world, second)["state"] == before["state"]
    assert node_row(world, second)["evidence"] == before["evidence"]
    assert observe_until(db, world, exchange, second) == "COMPLETED"
    settled = world.execute(
        "SELECT node_id, tx_hash FROM withdrawal_transfers WHERE node_id IN (%s, %s)"
        " ORDER BY node_id",
        (first, second),
    ).fetchall()
    assert [n for n, _ in settled] == [first, second]
    assert settled[0][1] == paid["tx_id"].lower() != settled[1][1]


def test_a_withdrawal_whose_route_changed_in_flight_is_left_to_an_operator(
    db: Any, world: Any, exchange: Exchange
) -> None:
    """Observation and recovery read the route again: once the registry no
    longer says what the recorded request says (here the venue's key file
    variable was renamed), neither reads the venue with the recorded names nor
    repeats anything; the node waits in UNKNOWN with the reason."""
    chain = exchange.chain_set.chains[1]
    recipient = fresh_recipient(world, exchange, chain.key)
    node_id = start(world, [withdraw_node(chain.key, recipient)], Decimal("1.25"), "moved")["out"]
    assert dispatch(db, exchange) == 1
    requests = exchange.requests()
    world.execute("UPDATE exchange_venues SET key_file_env = 'QTG_OTHER_KEY_FILE'")
    try:
        assert observe_once(db, world, exchange, node_id) == "UNKNOWN"
        assert "key_file_env" in str(node_row(world, node_id)["evidence"]["problem"])
        assert recover(db, world, exchange) == ["UNKNOWN"]
        assert "key_file_env" in str(node_row(world, node_id)["evidence"]["problem"])
        assert exchange.requests() == requests
    finally:
        world.execute(f"UPDATE exchange_venues SET key_file_env = '{BYBIT_KEY_FILE_ENV}'")
