"""The operator page at `/`: server-rendered HTML, no JavaScript at all.

Sign-in is per person: the login and password a person types open ONE
database connection as their login, which the page keeps for their session
(the password itself is dropped at once, never stored). Everything the page
shows is read on that connection, and its approve and cancel buttons call
approve_movement / cancel_movement on it (its priority form, on a movement
not finished, set_priority), so the actor, the four-eyes rule and every
grant are the database's, exactly as in psql.

Pauses: the home page lists the scopes paused (or tripped) now, each with a
resume button (reset_breaker), and a form that pauses a movement, a lane, a
venue, a chain or the network (trip_breaker), for a time if given.

Rehearsals: a movement awaiting approval has a Rehearse button, which asks
for one (request_rehearsal): the page cannot run a rehearsal (anvil, the
chains' RPC URLs), an operator's rehearsal service does (`qtg rehearse
--requested`), and the page says who asked, when, and that the service
serves it. The latest rehearsal is shown (outcome, who recorded it, when,
its lines folded), a failed one in red beside the approve button, and an
approval's advice (QT025: approved after a failed rehearsal, or one the
registry has changed since) after it.

Refreshing: an operator may turn it on (the search kept); the page itself is
then not reloaded, so what is typed in its search and pause forms and where
it is scrolled stay, while a frame inside it (/live, framed by this site
alone) shows the pipeline, the pauses, what needs an operator, the
movements waiting and the search's results, and reloads itself. The frame
has no forms: to act, the operator stops refreshing.

Cross-site requests: the session cookie is HttpOnly and SameSite=Strict (and
Secure when serving TLS); every form that changes something carries the
session's CSRF token (256 random bits, compared in constant time), and a
POST from another site (api/guard.py's ``cross_site``: its Origin, else
Sec-Fetch-Site, else Referer) is refused. The page forbids framing and every
script (Content-Security-Policy).

A form is read only once the POST is known to be this site's and, but for
the sign-in, a session's; it is counted as it arrives and refused past
16 KiB. Failed sign-ins count in the API's throttle (api/guard.py), per
login and per address, like failed Basic credentials.

A session ends after ``session_seconds`` (8 h), on sign-out, or when its
connection ends (the server restarted, or the admin revoked the login:
`qtg api token revoke` ends the login's sessions).
"""

from __future__ import annotations

import asyncio
import hmac
import html
import json
import re
import secrets
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, date, datetime, timedelta
from datetime import time as dt_time
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlencode

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from psycopg.rows import dict_row

from qtg_runner.api import reads
from qtg_runner.api.guard import authenticate, client_address, cross_site
from qtg_runner.api.identity import LOGIN_PATTERN, MAX_PASSWORD, Credentials
from qtg_runner.api.problems import Problem
from qtg_runner.db import procs

COOKIE = "qtg_session"
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "frame-src 'self'; frame-ancestors 'none'; base-uri 'none'"
)
LIVE_CSP = CSP.replace("frame-ancestors 'none'", "frame-ancestors 'self'")
"""The live frame's: framed by the home page alone (this site's)."""
MAX_FORM_BYTES = 16 * 1024


@dataclass
class Session:
    login: str
    conn: psycopg.AsyncConnection[Any]
    csrf: str
    expires: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    flash: list[tuple[str, str]] = field(default_factory=list)


class Sessions:
    def __init__(self, ttl: float, limit: int, per_login: int = 3) -> None:
        self.ttl = ttl
        self.limit = limit
        self.per_login = per_login
        self.by_id: dict[str, Session] = {}
        self.closing: set[asyncio.Future[None]] = set()

    def get(self, request: Request) -> Session | None:
        sid = request.cookies.get(COOKIE)
        session = self.by_id.get(sid) if sid else None
        if session is None:
            return None
        if session.expires < time.monotonic() or session.conn.closed:
            self.by_id.pop(sid or "", None)
            task = asyncio.ensure_future(session.conn.close())
            self.closing.add(task)
            task.add_done_callback(self.closing.discard)
            return None
        return session

    async def add(self, session: Session) -> str:
        now = time.monotonic()
        for sid, old in list(self.by_id.items()):
            if old.expires < now or old.conn.closed:
                del self.by_id[sid]
                await old.conn.close()
        # one login's sessions are bounded: its oldest goes (insertion order)
        mine = [sid for sid, old in self.by_id.items() if old.login == session.login]
        for sid in mine[: max(0, len(mine) - self.per_login + 1)]:
            await self.by_id.pop(sid).conn.close()
        if len(self.by_id) >= self.limit:
            await session.conn.close()
            raise Problem(503, "Too many sessions", "too many people are signed in; try later")
        sid = secrets.token_urlsafe(32)
        self.by_id[sid] = session
        return sid

    async def drop(self, request: Request) -> None:
        sid = request.cookies.get(COOKIE)
        session = self.by_id.pop(sid, None) if sid else None
        if session is not None:
            await session.conn.close()

    async def close_all(self) -> None:
        for session in self.by_id.values():
            await session.conn.close()
        self.by_id.clear()


def e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


STYLE = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}
td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f3f3f3} .state{font-weight:600} form.inline{display:inline}
.flash-error{background:#fde2e2;padding:.5rem;border:1px solid #e99}
.flash-ok{background:#e2f5e2;padding:.5rem;border:1px solid #9c9}
.flash-warn{background:#fff3cd;padding:.5rem;border:1px solid #dc6}
.warn,.outcome-failed{color:#c22;font-weight:600} .outcome-passed{color:#2a2;font-weight:600}
details{max-width:100%} pre.lines{max-width:100%;overflow-wrap:anywhere;margin:.25rem 0}
pre{margin:0;max-width:40rem;white-space:pre-wrap;overflow-wrap:anywhere;font-size:.85em}
summary{cursor:pointer;max-width:18rem;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
.dag{display:flex;gap:1rem;align-items:flex-start;margin:.5rem 0 1.5rem}
.level{display:flex;flex-direction:column;gap:.5rem}
.node{border:2px solid #888;border-radius:.4rem;padding:.3rem .6rem;min-width:9rem}
.COMPLETED{border-color:#2a2} .FAILED{border-color:#c22} .UNKNOWN{border-color:#c80}
.SUBMITTING,.SUBMITTED,.OBSERVING{border-color:#26c} .SKIPPED{border-color:#bbb;color:#888}
"""


def layout(
    title: str,
    body: str,
    session: Session | None,
    refresh_s: int | None = None,
    framed: bool = False,
) -> HTMLResponse:
    """A page; ``refresh_s``: it reloads itself so often; ``framed``: the home
    page's live frame (its links open in the whole window, only this site may
    frame it, and it shows neither the login nor the flashes)."""
    who = ""
    if session is not None and not framed:
        who = (
            f'<p>signed in as <b id="login">{e(session.login)}</b> '
            f'<form class="inline" method="post" action="/signout">'
            f'<input type="hidden" name="csrf" value="{e(session.csrf)}">'
            f'<button type="submit">sign out</button></form> · <a href="/">pipeline</a></p>'
        )
        flashes = "".join(
            f'<p class="flash-{e(kind)}" id="{"advice" if kind == "warn" else "flash"}">'
            f"{e(text)}</p>"
            for kind, text in session.flash
        )
        session.flash.clear()
        who += flashes
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
        + (f"<meta http-equiv='refresh' content='{int(refresh_s)}'>" if refresh_s else "")
        + ("<base target='_top'>" if framed else "")
        + f"<style>{STYLE}</style></head><body>"
        + ("" if framed else f"<h1>{e(title)}</h1>")
        + f"{who}{body}</body></html>"
    )
    if framed:
        return HTMLResponse(page, headers=LIVE_HEADERS)
    return HTMLResponse(page, headers=PAGE_HEADERS)


PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
LIVE_HEADERS = PAGE_HEADERS | {
    "Content-Security-Policy": LIVE_CSP,
    "X-Frame-Options": "SAMEORIGIN",
}


def table(rows: list[dict[str, Any]], columns: list[str], row_id: str | None = None) -> str:
    head = "".join(f"<th>{e(c)}</th>" for c in columns)
    body = ""
    for row in rows:
        attr = f' id="{e(row_id)}-{e(row.get("movement_id"))}"' if row_id else ""
        cells = "".join(f"<td>{cell(c, row.get(c))}</td>" for c in columns)
        body += f"<tr{attr}>{cells}</tr>"
    return f"<table><tr>{head}</tr>{body}</table>"


def amount(value: Any) -> str:
    """An amount the one way the page shows amounts: thousands grouped, at
    most 6 decimal places (USDC's), no trailing zeros: 1,234.5."""
    try:
        number = Decimal(str(value))
    except (ArithmeticError, ValueError):
        return str(value)
    if not number.is_finite():
        return str(value)
    text = f"{number:,.6f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def cell(column: str, value: Any) -> str:
    if column in ("amount", "actual", "unexplained") and value is not None:
        return e(amount(value))
    if column == "movement_id" and value is not None:
        return f'<a href="/movements/{e(value)}">{e(value)}</a>'
    if column in ("state", "request_state"):
        return f'<span class="state">{e(value)}</span>'
    if isinstance(value, dict | list):
        # folded: a line to open, never wider than the screen
        text = json.dumps(value, indent=1, sort_keys=True)
        if not value:
            return e(json.dumps(value))
        first = json.dumps(value, sort_keys=True)
        short = first if len(first) <= 60 else first[:57] + "..."
        return f"<details><summary>{e(short)}</summary><pre>{e(text)}</pre></details>"
    return e(value)


def timeline(events: list[dict[str, Any]]) -> str:
    """A movement's audit trail as it happened: each event's time, actor,
    what it moved and why (its reason, where it gave one)."""
    if not events:
        return "<p>nothing recorded yet</p>"
    rows = "".join(
        f"<tr id='event-{e(ev.get('audit_id'))}'><td>{e(when(ev.get('occurred_at')))}</td>"
        f"<td>{e(ev.get('actor'))}</td><td>{e(ev.get('entity'))} {e(ev.get('entity_id'))}</td>"
        f"<td>{e(ev.get('action'))}</td>"
        f"<td>{e(ev.get('from_state') or '')}"
        f"{' → ' if ev.get('to_state') and ev.get('to_state') != ev.get('from_state') else ''}"
        f"{e(ev.get('to_state') if ev.get('to_state') != ev.get('from_state') else '')}</td>"
        f"<td>{e(reason_of(ev.get('detail')))}</td>"
        f"<td>{cell('detail', ev.get('detail'))}</td></tr>"
        for ev in events
    )
    head = "".join(
        f"<th>{h}</th>" for h in ("when", "actor", "of", "action", "state", "why", "detail")
    )
    return f"<table id='timeline'><tr>{head}</tr>{rows}</table>"


def reason_of(detail: Any) -> str:
    """The reason an event gives (an operator's words), else ''."""
    if not isinstance(detail, dict):
        return ""
    for key in ("reason", "confirmed_because", "requested_because", "stop_reason"):
        if isinstance(detail.get(key), str) and detail[key]:
            return str(detail[key])
    return ""


def when(value: Any) -> str:
    """A time the reads give (ISO 8601) as people read it, in UTC."""
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def rehearsal_block(movement: dict[str, Any]) -> str:
    """The movement's latest rehearsal (outcome, who, when, its lines folded)
    and its latest rehearsal request: open, served by `qtg rehearse
    --requested`, or finished with a problem."""
    rehearsal, request = movement.get("rehearsal"), movement.get("rehearsal_request")
    parts = []
    if request is not None and request["open"]:
        claimed = (
            f"; claimed by {e(request['claimed_by'])} at {e(when(request['claimed_at']))}"
            if request["claimed_by"]
            else ""
        )
        parts.append(
            f'<p id="rehearsal-request">rehearsal requested by {e(request["requested_by"])} at '
            f"{e(when(request['requested_at']))}, served by <code>qtg rehearse --requested</code>"
            f"{claimed}</p>"
        )
    elif request is not None and request["problem"]:
        parts.append(
            f'<p class="flash-error" id="rehearsal-problem">the rehearsal requested by '
            f"{e(request['requested_by'])} at {e(when(request['requested_at']))} could not run: "
            f"{e(request['problem'])}</p>"
        )
    if rehearsal is None:
        parts.append('<p id="rehearsal">not rehearsed</p>')
    else:
        outcome = str(rehearsal["outcome"])
        lines = [str(line) for line in rehearsal["lines"]]
        parts.append(
            f'<p id="rehearsal">last rehearsal: <span class="outcome-{e(outcome)}" '
            f'id="rehearsal-outcome">{e(outcome)}</span>, recorded by '
            f'<span id="rehearsal-by">{e(rehearsal["recorded_by"])}</span> at '
            f"{e(when(rehearsal['recorded_at']))} (rehearsal {e(rehearsal['rehearsal_id'])})</p>"
        )
        if rehearsal.get("registry_changed"):
            parts.append(
                '<p class="flash-error" id="rehearsal-registry-changed">the registry has changed'
                " since this rehearsal ran: its outcome speaks of another route than the one"
                " that will run; rehearse again</p>"
            )
        parts.append(
            f'<details id="rehearsal-details"><summary>its {len(lines)} lines</summary>'
            f'<pre class="lines" id="rehearsal-lines">{e(chr(10).join(lines))}</pre></details>'
        )
    return "<h2>Rehearsal</h2>" + "".join(parts)


FINISHED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "EXPIRED"})
"""A movement in one of these states has no priority form."""


class BadForm(Exception):
    """A form field the page cannot send to the database as it is."""


def form_priority(text: str) -> int:
    """The priority form's number, within create_movement's bounds (integer's)."""
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise BadForm(f"priority must be a whole number, got {text[:32]!r}") from None
    if not -(2**31) <= value <= 2**31 - 1:
        raise BadForm(f"priority must be within {-(2**31)}..{2**31 - 1}, got {text[:32]}")
    return value


PAUSE_SCOPES = ("movement", "lane", "venue", "chain", "network")
MAX_PAUSE_S = 30 * 86400


def form_id(text: str, name: str) -> int:
    """A form's id field: a whole number from 1 to 2^63-1, else BadForm."""
    try:
        value = int(text.strip())
    except ValueError:
        raise BadForm(f"{name} must be a whole number, got {text[:40]!r}") from None
    if not 1 <= value < 2**63:
        raise BadForm(f"{name} must be from 1 to 2^63-1, got {value}")
    return value


def form_day(text: str) -> date | None:
    """A search's day (YYYY-MM-DD, as a date input sends it), else None."""
    try:
        return date.fromisoformat(text.strip()) if text.strip() else None
    except ValueError:
        return None


def form_seconds(text: str) -> int | None:
    """The pause form's seconds: empty for none, else a whole number from 1 to
    30 days (trip_breaker's bounds)."""
    if not text.strip():
        return None
    try:
        seconds = int(text.strip())
    except ValueError:
        raise BadForm(f"seconds must be a whole number, got {text[:32]!r}") from None
    if not 1 <= seconds <= MAX_PAUSE_S:
        raise BadForm(f"a pause lasts from 1 to {MAX_PAUSE_S} seconds, got {text[:32]}")
    return seconds


def element_id(*parts: Any) -> str:
    """An element id made of ``parts``: letters, digits, _ and - (a CSS name)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", "-".join(str(p) for p in parts))


def pauses_block(pauses: list[dict[str, Any]], csrf_token: str | None) -> str:
    """The scopes paused now, each with its resume button, and the pause form
    (no ``csrf_token``: the live frame's, to look at: the list alone)."""
    csrf = f'<input type="hidden" name="csrf" value="{e(csrf_token)}">'
    rows = "".join(
        f"<tr id='{element_id('pause', p['scope'], p['name'])}'>"
        + "".join(
            f"<td>{cell(c, p.get(c))}</td>"
            for c in ("scope", "name", "paused_by", "reason", "paused_at", "expires_at")
        )
        + (
            "<td><form class='inline' method='post' action='/pauses/resume'>"
            f"{csrf}<input type='hidden' name='scope' value='{e(p['scope'])}'>"
            f"<input type='hidden' name='name' value='{e(p['name'])}'>"
            f"<button type='submit' id='{element_id('resume', p['scope'], p['name'])}'>"
            "resume</button></form></td>"
            if csrf_token
            else "<td></td>"
        )
        + "</tr>"
        for p in pauses
    )
    listed = (
        "<table><tr><th>scope</th><th>name</th><th>paused_by</th><th>reason</th>"
        f"<th>paused_at</th><th>expires_at</th><th></th></tr>{rows}</table>"
        if pauses
        else "<p id='no-pauses'>nothing is paused</p>"
    )
    if csrf_token is None:
        return f"<h2>Pauses</h2>{listed}"
    return f"<h2>Pauses</h2>{listed}<p>{pause_form(csrf_token)}</p>"


def pause_form(csrf_token: str) -> str:
    """The form that pauses a scope: anyone may pull the brake, so it stays on
    the home page while its live frame refreshes."""
    csrf = f'<input type="hidden" name="csrf" value="{e(csrf_token)}">'
    options = "".join(f"<option value='{s}'>{s}</option>" for s in PAUSE_SCOPES)
    return (
        "<form class='inline' method='post' action='/pauses'>"
        f"{csrf}<select name='scope' id='pause-scope' aria-label='scope'>{options}</select>"
        "<input name='name' placeholder='id, lane, executor, chain or *' required "
        "id='pause-name' aria-label='name'>"
        "<input name='reason' placeholder='reason' required id='pause-reason'>"
        "<input name='for' type='number' min='1' step='1' placeholder='seconds (none: until "
        "resumed)' id='pause-for' aria-label='seconds'>"
        "<button type='submit' id='pause'>pause</button></form>"
    )


SEARCH_PAGE = 20
"""Movements a page of the home page's search lists."""
REFRESH_S = 15
"""The home page's auto-refresh, when the operator turns it on."""
SEARCHABLE_STATES = (
    "PENDING_APPROVAL", "APPROVED", "EXECUTING", "COMPLETED", "FAILED", "CANCELLED", "EXPIRED",
)  # fmt: skip


@dataclass(frozen=True)
class Search:
    """The home page's movement search (a GET form: its fields in the URL, so
    a page of results is a link to come back to): a state, an external id,
    a creator, a lane, the days it was created between, and the cursor of
    the page (newest first)."""

    states: list[str]
    external_id: str | None
    created_by: str | None
    before: int | None
    cursor: str | None
    refresh_s: int | None = None
    lane: str | None = None
    since: date | None = None
    """Created on or after this day (UTC)."""
    until: date | None = None
    """Created on or before this day (UTC)."""
    """Show the search's results and the pipeline in a frame that reloads
    itself (every ApiConfig.live_refresh_s), the page around it kept as it is
    (REFRESH_S in the URL: a link to come back to)."""

    @classmethod
    def of(cls, request: Request) -> Search:
        """The search the URL asks for; a field it cannot use is left out (a
        bad cursor starts from the newest)."""
        q = request.query_params
        state = q.get("state", "")
        before, cursor = None, q.get("before") or None
        if cursor is not None:
            try:
                before = reads.decode_cursor(cursor)
            except Problem:
                cursor = None
        return cls(
            [state] if state in SEARCHABLE_STATES else [],
            (q.get("external_id") or "").strip()[:200] or None,
            (q.get("created_by") or "").strip()[:63] or None,
            before,
            cursor,
            REFRESH_S if q.get("refresh") == str(REFRESH_S) else None,
            (q.get("lane") or "").strip()[:200] or None,
            form_day(q.get("since", "")),
            form_day(q.get("until", "")),
        )

    def between(self) -> tuple[datetime | None, datetime | None]:
        """The creation times the days bound: [since 00:00, the day after until 00:00) UTC."""
        since = datetime.combine(self.since, dt_time(0), UTC) if self.since else None
        until = (
            datetime.combine(self.until, dt_time(0), UTC) + timedelta(days=1)
            if self.until
            else None
        )
        return since, until

    def params(self, **changed: str | None) -> str:
        """This search's URL query, with ``changed`` fields (None: left out)."""
        given = {
            "state": self.states[0] if self.states else None,
            "external_id": self.external_id,
            "created_by": self.created_by,
            "before": self.cursor,
            "refresh": str(self.refresh_s) if self.refresh_s else None,
            "lane": self.lane,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
        } | changed
        return urlencode({k: v for k, v in given.items() if v})

    def refresh_link(self) -> str:
        """Turn the page's auto-refresh on or off, keeping the search."""
        if self.refresh_s:
            return f"<a id='refresh' href='/?{e(self.params(refresh=None))}'>stop refreshing</a>"
        return (
            f"<a id='refresh' href='/?{e(self.params(refresh=str(REFRESH_S)))}'>"
            f"refresh every {REFRESH_S} s</a>"
        )

    def form(self) -> str:
        chosen = self.states[0] if self.states else ""
        options = "".join(
            f"<option value='{e(v)}'{' selected' if v == chosen else ''}>"
            f"{e(v or 'any state')}</option>"
            for v in ("", *SEARCHABLE_STATES)
        )
        return (
            "<form method='get' action='/#movements' id='search'>"
            f"<select name='state' id='search-state' aria-label='state'>{options}</select> "
            f"<input name='external_id' placeholder='external id' id='search-external-id' "
            f"value='{e(self.external_id or '')}'> "
            f"<input name='created_by' placeholder='created by' id='search-created-by' "
            f"value='{e(self.created_by or '')}'> "
            f"<input name='lane' placeholder='lane' id='search-lane' value='{e(self.lane or '')}'> "
            "created from <input name='since' type='date' id='search-since' "
            f"value='{e(self.since.isoformat() if self.since else '')}'> "
            "to <input name='until' type='date' id='search-until' "
            f"value='{e(self.until.isoformat() if self.until else '')}'> "
            + (
                f"<input type='hidden' name='refresh' value='{self.refresh_s}'>"
                if self.refresh_s
                else ""
            )
            + "<button type='submit' id='search-go'>search</button> <a href='/'>clear</a></form>"
        )

    def older_link(self, cursor: str | None) -> str:
        """A link to the next page of the same search, when there is one."""
        if cursor is None:
            return ""
        return (
            f"<p><a id='older' href='/?{e(self.params(before=cursor))}#movements'>older →</a></p>"
        )


def health_block(health: dict[str, list[dict[str, Any]]], csrf_token: str | None) -> str:
    """What needs an operator: each quarantined node with a release form, each
    UNKNOWN node with a requeue form and each FAILED node of which nothing
    was sent with a retry form (two operators: the first asks, another
    applies), each open drift alert with an acknowledge form (two operators).
    No ``csrf_token``: the live frame's, to look at, without the forms."""
    csrf = f'<input type="hidden" name="csrf" value="{e(csrf_token)}">'

    def form(action: str, field: str, value: Any, label: str, ident: str) -> str:
        if csrf_token is None:
            return ""
        return (
            f"<form class='inline' method='post' action='{action}'>{csrf}"
            f"<input type='hidden' name='{field}' value='{e(str(value))}'>"
            f"<input name='reason' placeholder='reason' required id='{ident}-reason'>"
            f"<button type='submit' id='{ident}'>{e(label)}</button></form>"
        )

    def rows(items: list[dict[str, Any]], columns: list[str], act: Any, empty: str) -> str:
        if not items:
            return f"<p>{e(empty)}</p>"
        head = "".join(f"<th>{e(c)}</th>" for c in columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{cell(c, item.get(c))}</td>" for c in columns)
            + f"<td>{act(item)}</td></tr>"
            for item in items
        )
        return f"<table><tr>{head}<th></th></tr>{body}</table>"

    quarantined = rows(
        health["quarantined"],
        ["node_id", "movement_id", "node_key", "node_state", "reason", "quarantined_at"],
        lambda n: form("/nodes/release", "node_id", n["node_id"], "release",
                       element_id("release", n["node_id"])),
        "no node is quarantined",
    )  # fmt: skip
    unknown = rows(
        health["unknown"],
        ["node_id", "movement_id", "node_key", "executor_key", "last_error", "requeue_asked_by"],
        lambda n: form("/nodes/requeue", "node_id", n["node_id"],
                       "apply requeue" if n.get("requeue_asked_by") else "ask to requeue",
                       element_id("requeue", n["node_id"])),
        "no node is UNKNOWN",
    )  # fmt: skip
    retryable = rows(
        health["retryable"],
        ["node_id", "movement_id", "node_key", "executor_key", "last_error", "retry_asked_by"],
        lambda n: form("/nodes/requeue", "node_id", n["node_id"],
                       "apply retry" if n.get("retry_asked_by") else "ask to retry",
                       element_id("retry", n["node_id"])),
        "no FAILED node may be retried",
    )  # fmt: skip
    drift = rows(
        health["drift"],
        ["alert_id", "account_key", "address", "actual", "unexplained", "ack_requested_by"],
        lambda a: form("/drift/acknowledge", "alert_id", a["alert_id"],
                       "acknowledge" if a.get("ack_requested_by") else "ask to acknowledge",
                       element_id("acknowledge", a["alert_id"])),
        "no open drift alert",
    )  # fmt: skip
    workers = (
        table(
            health["workers"],
            [
                "worker_name",
                "instance_id",
                "status",
                "last_tick_at",
                "consecutive_errors",
                "last_error",
            ],
        )
        if health["workers"]
        else "<p id='no-workers'>no worker runs: nothing moves until a runner starts</p>"
    )
    stuck = (
        table(health["stuck"], ["node_id", "movement_id", "node_key", "node_state", "reason"])
        if health["stuck"]
        else "<p>no node is stuck</p>"
    )
    dead = (
        table(
            health["dead_callbacks"],
            [
                "callback_id",
                "movement_id",
                "event_type",
                "delivery_state",
                "attempts",
                "last_status",
                "dead_at",
            ],
        )
        if health["dead_callbacks"]
        else "<p>no dead callback</p>"
    )
    return (
        "<h2 id='workers'>Workers</h2>"
        f"{workers}"
        "<h3>Stuck nodes</h3>"
        f"{stuck}"
        "<h3>Dead callbacks (<code>qtg callbacks replay ID --reason R</code>)</h3>"
        f"{dead}"
        "<h2 id='health'>Needs an operator</h2>"
        f"<h3>Quarantined nodes</h3>{quarantined}"
        f"<h3>UNKNOWN nodes (recovery could not conclude)</h3>{unknown}"
        "<h3>FAILED nodes of which nothing was sent (a retry runs the movement again)</h3>"
        f"{retryable}"
        f"<h3>Open drift alerts</h3>{drift}"
    )


def same_origin(request: Request) -> bool:
    """A POST from this site (none of Origin, Sec-Fetch-Site and Referer says
    otherwise: a client that is not a browser sends none, and cannot be made
    to send the session cookie cross-site)."""
    return cross_site(request.headers) is None


async def form_of(request: Request) -> dict[str, str]:
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_FORM_BYTES:
            raise Problem(413, "Request body too large", "a form is at most 16 KiB")
    try:
        parsed = parse_qs(raw.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise Problem(422, "Invalid form", "the form is not UTF-8 url-encoded fields") from None
    return {k: v[0] for k, v in parsed.items()}


def dag_levels(nodes: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The nodes by depth: a node one level after the deepest node it depends on."""
    by_key = {n["node_key"]: n for n in nodes}
    depth: dict[str, int] = {}

    def level(key: str, seen: frozenset[str] = frozenset()) -> int:
        if key in depth:
            return depth[key]
        parents = [p for p in by_key[key].get("depends_on") or [] if p in by_key and p not in seen]
        depth[key] = 1 + max((level(p, seen | {key}) for p in parents), default=-1)
        return depth[key]

    for key in by_key:
        level(key)
    levels: list[list[dict[str, Any]]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in nodes:
        levels[depth[node["node_key"]]].append(node)
    return levels


def mount_page(app: FastAPI, config: Any) -> None:
    sessions = Sessions(config.session_seconds, config.max_sessions, config.max_sessions_per_login)
    app.state.sessions = sessions

    def signin_page(message: str | None = None, status: int = 200) -> HTMLResponse:
        note = f'<p class="flash-error" id="flash">{e(message)}</p>' if message else ""
        body = (
            f"{note}<form method='post' action='/signin'>"
            "<p><label>login <input name='login' id='login-field' autocomplete='username'>"
            "</label></p><p><label>password <input name='password' id='password-field' "
            "type='password' autocomplete='current-password'></label></p>"
            "<p><button type='submit' id='signin'>sign in</button></p></form>"
            "<p>Your own database login, as in psql: the page acts as you.</p>"
        )
        response = layout("QTG operator: sign in", body, None)
        response.status_code = status
        return response

    @app.get("/signin", include_in_schema=False)
    async def signin_form() -> Response:
        return signin_page()

    @app.post("/signin", include_in_schema=False)
    async def signin(request: Request) -> Response:
        if not same_origin(request):
            raise Problem(403, "Cross-site request refused", "this form is posted from elsewhere")
        form = await form_of(request)
        login, password = form.get("login", ""), form.get("password", "")
        if not LOGIN_PATTERN.match(login) or not password or len(password) > MAX_PASSWORD:
            return signin_page("give your login and password", 401)
        try:
            conn = await authenticate(
                config.database,
                config.throttle,
                Credentials(login, password),
                client_address(request.scope),
            )
        except Problem as problem:
            refused = signin_page(problem.detail, problem.status)
            if "Retry-After" in problem.headers:  # not a 401's Basic challenge: no dialog
                refused.headers["Retry-After"] = problem.headers["Retry-After"]
            return refused
        session = Session(
            login, conn, secrets.token_urlsafe(32), time.monotonic() + config.session_seconds
        )
        sid = await sessions.add(session)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(
            COOKIE,
            sid,
            httponly=True,
            samesite="strict",
            secure=config.secure_cookies,
            path="/",
            max_age=int(config.session_seconds),
        )
        return response

    async def checked(request: Request) -> tuple[Session, dict[str, str]]:
        """The request's session and form: its session and origin are checked
        before its form is read, the form's CSRF token after."""
        session = sessions.get(request)
        if session is None:
            raise Problem(401, "Authentication required", "sign in first (/signin)")
        if not same_origin(request):
            raise Problem(
                403, "Cross-site request refused", "this form is posted from another site"
            )
        form = await form_of(request)
        if not hmac.compare_digest(form.get("csrf", "").encode(), session.csrf.encode()):
            raise Problem(
                403,
                "Cross-site request refused",
                "the form's CSRF token is missing or not this session's",
            )
        return session, form

    @app.post("/signout", include_in_schema=False)
    async def signout(request: Request) -> Response:
        await checked(request)
        await sessions.drop(request)
        response = RedirectResponse("/signin", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    live_refresh_s = int(config.live_refresh_s)

    async def home_parts(session: Session, search: Search) -> dict[str, str] | None:
        """What the home page shows, read as the session's login: the pipeline,
        the pauses, what needs an operator, the movements waiting and the
        search's; each part to look at alone (no forms) when the search
        refreshes (the live frame's), else with its forms. None: the
        session's connection is gone."""
        csrf = None if search.refresh_s else session.csrf
        async with session.lock:
            try:
                async with session.conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(
                        "SELECT entity, state, total FROM pipeline_counts ORDER BY entity, state"
                    )
                    counts = [dict(r) for r in await cur.fetchall()]
                waiting, _ = await reads.movements(
                    session.conn,
                    states=["PENDING_APPROVAL"],
                    external_id=None,
                    created_by=None,
                    limit=100,
                    before=None,
                )
                since, until = search.between()
                recent, older = await reads.movements(
                    session.conn,
                    states=search.states,
                    external_id=search.external_id,
                    created_by=search.created_by,
                    limit=SEARCH_PAGE,
                    before=search.before,
                    lane=search.lane,
                    created_since=since,
                    created_until=until,
                )
                pauses = await reads.pauses(session.conn)
                health = await reads.health(session.conn)
            except psycopg.OperationalError:
                return None
        return {
            "state": "<h2>Pipeline</h2>"
            + table(counts, ["entity", "state", "total"])
            + pauses_block(pauses, csrf)
            + health_block(health, csrf)
            + "<h2>Waiting for approval</h2>"
            + table(
                waiting,
                [
                    "movement_id",
                    "external_id",
                    "amount",
                    "asset",
                    "created_by",
                    "created_at",
                    "nodes_total",
                ],
                row_id="waiting",
            ),
            "movements": table(
                recent,
                [
                    "movement_id",
                    "external_id",
                    "state",
                    "amount",
                    "asset",
                    "created_by",
                    "approved_by",
                    "nodes_completed",
                    "nodes_total",
                ],
                row_id="recent",
            )
            + search.older_link(older),
        }

    @app.get("/", include_in_schema=False)
    async def home(request: Request) -> Response:
        """The home page. While it refreshes, the page itself stays as it is
        (what is typed in its search and pause forms, where it is scrolled)
        and a frame inside it, /live, reloads what it shows every
        live_refresh_s; to act on what needs an operator, stop refreshing."""
        session = sessions.get(request)
        if session is None:
            return RedirectResponse("/signin", status_code=303)
        search = Search.of(request)
        if search.refresh_s:
            body = (
                f"<p>{search.refresh_link()} (the forms to act on what needs an operator "
                "show when it stops)</p>"
                + f"<p>{pause_form(session.csrf)}</p>"
                + "<h2 id='movements'>Movements</h2>"
                + search.form()
                + f"<iframe id='live' title='the pipeline, live' src='/live?{e(search.params())}'"
                " style='width:100%;height:80vh;border:0'></iframe>"
            )
            return layout("QTG operator", body, session)
        parts = await home_parts(session, search)
        if parts is None:
            await sessions.drop(request)
            return RedirectResponse("/signin", status_code=303)
        body = (
            f"<p>{search.refresh_link()}</p>"
            + parts["state"]
            + "<h2 id='movements'>Movements</h2>"
            + search.form()
            + parts["movements"]
        )
        return layout("QTG operator", body, session)

    @app.get("/live", include_in_schema=False)
    async def live(request: Request) -> Response:
        """The home page's live frame: its state and its search's movements, to
        look at, reloaded every live_refresh_s; links open in the whole window."""
        session = sessions.get(request)
        if session is None:
            return layout("QTG operator", "<p>signed out: <a href='/signin'>sign in</a></p>",
                          None, framed=True)  # fmt: skip
        search = Search.of(request)
        search = replace(search, refresh_s=REFRESH_S)
        parts = await home_parts(session, search)
        if parts is None:
            await sessions.drop(request)
            return layout("QTG operator", "<p>signed out: <a href='/signin'>sign in</a></p>",
                          None, framed=True)  # fmt: skip
        return layout(
            "QTG operator",
            parts["state"] + "<h2>Movements found</h2>" + parts["movements"],
            session,
            refresh_s=live_refresh_s,
            framed=True,
        )

    @app.get("/movements/{movement_id}", include_in_schema=False)
    async def movement_page(request: Request, movement_id: int) -> Response:
        session = sessions.get(request)
        if session is None:
            return RedirectResponse("/signin", status_code=303)
        if not 1 <= movement_id < 2**63:
            raise Problem(404, "Not found", "no such movement")
        async with session.lock:
            try:
                movement = await reads.movement(session.conn, movement_id)
                nodes = await reads.nodes(session.conn, movement_id)
                events = await reads.audit(session.conn, movement_id)
            except psycopg.OperationalError:
                await sessions.drop(request)
                return RedirectResponse("/signin", status_code=303)
        summary = "".join(
            f"<tr><th>{e(k)}</th><td id='m-{e(k)}'>{cell(k, movement.get(k))}</td></tr>"
            for k in (
                "movement_id",
                "external_id",
                "state",
                "stop_reason",
                "amount",
                "asset",
                "priority",
                "created_by",
                "approved_by",
                "created_at",
                "approved_at",
                "expires_at",
            )
        )
        csrf = f'<input type="hidden" name="csrf" value="{e(session.csrf)}">'
        waiting = movement.get("state") == "PENDING_APPROVAL"
        rehearsal = movement.get("rehearsal")
        failed = (
            '<span class="warn" id="rehearsal-warning">its last rehearsal failed: '
            "read it before approving</span> "
            if waiting and rehearsal is not None and rehearsal["outcome"] == "failed"
            else ""
        )
        rehearse = (
            f'<form class="inline" method="post" action="/movements/{movement_id}/rehearse">'
            f'{csrf}<button type="submit" id="rehearse">Rehearse</button></form> '
            if waiting
            else ""
        )
        # each action only where the movement's state allows it
        actions = (
            (
                f'<form class="inline" method="post" action="/movements/{movement_id}/approve">'
                f'{csrf}<button type="submit" id="approve">approve</button></form> {failed}'
                f"{rehearse}"
            )
            if waiting
            else ""
        )
        if movement.get("state") not in FINISHED:
            actions += (
                f'<form class="inline" method="post" action="/movements/{movement_id}/cancel">'
                f'{csrf}<input name="reason" placeholder="reason" id="cancel-reason">'
                '<button type="submit" id="cancel">cancel</button></form>'
            )
            actions += (
                f' <form class="inline" method="post" action="/movements/{movement_id}/priority">'
                f'{csrf}<input name="priority" type="number" step="1" min="{-(2**31)}" '
                f'max="{2**31 - 1}" required value="{e(str(movement.get("priority", 0)))}" '
                'id="priority" aria-label="priority">'
                '<input name="reason" placeholder="reason" required id="priority-reason">'
                '<button type="submit" id="set-priority">set priority</button></form>'
            )
        dag = "".join(
            "<div class='level'>"
            + "".join(
                f"<div class='node {e(n['state'])}' id='node-{e(n['node_key'])}'>"
                f"<b>{e(n['node_key'])}</b><br>{e(n['executor_key'])} · "
                f"<span class='state'>{e(n['state'])}</span>"
                + (f"<br><small class='route'>{e(n['route'])}</small>" if n.get("route") else "")
                + "</div>"
                for n in level
            )
            + "</div>"
            for level in dag_levels(nodes)
        )
        body = (
            f"<table>{summary}</table><p>{actions}</p>{rehearsal_block(movement)}"
            f"<h2>DAG</h2><div class='dag'>{dag}</div>"
            + table(
                nodes,
                [
                    "node_key",
                    "depends_on",
                    "executor_key",
                    "route",
                    "lane",
                    "state",
                    "external_ref",
                    "tx_hashes",
                    "evidence",
                    "last_error",
                ],
            )
            + "<h2>Timeline</h2>"
            + timeline(events)
        )
        return layout(f"Movement {movement_id}", body, session)

    async def act(request: Request, movement_id: int, action: str) -> Response:
        return await perform(request, f"/movements/{movement_id}", movement_id, action)

    async def perform(request: Request, back: str, movement_id: int, action: str) -> Response:
        """One action of a form, as the session's login; its outcome flashed,
        then back to ``back``."""
        session, form = await checked(request)
        async with session.lock:
            try:
                advised: list[procs.Advice] = []
                if action == "approve":
                    with procs.advice(session.conn) as advised:
                        state = await procs.approve_movement(movement_id).aone(session.conn)
                    done = f"movement {movement_id}: {state}"
                elif action == "priority":
                    priority = form_priority(form.get("priority", ""))
                    set_to = await procs.set_priority(
                        movement_id, priority, form.get("reason", "")
                    ).aone(session.conn)
                    done = f"movement {movement_id}: priority {set_to}"
                elif action == "rehearse":
                    request_id = await procs.request_rehearsal(movement_id).aone(session.conn)
                    done = f"movement {movement_id}: rehearsal requested (request {request_id})"
                elif action == "pause":
                    scope, name = form.get("scope", ""), form.get("name", "")
                    tripped = await procs.trip_breaker(
                        scope, name, form.get("reason", ""), form_seconds(form.get("for", ""))
                    ).aone(session.conn)
                    done = f"{scope} {name} " + ("paused" if tripped.tripped else "paused already")
                elif action in ("release", "requeue"):
                    node_id = form_id(form.get("node_id", ""), "node_id")
                    why = form.get("reason", "")
                    if action == "release":
                        released = await procs.release_quarantine(node_id, why).aone(session.conn)
                        done = f"node {node_id} released: {released}"
                    else:
                        row = await procs.requeue_node(node_id, why).aone(session.conn)
                        done = f"node {node_id}: requeue {row.requeue_state} ({row.node_state})"
                elif action == "acknowledge":
                    alert_id = form_id(form.get("alert_id", ""), "alert_id")
                    acked = await procs.acknowledge_drift_alert(
                        alert_id, form.get("reason", "")
                    ).aone(session.conn)
                    done = f"drift alert {alert_id}: {acked}"
                elif action == "resume":
                    scope, name = form.get("scope", ""), form.get("name", "")
                    breaker = await procs.reset_breaker(scope, name).aone(session.conn)
                    done = f"{scope} {name}: " + ("resumed" if breaker == "CLOSED" else breaker)
                else:
                    reason = form.get("reason") or None
                    state = await procs.cancel_movement(movement_id, reason=reason).aone(
                        session.conn
                    )
                    done = f"movement {movement_id}: {state}"
                session.flash.append(("ok", done))
                for said in advised:
                    session.flash.append(("warn", f"warning ({said.sqlstate}): {said.message}"))
            except procs.Refused as refused:
                session.flash.append(("error", f"refused ({refused.sqlstate}): {refused.message}"))
            except BadForm as bad:
                session.flash.append(("error", f"refused: {bad}"))
            except psycopg.OperationalError:
                await sessions.drop(request)
                return RedirectResponse("/signin", status_code=303)
            except psycopg.Error as exc:
                diag = exc.diag
                if not (exc.sqlstate or "").startswith("QT") and exc.sqlstate != "42501":
                    raise
                session.flash.append(
                    ("error", f"refused ({exc.sqlstate}): {diag.message_primary or ''}")
                )
        return RedirectResponse(back, status_code=303)

    @app.post("/pauses", include_in_schema=False)
    async def pause(request: Request) -> Response:
        return await perform(request, "/", 0, "pause")

    @app.post("/pauses/resume", include_in_schema=False)
    async def resume(request: Request) -> Response:
        return await perform(request, "/", 0, "resume")

    @app.post("/nodes/release", include_in_schema=False)
    async def release(request: Request) -> Response:
        return await perform(request, "/#health", 0, "release")

    @app.post("/nodes/requeue", include_in_schema=False)
    async def requeue(request: Request) -> Response:
        return await perform(request, "/#health", 0, "requeue")

    @app.post("/drift/acknowledge", include_in_schema=False)
    async def acknowledge(request: Request) -> Response:
        return await perform(request, "/#health", 0, "acknowledge")

    @app.post("/movements/{movement_id}/approve", include_in_schema=False)
    async def approve(request: Request, movement_id: int) -> Response:
        return await act(request, movement_id, "approve")

    @app.post("/movements/{movement_id}/cancel", include_in_schema=False)
    async def cancel(request: Request, movement_id: int) -> Response:
        return await act(request, movement_id, "cancel")

    @app.post("/movements/{movement_id}/priority", include_in_schema=False)
    async def priority(request: Request, movement_id: int) -> Response:
        return await act(request, movement_id, "priority")

    @app.post("/movements/{movement_id}/rehearse", include_in_schema=False)
    async def rehearse(request: Request, movement_id: int) -> Response:
        return await act(request, movement_id, "rehearse")
