"""The executors this build ships, and how their registration is checked.

Registering an executor (its key, whether it has a side effect, its node config
schema) is the admin's deploy step: `qtg executors register` calls the
admin-only register_executor for each of SHIPPED. A runner does not register
anything: at start it reads the registry (registered_executors, a runner
procedure) and refuses to run when an executor it carries is missing or
registered with another has_side_effect (registration_problems), since the
database decides retries and recovery from it. A registered node config schema
other than the build's is allowed and reported (schema_differences): operators
change it through an approved executor-config proposal, e.g. to tighten a
range; the next `qtg executors register` puts the build's schema back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from qtg_runner.db import procs
from qtg_runner.db.procs import RegisteredExecutor
from qtg_runner.executors.base import Executor
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.executors.stargate import StargateExecutor

SHIPPED: tuple[type[Executor], ...] = (
    SimExecutor,
    EvmTransferExecutor,
    BybitWithdrawExecutor,
    BybitDepositExecutor,
    CctpBurnExecutor,
    CctpMintExecutor,
    StargateExecutor,
    CcipExecutor,
)
"""Every executor a runner of this build carries."""


def build(pool: AsyncConnectionPool[Any], network: str) -> dict[str, Executor]:
    """One instance of each shipped executor, by key, for a runner of ``network``."""
    return {
        SimExecutor.key: SimExecutor(pool, network),
        EvmTransferExecutor.key: EvmTransferExecutor(pool, network),
        BybitWithdrawExecutor.key: BybitWithdrawExecutor(pool, network),
        BybitDepositExecutor.key: BybitDepositExecutor(pool, network),
        CctpBurnExecutor.key: CctpBurnExecutor(pool, network),
        CctpMintExecutor.key: CctpMintExecutor(pool, network),
        StargateExecutor.key: StargateExecutor(pool, network),
        CcipExecutor.key: CcipExecutor(pool, network),
    }


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


def register_shipped(admin_dsn: str, network: str) -> list[str]:
    """Register every shipped executor in ``network``, in one transaction, as the
    admin; one word per executor, in SHIPPED's order: registered, updated or
    unchanged."""
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    results: list[str] = []
    with psycopg.connect(conninfo) as conn:
        before = {row.executor_key: row for row in procs.registered_executors().all(conn)}
        for executor in SHIPPED:
            procs.register_executor(
                executor.key,
                executor.has_side_effect,
                executor.node_config_schema,
                executor.description,
            ).one(conn)
            if executor.key not in before:
                results.append("registered")
            elif registration_problems([executor], [before[executor.key]]) or schema_differences(
                [executor], [before[executor.key]]
            ):
                results.append("updated")
            else:
                results.append("unchanged")
    return results
