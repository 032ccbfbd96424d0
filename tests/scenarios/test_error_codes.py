"""One error contract: every refusal the SQL can produce carries a QT SQLSTATE
that the error table (qtg_runner/errors.py, from which docs/reference/errors.md
is generated) documents.

Read from the source, so that a new RAISE cannot escape the table: every
RAISE EXCEPTION names an ERRCODE, every ERRCODE it names is a QT code (or,
in raise_node_error alone, the code a batch call's row already carries), every
QT code the SQL mentions (a RAISE, or a batch call's per-row refusal) is a
row of the table, and every row of the table is a code the SQL raises.
"""

from __future__ import annotations

import re
from pathlib import Path

from qtg_runner.db.migrate import sql_dir
from qtg_runner.errors import QT_ERRORS

QT_CODE = re.compile(r"'(QT[0-9A-Z]{3})'")


def sql_files() -> list[Path]:
    return sorted(sql_dir().rglob("*.sql"))


def raise_statements(text: str) -> list[str]:
    """Each RAISE EXCEPTION / WARNING statement, up to the semicolon that ends it
    (one outside a quoted string; comments dropped)."""
    body = re.sub(r"--[^\n]*", "", text)
    statements = []
    for start in re.finditer(r"RAISE\s+(EXCEPTION|WARNING)\b", body):
        quoted, at = False, start.start()
        while at < len(body) and (quoted or body[at] != ";"):
            quoted ^= body[at] == "'"
            at += 1
        statements.append(body[start.start() : at + 1])
    return statements


def documented_codes() -> set[str]:
    """The codes of the error table."""
    return set(QT_ERRORS)


def test_every_raise_names_a_qt_errcode() -> None:
    missing, not_qt = [], []
    for path in sql_files():
        for statement in raise_statements(path.read_text()):
            where = f"{path.relative_to(sql_dir())}: {' '.join(statement.split())[:90]}"
            if statement.startswith("RAISE WARNING") and "ERRCODE" not in statement:
                continue  # a notice, not a refusal (none so far)
            errcode = re.search(r"ERRCODE\s*=\s*('[^']*'|\w+)", statement)
            if errcode is None:
                missing.append(where)
            elif errcode.group(1).startswith("'"):
                if not QT_CODE.fullmatch(errcode.group(1)):
                    not_qt.append(where)
            elif path.name != "raise_node_error.sql":  # raises the code a batch row carries
                not_qt.append(where)
    assert missing == [], "RAISE without an ERRCODE (it would be P0001):\n" + "\n".join(missing)
    assert not_qt == [], "RAISE with a code that is not a QT literal:\n" + "\n".join(not_qt)


def test_every_qt_code_in_the_sql_is_documented_and_every_documented_code_is_used() -> None:
    used: dict[str, list[str]] = {}
    for path in sql_files():
        for code in QT_CODE.findall(re.sub(r"--[^\n]*", "", path.read_text())):
            used.setdefault(code, []).append(str(path.relative_to(sql_dir())))
    documented = documented_codes()
    assert documented, "the error table (qtg_runner/errors.py) is empty"
    undocumented = {code: files for code, files in used.items() if code not in documented}
    assert undocumented == {}, (
        f"QT codes the SQL raises but qtg_runner/errors.py lacks: {undocumented}"
    )
    assert documented - set(used) == set(), "codes qtg_runner/errors.py documents but no SQL raises"


def test_each_row_of_the_table_is_a_code_with_a_meaning_and_a_status() -> None:
    """Keyed by its own code, in code order, each with a meaning, a title and
    an HTTP status (an error status: 4xx for a caller's refusal, 500 for one no
    caller can cause)."""
    assert list(QT_ERRORS) == sorted(QT_ERRORS)
    for code, error in QT_ERRORS.items():
        assert error.code == code and re.fullmatch(r"QT[0-9A-Z]{3}", code), code
        assert error.meaning.strip() and error.title.strip(), code
        assert 400 <= error.status < 500 or error.status == 500, code
    assert {"QT001", "QT005", "QT010", "QT011", "QT012", "QT013", "QT022", "QT099"} <= set(
        QT_ERRORS
    )
