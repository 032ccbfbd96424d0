"""The exchange in a rehearsal: the local Bybit double, wired to the forks.

A rehearsal never calls an exchange. Where the plan has an exchange step,
the venue the registry names is served by the local Bybit double
(qtg_world.bybit) for the rehearsal alone: the registry's environment
variables for the venue's URL and API key file point at it, with a key made
for the rehearsal; its chains are the forks, under the venue's own names
for them, read through the forks' proxies (so that a deposit is seen under
the hash the engine recorded for it); its deposit addresses are the
registry's. Its hot wallet is a key
made for the rehearsal, given gas and as much USDC as the plan withdraws,
minted on each fork by the token's master minter (impersonated). Its account
is credited with what the plan withdraws and its address book holds every
address of the plan: the real account's balance and address book are not
read, and the summary says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from qtg_rehearsal.forks import GAS_FUNDS_WEI, Fork, ForkError, call_word, rpc, selector, send_as
from qtg_runner.signers.local import LocalSigner
from qtg_world import bybit

EXCHANGE_PREFIX = "bybit_"
"""The executors that call an exchange."""
WITHDRAW = "bybit_withdraw"
COIN = "USDC"
USDC_DECIMALS = 6
TIME_SCALE = 0.01
"""The double's walk on the rehearsal's clock: a minute of it is 0.6 s."""
CONFIRMATIONS = 2
"""The double's confirmations for a deposit and a withdrawal on a fork."""


@dataclass
class Venues:
    """The doubles serving a rehearsal's venues, the environment that points
    the throwaway engine at them, and what the summary says of them."""

    env: dict[str, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    handles: list[bybit.BybitHandle] = field(default_factory=list)

    def troubles(self) -> list[str]:
        """What the doubles' back offices could not do (a fork they could not
        read or send to), one line each."""
        return [
            f"the Bybit double at {where}: {error}"
            for handle in self.handles
            for where, error in dict(handle.status()["errors"]).items()
        ]


def plan_venues(plan: Mapping[str, Any]) -> list[str]:
    """The venues the plan's exchange steps name, in the plan's order."""
    found: list[str] = []
    for node in plan.get("nodes", []):
        venue = dict(node.get("config") or {}).get("venue")
        exchange = str(node.get("executor", "")).startswith(EXCHANGE_PREFIX)
        if exchange and isinstance(venue, str) and venue not in found:
            found.append(venue)
    return found


def withdrawn(plan: Mapping[str, Any], venue: str, amount: Decimal) -> Decimal:
    """What the plan's withdrawals from ``venue`` take: the movement's amount each."""
    steps = [
        n
        for n in plan.get("nodes", [])
        if n.get("executor") == WITHDRAW and dict(n.get("config") or {}).get("venue") == venue
    ]
    return amount * len(steps)


def minter_of(url: str, token: str) -> str:
    """Who may configure the token's minters: FiatToken's ``masterMinter()``,
    or the ``owner()`` of a token without one (the local world's MockUSDC)."""
    try:
        word = call_word(url, token, "masterMinter()")
    except ForkError:
        word = call_word(url, token, "owner()")
    return "0x" + f"{word:064x}"[-40:]


def mint_on_fork(fork: Fork, token: str, holder: str, units: int) -> None:
    """``units`` of ``token`` made for ``holder`` on the fork: the master
    minter (impersonated) allows ``holder`` to mint them, and ``holder``
    (impersonated) mints them to itself."""
    url = fork.anvil_url
    minter = minter_of(url, token)
    for account in (minter, holder):
        rpc(url, "anvil_impersonateAccount", [account])
        rpc(url, "anvil_setBalance", [account, hex(GAS_FUNDS_WEI)])
    try:
        word = holder[2:].lower().rjust(64, "0")
        amount = f"{units:064x}"
        send_as(url, minter, token, selector("configureMinter(address,uint256)") + word + amount)
        send_as(url, holder, token, selector("mint(address,uint256)") + word + amount)
    finally:
        for account in (minter, holder):
            rpc(url, "anvil_stopImpersonatingAccount", [account])


def _write_key_file(directory: Path, key: str, secret: str) -> Path:
    path = directory / f"venue-key-{secrets.token_hex(4)}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"api_key": key, "api_secret": secret}, f)
    return path


def _rows(registry: Mapping[str, Any], table: str, **match: str) -> list[Mapping[str, Any]]:
    return [
        row
        for row in registry.get(table, [])
        if all(str(row.get(k)) == v for k, v in match.items())
    ]


@contextlib.contextmanager
def serving(
    plan: Mapping[str, Any],
    registry: Mapping[str, Any],
    forks: Mapping[str, Fork],
    amount: Decimal,
    addresses: Sequence[str],
    key_dir: Path,
) -> Iterator[Venues]:
    """The plan's venues served by the Bybit double on ``forks`` for the
    block's length, then stopped. ``addresses``: the plan's, put on each
    double's address book; ``key_dir``: where the rehearsal's API key files
    go (a directory of the rehearsal's own, removed with it)."""
    venues = Venues()
    try:
        for venue_key in plan_venues(plan):
            _serve_one(venues, venue_key, plan, registry, forks, amount, addresses, key_dir)
        yield venues
    finally:
        for handle in venues.handles:
            with contextlib.suppress(Exception):
                handle.stop()


def _serve_one(
    venues: Venues,
    venue_key: str,
    plan: Mapping[str, Any],
    registry: Mapping[str, Any],
    forks: Mapping[str, Fork],
    amount: Decimal,
    addresses: Sequence[str],
    key_dir: Path,
) -> None:
    found = _rows(registry, "exchange_venues", venue_key=venue_key)
    if not found:
        return  # the engine refuses the step; the summary shows its refusal
    venue = found[0]
    if venue.get("kind") != "bybit":
        raise ForkError(f"venue {venue_key} is of kind {venue.get('kind')}: no double for it")
    to_withdraw = withdrawn(plan, venue_key, amount)
    hot = LocalSigner(f"rehearsal:{venue_key}-hot", os.urandom(32))
    chains = []
    for row in _rows(registry, "venue_chains", venue_key=venue_key):
        chain_key = str(row["chain_key"])
        fork = forks.get(chain_key)
        tokens = _rows(registry, "chain_tokens", chain_key=chain_key, symbol=COIN)
        deposit = _rows(registry, "venue_deposit_addresses", venue_key=venue_key,
                        chain_key=chain_key, coin=COIN)  # fmt: skip
        if fork is None or not tokens or not deposit:
            continue
        token = str(tokens[0]["address"])
        if to_withdraw:
            mint_on_fork(fork, token, hot.address, int(to_withdraw.scaleb(USDC_DECIMALS)))
        chains.append(
            bybit.BybitChain(
                name=str(row["venue_chain"]),
                chain_id=fork.chain_id,
                rpc_url=fork.url,  # the proxy: hashes as the engine recorded them
                usdc=token,
                deposit_address=str(deposit[0]["address"]),
                deposit_confirmations=CONFIRMATIONS,
                withdraw_confirmations=CONFIRMATIONS,
            )
        )
    key, secret = "rehearsal" + secrets.token_hex(8), secrets.token_hex(24)
    handle = bybit.serve(chains, {key: secret}, hot, bybit.BybitConfig(time_scale=TIME_SCALE))
    venues.handles.append(handle)
    for address in addresses:
        handle.whitelist(address)
    if to_withdraw:
        handle.credit(to_withdraw, COIN)
    venues.env[str(venue["base_url_env"])] = handle.url
    venues.env[str(venue["key_file_env"])] = str(_write_key_file(key_dir, key, secret))
    venues.lines.append(
        f"exchange {venue_key}: the local Bybit double on the forks "
        f"({', '.join(c.name for c in chains) or 'no chain of the plan'}), no exchange called; "
        f"its account credited {to_withdraw:f} {COIN} and every address of the plan on its "
        "address book (the real account's balance and address book are not read)"
    )
