"""The callback_dispatcher sidecar as a runner login against a real receiving
HTTP server on loopback (a target registered allow_private), which checks every
POST's Standard Webhooks signature with the `standardwebhooks` package: a
delivery; the receiver down for ten minutes of database time (the runner's
clock pinned and moved, never slept) and every callback arriving after it
returns, a dispatcher that died after its POST repeating it under the same
webhook-id; DEAD after N attempts and a replay; private, loopback, metadata
and link-local addresses (literal or resolved) refused without a connection;
an unregistered url never called; the address checks themselves; a receiver
that takes the POSTs and answers none costs one wait, its later callbacks
failing at once unsent."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
from collections.abc import Iterator, Sequence
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from conftest import TestDatabase
from endpoint_support import Endpoint
from engine import approve, as_person, bind, node, pin_clock, plan
from rows import Conn, iso_at, set_clock
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from qtg_runner.circuit import endpoint_circuit
from qtg_runner.db import procs
from qtg_runner.db.pool import bound_conninfo, open_pool
from qtg_runner.loop import WorkerContext
from qtg_runner.ports import free_port
from qtg_runner.workers import callback_dispatcher
from qtg_runner.workers.callback_dispatcher import address_problem

SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ENV = {"QTG_CB_RECEIVER": SECRET}


class Receiver:
    """A real HTTP server on 127.0.0.1: it verifies each POST's signature and
    keeps (webhook-id, body, verified); answers ``status``; ``stop`` closes the
    port (connections refused), ``start`` opens it again on the same port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hooks/qtg"
        self.status = 200
        self.answer = b"ok"
        self.received: list[tuple[str, str, bool]] = []
        self.connections = 0
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def setup(self) -> None:
                receiver.connections += 1
                super().setup()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                try:
                    Webhook(SECRET).verify(body, dict(self.headers.items()))
                    verified = True
                except WebhookVerificationError:
                    verified = False
                receiver.received.append(
                    (self.headers.get("webhook-id", ""), body.decode(), verified)
                )
                self.send_response(receiver.status)
                self.send_header("content-length", str(len(receiver.answer)))
                self.end_headers()
                self.wfile.write(receiver.answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.start()
    yield r
    r.stop()


def register(conn: Conn, url: str, name: str = "receiver", allow_private: bool = True) -> None:
    procs.upsert_callback_target(name, url, "env:QTG_CB_RECEIVER", allow_private).one(conn)


def plant(conn: Conn, url: str, name: str, allow_private: bool) -> None:
    """A target written to its table directly, as one registered before the
    registration refused an address no callback may reach (check_callback_target
    refuses these urls now): the dispatcher's own check refuses it all the same."""
    conn.execute(
        "INSERT INTO callback_targets (target_name, url, secret_ref, allow_private, created_at,"
        " updated_at) VALUES (%s, %s, 'env:QTG_CB_RECEIVER', %s, clock(), clock())",
        (name, url, allow_private),
    )


def movements(conn: Conn, url: str | None, count: int, prefix: str = "m") -> list[int]:
    """``count`` movements created and approved: two callbacks each."""
    ids = []
    for i in range(count):
        with as_person(conn, "alice"):
            ids.append(
                procs.create_movement(
                    f"{prefix}{i}", Decimal(1), plan=plan(node("a")), callback_url=url
                ).one(conn).movement_id
            )  # fmt: skip
        approve(conn, ids[-1])
    return ids


def dispatch(
    db: TestDatabase,
    at: float,
    *,
    env: dict[str, str] = ENV,
    resolve: Any = callback_dispatcher.system_resolve,
    transport: httpx.AsyncBaseTransport | None = None,
) -> int:
    """One round of the dispatcher as the runner login, its clock at T0 + ``at``."""

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "callbacks-test")
        async with open_pool(conninfo, name="callbacks-test", max_size=1) as pool:
            async with pool.connection() as conn:
                await conn.execute("SELECT set_config('qtg.now', %s, false)", (iso_at(at),))
            ctx = WorkerContext("testnet", pool, {}, "callbacks-test:1")
            return await callback_dispatcher.run_round(
                ctx, "callback_dispatcher@callbacks-test:1", env=env, resolve=resolve,
                transport=transport, max_rows=100,
            )  # fmt: skip

    return asyncio.run(scenario())


def rows(conn: Conn) -> list[tuple[Any, ...]]:
    return conn.execute(
        """SELECT id, idempotency_key, delivery_state, attempts, last_error
             FROM callback_outbox ORDER BY id"""
    ).fetchall()


def test_a_callback_arrives_signed(db: TestDatabase, conn: Conn, receiver: Receiver) -> None:
    register(conn, receiver.url)
    [m] = movements(conn, receiver.url, 1)
    assert dispatch(db, 1) == 2
    keys = [r[1] for r in rows(conn)]
    # both posted in one batch, concurrently: they may arrive in either order
    # (a receiver orders a movement's callbacks by their payload, not arrival)
    assert sorted((wid, ok) for wid, _, ok in receiver.received) == sorted((k, True) for k in keys)
    [approved] = [b for wid, b, _ in receiver.received if wid.endswith("-approved")]
    body = json.loads(approved)
    assert (body["movement_id"], body["to_state"], body["network"]) == (m, "APPROVED", "testnet")
    assert {r[2] for r in rows(conn)} == {"SENT"}
    assert dispatch(db, 2) == 0  # nothing sent twice


@pytest.mark.slow
def test_ten_minutes_down_then_every_callback_arrives(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    register(conn, receiver.url)
    receiver.stop()
    movements(conn, receiver.url, 4, "early")
    # a dispatcher POSTs two callbacks while the receiver is up and dies before it reports
    receiver.start()
    crashed = procs.claim_callbacks("crashed", 2).all(conn)

    async def post_only() -> None:
        async with httpx.AsyncClient(trust_env=False) as client:
            for claim in crashed:
                await callback_dispatcher.post(
                    client, claim, ENV, callback_dispatcher.system_resolve
                )

    asyncio.run(post_only())
    assert len(receiver.received) == 2
    receiver.stop()
    # ten minutes of database time down, the dispatcher trying every 20 s; more state
    # changes meanwhile
    at = 0.0
    while at < 600:
        dispatch(db, at)
        if at == 300:
            set_clock(conn, at)
            movements(conn, receiver.url, 3, "during")
        at += 20
    states = {r[2] for r in rows(conn)}
    assert states == {"PENDING"}, rows(conn)
    assert all(r[3] >= 2 for r in rows(conn)), "each callback was attempted during the outage"
    receiver.start()
    while {r[2] for r in rows(conn)} != {"SENT"} and at < 600 + 3600:
        dispatch(db, at)
        at += 20
    all_rows = rows(conn)
    assert {r[2] for r in all_rows} == {"SENT"}, all_rows
    keys = {r[1] for r in all_rows}
    assert len(keys) == 14
    seen: dict[str, set[str]] = {}
    for webhook_id, body, verified in receiver.received:
        assert verified
        seen.setdefault(webhook_id, set()).add(body)
    assert set(seen) == keys, "none lost, none unknown"
    assert all(len(bodies) == 1 for bodies in seen.values()), "a repeat is the same message"
    repeats = len(receiver.received) - len(keys)
    assert repeats == 2 and {c.idempotency_key for c in crashed} <= set(seen)
    print(f"\ncallbacks {len(keys)}, received {len(receiver.received)}, repeats {repeats} "
          f"(same webhook-id), delivered by T0+{at:.0f}s")  # fmt: skip


def test_dead_after_n_attempts_then_replayed(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    register(conn, receiver.url)
    conn.execute("UPDATE callback_settings SET max_attempts = 3")
    receiver.status = 500
    with as_person(conn, "alice"):
        procs.create_movement("m", Decimal(1), plan=plan(node("a")), callback_url=receiver.url).one(
            conn
        )
    at = 0.0
    while rows(conn)[0][2] == "PENDING" and at < 3600:
        dispatch(db, at)
        at += 5
    [(callback_id, key, state, attempts, error)] = rows(conn)
    assert (state, attempts, error) == ("DEAD", 3, "HTTP 500: ok")
    assert [wid for wid, _, _ in receiver.received] == [key] * 3
    assert conn.execute("SELECT callback_id FROM dead_callbacks").fetchall() == [(callback_id,)]
    receiver.status = 200
    operator = bind(db.connect(db.login("carol", "qtg_testnet_operator").dsn))
    pin_clock(operator, iso_at(at))
    assert procs.replay_callback(callback_id, "the receiver is fixed").one(operator) == "PENDING"
    dispatch(db, at)
    assert rows(conn)[0][2] == "SENT" and receiver.received[-1][0] == key


@pytest.mark.parametrize(
    ("status", "answer"), [(999, b"ok"), (500, b"bad\x00news")], ids=["status-999", "nul-byte"]
)
def test_a_hostile_answer_fails_its_own_callback_only(
    db: TestDatabase, conn: Conn, receiver: Receiver, status: int, answer: bytes
) -> None:
    """A receiver answering a status HTTP has none of (999, as some CDNs do)
    or an answer holding a NUL byte (no text column holds one): its callback
    is a failed attempt, retried, with what it said made printable; the
    round goes on, and another receiver's callback in it is delivered."""
    hostile = Receiver()
    hostile.status, hostile.answer = status, answer
    hostile.start()
    try:
        register(conn, receiver.url)
        register(conn, hostile.url, name="hostile")
        movements(conn, hostile.url, 1, "h")
        movements(conn, receiver.url, 1, "r")
        assert dispatch(db, 1) == 4
    finally:
        hostile.stop()
    by_url = conn.execute(
        "SELECT target_url, delivery_state, attempts, last_error FROM callback_outbox ORDER BY id"
    ).fetchall()
    assert [r[1:3] for r in by_url if r[0] == receiver.url] == [("SENT", 1)] * 2
    failed = [r for r in by_url if r[0] == hostile.url]
    assert [r[1:3] for r in failed] == [("PENDING", 1)] * 2
    assert all(r[3] and "\x00" not in r[3] for r in failed), failed


def test_a_callback_replayed_after_its_max_age_is_sent(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    """A receiver down over a long weekend: its callbacks pass the default
    three days (callback_settings.max_age_seconds) and go DEAD, unsent. An
    operator's replay counts their age again from the replay: the next round
    sends them, where it used to end them DEAD at once with no POST."""
    register(conn, receiver.url)
    receiver.status = 503
    movements(conn, receiver.url, 1)
    dispatch(db, 1)
    day = 24 * 3600
    dispatch(db, 4 * day)
    assert {(r[2], r[3]) for r in rows(conn)} == {("DEAD", 1)}
    receiver.status = 200
    operator = bind(db.connect(db.login("carol", "qtg_testnet_operator").dsn))
    pin_clock(operator, iso_at(4 * day + 60))
    for callback_id, *_ in rows(conn):
        assert procs.replay_callback(callback_id, "the receiver is back").one(operator) == "PENDING"
    assert dispatch(db, 4 * day + 61) == 2
    assert {(r[2], r[3]) for r in rows(conn)} == {("SENT", 1)}


def test_a_replayed_callback_that_fails_again_is_retried(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    """Replayed past its max age, a callback whose receiver fails once more
    is retried with its backoff, not ended DEAD at its first failure."""
    register(conn, receiver.url)
    receiver.status = 503
    movements(conn, receiver.url, 1)
    day = 24 * 3600
    dispatch(db, 4 * day)
    assert {r[2] for r in rows(conn)} == {"DEAD"}
    operator = bind(db.connect(db.login("carol", "qtg_testnet_operator").dsn))
    pin_clock(operator, iso_at(4 * day + 60))
    for callback_id, *_ in rows(conn):
        procs.replay_callback(callback_id, "the receiver should be back").one(operator)
    assert dispatch(db, 4 * day + 61) == 2
    assert {(r[2], r[3]) for r in rows(conn)} == {("PENDING", 1)}


def test_no_post_starts_that_could_outlast_its_claim(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    """A POST and its answer may take 35 s. One that starts with less of its
    claim's lease left could still be under way when another dispatcher
    claims the row and sends it again: it is not started, and the callback
    is tried again after its backoff. (A lease this short cannot be set with
    set_callback_settings; here it stands for slots slow receivers held.)"""
    register(conn, receiver.url)
    movements(conn, receiver.url, 1)
    conn.execute("UPDATE callback_settings SET lease_seconds = 20")
    assert dispatch(db, 1) == 2
    assert receiver.connections == 0
    assert {(r[2], r[3]) for r in rows(conn)} == {("PENDING", 1)}
    assert all("not sent: 20 s were left of its claim's lease" in r[4] for r in rows(conn))
    conn.execute("UPDATE callback_settings SET lease_seconds = DEFAULT")
    assert dispatch(db, 3600) == 2
    assert {r[2] for r in rows(conn)} == {"SENT"}


def test_a_receiver_that_answers_nothing_costs_one_wait_not_one_a_round(
    db: TestDatabase, conn: Conn, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it takes each POST and says nothing: the first round's deliveries wait
    # their timeout (side by side), which opens its circuit; the next round's
    # fail at once, unsent, as failed attempts the database retries
    monkeypatch.setattr(callback_dispatcher, "TIMEOUT", httpx.Timeout(0.5))
    url = endpoint.url + "/hooks/qtg"
    register(conn, url)
    movements(conn, url, 2)
    assert dispatch(db, 1) == 4
    assert len(endpoint.requests) == 4
    assert {(r[2], r[3], r[4]) for r in rows(conn)} == {("PENDING", 1, "timeout: ReadTimeout")}

    assert dispatch(db, 600) == 4  # due again after the backoff
    assert len(endpoint.requests) == 4
    for _, _, state, attempts, error in rows(conn):
        assert (state, attempts) == ("PENDING", 2)
        assert error.startswith("not sent: the receiver receiver gave no answer to a call")
    endpoint_circuit(url, "").answered()  # leave the process's circuit closed


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline(
    db: TestDatabase, conn: Conn, endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each read within httpx's timeout, the whole answer never: the delivery
    # ends at DELIVERY_DEADLINE_S, a failed attempt, and the slot is free
    monkeypatch.setattr(callback_dispatcher, "DELIVERY_DEADLINE_S", 0.3)
    endpoint.drip()
    url = endpoint.url + "/hooks/drip"
    register(conn, url)
    movements(conn, url, 1)
    assert dispatch(db, 1) == 2
    assert len(endpoint.requests) == 2
    assert {(r[2], r[3], r[4]) for r in rows(conn)} == {
        ("PENDING", 1, "timeout: no whole answer within 0.3 s")
    }
    endpoint_circuit(url, "").answered()  # leave the process's circuit closed


class Recording(httpx.AsyncBaseTransport):
    """A transport that records every request it is handed (and answers 200)."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200)


def test_private_metadata_and_link_local_targets_are_refused_without_a_connection(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    urls = {
        "loopback": receiver.url.replace("/hooks/qtg", "/plain"),  # a live server: never called
        "loopback6": f"http://[::1]:{receiver.port}/x",
        "private": "http://10.1.2.3/x",
        "private6": "http://[fd12::1]/x",
        "metadata": "http://169.254.169.254/latest/meta-data/",
        "linklocal6": "http://[fe80::1]/x",
        "mapped": "http://[::ffff:192.168.1.1]/x",
        "rebind": "http://rebind.test:8080/x",  # a name that resolves to loopback now
        "unspecified": "http://0.0.0.0/x",
    }
    for name, url in urls.items():
        if name == "rebind":
            register(conn, url, name, allow_private=False)
        else:
            plant(conn, url, name, allow_private=False)
        movements(conn, url, 1, name)
    # allowed private, yet never metadata or link-local
    for name, url in (("meta-ok", "http://169.254.169.254/a"), ("ll-ok", "http://[fe80::2]/a")):
        plant(conn, url, name, allow_private=True)
        movements(conn, url, 1, name)

    async def resolve(host: str, port: int) -> Sequence[str]:
        assert host == "rebind.test"
        return ["93.184.216.34", "127.0.0.1"]  # one public address does not make it safe

    transport = Recording()
    assert dispatch(db, 0, resolve=resolve, transport=transport) == 22
    assert transport.requests == [] and receiver.connections == 0 and receiver.received == []
    query = "SELECT target_name, last_error FROM callback_outbox WHERE event_type = %s"
    errors = dict(conn.execute(query, ("movement.approved",)).fetchall())
    assert all(e.startswith("refused, nothing sent: ") for e in errors.values()), errors
    assert "127.0.0.1 is a loopback address" in errors["loopback"]
    assert "10.1.2.3 is a private address" in errors["private"]
    assert "169.254.169.254 is a cloud metadata address" in errors["metadata"]
    assert "169.254.169.254 is a cloud metadata address" in errors["meta-ok"]
    assert "fe80::2 is link-local" in errors["ll-ok"]
    assert "rebind.test resolves to 127.0.0.1 is a loopback address" in errors["rebind"]
    assert {r[2] for r in rows(conn)} == {"PENDING"}


def test_an_unregistered_url_is_never_called(
    db: TestDatabase, conn: Conn, receiver: Receiver
) -> None:
    register(conn, receiver.url)
    movements(conn, receiver.url + "/elsewhere", 2, "stray")
    movements(conn, receiver.url, 1, "known")
    assert dispatch(db, 0) == 2
    assert len(receiver.received) == 2 and receiver.connections == 2
    states = conn.execute(
        "SELECT target_url, delivery_state, count(*) FROM callback_outbox GROUP BY 1, 2 ORDER BY 1"
    ).fetchall()
    assert states == [(receiver.url, "SENT", 2), (receiver.url + "/elsewhere", "REFUSED", 4)]


def test_a_missing_secret_sends_nothing(db: TestDatabase, conn: Conn, receiver: Receiver) -> None:
    register(conn, receiver.url)
    movements(conn, receiver.url, 1)
    assert dispatch(db, 0, env={}) == 2
    assert receiver.connections == 0
    errors = {r[4] for r in rows(conn)}
    assert errors == {"the secret env:QTG_CB_RECEIVER is not set where this runner runs"}
    assert SECRET not in str(errors)


@pytest.mark.parametrize(
    ("address", "allow_private", "refused"),
    [
        ("93.184.216.34", False, None),
        ("2606:4700::1111", False, None),
        ("127.0.0.1", False, "loopback"),
        ("127.0.0.1", True, None),
        ("::1", False, "loopback"),
        ("10.0.0.1", False, "private"),
        ("172.16.5.4", False, "private"),
        ("192.168.0.1", True, None),
        ("100.64.0.1", False, "private"),  # shared address space (CGNAT)
        ("fd00::1", False, "private"),
        ("fec0::1", False, "private"),  # site-local: Python 3.11 calls it global
        ("fec0::1", True, None),
        ("192.0.0.8", False, "private"),  # IETF protocol assignments: likewise
        ("3fff::1", False, "private"),  # documentation (2024): likewise
        ("169.254.169.254", True, "cloud metadata"),
        ("169.254.1.1", True, "link-local"),
        ("fe80::1", True, "link-local"),
        ("fd00:ec2::254", True, "cloud metadata"),
        ("100.100.100.200", True, "cloud metadata"),
        ("::ffff:169.254.169.254", True, "cloud metadata"),
        ("::ffff:10.0.0.1", False, "private"),
        ("0.0.0.0", True, "not a unicast"),
        ("224.0.0.1", True, "not a unicast"),
        # IPv6 forms that carry an IPv4 address, refused whatever they carry
        ("2002:a9fe:a9fe::", True, "6to4"),  # 169.254.169.254
        ("2002:7f00:1::", True, "6to4"),  # 127.0.0.1
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", True, "Teredo"),  # client 127.0.0.1
        ("64:ff9b::a9fe:a9fe", True, "NAT64"),
        ("64:ff9b:1::7f00:1", True, "NAT64"),
        ("::127.0.0.1", True, "IPv4-compatible"),
        ("::ffff:0:a9fe:a9fe", True, "IPv4-translated"),
        ("fe80::5efe:a9fe:a9fe", True, "ISATAP"),
        ("2606:4700::200:5efe:7f00:1", True, "ISATAP"),
        ("2606:4700:4700::1111", False, None),  # a global IPv6 address passes
    ],
)
def test_address_checks(address: str, allow_private: bool, refused: str | None) -> None:
    problem = address_problem(ipaddress.ip_address(address), allow_private)
    assert (problem is None) if refused is None else (refused in (problem or "")), problem


def test_a_file_secret_must_be_private(tmp_path: Any) -> None:
    load = callback_dispatcher.load_secret
    secret = tmp_path / "ops.secret"
    secret.write_text(SECRET + "\n")
    secret.chmod(0o644)
    env = {"QTG_CALLBACK_SECRETS_DIR": str(tmp_path)}
    with pytest.raises(callback_dispatcher.CallbackRefused, match="readable by others") as err:
        load("file:ops.secret", env)
    assert SECRET not in str(err.value)
    secret.chmod(0o600)
    assert load("file:ops.secret", env) == SECRET
    with pytest.raises(callback_dispatcher.CallbackRefused, match="cannot be read"):
        load("file:missing", env)
    with pytest.raises(callback_dispatcher.CallbackRefused, match="QTG_CALLBACK_SECRETS_DIR"):
        load("file:ops.secret", {})
    assert load("env:QTG_CB_X", {"QTG_CB_X": SECRET}) == SECRET
    bad = callback_dispatcher.signer_for
    with pytest.raises(callback_dispatcher.CallbackRefused, match="not a Standard Webhooks"):
        bad("whsec_", "env:QTG_CB_X")


def test_one_tick_drains_a_backlog_beyond_a_batch(
    db: TestDatabase, conn: Conn, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(conn, receiver.url)
    movements(conn, receiver.url, 15)  # 30 callbacks: two claims of 20
    monkeypatch.setenv("QTG_CB_RECEIVER", SECRET)
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(0)}")

    async def tick() -> int:
        conninfo = bound_conninfo(db.runner_dsn("testnet"), "testnet", "callbacks-test")
        async with open_pool(conninfo, name="callbacks-test") as pool:
            ctx = WorkerContext("testnet", pool, {}, "callbacks-test:1")
            return await callback_dispatcher.batch(ctx, "callback_dispatcher@callbacks-test:1")

    assert asyncio.run(tick()) == 30
    assert {r[2] for r in rows(conn)} == {"SENT"}
    assert len({wid for wid, _, ok in receiver.received if ok}) == 30

    # past the network's keep (90 days), the tick's prune deletes what was sent
    monkeypatch.setenv("PGOPTIONS", f"-c qtg.now={iso_at(91 * 86_400)}")
    assert asyncio.run(tick()) == 0
    assert rows(conn) == []
    pruned = conn.execute(
        "SELECT actor, detail->>'callbacks' FROM audit_outbox WHERE action = 'callbacks_pruned'"
    ).fetchall()
    assert pruned == [("callback_dispatcher@callbacks-test:1", "30")]


@pytest.mark.parametrize(
    "name", ["HOME", "QTG_DATABASE_URL", "QTG_SIGNER_TREASURY", "qtg_cb_x", "QTG_CB_"]
)
def test_a_callback_secret_names_a_qtg_cb_variable_only(name: str) -> None:
    """A target's env: secret is read from the runner's environment: it may
    name a QTG_CB_ variable and no other (its database URL, a key, HOME would
    sign callbacks with the runner's own secrets). Refused before it is read."""
    read: list[str] = []

    class Recording(dict[str, str]):
        def get(self, key: str, default: Any = None) -> Any:
            read.append(key)
            return super().get(key, default)

    env = Recording({name: "the runner's own secret"})
    with pytest.raises(callback_dispatcher.CallbackRefused, match="not a QTG_CB_ variable") as err:
        callback_dispatcher.load_secret(f"env:{name}", env)
    assert read == [] and "own secret" not in str(err.value)


def test_a_port_out_of_range_is_refused_not_raised() -> None:
    """A url whose port is past 65535 (the database refuses one now; a row
    enqueued before could still name one) is refused like any address no
    callback may reach: it once raised out of the round and stopped the
    dispatcher."""

    async def never(host: str, port: int) -> list[str]:
        raise AssertionError("nothing is resolved for a url refused")

    with pytest.raises(callback_dispatcher.CallbackRefused, match="out of range"):
        asyncio.run(callback_dispatcher.checked_address("https://x.test:65536/", False, never))
