"""EVM nonces allocated in SQL (migration 0018_evm_nonces): record_intent_prepared
allocates a treasury account's nonce in the transaction that records the signed
transaction, by compare and set on the account's evm_nonces row.

What a treasury relies on: two intents never hold the same nonce of an account,
whatever the interleaving of dispatchers (the later one is refused with QT031
and nothing of its record is kept); a record that never commits allocates
nothing (no gap from a dispatcher that dies while signing); every signed
transaction, replacements included, is in evm_transactions with its raw bytes
before it can be broadcast, and the claims hand them back to the runner; a
record outside the treasury, or malformed, is refused and changes nothing.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from conftest import TestDatabase
from engine import (
    assert_rejected,
    bind,
    create_started,
    fingerprint,
    node,
    node_ids,
    pin_clock,
    plan,
    wait_until_blocked_on_a_lock,
)
from eth_hash.auto import keccak
from evm_rows import (
    AMOUNT_UNITS,
    approve_calldata,
    call,
    register_transfers,
    transfer,
    transfer_plan,
)
from rows import T0, Conn, intent_row

from qtg_runner.chains.evm import Fees, transfer_calldata
from qtg_runner.db import procs

CHAIN = "test-a"
CHAIN_ID = 31401
ALICE_ACCOUNT = "0x" + "a1" * 20
OTHER = "0x" + "b2" * 20
TOKEN = "0x" + "70" * 20
RECIPIENT = "0x" + "d4" * 20
TWO = transfer_plan(CHAIN, ALICE_ACCOUNT, RECIPIENT, "a", "b")
FOUR = transfer_plan(CHAIN, ALICE_ACCOUNT, RECIPIENT, "a", "b", "c", "d")


def hash_of(raw_tx: str) -> str:
    """The transaction hash of signed bytes: their keccak-256, as the engine checks it."""
    return "0x" + keccak(bytes.fromhex(raw_tx[2:])).hex()


def tx_hash(nonce: int, n: int) -> str:
    """The hash of raw(nonce, n)."""
    return hash_of(raw(nonce, n))


def raw(nonce: int, n: int) -> str:
    """The node's transfer signed at ``nonce``; ``n`` makes the bytes distinct
    (a fee bump of n wei)."""
    return transfer(CHAIN_ID, TOKEN, RECIPIENT, nonce, Fees(2 * 10**9 + n, 10**9))[1]


@pytest.fixture
def treasury(conn: Conn) -> str:
    register_transfers(conn, CHAIN, CHAIN_ID, ALICE_ACCOUNT, TOKEN, RECIPIENT)
    return ALICE_ACCOUNT


def claims(conn: Conn, the_plan: dict[str, Any], external_id: str) -> dict[str, dict[str, Any]]:
    movement = create_started(conn, the_plan, external_id)
    ids = node_ids(conn, movement)
    claimed = {c.node_id: asdict(c) for c in procs.claim_ready_nodes("w1", 100, 300).all(conn)}
    return {key: claimed[node_id] for key, node_id in ids.items()}


def record(
    conn: Conn, claimed: dict[str, Any], nonce: int, n: int, sender: str = ALICE_ACCOUNT
) -> Any:
    return procs.record_intent_prepared(
        claimed["node_id"],
        claimed["claim_secret"],
        nonce=nonce,
        signed_tx_hash=tx_hash(nonce, n),
        chain_key=CHAIN,
        sender=sender,
        raw_tx=raw(nonce, n),
    ).one(conn)


def batch(conn: Conn, items: list[tuple[dict[str, Any], int, int]]) -> list[Any]:
    return procs.record_intent_prepared_batch(
        [c["node_id"] for c, _, _ in items],
        [c["claim_secret"] for c, _, _ in items],
        [nonce for _, nonce, _ in items],
        [tx_hash(nonce, n) for _, nonce, n in items],
        None,
        None,
        [CHAIN] * len(items),
        [ALICE_ACCOUNT] * len(items),
        [raw(nonce, n) for _, nonce, n in items],
    ).all(conn)


def next_nonce(conn: Conn) -> int | None:
    return procs.evm_next_nonce(CHAIN, ALICE_ACCOUNT).one(conn)


def transactions(conn: Conn) -> list[tuple[str, int, str, int | None]]:
    rows = conn.execute(
        "SELECT tx_hash, nonce, purpose, intent_id FROM evm_transactions ORDER BY id"
    ).fetchall()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_the_first_record_allocates_from_its_nonce_and_the_next_must_follow(
    conn: Conn, treasury: str
) -> None:
    c = claims(conn, TWO, "m1")
    assert next_nonce(conn) is None
    intent_a = record(conn, c["a"], 5, 1)
    assert next_nonce(conn) == 6
    row = intent_row(conn, c["a"]["node_id"])
    assert (row["intent_state"], row["nonce"], row["chain_key"], row["sender"]) == (
        "PREPARED",
        5,
        CHAIN,
        ALICE_ACCOUNT,
    )
    assert transactions(conn) == [(tx_hash(5, 1), 5, "intent", intent_a)]

    # b signed at the nonce a holds: refused, nothing of it kept
    error = assert_rejected(
        conn,
        "QT031",
        "SELECT record_intent_prepared(%s, %s, p_nonce => 5, p_signed_tx_hash => %s,"
        " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)",
        (c["b"]["node_id"], c["b"]["claim_secret"], tx_hash(5, 2), CHAIN, ALICE_ACCOUNT, raw(5, 2)),
    )
    assert "next one (6" in str(error)
    assert intent_row(conn, c["b"]["node_id"])["intent_state"] == "CLAIMED"
    # signed again at the next nonce, it is taken
    record(conn, c["b"], 6, 3)
    assert next_nonce(conn) == 7
    assert [t[1] for t in transactions(conn)] == [5, 6]


def test_a_replacement_at_its_own_nonce_allocates_nothing_and_keeps_every_transaction(
    conn: Conn, treasury: str
) -> None:
    c = claims(conn, TWO, "m1")
    intent_id = record(conn, c["a"], 0, 1)
    record(conn, c["a"], 0, 2)  # a fee bump: same nonce, new bytes
    assert next_nonce(conn) == 1
    assert transactions(conn) == [
        (tx_hash(0, 1), 0, "intent", intent_id),
        (tx_hash(0, 2), 0, "replacement", intent_id),
    ]
    assert intent_row(conn, c["a"]["node_id"])["signed_tx_hashes"] == [
        tx_hash(0, 1),
        tx_hash(0, 2),
    ]
    # the claim hands the transactions back in the order they were recorded
    document = conn.execute("SELECT intent_document(%s)", (c["a"]["node_id"],)).fetchone()
    assert document is not None
    assert [(t["tx_hash"], t["raw_tx"], t["purpose"]) for t in document[0]["transactions"]] == [
        (tx_hash(0, 1), raw(0, 1), "intent"),
        (tx_hash(0, 2), raw(0, 2), "replacement"),
    ]
    # the same bytes recorded again change nothing
    record(conn, c["a"], 0, 2)
    assert len(transactions(conn)) == 2
    # but another nonce, or another sender, is another side effect
    assert_rejected(
        conn,
        "QT021",
        "SELECT record_intent_prepared(%s, %s, p_nonce => 1, p_signed_tx_hash => %s,"
        " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)",
        (c["a"]["node_id"], c["a"]["claim_secret"], tx_hash(1, 3), CHAIN, ALICE_ACCOUNT, raw(1, 3)),
    )
    procs.upsert_treasury_account(CHAIN, OTHER, "env:OTHER_KEY").one(conn)
    assert_rejected(  # another treasury account is not the route's sender at all
        conn,
        "QT032",
        "SELECT record_intent_prepared(%s, %s, p_nonce => 0, p_signed_tx_hash => %s,"
        " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)",
        (c["a"]["node_id"], c["a"]["claim_secret"], tx_hash(0, 3), CHAIN, OTHER, raw(0, 3)),
    )


def runner_login(db: TestDatabase) -> Conn:
    """The network's runner login, its clock pinned with the test's."""
    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, T0.isoformat())
    return runner


@pytest.mark.parametrize("with_bytes", [True, False], ids=["other_bytes", "no_bytes"])
def test_a_recorded_hash_is_the_hash_of_its_bytes(
    db: TestDatabase, conn: Conn, treasury: str, with_bytes: bool
) -> None:
    """A runner login records, for a prepared intent at its nonce, the hash of
    another transaction on the chain (a reverted one, which the observer would
    read as the node's): with the bytes of a real fee bump, or with none.
    Refused, and nothing changes."""
    c = claims(conn, TWO, "m1")
    record(conn, c["a"], 0, 1)
    before = fingerprint(conn)
    foreign = "0x" + "dd" * 32
    error = assert_rejected(
        runner_login(db),
        "QT002",
        "SELECT record_intent_prepared(%s, %s, p_nonce => 0, p_signed_tx_hash => %s,"
        " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)",
        (
            c["a"]["node_id"],
            c["a"]["claim_secret"],
            foreign,
            CHAIN,
            ALICE_ACCOUNT,
            raw(0, 2) if with_bytes else None,
        ),
        watcher=conn,
    )
    said = "is not the hash of the raw transaction" if with_bytes else "hash and bytes together"
    assert said in str(error)
    assert fingerprint(conn) == before


def test_a_batch_allocates_consecutive_nonces_of_an_account_or_none(
    conn: Conn, treasury: str
) -> None:
    c = claims(conn, FOUR, "m1")
    rows = batch(conn, [(c["a"], 0, 1), (c["b"], 2, 2)])  # a hole at 1
    assert [r.error_code for r in rows] == ["QT031", "QT031"]
    rows = batch(conn, [(c["a"], 0, 1), (c["b"], 0, 2)])  # one nonce twice
    assert [r.error_code for r in rows] == ["QT031", "QT031"]
    assert next_nonce(conn) is None and transactions(conn) == []

    rows = batch(conn, [(c["b"], 1, 2), (c["a"], 0, 1)])
    assert [r.error_code for r in rows] == [None, None]
    assert next_nonce(conn) == 2
    # the chain's own count ahead of the engine (the account was used elsewhere):
    # the engine follows it
    rows = batch(conn, [(c["c"], 9, 3), (c["d"], 10, 4)])
    assert [r.error_code for r in rows] == [None, None]
    assert next_nonce(conn) == 11
    assert sorted(t[1] for t in transactions(conn)) == [0, 1, 9, 10]


def test_a_record_far_ahead_of_the_accounts_next_nonce_is_refused(
    db: TestDatabase, conn: Conn, treasury: str
) -> None:
    """A runner login cannot push an account's nonce out of reach: bytes at
    10**12 (signed by any key: the signature is not the engine's to check)
    would have every later transaction of the account signed there, never
    mined, and leave the reaper 10**12 nonces to fill."""
    c = claims(conn, FOUR, "m1")
    record(conn, c["a"], 0, 1)
    before = fingerprint(conn)
    runner = runner_login(db)
    for far in (10**12, 1 + 64 + 1):
        (row,) = batch(runner, [(c["b"], far, 2)])
        assert row.error_code == "QT031"
        assert "next one (1, or up to 64 above it" in str(row.error_message)
        assert fingerprint(conn) == before
    assert next_nonce(conn) == 1
    (row,) = batch(runner, [(c["b"], 1 + 64, 3)])  # the chain 64 ahead: followed
    assert row.error_code is None
    assert next_nonce(conn) == 66


def test_an_account_skips_at_most_64_nonces_a_day(
    db: TestDatabase, conn: Conn, treasury: str
) -> None:
    """Each skip above the account's next nonce leaves gaps the reaper fills
    with paid self-transfers: a runner login recording 64 ahead claim after
    claim would have the treasury pay 64 fills a claim. The skips of an
    account count toward 64 a day; the next day counts anew."""
    c = claims(conn, FOUR, "m1")
    record(conn, c["a"], 0, 1)
    runner = runner_login(db)
    pin_clock(runner, T0.isoformat())
    (row,) = batch(runner, [(c["b"], 1 + 40, 2)])  # 40 skipped: followed
    assert row.error_code is None
    assert next_nonce(conn) == 42
    before = fingerprint(conn)
    (row,) = batch(runner, [(c["c"], 42 + 25, 3)])  # 65 in the day: refused
    assert row.error_code == "QT031"
    assert "at most 64 skipped nonces a day: 40 skipped since" in str(row.error_message)
    assert fingerprint(conn) == before
    (row,) = batch(runner, [(c["c"], 42 + 24, 4)])  # 64 in the day: followed
    assert row.error_code is None
    (row,) = batch(runner, [(c["d"], 67 + 1, 5)])  # one more in the day: refused
    assert row.error_code == "QT031"
    assert next_nonce(conn) == 67
    assert conn.execute("SELECT skipped_today FROM evm_accounts").fetchone() == (64,)
    next_day = (T0 + timedelta(hours=24, seconds=1)).isoformat()
    pin_clock(conn, next_day)
    pin_clock(runner, next_day)
    c2 = claims(conn, TWO, "m2")
    (row,) = batch(runner, [(c2["a"], 67 + 1, 6)])  # the next day: followed
    assert row.error_code is None
    assert conn.execute("SELECT skipped_nonces, skipped_since FROM evm_nonces").fetchone() == (
        1,
        T0 + timedelta(hours=24, seconds=1),
    )
    assert conn.execute("SELECT skipped_today FROM evm_accounts").fetchone() == (1,)


def test_a_record_that_never_commits_allocates_nothing(conn: Conn, treasury: str) -> None:
    c = claims(conn, TWO, "m1")
    with pytest.raises(RuntimeError), conn.transaction():
        record(conn, c["a"], 3, 1)
        raise RuntimeError("the dispatcher dies before the commit")
    assert next_nonce(conn) is None and transactions(conn) == []
    record(conn, c["b"], 3, 2)
    assert next_nonce(conn) == 4


@pytest.mark.parametrize(
    ("why", "args", "sqlstate"),
    [
        ("not a treasury account", {"p_sender": OTHER}, "QT014"),
        ("an unregistered chain", {"p_chain_key": "nowhere"}, "QT014"),
        ("a chain without a sender", {"p_sender": None}, "QT002"),
        ("an account without a nonce", {"p_nonce": None}, "QT002"),
        ("an account without a hash", {"p_signed_tx_hash": None}, "QT002"),
        ("raw bytes without an account", {"p_chain_key": None, "p_sender": None}, "QT002"),
        ("an upper-case hash", {"p_signed_tx_hash": "0x" + "AB" * 32}, "QT002"),
        ("raw bytes that are not hex", {"p_raw_tx": "0xzz"}, "QT002"),
        ("raw bytes over 128 KiB", {"p_raw_tx": "0x" + "00" * (128 * 1024 + 1)}, "QT005"),
        # a hash alone would name any transaction of the chain as the node's
        (
            "a transfer's hash without its bytes",
            {"p_nonce": None, "p_chain_key": None, "p_sender": None, "p_raw_tx": None},
            "QT002",
        ),
    ],
)
def test_a_malformed_or_foreign_record_is_refused_and_changes_nothing(
    conn: Conn, treasury: str, why: str, args: dict[str, Any], sqlstate: str
) -> None:
    c = claims(conn, TWO, "m1")
    given = {
        "p_nonce": 0,
        "p_signed_tx_hash": tx_hash(0, 1),
        "p_chain_key": CHAIN,
        "p_sender": ALICE_ACCOUNT,
        "p_raw_tx": raw(0, 1),
    } | args
    named = ", ".join(f"{k} => %s" for k in given)
    assert_rejected(
        conn,
        sqlstate,
        f"SELECT record_intent_prepared(%s, %s, {named})",
        (c["a"]["node_id"], c["a"]["claim_secret"], *given.values()),
    )


def test_two_dispatchers_at_one_nonce_never_share_it(
    db: TestDatabase, conn: Conn, treasury: str
) -> None:
    """The second dispatcher waits on the account's row while the first holds
    it, then sees the nonce taken: exactly one allocation, whatever the order."""
    c = claims(conn, TWO, "m1")
    first = bind(db.connect(db.runner_dsn("testnet")))
    second = bind(db.connect(db.runner_dsn("testnet")))
    for other in (first, second):
        pin_clock(other, T0.isoformat())
    first.autocommit = False
    record(first, c["a"], 0, 1)  # holds the account's row, uncommitted

    outcome: dict[str, Any] = {}

    def second_dispatcher() -> None:
        try:
            record(second, c["b"], 0, 2)
            outcome["ok"] = True
        except psycopg.Error as exc:
            outcome["sqlstate"] = exc.sqlstate

    thread = threading.Thread(target=second_dispatcher)
    thread.start()
    wait_until_blocked_on_a_lock(conn, second.info.backend_pid)
    first.commit()
    thread.join(timeout=10)
    assert outcome == {"sqlstate": "QT031"}
    assert next_nonce(conn) == 1
    assert [(t[0], t[1]) for t in transactions(conn)] == [(tx_hash(0, 1), 0)]
    assert intent_row(conn, c["b"]["node_id"])["intent_state"] == "CLAIMED"
    first.close()
    second.close()


def test_a_runner_login_cannot_sign_from_outside_the_treasury_nor_move_nonces_or_caps_itself(
    db: TestDatabase, conn: Conn, treasury: str
) -> None:
    """The attacks a runner's own credentials could try: a record from an
    account that is not the treasury's, a nonce below the account's next one,
    writing the nonce table or the recorded transactions directly, and raising
    a chain's fee caps. Each is refused and nothing changes."""
    c = claims(conn, TWO, "m1")
    record(conn, c["a"], 4, 1)
    runner = bind(db.connect(db.runner_dsn("testnet")))
    pin_clock(runner, T0.isoformat())
    before = fingerprint(conn)
    attacks = [
        ("QT014", lambda: record(runner, c["b"], 5, 2, sender="0x" + "c3" * 20)),
        ("QT031", lambda: record(runner, c["b"], 3, 2)),
        ("42501", lambda: runner.execute("UPDATE evm_nonces SET next_nonce = 0")),
        ("42501", lambda: runner.execute("DELETE FROM evm_transactions")),
        (
            "42501",
            lambda: procs.upsert_chain(
                CHAIN, 31401, "QTG_RPC_TEST_A", 2, 1000, max_fee_per_gas=10**16
            ).one(runner),
        ),
    ]
    for sqlstate, attack in attacks:
        with pytest.raises(psycopg.Error) as refused:
            attack()
        assert refused.value.sqlstate == sqlstate, refused.value
    assert fingerprint(conn) == before
    assert next_nonce(conn) == 5
    runner.close()


BRIDGE = "0x" + "b7" * 20
UNKNOWN = "0x" + "99" * 20
RECORD = (
    "SELECT record_intent_prepared(%s, %s, p_nonce => %s, p_signed_tx_hash => %s,"
    " p_chain_key => %s, p_sender => %s, p_raw_tx => %s)"
)


@pytest.mark.parametrize(
    ("why", "bytes_", "sqlstate"),
    [
        ("another nonce than recorded", lambda: raw(1, 1), "QT002"),
        ("another chain's id", lambda: transfer(1, TOKEN, RECIPIENT, 0)[1], "QT002"),
        (
            "fees above the chain's caps",
            lambda: transfer(CHAIN_ID, TOKEN, RECIPIENT, 0, Fees(300 * 10**9, 10**9))[1],
            "QT002",
        ),
        ("not a transaction", lambda: "0x02c0", "QT002"),
        ("another recipient", lambda: transfer(CHAIN_ID, TOKEN, OTHER, 0)[1], "QT032"),
        (
            "another amount",
            lambda: transfer(CHAIN_ID, TOKEN, RECIPIENT, 0, amount=AMOUNT_UNITS + 1)[1],
            "QT032",
        ),
        (
            "the transfer on another contract",
            lambda: call(CHAIN_ID, 0, UNKNOWN, transfer_calldata(RECIPIENT, AMOUNT_UNITS))[1],
            "QT032",
        ),
        (
            "ether along with the transfer",
            lambda: call(CHAIN_ID, 0, TOKEN, transfer_calldata(RECIPIENT, AMOUNT_UNITS), 1)[1],
            "QT032",
        ),
        (
            "an approval instead",
            lambda: call(CHAIN_ID, 0, TOKEN, approve_calldata(BRIDGE, 1))[1],
            "QT032",
        ),
        ("a contract creation", lambda: call(CHAIN_ID, 0, None, b"\x60\x00")[1], "QT032"),
    ],
)
def test_a_transfer_node_records_only_its_own_transfer(
    db: TestDatabase, conn: Conn, treasury: str, why: str, bytes_: Any, sqlstate: str
) -> None:
    """The raw bytes are read in SQL, not taken on the runner's word: with a
    runner's own login, bytes for another chain or nonce, above the fee caps,
    or doing anything but the node's transfer are refused and nothing is
    recorded or allocated."""
    procs.upsert_chain_protocol(CHAIN, "cctp", 7, {"TokenMessengerV2": BRIDGE}).one(conn)
    c = claims(conn, TWO, "m1")
    runner = bind(db.connect(db.runner_dsn("testnet"), autocommit=True))
    pin_clock(runner, T0.isoformat())
    before = fingerprint(conn)
    with pytest.raises(psycopg.Error) as refused:
        runner.execute(
            RECORD,
            (
                c["a"]["node_id"],
                c["a"]["claim_secret"],
                0,
                tx_hash(0, 1),
                CHAIN,
                ALICE_ACCOUNT,
                bytes_(),
            ),
        )
    assert refused.value.sqlstate == sqlstate, refused.value
    assert fingerprint(conn) == before
    runner.close()


def test_a_node_of_an_executor_that_signs_nothing_records_no_transaction(
    conn: Conn, treasury: str
) -> None:
    """Only the EVM executors' nodes sign, each exactly its route's call. A
    node of another executor (here sim) records no transaction at all, not
    even a call of a registered bridge or an approve() of one within the
    movement's amount (QT032): the nonce reaper would sign a stale one again
    with the account's key. Nothing is kept or allocated."""
    procs.upsert_chain_protocol(CHAIN, "cctp", 7, {"TokenMessengerV2": BRIDGE}).one(conn)
    c = claims(conn, plan(*(node(k) for k in "abc")), "m1")
    calls = [
        (approve_calldata(BRIDGE, AMOUNT_UNITS), TOKEN, 0),
        (bytes.fromhex("8e0250ee") + bytes(64), BRIDGE, 10**15),
        (transfer_calldata(RECIPIENT, 1), TOKEN, 0),
    ]
    for key, (data, to, value) in zip("abc", calls, strict=True):
        tx_hash, raw_tx = call(CHAIN_ID, 0, to, data, value)
        assert_rejected(
            conn,
            "QT032",
            RECORD,
            (c[key]["node_id"], c[key]["claim_secret"], 0, tx_hash, CHAIN, ALICE_ACCOUNT, raw_tx),
        )
    assert next_nonce(conn) is None
