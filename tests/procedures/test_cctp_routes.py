"""cctp_burn_route and cctp_mint_route: what a CCTP v2 burn and mint may sign,
from the registry alone. The burn: the source chain's USDC and CCTP contracts,
a treasury sender, the destination's domain, a recipient allowed on the
DESTINATION chain, maxFee as a basis-point cap below the amount, the finality
threshold. The mint: the destination's transmitter, the source's messenger and
USDC (what the attested message must name), the expected recipient and amount.
Refusals: QT032 a recipient neither treasury nor allow-listed where the money
lands (an address allowed only on the source chain is not enough), QT014 a
chain without its CCTP row or a sender that is no treasury account, QT002 the
same chain on both sides or an amount over CCTP's 10M USDC a burn; each reads
only, so a refusal changes nothing. A mint's bytes and payload are of its
burn's message nonce, whatever else it signs; and a mint that reverted past
its message's expirationBlock (and only that) may be tried again by recovery
(NOT_SUBMITTED), with the message re-attested at the same nonce."""

from __future__ import annotations

import json
import threading
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    approve,
    assert_rejected,
    bind,
    create,
    node,
    node_ids,
    pin_clock,
    plan,
    wait_until_blocked_on_a_lock,
)
from evm_rows import FEES, call
from rows import Conn, recovery_claims

from qtg_runner.chains.cctp import BurnBody, CctpMessage
from qtg_runner.chains.cctp_client import deposit_for_burn_calldata, receive_message_calldata
from qtg_runner.db import procs
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_burn import _Route as BurnRoute
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.cctp_mint import _Route as MintRoute

TREASURY = "0x" + "d" * 40
OTHER_TREASURY = "0x" + "e" * 40
STRANGER = "0x" + "5a" * 20
USDC_A, USDC_B = "0x" + "1" * 40, "0x" + "2" * 40
MESSENGER_A, MESSENGER_B = "0x" + "3" * 40, "0x" + "4" * 40
TRANSMITTER_A, TRANSMITTER_B = "0x" + "6" * 40, "0x" + "7" * 40
NONCE = b"\x07" * 32
"""The nonce of the burn's attested message (its evidence's)."""
BURNT = json.dumps({"nonce": "0x" + NONCE.hex()})


@pytest.fixture
def registry(conn: Conn) -> Conn:
    """Chains a (domain 100) and b (domain 101), each with USDC, its CCTP
    contracts and the two treasury accounts; and a chain c without CCTP."""
    for key, chain_id, usdc, messenger, transmitter, domain in (
        ("chain-a", 1, USDC_A, MESSENGER_A, TRANSMITTER_A, 100),
        ("chain-b", 2, USDC_B, MESSENGER_B, TRANSMITTER_B, 101),
        ("chain-c", 3, "0x" + "8" * 40, None, None, None),
    ):
        procs.upsert_chain(key, chain_id, f"QTG_RPC_{key.upper().replace('-', '_')}", 2, 1000).one(
            conn
        )
        procs.upsert_chain_token(key, "USDC", usdc, 6).one(conn)
        for address in (TREASURY, OTHER_TREASURY):
            procs.upsert_treasury_account(key, address, "env:KEY").one(conn)
        if messenger is not None:
            contracts = {"TokenMessengerV2": messenger, "MessageTransmitterV2": transmitter}
            procs.upsert_chain_protocol(key, "cctp", domain, contracts).one(conn)
    for executor in (CctpBurnExecutor, CctpMintExecutor):
        procs.register_executor(
            executor.key, True, executor.node_config_schema, executor.description
        ).one(conn)
    return conn


def movement(
    conn: Conn,
    external_id: str,
    amount: str = "2.5",
    source: str = "chain-a",
    destination: str = "chain-b",
    recipient: str = OTHER_TREASURY,
    sender: str = TREASURY,
    **burn: Any,
) -> dict[str, int]:
    burn_node = node(
        "burn",
        [],
        CctpBurnExecutor.key,
        "cctp-fast",
        chain=source,
        destination_chain=destination,
        to=recipient,
        finality=burn.pop("finality", "fast"),
        **{"from": sender},
        **burn,
    )
    mint_node = node(
        "mint",
        ["burn"],
        CctpMintExecutor.key,
        chain=destination,
        source_chain=source,
        to=recipient,
        **{"from": sender},
    )
    return node_ids(conn, create(conn, plan(burn_node, mint_node), external_id, amount))


def test_the_burn_route_is_the_registry_word_on_both_chains(registry: Conn) -> None:
    ids = movement(registry, "fast", max_fee_bps=4)
    route = procs.cctp_burn_route(ids["burn"]).one(registry)
    assert (route.chain_key, route.token_address, route.token_messenger) == (
        "chain-a",
        USDC_A,
        MESSENGER_A,
    )
    assert (route.source_domain, route.destination_domain) == (100, 101)
    assert route.destination_token_messenger == MESSENGER_B
    assert (route.sender, route.signer_id) == (TREASURY, "env:KEY")
    assert (route.mint_recipient, route.recipient_kind) == (OTHER_TREASURY, "treasury")
    assert route.amount_units == 2_500_000
    assert route.max_fee_units == 1_000  # 4 bps of 2.5 USDC
    assert route.min_finality_threshold == 1000
    standard = movement(registry, "standard", finality="standard")
    row = procs.cctp_burn_route(standard["burn"]).one(registry)
    assert (row.min_finality_threshold, row.max_fee_units) == (2000, 2_500)  # default 10 bps


def test_the_mint_route_names_what_the_message_must_show(registry: Conn) -> None:
    ids = movement(registry, "mint")
    route = procs.cctp_mint_route(ids["mint"]).one(registry)
    assert (route.chain_key, route.token_address, route.message_transmitter) == (
        "chain-b",
        USDC_B,
        TRANSMITTER_B,
    )
    assert (route.token_messenger, route.destination_domain) == (MESSENGER_B, 101)
    assert (route.source_chain, route.source_domain) == ("chain-a", 100)
    assert (route.source_token_messenger, route.source_token) == (MESSENGER_A, USDC_A)
    assert (route.mint_recipient, route.amount_units, route.max_fee_units) == (
        OTHER_TREASURY,
        2_500_000,
        2_500,
    )


def test_a_recipient_allowed_only_on_the_source_chain_is_refused_on_both_legs(
    registry: Conn,
) -> None:
    procs.allow_destination("chain-a", STRANGER, "allowed where the money leaves").one(registry)
    ids = movement(registry, "stranger", recipient=STRANGER)
    for fn, node_id in (("cctp_burn_route", ids["burn"]), ("cctp_mint_route", ids["mint"])):
        error = assert_rejected(registry, "QT032", f"SELECT * FROM {fn}(%s)", (node_id,))
        assert "chain-b" in str(error)
    # allow-listed where it lands: both legs may sign
    procs.allow_destination("chain-b", STRANGER, "where it lands").one(registry)
    assert procs.cctp_burn_route(ids["burn"]).one(registry).recipient_kind == "allowed"
    assert procs.cctp_mint_route(ids["mint"]).one(registry).recipient_kind == "allowed"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"destination": "chain-c"}, "QT014"),  # no CCTP row on the destination
        ({"source": "chain-c"}, "QT014"),  # nor on the source
        ({"sender": STRANGER}, "QT014"),  # money leaves only from a treasury account
        ({"destination": "chain-a"}, "QT002"),  # the same chain on both sides
        ({"amount": "10000000.000001"}, "QT002"),  # over 10M USDC a burn
    ],
)
def test_a_route_the_registry_does_not_allow_is_refused_and_changes_nothing(
    registry: Conn, change: dict[str, Any], code: str
) -> None:
    ids = movement(registry, f"refused-{code}-{sorted(change)}", **change)
    assert_rejected(registry, code, "SELECT * FROM cctp_burn_route(%s)", (ids["burn"],))
    if "amount" not in change:  # the mint has no burn limit to check
        assert_rejected(registry, code, "SELECT * FROM cctp_mint_route(%s)", (ids["mint"],))


def test_the_fee_cap_is_a_bounded_share_of_the_amount(registry: Conn) -> None:
    ids = movement(registry, "cap", amount=str(Decimal("0.000001")), max_fee_bps=100)
    route = procs.cctp_burn_route(ids["burn"]).one(registry)
    # 1% of one base unit rounds down to nothing: always below the amount
    assert (route.amount_units, route.max_fee_units) == (1, 0)
    # over 1%: the plan is refused at creation (the executor's config schema)
    with pytest.raises(psycopg.Error) as refused:
        movement(registry, "over-cap", max_fee_bps=101)
    assert refused.value.sqlstate == "QT001"


# -- what a burn and a mint may record: the route's own call, nothing else -------

RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_payload => %s::jsonb, p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


@pytest.fixture
def runner(db: TestDatabase) -> Conn:
    """The runner login's connection, the one a dispatcher holds."""
    return bind(db.connect(db.runner_dsn("testnet")))


def claimed(
    registry: Conn, external_id: str, claimer: Conn | None = None, **kw: Any
) -> dict[str, Any]:
    """A started movement's burn, claimed by ``claimer`` (default ``registry``)."""
    ids = movement(registry, external_id, **kw)
    approve(registry, next(iter(ids_of_movement(registry, ids["burn"]))))
    procs.start_approved_movements(1000).one(registry)
    [claim] = procs.claim_ready_nodes("w1", 1, 300).all(claimer or registry)
    assert claim.node_id == ids["burn"]
    return {"ids": ids, "secret": claim.claim_secret}


def ids_of_movement(conn: Conn, node_id: int) -> list[int]:
    row = conn.execute(
        "SELECT request_id FROM movement_request_nodes WHERE id = %s", (node_id,)
    ).fetchone()
    assert row is not None
    return [int(row[0])]


def burn_call(route: Any, **change: Any) -> bytes:
    fields = {
        "amount": int(route.amount_units),
        "destination_domain": int(route.destination_domain),
        "mint_recipient": route.mint_recipient,
        "burn_token": route.token_address,
        "max_fee": int(route.max_fee_units),
        "min_finality_threshold": int(route.min_finality_threshold),
    } | change
    return deposit_for_burn_calldata(**fields)


@pytest.mark.parametrize(
    "forged",
    [
        {"mint_recipient": STRANGER},
        {"destination_domain": 102},
        {"amount": 2_500_001},
        {"max_fee": 2_500_000},
        {"min_finality_threshold": 2000},
        {"destination_caller": b"\x01" * 32},
        {"to": "0x" + "9" * 40},  # another contract, though registered as nothing
        {"value": 1},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_burn_records_only_its_routes_deposit_for_burn(
    registry: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """The signed bytes of a burn are read in SQL: depositForBurn of the route's
    amount to its mint recipient on its destination domain, byte for byte, on
    its TokenMessengerV2. Another recipient, domain, amount, fee cap, finality,
    destination caller, contract or ether is refused (QT032), nothing kept."""
    c = claimed(registry, "forged-burn-" + next(iter(forged)), runner)
    node_id = c["ids"]["burn"]
    route = procs.cctp_burn_route(node_id).one(runner)
    payload = json.dumps(BurnRoute.from_row(route).payload(100_000, FEES))
    change = dict(forged)
    to = change.pop("to", MESSENGER_A)
    value = change.pop("value", 0)
    tx_hash, raw = call(1, 0, to, burn_call(route, **change), value)
    assert_rejected(
        runner, "QT032", RECORD,
        (node_id, c["secret"], 0, tx_hash, payload, "chain-a", TREASURY, raw),
        watcher=registry,
    )  # fmt: skip
    tx_hash, raw = call(1, 0, MESSENGER_A, burn_call(route))
    runner.execute(RECORD, (node_id, c["secret"], 0, tx_hash, payload, "chain-a", TREASURY, raw))


@pytest.mark.parametrize(
    "forged",
    [
        {"mint_recipient": STRANGER},
        {"amount_units": "250000000"},
        {"destination_domain": 102},
        {"token_messenger": "0x" + "9" * 40},
        {"rpc_url_env": "QTG_RPC_CHAIN_C"},
        {"signer_id": "env:OTHER_KEY"},
        {"chain_key": "chain-b"},
        {"finality_depth": 0},
        {"refund_to": STRANGER},  # a key the executor never records
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_burns_payload_is_its_route_or_refused(
    registry: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """The payload that observation and recovery read (and a replacement is
    signed from) must say what the route says: a forged recipient, amount,
    domain, contract, RPC or signer NAME, chain or finality, or a key of its
    own, is refused with the honest bytes beside it (QT032), nothing kept."""
    c = claimed(registry, "forged-payload-" + next(iter(forged)), runner)
    node_id = c["ids"]["burn"]
    route = procs.cctp_burn_route(node_id).one(runner)
    payload = BurnRoute.from_row(route).payload(100_000, FEES) | forged
    tx_hash, raw = call(1, 0, MESSENGER_A, burn_call(route))
    error = assert_rejected(
        runner, "QT032", RECORD,
        (node_id, c["secret"], 0, tx_hash, json.dumps(payload), "chain-a", TREASURY, raw),
        watcher=registry,
    )  # fmt: skip
    assert next(iter(forged)) in str(error)


def mint_message(route: Any, **change: Any) -> bytes:
    """receiveMessage(message, attestation) of a burn message as the route says."""
    fields = {
        "source_domain": int(route.source_domain),
        "destination_domain": int(route.destination_domain),
        "burn_token": route.source_token,
        "mint_recipient": route.mint_recipient,
        "amount": int(route.amount_units),
        "nonce": NONCE,
        "expiration_block": 0,
    } | change

    def word(address: str) -> bytes:
        return bytes(12) + bytes.fromhex(address[2:])

    body = BurnBody(
        1, word(fields["burn_token"]), word(fields["mint_recipient"]), fields["amount"],
        word(TREASURY), int(route.max_fee_units), 0, fields["expiration_block"], b"",
    ).encode()  # fmt: skip
    message = CctpMessage(
        1, fields["source_domain"], fields["destination_domain"], fields["nonce"],
        word(route.source_token_messenger), word(route.token_messenger), bytes(32),
        1000, 1000, body,
    ).encode()  # fmt: skip
    return receive_message_calldata(message, b"\x99" * 65)


@pytest.mark.parametrize(
    "forged",
    [
        {"mint_recipient": STRANGER},
        {"amount": 1},
        {"source_domain": 102},
        {"burn_token": "0x" + "9" * 40},
        {"nonce": b"\x08" * 32},  # another message than the burn's, however attested
        {"to": MESSENGER_B},
    ],
    ids=lambda f: next(iter(f)),
)
def test_a_mint_records_only_a_receive_of_its_routes_burn(
    registry: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """A mint's signed bytes receive a burn message from the route's source
    domain that pays the route's recipient the route's amount of the source's
    USDC, at the nonce its burn's evidence shows, on the destination's
    transmitter; anything else is refused."""
    c = claimed(registry, "forged-mint-" + next(iter(forged)), runner)
    burn = c["ids"]["burn"]
    runner.execute(
        "SELECT complete_submit(%s, %s, 'burnt', %s::jsonb, p_settled => true)",
        (burn, c["secret"], BURNT),
    )
    [mint] = procs.claim_ready_nodes("w1", 1, 300).all(runner)
    route = procs.cctp_mint_route(mint.node_id).one(runner)
    change = dict(forged)
    to = change.pop("to", TRANSMITTER_B)
    tx_hash, raw = call(2, 0, to, mint_message(route, **change))
    assert_rejected(
        runner, "QT032", RECORD,
        (mint.node_id, mint.claim_secret, 0, tx_hash, None, "chain-b", TREASURY, raw),
        watcher=registry,
    )  # fmt: skip
    tx_hash, raw = call(2, 0, TRANSMITTER_B, mint_message(route))
    runner.execute(
        RECORD, (mint.node_id, mint.claim_secret, 0, tx_hash, None, "chain-b", TREASURY, raw)
    )


@pytest.mark.parametrize(
    "forged",
    [
        {"mint_recipient": STRANGER},
        {"amount_units": "1"},
        {"source_domain": 102},
        {"fee_executed": "2501"},  # above the route's maxFee: observation would expect less
        {"fee_executed": "-1"},
        {"message_nonce": "0x" + "08" * 32},
        {"rpc_url_env": "QTG_RPC_CHAIN_A"},
    ],
    ids=lambda f: f"{next(iter(f))}={next(iter(f.values()))}",
)
def test_a_mints_payload_is_its_route_or_refused(
    registry: Conn, runner: Conn, forged: dict[str, Any]
) -> None:
    """What a mint's observation reads (the recipient and amount the received
    message must show, less the fee the burn paid) is its route's: a forged
    one is refused beside the honest receiveMessage (QT032)."""
    c = claimed(registry, "forged-mint-payload-" + next(iter(forged)) + str(forged), runner)
    runner.execute(
        "SELECT complete_submit(%s, %s, 'burnt', %s::jsonb, p_settled => true)",
        (c["ids"]["burn"], c["secret"], BURNT),
    )
    [mint] = procs.claim_ready_nodes("w1", 1, 300).all(runner)
    route = procs.cctp_mint_route(mint.node_id).one(runner)
    honest = MintRoute.from_row(route).payload() | {
        "message_nonce": "0x" + "07" * 32,
        "fee_executed": "0",
        "expiration_block": "0",
        "reattested": False,
        "source_tx_hash": "0x" + "ab" * 32,
        "search_from_block": 10,
        "gas": 200_000,
        "max_fee_per_gas": "2000000000",
        "max_priority_fee_per_gas": "1000000000",
    }
    tx_hash, raw = call(2, 0, TRANSMITTER_B, mint_message(route))
    error = assert_rejected(
        runner, "QT032", RECORD,
        (mint.node_id, mint.claim_secret, 0, tx_hash, json.dumps(honest | forged), "chain-b",
         TREASURY, raw),
        watcher=registry,
    )  # fmt: skip
    assert next(iter(forged)) in str(error)
    runner.execute(
        RECORD,
        (mint.node_id, mint.claim_secret, 0, tx_hash, json.dumps(honest), "chain-b", TREASURY, raw),
    )


def test_a_burn_without_a_message_nonce_gets_no_mint_signed(registry: Conn) -> None:
    """The burn's evidence names no nonce (edited, or never attested): no
    receiveMessage is recorded for its mint, whatever message it carries."""
    c = claimed(registry, "no-nonce")
    registry.execute(
        "SELECT complete_submit(%s, %s, 'burnt', '{}'::jsonb, p_settled => true)",
        (c["ids"]["burn"], c["secret"]),
    )
    [mint] = procs.claim_ready_nodes("w1", 1, 300).all(registry)
    route = procs.cctp_mint_route(mint.node_id).one(registry)
    tx_hash, raw = call(2, 0, TRANSMITTER_B, mint_message(route))
    error = assert_rejected(
        registry, "QT032", RECORD,
        (mint.node_id, mint.claim_secret, 0, tx_hash, None, "chain-b", TREASURY, raw),
    )  # fmt: skip
    assert "no such parent shows a message nonce" in str(error)


def burnt_twice(registry: Conn, runner: Conn, name: str) -> tuple[Any, Any]:
    """Two movements of the same amount to the same recipient whose burns a
    runner login completed with one attested message (one burn's evidence
    names the other's): their two mints, claimed by the runner."""
    for c in [claimed(registry, f"{name}-{each}", runner) for each in "xy"]:
        runner.execute(
            "SELECT complete_submit(%s, %s, 'burnt', %s::jsonb, p_settled => true)",
            (c["ids"]["burn"], c["secret"], BURNT),
        )
    first, second = procs.claim_ready_nodes("w1", 2, 300).all(runner)
    return first, second


def mint_record(runner: Conn, mint: Any, nonce: int) -> tuple[Any, ...]:
    route = procs.cctp_mint_route(mint.node_id).one(runner)
    tx_hash, raw = call(2, nonce, TRANSMITTER_B, mint_message(route))
    return (mint.node_id, mint.claim_secret, nonce, tx_hash, None, "chain-b", TREASURY, raw)


def test_one_message_is_minted_by_one_mint(registry: Conn, runner: Conn) -> None:
    """Two burns whose evidence names one message (a runner login's word)
    get one mint signed: the first mint's record makes the message its own,
    the other's bytes for it are refused (QT032, naming both burns) and
    change nothing, while the first may still record its replacement."""
    first, second = burnt_twice(registry, runner, "one-message")
    runner.execute(RECORD, mint_record(runner, first, 0))
    error = assert_rejected(
        runner, "QT032", RECORD, mint_record(runner, second, 1), watcher=registry
    )
    assert f"is node {first.node_id}'s to mint" in str(error)
    assert "one message is minted by one mint" in str(error)
    runner.execute(RECORD, mint_record(runner, first, 0))  # a replacement: the same message
    [owner] = registry.execute("SELECT mint_node_id FROM cctp_message_mints").fetchall()
    assert owner == (first.node_id,)


def test_a_mint_completes_only_on_the_message_it_owns(registry: Conn, runner: Conn) -> None:
    """The other mint of one message cannot complete on the first one's
    transaction without recording bytes of its own (a runner login's word):
    refused, nothing changed; the first completes. Nor can a mint whose
    message no mint holds yet, without bytes."""
    first, second = burnt_twice(registry, runner, "completes")
    record = mint_record(runner, first, 0)
    runner.execute(RECORD, record)
    settle = "SELECT complete_submit(%s, %s, %s, '{}'::jsonb, p_settled => true)"
    error = assert_rejected(
        runner, "QT050", settle, (second.node_id, second.claim_secret, record[3]), watcher=registry
    )
    assert "a cctp_mint completes on the receiveMessage it sign" in str(error)
    runner.execute(settle, (first.node_id, first.claim_secret, record[3]))
    [lone] = [claimed(registry, "completes-alone", runner)]
    runner.execute(
        "SELECT complete_submit(%s, %s, 'burnt', %s::jsonb, p_settled => true)",
        (lone["ids"]["burn"], lone["secret"], json.dumps({"nonce": "0x" + "09" * 32})),
    )
    [mint] = procs.claim_ready_nodes("w1", 1, 300).all(runner)
    error = assert_rejected(
        runner, "QT050", settle, (mint.node_id, mint.claim_secret, record[3]), watcher=registry
    )  # no other mint holds its message: it signed none all the same
    assert "a cctp_mint completes on the receiveMessage it sign" in str(error)
    assert registry.execute(
        "SELECT node_state::text FROM movement_request_nodes WHERE id = %s", (first.node_id,)
    ).fetchone() == ("COMPLETED",)


def test_two_mints_of_one_message_in_one_call_record_one(registry: Conn, runner: Conn) -> None:
    """Two mints of one message in one batch: the first is recorded, the
    second refused in its own row."""
    first, second = burnt_twice(registry, runner, "one-call")
    records = [mint_record(runner, first, 0), mint_record(runner, second, 1)]
    ids, secrets, nonces, hashes, payloads, chains, senders, raws = (
        list(column) for column in zip(*records, strict=True)
    )
    rows = procs.record_intent_prepared_batch(
        ids, secrets, nonces, hashes, [None, None], payloads, chains, senders, raws
    ).all(runner)
    assert [(r.node_id, r.error_code) for r in rows] == [
        (first.node_id, None),
        (second.node_id, "QT032"),
    ]


def test_two_mints_of_one_message_racing_record_one(
    db: TestDatabase, registry: Conn, runner: Conn
) -> None:
    """Two dispatchers record mints of one message at once: the one that
    commits second waits on the first's row, then is judged again alone and
    refused (QT032), nothing of it kept."""
    first, second = burnt_twice(registry, runner, "racing")
    holder = bind(db.connect(db.runner_dsn("testnet"), autocommit=False))
    holder.execute(RECORD, mint_record(runner, first, 0))  # open, not committed
    outcome: list[BaseException | None] = []

    def record_second() -> None:
        try:
            runner.execute(RECORD, mint_record(runner, second, 1))
            outcome.append(None)
        except psycopg.Error as exc:
            outcome.append(exc)

    racer = threading.Thread(target=record_second)
    racer.start()
    wait_until_blocked_on_a_lock(registry, runner.info.backend_pid)
    holder.commit()
    racer.join(30)
    [error] = outcome
    assert isinstance(error, psycopg.Error) and error.sqlstate == "QT032", error
    assert registry.execute(
        "SELECT intent_state FROM node_intents WHERE node_id = %s", (second.node_id,)
    ).fetchall() == [("CLAIMED",)]


RECOVER = "SELECT complete_recovery(%s, %s, 'NOT_SUBMITTED', %s::jsonb, %s)"


def test_recovery_tries_again_only_a_mint_that_reverted_past_its_expiration(
    registry: Conn,
) -> None:
    """A mint recorded with a fast message expiring at block 50, sent, and in
    doubt: recovery may report it NOT_SUBMITTED only on evidence that it
    reverted at block 50 or later with the nonce unused (QT021 otherwise,
    nothing changed); then the node is READY, and its new mint is held to the
    same nonce (the message re-attested, expirationBlock 0)."""
    c = claimed(registry, "expired-mint")
    registry.execute(
        "SELECT complete_submit(%s, %s, 'burnt', %s::jsonb, p_settled => true)",
        (c["ids"]["burn"], c["secret"], BURNT),
    )
    [mint] = procs.claim_ready_nodes("w1", 1, 300).all(registry)
    route = procs.cctp_mint_route(mint.node_id).one(registry)
    tx_hash, raw = call(2, 0, TRANSMITTER_B, mint_message(route, expiration_block=50))
    registry.execute(
        RECORD, (mint.node_id, mint.claim_secret, 0, tx_hash, None, "chain-b", TREASURY, raw)
    )
    assert registry.execute(
        "SELECT fail_submit(%s, %s, 'in doubt', true)", (mint.node_id, mint.claim_secret)
    ).fetchone() == ("UNKNOWN",)
    pin_clock(registry, "2099-01-01T00:00:00+00:00")
    secret = recovery_claims(registry)[mint.node_id]["claim_secret"]
    expired = {"tx_hash": tx_hash, "block_number": 50, "status": 0, "expired": True,
               "used_nonce": False}  # fmt: skip
    for wrong, ref in (
        ({"block_number": 49}, tx_hash),  # before the expiration: it reverted for another reason
        ({"status": 1}, tx_hash),
        ({"used_nonce": True}, tx_hash),  # minted: completed, never tried again
        ({"expired": None}, tx_hash),
        ({}, "0x" + "ab" * 32),  # a transaction the intent never signed
    ):
        evidence = {k: v for k, v in (expired | wrong).items() if v is not None}
        assert_rejected(
            registry, "QT021", RECOVER, (mint.node_id, secret, json.dumps(evidence), ref)
        )
    assert registry.execute(
        RECOVER, (mint.node_id, secret, json.dumps(expired), tx_hash)
    ).fetchone() == ("READY",)
    pin_clock(registry, None)

    [again] = procs.claim_ready_nodes("w1", 1, 300).all(registry)
    assert again.node_id == mint.node_id
    tx_hash, raw = call(2, 1, TRANSMITTER_B, mint_message(route, nonce=b"\x08" * 32))
    assert_rejected(
        registry, "QT032", RECORD,
        (again.node_id, again.claim_secret, 1, tx_hash, None, "chain-b", TREASURY, raw),
    )  # fmt: skip
    tx_hash, raw = call(2, 1, TRANSMITTER_B, mint_message(route))
    registry.execute(
        RECORD, (again.node_id, again.claim_secret, 1, tx_hash, None, "chain-b", TREASURY, raw)
    )


def test_recovery_may_not_try_again_another_bridge_step(registry: Conn) -> None:
    """The exception is the mint's alone: a prepared burn in doubt is never
    NOT_SUBMITTED, whatever its evidence says."""
    c = claimed(registry, "burn-in-doubt")
    node_id = c["ids"]["burn"]
    route = procs.cctp_burn_route(node_id).one(registry)
    tx_hash, raw = call(1, 0, MESSENGER_A, burn_call(route))
    registry.execute(RECORD, (node_id, c["secret"], 0, tx_hash, None, "chain-a", TREASURY, raw))
    registry.execute("SELECT fail_submit(%s, %s, 'in doubt', true)", (node_id, c["secret"]))
    pin_clock(registry, "2099-01-01T00:00:00+00:00")
    secret = recovery_claims(registry)[node_id]["claim_secret"]
    evidence = {"tx_hash": tx_hash, "block_number": 50, "status": 0, "expired": True,
                "used_nonce": False}  # fmt: skip
    error = assert_rejected(
        registry, "QT021", RECOVER, (node_id, secret, json.dumps(evidence), tx_hash)
    )
    assert "requeue_node" in str(error)
