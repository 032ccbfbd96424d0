"""`qtg rehearse MOVEMENT`: run a movement on forks of its chains before it
is approved, print what it did and record the summary on the movement.
`qtg rehearse --requested [--watch]`: the same for each rehearsal asked for
on the operator page or over the HTTP API (request_rehearsal), which cannot
run one themselves.

As any operator of the network (your login, or --as NAME): the movement,
its plan and the registry are read with rehearsal_input; the rehearsal runs
(qtg_rehearsal.rehearse) with the RPC URLs of this shell's environment under
the names the registry gives (QTG_RPC_...), and nothing else of it: no
key, no exchange credential, no Iris URL is read. The summary is recorded
with record_rehearsal (audited) unless --no-record; `qtg movement show`,
the operator page and the approval then say it. Exit 0 when the rehearsal
passed, 1 when it failed or could not run.

With --requested the command is a rehearsal service: it claims the open
requests one at a time (claim_rehearsal_request), rehearses each movement
exactly as the MOVEMENT form does (``rehearse_movement``, the one body of
both), records it and finishes the request with the rehearsal's id
(finish_rehearsal_request); a rehearsal that could not run, or whose record
the engine refused, finishes the request with that problem instead. It
prints one line per request served. Without --watch it serves what is
waiting and exits 0; with --watch it then waits for more, woken by the
NOTIFY on qtg_<network>_rehearsals and polling every --poll seconds besides,
until Ctrl-C or SIGTERM, which end it cleanly: at once while it waits or a
rehearsal runs (a request in hand is then finished with the interruption as
its problem, so that it can be asked again at once), else once the request
in hand is recorded, finished and printed. A watching service that loses
the database says so and connects again (RECONNECT_WAIT_S), and finishes a
request it had in hand with that problem.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass
from types import FrameType
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from psycopg import sql
from psycopg.types.json import Jsonb

from qtg_rehearsal.rehearse import RehearsalError, Summary, run
from qtg_runner.commands.common import (
    BIGINT_MAX,
    ENVIRONMENT,
    AsOption,
    CommandError,
    NetworkOption,
    cli_errors,
    one_line,
    resolve_network,
)
from qtg_runner.commands.movement import connect, out
from qtg_runner.commands.registry import chain_numbers
from qtg_runner.config import NetworkMode
from qtg_runner.db import procs

BlockOption = Annotated[
    list[str] | None,
    typer.Option(
        "--block",
        metavar="CHAIN=N",
        help="Fork CHAIN at block N instead of its head; repeat for more chains.",
    ),
]

CLAIM_TAKEN_OVER_S = 30 * 60
"""A claim this old is taken over by another service (claim_rehearsal_request)."""
MAX_PROBLEM_CHARS = 2000
"""A problem is cut to this: finish_rehearsal_request takes at most 4 KiB."""


def rehearsals_channel(network: NetworkMode) -> str:
    """Where request_rehearsal NOTIFYs (payload: the request's id)."""
    return f"qtg_{network}_rehearsals"


def rehearse_movement(
    network: NetworkMode,
    as_login: str | None,
    movement_id: int,
    *,
    blocks: Mapping[str, int] | None,
    timeout: float,
    record: bool,
    say: Callable[[str], None],
    running: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> tuple[Summary, int | None]:
    """One rehearsal, for both forms of the command: the movement read
    (rehearsal_input), run on forks (``say`` hears its progress; the run
    inside ``running``'s block), and its summary recorded on the movement
    (record_rehearsal) when ``record``. Returns the summary and the
    rehearsal's id (None: not recorded). Raises RehearsalError when it
    could not run, and the engine's refusals."""
    with connect(network, as_login, operator=True) as conn:
        data = procs.rehearsal_input(movement_id).one(conn)
    with running():
        summary = run(data, dict(os.environ), network, blocks=blocks, timeout_s=timeout, say=say)
    rehearsal_id = None
    if record:
        with connect(network, as_login, operator=True) as conn:
            rehearsal_id = procs.record_rehearsal(
                movement_id,
                summary.outcome,
                Jsonb(summary.record),
                registry_revision=data.get("registry_revision"),
            ).one(conn)
    return summary, rehearsal_id


def rehearse_cmd(
    movement_id: Annotated[
        int | None,
        typer.Argument(
            min=1,
            max=BIGINT_MAX,
            show_default=False,
            help="Movement id (or --requested: the movements asked for).",
        ),
    ] = None,
    requested: Annotated[
        bool,
        typer.Option(
            "--requested",
            help="Serve the rehearsals asked for on the operator page or the API, one at a time.",
        ),
    ] = False,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch", help="With --requested: wait for more requests until Ctrl-C or SIGTERM."
        ),
    ] = False,
    poll: Annotated[
        float,
        typer.Option(
            min=1,
            max=3600,
            help="With --watch: seconds between looks for requests, besides their NOTIFY.",
        ),
    ] = 30.0,
    network: NetworkOption = None,
    as_login: AsOption = None,
    block: BlockOption = None,
    timeout: Annotated[
        float,
        typer.Option(min=10, max=3600, help="Seconds the movement may run on the forks."),
    ] = 600.0,
    record: Annotated[
        bool,
        typer.Option(help="Record the summary on the movement (audited), for its approver."),
    ] = True,
) -> None:
    """Rehearse a movement awaiting approval on anvil forks of its chains.

    Forks each chain the plan names from the RPC URL in this shell's
    environment (the registry names the variable), pinned at its head or
    --block; impersonates the treasury's accounts (no key is used); runs the
    plan with the real executors in a throwaway engine, the Iris double
    attesting and the Bybit double standing in for an exchange (no exchange
    is called); prints each step's outcome, gas and fees and the balances
    before and after, and records the summary on the movement. A Stargate
    taxi's packet is verified and executed on the destination's fork, as
    LayerZero's DVNs and executor would (a bus is driven first, as Stargate's
    planner would); a CCIP message on a v1.6 lane is committed (the commit
    written: no DON signs for a fork) and executed by the lane's OffRamp; a
    v1.5 lane's is not delivered, and the summary says so. Needs anvil
    (`make install`).

    With --requested instead of a MOVEMENT: serves the rehearsals asked for
    on the operator page or over the API, oldest first, each rehearsed and
    recorded as above and its request finished with it (or with why it could
    not run); one line per request. Exits 0 once none waits, or with --watch
    waits for more (woken by their NOTIFY) until Ctrl-C or SIGTERM, and
    connects again when it loses the database."""
    if requested == (movement_id is not None):
        raise CommandError(
            "give a MOVEMENT to rehearse, or --requested to serve the rehearsals asked for on "
            "the operator page or the API, not both"
            if requested
            else "give a MOVEMENT to rehearse, or --requested to serve the rehearsals asked for "
            "on the operator page or the API"
        )
    if not requested:
        if watch:
            raise CommandError("--watch serves requests: give it with --requested")
        assert movement_id is not None
        rehearse_one(movement_id, network, as_login, block, timeout, record)
    if block:
        raise CommandError("--block forks one MOVEMENT's chains: not with --requested")
    if not record:
        raise CommandError("--requested records every rehearsal: --no-record is for a MOVEMENT")
    if timeout > CLAIM_TAKEN_OVER_S - 300:
        raise CommandError(
            f"--timeout with --requested is at most {CLAIM_TAKEN_OVER_S - 300:.0f} s: a claim "
            "older than 30 minutes is taken over by another service"
        )
    net = resolve_network(network)
    with cli_errors():
        serve_requests(net, as_login, timeout=timeout, watch=watch, poll=poll)
    raise typer.Exit(0)


def rehearse_one(
    movement_id: int,
    network: str | None,
    as_login: str | None,
    block: list[str] | None,
    timeout: float,
    record: bool,
) -> NoReturn:
    """The MOVEMENT form: the rehearsal's progress and lines printed, exit 0 or 1."""
    net = resolve_network(network)
    blocks = chain_numbers(block, "--block")
    with cli_errors():
        try:
            summary, rehearsal_id = rehearse_movement(
                net,
                as_login,
                movement_id,
                blocks=blocks,
                timeout=timeout,
                record=record,
                say=lambda line: out.print(line, highlight=False, soft_wrap=True),
            )
        except RehearsalError as exc:
            raise CommandError(f"the rehearsal could not run: {exc}", ENVIRONMENT) from None
        colour = "green" if summary.outcome == "passed" else "red"
        for line in summary.lines:
            out.print(line, highlight=False, soft_wrap=True)
        if rehearsal_id is not None:
            out.print(f"recorded on movement {movement_id} as rehearsal {rehearsal_id}")
        out.print(f"[{colour}]rehearsal {summary.outcome}[/{colour}]")
    raise typer.Exit(0 if summary.outcome == "passed" else 1)


# -- the rehearsal service ---------------------------------------------------------------------


class Interrupts:
    """Ctrl-C and SIGTERM, as the service takes them: at once (KeyboardInterrupt)
    while it waits for a request or a rehearsal runs, and otherwise held until
    the next of those, so that a request's bookkeeping (its claim, its record
    and finish, its line) is never cut in two. Installed in the main thread
    only; elsewhere (a test's thread) the process's handlers are left alone
    and nothing is held."""

    def __init__(self) -> None:
        self.held = True
        self.pending = False

    def handle(self, signum: int, frame: FrameType | None) -> None:
        if self.held:
            self.pending = True
            return
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise a stop that came while held."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    @contextmanager
    def interruptible(self) -> Iterator[None]:
        """The block is stopped at once by Ctrl-C or SIGTERM."""
        self.check()
        self.held = False
        try:
            yield
        finally:
            self.held = True

    @contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            self.held = False
            yield
            return
        previous = {sig: signal.signal(sig, self.handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


RECONNECT_WAIT_S = (1.0, 30.0)
"""The watching service's wait before it connects again after losing the
database: the first, doubled while it fails, up to the second."""
LOST_IN_HAND = "the rehearsal service lost its database connection before it finished: ask again"


def lost_database(exc: psycopg.Error, conn: psycopg.Connection[Any] | None) -> bool:
    """The database gone, as a restart, a failover or a terminated session
    leave it: the connection broken or closed, a connection error (08...),
    the server shutting down or starting (57P01-57P03). Not a refusal, a
    lock or statement timeout, a serialization failure or a login the server
    refuses: those end the service as any error does."""
    if isinstance(exc, psycopg.InterfaceError) or (conn is not None and conn.broken):
        return True
    code = exc.sqlstate or ""
    return code.startswith("08") or code in ("57P01", "57P02", "57P03")


@dataclass
class _Served:
    count: int = 0
    in_hand: procs.RehearsalRequest | None = None
    """The request claimed and not yet finished, when the database was lost."""
    recorded: int | None = None
    """The in-hand request's rehearsal, when it was recorded before the loss."""
    claimed_since_connect: bool = False


def serve_requests(
    network: NetworkMode, as_login: str | None, *, timeout: float, watch: bool, poll: float
) -> int:
    """Claim, rehearse and finish requests until none waits (or, with ``watch``,
    until interrupted); returns how many were served. With ``watch`` a lost
    database (lost_database: a restart, a failover, a terminated session) is
    said in a line and the service connects again, RECONNECT_WAIT_S apart,
    once it has been connected (a first connection refused ends it); a
    request it had in hand is then finished with its rehearsal when that was
    recorded, else with LOST_IN_HAND, so that it can be asked again at once."""
    served = _Served()
    interrupts = Interrupts()
    wait = RECONNECT_WAIT_S[0]
    connected = False
    with interrupts.installed():
        try:
            while True:
                conn: psycopg.Connection[Any] | None = None
                try:
                    with connect(network, as_login, operator=True) as conn:
                        connected = True
                        _serve(conn, network, as_login, served, timeout, watch, poll, interrupts)
                    break
                except psycopg.Error as exc:
                    # a connection refused once the service has been connected is
                    # the database restarting or failing over: tried again
                    gone = (
                        isinstance(exc, psycopg.OperationalError)
                        if conn is None
                        else lost_database(exc, conn)
                    )
                    if not (watch and connected and gone):
                        raise
                    if served.claimed_since_connect:
                        wait = RECONNECT_WAIT_S[0]
                    served.claimed_since_connect = False
                    out.print(
                        f"lost the database ({one_line(exc)}): connecting again in {wait:g} s",
                        soft_wrap=True,
                    )
                    with interrupts.interruptible():
                        time.sleep(wait)
                    wait = min(2 * wait, RECONNECT_WAIT_S[1])
        except KeyboardInterrupt:
            out.print(f"stopped: {served.count} rehearsal request(s) served", soft_wrap=True)
            return served.count
    if served.count == 0:
        out.print("no rehearsal request waits")
    return served.count


def _serve(
    conn: psycopg.Connection[Any],
    network: NetworkMode,
    as_login: str | None,
    served: _Served,
    timeout: float,
    watch: bool,
    poll: float,
    interrupts: Interrupts,
) -> None:
    """One session with the database: serve requests until none waits (or,
    with ``watch``, until the database is lost or the service interrupted)."""
    if served.in_hand is not None:
        _finish_in_hand(conn, served)
    if watch:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(rehearsals_channel(network))))
    while True:
        interrupts.check()
        claimed = procs.claim_rehearsal_request().one_or_none(conn)
        served.claimed_since_connect = True
        if claimed is not None:
            served.in_hand, served.recorded = claimed, None
            line = serve_one(conn, network, as_login, claimed, timeout, interrupts, served)
            served.in_hand = None
            out.print(line, soft_wrap=True)
            served.count += 1
        elif not watch:
            return
        else:
            # a NOTIFY, or the poll's timeout: either way, look again
            with interrupts.interruptible():
                for _ in conn.notifies(timeout=poll, stop_after=1):
                    pass


def _finish_in_hand(conn: psycopg.Connection[Any], served: _Served) -> None:
    """The request the lost session had in hand, finished on the new one: with
    its rehearsal when that was recorded, else with LOST_IN_HAND (left as it
    is when it was finished, or taken over, meanwhile)."""
    claimed = served.in_hand
    assert claimed is not None
    head = f"request {claimed.request_id}: movement {claimed.movement_id}"
    try:
        if served.recorded is not None:
            procs.finish_rehearsal_request(
                claimed.request_id, claimed.claim, served.recorded, None
            ).one(conn)
            said = f"rehearsal {served.recorded}, finished after the database came back"
        else:
            finish(conn, claimed, LOST_IN_HAND)
            said = LOST_IN_HAND
        out.print(f"{head}: {said}", soft_wrap=True)
    except psycopg.Error as exc:
        if not (exc.sqlstate or "").startswith("QT"):
            raise
        out.print(f"{head}: left as it is ({exc.diag.message_primary})", soft_wrap=True)
    served.in_hand = served.recorded = None


def serve_one(
    conn: psycopg.Connection[Any],
    network: NetworkMode,
    as_login: str | None,
    claimed: procs.RehearsalRequest,
    timeout: float,
    interrupts: Interrupts,
    served: _Served | None = None,
) -> str:
    """One claimed request rehearsed and finished; the line that says how. Its
    rehearsal's id, once recorded, is kept in ``served`` until it is
    finished, for a session that loses the database in between."""
    head = f"request {claimed.request_id}: movement {claimed.movement_id}"
    try:
        summary, rehearsal_id = rehearse_movement(
            network,
            as_login,
            claimed.movement_id,
            blocks=None,
            timeout=timeout,
            record=True,
            say=lambda line: None,
            running=interrupts.interruptible,
        )
    except RehearsalError as exc:
        problem = f"the rehearsal could not run: {exc}"
    except procs.Refused as exc:
        problem = f"refused ({exc.sqlstate}): {exc.message}"
    except psycopg.Error as exc:
        if not (exc.sqlstate or "").startswith("QT"):
            finish(conn, claimed, f"the rehearsal service failed: {one_line(exc)}")
            raise
        problem = f"refused ({exc.sqlstate}): {exc.diag.message_primary}"
    except KeyboardInterrupt:
        # the stop goes on even when the database went with it
        with suppress(psycopg.Error):
            finish(conn, claimed, "the rehearsal service was stopped before it finished: ask again")
        raise
    except Exception as exc:
        finish(conn, claimed, f"the rehearsal service failed: {type(exc).__name__}: {exc}")
        raise
    else:
        assert rehearsal_id is not None
        if served is not None:
            served.recorded = rehearsal_id
        procs.finish_rehearsal_request(claimed.request_id, claimed.claim, rehearsal_id, None).one(
            conn
        )
        return f"{head}: rehearsal {summary.outcome} (rehearsal {rehearsal_id})"
    finish(conn, claimed, problem)
    return f"{head}: {problem}"


def finish(conn: psycopg.Connection[Any], claimed: procs.RehearsalRequest, problem: str) -> None:
    """The request finished with ``problem`` (on one line, cut to MAX_PROBLEM_CHARS)."""
    text = one_line(problem)
    if len(text) > MAX_PROBLEM_CHARS:
        text = text[: MAX_PROBLEM_CHARS - 3] + "..."
    procs.finish_rehearsal_request(claimed.request_id, claimed.claim, None, text).one(conn)
