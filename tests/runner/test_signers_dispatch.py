"""A treasury account whose key is out of the runner, end to end: the chain
registry names a kms: or remote: signer for the account, and the real
dispatcher (as a runner login, with the real evm_transfer executor) signs
through it against the local chains.

The signing services are the loopback doubles of signer_doubles, holding the
treasury account's key (the outside world's; the runner is given only the
service's URL). While the service signs with another account's key, the node
goes back to READY with its backoff, its error says nothing was signed, no
transaction is recorded and the account's nonce on the chain has not moved;
once the service signs right, the same node is signed, recorded, broadcast
and mined from the treasury account.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from chain_support import LocalChainSet
from evm_support import (
    NETWORK,
    node_state,
    register_world,
    superuser,
    web3_of,
)
from signer_doubles import KmsDouble, RemoteSignerDouble, running

from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.loop import WorkerContext
from qtg_runner.signers import load
from qtg_runner.signers.local import LocalSigner
from qtg_runner.workers import node_dispatcher

pytestmark = [pytest.mark.chain, pytest.mark.slow]


@pytest.fixture
def world(db: Any, local_chain_set: LocalChainSet) -> Any:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    return conn


@pytest.fixture(params=["remote", "kms"])
def outside_signer(
    request: pytest.FixtureRequest, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Any, str, dict[str, str]]]:
    """A signing service holding the first treasury account's key: the double,
    the signer id the registry names, and the runner's environment for it."""
    treasury = local_chain_set.treasury[0]
    local = load(treasury.signer_id, local_chain_set.runner_env())
    assert isinstance(local, LocalSigner)
    key = bytes(local._LocalSigner__key)  # type: ignore[attr-defined]  # the outside world's copy
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    if request.param == "remote":
        with running(RemoteSignerDouble(key)) as double:
            yield (
                double,
                f"remote:TREASURY/{treasury.address}",
                {"QTG_REMOTE_SIGNER_TREASURY_URL": double.url},
            )
    else:
        with running(KmsDouble(key=key)) as double:
            yield (
                double,
                f"kms:{double.key_id}",
                {
                    "QTG_KMS_ENDPOINT_URL": double.url.rstrip("/"),
                    "AWS_REGION": "eu-west-1",
                    "AWS_ACCESS_KEY_ID": "testing",
                    "AWS_SECRET_ACCESS_KEY": "testing",
                },
            )


def node_wait(world: Any, node_id: int) -> tuple[str, str, float, int]:
    """The node's state, last error, seconds to its not_before and attempts."""
    row = world.execute(
        "SELECT node_state::text, last_error, extract(epoch FROM not_before - now()),"
        " submit_attempts FROM movement_request_nodes WHERE id = %s",
        (node_id,),
    ).fetchone()
    return str(row[0]), str(row[1]), float(row[2]), int(row[3])


def dispatch(db: Any, env: dict[str, str]) -> int:
    """One dispatcher batch as a runner login, the evm_transfer executor given ``env``."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "signer-test")
        async with open_pool(conninfo, name="signer-test") as pool:
            executor = EvmTransferExecutor(pool, NETWORK, env=env)
            ctx = WorkerContext(NETWORK, pool, {executor.key: executor}, "signer-test:1")
            try:
                return await node_dispatcher.batch(ctx, "worker@signer-test:1")
            finally:
                await executor.aclose()

    return asyncio.run(scenario())


def test_a_transfer_signed_out_of_the_runner_waits_out_a_bad_signer_then_lands(
    db: Any, world: Any, local_chain_set: LocalChainSet, outside_signer: Any
) -> None:
    double, signer_id, signer_env = outside_signer
    from evm_support import start_transfer

    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    procs.upsert_treasury_account(chain.key, sender, signer_id).one(world)
    env = local_chain_set.runner_env() | signer_env
    assert not any(k.startswith("QTG_SIGNER_") for k in env)  # no key in the runner's env
    w3 = web3_of(chain)
    nonce_before = w3.eth.get_transaction_count(w3.to_checksum_address(sender), "pending")

    double.mode = "other_key"
    _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("1.25"), "ext-1")
    dispatch(db, env)
    state, error, not_before_s, attempts = node_wait(world, node_id)
    assert state == "READY"
    assert "nothing was signed" in error and signer_id in error
    assert not_before_s > 10 and attempts == 1
    assert world.execute("SELECT count(*) FROM evm_transactions").fetchone()[0] == 0
    assert w3.eth.get_transaction_count(w3.to_checksum_address(sender), "pending") == nonce_before

    double.mode = "ok"
    world.execute(
        "UPDATE movement_request_nodes SET not_before = now() - interval '1 second' WHERE id = %s",
        (node_id,),
    )
    dispatch(db, env)
    assert node_state(world, node_id) == "SUBMITTED"
    (tx_hash,) = [r[0] for r in world.execute("SELECT tx_hash FROM evm_transactions").fetchall()]
    receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=30, poll_latency=0.1)
    assert receipt["status"] == 1
    assert str(receipt["from"]).lower() == sender


def test_a_kms_key_of_another_account_is_a_retryable_refusal(
    db: Any, world: Any, local_chain_set: LocalChainSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry names a KMS key whose public key is another account's:
    the node goes back to READY with its backoff and says why, nothing is
    signed, recorded or sent, and the account's nonce does not move."""
    from evm_support import start_transfer

    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    chain = local_chain_set.chains[0]
    sender, recipient = (k.address for k in local_chain_set.treasury)
    w3 = web3_of(chain)
    nonce_before = w3.eth.get_transaction_count(w3.to_checksum_address(sender), "pending")
    with running(KmsDouble(key=bytes(range(1, 33)))) as double:
        signer_id = f"kms:{double.key_id}"
        procs.upsert_treasury_account(chain.key, sender, signer_id).one(world)
        env = local_chain_set.runner_env() | {
            "QTG_KMS_ENDPOINT_URL": double.url.rstrip("/"),
            "AWS_REGION": "eu-west-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
        }
        _, node_id = start_transfer(world, chain.key, sender, recipient, Decimal("1"), "ext-other")
        dispatch(db, env)
    state, error, not_before_s, attempts = node_wait(world, node_id)
    assert state == "READY", error
    assert "not of the treasury account" in error and "nothing was signed" in error
    assert not_before_s > 10 and attempts == 1
    assert world.execute("SELECT count(*) FROM evm_transactions").fetchone()[0] == 0
    assert w3.eth.get_transaction_count(w3.to_checksum_address(sender), "pending") == nonce_before
