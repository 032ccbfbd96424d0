"""The remote signer (remote:NAME/0xADDRESS): a JSON-RPC signing service holds
the key, as Web3Signer (eth_accounts, eth_signTransaction) or Clef
(account_list, account_signTransaction) do.

Tested against a loopback signing service (signer_doubles.RemoteSignerDouble,
a real HTTP server on 127.0.0.1 that signs with its own eth-account key and
can be told to misbehave): a transaction it signs recovers to the account and
is the one asked; Clef's {raw, tx} answer is taken as Web3Signer's hex string
is; an id whose account the service does not hold, or whose service is not
configured, is refused at load; at sign time each bad answer (another
account's signature, bytes that are no transaction, a legacy transaction, a
high s, a transaction other than the one asked, an error, no answer in time,
no service) is a retryable SigningFailed, which the executors' send path
(evm_tx.signed) turns into a retryable ExecutorError with nothing prepared.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from eth_account import Account
from eth_account.typed_transactions.typed_transaction import TypedTransaction
from eth_utils.crypto import keccak
from hexbytes import HexBytes
from signer_doubles import RemoteSignerDouble, running
from test_signers_kms import TX, held_key_material

from qtg_runner.chains.evm import Fees
from qtg_runner.executors.base import ExecutorError
from qtg_runner.executors.evm_tx import ChainLeg, Send, gas_payload, signed
from qtg_runner.signers import SignedTransaction, SignerError, SigningFailed, load
from qtg_runner.signers.base import SIGNER_ID_PATTERN
from qtg_runner.signers.remote import RemoteSigner


@pytest.fixture
def service() -> Iterator[RemoteSignerDouble]:
    with running(RemoteSignerDouble()) as double:
        yield double


def remote_id(double: RemoteSignerDouble, name: str = "VAULT") -> str:
    return f"remote:{name}/{double.account.address}"


def env_of(double: RemoteSignerDouble, name: str = "VAULT", **more: str) -> dict[str, str]:
    return {f"QTG_REMOTE_SIGNER_{name}_URL": double.url, **more}


def test_a_remote_signed_transaction_is_the_one_asked_signed_by_the_account(
    service: RemoteSignerDouble,
) -> None:
    signer_id = remote_id(service)
    assert SIGNER_ID_PATTERN.match(signer_id)
    signer = load(signer_id, env_of(service))
    assert isinstance(signer, RemoteSigner)
    assert signer.address == service.address
    done = asyncio.run(signer.sign_transaction(TX))
    assert str(Account.recover_transaction(done.raw)).lower() == service.address
    assert done.tx_hash == "0x" + keccak(done.raw).hex()
    # the service signed exactly what eth-account would have signed with the key
    assert done.raw == bytes(Account.sign_transaction(TX, service.account.key).raw_transaction)
    sign_request = service.requests[-1]["body"]
    assert sign_request["method"] == "eth_signTransaction"
    assert sign_request["params"][0] == {
        "from": service.account.address,
        "to": "0x" + "11" * 20,
        "gas": "0xea60",
        "maxFeePerGas": hex(30 * 10**9),
        "maxPriorityFeePerGas": hex(10**9),
        "value": hex(12345),
        "data": TX["data"],
        "nonce": "0x7",
        "chainId": hex(31337),
        "type": "0x2",
    }
    assert [r["body"]["method"] for r in service.requests] == [
        "eth_accounts",
        "eth_signTransaction",
    ]


def test_clefs_api_and_answer_are_taken_too(service: RemoteSignerDouble) -> None:
    signer = load(
        remote_id(service, "CLEF"), env_of(service, "CLEF", QTG_REMOTE_SIGNER_CLEF_API="clef")
    )
    done = asyncio.run(signer.sign_transaction(TX))
    assert str(Account.recover_transaction(done.raw)).lower() == service.address
    assert [r["body"]["method"] for r in service.requests] == [
        "account_list",
        "account_signTransaction",
    ]
    service.mode = "clef_shape"  # {raw, tx} through eth_signTransaction (geth's answer)
    eth = load(remote_id(service), env_of(service))
    assert asyncio.run(eth.sign_transaction(TX)).raw == done.raw


def test_the_remote_signer_holds_no_private_key(service: RemoteSignerDouble) -> None:
    signer = load(remote_id(service), env_of(service))
    assert held_key_material(signer) == []
    assert not hasattr(signer, "__dict__")
    assert repr(signer) == (
        f"RemoteSigner(signer_id='{remote_id(service)}', address='{service.address}')"
    )
    with pytest.raises(TypeError, match="not pickled"):
        signer.__reduce__()


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("other_key", "the transaction is signed by 0x"),
        ("malformed", "does not decode to a signed EIP-1559 transaction"),
        ("legacy", "a transaction of type"),
        ("high_s", "the signature's s is high"),
        ("other_fields", r"another transaction than the one asked \(its to, value differ\)"),
        ("error", "eth_signTransaction failed .*signing denied by policy"),
    ],
)
def test_a_bad_remote_answer_is_a_retryable_refusal(
    service: RemoteSignerDouble, mode: str, said: str
) -> None:
    signer = load(remote_id(service), env_of(service))
    service.mode = mode
    with pytest.raises(SigningFailed, match=said) as refused:
        asyncio.run(signer.sign_transaction(TX))
    assert refused.value.retryable
    assert refused.value.__cause__ is None and refused.value.__context__ is None
    assert "nothing was signed" in str(refused.value)


def test_a_silent_remote_signer_is_a_retryable_refusal(service: RemoteSignerDouble) -> None:
    signer = load(remote_id(service, "SLOW"), env_of(service, "SLOW", QTG_SIGNER_TIMEOUT_S="0.3"))
    service.delay_s = 1.0
    with pytest.raises(SigningFailed, match=r"eth_signTransaction failed .*no answer") as silent:
        asyncio.run(signer.sign_transaction(TX))
    assert silent.value.retryable
    # the endpoint's circuit is open now: the next call is refused at once, unsent
    with pytest.raises(SigningFailed, match="eth_signTransaction failed") as again:
        asyncio.run(signer.sign_transaction(TX))
    assert again.value.retryable


def test_a_remote_signer_gone_is_a_retryable_refusal(service: RemoteSignerDouble) -> None:
    signer = load(remote_id(service), env_of(service))
    service.stop()
    with pytest.raises(SigningFailed, match=r"eth_signTransaction failed .*Connect") as refused:
        asyncio.run(signer.sign_transaction(TX))
    assert refused.value.retryable


def test_a_remote_id_is_refused_at_load_unless_the_service_holds_its_account(
    service: RemoteSignerDouble,
) -> None:
    stranger = Account.create().address
    with pytest.raises(SignerError, match="does not hold the key of") as other:
        load(f"remote:VAULT/{stranger}", env_of(service))
    assert not other.value.retryable
    with pytest.raises(SignerError, match="QTG_REMOTE_SIGNER_ELSEWHERE_URL is not set"):
        load(f"remote:ELSEWHERE/{service.account.address}", env_of(service))
    for malformed in (
        f"remote:vault/{service.account.address}",  # NAME in capitals only
        f"remote:VAULT/{service.account.address[:-2]}",
        f"remote:../HOME/{service.account.address}",
        "remote:VAULT",
    ):
        with pytest.raises(SignerError, match="a remote signer id is remote:NAME/0xADDRESS"):
            load(malformed, env_of(service) | {"HOME": service.url})
    with pytest.raises(SignerError, match=r"is eth .* or clef"):
        load(remote_id(service), env_of(service, QTG_REMOTE_SIGNER_VAULT_API="web3"))
    service.stop()
    with pytest.raises(SignerError, match=r"eth_accounts on http://127.0.0.1:.*no answer"):
        load(remote_id(service), env_of(service))


# -- the send path: a signing failure is the node's retryable refusal ------------------

LEG = ChainLeg(
    chain_key="local-a",
    chain_id=31337,
    rpc_url_env="QTG_RPC_LOCAL_A",
    finality_depth=2,
    block_time_s=1.0,
    sender="0x" + "ab" * 20,
    signer_id="remote:VAULT/0x" + "ab" * 20,
    max_fee_cap=10**11,
    priority_fee_cap=10**10,
)


class _Refusing:
    """A signer whose every signature fails with ``error``."""

    signer_id = LEG.signer_id
    address = LEG.sender

    def __init__(self, error: SignerError) -> None:
        self.error = error

    async def sign_transaction(self, tx: dict[str, Any]) -> SignedTransaction:
        raise self.error


def test_the_send_path_turns_a_signing_failure_into_a_retryable_refusal() -> None:
    payload = gas_payload(60_000, Fees(30 * 10**9, 10**9))
    send = Send(to="0x" + "11" * 20, data=b"\xa9\x05\x9c\xbb")
    failed = SigningFailed("signer remote:VAULT/0x...: no answer; nothing was signed")
    with pytest.raises(ExecutorError, match=r"local-a.*no answer") as refused:
        asyncio.run(signed(_Refusing(failed), LEG, send, 3, payload))
    assert refused.value.retryable and refused.value.retry_after == 30.0
    assert refused.value.__context__ is None
    # a SignerError that no retry mends is raised as it is, as before
    broken = SignerError("signer env:QTG_SIGNER_X: eth-account refused to sign")
    with pytest.raises(SignerError) as kept:
        asyncio.run(signed(_Refusing(broken), LEG, send, 3, payload))
    assert kept.value is broken


def test_the_send_path_signs_through_a_remote_signer(service: RemoteSignerDouble) -> None:
    signer = load(remote_id(service), env_of(service))
    leg = ChainLeg(**{**LEG.__dict__, "sender": signer.address, "signer_id": signer.signer_id})
    payload = gas_payload(60_000, Fees(30 * 10**9, 10**9))
    prepared = asyncio.run(signed(signer, leg, Send(to="0x" + "11" * 20, data=b"\x01"), 5, payload))
    assert prepared.raw_tx is not None
    raw = bytes.fromhex(prepared.raw_tx[2:])
    assert prepared.signed_tx_hash == "0x" + keccak(raw).hex() and prepared.nonce == 5
    assert TypedTransaction.from_bytes(HexBytes(raw)).as_dict()["nonce"] == 5
