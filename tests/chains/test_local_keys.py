"""The local chains' treasury keystore (qtg_world.chains.keys), without a chain:
made private (directory 0700, files 0600), reused as it is, and loadable by a
runner from exactly the environment `runner_env` gives."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from chain_support import TEST_KDF_ITERATIONS

from qtg_runner.chains.errors import ChainError
from qtg_runner.signers import SignerSet
from qtg_world.chains.cctp import ensure_attester_keys, load_attesters
from qtg_world.chains.keys import TREASURY_KEYS, ensure_treasury_keys
from qtg_world.chains.local import runner_env


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_keystore_is_private_reused_and_loadable_from_runner_env(tmp_path: Path) -> None:
    keys = ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    assert [k.signer_id for k in keys] == [
        "keystore:local-treasury-1",
        "keystore:local-treasury-2",
    ]
    assert len({k.address for k in keys}) == 2
    keystore = tmp_path / "keystore"
    assert _mode(keystore) == 0o700
    files = sorted(keystore.iterdir())
    assert [f.name for f in files] == [*(f"{n}.json" for n in TREASURY_KEYS), "password"]
    assert all(_mode(f) == 0o600 for f in files)
    saved = {f: f.read_bytes() for f in files}

    assert ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS) == keys
    assert {f: f.read_bytes() for f in files} == saved

    env = runner_env(tmp_path)  # no chain runs: the keystore's variables only
    assert env == {
        "QTG_KEYSTORE_DIR": str(keystore.resolve()),
        "QTG_KEYSTORE_PASSWORD_FILE": str((keystore / "password").resolve()),
    }
    signers = SignerSet.load([k.signer_id for k in keys], env)
    assert [signers.for_account(k.address, k.signer_id).address for k in keys] == [
        k.address for k in keys
    ]


def test_a_password_file_opened_to_others_is_refused(tmp_path: Path) -> None:
    ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    (tmp_path / "keystore" / "password").chmod(0o644)
    with pytest.raises(ChainError, match=r"open to others \(mode 0644\)"):
        ensure_treasury_keys(tmp_path)


def test_a_removed_key_is_replaced_by_a_new_account(tmp_path: Path) -> None:
    first = ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    (tmp_path / "keystore" / "local-treasury-2.json").unlink()
    again = ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    assert again[0] == first[0] and again[1].address != first[1].address


def test_a_keystore_that_lost_its_password_is_refused_not_given_a_new_one(
    tmp_path: Path,
) -> None:
    keys = ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    keystore = tmp_path / "keystore"
    (keystore / "password").rename(tmp_path / "kept-password")
    saved = {f: f.read_bytes() for f in keystore.iterdir()}
    # every key there: nothing to encrypt, so no password is needed
    assert ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS) == keys
    # a key to make: refused, since a new password would open none of the others
    (keystore / "local-treasury-2.json").unlink()
    with pytest.raises(ChainError, match=r"holds local-treasury-1\.json but not its password"):
        ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    assert not (keystore / "password").exists()
    assert {f: f.read_bytes() for f in keystore.iterdir()} == {
        f: b for f, b in saved.items() if f.name != "local-treasury-2.json"
    }
    # the password restored: the missing account is made again, and both open
    (tmp_path / "kept-password").rename(keystore / "password")
    again = ensure_treasury_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    assert again[0] == keys[0] and again[1] != keys[1]
    env = runner_env(tmp_path)
    assert [s.address for s in SignerSet.load([k.signer_id for k in again], env)] == [
        k.address for k in again
    ]


def test_the_attesters_without_their_password_file_are_refused_naming_it(
    tmp_path: Path,
) -> None:
    ensure_attester_keys(tmp_path, kdf_iterations=TEST_KDF_ITERATIONS)
    assert len(load_attesters(tmp_path)) == 2
    password = tmp_path / "keystore" / "password"
    password.rename(tmp_path / "kept-password")
    with pytest.raises(ChainError, match=rf"no password file {password} for the local keystore"):
        load_attesters(tmp_path)
