"""The hash-chained audit log (migration 0025_audit_log): promote_audit moves
audit_outbox rows into audit_log in order, each row's hash taken over the row
before's hash and its own canonical text; verify_audit_chain recomputes it.

What an auditor relies on: nothing but the promoter writes the log (a runner
login has no grant on it, and even the owner's UPDATE, DELETE or TRUNCATE is
refused with QT060); an owner who disables that trigger and edits, removes or
inserts a row is found at that row; one who then rewrites every hash after
it is found by the head exported earlier; the check does not depend on the
session's time zone; an export is checked with SHA-256 alone. Each row
carries the login of the call that wrote it, under its hash (0035), and the
outbox keeps only what waits to be chained.
"""

from __future__ import annotations

import io
import json
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import assert_rejected, bind, claim, create_started, pin_clock, submit
from rows import ONE, T0, Conn

from qtg_runner.commands.audit import verify_lines
from qtg_runner.db import procs


def movements(conn: Conn, n: int = 3) -> None:
    for i in range(n):
        create_started(conn, ONE, f"m{i}")
    for claimed in claim(conn):
        submit(conn, claimed)


def outbox_left(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM audit_outbox WHERE promoted_at IS NULL").fetchone()
    assert row is not None
    return int(row[0])


def check(conn: Conn, seq: int | None = None, digest: str | None = None) -> procs.AuditChainCheck:
    return procs.verify_audit_chain(seq, digest).one(conn)


def as_owner_without_the_guard(conn: Conn, statement: str, args: tuple[Any, ...] = ()) -> None:
    """What a database owner could do: switch the append-only trigger off, write."""
    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        conn.execute(statement, args)
        conn.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only")


def test_promotion_chains_every_outbox_row_in_order(conn: Conn) -> None:
    movements(conn)
    waiting = outbox_left(conn)
    assert waiting > 0
    assert procs.promote_audit("promoter", 5).one(conn) == 5
    assert procs.promote_audit("promoter", 1000).one(conn) == waiting - 5
    assert procs.promote_audit("promoter").one(conn) == 0
    assert outbox_left(conn) == 0
    rows = conn.execute(
        "SELECT l.seq, l.outbox_id, l.prev_hash, l.row_hash, l.action, o.action, o.promoted_at"
        " FROM audit_log l JOIN audit_outbox o ON o.id = l.outbox_id ORDER BY l.seq"
    ).fetchall()
    assert [r[0] for r in rows] == list(range(1, waiting + 1))
    assert [r[1] for r in rows] == sorted(r[1] for r in rows)  # the outbox's order
    assert rows[0][2] == bytes(32)
    assert all(rows[i][2] == rows[i - 1][3] for i in range(1, len(rows)))
    assert all(r[4] == r[5] and r[6] is not None for r in rows)
    result = check(conn)
    assert (result.ok, result.checked, result.head_seq) == (True, waiting, waiting)
    assert result.head_hash == rows[-1][3].hex()


def test_the_log_is_append_only_even_for_its_owner(db: TestDatabase, conn: Conn) -> None:
    movements(conn, 1)
    procs.promote_audit("promoter").one(conn)
    for statement in (
        "UPDATE audit_log SET actor = 'mallory'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ):
        with conn.transaction():
            conn.execute("SET LOCAL ROLE qtg_owner")
            with pytest.raises(psycopg.Error) as refused, conn.transaction():
                conn.execute(statement)
            assert refused.value.sqlstate == "QT060", statement
    runner = bind(db.connect(db.runner_dsn("testnet")))
    for statement in (
        "INSERT INTO audit_log SELECT * FROM audit_log",
        "UPDATE audit_log SET actor = 'mallory'",
        "UPDATE audit_chain_head SET seq = 0",
        "UPDATE audit_batches SET promoted_at = NULL",
        "DELETE FROM audit_batches",
    ):
        with pytest.raises(psycopg.Error) as refused:
            runner.execute(statement)
        assert refused.value.sqlstate == "42501", statement
    assert check(conn).ok


def test_an_edited_row_is_found_where_it_was_edited(conn: Conn) -> None:
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    as_owner_without_the_guard(
        conn, 'UPDATE audit_log SET detail = detail || \'{"amount": "1"}\' WHERE seq = 3'
    )
    result = check(conn)
    assert (result.ok, result.first_bad_seq) == (False, 3)
    assert "do not hash" in (result.problem or "")


def test_a_removed_or_inserted_row_breaks_the_chain_there(conn: Conn) -> None:
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    as_owner_without_the_guard(conn, "DELETE FROM audit_log WHERE seq = 4")
    result = check(conn)
    assert (result.ok, result.first_bad_seq) == (False, 5)
    assert "rows 4 to 4 are missing" in (result.problem or "")


def test_rows_removed_from_the_end_are_found_by_the_head(conn: Conn) -> None:
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    last = check(conn).head_seq
    as_owner_without_the_guard(conn, "DELETE FROM audit_log WHERE seq = %s", (last,))
    result = check(conn)
    assert (result.ok, result.first_bad_seq) == (False, last)
    assert "head" in (result.problem or "")


def test_a_rewritten_chain_is_found_by_the_head_exported_before(conn: Conn) -> None:
    """The owner edits row 2 and recomputes every hash after it (and the head):
    the chain is consistent again, but not with the hash exported earlier."""
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    kept = check(conn)
    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        conn.execute("UPDATE audit_log SET actor = 'mallory' WHERE seq = 2")
        conn.execute(
            """DO $$
               DECLARE r audit_log; prev bytea;
               BEGIN
                   SELECT row_hash INTO prev FROM audit_log WHERE seq = 1;
                   FOR r IN SELECT * FROM audit_log WHERE seq >= 2 ORDER BY seq LOOP
                       r.prev_hash := prev;
                       r.row_hash := sha256(prev || convert_to(audit_canonical(r), 'UTF8'));
                       UPDATE audit_log SET prev_hash = r.prev_hash, row_hash = r.row_hash
                        WHERE seq = r.seq;
                       prev := r.row_hash;
                   END LOOP;
                   UPDATE audit_chain_head SET row_hash = prev;
               END $$"""
        )
        conn.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only")
    assert check(conn).ok  # consistent in itself
    result = check(conn, kept.head_seq, kept.head_hash)
    assert (result.ok, result.first_bad_seq) == (False, kept.head_seq)
    assert "exported earlier" in (result.problem or "")
    assert check(conn, 1, procs.audit_export(0, 1).one(conn).row_hash).ok  # row 1 is untouched


def test_the_check_does_not_depend_on_the_time_zone(conn: Conn) -> None:
    movements(conn, 1)
    procs.promote_audit("promoter").one(conn)
    conn.execute("SET TimeZone = 'Pacific/Kiritimati'")
    assert check(conn).ok
    conn.execute("SET TimeZone = 'UTC'")


def test_an_export_is_checked_with_sha256_alone(conn: Conn) -> None:
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    rows = procs.audit_export(0, 1000).all(conn)
    lines = [json.dumps(r.__dict__) for r in rows]
    head = check(conn)
    held = verify_lines(io.StringIO("\n".join(lines)), {head.head_seq: head.head_hash})
    assert (held.checked, held.first_seq, held.last_seq, held.last_hash, held.problem) == (
        len(rows),
        1,
        head.head_seq,
        head.head_hash,
        None,
    )
    # the page after a seq continues where the last one ended
    assert [r.seq for r in procs.audit_export(2, 2).all(conn)] == [3, 4]
    tampered = json.loads(lines[2])
    tampered["canonical"] = tampered["canonical"].replace('"actor"', '"actor" ', 1)
    broken = verify_lines(io.StringIO("\n".join([*lines[:2], json.dumps(tampered), *lines[3:]])))
    assert (broken.checked, broken.problem) == (
        2,
        "the chain breaks at row 3 (2 rows before it hold)",
    )


def test_an_export_cut_at_either_end_is_found_by_the_rows_kept_off_the_host(conn: Conn) -> None:
    """Rows dropped from an export's head or tail leave a chain that holds in
    itself: only the SEQ:HASH kept off the host shows the cut. A later export
    (--since) is proven by the last row of the one before it."""
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    rows = procs.audit_export(0, 1000).all(conn)
    lines = [json.dumps(r.__dict__) for r in rows]
    last = rows[-1]
    kept = {last.seq: last.row_hash}

    def verify(some: list[str], kept: dict[int, str]) -> str | None:
        return verify_lines(io.StringIO("\n".join(some)), kept).problem

    assert verify(lines, {}) is None  # its ends unproven, as the command says
    assert "starts at row 3" in (verify(lines[2:], kept) or "")
    tail_cut = f"it ends at row {last.seq - 2}, before row {last.seq} kept off the host"
    assert verify(lines[:-2], kept) == tail_cut + ": its tail was cut"
    assert f"not the {'ab' * 32} kept" in (verify(lines, {last.seq: "ab" * 32}) or "")
    middle = rows[len(rows) // 2]
    # the later export starts right after the row the one before ended on
    assert verify(lines[middle.seq :], {middle.seq: middle.row_hash, **kept}) is None
    assert "starts at row" in (verify(lines[middle.seq + 1 :], {middle.seq: middle.row_hash}) or "")
    assert "before the file's rows" in (
        verify(lines[middle.seq :], {1: rows[0].row_hash, middle.seq: middle.row_hash}) or ""
    )
    assert verify([], {}) == "it holds no export rows"


def test_bad_arguments_are_refused(conn: Conn) -> None:
    for query, args in (
        ("SELECT promote_audit('', 10)", ()),
        ("SELECT promote_audit('p', 0)", ()),
        ("SELECT * FROM verify_audit_chain(1, NULL)", ()),
        ("SELECT * FROM verify_audit_chain(1, 'zz')", ()),
        ("SELECT * FROM audit_export(-1, 10)", ()),
    ):
        assert_rejected(conn, "QT002", query, args)


def test_a_runner_login_promotes_and_an_operator_verifies(db: TestDatabase, conn: Conn) -> None:
    movements(conn, 1)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    operator = bind(db.connect(db.operator_dsn("testnet")))
    for other in (runner, operator):
        pin_clock(other, T0.isoformat())
    assert procs.promote_audit("promoter").one(runner) > 0
    assert procs.verify_audit_chain().one(operator).ok
    with pytest.raises(psycopg.Error) as refused:
        procs.verify_audit_chain().one(runner)
    assert refused.value.sqlstate == "42501"


# -- the outbox's batches (migration 0033_audit_batches) ----------------------


def batches(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) FROM audit_batches").fetchone()
    assert row is not None
    return int(row[0])


def test_a_claim_of_many_nodes_audits_them_in_one_row_read_back_one_event_each(conn: Conn) -> None:
    for i in range(5):
        create_started(conn, ONE, f"b{i}")
    before = batches(conn)
    last_id = conn.execute("SELECT max(id) FROM audit_outbox").fetchone()
    assert last_id is not None
    claimed = claim(conn)
    assert len(claimed) == 5
    assert batches(conn) == before + 1
    events = conn.execute(
        "SELECT id, entity_id::bigint, from_state, to_state, actor, login FROM audit_outbox"
        " WHERE id > %s ORDER BY id",
        (last_id[0],),
    ).fetchall()
    assert [e[1] for e in events] == [c["node_id"] for c in claimed]  # in the claim's order
    assert {(e[2], e[3], e[4]) for e in events} == {("READY", "SUBMITTING", "w1")}
    assert {e[5] for e in events} == {conn.info.user}
    # promoted whole: each event its own link, named by its id
    procs.promote_audit("promoter", 1).one(conn)
    procs.promote_audit("promoter", 10_000).one(conn)
    linked = conn.execute(
        "SELECT outbox_id FROM audit_log WHERE outbox_id > %s ORDER BY seq", (last_id[0],)
    ).fetchall()
    assert [r[0] for r in linked] == [e[0] for e in events]
    assert check(conn).ok


def test_a_call_of_more_than_65535_events_is_split_into_batches_in_order(conn: Conn) -> None:
    before = batches(conn)
    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        written = conn.execute(
            "SELECT write_audit(array_agg(('probe', 'node', i::text, NULL, 'probed', NULL, NULL,"
            " NULL)::qtg.audit_event ORDER BY i)) FROM generate_series(1, 65536) AS i"
        ).fetchone()
    assert written == (65536,)
    assert batches(conn) == before + 2
    ids = conn.execute(
        "SELECT entity_id::integer, detail FROM audit_outbox WHERE action = 'probed' ORDER BY id"
    ).fetchall()
    assert [r[0] for r in ids] == list(range(1, 65537))
    assert {json.dumps(r[1]) for r in ids} == {"{}"}  # a NULL detail is {}


def test_a_batch_the_engine_did_not_shape_is_refused(conn: Conn) -> None:
    with pytest.raises(psycopg.errors.CheckViolation), conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute(
            "INSERT INTO audit_batches (base, occurred_at, events) VALUES"
            " (nextval('audit_batch_base_seq'), now(),"
            "  ARRAY[('x', 'nonsense', '1', NULL, 'a', NULL, NULL, '{}')::qtg.audit_event])"
        )


def test_the_last_node_settles_its_movement_in_one_row_write(conn: Conn) -> None:
    movement_id = create_started(conn, ONE, "settle-once")
    [claimed] = claim(conn)
    written = """SELECT relname, n_tup_upd + n_tup_ins FROM pg_stat_xact_user_tables
                  WHERE schemaname = 'testnet'
                    AND relname IN ('movement_requests', 'audit_batches', 'callback_outbox')"""
    with conn.transaction():
        before = dict(conn.execute(written).fetchall())
        assert submit(conn, claimed, settled=True) == "COMPLETED"
        after = dict(conn.execute(written).fetchall())
    writes = {table: after[table] - before.get(table, 0) for table in after}
    # the counters with the state, one row write; the node's and the movement's
    # events one batch each; one callback for the movement's new state
    assert writes == {"movement_requests": 1, "audit_batches": 2, "callback_outbox": 1}
    row = conn.execute(
        "SELECT request_state, open_nodes, failed_nodes FROM movement_requests WHERE id = %s",
        (movement_id,),
    ).fetchone()
    assert row == ("COMPLETED", 0, 0)


# -- the login in the chain (migration 0035_audit_log_login) -------------------


def test_each_row_carries_the_login_that_wrote_it_and_its_batch_is_deleted(
    db: TestDatabase, conn: Conn
) -> None:
    """The movement is created by one operator login and approved by another,
    its node claimed by a runner login: promoted, each row keeps its login
    under its hash, the batches are gone, and the trail shows every event
    once, with the same login."""
    create_started(conn, ONE, "who")
    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, T0.isoformat())
    [claimed] = claim(runner)
    trail = "SELECT id, action, to_state, login, promoted_at FROM audit_outbox ORDER BY id"
    waiting = conn.execute(trail).fetchall()
    by_state = {r[2]: r[3] for r in waiting}  # the login that moved it there
    assert by_state["SUBMITTING"] == runner.info.user
    assert by_state["PENDING_APPROVAL"] != by_state["APPROVED"]  # two operators' logins
    assert by_state["EXECUTING"] == conn.info.user
    assert batches(conn) > 0

    assert procs.promote_audit("promoter").one(runner) == len(waiting)
    assert batches(conn) == 0
    logged = conn.execute("SELECT outbox_id, login FROM audit_log ORDER BY seq").fetchall()
    assert logged == [(r[0], r[3]) for r in waiting]
    promoted = conn.execute(trail).fetchall()
    assert [r[:4] for r in promoted] == [r[:4] for r in waiting]
    assert all(r[4] is not None for r in promoted)
    canonical = [json.loads(r.canonical) for r in procs.audit_export(0, 1000).all(conn)]
    assert [c["login"] for c in canonical] == [r[3] for r in waiting]
    assert check(conn).ok
    assert submit(runner, claimed) == "SUBMITTED"  # the next events chain on
    assert procs.promote_audit("promoter").one(runner) > 0
    assert check(conn).ok


@pytest.mark.parametrize("login", ["'mallory'", "NULL"])
def test_a_changed_or_removed_login_is_found_where_it_was_changed(conn: Conn, login: str) -> None:
    movements(conn)
    procs.promote_audit("promoter").one(conn)
    as_owner_without_the_guard(conn, f"UPDATE audit_log SET login = {login} WHERE seq = 2")
    result = check(conn)
    assert (result.ok, result.first_bad_seq) == (False, 2)
    assert "do not hash" in (result.problem or "")


def test_a_row_promoted_before_the_login_was_chained_still_verifies(conn: Conn) -> None:
    """A row promoted before 0035 has no login: its hash was taken over the
    canonical text without one, which is still its text. Its batch is kept
    (marked promoted), and the trail reads its login from there."""
    movements(conn, 1)
    trail = "SELECT id, login, promoted_at IS NOT NULL FROM audit_outbox ORDER BY id"
    waiting = conn.execute(trail).fetchall()
    with conn.transaction():
        conn.execute("SET LOCAL ROLE qtg_owner")
        conn.execute(
            """DO $$
               DECLARE h audit_chain_head; b audit_batches; r audit_log; e record;
               BEGIN   -- one batch promoted as 0025's promoter did: no login, batch kept
                   SELECT * INTO h FROM audit_chain_head FOR UPDATE;
                   SELECT * INTO b FROM audit_batches ORDER BY base LIMIT 1;
                   FOR e IN SELECT * FROM unnest(b.events) WITH ORDINALITY
                            AS x(actor, entity, entity_id, request_id, action, from_state,
                                 to_state, detail, ord) ORDER BY ord LOOP
                       r := ROW(h.seq + 1, b.base + e.ord, b.occurred_at, e.actor, e.entity,
                                e.entity_id, e.request_id, e.action, e.from_state, e.to_state,
                                e.detail, clock(), h.row_hash, NULL, NULL)::audit_log;
                       r.row_hash := audit_row_hash(h.row_hash, r);
                       INSERT INTO audit_log SELECT r.*;
                       h.seq := r.seq;
                       h.row_hash := r.row_hash;
                   END LOOP;
                   UPDATE audit_batches SET promoted_at = clock() WHERE base = b.base;
                   UPDATE audit_chain_head SET seq = h.seq, row_hash = h.row_hash;
               END $$"""
        )
    old = procs.audit_export(0, 1).one(conn)
    assert "login" not in json.loads(old.canonical)
    assert check(conn).ok
    procs.promote_audit("promoter").one(conn)  # the rest, with their logins
    result = check(conn)
    assert result.ok and result.checked > 1
    assert batches(conn) == 1  # the old row's batch, its login's only record
    # each event once, the old row's login read from its batch
    assert conn.execute(trail).fetchall() == [(r[0], r[1], True) for r in waiting]
    without = conn.execute("SELECT seq FROM audit_log WHERE login IS NULL").fetchall()
    assert without == [(1,)]
