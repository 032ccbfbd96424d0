"""What the CLI prints of stored texts: a runner's last_error, an external
reference, any cell. A character a terminal does not print as itself (an
escape that clears the screen or hides a line, a bidirectional override) is
shown as its escape, never obeyed; the characters are SQL's unprintable()'s,
one rule on both sides."""

from __future__ import annotations

from rows import Conn

from qtg_runner.commands.tables import UNPRINTABLE, cell, printable

CODE_POINTS = [c for c in range(1, 0x3000) if not 0xD800 <= c < 0xE000] + [0xFEFF, 0xFFFD]


def test_the_cli_escapes_exactly_what_sql_refuses(conn: Conn) -> None:
    text = "".join(map(chr, CODE_POINTS))
    row = conn.execute(
        "SELECT array_agg(ord ORDER BY ord) FROM unnest(string_to_array(%s, NULL))"
        " WITH ORDINALITY AS c(ch, ord) WHERE unprintable(ch)",
        (text,),
    ).fetchone()
    assert row is not None
    in_sql = {CODE_POINTS[i - 1] for i in row[0]}
    in_cli = {c for c in CODE_POINTS if UNPRINTABLE.fullmatch(chr(c))}
    assert in_cli == in_sql
    assert {0x1B, 0x0A, 0x9B, 0x202E, 0x2066, 0x061C, 0x2028, 0xFEFF} <= in_sql


def test_a_stored_text_is_shown_and_never_obeyed() -> None:
    error = "reverted\x1b[2J\x1b[1;1Hnonce 7 settled\r\u202edlof"
    shown = cell(error)
    assert "\x1b" not in shown and "\r" not in shown and "\u202e" not in shown
    assert shown == "reverted\\x1b[2J\\x1b[1;1Hnonce 7 settled\\r\\u202edlof"
    assert cell(["0xab\x07", "ok"]) == "0xab\\x07,ok"
    assert printable("plain, 0xAbC: 100 USDC") == "plain, 0xAbC: 100 USDC"
