"""The `ccip` executor and the `ccip_stranded_reaper` end to end: the real
dispatcher, observer, recovery and reaper batches as a runner login, the CCIP
double on the session's local chains, its executing network and the fake
Iris that attests the USDC burns running in this process (qtg_world.ccip
and qtg_world.iris, one each per module, on a time scale that makes
CCIP's 17 minutes 2 seconds).

What a treasury relies on: a send is token-only (gas limit 0) and pays the
Router's quote and the lane's margin, so a fee risen between the quote and
the send's block does not revert it; it completes only when the destination
executed it with SUCCESS, with the message id, both transactions and the
amount as evidence, on a v1.6 lane as on a v1.5 lane (each lane's events read
by its version); a receiver that is not allowed on the DESTINATION chain is
never signed for; a runner dying after the prepare, after the broadcast or
while observing is recovered from the recorded hashes and the chains' events
with exactly one send each; a FAILED execution is executed manually by the
reaper with the real OffRamp's manuallyExecute (0x5e7bb008: a one-message
report, its one-leaf proof, the CCTP attestation as the USDC pool's offchain
data), recorded first, and a reaper dying between its record and its
broadcast sends the recorded bytes, once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from chain_support import LocalChainSet
from engine import approve, as_person, bind, pin_clock
from eth_abi.abi import decode, encode
from eth_account import Account
from eth_utils.crypto import keccak
from evm_support import make_due, node_state, register_world, superuser, usdc_balance, web3_of
from web3 import Web3

from qtg_runner import signers
from qtg_runner.chains.ccip import (
    CCIP_MESSAGE_SENT_TOPIC,
    CCIP_SEND_REQUESTED_TOPIC,
    MANUALLY_EXECUTE_SELECTOR,
    SUCCESS,
    SentMessage,
    ccip_transaction,
    execution_state_calldata,
    fee_with_margin,
    get_fee_calldata,
    manually_execute_calldata,
    match_attested,
    usdc_token_data,
)
from qtg_runner.chains.evm import Fees
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.base import NodeWork, RecoveryOutcome
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.workers import ccip_stranded_reaper, node_dispatcher, node_observer, node_recovery
from qtg_world import ccip as ccip_world
from qtg_world import iris as iris_world
from qtg_world.chains.ccip import approve_router, ccip_selector, deploy_v1_5_lane, ensure_don_key
from qtg_world.chains.cctp import load_attesters
from qtg_world.chains.local import RunningChain, load_artifact, rpc

pytestmark = [pytest.mark.chain, pytest.mark.slow]

NETWORK = "testnet"
LANE = "ccip"
SCALE = 0.002
"""Real seconds per protocol second: the network's 17 minutes take about 2 s."""
DEADLINE_S = 60.0
FINISHED = {"COMPLETED", "FAILED", "UNKNOWN"}


class Died(BaseException):
    """The runner's process ends here (nothing after it runs, nothing is reported)."""


@pytest.fixture(scope="module")
def iris(local_chain_set: LocalChainSet) -> Iterator[iris_world.IrisHandle]:
    """The fake Iris attesting the CCIP sends' USDC burns on the network's time scale."""
    handle = iris_world.serve(
        local_chain_set.chains,
        load_attesters(local_chain_set.state_dir),
        iris_world.IrisConfig(time_scale=SCALE),
    )
    try:
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def network(
    local_chain_set: LocalChainSet, iris: iris_world.IrisHandle
) -> Iterator[ccip_world.CcipHandle]:
    env = local_chain_set.runner_env()
    don = signers.load(ensure_don_key(local_chain_set.state_dir).signer_id, env=env)
    handle = ccip_world.serve(
        local_chain_set.chains,
        don,
        ccip_world.CcipConfig(time_scale=SCALE, tick_s=0.1, attestation_url=iris.url),
    )
    try:
        yield handle
    finally:
        handle.stop()


def runner_env(chain_set: LocalChainSet, iris: iris_world.IrisHandle) -> dict[str, str]:
    """The runner's environment: the chains' and the attestation service's."""
    return chain_set.runner_env() | {"QTG_IRIS_URL": iris.url}


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet, network: ccip_world.CcipHandle) -> Any:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    procs.register_executor(
        CcipExecutor.key,
        CcipExecutor.has_side_effect,
        CcipExecutor.node_config_schema,
        CcipExecutor.description,
    ).one(conn)
    # CCIP's 1200 s baseline on the network's time scale
    procs.upsert_lane_baseline(LANE, 1200 * SCALE * 10, min_poll_seconds=1).one(conn)
    network.clear_failures()
    return conn


def start_send(
    conn: Any, source: str, dest: str, sender: str, recipient: str, amount: Decimal, key: str
) -> int:
    """alice creates a one-send movement, bob approves it, it starts: its node's id."""
    plan = {
        "nodes": [
            {
                "key": "send",
                "executor": CcipExecutor.key,
                "config": {
                    "lane": LANE,
                    "chain": source,
                    "destination_chain": dest,
                    "from": sender,
                    "to": recipient,
                },
                "depends_on": [],
            }
        ]
    }
    with as_person(conn, "alice"):
        created = procs.create_movement(key, amount, plan=plan).one(conn)
    approve(conn, created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    row = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = %s", (created.movement_id,)
    ).fetchone()
    return int(row[0])


def run_ccip(
    db: Any,
    chain_set: LocalChainSet,
    body: Callable[[WorkerContext, CcipExecutor], Any],
) -> Any:
    """``body`` as a runner login carrying the real ccip executor (the local
    chains' environment: RPC URLs, keystore)."""

    async def scenario() -> Any:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "ccip-test")
        async with open_pool(conninfo, name="ccip-test") as pool:
            executor = CcipExecutor(pool, NETWORK, env=chain_set.runner_env())
            ctx = WorkerContext(NETWORK, pool, {executor.key: executor}, "ccip-test:1")
            try:
                return await body(ctx, executor)
            finally:
                await executor.aclose()

    return asyncio.run(scenario())


def dispatch(
    db: Any, chain_set: LocalChainSet, hook: Callable[[CcipExecutor], None] | None = None
) -> int:
    async def body(ctx: WorkerContext, executor: CcipExecutor) -> int:
        if hook is not None:
            hook(executor)
        return await node_dispatcher.batch(ctx, "worker@ccip-test:1")

    return int(run_ccip(db, chain_set, body))


def observe(
    db: Any, chain_set: LocalChainSet, hook: Callable[[CcipExecutor], None] | None = None
) -> int:
    async def body(ctx: WorkerContext, executor: CcipExecutor) -> int:
        if hook is not None:
            hook(executor)
        return await node_observer.batch(ctx, "worker@ccip-test:1")

    return int(run_ccip(db, chain_set, body))


def reap(
    db: Any,
    chain_set: LocalChainSet,
    iris: iris_world.IrisHandle,
    before_broadcast: Callable[[], None] | None = None,
) -> int:
    async def body(ctx: WorkerContext, executor: CcipExecutor) -> int:
        return await ccip_stranded_reaper.run_round(
            ctx,
            "worker@ccip-test:1",
            env=runner_env(chain_set, iris),
            before_broadcast=before_broadcast,
        )

    return int(run_ccip(db, chain_set, body))


def evidence_of(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    return dict(row[0] or {})


def observe_until(
    db: Any,
    conn: Any,
    chain_set: LocalChainSet,
    node_ids: list[int],
    done: Callable[[int], bool] | None = None,
) -> None:
    """Observer batches (the nodes made due each time) until ``done`` holds for
    every node (default: finished), within the deadline: the executing network
    and the chains run on their own clocks meanwhile."""
    check = done or (lambda n: node_state(conn, n) in FINISHED)
    deadline = time.monotonic() + DEADLINE_S
    while not all(check(n) for n in node_ids):
        if time.monotonic() > deadline:
            states = {
                n: (node_state(conn, n), evidence_of(conn, n).get("ccip_state")) for n in node_ids
            }
            raise AssertionError(f"not done within {DEADLINE_S} s: {states}")
        for n in node_ids:
            make_due(conn, n)
        observe(db, chain_set)
        time.sleep(0.3)


def sends_from(chain: RunningChain, sender: str, from_block: int) -> list[SentMessage]:
    """The CCIPMessageSent of ``sender`` on the chain's OnRamp since ``from_block``."""
    logs = rpc(
        chain.rpc_url,
        "eth_getLogs",
        [
            {
                "address": chain.contracts["CcipOnRamp"],
                "fromBlock": hex(from_block),
                "toBlock": "latest",
                "topics": [CCIP_MESSAGE_SENT_TOPIC],
            }
        ],
    )
    sent = [
        SentMessage.from_log(
            log["address"], log["topics"], bytes.fromhex(log["data"][2:]), log["transactionHash"],
            int(log["blockNumber"], 16), int(log["logIndex"], 16),
        )
        for log in logs
    ]  # fmt: skip
    return [m for m in sent if m.sender == sender.lower()]


def router_fee(source: RunningChain, dest: RunningChain, receiver: str, gas_limit: int) -> int:
    """The source Router's quote of a send of 1 USDC to ``receiver`` with ``gas_limit``."""
    data = get_fee_calldata(
        ccip_selector(dest), receiver, source.contracts["MockUSDC"], 10**6, gas_limit
    )
    answer = rpc(
        source.rpc_url,
        "eth_call",
        [{"to": source.contracts["CcipRouter"], "data": "0x" + data.hex()}, "latest"],
    )
    return int(str(answer), 16)


def head(chain: RunningChain) -> int:
    return int(rpc(chain.rpc_url, "eth_blockNumber"), 16)


def test_a_token_only_send_pays_a_margin_that_absorbs_a_fee_rise_and_completes(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    source, dest = local_chain_set.chains
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start = head(source)
    held, received = usdc_balance(source, sender), usdc_balance(dest, recipient)
    node_id = start_send(world, source.key, dest.key, sender, recipient, Decimal("3.25"), "c1")
    onramp = web3_of(source).eth.contract(
        address=Web3.to_checksum_address(source.contracts["CcipOnRamp"]),
        abi=load_artifact("CcipOnRamp")["abi"],
    )
    # the OnRamp's fee parameters, read through the Router's quotes of a gas limit of 0 and 1
    base = router_fee(source, dest, recipient, 0)
    per_gas = router_fee(source, dest, recipient, 1) - base
    owner = Web3.to_checksum_address(source.deployer)

    def fee_rises_before_the_broadcast(executor: CcipExecutor) -> None:
        real = executor.submit

        async def submit(work: NodeWork, prep: Any) -> Any:
            # quoted and signed at the old fee; the chain's fee rises 6 % before it lands
            web3_of(source).eth.wait_for_transaction_receipt(
                onramp.functions.setFeeConfig(base * 106 // 100, per_gas).transact({"from": owner})
            )
            return await real(work, prep)

        executor.submit = submit  # type: ignore[method-assign]

    try:
        assert dispatch(db, local_chain_set, fee_rises_before_the_broadcast) == 1
        assert node_state(world, node_id) == "SUBMITTED"
        intent = world.execute("SELECT intent_document(%s)", (node_id,)).fetchone()[0]
        (tx,) = intent["transactions"]
        payload = intent["prepared_payload"]
        assert intent["chain_key"] == source.key and intent["sender"] == sender
        assert payload["router"] == source.contracts["CcipRouter"].lower()
        assert (payload["gas_limit"], payload["fee_margin_bps"], payload["ccip_version"]) == (
            0,
            1000,
            "1.6",
        )
        quote = int(payload["ccip_fee"])
        assert quote == base  # a token-only message pays for no destination gas
        sent_tx = rpc(source.rpc_url, "eth_getTransactionByHash", [tx["tx_hash"]])
        assert int(sent_tx["value"], 16) == fee_with_margin(quote, 1000)
    finally:
        web3_of(source).eth.wait_for_transaction_receipt(
            onramp.functions.setFeeConfig(base, per_gas).transact({"from": owner})
        )

    observe_until(db, world, local_chain_set, [node_id])
    assert node_state(world, node_id) == "COMPLETED"
    evidence = evidence_of(world, node_id)
    (sent,) = sends_from(source, sender, start)
    assert evidence["ccip_state"] == "SUCCESS"
    assert evidence["message_id"] == sent.message_id_hex
    assert evidence["source_tx"] == tx["tx_hash"] == sent.tx_hash
    assert evidence["amount_units"] == "3250000" and evidence["receiver"] == recipient
    assert [e["state"] for e in evidence["executions"]] == ["SUCCESS"]
    assert evidence["dest_tx"] == evidence["executions"][0]["dest_tx"]
    assert evidence["gas_limit"] == 0 and evidence["ccip_version"] == "1.6"
    assert sent.gas_limit == 0 and sent.fee_amount == fee_with_margin(quote, 1000)
    assert usdc_balance(source, sender) == held - 3_250_000
    assert usdc_balance(dest, recipient) == received + 3_250_000


def test_a_receiver_not_allowed_on_the_destination_is_never_signed_for(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    source, dest = local_chain_set.chains
    sender = local_chain_set.treasury[0].address
    outsider = "0x" + "5c" * 20
    # allowed on the SOURCE chain only: the money would land on the destination
    procs.allow_destination(source.key, outsider, "a counterparty on the source").one(world)
    node_id = start_send(world, source.key, dest.key, sender, outsider, Decimal("1"), "c-out")
    dispatch(db, local_chain_set)
    row = world.execute(
        "SELECT node_state::text, last_error FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row[0] == "FAILED"
    assert "QT032" in row[1] and "destination chain" in row[1]
    assert world.execute("SELECT count(*) FROM evm_transactions").fetchone()[0] == 0
    assert (
        world.execute("SELECT count(*) FROM node_intents WHERE nonce IS NOT NULL").fetchone()[0]
        == 0
    )


def recover_all(db: Any, conn: Any, chain_set: LocalChainSet) -> dict[int, str]:
    """One recovery pass once every claim's lease ran out (the recovery claim's
    clock moved past them): node id -> the outcome its executor read."""
    pin_clock(conn, "2099-01-01T00:00:00+00:00")
    try:
        claims = procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn)
    finally:
        pin_clock(conn, None)
    outcomes: dict[int, str] = {}

    async def body(ctx: WorkerContext, executor: CcipExecutor) -> None:
        for claim in claims:
            work = NodeWork.from_claim(claim, NETWORK)
            outcomes[work.node_id] = (await executor.recover(work)).outcome.value
            await node_recovery.recover_one(ctx, work, claim.node_state)

    run_ccip(db, chain_set, body)
    return outcomes


def test_a_runner_dying_after_prepare_after_broadcast_or_while_observing_sends_once_each(
    db: Any, world: Any, local_chain_set: LocalChainSet, network: ccip_world.CcipHandle
) -> None:
    source, dest = local_chain_set.chains
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start = head(source)
    received = usdc_balance(dest, recipient)
    amounts = {"observing": Decimal("1.000003"), "prepare": Decimal("1.000001"),
               "broadcast": Decimal("1.000002")}  # fmt: skip

    # dies while observing: the send executed, the observer read it, nothing reported
    observing = start_send(
        world, source.key, dest.key, sender, recipient, amounts["observing"], "c-o"
    )
    dispatch(db, local_chain_set)
    message = None
    deadline = time.monotonic() + DEADLINE_S
    while message is None or (network.message(message) or {}).get("status") != "SUCCESS":
        assert time.monotonic() < deadline, "the network did not execute the send"
        sent = sends_from(source, sender, start)
        message = sent[0].message_id_hex if sent else None
        time.sleep(0.2)

    def dies_after_observing(executor: CcipExecutor) -> None:
        real = executor.observe

        async def observe_then_die(work: NodeWork) -> Any:
            await real(work)
            raise Died("observe")

        executor.observe = observe_then_die  # type: ignore[method-assign]

    make_due(world, observing)
    with pytest.raises(BaseException) as died:
        observe(db, local_chain_set, dies_after_observing)
    assert (
        died.group_contains(Died)
        if isinstance(died.value, BaseExceptionGroup)
        else isinstance(died.value, Died)
    )

    # dies after its intent is recorded, before the broadcast
    prepared = start_send(world, source.key, dest.key, sender, recipient, amounts["prepare"], "c-p")

    def no_broadcast(executor: CcipExecutor) -> None:
        async def submit(work: NodeWork, prep: Any) -> Any:
            raise Died("submit")

        executor.submit = submit  # type: ignore[method-assign]

    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies in submit
        dispatch(db, local_chain_set, no_broadcast)
    assert node_state(world, prepared) == "SUBMITTING"

    # dies after the broadcast, before the report
    broadcast = start_send(
        world, source.key, dest.key, sender, recipient, amounts["broadcast"], "c-b"
    )

    def broadcast_then_die(executor: CcipExecutor) -> None:
        real = executor.submit

        async def submit(work: NodeWork, prep: Any) -> Any:
            await real(work, prep)
            raise Died("after submit")

        executor.submit = submit  # type: ignore[method-assign]

    with pytest.raises(BaseException):  # noqa: B017
        dispatch(db, local_chain_set, broadcast_then_die)
    assert node_state(world, broadcast) == "SUBMITTING"
    hashes = {
        n: world.execute("SELECT intent_document(%s)", (n,)).fetchone()[0]["signed_tx_hash"]
        for n in (prepared, broadcast)
    }
    assert rpc(source.rpc_url, "eth_getTransactionByHash", [hashes[prepared]]) is None

    # the observer's death rolled its claim back: observed again, nothing to recover
    assert node_state(world, observing) in ("SUBMITTED", "OBSERVING")
    outcomes = recover_all(db, world, local_chain_set)
    assert observing not in outcomes
    assert outcomes[prepared] == RecoveryOutcome.IN_FLIGHT.value  # the recorded bytes again
    assert outcomes[broadcast] == RecoveryOutcome.IN_FLIGHT.value
    assert rpc(source.rpc_url, "eth_getTransactionByHash", [hashes[prepared]]) is not None

    observe_until(db, world, local_chain_set, [observing, prepared, broadcast])
    assert {node_state(world, n) for n in (observing, prepared, broadcast)} == {"COMPLETED"}
    sent = sends_from(source, sender, start)
    # exactly one send per node, by amount, and each credited once
    assert sorted(m.amount for m in sent) == sorted(int(a * 10**6) for a in amounts.values())
    assert {evidence_of(world, n)["source_tx"] for n in (prepared, broadcast)} == set(
        hashes.values()
    )
    assert usdc_balance(dest, recipient) == received + sum(int(a * 10**6) for a in amounts.values())


def test_a_failed_execution_is_executed_manually_by_the_reaper_recorded_first_and_once(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    network: ccip_world.CcipHandle,
    iris: iris_world.IrisHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source, dest = local_chain_set.chains
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start = head(source)
    received = usdc_balance(dest, recipient)
    # the failure injected over the network's control endpoint, as an operator
    # would: the DON executes without the attestation, the release reverts
    injected = httpx.post(f"{network.url}/control/failures", json={"next": 1})
    assert injected.status_code == 200 and injected.json()["next"] == 1
    node_id = start_send(world, source.key, dest.key, sender, recipient, Decimal("2.5"), "c-f")
    dispatch(db, local_chain_set)
    observe_until(
        db, world, local_chain_set, [node_id],
        lambda n: evidence_of(world, n).get("ccip_state") == "FAILURE",
    )  # fmt: skip
    # stranded, not lost: still observed, the failure in its evidence, nothing credited
    assert node_state(world, node_id) == "OBSERVING"
    evidence = evidence_of(world, node_id)
    assert [e["state"] for e in evidence["executions"]] == ["FAILURE"]
    assert usdc_balance(dest, recipient) == received
    (stranded,) = procs.ccip_stranded_sends(10).all(world)
    assert stranded.node_id == node_id and stranded.message_id == evidence["message_id"]
    assert (stranded.token_data, stranded.dest_offramp) == (
        "cctp",
        dest.contracts["CcipOffRamp"].lower(),
    )
    status = httpx.get(f"{network.url}/v2/messages/{evidence['message_id']}").json()
    assert status["status"] == "FAILED" and status["sendTransactionHash"] == evidence["source_tx"]
    (sent,) = sends_from(source, sender, start)
    offramp = dest.contracts["CcipOffRamp"]

    def offramp_state() -> int:
        answer = rpc(
            dest.rpc_url,
            "eth_call",
            [{"to": offramp, "data": "0x" + execution_state_calldata(sent).hex()}, "latest"],
        )
        return int(str(answer), 16)

    assert offramp_state() == 3  # getExecutionState(source selector, sequence number): FAILURE

    # a source transaction signed by another account than the node's sender is
    # never executed by hand (SQL checks what recorded bytes do, not who signed
    # them): here the node's sender made another, and the keeper pays nothing
    node_from = (
        "UPDATE movement_request_nodes SET node_config = jsonb_set(node_config, '{from}', %s)"
    )
    with world.transaction():
        world.execute("SET LOCAL session_replication_role = replica")  # configs are frozen
        world.execute(node_from + " WHERE id = %s", (json.dumps(recipient), node_id))
    assert reap(db, local_chain_set, iris) == 0
    assert world.execute(
        "SELECT count(*) FROM ccip_manual_executions WHERE node_id = %s", (node_id,)
    ).fetchone() == (0,)
    with world.transaction():
        world.execute("SET LOCAL session_replication_role = replica")
        world.execute(node_from + " WHERE id = %s", (json.dumps(sender), node_id))

    # a runner login records a manual execution of the message signed by a key
    # of its own, with no ether: the reaper neither sends it nor waits for it,
    # and it counts for nothing
    forger = Account.create()
    forged = forger.sign_transaction(
        ccip_transaction(
            dest.chain_id, offramp, manually_execute_calldata(sent, [b""]), 0, 0,
            Fees(10**9, 10**8), 500_000,
        )
    )  # fmt: skip
    forged_hash = "0x" + forged.hash.hex().removeprefix("0x")
    runner = bind(db.connect(db.runner_dsn("testnet"), autocommit=True))
    assert procs.record_ccip_manual_execution(
        node_id, evidence["message_id"], forger.address, 0, forged_hash,
        "0x" + forged.raw_transaction.hex().removeprefix("0x"),
    ).one(runner)  # fmt: skip

    # and records another between the round's read and the keeper's record,
    # which names the newest it read as replaced: refused, it names the newest
    # again (another key's), and is recorded
    real_record = procs.record_ccip_manual_execution
    raced: list[str] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        if not raced:
            again = forger.sign_transaction(
                ccip_transaction(
                    dest.chain_id, offramp, manually_execute_calldata(sent, [b""]), 0, 1,
                    Fees(10**9, 10**8), 500_000,
                )
            )  # fmt: skip
            raced.append("0x" + again.hash.hex().removeprefix("0x"))
            assert real_record(
                node_id, evidence["message_id"], forger.address, 1, raced[0],
                "0x" + again.raw_transaction.hex().removeprefix("0x"), forged_hash,
            ).one(runner)  # fmt: skip
        return real_record(*args, **kwargs)

    # the reaper dies between its record and its broadcast: recorded, not sent
    def dies() -> None:
        raise Died("before the broadcast")

    with monkeypatch.context() as patch, pytest.raises(Died):
        patch.setattr(procs, "record_ccip_manual_execution", racing)
        reap(db, local_chain_set, iris, dies)
    attempts = world.execute(
        "SELECT tx_hash, executor, raw_tx FROM ccip_manual_executions WHERE node_id = %s"
        " ORDER BY id",
        (node_id,),
    ).fetchall()
    assert [a[0] for a in attempts][:2] == [forged_hash, raced[0]] and len(attempts) == 3
    recorded = attempts[2]
    assert recorded[1] not in {k.address for k in local_chain_set.treasury}
    assert rpc(dest.rpc_url, "eth_getTransactionByHash", [forged_hash]) is None
    assert rpc(dest.rpc_url, "eth_getTransactionByHash", [recorded[0]]) is None

    # its next round sends the recorded bytes: the same hash, nothing new signed
    assert reap(db, local_chain_set, iris) == 1
    manual_tx = rpc(dest.rpc_url, "eth_getTransactionByHash", [recorded[0]])
    assert manual_tx is not None and manual_tx["to"].lower() == offramp.lower()
    # the real OffRamp 1.6 manuallyExecute: a one-message report of the
    # message as executed, its one-leaf proof, the burn's attestation
    attested = match_attested(
        sent.usdc_payloads()[0],  # type: ignore[arg-type]
        httpx.get(
            f"{iris.url}/v2/messages/{sent.usdc_payloads()[0].source_domain}",  # type: ignore[union-attr]
            params={"transactionHash": sent.tx_hash},
        ).json()["messages"],
    )
    assert attested is not None
    assert (
        manual_tx["input"]
        == "0x" + manually_execute_calldata(sent, [usdc_token_data(*attested)]).hex()
    )
    assert manual_tx["input"][:10] == "0x" + MANUALLY_EXECUTE_SELECTOR.hex() == "0x5e7bb008"
    assert (
        world.execute(
            "SELECT count(*) FROM ccip_manual_executions WHERE node_id = %s", (node_id,)
        ).fetchone()[0]
        == 3
    )

    observe_until(db, world, local_chain_set, [node_id])
    assert node_state(world, node_id) == "COMPLETED"
    evidence = evidence_of(world, node_id)
    assert [e["state"] for e in evidence["executions"]] == ["FAILURE", "SUCCESS"]
    assert evidence["dest_tx"] == recorded[0]
    assert offramp_state() == SUCCESS
    assert usdc_balance(dest, recipient) == received + 2_500_000
    assert len(sends_from(source, sender, start)) == 1
    deadline = time.monotonic() + DEADLINE_S
    while httpx.get(f"{network.url}/v2/messages/{evidence['message_id']}").json()["status"] != (
        "SUCCESS"
    ):
        assert time.monotonic() < deadline, "the network did not see the manual execution"
        time.sleep(0.2)

    # nothing stranded any more; and the OffRamp lets the message succeed once:
    # a later execution is skipped, nothing minted again
    assert procs.ccip_stranded_sends(10).all(world) == []
    assert reap(db, local_chain_set, iris) == 0
    again = rpc(
        dest.rpc_url,
        "eth_call",
        [{"to": offramp, "data": manual_tx["input"]}, "latest"],
    )
    assert again == "0x"
    assert usdc_balance(dest, recipient) == received + 2_500_000


def test_the_observer_completes_a_send_on_a_v1_5_lane(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    """A lane recorded as v1.5 (its own Router, EVM2EVMOnRamp and
    EVM2EVMOffRamp): the send goes through the lane's Router, the observer
    finds its CCIPSendRequested on the lane's OnRamp and its v1.5
    ExecutionStateChanged (sequence number and message id) on the lane's
    OffRamp, and completes it with the evidence."""
    source, dest = local_chain_set.chains
    sender, recipient = (k.address for k in local_chain_set.treasury)
    lane = deploy_v1_5_lane(source, dest, dest.deployer)
    approve_router(source, local_chain_set.treasury, router=lane.router)
    router_row = world.execute(
        "SELECT remote_id, contracts FROM chain_protocols"
        " WHERE chain_key = %s AND protocol = 'ccip'",
        (source.key,),
    ).fetchone()
    procs.upsert_chain_protocol(
        source.key, "ccip", router_row[0], router_row[1] | {"CcipRouter": lane.router}
    ).one(world)
    procs.upsert_ccip_lane(
        source.key, dest.key, "1.5", onramp=lane.onramp, offramp=lane.offramp
    ).one(world)
    received = usdc_balance(dest, recipient)
    start = head(source)
    node_id = start_send(world, source.key, dest.key, sender, recipient, Decimal("1.5"), "c-15")
    assert dispatch(db, local_chain_set) == 1
    # the lane's executing network, played here: the message as the OnRamp emitted it
    deadline = time.monotonic() + DEADLINE_S
    logs: list[Any] = []
    while not logs:
        assert time.monotonic() < deadline, "the v1.5 send was not mined"
        logs = rpc(
            source.rpc_url,
            "eth_getLogs",
            [{"address": lane.onramp, "fromBlock": hex(start), "toBlock": "latest",
              "topics": [CCIP_SEND_REQUESTED_TOPIC]}],
        )  # fmt: skip
        time.sleep(0.2)
    (log,) = logs
    sent = SentMessage.from_v1_5_log(
        log["address"], log["topics"], bytes.fromhex(log["data"][2:]), log["transactionHash"],
        int(log["blockNumber"], 16), int(log["logIndex"], 16), ccip_selector(dest),
    )  # fmt: skip
    assert sent.gas_limit == 0 and sent.receiver == recipient
    execute = keccak(
        text="executeMessages((uint64,address,address,uint64,uint256,bool,uint64,address,uint256,"
        "bytes,(address,uint256)[],bytes[],bytes32)[])"
    )[:4]
    (raw,) = decode(
        ["(uint64,address,address,uint64,uint256,bool,uint64,address,uint256,bytes,"
         "(address,uint256)[],bytes[],bytes32)"],
        bytes.fromhex(log["data"][2:]),
    )  # fmt: skip
    w3 = web3_of(dest)
    w3.eth.wait_for_transaction_receipt(
        w3.eth.send_transaction(
            {
                "from": Web3.to_checksum_address(dest.deployer),
                "to": Web3.to_checksum_address(lane.offramp),
                "data": "0x" + (execute + encode(
                    ["(uint64,address,address,uint64,uint256,bool,uint64,address,uint256,bytes,"
                     "(address,uint256)[],bytes[],bytes32)[]"],
                    [[raw]],
                )).hex(),
            }
        )
    )  # fmt: skip

    observe_until(db, world, local_chain_set, [node_id])
    assert node_state(world, node_id) == "COMPLETED"
    evidence = evidence_of(world, node_id)
    assert evidence["ccip_version"] == "1.5" and evidence["ccip_state"] == "SUCCESS"
    assert evidence["message_id"] == sent.message_id_hex and evidence["onramp"] == lane.onramp
    assert [e["state"] for e in evidence["executions"]] == ["SUCCESS"]
    assert usdc_balance(dest, recipient) == received + 1_500_000
