"""lease_endpoints: the runner processes that share an outside endpoint.

Each runner process paces its calls to an endpoint (an RPC URL, Iris, a
venue) at the endpoint's rate divided by the processes sharing it, and learns
how many do, and whether one of them met a 429, from its leases: a call every
few seconds renews this process's leases and answers, per endpoint, the live
leases (sharers) and the latest slowed_until still ahead. A process that
stops renewing drops out once its lease expires. Played with the runner's own
login, as the budgets call it; the operator's and the reader's logins may not
call it, and read what it wrote through endpoint_budgets. waiting_nodes shows
the READY nodes waiting for their not_before (a throttled release's among
them), and why.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind, claim, create_started, node, node_ids, pin_clock, plan
from rows import Conn, iso_at, time_at

from qtg_runner.db import procs

A = "host-a:4242:a1b2c3"
B = "host-b:77:d4e5f6"
TTL = 15


@pytest.fixture
def runner_a(db: TestDatabase) -> Conn:
    """Runner process A, on the runner login, its clock at T0."""
    c = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(c, iso_at(0))
    return c


@pytest.fixture
def runner_b(db: TestDatabase) -> Conn:
    """Runner process B, another connection of the runner login, its clock at T0."""
    c = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(c, iso_at(0))
    return c


def lease(
    conn: Conn,
    instance: str,
    endpoints: Sequence[str],
    slowed: Sequence[datetime | None] | None = None,
    ttl: float = TTL,
) -> list[tuple[str, int, datetime | None]]:
    rows = procs.lease_endpoints(
        instance, endpoints, slowed or [None] * len(endpoints), Decimal(str(ttl))
    ).all(conn)
    return [(r.endpoint, r.sharers, r.slowed_until) for r in rows]


def leases(conn: Conn) -> list[tuple[str, str, datetime, datetime | None]]:
    return conn.execute(
        "SELECT endpoint, instance_id, leased_until, slowed_until"
        " FROM endpoint_leases ORDER BY 1, 2"
    ).fetchall()


def test_two_processes_share_an_endpoint_until_one_stops_renewing(
    conn: Conn, runner_a: Conn, runner_b: Conn
) -> None:
    assert lease(runner_a, A, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 1, None)]
    assert lease(runner_b, B, ["rpc:base-sepolia", "iris"]) == [
        ("rpc:base-sepolia", 2, None),
        ("iris", 1, None),
    ]
    assert lease(runner_a, A, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 2, None)]

    # A renews at T0 + 10; B's lease (T0 + 15) lapses once the clock is past it
    pin_clock(runner_a, iso_at(10))
    assert lease(runner_a, A, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 2, None)]
    pin_clock(runner_a, iso_at(TTL))  # B's leased_until itself: still live
    assert lease(runner_a, A, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 2, None)]
    pin_clock(runner_a, iso_at(TTL + 0.5))
    assert lease(runner_a, A, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 1, None)]

    # B's expired lease of the endpoint A named is gone; its lease of iris,
    # which no call named since, waits for the next call that names it
    assert leases(conn) == [
        ("iris", B, time_at(TTL), None),
        ("rpc:base-sepolia", A, time_at(2 * TTL + 0.5), None),
    ]
    # B comes back: two again
    pin_clock(runner_b, iso_at(TTL + 1))
    assert lease(runner_b, B, ["rpc:base-sepolia"]) == [("rpc:base-sepolia", 2, None)]


def test_a_slowdown_one_process_met_is_seen_by_the_others_while_it_lasts(
    conn: Conn, runner_a: Conn, runner_b: Conn
) -> None:
    lease(runner_b, B, ["venue:bybit", "iris"])
    # A met a 429 on the venue: Retry-After 30 s
    assert lease(runner_a, A, ["iris", "venue:bybit"], [None, time_at(30)]) == [
        ("iris", 2, None),
        ("venue:bybit", 2, time_at(30)),
    ]
    # B, which met none, sees it; an earlier slowdown of B's does not hide it
    assert lease(runner_b, B, ["venue:bybit", "iris"], [time_at(20), None]) == [
        ("venue:bybit", 2, time_at(30)),
        ("iris", 2, None),
    ]
    # a NULL keeps what a row has; an earlier time does not move it back
    lease(runner_a, A, ["venue:bybit"], [time_at(5)])
    assert [r for r in leases(conn) if r[0] == "venue:bybit"] == [
        ("venue:bybit", A, time_at(TTL), time_at(30)),
        ("venue:bybit", B, time_at(TTL), time_at(20)),
    ]

    # past B's 20 s, A's 30 s remains; from 30 s on, none (both renewing)
    for at, slowed in ((10, time_at(30)), (20, time_at(30)), (29.9, time_at(30)), (30, None)):
        pin_clock(runner_a, iso_at(at))
        pin_clock(runner_b, iso_at(at))
        lease(runner_a, A, ["venue:bybit"])
        assert lease(runner_b, B, ["venue:bybit"]) == [("venue:bybit", 2, slowed)], at


def test_a_slowdown_of_an_expired_lease_is_not_seen(runner_a: Conn, runner_b: Conn) -> None:
    lease(runner_a, A, ["iris"], [time_at(50)], ttl=5)
    pin_clock(runner_b, iso_at(10))  # A's lease lapsed at T0 + 5, its slowdown lasts to 50
    assert lease(runner_b, B, ["iris"]) == [("iris", 1, None)]


def test_the_answer_keeps_the_input_order_one_row_per_endpoint(runner_a: Conn) -> None:
    names = ["venue:bybit", "iris", "rpc:eth-sepolia", "rpc:base-sepolia", "a"]
    assert [r[0] for r in lease(runner_a, A, names)] == names
    assert [r[0] for r in lease(runner_a, A, list(reversed(names)))] == list(reversed(names))
    assert lease(runner_a, A, []) == []


def test_a_lease_held_by_an_open_transaction_does_not_hold_up_another_process(
    db: TestDatabase, conn: Conn, runner_a: Conn, runner_b: Conn
) -> None:
    """A's call is in a transaction still open (it deleted C's expired leases,
    and holds them); B, naming the same endpoints the other way round, neither
    waits for it nor deadlocks with it: the leases are taken in endpoint order
    and the expired ones another call holds are skipped."""
    other = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(other, iso_at(0))
    lease(other, "host-c:1:c", ["iris", "rpc:x"], ttl=1)
    pin_clock(runner_a, iso_at(5))
    pin_clock(runner_b, iso_at(5))
    runner_b.execute("SET lock_timeout = '2s'")

    with runner_a.transaction():
        assert lease(runner_a, A, ["iris", "rpc:x"]) == [("iris", 1, None), ("rpc:x", 1, None)]
        # A's new leases are not committed: B sees itself alone
        assert lease(runner_b, B, ["rpc:x", "iris"]) == [("rpc:x", 1, None), ("iris", 1, None)]
    assert lease(runner_b, B, ["rpc:x", "iris"]) == [("rpc:x", 2, None), ("iris", 2, None)]
    assert {r[1] for r in leases(conn)} == {A, B}


def test_the_same_endpoints_in_opposite_orders_never_deadlock(db: TestDatabase, conn: Conn) -> None:
    """Two processes renewing one instance's leases (a restart that kept its
    id) in opposite orders, again and again: each call sorts the endpoints,
    so one waits for the other and none fails with a deadlock."""
    names = [f"rpc:chain-{i:02d}" for i in range(40)]
    errors: list[BaseException] = []
    dsn = db.runner_dsn("testnet")  # the login, made once before the threads

    def renew(order: list[str]) -> None:
        try:
            with bind(db.connect(dsn)) as c:
                pin_clock(c, iso_at(0))
                for _ in range(25):
                    lease(c, A, order)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=renew, args=(o,)) for o in (names, names[::-1])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(leases(conn)) == 40


BAD_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    # QT002: what is not a call's argument at all
    ("QT002", "no instance", {"instance": None}),
    ("QT002", "a blank instance", {"instance": " "}),
    ("QT002", "an instance with a space", {"instance": "host a:1"}),
    ("QT002", "an instance of 201 characters", {"instance": "h" * 201}),
    ("QT002", "no endpoints", {"endpoints": None}),
    ("QT002", "no slowed_until", {"slowed": None}),
    ("QT002", "fewer slowed_until", {"slowed": [None]}),
    ("QT002", "more slowed_until", {"slowed": [None, None, None]}),
    ("QT002", "a NULL endpoint", {"endpoints": ["iris", None]}),
    ("QT002", "an upper-case endpoint", {"endpoints": ["iris", "RPC:x"]}),
    ("QT002", "an endpoint with a slash", {"endpoints": ["iris", "https://rpc"]}),
    ("QT002", "an empty endpoint", {"endpoints": ["iris", ""]}),
    ("QT002", "an endpoint of 201 characters", {"endpoints": ["iris", "r" * 201]}),
    ("QT002", "an endpoint twice", {"endpoints": ["iris", "iris"]}),
    (
        "QT002",
        "101 endpoints",
        {"endpoints": [f"rpc:c{i}" for i in range(101)], "slowed": [None] * 101},
    ),
    ("QT002", "no ttl", {"ttl": None}),
    ("QT002", "a ttl of 0", {"ttl": "0"}),
    ("QT002", "a negative ttl", {"ttl": "-5"}),
    ("QT002", "a ttl of -Infinity", {"ttl": "-Infinity"}),
    # QT005: beyond a bound
    ("QT005", "a ttl of half a second", {"ttl": "0.5"}),
    ("QT005", "a ttl over 600 s", {"ttl": "600.001"}),
    ("QT005", "a NaN ttl", {"ttl": "NaN"}),
    ("QT005", "an infinite ttl", {"ttl": "Infinity"}),
    ("QT005", "an instance beyond the text bound", {"instance": "h" * 5000}),
    ("QT005", "a slowdown over an hour ahead", {"slowed": [None, iso_at(3610.001)]}),
    ("QT005", "an infinite slowdown", {"slowed": ["infinity", None]}),
    ("QT005", "a slowdown at -infinity", {"slowed": ["-infinity", None]}),
]


@pytest.mark.parametrize(
    ("code", "change"), [(c, ch) for c, _, ch in BAD_CALLS], ids=[w for _, w, _ in BAD_CALLS]
)
def test_a_bad_call_is_refused_whole_and_changes_nothing(
    conn: Conn, runner_a: Conn, code: str, change: dict[str, Any]
) -> None:
    lease(runner_a, B, ["iris", "rpc:x"], [time_at(20), None], ttl=5)  # something to keep
    pin_clock(runner_a, iso_at(10))  # B's leases expired: a call would delete them
    args: dict[str, Any] = {
        "instance": A,
        "endpoints": ["iris", "rpc:x"],
        "slowed": [None, time_at(60)],
        "ttl": "15",
        **change,
    }
    assert_rejected(
        runner_a,
        code,
        "SELECT * FROM lease_endpoints(%s, %s::text[], %s::timestamptz[], %s::numeric)",
        (args["instance"], args["endpoints"], args["slowed"], args["ttl"]),
        watcher=conn,
    )
    assert len(leases(conn)) == 2


def test_the_bounds_themselves_are_taken(runner_a: Conn) -> None:
    names = [f"rpc:c{i:03d}" for i in range(100)]
    assert len(lease(runner_a, A, names, ttl=600)) == 100
    longest = "r" * 200
    assert lease(runner_a, "h" * 200, [longest], [time_at(3600)], ttl=1) == [
        (longest, 1, time_at(3600))
    ]


def test_a_runner_may_lease_and_an_operator_or_a_reader_may_not(
    db: TestDatabase, runner_a: Conn
) -> None:
    assert lease(runner_a, A, ["iris"]) == [("iris", 1, None)]
    operator = bind(db.connect(db.operator_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    for login in (operator, reader):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            lease(login, A, ["iris"])
        # they read what the runners leased
        assert login.execute("SELECT count(*) FROM endpoint_leases").fetchone() == (1,)
    # a runner writes the table only through the function
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner_a.execute("DELETE FROM endpoint_leases")


def test_endpoint_budgets_shows_the_live_sharers_and_a_slowdown_ahead(
    db: TestDatabase, conn: Conn, runner_a: Conn, runner_b: Conn
) -> None:
    lease(runner_a, A, ["rpc:x", "iris"], [time_at(30), None])
    lease(runner_b, B, ["rpc:x"], ttl=5)
    operator = bind(db.connect(db.operator_dsn("testnet")))
    view = "SELECT endpoint, sharers, instances, slowed_until FROM endpoint_budgets ORDER BY 1"

    for reader in (conn, operator):
        pin_clock(reader, iso_at(1))
        assert reader.execute(view).fetchall() == [
            ("iris", 1, [A], None),
            ("rpc:x", 2, [A, B], time_at(30)),
        ]
        pin_clock(reader, iso_at(10))  # B's lease lapsed (not yet deleted)
        assert reader.execute(view).fetchall() == [
            ("iris", 1, [A], None),
            ("rpc:x", 1, [A], time_at(30)),
        ]
        pin_clock(reader, iso_at(30))  # the slowdown is over, A's leases too
        assert reader.execute(view).fetchall() == []


def test_waiting_nodes_shows_why_and_how_long_a_ready_node_waits(
    db: TestDatabase, conn: Conn
) -> None:
    conn.execute("SELECT upsert_lane_baseline('bridge', 600, p_release_retry_seconds => 45)")
    movement = create_started(
        conn, plan(node("a", lane="bridge"), node("b", lane="bridge"), node("c")), "wait-1"
    )
    ids = node_ids(conn, movement)
    secrets = {c["node_id"]: c["claim_secret"] for c in claim(conn, "dispatcher-1")}
    reason = "throttled: rpc:base-sepolia its next turn in 12.5 s"
    conn.execute(
        "SELECT * FROM release_nodes(%s, %s, %s, 12.5)", ([ids["a"]], [secrets[ids["a"]]], reason)
    )
    conn.execute(
        "SELECT * FROM release_nodes(%s, %s, %s)", ([ids["b"]], [secrets[ids["b"]]], "no executor")
    )
    conn.execute(
        "SELECT * FROM release_nodes(%s, %s, %s, 0)", ([ids["c"]], [secrets[ids["c"]]], "now")
    )  # due at once: not waiting
    view = (
        "SELECT node_id, movement_id, node_key, executor_key, lane, not_before, seconds_left,"
        " last_error FROM waiting_nodes"
    )

    pin_clock(conn, iso_at(2.5))
    assert conn.execute(view).fetchall() == [
        (ids["a"], movement, "a", "sim", "bridge", time_at(12.5), Decimal("10"), reason),
        (ids["b"], movement, "b", "sim", "bridge", time_at(45), Decimal("42.5"), "no executor"),
    ]
    operator = bind(db.connect(db.operator_dsn("testnet")))
    pin_clock(operator, iso_at(12.5))  # a's wait is over: it is claimable, not waiting
    assert [r[2] for r in operator.execute(view).fetchall()] == ["b"]
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    pin_clock(reader, iso_at(45))
    assert reader.execute(view).fetchall() == []
    # at 2.5 s the dispatchers take c alone
    assert [c["node_id"] for c in claim(conn, "dispatcher-2")] == [ids["c"]]
