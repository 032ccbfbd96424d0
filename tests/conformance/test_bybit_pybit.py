"""The Bybit half of the conformance suite: Bybit's own SDK, pybit (5.17.0, a
test dependency only), against our fake Bybit over loopback HTTP, and our
client's signatures under pybit's signing.

- pybit's signed requests are accepted by the double (HMAC-SHA256 over
  timestamp + key + recvWindow + pybit's own query string or JSON body,
  which it spells differently from our client: sorted keys, spaces in the
  JSON), and a wrong secret is refused as Bybit does (10004);
- pybit takes the double's answers for what the docs say, for every endpoint
  the engine uses: withdraw/create, the withdrawal records, the address book,
  the deposit records and address, coin info, the FUND balance, the server
  time; each answer's fields are the documented ones with the documented JSON
  types, and our client parses the same answer to the same values;
- pybit reads our errors as Bybit's: the retCode and message of a refusal, and
  10006's X-Bapi-Limit-Reset-Timestamp, which it sleeps until and retries;
- every request our client sends carries the signature pybit computes for that
  request (the same timestamp, key, window and bytes), and our ``sign`` is
  pybit's for any payload.

A mismatch fails the test. No chain (the exchange's one chain points at a
closed port) and no database."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import httpx
import pytest
from pybit import _http_manager
from pybit.exceptions import InvalidRequestError
from pybit.unified_trading import HTTP

from qtg_runner.exchanges import bybit_codes
from qtg_runner.exchanges.bybit import (
    BybitClient,
    DepositRecord,
    WithdrawalRecord,
    request_id_for,
    sign,
)
from qtg_world.bybit import BybitChain, BybitConfig, BybitHandle, serve

KEY = "pybitkey1"
SECRET = "pybit-Secret-Not-For-Logs-0123456789"
CHAIN = "conf-x"
ADDRESS = "0x" + "ab" * 20
CHECKSUMMED = "0x" + "cD" * 20
DEPOSIT = "0x" + "22" * 20
USDC = "0x" + "11" * 20
TX = "0x" + "77" * 32
T = TypeVar("T")


@pytest.fixture
def exchange() -> Iterator[BybitHandle]:
    chain = BybitChain(
        name=CHAIN,
        chain_id=1,
        rpc_url="http://127.0.0.1:9",
        usdc=USDC,
        deposit_address=DEPOSIT,
        deposit_confirmations=3,
        withdraw_fee=Decimal("0.5"),
    )
    handle = serve([chain], {KEY: SECRET}, None, BybitConfig(security_check_s=3600, tick_s=0.5))
    handle.whitelist(ADDRESS)
    handle.whitelist(CHECKSUMMED, chain=CHAIN)
    handle.credit(Decimal(100))
    handle.record_deposit(CHAIN, TX, Decimal("7.25"), log_index=4)
    try:
        yield handle
    finally:
        handle.stop()


def pybit(exchange: BybitHandle, secret: str = SECRET) -> Any:
    """A pybit session pointed at the double (its endpoint is the one thing
    changed), retrying once, after the wait Bybit's answer names."""
    logging.getLogger("pybit._http_manager").setLevel(logging.CRITICAL)
    session = HTTP(api_key=KEY, api_secret=secret, max_retries=2, retry_delay=0)
    session.endpoint = exchange.url
    return session


def ours(make: Callable[[BybitClient], Awaitable[T]], exchange: BybitHandle) -> T:
    async def go() -> T:
        async with BybitClient(exchange.url, KEY, SECRET) as client:
            return await make(client)

    return asyncio.run(go())


def result_of(answer: Any) -> dict[str, Any]:
    """pybit's answer is the v5 envelope, retCode 0."""
    assert set(answer) == {"retCode", "retMsg", "result", "retExtInfo", "time"}, answer
    assert answer["retCode"] == 0 and isinstance(answer["time"], int)
    result: dict[str, Any] = answer["result"]
    return result


def shaped(row: dict[str, Any], fields: dict[str, type]) -> None:
    """``row`` has the documented fields with the documented JSON types."""
    for name, kind in fields.items():
        assert name in row, (name, row)
        assert isinstance(row[name], kind), (name, row[name], kind)


WITHDRAWAL_ROW = {
    "withdrawId": str,
    "txID": str,
    "withdrawType": int,
    "coin": str,
    "chain": str,
    "amount": str,
    "withdrawFee": str,
    "status": str,
    "toAddress": str,
    "tag": str,
    "createTime": str,
    "updateTime": str,
}
DEPOSIT_ROW = {
    "coin": str,
    "chain": str,
    "amount": str,
    "txID": str,
    "status": int,
    "toAddress": str,
    "tag": str,
    "depositFee": str,
    "successAt": str,
    "confirmations": str,
    "txIndex": str,
    "blockHash": str,
    "batchReleaseLimit": str,
    "depositType": int,
}
ADDRESS_ROW = {
    "coin": str,
    "chain": str,
    "address": str,
    "tag": str,
    "remark": str,
    "status": int,
    "addressType": int,
    "verified": int,
}
COIN_CHAIN = {
    "chain": str,
    "chainType": str,
    "confirmation": str,
    "withdrawFee": str,
    "depositMin": str,
    "withdrawMin": str,
    "minAccuracy": str,
    "chainDeposit": str,
    "chainWithdraw": str,
    "withdrawPercentageFee": str,
    "contractAddress": str,
    "safeConfirmNumber": str,
    "withdrawMax": str,
}


# -- pybit as a client of the double ----------------------------------------------


def test_pybit_withdraws_and_reads_the_record_as_our_client_does(exchange: BybitHandle) -> None:
    session = pybit(exchange)
    request_id = request_id_for("conformance-1")
    answer = session.withdraw(
        coin="USDC",
        chain=CHAIN,
        address=CHECKSUMMED,
        amount="12.5",
        timestamp=int(time.time() * 1000),
        forceChain=1,
        accountType="FUND",
        requestId=request_id,
    )
    withdraw_id = result_of(answer)["id"]
    assert isinstance(withdraw_id, str) and withdraw_id
    # the credit and the deposit, less the amount and the chain's fee
    assert exchange.balance() == Decimal("107.25") - Decimal("12.5") - Decimal("0.5")
    # the same requestId again: the original withdrawal, nothing more taken
    again = session.withdraw(
        coin="USDC",
        chain=CHAIN,
        address=CHECKSUMMED,
        amount="12.5",
        timestamp=int(time.time() * 1000),
        forceChain=1,
        accountType="FUND",
        requestId=request_id,
    )
    assert result_of(again)["id"] == withdraw_id
    assert exchange.balance() == Decimal("94.25")

    page = result_of(session.get_withdrawal_records(withdrawID=withdraw_id, coin="USDC"))
    assert set(page) == {"rows", "nextPageCursor"}
    [row] = page["rows"]
    shaped(row, WITHDRAWAL_ROW)
    assert (row["withdrawId"], row["toAddress"], row["status"]) == (
        withdraw_id,
        CHECKSUMMED,
        "SecurityCheck",
    )
    mine = ours(lambda c: c.withdrawal(withdraw_id), exchange)
    assert mine == WithdrawalRecord.from_row(row)
    assert mine is not None and (mine.amount, mine.fee) == (Decimal("12.5"), Decimal("0.5"))


def test_pybit_reads_the_address_book_in_the_addresss_case(exchange: BybitHandle) -> None:
    session = pybit(exchange)
    rows = result_of(session.get_withdrawal_address_list(chain=CHAIN))["rows"]
    for row in rows:
        shaped(row, ADDRESS_ROW)
    assert [(r["coin"], r["address"]) for r in rows] == [
        ("baseCoin", ADDRESS),
        ("USDC", CHECKSUMMED),
    ]
    book = ours(lambda c: c.address_book(chain=CHAIN), exchange)
    assert [(e.coin, e.chain, e.address) for e in book] == [
        (r["coin"], r["chain"], r["address"]) for r in rows
    ]
    # the book compares as spelled: the lower-case spelling is not on it
    with pytest.raises(InvalidRequestError) as refused:
        session.withdraw(
            coin="USDC",
            chain=CHAIN,
            address=CHECKSUMMED.lower(),
            amount="1",
            timestamp=int(time.time() * 1000),
            forceChain=1,
            accountType="FUND",
        )
    assert refused.value.status_code == bybit_codes.NOT_WHITELISTED
    assert refused.value.message == bybit_codes.CODES[bybit_codes.NOT_WHITELISTED].meaning


def test_pybit_reads_deposits_as_our_client_does(exchange: BybitHandle) -> None:
    session = pybit(exchange)
    page = result_of(session.get_deposit_records(coin="USDC"))
    [row] = page["rows"]
    shaped(row, DEPOSIT_ROW)
    assert (row["txID"], row["amount"], row["status"], row["toAddress"]) == (
        TX,
        "7.25",
        3,
        DEPOSIT,
    )
    [mine] = ours(lambda c: c.deposits(coin="USDC"), exchange).rows
    assert mine == DepositRecord.from_row(row)
    assert mine.credited and mine.log_index == 4
    # one transaction's records (txID), as the deposit steps ask for them
    assert result_of(session.get_deposit_records(coin="USDC", txID=TX))["rows"] == [row]
    assert ours(lambda c: c.deposits(coin="USDC", tx_id=TX), exchange).rows == [mine]
    other = "0x" + "ab" * 32
    assert result_of(session.get_deposit_records(coin="USDC", txID=other))["rows"] == []
    assert ours(lambda c: c.deposits(coin="USDC", tx_id=other), exchange).rows == []

    [address] = result_of(session.get_master_deposit_address(coin="USDC", chainType=CHAIN))[
        "chains"
    ]
    shaped(address, {"chainType": str, "addressDeposit": str, "tagDeposit": str, "chain": str})
    [ours_address] = ours(lambda c: c.deposit_addresses("USDC", CHAIN), exchange)
    assert (ours_address.chain, ours_address.address) == (address["chain"], DEPOSIT)


def test_pybit_reads_coin_info_as_our_client_does(exchange: BybitHandle) -> None:
    session = pybit(exchange)
    [coin] = result_of(session.get_coin_info(coin="USDC"))["rows"]
    shaped(coin, {"name": str, "coin": str, "remainAmount": str, "chains": list})
    [chain] = coin["chains"]
    shaped(chain, COIN_CHAIN)
    [mine] = ours(lambda c: c.coin_info("USDC"), exchange)
    assert (mine.chain, mine.confirmation, mine.withdraw_fee, mine.contract_address) == (
        chain["chain"],
        int(chain["confirmation"]),
        Decimal(chain["withdrawFee"]),
        USDC,
    )
    assert mine.withdraw_open is (chain["chainWithdraw"] == "1")
    assert mine.withdraw_max is None and chain["withdrawMax"] == "-1"


def test_pybit_reads_the_balance_and_the_time_as_our_client_does(exchange: BybitHandle) -> None:
    session = pybit(exchange)
    result = result_of(session.get_coins_balance(accountType="FUND", coin="USDC"))
    assert set(result) >= {"accountType", "memberId", "balance"}
    [row] = result["balance"]
    shaped(row, {"coin": str, "walletBalance": str, "transferBalance": str, "bonus": str})
    assert Decimal(row["walletBalance"]) == ours(lambda c: c.fund_balance("USDC"), exchange)
    assert Decimal(row["walletBalance"]) == Decimal("107.25")  # the credit and the deposit

    now = result_of(session.get_server_time())
    assert abs(int(now["timeSecond"]) - ours(lambda c: c.server_time(), exchange) // 1000) <= 1


def test_pybit_reads_our_refusals_as_bybits(exchange: BybitHandle) -> None:
    with pytest.raises(InvalidRequestError) as bad_sign:
        pybit(exchange, secret="not-the-secret").get_coins_balance(accountType="FUND")
    assert bad_sign.value.status_code == bybit_codes.BAD_SIGNATURE

    session = pybit(exchange)
    with pytest.raises(InvalidRequestError) as poor:
        session.withdraw(
            coin="USDC",
            chain=CHAIN,
            address=ADDRESS,
            amount="1000",
            timestamp=int(time.time() * 1000),
            forceChain=1,
            accountType="FUND",
        )
    assert poor.value.status_code == bybit_codes.INSUFFICIENT_BALANCE
    assert exchange.balance() == Decimal("107.25")


def test_pybit_waits_for_the_rate_limit_reset_we_send(exchange: BybitHandle) -> None:
    """pybit retries 10006 once X-Bapi-Limit-Reset-Timestamp has passed, reading
    the header as Bybit sends it (epoch milliseconds)."""
    exchange.inject_rate_limit(
        reset_in_ms=300, path="/v5/asset/transfer/query-account-coins-balance"
    )
    started = time.monotonic()
    answer = pybit(exchange).get_coins_balance(accountType="FUND", coin="USDC")
    assert result_of(answer)["balance"][0]["walletBalance"] == "107.25"
    assert time.monotonic() - started >= 0.2  # it waited for the reset, then asked again


# -- our client's signatures under pybit's signing ----------------------------------


def test_every_request_of_our_client_carries_pybits_signature(exchange: BybitHandle) -> None:
    """Each request our client sends, recomputed with pybit's signing over the
    same timestamp, key, recv window and the exact bytes sent (the query
    string of a GET, the body of a POST)."""
    sent: list[httpx.Request] = []

    async def keep(request: httpx.Request) -> None:
        sent.append(request)

    async def calls() -> None:
        async with (
            httpx.AsyncClient(event_hooks={"request": [keep]}) as http,
            BybitClient(exchange.url, KEY, SECRET, client=http) as client,
        ):
            withdraw_id = await client.withdraw(
                coin="USDC",
                chain=CHAIN,
                address=CHECKSUMMED,
                amount=Decimal("1.000001"),
                request_id=request_id_for("conformance-2"),
            )
            await client.withdrawals(withdraw_id=withdraw_id, coin="USDC", limit=50)
            await client.withdrawals(coin="USDC", start_time_ms=1, end_time_ms=2, cursor="0")
            await client.address_book(chain=CHAIN)
            await client.deposits(coin="USDC", limit=10)
            await client.deposit_addresses("USDC", CHAIN)
            await client.coin_info("USDC")
            await client.fund_balance("USDC")
            await client.server_time()

    asyncio.run(calls())
    signed = [r for r in sent if "X-BAPI-SIGN" in r.headers]
    assert len(signed) == len(sent) - 1  # all but the unsigned server time
    manager = _http_manager._V5HTTPManager(api_key=KEY, api_secret=SECRET)
    for request in signed:
        payload = request.content if request.method == "POST" else request.url.query
        assert request.headers["X-BAPI-API-KEY"] == KEY
        pybits = manager._auth(
            payload=payload.decode(),
            recv_window=request.headers["X-BAPI-RECV-WINDOW"],
            timestamp=request.headers["X-BAPI-TIMESTAMP"],
        )
        assert request.headers["X-BAPI-SIGN"] == pybits, (request.method, request.url)
    posts = [r for r in signed if r.method == "POST"]
    assert [json.loads(r.content)["amount"] for r in posts] == ["1.000001"]


@pytest.mark.parametrize(
    "payload",
    [
        "",
        "accountType=FUND&coin=USDC",
        "coin=USDC&withdrawID=10000",
        json.dumps({"coin": "USDC", "amount": "1", "requestId": "ab12"}),
        json.dumps({"coin": "USDC", "amount": "1"}, separators=(",", ":")),
        "cursor=eyJtaW5JRCI6MTA1MDh9&limit=50",
    ],
)
def test_our_sign_is_pybits(payload: str) -> None:
    timestamp, window = "1672196570254", "5000"
    param_str = timestamp + KEY + window + payload
    assert sign(SECRET, timestamp, KEY, window, payload.encode()) == (
        _http_manager.generate_signature(False, SECRET, param_str)
    )
