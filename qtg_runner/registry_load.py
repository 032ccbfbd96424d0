"""The address book put into a network's chain registry (`qtg registry load`).

Each entry of the book (networks/<class>.toml: qtg_runner.networks) is one
registry entry, named as a 'registry' proposal names it: venue/KEY,
chain/KEY, token/CHAIN/SYMBOL, protocol/CHAIN/PROTOCOL,
ccip_lane/SOURCE/DEST. For each, in that order (a token needs its chain):

    created    the registry has no such entry: the admin's upsert records it
    unchanged  the registry says what the book says (the fields the book
               states; the fee caps and lane margins are the deployment's own)
    proposed   the registry says something else: the change is proposed
               (propose_registry_change) and applied only when a second
               login, an operator's, approves it; the registry is unchanged
    skipped    the book cannot give the entry: a chain whose finality depth or
               block time no public source gave (unless the admin states it),
               a Stargate pool that moves another token than the chain's
               USDC, and whatever needs a skipped chain

All of it in one transaction: a refusal leaves the registry as it was.
Loading the same book again creates and proposes nothing (the same login's
open proposal of the same change is answered as it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import psycopg

from qtg_runner.db import procs
from qtg_runner.networks import AddressBook, Chain, Protocol

__all__ = ["Entry", "Outcome", "load_registry", "registry_entries"]


@dataclass(frozen=True)
class Entry:
    """One registry entry the book gives: its subject, the values the book
    states (registry_entry_value's fields), and the upsert call that records it new."""

    subject: str
    value: Mapping[str, Any]
    create: procs.Call[Any]


@dataclass(frozen=True)
class Outcome:
    """What the load did with one entry: created, unchanged, proposed or skipped."""

    subject: str
    action: str
    detail: str = ""
    proposal_id: int | None = None


def _lower(contracts: Mapping[str, str]) -> dict[str, str]:
    return {name: address.lower() for name, address in contracts.items()}


def _chain_entries(
    chain: Chain, depth: int, block_ms: int, protocols: Mapping[str, Protocol]
) -> list[Entry]:
    key = chain.chain_key
    entries = [
        Entry(
            f"chain/{key}",
            {
                "chain_id": chain.chain_id,
                "rpc_url_env": chain.rpc_url_env,
                "finality_depth": depth,
                "block_time_ms": block_ms,
            },
            procs.upsert_chain(key, chain.chain_id, chain.rpc_url_env, depth, block_ms),
        )
    ]
    for token in chain.tokens:
        entries.append(
            Entry(
                f"token/{key}/{token.symbol}",
                {"address": token.address.lower(), "decimals": token.decimals},
                procs.upsert_chain_token(key, token.symbol, token.address, token.decimals),
            )
        )
    for name, protocol in protocols.items():
        contracts = _lower(protocol.contracts)
        entries.append(
            Entry(
                f"protocol/{key}/{name}",
                {"remote_id": protocol.remote_id, "contracts": contracts},
                procs.upsert_chain_protocol(key, name, protocol.remote_id, contracts),
            )
        )
    return entries


def registry_entries(
    book: AddressBook,
    finality_depth: Mapping[str, int] | None = None,
    block_time_ms: Mapping[str, int] | None = None,
) -> tuple[list[Entry], list[Outcome]]:
    """The entries ``book`` gives, in the order they are recorded, and the ones
    it cannot give (skipped, with why). ``finality_depth`` and
    ``block_time_ms`` (chain key -> value) state what the book leaves out."""
    depths, blocks = finality_depth or {}, block_time_ms or {}
    unknown = sorted((set(depths) | set(blocks)) - {c.chain_key for c in book.chains})
    if unknown:
        raise ValueError(f"{book.path.name} has no chain {unknown[0]}")
    entries = [
        Entry(
            f"venue/{v.venue_key}",
            {"kind": v.kind, "base_url_env": v.base_url_env, "key_file_env": v.key_file_env},
            procs.upsert_exchange_venue(v.venue_key, v.kind, v.base_url_env, v.key_file_env),
        )
        for v in book.venues
    ]
    skipped: list[Outcome] = []
    loaded: set[str] = set()
    for chain in book.chains:
        key = chain.chain_key
        depth = depths.get(key, chain.finality_depth)
        block_ms = blocks.get(key, chain.block_time_ms)
        if depth is None or block_ms is None:
            missing = "finality depth" if depth is None else "block time"
            flag = "--finality-depth" if depth is None else "--block-time"
            unit = "N" if depth is None else "MS"
            skipped.append(
                Outcome(
                    f"chain/{key}",
                    "skipped",
                    f"the book has no {missing} for it (no public source gave one): "
                    f"state it with {flag} {key}={unit}; its tokens, protocols and lanes wait",
                )
            )
            continue
        loaded.add(key)
        usdc = chain.token("USDC")
        protocols: dict[str, Protocol] = {}
        for name, protocol in chain.protocols.items():
            moves = protocol.pool_token
            if moves is not None and (usdc is None or moves.lower() != usdc.address.lower()):
                skipped.append(
                    Outcome(
                        f"protocol/{key}/{name}",
                        "skipped",
                        f"its pool moves {moves}, not the chain's USDC: "
                        "the engine's USDC cannot travel through it",
                    )
                )
            else:
                protocols[name] = protocol
        entries += _chain_entries(chain, depth, block_ms, protocols)
    for lane in book.ccip_lanes:
        subject = f"ccip_lane/{lane.source_chain_key}/{lane.dest_chain_key}"
        if not {lane.source_chain_key, lane.dest_chain_key} <= loaded:
            skipped.append(Outcome(subject, "skipped", "one of its chains is skipped"))
            continue
        entries.append(
            Entry(
                subject,
                {
                    "version": lane.version,
                    "onramp": lane.onramp.lower(),
                    "offramp": lane.offramp.lower(),
                    "token_data": lane.token_data,
                },
                procs.upsert_ccip_lane(
                    lane.source_chain_key,
                    lane.dest_chain_key,
                    lane.version,
                    token_data=lane.token_data,
                    onramp=lane.onramp,
                    offramp=lane.offramp,
                ),
            )
        )
    return entries, skipped


def _changes(now: Mapping[str, Any], wanted: Mapping[str, Any]) -> dict[str, Any]:
    return {field: value for field, value in wanted.items() if now.get(field) != value}


def load_registry(conn: psycopg.Connection[Any], entries: list[Entry]) -> list[Outcome]:
    """Record ``entries`` on ``conn`` (the admin's, bound to the network), in one
    transaction: each created, left unchanged, or its change proposed."""
    outcomes: list[Outcome] = []
    with conn.transaction():
        for entry in entries:
            row = conn.execute("SELECT registry_entry_value(%s)", [entry.subject]).fetchone()
            now = row[0] if row else None
            if now is None:
                entry.create.one(conn)
                outcomes.append(Outcome(entry.subject, "created"))
                continue
            change = _changes(now, entry.value)
            if not change:
                outcomes.append(Outcome(entry.subject, "unchanged"))
                continue
            proposal = procs.propose_registry_change(entry.subject, change).one(conn)
            shown = ", ".join(f"{k} {now.get(k)} -> {v}" for k, v in sorted(change.items()))
            outcomes.append(
                Outcome(entry.subject, "proposed", shown, proposal_id=proposal.proposal_id)
            )
    return outcomes
