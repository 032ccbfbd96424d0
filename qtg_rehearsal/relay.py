"""The read-only relay between a fork and the chain it forks: anvil is given
the relay's loopback URL, never the chain's own RPC URL (which may carry the
provider's API key: a command line is readable by every user of the
machine, and anvil writes its fork URL to its log).

The relay forwards to the real RPC only the methods that read the chain's
state (READ_METHODS, single or batched), and answers every other with a
JSON-RPC error: whatever is asked of a fork, nothing but reads ever reaches
the real chain.
"""

from __future__ import annotations

from typing import Any

import httpx

from qtg_rehearsal.loopback import LoopbackJsonRpc, error
from qtg_runner.chains.evm_rpc import redact_url

READ_METHODS = frozenset(
    {
        "eth_blockNumber",
        "eth_call",
        "eth_chainId",
        "eth_feeHistory",
        "eth_gasPrice",
        "eth_getBalance",
        "eth_getBlockByHash",
        "eth_getBlockByNumber",
        "eth_getCode",
        "eth_getLogs",
        "eth_getProof",
        "eth_getStorageAt",
        "eth_getTransactionByHash",
        "eth_getTransactionCount",
        "eth_getTransactionReceipt",
        "eth_maxPriorityFeePerGas",
        "net_version",
        "web3_clientVersion",
    }
)
"""What a fork reads from the chain it forks (anvil's fork backend)."""


class ReadOnlyRelay:
    """``.url`` on loopback relays reads to ``upstream``; ``.stop()``."""

    def __init__(self, upstream: str, timeout: float = 30.0) -> None:
        self._upstream = upstream
        self.display = redact_url(upstream)
        self._client = httpx.Client(timeout=timeout)
        self.refused: list[str] = []
        self._rpc = LoopbackJsonRpc(self.relay, "rehearsal-relay")
        self.url = self._rpc.url

    def relay(self, request: Any) -> Any:
        """One request (or a batch) forwarded, or refused."""
        if isinstance(request, list):
            return [self.relay(r) for r in request]
        if not isinstance(request, dict) or request.get("method") not in READ_METHODS:
            method = request.get("method") if isinstance(request, dict) else None
            self.refused.append(str(method))
            request_id = request.get("id") if isinstance(request, dict) else None
            return error(request_id, -32601, f"{method} is not relayed to the real chain")
        try:
            return self._client.post(self._upstream, json=request).json()
        except (httpx.HTTPError, ValueError) as exc:
            return error(
                request.get("id"), -32603, f"{self.display} did not answer: {type(exc).__name__}"
            )

    def stop(self) -> None:
        self._rpc.stop()
        self._client.close()
