"""The `cctp_burn` executor: the first half of a CCTP v2 transfer, a
``depositForBurn`` of USDC from a treasury account on the source chain, done
only when the burn is final there AND Circle's attestation service (Iris)
attests it. Its evidence carries everything the `cctp_mint` child needs (the
attested message and attestation, the domains, the source transaction, the
message nonce, amount, recipient and fee), so the mint is READY only when it
can be done, and the attestation wait is this node's lane latency
(`cctp-fast`, `cctp-standard`).

What it may sign is the registry's word, read again before every signature
(cctp_burn_route, in SQL): the source chain, its USDC and TokenMessengerV2
(chain_protocols), the sender (a treasury account), the destination's CCTP
domain, the mint recipient (a treasury account or allow-listed on the
DESTINATION chain), the amount, maxFee (a basis-point cap of the amount) and
minFinalityThreshold (fast 1000, standard 2000). The Iris URL comes from
``QTG_IRIS_URL``.

The burn spends an allowance of the sender to TokenMessengerV2: a bounded
standing allowance that an operator sets per treasury account
(``qtg_runner.chains.cctp_allowance``), never one per burn: an intent is one
transaction at one nonce, and a second transaction per node would need a second
recorded side effect and its own recovery. preflight refuses (retryable) while
the allowance is short, so nothing is signed that would revert.

    preflight  the route; the sender holds the amount and the allowance covers
               it; the route's maxFee is at least TokenMessengerV2's minimum
               fee for the amount (v2.1's minFee, read from the chain; below
               it the burn would revert "Insufficient max fee": refused, not
               retried, nothing signed: the movement needs a higher
               max_fee_bps, which is the operators' to approve).
    prepare    EIP-1559 fees under the chain's caps, gas from the node's
               estimate, the nonce at the greater of the chain's pending count
               and the engine's next one, signed (resign: the same call at
               another nonce).
    submit     the recorded bytes broadcast (evm_tx.broadcast).
    observe    the receipt final with exactly one DepositForBurn of the
               TokenMessengerV2 matching the intent, then Iris: 404 / empty /
               pending -> PENDING (after a 429, not sooner than its
               Retry-After, at least 5 s); complete with a message that
               matches the burn -> COMPLETED with the mint's evidence.
               Reverted and final: FAILED. Not mined: the recorded bytes
               rebroadcast (evm_tx.read_recorded). A receipt or an attested
               message that does not match: UNKNOWN with the evidence.
    recover    the same reading: attested -> COMPLETED; final but not yet
               attested, mined, pending or rebroadcast -> IN_FLIGHT; reverted
               -> FAILED; never prepared -> NOT_SUBMITTED.
    health     the chains (as evm_transfer's) and Iris answering (DOWN when it
               does not: no new burn starts while attestations cannot be
               fetched; DEGRADED while it rate-limits).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from qtg_runner.chains.cctp import CctpMessage, address_to_bytes32
from qtg_runner.chains.cctp_client import (
    IrisClient,
    IrisStatus,
    decode_deposit_for_burn,
    deposit_for_burn_calldata,
    min_fee_amount,
    parse_message,
)
from qtg_runner.chains.evm import allowance, balance_of
from qtg_runner.db import procs
from qtg_runner.executors import evm_tx
from qtg_runner.executors.base import (
    BIG,
    THROTTLED_READING,
    ExecutorError,
    HealthResult,
    HealthStatus,
    JsonObject,
    NodeWork,
    config_schema,
    executor_budget,
)

IRIS_URL_ENV = "QTG_IRIS_URL"


def iris_client(env: Mapping[str, str]) -> IrisClient:
    url = env.get(IRIS_URL_ENV)
    if not url:
        raise ExecutorError(
            f"{IRIS_URL_ENV} (the attestation service's URL) is not set in this runner",
            retryable=True,
            retry_after=evm_tx.RETRY_LATER_S,
        )
    return IrisClient(url, budget=executor_budget(env, url, IRIS_URL_ENV, "iris"))


@dataclass(frozen=True)
class CctpRoute(evm_tx.EvmRoute):
    """What a CCTP v2 route procedure (cctp_burn_route, cctp_mint_route) says
    of both halves: the leg's chain's USDC, TokenMessengerV2 and
    MessageTransmitterV2, the two domains, the mint recipient, the amount and
    the cap of the fee."""

    token_address: str
    token_messenger: str
    message_transmitter: str
    source_domain: int
    destination_domain: int
    mint_recipient: str
    amount_units: int = field(metadata=BIG)
    max_fee_units: int = field(metadata=BIG)


@dataclass(frozen=True)
class _Route(CctpRoute, evm_tx.CallRoute):
    """cctp_burn_route's word on one node, as recorded in the prepared payload."""

    procedure = procs.cctp_burn_route

    destination_chain: str
    destination_token_messenger: str
    min_finality_threshold: int

    def send(self) -> evm_tx.Send:
        """TokenMessengerV2.depositForBurn of the route."""
        return evm_tx.Send(
            self.token_messenger,
            deposit_for_burn_calldata(
                self.amount_units,
                self.destination_domain,
                self.mint_recipient,
                self.token_address,
                self.max_fee_units,
                self.min_finality_threshold,
            ),
        )


@dataclass(frozen=True)
class _Reading:
    """The burn now: ``status`` is evm_tx's, or ``attested`` (final and Iris
    complete, ``evidence`` the mint's), ``unattested`` (final, Iris not yet)
    or ``mismatch`` (a receipt or a message that is not the intent's)."""

    status: str
    evidence: JsonObject
    tx_hash: str | None = None
    wait_s: float | None = None


class IrisExecutor(evm_tx.EvmExecutor):
    """A CCTP executor, which asks Iris (``QTG_IRIS_URL``) for attestations:
    its client made on first use, closed by aclose."""

    _iris: IrisClient | None = None

    def _iris_client(self) -> IrisClient:
        if self._iris is None:
            self._iris = iris_client(self._env)
        return self._iris

    async def aclose(self) -> None:
        await super().aclose()
        if self._iris is not None:
            await self._iris.aclose()
            self._iris = None


class CctpBurnExecutor(IrisExecutor, evm_tx.CallExecutor):
    route_type = _Route
    key = "cctp_burn"
    landed = "attested"
    sends = "burn"
    description = (
        "CCTP v2 depositForBurn of USDC from a treasury account, done when final on the "
        "source chain and attested by Iris; its evidence is what the cctp_mint child needs"
    )
    node_config_schema = config_schema(
        ("chain", "destination_chain", "from", "to", "finality"),
        optional=("max_fee_bps",),
        own={
            "finality": {"type": "string", "enum": ["fast", "standard"]},
        },
    )

    # -- the protocol ------------------------------------------------------------

    async def preflight(self, work: NodeWork) -> None:
        route = await _Route.of(self._pool, work)
        rpc = self._evm.leg_rpc(route.leg)
        recent = evm_tx.shared_for(route.leg)  # the burns prepared together read once
        async with evm_tx.chain_errors(route.leg.chain_key):
            held, allowed, (min_fee, least) = await evm_tx.read_together(
                route.leg,
                rpc,
                balance_of(rpc, route.token_address, route.leg.sender, max_age_s=recent),
                allowance(
                    rpc,
                    route.token_address,
                    route.leg.sender,
                    route.token_messenger,
                    max_age_s=recent,
                ),
                min_fee_amount(rpc, route.token_messenger, route.amount_units, max_age_s=recent),
            )
        if route.max_fee_units < least:
            raise ExecutorError(
                f"the burn's maxFee, {route.max_fee_units} base units of {route.amount_units}, "
                f"is below the minimum fee of TokenMessengerV2 {route.token_messenger} on "
                f"{route.leg.chain_key}, {least} (minFee {min_fee} in 1/1000 basis points): "
                'the burn would revert "Insufficient max fee"; nothing is signed, and the '
                "movement needs a max_fee_bps that covers it",
                retryable=False,
            )
        evm_tx.require_tokens(route.leg, held, route.amount_units, "USDC", self.sends)
        if allowed < route.amount_units:
            raise ExecutorError(
                f"{route.leg.sender} allows TokenMessengerV2 {route.token_messenger} on "
                f"{route.leg.chain_key} {allowed} base units of USDC, the burn needs "
                f"{route.amount_units}: an operator raises the bounded allowance "
                "(the CCTP setup step: docs/executors.md, CCTP v2)",
                retryable=True,
                retry_after=evm_tx.RETRY_LATER_S,
            )

    async def read(self, work: NodeWork) -> _Reading:
        payload = evm_tx.recorded_payload(work)
        route = _Route.from_payload(payload)
        tx = await evm_tx.read_recorded(self._evm.leg_rpc(route.leg), route.leg, work)
        if tx.status != "final":
            return _Reading(tx.status, tx.evidence, tx.tx_hash, tx.wait_s)
        problem = _burn_problem(route, tx)
        if problem is not None:
            return _Reading("mismatch", tx.evidence | problem, tx.tx_hash)
        assert tx.tx_hash is not None
        return await self._attestation(route, tx.tx_hash, tx.evidence)

    async def _attestation(self, route: _Route, tx_hash: str, burn: JsonObject) -> _Reading:
        """Iris's word on the final burn ``tx_hash``."""
        answer = await self._iris_client().messages(route.source_domain, tx_hash)
        evidence: JsonObject = {"burn": burn, "iris": answer.status.value}
        if answer.status is IrisStatus.RATE_LIMITED:
            held = evidence | {"throttled": f"Iris: {answer.detail or 'HTTP 429'}"}
            return _Reading(THROTTLED_READING, held, tx_hash, answer.retry_after)
        if answer.status is IrisStatus.UNAVAILABLE:
            return _Reading(
                "unattested", evidence | {"detail": answer.detail}, tx_hash, evm_tx.RETRY_LATER_S
            )
        if answer.status is not IrisStatus.COMPLETE:
            return _Reading("unattested", evidence | {"detail": answer.detail}, tx_hash)
        if len(answer.messages) != 1:
            return _Reading(
                "mismatch",
                evidence | {"problem": f"Iris answers {len(answer.messages)} messages, not one"},
                tx_hash,
            )
        entry = answer.messages[0]
        try:
            message, body, raw = parse_message(entry.get("message"))
            attestation = bytes.fromhex(str(entry.get("attestation", ""))[2:])
        except ValueError as exc:
            return _Reading("mismatch", evidence | {"problem": f"Iris's message: {exc}"}, tx_hash)
        expected = {
            "source domain": (message.source_domain, route.source_domain),
            "destination domain": (message.destination_domain, route.destination_domain),
            "sender": (message.sender, address_to_bytes32(route.token_messenger)),
            "recipient": (message.recipient, address_to_bytes32(route.destination_token_messenger)),
            "burn token": (body.burn_token, address_to_bytes32(route.token_address)),
            "mint recipient": (body.mint_recipient, address_to_bytes32(route.mint_recipient)),
            "amount": (body.amount, route.amount_units),
            "message sender": (body.message_sender, address_to_bytes32(route.leg.sender)),
            "max fee": (body.max_fee, route.max_fee_units),
        }
        fee_over = ["fee executed above max fee"] if body.fee_executed > body.max_fee else []
        wrong = attested_problems(expected, fee_over, message, attestation, "nonce not filled")
        if wrong:
            return _Reading(
                "mismatch",
                evidence
                | {"problem": "Iris attests a message that is not this burn's", "fields": wrong},
                tx_hash,
            )
        return _Reading(
            "attested",
            {
                "message": "0x" + raw.hex(),
                "attestation": "0x" + attestation.hex(),
                "source_domain": route.source_domain,
                "source_chain": route.leg.chain_key,
                "source_tx_hash": tx_hash,
                "nonce": "0x" + message.nonce.hex(),
                "amount": str(body.amount),
                "mint_recipient": route.mint_recipient,
                "destination_domain": route.destination_domain,
                "destination_chain": route.destination_chain,
                "fee_executed": str(body.fee_executed),
                "finality_threshold_executed": message.finality_threshold_executed,
                "burn": burn,
            },
            tx_hash,
        )

    async def health(self) -> HealthResult:
        return await iris_health(await super().health(), self._env)


def attested_problems(
    expected: Mapping[str, tuple[object, object]],
    also: list[str],
    message: CctpMessage,
    attestation: bytes,
    unfilled: str,
) -> list[str]:
    """What an attested CCTP v2 message gets wrong, by name: each ``expected``
    field whose value (got, want) differs, ``also`` (what the caller found
    besides), the nonce not filled (``unfilled`` says so), an attestation that
    is not whole 65-byte signatures."""
    wrong = [name for name, (got, want) in expected.items() if got != want] + also
    if message.nonce == bytes(32):
        wrong.append(unfilled)
    if not attestation or len(attestation) % 65:
        wrong.append("attestation length")
    return wrong


def _burn_problem(route: _Route, tx: evm_tx.TxReading) -> JsonObject | None:
    """None when the final receipt holds exactly one DepositForBurn of the
    TokenMessengerV2, and it is the intent's; else what is wrong."""
    assert tx.receipt is not None
    burns = [
        event
        for log in tx.receipt.logs
        if log.address == route.token_messenger
        and (event := decode_deposit_for_burn(log)) is not None
    ]
    expected = [
        b
        for b in burns
        if b.burn_token == route.token_address
        and b.depositor == route.leg.sender
        and b.amount == route.amount_units
        and b.mint_recipient == address_to_bytes32(route.mint_recipient)
        and b.destination_domain == route.destination_domain
        and b.max_fee == route.max_fee_units
        and b.min_finality_threshold == route.min_finality_threshold
    ]
    if len(burns) == 1 and len(expected) == 1:
        return None
    return {
        "problem": "the receipt does not show exactly the burn the intent recorded",
        "deposit_for_burn_logs": len(burns),
        "matching": len(expected),
    }


async def iris_health(chains: HealthResult, env: Mapping[str, str]) -> HealthResult:
    """The chains' health, and Iris answering: unreachable or failing is DOWN
    (no new burn starts while its attestation cannot be fetched; the burns in
    flight keep being observed), rate limited (429) is DEGRADED."""
    detail = dict(chains.detail)
    url = env.get(IRIS_URL_ENV)
    if not url:
        detail["iris"] = f"{IRIS_URL_ENV} is not set in this runner"
        return HealthResult(evm_tx.worse(chains.status, HealthStatus.DEGRADED), detail)
    client = IrisClient(url, timeout=5.0)
    try:
        problem = await client.reachable()
    finally:
        await client.aclose()
    detail["iris"] = problem or "answering"
    if problem is None:
        return HealthResult(chains.status, detail)
    limited = problem == "HTTP 429"
    return HealthResult(
        evm_tx.worse(chains.status, HealthStatus.DEGRADED if limited else HealthStatus.DOWN), detail
    )
