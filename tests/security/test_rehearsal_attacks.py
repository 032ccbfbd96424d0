"""Attacks on the rehearsal (qtg_rehearsal, record_rehearsal,
rehearsal_input, load_rehearsal_registry, the QT025 approval advice), each
played with real logins, processes and chains, each expecting a refusal or
nothing reached.

What a treasury relies on: the creator of a movement cannot hide another
operator's failed rehearsal from the approver; a summary cannot rewrite the
approver's terminal; a record races no approval; another network's operator
reaches nothing; no login but the admin loads a registry, and never into a
database that moves money; the API approval says a
rehearsal failed; a fork never holds the RPC URL (and its API key) on a
command line or in a log, nor outlives a failure; a rehearsal leaves no
temporary directory, always fits its record and reads only QTG_RPC_*
variables. (Run in a shell full of secrets, it touches none of them:
tests/chains/test_rehearsal.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from api_support import ONE_NODE, ApiWorld, api_world
from conftest import TestDatabase
from engine import approve, assert_rejected, bind, create
from rows import DIAMOND, Conn, notices, person

from qtg_rehearsal import rehearse as rehearse_module
from qtg_rehearsal.forks import ForkError, head_block, start_fork
from qtg_runner.db import procs
from qtg_runner.ports import LOOPBACK, free_port
from qtg_world.chains.local import find_anvil, terminate

FAILED = {"outcome": "failed", "lines": ["burn: reverted (allowance)"]}


# --- record_rehearsal: who may advise the approver -----------------------------------------------


def test_the_creator_cannot_silence_another_operators_failed_rehearsal(
    db: TestDatabase, conn: Conn
) -> None:
    """A rehearsal by carol failed. Alice, who created the movement, records a
    'passed' of her own making (nothing checks it ran): bob is warned all the
    same, and the movements view says failed, by carol."""
    alice = person(db, "alice")
    movement_id = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice).movement_id
    carol = person(db, "carol")
    procs.record_rehearsal(movement_id, "failed", FAILED).one(carol)
    procs.record_rehearsal(
        movement_id, "passed", {"outcome": "passed", "lines": ["all steps COMPLETED"]}
    ).one(alice)  # the creator, no rehearsal run at all
    shown = conn.execute(
        "SELECT rehearsal, rehearsed_by FROM movements WHERE movement_id = %s", (movement_id,)
    ).fetchone()
    assert shown is not None and shown[0] == "failed" and shown[1].startswith("carol")
    seen = notices(conn)
    assert approve(conn, movement_id) == "APPROVED"
    assert [s[0] for s in seen] == ["QT025"]


def test_a_failure_the_creator_records_stands_over_an_earlier_pass(
    db: TestDatabase, conn: Conn
) -> None:
    alice, carol = person(db, "alice"), person(db, "carol")
    movement_id = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice).movement_id
    procs.record_rehearsal(movement_id, "passed", {"outcome": "passed", "lines": []}).one(carol)
    procs.record_rehearsal(movement_id, "failed", FAILED).one(alice)
    seen = notices(conn)
    assert approve(conn, movement_id) == "APPROVED"
    assert [s[0] for s in seen] == ["QT025"]


@pytest.mark.parametrize(
    "line",
    [
        "\x1b[1A\x1b[2K\x1b[32mrehearsal passed\x1b[0m (id 1, recorded by carol)",
        "two\nlines",
        "\x9b2K a C1 escape",
        "x" * 1001,
    ],
)
def test_a_summary_that_could_rewrite_the_approvers_terminal_is_refused(
    db: TestDatabase, conn: Conn, line: str
) -> None:
    """A summary's lines are printed to the approver's terminal (`qtg movement
    show`): an escape sequence (cursor up, erase line, colour) could rewrite
    'rehearsal failed' as 'passed'. Refused (QT002), nothing recorded."""
    alice = person(db, "alice")
    movement_id = procs.create_movement("m1", Decimal(5), plan=DIAMOND).one(alice).movement_id
    summary = json.dumps({"outcome": "failed", "lines": [line]})
    assert_rejected(
        alice, "QT002", "SELECT record_rehearsal(%s, 'failed', %s::jsonb)", (movement_id, summary)
    )
    assert conn.execute("SELECT count(*) FROM movement_rehearsals").fetchone() == (0,)


def test_a_rehearsal_prints_what_its_chains_said_as_plain_text() -> None:
    """A node's error holds whatever its chain or service answered: the
    rehearsal's lines show control characters as \\xNN and cut long ones."""
    from qtg_rehearsal.engine import EngineRun, NodeRun

    error = "reverted: \x1b[32mOK\x1b[0m\n" + "y" * 2000
    run = EngineRun("FAILED", [NodeRun("pay", "evm_transfer", "FAILED", error, [])], False, 1.0)
    summary = rehearse_module.summarise({"id": 1}, run, {}, {}, {}, {}, {})
    step = next(line for line in summary.lines if line.startswith("step pay"))
    assert "\x1b" not in step and "\\x1b[32mOK" in step and "\n" not in step
    assert len(step) <= rehearse_module.MAX_LINE


def test_a_record_after_an_approval_is_refused_even_in_a_race(db: TestDatabase, conn: Conn) -> None:
    """The record waits for the approval's lock, then sees APPROVED (QT020)."""
    movement_id = create(conn, DIAMOND, "m1")
    bob, carol = person(db, "bob"), person(db, "carol")
    bob.execute("BEGIN")
    assert procs.approve_movement(movement_id).one(bob) == "APPROVED"  # row locked, not committed
    result: dict[str, Any] = {}

    def record() -> None:
        try:
            procs.record_rehearsal(movement_id, "failed", FAILED).one(carol)
            result["ok"] = True
        except psycopg.Error as exc:
            result["sqlstate"] = exc.sqlstate

    thread = threading.Thread(target=record)
    thread.start()
    carol_pid = carol.info.backend_pid
    deadline = time.monotonic() + 10
    while conn.execute(
        "SELECT wait_event_type IS DISTINCT FROM 'Lock' FROM pg_stat_activity WHERE pid = %s",
        (carol_pid,),
    ).fetchone() != (False,):
        assert time.monotonic() < deadline, "the record did not wait for the approval's lock"
    assert thread.is_alive()
    bob.execute("COMMIT")
    thread.join(10)
    assert result == {"sqlstate": "QT020"}


def test_another_networks_operator_may_not_record_or_read(db: TestDatabase, conn: Conn) -> None:
    """A mainnet operator reaches neither testnet's record_rehearsal nor its input."""
    movement_id = create(conn, DIAMOND, "m1")
    stranger = bind(db.connect(db.login("stranger", "qtg_mainnet_operator").dsn), "mainnet")
    for query in (
        "SELECT testnet.record_rehearsal(%s, 'passed', '{}')",
        "SELECT testnet.rehearsal_input(%s)",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            stranger.execute(query, (movement_id,))
    # its own network's function finds no such movement there (ids are per network)
    assert_rejected(
        stranger, "QT010", "SELECT record_rehearsal(%s, 'passed', '{}')", (movement_id,)
    )


def test_the_input_carries_no_salt_and_an_operator_may_not_load_a_registry(
    db: TestDatabase, conn: Conn
) -> None:
    """rehearsal_input runs as the owner (search_path pinned, table names a
    constant list) but reads only what an operator may SELECT anyway, no salt;
    load_rehearsal_registry has no grant (operators, runners, readers)."""
    procs.upsert_exchange_venue("bybit", "bybit", "QTG_BYBIT_URL", "QTG_BYBIT_KEY").one(conn)
    movement_id = create(conn, DIAMOND, "m1")
    secdef = {
        name: (definer, config)
        for name, definer, config in conn.execute(
            "SELECT proname, prosecdef, proconfig FROM pg_proc"
            " WHERE pronamespace = 'testnet'::regnamespace"
            " AND proname IN ('rehearsal_input', 'record_rehearsal', 'load_rehearsal_registry',"
            " 'rehearsal_registry_tables')"
        ).fetchall()
    }
    assert len(secdef) == 4
    # the operator procedures run as the owner, their search_path pinned, pg_temp last
    for name, (definer, config) in secdef.items():
        assert definer == (name in ("rehearsal_input", "record_rehearsal")), name
        assert "search_path=testnet, qtg, pg_temp" in config, name
    # and every column they read, an operator may SELECT itself
    assert conn.execute(
        "SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = 'testnet'::regnamespace"
        " AND c.relname = ANY (rehearsal_registry_tables()) AND a.attnum > 0"
        " AND NOT has_column_privilege('qtg_testnet_operator', a.attrelid, a.attnum, 'SELECT')"
    ).fetchone() == (0,)
    olga = person(db, "olga")
    data = procs.rehearsal_input(movement_id).one(olga)
    salt = conn.execute("SELECT request_salt FROM exchange_venues").fetchone()
    assert salt is not None and salt[0] not in json.dumps(data)
    for login in (
        olga,
        bind(db.connect(db.runner_dsn("testnet"))),
        bind(db.connect(db.login("dashboard", "qtg_testnet_reader").dsn)),
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            login.execute("SELECT load_rehearsal_registry('{}')")


# --- the API: the approval advice -----------------------------------------------------------------


@pytest.fixture(scope="module")
def world(pg_server: str, template_db: str) -> Iterator[ApiWorld]:
    yield from api_world(pg_server, template_db)


def test_an_api_approval_after_a_failed_rehearsal_says_so(world: ApiWorld) -> None:
    """POST /v1/movements/{id}/approve of a movement whose rehearsal failed:
    200, and the answer says QT025."""
    with world.client("alice") as alice:
        created = alice.post(
            "/v1/movements", json={"external_id": "rt-1", "amount": "100", "plan": ONE_NODE}
        )
        assert created.status_code == 201, created.text
        movement_id = created.json()["movement_id"]
    with world.admin() as admin:
        procs.record_rehearsal(movement_id, "failed", FAILED).one(admin)
    with world.client("bob") as bob:
        approved = bob.post(f"/v1/movements/{movement_id}/approve")
    assert approved.status_code == 200, approved.text
    said = approved.text + json.dumps(dict(approved.headers))
    assert "QT025" in said or "rehearsal" in said, said


# --- the forks: cleanup and the RPC URL -----------------------------------------------------------


@pytest.fixture
def source_chain(tmp_path: Path) -> Iterator[str]:
    """A plain anvil on loopback (chain id 31337): what a rehearsal forks."""
    port = free_port()
    log = (tmp_path / "source.log").open("wb")
    process = subprocess.Popen(
        [str(find_anvil()), "--host", LOOPBACK, "--port", str(port)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://{LOOPBACK}:{port}"
    for _ in range(200):
        try:
            head_block(url)
            break
        except ForkError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        terminate(process.pid)
        log.close()


def anvils_forking() -> list[int]:
    """The pids of this process's live children that are anvil forks."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, parent = stat[0], int(stat[1])
        if parent == os.getpid() and "--fork-url" in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


@pytest.mark.chain
def test_a_fork_whose_preparation_fails_is_not_left_running(
    source_chain: str, tmp_path: Path
) -> None:
    """start_fork: anvil started and answering, then anvil_impersonateAccount
    refused: the ForkError leaves no anvil and no relay behind."""
    log_dir = tmp_path / "leak-marker-1"
    log_dir.mkdir()
    with pytest.raises(ForkError):
        start_fork(
            "x", 31337, source_chain, head_block(source_chain), {"0x" + "1" * 40: "0xnot"}, log_dir
        )
    deadline = time.monotonic() + 10
    while anvils_forking() and time.monotonic() < deadline:
        time.sleep(0.05)
    leaked = anvils_forking()
    for pid in leaked:  # a leak of the test's own: cleaned up whatever the verdict
        terminate(pid)
    assert leaked == [], f"anvil forks left running: {leaked}"


@pytest.mark.chain
def test_the_forked_rpc_url_is_on_no_command_line_and_in_no_log(
    source_chain: str, tmp_path: Path
) -> None:
    """The RPC URL (an API key in its path or query, as providers issue them)
    never reaches anvil: /proc/PID/cmdline is every local user's to read."""
    source = source_chain + "/?apikey=SECRET-API-KEY-123"
    fork = start_fork("x", 31337, source, head_block(source_chain), {}, tmp_path)
    try:
        cmdline = Path(f"/proc/{fork.process.pid}/cmdline").read_bytes().decode(errors="replace")
        log = fork.log_file.read_text(errors="replace")
    finally:
        fork.stop()
    assert "SECRET-API-KEY-123" not in cmdline
    assert "SECRET-API-KEY-123" not in log


@pytest.mark.chain
def test_a_failed_rehearsal_leaves_no_temporary_directory(
    source_chain: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rehearse(): the forks' logs go with the rehearsal, on failure too (here:
    the RPC serves another chain than the registry says)."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    data = {
        "movement": {"id": 1, "amount": "1", "asset": "USDC"},
        "plan": {"nodes": [{"key": "a", "executor": "evm_transfer", "config": {"chain": "x"}}]},
        "registry": {"chains": [{"chain_key": "x", "chain_id": 1, "rpc_url_env": "QTG_RPC_X"}]},
    }
    with pytest.raises(rehearse_module.RehearsalError):
        rehearse_module.run(
            data, {"QTG_RPC_X": source_chain + "/?apikey=K-42"}, "testnet", say=lambda _: None
        )
    left = [p.name for p in scratch.iterdir()]
    logs = "".join(p.read_text(errors="replace") for p in scratch.rglob("*.log"))
    assert left == [], f"left behind: {left}; the URL's key in them: {'K-42' in logs}"
    assert anvils_forking() == []


def test_a_registry_naming_another_variable_than_an_rpc_is_refused() -> None:
    """A registry whose chain names QTG_DATABASE_URL as its RPC variable: the
    rehearsal refuses before it reads it (it would go to a relay and messages)."""
    data = {
        "movement": {"id": 1, "amount": "1", "asset": "USDC"},
        "plan": {"nodes": [{"key": "a", "executor": "evm_transfer", "config": {"chain": "x"}}]},
        "registry": {
            "chains": [{"chain_key": "x", "chain_id": 1, "rpc_url_env": "QTG_DATABASE_URL"}]
        },
    }
    with pytest.raises(rehearse_module.RehearsalError, match="reads only QTG_RPC_"):
        rehearse_module.run(
            data, {"QTG_DATABASE_URL": "postgresql://secret"}, "testnet", say=lambda _: None
        )


def test_a_failed_rehearsal_always_fits_record_rehearsal() -> None:
    """Parallel steps failing with long errors: the summary is cut to fit
    record_rehearsal's bound (64 KiB), or the failure would go unrecorded and
    the approver unwarned."""
    from qtg_rehearsal.engine import EngineRun, NodeRun

    nodes = [
        NodeRun(f"pay-{i}", "evm_transfer", "FAILED", "execution reverted: " + "x" * 4000, [])
        for i in range(20)
    ]
    run = EngineRun("FAILED", nodes, False, 12.0)
    summary = rehearse_module.summarise({"id": 1}, run, {}, {}, {}, {}, {})
    assert summary.outcome == "failed"
    size = len(json.dumps(summary.record).encode())
    assert size <= 64 * 1024, f"the record is {size} bytes: record_rehearsal refuses it (QT005)"


def test_a_summary_cut_to_its_lines_still_ends_with_its_outcome() -> None:
    """Notes enough to pass the summary's line bound (a delivery said over and
    over, many balances): the lines are cut before the end, the cut is said,
    and the last line is still the outcome the approver reads."""
    from qtg_rehearsal.engine import EngineRun, NodeRun

    run = EngineRun("FAILED", [NodeRun("pay", "evm_transfer", "FAILED", "reverted", [])], False, 1)
    notes = [f"layerzero: packet {i} not delivered" for i in range(2 * rehearse_module.MAX_LINES)]
    summary = rehearse_module.summarise({"id": 1}, run, {}, {}, {}, {}, {}, notes)
    assert len(summary.lines) == rehearse_module.MAX_LINES
    assert summary.lines[-1] == "outcome: failed"
    assert summary.lines[-2].endswith("more lines left out)")
