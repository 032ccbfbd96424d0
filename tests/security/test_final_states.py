"""A finished movement or node stays finished, whoever writes.

The procedures never move a COMPLETED, FAILED or SKIPPED node, nor a finished
movement, out of its state; since 0039 the tables refuse it too, to the owner
(a superuser's session here): a COMPLETED node made READY again would be
dispatched, and its side effect made, a second time. pipeline_counts relies
on it as well (a finished row is counted once, by roll_up_pipeline_counts).
Other updates of a finished row (its quarantine, its updated_at) still pass.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from engine import assert_rejected, node_ids
from rows import movement_in


@pytest.fixture
def done(conn: psycopg.Connection[Any]) -> tuple[int, int]:
    """A one-node movement run to COMPLETED: (movement id, node id)."""
    movement_id = movement_in(conn, "COMPLETED", "done")
    return movement_id, node_ids(conn, movement_id)["a"]


def test_a_completed_node_cannot_be_made_ready_again(
    conn: psycopg.Connection[Any], done: tuple[int, int]
) -> None:
    error = assert_rejected(
        conn,
        "QT021",
        "UPDATE movement_request_nodes SET node_state = 'READY', finished_at = NULL WHERE id = %s",
        (done[1],),
    )
    assert f"node {done[1]} is COMPLETED, a final state: it cannot become READY" in str(error)


def test_a_completed_movement_cannot_be_made_executing_again(
    conn: psycopg.Connection[Any], done: tuple[int, int]
) -> None:
    error = assert_rejected(
        conn,
        "QT020",
        "UPDATE movement_requests SET request_state = 'EXECUTING', finished_at = NULL,"
        " open_nodes = 1 WHERE id = %s",
        (done[0],),
    )
    assert f"movement {done[0]} is COMPLETED, a final state" in str(error)


def test_a_finished_row_may_still_be_touched_in_its_state(
    conn: psycopg.Connection[Any], done: tuple[int, int]
) -> None:
    conn.execute(
        "UPDATE movement_request_nodes SET node_state = 'COMPLETED', updated_at = updated_at"
        " WHERE id = %s",
        (done[1],),
    )
    conn.execute(
        "UPDATE movement_requests SET updated_at = updated_at + interval '1 second' WHERE id = %s",
        (done[0],),
    )
