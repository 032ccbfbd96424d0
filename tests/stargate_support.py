"""What the Stargate tests share (tests/chains): one chain's Stargate contracts
(the pool, TokenMessaging, LayerZero's endpoint and message library: the
published ones, qtg_world.chains.stargate), token and accounts through web3,
their events decoded from a receipt or the logs, a revert's custom error by
name, the bus driven and the packets delivered by hand as the relayer does,
and a payout made impossible for a while (the pool's USDC lent out)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from eth_utils.crypto import keccak
from web3 import HTTPProvider, Web3
from web3.exceptions import ContractCustomError, ContractLogicError
from web3.logs import DISCARD

from qtg_world.chains import layerzero
from qtg_world.chains.local import RunningChain, load_artifact, rpc
from qtg_world.chains.stargate import (
    RELAYER_ACCOUNT_INDEX,
    pool_abi,
    stargate_eid,
    token_messaging_abi,
)


def _error_selectors() -> dict[str, str]:
    out = {}
    abis = (
        pool_abi(),
        token_messaging_abi(),
        layerzero.npm_artifact(*layerzero.ENDPOINT_ARTIFACT)["abi"],
        layerzero.npm_artifact(*layerzero.SIMPLE_LIB_ARTIFACT)["abi"],
    )
    for abi in abis:
        for entry in abi:
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
    """One chain's web3, Stargate and LayerZero contracts, token and accounts
    (anvil's unlocked ones)."""

    def __init__(self, chain: RunningChain) -> None:
        self.chain = chain
        self.w3 = Web3(HTTPProvider(chain.rpc_url, request_kwargs={"timeout": 10}))
        accounts = self.w3.eth.accounts
        self.owner = accounts[0]
        self.relayer = accounts[RELAYER_ACCOUNT_INDEX]
        self.eid = stargate_eid(chain)
        self.pool = self._at("StargatePool", pool_abi())
        self.tm = self._at("TokenMessaging", token_messaging_abi())
        self.endpoint = layerzero.endpoint_contract(self.w3, chain)
        self.lib = layerzero.lib_contract(self.w3, chain)
        self.usdc = self._at("MockUSDC", load_artifact("MockUSDC")["abi"])

    def _at(self, name: str, abi: list[Any]) -> Any:
        address = Web3.to_checksum_address(self.chain.contracts[name])
        return self.w3.eth.contract(address=address, abi=abi)

    def mined(self, tx_hash: Any) -> Any:
        receipt = self.w3.eth.wait_for_transaction_receipt(
            tx_hash, timeout=max(10, self.chain.block_time * 10), poll_latency=0.1
        )
        assert receipt["status"] == 1, receipt
        return receipt

    def events(self, receipt: Any, name: str, contract: Any = None) -> list[Any]:
        """``name`` events of ``contract`` (the pool by default) in ``receipt``."""
        source = self.pool if contract is None else contract
        return [
            e["args"]
            for e in getattr(source.events, name)().process_receipt(receipt, errors=DISCARD)
            if e["address"] == source.address
        ]

    def topics(self, receipt: Any, contract: Any) -> set[str]:
        """The events (topic 0) ``contract`` emitted in ``receipt``, its ABI aside."""
        return {
            "0x" + bytes(log["topics"][0]).hex()
            for log in receipt["logs"]
            if log["address"] == contract.address and log["topics"]
        }

    def balance(self, address: str) -> int:
        return int(self.usdc.functions.balanceOf(Web3.to_checksum_address(address)).call())

    def fund(self, account: str, amount: int) -> None:
        """Mocked USDC minted to ``account`` and the pool allowed to pull it."""
        self.mined(self.usdc.functions.mint(account, amount).transact({"from": self.owner}))
        self.mined(
            self.usdc.functions.approve(self.pool.address, 2**256 - 1).transact({"from": account})
        )

    def packets(self, to: Side, from_block: int = 0) -> list[layerzero.Packet]:
        """The packets this chain's endpoint sent to ``to`` since ``from_block``."""
        head = int(self.w3.eth.block_number)
        found = layerzero.packets_sent(self.w3, self.endpoint.address, from_block, head)
        return [p for p in found if p.dst_eid == to.eid]

    def relay(self, to: Side) -> list[Any]:
        """Every packet this chain sent to ``to`` verified and executed there (in
        nonce order, as the relayer does; those executed before are left):
        the lzReceive receipts."""
        receipts = []
        for packet in sorted(self.packets(to), key=lambda p: p.nonce):
            receipt = layerzero.deliver_now(packet, to.chain, to.relayer)
            if receipt is not None:
                receipts.append(receipt)
        return receipts

    def waiting(self, to: Side) -> tuple[int, int]:
        """The bus to ``to``: (its first waiting ticket, how many wait)."""
        _max, _fare, _drop, waiting, first = self.tm.functions.busQueues(to.eid).call()
        return int(first), int(waiting)

    def passengers(self, to: Side) -> bytes:
        """The waiting passengers of the bus to ``to``, as their BusRode gave them."""
        first, waiting = self.waiting(to)
        rides = {
            int(e["args"]["ticketId"]): bytes(e["args"]["passenger"])
            for e in self.tm.events.BusRode().get_logs(from_block=0)
            if e["args"]["dstEid"] == to.eid
        }
        return b"".join(rides[t] for t in range(first, first + waiting))

    def drive(self, to: Side, driver: str) -> Any:
        """The bus to ``to`` driven by ``driver`` with every waiting passenger,
        paying quoteDriveBus: its receipt."""
        passengers = self.passengers(to)
        fee = self.tm.functions.quoteDriveBus(to.eid, passengers).call()[0]
        return self.mined(
            self.tm.functions.driveBus(to.eid, passengers).transact({"from": driver, "value": fee})
        )

    @contextlib.contextmanager
    def payouts_held(self) -> Iterator[None]:
        """Within the block the pool holds no USDC (lent to the owner, sent as
        the pool through anvil's impersonation), so a payout it owes fails and
        is cached; after it, the pool has its USDC back."""
        pool = self.pool.address
        held = self.balance(pool)
        gas = self.w3.eth.get_balance(pool)
        rpc(self.chain.rpc_url, "anvil_impersonateAccount", [pool])
        rpc(self.chain.rpc_url, "anvil_setBalance", [pool, hex(gas + 10**18)])
        try:
            self.mined(self.usdc.functions.transfer(self.owner, held).transact({"from": pool}))
        finally:
            rpc(self.chain.rpc_url, "anvil_stopImpersonatingAccount", [pool])
            rpc(self.chain.rpc_url, "anvil_setBalance", [pool, hex(gas)])
        try:
            yield
        finally:
            self.mined(self.usdc.functions.transfer(pool, held).transact({"from": self.owner}))


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


# -- the engine side ---------------------------------------------------------------

SCALE = 0.01
"""The tests' time scale: a 60 s taxi lane takes 0.6 s, the relayer's 45 s delay 0.45 s."""

TAXI_LANE, BUS_LANE = "stargate-taxi", "stargate-bus"


def register_stargate(conn: Any, chain_set: Any) -> None:
    """The local chains registered (evm_support.register_world: each chain's
    Stargate row comes with it), the stargate executor, and its two lanes paced
    at the tests' scale: a first look soon after the submit, then often."""
    from decimal import Decimal

    from evm_support import register_world

    from qtg_runner.db import procs
    from qtg_runner.executors.stargate import StargateExecutor

    register_world(conn, chain_set)
    procs.register_executor(
        StargateExecutor.key,
        StargateExecutor.has_side_effect,
        StargateExecutor.node_config_schema,
        StargateExecutor.description,
    ).one(conn)
    for lane, baseline in ((TAXI_LANE, 60), (BUS_LANE, 600)):
        procs.upsert_lane_baseline(
            lane,
            max(4, int(baseline * SCALE)),
            min_poll_seconds=Decimal("0.5"),
            first_poll_fraction=Decimal("0.25"),
            poll_fraction=Decimal("0.125"),
            fatal_factor=100,
        ).one(conn)


def stargate_plan(
    source: str, destination: str, sender: str, recipient: str, mode: str = "taxi"
) -> dict[str, Any]:
    return {
        "nodes": [
            {
                "key": "bridge",
                "executor": "stargate",
                "config": {
                    "lane": TAXI_LANE if mode == "taxi" else BUS_LANE,
                    "source": source,
                    "destination": destination,
                    "from": sender,
                    "to": recipient,
                    "mode": mode,
                    "max_slippage_bps": 10,
                },
                "depends_on": [],
            }
        ]
    }


def start_send(
    conn: Any,
    source: str,
    destination: str,
    sender: str,
    recipient: str,
    amount: Any,
    external_id: str,
    mode: str = "taxi",
) -> tuple[int, int]:
    """alice creates a one-send movement, bob approves it, it starts: its id
    and its node's id."""
    from engine import approve, as_person

    from qtg_runner.db import procs

    with as_person(conn, "alice"):
        created = procs.create_movement(
            external_id, amount, plan=stargate_plan(source, destination, sender, recipient, mode)
        ).one(conn)
    approve(conn, created.movement_id)
    procs.start_approved_movements(1000).one(conn)
    row = conn.execute(
        "SELECT id FROM movement_request_nodes WHERE request_id = %s", (created.movement_id,)
    ).fetchone()
    assert row is not None
    return created.movement_id, int(row[0])


def run_sg_batch(db: Any, batch: Any, chain_set: Any) -> int:
    """One batch of a worker, as a runner login carrying the real stargate
    executor with the local chains' environment."""
    import asyncio

    from evm_support import NETWORK

    from qtg_runner.db.pool import bound_conninfo, open_pool
    from qtg_runner.executors.stargate import StargateExecutor
    from qtg_runner.loop import WorkerContext

    async def scenario() -> int:
        conninfo = bound_conninfo(db.runner_dsn(NETWORK), NETWORK, "sg-test")
        async with open_pool(conninfo, name="sg-test") as pool:
            executor = StargateExecutor(pool, NETWORK, env=chain_set.runner_env())
            ctx = WorkerContext(NETWORK, pool, {executor.key: executor}, "sg-test:1")
            try:
                return int(await batch(ctx, "worker@sg-test:1"))
            finally:
                await executor.aclose()

    return asyncio.run(scenario())


def oft_sent_from(side: Side, sender: str, from_block: int) -> list[Any]:
    """The pool's OFTSent logs from ``sender`` since ``from_block``, decoded."""
    logs = side.pool.events.OFTSent().get_logs(
        from_block=from_block, argument_filters={"fromAddress": Web3.to_checksum_address(sender)}
    )
    return [e["args"] for e in logs]


def oft_received_by(side: Side, recipient: str, from_block: int) -> list[Any]:
    logs = side.pool.events.OFTReceived().get_logs(
        from_block=from_block, argument_filters={"toAddress": Web3.to_checksum_address(recipient)}
    )
    return [e["args"] for e in logs]
