"""The forks a rehearsal runs on: one anvil per chain of the movement,
forked from the chain's own RPC at a pinned block, with the proxy the
executors reach it through (qtg_rehearsal.proxy).

On a fork the treasury's accounts are impersonated (their real balances,
allowances and nonces, no key), blocks come every second, and where the
chain has CCTP the fork's MessageTransmitterV2 is told to trust attesters
made for the rehearsal (its attester manager impersonated, as many new
attesters enabled as its signature threshold asks), so that the local Iris
double can attest the fork's burns. Nothing a fork does reaches the chain
it was forked from.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from eth_utils.crypto import keccak

from qtg_rehearsal.proxy import ForkProxy
from qtg_rehearsal.relay import ReadOnlyRelay
from qtg_runner.chains.evm_rpc import redact_url
from qtg_runner.ports import LOOPBACK, free_port
from qtg_world.chains.cctp import Attester
from qtg_world.chains.local import find_anvil, terminate

START_TIMEOUT_S = 60.0
"""How long a fork may take to answer (it reads the forked block over the network)."""
BLOCK_TIME_S = 1
"""A fork mines a block every second, whatever the chain's own block time."""
PR_SET_PDEATHSIG = 1
GAS_FUNDS_WEI = 10**18
"""What an impersonated attester manager is given to pay its calls' gas."""


class ForkError(Exception):
    """A fork could not be started or prepared; the message says what to do."""


class ForkUnreachable(ForkError):
    """A call that got no JSON-RPC answer (a transport error, a body that is
    not JSON): it may answer when tried again."""


def rpc(url: str, method: str, params: Sequence[Any] = (), timeout: float = 30.0) -> Any:
    """One JSON-RPC call; ForkError on an RPC error, ForkUnreachable on a
    transport error."""
    try:
        body = httpx.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": list(params)},
            timeout=timeout,
        ).json()
    except (httpx.HTTPError, ValueError) as exc:
        raise ForkUnreachable(f"{method} on {redact_url(url)}: {type(exc).__name__}") from None
    if "error" in body:
        message = str(body["error"].get("message"))[:300]
        raise ForkError(f"{method} on {redact_url(url)} answered: {message}")
    return body.get("result")


def selector(signature: str) -> str:
    return "0x" + keccak(text=signature)[:4].hex()


def call_word(url: str, to: str, signature: str) -> int:
    """A view function of no arguments that returns one word (an address or a number)."""
    return int(str(rpc(url, "eth_call", [{"to": to, "data": selector(signature)}, "latest"])), 16)


@dataclass
class Fork:
    """One chain's fork: the anvil, its proxy, and what was done to it."""

    chain_key: str
    chain_id: int
    block: int
    anvil_url: str
    process: subprocess.Popen[bytes]
    proxy: ForkProxy
    log_file: Path
    relay: ReadOnlyRelay
    attesters: list[Attester] = field(default_factory=list)

    @property
    def url(self) -> str:
        """What the executors reach: the proxy."""
        return self.proxy.url

    def stop(self) -> None:
        try:
            self.proxy.stop()
        finally:
            terminate(self.process.pid)
            self.relay.stop()


def head_block(source_url: str) -> int:
    return int(str(rpc(source_url, "eth_blockNumber")), 16)


def _dies_with_parent() -> None:
    """In the child, before exec: SIGTERM when the rehearsal's process dies
    (Linux's PR_SET_PDEATHSIG), so that no fork outlives a killed rehearsal."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_fork(
    chain_key: str,
    chain_id: int,
    source_url: str,
    block: int,
    senders: Mapping[str, str],
    log_dir: Path,
    anvil: Path | None = None,
) -> Fork:
    """anvil forked from ``source_url`` (through a read-only relay: the URL is
    on no command line) at ``block``, answering ``chain_id`` (ForkError when
    the source is another chain), behind a proxy that sends the stand-ins'
    transactions as ``senders`` says. Whatever fails on the way, nothing it
    started is left running."""
    binary = anvil or find_anvil()
    relay = ReadOnlyRelay(source_url)
    process: subprocess.Popen[bytes] | None = None
    try:
        port = free_port()
        log_file = log_dir / f"fork-{chain_key}.log"
        args = [
            str(binary),
            "--host", LOOPBACK,
            "--port", str(port),
            "--fork-url", relay.url,
            "--fork-block-number", str(block),
            "--block-time", str(BLOCK_TIME_S),
            "--no-storage-caching",
        ]  # fmt: skip
        with log_file.open("ab") as log:
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_dies_with_parent,
            )
        url = f"http://{LOOPBACK}:{port}"
        answered = _await_chain_id(process, url, chain_key, log_file)
        if answered != chain_id:
            raise ForkError(
                f"{chain_key}: its RPC serves chain id {answered}, the registry says "
                f"{chain_id}: fix the RPC URL or the registry (`qtg registry check`)"
            )
        for treasury in sorted(set(senders.values())):
            rpc(url, "anvil_impersonateAccount", [treasury])
        proxy = ForkProxy(url, senders)
    except BaseException:
        if process is not None:
            terminate(process.pid)
        relay.stop()
        raise
    return Fork(chain_key, chain_id, block, url, process, proxy, log_file, relay)


def _await_chain_id(
    process: subprocess.Popen[bytes], url: str, chain_key: str, log_file: Path
) -> int:
    """The chain id the fork answers, once it answers (ForkError if it exits
    or stays silent START_TIMEOUT_S)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        if process.poll() is not None:
            tail = " / ".join(log_file.read_text(errors="replace").strip().splitlines()[-3:])
            raise ForkError(f"the fork of {chain_key} exited ({process.returncode}): {tail}")
        with contextlib.suppress(ForkError, ValueError):
            return int(str(rpc(url, "eth_chainId", timeout=2.0)), 16)
        if time.monotonic() > deadline:
            raise ForkError(f"the fork of {chain_key} did not answer in {START_TIMEOUT_S}s")
        time.sleep(0.1)


def send_as(url: str, sender: str, to: str, data: str, gas: int | None = None) -> None:
    """One call sent and mined as ``sender`` (impersonated), or ForkError;
    ``gas`` when given, else anvil's estimate."""
    tx: dict[str, str] = {"from": sender, "to": to, "data": data}
    if gas is not None:
        tx["gas"] = hex(gas)
    tx_hash = rpc(url, "eth_sendTransaction", [tx])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        receipt = rpc(url, "eth_getTransactionReceipt", [tx_hash])
        if receipt is not None:
            if int(str(receipt.get("status", "0x0")), 16) != 1:
                raise ForkError(f"{data[:10]} to {to} as {sender} reverted on the fork")
            return
        time.sleep(0.2)
    raise ForkError(f"{data[:10]} to {to} as {sender} was not mined on the fork in 30 s")


def attester_manager(url: str, transmitter: str) -> str:
    """Who may enable attesters on ``transmitter``: Circle's
    ``attesterManager()``, or the ``owner()`` of a transmitter without one
    (the local world's double)."""
    try:
        word = call_word(url, transmitter, "attesterManager()")
    except ForkError:
        word = call_word(url, transmitter, "owner()")
    return "0x" + f"{word:064x}"[-40:]


def trust_attesters(forks: Sequence[Fork], transmitters: Mapping[str, str]) -> list[Attester]:
    """One set of attesters made for the rehearsal, trusted by the
    MessageTransmitterV2 of every fork in ``forks`` (``transmitters``: chain
    key -> address) through its attester manager (impersonated and given
    gas): as many as the highest signature threshold among them, each
    transmitter's threshold set to that number, so that one attestation
    passes on every chain, as Circle's does."""
    managers: dict[str, str] = {}
    thresholds: dict[str, int] = {}
    for fork in forks:
        transmitter = transmitters[fork.chain_key]
        managers[fork.chain_key] = attester_manager(fork.anvil_url, transmitter)
        thresholds[fork.chain_key] = call_word(fork.anvil_url, transmitter, "signatureThreshold()")
        if not 0 < thresholds[fork.chain_key] <= 16:
            raise ForkError(
                f"{fork.chain_key}: the MessageTransmitterV2 at {transmitter} reports a "
                f"signature threshold of {thresholds[fork.chain_key]}: is the registry's "
                "address the transmitter?"
            )
    count = max(thresholds.values())
    attesters = [Attester(os.urandom(32)) for _ in range(count)]
    for fork in forks:
        url, transmitter, manager = (
            fork.anvil_url,
            transmitters[fork.chain_key],
            managers[fork.chain_key],
        )
        with impersonating(url, manager, GAS_FUNDS_WEI):
            for attester in attesters:
                arg = attester.address[2:].lower().rjust(64, "0")
                send_as(url, manager, transmitter, selector("enableAttester(address)") + arg)
            if thresholds[fork.chain_key] != count:
                arg = f"{count:064x}"
                send_as(url, manager, transmitter, selector("setSignatureThreshold(uint256)") + arg)
        fork.attesters = attesters
    return attesters


@contextlib.contextmanager
def impersonating(url: str, account: str, ether: int | None = None) -> Iterator[None]:
    """``account`` sends unsigned on the fork at ``url`` within the block
    (anvil_impersonateAccount), given ``ether`` wei first when named."""
    rpc(url, "anvil_impersonateAccount", [account])
    try:
        if ether is not None:
            rpc(url, "anvil_setBalance", [account, hex(ether)])
        yield
    finally:
        rpc(url, "anvil_stopImpersonatingAccount", [account])


@contextlib.contextmanager
def running(forks: list[Fork]) -> Iterator[list[Fork]]:
    """``forks`` (filled by the caller inside the block), all stopped after it,
    each whatever stopping another raised."""
    try:
        yield forks
    finally:
        for fork in forks:
            with contextlib.suppress(BaseException):
                fork.stop()


def fork_env(forks: Sequence[Fork], rpc_url_envs: Mapping[str, str]) -> dict[str, str]:
    """Each chain's RPC variable (as the registry names it) set to its fork's proxy."""
    return {rpc_url_envs[f.chain_key]: f.url for f in forks}
