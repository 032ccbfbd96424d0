"""A key never leaves its signer, nor a keystore's password its file.

Each way a signer can fail to load (a wrong password, a missing file, a
password file open to others, a malformed key, a missing variable, a key
pasted where a signer id belongs, a damaged or altered keystore) or to sign
raises a SignerError whose message, repr and formatted traceback hold neither
the key (in any case, with or without 0x) nor the password, with no exception
chained to it; a signer's repr and str show its id and address only, and it is
never pickled or copied. Nothing the signers do logs the key. An env: signer
id names a QTG_SIGNER_ variable only: one that names HOME, PATH,
QTG_DATABASE_URL or any other of the runner's environment is refused before
the variable is read.

With the local chains (marker chain): `qtg chains up` run as a real process
prints neither, no file of the chains' directory but the encrypted keystore
mentions the key (and none but the password file the password), no anvil has
either in its argv, and no row of any table of the database holds them after
the registry is filled, nor does the log of an in-process registration, signer
load and signed transfer.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
import pickle
import secrets
import subprocess
import sys
import traceback
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chain_support import LocalChainSet, anvil_or_skip, light_keystore
from conftest import TestDatabase
from eth_account import Account
from psycopg import sql
from web3 import HTTPProvider, Web3

from qtg_runner.ports import free_port_base
from qtg_runner.signers import SignerError, SignerSet, load
from qtg_runner.signers.local import LocalSigner, write_keystore
from qtg_world.chains.local import read_state
from qtg_world.chains.registry import record_chains

N = 2**10  # scrypt's n for the tests' keystores (eth-account's default takes 0.7 s)
SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141

TX = {
    "type": 2,
    "chainId": 31337,
    "nonce": 0,
    "to": "0x" + "11" * 20,
    "value": 1,
    "data": b"",
    "gas": 21000,
    "maxFeePerGas": 2 * 10**9,
    "maxPriorityFeePerGas": 10**9,
}


class Secrets:
    """A fresh key, its keystore (scrypt and pbkdf2) and the password, in tmp_path."""

    def __init__(self, tmp_path: Path) -> None:
        account = Account.create()
        self.key_hex = bytes(account.key).hex()  # without 0x
        self.key = "0x" + self.key_hex
        self.address = account.address.lower()
        self.password = "pw-" + secrets.token_urlsafe(16)
        self.dir = tmp_path / "keystore"
        self.dir.mkdir(mode=0o700)
        write_keystore(self.dir / "treasury.json", bytes(account.key), self.password, iterations=N)
        write_keystore(
            self.dir / "cold.json", bytes(account.key), self.password, "pbkdf2", iterations=1000
        )
        self.password_file = tmp_path / "password"
        self.password_file.write_text(self.password + "\n")
        self.password_file.chmod(0o600)

    def env(self, **extra: str) -> dict[str, str]:
        return {"QTG_KEYSTORE_DIR": str(self.dir), **extra}

    def needles(self) -> list[str]:
        """What must never appear (compared lower-case)."""
        return [self.key_hex.lower(), self.password.lower()]


@pytest.fixture
def s(tmp_path: Path) -> Secrets:
    return Secrets(tmp_path)


def assert_free_of(texts: Iterable[str], needles: Iterable[str]) -> None:
    joined = "\n".join(texts).lower()
    for needle in needles:
        assert needle.lower() not in joined


def assert_secret_free_error(error: SignerError, s: Secrets, *names: str) -> None:
    """The error names what it should and holds nothing secret, chained or not."""
    message = str(error)
    for name in names:
        assert name in message, message
    assert error.__cause__ is None and error.__context__ is None
    formatted = "".join(traceback.format_exception(error))
    assert_free_of([message, repr(error), formatted], s.needles())


# --- loading -------------------------------------------------------------------------


def test_a_signer_loads_from_the_environment_and_from_keystores(s: Secrets) -> None:
    by_env = load("env:QTG_SIGNER_TREASURY", {"QTG_SIGNER_TREASURY": s.key})
    by_scrypt = load("keystore:treasury", s.env(QTG_KEYSTORE_PASSWORD=s.password))
    by_pbkdf2 = load("keystore:cold", s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file)))
    for signer in (by_env, by_scrypt, by_pbkdf2):
        assert signer.address == s.address
    # one key, one signature, whichever way it was loaded
    signed = {asyncio.run(x.sign_transaction(TX)) for x in (by_env, by_scrypt, by_pbkdf2)}
    assert len(signed) == 1


@pytest.mark.parametrize(
    ("signer_id", "setup", "names"),
    [
        pytest.param(
            "keystore:treasury",
            lambda s: s.env(QTG_KEYSTORE_PASSWORD=s.password + "x"),
            ["keystore:treasury", "password does not open", "treasury.json"],
            id="wrong-password",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                s.password_file.write_text(s.password[:-1] + "\n"),
                s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file)),
            )[1],
            ["keystore:treasury", "password does not open"],
            id="wrong-password-in-file",
        ),
        pytest.param(
            "keystore:missing",
            lambda s: s.env(QTG_KEYSTORE_PASSWORD=s.password),
            ["keystore:missing", "no keystore file", "missing.json"],
            id="missing-file",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: {"QTG_KEYSTORE_PASSWORD": s.password},
            ["keystore:treasury", "QTG_KEYSTORE_DIR is not set"],
            id="no-keystore-dir",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: s.env(),
            ["keystore:treasury", "no keystore password", "QTG_KEYSTORE_PASSWORD_FILE"],
            id="no-password",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file) + ".gone"),
            ["keystore:treasury", "no keystore password file"],
            id="missing-password-file",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                s.password_file.chmod(0o644),
                s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file)),
            )[1],
            ["keystore:treasury", "open to others (mode 0644)", "chmod 600"],
            id="world-readable-password-file",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                s.password_file.chmod(0o640),
                s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file)),
            )[1],
            ["keystore:treasury", "open to others (mode 0640)"],
            id="group-readable-password-file",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                (s.dir / "treasury.json").write_text("{not json"),
                s.env(QTG_KEYSTORE_PASSWORD=s.password),
            )[1],
            ["keystore:treasury", "not an encrypted keystore"],
            id="not-a-keystore",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                _damage_ciphertext(s.dir / "treasury.json"),
                s.env(QTG_KEYSTORE_PASSWORD=s.password),
            )[1],
            ["keystore:treasury", "password does not open"],
            id="damaged-keystore",
        ),
        pytest.param(
            "keystore:treasury",
            lambda s: (
                _change_address(s.dir / "treasury.json"),
                s.env(QTG_KEYSTORE_PASSWORD=s.password),
            )[1],
            ["keystore:treasury", "was altered"],
            id="altered-address",
        ),
        pytest.param(
            "keystore:../keystore/treasury",
            lambda s: s.env(QTG_KEYSTORE_PASSWORD=s.password),
            ["is not a keystore name"],
            id="path-outside-the-keystore",
        ),
        pytest.param(
            "env:QTG_SIGNER_TREASURY",
            lambda s: {},
            ["env:QTG_SIGNER_TREASURY", "QTG_SIGNER_TREASURY is not set"],
            id="missing-variable",
        ),
        *(
            pytest.param(
                "env:QTG_SIGNER_TREASURY",
                lambda s, bad=bad: {"QTG_SIGNER_TREASURY": bad(s)},
                ["env:QTG_SIGNER_TREASURY", "does not hold a private key", "not shown"],
                id=f"malformed-key-{name}",
            )
            for name, bad in [
                ("no-0x", lambda s: s.key_hex),
                ("short", lambda s: s.key[:-1]),
                ("long", lambda s: s.key + "0"),
                ("not-hex", lambda s: s.key[:-1] + "g"),
                ("space-inside", lambda s: s.key[:30] + " " + s.key[30:]),
                ("0X", lambda s: "0X" + s.key_hex),
                ("quoted", lambda s: f'"{s.key}"'),
                ("zero", lambda s: "0x" + "00" * 32),
                ("curve-order", lambda s: f"0x{SECP256K1_N:064x}"),
            ]
        ),
        pytest.param(
            "vault:treasury",
            lambda s: {},
            ["vault:treasury", "unknown signer id form", "env:QTG_SIGNER_NAME", "keystore:NAME"],
            id="unknown-form",
        ),
    ],
)
def test_a_signer_that_cannot_load_says_what_to_do_and_nothing_secret(
    s: Secrets, signer_id: str, setup: Any, names: list[str]
) -> None:
    env = setup(s)
    with pytest.raises(SignerError) as caught:
        load(signer_id, env)
    assert_secret_free_error(caught.value, s, *names)


class Watched(dict[str, str]):
    """An environment that remembers which variables were read."""

    def __init__(self, **values: str) -> None:
        super().__init__(values)
        self.read: list[str] = []

    def get(self, key: str, default: Any = None) -> Any:
        self.read.append(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.append(key)
        return super().__getitem__(key)


@pytest.mark.parametrize(
    "name",
    [
        "HOME",
        "PATH",
        "QTG_DATABASE_URL",
        "QTG_KEYSTORE_PASSWORD",
        "QTG_BYBIT_KEY_FILE",
        "TREASURY_KEY",
        "qtg_signer_treasury",  # another variable: names are case-sensitive
        "QTG_SIGNER_",
        "X_QTG_SIGNER_TREASURY",
    ],
)
def test_an_env_signer_id_names_a_signer_variable_only_and_no_other_is_read(
    s: Secrets, name: str
) -> None:
    env = Watched(**{name: s.key})  # a key in it: loaded, it would sign
    with pytest.raises(SignerError) as caught:
        load(f"env:{name}", env)
    assert env.read == []
    assert_secret_free_error(
        caught.value, s, f"env:{name}", "is not a signer's variable", "QTG_SIGNER_"
    )


@pytest.mark.parametrize("form", ["0x", "bare", "upper", "env:"])
def test_a_key_given_as_the_signer_id_is_never_echoed(s: Secrets, form: str) -> None:
    signer_id = {
        "0x": s.key,
        "bare": s.key_hex,
        "upper": s.key_hex.upper(),
        "env:": "env:" + s.key_hex,
    }[form]
    with pytest.raises(SignerError) as caught:
        load(signer_id, {})
    assert_secret_free_error(caught.value, s)


def test_a_keystore_password_file_must_be_private_even_when_the_password_is_right(
    s: Secrets,
) -> None:
    env = s.env(QTG_KEYSTORE_PASSWORD_FILE=str(s.password_file))
    s.password_file.chmod(0o604)
    with pytest.raises(SignerError):
        load("keystore:treasury", env)
    s.password_file.chmod(0o400)  # stricter than 0600 is fine
    assert load("keystore:treasury", env).address == s.address


# --- a loaded signer ---------------------------------------------------------------------


def test_a_signer_shows_its_id_and_address_only_and_is_never_copied(s: Secrets) -> None:
    signer = load("env:QTG_SIGNER_TREASURY", {"QTG_SIGNER_TREASURY": s.key})
    assert (
        repr(signer) == f"LocalSigner(signer_id='env:QTG_SIGNER_TREASURY', address='{s.address}')"
    )
    assert str(signer) == repr(signer)
    assert not hasattr(signer, "__dict__")
    assert not any(name.endswith("key") for name in dir(signer) if not name.startswith("_"))
    assert_free_of([repr(signer), str(signer), repr(SignerSet([signer]))], s.needles())
    for leak in (pickle.dumps, copy.copy, copy.deepcopy):
        with pytest.raises(TypeError) as caught:
            leak(signer)
        assert_free_of([str(caught.value)], s.needles())


def test_a_transaction_the_signer_refuses_names_its_fields_never_the_key(s: Secrets) -> None:
    signer = load("env:QTG_SIGNER_TREASURY", {"QTG_SIGNER_TREASURY": s.key})
    for bad in ({**TX, "to": "not an address"}, {**TX, "nonce": -1}, {"gas": 1}):
        with pytest.raises(SignerError) as caught:
            asyncio.run(signer.sign_transaction(bad))
        assert_secret_free_error(caught.value, s, "env:QTG_SIGNER_TREASURY", "refused to sign")
        signed_repr = repr(asyncio.run(signer.sign_transaction(TX)))
        assert "raw" not in signed_repr and s.key_hex not in signed_repr


def test_a_signer_set_refuses_a_key_of_another_account(s: Secrets) -> None:
    other = Account.create()
    signers = SignerSet.load(
        ["env:QTG_SIGNER_A", "env:QTG_SIGNER_B", "env:QTG_SIGNER_A"],
        {"QTG_SIGNER_A": s.key, "QTG_SIGNER_B": "0x" + bytes(other.key).hex()},
    )
    assert len(signers) == 2
    assert signers.for_account(
        s.address.upper().replace("0X", "0x"), "env:QTG_SIGNER_A"
    ).address == (s.address)
    with pytest.raises(SignerError) as caught:
        signers.for_account(other.address, "env:QTG_SIGNER_A")
    assert_secret_free_error(caught.value, s, "env:QTG_SIGNER_A", other.address.lower(), s.address)
    with pytest.raises(SignerError) as missing:
        signers.get("env:QTG_SIGNER_C")
    assert "env:QTG_SIGNER_C" in str(missing.value) and "not loaded" in str(missing.value)


def test_nothing_a_signer_does_logs_the_key_or_the_password(
    s: Secrets, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG)
    env = s.env(QTG_KEYSTORE_PASSWORD=s.password, QTG_SIGNER_TREASURY=s.key)
    signer = load("keystore:treasury", env)
    asyncio.run(signer.sign_transaction(TX))
    SignerSet.load(["env:QTG_SIGNER_TREASURY", "keystore:cold"], env)
    with pytest.raises(SignerError):
        load("keystore:treasury", s.env(QTG_KEYSTORE_PASSWORD="wrong"))
    out, err = capfd.readouterr()
    assert_free_of([caplog.text, out, err], s.needles())


def test_local_signer_refuses_a_key_out_of_range(s: Secrets) -> None:
    for bad in (b"\0" * 32, SECP256K1_N.to_bytes(32, "big"), b"\1" * 31):
        with pytest.raises(SignerError) as caught:
            LocalSigner("env:QTG_SIGNER_X", bad)
        assert_secret_free_error(caught.value, s, "env:QTG_SIGNER_X")


def _damage_ciphertext(path: Path) -> None:
    keystore = json.loads(path.read_text())
    text = keystore["crypto"]["ciphertext"]
    keystore["crypto"]["ciphertext"] = ("1" if text[0] != "1" else "2") + text[1:]
    path.write_text(json.dumps(keystore))


def _change_address(path: Path) -> None:
    keystore = json.loads(path.read_text())
    keystore["address"] = "22" * 20
    path.write_text(json.dumps(keystore))


# --- the local chains ----------------------------------------------------------------------


def _dump_database(dsn: str) -> str:
    """Every row of every table of every schema but the system's, as text."""
    rows: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_type = 'BASE TABLE' "
            "AND table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
        assert len(tables) > 20
        for schema, table in tables:
            query = sql.SQL("SELECT t::text FROM {}.{} t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            rows.extend(str(r[0]) for r in conn.execute(query))
    return "\n".join(rows)


def _keys_of(keystore_dir: Path) -> dict[str, tuple[str, str]]:
    """The local keystore decrypted, as the test's own view: name -> (address, key hex)."""
    password = (keystore_dir / "password").read_text().rstrip("\n")
    keys = {}
    for path in sorted(keystore_dir.glob("*.json")):
        keystore = json.loads(path.read_text())
        keys[path.stem] = (
            str(keystore["address"]).lower().removeprefix("0x"),
            bytes(Account.decrypt(keystore, password)).hex(),
        )
    return keys


@pytest.mark.chain
@pytest.mark.slow
def test_chains_up_shows_no_key_or_password_in_output_files_argv_or_database(
    tmp_path: Path, db: TestDatabase
) -> None:
    anvil_or_skip()
    env = {
        **os.environ,
        "QTG_DATA_DIR": str(tmp_path / "pg18"),
        "QTG_DATABASE_URL": db.dsn,
        "QTG_NETWORK_MODE": "testnet",
        "COLUMNS": "200",
    }
    qtg = str(Path(sys.executable).with_name("qtg"))
    state_dir = tmp_path / "chains"
    light_keystore(state_dir)  # the secrets are the same at any scrypt strength

    def chains(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [qtg, "chains", *args], env=env, capture_output=True, text=True, timeout=120
        )

    up = chains("up", "--port-base", str(free_port_base(4)))
    try:
        assert up.returncode == 0, up.stderr
        keystore_dir = state_dir / "keystore"
        keys = _keys_of(keystore_dir)
        # the treasury's keys, the CCTP double's attesters, the CCIP double's
        # transmitter and the reaper's keeper (and the exchange's two, which
        # light_keystore made for `qtg world up`): every one a secret
        assert sorted(keys) == [
            "ccip-don",
            "ccip-keeper",
            "cctp-attester-1",
            "cctp-attester-2",
            "local-bybit-deposit",
            "local-bybit-hot",
            "local-treasury-1",
            "local-treasury-2",
        ]
        password = (keystore_dir / "password").read_text().rstrip("\n")
        key_hexes = [key for _, key in keys.values()]
        addresses = [keys[name][0] for name in ("local-treasury-1", "local-treasury-2")]

        # what up printed names the addresses and the files, never a key or the password
        assert all(a in up.stdout.lower() for a in addresses)
        assert "QTG_KEYSTORE_PASSWORD_FILE=" in up.stdout
        assert_free_of([up.stdout, up.stderr], [*key_hexes, password])

        # files: the key in clear nowhere, the password in its own file only
        for path in (p for p in state_dir.rglob("*") if p.is_file()):
            text = path.read_bytes().decode("utf-8", errors="replace")
            assert_free_of([text], key_hexes)
            if path != keystore_dir / "password":
                assert_free_of([text], [password])

        # the anvils' argv
        for chain in read_state(state_dir):
            argv = Path(f"/proc/{chain.pid}/cmdline").read_bytes().decode(errors="replace")
            assert "anvil" in argv
            assert_free_of([argv], [*key_hexes, password])

        # every row of every table: the addresses are there (so the search can
        # find what it looks for), the keys and the password are not
        dump = _dump_database(db.dsn).lower()
        assert all(a in dump for a in addresses)
        assert "keystore:local-treasury-1" in dump
        assert_free_of([dump], [*key_hexes, password])
    finally:
        down = chains("down")
    assert down.returncode == 0, down.stderr


@pytest.mark.chain
@pytest.mark.slow
def test_registering_loading_and_signing_log_no_key(
    local_chain_set: LocalChainSet,
    db: TestDatabase,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    keystore_dir = Path(local_chain_set.runner_env()["QTG_KEYSTORE_DIR"])
    keys = _keys_of(keystore_dir)
    password = (keystore_dir / "password").read_text().rstrip("\n")
    needles = [*(key for _, key in keys.values()), password]

    record_chains(db.dsn, "testnet", local_chain_set.chains, local_chain_set.treasury)
    signers = SignerSet.load(
        [k.signer_id for k in local_chain_set.treasury], env=local_chain_set.runner_env()
    )
    chain = local_chain_set.chains[0]
    w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
    signer = signers.get("keystore:local-treasury-1")
    sender = Web3.to_checksum_address(signer.address)
    tx = {
        **TX,
        "chainId": chain.chain_id,
        "nonce": w3.eth.get_transaction_count(sender),
        "maxFeePerGas": 2 * int(w3.eth.get_block("latest")["baseFeePerGas"]) + 10**9,
    }
    signed = asyncio.run(signer.sign_transaction(tx))
    receipt = w3.eth.wait_for_transaction_receipt(
        w3.eth.send_raw_transaction(signed.raw), timeout=chain.block_time * 10, poll_latency=0.1
    )
    assert receipt["status"] == 1

    out, err = capfd.readouterr()
    assert caplog.records  # web3 and httpx logged their requests: the search has text
    assert_free_of([caplog.text, out, err], needles)
    assert_free_of([_dump_database(db.dsn)], needles)
