"""Errors as RFC 9457 problem details (application/problem+json).

Every answer that is not a success is one JSON object: ``type`` (a URI
reference naming the problem: ``/problems/QT004``), ``title`` (what kind of
problem, the same for every occurrence), ``status`` (the HTTP status),
``detail`` (this occurrence: the procedure's own message), and, for an
engine refusal, ``code`` (the SQLSTATE) and ``hint`` (what to do). A stack
trace, a query or a parameter never reaches a client: an error the API did
not expect is a 500 whose detail names a request id, and the traceback goes
to the API's log under that id.

``SQLSTATE_STATUS`` maps every QT code to its HTTP status and title, as
qtg_runner/errors.py (the error contract's one table) gives them;
``CLASS_STATUS`` maps the PostgreSQL classes a caller can cause: a login
refused (401), a missing grant (403), a value beyond its type (422), the
server unreachable or saturated (503).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse

from qtg_runner.errors import QT_ERRORS

PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True)
class Kind:
    status: int
    title: str


SQLSTATE_STATUS: dict[str, Kind] = {
    code: Kind(error.status, error.title) for code, error in QT_ERRORS.items()
}
"""Every QT SQLSTATE a procedure raises (qtg_runner/errors.py), as an HTTP status."""

CLASS_STATUS: dict[str, Kind] = {
    "28": Kind(401, "Authentication failed"),  # invalid authorization specification
    "42501": Kind(403, "Missing grant"),  # insufficient_privilege
    "22": Kind(422, "Invalid value"),  # data exception: a value beyond its type
    "08": Kind(503, "Database unreachable"),  # connection exception
    "53": Kind(503, "Database out of resources"),  # too many connections, ...
    "57014": Kind(503, "Statement timed out"),  # query_canceled
    "57P": Kind(503, "Database shutting down"),
    "55P03": Kind(503, "Lock not available"),
    "40": Kind(503, "Transaction rolled back, try again"),  # serialization, deadlock
}
"""PostgreSQL's own SQLSTATEs (a whole class by its two characters, or one code)."""

OTHER = {
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    406: "Not acceptable",
    408: "Request timeout",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Invalid request body",
    429: "Too many requests",
    500: "Internal error",
}


class Problem(Exception):
    """An answer that is an RFC 9457 problem: raise it from an endpoint."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        *,
        code: str | None = None,
        hint: str | None = None,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.code = code
        self.hint = hint
        self.extra = extra or {}
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": f"/problems/{self.code}" if self.code else "about:blank",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }
        if self.code is not None:
            body["code"] = self.code
            body["hint"] = self.hint
        body.update(self.extra)
        return body


def problem_response(problem: Problem) -> JSONResponse:
    return JSONResponse(
        problem.body(),
        status_code=problem.status,
        media_type=PROBLEM_JSON,
        headers=problem.headers,
    )


def kind_of(sqlstate: str) -> Kind | None:
    """The HTTP kind of a SQLSTATE, or None for one the API does not expect."""
    if sqlstate in SQLSTATE_STATUS:
        return SQLSTATE_STATUS[sqlstate]
    for prefix in sorted(CLASS_STATUS, key=len, reverse=True):
        if sqlstate.startswith(prefix):
            return CLASS_STATUS[prefix]
    return None


def from_sqlstate(sqlstate: str, message: str, hint: str | None) -> Problem | None:
    """The problem for a refusal the database answered with, or None when its
    SQLSTATE is not one a caller can cause (the caller then answers 500)."""
    kind = kind_of(sqlstate)
    if kind is None or kind.status == 500:
        return None
    return Problem(kind.status, kind.title, message, code=sqlstate, hint=hint)
