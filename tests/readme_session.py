"""README.md's five-minute session, run as printed on what `make run` leaves.

Every fenced block of README.md whose info string is `sh` or `sql` runs in
order, in one bash, from a directory holding the repository's `.venv`. An
`sql` block is what is typed into the psql that the last line of the `sh`
block before it opens (that line gets the block as its input); psql is the
embedded server's (`qtg db psql`, and first on the PATH), with ON_ERROR_STOP
on. Other blocks (the picture, the two commands, the layout) are prose. The
only change to the text is the API's port: README's 8080 becomes a free one.
A block that fails fails the test with its line in README.md; afterwards the
two movements the session made are checked in the database: COMPLETED,
created by alice, refused to her own approval, approved by bob, with the ids
README prints. tests/chains/test_demo_world.py runs it between the demo's
first and second runs; tests/test_readme.py checks the script it makes.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from qtg_runner.db.embedded import bin_dir
from qtg_runner.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RUN = ("sh", "sql")
README_PORT = "8080"
QTG = str(Path(sys.executable).with_name("qtg"))
FAILED = "qtg-readme: failed at README.md line "
SESSION_TIMEOUT_S = 300.0
STOP_DEADLINE_S = 20.0


@dataclass(frozen=True)
class Block:
    info: str
    line: int  # of the opening fence in README.md
    text: str


def blocks(text: str) -> list[Block]:
    """README's fenced blocks that run, in order."""
    found: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"```\s*(\S*)", lines[i])
        if fence is None:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        if fence.group(1) in RUN:
            found.append(Block(fence.group(1), i + 1, "\n".join(lines[i + 1 : end])))
        i = end + 1
    return found


def session_script(runs: list[Block], port: int) -> str:
    """One bash script of the blocks: each `sh` block as written (README's
    port replaced), each `sql` block the input of the psql line before it."""
    out = [
        "set -eE",
        f"trap 'echo \"{FAILED}$QTG_README_LINE (exit $?)\" >&2' ERR",
    ]
    for k, block in enumerate(runs):
        if block.info == "sql":
            assert k > 0 and runs[k - 1].info == "sh", (
                f"README.md line {block.line}: an sql block follows the sh block whose "
                "last line opens the psql it is typed into"
            )
            continue
        body = block.text.replace(README_PORT, str(port)).rstrip("\n").split("\n")
        feeds = k + 1 < len(runs) and runs[k + 1].info == "sql"
        if feeds:
            assert re.match(r"(qtg db )?psql ", body[-1].lstrip()), (
                f"README.md line {block.line}: the sh block before an sql block ends in the "
                f"psql that the sql is typed into, not in {body[-1]!r}"
            )
        out += [f"QTG_README_LINE={block.line}", f"echo '--- README.md line {block.line}'"]
        out += body[:-1] if feeds else body
        if feeds:
            sql = runs[k + 1]
            assert "QTG_README_SQL" not in sql.text
            out += [
                f"QTG_README_LINE={sql.line}",
                f"echo '--- README.md line {sql.line}'",
                "{",
                body[-1],
                "} <<'QTG_README_SQL'",
                sql.text,
                "QTG_README_SQL",
            ]
    return "\n".join(out) + "\n"


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """The session's process group (its runner and API in the background) ended:
    SIGTERM, then SIGKILL at the deadline."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_DEADLINE_S
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def run_readme_session(parent: Path, env: dict[str, str]) -> None:
    """README's session in a shell of its own under ``parent``, on the database
    and world ``env`` names (a `make run` having left them), then its rows checked."""
    runs = blocks(README.read_text())
    assert [b.info for b in runs].count("sh") >= 3 and [b.info for b in runs].count("sql") >= 2
    # a shell of one's own: no workers' gate set, the embedded server's psql
    # first on the PATH, psql stopping at the first error, the repository's .venv
    home = parent / "session"
    home.mkdir()
    (home / ".venv").symlink_to(ROOT / ".venv")
    (home / "psqlrc").write_text("\\set ON_ERROR_STOP on\n")
    shell = dict(env)
    shell.update(PATH=f"{bin_dir()}:{env['PATH']}", PSQLRC=str(home / "psqlrc"), PAGER="cat")
    (home / "session.sh").write_text(session_script(runs, free_port()))
    with (home / "stdout").open("wb") as out, (home / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            ["bash", str(home / "session.sh")],
            cwd=home,
            env=shell,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=SESSION_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _stop_group(proc)
    stdout, stderr = (home / "stdout").read_text(), (home / "stderr").read_text()
    shown = f"--- stdout:\n{stdout[-6000:]}\n--- stderr:\n{stderr[-6000:]}"
    if code is None:
        started = re.findall(r"--- README\.md line (\d+)", stdout)
        pytest.fail(
            f"README.md's session ran past {SESSION_TIMEOUT_S:.0f} s, in the block at "
            f"line {started[-1] if started else '?'}\n{shown}"
        )
    failed = re.findall(re.escape(FAILED) + r"(\d+)", stderr)
    assert code == 0 and not failed, (
        f"README.md's block at line {failed[-1] if failed else '?'} failed (exit {code})\n{shown}"
    )
    # what the session printed it would: the refusals, psql's and the API's
    assert "movement 10 was created by alice, who cannot also approve it" in stderr, shown
    assert '"type":"/problems/QT022"' in stdout and '"status":403' in stdout, shown

    admin = subprocess.run(
        [QTG, "db", "url"], env=shell, capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    with psycopg.connect(admin) as conn:
        rows = conn.execute(
            "SELECT m.external_id, m.movement_id, m.state, m.created_by, m.approved_by,"
            "       (SELECT count(*) FROM testnet.audit_outbox a"
            "         WHERE a.request_id = m.movement_id AND a.action = 'approval_refused'"
            "           AND a.login = 'alice')"
            "  FROM testnet.movements m WHERE m.external_id LIKE 'readme-%'"
            " ORDER BY m.movement_id"
        ).fetchall()
    assert rows == [
        ("readme-1", 10, "COMPLETED", "alice", "bob", 1),
        ("readme-2", 11, "COMPLETED", "alice", "bob", 1),
    ], shown
