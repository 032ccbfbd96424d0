"""The engine's error contract: every QT SQLSTATE a procedure raises, what it
means, and the HTTP status and problem title the API answers it with.

This table is the one place a QT code is described. docs/reference/errors.md
is generated from it (``make docs``); tests/scenarios/test_error_codes.py
checks it against the SQL (every QT code a RAISE names is here, every code
here is raised), and the API's problem types (qtg_runner/api/problems.py)
are built from it. A new QT code is a row here, in code order.

Codes that share one meaning (QT010 to QT013, QT020 and QT021) share its
text, and the reference shows them in one row.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QtError:
    """One QT SQLSTATE."""

    code: str
    """The SQLSTATE, ``QT`` and three characters."""
    status: int
    """The HTTP status the API answers it with (500: never a caller's to cause)."""
    title: str
    """The problem's title (RFC 9457): what kind of problem, the same for every occurrence."""
    meaning: str
    """When a procedure raises it (Markdown: code in backticks)."""
    advice: bool = False
    """A WARNING that advises, never a refusal: the call went ahead, and its
    caller is told (qtg_runner.db.procs hands it over as ``Advice``, where it
    raises every other QT warning as ``Refused``)."""


_NOT_FOUND = (
    "movement / node (or a node's capital transfer followup) / executor / configuration proposal "
    "not found"
)
_ILLEGAL_TRANSITION = (
    "illegal movement / node transition (wrong from-state; a finished movement or node moved out "
    "of its state is refused by its table, to the owner too); for a node also: `NOT_SUBMITTED` "
    "from recovery, or a new payload on `record_intent_prepared`, once its side effect was "
    "prepared or sent, and `requeue_node` on a node without a prepared or sent side effect, "
    "`release_quarantine` on a node that is not quarantined; `record_ccip_manual_execution` for a "
    "node that is not a stranded CCIP send of that message, or a manual execution that does not "
    "name the newest one recorded"
)

_TABLE: tuple[QtError, ...] = (
    QtError(
        "QT001",
        422,
        "Invalid plan",
        "invalid plan: cycle, duplicate or unknown node, a `depends_on` that is not a list of "
        "node keys, unknown executor, config not matching its schema (ranges included), a lane "
        "without a row in `lane_baselines`, a `bybit_deposit` followed by more than one "
        "`bybit_withdraw`",
    ),
    QtError(
        "QT002",
        422,
        "Invalid argument",
        "invalid argument: a missing or blank value, a procedure of the runner's that writes "
        "called in a transaction that is not `READ COMMITTED` (`check_read_committed`: it would "
        "decide from a snapshot older than the call), a batch beyond its bound "
        "(`create_movements`, `approve_movements`: 1 to 1,000; an item with an unknown field or a"
        " field of the wrong JSON type; a movement twice), non-positive amount or more than 6 "
        "decimals, expiry in the past, bad outcome name, a claim secret that is not the 64 "
        "characters a claim hands out, a report without its external reference, a negative nonce "
        "or count, an executor schema outside the subset plans are checked against, lane settings"
        " inconsistent with each other (the admin's deploy step), a malformed EVM address, an RPC"
        " URL where the name of its environment variable belongs, an amount string in "
        "`create_movements` not written as "
        'plain digits with an optional fraction (`"1e3"`, `" 7"`, `"+7"`), a worker name '
        "not of a worker's shape or naming a person's login (an operator's, a reader's, the "
        "admin's), a callback target's url naming an address no callback may reach (see "
        "Callbacks), a registry for `load_rehearsal_registry` not of `rehearsal_input`'s shape "
        "(an unknown table or column) or refused by its tables' constraints",
    ),
    QtError(
        "QT003",
        422,
        "Unknown template or missing template parameter",
        "unknown template, or a template parameter missing",
    ),
    QtError(
        "QT004",
        409,
        "External id names a different movement",
        "the external id already names a different movement (in `create_movements` also: an "
        "external id twice in one batch with different bodies; the message names the item)",
    ),
    QtError(
        "QT005",
        422,
        "Value beyond its bound",
        "a number that is NaN or Infinity, or an input beyond its bound in `engine_limits` (an "
        "amount over a trillion, a lease under a second or over an hour, a wait over an hour or "
        "under a microsecond, a heartbeat interval, a document over 64 KiB, a text over 4 KiB, a "
        "plan over 200 nodes or 1 MiB, an infinite expiry, a heartbeat's 65th live instance of a "
        "worker, or 257th worker name, with no dead one to take the place of) or a lane's "
        "settings beyond their bounds (a poll interval or wait under 1 s in a proposal, a "
        "baseline over a day, ...); the message says the limit, and the admin login may change "
        "those of `engine_limits`",
    ),
    QtError("QT010", 404, "Movement not found", _NOT_FOUND),
    QtError("QT011", 404, "Node not found", _NOT_FOUND),
    QtError("QT012", 404, "Executor not found", _NOT_FOUND),
    QtError("QT013", 404, "Configuration proposal not found", _NOT_FOUND),
    QtError(
        "QT014",
        422,
        "Not registered on this network",
        "chain not registered on the network (the chain registry's admin procedures); for a route "
        "function (`evm_transfer_route`, `cctp_burn_route`, `cctp_mint_route`, `ccip_send_route`) "
        "also a token, a treasury sender or a bridge protocol (`chain_protocols`) not registered "
        "on the chain, or a CCIP lane between the chains not recorded (`ccip_lanes`, "
        "`upsert_ccip_lane`); an exchange venue, its name for a chain or its deposit address not "
        "registered (the venue steps, `bybit_withdraw_route`, `bybit_deposit_route`)",
    ),
    QtError("QT020", 409, "Illegal movement transition", _ILLEGAL_TRANSITION),
    QtError("QT021", 409, "Illegal node transition", _ILLEGAL_TRANSITION),
    QtError(
        "QT022",
        403,
        "Four eyes: a second login must do this",
        "the creator of a movement cannot approve it, nor the proposer of a configuration change "
        "or the requester of a requeue confirm it. A WARNING, not an error: the call writes an "
        "`approval_refused` audit row, changes nothing else and returns the state unchanged (an "
        "error would roll the audit row back); `approve_movements` reports it in the movement's "
        "row (`error_code`) instead, and approves the others",
    ),
    QtError(
        "QT023",
        409,
        "Proposal is not open",
        "a configuration proposal that is not `PROPOSED` (applied, rejected, superseded, expired) "
        "or past its expiry cannot be approved or rejected",
    ),
    QtError(
        "QT024",
        409,
        "Changed since it was read",
        "the subject of a configuration proposal (lane, template, executor) changed since it was "
        "proposed: propose again; the registry changed while a movement was rehearsed "
        "(`record_rehearsal` given the `registry_revision` its `rehearsal_input` read): rehearse "
        "again",
    ),
    QtError(
        "QT025",
        409,
        "Approved after a failed or outdated rehearsal",
        "a WARNING, never an error: `approve_movement` / `approve_movements` approved a movement "
        "whose latest rehearsal (`record_rehearsal`) failed, or ran on a registry that has changed "
        "since (`rehearsal_status.registry_changed`); the message names the rehearsal, who "
        "recorded it and when, and which. The approval stands; `qtg movement show` prints what "
        "the rehearsal found",
        advice=True,
    ),
    QtError(
        "QT026",
        409,
        "Rehearsal request not the caller's to finish",
        "`finish_rehearsal_request` of a rehearsal request that does not exist, is not claimed by "
        "the calling login (never claimed, or taken over by another rehearsal service after 30 "
        "minutes: `claim_rehearsal_request`), whose claim now is not the one given (taken over by "
        "another service of the same login), or is finished already with another outcome",
    ),
    QtError(
        "QT030",
        409,
        "Stale claim",
        "stale claim: the claim secret presented is not the node's current claim (another worker "
        "or recovery holds it now, or it was never the caller's), or the lease ran out; for "
        "`complete_callback`, not the callback's current claim",
    ),
    QtError(
        "QT031",
        409,
        "EVM nonce already allocated",
        "an EVM nonce already allocated: the nonce recorded for a treasury account is below the "
        "account's next one (another dispatcher took it), or one call's nonces of an account are "
        "not consecutive; sign again at `evm_next_nonce`",
    ),
    QtError(
        "QT032",
        422,
        "Recipient not allowed",
        "a transfer's or an exchange withdrawal's recipient is neither a treasury account nor an "
        "allowed destination of its chain (`evm_transfer_route`, `bybit_withdraw_route`; for "
        "CCTP, of the destination chain: `cctp_burn_route`, `cctp_mint_route`): nothing is signed "
        "or requested, the node fails; the admin adds a destination with `allow_destination`. "
        "Also: signed bytes recorded for an intent that call what the registry does not allow the "
        "node (`record_intent_prepared`: an `evm_transfer` node anything but its route's "
        "transfer, a bridge node anything but its route's call, a node of any other executor "
        "any transaction at all, a `cctp_mint` node the message another mint node signed first, "
        "`cctp_message_mints`; any node's bytes recorded under another chain or treasury account "
        "than its route's): nothing is recorded or allocated. A completion "
        "(`finish_nodes`, on every path; a batch call's row says QT050 with this message) of a "
        "`bybit_withdraw` whose evidence names no `Transfer`, or one another withdrawal completed "
        "on (`withdrawal_transfers`), or of a `cctp_mint` on a message it did not sign and own. "
        "A CCIP send's "
        "receiver is judged on its DESTINATION chain (`ccip_send_route`), and a `ccip` node's "
        "signed bytes must be exactly its route's token-only `ccipSend` (gas limit 0), paying "
        "the Router's quote its payload records and the lane's margin of it, at most the lane's "
        "cap (`ccip_send_tx_problem`)",
    ),
    QtError(
        "QT033",
        409,
        "EVM nonce not the caller's",
        "an EVM nonce that is not the caller's to use: a fill at a nonce that is not a gap (a "
        "live intent holds it, the engine never allocated it, it is closed on the chain, or a "
        "fill is there already and this one does not name it as replaced), a replacement at "
        "another nonce than its intent's, a nonce reported closed that the engine never allocated "
        "or with a hash not recorded there; see `evm_nonce_gaps`",
    ),
    QtError(
        "QT040",
        500,
        "Clock pinned outside a test database",
        "the clock is pinned (`qtg.now`) in a database that is not marked as a test database",
    ),
    QtError(
        "QT041",
        409,
        "Change would weaken money safety",
        "the change would weaken money safety (e.g. registering an executor that has nodes as "
        "having no side effect; a migration past `0055_upgrade_in_flight_guard` while a ccip or "
        "stargate send the previous build prepared is in flight, which the new build could not "
        "observe or recover)",
    ),
    QtError(
        "QT042",
        409,
        "Not a test database",
        "`load_rehearsal_registry` in a database not marked a test database (`qtg db "
        "mark-test`): a rehearsal's registry replaces the registry of a throwaway database only, "
        "never that of a database that moves money",
    ),
    QtError(
        "QT050",
        409,
        "Outcome could not be applied",
        "a batch call could not apply one node's outcome (it breaks a constraint or a range "
        "inside the engine): that node is refused in its own row and left as it was, the others "
        "are applied; the runner quarantines it",
    ),
    QtError(
        "QT060",
        409,
        "Audit log is append-only",
        "the audit log is append-only: an UPDATE, DELETE or TRUNCATE of `audit_log` is refused, "
        "to its owner too",
    ),
    QtError(
        "QT061",
        409,
        "No breaker tripped",
        "no breaker of that lane or venue is tripped (`reset_breaker`)",
    ),
    QtError(
        "QT062",
        409,
        "Movement over a per-movement limit",
        "a movement whose amount passes a per-movement value limit of a scope one of its steps "
        "falls under: it could never be claimed (`approve_movement`, `approve_movements`)",
    ),
    QtError(
        "QT070",
        404,
        "Callback not found",
        "callback not found (`complete_callback`, `replay_callback`)",
    ),
    QtError(
        "QT071",
        409,
        "Callback cannot be replayed",
        "a callback that is not `DEAD` or `REFUSED` cannot be replayed",
    ),
    QtError(
        "QT080",
        409,
        "Balance read unknown, recorded, or another login's",
        "a balance read that is unknown, recorded already, or another login's "
        "(`record_balance_snapshots`)",
    ),
    QtError(
        "QT081", 404, "Drift alert not found", "drift alert not found (`acknowledge_drift_alert`)"
    ),
    QtError(
        "QT082",
        409,
        "Drift alert acknowledged already",
        "a drift alert acknowledged already cannot be acknowledged again",
    ),
    QtError(
        "QT083",
        409,
        "Not the account's baseline",
        "no baseline for that account, or the snapshot named is not its baseline's "
        "(`confirm_balance_baseline`: it changed since it was read)",
    ),
    QtError(
        "QT099",
        500,
        "Internal engine error",
        "internal: `claim_observe_batch` raises and catches it to undo a partial lock on a miss, "
        "`check_proposal` to undo a registry change it tried; it never reaches a caller",
    ),
)

QT_ERRORS: dict[str, QtError] = {error.code: error for error in _TABLE}
"""Every QT SQLSTATE, by code, in code order."""
