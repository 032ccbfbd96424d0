"""A callback target's url never names, as an address, a place no callback may
reach (check_callback_target, through host_address_problem), played with an
operator's own login (propose_callback_target) and the admin's
(upsert_callback_target). The IPv6 forms that carry an IPv4 address (IPv4-mapped,
IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo, ISATAP) are refused
whatever they carry and whatever allow_private says, as are link-local and
cloud metadata addresses and the IPv4 forms a resolver reads as another
address; each refusal is QT002 and changes nothing in any table. Loopback and
private addresses need allow_private; a name passes (the dispatcher checks what
it resolves to at each POST: tests/runner/test_callback_dispatcher.py).
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind, fingerprint

Conn = psycopg.Connection[Any]

PROPOSE = "SELECT * FROM propose_callback_target('ops', %s, 'env:QTG_CB_OPS', %s)"
UPSERT = "SELECT upsert_callback_target('ops', %s, 'env:QTG_CB_OPS', %s)"

# url -> what the refusal says
NEVER = {
    "6to4 of loopback": ("http://[2002:7f00:1::1]/x", "carries the IPv4 address 127.0.0.1 (6to4)"),
    "6to4 of metadata": (
        "http://[2002:a9fe:a9fe::]/latest/meta-data/",
        "carries the IPv4 address 169.254.169.254 (6to4)",
    ),
    "6to4 of link-local": ("https://[2002:a9fe:101::]/x", "carries the IPv4 address 169.254.1.1"),
    "IPv4-mapped loopback": (
        "http://[::ffff:127.0.0.1]:8080/x",
        "carries the IPv4 address 127.0.0.1 (IPv4-mapped)",
    ),
    "IPv4-mapped metadata in hex": (
        "http://[::FFFF:A9FE:A9FE]/x",
        "carries the IPv4 address 169.254.169.254 (IPv4-mapped)",
    ),
    "IPv4-compatible loopback": (
        "http://[::127.0.0.1]/x",
        "carries the IPv4 address 127.0.0.1 (IPv4-compatible)",
    ),
    "IPv4-translated metadata": (
        "http://[::ffff:0:169.254.169.254]/x",
        "carries the IPv4 address 169.254.169.254 (IPv4-translated)",
    ),
    "NAT64 of metadata": (
        "http://[64:ff9b::169.254.169.254]/x",
        "carries the IPv4 address 169.254.169.254 (NAT64)",
    ),
    "NAT64 of loopback": (
        "http://[64:ff9b::7f00:1]/x",
        "carries the IPv4 address 127.0.0.1 (NAT64)",
    ),
    "local-use NAT64 of metadata": (
        "http://[64:ff9b:1::a9fe:a9fe]/x",
        "carries the IPv4 address 169.254.169.254 (NAT64)",
    ),
    "Teredo of loopback": (  # the client's address, its bits inverted
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/x",
        "carries the IPv4 address 127.0.0.1 (Teredo)",
    ),
    "ISATAP of metadata": (
        "http://[2001:db8::5efe:169.254.169.254]/x",
        "carries the IPv4 address 169.254.169.254 (ISATAP)",
    ),
    "metadata": ("http://169.254.169.254/latest/meta-data/", "is a cloud metadata address"),
    "metadata over IPv6": ("http://[fd00:ec2::254]/x", "is a cloud metadata address"),
    "link-local": ("http://169.254.1.1/x", "is link-local"),
    "link-local IPv6": ("http://[fe80::1]/x", "is link-local"),
    "unspecified": ("http://0.0.0.0:8080/x", "is not a unicast address"),
    "decimal loopback": ("http://2130706433/x", "ends in a number"),
    "octal loopback": ("http://0177.0.0.1/x", "ends in a number"),
    "short loopback": ("http://127.1/x", "ends in a number"),
    "hex metadata": ("http://0xa9fea9fe/x", "ends in a number"),
    "an IPv4 address in brackets": ("http://[127.0.0.1]/x", "is not an IPv6 address"),
}


def refused(conn: Conn, caller: Conn, query: str, params: tuple[Any, ...]) -> str:
    """``query`` on ``caller`` fails with QT002 and changes no table of the database."""
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as caught:
        caller.execute(query, params)
    assert caught.value.sqlstate == "QT002", caught.value
    assert fingerprint(conn) == before
    return str(caught.value)


@pytest.fixture
def operator(db: TestDatabase) -> Conn:
    return bind(db.connect(db.login("olga", "qtg_testnet_operator").dsn))


@pytest.mark.parametrize("form", NEVER)
def test_an_address_no_callback_may_reach_is_refused_in_any_form(
    conn: Conn, operator: Conn, form: str
) -> None:
    url, said = NEVER[form]
    for allow_private in (False, True):
        message = refused(conn, operator, PROPOSE, (url, allow_private))
        assert "names no address a callback may reach" in message and said in message, message
        error = assert_rejected(conn, "QT002", UPSERT, (url, allow_private))
        assert said in str(error), error


def test_loopback_and_private_addresses_need_allow_private(conn: Conn, operator: Conn) -> None:
    for url in (
        "http://127.0.0.1:8080/x",
        "http://[::1]/x",
        "http://10.1.2.3/x",
        "http://[fd12::1]/x",
    ):
        message = refused(conn, operator, PROPOSE, (url, False))
        assert "the target is not allow_private" in message, message
        operator.execute(PROPOSE, (url, True))


def test_names_and_global_addresses_pass(conn: Conn) -> None:
    for i, url in enumerate(
        (
            "https://hooks.example.com/qtg",
            "https://93.184.216.34/x",
            "https://[2606:4700::1111]:8443/x",
        )
    ):
        conn.execute(UPSERT.replace("'ops'", f"'t{i}'"), (url, False))
    assert conn.execute("SELECT count(*) FROM callback_targets").fetchone() == (3,)
