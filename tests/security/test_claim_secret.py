"""A claim is proven by a secret only its claimer holds.

Played with real runner logins: ``owner`` (the login whose worker claimed the
node) and ``thief`` (a second login of the same runner role, which may call
every runner procedure but holds no claim on the node). What the thief tries:

- every completion call on the owner's node with a forged secret, the node's
  old sequential claim token (as it is, and padded to a secret's length), a
  secret the thief legitimately holds for another node, the claim before the
  current one, the current secret in upper case, the SHA-256 the table holds,
  and an empty, NULL or 1 MB secret: each is refused (QT030, or QT002 for a
  malformed one), changes nothing, and no message, hint, detail, context or
  result row shows the owner's secret or its hash;
- reading the secret: a reader login (operators are members) finds it in no
  table and no view; the node holds only its SHA-256;
- guessing it: every claim hands out a fresh 64-hex-character secret (244
  random bits; an observer's claim, a MAC under a key only the owner reads),
  so no two claims share one, not even two of the same node;
- stealing an observer's: its claim writes nothing and its secret proves that
  claim's transaction only, so the right secret presented from another
  transaction is refused like a forged one;
- waiting the owner out: a batch call presenting a wrong secret for a node
  another transaction holds neither waits for the lock nor takes it (with the
  right secret the same call waits: the lock is real).

A completion made with another runner login, holding the right secret, is
accepted (the secret is the proof, not the login) and audited under both names:
the claimer as actor, the session's login beside it.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import pytest
from conftest import Login, TestDatabase
from engine import (
    bind,
    create_started,
    forged_secret,
    node,
    node_ids,
    pin_clock,
    plan,
    snapshot,
)
from rows import T0, Conn, iso_at, node_row

SECRET = re.compile("[0-9a-f]{64}")

# every completion call: (SQL taking the node id and a secret, whether it is a batch)
CALLS: dict[str, tuple[str, bool]] = {
    "record_intent_prepared": (
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xforged')",
        False,
    ),
    "record_intent_prepared_batch": (
        "SELECT node_id, intent_id, error_code, error_message FROM"
        " record_intent_prepared_batch(ARRAY[%s]::bigint[], ARRAY[%s]::text[],"
        " p_signed_tx_hashes => '{0xforged}')",
        True,
    ),
    "complete_submit": ("SELECT complete_submit(%s, %s, 'forged-ref', p_settled => true)", False),
    "complete_submit_batch": (
        "SELECT * FROM complete_submit_batch(ARRAY[%s]::bigint[], ARRAY[%s]::text[],"
        " '{forged-ref}', p_settled => '{true}')",
        True,
    ),
    "fail_submit": ("SELECT fail_submit(%s, %s, 'forged failure', false)", False),
    "release_nodes": (
        "SELECT * FROM release_nodes(ARRAY[%s]::bigint[], ARRAY[%s]::text[], 'forged release')",
        True,
    ),
    "complete_observe": ("SELECT * FROM complete_observe(%s, %s, 'COMPLETED')", False),
    "complete_observe_batch": (
        "SELECT node_id, node_state, error_code, error_message FROM"
        " complete_observe_batch(ARRAY[%s]::bigint[], ARRAY[%s]::text[], '{COMPLETED}')",
        True,
    ),
    "complete_recovery": ("SELECT complete_recovery(%s, %s, 'STILL_UNKNOWN')", False),
}
ON_OBSERVED = ("complete_observe", "complete_observe_batch")
ON_SUBMITTING = [c for c in CALLS if c not in (*ON_OBSERVED, "complete_recovery")]


def runner_login(db: TestDatabase, person: str) -> tuple[Login, Conn]:
    """A login of the testnet runner role of its own, bound, its clock at T0."""
    login = db.login(person, "qtg_testnet_runner")
    conn = bind(db.connect(login.dsn))
    pin_clock(conn, T0.isoformat())
    return login, conn


@pytest.fixture
def owner(db: TestDatabase) -> tuple[Login, Conn]:
    return runner_login(db, "runner1")


@pytest.fixture
def thief(db: TestDatabase) -> tuple[Login, Conn]:
    return runner_login(db, "runner2")


def sha256(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def claim_one(runner: Conn, worker: str, node_id: int) -> str:
    """``worker`` claims the READY nodes and returns the secret of ``node_id``'s claim."""
    rows = runner.execute(
        "SELECT node_id, claim_secret FROM claim_ready_nodes(%s, 100)", (worker,)
    ).fetchall()
    return str(dict(rows)[node_id])


@dataclass
class Target:
    """The owner's live claim on a node, and the claim before it (if any)."""

    node_id: int
    secret: str
    previous: str | None


def observed_node(conn: Conn, owner: Conn, key: str) -> tuple[int, str]:
    """A node SUBMITTED by the owner's dispatcher, due for an observer, and
    the dispatcher's secret."""
    movement = create_started(conn, plan(node("a")), key)
    node_id = node_ids(conn, movement)["a"]
    dispatched = claim_one(owner, "dispatcher-1", node_id)
    owner.execute("SELECT complete_submit(%s, %s, 'ref')", (node_id, dispatched))
    pin_clock(owner, iso_at(60))
    return node_id, dispatched


def observer_secret(runner: Conn, node_id: int, worker: str = "observer-1") -> str:
    """An observer's claim of ``node_id`` on ``runner``'s transaction: its secret."""
    [(secret,)] = runner.execute(
        "SELECT claim_secret FROM claim_observe(%s, %s)", (node_id, worker)
    ).fetchall()
    return str(secret)


def quarantine(runner: Conn, node_id: int, secret: str) -> None:
    runner.execute(
        "SELECT * FROM quarantine_nodes(ARRAY[%s]::bigint[], ARRAY[%s], '{held}')",
        (node_id, secret),
    )


def owned(conn: Conn, owner: Conn, call: str) -> Target:
    """A node in the state ``call`` completes, claimed by the owner's login."""
    if call in ON_OBSERVED:
        node_id, dispatched = observed_node(conn, owner, f"owned-{call}")
        # an observer's claim lives in its transaction: left open, as the observer's is
        owner.execute("BEGIN")
        return Target(node_id, observer_secret(owner, node_id), dispatched)
    movement = create_started(conn, plan(node("a")), f"owned-{call}")
    node_id = node_ids(conn, movement)["a"]
    dispatched = claim_one(owner, "dispatcher-1", node_id)
    if call in ON_SUBMITTING:
        return Target(node_id, dispatched, None)
    owner.execute(
        "SELECT record_intent_prepared(%s, %s, p_signed_tx_hash => '0xsigned')",
        (node_id, dispatched),
    )
    owner.execute("SELECT fail_submit(%s, %s, 'timeout', true)", (node_id, dispatched))
    [(secret,)] = owner.execute(
        "SELECT claim_secret FROM claim_recovery_nodes('recovery-1', 10)"
    ).fetchall()
    return Target(node_id, secret, dispatched)


def attempt(runner: Conn, call: str, node_id: int, secret: str | None) -> tuple[str | None, str]:
    """The call as ``runner`` makes it: the SQLSTATE it was refused with (a batch's
    row error, or the error raised; None when accepted) and everything it said."""
    query, batch = CALLS[call]
    try:
        rows = runner.execute(query, (node_id, secret)).fetchall()
    except psycopg.Error as exc:
        diag = exc.diag
        said = [str(exc), diag.message_hint, diag.message_detail, diag.context]
        return exc.sqlstate, " ".join(s or "" for s in said)
    said = " ".join(str(v) for row in rows for v in row)
    if batch:
        [row] = rows
        return row[2], said  # every batch row is (node_id, ..., error_code, error_message)
    return None, said


Forgery = Callable[[Conn, Target, str], str | None]

# what a thief may present for the owner's node, and the refusal it must get
FORGERIES: dict[str, tuple[Forgery, str]] = {
    "a forged secret": (lambda admin, t, other: forged_secret(), "QT030"),
    "the old sequential token": (
        lambda admin, t, other: str(node_row(admin, t.node_id)["claim_token"]),
        "QT002",
    ),
    "the old token padded to a secret's length": (
        lambda admin, t, other: str(node_row(admin, t.node_id)["claim_token"]).rjust(64, "0"),
        "QT030",
    ),
    "a secret of another node": (lambda admin, t, other: other, "QT030"),
    "the claim before": (lambda admin, t, other: t.previous or forged_secret(), "QT030"),
    "the secret in upper case": (lambda admin, t, other: t.secret.upper(), "QT030"),
    "the hash the table holds": (
        lambda admin, t, other: bytes(node_row(admin, t.node_id)["claim_hash"]).hex(),
        "QT030",
    ),
    "an empty secret": (lambda admin, t, other: "", "QT002"),
    "no secret": (lambda admin, t, other: None, "QT002"),
    "a huge secret": (lambda admin, t, other: "f" * 1_000_000, "QT002"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_no_forged_stale_or_malformed_secret_completes_another_claim(
    db: TestDatabase, conn: Conn, owner: tuple[Login, Conn], thief: tuple[Login, Conn], call: str
) -> None:
    _, owner_conn = owner
    _, thief_conn = thief
    target = owned(conn, owner_conn, call)
    pin_clock(thief_conn, iso_at(60))
    # the thief's own, legitimately claimed node: its secret proves nothing elsewhere
    other = create_started(conn, plan(node("b")), f"thief-{call}")
    other_secret = claim_one(thief_conn, "dispatcher-2", node_ids(conn, other)["b"])
    hash_hex = sha256(target.secret).hex()

    for forgery, (present, expected) in FORGERIES.items():
        presented = present(conn, target, other_secret)
        before = snapshot(conn)
        code, said = attempt(thief_conn, call, target.node_id, presented)
        assert code == expected, f"{call} with {forgery}: {code} {said[:300]}"
        assert snapshot(conn) == before, f"{call} with {forgery} changed the tables"
        assert target.secret not in said.lower(), f"{call} with {forgery} showed the secret"
        assert hash_hex not in said.lower(), f"{call} with {forgery} showed the hash"

    if call in ON_OBSERVED:
        # the right secret, stolen: an observer's claim proves its own transaction only
        before = snapshot(conn)
        code, said = attempt(thief_conn, call, target.node_id, target.secret)
        assert code == "QT030", said
        assert snapshot(conn) == before

    # the owner, presenting its secret, is accepted: the refusals above were the secret's
    code, said = attempt(owner_conn, call, target.node_id, target.secret)
    assert code is None, said
    assert target.secret not in said
    if call in ON_OBSERVED:
        owner_conn.execute("COMMIT")
        assert node_row(conn, target.node_id)["node_state"] == "COMPLETED"


def test_each_claim_hands_out_a_fresh_secret_of_at_least_128_random_bits(
    conn: Conn, owner: tuple[Login, Conn]
) -> None:
    _, runner = owner
    movements = [create_started(conn, plan(node("a")), f"fresh-{i}") for i in range(30)]
    ids = [node_ids(conn, m)["a"] for m in movements]
    claims = dict(
        runner.execute("SELECT node_id, claim_secret FROM claim_ready_nodes('d', 100)").fetchall()
    )
    secrets = [claims[i] for i in ids]
    # the same node claimed again (a retry) gets a new secret too
    runner.execute("SELECT fail_submit(%s, %s, 'busy', true, 0)", (ids[0], secrets[0]))
    secrets.append(claim_one(runner, "d", ids[0]))
    # and so do the observer's and recovery's claims
    runner.execute("SELECT complete_submit(%s, %s, 'ref')", (ids[1], secrets[1]))
    pin_clock(runner, iso_at(60))
    # an observer's claim, twice (each in a transaction of its own, at one claim_token)
    observed = [
        runner.execute("SELECT claim_secret FROM claim_observe(%s, 'o')", (ids[1],)).fetchall()[0][
            0
        ]
        for _ in range(2)
    ]
    secrets.extend(observed)
    pin_clock(runner, iso_at(3600))
    recovered = dict(
        runner.execute(
            "SELECT node_id, claim_secret FROM claim_recovery_nodes('r', 100)"
        ).fetchall()
    )
    secrets.extend(recovered.values())

    assert len(secrets) > 30
    assert all(SECRET.fullmatch(s) for s in secrets)  # 256 bits of hex, 244 of them random
    assert len(set(secrets)) == len(secrets)
    # nothing sequential about them: any two differ in about half their bits
    for a, b in itertools.combinations(secrets, 2):
        assert bin(int(a, 16) ^ int(b, 16)).count("1") > 64
    # the node holds the SHA-256 of its current claim's secret, nothing else
    assert node_row(conn, ids[2])["claim_hash"] == sha256(recovered[ids[2]])
    # an observer's claim stores nothing: the node keeps the dispatcher's hash
    assert node_row(conn, ids[1])["claim_hash"] == sha256(secrets[1])


def test_a_reader_finds_only_the_hash_of_a_live_secret(
    db: TestDatabase, conn: Conn, owner: tuple[Login, Conn]
) -> None:
    _, runner = owner
    movement = create_started(conn, plan(node("a"), node("b")), "read-secret")
    ids = node_ids(conn, movement)
    live = dict(
        runner.execute("SELECT node_id, claim_secret FROM claim_ready_nodes('d', 10)").fetchall()
    )
    assert set(live) == set(ids.values())
    runner.execute(
        "SELECT record_intent_prepared(%s, %s, p_nonce => 1, p_signed_tx_hash => '0x1')",
        (ids["a"], live[ids["a"]]),
    )
    reader = bind(db.connect(db.login("auditor", "qtg_testnet_reader").dsn))
    relations = reader.execute(
        """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'testnet' AND c.relkind IN ('r', 'v') ORDER BY 1"""
    ).fetchall()
    seen = "\n".join(
        text
        for (relation,) in relations
        for (text,) in reader.execute(f"SELECT to_jsonb(t)::text FROM testnet.{relation} t")
    )
    assert "movement_request_nodes" in {r for (r,) in relations}
    for secret in live.values():
        assert secret not in seen
    hashes = dict(reader.execute("SELECT id, claim_hash FROM movement_request_nodes").fetchall())
    assert {node_id: bytes(hashes[node_id]) for node_id in live} == {
        node_id: sha256(secret) for node_id, secret in live.items()
    }


def test_a_completion_with_another_runner_login_is_audited_under_that_login(
    conn: Conn, owner: tuple[Login, Conn], thief: tuple[Login, Conn]
) -> None:
    owner_login, owner_conn = owner
    other_login, other_conn = thief
    movement = create_started(conn, plan(node("a")), "handed-over")
    node_id = node_ids(conn, movement)["a"]
    secret = claim_one(owner_conn, "dispatcher-1", node_id)
    # the secret, not the login, proves the claim: handed over, it completes the node
    other_conn.execute("SELECT complete_submit(%s, %s, 'ref')", (node_id, secret))

    rows = conn.execute(
        "SELECT actor, login, from_state, to_state FROM audit_outbox"
        " WHERE entity = 'node' AND entity_id = %s AND action = 'state_changed' ORDER BY id",
        (str(node_id),),
    ).fetchall()
    assert rows[1:] == [
        ("dispatcher-1", owner_login.name, "READY", "SUBMITTING"),
        ("dispatcher-1", other_login.name, "SUBMITTING", "SUBMITTED"),
    ]


@pytest.mark.parametrize("call", list(CALLS))
def test_a_wrong_secret_never_waits_for_nor_takes_a_node_another_transaction_holds(
    db: TestDatabase,
    conn: Conn,
    owner: tuple[Login, Conn],
    thief: tuple[Login, Conn],
    call: str,
) -> None:
    _, owner_conn = owner
    _, thief_conn = thief
    target = owned(conn, owner_conn, call)
    movement = node_row(conn, target.node_id)["request_id"]
    before = snapshot(conn, ["movement_requests", "movement_request_nodes", "node_intents"])

    release: Callable[[], object]
    if call in ON_OBSERVED:
        # an observer's claim: its own transaction holds the node, and only there
        # does its secret prove anything (stolen, the right one is a wrong one)
        presented = [forged_secret(), target.secret]
        release = lambda: owner_conn.execute("ROLLBACK")  # noqa: E731
    else:
        holder = bind(db.connect(autocommit=False))  # a completion in progress, say
        holder.execute("SELECT 1 FROM movement_requests WHERE id = %s FOR UPDATE", (movement,))
        holder.execute(
            "SELECT 1 FROM movement_request_nodes WHERE id = %s FOR UPDATE", (target.node_id,)
        )
        owner_conn.execute("SET lock_timeout = '300ms'")
        # the right secret waits for the holder: the lock is real, and would time out
        with pytest.raises(psycopg.errors.LockNotAvailable):
            owner_conn.execute(CALLS[call][0], (target.node_id, target.secret))
        presented = [forged_secret()]
        release = holder.rollback
    thief_conn.execute("SET lock_timeout = '300ms'")
    # a wrong one is refused at once, in a transaction that then holds nothing of it
    with thief_conn.transaction():
        for secret in presented:
            try:
                with thief_conn.transaction():  # a savepoint: a raised refusal leaves the rest
                    rows = thief_conn.execute(CALLS[call][0], (target.node_id, secret))
                    code = rows.fetchall()[0][2]
            except psycopg.Error as exc:
                code = exc.sqlstate
            assert code == "QT030"
        release()
        free = bind(db.connect(autocommit=False))
        free.execute("SET lock_timeout = '300ms'")
        free.execute("SELECT 1 FROM movement_requests WHERE id = %s FOR UPDATE NOWAIT", (movement,))
        free.execute(
            "SELECT 1 FROM movement_request_nodes WHERE id = %s FOR UPDATE NOWAIT",
            (target.node_id,),
        )
        free.rollback()
    assert snapshot(conn, ["movement_requests", "movement_request_nodes", "node_intents"]) == before


@pytest.mark.parametrize("role", ["runner", "operator", "reader"])
def test_no_network_login_reads_the_key_an_observers_secret_is_made_with(
    db: TestDatabase, role: str
) -> None:
    login = db.login(f"key_{role}", f"qtg_testnet_{role}")
    who = bind(db.connect(login.dsn))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        who.execute("SELECT * FROM qtg.claim_proof_key")
    # nor may it call the routine that makes the secret (internal: no grant)
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        who.execute("SELECT testnet.observe_claim_secret(1, 1, '1'::xid, pg_current_xact_id())")


def test_no_observer_reports_on_a_node_quarantined_under_its_claim(
    conn: Conn, owner: tuple[Login, Conn]
) -> None:
    # the claim's own transaction quarantines the node, then reports on it
    # anyway: the quarantine wrote the node, and the secret no longer proves it
    _, runner = owner
    node_id, _ = observed_node(conn, runner, "quarantined-then-reported")
    with runner.transaction():
        secret = observer_secret(runner, node_id)
        quarantine(runner, node_id, secret)
        code, _ = attempt(runner, "complete_observe_batch", node_id, secret)
        assert code == "QT030"
    row = node_row(conn, node_id)
    assert (row["node_state"], row["observe_count"]) == ("SUBMITTED", 0)
    assert row["quarantined_at"] is not None
    changed = conn.execute(
        "SELECT count(*) FROM audit_outbox WHERE entity_id = %s AND action = 'state_changed'"
        " AND from_state = 'SUBMITTED'",
        (str(node_id),),
    ).fetchone()
    assert changed == (0,)  # the report moved nothing


def test_a_claim_rolled_back_to_a_savepoint_proves_nothing_once_the_node_is_written(
    db: TestDatabase, conn: Conn, owner: tuple[Login, Conn], thief: tuple[Login, Conn]
) -> None:
    # the claim is undone (its lock with it) while its transaction goes on; a
    # second observer claims the node meanwhile and quarantines it (a write
    # that bumps no claim counter): the first secret is refused, nothing moves
    _, first = owner
    _, second = thief
    node_id, _ = observed_node(conn, first, "savepoint")
    pin_clock(second, iso_at(60))
    with first.transaction():
        with pytest.raises(psycopg.errors.DivisionByZero), first.transaction():  # a savepoint
            secret = observer_secret(first, node_id)
            first.execute("SELECT 1/0")  # the savepoint rolled back: the claim's lock is gone
        with second.transaction():
            quarantine(second, node_id, observer_secret(second, node_id, "observer-2"))
        before = snapshot(conn)
        code, _ = attempt(first, "complete_observe_batch", node_id, secret)
        assert code == "QT030"
    assert snapshot(conn) == before
    assert node_row(conn, node_id)["node_state"] == "SUBMITTED"


@pytest.mark.parametrize("call", ["complete_submit", "fail_submit", "release_nodes"])
def test_an_observers_secret_proves_no_dispatchers_claim(
    conn: Conn, owner: tuple[Login, Conn], call: str
) -> None:
    _, runner = owner
    node_id, _ = observed_node(conn, runner, f"observer-not-dispatcher-{call}")
    with runner.transaction():
        secret = observer_secret(runner, node_id)
        before = snapshot(conn)
        try:
            with runner.transaction():  # a savepoint: the claim's transaction goes on
                rows = runner.execute(CALLS[call][0], (node_id, secret)).fetchall()
                code = rows[0][2]  # a batch's refusal is in its row
        except psycopg.Error as exc:
            code = exc.sqlstate
        assert code == "QT030"  # not the claim, before the state is looked at
    assert snapshot(conn) == before
