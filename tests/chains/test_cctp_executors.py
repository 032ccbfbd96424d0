"""The cctp_burn and cctp_mint executors end to end: the real dispatcher,
observer and recovery batches, as a runner login, against the local chains'
CCTP v2 double and the fake Iris over real HTTP (one Iris for the module, on
the world's time scale; the lanes' baselines scaled by the same factor).

What a treasury relies on: a burn -> mint movement moves the amount once from
the source treasury to the recipient on the destination (less the fee Iris
executed), the burn done only when final and attested, the mint only with a
message that matches what the movement asked; a recipient off the allow-list
of the destination is never signed for; forged evidence is never minted; and
whatever step a runner dies at (after the burn's prepare, after its broadcast,
while waiting for the attestation, after the mint's prepare, after its
broadcast), recovery finishes the movement from the chains' and Iris's
evidence alone: one DepositForBurn, one MessageReceived, never a second burn or
mint. A mint someone else made first completes the node with their
transaction as evidence, found by a log search in ranges a provider accepts.
A burn below the chain's minimum fee is never signed. A fast mint late past
its attestation's expirationBlock (the destination driven there with
anvil_mine), before it was signed or after it was sent, is re-attested by Iris
and minted exactly once, never FAILED.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from engine import approve, as_person, pin_clock
from evm_support import head, make_due, mine, node_state, register_world, superuser, usdc_balance
from web3 import HTTPProvider, Web3

from qtg_runner.budget import forget_budgets
from qtg_runner.chains.cctp import BurnBody, CctpMessage
from qtg_runner.chains.cctp_client import (
    DEPOSIT_FOR_BURN_TOPIC,
    MESSAGE_RECEIVED_TOPIC,
)
from qtg_runner.chains.evm_rpc import EvmRpc, RpcError, RpcErrorKind
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import Executor, NodeWork, RecoveryOutcome
from qtg_runner.executors.cctp_burn import IRIS_URL_ENV, CctpBurnExecutor
from qtg_runner.executors.cctp_mint import (
    EXPIRY_MARGIN_BLOCKS,
    LOG_BLOCK_RANGE_ENV,
    CctpMintExecutor,
)
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import node_dispatcher, node_observer, node_recovery
from qtg_world.chains.cctp import load_attesters
from qtg_world.chains.local import RunningChain, load_artifact, rpc
from qtg_world.iris import IrisConfig, IrisHandle, serve

pytestmark = [pytest.mark.chain, pytest.mark.slow]

NETWORK = "testnet"
TIME_SCALE = 0.005
"""The world's time scale here: a fast attestation (12 s) in 0.06 s, a
standard one (15 min) in 4.5 s."""
FAST_LANE, STANDARD_LANE, MINT_LANE = "cctp-fast", "cctp-standard", "cctp-mint"
UNITS = 10**6
FAST_FEE_BPS = 1
EXPIRATION_BLOCKS = 100
"""Iris's expiry window here, in the destination's blocks: far beyond what a
mint takes, a moment of anvil_mine to pass."""
EXECUTORS = (CctpBurnExecutor, CctpMintExecutor)
EXTRA_ENV: dict[str, str] = {}
"""What a test adds to the runners' environment (monkeypatch.setitem)."""


# -- the world --------------------------------------------------------------------


@pytest.fixture(scope="module")
def iris(local_chain_set: LocalChainSet) -> Iterator[IrisHandle]:
    handle = serve(
        local_chain_set.chains,
        load_attesters(local_chain_set.state_dir),
        IrisConfig(
            time_scale=TIME_SCALE,
            fast_fee_bps=FAST_FEE_BPS,
            fast_expiration_blocks=EXPIRATION_BLOCKS,
        ),
    )
    yield handle
    handle.stop()


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet, iris: IrisHandle) -> Any:
    """The registry of the local chains (their CCTP rows included), the two
    executors, and the CCTP lanes with the real baselines times the time scale
    (at least a second, the engine's floor for a poll)."""
    conn = superuser(db)
    register_world(conn, local_chain_set)
    for executor in EXECUTORS:
        procs.register_executor(
            executor.key,
            executor.has_side_effect,
            executor.node_config_schema,
            executor.description,
        ).one(conn)
    for lane, real_s in ((FAST_LANE, 14), (STANDARD_LANE, 960), (MINT_LANE, 30)):
        procs.upsert_lane_baseline(
            lane, max(Decimal(1), Decimal(real_s) * Decimal(str(TIME_SCALE))), min_poll_seconds=1
        ).one(conn)
    return conn


def runner_env(chain_set: LocalChainSet, iris: IrisHandle) -> dict[str, str]:
    return chain_set.runner_env() | {IRIS_URL_ENV: iris.url} | EXTRA_ENV


def run_batch(
    db: Any,
    batch: Callable[[WorkerContext, str], Any],
    chain_set: LocalChainSet,
    iris: IrisHandle,
    hook: Callable[[dict[str, Executor]], None] | None = None,
) -> int:
    """One batch of a worker, as a runner login carrying the two CCTP executors."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "cctp-test")
        async with open_pool(conninfo, name="cctp-test") as pool:
            env = runner_env(chain_set, iris)
            executors: dict[str, Executor] = {e.key: e(pool, NETWORK, env=env) for e in EXECUTORS}
            if hook is not None:
                hook(executors)
            ctx = WorkerContext(NETWORK, pool, executors, "cctp-test:1")
            try:
                return int(await batch(ctx, "worker@cctp-test:1"))
            finally:
                for e in executors.values():
                    await e.aclose()  # type: ignore[attr-defined]

    return asyncio.run(scenario())


def recover(db: Any, conn: Any, chain_set: LocalChainSet, iris: IrisHandle) -> list[str]:
    """One recovery pass over what a dead dispatcher left (the claims' leases
    run out: the recovery claim's clock moved past them); the outcomes."""
    pin_clock(conn, "2099-01-01T00:00:00+00:00")
    try:
        claims = procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn)
    finally:
        pin_clock(conn, None)
    assert claims, "nothing to recover"

    async def scenario() -> None:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "cctp-test")
        async with open_pool(conninfo, name="cctp-test") as pool:
            env = runner_env(chain_set, iris)
            executors: dict[str, Executor] = {e.key: e(pool, NETWORK, env=env) for e in EXECUTORS}
            ctx = WorkerContext(NETWORK, pool, executors, "cctp-test:1")
            try:
                for claim in claims:
                    work = NodeWork.from_claim(claim, NETWORK)
                    await node_recovery.recover_one(ctx, work, claim.node_state)
            finally:
                for e in executors.values():
                    await e.aclose()  # type: ignore[attr-defined]

    asyncio.run(scenario())
    return [str(c.node_state) for c in claims]


class ProcessDied(BaseException):
    """The runner process dies here: nothing in it catches this (a
    CancelledError would be swallowed by the observer's TaskGroup)."""


def dies_in(step: str, after: bool) -> Callable[[dict[str, Executor]], None]:
    """A hook: the process dies in each executor's ``step`` (before it runs,
    or right after it ran)."""

    def hook(executors: dict[str, Executor]) -> None:
        for executor in executors.values():
            real = getattr(executor, step)

            async def dying(*args: Any, _real: Any = real) -> Any:
                if after:
                    await _real(*args)
                raise ProcessDied(step)

            setattr(executor, step, dying)

    return hook


# -- movements ----------------------------------------------------------------------


def cctp_plan(
    source: str,
    destination: str,
    sender: str,
    recipient: str,
    finality: str,
    mint_to: str | None = None,
) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "key": "burn",
                "executor": CctpBurnExecutor.key,
                "config": {
                    "lane": FAST_LANE if finality == "fast" else STANDARD_LANE,
                    "chain": source,
                    "destination_chain": destination,
                    "from": sender,
                    "to": recipient,
                    "finality": finality,
                },
                "depends_on": [],
            },
            {
                "key": "mint",
                "executor": CctpMintExecutor.key,
                "config": {
                    "lane": MINT_LANE,
                    "chain": destination,
                    "source_chain": source,
                    "from": sender,
                    "to": mint_to or recipient,
                },
                "depends_on": ["burn"],
            },
        ]
    }


def start_cctp(
    conn: Any,
    chain_set: LocalChainSet,
    amount: Decimal,
    external_id: str,
    finality: str = "fast",
    recipient: str | None = None,
    mint_to: str | None = None,
) -> tuple[int, int]:
    """alice creates a burn -> mint movement from treasury 1 on the first chain
    to treasury 2 (or ``recipient``) on the second, bob approves, it starts:
    the burn's and the mint's node ids."""
    a, b = chain_set.chains
    sender, to = (k.address for k in chain_set.treasury)
    plan = cctp_plan(a.key, b.key, sender, recipient or to, finality, mint_to)
    with as_person(conn, "alice"):
        created = procs.create_movement(external_id, amount, plan=plan).one(conn)
    approve(conn, created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    rows = conn.execute(
        "SELECT node_key, id FROM movement_request_nodes WHERE request_id = %s",
        (created.movement_id,),
    ).fetchall()
    ids = {str(k): int(i) for k, i in rows}
    return ids["burn"], ids["mint"]


def observe_until(
    db: Any,
    conn: Any,
    chain_set: LocalChainSet,
    iris: IrisHandle,
    node_id: int,
    wanted: set[str],
    timeout: float = 60,
) -> str:
    """Observer batches (the node made due each time, a block mined on each
    chain between) until the node is in one of ``wanted``."""
    deadline = time.monotonic() + timeout
    while True:
        make_due(conn, node_id)
        run_batch(db, node_observer.batch, chain_set, iris)
        state = node_state(conn, node_id)
        if state in wanted:
            return state
        assert state not in {"FAILED", "UNKNOWN"} - wanted, (state, evidence_of(conn, node_id))
        assert time.monotonic() < deadline, f"node {node_id} stayed {state}"
        for chain in chain_set.chains:
            mine(chain)
        time.sleep(0.05)


def evidence_of(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return dict(row[0] or {})


def last_error(conn: Any, node_id: int) -> str:
    row = conn.execute(
        "SELECT coalesce(last_error, '') FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return str(row[0])


def signed_for(conn: Any, node_id: int) -> int:
    """The transactions recorded for a node (every one signed for it)."""
    row = conn.execute(
        "SELECT count(*) FROM evm_transactions t JOIN node_intents i ON i.id = t.intent_id"
        " WHERE i.node_id = %s",
        (node_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


# -- what the chains say ------------------------------------------------------------


def burns_from(chain: RunningChain, sender: str, from_block: int) -> int:
    """DepositForBurn logs of ``sender`` on ``chain`` since ``from_block``."""
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["TokenMessengerV2"],
                "fromBlock": hex(min(from_block, head(chain))),
                "toBlock": "latest",
                "topics": [DEPOSIT_FOR_BURN_TOPIC, None, "0x" + "00" * 12 + sender[2:].lower()],
            }
        ],
    )
    return len(logs)


def mints_of(chain: RunningChain, nonce: str) -> list[str]:
    """The transactions with a MessageReceived of ``nonce`` on ``chain``."""
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["MessageTransmitterV2"],
                "fromBlock": "0x0",
                "toBlock": "latest",
                "topics": [MESSAGE_RECEIVED_TOPIC, None, nonce],
            }
        ],
    )
    return [str(log["transactionHash"]) for log in logs]


class Ledger:
    """The balances and block heights a movement is checked against."""

    def __init__(self, chain_set: LocalChainSet, recipient: str | None = None) -> None:
        self.a, self.b = chain_set.chains
        self.sender = chain_set.treasury[0].address
        self.recipient = recipient or chain_set.treasury[1].address
        self.first_block = head(self.a) + 1
        self.sender_before = usdc_balance(self.a, self.sender)
        self.recipient_before = usdc_balance(self.b, self.recipient)

    def check_once(self, conn: Any, burn_id: int, mint_id: int, amount: Decimal) -> str:
        """One burn of ``amount`` from the sender, one mint of it less the fee to
        the recipient, the nodes COMPLETED with that evidence: the nonce."""
        units = int(amount * UNITS)
        burn = evidence_of(conn, burn_id)
        mint = evidence_of(conn, mint_id)
        assert node_state(conn, burn_id) == node_state(conn, mint_id) == "COMPLETED"
        assert burns_from(self.a, self.sender, self.first_block) == 1
        assert usdc_balance(self.a, self.sender) == self.sender_before - units
        fee = int(burn["fee_executed"])
        assert int(burn["amount"]) == units and 0 <= fee <= units * 10 // 10_000
        nonce = str(burn["nonce"])
        assert mints_of(self.b, nonce) == [mint["mint_tx_hash"]]
        assert int(mint["amount_minted"]) == units - fee
        assert usdc_balance(self.b, self.recipient) == self.recipient_before + units - fee
        return nonce


def drive(
    db: Any, conn: Any, chain_set: LocalChainSet, iris: IrisHandle, burn_id: int, mint_id: int
) -> None:
    """From wherever the movement is to both nodes COMPLETED, through the batches."""
    if node_state(conn, burn_id) == "READY":
        run_batch(db, node_dispatcher.batch, chain_set, iris)
    observe_until(db, conn, chain_set, iris, burn_id, {"COMPLETED"})
    if node_state(conn, mint_id) == "READY":
        run_batch(db, node_dispatcher.batch, chain_set, iris)
    observe_until(db, conn, chain_set, iris, mint_id, {"COMPLETED"})


# -- end to end ---------------------------------------------------------------------


@pytest.mark.parametrize("finality", ["fast", "standard"])
def test_a_burn_then_mint_moves_the_amount_once_less_the_fee(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle, finality: str
) -> None:
    ledger = Ledger(local_chain_set)
    amount = Decimal("2.5") if finality == "fast" else Decimal("3.25")
    started = time.monotonic()
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, f"e2e-{finality}", finality)
    assert node_state(world, mint_id) == "PENDING"

    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    assert node_state(world, burn_id) == "SUBMITTED"
    # the mint waits for the attested burn: READY only when it can be done
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    attested_after = time.monotonic() - started
    assert node_state(world, mint_id) == "READY"
    burn = evidence_of(world, burn_id)
    assert burn["finality_threshold_executed"] == (1000 if finality == "fast" else 2000)
    assert burn["source_tx_hash"] == burn["burn"]["tx_hash"]
    assert burn["message"].startswith("0x") and len(burn["attestation"]) == 2 + 2 * 65 * 2
    if finality == "standard":
        # Iris's standard delay, scaled, lies between the burn and its completion
        # (counted by Iris from the burn block's timestamp, which blocks mined on
        # demand push ahead of the wall clock by up to a second or two)
        assert attested_after >= 15 * 60 * TIME_SCALE - 2

    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, mint_id, {"COMPLETED"})
    nonce = ledger.check_once(world, burn_id, mint_id, amount)
    fee = int(burn["fee_executed"])
    assert fee == (int(amount * UNITS) * FAST_FEE_BPS // 10_000 if finality == "fast" else 0)
    print(
        f"\ncctp {finality}: attested {attested_after:.1f} s after the start, done "
        f"{time.monotonic() - started:.1f} s; nonce {nonce[:10]}..., fee {fee}"
    )


# -- refusals -----------------------------------------------------------------------


def test_a_burn_to_a_recipient_not_allowed_on_the_destination_is_never_signed(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    stranger = "0x" + "5a" * 20
    ledger = Ledger(local_chain_set)
    burn_id, mint_id = start_cctp(
        world, local_chain_set, Decimal("1"), "stranger", recipient=stranger
    )
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    assert node_state(world, burn_id) == "FAILED"
    assert "QT032" in last_error(world, burn_id)
    assert signed_for(world, burn_id) == 0
    assert burns_from(ledger.a, ledger.sender, ledger.first_block) == 0
    assert node_state(world, mint_id) in {"PENDING", "SKIPPED"}


def test_the_mint_refuses_a_recipient_the_movement_did_not_burn_for(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    """The mint step names another treasury recipient than its burn: the
    attested message does not match the mint's route, nothing is signed."""
    sender = local_chain_set.treasury[0].address
    burn_id, mint_id = start_cctp(
        world, local_chain_set, Decimal("1.5"), "mismatch", mint_to=sender
    )
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    assert node_state(world, mint_id) == "FAILED"
    assert "mint recipient" in last_error(world, mint_id)
    assert signed_for(world, mint_id) == 0
    b = local_chain_set.chains[1]
    assert mints_of(b, str(evidence_of(world, burn_id)["nonce"])) == []


@pytest.mark.parametrize(
    ("forgery", "refusal"),
    [
        ("amount", "amount"),
        ("destination", "destination domain"),
        ("unfilled", "nonce not filled"),
    ],
)
def test_the_mint_refuses_forged_burn_evidence_and_signs_nothing(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    iris: IrisHandle,
    forgery: str,
    refusal: str,
) -> None:
    """The burn's evidence edited in the database before the mint is claimed
    (a stolen credential's attack on the inputs): the mint's own route
    refuses it; the node fails with nothing signed, nothing minted."""
    burn_id, mint_id = start_cctp(world, local_chain_set, Decimal("1.25"), f"forged-{forgery}")
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    evidence = evidence_of(world, burn_id)
    raw = bytearray.fromhex(evidence["message"][2:])
    if forgery == "amount":  # the body's amount (body @148, amount @68) one unit higher
        word = 148 + 68
        raw[word : word + 32] = (int.from_bytes(raw[word : word + 32], "big") + 1).to_bytes(
            32, "big"
        )
    elif forgery == "destination":  # destinationDomain @8
        raw[8:12] = (12345).to_bytes(4, "big")
    else:  # the source log's message: nonce zero
        raw[12:44] = bytes(32)
    evidence["message"] = "0x" + raw.hex()
    world.execute(
        "UPDATE movement_request_nodes SET evidence = %s::jsonb WHERE id = %s",
        (json.dumps(evidence), burn_id),
    )
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    assert node_state(world, mint_id) == "FAILED"
    assert refusal in last_error(world, mint_id)
    assert signed_for(world, mint_id) == 0
    b = local_chain_set.chains[1]
    mine(b)
    assert mints_of(b, str(evidence_of(world, burn_id)["nonce"])) == []


# -- someone else minted first -------------------------------------------------------


def test_a_message_minted_by_someone_else_completes_the_mint_with_their_transaction(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    ledger = Ledger(local_chain_set)
    amount = Decimal("1.75")
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, "raced")
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    burn = evidence_of(world, burn_id)
    b = local_chain_set.chains[1]
    # anyone may mint (destinationCaller 0): anvil's account 9 does it first
    w3 = Web3(HTTPProvider(b.rpc_url, request_kwargs={"timeout": 10}))
    transmitter = w3.eth.contract(
        address=Web3.to_checksum_address(b.contracts["MessageTransmitterV2"]),
        abi=load_artifact("MessageTransmitterV2")["abi"],
    )
    theirs = transmitter.functions.receiveMessage(
        bytes.fromhex(burn["message"][2:]), bytes.fromhex(burn["attestation"][2:])
    ).transact({"from": w3.eth.accounts[9]})
    assert w3.eth.wait_for_transaction_receipt(theirs, timeout=20)["status"] == 1

    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    assert signed_for(world, mint_id) == 1  # ours went out, to revert "Nonce already used"
    observe_until(db, world, local_chain_set, iris, mint_id, {"COMPLETED"})
    mint = evidence_of(world, mint_id)
    assert mint["minted_elsewhere"] is True
    assert mint["mint_tx_hash"] == "0x" + bytes(theirs).hex()
    assert mints_of(b, str(burn["nonce"])) == [mint["mint_tx_hash"]]
    assert usdc_balance(b, ledger.recipient) == (
        ledger.recipient_before + int(amount * UNITS) - int(burn["fee_executed"])
    )


# -- crashes ------------------------------------------------------------------------


def crash_dispatch(
    db: Any, conn: Any, chain_set: LocalChainSet, iris: IrisHandle, node_id: int, after: bool
) -> None:
    """A dispatcher that dies in submit: before the broadcast (``after`` False:
    the intent PREPARED, nothing sent) or right after it (never reported)."""
    with pytest.raises(BaseExceptionGroup) as died:
        run_batch(db, node_dispatcher.batch, chain_set, iris, dies_in("submit", after))
    assert died.group_contains(ProcessDied, match="submit")
    assert node_state(conn, node_id) == "SUBMITTING"
    assert signed_for(conn, node_id) == 1


@pytest.mark.parametrize(
    "crash",
    [
        "burn_after_prepare",
        "burn_after_broadcast",
        "awaiting_attestation",
        "mint_after_prepare",
        "mint_after_broadcast",
    ],
)
def test_a_runner_killed_at_any_step_finishes_with_one_burn_and_one_mint(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle, crash: str
) -> None:
    ledger = Ledger(local_chain_set)
    amount = Decimal("1.01") + Decimal(len(crash)) / 100
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, f"crash-{crash}")

    if crash.startswith("burn_"):
        crash_dispatch(db, world, local_chain_set, iris, burn_id, crash.endswith("broadcast"))
        assert recover(db, world, local_chain_set, iris) == ["SUBMITTING"]
        # recovery rebroadcast the recorded bytes or found them: in flight, not signed again
        assert node_state(world, burn_id) in {"OBSERVING", "SUBMITTED"}
        assert signed_for(world, burn_id) == 1
    elif crash == "awaiting_attestation":
        iris.block(3600)  # Iris answers 429 until unblocked: the burn waits for its attestation
        try:
            run_batch(db, node_dispatcher.batch, local_chain_set, iris)
            for _ in range(3):
                for chain in local_chain_set.chains:
                    mine(chain)
                make_due(world, burn_id)
                run_batch(db, node_observer.batch, local_chain_set, iris)
            assert node_state(world, burn_id) == "OBSERVING"
            held = world.execute(
                "SELECT observe_held_reason FROM movement_request_nodes WHERE id = %s", (burn_id,)
            ).fetchone()
            assert held is not None and held[0].startswith("Iris: ")  # held back, not observed
            # the observer dies in the middle of an observation
            make_due(world, burn_id)
            with pytest.raises(BaseExceptionGroup) as died:
                run_batch(db, node_observer.batch, local_chain_set, iris, dies_in("observe", True))
            assert died.group_contains(ProcessDied, match="observe")
            # recovery's reading meanwhile: final on chain, not attested: in flight
            assert recover_reading(db, world, local_chain_set, iris, burn_id) is (
                RecoveryOutcome.IN_FLIGHT
            )
        finally:
            iris.unblock()
        # Iris's 429s paused it for this process (its request budget, for their
        # Retry-After): the pause runs its course, as it would in time
        forget_budgets()
        assert recover_reading(db, world, local_chain_set, iris, burn_id) is (
            RecoveryOutcome.COMPLETED
        )
    else:
        run_batch(db, node_dispatcher.batch, local_chain_set, iris)
        observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
        crash_dispatch(db, world, local_chain_set, iris, mint_id, crash.endswith("broadcast"))
        assert recover(db, world, local_chain_set, iris) == ["SUBMITTING"]
        assert node_state(world, mint_id) in {"OBSERVING", "SUBMITTED"}
        assert signed_for(world, mint_id) == 1

    drive(db, world, local_chain_set, iris, burn_id, mint_id)
    nonce = ledger.check_once(world, burn_id, mint_id, amount)
    assert signed_for(world, burn_id) == 1 and signed_for(world, mint_id) == 1
    b = local_chain_set.chains[1]
    print(
        f"\ncctp crash {crash}: burns on chain "
        f"{burns_from(ledger.a, ledger.sender, ledger.first_block)}, mints "
        f"{len(mints_of(b, nonce))}, transactions signed {signed_for(world, burn_id)} + "
        f"{signed_for(world, mint_id)}"
    )


def recover_reading(
    db: Any, conn: Any, chain_set: LocalChainSet, iris: IrisHandle, node_id: int
) -> RecoveryOutcome:
    """What the burn executor's recover() says now from the node's recorded
    intent alone (chain and Iris evidence), without changing the node."""
    row = conn.execute("SELECT intent_document(%s)", (node_id,)).fetchone()
    assert row is not None and row[0] is not None
    intent = dict(row[0])

    async def scenario() -> RecoveryOutcome:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "cctp-test")
        async with open_pool(conninfo, name="cctp-test") as pool:
            executor = CctpBurnExecutor(pool, NETWORK, env=runner_env(chain_set, iris))
            try:
                work = NodeWork(
                    node_id=node_id,
                    request_id=0,
                    claim_secret="",
                    node_key="burn",
                    executor_key=executor.key,
                    node_config={},
                    lane=FAST_LANE,
                    amount=Decimal(0),
                    asset="USDC",
                    intent=intent,
                )
                return (await executor.recover(work)).outcome
            finally:
                await executor.aclose()

    return asyncio.run(scenario())


def test_health_names_the_chains_and_iris(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    """The burn's health is the chains' and Iris's (DOWN when Iris does not
    answer: no new burn starts; DEGRADED while it rate-limits); the mint's is
    the chains' alone (its message is in hand)."""
    from qtg_runner.executors.base import HealthStatus
    from qtg_runner.ports import free_port

    async def health(executor_class: Any, env: dict[str, str]) -> Any:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "cctp-test")
        async with open_pool(conninfo, name="cctp-test") as pool:
            executor = executor_class(pool, NETWORK, env=env, rpc_timeout=2)
            try:
                return await executor.health()
            finally:
                await executor.aclose()

    env = runner_env(local_chain_set, iris)
    result = asyncio.run(health(CctpBurnExecutor, env))
    assert result.status is HealthStatus.HEALTHY, result.detail
    assert result.detail["iris"] == "answering"
    nowhere = env | {IRIS_URL_ENV: f"http://127.0.0.1:{free_port()}"}
    result = asyncio.run(health(CctpBurnExecutor, nowhere))
    assert result.status is HealthStatus.DOWN
    assert result.detail["iris"].startswith("unreachable")
    iris.block(3600)
    try:
        result = asyncio.run(health(CctpBurnExecutor, env))
    finally:
        iris.unblock()
    assert result.status is HealthStatus.DEGRADED and result.detail["iris"] == "HTTP 429"
    result = asyncio.run(health(CctpMintExecutor, nowhere))
    assert result.status is HealthStatus.HEALTHY and "iris" not in result.detail


# -- CCTP v2.1 as Circle runs it: the minimum fee, expiring fast attestations --------


def _contract(chain: RunningChain, name: str) -> tuple[Web3, Any]:
    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    contract = w3.eth.contract(
        address=Web3.to_checksum_address(chain.contracts[name]), abi=load_artifact(name)["abi"]
    )
    return w3, contract


def set_min_fee(chain: RunningChain, min_fee: int) -> None:
    """TokenMessengerV2.setMinFee as its controller (the deployer)."""
    w3, messenger = _contract(chain, "TokenMessengerV2")
    controller = messenger.functions.minFeeController().call()
    sent = messenger.functions.setMinFee(min_fee).transact({"from": controller})
    assert w3.eth.wait_for_transaction_receipt(sent, timeout=20)["status"] == 1


def test_a_burn_whose_max_fee_is_below_the_chains_minimum_fee_is_never_signed(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    """v2.1's minFee at 20 basis points, the movement's maxFee at the default
    10: the burn would revert "Insufficient max fee", so the burn's preflight
    refuses it (FAILED, not retried: the approved fee cap is too low), nothing
    is signed or burnt, and the mint never runs."""
    a = local_chain_set.chains[0]
    ledger = Ledger(local_chain_set)
    set_min_fee(a, 200_000)  # 20 bps, in 1/1000 basis points
    try:
        burn_id, mint_id = start_cctp(world, local_chain_set, Decimal("1"), "under-min-fee")
        run_batch(db, node_dispatcher.batch, local_chain_set, iris)
        assert node_state(world, burn_id) == "FAILED"
        error = last_error(world, burn_id)
        assert "minimum fee" in error and "20000" in error and "Insufficient max fee" in error
        assert signed_for(world, burn_id) == 0
        assert burns_from(ledger.a, ledger.sender, ledger.first_block) == 0
        assert node_state(world, mint_id) in {"PENDING", "SKIPPED"}
    finally:
        set_min_fee(a, 0)


def expiration_of(evidence: dict[str, Any]) -> int:
    """The expirationBlock of the message a burn's evidence holds."""
    message = CctpMessage.decode(bytes.fromhex(evidence["message"][2:]))
    return BurnBody.decode(message.body).expiration_block


def past(chain: RunningChain, block: int) -> None:
    """The chain's head at ``block`` or beyond, by anvil_mine (no waiting)."""
    missing = block - head(chain)
    if missing > 0:
        mine(chain, missing)
    assert head(chain) >= block


def ready_now(conn: Any, node_id: int) -> None:
    """A READY node's retry wait over (the test stands in for the time it waits)."""
    conn.execute(
        "UPDATE movement_request_nodes SET not_before = now() - interval '1 second'"
        " WHERE id = %s AND node_state = 'READY'",
        (node_id,),
    )


def reattested_by_iris(iris: IrisHandle, evidence: dict[str, Any]) -> bool:
    """Iris answers the burn's message re-attested (expirationBlock 0)."""
    import httpx

    response = httpx.get(
        f"{iris.url}/v2/messages/{evidence['source_domain']}",
        params={"transactionHash": evidence["source_tx_hash"]},
    )
    entry = response.json()["messages"][0]
    return bool(entry["decodedMessage"]["decodedMessageBody"]["expirationBlock"] == "0")


def mint_reattested(
    db: Any,
    conn: Any,
    chain_set: LocalChainSet,
    iris: IrisHandle,
    burn: dict[str, Any],
    mint_id: int,
) -> None:
    """Dispatch the mint until it is signed: the first try asks Iris for the
    re-attestation (or finds it); while Iris has not signed it yet the node
    waits, READY with nothing signed and none of its attempts spent (Iris's
    wait, not the node's failure); once Iris answers it the mint is signed."""
    signed_before = signed_for(conn, mint_id)
    attempts_before = attempts_of(conn, mint_id)
    run_batch(db, node_dispatcher.batch, chain_set, iris)
    if node_state(conn, mint_id) == "READY":
        assert "waiting for Iris's re-attestation" in last_error(conn, mint_id)
        assert signed_for(conn, mint_id) == signed_before
        assert attempts_of(conn, mint_id) == attempts_before
        deadline = time.monotonic() + 30
        while not reattested_by_iris(iris, burn):
            assert time.monotonic() < deadline, "Iris never re-attested"
            time.sleep(0.1)
        ready_now(conn, mint_id)
        run_batch(db, node_dispatcher.batch, chain_set, iris)
    assert node_state(conn, mint_id) == "SUBMITTED", last_error(conn, mint_id)
    assert signed_for(conn, mint_id) == signed_before + 1


def attempts_of(conn: Any, node_id: int) -> int:
    row = conn.execute(
        "SELECT submit_attempts FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return int(row[0])


def recorded_payloads(conn: Any, node_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT prepared_payload FROM node_intents WHERE node_id = %s AND prepared_payload IS"
        " NOT NULL ORDER BY claim_token",
        (node_id,),
    ).fetchall()
    return [dict(r[0]) for r in rows]


def test_a_fast_mint_claimed_after_its_attestation_expired_is_re_attested_and_minted_once(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    """The burn attested fast (expirationBlock set on the destination), then
    the destination past it before the mint is claimed: the mint is not signed
    with the expired message, which would revert; it asks Iris to re-attest
    (POST /v2/reattest/{nonce}), waits, and mints the same message as
    finalized (expirationBlock 0), once."""
    b = local_chain_set.chains[1]
    ledger = Ledger(local_chain_set)
    amount = Decimal("2.75")
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, "late-mint")
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    burn = evidence_of(world, burn_id)
    expiration = expiration_of(burn)
    assert head(b) < expiration <= head(b) + EXPIRATION_BLOCKS
    past(b, expiration)

    mint_reattested(db, world, local_chain_set, iris, burn, mint_id)
    observe_until(db, world, local_chain_set, iris, mint_id, {"COMPLETED"})
    nonce = ledger.check_once(world, burn_id, mint_id, amount)
    assert nonce == burn["nonce"]
    mint = evidence_of(world, mint_id)
    assert mint["finality_threshold_executed"] == 2000  # the message re-attested as finalized
    [payload] = recorded_payloads(world, mint_id)
    assert payload["reattested"] is True and payload["expiration_block"] == "0"
    assert payload["message_nonce"] == nonce
    assert signed_for(world, mint_id) == 1


def test_a_fast_mint_mined_past_its_expiration_is_re_attested_and_minted_once(
    db: Any, world: Any, local_chain_set: LocalChainSet, iris: IrisHandle
) -> None:
    """The mint signed in time with the fast message, but the destination is
    past its expirationBlock when it lands: it reverts "Message expired and
    must be re-signed", nothing minted, the nonce unused. Not FAILED: observe
    hands it to recovery (UNKNOWN), recovery's evidence (the reverted receipt
    at or past the expiration) makes it READY, and the next mint is of the
    same message re-attested: one MessageReceived, the amount once."""
    b = local_chain_set.chains[1]
    ledger = Ledger(local_chain_set)
    amount = Decimal("3.5")
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, "expired-in-flight")
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    burn = evidence_of(world, burn_id)
    expiration = expiration_of(burn)

    def late(executors: dict[str, Executor]) -> None:
        mint_executor = executors[CctpMintExecutor.key]
        real = mint_executor.submit

        async def submit_late(*args: Any) -> Any:
            past(b, expiration)  # the chain moves on before the mint lands
            return await real(*args)

        mint_executor.submit = submit_late  # type: ignore[method-assign]

    assert head(b) + EXPIRY_MARGIN_BLOCKS < expiration  # fresh: signed as attested
    run_batch(db, node_dispatcher.batch, local_chain_set, iris, late)
    [first] = recorded_payloads(world, mint_id)
    assert first["reattested"] is False and int(first["expiration_block"]) == expiration
    assert observe_until(db, world, local_chain_set, iris, mint_id, {"UNKNOWN"}) == "UNKNOWN"
    reverted = evidence_of(world, mint_id)
    assert reverted["expired"] is True and reverted["used_nonce"] is False
    assert reverted["block_number"] >= expiration and reverted["status"] == 0
    assert mints_of(b, burn["nonce"]) == []

    assert recover(db, world, local_chain_set, iris) == ["UNKNOWN"]
    assert node_state(world, mint_id) == "READY"  # never FAILED
    mint_reattested(db, world, local_chain_set, iris, burn, mint_id)
    observe_until(db, world, local_chain_set, iris, mint_id, {"COMPLETED"})
    nonce = ledger.check_once(world, burn_id, mint_id, amount)
    assert signed_for(world, mint_id) == 2  # the expired one, reverted, and the one that minted
    second = recorded_payloads(world, mint_id)[-1]
    assert second["reattested"] is True and second["message_nonce"] == nonce
    assert evidence_of(world, mint_id)["mint_tx_hash"] != reverted["tx_hash"]


def test_a_mint_found_by_another_transaction_is_searched_in_ranges_the_provider_accepts(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    iris: IrisHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Someone else minted the message, blocks ago; the RPC refuses an
    eth_getLogs wider than QTG_LOG_BLOCK_RANGE (5 here), as providers cap
    ranges: the mint's search for their MessageReceived goes back from the
    head five blocks a request, and finds it."""
    block_range = 5
    monkeypatch.setitem(EXTRA_ENV, LOG_BLOCK_RANGE_ENV, str(block_range))
    asked: list[tuple[int, int]] = []
    real_get_logs = EvmRpc.get_logs

    async def capped_get_logs(self: EvmRpc, **query: Any) -> Any:
        low, high = query["from_block"], query["to_block"]
        if isinstance(low, int) and isinstance(high, int):
            asked.append((low, high))
            if high - low + 1 > block_range:
                raise RpcError(
                    -32005, "query exceeds max block range 5", RpcErrorKind.OTHER,
                    method="eth_getLogs",
                )  # fmt: skip
        else:
            asked.append((-1, -1))
            raise RpcError(-32005, "query exceeds max block range 5", RpcErrorKind.OTHER)
        return await real_get_logs(self, **query)

    monkeypatch.setattr(EvmRpc, "get_logs", capped_get_logs)
    ledger = Ledger(local_chain_set)
    amount = Decimal("1.6")
    burn_id, mint_id = start_cctp(world, local_chain_set, amount, "ranged-search")
    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, burn_id, {"COMPLETED"})
    burn = evidence_of(world, burn_id)
    b = local_chain_set.chains[1]
    w3, transmitter = _contract(b, "MessageTransmitterV2")
    theirs = transmitter.functions.receiveMessage(
        bytes.fromhex(burn["message"][2:]), bytes.fromhex(burn["attestation"][2:])
    ).transact({"from": w3.eth.accounts[9]})
    minted_at = int(w3.eth.wait_for_transaction_receipt(theirs, timeout=20)["blockNumber"])
    mine(b, 4 * block_range)  # their mint several ranges behind the head

    run_batch(db, node_dispatcher.batch, local_chain_set, iris)
    observe_until(db, world, local_chain_set, iris, mint_id, {"COMPLETED"})
    mint = evidence_of(world, mint_id)
    assert mint["minted_elsewhere"] is True and mint["mint_tx_hash"] == "0x" + bytes(theirs).hex()
    assert ledger.check_once(world, burn_id, mint_id, amount) == burn["nonce"]
    assert asked and all(0 <= high - low < block_range for low, high in asked), asked
    assert any(low <= minted_at <= high for low, high in asked)
    assert len(asked) >= 4  # more than one range: newest first, back to their block
