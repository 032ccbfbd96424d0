"""The Bybit v5 client against the fake exchange over loopback, without a chain:
the signature over the exact bytes, the recv window, the refusals a withdrawal
can meet before anything moves, the rate limit and its retry hint, the
withdrawal interval, the repeated requestId in both modes, the address book
compared in the address's case, coin info, the classification from the table
of codes (an unknown code is unknown, never permanent), and the API secret
kept out of every log line, repr and error. (The walk on chain and the deposits:
tests/chains/test_bybit_double.py.)

The exchange's one chain points at a closed port: withdrawals stay in
SecurityCheck (an hour at time scale 1), so nothing here needs a chain."""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections.abc import Awaitable, Callable, Iterator
from decimal import Decimal
from typing import Any, TypeVar

import httpx
import pytest

from qtg_runner.exchanges import bybit_codes
from qtg_runner.exchanges.bybit import (
    BybitClient,
    BybitError,
    BybitUnavailable,
    WithdrawalRecord,
    classify,
    request_id_for,
    sign,
)
from qtg_runner.exchanges.bybit_codes import Kind
from qtg_runner.executors.venues import deposits_for
from qtg_world.bybit import BybitChain, BybitConfig, BybitHandle, serve

KEY = "testkey1"
SECRET = "s3cr3t-Value-Never-Shown-0123456789"
CHAIN = "test-x"
ADDRESS = "0x" + "ab" * 20
T = TypeVar("T")


@pytest.fixture
def exchange() -> Iterator[BybitHandle]:
    chain = BybitChain(
        name=CHAIN,
        chain_id=1,
        rpc_url="http://127.0.0.1:9",
        usdc="0x" + "11" * 20,
        deposit_address="0x" + "22" * 20,
    )
    config = BybitConfig(security_check_s=3600, tick_s=0.5)
    handle = serve([chain], {KEY: SECRET}, None, config)
    try:
        yield handle
    finally:
        handle.stop()


def run(make: Callable[[BybitClient], Awaitable[T]], url: str, **kwargs: Any) -> T:
    async def go() -> T:
        async with BybitClient(
            url, kwargs.pop("key", KEY), kwargs.pop("secret", SECRET), **kwargs
        ) as client:
            return await make(client)

    return asyncio.run(go())


def refused(make: Callable[[BybitClient], Awaitable[Any]], url: str, **kwargs: Any) -> BybitError:
    with pytest.raises(BybitError) as info:
        run(make, url, **kwargs)
    return info.value


def withdraw(amount: str = "10", address: str = ADDRESS, request_id: str = "r1") -> Any:
    return lambda c: c.withdraw(
        coin="USDC", chain=CHAIN, address=address, amount=Decimal(amount), request_id=request_id
    )


def test_signed_get_and_post_are_accepted(exchange: BybitHandle) -> None:
    exchange.credit(Decimal("25.5"))
    assert run(lambda c: c.fund_balance("USDC"), exchange.url) == Decimal("25.5")
    exchange.whitelist(ADDRESS)
    wid = run(withdraw("0.000001"), exchange.url)
    record = run(lambda c: c.withdrawal(wid), exchange.url)
    assert record is not None
    assert (record.status, record.amount, record.to_address) == (
        "SecurityCheck",
        Decimal("0.000001"),
        ADDRESS,
    )
    addresses = run(lambda c: c.deposit_addresses("USDC", CHAIN), exchange.url)
    assert [(a.chain, a.address) for a in addresses] == [(CHAIN, "0x" + "22" * 20)]


def test_the_signature_covers_the_exact_query_string(exchange: BybitHandle) -> None:
    """A GET signed over one encoding of its query and sent with another is refused."""
    ts = str(int(time.time() * 1000))
    sent = "accountType=FUND&coin=USDC"
    good = sign(SECRET, ts, KEY, "5000", sent.encode())
    reordered = sign(SECRET, ts, KEY, "5000", b"coin=USDC&accountType=FUND")
    path = exchange.url + "/v5/asset/transfer/query-account-coins-balance?" + sent

    def call(signature: str) -> dict[str, Any]:
        headers = {
            "X-BAPI-API-KEY": KEY,
            "X-BAPI-TIMESTAMP": ts,
            "X-BAPI-RECV-WINDOW": "5000",
            "X-BAPI-SIGN": signature,
        }
        body: dict[str, Any] = httpx.get(path, headers=headers).json()
        return body

    assert call(good)["retCode"] == 0
    answer = call(reordered)
    assert answer["retCode"] == 10004
    assert set(answer) == {"retCode", "retMsg", "result", "retExtInfo", "time"}


def test_a_wrong_secret_is_a_bad_signature(exchange: BybitHandle) -> None:
    error = refused(lambda c: c.fund_balance("USDC"), exchange.url, secret="not-the-secret")
    assert error.ret_code == 10004
    assert classify(error) is Kind.PERMANENT


def test_an_unknown_key_is_refused(exchange: BybitHandle) -> None:
    error = refused(lambda c: c.fund_balance("USDC"), exchange.url, key="nobody")
    assert error.ret_code == 10003
    assert classify(error) is Kind.PERMANENT


def test_the_recv_window(exchange: BybitHandle) -> None:
    """Valid iff server_time - recvWindow <= timestamp < server_time + 1000."""
    url = exchange.url
    stale = refused(lambda c: c.fund_balance("USDC"), url, clock=lambda: time.time() - 6)
    assert stale.ret_code == 10002
    assert classify(stale) is Kind.RETRYABLE
    ahead = refused(lambda c: c.fund_balance("USDC"), url, clock=lambda: time.time() + 2)
    assert ahead.ret_code == 10002
    # a wider window takes the same stale timestamp
    wide = run(
        lambda c: c.fund_balance("USDC"), url, clock=lambda: time.time() - 6, recv_window=10_000
    )
    assert wide == Decimal(0)
    # the server's clock moved: a correct client is now outside its window
    exchange.set_clock_offset(-10_000)
    assert refused(lambda c: c.fund_balance("USDC"), url).ret_code == 10002


def test_an_address_off_the_whitelist_is_refused(exchange: BybitHandle) -> None:
    exchange.credit(Decimal(100))
    error = refused(withdraw(), exchange.url)
    assert error.ret_code == 131093
    assert classify(error) is Kind.PERMANENT
    assert exchange.balance() == Decimal(100)
    # whitelisted for another chain only: still refused
    exchange.whitelist(ADDRESS, chain="elsewhere")
    assert refused(withdraw(), exchange.url).ret_code == 131093


def test_more_than_the_balance_is_refused(exchange: BybitHandle) -> None:
    exchange.whitelist(ADDRESS, chain=CHAIN)
    exchange.credit(Decimal("9.999999"))
    error = refused(withdraw("10"), exchange.url)
    assert error.ret_code == 131212
    assert classify(error) is Kind.PERMANENT
    assert exchange.balance() == Decimal("9.999999")
    run(withdraw("9.999999"), exchange.url)
    assert exchange.balance() == Decimal(0)


def test_malformed_withdrawals_are_params_errors(exchange: BybitHandle) -> None:
    exchange.whitelist(ADDRESS)
    exchange.credit(Decimal(100))
    assert refused(withdraw("0.0000001"), exchange.url).ret_code == 10001
    assert refused(withdraw(request_id="not-alnum"), exchange.url).ret_code == 10001
    assert refused(withdraw(request_id="x" * 33), exchange.url).ret_code == 10001
    with pytest.raises(ValueError):
        run(withdraw("0"), exchange.url)
    assert exchange.balance() == Decimal(100)


@pytest.mark.parametrize("mode", ["original", "error"])
def test_a_repeated_request_id(exchange: BybitHandle, mode: Any) -> None:
    exchange.set_repeat_mode(mode)
    exchange.whitelist(ADDRESS)
    exchange.credit(Decimal(100))
    request_id = request_id_for("intent-42")
    first = run(withdraw("30", request_id=request_id), exchange.url)
    if mode == "original":
        assert run(withdraw("30", request_id=request_id), exchange.url) == first
    else:
        error = refused(withdraw("30", request_id=request_id), exchange.url)
        assert error.ret_code == 131082
        # it says the requestId was used, not whether a withdrawal exists
        assert classify(error) is Kind.UNKNOWN
    # one withdrawal either way: one debit, one row
    assert exchange.balance() == Decimal(70)
    page = run(lambda c: c.withdrawals(coin="USDC"), exchange.url)
    assert [r.withdraw_id for r in page.rows] == [first]
    # another requestId is another withdrawal, once the interval has passed
    exchange.set_withdraw_interval(0)
    assert run(withdraw("30", request_id=request_id_for("intent-43")), exchange.url) != first
    assert exchange.balance() == Decimal(40)


def test_one_withdrawal_per_chain_and_coin_within_the_interval(exchange: BybitHandle) -> None:
    """withdraw/create docs: "you can only withdraw once every 10 seconds per
    chain/coin combination". Within it the venue answers 90040, retryable after
    the documented 10 s; a repeat of the same requestId still answers the
    original id; nothing moves."""
    exchange.whitelist(ADDRESS)
    exchange.credit(Decimal(100))
    first = run(withdraw("1", request_id="first1"), exchange.url)
    error = refused(withdraw("2", request_id="second2"), exchange.url)
    assert error.ret_code == bybit_codes.WITHDRAW_INTERVAL
    assert classify(error) is Kind.RETRYABLE and error.retry_after == 10.0
    assert exchange.balance() == Decimal(99)
    assert run(withdraw("1", request_id="first1"), exchange.url) == first
    exchange.set_withdraw_interval(0)
    assert run(withdraw("2", request_id="second2"), exchange.url) != first
    assert exchange.balance() == Decimal(97)


def test_the_address_book_is_compared_in_the_addresss_case(exchange: BybitHandle) -> None:
    """Bybit: "the address is case sensitive, so use the exact same address
    added in address book". The book lists the address as it was added."""
    checksummed = "0x" + "cD" * 20
    exchange.whitelist(checksummed, chain=CHAIN)
    exchange.whitelist(ADDRESS)  # any chain: a universal address
    exchange.credit(Decimal(10))
    assert refused(withdraw(address=checksummed.lower()), exchange.url).ret_code == 131093
    book = run(lambda c: c.address_book(chain=CHAIN), exchange.url)
    assert [(e.coin, e.chain, e.address) for e in book] == [
        ("USDC", CHAIN, checksummed),
        ("baseCoin", CHAIN, ADDRESS),
    ]
    assert run(lambda c: c.address_book(coin="baseCoin"), exchange.url)[0].address == ADDRESS
    wid = run(withdraw("1", address=checksummed), exchange.url)
    record = run(lambda c: c.withdrawal(wid), exchange.url)
    assert record is not None and record.to_address == checksummed


def test_coin_info(exchange: BybitHandle) -> None:
    [chain] = run(lambda c: c.coin_info("USDC"), exchange.url)
    assert (chain.chain, chain.withdraw_open, chain.deposit_open) == (CHAIN, True, True)
    assert (chain.withdraw_fee, chain.withdraw_min, chain.withdraw_max) == (
        Decimal(0),
        Decimal("0.000001"),
        None,
    )
    assert chain.min_accuracy == 6 and chain.contract_address == "0x" + "11" * 20
    assert run(lambda c: c.coin_info("BTC"), exchange.url) == []
    # withdrawals suspended on the chain: coin info says so, withdraw/create refuses
    exchange.suspend_withdrawals(CHAIN)
    [chain] = run(lambda c: c.coin_info("USDC"), exchange.url)
    assert (chain.withdraw_open, chain.deposit_open) == (False, True)
    exchange.whitelist(ADDRESS)
    exchange.credit(Decimal(10))
    error = refused(withdraw("1"), exchange.url)
    assert error.ret_code == bybit_codes.WITHDRAWALS_CLOSED
    assert classify(error) is Kind.PERMANENT
    exchange.suspend_withdrawals(CHAIN, False)
    assert run(withdraw("1"), exchange.url)


def test_an_answer_the_table_does_not_know_is_unknown(exchange: BybitHandle) -> None:
    """A code missing from the table says nothing of what happened: UNKNOWN,
    never PERMANENT, and the venue did nothing."""
    exchange.whitelist(ADDRESS)
    exchange.credit(Decimal(10))
    exchange.inject_error(199_999, path="/v5/asset/withdraw/create", message="something new")
    error = refused(withdraw("1"), exchange.url)
    assert (error.ret_code, error.message) == (199_999, "something new")
    assert classify(error) is Kind.UNKNOWN and error.retry_after is None
    assert exchange.balance() == Decimal(10)


def test_the_rate_limit_gives_a_retry_hint(exchange: BybitHandle) -> None:
    """withdraw/create takes 5 a second per key: the sixth within the second is
    10006, its reset timestamp the client's retry_after; one injected 10006
    carries the reset the test chose."""

    async def burst(client: BybitClient) -> list[BaseException | str]:
        results: list[BaseException | str] = []
        for _ in range(6):
            try:
                results.append(await withdraw()(client))
            except BybitError as exc:
                results.append(exc)
        return results

    results = run(burst, exchange.url)
    codes = [r.ret_code if isinstance(r, BybitError) else 0 for r in results]
    assert codes == [131093] * 5 + [10006]
    limited = results[-1]
    assert isinstance(limited, BybitError)
    assert classify(limited) is Kind.RETRYABLE
    assert limited.retry_after is not None and 0 < limited.retry_after <= 1.0

    exchange.inject_rate_limit(
        reset_in_ms=4_000, path="/v5/asset/transfer/query-account-coins-balance"
    )
    error = refused(lambda c: c.fund_balance("USDC"), exchange.url)
    assert error.ret_code == 10006
    assert error.retry_after is not None and 3.9 <= error.retry_after <= 4.0
    assert run(lambda c: c.fund_balance("USDC"), exchange.url) == Decimal(0)


def test_the_rate_limit_headers_are_on_every_answer(exchange: BybitHandle) -> None:
    ts = str(int(time.time() * 1000))
    query = "accountType=FUND&coin=USDC"
    response = httpx.get(
        exchange.url + "/v5/asset/transfer/query-account-coins-balance?" + query,
        headers={
            "X-BAPI-API-KEY": KEY,
            "X-BAPI-TIMESTAMP": ts,
            "X-BAPI-RECV-WINDOW": "5000",
            "X-BAPI-SIGN": sign(SECRET, ts, KEY, "5000", query.encode()),
        },
    )
    assert response.json()["retCode"] == 0
    for header in ("X-Bapi-Limit", "X-Bapi-Limit-Status", "X-Bapi-Limit-Reset-Timestamp"):
        assert response.headers[header].isdigit()


def test_classify() -> None:
    # no answer: the request may have been applied
    assert classify(BybitUnavailable("timeout")) is Kind.UNKNOWN
    assert classify(httpx.ConnectError("refused")) is Kind.UNKNOWN
    assert classify(BybitUnavailable("HTTP 502", status=502)) is Kind.UNKNOWN
    # never sent, or a status that says it was not taken
    assert classify(BybitUnavailable("circuit open", sent=False)) is Kind.RETRYABLE
    assert classify(BybitUnavailable("HTTP 429", status=429)) is Kind.RETRYABLE
    assert classify(BybitError(10006, "Too many visits!", 1.0)) is Kind.RETRYABLE
    assert classify(BybitError(90040, "Please wait")) is Kind.RETRYABLE
    for code in (10000, 10014, 10016, 131082, 999999):
        assert classify(BybitError(code, "x")) is Kind.UNKNOWN
    for code in (10001, 10003, 10004, 131093, 131212):
        assert classify(BybitError(code, "x")) is Kind.PERMANENT
    assert classify(ValueError("bad amount")) is Kind.PERMANENT


def test_the_table_of_codes() -> None:
    """One row per code, each with Bybit's words and a kind; the waits where
    the docs give them; 131228/131229/131232 are the transfer's, not here."""
    codes = bybit_codes.CODES
    assert all(row.code == code and row.meaning for code, row in codes.items())
    assert codes[10006].reset_header and codes[10006].kind is Kind.RETRYABLE
    assert codes[90040].wait_s == 10.0 and codes[10002].wait_s == 0
    assert bybit_codes.HTTP_STATUSES[403].wait_s == 600
    assert not {131228, 131229, 131232} & set(codes)
    assert bybit_codes.lookup(123).kind is Kind.UNKNOWN


def test_an_http_status_carries_its_documented_wait() -> None:
    def ban(request: httpx.Request) -> httpx.Response:
        return httpx.Response(403, text="access too frequent")

    async def go() -> BybitUnavailable:
        transport = httpx.MockTransport(ban)
        async with (
            httpx.AsyncClient(transport=transport) as http,
            BybitClient("http://bybit.invalid", KEY, SECRET, client=http) as client,
        ):
            with pytest.raises(BybitUnavailable) as info:
                await client.fund_balance("USDC")
            return info.value

    error = asyncio.run(go())
    assert (error.status, error.retry_after, classify(error)) == (403, 600, Kind.RETRYABLE)
    assert SECRET not in str(error)


def test_request_id_for() -> None:
    first = request_id_for("movement-7/node-3/intent-1")
    assert first == request_id_for("movement-7/node-3/intent-1")
    assert len(first) == 32 and first.isalnum() and first.isascii()
    assert request_id_for("movement-7/node-3/intent-2") != first
    with pytest.raises(ValueError):
        request_id_for("")


def test_an_unreachable_exchange_is_unavailable() -> None:
    error: BaseException
    with pytest.raises(BybitUnavailable) as info:
        run(lambda c: c.fund_balance("USDC"), "http://127.0.0.1:9")
    error = info.value
    assert classify(error) is Kind.UNKNOWN


def test_the_secret_is_never_shown(exchange: BybitHandle, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    seen: list[str] = []

    async def everything(client: BybitClient) -> None:
        seen.append(repr(client))
        seen.append(repr(client.__dict__))
        for call in (withdraw(), lambda c: c.fund_balance("USDC")):
            try:
                await call(client)
            except BybitError as exc:
                seen.extend([str(exc), repr(exc), repr(exc.args)])
        with pytest.raises(TypeError):
            pickle.dumps(client._secret)

    run(everything, exchange.url)
    exchange.set_clock_offset(-10_000)
    run(everything, exchange.url)
    seen.append(repr(exchange))
    seen.append(str(exchange.status()))
    seen.extend(record.getMessage() for record in caplog.records)
    assert any("131093" in s for s in seen) and any("10002" in s for s in seen)
    assert not [s for s in seen if SECRET in s]


def test_a_deposit_is_read_on_its_own_chain_only() -> None:
    """A venue's deposit address is often one address on every EVM chain, and
    a transaction hash says nothing of its chain: a record of another chain
    with the same hash, to the same address, is not the deposit a step waits
    for (deposits_for)."""
    address = "0x" + "22" * 20
    chains = [
        BybitChain(name=name, chain_id=i + 1, rpc_url="http://127.0.0.1:9",
                   usdc="0x" + "11" * 20, deposit_address=address)
        for i, name in enumerate(("chain-a", "chain-b"))
    ]  # fmt: skip
    handle = serve(chains, {KEY: SECRET}, None, BybitConfig(security_check_s=3600, tick_s=0.5))
    tx = "0x" + "cd" * 32
    since_ms = int((time.time() - 3600) * 1000)
    try:
        handle.record_deposit("chain-b", tx, Decimal("5"))

        def read(chain: str) -> Callable[[BybitClient], Awaitable[list[Any]]]:
            return lambda c: deposits_for(c, "USDC", chain, tx, address, since_ms)

        assert run(read("chain-a"), handle.url) == []
        [record] = run(read("chain-b"), handle.url)
        assert (record.chain, record.amount, record.credited) == ("chain-b", Decimal("5"), True)
    finally:
        handle.stop()


def test_a_deposit_is_found_among_many_others(exchange: BybitHandle) -> None:
    """The venue is asked for one transaction's records (txID): a deposit
    older than the newest 500 of its window (ten pages, the most
    deposits_for reads) is still found, and is the one record read."""
    tx = "0x" + "cf" * 32
    exchange.set_clock_offset(-60_000)
    exchange.record_deposit(CHAIN, tx, Decimal("4"))
    exchange.set_clock_offset(0)
    for i in range(520):
        exchange.record_deposit(CHAIN, "0x" + f"{i:064x}", Decimal("1"))
    address = "0x" + "22" * 20
    since = int((time.time() - 3600) * 1000)
    [record] = run(lambda c: deposits_for(c, "USDC", CHAIN, tx, address, since), exchange.url)
    assert (record.tx_id, record.amount) == (tx, Decimal("4"))


def test_a_deposit_read_long_after_is_answered(exchange: BybitHandle) -> None:
    """The venue reads its records in windows of at most 30 days: a deposit
    read more than 30 days after the time it is read from (a withdrawal held
    for weeks after its deposit) is asked for the 30 days from then, and
    answered, not refused."""
    tx = "0x" + "ce" * 32
    exchange.record_deposit(CHAIN, tx, Decimal("3"))
    long_ago = int((time.time() - 40 * 24 * 3600) * 1000)
    address = "0x" + "22" * 20
    read = run(lambda c: deposits_for(c, "USDC", CHAIN, tx, address, long_ago), exchange.url)
    assert read == []  # recorded today, outside the 30 days read
    since = int((time.time() - 3600) * 1000)
    [record] = run(lambda c: deposits_for(c, "USDC", CHAIN, tx, address, since), exchange.url)
    assert record.amount == Decimal("3")


@pytest.mark.parametrize(
    "amount", ["1e3", "-5", "NaN", "Infinity", " 7", "+7", 1.5, 7, None, "0x10"]
)
def test_a_loose_number_from_the_venue_is_no_amount(amount: object) -> None:
    """The venue writes amounts as decimal strings: anything else (an exponent,
    a sign, NaN, a JSON number whose float rounds) is an answer the client does
    not understand, never money: the call is unavailable, retried or left."""
    row = {"coin": "USDC", "chain": "ETH", "amount": amount, "withdrawId": "1", "status": "success"}
    with pytest.raises(BybitUnavailable, match="not a plain decimal string"):
        WithdrawalRecord.from_row(row)
    assert WithdrawalRecord.from_row(row | {"amount": "123456789012.123456"}).amount == Decimal(
        "123456789012.123456"
    )
