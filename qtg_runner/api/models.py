"""The request bodies the API accepts, with the examples of docs/operators.md's psql session."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

AMOUNT = re.compile(r"^[0-9]{1,32}(\.[0-9]{1,6})?$")

PLAN_EXAMPLE: dict[str, Any] = {
    "nodes": [
        {"key": "burn", "executor": "sim", "config": {"lane": "cctp_fast"}},
        {"key": "mint", "executor": "sim", "config": {"lane": "cctp_fast"}, "depends_on": ["burn"]},
        {
            "key": "deposit",
            "executor": "sim",
            "config": {"lane": "bybit_deposit"},
            "depends_on": ["mint"],
        },
    ]
}
CREATE_EXAMPLE: dict[str, Any] = {
    "external_id": "treasury-2026-11-29-001",
    "amount": "250000",
    "plan": PLAN_EXAMPLE,
}


class MovementCreate(BaseModel):
    """A movement to create: the caller's external id makes creation idempotent
    (the same body again answers the same movement; another body under the same
    id is a 409). The plan is checked by the database (create_movement)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [CREATE_EXAMPLE]})

    external_id: Annotated[str, Field(min_length=1, max_length=200)]
    amount: Annotated[
        str | int,
        Field(description='Decimal, at most 6 places; a string keeps it exact, e.g. "250000.5"'),
    ]
    asset: Annotated[str, Field(pattern=r"^[A-Z0-9]{2,16}$")] = "USDC"
    plan: dict[str, Any] | None = None
    template: Annotated[str | None, Field(max_length=200)] = None
    params: dict[str, Any] | None = None
    expires_at: AwareDatetime | None = None
    callback_url: Annotated[str | None, Field(max_length=2048)] = None
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)] = 0

    @model_validator(mode="before")
    @classmethod
    def _few_fields(cls, value: Any) -> Any:
        # each unknown field is an error of its own: refuse a flood of them at once
        if isinstance(value, dict) and len(value) > len(cls.model_fields):
            raise ValueError(
                f"a movement has at most {len(cls.model_fields)} fields, this one has {len(value)}"
            )
        return value

    @field_validator("amount", mode="before")
    @classmethod
    def _not_a_boolean(cls, value: Any) -> Any:
        # JSON true would otherwise pass as the integer 1: one USDC nobody wrote
        if isinstance(value, bool):
            raise ValueError("an amount is a decimal string or a number, not true or false")
        return value

    @field_validator("amount")
    @classmethod
    def _amount(cls, value: str | int) -> str:
        text = str(value)
        if not AMOUNT.match(text) or Decimal(text) <= 0:
            raise ValueError('a positive decimal with at most 6 places, e.g. "250000.5"')
        return text

    def decimal_amount(self) -> Decimal:
        return Decimal(str(self.amount))


class MovementBatch(BaseModel):
    """Up to 1,000 movements created in one transaction (create_movements): each
    item is a movement as POST /v1/movements takes it; one bad item refuses the
    whole batch, its index in the problem's detail."""

    model_config = ConfigDict(extra="forbid")

    items: Annotated[list[MovementCreate], Field(min_length=1, max_length=1000)]


class Cancel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"reason": "wrong destination"}]}
    )

    reason: Annotated[str | None, Field(max_length=4096)] = None


class PrioritySet(BaseModel):
    """A movement's new priority (set_priority): higher is claimed sooner; the
    bounds create_movement takes. The same priority again changes nothing."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"priority": 10, "reason": "payroll is due at noon"}]},
    )

    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1, strict=True)]
    reason: Annotated[str, Field(max_length=4096)]


class Reasoned(BaseModel):
    """What an operator's action on a node or an alert carries: why (audited)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"reason": "the transaction was dropped by every node"}]},
    )

    reason: Annotated[str, Field(min_length=1, max_length=4096)]


class PauseSet(BaseModel):
    """A pause (trip_breaker): a scope's READY nodes get no new claims until
    another operator resumes it, or for_seconds pass."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"scope": "chain", "name": "base", "reason": "the sequencer is down"},
                {"scope": "network", "name": "*", "reason": "incident", "for_seconds": 3600},
            ]
        },
    )

    scope: Literal["movement", "lane", "venue", "chain", "network"]
    name: Annotated[str, Field(max_length=200)]
    reason: Annotated[str, Field(max_length=4096)]
    for_seconds: Annotated[int | None, Field(ge=1, le=30 * 86400, strict=True)] = None


class CallbackTargetProposal(BaseModel):
    """A receiver of signed callbacks, proposed by one operator and applied when a
    second approves it (POST /v1/proposals/{id}/approve)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "name": "treasury-ops",
                    "url": "https://hooks.example.com/qtg",
                    "secret_ref": "env:QTG_CB_TREASURY_OPS",
                    "allow_private": False,
                    "enabled": True,
                }
            ]
        },
    )

    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_-]{0,62}$")]
    url: Annotated[str, Field(min_length=8, max_length=2048)]
    secret_ref: Annotated[str, Field(min_length=5, max_length=140)]
    allow_private: bool = False
    enabled: bool = True
