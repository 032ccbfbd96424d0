"""`qtg registry load testnet`: the address book into the testnet network's
chain registry, as the admin; a change to an entry the registry has is a
proposal that only another login's approval applies.

What the book leaves out (the finality depth and block time no public source
gave) is stated on the command line, as an admin would; the values here are
the test's, not facts about the chains."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind
from rows import person
from typer.testing import CliRunner

from qtg_cli import app
from qtg_runner.db import procs
from qtg_runner.networks import AddressBook, load_book

BOOK = load_book("testnet")


def stated(book: AddressBook) -> list[str]:
    """The flags that state what ``book`` leaves out (the test's values)."""
    return [
        arg
        for chain in book.chains
        for arg in (
            *(
                ["--finality-depth", f"{chain.chain_key}=64"]
                if chain.finality_depth is None
                else []
            ),
            *(["--block-time", f"{chain.chain_key}=2000"] if chain.block_time_ms is None else []),
        )
    ]


STATED = stated(BOOK)


def load(db: TestDatabase, *args: str) -> tuple[int, list[str]]:
    environment = {"QTG_DATABASE_URL": db.dsn, "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["registry", "load", *args], env=environment)
    return result.exit_code, result.output.splitlines()


def actions(lines: list[str]) -> dict[str, str]:
    """subject -> what the load did with it."""
    return {
        line.split()[1]: line.split()[0]
        for line in lines
        if line.split() and line.split()[0] in ("created", "unchanged", "proposed", "skipped")
    }


def registry(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    return {
        table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
        for table in ("chains", "chain_tokens", "chain_protocols", "ccip_lanes", "exchange_venues")
    }


@pytest.fixture
def admin(db: TestDatabase) -> psycopg.Connection[Any]:
    return bind(db.connect())


def test_the_book_is_loaded_whole_and_loading_again_changes_nothing(
    db: TestDatabase, admin: psycopg.Connection[Any]
) -> None:
    code, lines = load(db, "testnet", *STATED)
    assert code == 0, "\n".join(lines)
    done = actions(lines)
    for chain in BOOK.chains:
        assert done[f"chain/{chain.chain_key}"] == "created"
        assert done[f"token/{chain.chain_key}/USDC"] == "created"
        assert done[f"protocol/{chain.chain_key}/cctp"] == "created"
    # the testnet pools move Stargate's own token, not Circle's USDC
    assert {s for s, a in done.items() if a == "skipped"} == {
        f"protocol/{c.chain_key}/stargate" for c in BOOK.chains if "stargate" in c.protocols
    }
    rows = admin.execute(
        "SELECT chain_key, chain_id, rpc_url_env FROM chains ORDER BY chain_id"
    ).fetchall()
    assert rows == sorted(
        ((c.chain_key, c.chain_id, c.rpc_url_env) for c in BOOK.chains), key=lambda r: r[1]
    )
    sepolia = BOOK.chain("ethereum-sepolia")
    cctp = sepolia.protocols["cctp"]
    assert admin.execute(
        "SELECT remote_id, contracts FROM chain_protocols"
        " WHERE chain_key = 'ethereum-sepolia' AND protocol = 'cctp'"
    ).fetchone() == (cctp.remote_id, {k: v.lower() for k, v in cctp.contracts.items()})
    assert admin.execute("SELECT count(*) FROM ccip_lanes").fetchone() == (len(BOOK.ccip_lanes),)

    before = registry(admin)
    audited = admin.execute("SELECT count(*) FROM audit_outbox").fetchone()
    code, lines = load(db, "testnet", *STATED)
    assert code == 0
    assert set(actions(lines).values()) == {"unchanged", "skipped"}
    assert registry(admin) == before
    assert admin.execute("SELECT count(*) FROM audit_outbox").fetchone() == audited
    assert admin.execute("SELECT count(*) FROM config_proposals").fetchone() == (0,)


def test_the_mainnet_book_goes_into_the_mainnet_network_with_its_stargate_pools(
    db: TestDatabase,
) -> None:
    """Mainnet's Stargate pools move Circle's USDC, so they are recorded; the
    mainnet book goes into the mainnet network and leaves testnet's alone."""
    book = load_book("mainnet")
    code, lines = load(db, "mainnet", *stated(book))
    assert code == 0, "\n".join(lines)
    done = actions(lines)
    assert set(done.values()) == {"created"}
    pools = [c.chain_key for c in book.chains if "stargate" in c.protocols]
    assert pools
    mainnet = bind(db.connect(), "mainnet")
    recorded = mainnet.execute(
        "SELECT chain_key, contracts ->> 'StargatePool' FROM chain_protocols"
        " WHERE protocol = 'stargate' ORDER BY 1"
    ).fetchall()
    assert recorded == sorted(
        (key, book.chain(key).protocols["stargate"].contracts["StargatePool"].lower())
        for key in pools
    )
    assert mainnet.execute("SELECT count(*) FROM ccip_lanes").fetchone() == (len(book.ccip_lanes),)
    testnet = bind(db.connect())
    assert testnet.execute("SELECT count(*) FROM chains").fetchone() == (0,)


def test_a_changed_entry_is_proposed_and_applied_only_by_another_login(
    db: TestDatabase, admin: psycopg.Connection[Any]
) -> None:
    assert load(db, "testnet", *STATED)[0] == 0
    # the registry drifted from the book: a USDC address typed wrong
    typo = "0x" + "ab" * 20
    admin.execute(
        "UPDATE chain_tokens SET address = %s WHERE chain_key = 'base-sepolia' AND symbol = 'USDC'",
        (typo,),
    )
    code, lines = load(db, "testnet", *STATED)
    assert code == 0, "\n".join(lines)
    assert actions(lines)["token/base-sepolia/USDC"] == "proposed"
    assert [a for a in actions(lines).values() if a == "proposed"] == ["proposed"]
    usdc = "SELECT address FROM chain_tokens WHERE chain_key = 'base-sepolia' AND symbol = 'USDC'"
    assert admin.execute(usdc).fetchone() == (typo,)  # proposed, not applied
    (proposal_id,) = admin.execute(
        "SELECT id FROM config_proposals WHERE kind = 'registry' AND proposal_state = 'PROPOSED'"
    ).fetchone() or (None,)
    assert proposal_id is not None

    # loading again proposes nothing new: the same login's same change is open
    code, lines = load(db, "testnet", *STATED)
    assert admin.execute("SELECT count(*) FROM config_proposals").fetchone() == (1,)

    # the proposer cannot approve it (QT022, nothing applied)
    with pytest.raises(procs.Refused, match="QT022"):
        procs.approve_proposal(proposal_id).one(admin)
    assert admin.execute(usdc).fetchone() == (typo,)
    # a second login, an operator's, applies it
    operator = person(db, "olga")
    assert procs.approve_proposal(proposal_id).one(operator) == procs.ProposalState.APPLIED
    book_usdc = BOOK.chain("base-sepolia").token("USDC")
    assert book_usdc is not None
    assert admin.execute(usdc).fetchone() == (book_usdc.address.lower(),)
    code, lines = load(db, "testnet", *STATED)
    assert set(actions(lines).values()) == {"unchanged", "skipped"}


def test_what_the_book_leaves_out_must_be_stated_or_the_chain_waits(
    db: TestDatabase, admin: psycopg.Connection[Any]
) -> None:
    code, lines = load(db, "testnet")
    assert code == 0
    done = actions(lines)
    waiting = [
        c.chain_key for c in BOOK.chains if c.finality_depth is None or c.block_time_ms is None
    ]
    assert waiting, "the testnet book states every chain's finality and block time"
    for key in waiting:
        assert done[f"chain/{key}"] == "skipped"
        assert f"token/{key}/USDC" not in done  # it waits with its chain
        assert admin.execute("SELECT 1 FROM chains WHERE chain_key = %s", (key,)).fetchone() is None
    assert any("--finality-depth" in line or "--block-time" in line for line in lines)


@pytest.mark.parametrize(
    "args",
    [
        ["devnet"],
        ["testnet", "--finality-depth", "no-such-chain=3"],
        ["testnet", "--block-time", "x"],
    ],
    ids=["class", "chain", "value"],
)
def test_a_bad_command_line_is_refused_and_writes_nothing(
    db: TestDatabase, admin: psycopg.Connection[Any], args: list[str]
) -> None:
    code, _ = load(db, *args)
    assert code == 2
    assert admin.execute("SELECT count(*) FROM chains").fetchone() == (0,)


@pytest.mark.parametrize("role", ["qtg_testnet_operator", "qtg_testnet_runner"])
def test_no_operator_or_runner_login_changes_the_registry_or_proposes_a_change(
    db: TestDatabase, admin: psycopg.Connection[Any], role: str
) -> None:
    """Where money is sent is the admin's to propose and another login's to
    approve: an operator's or a runner's own login that proposes a registry
    change, applies one, or calls an upsert is refused, and nothing changes."""
    assert load(db, "testnet", *STATED)[0] == 0
    mallory = person(db, "mallory", role)
    attacker = "0x" + "66" * 20
    change = '{"address": "' + attacker + '"}'
    for query, params in (
        (
            "SELECT * FROM propose_registry_change(%s, %s::jsonb)",
            ("token/ethereum-sepolia/USDC", change),
        ),
        ("SELECT apply_registry_entry(%s, %s::jsonb)", ("token/ethereum-sepolia/USDC", change)),
        ("SELECT upsert_chain_token('ethereum-sepolia', 'USDC', %s, 6)", (attacker,)),
    ):
        assert_rejected(mallory, "42501", query, params, watcher=admin)
    assert admin.execute("SELECT count(*) FROM config_proposals").fetchone() == (0,)
