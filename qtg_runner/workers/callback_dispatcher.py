"""callback_dispatcher (sidecar, the seed's name): delivers the callback_outbox.

Each round claims due callbacks (claim_callbacks: SKIP LOCKED, a lease; a row
whose url is not a registered target is REFUSED there and never reaches this
module) and POSTs each one's payload to its target, signed per the Standard
Webhooks convention with the `standardwebhooks` package:

    webhook-id         the row's idempotency key (a repeat carries the same id)
    webhook-timestamp  the time of this POST, in seconds
    webhook-signature  v1,base64(HMAC-SHA256(secret, "id.timestamp.body"))

then reports it (complete_callback): 2xx is SENT; any other status, a
timeout, no connection, a refused address is a failure the database retries
with backoff and jitter and dead-letters after its attempts or its age.

The target's secret is not in the database: its `secret_ref` says where this
runner finds it, `env:NAME` (a variable of its environment) or `file:NAME`
(a file in QTG_CALLBACK_SECRETS_DIR, refused unless 0600 or stricter).

Before connecting, the target's host is resolved now (not only read from the
url: a name may resolve elsewhere since it was registered) and every address
it resolves to is checked: link-local (169.254/16, fe80::/10), cloud metadata
addresses, multicast, unspecified and reserved ones are always refused;
loopback, private and other non-global ones unless the target is
`allow_private`. The POST then goes to the address that was checked (the url's
host in the Host header and TLS SNI), so a second lookup cannot swap it.
Redirects are not followed, proxies from the environment are not used, the
response is read to at most 64 KiB, and every step has a timeout (a POST
and its answer DELIVERY_DEADLINE_S in all).

A receiver that takes the connection and says nothing would hold a delivery
slot for the timeout on each of its callbacks, and the round (and the other
receivers' callbacks) with it: its first silence opens its circuit
(qtg_runner.circuit), and its callbacks then fail at once, unsent, as a
failed attempt the database retries with its backoff; once the cool-down has
passed one delivery goes out as the probe.

After each tick it calls prune_callbacks once, whose rule is in SQL: the SENT
and NO_TARGET rows done with more than the network's keep_days ago go; a row
still to deliver or an operator's to replay stays.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
import re
import socket
import stat
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from standardwebhooks.webhooks import Webhook

from qtg_runner.circuit import endpoint_circuit
from qtg_runner.db import procs
from qtg_runner.loop import WorkerContext
from qtg_runner.tls import client_ssl_context

WORKER = "callback_dispatcher"
BATCH_SIZE = 20
PRUNE_SIZE = 1000
"""Callbacks prune_callbacks deletes at most a tick (a second's: a backlog past
the keep, as when it is first shortened, goes over the next ticks)."""
MAX_RESPONSE_BYTES = 64 * 1024
"""The most of a receiver's answer that is read (the rest is dropped)."""
TIMEOUT = httpx.Timeout(10.0, connect=5.0)
DELIVERY_DEADLINE_S = 30.0
"""The longest one POST may take, its answer read included: httpx's timeout
bounds each read, and a receiver that drips its answer a byte at a time
would otherwise hold a delivery slot, and the round, for as long as it likes."""
RESOLVE_TIMEOUT = 5.0
LEASE_NEEDED_S = RESOLVE_TIMEOUT + DELIVERY_DEADLINE_S
"""What is left of a claim's lease for its POST to start: the most a delivery
takes. Later (the round's slots held by slow receivers), it is not sent but
tried again after its backoff: started, it could still be under way when the
lease ran out and another dispatcher claimed and sent it again."""
SECRETS_DIR_ENV = "QTG_CALLBACK_SECRETS_DIR"

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean...
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
        "fd00:ec2::254",  # AWS over IPv6
    )
)

NOT_ALLOWED = " and the target is not allow_private"

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


class CallbackRefused(Exception):
    """The target may not be connected to (an address refused, a secret missing):
    the callback is reported failed, with this message, and nothing was sent."""


@dataclass(frozen=True)
class Attempt:
    """What one POST came to: the status (None without a response) and why not 2xx."""

    status: int | None
    error: str | None


CARRYING_NETWORKS = (
    (ipaddress.ip_network("2002::/16"), "6to4"),
    (ipaddress.ip_network("2001::/32"), "Teredo"),
    (ipaddress.ip_network("64:ff9b::/96"), "NAT64"),
    (ipaddress.ip_network("64:ff9b:1::/48"), "NAT64"),
    (ipaddress.ip_network("::ffff:0:0:0/96"), "IPv4-translated"),
    (ipaddress.ip_network("::/96"), "IPv4-compatible"),
)
"""IPv6 ranges whose addresses carry an IPv4 address that a stack, a gateway or
a relay takes them to (2002:a9fe:a9fe:: is 169.254.169.254 over 6to4) while
they read as global IPv6: refused, as check_callback_target refuses them in
a url (host_address_problem). IPv4-mapped ones are read as the IPv4 address."""


def carried_ipv4(address: ipaddress.IPv6Address) -> str | None:
    """The convention by which ``address`` carries an IPv4 address, or None."""
    if address in (ipaddress.IPv6Address("::"), ipaddress.IPv6Address("::1")):
        return None
    for network, how in CARRYING_NETWORKS:
        if address in network:
            return how
    if (int(address) >> 32) & 0xFDFF_FFFF == 0x0000_5EFE:  # interface id 0:5efe or 200:5efe
        return "ISATAP"
    return None


NOT_GLOBAL = tuple(ipaddress.ip_network(net) for net in ("192.0.0.0/24", "fec0::/10", "3fff::/20"))
"""Networks some Python versions call global (3.11: IETF protocol assignments,
IPv6 site-local, the IPv6 documentation prefix of 2024) that
host_address_problem holds private, as the dispatcher does."""


def address_problem(address: Address, allow_private: bool) -> str | None:
    """Why a callback may not connect to ``address``, or None when it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if isinstance(address, ipaddress.IPv6Address):
        how = carried_ipv4(address)
        if how is not None:
            return f"{address} carries an IPv4 address ({how}): a target names that address itself"
    if address in METADATA_ADDRESSES:
        return f"{address} is a cloud metadata address"
    if address.is_link_local:
        return f"{address} is link-local"
    if address.is_multicast or address.is_unspecified:
        return f"{address} is not a unicast address"
    if address.is_loopback:
        return None if allow_private else f"{address} is a loopback address{NOT_ALLOWED}"
    if address.is_reserved:
        return f"{address} is a reserved address"
    if (address.is_global and not any(address in net for net in NOT_GLOBAL)) or allow_private:
        return None
    return f"{address} is a private address{NOT_ALLOWED}"


async def system_resolve(host: str, port: int) -> Sequence[str]:
    """The addresses ``host`` resolves to now (getaddrinfo, as a connect would)."""
    loop = asyncio.get_running_loop()
    infos = await asyncio.wait_for(
        loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), RESOLVE_TIMEOUT
    )
    return [str(info[4][0]) for info in infos]


async def checked_address(url: str, allow_private: bool, resolve: Resolver) -> tuple[Address, str]:
    """The address to connect to for ``url``, after checking every address its
    host resolves to, and the url's host[:port] (for Host and SNI)."""
    parts = urlsplit(url)
    host = parts.hostname
    if parts.scheme not in ("http", "https") or not host or parts.username or parts.password:
        raise CallbackRefused(f"refused: {parts.scheme}://{host or ''} is not an http(s) url")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # a port beyond 65535: the database refuses one now
        raise CallbackRefused(f"refused: {url[:200]}: {exc}") from None
    try:
        literal: Address | None = ipaddress.ip_address(host)
    except ValueError:
        literal = None
    if literal is not None:
        addresses: list[Address] = [literal]
    else:
        try:
            found = await resolve(host, port)
        except (OSError, TimeoutError) as exc:
            raise CallbackRefused(f"{host} does not resolve: {exc}") from None
        addresses = []
        for text in found:
            try:
                addresses.append(ipaddress.ip_address(text.split("%", 1)[0]))
            except ValueError:
                raise CallbackRefused(f"{host} resolves to {text!r}, not an address") from None
        if not addresses:
            raise CallbackRefused(f"{host} resolves to no address")
    for address in addresses:
        problem = address_problem(address, allow_private)
        if problem is not None:
            raise CallbackRefused(f"refused, nothing sent: {host} resolves to {problem}")
    return addresses[0], parts.netloc


def pinned_url(url: str, address: Address) -> str:
    """``url`` with its host replaced by ``address`` (the port and path kept)."""
    parts = urlsplit(url)
    host = f"[{address}]" if address.version == 6 else str(address)
    netloc = host if parts.port is None else f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))


def load_secret(secret_ref: str, env: Mapping[str, str]) -> str:
    """The signing secret ``secret_ref`` names (env:QTG_CB_NAME or file:NAME).
    Errors name the reference, never a value."""
    kind, _, name = secret_ref.partition(":")
    if kind == "env":
        if not re.fullmatch(r"QTG_CB_[A-Z0-9_]{1,120}", name):
            # before the variable is read: a target names a callback secret,
            # never another of the runner's variables (its database URL, a key)
            raise CallbackRefused(f"the secret {secret_ref} is not a QTG_CB_ variable")
        value = env.get(name, "").strip()
        if not value:
            raise CallbackRefused(f"the secret {secret_ref} is not set where this runner runs")
        return value
    if kind == "file":
        folder = env.get(SECRETS_DIR_ENV)
        if not folder:
            raise CallbackRefused(f"the secret {secret_ref} needs {SECRETS_DIR_ENV} set")
        path = Path(folder) / name
        try:
            mode = path.stat().st_mode
            if stat.S_IMODE(mode) & 0o077:
                raise CallbackRefused(
                    f"the secret {secret_ref} is readable by others ({path}): chmod 600"
                )
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            problem = exc.strerror or type(exc).__name__
            raise CallbackRefused(f"the secret {secret_ref} cannot be read: {problem}") from None
        if not value:
            raise CallbackRefused(f"the secret {secret_ref} is empty")
        return value
    raise CallbackRefused(f"the secret reference {secret_ref!r} is neither env: nor file:")


def signer_for(secret: str, secret_ref: str) -> Webhook:
    try:
        return Webhook(secret)
    except Exception:  # the package raises several kinds for a malformed secret
        raise CallbackRefused(
            f"the secret {secret_ref} is not a Standard Webhooks secret (whsec_ and base64)"
        ) from None


def body_of(payload: Mapping[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True)


async def post(
    client: httpx.AsyncClient,
    claim: procs.ClaimedCallback,
    env: Mapping[str, str],
    resolve: Resolver,
) -> Attempt:
    """Check, sign and POST one callback; never raises for the receiver's faults."""
    try:
        signer = signer_for(load_secret(claim.secret_ref, env), claim.secret_ref)
        address, netloc = await checked_address(claim.url, claim.allow_private, resolve)
    except CallbackRefused as exc:
        return Attempt(None, str(exc))
    circuit = endpoint_circuit(claim.url, f"the receiver {claim.target_name}")
    refusal = circuit.refusal(None)  # a receiver's probe is a delivery
    if refusal is not None:
        return Attempt(None, refusal)
    body = body_of(claim.payload)
    sent_at = datetime.now(UTC)
    headers = {
        "host": netloc,
        "content-type": "application/json",
        "user-agent": "qtg-callbacks/1",
        "webhook-id": claim.idempotency_key,
        "webhook-timestamp": str(int(sent_at.timestamp())),
        "webhook-signature": signer.sign(claim.idempotency_key, sent_at, body),
    }
    extensions = {}
    if urlsplit(claim.url).scheme == "https":
        extensions["sni_hostname"] = urlsplit(claim.url).hostname or ""
    try:
        request = client.build_request(
            "POST",
            pinned_url(claim.url, address),
            content=body.encode(),
            headers=headers,
            extensions=extensions,
        )
        async with circuit.watching(DELIVERY_DEADLINE_S):
            response = await client.send(request, stream=True, follow_redirects=False)
            try:
                answer = bytearray()
                async for chunk in response.aiter_raw():
                    answer += chunk[: MAX_RESPONSE_BYTES - len(answer)]
                    if len(answer) >= MAX_RESPONSE_BYTES:
                        break
            finally:
                await response.aclose()
    except httpx.TimeoutException as exc:
        return Attempt(None, f"timeout: {type(exc).__name__}")
    except TimeoutError:
        return Attempt(None, f"timeout: no whole answer within {DELIVERY_DEADLINE_S:g} s")
    except (httpx.HTTPError, OSError) as exc:
        return Attempt(None, f"no response: {type(exc).__name__}: {str(exc)[:300]}")
    if not 100 <= response.status_code <= 599:
        return Attempt(None, f"no HTTP answer: status {response.status_code} is not one")
    if 200 <= response.status_code < 300:
        return Attempt(response.status_code, None)
    said = "".join(
        c if c.isprintable() else "?" for c in bytes(answer[:300]).decode("utf-8", "replace")
    )
    redirect = " (redirects are not followed)" if 300 <= response.status_code < 400 else ""
    return Attempt(response.status_code, f"HTTP {response.status_code}{redirect}: {said}")


MAX_ROUNDS = 10
"""A tick runs rounds back to back while they come back full, at most this many
(a backlog drains at up to 200 callbacks a tick, the heartbeat kept)."""


async def batch(ctx: WorkerContext, worker_id: str) -> int:
    handled = 0
    for _ in range(MAX_ROUNDS):
        count = await run_round(ctx, worker_id)
        handled += count
        if count < BATCH_SIZE or ctx.stopping.is_set():
            break
    pruned = await ctx.one(procs.prune_callbacks(worker_id, PRUNE_SIZE))
    if pruned:
        ctx.log(logging.INFO, "callbacks_pruned", WORKER, count=pruned)
    return handled


async def run_round(
    ctx: WorkerContext,
    worker_id: str,
    *,
    env: Mapping[str, str] | None = None,
    resolve: Resolver = system_resolve,
    transport: httpx.AsyncBaseTransport | None = None,
    max_rows: int = BATCH_SIZE,
) -> int:
    """Claim, POST and report one batch; returns how many callbacks were handled."""
    claimed = time.monotonic()  # before the claim: its lease is counted from no later
    claims = await ctx.all(procs.claim_callbacks(worker_id, max_rows))
    if not claims:
        return 0
    environment = os.environ if env is None else env
    limit = asyncio.Semaphore(max(1, ctx.max_concurrency))
    async with httpx.AsyncClient(
        timeout=TIMEOUT,
        follow_redirects=False,
        trust_env=False,
        verify=client_ssl_context(trust_env=False),
        transport=transport,
    ) as client:

        async def deliver(claim: procs.ClaimedCallback) -> None:
            async with limit:
                left = float(claim.lease_seconds) - (time.monotonic() - claimed)
                if left < LEASE_NEEDED_S:
                    attempt = Attempt(
                        None,
                        f"not sent: {max(left, 0):.0f} s were left of its claim's lease "
                        f"(callback_settings.lease_seconds {claim.lease_seconds}), a delivery "
                        f"may take {LEASE_NEEDED_S:g} s",
                    )
                else:
                    attempt = await post(client, claim, environment, resolve)
            await report(ctx, claim, attempt)

        # every delivery ends before the client closes, even when one fails
        ended = await asyncio.gather(*(deliver(claim) for claim in claims), return_exceptions=True)
    failed = next((e for e in ended if isinstance(e, BaseException)), None)
    if failed is not None:
        raise failed
    return len(claims)


async def report(ctx: WorkerContext, claim: procs.ClaimedCallback, attempt: Attempt) -> None:
    level = logging.INFO if attempt.error is None else logging.WARNING
    try:
        async with ctx.pool.connection() as conn:
            state = await procs.complete_callback(
                claim.callback_id, claim.claim_secret, attempt.status, attempt.error
            ).aone(conn)
    except psycopg.OperationalError:
        raise  # the database is away: the round ends, the claim's lease returns the row
    except psycopg.Error as exc:
        if exc.sqlstate == "QT030":
            state = "lost (claimed again)"
        else:
            # refused, never the round's end: the row returns when its lease runs out
            state = f"not recorded: {exc.sqlstate or type(exc).__name__}: {str(exc)[:200]}"
            level = logging.ERROR
    ctx.log(
        level,
        "callback_sent" if attempt.error is None else "callback_failed",
        WORKER,
        movement=claim.movement_id,
        callback=claim.callback_id,
        target=claim.target_name,
        attempt=claim.attempt,
        status=attempt.status,
        state=state,
        error=attempt.error,
    )
