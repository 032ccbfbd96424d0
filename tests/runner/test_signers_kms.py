"""The AWS KMS signer (kms:KEY): the key never enters the runner.

Loading is tested against moto's KMS (mock_aws): an ECC_SECG_P256K1 key's
address derived from its DER public key (checked against the cryptography
package's own parse), another key spec or usage refused, an unknown key
refused. Signing is tested against a loopback KMS-compatible HTTP server
(signer_doubles.KmsDouble, reached through boto3 with QTG_KMS_ENDPOINT_URL):
moto 5.2.6 ignores MessageType DIGEST and hashes the digest again, so a
signature from it is never over the transaction's digest. Through the double:
the signed transaction recovers to the key's address, a high s is made low,
and each bad answer (another key's signature, a malformed one, KMS's error,
no answer in time, no server) is a retryable SigningFailed with nothing
signed, which the executors' send path (evm_tx.signed) turns into a
retryable ExecutorError.
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
from signer_doubles import SECP256K1_N, KmsDouble, running

from qtg_runner.signers import SignerError, SigningFailed, load
from qtg_runner.signers.kms import KmsSigner, public_point, signature_rs

boto3 = pytest.importorskip("boto3")

TX: dict[str, Any] = {
    "type": 2,
    "chainId": 31337,
    "nonce": 7,
    "to": "0x" + "11" * 20,
    "value": 12345,
    "data": "0xa9059cbb" + "00" * 64,
    "gas": 60_000,
    "maxFeePerGas": 30 * 10**9,
    "maxPriorityFeePerGas": 10**9,
    "accessList": [],
}

AWS = {
    "AWS_REGION": "eu-west-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
}


@pytest.fixture(autouse=True)
def _no_instance_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    """boto3 never looks for credentials on the network (the instance metadata
    address is no place for a test to reach)."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def kms() -> Iterator[KmsDouble]:
    with running(KmsDouble()) as double:
        yield double


def env_of(double: KmsDouble, **more: str) -> dict[str, str]:
    return AWS | {"QTG_KMS_ENDPOINT_URL": double.url.rstrip("/"), **more}


def held_key_material(obj: object) -> list[str]:
    """The attributes of ``obj`` (and of what they hold, a level down, but not
    inside the boto3 client) that are 32 bytes or 64 hex digits: what a private
    key would be."""
    found = []
    names = [n for cls in type(obj).__mro__ for n in getattr(cls, "__slots__", ())]
    names += list(getattr(obj, "__dict__", {}))
    for name in names:
        value = getattr(obj, name.replace("__", f"_{type(obj).__name__}__", 1), None)
        items = value if isinstance(value, list | tuple | set) else [value]
        for item in items:
            if isinstance(item, bytes | bytearray) and len(item) == 32:
                found.append(name)
            if isinstance(item, str) and len(item.removeprefix("0x")) == 64:
                found.append(name)
    return found


def test_a_kms_signed_transaction_recovers_to_the_keys_address(kms: KmsDouble) -> None:
    signer = load(f"kms:{kms.key_id}", env_of(kms))
    assert isinstance(signer, KmsSigner)
    assert signer.address == kms.address
    signed = asyncio.run(signer.sign_transaction(TX))
    assert str(Account.recover_transaction(signed.raw)).lower() == kms.address
    assert signed.tx_hash == "0x" + keccak(signed.raw).hex()
    decoded = TypedTransaction.from_bytes(HexBytes(signed.raw)).as_dict()
    assert (decoded["nonce"], decoded["value"], decoded["chainId"]) == (7, 12345, 31337)
    # the same transaction signed with the key itself is the same transaction
    assert [r["target"] for r in kms.requests] == ["TrentService.GetPublicKey", "TrentService.Sign"]
    assert repr(signer) == f"KmsSigner(signer_id='kms:{kms.key_id}', address='{kms.address}')"


def test_an_alias_names_the_key_too(kms: KmsDouble) -> None:
    assert load(f"kms:alias/{kms.key_id}", env_of(kms)).address == kms.address


def test_a_high_s_from_kms_is_made_low(kms: KmsDouble) -> None:
    kms.mode = "high_s"
    signer = load(f"kms:{kms.key_id}", env_of(kms))
    for nonce in range(4):
        signed = asyncio.run(signer.sign_transaction(TX | {"nonce": nonce}))
        s = int(TypedTransaction.from_bytes(HexBytes(signed.raw)).as_dict()["s"])
        assert s <= SECP256K1_N // 2
        assert str(Account.recover_transaction(signed.raw)).lower() == kms.address


def test_the_kms_signer_holds_no_private_key(kms: KmsDouble) -> None:
    signer = load(f"kms:{kms.key_id}", env_of(kms))
    assert held_key_material(signer) == []
    # what the check finds in a signer that does hold a key
    local = load("env:QTG_SIGNER_T", {"QTG_SIGNER_T": "0x" + Account.create().key.hex()})
    assert held_key_material(local) == ["__key"]
    assert not hasattr(signer, "__dict__")
    with pytest.raises(TypeError, match="not pickled"):
        signer.__reduce__()


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("other_key", "does not recover to"),
        ("malformed", "not a DER ECDSA signature"),
        ("error", "KMS Sign failed"),
        ("disabled", r"KMS Sign failed \(DisabledException\)"),
    ],
)
def test_a_bad_kms_answer_is_a_retryable_refusal(kms: KmsDouble, mode: str, said: str) -> None:
    signer = load(f"kms:{kms.key_id}", env_of(kms))
    kms.mode = mode
    with pytest.raises(SigningFailed, match=said) as refused:
        asyncio.run(signer.sign_transaction(TX))
    assert refused.value.retryable
    assert refused.value.__cause__ is None and refused.value.__context__ is None
    assert "nothing was signed" in str(refused.value)


def test_kms_silent_or_gone_is_a_retryable_refusal(kms: KmsDouble) -> None:
    signer = load(f"kms:{kms.key_id}", env_of(kms, QTG_SIGNER_TIMEOUT_S="0.3"))
    kms.delay_s = 1.5
    with pytest.raises(SigningFailed, match="KMS Sign failed") as silent:
        asyncio.run(signer.sign_transaction(TX))
    assert silent.value.retryable
    kms.delay_s = 0
    kms.stop()
    with pytest.raises(SigningFailed, match="KMS Sign failed") as gone:
        asyncio.run(signer.sign_transaction(TX))
    assert gone.value.retryable


def test_a_kms_key_that_cannot_sign_for_an_account_is_refused_at_load(kms: KmsDouble) -> None:
    kms.key_spec = "ECC_NIST_P256"
    with pytest.raises(SignerError, match="is ECC_NIST_P256 for SIGN_VERIFY") as spec:
        load(f"kms:{kms.key_id}", env_of(kms))
    assert not spec.value.retryable
    kms.key_spec, kms.key_usage = "ECC_SECG_P256K1", "ENCRYPT_DECRYPT"
    with pytest.raises(SignerError, match="for ENCRYPT_DECRYPT"):
        load(f"kms:{kms.key_id}", env_of(kms))
    with pytest.raises(SignerError, match=r"GetPublicKey of nope failed \(NotFoundException\)"):
        load("kms:nope", env_of(kms))
    no_region = {k: v for k, v in env_of(kms).items() if k != "AWS_REGION"}
    with pytest.raises(SignerError, match="no AWS region"):
        load(f"kms:{kms.key_id}", no_region)


def test_der_is_read_strictly() -> None:
    assert signature_rs(bytes.fromhex("3006020101020102")) == (1, 2)
    for bad in (
        "3006020101020102ff",  # trailing bytes
        "30060201ff020102",  # a negative r
        "3007020200010201" + "02",  # r not minimal
        "3006020100020102",  # r zero
        "300502010102",  # truncated
    ):
        with pytest.raises(Exception) as caught:
            signature_rs(bytes.fromhex(bad))
        assert type(caught.value).__name__ == "_BadDer"
    with pytest.raises(Exception) as off_curve:
        public_point(bytes.fromhex("3056301006072a8648ce3d020106052b8104000a034200") + b"\x04" * 65)
    assert type(off_curve.value).__name__ == "_BadDer"


# -- moto's KMS: GetPublicKey, the key's spec and usage ------------------------------


@pytest.fixture
def moto_kms() -> Iterator[Any]:
    moto = pytest.importorskip("moto")
    with moto.mock_aws():
        yield boto3.client(
            "kms",
            region_name="eu-west-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )


def test_moto_kms_key_loads_with_the_address_of_its_public_key(moto_kms: Any) -> None:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_der_public_key,
    )

    key_id = moto_kms.create_key(KeySpec="ECC_SECG_P256K1", KeyUsage="SIGN_VERIFY")["KeyMetadata"][
        "KeyId"
    ]
    moto_kms.create_alias(AliasName="alias/treasury", TargetKeyId=key_id)
    spki = moto_kms.get_public_key(KeyId=key_id)["PublicKey"]
    point = load_der_public_key(spki).public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)
    expected = "0x" + keccak(point[1:])[12:].hex()

    assert public_point(spki) == point[1:]
    assert load(f"kms:{key_id}", AWS).address == expected
    assert load("kms:alias/treasury", AWS).address == expected
    assert held_key_material(load("kms:alias/treasury", AWS)) == []


def test_moto_kms_keys_of_another_spec_or_usage_are_refused(moto_kms: Any) -> None:
    p256 = moto_kms.create_key(KeySpec="ECC_NIST_P256", KeyUsage="SIGN_VERIFY")["KeyMetadata"]
    with pytest.raises(SignerError, match="is ECC_NIST_P256 for SIGN_VERIFY"):
        load(f"kms:{p256['KeyId']}", AWS)
    aes = moto_kms.create_key()["KeyMetadata"]
    with pytest.raises(SignerError, match="is SYMMETRIC_DEFAULT"):
        load(f"kms:{aes['KeyId']}", AWS)
    with pytest.raises(SignerError, match=r"failed \(NotFoundException\)"):
        load("kms:alias/none-such", AWS)
