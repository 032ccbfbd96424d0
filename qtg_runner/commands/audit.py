"""`qtg audit verify|export`: the network's hash-chained audit log.

Every state change writes an audit row in its own transaction; the
audit_outbox_promoter moves them into audit_log, each row chained to the one
before by SHA-256. `verify` recomputes the chain in the database and says
where it first breaks; `export` writes the rows as JSON lines for storage off
the database host, each with the exact text its hash is taken over, so the
copy is checked with SHA-256 alone (`verify --file`), and its last line's
seq and hash, kept off the host, later prove that nobody rewrote the chain
from there (`verify --expect SEQ:HASH`) and that the file was not cut at
either end (`verify --file F --expect SEQ:HASH`). Both log in as an operator (their
own DSN in QTG_DATABASE_URL, or --as NAME).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TextIO

import typer

from qtg_runner.commands.common import USAGE, AsOption, CommandError, NetworkOption
from qtg_runner.commands.movement import connect, out
from qtg_runner.db import procs

app = typer.Typer(
    help="The audit log: verify its hash chain, export it for storage off the database host.",
    no_args_is_help=True,
)

EXPORT_PAGE = 5000
ZERO_HASH = "00" * 32


def _expected(expects: list[str] | None) -> dict[int, str]:
    kept: dict[int, str] = {}
    for expect in expects or ():
        seq, _, digest = expect.partition(":")
        digest = digest.removeprefix("0x").lower()
        if (
            not seq.isdigit()
            or len(digest) != 64
            or any(c not in "0123456789abcdef" for c in digest)
        ):
            raise CommandError(f"--expect is SEQ:HASH (64 hex digits), got {expect!r}", USAGE)
        if kept.setdefault(int(seq), digest) != digest:
            raise CommandError(f"--expect names row {seq} twice, with two hashes", USAGE)
    return kept


@dataclass(frozen=True)
class FileCheck:
    """What an export file shows: the rows whose chain holds, its first and
    last seq, the last row_hash, and the first problem (None: it holds and
    meets every row kept off the host)."""

    checked: int
    first_seq: int | None
    last_seq: int | None
    last_hash: str
    problem: str | None = None


def verify_lines(lines: TextIO, kept: dict[int, str] | None = None) -> FileCheck:
    """Check an export's lines with SHA-256 alone: each row_hash is
    sha256(prev_hash || canonical), each prev_hash the row before's row_hash, the
    seqs consecutive. Its ends are proven by what was kept off the host (`kept`,
    seq to row_hash): a file that starts after row 1 must start on a kept row's
    hash (the export before it ended there), and every kept row it reaches must
    carry its hash; one it stops short of means its tail was cut."""
    kept = kept or {}
    first: tuple[int, str] | None = None
    before: tuple[int, str] | None = None
    met: dict[int, str] = {}
    checked = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            seq, canonical = int(row["seq"]), str(row["canonical"])
            prev_hash, row_hash = str(row["prev_hash"]), str(row["row_hash"])
            computed = hashlib.sha256(bytes.fromhex(prev_hash) + canonical.encode()).hexdigest()
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"line {number} is not an export row: {exc}", USAGE) from None
        if before is None:
            first = (seq, prev_hash)
            linked = seq > 1 or prev_hash == ZERO_HASH
        else:
            linked = prev_hash == before[1] and seq == before[0] + 1
        if computed != row_hash or not linked:
            return FileCheck(
                checked,
                first[0] if first else None,
                seq,
                before[1] if before else "",
                f"the chain breaks at row {seq} ({checked} rows before it hold)",
            )
        checked += 1
        before = (seq, row_hash)
        if seq in kept:
            met[seq] = row_hash
    if first is None or before is None:
        return FileCheck(0, None, None, "", "it holds no export rows")
    problem = _ends_problem(first, before[0], kept, met)
    return FileCheck(checked, first[0], before[0], before[1], problem)


def _ends_problem(
    first: tuple[int, str], last_seq: int, kept: dict[int, str], met: dict[int, str]
) -> str | None:
    """Where a chain that holds in itself contradicts the rows kept off the host."""
    start_seq, start_prev = first
    if start_seq > 1 and kept.get(start_seq - 1) != start_prev:
        return (
            f"it starts at row {start_seq} and no row kept off the host proves what came "
            f"before it (a file cut at its head looks the same): give --expect "
            f"{start_seq - 1}:HASH, the last line of the export before it"
        )
    for seq, digest in sorted(kept.items()):
        if seq < start_seq - 1:
            return f"row {seq} kept off the host is before the file's rows: check its own export"
        if seq > last_seq:
            return (
                f"it ends at row {last_seq}, before row {seq} kept off the host: its tail was cut"
            )
        if seq >= start_seq and met[seq] != digest:
            return f"row {seq} carries hash {met[seq]}, not the {digest} kept off the host"
    return None


@app.command("verify")
def verify_cmd(
    expect: Annotated[
        list[str] | None,
        typer.Option(
            "--expect",
            help="SEQ:HASH of a row exported earlier and kept off the host (an export's "
            "last line): that row must still carry that hash. Repeat it for several. With "
            "--file: the file must reach each such row, or start right after it.",
        ),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Check an export file instead, with SHA-256 alone (no database).",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Recompute the audit log's hash chain and say where it first breaks, or which
    row kept off the host it contradicts (exit 1), or that it holds (exit 0)."""
    kept = _expected(expect)
    if file is not None:
        with file.open(encoding="utf-8") as lines:
            check = verify_lines(lines, kept)
        if check.problem is not None:
            out.print(f"[red]{file}: {check.problem}[/red]")
            raise typer.Exit(1)
        out.print(
            f"{file}: rows {check.first_seq} to {check.last_seq}, the chain holds; "
            f"last hash {check.last_hash}"
        )
        if not kept:
            out.print(
                "a file cut at its tail looks the same: compare its last row with the one "
                "kept off the host, or pass that as --expect"
            )
        return
    with connect(network, as_login) as conn:
        results = [procs.verify_audit_chain(seq, digest).one(conn) for seq, digest in kept.items()]
        results = results or [procs.verify_audit_chain(None, None).one(conn)]
    for result in results:
        if not result.ok:
            out.print(
                f"[red]the audit chain breaks at row {result.first_bad_seq}: {result.problem} "
                f"({result.checked} rows checked)[/red]"
            )
            raise typer.Exit(1)
    result = results[-1]
    out.print(
        f"the audit chain holds: {result.checked} rows; head {result.head_seq}:{result.head_hash}"
    )


@app.command("export")
def export_cmd(
    since: Annotated[
        int, typer.Option("--since", min=0, help="Export the rows after this seq (0: all).")
    ] = 0,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write to this file instead of stdout.", dir_okay=False
        ),
    ] = None,
    network: NetworkOption = None,
    as_login: AsOption = None,
) -> None:
    """Write the audit log's rows after --since as JSON lines (seq, the canonical
    text its hash is taken over, prev_hash, row_hash), for storage off the
    database host. Keep the last line's seq and hash apart from the database:
    `qtg audit verify --expect SEQ:HASH` proves the chain was not rewritten."""
    sink = sys.stdout if output is None else output.open("x", encoding="utf-8")
    exported, last = 0, None
    try:
        with connect(network, as_login) as conn:
            after = since
            while True:
                rows = procs.audit_export(after, EXPORT_PAGE).all(conn)
                for row in rows:
                    sink.write(json.dumps({
                        "seq": row.seq, "canonical": row.canonical,
                        "prev_hash": row.prev_hash, "row_hash": row.row_hash,
                    }) + "\n")  # fmt: skip
                    last = row
                exported += len(rows)
                if len(rows) < EXPORT_PAGE:
                    break
                after = rows[-1].seq
    finally:
        if output is not None:
            sink.close()
    where = "" if output is None else f" to {output}"
    tail = f"; keep {last.seq}:{last.row_hash} off the host" if last is not None else ""
    print(f"exported {exported} audit rows after {since}{where}{tail}", file=sys.stderr)
