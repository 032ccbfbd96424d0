"""`qtg registry check` against the local chains, deployed and registered as
`qtg chains up` does it: every fact holds; then one registry row at a time is
made wrong as an admin could type it (another chain id, an address with no
contract, another CCTP domain, a token's decimals or symbol, a CCIP OnRamp,
a destination the Router does not support, a Stargate pool that is not the
one deployed), and the check says which fact fails and exits 1.
The chains are real (anvil, with the protocols' doubles deployed); the
registry rows are changed with SQL, as a typo would have them. A chain
without Multicall3 is a note, not a mismatch: the runner reads it one call at
a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from chain_support import LocalChainSet
from conftest import TestDatabase
from evm_support import register_world, superuser
from typer.testing import CliRunner

from qtg_cli import app
from qtg_runner.chains.evm_rpc import MULTICALL3
from qtg_world.chains.local import place_multicall3, rpc

pytestmark = pytest.mark.slow

NOT_A_CONTRACT = "0x" + "5e" * 20


@pytest.fixture
def registered(db: TestDatabase, local_chain_set: LocalChainSet) -> psycopg.Connection[Any]:
    conn = superuser(db)
    register_world(conn, local_chain_set)
    return conn


def check(
    db: TestDatabase, chain_set: LocalChainSet, *args: str, env: dict[str, str] | None = None
) -> tuple[int, list[str]]:
    environment = {
        "QTG_DATABASE_URL": db.dsn,
        "QTG_NETWORK_MODE": "testnet",
        "COLUMNS": "200",
        **chain_set.runner_env(),
        **(env or {}),
    }
    result = CliRunner().invoke(app, ["registry", "check", *args], env=environment)
    return result.exit_code, result.output.splitlines()


def mismatches(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("MISMATCH")]


def test_a_registry_as_deployed_holds_fact_by_fact(
    db: TestDatabase, local_chain_set: LocalChainSet, registered: psycopg.Connection[Any]
) -> None:
    code, lines = check(db, local_chain_set)
    assert code == 0, "\n".join(lines)
    assert mismatches(lines) == []
    facts = [line for line in lines if line.startswith("ok")]
    for chain in local_chain_set.chains:
        said = [line for line in facts if f"  {chain.key}  " in line]
        assert any("chain id" in line and str(chain.chain_id) in line for line in said)
        assert any("USDC decimals()" in line for line in said)
        assert any("USDC symbol()" in line for line in said)
        assert any("CCTP domain" in line for line in said)
        assert any("(cctp TokenMessengerV2)" in line for line in said)
        assert any("CCIP Router getOnRamp" in line for line in said)
        assert any("Stargate pool token()" in line for line in said)
        assert any(f"code at {MULTICALL3} (Multicall3" in line for line in said)
    assert lines[-1] == f"{len(facts)} of {len(facts)} facts hold"


@pytest.mark.parametrize(
    ("change", "fact"),
    [
        ("UPDATE chains SET chain_id = chain_id + 1000 WHERE chain_key = %(chain)s", "chain id"),
        (
            "UPDATE chain_protocols SET contracts = jsonb_set(contracts, '{TokenMessengerV2}',"
            f" '\"{NOT_A_CONTRACT}\"') WHERE chain_key = %(chain)s AND protocol = 'cctp'",
            f"code at {NOT_A_CONTRACT} (cctp TokenMessengerV2)",
        ),
        (
            "UPDATE chain_protocols SET remote_id = remote_id + 7"
            " WHERE chain_key = %(chain)s AND protocol = 'cctp'",
            "CCTP domain: MessageTransmitterV2 localDomain()",
        ),
        (
            "UPDATE chain_tokens SET decimals = 18 WHERE chain_key = %(chain)s AND symbol = 'USDC'",
            "USDC decimals()",
        ),
        (
            "UPDATE chain_tokens SET symbol = 'USDT'"
            " WHERE chain_key = %(chain)s AND symbol = 'USDC'",
            "USDT symbol()",
        ),
        (
            "UPDATE ccip_lanes SET onramp = offramp WHERE source_chain_key = %(chain)s",
            "CCIP Router getOnRamp(",
        ),
        (
            "UPDATE chain_protocols SET remote_id = remote_id + 1"
            " WHERE chain_key <> %(chain)s AND protocol = 'ccip'",
            "CCIP Router isChainSupported(",
        ),
        (
            "UPDATE chain_protocols SET contracts = jsonb_set(contracts, '{StargatePool}',"
            " to_jsonb((SELECT contracts ->> 'CcipRouter' FROM chain_protocols"
            "           WHERE chain_key = %(chain)s AND protocol = 'ccip'))"
            ") WHERE chain_key = %(chain)s AND protocol = 'stargate'",
            "Stargate pool token()",
        ),
    ],
    ids=[
        "chain-id",
        "missing-contract",
        "cctp-domain",
        "decimals",
        "symbol",
        "ccip-onramp",
        "ccip-destination",
        "stargate-pool",
    ],
)
def test_a_wrong_registry_row_is_named_and_fails_the_check(
    db: TestDatabase,
    local_chain_set: LocalChainSet,
    registered: psycopg.Connection[Any],
    change: str,
    fact: str,
) -> None:
    chain = local_chain_set.chains[0].key
    registered.execute(change, {"chain": chain})
    code, lines = check(db, local_chain_set)
    assert code == 1, "\n".join(lines)
    wrong = mismatches(lines)
    assert len(wrong) >= 1
    assert all(f"  {chain}  " in line for line in wrong)
    assert any(fact in line for line in wrong), "\n".join(wrong)
    assert "do not" in lines[-1]


def test_an_unset_rpc_variable_and_an_unknown_chain_are_said_plainly(
    db: TestDatabase, local_chain_set: LocalChainSet, registered: psycopg.Connection[Any]
) -> None:
    first = local_chain_set.chains[0]
    variable = registered.execute(
        "SELECT rpc_url_env FROM chains WHERE chain_key = %s", (first.key,)
    ).fetchone()
    assert variable is not None
    code, lines = check(db, local_chain_set, "--chain", first.key, env={variable[0]: ""})
    assert code == 1
    assert mismatches(lines) == [
        line for line in lines if f"RPC URL in {variable[0]}" in line and "not set" in line
    ]
    assert len(mismatches(lines)) == 1

    code, lines = check(db, local_chain_set, "--chain", "no-such-chain")
    assert code == 2


def test_a_chain_without_multicall3_is_a_note_not_a_mismatch(
    db: TestDatabase, local_chain_set: LocalChainSet, registered: psycopg.Connection[Any]
) -> None:
    first = local_chain_set.chains[0]
    rpc(first.rpc_url, "anvil_setCode", [MULTICALL3, "0x"])
    try:
        code, lines = check(db, local_chain_set, "--chain", first.key)
    finally:
        place_multicall3(first)
    assert code == 0, "\n".join(lines)
    assert mismatches(lines) == []
    [note] = [line for line in lines if line.startswith("NOTE")]
    assert f"code at {MULTICALL3} (Multicall3" in note and "one call at a time" in note
    assert lines[-1].endswith(", 1 noted")


def test_a_book_of_the_deployed_chains_loads_and_holds_and_a_typo_is_only_proposed(
    db: TestDatabase, local_chain_set: LocalChainSet, tmp_path: Path
) -> None:
    """The admin's path on a real network, on the local chains: a book that
    describes them as deployed (`book_of`), `qtg registry load testnet
    --book FILE` into an empty registry, then `qtg registry check`: every
    fact holds. Loaded again with a chain id mistyped, the load is refused
    whole (QT002: another chain under a registered key); with a finality
    depth changed, the change is only proposed (the registry keeps 2 until
    a second login approves); with two chains of one id, the book itself is
    refused. The check holds throughout."""
    from qtg_world.chains.registry import book_of

    book = tmp_path / "local.toml"
    book.write_text(book_of(local_chain_set.chains), encoding="utf-8")
    code, lines = load_book_file(db, book)
    assert code == 0, "\n".join(lines)
    assert not any(line.startswith(("proposed", "skipped")) for line in lines), lines
    code, lines = check(db, local_chain_set)
    assert code == 0, "\n".join(lines)
    facts = [line for line in lines if line.startswith("ok")]
    for chain in local_chain_set.chains:
        said = [line for line in facts if f"  {chain.key}  " in line]
        for fact in ("chain id", "USDC symbol()", "CCTP domain", "CCIP Router isChainSupported",
                     "Stargate pool token()"):  # fmt: skip
            assert any(fact in line for line in said), (chain.key, fact, lines)

    chain = local_chain_set.chains[0]
    deployed = book.read_text()
    book.write_text(deployed.replace(f"chain_id = {chain.chain_id}", "chain_id = 31999"))
    code, lines = load_book_file(db, book)  # another chain under a registered key
    assert code == 2 and "QT002" in "\n".join(lines), "\n".join(lines)
    book.write_text(deployed.replace("finality_depth = 2", "finality_depth = 5", 1))
    code, lines = load_book_file(db, book)  # a policy changed: for a second login
    assert code == 0, "\n".join(lines)
    assert any(line.startswith("proposed") and chain.key in line for line in lines), lines
    code, lines = check(db, local_chain_set)
    assert code == 0 and mismatches(lines) == [], "\n".join(lines)
    assert world_depth(db, chain.key) == 2

    twice = f"chain_id = {local_chain_set.chains[1].chain_id}"
    book.write_text(deployed.replace(f"chain_id = {chain.chain_id}", twice))
    code, lines = load_book_file(db, book)  # the book itself is refused
    assert code == 2 and "given twice" in "\n".join(lines), "\n".join(lines)


def world_depth(db: TestDatabase, chain_key: str) -> int:
    with psycopg.connect(db.dsn) as conn:
        conn.execute("SET search_path = testnet, qtg")
        row = conn.execute(
            "SELECT finality_depth FROM chains WHERE chain_key = %s", (chain_key,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def load_book_file(db: TestDatabase, book: Path) -> tuple[int, list[str]]:
    environment = {"QTG_DATABASE_URL": db.dsn, "COLUMNS": "200"}
    result = CliRunner().invoke(
        app, ["registry", "load", "testnet", "--book", str(book)], env=environment
    )
    return result.exit_code, result.output.splitlines()
