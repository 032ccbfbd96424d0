"""What the rehearsal tests share: the environment a rehearsing operator's
shell has, the real chains' state the rehearsal must not move, and a
rehearsal run as alice (qtg_rehearsal.rehearse.run)."""

from __future__ import annotations

from typing import Any

from chain_support import LocalChainSet
from engine import as_person
from evm_support import usdc_balance

from qtg_rehearsal.rehearse import Summary, run
from qtg_runner.db import procs
from qtg_world.chains.local import rpc, rpc_url_env

NETWORK = "testnet"
UNITS = 10**6


def rpc_only_env(chain_set: LocalChainSet) -> dict[str, str]:
    """What a rehearsing operator's shell has: the chains' RPC URLs, nothing else."""
    return {rpc_url_env(c.key): c.rpc_url for c in chain_set.chains}


def real_state(chain_set: LocalChainSet) -> dict[str, int]:
    state = {}
    for chain in chain_set.chains:
        for key in chain_set.treasury:
            address = key.address.lower()
            state[f"{chain.key} {address} usdc"] = usdc_balance(chain, address)
            state[f"{chain.key} {address} nonce"] = int(
                rpc(chain.rpc_url, "eth_getTransactionCount", [address, "latest"]), 16
            )
    return state


def rehearse_as_alice(conn: Any, movement_id: int, env: dict[str, str], **options: Any) -> Summary:
    with as_person(conn, "alice"):
        data = procs.rehearsal_input(movement_id).one(conn)
    return run(data, env, NETWORK, say=lambda line: None, **options)
