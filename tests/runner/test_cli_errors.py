"""The command line's error contract, command by command: every bad argument,
file, id, amount or duration ends in exactly one line on stderr, `qtg: error:
...`, a non-zero exit (2 for a bad input or a procedure's refusal), no
traceback and nothing on stdout; and a count and digest of every table in the
database, before and after, prove that the failed command wrote nothing.

The commands run in this process (typer's CliRunner, through the same root
command class as the console script); `test_the_console_script_keeps_the_contract`
runs the installed `qtg` itself. Hypothesis feeds `qtg movement create` and
the parsers random amounts, durations and JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import typer
from conftest import TestDatabase, create_database, drop_database, dsn_for
from engine import bind, fingerprint, node, pin_clock, plan, register_sim
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql
from rows import Conn, iso_at
from runner_helpers import QTG
from typer.testing import CliRunner, Result

from qtg_cli import app
from qtg_runner.commands import common
from qtg_runner.signers import SignerError
from qtg_runner.signers import load as load_signer
from qtg_runner.signers.local import write_keystore

Run = Callable[..., Result]
BIG = str(2**70)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Plan files, good and bad, by name."""
    made = {
        "ok": json.dumps(plan(node("a"))),
        "unknown_lane": json.dumps(plan(node("a", lane="cctp_fsat"))),
        "cycle": json.dumps(plan(node("a", ["b"]), node("b", ["a"]))),
        "nan": '{"nodes": [{"key": "a", "config": {"lane": "default", "x": NaN}}]}',
        "huge_number": '{"nodes": [{"key": "a", "config": {"amount": 1e400}}]}',
        "tiny_number": '{"nodes": [{"key": "a", "config": {"amount": 1e-400}}]}',
        "long_integer": '{"n": ' + "9" * 5000 + "}",
        "deep": "[" * 100_000 + "]" * 100_000,
        "deep_65": "[" * 65 + "]" * 65,
        "not_json": "{nodes: a}",
        "empty": "",
        "list": "[1, 2]",
    }
    paths = {}
    for name, text in made.items():
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(text)
    paths["not_utf8"] = tmp_path / "latin1.json"
    paths["not_utf8"].write_bytes(b'{"nodes": "\xff\xfe"}')
    paths["too_large"] = tmp_path / "large.json"
    paths["too_large"].write_bytes(b" " * (common.MAX_JSON_FILE_BYTES + 1) + b"{}")
    paths["unreadable"] = tmp_path / "secret.json"
    paths["unreadable"].write_text("{}")
    paths["unreadable"].chmod(0)
    paths["directory"] = tmp_path
    paths["missing"] = tmp_path / "nope.json"
    return paths


def cli(database: TestDatabase, monkeypatch: pytest.MonkeyPatch) -> Run:
    """Runs `qtg ...` in this process as alice's own operator login (her DSN
    in QTG_DATABASE_URL), on ``database`` with its clock pinned at T0."""
    alice = database.login("alice", "qtg_testnet_operator")
    monkeypatch.setenv("QTG_DATABASE_URL", alice.dsn)  # the person's own DSN
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("MG_WORKERS_ENABLED", "false")
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")

    def run(*args: str | Path) -> Result:
        return CliRunner().invoke(app, [str(a) for a in args])

    return run


@pytest.fixture(scope="module")
def shared(pg_server: str, template_db: str) -> Iterator[tuple[TestDatabase, Conn, Run]]:
    """One database for the commands that must fail (they write nothing, which
    each test checks), with the sim executor and alice's login."""
    name = f"qtg_cli_errors_{os.getpid()}"
    drop_database(pg_server, name)
    create_database(pg_server, name, template_db)
    database = TestDatabase(name=name, dsn=dsn_for(pg_server, dbname=name))
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            conn = bind(database.connect())
            pin_clock(conn, iso_at(0))
            register_sim(conn)
            yield database, conn, cli(database, monkeypatch)
        finally:
            database.close()
            drop_database(pg_server, name)
            with psycopg.connect(pg_server, autocommit=True) as admin:
                for role in database.logins:
                    admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def qtg(db: TestDatabase, conn: Conn, monkeypatch: pytest.MonkeyPatch) -> Run:
    """`qtg` on this test's own database (for the commands that change it)."""
    return cli(db, monkeypatch)


def assert_one_line_error(result: Result, code: int = 2, says: str = "") -> None:
    shown = f"exit {result.exit_code}; stdout {result.stdout!r}; stderr {result.stderr!r}"
    assert isinstance(result.exception, SystemExit), f"{result.exception!r}: {shown}"
    assert result.exit_code == code, shown
    assert result.stdout == "", shown
    assert result.stderr.startswith("qtg: error: "), shown
    assert result.stderr.count("\n") == 1 and result.stderr.endswith("\n"), shown
    assert "Traceback" not in result.stderr, shown
    assert says in result.stderr, shown


# (arguments, exit code, a phrase of the message); {name} is the path of a plan file
CREATE = ["movement", "create", "-e", "m-1"]
BAD_COMMANDS: list[tuple[list[str], int, str]] = [
    # ids
    *[
        (["movement", verb, BIG], 2, "9223372036854775807")
        for verb in ("approve", "cancel", "show")
    ],
    (["movement", "approve", "-5"], 2, "No such option"),
    (["movement", "approve", "abc"], 2, "integer"),
    (["movement", "approve", "0"], 2, "greater than or equal to 1"),
    (["movement", "approve", "1.5"], 2, "integer"),
    (["movement", "approve"], 2, "Missing argument"),
    (["movement", "approve", "424242"], 2, "(QT010)"),
    (["movement", "cancel", "424242"], 2, "(QT010)"),
    (["movement", "show", "424242"], 2, "does not exist"),
    (["proposals", "approve", BIG], 2, "9223372036854775807"),
    (["proposals", "approve", "424242"], 2, "(QT013)"),
    (["proposals", "reject", "424242", "--reason", "no"], 2, "(QT013)"),
    (["proposals", "reject", "1"], 2, "Missing option"),
    # amounts
    *[
        ([*CREATE, "-a", amount, "--plan", "{ok}"], 2, "not an amount")
        for amount in (
            "NaN",
            "nan",
            "Infinity",
            "-Infinity",
            "1e400",
            "1E3",
            "-0",
            "-5",
            "",
            " ",
            "1.0000001",
            "0x10",
            "1_000",
            "١٢",
        )
    ],
    ([*CREATE, "-a", "0", "--plan", "{ok}"], 2, "not positive"),
    ([*CREATE, "-a", "0.000000", "--plan", "{ok}"], 2, "not positive"),
    ([*CREATE, "-a", "1000000000001", "--plan", "{ok}"], 2, "(QT005)"),
    # plan files
    *[
        ([*CREATE, "-a", "10", "--plan", "{" + name + "}"], 2, phrase)
        for name, phrase in (
            ("missing", "no such file"),
            ("directory", "is a directory"),
            ("not_utf8", "not UTF-8"),
            ("too_large", "larger than"),
            ("not_json", "not valid JSON"),
            ("empty", "not valid JSON"),
            ("nan", "NaN is not a JSON number"),
            ("huge_number", "beyond what a double holds"),
            ("tiny_number", "beyond what a double holds"),
            ("long_integer", "not valid JSON"),
            ("deep", "nested too deeply"),
            ("deep_65", "nested too deeply"),
            ("list", "not a plan"),
            ("unknown_lane", "(QT001)"),
            ("cycle", "(QT001)"),
        )
    ],
    # durations
    *[
        ([*CREATE, "-a", "10", "--plan", "{ok}", "--expires-in", duration], 2, phrase)
        for duration, phrase in (
            ("1e400s", "not a duration"),
            ("99999999999999999d", "not a duration"),
            ("3651d", "longer than"),
            ("0s", "not a positive duration"),
            ("-5m", "not a duration"),
            ("5", "not a duration"),
            ("5y", "not a duration"),
            ("nan", "not a duration"),
            ("", "not a duration"),
        )
    ],
    # the other inputs of create
    ([*CREATE, "-a", "10"], 2, "exactly one of --plan or --template"),
    ([*CREATE, "-a", "10", "--plan", "{ok}", "-t", "one"], 2, "exactly one"),
    ([*CREATE, "-a", "10", "--plan", "{ok}", "-p", "x=1"], 2, "--param goes with --template"),
    ([*CREATE, "-a", "10", "-t", "one", "-p", "x"], 2, "not key=value"),
    ([*CREATE, "-a", "10", "-t", "one", "-p", "=1"], 2, "has no key"),
    ([*CREATE, "-a", "10", "-t", "one", "-p", "x=1e400"], 2, "beyond what a double holds"),
    ([*CREATE, "-a", "10", "-t", "nope"], 2, "(QT003)"),
    ([*CREATE, "-a", "10", "--plan", "{ok}", "--asset", "usdc"], 2, "(QT002)"),
    (["movement", "create", "-e", "e" * 201, "-a", "10", "--plan", "{ok}"], 2, "(QT002)"),
    ([*CREATE, "-a", "10", "--plan", "{ok}", "--callback-url", "u" * 5000], 2, "(QT005)"),
    # listing and the dashboard
    (["movement", "list", "--state", "nope"], 2, "not a state"),
    (["movement", "list", "--limit", "0"], 2, "--limit"),
    (["movement", "list", "--limit", BIG], 2, "--limit"),
    (["movement", "list", "--network", "bogus"], 2, "not a network"),
    (["status", "--interval", "nan"], 2, "--interval"),
    (["status", "--interval", "inf"], 2, "--interval"),
    (["status", "--interval", "0"], 2, "--interval"),
    (["status", "--network", "moonnet"], 2, "not a network"),
    # runners and the demo: refused before anything starts
    (["run", "--only", "nope"], 2, "unknown worker"),
    (["run", "--concurrency", "0"], 2, "--concurrency"),
    (["run", "--concurrency", "abc"], 2, "--concurrency"),
    (["run", "--network", "bogus", "--only", "node_dispatcher"], 2, "not a network"),
    (["worker", "nope"], 2, "unknown worker"),
    (["worker"], 2, "Missing argument"),
    (["demo", "--scale", "nan"], 2, "--scale"),
    (["demo", "--scale", "0"], 2, "--scale"),
    (["demo", "--timeout", "inf"], 2, "--timeout"),
    (["demo", "--port", "70000"], 2, "--port"),
    (["demo"], 2, "the workers' gate is off"),
    (["drill", "evm-transfer", "--timeout", "inf"], 2, "--timeout"),
    (["drill", "evm-transfer", "--amount", "abc"], 2, "--amount"),
    (["drill", "evm-transfer", "--amount", "-1"], 2, "--amount"),
    (["drill", "evm-transfer", "--port-base", "80"], 2, "--port-base"),
    (["drill", "evm-transfer"], 2, "the workers' gate is off"),
    # the database commands
    (["db", "rollback", "-n", "0"], 2, "--count"),
    (["db", "rollback", "-n", BIG], 2, "--count"),
    (["db", "rollback", "-n", "x"], 2, "--count"),
    (["db", "url", "extra"], 2, "unexpected extra argument"),
    (["db", "mark-test", "--bogus"], 2, "No such option"),
    # logins and the executor registry (the admin's)
    (["operator", "add"], 2, "Missing argument"),
    (["operator", "add", "Bad Name"], 1, ""),
    (["operator", "remove", "nobody_here"], 1, "nobody_here"),
    (["runner", "add", "r1", "--network", "bogus"], 2, "not a network"),
    (["runner", "list", "--network", "bogus"], 2, "not a network"),
    (["executors", "register", "--network", "bogus"], 2, "not a network"),
    (["executors", "nope"], 2, "No such command"),
    (["db", "url", "--login"], 2, "requires an argument"),
    (["movement", "list", "--as"], 2, "requires an argument"),
    (["movement", "list", "--as", "nobody_here"], 1, "nobody_here"),
    # the HTTP API: refused before it serves; tokens only for a login
    (["api", "--tls-cert", "{ok}"], 2, "--tls-key"),
    (["api", "--port", "0"], 2, "--port"),
    (["api", "--host", "0.0.0.0"], 2, "--behind-tls-proxy"),
    (["api", "--host", "::"], 2, "serve HTTPS"),
    (["api", "--network", "bogus"], 2, "not a network"),
    (["api", "token", "issue", "nobody_here", "-o", "-"], 1, "nobody_here"),
    (["api", "token", "revoke", "Bad Name"], 1, "not a login name"),
    (["api", "token", "issue", "alice", "-o", "-", "--valid-for", "5y"], 2, "--valid-for"),
    # no such command or option
    (["nope"], 2, "No such command"),
    (["movment", "list"], 2, "Did you mean 'movement'?"),
    (["movement", "nope"], 2, "No such command"),
    (["--bogus"], 2, "No such option"),
]


@pytest.mark.parametrize(
    ("args", "code", "says"),
    BAD_COMMANDS,
    ids=[" ".join(a)[:60] for a, _, _ in BAD_COMMANDS],
)
def test_a_bad_command_is_one_line_and_writes_nothing(
    shared: tuple[TestDatabase, Conn, Run],
    files: dict[str, Path],
    args: list[str],
    code: int,
    says: str,
) -> None:
    _, conn, qtg = shared
    argv = [a.format(**{k: str(v) for k, v in files.items()}) if "{" in a else a for a in args]
    before = fingerprint(conn)
    assert_one_line_error(qtg(*argv), code, says)
    assert fingerprint(conn) == before


def test_an_unusable_setting_is_one_line_with_exit_1(
    shared: tuple[TestDatabase, Conn, Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    qtg = shared[2]
    monkeypatch.setenv("QTG_NETWORK_MODE", "moonnet")
    assert_one_line_error(qtg("movement", "list"), 1, "QTG_NETWORK_MODE")
    monkeypatch.setenv("QTG_NETWORK_MODE", "testnet")
    monkeypatch.setenv("MG_WORKERS_ENABLED", "maybe")
    assert_one_line_error(qtg("run", "--only", "node_dispatcher"), 1, "MG_WORKERS_ENABLED")


def test_a_keystore_that_does_not_open_is_one_line_with_exit_1(tmp_path: Path) -> None:
    """A signer refused (here a wrong password) is the environment's to fix: its
    own message, exit 1, not an "unexpected" error."""
    write_keystore(tmp_path / "k.json", bytes(range(1, 33)), "right", iterations=2**4)
    env = {"QTG_KEYSTORE_DIR": str(tmp_path), "QTG_KEYSTORE_PASSWORD": "wrong"}
    with pytest.raises(SignerError) as refused:
        load_signer("keystore:k", env)
    message, code = common.describe(refused.value)
    assert code == 1
    assert message.startswith("signer keystore:k: the password does not open"), message


def test_a_refused_self_approval_is_one_line(conn: Conn, qtg: Run, files: dict[str, Path]) -> None:
    created = qtg(*CREATE, "-a", "10", "--plan", files["ok"])
    assert created.exit_code == 0, created.output
    movement_id = conn.execute("SELECT id FROM movement_requests").fetchone()
    assert movement_id is not None
    before = fingerprint(conn)
    result = qtg("movement", "approve", str(movement_id[0]))
    assert_one_line_error(result, 2, "refused (QT022)")
    after = fingerprint(conn)
    # the refusal is audited (one approval_refused row) and nothing else changed
    changed = {table for table in before if before[table] != after[table]}
    assert changed == {"testnet.audit_batches"}


def test_the_console_script_keeps_the_contract(
    shared: tuple[TestDatabase, Conn, Run], files: dict[str, Path]
) -> None:
    """The installed `qtg` itself, as a process: one line, exit 2, no traceback."""
    database = shared[0]
    env = {
        "PATH": "/usr/bin:/bin",
        "QTG_DATABASE_URL": database.dsn,
        "HOME": str(files["directory"]),
    }
    for args in (
        ["movement", "approve", BIG],
        ["movement", "create", "-e", "x", "-a", "NaN", "--plan", str(files["ok"])],
        ["movement", "create", "-e", "x", "-a", "1", "--plan", str(files["deep"])],
    ):
        done = subprocess.run([QTG, *args], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done
        assert done.stdout == "" and done.stderr.startswith("qtg: error: "), done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done


HEAVY = (
    "qtg_runner.runtime",
    "qtg_runner.workers",
    "qtg_runner.executors",
    "qtg_runner.chains",
    "qtg_runner.exchanges",
    "web3",
    "eth_account",
    "httpx",
)
"""What an operator's command has no use for: the runner, its executors and their
chain and exchange clients (most of a second to import)."""


@pytest.mark.parametrize(
    ("argv", "module"),
    [
        (["movement", "approve"], "qtg_runner.commands.movement"),
        (["db", "url"], "qtg_runner.cli"),
        ([], "qtg_runner.cli"),
    ],
)
def test_an_operators_command_loads_none_of_the_runner(argv: list[str], module: str) -> None:
    """`qtg movement ...` loads the movement commands, `qtg db ...` none: not every
    command's modules (only those all share: common, tables); `qtg --help` (its
    listing) none of them."""
    probe = (
        "import contextlib, io, json, sys\n"
        "from qtg_cli import app\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        f"    app({[*argv, '--help']!r})\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stdout)
    assert module in loaded
    assert [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []
    commands = {m for m in loaded if m.startswith("qtg_runner.commands.")}
    assert commands <= {"qtg_runner.commands.common", "qtg_runner.commands.tables", module}


def test_eth_account_is_loaded_by_a_signer_alone() -> None:
    """The runtime with every executor, the local chains' modules and `qtg --help`
    load no eth-account: its import (eth-keyfile's BLS tables) costs about half a
    second of CPU and 4 MB in every worker process and command, and only a signer
    uses it. A signer loads it when it takes its key, and signs."""
    probe = (
        "import contextlib, io, json, sys\n"
        "import qtg_runner.runtime, qtg_runner.executors.registry\n"
        "import qtg_world.chains.registry, qtg_runner.chains.cctp, qtg_world.chains.keys\n"
        "from qtg_cli import app\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    app(['--help'])\n"
        "before = sorted(m for m in sys.modules\n"
        "                if m.split('.')[0] in ('eth_account', 'eth_keyfile'))\n"
        "from qtg_runner.signers.local import LocalSigner\n"
        "signer = LocalSigner('env:KEY', bytes.fromhex('11' * 32))\n"
        "signed = signer.sign_transaction_sync({'chainId': 1, 'nonce': 0, 'to': '0x' + '22' * 20,"
        " 'value': 0, 'data': '0x', 'gas': 21000, 'maxFeePerGas': 2, 'maxPriorityFeePerGas': 1,"
        " 'type': 2})\n"
        "after = 'eth_account' in sys.modules\n"
        "print(json.dumps([before, signer.address, after, len(signed.raw)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    before, address, after, raw = json.loads(done.stdout)
    assert before == []
    assert address == "0x19e7e376e7c213b7e7e7e46cc70a5dd086daff2a"  # the key 0x11...11's account
    assert after is True and raw > 100


def test_every_command_is_found_and_listed() -> None:
    """Each sub-command is loaded by its name, and `qtg --help` lists every one
    by its summary, the same line whether it was loaded or not."""
    root = typer.main.get_command(app)
    assert isinstance(root, common.QtgGroup)
    lazy = type(root).lazy
    names = root.list_commands(typer.Context(root))
    assert names == ["db", *lazy]
    before = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert before.exit_code == 0
    for name, entry in lazy.items():
        assert f" {name}  " in before.stdout and entry.summary in before.stdout
    for name in names:
        command = root.get_command(typer.Context(root), name)
        assert command is not None and command.name == name and command.help
    after = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert after.stdout == before.stdout


# --- hypothesis: random amounts, durations, ids and JSON ----------------------------------------

AMOUNTS = st.one_of(
    st.text(max_size=12),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.floats().map(repr),
    st.integers().map(str),
)
DURATIONS = st.one_of(
    st.text(max_size=8),
    st.builds(
        lambda n, unit: f"{n}{unit}",
        st.one_of(st.integers(), st.floats().map(repr), st.decimals().map(str)),
        st.sampled_from(["s", "m", "h", "d", "", "y", "ms"]),
    ),
)


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    amount=AMOUNTS, duration=DURATIONS, movement_id=st.one_of(st.integers(), st.text(max_size=6))
)
def test_random_inputs_create_or_fail_in_one_line(
    qtg: Run, files: dict[str, Path], amount: str, duration: str, movement_id: Any
) -> None:
    if amount.startswith("-") or duration.startswith("-") or str(movement_id).startswith("-"):
        return  # an argument that reads as an option: covered above
    created = qtg(*CREATE, "-a", amount, "--plan", files["ok"], "--expires-in", duration)
    if created.exit_code != 0:
        assert_one_line_error(created, 2)
    approved = qtg("movement", "approve", str(movement_id))
    if approved.exit_code != 0:
        assert_one_line_error(approved, 2)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=st.text(max_size=30))
def test_the_parsers_return_a_value_or_refuse_it(text: str) -> None:
    """parse_amount, parse_duration and loads never fail otherwise than with the
    one refusal the CLI turns into its error line."""
    for parse in (common.parse_amount, common.parse_duration):
        with contextlib.suppress(typer.BadParameter):
            parse(text)
    try:
        value = common.loads(text, "the text")
    except typer.BadParameter:
        return
    json.dumps(value, allow_nan=False)  # what is accepted is JSON PostgreSQL accepts
