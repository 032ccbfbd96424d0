"""qtg_runner.chains.evm without a node: the answers a node should never give
(through httpx.MockTransport), URL redaction, the error wordings of other nodes,
fee arithmetic, the ERC-20 codec against eth-abi, and raw transactions read back.
No anvil needed: these run everywhere."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from endpoint_support import Endpoint
from eth_abi import encode
from eth_account import Account

from qtg_runner.chains import evm
from qtg_runner.chains.evm import (
    EvmRpc,
    FeeCapExceeded,
    Fees,
    Log,
    Receipt,
    RpcBadResponse,
    RpcError,
    RpcErrorKind,
    RpcUnavailable,
    Transfer,
)
from qtg_runner.circuit import Circuit

URL = "https://user:PASS@node.example:8545/v2/KEYKEYKEYKEYKEYKEYKEYKEY?apikey=SECRET#frag"
SECRETS = ("PASS", "KEYKEY", "SECRET", "frag")

Handler = Callable[[httpx.Request], httpx.Response]


def call(handler: Handler, method: str = "eth_blockNumber", **kwargs: Any) -> Any:
    async def main() -> Any:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            # a circuit of its own: each call is a node of its own (a timeout
            # here must not refuse the next test's calls to URL)
            rpc = EvmRpc(URL, client=client, circuit=Circuit(URL), **kwargs)
            return await rpc.request(method, [])

    return asyncio.run(main())


def answer(result: Any = "0x10", **extra: Any) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        return httpx.Response(
            200, json={"jsonrpc": "2.0", "id": body["id"], "result": result} | extra
        )

    return handler


def assert_no_secret(error: BaseException) -> None:
    """Neither the error nor its traceback as a log would print it (chained ones included)."""
    text = f"{error} {error!r} " + "".join(traceback.format_exception(error))
    for secret in SECRETS:
        assert secret not in text, text


# -- the transport's failures ----------------------------------------------------------


def test_a_good_answer_is_its_result_and_no_log_line_shows_the_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    assert call(answer("0x10")) == "0x10"
    assert call(answer(None)) is None
    for secret in SECRETS:
        assert secret not in caplog.text


@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_5xx_and_429_are_unavailable(status: int) -> None:
    with pytest.raises(RpcUnavailable, match=f"HTTP {status}") as caught:
        call(lambda r: httpx.Response(status, text=f"{URL} down"))
    assert_no_secret(caught.value)


def test_a_transport_error_quoting_the_url_is_unavailable_and_scrubbed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot reach {request.url} (apikey=SECRET)", request=request)

    with pytest.raises(RpcUnavailable, match="ConnectError") as caught:
        call(handler)
    assert_no_secret(caught.value)
    assert "node.example:8545/v2/***" in str(caught.value)


def test_a_timeout_is_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(RpcUnavailable, match="no answer within") as caught:
        call(handler)
    assert_no_secret(caught.value)


def test_a_node_that_drips_its_answer_is_cut_off_by_the_total_timeout(endpoint: Endpoint) -> None:
    endpoint.drip()  # a real loopback node, a byte every 50 ms

    async def main() -> Any:
        async with EvmRpc(endpoint.url + "/", timeout=0.2, circuit=Circuit(URL)) as rpc:
            return await rpc.request("eth_blockNumber", [])

    started = time.monotonic()
    with pytest.raises(RpcUnavailable, match=r"no answer within 0\.2s"):
        asyncio.run(main())
    assert time.monotonic() - started < 2
    assert endpoint.requests == ["POST /"]


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (httpx.Response(200, content=b"<html>hello</html>"), "not JSON"),
        (httpx.Response(200, json=[1, 2]), "not a JSON object"),
        (httpx.Response(401, text="invalid api key"), "HTTP 401"),
        (httpx.Response(404, json={"message": "no route"}), "HTTP 404 without a JSON-RPC error"),
        (httpx.Response(200, json={"jsonrpc": "2.0", "id": 999, "result": "0x1"}), "another"),
        (httpx.Response(200, json={"jsonrpc": "2.0", "id": 1}), "neither result nor error"),
        (httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "error": "boom"}), "not an object"),
    ],
)
def test_answers_that_are_not_json_rpc_are_bad_responses(
    response: httpx.Response, match: str
) -> None:
    with pytest.raises(RpcBadResponse, match=match) as caught:
        call(lambda r: response)
    assert_no_secret(caught.value)


def test_a_body_over_the_bound_is_refused_declared_or_streamed() -> None:
    big = b'{"jsonrpc":"2.0","id":1,"result":"0x' + b"0" * 2000 + b'"}'
    with pytest.raises(RpcBadResponse, match="larger than 1000 bytes"):
        call(lambda r: httpx.Response(200, content=big), max_response_bytes=1000)

    async def chunks() -> AsyncIterator[bytes]:
        yield big[:600]
        yield big[600:]

    def streamed(request: httpx.Request) -> httpx.Response:  # no content-length
        return httpx.Response(200, content=chunks())

    with pytest.raises(RpcBadResponse, match="larger than 1000 bytes"):
        call(streamed, max_response_bytes=1000)
    assert call(lambda r: httpx.Response(200, content=big), max_response_bytes=len(big)) is not None


def test_json_nested_too_deeply_is_refused_before_parsing() -> None:
    import web3  # noqa: F401  (py_ecc raises the recursion limit to 100000)

    deep = b'{"jsonrpc":"2.0","id":1,"result":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    with pytest.raises(RpcBadResponse, match="nested too deeply"):
        call(lambda r: httpx.Response(200, content=deep))
    # brackets inside strings do not count; a receipt-like depth passes
    fine = {"a": [{"b": ["[[[[" * 100]}] * 50}
    assert call(answer(fine)) == fine


def test_a_json_rpc_error_is_an_rpc_error_with_its_kind_even_on_http_400() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        error = {"code": -32000, "message": "already known", "data": "0x"}
        return httpx.Response(400, json={"jsonrpc": "2.0", "id": body["id"], "error": error})

    with pytest.raises(RpcError) as caught:
        call(handler, "eth_sendRawTransaction")
    error = caught.value
    assert (error.code, error.message, error.kind) == (
        -32000,
        "already known",
        evm.RpcErrorKind.ALREADY_KNOWN,
    )
    assert error.method == "eth_sendRawTransaction" and error.data == "0x"


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        # geth / erigon / nethermind / besu / providers
        ("already known", RpcErrorKind.ALREADY_KNOWN),
        ("known transaction: 0xabc", RpcErrorKind.ALREADY_KNOWN),
        ("Known transaction", RpcErrorKind.ALREADY_KNOWN),
        ("AlreadyKnown", RpcErrorKind.ALREADY_KNOWN),
        ("transaction already imported", RpcErrorKind.ALREADY_KNOWN),
        ("nonce too low: next nonce 5, tx nonce 4", RpcErrorKind.NONCE_TOO_LOW),
        ("OldNonce", RpcErrorKind.NONCE_TOO_LOW),
        ("replacement transaction underpriced", RpcErrorKind.UNDERPRICED),
        ("transaction underpriced: tip needed 1, tip permitted 0", RpcErrorKind.UNDERPRICED),
        ("ReplacementNotAllowed: fee too low", RpcErrorKind.UNDERPRICED),
        (
            "insufficient funds for gas * price + value: have 0 want 1",
            RpcErrorKind.INSUFFICIENT_FUNDS,
        ),
        ("Insufficient funds for gas * price + value", RpcErrorKind.INSUFFICIENT_FUNDS),
        ("execution reverted: ERC20: transfer amount exceeds balance", RpcErrorKind.REVERTED),
        ("max fee per gas less than block base fee", RpcErrorKind.OTHER),
        ("nonce too high", RpcErrorKind.OTHER),
        ("invalid chain id for signer", RpcErrorKind.OTHER),
    ],
)
def test_node_wordings_are_classified(message: str, kind: RpcErrorKind) -> None:
    assert evm.classify(message) is kind


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (URL, "https://node.example:8545/v2/***"),
        ("http://127.0.0.1:8545", "http://127.0.0.1:8545"),
        (
            "https://mainnet.infura.io/v3/0123456789abcdef0123456789abcdef",
            "https://mainnet.infura.io/v3/***",
        ),
        ("https://rpc.example/eth?key=SECRET", "https://rpc.example/eth"),
        ("http://[::1]:8545/rpc", "http://[::1]:8545/rpc"),
    ],
)
def test_redact_url_keeps_scheme_host_port_and_a_keyless_path(url: str, shown: str) -> None:
    assert evm.redact_url(url) == shown
    assert repr(EvmRpc(url)) == f"EvmRpc({shown!r})"


def test_an_rpc_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="http") as caught:
        EvmRpc("ws://node.example/rpc?apikey=SECRET")
    assert "SECRET" not in str(caught.value)


# -- fees ----------------------------------------------------------------------------


def test_bump_raises_both_caps_by_an_eighth_rounded_up() -> None:
    assert evm.bump(Fees(100, 10), max_fee_cap=1000, priority_fee_cap=100) == Fees(113, 12)
    assert evm.bump(Fees(80, 8), max_fee_cap=90, priority_fee_cap=9) == Fees(90, 9)
    # nothing to raise by an eighth: one wei more still makes the replacement differ
    assert evm.bump(Fees(1, 0), max_fee_cap=10, priority_fee_cap=10) == Fees(2, 1)
    # a fresher suggestion above the bump wins
    fresh = Fees(500, 50)
    assert evm.bump(Fees(100, 10), max_fee_cap=1000, priority_fee_cap=100, at_least=fresh) == fresh


@pytest.mark.parametrize(("max_cap", "prio_cap"), [(112, 100), (1000, 11)])
def test_bump_past_a_cap_is_refused(max_cap: int, prio_cap: int) -> None:
    with pytest.raises(FeeCapExceeded, match="above the caps"):
        evm.bump(Fees(100, 10), max_fee_cap=max_cap, priority_fee_cap=prio_cap)


def test_fees_are_consistent() -> None:
    with pytest.raises(ValueError, match="above the max fee"):
        Fees(max_fee_per_gas=1, max_priority_fee_per_gas=2)
    with pytest.raises(ValueError):
        Fees(max_fee_per_gas=-1, max_priority_fee_per_gas=0)


# -- ERC-20 --------------------------------------------------------------------------

ALICE = "0x" + "a1" * 20
BOB = "0x" + "b0" * 20
TOKEN = "0x" + "70" * 20


def test_transfer_calldata_equals_the_abi_encoding() -> None:
    data = evm.transfer_calldata(BOB, 123_456)
    assert data[:4].hex() == "a9059cbb"
    assert data[4:] == encode(["address", "uint256"], [BOB, 123_456])
    assert evm.TRANSFER_TOPIC == (
        "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"
    )
    with pytest.raises(ValueError):
        evm.transfer_calldata(BOB, -1)
    with pytest.raises(ValueError):
        evm.transfer_calldata(BOB, 2**256)
    with pytest.raises(ValueError):
        evm.transfer_calldata("0x1234", 1)


def test_addresses_are_lower_case_and_checksums_are_checked() -> None:
    checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
    assert evm.normalize_address(checksummed) == checksummed.lower()
    assert evm.normalize_address(checksummed.upper().replace("0X", "0x")) == checksummed.lower()
    with pytest.raises(ValueError, match="checksum"):
        evm.normalize_address(checksummed[:-1] + "D")
    for bad in ("", "0x", "0x" + "g" * 40, "5aaeb6053f3e94c9b9a09f33669435e7ef1beaed00"):
        with pytest.raises(ValueError):
            evm.normalize_address(bad)


def _topic(address: str) -> str:
    return "0x" + "00" * 12 + address[2:]


def _log(
    index: int, topics: list[str], value: int | bytes, address: str = TOKEN, removed: bool = False
) -> Log:
    data = value if isinstance(value, bytes) else value.to_bytes(32, "big")
    return Log(address, tuple(topics), data, index, 7, "0x" + "cd" * 32, removed)


def test_decode_transfers_keeps_erc20_transfer_logs_only() -> None:
    t = evm.TRANSFER_TOPIC
    approval = "0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925"
    logs = (
        _log(0, [t, _topic(ALICE), _topic(BOB)], 5),
        _log(1, [t, _topic(ALICE), _topic(BOB), "0x" + "00" * 31 + "01"], b""),  # ERC-721
        _log(2, [approval, _topic(ALICE), _topic(BOB)], 9),
        _log(3, [t, _topic(BOB), _topic(ALICE)], 6, address=BOB),
        _log(4, [t, _topic(ALICE), _topic(BOB)], b"\x01"),  # malformed value
        _log(5, [t, "0x" + "ff" * 32, _topic(BOB)], 1),  # not an address word
        _log(6, [t, _topic(ALICE), _topic(BOB)], 8, removed=True),
    )
    receipt = Receipt("0x" + "cd" * 32, 1, 7, "0x" + "ee" * 32, ALICE, TOKEN, logs, 50_000, 10)
    assert evm.decode_transfers(receipt) == [
        Transfer(TOKEN, ALICE, BOB, 5, 0),
        Transfer(BOB, BOB, ALICE, 6, 3),
    ]


# -- transactions --------------------------------------------------------------------


def test_built_transactions_sign_and_read_back() -> None:
    account = Account.create()
    fees = Fees(30, 2)
    tx = evm.build_transfer(31337, TOKEN, BOB, 7, 4, fees, 60_000)
    assert tx["type"] == 2 and tx["value"] == 0 and tx["accessList"] == []
    raw = bytes(account.sign_transaction(tx).raw_transaction)
    decoded = evm.decode_raw(raw)
    assert decoded.sender == str(account.address).lower()
    assert (decoded.chain_id, decoded.nonce, decoded.to, decoded.gas) == (31337, 4, TOKEN, 60_000)
    assert decoded.data == evm.transfer_calldata(BOB, 7) and decoded.fees == fees
    assert decoded.tx_hash == evm.tx_hash_of(raw)

    close = evm.self_transfer(31337, str(account.address), 9, fees)
    back = evm.decode_raw(bytes(account.sign_transaction(close).raw_transaction))
    assert (back.to, back.value, back.data, back.gas, back.nonce) == (
        str(account.address).lower(),
        0,
        b"",
        21_000,
        9,
    )


def test_a_recorded_transaction_signs_again_at_another_nonce_or_with_other_fees() -> None:
    account = Account.create()
    first = evm.decode_raw(
        bytes(
            account.sign_transaction(
                evm.build_transfer(10, TOKEN, BOB, 7, 4, Fees(30, 2), 60_000)
            ).raw_transaction
        )
    )
    again = evm.decode_raw(
        bytes(account.sign_transaction(first.to_tx(nonce=5, fees=Fees(40, 3))).raw_transaction)
    )
    assert (again.nonce, again.fees) == (5, Fees(40, 3))
    assert (again.chain_id, again.sender, again.to, again.data, again.gas, again.value) == (
        first.chain_id,
        first.sender,
        first.to,
        first.data,
        first.gas,
        first.value,
    )
    assert again.tx_hash != first.tx_hash
    same = evm.decode_raw(bytes(account.sign_transaction(first.to_tx()).raw_transaction))
    assert same == first  # RFC 6979: the same transaction signs to the same bytes


@pytest.mark.parametrize("raw", [b"", b"\x02", b"\x02\xc0", b"\xf8\x00", bytes(100)])
def test_decode_raw_refuses_what_is_not_a_signed_eip1559_transaction(raw: bytes) -> None:
    with pytest.raises(ValueError):
        evm.decode_raw(raw)


def test_a_transaction_needs_a_chain_gas_and_a_nonce() -> None:
    for args in ((0, 1, 21_000), (1, -1, 21_000), (1, 0, 0)):
        chain_id, nonce, gas = args
        with pytest.raises(ValueError):
            evm.build_transfer(chain_id, TOKEN, BOB, 1, nonce, Fees(2, 1), gas)
