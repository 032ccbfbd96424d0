"""The claims stay cheap as history grows: with a million finished nodes in the
network, every claim reads its partial index, never the whole node table.

The plans are those PostgreSQL actually chose for the statements inside the
procedures, captured with auto_explain while the procedures run (nested
statements, logged to the client as notices), so the test follows the
procedures as they are written rather than a copy of their queries.

One database is built for the whole module: 250,000 COMPLETED movements with 4
COMPLETED nodes each and a sent callback each (one INSERT ... SELECT per table),
one treasury account's 100,000 sent and settled transactions (the first node
of as many movements, its intent and its recorded transaction), plus a few hundred live
movements made through the procedures: READY, SUBMITTED (due; the oldest three
are the roots of two-node movements), SUBMITTING under a live lease but claimed
by a dispatcher whose heartbeat stopped (one of them quarantined), APPROVED not
yet started, and PENDING_APPROVAL.

The plans are checked twice, on two sets of the planner's statistics: stale
ones first, the movements' taken before any of the live work was made and the
nodes' after it (as a busy network's are between two autovacuum analyses of a
large table: the planner thinks no movement is executing while hundreds are),
then fresh ones. A plan that is right only while the statistics are current
fails the first. Besides the claims and lists, one walk calls every procedure
a movement goes through (the dispatcher's, the observer's, recovery's, the
sidecars' with the callbacks' reports and the nonce reaper's fill, the
operators') and bounds what each reads of the large tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from engine import as_person, bind, node, plan
from evm_rows import FEES, signed
from plans import (
    create_movements,
    explained,
    explaining,
    index_scans,
    plans_database,
    rows_read,
    seq_scanned,
)

from qtg_runner.api import reads
from qtg_runner.chains.evm import self_transfer

HISTORY_MOVEMENTS = 250_000
NODES_PER_MOVEMENT = 4
LIVE_MOVEMENTS = 300  # started: READY, then some claimed and submitted
CLAIMED = 150  # of those, claimed (SUBMITTING) ...
SUBMITTED = 100  # ... and of those, submitted (observable)
APPROVED = 50  # approved, not started
QUEUED = 150  # created, waiting for their approval
CHAINS = 3  # the oldest live movements: two nodes, a -> b, their roots submitted
OPEN = CHAINS + LIVE_MOVEMENTS + APPROVED + QUEUED  # the movements not finished
FAILED = 5  # the oldest movements of the history, failed, and carol's (the rest are alice's)
# one treasury account's transactions: the first node of EVM_HISTORY finished
# movements (its SUBMITTED intents are its whole history), then the submitted
# live nodes', recorded at the setup's time; the reaper's mark SETTLING nonces
# under the live ones, and GAPS nonces allocated past them and never used
CHAIN, CHAIN_ID, SENDER = "plans-chain", 31999, "0x" + "5e" * 20
EVM_HISTORY = 100_000
SETTLING = 50
GAPS = 5

SETUP_AT = "2026-01-01 00:00:00+00"
HOOKS = "https://hooks.example.test/qtg"
NODE_TABLES = ("movement_request_nodes", "node_intents", "evm_transactions")
"""A node's rows in the tables that grow with history: the node, its intents,
their recorded transactions."""

ONE_NODE_PLAN = json.dumps(plan(node("a")))
CHAIN_PLAN = json.dumps(plan(node("a"), node("b", depends_on=["a"])))

# building the module's database (a million nodes) takes seconds
pytestmark = pytest.mark.slow


def _load_history(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        """
        INSERT INTO movement_requests (external_id, request_state, plan, amount, asset, created_by,
                                       approved_by, open_nodes, created_at, approved_at, started_at,
                                       finished_at, updated_at)
        SELECT 'history-' || g,
               CASE WHEN g <= %(failed)s THEN 'FAILED' ELSE 'COMPLETED' END::qtg.request_state,
               '{"nodes": []}', 100, 'USDC',
               CASE WHEN g <= %(failed)s THEN 'carol' ELSE 'alice' END, 'bob', 0,
               t, t, t, t + interval '5 minutes', t + interval '5 minutes'
          FROM generate_series(1, %(failed)s + %(n)s) g
         CROSS JOIN LATERAL (SELECT timestamptz '2025-01-01' + g * interval '1 minute' AS t) at
        """,
        {"n": HISTORY_MOVEMENTS, "failed": FAILED},
    )
    conn.execute(
        """
        INSERT INTO movement_request_nodes (request_id, node_key, executor_key, has_side_effect,
                                            node_config, lane, node_state, pending_parents,
                                            claim_token, submit_attempts, external_ref,
                                            submitted_at, observe_started_at, observe_count,
                                            created_at, updated_at, finished_at)
        SELECT r.id, 'n' || k, 'sim', true, '{"lane": "default"}', 'default', 'COMPLETED', 0,
               1, 1, 'ref-' || r.id || '-' || k, r.started_at, r.started_at, 1,
               r.created_at, r.finished_at, r.finished_at
          FROM movement_requests r
         CROSS JOIN generate_series(1, %(k)s) k
         WHERE r.request_state = 'COMPLETED'
        """,
        {"k": NODES_PER_MOVEMENT},
    )
    # each finished movement's last callback, sent five minutes after it finished
    conn.execute(
        """
        INSERT INTO callback_outbox (request_id, event_type, idempotency_key, target_url, payload,
                                     delivery_state, attempts, next_attempt_at, created_at, sent_at)
        SELECT r.id, 'movement.completed', 'testnet-' || r.id || '-completed',
               %(hooks)s, '{}', 'SENT', 1, r.finished_at, r.finished_at,
               r.finished_at + interval '5 minutes'
          FROM movement_requests r
         WHERE r.request_state = 'COMPLETED'
        """,
        {"hooks": HOOKS},
    )


def _load_evm_history(conn: psycopg.Connection[Any]) -> None:
    conn.execute("SELECT upsert_chain(%s, %s, 'QTG_RPC_PLANS', 2, 1000)", (CHAIN, CHAIN_ID))
    conn.execute("SELECT upsert_treasury_account(%s, %s, 'local:plans')", (CHAIN, SENDER))
    conn.execute(
        "INSERT INTO evm_nonces VALUES (%s, %s, %s, %s)",
        (CHAIN, SENDER, EVM_HISTORY + SUBMITTED + GAPS, SETUP_AT),
    )
    conn.execute(
        "INSERT INTO evm_nonce_marks VALUES (%s, %s, %s, %s)",
        (CHAIN, SENDER, EVM_HISTORY - SETTLING, SETUP_AT),
    )
    conn.execute(
        """
        INSERT INTO node_intents (node_id, claim_token, idempotency_key, claimed_by, intent_state,
                                  nonce, signed_tx_hash, signed_tx_hashes, chain_key, sender,
                                  created_at, prepared_at, finished_at)
        SELECT h.id, 1, 'history-' || h.id, 'dispatcher', 'SUBMITTED', h.nonce, tx.hash,
               ARRAY[tx.hash], %(chain)s, %(sender)s, h.submitted_at, h.submitted_at, h.submitted_at
          FROM (SELECT n.id, n.submitted_at, row_number() OVER (ORDER BY n.id) - 1 AS nonce
                  FROM movement_request_nodes n WHERE n.node_key = 'n1'
                 ORDER BY n.id LIMIT %(n)s) h
         CROSS JOIN LATERAL (SELECT '0x' || lpad(to_hex(h.nonce), 64, '0') AS hash) tx
        """,
        {"chain": CHAIN, "sender": SENDER, "n": EVM_HISTORY},
    )
    _record_transactions(conn)


def _record_transactions(conn: psycopg.Connection[Any]) -> None:
    """The evm_transactions row of each intent of the account that has none."""
    conn.execute(
        """
        INSERT INTO evm_transactions (tx_hash, chain_key, sender, nonce, intent_id, purpose, raw_tx,
                                      recorded_by, recorded_at)
        SELECT i.signed_tx_hash, i.chain_key, i.sender, i.nonce, i.id, 'intent', '0x02',
               'dispatcher', i.prepared_at
          FROM node_intents i
         WHERE i.chain_key = %s
           AND NOT EXISTS (SELECT 1 FROM evm_transactions x WHERE x.intent_id = i.id)
        """,
        (CHAIN,),
    )


def _create_live(conn: psycopg.Connection[Any]) -> None:
    create_movements(conn, "chain-", CHAINS, CHAIN_PLAN)
    create_movements(conn, "live-", LIVE_MOVEMENTS, ONE_NODE_PLAN)
    conn.execute("SELECT start_approved_movements(1000)")
    # a dispatcher that beat once and died holding its claims (their lease, an hour, lives on)
    conn.execute("SELECT heartbeat('dispatcher', 'gone', 'core', 1.2)")
    every = conn.execute(
        "SELECT node_id, claim_secret FROM claim_ready_nodes('dispatcher', %s, 3600, 'gone')"
        " ORDER BY 1",
        (CLAIMED,),
    ).fetchall()
    claimed = every[:SUBMITTED]
    conn.execute(
        "SELECT * FROM quarantine_nodes(%s::bigint[], %s::text[], '{poison}')",
        ([every[-1][0]], [every[-1][1]]),
    )
    conn.execute(
        "SELECT count(*) FROM complete_submit_batch(%s::bigint[], %s::text[], %s::text[])",
        ([n for n, _ in claimed], [s for _, s in claimed], [f"tx-{n}" for n, _ in claimed]),
    )
    # the submitted nodes' transactions, sent from the account after its history
    conn.execute(
        """
        UPDATE node_intents i
           SET chain_key = %(chain)s, sender = %(sender)s, nonce = x.nonce,
               signed_tx_hash = x.hash, signed_tx_hashes = ARRAY[x.hash], prepared_at = clock()
          FROM (SELECT live.id, %(base)s + row_number() OVER (ORDER BY live.id) - 1 AS nonce
                  FROM node_intents live
                  JOIN movement_request_nodes n ON n.id = live.node_id
                 WHERE n.node_state = 'SUBMITTED') l
         CROSS JOIN LATERAL (SELECT l.nonce, '0x' || lpad(to_hex(l.nonce), 64, '0') AS hash) x
         WHERE i.id = l.id
        """,
        {"chain": CHAIN, "sender": SENDER, "base": EVM_HISTORY},
    )
    _record_transactions(conn)
    create_movements(conn, "waiting-", APPROVED, ONE_NODE_PLAN)
    create_movements(conn, "queued-", QUEUED, ONE_NODE_PLAN, approve=False)


def _analyze(conn: psycopg.Connection[Any]) -> None:
    conn.execute(
        "VACUUM ANALYZE movement_requests, movement_request_nodes, node_intents, callback_outbox,"
        " evm_transactions"
    )


def _executing_estimate(conn: psycopg.Connection[Any]) -> float:
    """How many EXECUTING movements the planner thinks there are."""
    (plan,) = conn.execute(
        "EXPLAIN (FORMAT JSON) SELECT 1 FROM movement_requests WHERE request_state = 'EXECUTING'"
    ).fetchone()
    return float(plan[0]["Plan"]["Plan Rows"])


@pytest.fixture(scope="module")
def history(pg_server: str, template_db: str) -> Iterator[str]:
    """Superuser DSN of this module's database: a million finished nodes plus live
    work, with stale statistics (the module's docstring)."""
    with plans_database(pg_server, template_db, "qtg_plans", SETUP_AT) as (dsn, conn):
        with conn.transaction():
            # consistent by construction: skip the per-row foreign key triggers
            conn.execute("SET LOCAL session_replication_role = replica")
            _load_history(conn)
            _load_evm_history(conn)
        _analyze(conn)
        _create_live(conn)
        conn.execute("ANALYZE movement_request_nodes")
        counts = dict(
            conn.execute(
                "SELECT node_state::text, count(*) FROM movement_request_nodes GROUP BY 1"
            ).fetchall()
        )
        assert counts == {
            "COMPLETED": HISTORY_MOVEMENTS * NODES_PER_MOVEMENT,
            "READY": LIVE_MOVEMENTS + CHAINS - CLAIMED,
            "SUBMITTING": CLAIMED - SUBMITTED,
            "SUBMITTED": SUBMITTED,
            "PENDING": APPROVED + QUEUED + CHAINS,
        }
        yield dsn


@pytest.fixture(scope="module", params=["stale-statistics", "fresh-statistics"])
def history_dsn(history: str, request: pytest.FixtureRequest) -> str:
    """The module's database, its statistics stale (first) or fresh."""
    with psycopg.connect(history, autocommit=True) as conn:
        bind(conn)
        if request.param == "fresh-statistics":
            _analyze(conn)
            assert _executing_estimate(conn) >= LIVE_MOVEMENTS / 3
        else:
            assert _executing_estimate(conn) < LIVE_MOVEMENTS / 30, "the statistics are not stale"
    return history


def test_claim_ready_nodes_reads_the_ready_index(history_dsn: str) -> None:
    nodes = explained(history_dsn, "SELECT * FROM claim_ready_nodes('w1', 10)")

    assert "movement_request_nodes_ready_idx" in index_scans(nodes)
    assert "movement_request_nodes" not in seq_scanned(nodes)


def test_observe_candidates_reads_the_observable_index(history_dsn: str) -> None:
    nodes = explained(history_dsn, "SELECT * FROM observe_candidates(50)")

    assert "movement_request_nodes_observable_idx" in index_scans(nodes)
    assert "movement_request_nodes" not in seq_scanned(nodes)
    assert "movement_requests" not in seq_scanned(nodes)


def test_observe_candidates_reads_the_due_end_of_the_index_and_stops(history_dsn: str) -> None:
    # SUBMITTED of the live nodes are due: the list reads the observable index
    # from its due end in next_observe_at order and stops after p_max of them
    # (the in-flight scale of benchmark case 6), never sorting every due node
    nodes = explained(history_dsn, "SELECT * FROM observe_candidates(10)", analyze=True)

    scans = [n for n in nodes if n.get("Index Name") == "movement_request_nodes_observable_idx"]
    assert scans, "observe_candidates did not read the observable index"
    assert all(n["Actual Rows"] <= 10 * n.get("Actual Loops", 1) for n in scans), scans
    assert SUBMITTED > 10
    assert not [n for n in nodes if n["Node Type"] == "Sort"]
    assert not {"movement_requests", "movement_request_nodes"} & seq_scanned(nodes)


def test_the_observers_claim_reads_its_candidates_by_key(history_dsn: str) -> None:
    """Stage two of the observer's claim: each candidate and its movement by
    primary key, never the other movements in flight. The candidates are the
    newest due nodes, whose movements come last among the executing ones."""
    with psycopg.connect(history_dsn) as conn:
        newest = [
            node_id
            for (node_id,) in conn.execute(
                "SELECT id FROM testnet.movement_request_nodes WHERE node_state = 'SUBMITTED'"
                " ORDER BY id DESC LIMIT 10"
            )
        ]
    nodes = explained(
        history_dsn,
        "SELECT * FROM claim_observe_batch(%(ids)s, 'o1')",
        analyze=True,
        params={"ids": newest},
    )

    assert len(newest) == 10
    assert not {"movement_requests", "movement_request_nodes"} & seq_scanned(nodes)
    # a few reads by key a candidate (the claim's, its update's, its answer's),
    # where reading the executing movements in turn to find each one's is
    # hundreds here
    assert rows_read(nodes, "movement_request_nodes") <= 5 * len(newest)
    assert rows_read(nodes, "movement_requests") <= 5 * len(newest)


# what one call may read of any large table: the live groups are 50-150
# rows, the movements executing 300 and the history a million nodes, a
# quarter of a million callbacks sent and a hundred thousand transactions,
# so a call that reads more than this reads past the rows it works on
STEP_READ_BOUND = 100
LARGE_TABLES = (
    "movement_requests",
    "movement_request_nodes",
    "node_intents",
    "evm_transactions",
    "callback_outbox",
)


def test_each_step_of_a_movements_life_reads_only_the_rows_it_works_on(
    history_dsn: str,
) -> None:
    """Every procedure a movement goes through, called as the workers and the
    operators call them, reads its movements and nodes by key or from the
    live rows' indexes: never the history, nor every movement in flight (a
    settle that read every EXECUTING movement, on the stale statistics, did)."""
    read: dict[str, dict[str, int]] = {}

    with explaining(history_dsn, analyze=True) as session:

        def step(name: str, call: str, params: Any = None) -> list[tuple[Any, ...]]:
            rows, nodes = session.run(call, params)
            read[name] = {t: rows_read(nodes, t) for t in LARGE_TABLES}
            return rows

        # the dispatcher: a claim that starts approved movements, the intents, the submits
        claimed = step(
            "claim_ready_nodes",
            "SELECT node_id, claim_secret FROM claim_ready_nodes('w1', 5, 300, NULL, 5)",
        )
        ids, secrets = [[row[k] for row in claimed] for k in (0, 1)]
        step(
            "record_intent_prepared_batch",
            "SELECT * FROM record_intent_prepared_batch(%s::bigint[], %s::text[])",
            (ids, secrets),
        )
        submitted = step(
            "complete_submit_batch",
            "SELECT node_state::text, error_code"
            " FROM complete_submit_batch(%s::bigint[], %s::text[], %s::text[])",
            (ids, secrets, [f"tx-{i}" for i in ids]),
        )
        retry, final = step(
            "claim_ready_nodes, again",
            "SELECT node_id, claim_secret FROM claim_ready_nodes('w2', 2)",
        )
        step("fail_submit, retryable", "SELECT fail_submit(%s, %s, 'busy', true)", retry)
        step("fail_submit, final", "SELECT fail_submit(%s, %s, 'refused', false)", final)
        # the observer: the three longest due nodes, the chains' roots: one
        # still in flight (half an hour after its submit, past its lane's
        # window: UNKNOWN, for recovery), one done (its child READY), one
        # failed (its child SKIPPED, its movement FAILED)
        due = step(
            "claim_observe_batch",
            "SELECT node_id, claim_secret"
            " FROM claim_observe_batch(ARRAY(SELECT observe_candidates(3)), 'o1')",
        )
        observed = step(
            "complete_observe_batch",
            "SELECT node_state::text, error_code FROM complete_observe_batch(%s::bigint[],"
            " %s::text[], '{PENDING,COMPLETED,FAILED}')",
            ([row[0] for row in due], [row[1] for row in due]),
        )
        children = session.conn.execute(
            "SELECT child.node_state::text FROM movement_request_nodes root"
            " JOIN movement_request_nodes child"
            " ON child.request_id = root.request_id AND child.node_key = 'b'"
            " WHERE root.id = ANY (%s) ORDER BY root.id",
            ([row[0] for row in due],),
        ).fetchall()
        # recovery: the claims of the dispatcher that died
        lost = step(
            "claim_recovery_nodes",
            "SELECT node_id, claim_secret FROM claim_recovery_nodes('r1', 5)",
        )
        step("complete_recovery", "SELECT complete_recovery(%s, %s, 'STILL_UNKNOWN')", lost[0])
        # the sidecars
        step("start_approved_movements", "SELECT start_approved_movements(10)")
        step("expire_movements", "SELECT expire_movements(10)")
        # two callbacks due to a registered receiver, among the history's sent
        # ones: one delivered, one refused by its receiver (due again later)
        session.conn.execute(
            "SELECT upsert_callback_target('hooks', %s, 'env:QTG_CB_HOOKS')", (HOOKS,)
        )
        session.conn.execute(
            """INSERT INTO callback_outbox (request_id, event_type, idempotency_key, target_url,
                                            payload, delivery_state, next_attempt_at, created_at)
               SELECT id, 'movement.executing', 'walk-' || id, %s, '{}', 'PENDING', now, now
                 FROM movement_requests, clock() now
                WHERE request_state = 'EXECUTING' ORDER BY id DESC LIMIT 2""",
            (HOOKS,),
        )
        callbacks = step(
            "claim_callbacks",
            "SELECT callback_id, claim_secret FROM claim_callbacks('callback_dispatcher', 10)",
        )
        delivered = [
            step(f"complete_callback, {code}", "SELECT complete_callback(%s, %s, %s)", (*c, code))
            for c, code in zip(callbacks, (200, 503), strict=True)
        ]
        # the nonce reaper: a fill of the first nonce allocated and never used
        gap = EVM_HISTORY + SUBMITTED
        filled = step(
            "record_nonce_fill",
            "SELECT record_nonce_fill(%s, %s, %s, %s, %s)",
            (CHAIN, SENDER, gap, *signed(self_transfer(CHAIN_ID, SENDER, gap, FEES))),
        )
        # the operators
        ((executing,),) = session.conn.execute(
            "SELECT max(id) FROM movement_requests WHERE request_state = 'EXECUTING'"
        ).fetchall()
        with as_person(session.conn, "alice"):
            step("cancel_movement", "SELECT cancel_movement(%s)", (executing,))
            step(
                "create_movement",
                "SELECT create_movement('walk-1', 100, %s::jsonb)",
                (ONE_NODE_PLAN,),
            )
        # the newest of the approval queue, one and then five at a time
        queued = [
            movement_id
            for (movement_id,) in session.conn.execute(
                "SELECT id FROM movement_requests WHERE request_state = 'PENDING_APPROVAL'"
                " ORDER BY id DESC LIMIT 6"
            )
        ]
        with as_person(session.conn, "bob"):
            step("approve_movement", "SELECT approve_movement(%s)", (queued[0],))
            approved = step(
                "approve_movements",
                "SELECT request_state::text, error_code FROM approve_movements(%s::bigint[])",
                (queued[1:],),
            )

    assert submitted == [("SUBMITTED", None)] * 5
    assert observed == [("UNKNOWN", None), ("COMPLETED", None), ("FAILED", None)]
    assert children == [("PENDING",), ("READY",), ("SKIPPED",)]
    assert lost
    assert approved == [("APPROVED", None)] * 5
    assert delivered == [[("SENT",)], [("PENDING",)]]
    assert filled == [(True,)]
    assert {name: r for name, r in read.items() if max(r.values()) > STEP_READ_BOUND} == {}


@pytest.mark.parametrize(
    ("call", "found"),
    [
        # the sent transactions waiting longest: the submitted nodes' (recorded
        # half an hour before), never the account's history of sent intents
        ("SELECT * FROM evm_stale_transactions(20, 60, 10)", 10),
        # the nonces allocated past the live ones and never used
        ("SELECT * FROM evm_nonce_gaps(10)", GAPS),
        # the mark moves over the settled nonces under the live ones, each by key
        (f"SELECT * FROM settle_evm_nonces(1000) WHERE moved = {SETTLING}", 1),
    ],
)
def test_the_nonce_reapers_calls_read_the_nonces_in_flight_not_history(
    history_dsn: str, call: str, found: int
) -> None:
    """The evm_nonce_reaper's calls, every few seconds: an account with a
    hundred thousand transactions sent and settled, a hundred in flight."""
    with explaining(history_dsn, analyze=True) as session:
        rows, nodes = session.run(call)

    assert len(rows) == found
    assert nodes, "auto_explain reported no plans"
    assert not set(NODE_TABLES) & seq_scanned(nodes)
    read = {t: rows_read(nodes, t) for t in NODE_TABLES}
    assert max(read.values()) <= 3 * (SUBMITTED + SETTLING), read


def test_claim_recovery_nodes_reads_the_recoverable_index(history_dsn: str) -> None:
    nodes = explained(history_dsn, "SELECT * FROM claim_recovery_nodes('r1', 10)")

    # the leases that ran out, and the open claims of the dispatcher that died:
    # both live in the recoverable index (nodes in flight only, never history).
    # PostgreSQL 18 also reads the claimer index for the dead dispatcher's claims;
    # 15 filters them from the recoverable index, which costs the same bound
    scanned = index_scans(nodes)
    assert "movement_request_nodes_recoverable_idx" in scanned
    assert "movement_request_nodes" not in seq_scanned(nodes)


def test_quarantined_nodes_reads_the_quarantined_index(history_dsn: str) -> None:
    nodes = explained(history_dsn, "SELECT * FROM quarantined_nodes")

    assert "movement_request_nodes_quarantined_idx" in index_scans(nodes)
    assert "movement_request_nodes" not in seq_scanned(nodes)


def test_start_approved_movements_reads_the_approved_index(history_dsn: str) -> None:
    nodes = explained(history_dsn, "SELECT start_approved_movements(10)")

    # the approved index (by priority), or the index of the movements not
    # completed (0044, by state): both hold the live movements only, and with
    # 50 approved PostgreSQL's statistics of the moment pick one or the other
    live = {"movement_requests_approved_idx", "movement_requests_state_idx"}
    assert live & index_scans(nodes)
    assert not {"movement_requests", "movement_request_nodes"} & seq_scanned(nodes)


@pytest.mark.parametrize(("keep_days", "deleted"), [(90, 100), (36_500, 0)])
def test_prune_callbacks_reads_only_what_it_deletes(
    history_dsn: str, keep_days: int, deleted: int
) -> None:
    """A quarter of a million sent callbacks, all past 90 days: a call deletes
    its 100 oldest through callback_outbox_done_idx, and with nothing past the
    keep it reads nothing (it runs after every tick of the callback_dispatcher)."""
    nodes = explained(
        history_dsn,
        f"UPDATE callback_settings SET keep_days = {keep_days}"
        " RETURNING prune_callbacks('callback_dispatcher', 100)",
        analyze=True,
    )

    assert "callback_outbox_done_idx" in index_scans(nodes)
    assert "callback_outbox" not in seq_scanned(nodes)
    # each deleted row three times: the index's scan, the delete's lookup by id, the delete
    assert rows_read(nodes, "callback_outbox") <= 3 * deleted + 10


@pytest.mark.parametrize(
    "view",
    [
        "in_flight_nodes",
        "stuck_nodes",
        "executor_status",
        "lane_latency",
        "quarantined_nodes",
        "waiting_nodes",
        "evm_accounts",
    ],
)
def test_the_dashboard_views_read_the_open_nodes_not_history(history_dsn: str, view: str) -> None:
    """What /metrics and `qtg status` read on every scrape: the nodes in flight,
    READY or quarantined, and the last day's completions, never the million
    finished ones (they read every node, up to 1.8 s a read, before 0037)."""
    # every column of every row (a count alone would let the planner drop them)
    nodes = explained(
        history_dsn, f"SELECT count(*) FROM {view} v WHERE to_jsonb(v) IS NOT NULL", analyze=True
    )

    assert not set(NODE_TABLES) & seq_scanned(nodes)
    read = {t: rows_read(nodes, t) for t in NODE_TABLES}
    assert max(read.values()) <= 20 * LIVE_MOVEMENTS, (view, read)


def test_pipeline_counts_reads_what_is_open_or_new_once_rolled_up(history: str) -> None:
    """pipeline_counts (every /metrics scrape, the operator page, `qtg status`)
    counted every movement and node: 0.25-0.7 s a read here. Once the finished
    rows are rolled up (the sidecar's calls, 100,000 ids each, until none is
    behind) it reads the open ones and those made since, by key, and its counts
    are the same."""
    with psycopg.connect(history, autocommit=True) as conn:
        conn.execute("SET search_path = testnet, qtg")
        before = conn.execute("SELECT * FROM pipeline_counts ORDER BY 1, 2").fetchall()
        calls = 0
        while calls < 20:
            calls += 1
            rows = conn.execute("SELECT behind FROM roll_up_pipeline_counts()").fetchall()
            if calls > 1 and not any(behind for (behind,) in rows):
                break
        assert 10 <= calls < 20  # a million nodes, 100,000 ids a call
        assert conn.execute("SELECT * FROM pipeline_counts ORDER BY 1, 2").fetchall() == before

    nodes = explained(
        history, "SELECT count(*) FROM pipeline_counts v WHERE v.total > 0", analyze=True
    )
    # the open movements and nodes (the chains' two nodes each) by key, and the newest id
    for table, open_rows in (
        ("movement_requests", OPEN),
        ("movement_request_nodes", OPEN + CHAINS),
    ):
        assert table not in seq_scanned(nodes)
        assert rows_read(nodes, table) <= open_rows + 1, table


PAGE = {"limit": 51}


@pytest.mark.parametrize(
    ("states", "found"),
    [(["FAILED"], FAILED), (["APPROVED", "FAILED"], APPROVED + FAILED)],
)
def test_the_apis_movement_list_reads_a_rare_state_by_its_index(
    history_dsn: str, states: list[str], found: int
) -> None:
    """GET /v1/movements?state=FAILED (what failed?) walked the primary key from the
    newest movement back through the whole history to the five oldest; it reads
    the movements not completed by state now."""
    nodes = explained(history_dsn, reads.movements_page(states), analyze=True, params=PAGE)

    assert "movement_requests_state_idx" in index_scans(nodes)
    assert "movement_requests" not in seq_scanned(nodes)
    assert rows_read(nodes, "movement_requests") == found


def test_the_apis_movement_list_by_creator_reads_the_creators_index(history_dsn: str) -> None:
    """GET /v1/movements?created_by=carol: carol made the five oldest movements of
    the history, found by walking the primary key through the million nodes'
    movements; the index by creator and id reads her five."""
    nodes = explained(
        history_dsn,
        reads.movements_page([], {"created_by"}),
        analyze=True,
        params={**PAGE, "created_by": "carol"},
    )

    assert "movement_requests_creator_idx" in index_scans(nodes)
    assert "movement_requests" not in seq_scanned(nodes)
    assert rows_read(nodes, "movement_requests") == FAILED


def test_the_apis_list_of_completed_movements_walks_the_newest_first(history_dsn: str) -> None:
    """Nearly every movement is COMPLETED: its page is the newest of them, read on
    the primary key past the open movements, never the history behind the page."""
    nodes = explained(history_dsn, reads.movements_page(["COMPLETED"]), analyze=True, params=PAGE)

    assert "movement_requests" not in seq_scanned(nodes)
    assert rows_read(nodes, "movement_requests") <= OPEN + PAGE["limit"]


@pytest.fixture
def network_limit(history_dsn: str) -> Iterator[None]:
    """A value limit on the whole network (far above what runs), for this test only."""
    with psycopg.connect(history_dsn, autocommit=True) as conn:
        conn.execute("SET search_path = testnet, qtg")
        conn.execute("SELECT set_value_limit('network', '*', 1e9, 1e12, 1e9)")
    yield
    with psycopg.connect(history_dsn, autocommit=True) as conn:
        conn.execute("DELETE FROM testnet.value_limits")


@pytest.mark.usefixtures("network_limit")
@pytest.mark.parametrize(
    "call",
    ["SELECT * FROM claim_ready_nodes('w1', 10)", "SELECT * FROM value_limit_status"],
)
def test_with_value_limits_what_is_in_flight_is_read_from_the_open_nodes(
    history_dsn: str, call: str
) -> None:
    """Once a value limit is set, every claim adds up what its scopes have in
    flight (limit_holds, through value_limit_status, which `qtg status` also
    reads): the nodes in flight, through the claims' partial indexes, never the
    million finished ones."""
    nodes = explained(history_dsn, call, analyze=True)

    assert "movement_request_nodes" not in seq_scanned(nodes)
    assert rows_read(nodes, "movement_request_nodes") <= 20 * LIVE_MOVEMENTS
