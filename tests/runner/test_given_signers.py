"""Signers given to the executors (EvmAccess's ``signers``, as a rehearsal
gives its stand-ins): they are the only signers. What a rehearsal relies on:
a signer id they lack is refused and never loaded, so no key of the
registry's (a keystore, KMS, a remote signer) is read; a given signer that
answers another account than the leg's is refused as any signer is."""

from __future__ import annotations

import asyncio

import pytest

from qtg_rehearsal.stand_ins import StandIn
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import ExecutorError
from qtg_runner.executors.evm_tx import ChainLeg, EvmAccess

TREASURY = "0x" + "11" * 20


def leg(signer_id: str, sender: str = TREASURY) -> ChainLeg:
    return ChainLeg(
        chain_key="chain-a",
        chain_id=1,
        rpc_url_env="QTG_RPC_CHAIN_A",
        finality_depth=2,
        block_time_s=1.0,
        sender=sender,
        signer_id=signer_id,
        max_fee_cap=10**12,
        priority_fee_cap=10**10,
    )


@pytest.fixture
def no_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse_to_load(*args: object, **kwargs: object) -> None:
        raise AssertionError("a signer was loaded")

    monkeypatch.setattr(evm_tx, "load_async", refuse_to_load)


def test_a_given_signer_signs_for_its_account(no_loading: None) -> None:
    stand_in = StandIn("kms:alias/treasury", TREASURY)
    access = EvmAccess({}, signers={"kms:alias/treasury": stand_in})
    assert asyncio.run(access.signer(leg("kms:alias/treasury"))) is stand_in


def test_an_id_the_given_signers_lack_is_refused_and_never_loaded(no_loading: None) -> None:
    access = EvmAccess(
        {"QTG_KEYSTORE_DIR": "/nonexistent", "QTG_KEYSTORE_PASSWORD": "x"},
        signers={"kms:alias/treasury": StandIn("kms:alias/treasury", TREASURY)},
    )
    with pytest.raises(ExecutorError, match="not among the signers this runner was given") as exc:
        asyncio.run(access.signer(leg("keystore:treasury-2")))
    assert not exc.value.retryable
    empty = EvmAccess({}, signers={})
    with pytest.raises(ExecutorError, match="not among the signers"):
        asyncio.run(empty.signer(leg("env:QTG_KEY")))


def test_a_given_signer_of_another_account_is_refused(no_loading: None) -> None:
    access = EvmAccess({}, signers={"s": StandIn("s", "0x" + "22" * 20)})
    with pytest.raises(ExecutorError, match="not of the treasury account") as refused:
        asyncio.run(access.signer(leg("s")))
    # nothing was signed: the node waits for its backoff and is tried again
    assert refused.value.retryable and refused.value.retry_after
    assert "nothing was signed" in str(refused.value)
