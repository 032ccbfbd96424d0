"""A real PostgreSQL for the tests, and a fresh database per test.

The server, once per session (each pytest-xdist worker has its own), is the
first of:
  1. QTG_TEST_DSN, a superuser DSN to a server of yours (15+) that lets logins in
     with a password (scram-sha-256, md5 or trust); run the suite in one process
     against it (the network roles and the tests' logins are the cluster's);
  2. QTG_TEST_PG_BIN, the bin directory of another PostgreSQL installation (15+):
     a throwaway cluster of it in a temporary directory, removed at the end, its
     superuser let in by trust over the unix socket, every other login by its
     scram-sha-256 password (scripts/test-on-postgres.sh);
  3. a testcontainers PostgreSQL, when a Docker daemon answers and the container
     starts (the image's default: password authentication);
  4. the embedded PostgreSQL 18 in a temporary data directory, removed at the end:
     scram-sha-256 for every connection, as `qtg` runs it, its superuser's
     password in a credentials file beside the data directory.

The network roles are groups (NOLOGIN): a test that needs a person or a runner
logs in as a login of its own, a member of one (`db.login`, or `db.runner_dsn`
/ `db.operator_dsn`, which make one per network and test database).

A template database `qtg_template_<pid>` is migrated once per session; each test
that asks for `db` gets `qtg_t_<pid>_<n>` cloned from it (STRATEGY FILE_COPY) and
dropped afterwards.

`conn` is the one connection fixture of the suite: a superuser connection to
that database, bound to testnet, its clock pinned at T0, with the test executor
"sim" registered. A test that needs more names it (`nosfx_executor`, or a
fixture of its own file) rather than redefining `conn`.
"""

from __future__ import annotations

import os

# pytest-xdist's workers inherit COLUMNS=80: the CLI's consoles, made at import,
# would then cut the tables the tests read (each test that runs the CLI sets its own)
os.environ.pop("COLUMNS", None)

import tempfile

from tmpdir import temporary_dir

# the tests' temporary files, their servers' data first, in memory where there is
# room (tests/tmpdir.py); TMPDIR for the processes the tests start
tempfile.tempdir = os.environ["TMPDIR"] = temporary_dir()

import contextlib
import itertools
import logging
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from chain_support import (  # noqa: F401 (tests/chains)
    local_chain_set,
    local_chains,
    pytest_terminal_summary,
    treasury_pools_left_empty,
)
from engine import PEOPLE, bind, pin_clock, register_sim
from psycopg import sql
from psycopg.conninfo import make_conninfo
from rows import T0

from qtg_runner.budget import forget_budgets
from qtg_runner.db.logins import create_login
from qtg_runner.db.migrate import mark_test_database, migrate

_names = itertools.count(1)

TEST_SERVER_SETTINGS = {
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "off",
    "max_wal_size": "256MB",
}
"""What the tests' servers are set to (the embedded one, and a cluster of
another installation)."""


def dsn_for(dsn: str, **overrides: Any) -> str:
    """``dsn`` with some parameters replaced (None removes one); URIs and key=value alike."""
    return make_conninfo(dsn, **overrides)


def _docker_dsn(stack: contextlib.ExitStack) -> str | None:
    """A testcontainers PostgreSQL, or None when Docker is not usable here."""
    try:
        import docker

        docker.from_env(timeout=3).ping()
    except Exception:
        return None
    try:
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:
            from testcontainers.postgres import PostgresContainer

        container = PostgresContainer(os.environ.get("QTG_TEST_PG_IMAGE", "postgres:17"))
        container.with_command("postgres -c fsync=off -c full_page_writes=off")
    except Exception:
        return None
    try:
        container.start()
    except Exception:  # no image and no registry, say: fall back to the embedded server
        with contextlib.suppress(Exception):
            container.stop()
        return None
    stack.callback(container.stop)
    return make_conninfo(
        host=container.get_container_host_ip(),
        port=int(container.get_exposed_port(5432)),
        user=container.username,
        password=container.password,
        dbname=container.dbname,
    )


def server_parent_dir() -> Path:
    """A new temporary directory to hold an embedded server's data directory. As
    root the server runs as a system user that must traverse it: this directory is
    ours, so it may be made traversable (never listable)."""
    tmp = Path(tempfile.mkdtemp(prefix="qtg-test-pg-"))
    tmp.chmod(0o711)
    return tmp


def _embedded_dsn(stack: contextlib.ExitStack) -> str:
    from qtg_runner.db.embedded import start_embedded, stop_embedded

    tmp = server_parent_dir()
    stack.callback(shutil.rmtree, tmp, ignore_errors=True)
    data_dir = tmp / "pg18"
    server = start_embedded(data_dir)
    stack.callback(stop_embedded, data_dir)
    dsn = server.dsn()
    # a throwaway cluster: durability buys nothing, and CREATE DATABASE checkpoints;
    # its WAL kept small, as it may be in memory (tests/tmpdir.py)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for setting, value in TEST_SERVER_SETTINGS.items():
            name, literal = sql.Identifier(setting), sql.Literal(value)
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(name, literal))
        conn.execute("SELECT pg_reload_conf()")
    return dsn


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """Superuser DSN to the session's PostgreSQL server."""
    explicit = os.environ.get("QTG_TEST_DSN", "").strip()
    with contextlib.ExitStack() as stack:
        if explicit:
            dsn = explicit
        elif other := os.environ.get("QTG_TEST_PG_BIN", "").strip():
            dsn = _cluster_dsn(stack, Path(other))
        else:
            dsn = _docker_dsn(stack) or _embedded_dsn(stack)
        # closed before the server stops
        stack.callback(_close_server_conn, dsn)
        yield dsn


def _cluster_dsn(stack: contextlib.ExitStack, bin_dir: Path) -> str:
    """A throwaway cluster of the installation in ``bin_dir``, stopped and removed
    with ``stack``: unix socket only, the superuser in by trust, every other login
    by its scram-sha-256 password, TEST_SERVER_SETTINGS. As root, the server runs
    as the system user ``postgres`` (PostgreSQL refuses root)."""
    work = server_parent_dir()
    stack.callback(shutil.rmtree, work, ignore_errors=True)
    prefix: list[str] = []
    if os.geteuid() == 0:
        owner = os.environ.get("QTG_PG_OWNER", "postgres")
        shutil.chown(work, owner)
        work.chmod(0o755)
        prefix = ["runuser", "-u", owner, "--"]
    data = work / "data"
    subprocess.run(
        [
            *prefix,
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
        ],
        check=True,
        capture_output=True,
    )
    # rewritten in place: initdb's file, its owner and mode kept
    (data / "pg_hba.conf").write_text("local all postgres trust\nlocal all all scram-sha-256\n")
    options = " ".join(
        [f"-c listen_addresses='' -c unix_socket_directories='{work}' -c max_connections=200"]
        + [f"-c {name}={value}" for name, value in TEST_SERVER_SETTINGS.items()]
    )
    pg_ctl = [*prefix, str(bin_dir / "pg_ctl"), "-D", str(data)]
    subprocess.run(
        [*pg_ctl, "-l", str(work / "server.log"), "-w", "-o", options, "start"],
        check=True,
        capture_output=True,
    )
    stack.callback(
        subprocess.run, [*pg_ctl, "-m", "immediate", "stop"], check=False, capture_output=True
    )
    return make_conninfo(host=str(work), user="postgres", dbname="postgres")


def _admin(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


_server_conns: dict[str, psycopg.Connection[Any]] = {}


@contextlib.contextmanager
def _server(admin_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit superuser connection to the server's ``admin_dsn``, kept
    open for the process: every test clones, drops and cleans up after its
    database through it, where a scram login each time (some 20 ms) added half
    again to the clone's 40 ms. A connection that breaks is closed, and made
    anew on the next use."""
    conn = _server_conns.get(admin_dsn)
    if conn is None or conn.closed:
        conn = _server_conns[admin_dsn] = _admin(admin_dsn)
    try:
        yield conn
    except psycopg.OperationalError:
        conn.close()
        raise


def _close_server_conn(admin_dsn: str) -> None:
    conn = _server_conns.pop(admin_dsn, None)
    if conn is not None:
        conn.close()


def create_database(admin_dsn: str, name: str, template: str | None = None) -> None:
    with _server(admin_dsn) as conn:
        if template is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        else:
            conn.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )


def drop_database(admin_dsn: str, name: str) -> None:
    with _server(admin_dsn) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@contextlib.contextmanager
def module_database(admin_dsn: str, template: str, prefix: str) -> Iterator[str]:
    """A clone of ``template`` for one module's fixture, named after ``prefix`` and
    the process: its superuser DSN; dropped afterwards."""
    name = f"{prefix}_{os.getpid()}"
    drop_database(admin_dsn, name)
    create_database(admin_dsn, name, template)
    try:
        yield dsn_for(admin_dsn, dbname=name)
    finally:
        drop_database(admin_dsn, name)


def disconnect_all(admin_dsn: str, name: str) -> None:
    with _server(admin_dsn) as conn:
        conn.execute(
            """SELECT pg_terminate_backend(pid) FROM pg_stat_activity
               WHERE datname = %s AND pid <> pg_backend_pid()""",
            [name],
        )


@pytest.fixture(scope="session")
def template_db(pg_server: str) -> Iterator[str]:
    """Name of the session's migrated template database."""
    name = f"qtg_template_{os.getpid()}"
    drop_database(pg_server, name)
    create_database(pg_server, name)
    try:
        migrate(dsn_for(pg_server, dbname=name))
        _make_people(pg_server)
        # the tests pin the clock: only a test database honours that
        mark_test_database(dsn_for(pg_server, dbname=name))
        disconnect_all(pg_server, name)
        yield name
    finally:
        drop_database(pg_server, name)


def _make_people(dsn: str) -> None:
    """The operators tests act as (engine.PEOPLE): cluster-wide roles without a
    login, members of every network's operator role; made if missing."""
    with _admin(dsn) as conn:
        for person in PEOPLE:
            conn.execute(
                sql.SQL(
                    "DO $$ BEGIN CREATE ROLE {} NOLOGIN; "
                    "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
                ).format(sql.Identifier(person))
            )
            conn.execute(
                sql.SQL("GRANT qtg_mainnet_operator, qtg_testnet_operator TO {}").format(
                    sql.Identifier(person)
                )
            )


@dataclass
class TestDatabase:
    """One test's own database."""

    __test__ = False  # not a test class, despite the name

    name: str
    dsn: str  # superuser
    _conns: list[psycopg.Connection[Any]] = field(default_factory=list, repr=False)
    logins: list[str] = field(default_factory=list, repr=False)
    _members: dict[str, str] = field(default_factory=dict, repr=False)

    def runner_dsn(self, network: str) -> str:
        """Same database, logged in as a runner login of the network (one per
        network and test database, made on first use)."""
        return self._member_dsn(f"qtg_{network}_runner")

    def operator_dsn(self, network: str) -> str:
        """Same database, logged in as an operator login of the network (one per
        network and test database, made on first use)."""
        return self._member_dsn(f"qtg_{network}_operator")

    def _member_dsn(self, group: str) -> str:
        if group not in self._members:
            # the group role's name without its qtg_ prefix: mainnet_runner, ...
            self._members[group] = self.login(group.removeprefix("qtg_"), group).dsn
        return self._members[group]

    def login(self, person: str, member_of: str) -> Login:
        """A login of this test for ``person`` (e.g. "alice"), a member of the role
        ``member_of`` (e.g. "qtg_testnet_operator"), with a password of its own,
        made as `qtg operator|runner add` makes one (the group role's connection
        limit and timeouts copied onto it). Roles are cluster-wide, so the role is
        named after the person and this database, and dropped with the database."""
        role = f"{person}_{self.name}"[:63]
        password = secrets.token_urlsafe(24)
        with _admin(self.dsn) as admin, admin.transaction():
            create_login(admin, role, member_of, password)
        self.logins.append(role)
        return Login(role, dsn_for(self.dsn, user=role, password=password))

    def connect(self, dsn: str | None = None, **kwargs: Any) -> psycopg.Connection[Any]:
        """A connection (autocommit unless told otherwise), closed after the test."""
        kwargs.setdefault("autocommit", True)
        conn: psycopg.Connection[Any] = psycopg.connect(dsn or self.dsn, **kwargs)
        self._conns.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns.clear()


@dataclass(frozen=True)
class Login:
    """A login role made by ``TestDatabase.login``: its name (what session_user
    reads) and a DSN that logs in as it."""

    name: str
    dsn: str


NewDatabase = Callable[..., TestDatabase]


@pytest.fixture(autouse=True)
def _logging_put_back() -> Iterator[None]:
    """A command run in this process (typer's CliRunner) may configure the qtg
    logger (qtg_runner.log.configure: a handler on its own stderr, which is
    closed once it returns, and no propagation). After each test the qtg
    logger's level and propagation are put back and any plain StreamHandler
    added to it or to the root logger is removed, so that no later test logs
    to a closed stream or loses the qtg events to caplog. (pytest's own
    handlers, attached per phase, are subclasses and left to pytest.)"""
    qtg = logging.getLogger("qtg")
    loggers = (qtg, logging.getLogger())
    kept = {lg: list(lg.handlers) for lg in loggers}
    level, propagate = qtg.level, qtg.propagate
    yield
    for lg in loggers:
        for handler in lg.handlers[:]:
            if type(handler) is logging.StreamHandler and handler not in kept[lg]:
                lg.removeHandler(handler)
    qtg.setLevel(level)
    qtg.propagate = propagate


@pytest.fixture(autouse=True)
def _budgets_afresh() -> Iterator[None]:
    """Each test's endpoints start with budgets of their own (qtg_runner.budget
    keeps one per URL for the process): a 429 one test provokes from a
    module's shared double does not pause the next test's calls."""
    yield
    forget_budgets()


@pytest.fixture
def new_database(pg_server: str, template_db: str) -> Iterator[NewDatabase]:
    """Factory: new_database() clones the migrated template; new_database(template=None)
    makes an empty database. All are dropped after the test."""
    made: list[TestDatabase] = []

    def make(template: str | None = template_db) -> TestDatabase:
        name = f"qtg_t_{os.getpid()}_{next(_names)}"
        create_database(pg_server, name, template)
        database = TestDatabase(name=name, dsn=dsn_for(pg_server, dbname=name))
        made.append(database)
        return database

    yield make
    for database in made:
        database.close()
        drop_database(pg_server, database.name)
        with _server(pg_server) as admin:
            for role in database.logins:
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def db(new_database: NewDatabase) -> TestDatabase:
    """A fresh, fully migrated database of this test's own."""
    return new_database()


@pytest.fixture
def conn(db: TestDatabase) -> psycopg.Connection[Any]:
    """A superuser connection to this test's database, bound to testnet, its clock
    pinned at T0 (2026-01-01 00:00 UTC), with the executor "sim" registered (it has a
    side effect; config schema ``engine.SIM_SCHEMA``)."""
    c = bind(db.connect())
    pin_clock(c, T0.isoformat())
    register_sim(c)
    return c


@pytest.fixture
def nosfx_executor(conn: psycopg.Connection[Any]) -> str:
    """The executor "nosfx", registered on ``conn``: like "sim" but without a side effect."""
    register_sim(conn, "nosfx", has_side_effect=False)
    return "nosfx"


@pytest.fixture
def endpoint() -> Iterator[Any]:
    """A service endpoint on loopback that takes each request and answers none
    until told to (``endpoint_support.Endpoint``)."""
    from endpoint_support import Endpoint

    server = Endpoint()
    try:
        yield server
    finally:
        server.close()


LONGEST_FIRST = (
    "tests/chains/test_demo_world.py",
    "tests/runner/test_runner_processes.py",
    "tests/chains/test_rehearsal.py",
    "tests/security/test_server_auth.py",
    "tests/chains/test_rehearsal_deliveries.py",
    "tests/chains/test_provider_budget.py",
    "tests/chains/test_bybit_executors.py",
    "tests/chains/test_cctp_executors.py",
    "tests/chains/test_ccip_executor.py",
    "tests/chains/test_stargate_contracts.py",
    "tests/chains/test_ccip_contracts.py",
    "tests/chains/test_iris.py",
    "tests/chains/test_stargate_executor.py",
    "tests/scenarios/test_query_plans.py",
    "tests/api/test_operator_page.py",
    "tests/chains/test_chains_cli.py",
    "tests/chains/test_stargate_crash.py",
    "tests/scenarios/test_migrations.py",
    "tests/chains/test_world_cli.py",
    "tests/scenarios/test_bad_input.py",
    "tests/chains/test_evm_crash.py",
    "tests/chains/test_local_chains.py",
    "tests/chains/test_cctp_contracts.py",
    "tests/runner/test_poison.py",
    "tests/procedures/test_balances.py",
    "tests/scenarios/test_chaos_checker.py",
    "tests/chains/test_drill_cli.py",
)
"""The files that take longest (a quarter of a minute to four minutes each
on two cores), longest first as measured: `make test` hands whole files to its
pytest-xdist workers in the order collected (--dist loadfile, pyproject.toml's
--no-loadscope-reorder), so these start first and the short files fill in
behind them, and the workers finish together instead of one starting the
longest file when the others are nearly done. A file missing from the list
only runs later; a file named here but gone is ignored."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files of LONGEST_FIRST first, in its order; then the others, those
    with the most tests first (pytest-xdist's own order for --dist loadfile);
    each file's tests in their order."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    rank = {path: k for k, path in enumerate(LONGEST_FIRST)}
    order = sorted(files, key=lambda path: (rank.get(path, len(rank)), -len(files[path])))
    items[:] = [item for path in order for item in files[path]]
