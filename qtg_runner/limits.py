"""The bounds a runner's reports are held to, and cutting a report to them.

The procedures refuse a document (evidence) or a text (an error) beyond the
network's engine_limits with QT005, and a refused report changes nothing: an
executor that answers with 100 KiB of evidence would be refused at every
round. So a runner cuts what it reports, to the bounds the report_limits view
shows (read once at start; the defaults are engine_limits' own):

  text(s)        at most max_text_bytes of UTF-8, ending with a note of what was
                 cut;
  document(d)    a JSON object with plain JSON values (a Decimal, a datetime or
                 bytes become text, NaN and Infinity become text, since jsonb
                 has no such numbers); when its text is beyond three quarters of
                 max_json_bytes (the margin covers PostgreSQL's own rendering of
                 it), it is replaced by {"cut": true, "bytes": n, "head": the
                 first part of its text}.

What is never cut: an external reference or a prepared payload. Those are the
side effect itself; a runner does not alter them, and the engine refuses them
(the node is then quarantined).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import psycopg

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class ReportLimits:
    max_json_bytes: int = 65536
    max_text_bytes: int = 4096

    def text(self, value: str) -> str:
        """``value`` within max_text_bytes of UTF-8."""
        data = value.encode("utf-8")
        if len(data) <= self.max_text_bytes:
            return value
        note = f" [cut: {len(data)} bytes]"
        keep = max(self.max_text_bytes - len(note.encode("utf-8")), 0)
        return data[:keep].decode("utf-8", errors="ignore") + note

    def document(self, value: JsonObject) -> JsonObject:
        """``value`` as plain JSON, within max_json_bytes."""
        plain = _plain(value)
        if not isinstance(plain, dict):
            plain = {"value": plain}
        rendered = json.dumps(plain, ensure_ascii=False, separators=(", ", ": "))
        size = len(rendered.encode("utf-8"))
        if size <= self.max_json_bytes * 3 // 4:
            return plain
        head = rendered.encode("utf-8")[: self.max_json_bytes // 2]
        return {"cut": True, "bytes": size, "head": head.decode("utf-8", errors="ignore")}


def _plain(value: Any) -> Any:
    """``value`` with only what JSON (and jsonb) can hold."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


async def read_report_limits(conn: psycopg.AsyncConnection[Any]) -> ReportLimits:
    """The network's bounds (the report_limits view)."""
    row = await (
        await conn.execute("SELECT max_json_bytes, max_text_bytes FROM report_limits")
    ).fetchone()
    if row is None:
        return ReportLimits()
    return ReportLimits(int(row[0]), int(row[1]))
