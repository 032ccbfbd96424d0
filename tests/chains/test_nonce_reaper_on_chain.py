"""The evm_nonce_reaper against the real local chains, as a runner login.

What a treasury relies on: a transfer whose nonce follows one that failed
without a broadcast is not stuck forever behind the gap (the reaper closes the
gap with a recorded zero-value self-transfer and both are mined); a transfer
sitting unmined past its age is replaced by a fee bump that is recorded in the
engine before the node ever sees it, and the observer then settles the node by
the replacement's receipt.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from engine import as_person, bind
from eth_account import Account
from evm_support import (
    make_due,
    manual_mining,
    mine,
    node_state,
    register_world,
    run_batch,
    start_transfer,
    superuser,
    usdc_balance,
)
from psycopg import sql

from qtg_runner.chains.evm import EvmRpc, Fees, decode_raw, self_transfer, tx_hash_of
from qtg_runner.db import procs
from qtg_runner.executors.base import ExecutorError
from qtg_runner.workers import evm_nonce_reaper, node_dispatcher, node_observer
from qtg_world.chains.local import rpc

pytestmark = [pytest.mark.chain]


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Any:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    return conn


def intent_of(conn: Any, node_id: int) -> dict[str, Any]:
    row = conn.execute("SELECT intent_document(%s)", (node_id,)).fetchone()
    assert row is not None and row[0] is not None
    return dict(row[0])


@contextlib.contextmanager
def runner_clock(db: Any, conn: Any, minutes: int) -> Iterator[None]:
    """The database clock of the runner's login (new sessions: the pool of one
    batch) pinned ``minutes`` ahead of now, for the block of the with."""
    login = db.connect(db.runner_dsn("testnet")).execute("SELECT session_user").fetchone()[0]
    dbname = conn.execute("SELECT current_database()").fetchone()[0]
    at = conn.execute("SELECT (now() + make_interval(mins => %s))::text", (minutes,)).fetchone()[0]
    role = sql.SQL("ALTER ROLE {} IN DATABASE {}").format(
        sql.Identifier(login), sql.Identifier(dbname)
    )
    conn.execute(role + sql.SQL(" SET qtg.now = {}").format(sql.Literal(at)))
    try:
        yield
    finally:
        conn.execute(role + sql.SQL(" RESET qtg.now"))


def receipt(chain: Any, tx_hash: str) -> Any:
    return rpc(chain.rpc_url, "eth_getTransactionReceipt", [tx_hash])


def mined_within(chain: Any, tx_hashes: list[str], seconds: float = 20.0) -> None:
    """Mine blocks until every hash has a receipt, or fail at the deadline."""
    deadline = time.monotonic() + seconds
    while not all(receipt(chain, h) for h in tx_hashes):
        assert time.monotonic() < deadline, (
            f"not mined: {[h for h in tx_hashes if not receipt(chain, h)]}"
        )
        mine(chain)


def recorded_first(monkeypatch: pytest.MonkeyPatch, conn: Any) -> list[str]:
    """Every broadcast from now on checks that the engine holds its bytes first;
    the hashes sent, in order."""
    sent: list[str] = []
    real_send = EvmRpc.send_raw_transaction

    async def send_checked(self: EvmRpc, raw: bytes) -> str:
        tx_hash = tx_hash_of(raw)
        row = conn.execute(
            "SELECT raw_tx FROM evm_transactions WHERE tx_hash = %s", (tx_hash,)
        ).fetchone()
        assert row is not None and row[0] == "0x" + raw.hex(), "broadcast before it was recorded"
        sent.append(tx_hash)
        return await real_send(self, raw)

    monkeypatch.setattr(EvmRpc, "send_raw_transaction", send_checked)
    return sent


def reaper(chain_set: LocalChainSet) -> Any:
    return functools.partial(evm_nonce_reaper.run_round, env=chain_set.runner_env())


def submit_raising(error: ExecutorError) -> Callable[[Any], None]:
    """An executor hook: the broadcast of the signed (and recorded) bytes ends
    in ``error``."""

    def hook(executor: Any) -> None:
        async def submit(*_: Any) -> Any:
            raise error

        executor.submit = submit

    return hook


refuse_submit = submit_raising(
    ExecutorError("test-a refused the transfer: insufficient funds", retryable=False)
)
"""The node refuses the signed bytes (as for insufficient funds): nothing went out."""


def stale_round(
    db: Any, world: Any, chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[str]]:
    """One reaper round with the runner's clock two minutes on (what was
    recorded now is stale), every broadcast checked to be recorded first: how
    many it acted on, and the hashes it sent."""
    with monkeypatch.context() as patch, runner_clock(db, world, minutes=2):
        sent = recorded_first(patch, world)
        return run_batch(db, reaper(chain_set), chain_set), sent


def observed_until_completed(
    db: Any, world: Any, chain_set: LocalChainSet, chain: Any, node_id: int
) -> None:
    """The observer's rounds, a block mined between them, until the node is
    COMPLETED (at most ten)."""
    for _ in range(10):
        make_due(world, node_id)
        run_batch(db, node_observer.batch, chain_set)
        if node_state(world, node_id) == "COMPLETED":
            return
        mine(chain)


def gap_behind(
    db: Any, world: Any, chain_set: LocalChainSet, chain: Any, sender: str, recipient: str
) -> tuple[int, str]:
    """A transfer of 1.5 refused by the node (FAILED, nothing sent: its nonce a
    gap), then one of 2.5 sent behind it and never mined: the gap's nonce and
    the second transfer's hash."""
    _, failed = start_transfer(world, chain.key, sender, recipient, Decimal("1.5"), "gap-1")
    run_batch(db, node_dispatcher.batch, chain_set, executor_hook=refuse_submit)
    assert node_state(world, failed) == "FAILED"
    gap = intent_of(world, failed)
    assert gap["intent_state"] == "FAILED"
    _, stuck = start_transfer(world, chain.key, sender, recipient, Decimal("2.5"), "gap-2")
    run_batch(db, node_dispatcher.batch, chain_set)
    assert node_state(world, stuck) == "SUBMITTED"
    behind = intent_of(world, stuck)
    assert behind["nonce"] == gap["nonce"] + 1
    mine(chain, 2)
    assert receipt(chain, behind["signed_tx_hash"]) is None  # behind the gap: never mined
    return gap["nonce"], behind["signed_tx_hash"]


def test_a_nonce_left_by_a_failed_transfer_is_filled_and_the_next_transfer_lands(
    db: Any, world: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    before = usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        n, behind = gap_behind(db, world, local_chain_set, chain, sender, recipient)

        with monkeypatch.context() as patch:
            sent = recorded_first(patch, world)
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 1
        # the round settled the account's nonces first: its mark stops at the gap
        mark = "SELECT settled_below FROM evm_nonce_marks WHERE chain_key = %s AND address = %s"
        assert world.execute(mark, (chain.key, sender)).fetchone() == (n,)
        fill = world.execute(
            "SELECT tx_hash, intent_id, raw_tx FROM evm_transactions"
            " WHERE purpose = 'fill' AND chain_key = %s AND sender = %s AND nonce = %s",
            (chain.key, sender, n),
        ).fetchall()
        assert len(fill) == 1 and fill[0][1] is None
        fill_hash = fill[0][0]
        assert sent == [fill_hash]
        mined_within(chain, [fill_hash, behind])
        filled = rpc(chain.rpc_url, "eth_getTransactionByHash", [fill_hash])
        assert (filled["from"], filled["to"], int(filled["value"], 16), filled["input"]) == (
            sender,
            sender,
            0,
            "0x",
        )
        assert int(filled["nonce"], 16) == n
        assert receipt(chain, fill_hash)["blockNumber"] <= receipt(chain, behind)["blockNumber"]
        assert world.execute("SELECT count(*) FROM evm_nonce_gaps(100)").fetchone()[0] == 0
        # past the fill's age the reaper sees it mined and reports the nonce closed
        with runner_clock(db, world, minutes=10):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 1
        closed = world.execute(
            "SELECT detail FROM audit_outbox WHERE action = 'nonce_closed'"
        ).fetchone()[0]
        assert (closed["nonce"], closed["tx_hash"]) == (n, fill_hash)
        # filled, the gap is settled; the next transfer is still observed
        assert world.execute(mark, (chain.key, sender)).fetchone() == (n + 1,)
        with runner_clock(db, world, minutes=20):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 0
    finally:
        resume()
    assert usdc_balance(chain, recipient) == before + 2_500_000


def test_a_transfer_waiting_too_long_is_bumped_recorded_first_and_settled_by_its_replacement(
    db: Any, world: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    chain = local_chain_set.chains[1]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("4.2"), "bump")
        run_batch(db, node_dispatcher.batch, local_chain_set)
        original = intent_of(world, node_id)["signed_tx_hash"]
        assert rpc(chain.rpc_url, "eth_getTransactionByHash", [original]) is not None

        # not old enough yet: nothing to do
        assert run_batch(db, reaper(local_chain_set), local_chain_set) == 0

        # every broadcast checks that the engine holds the bytes first
        sent: list[str] = []
        real_send = EvmRpc.send_raw_transaction

        async def send_checked(self: EvmRpc, raw: bytes) -> str:
            tx_hash = tx_hash_of(raw)
            row = world.execute(
                "SELECT purpose, intent_id FROM evm_transactions WHERE tx_hash = %s", (tx_hash,)
            ).fetchone()
            hashes = world.execute(
                "SELECT signed_tx_hashes FROM node_intents WHERE node_id = %s", (node_id,)
            ).fetchone()[0]
            assert row is not None and row[0] == "replacement", "broadcast before it was recorded"
            assert tx_hash in hashes
            sent.append(tx_hash)
            return await real_send(self, raw)

        monkeypatch.setattr(EvmRpc, "send_raw_transaction", send_checked)
        # the database's clock past 20 block times (and the minute) since it was recorded
        with runner_clock(db, world, minutes=2):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 1
        monkeypatch.undo()
        (replacement,) = sent
        intent = intent_of(world, node_id)
        assert [t["tx_hash"] for t in intent["transactions"]] == [original, replacement]
        assert [t["purpose"] for t in intent["transactions"]] == ["intent", "replacement"]
        old = decode_raw(bytes.fromhex(intent["transactions"][0]["raw_tx"][2:]))
        new = decode_raw(bytes.fromhex(intent["transactions"][1]["raw_tx"][2:]))
        assert new.nonce == old.nonce == intent["nonce"]
        assert (new.to, new.data, new.gas) == (old.to, old.data, old.gas)
        assert new.fees.max_fee_per_gas > old.fees.max_fee_per_gas
        # the node holds the replacement now, not the original
        assert rpc(chain.rpc_url, "eth_getTransactionByHash", [replacement]) is not None

        mined_within(chain, [replacement])
        assert receipt(chain, original) is None
        observed_until_completed(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert node_state(world, node_id) == "COMPLETED"
    evidence = world.execute(
        "SELECT evidence FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()[0]
    assert evidence["tx_hash"] == replacement


def test_bytes_another_key_signed_never_hold_a_transfer_the_account_signs_its_call_again(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SQL holds a recorded replacement to its intent's call, not to its
    signer: a runner login records, as the newest transaction of a sent
    transfer, the same call signed with a key of its own at the account's
    nonce, with a gas limit too small for it (waiting in the pool from the
    forger's account). The reaper never sends the forger's bytes and is not
    held by them: it signs the intent's call with the account's key at that
    nonce, at the gas the chain estimates, records it first, and the node is
    settled by it."""
    chain = local_chain_set.chains[1]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    before = usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("1.5"), "forger")
        run_batch(db, node_dispatcher.batch, local_chain_set)
        intent = intent_of(world, node_id)
        honest = decode_raw(bytes.fromhex(intent["transactions"][0]["raw_tx"][2:]))
        forger = Account.create()
        rpc(chain.rpc_url, "anvil_setBalance", [forger.address, hex(10**18)])
        rpc(chain.rpc_url, "anvil_setNonce", [forger.address, hex(honest.nonce)])
        tx = honest.to_tx(
            fees=Fees(honest.fees.max_fee_per_gas * 2, honest.fees.max_priority_fee_per_gas * 2),
            gas=30_000,
        )
        forged = forger.sign_transaction(tx)
        forged_hash = "0x" + forged.hash.hex().removeprefix("0x")
        rpc(chain.rpc_url, "eth_sendRawTransaction", ["0x" + forged.raw_transaction.hex()])
        runner = bind(db.connect(db.runner_dsn("testnet"), autocommit=True))
        assert procs.record_evm_replacement(
            intent["id"], forged_hash, "0x" + forged.raw_transaction.hex()
        ).one(runner)
        with caplog.at_level(logging.WARNING):
            acted, sent = stale_round(db, world, local_chain_set, monkeypatch)
        assert acted == 1
        assert any("nonce_reaper_foreign_bytes" in r.getMessage() for r in caplog.records)
        transactions = intent_of(world, node_id)["transactions"]
        assert [t["tx_hash"] for t in transactions[:2]] == [intent["signed_tx_hash"], forged_hash]
        (own,) = transactions[2:]
        assert sent == [own["tx_hash"]]  # the forger's bytes are never sent
        signed = decode_raw(bytes.fromhex(own["raw_tx"][2:]))
        assert signed.sender.lower() == sender.lower()
        assert (signed.nonce, signed.to, signed.value, signed.data) == (
            honest.nonce,
            honest.to,
            honest.value,
            honest.data,
        )
        assert signed.gas > 30_000
        assert signed.fees.max_fee_per_gas > honest.fees.max_fee_per_gas
        mined_within(chain, [own["tx_hash"]])
        assert receipt(chain, intent["signed_tx_hash"]) is None
        observed_until_completed(db, world, local_chain_set, chain, node_id)
    finally:
        resume()
    assert node_state(world, node_id) == "COMPLETED"
    assert usdc_balance(chain, recipient) == before + 1_500_000


def test_another_keys_bytes_that_pay_ether_are_never_signed_with_the_treasury_key(
    db: Any, world: Any, local_chain_set: LocalChainSet, caplog: pytest.LogCaptureFixture
) -> None:
    """A CCIP send pays its fee in ether, and the fee is the runner's quote
    (SQL holds it under the lane's cap, not to the Router's price): bytes
    another key signed that pay ether are never the account's to sign again,
    or a runner login would have the treasury pay up to the cap. Planted
    here as a transfer's newest bytes: the reaper signs and records nothing."""
    chain = local_chain_set.chains[1]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("1.5"), "pays")
        run_batch(db, node_dispatcher.batch, local_chain_set)
        intent = intent_of(world, node_id)
        honest = decode_raw(bytes.fromhex(intent["transactions"][0]["raw_tx"][2:]))
        forged = Account.create().sign_transaction(honest.to_tx() | {"value": 10**17})
        world.execute(
            "INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose,"
            " raw_tx, recorded_by, recorded_at) VALUES (%s, %s, %s, %s, %s, 'replacement', %s,"
            " 'forger', clock())",
            (
                "0x" + forged.hash.hex().removeprefix("0x"),
                chain.key,
                sender,
                honest.nonce,
                intent["id"],
                "0x" + forged.raw_transaction.hex().removeprefix("0x"),
            ),
        )
        recorded = "SELECT count(*) FROM evm_transactions"
        before = world.execute(recorded).fetchone()
        with caplog.at_level(logging.WARNING), runner_clock(db, world, minutes=2):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 0
        assert world.execute(recorded).fetchone() == before
        assert any("nonce_reaper_foreign_bytes_left" in r.getMessage() for r in caplog.records)
    finally:
        resume()


def test_a_fill_another_key_signed_holds_no_gap_the_account_fills_it(
    db: Any,
    world: Any,
    local_chain_set: LocalChainSet,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A runner login records, at the nonce a failed transfer left, a fill
    signed by a key of its own (a zero-value transfer to the account: what
    SQL asks of a fill's bytes). The gap is no longer listed, and the
    account's next transfer waits behind it; once the fill is stale the
    reaper fills the nonce with the account's own self-transfer, recorded
    as the forged fill's replacement, and the transfer behind it lands."""
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    before = usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        n, behind = gap_behind(db, world, local_chain_set, chain, sender, recipient)
        forger = Account.create()
        # a transfer of nothing to the account, as a fill is, but from the forger
        forged = forger.sign_transaction(
            self_transfer(chain.chain_id, sender, n, Fees(10**9, 10**8))
        )
        forged_hash = "0x" + forged.hash.hex().removeprefix("0x")
        runner = bind(db.connect(db.runner_dsn("testnet"), autocommit=True))
        assert procs.record_nonce_fill(
            chain.key, sender, n, forged_hash, "0x" + forged.raw_transaction.hex()
        ).one(runner)
        assert world.execute("SELECT count(*) FROM evm_nonce_gaps(100)").fetchone() == (0,)
        assert run_batch(db, reaper(local_chain_set), local_chain_set) == 0
        mine(chain, 2)
        assert receipt(chain, behind) is None

        with caplog.at_level(logging.WARNING):
            acted, sent = stale_round(db, world, local_chain_set, monkeypatch)
        assert acted == 2  # the fill, and the transfer behind it, stale too: bumped
        fills = world.execute(
            "SELECT tx_hash, raw_tx FROM evm_transactions WHERE purpose = 'fill' AND nonce = %s"
            " ORDER BY recorded_at",
            (n,),
        ).fetchall()
        assert len(fills) == 2 and fills[0][0] == forged_hash
        own_hash, own_raw = fills[1]
        assert own_hash in sent and forged_hash not in sent and len(sent) == 2
        own = decode_raw(bytes.fromhex(own_raw[2:]))
        assert (own.sender.lower(), own.to.lower(), own.value, own.nonce) == (
            sender.lower(),
            sender.lower(),
            0,
            n,
        )
        assert any("nonce_reaper_foreign_bytes" in r.getMessage() for r in caplog.records)
        mined_within(chain, sent)
    finally:
        resume()
    assert usdc_balance(chain, recipient) == before + 2_500_000


def test_a_failed_transfer_found_mined_is_never_filled_and_is_recorded_for_an_operator(
    db: Any, world: Any, local_chain_set: LocalChainSet, caplog: pytest.LogCaptureFixture
) -> None:
    """The bytes went out although the node was failed (the submit reported a
    permanent error after the broadcast): the reaper must not fill over them
    while they wait in the pool, and once they are mined it records the
    evidence (money moved for a failed node) instead of a fill."""
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)

    def send_then_fail(executor: Any) -> None:
        real_submit = executor.submit

        async def submit(work: Any, prepared: Any) -> Any:
            await real_submit(work, prepared)
            raise ExecutorError("a permanent error, reported after the broadcast", retryable=False)

        executor.submit = submit

    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("0.7"), "out")
        run_batch(db, node_dispatcher.batch, local_chain_set, executor_hook=send_then_fail)
        assert node_state(world, node_id) == "FAILED"
        tx_hash = intent_of(world, node_id)["signed_tx_hash"]
        nonce = intent_of(world, node_id)["nonce"]

        # in the pool: never replaced by a fill
        assert run_batch(db, reaper(local_chain_set), local_chain_set) == 0
        fills = "SELECT count(*) FROM evm_transactions WHERE purpose = 'fill'"
        assert world.execute(fills).fetchone()[0] == 0

        mined_within(chain, [tx_hash])
        with caplog.at_level("ERROR"):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 1
    finally:
        resume()
    assert world.execute(fills).fetchone()[0] == 0
    detail = world.execute(
        "SELECT detail FROM audit_outbox WHERE action = 'nonce_found_mined'"
    ).fetchone()[0]
    assert (detail["nonce"], detail["tx_hash"], detail["sender"]) == (nonce, tx_hash, sender)
    assert any("event=nonce_found_mined" in r.getMessage() for r in caplog.records)
    assert world.execute("SELECT count(*) FROM evm_nonce_gaps(100)").fetchone()[0] == 0


def test_a_gap_held_only_by_another_accounts_transaction_is_filled(
    db: Any, world: Any, local_chain_set: LocalChainSet, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes recorded at a failed intent's nonce but signed by another key
    (a forged "replacement": SQL checks what bytes do, not who signed them),
    mined from that key's own account: the nonce of the treasury account is
    still free. The reaper neither takes it as occupied nor reports it as the
    failed node's transaction mined; it fills the gap."""
    from eth_account.typed_transactions import TypedTransaction
    from hexbytes import HexBytes

    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    resume = manual_mining(chain)
    try:
        _, failed = start_transfer(world, chain.key, sender, recipient, Decimal("0.9"), "forged")
        run_batch(db, node_dispatcher.batch, local_chain_set, executor_hook=refuse_submit)
        assert node_state(world, failed) == "FAILED"
        intent = intent_of(world, failed)
        n = intent["nonce"]
        (own,) = intent["transactions"]
        forged = TypedTransaction.from_bytes(HexBytes(own["raw_tx"])).as_dict()
        forged["maxFeePerGas"] += 10**9
        attacker = Account.create()
        signed = Account.sign_transaction(forged, attacker.key)
        forged_hash = "0x" + signed.hash.hex().removeprefix("0x")
        forged_raw = "0x" + signed.raw_transaction.hex().removeprefix("0x")
        world.execute(
            "INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose,"
            " raw_tx, recorded_by, recorded_at) VALUES (%s, %s, %s, %s, %s, 'replacement', %s,"
            " 'forger', clock())",
            (forged_hash, chain.key, sender, n, intent["id"], forged_raw),
        )
        rpc(chain.rpc_url, "anvil_setBalance", [attacker.address, hex(10**18)])
        rpc(chain.rpc_url, "anvil_setNonce", [attacker.address, hex(n)])
        rpc(chain.rpc_url, "eth_sendRawTransaction", [forged_raw])
        mine(chain)
        assert receipt(chain, forged_hash) is not None

        with caplog.at_level("WARNING"):
            assert run_batch(db, reaper(local_chain_set), local_chain_set) == 1
        fill = world.execute(
            "SELECT tx_hash FROM evm_transactions WHERE purpose = 'fill' AND nonce = %s", (n,)
        ).fetchall()
        assert len(fill) == 1
        mined_within(chain, [fill[0][0]])
    finally:
        resume()
    assert not any("nonce_gap_occupied" in r.getMessage() for r in caplog.records)
    assert world.execute(
        "SELECT count(*) FROM audit_outbox WHERE action IN ('nonce_found_mined', 'nonce_closed')"
    ).fetchone() == (0,)


lose_the_answer = submit_raising(
    ExecutorError("test-a did not answer the broadcast", retryable=True)
)
"""The broadcast gets no answer the runner can read: the signed bytes are
recorded, never sent (the node goes UNKNOWN with its intent PREPARED)."""


def test_a_requeued_transfer_is_not_signed_again_while_its_old_bytes_can_land(
    db: Any, world: Any, local_chain_set: LocalChainSet
) -> None:
    """Two operators requeue a transfer whose broadcast went unanswered. A
    runner login then reports its nonce consumed, which releases the node's
    hold (requeue_node), though the chain has not used it. The dispatcher
    reads the chain itself and signs nothing while the old bytes can still
    land; once they are sent after all (whoever held them) and mined, it
    quarantines the node, for a person: the recipient is paid once."""
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    before = usdc_balance(chain, recipient)
    resume = manual_mining(chain)
    try:
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("1.5"), "lost-1")
        run_batch(db, node_dispatcher.batch, local_chain_set, executor_hook=lose_the_answer)
        assert node_state(world, node_id) == "UNKNOWN"
        old = intent_of(world, node_id)
        for person in ("alice", "bob"):
            with as_person(world, person):
                procs.requeue_node(node_id, "the broadcast was lost").one(world)
        with bind(db.connect(db.runner_dsn("testnet"))) as liar:
            assert procs.record_nonce_closed(chain.key, sender, old["nonce"], "consumed").one(liar)
        held = "SELECT awaits_nonce_of, last_error FROM movement_request_nodes WHERE id = %s"
        assert world.execute(held, (node_id,)).fetchone() == (None, None)  # the lie released it
        signed = "SELECT count(*) FROM evm_transactions WHERE sender = %s AND chain_key = %s"
        count = world.execute(signed, (sender, chain.key)).fetchone()

        attempts = "SELECT submit_attempts FROM movement_request_nodes WHERE id = %s"
        spent = world.execute(attempts, (node_id,)).fetchone()
        run_batch(db, node_dispatcher.batch, local_chain_set)
        row = world.execute(held, (node_id,)).fetchone()
        assert node_state(world, node_id) == "READY" and "has not used yet" in row[1]
        assert world.execute(attempts, (node_id,)).fetchone() == spent  # a wait, not a failure
        assert world.execute(signed, (sender, chain.key)).fetchone() == count  # nothing signed

        rpc(chain.rpc_url, "eth_sendRawTransaction", [old["transactions"][0]["raw_tx"]])
        mine(chain)
        world.execute(
            "UPDATE movement_request_nodes SET not_before = NULL WHERE id = %s", (node_id,)
        )
        run_batch(db, node_dispatcher.batch, local_chain_set)
        quarantined = world.execute(
            "SELECT quarantined_at IS NOT NULL, quarantine_reason FROM movement_request_nodes"
            " WHERE id = %s",
            (node_id,),
        ).fetchone()
        assert quarantined[0] and f"{old['signed_tx_hash']}, is mined" in quarantined[1]
        assert world.execute(signed, (sender, chain.key)).fetchone() == count
    finally:
        resume()
    assert usdc_balance(chain, recipient) == before + 1_500_000
