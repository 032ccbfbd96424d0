"""The exchange venue registry's admin steps: upsert_exchange_venue (the venue,
its kind, the NAMES of the variables of its URL and key file, a request salt of
this database), upsert_venue_chain (the venue's name for one of our chains),
upsert_venue_deposit_address (its deposit address per chain and coin, which
allow-lists it on the chain); each audited when it changes, the same again
changes nothing, refusals change nothing. And the routes the Bybit executors
read: bybit_withdraw_route (QT032 for a recipient neither in the treasury nor
allow-listed) and bybit_deposit_route."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from engine import (
    assert_rejected,
    bind,
    create_started,
    fingerprint,
    node,
    node_ids,
    pin_clock,
    plan,
)
from eth_abi.abi import encode as abi_encode
from evm_rows import approve_calldata, call
from rows import Conn
from test_upsert_chain import REGISTRY, chain_audit

from qtg_runner.chains.cctp_client import DEPOSIT_FOR_BURN
from qtg_runner.db import procs
from qtg_runner.exchanges.bybit import request_id_for
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor

TABLES = (*REGISTRY, "exchange_venues", "venue_chains", "venue_deposit_addresses")
DEPOSIT = "0x" + "De" * 20
TREASURY = "0x" + "7a" * 20
TOKEN = "0x" + "0c" * 20
BRIDGE = "0x" + "b1" * 20
THIEF = "0x" + "7e" * 20


def deposit_payload(route: Any, tx_hash: str) -> dict[str, Any]:
    """What an honest bybit_deposit step records for its route: the transfer
    of 100 USDC (tx_hash) its parent "pay" made into the deposit address."""
    return {
        "venue_key": route.venue_key, "kind": route.kind, "base_url_env": route.base_url_env,
        "key_file_env": route.key_file_env, "chain_key": route.chain_key,
        "venue_chain": route.venue_chain, "coin": route.coin,
        "deposit_address": route.deposit_address, "amount": route.amount,
        "tx_hash": tx_hash, "parent": "pay", "transfer_value": "100000000",
        "since_ms": route.since_ms,
    }  # fmt: skip


@pytest.fixture
def venue(conn: Conn) -> str:
    procs.upsert_chain("local-a", 31337, "QTG_RPC_LOCAL_A", 2, 1000).one(conn)
    procs.upsert_chain("local-b", 31338, "QTG_RPC_LOCAL_B", 2, 1000).one(conn)
    procs.upsert_chain_token("local-a", "USDC", TOKEN, 6).one(conn)
    procs.upsert_treasury_account("local-a", TREASURY, "env:TREASURY").one(conn)
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain("bybit", "local-a", "ETH").one(conn)
    return "bybit"


def test_a_venue_its_chain_names_and_deposit_addresses_are_recorded_and_audited(
    conn: Conn, venue: str
) -> None:
    procs.upsert_venue_deposit_address(venue, "local-a", "USDC", DEPOSIT).one(conn)
    # the same again changes nothing
    procs.upsert_exchange_venue(venue, "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE").one(conn)
    procs.upsert_venue_chain(venue, "local-a", "ETH").one(conn)
    procs.upsert_venue_deposit_address(venue, "local-a", "USDC", "0x" + DEPOSIT[2:].upper()).one(
        conn
    )
    row = conn.execute(
        "SELECT kind, base_url_env, key_file_env, length(request_salt) FROM exchange_venues"
    ).fetchone()
    assert row == ("bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE", 32)
    assert conn.execute("SELECT * FROM venue_deposit_addresses").fetchone()[:4] == (
        venue, "local-a", "USDC", DEPOSIT.lower(),
    )  # fmt: skip
    # the deposit address is an allowed destination of its chain
    assert conn.execute(
        "SELECT label FROM allowed_destinations WHERE chain_key = 'local-a' AND address = %s",
        (DEPOSIT.lower(),),
    ).fetchone() == ("deposit bybit USDC",)
    assert [a for a, _ in chain_audit(conn, venue)] == ["venue_set"]
    actions = [a for a, _ in chain_audit(conn, "local-a")]
    assert actions.count("venue_chain_set") == 1
    assert actions.count("venue_deposit_address_set") == 1
    assert actions.count("destination_allowed") == 1
    # a new name is a change, audited with the previous one
    procs.upsert_venue_chain(venue, "local-a", "ETH2").one(conn)
    assert chain_audit(conn, "local-a")[-1][1]["previous_venue_chain"] == "ETH"


URL_ENV = "QTG_BYBIT_URL"
KEY_ENV = "QTG_BYBIT_KEY_FILE"


@pytest.mark.parametrize(
    ("query", "args", "code"),
    [
        (
            "SELECT upsert_exchange_venue(%s, %s, %s, %s)",
            ("By bit", "bybit", URL_ENV, KEY_ENV),
            "QT002",
        ),
        ("SELECT upsert_exchange_venue(%s, %s, %s, %s)", ("okx", "okx", URL_ENV, KEY_ENV), "QT002"),
        (
            "SELECT upsert_exchange_venue(%s, %s, %s, %s)",
            ("x", "bybit", "https://api.bybit.com", KEY_ENV),
            "QT002",
        ),
        ("SELECT upsert_exchange_venue(%s, %s, %s, %s)", ("x", "bybit", URL_ENV, None), "QT002"),
        ("SELECT upsert_venue_chain(%s, %s, %s)", ("nope", "local-a", "ETH"), "QT014"),
        ("SELECT upsert_venue_chain(%s, %s, %s)", ("bybit", "nowhere", "ETH"), "QT014"),
        ("SELECT upsert_venue_chain(%s, %s, %s)", ("bybit", "local-b", "E T H"), "QT002"),
        # the venue already calls local-a ETH
        ("SELECT upsert_venue_chain(%s, %s, %s)", ("bybit", "local-b", "ETH"), "QT002"),
        (
            "SELECT upsert_venue_deposit_address(%s, %s, %s, %s)",
            ("bybit", "local-b", "USDC", DEPOSIT),
            "QT014",
        ),
        (
            "SELECT upsert_venue_deposit_address(%s, %s, %s, %s)",
            ("bybit", "local-a", "US DC", DEPOSIT),
            "QT002",
        ),
        (
            "SELECT upsert_venue_deposit_address(%s, %s, %s, %s)",
            ("bybit", "local-a", "USDC", "0x12"),
            "QT002",
        ),
    ],
)
def test_a_bad_registration_is_refused_and_changes_nothing(
    conn: Conn, venue: str, query: str, args: tuple[object, ...], code: str
) -> None:
    err = assert_rejected(conn, code, query, args, tables=TABLES)
    assert err.diag.message_hint
    assert "https://" not in str(err)  # a URL given where its variable's name belongs is not echoed


def withdrawal(conn: Conn, to: str, amount: str = "12.5", **config: str) -> int:
    procs.register_executor(
        BybitWithdrawExecutor.key, True, BybitWithdrawExecutor.node_config_schema, "w"
    ).one(conn)
    cfg = {"venue": "bybit", "coin": "USDC", "chain": "local-a", "to": to} | config
    movement = create_started(
        conn,
        plan(node("out", executor="bybit_withdraw", **cfg)),
        f"w-{to}-{amount}-{sorted(config.items())}",
        amount=amount,
    )
    return node_ids(conn, movement)["out"]


def test_the_withdraw_route_names_the_venue_the_chain_and_an_allowed_recipient(
    conn: Conn, venue: str
) -> None:
    node_id = withdrawal(conn, TREASURY, "12.500000")
    route = procs.bybit_withdraw_route(node_id).one(conn)
    assert (route.venue_key, route.kind, route.base_url_env, route.key_file_env) == (
        venue, "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY_FILE",
    )  # fmt: skip
    assert (route.chain_key, route.venue_chain, route.coin, route.token_address) == (
        "local-a", "ETH", "USDC", TOKEN,
    )  # fmt: skip
    assert (route.recipient, route.recipient_kind) == (TREASURY, "treasury")
    assert (route.amount, route.amount_units) == ("12.5", Decimal(12_500_000))

    outsider = "0x" + "5e" * 20
    refused = withdrawal(conn, outsider)
    err = assert_rejected(conn, "QT032", "SELECT * FROM bybit_withdraw_route(%s)", (refused,))
    assert "allow_destination" in (err.diag.message_hint or "")
    procs.allow_destination("local-a", outsider, "a counterparty").one(conn)
    assert procs.bybit_withdraw_route(refused).one(conn).recipient_kind == "allowed"

    for config, code in (({"chain": "local-b"}, "QT014"), ({"venue": "okx"}, "QT014"),
                         ({"coin": "EURC"}, "QT014")):  # fmt: skip
        other = withdrawal(conn, TREASURY, "1", **config)
        assert_rejected(conn, code, "SELECT * FROM bybit_withdraw_route(%s)", (other,))
    # finer than the token's decimals
    procs.upsert_chain_token("local-a", "CENTS", "0x" + "0d" * 20, 2).one(conn)
    finer = withdrawal(conn, TREASURY, "1.005", coin="CENTS")
    assert_rejected(conn, "QT002", "SELECT * FROM bybit_withdraw_route(%s)", (finer,))


def test_a_withdrawal_node_signs_no_transaction(db: Any, conn: Conn, venue: str) -> None:
    """An exchange step signs nothing on a chain. A runner login that claims
    an approved withdrawal and records, beside its honest payload, a
    depositForBurn to a thief from the treasury account (signed with a key of
    its own, so the honest nonce reaper would sign the same call again with
    the treasury's key) is refused (QT032) and nothing changes; the honest
    record is taken."""
    procs.upsert_chain_protocol("local-a", "cctp", 0, {"TokenMessengerV2": BRIDGE}).one(conn)
    node_id = withdrawal(conn, TREASURY, "1")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    [claimed] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
    route = procs.bybit_withdraw_route(node_id).one(runner)
    request_id = request_id_for(f"{route.request_salt}:{claimed.idempotency_key}")
    honest = {
        "venue_key": route.venue_key, "kind": route.kind, "base_url_env": route.base_url_env,
        "key_file_env": route.key_file_env, "chain_key": route.chain_key,
        "venue_chain": route.venue_chain, "rpc_url_env": route.rpc_url_env,
        "finality_depth": route.finality_depth, "coin": route.coin,
        "token_address": route.token_address, "recipient": route.recipient,
        "amount": route.amount, "amount_units": str(int(route.amount_units)),
        "request_id": request_id,
    }  # fmt: skip
    burn = DEPOSIT_FOR_BURN + abi_encode(
        ["uint256", "uint32", "bytes32", "address", "bytes32", "uint256", "uint32"],
        [10**6, 6, bytes(12) + bytes.fromhex(THIEF[2:]), TOKEN, bytes(32), 0, 2000],
    )
    for to, data in ((BRIDGE, burn), (TOKEN, approve_calldata(BRIDGE, 10**6))):
        tx_hash, raw_tx = call(31337, 0, to, data)
        before = fingerprint(conn)
        with pytest.raises(psycopg.Error) as refused:
            runner.execute(
                "SELECT record_intent_prepared(%s, %s, p_nonce => 0, p_signed_tx_hash => %s,"
                " p_external_request_id => %s, p_payload => %s::jsonb, p_chain_key => 'local-a',"
                " p_sender => %s, p_raw_tx => %s)",
                (node_id, claimed.claim_secret, tx_hash, request_id, json.dumps(honest),
                 TREASURY, raw_tx),
            )  # fmt: skip
        assert refused.value.sqlstate == "QT032"
        assert "signs no transaction" in str(refused.value)
        assert fingerprint(conn) == before
    runner.execute(
        "SELECT record_intent_prepared(%s, %s, p_external_request_id => %s,"
        " p_payload => %s::jsonb)",
        (node_id, claimed.claim_secret, request_id, json.dumps(honest)),
    )


def test_the_deposit_route_names_the_deposit_address(conn: Conn, venue: str) -> None:
    procs.register_executor(
        BybitDepositExecutor.key, False, BybitDepositExecutor.node_config_schema, "d"
    ).one(conn)
    movement = create_started(
        conn, plan(node("in", executor="bybit_deposit", venue=venue, chain="local-a")), "dep"
    )
    node_id = node_ids(conn, movement)["in"]
    assert_rejected(conn, "QT014", "SELECT * FROM bybit_deposit_route(%s)", (node_id,))
    procs.upsert_venue_deposit_address(venue, "local-a", "USDC", DEPOSIT).one(conn)
    route = procs.bybit_deposit_route(node_id).one(conn)
    assert (route.venue_chain, route.coin, route.deposit_address, route.amount) == (
        "ETH", "USDC", DEPOSIT.lower(), "100",
    )  # fmt: skip


def paying_in(conn: Conn, venue: str, external_id: str) -> dict[str, int]:
    """A started movement that pays into the venue ("pay", a sim step) and
    waits for the deposit ("in", bybit_deposit): its nodes' ids."""
    procs.register_executor(
        BybitDepositExecutor.key, False, BybitDepositExecutor.node_config_schema, "d"
    ).one(conn)
    procs.upsert_venue_deposit_address(venue, "local-a", "USDC", DEPOSIT).one(conn)
    the_plan = plan(
        node("pay"), node("in", ["pay"], executor="bybit_deposit", venue=venue, chain="local-a")
    )
    return node_ids(conn, create_started(conn, the_plan, external_id))


def test_the_deposit_route_reads_from_a_day_before_its_parent_sent(conn: Conn, venue: str) -> None:
    """The venue's records are read from a day before the claim in which the
    deposit step's paying parent sent (its intent SUBMITTED), whenever the
    step itself is prepared: a step held back for days still finds a
    transfer its parent made at once, and a parent's earlier claim that sent
    nothing (refused, retried weeks later) does not move the window back
    beyond the venue's 29 days."""
    ids = paying_in(conn, venue, "window")
    node_id = ids["in"]
    assert procs.bybit_deposit_route(node_id).one(conn).since_ms is None
    pin_clock(conn, "2026-02-01T12:00:00+00:00")
    [refused] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(conn)
    procs.fail_submit(ids["pay"], refused.claim_secret, "the chain is down", True, 0).one(conn)
    assert procs.bybit_deposit_route(node_id).one(conn).since_ms is None  # nothing sent
    pin_clock(conn, "2026-03-01T12:00:00+00:00")
    [paying] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(conn)
    procs.complete_submit(ids["pay"], paying.claim_secret, "0x" + "aa" * 32, settled=True).one(conn)
    pin_clock(conn, "2026-03-09T12:00:00+00:00")  # the step prepared a week on
    since = datetime(2026, 2, 28, 12, tzinfo=UTC)
    assert procs.bybit_deposit_route(node_id).one(conn).since_ms == int(since.timestamp() * 1000)


@pytest.mark.parametrize(
    "forged",
    [
        {"tx_hash": "0x" + "bb" * 32},  # another transfer into the exchange
        {"parent": "other"},
        {"transfer_value": "100000001"},
        {"deposit_address": "0x" + "5e" * 20},
        {"key_file_env": "QTG_SIGNER_TREASURY"},
        {"since_ms": 4_102_444_800_000},  # a window opening in 2100: never shows it
        {"since_ms": 1_700_000_000_000},  # a window closed in 2023
    ],
    ids=lambda f: f"{next(iter(f))}-{next(iter(f.values()))}"[:40],
)
def test_a_deposit_step_waits_only_for_its_parents_transfer(
    db: Any, conn: Conn, venue: str, forged: dict[str, str]
) -> None:
    """What a bybit_deposit step records is what it waits for: the transfer its
    paying parent's evidence shows into the venue's deposit address, at the
    venue the route names. Another transfer, parent, value, address or key
    variable is refused (QT032), as the runner login records it; so is a
    window of the venue's records that cannot show that transfer."""
    ids = paying_in(conn, venue, "deposit-" + next(iter(forged)))
    runner = bind(db.connect(db.runner_dsn("testnet")))
    [paying] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
    sent = {"tx_hash": "0x" + "aa" * 32, "transfer": {"to": DEPOSIT.lower(), "value": "100000000"}}
    procs.complete_submit(ids["pay"], paying.claim_secret, sent["tx_hash"], sent, settled=True).one(
        runner
    )
    [waiting] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
    honest = deposit_payload(procs.bybit_deposit_route(ids["in"]).one(runner), sent["tx_hash"])
    record = "SELECT record_intent_prepared(%s, %s, p_payload => %s::jsonb)"
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(record, (ids["in"], waiting.claim_secret, json.dumps(honest | forged)))
    assert refused.value.sqlstate == "QT032"
    assert fingerprint(conn) == before
    runner.execute(record, (ids["in"], waiting.claim_secret, json.dumps(honest)))
    # a window an older runner recorded (a day before its prepare) is read on
    # as recorded: the since_ms rule holds records, not the payloads before it
    conn.execute(
        "UPDATE node_intents SET prepared_payload = prepared_payload || '{\"since_ms\": 1}'"
        " WHERE node_id = %s",
        (ids["in"],),
    )
    assert conn.execute(
        "SELECT intent_document(%s) ->> 'route_problem'", (ids["in"],)
    ).fetchone() == (None,)


def test_one_transfer_credits_one_deposit_step(db: Any, conn: Conn, venue: str) -> None:
    """A deposit step waits for the transfer its paying parent's evidence
    shows, and that evidence is the runner's word: a runner login that
    reports another movement's paying step settled with the first's credited
    transfer could have the venue's one credit release two withdrawals. The
    second deposit step's record is refused (QT032), with nothing changed."""
    runner = bind(db.connect(db.runner_dsn("testnet")))
    sent = {"tx_hash": "0x" + "ab" * 32, "transfer": {"to": DEPOSIT.lower(), "value": "100000000"}}
    record = "SELECT record_intent_prepared(%s, %s, p_payload => %s::jsonb)"
    waiting = []
    for external_id in ("first", "second"):
        ids = paying_in(conn, venue, external_id)
        [paying] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
        procs.complete_submit(
            ids["pay"], paying.claim_secret, sent["tx_hash"], sent, settled=True
        ).one(runner)
        [claimed] = procs.claim_ready_nodes("node_dispatcher", 1, 300).all(runner)
        route = procs.bybit_deposit_route(ids["in"]).one(runner)
        waiting.append((ids["in"], claimed.claim_secret, deposit_payload(route, sent["tx_hash"])))
    (first, first_secret, payload) = waiting[0]
    runner.execute(record, (first, first_secret, json.dumps(payload)))
    (second, second_secret, payload) = waiting[1]
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(record, (second, second_secret, json.dumps(payload)))
    assert refused.value.sqlstate == "QT032"
    assert "one transfer credits one deposit step" in str(refused.value)
    assert fingerprint(conn) == before
