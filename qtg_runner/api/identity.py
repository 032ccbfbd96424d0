"""Who calls: the caller's own database login, authenticated by PostgreSQL.

The API holds no credential. Each request carries one (HTTP Basic, or a bearer
token) and the API opens a connection to the database AS THAT LOGIN with it:
PostgreSQL checks the password (scram-sha-256, and nothing else: a server
that would let the login in without checking it is refused), ``session_user`` is the
caller, and every grant, the four-eyes rule and the audit's actor are the
database's, exactly as in psql. A wrong password is the server's refusal
(401); a login without the grant a procedure needs is refused by the server
too (403).

A bearer token is a login and its password in one string,
``qtg.<login>.<secret>``: ``qtg api token issue NAME`` (the admin) sets a fresh
256-bit password on the login and hands it out in that form, ``qtg api token
revoke NAME`` replaces it and ends the login's sessions. The API parses the
login out of the token and presents the secret as that login's password, so a
token can only ever open a session as the login it names: there is no table
of tokens the API could read wrongly, and no secret in the API to misuse.

Nothing of the API host's own libpq environment may stand in for a missing
password: every connection names a passfile that cannot exist (a pgpass file
on the host, such as the credentials file, never fills in a password) and an
empty password is refused before connecting.

One API serves one network. A login is a member of a network's roles
(``qtg_<network>_operator``, ``_runner``, ``_reader``); a login of the other
network logs in to the same database but cannot see this network's schema, so
it is refused at once (403, naming its network) rather than failing in the
first procedure it calls.
"""

from __future__ import annotations

import base64
import binascii
import logging
import re
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from qtg_runner.api.problems import Problem
from qtg_runner.config import NETWORK_MODES, ConfigError, NetworkMode
from qtg_runner.db.logins import KINDS, group_role
from qtg_runner.db.pool import bound_conninfo

log = logging.getLogger("qtg.api")

TOKEN_PREFIX = "qtg"
TOKEN_PATTERN = re.compile(r"^qtg\.([a-z][a-z0-9_]{0,62})\.([A-Za-z0-9_-]{20,200})$")
LOGIN_PATTERN = re.compile(r"^[^\x00-\x1f:]{1,63}$")
MAX_PASSWORD = 1024
REALM = 'Basic realm="qtg", charset="UTF-8"'
NO_PASSFILE = "/proc/self/qtg-no-passfile"
"""A passfile nobody can create: libpq finds no password there, silently."""

REQUIRE_AUTH = "scram-sha-256"
"""The only way the server may let a caller in: by checking its password. A
server whose pg_hba.conf trusts a connection (trust, peer, ident, a client
certificate, a GSS ticket of the API's host) would otherwise let in whoever
names a login, whatever password they give: libpq refuses such a server."""

CHALLENGE = {"WWW-Authenticate": REALM}
"""The header a 401 carries: Basic (or a bearer token, see docs/integrating.md)."""

SERVER_KEYS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "sslmode",
        "sslrootcert",
        "connect_timeout",
        "target_session_attrs",
        "gssencmode",
        "sslcrl",
        "channel_binding",
    }
)
"""What the API keeps of its DSN: where the server is and how to reach it.
The user, password, passfile and client certificate are the caller's."""


@dataclass(frozen=True)
class Credentials:
    login: str
    password: str = field(repr=False)


def token_for(login: str, secret: str) -> str:
    """The bearer token of ``login`` whose password is ``secret``."""
    return f"{TOKEN_PREFIX}.{login}.{secret}"


def unauthorized(detail: str) -> Problem:
    return Problem(401, "Authentication required", detail, headers=CHALLENGE)


def refused_credentials(login: str) -> Problem:
    """The one answer to credentials the API does not serve: a wrong password,
    and a right one of an administrative login alike."""
    return unauthorized(f"the database refused login {login!r} with these credentials")


def parse_authorization(header: str | None) -> Credentials:
    """The credentials of an Authorization header; 401 when there are none or
    they are malformed."""
    if not header:
        raise unauthorized(
            "send your database login: HTTP Basic (login and password) or a bearer token "
            "(qtg api token issue)"
        )
    scheme, _, value = header.strip().partition(" ")
    value = value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise unauthorized("the Basic credentials are not base64 of login:password") from None
        login, sep, password = decoded.partition(":")
        if not sep or not LOGIN_PATTERN.match(login):
            raise unauthorized("the Basic credentials name no login")
        return _checked(login, password)
    if scheme.lower() == "bearer":
        match = TOKEN_PATTERN.match(value)
        if match is None:
            raise unauthorized("the bearer token is not one qtg issued (qtg.<login>.<secret>)")
        return _checked(match.group(1), match.group(2))
    raise unauthorized(f"unsupported authorization scheme {scheme[:20]!r}: use Basic or Bearer")


def _checked(login: str, password: str) -> Credentials:
    if not password or len(password) > MAX_PASSWORD or "\x00" in password:
        raise unauthorized("a password is required (and at most 1 KiB)")
    return Credentials(login, password)


def server_conninfo(dsn: str) -> str:
    """``dsn`` reduced to where the server is: no user, password, passfile or
    client certificate of whoever started the API."""
    params = {k: v for k, v in conninfo_to_dict(dsn).items() if k in SERVER_KEYS and v}
    return make_conninfo("", **params)


@dataclass(frozen=True)
class Database:
    """Where the API's callers log in: the server, the database and the network."""

    conninfo: str
    network: NetworkMode
    connect_timeout: int = 5

    def __post_init__(self) -> None:
        if psycopg.pq.version() < 160000:
            raise ConfigError(
                f"the API needs libpq 16 or newer (require_auth), this psycopg has "
                f"{psycopg.pq.version()}: install the project's psycopg[binary]"
            )

    def caller_conninfo(self, credentials: Credentials) -> str:
        base = bound_conninfo(self.conninfo, self.network, "qtg-api")
        params: dict[str, Any] = conninfo_to_dict(base)
        params.update(
            user=credentials.login,
            passfile=NO_PASSFILE,
            require_auth=REQUIRE_AUTH,
            connect_timeout=str(self.connect_timeout),
        )
        params.pop("password", None)
        return make_conninfo("", **params)

    async def connect(self, credentials: Credentials) -> psycopg.AsyncConnection[Any]:
        """A connection as the caller's login (autocommit) of this network, or
        the problem why not."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.caller_conninfo(credentials), password=credentials.password, autocommit=True
            )
        except psycopg.OperationalError as exc:
            raise connect_problem(exc, credentials.login) from None
        try:
            await self.check_network(conn, credentials.login)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def check_network(self, conn: psycopg.AsyncConnection[Any], login: str) -> None:
        """403 unless ``login`` is a member of one of this network's roles, and
        401, as for a wrong password, for an administrative login (a superuser,
        a role that may create roles or databases, replicate or bypass row
        security, or a member of the owner role): the API never acts as the
        admin, whose password may be a server's default, and a superuser is a
        member of every role."""
        cur = await conn.execute(
            "SELECT rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls"
            " OR pg_has_role(session_user, 'qtg_owner', 'MEMBER')"
            " FROM pg_roles WHERE rolname = session_user"
        )
        admin = await cur.fetchone()
        if admin is None or admin[0]:
            # answered as a wrong password, and counted as one by the throttle: a
            # distinct answer would confirm an admin's password to anyone who
            # guessed it (the server's log says why)
            log.warning(
                "event=api_admin_refused login=%r: an administrative role is served "
                "nothing; operators sign in with their own logins (qtg operator add)",
                login[:63],
            )
            raise refused_credentials(login)
        roles = {group_role(kind, net): net for net in NETWORK_MODES for kind in KINDS}
        cur = await conn.execute(
            "SELECT rolname FROM pg_roles"
            " WHERE rolname = ANY(%s) AND pg_has_role(session_user, oid, 'MEMBER')",
            [list(roles)],
        )
        networks = {roles[row[0]] for row in await cur.fetchall()}
        if self.network in networks:
            return
        ours = ", ".join(group_role(kind, self.network) for kind in KINDS)
        if networks:
            theirs = " and ".join(sorted(networks))
            raise Problem(
                403,
                "Login of another network",
                f"login {login!r} belongs to another network ({theirs}): this API serves "
                f"{self.network}; call the {theirs} API, or have the admin make a login "
                f"of {self.network}",
            )
        raise Problem(
            403,
            "Login of no network",
            f"login {login!r} is a member of none of this network's roles ({ours}): "
            f"this API serves {self.network}",
        )


def connect_problem(exc: psycopg.OperationalError, login: str) -> Problem:
    """What a refused connection means for the caller. The server's reason for
    an authentication failure is not passed on (it would tell which logins exist)."""
    text = str(exc)
    sqlstate = exc.sqlstate or ""
    if (
        sqlstate.startswith("28")
        or "authentication failed" in text
        or "password" in text
        or "authentication method requirement" in text
    ):
        return refused_credentials(login)
    if sqlstate == "42501" or "permission denied for database" in text:
        return Problem(403, "Missing grant", f"login {login!r} may not connect to this database")
    if sqlstate == "53300" or "too many" in text:
        return Problem(
            503,
            "Database out of resources",
            f"login {login!r} has reached its connection limit; try again",
            headers={"Retry-After": "1"},
        )
    return Problem(
        503,
        "Database unreachable",
        "the database cannot be reached; try again",
        headers={"Retry-After": "5"},
    )
