"""Starting the local chains with every contract of the world deployed: anvil
(qtg_world.chains.local) with Multicall3 at its public address, then the
CCTP, Stargate and CCIP doubles
(qtg_world.chains.cctp, .stargate, .ccip), recorded in the state file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from qtg_runner.chains.errors import ChainError
from qtg_world.chains.ccip import deploy_ccip
from qtg_world.chains.cctp import deploy_cctp
from qtg_world.chains.local import (
    DEFAULT_CHAINS,
    ChainSpec,
    RunningChain,
    deploy_contracts,
    find_anvil,
    is_running,
    mined_at_once,
    place_multicall3,
    read_state,
    start_anvil,
    terminate,
    write_state,
)
from qtg_world.chains.stargate import deploy_stargate

__all__ = ["DEPLOYED", "start_chains"]


DEPLOYED = (
    "Multicall3",
    "MockUSDC",
    "MessageTransmitterV2",
    "TokenMessengerV2",
    "EndpointV2",
    "StargatePool",
    "TokenMessaging",
    "CcipRouter",
    "CcipOnRamp",
    "CcipOffRamp",
)
"""The contracts start_chains deploys on every chain: chains running without
one of them were started by an older build."""


def start_chains(
    state_dir: Path,
    specs: Sequence[ChainSpec] = DEFAULT_CHAINS,
    anvil: Path | None = None,
    kdf_iterations: int | None = None,
) -> list[RunningChain]:
    """Start ``specs`` (unless the state file says they already run: then
    Multicall3 is placed on them if they lack it, and they must have the rest
    of DEPLOYED), place Multicall3 and deploy the
    contracts on each (MockUSDC, then the CCTP double wired across the chains:
    qtg_world.chains.cctp, its attester keys in the keystore beside the state,
    scrypt n ``kdf_iterations`` when new; then the Stargate pools:
    qtg_world.chains.stargate; then the CCIP double, qtg_world.chains.ccip, its
    transmitter key there too) and record them. A chain that fails
    stops every chain this call started, and the state file is left as it was."""
    existing = [c for c in read_state(state_dir) if is_running(c)]
    if existing:
        wanted = {s.key for s in specs}
        if wanted <= {c.key for c in existing}:
            if any("Multicall3" not in c.contracts for c in existing):
                # placed, not deployed: chains of a build before it get it as they run
                for chain in existing:
                    place_multicall3(chain)
                write_state(state_dir, existing)
            stale = sorted({n for c in existing for n in DEPLOYED if n not in c.contracts})
            if stale:
                raise ChainError(
                    f"the chains running from {state_dir} were deployed by an older build "
                    f"(no {', '.join(stale)}): `qtg world down` (or `qtg chains down`), "
                    "then up again"
                )
            return existing
        raise ChainError(
            f"chains already run from {state_dir} ({', '.join(c.key for c in existing)}): "
            "`qtg chains down` first"
        )
    binary = anvil or find_anvil()
    state_dir.mkdir(parents=True, exist_ok=True)
    started: list[RunningChain] = []
    try:
        for spec in specs:
            started.append(start_anvil(binary, spec, state_dir))
        with mined_at_once(started):
            for chain in started:
                place_multicall3(chain)
                deploy_contracts(chain)
            deploy_cctp(state_dir, started, kdf_iterations=kdf_iterations)
            deploy_stargate(started)
            deploy_ccip(state_dir, started, kdf_iterations=kdf_iterations)
    except BaseException:
        for chain in started:
            terminate(chain.pid)
        raise
    write_state(state_dir, started)
    return started
