"""What Bybit v5's answers mean for a caller: one table of the retCodes (and
the HTTP statuses) this engine knows, each with Bybit's meaning, its kind and
the wait before the same request may be made again. The client
(qtg_runner.exchanges.bybit), the executors and the exchange double read it;
no other module names a code.

Kinds, for the one request with a side effect (POST /v5/asset/withdraw/create;
a read that fails is only read again later):

    RETRYABLE  refused before anything was done, for now: the same request
               (the same requestId) after ``wait`` may succeed.
    PERMANENT  refused before anything was done, for good: the same request
               can never succeed. Only this proves that a first request
               created nothing; it says nothing of an earlier request with the
               same requestId.
    UNKNOWN    the answer does not say whether a withdrawal exists: a server
               error or timeout, the venue saying the request was made before
               (131082, 10014), and every code missing from this table. Never
               concluded failed: the venue's records decide, else an operator.

Waits: 10006 carries the X-Bapi-Limit-Reset-Timestamp header (the time, in
ms, when the key's window for the path admits a request again); the
withdrawal interval is the documented 10 s per chain and coin; HTTP 403 (an
IP over its limit) the documented 10 minutes; 10002 at once (the next request
carries a fresh timestamp). Where the docs give none, the caller's default.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "BAD_SIGNATURE",
    "CODES",
    "HTTP_STATUSES",
    "INSUFFICIENT_BALANCE",
    "INVALID_KEY",
    "NOT_WHITELISTED",
    "OUTSIDE_RECV_WINDOW",
    "PARAMETER_ERROR",
    "REPEATED_REQUEST",
    "TOO_MANY_VISITS",
    "WITHDRAWALS_CLOSED",
    "WITHDRAW_INTERVAL",
    "WITHDRAW_INTERVAL_S",
    "Code",
    "Kind",
    "lookup",
]

# The source of every row: Bybit's v5 error-code page,
#     https://bybit-exchange.github.io/docs/v5/error
# (its "UTA" general codes and its "Asset" section; read in the docs'
# repository, bybit-exchange/docs, docs/v5/error.mdx at 072c197, 2026-07-24),
# with the rate limits of https://bybit-exchange.github.io/docs/v5/rate-limit
# and the withdrawal interval of
# https://bybit-exchange.github.io/docs/v5/asset/withdraw/withdraw
# ("you can only withdraw once every 10 seconds per chain/coin combination").
# That page gives the interval no code. 90040, "Please wait at least 10
# seconds between withdrawals", was on the error page from 2024-04-23 to
# 2024-05-17, then taken off as a wrong code; its message is what clients in
# the wild match. It is here as RETRYABLE after the documented 10 s: should
# the venue answer the interval with another code, that code is UNKNOWN here,
# which leaves the withdrawal to recovery, never failed. (131228, 131229 and
# 131232 are the universal transfer's: balance, compliance, transfers out.)


class Kind(enum.StrEnum):
    RETRYABLE = "retryable"
    PERMANENT = "permanent"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Code:
    """One answer: ``meaning`` in Bybit's words, ``kind``, and the wait before
    the same request again: ``wait_s`` seconds, or until the reset header's
    time (``reset_header``); neither: the caller's default."""

    code: int
    meaning: str
    kind: Kind
    wait_s: float | None = None
    reset_header: bool = False


PARAMETER_ERROR: Final = 10001
OUTSIDE_RECV_WINDOW: Final = 10002
INVALID_KEY: Final = 10003
BAD_SIGNATURE: Final = 10004
TOO_MANY_VISITS: Final = 10006
REPEATED_REQUEST: Final = 131082
NOT_WHITELISTED: Final = 131093
INSUFFICIENT_BALANCE: Final = 131212
WITHDRAWALS_CLOSED: Final = 131097
WITHDRAW_INTERVAL: Final = 90040
WITHDRAW_INTERVAL_S: Final = 10.0
"""One withdrawal per chain and coin within this many seconds."""

_R, _P, _U = Kind.RETRYABLE, Kind.PERMANENT, Kind.UNKNOWN


def _table(*rows: Code) -> Mapping[int, Code]:
    table = {row.code: row for row in rows}
    assert len(table) == len(rows), "a code is in the table once"
    return MappingProxyType(table)


CODES: Final[Mapping[int, Code]] = _table(
    # general (the page's "UTA" table)
    Code(10000, "Server Timeout", _U),
    Code(PARAMETER_ERROR, "Request parameter error", _P),
    Code(OUTSIDE_RECV_WINDOW, "The request time exceeds the time window range.", _R, wait_s=0),
    Code(INVALID_KEY, "API key is invalid.", _P),
    Code(BAD_SIGNATURE, "Error sign, please check your signature generation algorithm.", _P),
    Code(10005, "Permission denied, please check your API key permissions.", _P),
    Code(TOO_MANY_VISITS, "Too many visits. Exceeded the API Rate Limit.", _R, reset_header=True),
    Code(10007, "User authentication failed.", _P),
    Code(10008, "Common banned, please check your account mode", _P),
    Code(10009, "Service Restricted: Access is currently unavailable for your region.", _P),
    Code(10010, "Unmatched IP, please check your API key's bound IP addresses.", _P),
    Code(10014, "Invalid duplicate request.", _U),
    Code(10016, "Server error.", _U),
    Code(10017, "Route not found.", _P),
    Code(10024, "Compliance rules triggered", _P),
    Code(10027, "Transactions are banned.", _P),
    Code(10429, "System level frequency protection", _R),
    # asset: withdrawals
    Code(131001, "openapi svc error", _U),
    Code(131002, "Parameter error", _P),
    Code(131003, "Internal error", _U),
    Code(131004, "KYC needed", _P),
    Code(131065, "Your KYC information is incomplete", _P),
    Code(131066, "This address does not support withdrawals for the time being.", _P),
    Code(131067, "Travel rule verification failed", _P),
    Code(131068, "Travel rule information is insufficient", _P),
    Code(131069, "Unable to withdraw to the receipt", _P),
    Code(131070, "The recipient's name is mismatched with the targeted exchange.", _P),
    Code(131071, "The recipient has not undergone KYC verification.", _P),
    Code(131072, "Your withdrawal currency is not supported by the target exchange.", _P),
    Code(131073, "Your withdrawal address has not been included in the target exchange.", _P),
    Code(131074, "Beneficiary info is required", _P),
    Code(131075, "InternalAddressCannotBeYourself", _P),
    Code(131076, "internal transfer not support subaccounts", _P),
    Code(131077, "receive user not exist", _P),
    Code(131078, "receive user deposit has been banned", _P),
    Code(131079, "receive user need kyc", _P),
    Code(131080, "User left retry times is zero", _P),
    Code(131081, "Do not input memo/tag,please.", _P),
    Code(REPEATED_REQUEST, "Do not repeat the request", _U),
    Code(131083, "Withdraw only allowed from address book", _P),
    Code(131084, "Withdraw failed because of Uta Upgrading", _R),
    Code(131085, "Withdrawal amount is greater than your availale balance", _P),
    Code(131086, "Withdrawal amount exceeds risk limit", _P),
    Code(131087, "your current account spot risk level is too high, withdrawal is prohibited", _P),
    Code(131088, "The withdrawal amount exceeds the remaining withdrawal limit", _P),
    Code(131089, "User sensitive operation, withdrawal is prohibited within 24 hours", _P),
    Code(131090, "User withdraw has been banned", _P),
    Code(131091, "Blocked login status does not allow withdrawals", _P),
    Code(131092, "User status is abnormal", _P),
    Code(NOT_WHITELISTED, "The withdrawal address is not in the whitelist", _P),
    Code(131094, "UserId is not in the whitelist", _P),
    Code(131095, "Withdrawl amount exceeds the 24 hour platform limit", _P),
    Code(131096, "Withdraw amount does not satify the lower limit or upper limit", _P),
    Code(WITHDRAWALS_CLOSED, "Withdrawal of this currency has been closed", _P),
    Code(131098, "Withdrawal currently is not availble from new address", _P),
    Code(INSUFFICIENT_BALANCE, "Insufficient balance", _P),
    Code(131230, "The system is busy, please try again later", _R),
    Code(
        WITHDRAW_INTERVAL,
        "Please wait at least 10 seconds between withdrawals.",
        _R,
        wait_s=WITHDRAW_INTERVAL_S,
    ),
)
"""Every retCode this engine knows (0 is OK, not here)."""

HTTP_STATUSES: Final[Mapping[int, Code]] = _table(
    Code(403, "Forbidden request: the IP rate limit breached, or a U.S. IP", _R, wait_s=600),
    Code(429, "System level frequency protection. Please retry when encounter this", _R),
)
"""HTTP statuses other than 200 that say the request was not taken; any
other status (a gateway's 5xx) does not say: UNKNOWN."""


def lookup(code: int) -> Code:
    """The table's row for ``code``; a code it does not have is UNKNOWN."""
    return CODES.get(code) or Code(code, "a code this engine does not know", Kind.UNKNOWN)
