"""Structured logs: one event per line, ``event=... key=value ...``.

Every runner log line names its network and worker, and the movement and node
when it is about one. No line carries a claim's secret: a field whose name
says ``secret`` is left out whatever its value, and the rows and calls that
hold one (procs.ClaimedNode and the other claims, procs.Call, NodeWork) leave
it out of their repr.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Protocol

logger = logging.getLogger("qtg")


def _format_value(value: Any) -> str:
    text = str(value)
    if text == "" or any(c.isspace() for c in text) or '"' in text or "=" in text:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def _loggable(key: str, value: Any) -> bool:
    return value is not None and "secret" not in key.lower()


def event(level: int, name: str, /, **fields: Any) -> None:
    """Log one event as ``event=<name> k=v ...`` (None values, and any field
    named like a secret, are left out)."""
    if not logger.isEnabledFor(level):
        return
    parts = [f"event={name}"]
    parts.extend(f"{k}={_format_value(v)}" for k, v in fields.items() if _loggable(k, v))
    logger.log(
        level, " ".join(parts), exc_info=level >= logging.ERROR and fields.get("exc") is not None
    )


class NodeRef(Protocol):
    """What a log line about one node names (executors.base.NodeWork has it)."""

    @property
    def network(self) -> str: ...
    @property
    def request_id(self) -> int: ...
    @property
    def node_id(self) -> int: ...
    @property
    def executor_key(self) -> str: ...


def node_event(level: int, name: str, worker: str, work: NodeRef, /, **fields: Any) -> None:
    """``event`` about one node: its network, the worker, its movement, the node
    and its executor, then ``fields``."""
    event(
        level,
        name,
        network=work.network,
        worker=worker,
        movement=work.request_id,
        node=work.node_id,
        executor=work.executor_key,
        **fields,
    )


def missing_executor(worker: str, work: NodeRef) -> str:
    """Logs that this runner does not carry the node's executor; returns the
    error its worker reports to the database."""
    node_event(logging.ERROR, "executor_missing", worker, work)
    return f"no executor {work.executor_key!r} in this runner"


def configure(level: int | None = None) -> None:
    """Log the ``qtg`` loggers' events from ``level`` on to stderr: by default
    INFO, or DEBUG under `qtg -v` (its root logger's level)."""
    if level is None:
        level = logging.DEBUG if logging.getLogger().isEnabledFor(logging.DEBUG) else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("qtg")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
