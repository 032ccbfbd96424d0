"""The executors this build ships, and their registration.

Registering an executor (its key, whether it has a side effect, its node config
schema) is the admin's deploy step: `qtg executors register` calls the
admin-only register_executor for each of SHIPPED. How a runner checks the
registry at start is qtg_runner.deploy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from qtg_runner.db import procs
from qtg_runner.deploy import registration_problems, schema_differences
from qtg_runner.executors.base import Executor
from qtg_runner.executors.bybit_deposit import BybitDepositExecutor
from qtg_runner.executors.bybit_withdraw import BybitWithdrawExecutor
from qtg_runner.executors.ccip import CcipExecutor
from qtg_runner.executors.cctp_burn import CctpBurnExecutor
from qtg_runner.executors.cctp_mint import CctpMintExecutor
from qtg_runner.executors.evm_transfer import EvmTransferExecutor
from qtg_runner.executors.sim import SimExecutor
from qtg_runner.executors.stargate import StargateExecutor
from qtg_runner.signers import Signer

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


def build(
    pool: AsyncConnectionPool[Any],
    network: str,
    env: Mapping[str, str] | None = None,
    signers: Mapping[str, Signer] | None = None,
) -> dict[str, Executor]:
    """One instance of each shipped executor, by key, for a runner of ``network``:
    its settings from ``env`` (the process environment by default); the EVM
    executors sign with ``signers`` where given (by signer id), else with the
    signers the registry's ids load."""
    return {
        SimExecutor.key: SimExecutor(pool, network, env),
        EvmTransferExecutor.key: EvmTransferExecutor(pool, network, env, signers=signers),
        BybitWithdrawExecutor.key: BybitWithdrawExecutor(pool, network, env),
        BybitDepositExecutor.key: BybitDepositExecutor(pool, network, env),
        CctpBurnExecutor.key: CctpBurnExecutor(pool, network, env, signers=signers),
        CctpMintExecutor.key: CctpMintExecutor(pool, network, env, signers=signers),
        StargateExecutor.key: StargateExecutor(pool, network, env, signers=signers),
        CcipExecutor.key: CcipExecutor(pool, network, env, signers=signers),
    }


def registration(executor: type[Executor]) -> procs.Call[None]:
    """register_executor of ``executor`` as this build carries it (the admin's)."""
    return procs.register_executor(
        executor.key, executor.has_side_effect, executor.node_config_schema, executor.description
    )


def register_shipped(admin_dsn: str, network: str) -> list[str]:
    """Register every shipped executor in ``network``, in one transaction, as the
    admin; one word per executor, in SHIPPED's order: registered, updated or
    unchanged."""
    conninfo = make_conninfo(admin_dsn, options=f"-c search_path={network},qtg")
    results: list[str] = []
    with psycopg.connect(conninfo) as conn:
        before = {row.executor_key: row for row in procs.registered_executors().all(conn)}
        for executor in SHIPPED:
            registration(executor).one(conn)
            if executor.key not in before:
                results.append("registered")
            elif registration_problems([executor], [before[executor.key]]) or schema_differences(
                [executor], [before[executor.key]]
            ):
                results.append("updated")
            else:
                results.append("unchanged")
    return results
