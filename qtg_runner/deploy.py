"""What a runner checks before it starts: that it runs as a runner login of
its network, and that every executor it carries is registered as it carries
it.

Registering an executor (its key, whether it has a side effect, its node
config schema) is the admin's deploy step, `qtg executors register`. A runner
registers nothing: it reads the registry (registered_executors, a runner
procedure) and refuses to run when an executor it carries is missing or
registered with another has_side_effect (registration_problems), since the
database decides retries and recovery from it. A registered node config schema
other than the build's is allowed and reported (schema_differences): operators
change it through an approved executor-config proposal, e.g. to tighten a
range; the next `qtg executors register` puts the build's schema back.

This module imports no executor: the command line reports a DeployError
without loading the chain and exchange clients.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg

from qtg_runner.config import NetworkMode
from qtg_runner.db import procs
from qtg_runner.db.logins import MEMBER_QUERY, group_role, member_problem
from qtg_runner.db.procs import RegisteredExecutor
from qtg_runner.log import event

if TYPE_CHECKING:
    from qtg_runner.executors.base import Executor


class DeployError(RuntimeError):
    """The runner cannot start as deployed: not a runner login, or an executor it
    carries is not registered as it is. The message names what the admin runs."""


def registration_problems(
    carried: Iterable[type[Executor] | Executor], registered: Iterable[RegisteredExecutor]
) -> list[str]:
    """One phrase per carried executor that is not registered exactly as it is carried."""
    by_key = {row.executor_key: row for row in registered}
    problems: list[str] = []
    for executor in carried:
        row = by_key.get(executor.key)
        if row is None:
            problems.append(f"executor {executor.key} is not registered")
        elif row.has_side_effect != executor.has_side_effect:
            problems.append(
                f"executor {executor.key} is registered with has_side_effect="
                f"{str(row.has_side_effect).lower()}, this runner's has "
                f"{str(executor.has_side_effect).lower()}"
            )
    return problems


def schema_differences(
    carried: Iterable[type[Executor] | Executor], registered: Iterable[RegisteredExecutor]
) -> list[str]:
    """The keys of carried executors registered with another node config schema."""
    by_key = {row.executor_key: row for row in registered}
    return [
        executor.key
        for executor in carried
        if executor.key in by_key
        and by_key[executor.key].node_config_schema != executor.node_config_schema
    ]


async def check_deployment(
    conn: psycopg.AsyncConnection[Any], network: NetworkMode, carried: Sequence[type[Executor]]
) -> None:
    """Refuse (DeployError) to run as anything but a runner login of ``network``, or
    with an executor that is not registered exactly as this runner carries it."""
    cur = await conn.execute(MEMBER_QUERY, [group_role("runner", network)])
    row = await cur.fetchone()
    assert row is not None
    problem = member_problem(row, "runner", network)
    if problem is not None:
        raise DeployError(problem)
    registered = await procs.registered_executors().aall(conn)
    for key in schema_differences(carried, registered):
        event(
            logging.WARNING,
            "executor_schema_differs",
            executor=key,
            network=network,
            detail="the registered node config schema is not this build's (an approved proposal?)",
        )
    problems = registration_problems(carried, registered)
    if problems:
        raise DeployError(
            f"{'; '.join(problems)} on {network}: the admin registers this build's "
            f"executors with `qtg executors register --network {network}`"
        )
