"""Rehearsal requests, the database side: request_rehearsal (what the
operator page and the HTTP API ask), claim_rehearsal_request and
finish_rehearsal_request (what `qtg rehearse --requested` serves them with),
and the rehearsal_status view that shows both.

Pins: any operator asks for a rehearsal of a movement PENDING_APPROVAL,
audited and NOTIFYd on qtg_<network>_rehearsals; asking again while one is
open answers that request and writes nothing, whoever asks. A service (an
operator's login) claims the oldest open request, never one another holds:
two services at once get two requests, or one and none (SKIP LOCKED, neither
waits), and a claim older than 30 minutes is taken over, the old claimer
then refused its finish. Only the claimer finishes, with exactly one of the
rehearsal it recorded (of that movement) or a problem; the same finish again
answers the same. Requests of movements no longer awaiting approval are
finished in passing by a claim, never handed out. Every refusal changes
nothing; runner and reader logins may call none of the three. The view shows
the latest rehearsal with its lines and the latest request.

The service (`qtg rehearse --requested`, no chain here: tests/chains has a
rehearsal served on forks) finishes a request it cannot rehearse with why
and goes on; it is called with a MOVEMENT or --requested, never both or
neither; with --watch a request's NOTIFY wakes it at once and SIGTERM ends
it cleanly (exit 0).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import approve, assert_rejected, bind, create, fingerprint
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from rows import DIAMOND, Conn, movement_in, person, set_clock, time_at
from typer.testing import CliRunner

from qtg_cli import app
from qtg_rehearsal import command
from qtg_runner.db import procs

WATCHED = ("movement_requests", "audit_outbox", "movement_rehearsals", "rehearsal_requests")
SUMMARY = {"outcome": "failed", "lines": ["burn: reverted (allowance)", "mint: not run"]}
STALE = 30 * 60


def request_row(conn: Conn, request_id: int) -> dict[str, Any]:
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(
            "SELECT * FROM rehearsal_requests WHERE id = %s", (request_id,)
        ).fetchone()
    assert row is not None
    return row


def status(conn: Conn, movement_id: int) -> dict[str, Any] | None:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM rehearsal_status WHERE movement_id = %s", (movement_id,)
        ).fetchone()


def pending(creator: Conn, external_id: str = "m1") -> int:
    """A movement PENDING_APPROVAL, created by ``creator``'s login."""
    created = procs.create_movement(external_id, Decimal(5), plan=DIAMOND).one(creator)
    return int(created.movement_id)


def test_a_request_is_asked_once_claimed_served_and_shown(db: TestDatabase, conn: Conn) -> None:
    alice, bob, service = person(db, "alice"), person(db, "bob"), person(db, "service")
    movement_id = pending(alice)
    listener = bind(db.connect())
    listener.execute("LISTEN qtg_testnet_rehearsals")
    assert status(conn, movement_id) is None

    request_id = procs.request_rehearsal(movement_id).one(alice)  # the creator may ask

    woke = list(listener.notifies(timeout=5, stop_after=1))
    assert [(n.channel, n.payload) for n in woke] == [("qtg_testnet_rehearsals", str(request_id))]
    row = request_row(conn, request_id)
    assert (row["movement_id"], row["requested_by"], row["requested_at"]) == (
        movement_id,
        alice.info.user,
        time_at(0),
    )
    assert row["claimed_by"] is row["finished_at"] is row["rehearsal_id"] is row["problem"] is None
    asked = conn.execute(
        "SELECT login, entity, entity_id, from_state, to_state, detail FROM audit_outbox"
        " WHERE request_id = %s AND action = 'rehearsal_requested'",
        (movement_id,),
    ).fetchall()
    assert asked == [
        (alice.info.user, "request", str(movement_id), "PENDING_APPROVAL", "PENDING_APPROVAL",
         {"request_id": request_id}),
    ]  # fmt: skip

    # asked again, by anyone, while it is open: that request, nothing written, nobody woken
    before = fingerprint(conn)
    assert procs.request_rehearsal(movement_id).one(bob) == request_id
    assert procs.request_rehearsal(movement_id).one(alice) == request_id
    assert fingerprint(conn) == before
    assert list(listener.notifies(timeout=0.3)) == []

    set_clock(service, 60)
    claimed = procs.claim_rehearsal_request().one(service)
    assert claimed == procs.RehearsalRequest(request_id, movement_id, 1)
    assert procs.claim_rehearsal_request().one_or_none(service) is None  # its own claim too
    assert procs.request_rehearsal(movement_id).one(bob) == request_id  # still open
    shown = status(conn, movement_id)
    assert shown is not None
    assert (shown["request_id"], shown["requested_by"], shown["claimed_by"]) == (
        request_id,
        alice.info.user,
        service.info.user,
    )
    assert (shown["claimed_at"], shown["request_finished_at"], shown["rehearsal_id"]) == (
        time_at(60),
        None,
        None,
    )

    set_clock(service, 90)
    rehearsal_id = procs.record_rehearsal(movement_id, "failed", SUMMARY).one(service)
    finished = procs.finish_rehearsal_request(request_id, 1, rehearsal_id, None).one(service)
    assert finished == time_at(90)
    set_clock(service, 120)
    before = fingerprint(conn)
    assert (
        procs.finish_rehearsal_request(request_id, 1, rehearsal_id, None).one(service) == finished
    )
    assert fingerprint(conn) == before

    shown = status(conn, movement_id)
    assert shown is not None
    assert {k: shown[k] for k in ("state", "rehearsal_id", "outcome", "recorded_by")} == {
        "state": "PENDING_APPROVAL",
        "rehearsal_id": rehearsal_id,
        "outcome": "failed",
        "recorded_by": service.info.user,
    }
    assert (shown["recorded_at"], shown["lines"]) == (time_at(90), SUMMARY["lines"])
    assert (shown["request_finished_at"], shown["request_rehearsal_id"]) == (
        time_at(90),
        rehearsal_id,
    )
    assert shown["request_problem"] is None

    # finished: a new request may be asked, and is the one shown
    again = procs.request_rehearsal(movement_id).one(bob)
    assert again > request_id
    shown = status(conn, movement_id)
    assert shown is not None and (shown["request_id"], shown["requested_by"]) == (
        again,
        bob.info.user,
    )
    assert shown["rehearsal_id"] == rehearsal_id


def test_a_request_finished_with_a_problem_is_shown_with_it(db: TestDatabase, conn: Conn) -> None:
    service, bob = person(db, "service"), person(db, "bob")
    movement_id = pending(bob)
    request_id = procs.request_rehearsal(movement_id).one(bob)
    claim = procs.claim_rehearsal_request().one(service).claim
    problem = "set QTG_RPC_A to the chains' RPC URLs: the rehearsal forks them"
    procs.finish_rehearsal_request(request_id, claim, None, problem).one(service)
    shown = status(conn, movement_id)
    assert shown is not None
    assert (shown["rehearsal_id"], shown["outcome"], shown["lines"]) == (None, None, None)
    assert (shown["request_id"], shown["request_problem"]) == (request_id, problem)


def test_requests_are_refused_changing_nothing(db: TestDatabase, conn: Conn) -> None:
    approved = movement_in(conn, "APPROVED", "m2")
    cancelled = movement_in(conn, "CANCELLED", "m3")
    ask = "SELECT request_rehearsal(%s)"
    for code, movement_id in (
        ("QT010", 2**62),
        ("QT010", None),
        ("QT010", -1),
        ("QT020", approved),
        ("QT020", cancelled),
    ):
        error = assert_rejected(conn, code, ask, (movement_id,), WATCHED)
        assert error.diag.message_hint
    pending_id = create(conn, DIAMOND, "m4")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    reader = bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn))
    for login in (runner, reader):
        assert_rejected(login, "42501", ask, (pending_id,), WATCHED, watcher=conn)
        assert_rejected(login, "42501", "SELECT * FROM claim_rehearsal_request()", (), WATCHED,
                        watcher=conn)  # fmt: skip
        assert_rejected(
            login, "42501", "SELECT finish_rehearsal_request(1, 1, NULL, 'x')", (), WATCHED,
            watcher=conn,
        )  # fmt: skip
    # the reader reads the requests and the view (operators are readers)
    procs.request_rehearsal(pending_id).one(person(db, "alice"))
    assert reader.execute("SELECT count(*) FROM rehearsal_requests").fetchone() == (1,)
    assert reader.execute("SELECT count(*) FROM rehearsal_status").fetchone() == (1,)


def test_a_finish_is_refused_changing_nothing(db: TestDatabase, conn: Conn) -> None:
    service, other_service = person(db, "service"), person(db, "other")
    alice = person(db, "alice")
    movement_id, other_id = pending(alice, "m1"), pending(alice, "m2")
    mine = procs.request_rehearsal(movement_id).one(service)
    waiting = procs.request_rehearsal(other_id).one(service)
    assert procs.claim_rehearsal_request().one(service).request_id == mine
    rehearsal = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(service)
    elsewhere = procs.record_rehearsal(other_id, "passed", {"outcome": "passed"}).one(service)
    finish = "SELECT finish_rehearsal_request(%s, %s, %s, %s)"
    refused: list[tuple[Conn, str, tuple[Any, ...]]] = [
        (service, "QT002", (mine, 1, None, None)),  # neither
        (service, "QT002", (mine, 1, rehearsal, "and a problem")),  # both
        (service, "QT002", (mine, 1, None, "   ")),
        (service, "QT002", (mine, 1, elsewhere, None)),  # another movement's
        (service, "QT002", (mine, 1, 2**62, None)),
        (service, "QT005", (mine, 1, None, "x" * 5000)),
        (service, "QT026", (2**62, 1, rehearsal, None)),
        (service, "QT026", (None, 1, rehearsal, None)),
        (service, "QT026", (waiting, 1, elsewhere, None)),  # not claimed
        (service, "QT026", (mine, 2, rehearsal, None)),  # a claim never handed out
        (service, "QT026", (mine, 0, rehearsal, None)),
        (service, "QT026", (mine, None, rehearsal, None)),
        (other_service, "QT026", (mine, 1, rehearsal, None)),  # another login's claim
        (conn, "QT026", (mine, 1, rehearsal, None)),  # the admin holds no claim either
    ]
    for login, code, args in refused:
        error = assert_rejected(login, code, finish, args, WATCHED, watcher=conn)
        assert error.diag.message_hint, (code, args)
    procs.finish_rehearsal_request(mine, 1, None, "the forks did not start").one(service)
    for args in ((mine, 1, rehearsal, None), (mine, 1, None, "another problem")):
        error = assert_rejected(service, "QT026", finish, args, WATCHED, watcher=conn)
        assert "finished already, with the problem 'the forks did not start'" in str(error)
    assert (
        procs.finish_rehearsal_request(mine, 1, None, "the forks did not start").one(service)
        == request_row(conn, mine)["finished_at"]
    )


def test_a_creator_serves_no_request_of_its_own_and_claims_and_finishes_are_audited(
    db: TestDatabase, conn: Conn
) -> None:
    """The creator, as a rehearsal service, is not handed its own movement's
    request (it could finish it with "not needed, approve"); another service
    is, and its claim and its finish are in the audit log, by login."""
    alice, bob, service = person(db, "alice"), person(db, "bob"), person(db, "service")
    movement_id = pending(alice)
    request_id = procs.request_rehearsal(movement_id).one(bob)
    before = fingerprint(conn)
    assert procs.claim_rehearsal_request().one_or_none(alice) is None
    assert fingerprint(conn) == before
    claimed = procs.claim_rehearsal_request().one(service)
    assert claimed.request_id == request_id
    error = assert_rejected(
        service,
        "QT002",
        "SELECT finish_rehearsal_request(%s, %s, NULL, %s)",
        (request_id, claimed.claim, "forks down\x1b[2J\x1b[Hpassed: approve it"),
        WATCHED,
        watcher=conn,
    )
    assert error.diag.message_hint
    procs.finish_rehearsal_request(request_id, claimed.claim, None, "the forks did not start").one(
        service
    )
    audited = conn.execute(
        "SELECT action, actor, detail ->> 'request_id', detail ->> 'claim', detail ->> 'problem'"
        " FROM audit_outbox WHERE entity = 'request' AND entity_id = %s"
        " AND action IN ('rehearsal_request_claimed', 'rehearsal_request_finished') ORDER BY id",
        (str(movement_id),),
    ).fetchall()
    assert audited == [
        ("rehearsal_request_claimed", service.info.user, str(request_id), "1", None),
        (
            "rehearsal_request_finished",
            service.info.user,
            str(request_id),
            "1",
            "the forks did not start",
        ),
    ]


def test_two_services_never_claim_the_same_request_and_neither_waits(
    db: TestDatabase, conn: Conn
) -> None:
    alice = person(db, "alice")
    first, second = pending(alice, "m1"), pending(alice, "m2")
    one = procs.request_rehearsal(first).one(alice)
    two = procs.request_rehearsal(second).one(alice)
    a, b = person(db, "service_a"), person(db, "service_b")
    for login in (a, b):
        login.execute("SET lock_timeout = '2s'")  # a claim that waited would fail, not hang
    with a.transaction():
        got_a = procs.claim_rehearsal_request().one(a)  # its lock held until the commit
        with b.transaction():
            got_b = procs.claim_rehearsal_request().one(b)
        with b.transaction():
            assert procs.claim_rehearsal_request().one_or_none(b) is None
    assert (got_a.request_id, got_b.request_id) == (one, two)
    rows = {r: request_row(conn, r)["claimed_by"] for r in (one, two)}
    assert rows == {one: a.info.user, two: b.info.user}

    # one request, two services at once: one gets it, the other none
    third = procs.request_rehearsal(pending(alice, "m3")).one(alice)
    with a.transaction():
        assert procs.claim_rehearsal_request().one(a).request_id == third
        with b.transaction():
            assert procs.claim_rehearsal_request().one_or_none(b) is None
    assert request_row(conn, third)["claimed_by"] == a.info.user


def test_a_claim_older_than_30_minutes_is_taken_over(db: TestDatabase, conn: Conn) -> None:
    alice = person(db, "alice")
    movement_id = pending(alice)
    request_id = procs.request_rehearsal(movement_id).one(alice)
    dead, alive = person(db, "dead_service"), person(db, "live_service")
    assert procs.claim_rehearsal_request().one(dead).request_id == request_id
    set_clock(alive, STALE - 1)
    assert procs.claim_rehearsal_request().one_or_none(alive) is None
    set_clock(alive, STALE + 1)
    assert procs.claim_rehearsal_request().one(alive).request_id == request_id
    row = request_row(conn, request_id)
    assert (row["claimed_by"], row["claimed_at"]) == (alive.info.user, time_at(STALE + 1))

    rehearsal = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(dead)
    error = assert_rejected(
        dead,
        "QT026",
        "SELECT finish_rehearsal_request(%s, %s, %s, NULL)",
        (request_id, 1, rehearsal),
        WATCHED,
        watcher=conn,
    )
    assert f"claimed by {alive.info.user}, not yours to finish" in str(error)
    # nor is the dead service's rehearsal the live claim's to finish with
    error = assert_rejected(
        alive,
        "QT002",
        "SELECT finish_rehearsal_request(%s, %s, %s, NULL)",
        (request_id, 2, rehearsal),
        WATCHED,
        watcher=conn,
    )
    assert "was not recorded by this claim" in str(error)
    own = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(alive)
    procs.finish_rehearsal_request(request_id, 2, own, None).one(alive)


def test_a_claim_taken_over_by_a_service_of_the_same_login_is_not_finished_by_the_old_one(
    db: TestDatabase, conn: Conn
) -> None:
    """Two services sharing one login: the one that died (or hung) for 30 minutes
    comes back after the other took its request over, and is refused its finish;
    the request is the new claim's to finish, and nothing changes until then."""
    alice = person(db, "alice")
    movement_id = pending(alice)
    request_id = procs.request_rehearsal(movement_id).one(alice)
    login = db.login("service", "qtg_testnet_operator")
    slow, fresh = (bind(db.connect(login.dsn)) for _ in range(2))
    assert slow.info.user == fresh.info.user
    set_clock(slow, 0)
    old = procs.claim_rehearsal_request().one(slow)
    set_clock(fresh, STALE + 1)
    new = procs.claim_rehearsal_request().one(fresh)
    assert (old.request_id, old.claim, new.request_id, new.claim) == (request_id, 1, request_id, 2)

    late = procs.record_rehearsal(movement_id, "failed", {"outcome": "failed"}).one(slow)
    for args in ((request_id, old.claim, late, None), (request_id, old.claim, None, "lost")):
        error = assert_rejected(
            slow,
            "QT026",
            "SELECT finish_rehearsal_request(%s, %s, %s, %s)",
            args,
            WATCHED,
            watcher=conn,
        )
        assert f"held by its claim 2 (by {fresh.info.user}), not by claim 1" in str(error)
        assert error.diag.message_hint
    assert request_row(conn, request_id)["finished_at"] is None

    rehearsal = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(fresh)
    procs.finish_rehearsal_request(request_id, new.claim, rehearsal, None).one(fresh)
    row = request_row(conn, request_id)
    assert (row["rehearsal_id"], row["problem"], row["claims"]) == (rehearsal, None, 2)


def test_requests_of_movements_no_longer_awaiting_approval_are_finished_in_passing(
    db: TestDatabase, conn: Conn
) -> None:
    alice, service, other = person(db, "alice"), person(db, "service"), person(db, "other")
    held = pending(alice, "m0")
    ids = {held: procs.request_rehearsal(held).one(alice)}
    assert procs.claim_rehearsal_request().one(service).request_id == ids[held]  # a live claim
    approved, cancelled, waiting = (pending(alice, f"m{i}") for i in range(1, 4))
    ids |= {m: procs.request_rehearsal(m).one(alice) for m in (approved, cancelled, waiting)}
    for movement_id in (held, approved):
        approve(conn, movement_id)
    procs.cancel_movement(cancelled).one(alice)
    set_clock(other, 10)

    claimed = procs.claim_rehearsal_request().one(other)

    assert claimed == procs.RehearsalRequest(ids[waiting], waiting, 1)
    for movement_id in (approved, cancelled):
        row = request_row(conn, ids[movement_id])
        assert (row["finished_at"], row["problem"], row["claimed_by"]) == (
            time_at(10),
            "the movement is no longer awaiting approval",
            None,
        )
    assert request_row(conn, ids[held])["finished_at"] is None  # its service finishes it
    assert procs.claim_rehearsal_request().one_or_none(other) is None


def test_lines_that_are_not_a_list_are_never_recorded(conn: Conn) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    assert_rejected(
        conn,
        "QT002",
        "SELECT record_rehearsal(%s, 'passed', %s::jsonb)",
        (movement_id, json.dumps({"outcome": "passed", "lines": "x"})),
    )
    assert conn.execute(
        "SELECT count(*) FROM rehearsal_status WHERE movement_id = %s", (movement_id,)
    ).fetchone() == (0,)


def test_a_request_of_the_other_network_is_not_seen(db: TestDatabase, conn: Conn) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    procs.request_rehearsal(movement_id).one(conn)
    other = bind(db.connect(), "mainnet")
    assert procs.claim_rehearsal_request().one_or_none(other) is None
    with pytest.raises(psycopg.Error) as refused:
        procs.request_rehearsal(movement_id).one(other)
    assert refused.value.sqlstate == "QT010"


# --- the rehearsal service: `qtg rehearse --requested` --------------------------------------


def qtg(db: TestDatabase, *args: str) -> Any:
    """`qtg ARGS` in this process, as an operator login of testnet."""
    env = {"QTG_DATABASE_URL": db.operator_dsn("testnet"), "QTG_NETWORK_MODE": "testnet"}
    return CliRunner().invoke(app, list(args), env={**env, "COLUMNS": "200"})


def test_the_service_finishes_a_request_it_cannot_rehearse_with_the_problem(
    db: TestDatabase, conn: Conn
) -> None:
    """A movement whose plan names no chain cannot be forked: the request is
    finished with why, the service goes on and exits 0 once none waits."""
    first, second = create(conn, DIAMOND, "m1"), create(conn, DIAMOND, "m2")
    alice = person(db, "alice")
    ids = [procs.request_rehearsal(m).one(alice) for m in (first, second)]

    served = qtg(db, "rehearse", "--requested")

    assert served.exit_code == 0, served.output
    problem = "the rehearsal could not run: the movement's plan names no registered chain"
    assert served.stdout.splitlines() == [
        f"request {ids[0]}: movement {first}: {problem}: nothing to fork",
        f"request {ids[1]}: movement {second}: {problem}: nothing to fork",
    ]
    for request_id in ids:
        row = request_row(conn, request_id)
        assert row["finished_at"] is not None and row["rehearsal_id"] is None
        assert row["problem"] == f"{problem}: nothing to fork"
        assert row["claimed_by"] == conninfo_to_dict(db.operator_dsn("testnet"))["user"]
    again = qtg(db, "rehearse", "--requested")
    assert (again.exit_code, again.stdout) == (0, "no rehearsal request waits\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "give a MOVEMENT to rehearse, or --requested"),
        (("7", "--requested"), "not both"),
        (("7", "--watch"), "--watch serves requests: give it with --requested"),
        (("--requested", "--block", "a=1"), "--block forks one MOVEMENT's chains"),
        (("--requested", "--no-record"), "--requested records every rehearsal"),
        (("--requested", "--timeout", "1800"), "--timeout with --requested is at most 1500 s"),
    ],
)
def test_the_command_says_how_it_is_called(
    db: TestDatabase, args: tuple[str, ...], said: str
) -> None:
    refused = qtg(db, "rehearse", *args)
    assert refused.exit_code == 2, refused.output
    assert said in refused.stderr


@contextmanager
def watching_service(db: TestDatabase) -> Iterator[subprocess.Popen[str]]:
    """`qtg rehearse --requested --watch` as an operator's process (a 600 s poll:
    only a NOTIFY wakes it within a test), killed if the block leaves it running."""
    env = {
        **os.environ,
        "QTG_DATABASE_URL": db.operator_dsn("testnet"),
        "QTG_NETWORK_MODE": "testnet",
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }
    command = "import sys; from qtg_cli import run; sys.argv[0] = 'qtg'; run()"
    service = subprocess.Popen(
        [sys.executable, "-c", command, "rehearse", "--requested", "--watch", "--poll", "600"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield service
    finally:
        if service.poll() is None:
            service.kill()


def listening(db: TestDatabase, conn: Conn, service: subprocess.Popen[str]) -> int:
    """The backend pid of the service once it waits for a request: it LISTENs
    before it claims, so its first claim finding nothing means it listens."""
    login = conninfo_to_dict(db.operator_dsn("testnet"))["user"]
    deadline = time.monotonic() + 30
    while True:
        waiting = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s AND state = 'idle'"
            " AND query LIKE '%%claim_rehearsal_request%%'",
            (login,),
        ).fetchall()
        if len(waiting) == 1:
            return int(waiting[0][0])
        assert service.poll() is None, service.communicate()
        assert time.monotonic() < deadline, "the service never waited for a request"
        time.sleep(0.1)


def stop(service: subprocess.Popen[str]) -> tuple[str, str]:
    service.send_signal(signal.SIGTERM)
    out, err = service.communicate(timeout=30)
    assert service.returncode == 0, err
    return out, err


def test_the_watching_service_wakes_on_a_request_and_stops_on_sigterm(
    db: TestDatabase, conn: Conn
) -> None:
    movement_id = create(conn, DIAMOND, "m1")
    with watching_service(db) as service:
        listening(db, conn, service)
        started = time.monotonic()
        request_id = procs.request_rehearsal(movement_id).one(person(db, "alice"))
        assert service.stdout is not None
        line = service.stdout.readline()
        assert line.startswith(f"request {request_id}: movement {movement_id}: the rehearsal"), line
        assert time.monotonic() - started < 20  # the NOTIFY woke it, not the 600 s poll
        out, _ = stop(service)
    assert out == "stopped: 1 rehearsal request(s) served\n"
    assert request_row(conn, request_id)["finished_at"] is not None


def test_the_watching_service_connects_again_after_losing_the_database(
    db: TestDatabase, conn: Conn
) -> None:
    # a restart or a failover ends the service's session: it says so, connects
    # again, LISTENs again, and the next request's NOTIFY wakes it as before
    movement_id = create(conn, DIAMOND, "m1")
    with watching_service(db) as service:
        first = listening(db, conn, service)
        assert conn.execute("SELECT pg_terminate_backend(%s)", (first,)).fetchone() == (True,)
        assert service.stdout is not None
        lost = service.stdout.readline()
        assert lost.startswith("lost the database (") and "connecting again in 1 s" in lost, lost
        assert listening(db, conn, service) != first
        request_id = procs.request_rehearsal(movement_id).one(person(db, "alice"))
        line = service.stdout.readline()
        assert line.startswith(f"request {request_id}: movement {movement_id}: the rehearsal"), line
        out, _ = stop(service)
    assert out == "stopped: 1 rehearsal request(s) served\n"
    assert request_row(conn, request_id)["finished_at"] is not None


def in_hand(db: TestDatabase, conn: Conn) -> tuple[int, Conn, Conn, procs.RehearsalRequest]:
    """A movement asked to be rehearsed by alice, its request claimed by olga's
    service: the movement, alice, olga and the claim."""
    movement_id = create(conn, DIAMOND, "m1")
    alice, olga = person(db, "alice"), person(db, "olga")
    procs.request_rehearsal(movement_id).one(alice)
    return movement_id, alice, olga, procs.claim_rehearsal_request().one(olga)


def next_session(olga: Conn, served: Any) -> None:
    """The service's next session with the database (serving, not watching)."""
    command._serve(olga, "testnet", None, served, 60, False, 600, command.Interrupts())


def test_a_request_in_hand_when_the_database_was_lost_is_finished_on_reconnecting(
    db: TestDatabase, conn: Conn, capsys: pytest.CaptureFixture[str]
) -> None:
    # the service claimed a request, then lost the database before finishing
    # it: its next session finishes it with that problem, so the operator can
    # ask again at once, not after the 30 minutes a claim takes to be taken over
    movement_id, alice, olga, claimed = in_hand(db, conn)
    request_id = claimed.request_id
    served = command._Served(in_hand=claimed)

    next_session(olga, served)

    row = request_row(conn, request_id)
    assert row["finished_at"] is not None and row["problem"] == command.LOST_IN_HAND
    assert served.in_hand is None and served.count == 0
    said = capsys.readouterr().out
    assert f"request {request_id}: movement {movement_id}: {command.LOST_IN_HAND}" in said
    # asked again at once, and served by the next claim
    again = procs.request_rehearsal(movement_id).one(alice)
    assert again != request_id


def test_a_request_in_hand_whose_rehearsal_was_recorded_is_finished_with_it(
    db: TestDatabase, conn: Conn
) -> None:
    # the rehearsal was recorded, then the database was lost before the request
    # was finished: the next session finishes it with that rehearsal
    movement_id, _, olga, claimed = in_hand(db, conn)
    recorded = procs.record_rehearsal(movement_id, "passed", {"outcome": "passed"}).one(olga)
    served = command._Served(in_hand=claimed, recorded=recorded)

    next_session(olga, served)

    row = request_row(conn, claimed.request_id)
    assert (row["rehearsal_id"], row["problem"]) == (recorded, None)
    assert row["finished_at"] is not None
    assert (served.in_hand, served.recorded) == (None, None)


@pytest.mark.parametrize(
    ("error", "lost"),
    [
        (psycopg.errors.AdminShutdown(), True),  # 57P01: terminated, or the server stopping
        (psycopg.errors.CannotConnectNow(), True),  # 57P03: the server starting
        (psycopg.errors.ConnectionFailure(), True),  # 08006
        (psycopg.InterfaceError("the connection is closed"), True),
        (psycopg.errors.LockNotAvailable(), False),  # 55P03: a lock timeout
        (psycopg.errors.SerializationFailure(), False),  # 40001
        (psycopg.errors.QueryCanceled(), False),  # 57014: a statement timeout
        (psycopg.errors.InvalidPassword(), False),  # 28P01: a login refused
    ],
)
def test_only_a_lost_database_makes_the_watching_service_connect_again(
    error: psycopg.Error, lost: bool
) -> None:
    assert command.lost_database(error, None) is lost
