"""What every client of one HTTP endpoint shares: a chain's RPC (EvmRpc), Iris
(IrisClient) and Bybit (BybitClient).

Each is given a shared httpx.AsyncClient (then its caller closes it) or makes
one of its own with the process's one TLS context (qtg_runner.tls), closed by
``aclose`` or by leaving ``async with``; each call goes through the endpoint's
one circuit (qtg_runner.circuit), takes its turn in the endpoint's request
budget (qtg_runner.budget), and is bounded as a whole by ``_deadline``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self
from urllib.parse import urlsplit

import httpx

from qtg_runner.budget import EndpointBudget, endpoint_budget, endpoint_name
from qtg_runner.circuit import Circuit, endpoint_circuit
from qtg_runner.tls import client_ssl_context


def retry_after_s(headers: Mapping[str, str]) -> float | None:
    """A Retry-After header's seconds (an HTTP date is not read: None)."""
    raw = headers.get("retry-after", "").strip()
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 <= value < 86_400 else None


class HttpEndpoint:
    """An endpoint's httpx client, its circuit and the deadline of one exchange.
    ``circuit_key`` is the endpoint's URL (a dictionary key only, never shown),
    ``circuit_name`` how the circuit's messages name it."""

    def __init__(
        self,
        circuit_key: str,
        circuit_name: str,
        *,
        timeout: float,
        client: httpx.AsyncClient | None,
        circuit: Circuit | None,
        budget: EndpointBudget | None,
        budget_kind: str,
    ) -> None:
        self._owns_client = client is None
        self._client = (
            client
            if client is not None
            else httpx.AsyncClient(timeout=timeout, verify=client_ssl_context())
        )
        self._deadline = timeout * 2
        """httpx's timeout bounds each read; this the whole exchange (an answer
        dripped a byte at a time)."""
        self.circuit = circuit or endpoint_circuit(circuit_key, circuit_name)
        self.budget = budget or endpoint_budget(
            circuit_key, endpoint_name(budget_kind, urlsplit(circuit_key).hostname), None
        )
        """The endpoint's request budget in this process (qtg_runner.budget):
        the one given (an executor's, named by its URL's variable), else the
        URL's own at its kind's default rate (``budget_kind``: rpc, iris, venue)."""

    async def aclose(self) -> None:
        """Closes the httpx client when it is this object's own (not a shared one)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
