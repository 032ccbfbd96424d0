"""What the Stargate tests share (tests/chains): one chain's pool, token and
accounts through web3, the pool's events decoded from a receipt or the logs,
and a revert's custom error by name."""

from __future__ import annotations

from typing import Any

from eth_utils.crypto import keccak
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractCustomError, ContractLogicError
from web3.logs import DISCARD

from qtg_runner.chains.local import RunningChain, load_artifact
from qtg_runner.chains.stargate import RELAYER_ACCOUNT_INDEX, stargate_eid


def _error_selectors() -> dict[str, str]:
    out = {}
    for entry in load_artifact("StargatePool")["abi"]:
        if entry["type"] == "error":
            signature = f"{entry['name']}({','.join(i['type'] for i in entry['inputs'])})"
            out["0x" + keccak(text=signature)[:4].hex()] = entry["name"]
    return out


ERRORS = _error_selectors()


def revert_name(call: Any, tx: dict[str, Any]) -> str:
    """The custom error a call reverts with (eth_call), by name."""
    try:
        call.call(tx)
    except ContractCustomError as exc:
        data = str(exc.data if isinstance(exc.data, str) else exc.args[0])
        return ERRORS.get(data[:10], data)
    except ContractLogicError as exc:
        return str(exc)
    raise AssertionError("the call did not revert")


class Side:
    """One chain's web3, pool, token and accounts (anvil's unlocked ones)."""

    def __init__(self, chain: RunningChain) -> None:
        self.chain = chain
        self.w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
        accounts = self.w3.eth.accounts
        self.owner = accounts[0]
        self.relayer = accounts[RELAYER_ACCOUNT_INDEX]
        self.eid = stargate_eid(chain)
        self.pool = self.w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["StargatePool"]),
            abi=load_artifact("StargatePool")["abi"],
        )
        self.usdc = self.w3.eth.contract(
            address=Web3.to_checksum_address(chain.contracts["MockUSDC"]),
            abi=load_artifact("MockUSDC")["abi"],
        )

    def mined(self, tx_hash: Any) -> Any:
        receipt = self.w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10, self.chain.block_time * 10), poll_latency=0.1
        )
        assert receipt["status"] == 1, receipt
        return receipt

    def events(self, receipt: Any, name: str) -> list[Any]:
        return [
            e["args"]
            for e in getattr(self.pool.events, name)().process_receipt(receipt, errors=DISCARD)
        ]

    def balance(self, address: str) -> int:
        return int(self.usdc.functions.balanceOf(Web3.to_checksum_address(address)).call())

    def fund(self, account: str, amount: int) -> None:
        """Mocked USDC minted to ``account`` and the pool allowed to pull it."""
        self.mined(self.usdc.functions.mint(account, amount).transact({"from": self.owner}))
        self.mined(
            self.usdc.functions.approve(self.pool.address, 2**256 - 1).transact({"from": account})
        )


def send_param(
    dst_eid: int, to: str, amount: int, min_amount: int, bus: bool = False
) -> tuple[Any, ...]:
    return (
        dst_eid,
        bytes(12) + bytes.fromhex(to[2:]),
        amount,
        min_amount,
        b"",
        b"",
        b"\x00" if bus else b"",
    )
