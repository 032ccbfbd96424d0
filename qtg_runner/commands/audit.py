"""`qtg audit verify|export`: the network's hash-chained audit log.

Every state change writes an audit row in its own transaction; the
audit_outbox_promoter moves them into audit_log, each row chained to the one
before by SHA-256. `verify` recomputes the chain in the database and says
where it first breaks; `export` writes the rows as JSON lines for storage off
the database host, each with the exact text its hash is taken over, so the
copy is checked with SHA-256 alone (`verify --file`), and its last line's
seq and hash, kept off the host, later prove that nobody rewrote the chain
from there (`verify --expect SEQ:HASH`). Both log in as an operator (their
own DSN in QTG_DATABASE_URL, or --as NAME).
"""

from __future__ import annotations

import hashlib
import json
import sys
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


def _expected(expect: str | None) -> tuple[int | None, str | None]:
    if expect is None:
        return None, None
    seq, _, digest = expect.partition(":")
    if not seq.isdigit() or len(digest.removeprefix("0x")) != 64:
        raise CommandError(f"--expect is SEQ:HASH (64 hex digits), got {expect!r}", USAGE)
    return int(seq), digest


def verify_lines(lines: TextIO) -> tuple[int, int | None, str]:
    """Check an export's lines with SHA-256 alone: each row_hash is
    sha256(prev_hash || canonical), each prev_hash the row before's row_hash, the
    seqs consecutive. Returns (rows checked, first bad seq or None, last row_hash)."""
    before_seq: int | None = None
    before_hash: str | None = None
    checked = 0
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            seq, canonical = int(row["seq"]), str(row["canonical"])
            prev_hash, row_hash = str(row["prev_hash"]), str(row["row_hash"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CommandError(f"line {number} is not an export row: {exc}", USAGE) from None
        computed = hashlib.sha256(bytes.fromhex(prev_hash) + canonical.encode()).hexdigest()
        linked = before_hash is None or (prev_hash == before_hash and seq == (before_seq or 0) + 1)
        first = before_hash is not None or seq != 1 or prev_hash == ZERO_HASH
        if computed != row_hash or not linked or not first:
            return checked, seq, before_hash or ""
        checked += 1
        before_seq, before_hash = seq, row_hash
    return checked, None, before_hash or ""


@app.command("verify")
def verify_cmd(
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect",
            help="SEQ:HASH of a row exported earlier and kept off the host (an export's "
            "last line): that row must still carry that hash.",
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
    """Recompute the audit log's hash chain and say where it first breaks (exit 1),
    or that it holds (exit 0)."""
    if file is not None:
        with file.open(encoding="utf-8") as lines:
            checked, bad, head = verify_lines(lines)
        if bad is not None:
            out.print(
                f"[red]{file}: the chain breaks at row {bad} ({checked} rows before it hold)[/red]"
            )
            raise typer.Exit(1)
        out.print(f"{file}: {checked} rows, the chain holds; last hash {head}")
        return
    seq, digest = _expected(expect)
    with connect(network, as_login) as conn:
        result = procs.verify_audit_chain(seq, digest).one(conn)
    if not result.ok:
        out.print(
            f"[red]the audit chain breaks at row {result.first_bad_seq}: {result.problem} "
            f"({result.checked} rows checked)[/red]"
        )
        raise typer.Exit(1)
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
