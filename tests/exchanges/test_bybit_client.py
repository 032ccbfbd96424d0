"""The Bybit v5 client against the fake exchange over loopback, without a chain:
the signature over the exact bytes, the recv window, the refusals a withdrawal
can meet before anything moves, the rate limit and its retry hint, the repeated
requestId in both modes, the error classification, and the API secret kept out
of every log line, repr and error. (The walk on chain and the deposits:
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

from qtg_runner.exchanges.bybit import (
    BybitClient,
    BybitError,
    BybitUnavailable,
    Disposition,
    classify,
    request_id_for,
    sign,
)
from qtg_runner.world.bybit import BybitChain, BybitConfig, BybitHandle, serve

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
    assert classify(error) is Disposition.PERMANENT


def test_an_unknown_key_is_refused(exchange: BybitHandle) -> None:
    error = refused(lambda c: c.fund_balance("USDC"), exchange.url, key="nobody")
    assert error.ret_code == 10003
    assert classify(error) is Disposition.PERMANENT


def test_the_recv_window(exchange: BybitHandle) -> None:
    """Valid iff server_time - recvWindow <= timestamp < server_time + 1000."""
    url = exchange.url
    stale = refused(lambda c: c.fund_balance("USDC"), url, clock=lambda: time.time() - 6)
    assert stale.ret_code == 10002
    assert classify(stale) is Disposition.RETRYABLE
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
    assert classify(error) is Disposition.PERMANENT
    assert exchange.balance() == Decimal(100)
    # whitelisted for another chain only: still refused
    exchange.whitelist(ADDRESS, chain="elsewhere")
    assert refused(withdraw(), exchange.url).ret_code == 131093


def test_more_than_the_balance_is_refused(exchange: BybitHandle) -> None:
    exchange.whitelist(ADDRESS, chain=CHAIN)
    exchange.credit(Decimal("9.999999"))
    error = refused(withdraw("10"), exchange.url)
    assert error.ret_code == 131212
    assert classify(error) is Disposition.PERMANENT
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
        assert classify(error) is Disposition.ALREADY_REQUESTED
    # one withdrawal either way: one debit, one row
    assert exchange.balance() == Decimal(70)
    page = run(lambda c: c.withdrawals(coin="USDC"), exchange.url)
    assert [r.withdraw_id for r in page.rows] == [first]
    # another requestId is another withdrawal
    assert run(withdraw("30", request_id=request_id_for("intent-43")), exchange.url) != first
    assert exchange.balance() == Decimal(40)


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
    assert classify(limited) is Disposition.RETRYABLE
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
    assert classify(BybitUnavailable("timeout")) is Disposition.RETRYABLE
    assert classify(httpx.ConnectError("refused")) is Disposition.RETRYABLE
    assert classify(BybitError(10006, "Too many visits!", 1.0)) is Disposition.RETRYABLE
    assert classify(BybitError(131082, "Do not repeat")) is Disposition.ALREADY_REQUESTED
    for code in (10001, 10003, 10004, 131093, 131212, 999999):
        assert classify(BybitError(code, "x")) is Disposition.PERMANENT
    assert classify(ValueError("bad amount")) is Disposition.PERMANENT


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
    assert classify(error) is Disposition.RETRYABLE


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
