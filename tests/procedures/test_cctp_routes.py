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
only, so a refusal changes nothing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import psycopg
import pytest
from engine import assert_rejected, create, node, node_ids, plan
from rows import Conn

from qtg_runner.db import procs
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor

TREASURY = "0x" + "d" * 40
OTHER_TREASURY = "0x" + "e" * 40
STRANGER = "0x" + "5a" * 20
USDC_A, USDC_B = "0x" + "1" * 40, "0x" + "2" * 40
MESSENGER_A, MESSENGER_B = "0x" + "3" * 40, "0x" + "4" * 40
TRANSMITTER_A, TRANSMITTER_B = "0x" + "6" * 40, "0x" + "7" * 40


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
