"""Figures read from the audit trail after a scenario: how long claims waited.

A claim is an audit row READY -> SUBMITTING; it ends at the first row that
takes the node out of SUBMITTING. A claim its dispatcher never reported (it
was killed, lost its connection, crashed) ends with recovery's ``recovered``
row: its wait, from claim to recovery, is what a dead claimer costs, bounded
today by the 300 s lease. A claim's batch is every node the same worker
claimed in the same call (same actor, same clock reading).

Times are the database clock's, so they include the seconds the settle
advanced it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql


@dataclass
class Claim:
    node_id: int
    actor: str
    claimed_at: datetime
    ended_at: datetime | None = None
    ended_by: str | None = None

    @property
    def wait(self) -> float | None:
        if self.ended_at is None:
            return None
        return (self.ended_at - self.claimed_at).total_seconds()


@dataclass
class ClaimWaits:
    claims: int = 0
    recovered: list[float] = field(default_factory=list)
    """Waits of the claims recovery had to conclude."""
    poison_batches: list[tuple[int, list[float | None]]] = field(default_factory=list)
    """For each poison node's first claim: the other nodes of its batch's waits."""

    def recovered_text(self) -> str:
        if not self.recovered:
            return "0"
        return (
            f"{len(self.recovered)}, waited {statistics.median(self.recovered):.0f} s median, "
            f"{max(self.recovered):.0f} s max"
        )


def claim_waits(
    conn: psycopg.Connection[Any], network: str, poison_nodes: Collection[int] = ()
) -> ClaimWaits:
    rows = conn.execute(
        sql.SQL(
            """
        SELECT entity_id::bigint, action, from_state, to_state, actor, occurred_at
          FROM {}.audit_outbox
         WHERE entity = 'node' AND (from_state = 'SUBMITTING' OR to_state = 'SUBMITTING')
         ORDER BY entity_id::bigint, id
        """
        ).format(sql.Identifier(network))
    ).fetchall()
    claims: list[Claim] = []
    open_claim: dict[int, Claim] = {}
    for node_id, action, from_state, to_state, actor, at in rows:
        if from_state == "READY" and to_state == "SUBMITTING":
            open_claim[node_id] = Claim(node_id, actor, at)
            claims.append(open_claim[node_id])
        elif from_state == "SUBMITTING" and to_state != "SUBMITTING" and node_id in open_claim:
            claim = open_claim.pop(node_id)
            claim.ended_at, claim.ended_by = at, action
    result = ClaimWaits(claims=len(claims))
    result.recovered = [c.wait for c in claims if c.ended_by == "recovered" and c.wait is not None]
    batches: dict[tuple[str, datetime], list[Claim]] = defaultdict(list)
    for claim in claims:
        batches[(claim.actor, claim.claimed_at)].append(claim)
    for poison in poison_nodes:
        first = next((c for c in claims if c.node_id == poison), None)
        if first is None:
            continue
        others = [c.wait for c in batches[(first.actor, first.claimed_at)] if c.node_id != poison]
        result.poison_batches.append((poison, others))
    return result
