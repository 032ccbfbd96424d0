"""The evm_transfer executor end to end: the real dispatcher, observer and
recovery batches, as a runner login, against the real local chains.

What a treasury relies on: a transfer between treasury accounts moves exactly
its amount once and completes only at the chain's finality depth with the
Transfer log it promised; a destination off the allow-list is never signed for;
a transfer reorganised away is broadcast again from the recorded bytes and
happens exactly once; a prepared transfer whose dispatcher died is recovered by
rebroadcasting the identical recorded bytes; a nonce taken by a transaction the
engine never recorded is left UNKNOWN for an operator, with the evidence.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from engine import pin_clock
from evm_support import (
    head,
    make_due,
    manual_mining,
    mine,
    node_state,
    register_world,
    run_batch,
    start_transfer,
    superuser,
    transfers_from,
    usdc_balance,
)

from qtg_runner.chains.evm import Fees, build_transfer
from qtg_runner.db import procs
from qtg_runner.executors.base import NodeWork
from qtg_runner.signers import load
from qtg_runner.workers import node_dispatcher, node_observer, node_recovery
from qtg_world.chains.local import rpc

pytestmark = [pytest.mark.chain]


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Any:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    return conn


FINISHED = {"COMPLETED", "FAILED", "UNKNOWN"}


def observe_until(
    db: Any, conn: Any, chain_set: LocalChainSet, chain: Any, node_id: int, rounds: int = 20
) -> str:
    """Observer batches (the node made due each time, a block of ``chain``
    mined between) until the node is finished."""
    for _ in range(rounds):
        make_due(conn, node_id)
        run_batch(db, node_observer.batch, chain_set)
        state = node_state(conn, node_id)
        if state in FINISHED:
            return state
        mine(chain)
    raise AssertionError(f"node {node_id} stayed {node_state(conn, node_id)}")


def intent_of(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT intent_document(%s)", (node_id,)).fetchone()
    assert row is not None and row[0] is not None
    return dict(row[0])


def test_a_transfer_between_treasury_accounts_moves_its_amount_once_and_completes_when_final(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    before = usdc_balance(chain, sender), usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("12.345678"), "t1")
        assert run_batch(db, node_dispatcher.batch, local_chain_set) == 1
        assert node_state(world, node_id) == "SUBMITTED"
        intent = intent_of(world, node_id)
        # the signed bytes and the nonce were recorded before the broadcast
        assert intent["chain_key"] == chain.key and intent["sender"] == sender
        (tx,) = intent["transactions"]
        assert tx["tx_hash"] == intent["signed_tx_hash"] and tx["nonce"] == intent["nonce"]
        next_nonce = procs.evm_next_nonce(chain.key, sender).one(world)
        assert next_nonce == intent["nonce"] + 1

        mine(chain)  # mined, one confirmation: not final
        make_due(world, node_id)
        run_batch(db, node_observer.batch, local_chain_set)
        assert node_state(world, node_id) == "OBSERVING"
        state = observe_until(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert state == "COMPLETED"
    evidence = world.execute(
        "SELECT evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()[0]
    assert evidence["transfer"] == {
        "token": chain.contracts["MockUSDC"].lower(),
        "from": sender,
        "to": recipient,
        "value": "12345678",
        "log_index": evidence["transfer"]["log_index"],
    }
    assert evidence["confirmations"] >= 3
    assert usdc_balance(chain, sender) == before[0] - 12_345_678
    assert usdc_balance(chain, recipient) == before[1] + 12_345_678
    assert transfers_from(chain, sender, start_block) == [(recipient, 12_345_678)]


def test_a_destination_off_the_allow_list_is_never_signed_for(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    chain = local_chain_set.chains[1]
    sender = local_chain_set.treasury[0].address
    outsider = "0x" + "5e" * 20
    _, node_id = start_transfer(world, chain.key, sender, outsider, Decimal("1"), "out-1")
    run_batch(db, node_dispatcher.batch, local_chain_set)
    row = world.execute(
        "SELECT node_state::text, last_error FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row[0] == "FAILED"
    assert "QT032" in row[1] and "allowed destination" in row[1]
    assert world.execute("SELECT count(*) FROM evm_transactions").fetchone()[0] == 0

    # allow-listed by the admin, the same destination is paid
    procs.allow_destination(chain.key, outsider, "a counterparty").one(world)
    start_block = head(chain)
    _, paid = start_transfer(world, chain.key, sender, outsider, Decimal("2.5"), "out-2")
    run_batch(db, node_dispatcher.batch, local_chain_set)
    assert node_state(world, paid) == "SUBMITTED"
    state = observe_until(db, world, local_chain_set, chain, paid)
    assert state == "COMPLETED"
    assert (outsider, 2_500_000) in transfers_from(chain, sender, start_block)


def test_a_transfer_reorganised_away_is_broadcast_again_and_happens_once(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    before = usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("3.21"), "reorg")
        run_batch(db, node_dispatcher.batch, local_chain_set)
        tx_hash = intent_of(world, node_id)["signed_tx_hash"]
        mine(chain)
        receipt = rpc(chain.rpc_url, "eth_getTransactionReceipt", [tx_hash])
        assert receipt is not None
        # seen mined, below the finality depth: not final
        make_due(world, node_id)
        run_batch(db, node_observer.batch, local_chain_set)
        assert node_state(world, node_id) == "OBSERVING"

        # the block that holds it is replaced by an empty one
        depth = head(chain) - int(receipt["blockNumber"], 16) + 1
        rpc(chain.rpc_url, "anvil_reorg", [depth, []])
        assert rpc(chain.rpc_url, "eth_getTransactionReceipt", [tx_hash]) is None
        assert transfers_from(chain, sender, start_block) == []

        # the observer finds it gone and broadcasts the recorded bytes again
        make_due(world, node_id)
        run_batch(db, node_observer.batch, local_chain_set)
        assert node_state(world, node_id) == "OBSERVING"
        assert rpc(chain.rpc_url, "eth_getTransactionByHash", [tx_hash]) is not None
        state = observe_until(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert state == "COMPLETED"
    assert transfers_from(chain, sender, start_block) == [(recipient, 3_210_000)]
    assert usdc_balance(chain, recipient) == before + 3_210_000
    assert [t["tx_hash"] for t in intent_of(world, node_id)["transactions"]] == [tx_hash]


def crash_after_record(db: Any, conn: Any, chain_set: LocalChainSet, node_id: int) -> None:
    """What a dispatcher killed right after recording its intent leaves: the
    node SUBMITTING with a PREPARED intent (signed bytes recorded, never
    broadcast), its claim lapsed."""
    from qtg_runner.workers import node_dispatcher as dispatcher

    def no_broadcast(executor: Any) -> None:
        async def refuse(*_: Any) -> Any:
            raise asyncio.CancelledError  # the process dies here

        executor.submit = refuse

    with pytest.raises(BaseException):  # noqa: B017 - the "process" dies in submit
        run_batch(db, dispatcher.batch, chain_set, executor_hook=no_broadcast)
    assert node_state(conn, node_id) == "SUBMITTING"
    assert intent_of(conn, node_id)["intent_state"] == "PREPARED"


def recover(db: Any, conn: Any, chain_set: LocalChainSet) -> None:
    """One recovery batch once the claims' leases ran out (the clock of the
    recovery claim moved past them)."""
    pin_clock(conn, "2099-01-01T00:00:00+00:00")
    try:
        claims = procs.claim_recovery_nodes("node_recovery", 16, 120).all(conn)
    finally:
        pin_clock(conn, None)
    assert claims, "nothing to recover"

    async def scenario() -> None:
        from qtg_runner.db.pool import bound_conninfo, open_pool
        from qtg_runner.executors.evm_transfer import EvmTransferExecutor
        from qtg_runner.loop import WorkerContext

        conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "evm-test")
        async with open_pool(conninfo, name="evm-test") as pool:
            executor = EvmTransferExecutor(pool, "testnet", env=chain_set.runner_env())
            ctx = WorkerContext("testnet", pool, {executor.key: executor}, "evm-test:1")
            try:
                for claim in claims:
                    work = NodeWork.from_claim(claim, "testnet")
                    await node_recovery.recover_one(ctx, work, claim.node_state)
            finally:
                await executor.aclose()

    asyncio.run(scenario())


def test_a_prepared_transfer_whose_dispatcher_died_is_rebroadcast_from_its_recorded_bytes(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, recipient, sender, Decimal("0.42"), "crash")
        crash_after_record(db, world, local_chain_set, node_id)
        tx_hash = intent_of(world, node_id)["signed_tx_hash"]
        assert rpc(chain.rpc_url, "eth_getTransactionByHash", [tx_hash]) is None

        recover(db, world, local_chain_set)
        assert node_state(world, node_id) in ("SUBMITTED", "OBSERVING")
        assert rpc(chain.rpc_url, "eth_getTransactionByHash", [tx_hash]) is not None
        mine(chain)
        state = observe_until(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert state == "COMPLETED"
    assert transfers_from(chain, recipient, start_block) == [(sender, 420_000)]


def forged_replacement(db: Any, world: Any, node_id: int) -> tuple[str, str, str, int]:
    """As a runner login, a "replacement" of the node's prepared transfer
    recorded: the same call at the same nonce under higher fees, signed by a
    key of its own (the engine checks what the bytes do and that the hash is
    theirs, not who signed them). Its hash, its raw bytes, the key's address
    and the nonce."""
    from eth_account import Account
    from eth_account.typed_transactions import TypedTransaction
    from hexbytes import HexBytes

    intent = intent_of(world, node_id)
    (raw,) = world.execute(
        "SELECT raw_tx FROM evm_transactions WHERE tx_hash = %s", (intent["signed_tx_hash"],)
    ).fetchone()
    forged = TypedTransaction.from_bytes(HexBytes(raw)).as_dict()
    forged["maxFeePerGas"] += 10**9
    forged["maxPriorityFeePerGas"] += 10**9
    attacker = Account.create()
    signed = Account.sign_transaction(forged, attacker.key)
    replacement = "0x" + signed.hash.hex().removeprefix("0x")
    raw_hex = "0x" + signed.raw_transaction.hex().removeprefix("0x")
    runner = db.connect(db.runner_dsn("testnet"))
    runner.execute("SET search_path = testnet, qtg")
    assert procs.record_evm_replacement(intent["id"], replacement, raw_hex).one(runner)
    return replacement, raw_hex, attacker.address, int(forged["nonce"])


def _send_from_the_forgers_account(chain: Any, raw_hex: str, attacker: str, nonce: int) -> None:
    """The forgery mined, and reverted (its account holds no USDC), from the
    forger's own funded account at the intent's nonce number."""
    rpc(chain.rpc_url, "anvil_setBalance", [attacker, hex(10**18)])
    rpc(chain.rpc_url, "anvil_setNonce", [attacker, hex(nonce)])
    rpc(chain.rpc_url, "eth_sendRawTransaction", [raw_hex])
    mine(chain, 10)  # past any finality depth


FORGERIES: dict[str, Callable[[Any, str, str, int], None]] = {
    # nobody sent it: the node refuses it when recovery broadcasts it
    "unsent": lambda chain, raw_hex, attacker, nonce: None,
    # nobody sent it, and the forger's account is past the nonce's number: sent
    # first it would be answered "nonce too low", which reads as taken
    "past_its_nonce": lambda chain, raw_hex, attacker, nonce: rpc(
        chain.rpc_url, "anvil_setNonce", [attacker, hex(nonce + 1)]
    ),
    # mined and reverted from the forger's own account: its receipt is not the
    # node's sender's, and taken for the node's it would fail the node
    "mined_elsewhere": _send_from_the_forgers_account,
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_replacement_signed_by_another_key_never_holds_back_the_intents_bytes(
    db: Any, world: Any, local_chain_set: LocalChainSet, forgery: str
) -> None:
    """A forged replacement (forged_replacement), in each of FORGERIES' ways,
    is neither read as the node's transaction, waited for, nor sent again:
    recovery broadcasts the intent's own bytes, the node stays at work (not
    FAILED), and the transfer lands once."""
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, recipient, sender, Decimal("0.43"), forgery)
        crash_after_record(db, world, local_chain_set, node_id)
        replacement, raw_hex, attacker, nonce = forged_replacement(db, world, node_id)
        FORGERIES[forgery](chain, raw_hex, attacker, nonce)
        mined = rpc(chain.rpc_url, "eth_getTransactionReceipt", [replacement])
        assert (mined is not None) == (forgery == "mined_elsewhere")

        recover(db, world, local_chain_set)
        assert node_state(world, node_id) in ("SUBMITTED", "OBSERVING")
        if mined is None:
            assert rpc(chain.rpc_url, "eth_getTransactionByHash", [replacement]) is None
        else:
            assert int(mined["status"], 16) == 0
        assert rpc(
            chain.rpc_url, "eth_getTransactionByHash", [intent_of(world, node_id)["signed_tx_hash"]]
        )
        mine(chain)
        state = observe_until(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert state == "COMPLETED"
    assert transfers_from(chain, recipient, start_block) == [(sender, 430_000)]


def test_a_nonce_taken_by_a_transaction_never_recorded_is_left_unknown_for_an_operator(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    chain = local_chain_set.chains[1]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("7"), "foreign")
        crash_after_record(db, world, local_chain_set, node_id)
        intent = intent_of(world, node_id)

        # the same key signs something else at that nonce, outside the engine
        signer = load(local_chain_set.treasury[0].signer_id, local_chain_set.runner_env())
        base = int(
            rpc(chain.rpc_url, "eth_getBlockByNumber", ["latest", False])["baseFeePerGas"], 16
        )
        fees = Fees(3 * base + 10**9, 10**9)
        other = build_transfer(
            chain.chain_id,
            chain.contracts["MockUSDC"],
            recipient,
            1,
            intent["nonce"],
            fees,
            100_000,
        )
        signed = asyncio.run(signer.sign_transaction(other))
        rpc(chain.rpc_url, "eth_sendRawTransaction", [signed.raw_hex])
        mine(chain)

        recover(db, world, local_chain_set)
    finally:
        resume()
    row = world.execute(
        "SELECT node_state::text, evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row[0] == "UNKNOWN"
    assert row[1]["problem"].startswith("the nonce is taken by a transaction the engine never")
    assert row[1]["recorded_hashes"] == [intent["signed_tx_hash"]]
    # only the foreign transaction moved money; ours never went out
    assert transfers_from(chain, sender, start_block) == [(recipient, 1)]


def test_concurrent_dispatchers_of_one_account_share_no_nonce_and_leave_no_gap(
    db: Any, world: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two dispatcher processes' worth of batches at once, each claiming three
    transfers from the same treasury account: every nonce is allocated once,
    they follow each other without a gap, and the six transfers all land."""
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    start_block = head(chain)
    amounts = [Decimal(f"0.00{i}1") for i in range(1, 7)]
    nodes = [
        start_transfer(world, chain.key, sender, recipient, amount, f"race-{i}")[1]
        for i, amount in enumerate(amounts)
    ]
    monkeypatch.setattr(node_dispatcher, "BATCH_SIZE", 3)
    db.runner_dsn("testnet")  # the runner login, made once before the two dispatchers
    first_nonce = int(rpc(chain.rpc_url, "eth_getTransactionCount", [sender, "pending"]), 16)
    resume = manual_mining(chain)
    try:
        with ThreadPoolExecutor(2) as pool:
            claimed = list(
                pool.map(lambda _: run_batch(db, node_dispatcher.batch, local_chain_set), [1, 2])
            )
        assert sorted(claimed) == [3, 3]
        assert {node_state(world, n) for n in nodes} == {"SUBMITTED"}
        nonces = sorted(intent_of(world, n)["nonce"] for n in nodes)
        assert nonces == list(range(first_nonce, first_nonce + 6))
        assert procs.evm_next_nonce(chain.key, sender).one(world) == first_nonce + 6
        mine(chain)
        for n in nodes:
            assert observe_until(db, world, local_chain_set, chain, n) == "COMPLETED"
    finally:
        resume()
    assert sorted(v for _, v in transfers_from(chain, sender, start_block)) == sorted(
        int(a * 10**6) for a in amounts
    )


def test_health_says_which_chain_is_down_or_out_of_reach(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    from qtg_runner.db.pool import bound_conninfo, open_pool
    from qtg_runner.executors.base import HealthStatus
    from qtg_runner.executors.evm_transfer import EvmTransferExecutor
    from qtg_runner.ports import free_port
    from qtg_world.chains.local import rpc_url_env

    a, b = local_chain_set.chains
    healthy = local_chain_set.runner_env()
    down = healthy | {rpc_url_env(b.key): f"http://127.0.0.1:{free_port()}/?apikey=SECRET"}
    all_down = down | {rpc_url_env(a.key): f"http://127.0.0.1:{free_port()}"}
    partial = {k: v for k, v in healthy.items() if k != rpc_url_env(b.key)}

    async def health(env: dict[str, str]) -> Any:
        conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "evm-test")
        async with open_pool(conninfo, name="evm-test") as pool:
            executor = EvmTransferExecutor(pool, "testnet", env=env, rpc_timeout=2)
            try:
                return await executor.health()
            finally:
                await executor.aclose()

    result = asyncio.run(health(healthy))
    assert result.status is HealthStatus.HEALTHY, result.detail
    assert set(result.detail) == {a.key, b.key}
    result = asyncio.run(health(down))  # one chain of two: the other's transfers go on
    assert result.status is HealthStatus.DEGRADED
    assert result.detail[b.key].startswith("down:") and "SECRET" not in result.detail[b.key]
    result = asyncio.run(health(all_down))
    assert result.status is HealthStatus.DOWN
    assert set(result.detail) == {a.key, b.key}
    result = asyncio.run(health(partial))
    assert result.status is HealthStatus.DEGRADED
    assert result.detail[b.key] == f"{rpc_url_env(b.key)} is not set in this runner"
