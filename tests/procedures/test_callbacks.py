"""The callback outbox's delivery procedures (migration 0026_callback_targets):
upsert_callback_target (the admin's), claim_callbacks and complete_callback
(the callback_dispatcher's), replay_callback (an operator's), the
callback_deliveries and dead_callbacks views; and that no runner login reads
a target's signing secret from the database (it is not there)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    approve,
    as_person,
    bind,
    fingerprint,
    forged_secret,
    node,
    pin_clock,
    plan,
    wait_until_blocked_on_a_lock,
)
from rows import Conn, iso_at, person, set_clock, time_at

from qtg_runner.db import procs

URL = "https://hooks.example.test/qtg"
SECRET = "whsec_" + "c2VjcmV0LXRoYXQtbmV2ZXItZW50ZXJzLXRoZS1kYg=="


def target(conn: Conn, url: str = URL, name: str = "ops", **kw: Any) -> None:
    procs.upsert_callback_target(name, url, "env:QTG_CB_OPS", **kw).one(conn)


def movement(conn: Conn, external_id: str, url: str | None = URL) -> int:
    with as_person(conn, "alice"):
        created = procs.create_movement(
            external_id, Decimal(100), plan=plan(node("a")),
            callback_url=url,
        ).one(conn)  # fmt: skip
    return created.movement_id


def row(conn: Conn, callback_id: int) -> dict[str, Any]:
    cur = conn.execute("SELECT * FROM callback_outbox WHERE id = %s", (callback_id,))
    names = [d.name for d in cur.description or ()]
    found = cur.fetchone()
    assert found is not None
    return dict(zip(names, found, strict=True))


def refused(conn: Conn, code: str, call: procs.Call[Any], by: Conn | None = None) -> None:
    """``call`` (on ``by``, else ``conn``) fails with ``code`` and changes no table."""
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as err:
        call.one(by or conn)
    assert err.value.sqlstate == code, err.value
    assert fingerprint(conn) == before


def settings(conn: Conn, **values: Any) -> None:
    for column, value in values.items():
        conn.execute(f"UPDATE callback_settings SET {column} = %s", (value,))


def test_a_claim_leases_due_rows_of_registered_targets(conn: Conn) -> None:
    target(conn)
    sent = movement(conn, "m1")
    movement(conn, "m2", url=None)  # names no receiver: no callback row at all
    stranger = movement(conn, "m3", url="https://elsewhere.test/cb")
    claims = procs.claim_callbacks("d1", 10).all(conn)
    assert [(c.movement_id, c.event_type) for c in claims] == [(sent, "movement.pending_approval")]
    [c] = claims
    assert (c.target_name, c.url, c.secret_ref, c.allow_private, c.attempt) == (
        "ops",
        URL,
        "env:QTG_CB_OPS",
        False,
        1,
    )
    assert c.idempotency_key == f"testnet-{sent}-pending_approval"
    assert c.payload["movement_id"] == sent and c.payload["to_state"] == "PENDING_APPROVAL"
    assert "claim_secret" not in repr(c)
    stray = conn.execute(
        "SELECT delivery_state, last_error FROM callback_outbox WHERE request_id = %s", (stranger,)
    ).fetchone()
    assert stray is not None and stray[0] == "REFUSED"
    backlog = conn.execute(
        "SELECT target_name, pending, due_now, attempted, refused FROM callback_backlog ORDER BY 1"
    ).fetchall()
    assert backlog == [("(unregistered)", 0, 0, 0, 1), ("ops", 1, 0, 1, 0)]
    assert "https://elsewhere.test/cb is not the url of an enabled callback target" in stray[1]
    # leased: not claimed again until the lease (60 s) runs out, then again, same key
    assert procs.claim_callbacks("d2", 10).all(conn) == []
    set_clock(conn, 61)
    [again] = procs.claim_callbacks("d2", 10).all(conn)
    assert (again.callback_id, again.idempotency_key, again.attempt) == (
        c.callback_id, c.idempotency_key, 2
    )  # fmt: skip
    # the first claimer's late report is refused, nothing changed
    refused(
        conn, "QT030",
        procs.complete_callback(c.callback_id, c.claim_secret, 200),
    )  # fmt: skip
    assert procs.complete_callback(again.callback_id, again.claim_secret, 204).one(conn) == "SENT"
    sent_row = row(conn, c.callback_id)
    assert (sent_row["delivery_state"], sent_row["last_status"], sent_row["sent_at"]) == (
        "SENT", 204, time_at(61)
    )  # fmt: skip
    # who said the receiver has it, and what it said, outlives the row's pruning
    said = conn.execute(
        "SELECT actor, action, from_state, to_state, detail FROM audit_outbox"
        " WHERE entity = 'callback' AND entity_id = %s",
        (str(c.callback_id),),
    ).fetchall()
    assert said == [(conn.info.user, "callback_sent", "PENDING", "SENT", {
        "status": 204, "target": "ops", "url": URL, "webhook_id": c.idempotency_key,
        "event": "movement.pending_approval", "attempt": 2, "by": "d2",
    })]  # fmt: skip


def test_a_failure_backs_off_exponentially_with_jitter_then_dies(conn: Conn) -> None:
    target(conn)
    settings(conn, max_attempts=5, backoff_base_seconds=10, backoff_cap_seconds=50)
    movement(conn, "m1")
    at = 0.0
    waits = []
    for attempt in range(1, 6):
        set_clock(conn, at)
        [c] = procs.claim_callbacks("d1", 10).all(conn)
        assert c.attempt == attempt
        state = procs.complete_callback(c.callback_id, c.claim_secret, 503, "down").one(conn)
        r = row(conn, c.callback_id)
        if attempt < 5:
            assert state == "PENDING"
            wait = (r["next_attempt_at"] - time_at(at)).total_seconds()
            full = min(50, 10 * 2 ** (attempt - 1))
            assert full / 2 <= wait < full, (attempt, wait)
            waits.append(wait)
            at += wait
            set_clock(conn, at - 0.5)
            assert procs.claim_callbacks("d1", 10).all(conn) == []  # not due before its time
        else:
            assert state == "DEAD"
    assert (r["delivery_state"], r["attempts"], r["last_error"]) == ("DEAD", 5, "down")
    dead = conn.execute("SELECT callback_id, attempts, last_error FROM dead_callbacks").fetchall()
    assert dead == [(c.callback_id, 5, "down")]
    audit = conn.execute(
        "SELECT action, to_state FROM audit_outbox WHERE entity = 'callback' ORDER BY id"
    ).fetchall()
    assert audit == [("callback_dead", "DEAD")]
    backlog = conn.execute(
        "SELECT target_name, pending, dead, refused FROM callback_backlog"
    ).fetchall()
    assert backlog == [("ops", 0, 1, 0)]


def test_a_row_past_its_attempts_or_its_age_dies_at_the_claim(conn: Conn) -> None:
    target(conn)
    settings(conn, max_attempts=2, max_age_seconds=3600)
    movement(conn, "crashy")
    for at in (0, 61):  # two claims whose dispatcher died (no report)
        set_clock(conn, at)
        assert len(procs.claim_callbacks("d1", 10).all(conn)) == 1
    set_clock(conn, 122)
    assert procs.claim_callbacks("d1", 10).all(conn) == []
    assert "dead: 2 attempts made" in row(conn, 1)["last_error"]
    movement(conn, "old")
    set_clock(conn, 122 + 3600)
    assert procs.claim_callbacks("d1", 10).all(conn) == []
    states = conn.execute("SELECT delivery_state FROM callback_outbox ORDER BY id").fetchall()
    assert states == [("DEAD",), ("DEAD",)]
    assert "older than callback_settings.max_age_seconds" in row(conn, 2)["last_error"]


def test_replay_by_an_operator_sends_a_dead_callback_again(conn: Conn, db: TestDatabase) -> None:
    target(conn)
    settings(conn, max_attempts=1)
    m = movement(conn, "m1")
    [c] = procs.claim_callbacks("d1", 10).all(conn)
    assert (
        procs.complete_callback(c.callback_id, c.claim_secret, None, "timeout").one(conn) == "DEAD"
    )
    unregistered = movement(conn, "m2", url="https://not-yet.test/cb")
    procs.claim_callbacks("d1", 10).all(conn)
    query = "SELECT id FROM callback_outbox WHERE request_id = %s"
    [refused_id] = conn.execute(query, (unregistered,)).fetchone() or ()
    assert conn.execute("SELECT count(*) FROM dead_callbacks").fetchone() == (2,)

    operator = bind(db.connect(db.login("carol", "qtg_testnet_operator").dsn))
    pin_clock(operator, iso_at(10))
    assert procs.replay_callback(c.callback_id, "the receiver is back").one(operator) == "PENDING"
    r = row(conn, c.callback_id)
    assert (r["delivery_state"], r["attempts"], r["next_attempt_at"], r["dead_at"]) == (
        "PENDING", 0, time_at(10), None
    )  # fmt: skip
    actor, detail = conn.execute(
        "SELECT actor, detail FROM audit_outbox WHERE action = 'callback_replayed'"
    ).fetchone() or (None, None)
    assert actor.startswith("carol_") and detail["reason"] == "the receiver is back"
    set_clock(conn, 10)
    [again] = procs.claim_callbacks("d1", 10).all(conn)
    assert (again.callback_id, again.idempotency_key) == (c.callback_id, c.idempotency_key)
    assert procs.complete_callback(again.callback_id, again.claim_secret, 200).one(conn) == "SENT"
    assert m == again.movement_id

    # a refused row is refused again until its url is registered, then sent
    procs.replay_callback(refused_id, "registering it").one(operator)
    assert procs.claim_callbacks("d1", 10).all(conn) == []
    assert row(conn, refused_id)["delivery_state"] == "REFUSED"
    target(conn, url="https://not-yet.test/cb", name="late")
    procs.replay_callback(refused_id, "registered now").one(operator)
    [late] = procs.claim_callbacks("d1", 10).all(conn)
    assert (late.callback_id, late.target_name) == (refused_id, "late")

    refused(conn, "QT071", procs.replay_callback(c.callback_id, "again"), by=operator)
    refused(conn, "QT070", procs.replay_callback(99999, "none"), by=operator)
    refused(conn, "QT002", procs.replay_callback(refused_id, " "), by=operator)


def test_two_dispatchers_never_claim_one_row(conn: Conn, db: TestDatabase) -> None:
    target(conn)
    for i in range(6):
        approve(conn, movement(conn, f"m{i}"))
    first = bind(db.connect(db.runner_dsn("testnet")))
    second = bind(db.connect(db.runner_dsn("testnet")))
    for c in (first, second):
        pin_clock(c, iso_at(0))
    with first.transaction():
        mine = procs.claim_callbacks("d1", 5).all(first)
        theirs = procs.claim_callbacks("d2", 100).all(second)  # skips the locked rows
    assert len(mine) == 5 and len(theirs) == 7
    assert not {c.callback_id for c in mine} & {c.callback_id for c in theirs}


def test_the_admin_registers_targets_and_no_runner_reads_a_secret(
    conn: Conn, db: TestDatabase
) -> None:
    target(conn, allow_private=True)
    target(conn, allow_private=True)  # the same again changes nothing
    target(conn, enabled=False)
    audit = conn.execute(
        "SELECT entity_id, detail->>'enabled' FROM audit_outbox WHERE entity = 'callback_target'"
    ).fetchall()
    assert audit == [("ops", "true"), ("ops", "false")]
    for bad in (SECRET, "QTG_CB_OPS", "vault:x", "env:", "file:../x"):
        refused(
            conn, "QT002",
            procs.upsert_callback_target("ops", URL, bad),
        )  # fmt: skip
    for url in (
        "ftp://x.test/",
        "https://user:pw@x.test/",
        "https:///x",
        "x.test",
        "https://x.test:65536/",  # a port past 65535 stopped the dispatcher that read it
        "https://x.test:0/",
        "https://[2001:db8::1]:99999/",
    ):
        refused(
            conn, "QT002",
            procs.upsert_callback_target("ops", url, "env:QTG_CB_A"),
        )  # fmt: skip
    refused(conn, "QT002", procs.upsert_callback_target("other", URL, "env:QTG_CB_A"))

    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, iso_at(0))
    for table in ("callback_targets", "callback_outbox", "callback_settings"):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            runner.execute(f"SELECT * FROM {table}")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        runner.execute("SELECT upsert_callback_target('x', %s, 'env:QTG_CB_A')", (URL,))
    # the secret is nowhere in the database, for any login: every row of every table
    # of both networks read as text by the superuser
    target(conn)  # enabled again
    movement(conn, "m1")
    [c] = procs.claim_callbacks("d1", 10).all(runner)
    assert c.secret_ref == "env:QTG_CB_OPS"
    tables = conn.execute(
        """SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
            WHERE schemaname IN ('testnet', 'mainnet', 'qtg', 'qtg_admin')"""
    ).fetchall()
    assert len(tables) > 20
    dumped = "".join(
        json.dumps(
            conn.execute(f"SELECT coalesce(string_agg(t::text, ''), '') FROM {t} t").fetchone()
        )
        for (t,) in tables
    )
    assert "env:QTG_CB_OPS" in dumped and SECRET not in dumped and SECRET[6:] not in dumped


def test_bad_reports_are_refused(conn: Conn) -> None:
    target(conn)
    movement(conn, "m1")
    [c] = procs.claim_callbacks("d1", 10).all(conn)
    for status, error, code in ((99, None, "QT002"), (600, None, "QT002"), (None, None, "QT002"),
                                (None, "  ", "QT002"), (None, "x" * 5000, "QT005")):  # fmt: skip
        refused(
            conn, code,
            procs.complete_callback(c.callback_id, c.claim_secret, status, error),
        )  # fmt: skip
    refused(conn, "QT030", procs.complete_callback(c.callback_id, forged_secret(), 200))
    refused(conn, "QT070", procs.complete_callback(999, c.claim_secret, 200))
    refused(conn, "QT002", procs.complete_callback(c.callback_id, "x", 200))
    assert row(conn, c.callback_id)["next_attempt_at"] == time_at(0) + timedelta(seconds=60)


DAY = 86_400


def test_callbacks_done_with_are_pruned_after_the_keep_and_the_rest_stay(
    conn: Conn, db: TestDatabase
) -> None:
    """prune_callbacks (0038_callback_retention), called by a runner's own login:
    SENT rows go keep_days after they were sent, NO_TARGET rows (earlier
    versions wrote one per state of a movement that named no receiver) keep_days
    after they were written; PENDING, DEAD and REFUSED rows stay whatever their age; keep_days 0
    keeps everything; each call that deletes is audited."""
    runner = person(db, "runner1", "qtg_testnet_runner")

    def at(seconds: float) -> None:
        set_clock(conn, seconds)
        set_clock(runner, seconds)

    def prune(limit: int | None = None) -> int:
        call = procs.prune_callbacks("callback_dispatcher@test", *([limit] if limit else []))
        return call.one(runner)

    def states() -> dict[int, str]:
        rows = conn.execute("SELECT id, delivery_state FROM callback_outbox ORDER BY id")
        return dict(rows.fetchall())

    target(conn)
    settings(conn, max_attempts=1, max_age_seconds=365 * DAY)  # delivered at 100 days, below
    at(0)
    sent = movement(conn, "sent")
    no_target = movement(conn, "no-target", url=None)
    conn.execute(  # as earlier versions of enqueue_callbacks wrote it
        """INSERT INTO callback_outbox (request_id, event_type, idempotency_key, payload,
                                        delivery_state, next_attempt_at, created_at)
           VALUES (%s, 'movement.pending_approval', %s, '{}', 'NO_TARGET', clock(), clock())""",
        (no_target, f"testnet-{no_target}-pending_approval"),
    )
    dead = movement(conn, "dead")
    refused_url = movement(conn, "refused", url="https://elsewhere.test/cb")
    ids = {m: i for i, m in conn.execute("SELECT id, request_id FROM callback_outbox")}
    for c in procs.claim_callbacks("d1", 10).all(conn):
        ok = c.movement_id == sent
        procs.complete_callback(c.callback_id, c.claim_secret, 200 if ok else 503, "down").one(conn)
    at(50 * DAY)
    late = movement(conn, "late")  # PENDING: sent at 100 days, below
    [(late_id,)] = conn.execute("SELECT id FROM callback_outbox WHERE request_id = %s", (late,))
    replayed = ids[dead]
    everything = states()
    assert everything == {
        ids[sent]: "SENT", ids[no_target]: "NO_TARGET", ids[dead]: "DEAD",
        ids[refused_url]: "REFUSED", late_id: "PENDING",
    }  # fmt: skip

    at(90 * DAY - 1)  # the default keeps 90 days: nothing is done with for that long
    assert prune() == 0
    settings(conn, keep_days=0)
    at(1000 * DAY)
    assert prune() == 0  # 0 keeps everything
    assert states() == everything

    settings(conn, keep_days=90)
    at(100 * DAY)
    operator = person(db, "carol")
    set_clock(operator, 100 * DAY)
    procs.replay_callback(replayed, "the receiver is back").one(operator)
    for c in procs.claim_callbacks("d1", 10).all(conn):
        procs.complete_callback(c.callback_id, c.claim_secret, 200).one(conn)
    assert states()[replayed] == states()[late_id] == "SENT"  # both sent at 100 days

    assert prune(1) == 1  # oldest first: the NO_TARGET row, written at 0
    assert ids[no_target] not in states()
    assert prune() == 1  # the one sent at 0
    assert prune() == 0
    # created at 0 and 50 days, sent at 100: kept 90 days from then
    assert states() == {replayed: "SENT", ids[refused_url]: "REFUSED", late_id: "SENT"}
    at(190 * DAY + 1)
    assert prune() == 2
    at(5000 * DAY)
    assert prune() == 0
    assert states() == {ids[refused_url]: "REFUSED"}  # an operator's to replay, forever

    audited = conn.execute(
        "SELECT actor, entity, detail FROM audit_outbox"
        " WHERE action = 'callbacks_pruned' ORDER BY id"
    ).fetchall()
    assert [(a[0], a[1], a[2]["callbacks"], a[2]["sent"], a[2]["no_target"]) for a in audited] == [
        ("callback_dispatcher@test", "callback", 1, 0, 1),
        ("callback_dispatcher@test", "callback", 1, 1, 0),
        ("callback_dispatcher@test", "callback", 2, 2, 0),
    ]
    assert audited[0][2]["first_id"] == audited[0][2]["last_id"] == ids[no_target]
    assert audited[0][2]["keep_days"] == 90


def test_the_admin_sets_the_delivery_rules_and_the_keep_audited(
    conn: Conn, db: TestDatabase
) -> None:
    """set_callback_settings (an admin step): NULL keeps a setting, a change is
    audited with the values before and after and the admin's login, a bad
    value changes nothing (QT005), and no network login may call it."""
    before = conn.execute("SELECT to_jsonb(s) - 'only_row' FROM callback_settings s").fetchone()
    procs.set_callback_settings(max_attempts=5, keep_days=30).one(conn)
    procs.set_callback_settings(max_attempts=5).one(conn)  # nothing changed: not audited
    after = conn.execute("SELECT to_jsonb(s) - 'only_row' FROM callback_settings s").fetchone()
    assert (
        before
        and after
        and {k: v for k, v in after[0].items() if before[0][k] != v}
        == {
            "max_attempts": 5,
            "keep_days": 30,
        }
    )
    audited = conn.execute(
        "SELECT login, entity, entity_id, detail FROM audit_outbox"
        " WHERE action = 'callback_settings_changed'"
    ).fetchall()
    assert len(audited) == 1
    login, entity, entity_id, detail = audited[0]
    assert (login, entity, entity_id) == (conn.info.user, "callback", "settings")
    assert (detail["before"], detail["after"]) == (before[0], after[0])

    for bad, code in (
        ({"keep_days": -1}, "QT005"),
        ({"keep_days": 36_501}, "QT005"),
        ({"max_age_seconds": float("nan")}, "QT005"),
        ({"backoff_cap_seconds": 4}, "QT005"),  # below the first wait (5 s)
        ({"backoff_base_seconds": 60, "backoff_cap_seconds": 30}, "QT005"),
    ):
        refused(conn, code, procs.set_callback_settings(**bad))
    for login in (person(db, "runner1", "qtg_testnet_runner"), person(db, "carol")):
        with pytest.raises(psycopg.Error) as err:
            procs.set_callback_settings(keep_days=1).one(login)
        assert err.value.sqlstate == "42501"
        with pytest.raises(psycopg.Error) as err:
            login.execute("UPDATE callback_settings SET keep_days = 1")
        assert err.value.sqlstate == "42501"
    assert conn.execute("SELECT keep_days FROM callback_settings").fetchone() == (30,)


def test_a_target_moved_during_a_claim_never_gets_the_rows_queued_for_its_old_url(
    conn: Conn, db: TestDatabase
) -> None:
    """The claim reads a row's target when it locks the row, and the target's
    url again when it returns the claim. The admin moving the target between
    the two reads must not send what was queued for the old url to the new
    one: the claim returns nothing for the row, which stays unsent."""
    target(conn)
    queued = movement(conn, "m1")
    movement(conn, "m2", url="https://elsewhere.test/cb")  # refused at the claim: a row it ends
    # hold the claim after its first read: ending the refused row waits on a lock the test holds
    conn.execute("""
        CREATE FUNCTION hold_the_claim() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM pg_advisory_xact_lock(4401); RETURN NEW; END $$;
        CREATE TRIGGER hold_the_claim BEFORE UPDATE ON callback_outbox
           FOR EACH ROW WHEN (NEW.delivery_state = 'REFUSED') EXECUTE FUNCTION hold_the_claim()""")
    holder = db.connect()
    holder.execute("BEGIN; SELECT pg_advisory_xact_lock(4401)")
    dispatcher = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(dispatcher, iso_at(0))
    claims: list[Any] = []
    claiming = threading.Thread(
        target=lambda: claims.extend(procs.claim_callbacks("d1", 10).all(dispatcher))
    )
    claiming.start()
    wait_until_blocked_on_a_lock(holder, dispatcher.info.backend_pid)
    procs.upsert_callback_target("ops", "https://moved.example.test/cb", "env:QTG_CB_OPS").one(conn)
    holder.execute("COMMIT")
    claiming.join(timeout=30)
    assert not claiming.is_alive()
    assert claims == []
    left = conn.execute(
        "SELECT delivery_state, target_url, attempts FROM callback_outbox WHERE request_id = %s",
        (queued,),
    ).fetchone()
    assert left == ("PENDING", URL, 1)  # leased and unsent: when the lease ends it is judged again
