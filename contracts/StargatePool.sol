// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {MockUSDC} from "./MockUSDC.sol";

/// @notice The OFT interface's structs (LayerZero's IOFT), as the pool's ABI carries them.
struct SendParam {
    uint32 dstEid;
    bytes32 to;
    uint256 amountLD;
    uint256 minAmountLD;
    bytes extraOptions;
    bytes composeMsg;
    bytes oftCmd;
}

struct MessagingFee {
    uint256 nativeFee;
    uint256 lzTokenFee;
}

struct MessagingReceipt {
    bytes32 guid;
    uint64 nonce;
    MessagingFee fee;
}

struct OFTReceipt {
    uint256 amountSentLD;
    uint256 amountReceivedLD;
}

struct OFTLimit {
    uint256 minAmountLD;
    uint256 maxAmountLD;
}

struct OFTFeeDetail {
    int256 feeAmountLD;
    string description;
}

/// @title StargatePool
/// @notice A local double of a Stargate v2 pool for one token (USDC), with what
/// LayerZero and Stargate's TokenMessaging do for it folded in: one contract per
/// chain, its endpoint id fixed at deploy.
///
/// Sending (the OFT interface): `quoteOFT`, `quoteSend`, `send`. The token is
/// pulled from the sender (an allowance to the pool is needed), a fee of
/// `feeBps` kept, the rest owed on the destination. An empty `oftCmd` is a
/// taxi: a message at once, its guid in `OFTSent` and the receipt. A one-byte
/// `oftCmd` rides the bus: a ticket (`BusRode`), the `OFTSent` and the receipt
/// carry an empty guid (as the real rideBus's receipt), and the guid appears
/// when the bus is driven (`BusDriven`): by anyone calling `driveBus` with the
/// drive fee, or by the ride that fills it. Messages and tickets are kept
/// readable (`taxiMessage`, `tickets`) for the relayer, where LayerZero would
/// carry them in the packet.
///
/// Delivery on the destination, by the relayer's key only, each guid once:
/// `deliverTaxi` / `deliverBus` pay each receiver (`OFTReceived`); a payout the
/// pool cannot make (short of the token, or payouts held by the owner to test
/// the failure) is cached (`UnreceivedTokenCached`) and `retryReceiveToken`
/// pays it later, by anyone, once.
contract StargatePool {
    uint16 public constant MAX_FEE_BPS = 1000;

    MockUSDC public immutable token;
    uint32 public immutable localEid;
    address public immutable owner;

    address public relayer;
    uint16 public feeBps;
    uint256 public taxiFee;
    uint256 public busFare;
    uint256 public driveFee;
    uint8 public busCapacity;
    bool public payoutsHeld;

    mapping(uint32 eid => address pool) public peers;
    mapping(uint32 eid => uint256 amountLD) public credits;
    mapping(uint32 eid => uint64 nonce) public outboundNonce;

    struct TaxiMessage {
        uint32 dstEid;
        uint64 nonce;
        address receiver;
        uint256 amountLD;
    }

    mapping(bytes32 guid => TaxiMessage message) internal taxis;

    struct Ticket {
        address receiver;
        uint256 amountLD;
    }

    struct BusQueue {
        uint72 nextTicketId;
        uint72 firstWaiting;
        uint64 waitingSince;
    }

    mapping(uint32 eid => BusQueue queue) public buses;
    mapping(uint32 eid => mapping(uint72 ticketId => Ticket ticket)) public tickets;

    mapping(uint32 srcEid => mapping(bytes32 guid => bool done)) public delivered;
    mapping(bytes32 guid => mapping(uint8 index => bytes32 hash)) public unreceivedTokens;

    event OFTSent(
        bytes32 indexed guid,
        uint32 dstEid,
        address indexed fromAddress,
        uint256 amountSentLD,
        uint256 amountReceivedLD
    );
    event OFTReceived(bytes32 indexed guid, uint32 srcEid, address indexed toAddress, uint256 amountReceivedLD);
    event BusRode(uint32 dstEid, uint72 ticketId, uint80 fare, bytes passenger);
    event BusDriven(uint32 dstEid, uint72 startTicketId, uint8 numPassengers, bytes32 guid);
    event UnreceivedTokenCached(
        bytes32 guid,
        uint8 index,
        uint32 srcEid,
        address receiver,
        uint256 amountLD,
        bytes composeMsg
    );
    event PayoutsHeld(bool held);

    error NotOwner(address caller);
    error NotRelayer(address caller);
    error InvalidPath(uint32 eid);
    error InvalidAmount();
    error InvalidReceiver();
    error InvalidOftCmd();
    error ComposeUnsupported();
    error SlippageTooHigh(uint256 amountReceivedLD, uint256 minAmountLD);
    error CreditExceeded(uint32 dstEid, uint256 amountLD, uint256 creditLD);
    error LzTokenUnavailable();
    error InsufficientFee(uint256 paid, uint256 needed);
    error InvalidMsgValue(uint256 value, uint256 nativeFee);
    error BusEmpty(uint32 dstEid);
    error AlreadyDelivered(uint32 srcEid, bytes32 guid);
    error UnreceivedTokenNotFound();
    error OutflowFailed();
    error InvalidPassengers();
    error RefundFailed();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    modifier onlyRelayer() {
        if (msg.sender != relayer) revert NotRelayer(msg.sender);
        _;
    }

    constructor(address _token, uint32 _localEid, address _relayer) {
        token = MockUSDC(_token);
        localEid = _localEid;
        owner = msg.sender;
        relayer = _relayer;
        feeBps = 1;
        taxiFee = 0.0001 ether;
        busFare = 0.00002 ether;
        driveFee = 0.0001 ether;
        busCapacity = 10;
    }

    // -- the owner's settings ---------------------------------------------------

    function setPeer(uint32 _eid, address _pool) external onlyOwner {
        if (_eid == localEid) revert InvalidPath(_eid);
        peers[_eid] = _pool;
    }

    function setCredit(uint32 _eid, uint256 _amountLD) external onlyOwner {
        credits[_eid] = _amountLD;
    }

    function setRelayer(address _relayer) external onlyOwner {
        relayer = _relayer;
    }

    function setFees(uint16 _feeBps, uint256 _taxiFee, uint256 _busFare, uint256 _driveFee) external onlyOwner {
        if (_feeBps > MAX_FEE_BPS) revert InvalidAmount();
        feeBps = _feeBps;
        taxiFee = _taxiFee;
        busFare = _busFare;
        driveFee = _driveFee;
    }

    function setBusCapacity(uint8 _capacity) external onlyOwner {
        if (_capacity == 0) revert InvalidAmount();
        busCapacity = _capacity;
    }

    /// @notice While held, every payout is cached instead of made (failure injection).
    function setPayoutsHeld(bool _held) external onlyOwner {
        payoutsHeld = _held;
        emit PayoutsHeld(_held);
    }

    // -- quotes -------------------------------------------------------------------

    function quoteOFT(SendParam calldata _sendParam)
        external
        view
        returns (OFTLimit memory limit, OFTFeeDetail[] memory feeDetails, OFTReceipt memory receipt)
    {
        _checkPath(_sendParam.dstEid);
        limit = OFTLimit(1, credits[_sendParam.dstEid]);
        uint256 fee = _protocolFee(_sendParam.amountLD);
        feeDetails = new OFTFeeDetail[](1);
        feeDetails[0] = OFTFeeDetail(-int256(fee), "protocol fee");
        receipt = OFTReceipt(_sendParam.amountLD, _sendParam.amountLD - fee);
    }

    function quoteSend(SendParam calldata _sendParam, bool _payInLzToken)
        external
        view
        returns (MessagingFee memory fee)
    {
        _checkPath(_sendParam.dstEid);
        if (_payInLzToken) revert LzTokenUnavailable();
        fee = MessagingFee(_isTaxi(_sendParam.oftCmd) ? taxiFee : busFare, 0);
    }

    function quoteDriveBus(uint32 _dstEid) external view returns (MessagingFee memory fee) {
        _checkPath(_dstEid);
        fee = MessagingFee(driveFee, 0);
    }

    function taxiMessage(bytes32 _guid)
        external
        view
        returns (uint32 dstEid, uint64 nonce, address receiver, uint256 amountLD)
    {
        TaxiMessage storage m = taxis[_guid];
        return (m.dstEid, m.nonce, m.receiver, m.amountLD);
    }

    // -- sending --------------------------------------------------------------------

    function send(SendParam calldata _sendParam, MessagingFee calldata _fee, address _refundAddress)
        external
        payable
        returns (MessagingReceipt memory msgReceipt, OFTReceipt memory oftReceipt)
    {
        uint32 dstEid = _sendParam.dstEid;
        _checkPath(dstEid);
        if (_sendParam.amountLD == 0) revert InvalidAmount();
        if (_sendParam.composeMsg.length > 0) revert ComposeUnsupported();
        address receiver = _toAddress(_sendParam.to);
        bool taxi = _isTaxi(_sendParam.oftCmd);
        if (_fee.lzTokenFee > 0) revert LzTokenUnavailable();
        if (msg.value != _fee.nativeFee) revert InvalidMsgValue(msg.value, _fee.nativeFee);
        uint256 needed = taxi ? taxiFee : busFare;
        if (_fee.nativeFee < needed) revert InsufficientFee(_fee.nativeFee, needed);

        uint256 fee = _protocolFee(_sendParam.amountLD);
        oftReceipt = OFTReceipt(_sendParam.amountLD, _sendParam.amountLD - fee);
        if (oftReceipt.amountReceivedLD < _sendParam.minAmountLD) {
            revert SlippageTooHigh(oftReceipt.amountReceivedLD, _sendParam.minAmountLD);
        }
        uint256 credit = credits[dstEid];
        if (oftReceipt.amountReceivedLD > credit) revert CreditExceeded(dstEid, _sendParam.amountLD, credit);
        credits[dstEid] = credit - oftReceipt.amountReceivedLD;
        if (!token.transferFrom(msg.sender, address(this), _sendParam.amountLD)) revert InvalidAmount();

        if (taxi) {
            msgReceipt = _message(dstEid, MessagingFee(needed, 0));
            taxis[msgReceipt.guid] = TaxiMessage(dstEid, msgReceipt.nonce, receiver, oftReceipt.amountReceivedLD);
        } else {
            msgReceipt.fee = MessagingFee(needed, 0);
            _rideBus(dstEid, receiver, oftReceipt.amountReceivedLD, needed);
        }
        emit OFTSent(msgReceipt.guid, dstEid, msg.sender, oftReceipt.amountSentLD, oftReceipt.amountReceivedLD);
        if (_fee.nativeFee > needed) {
            (bool ok, ) = payable(_refundAddress).call{value: _fee.nativeFee - needed}("");
            if (!ok) revert RefundFailed();
        }
    }

    /// @notice Drive the bus to `_dstEid` with every passenger waiting: anyone, with the drive fee.
    function driveBus(uint32 _dstEid) external payable returns (MessagingReceipt memory receipt) {
        _checkPath(_dstEid);
        if (msg.value < driveFee) revert InsufficientFee(msg.value, driveFee);
        receipt = _drive(_dstEid);
    }

    function _rideBus(uint32 _dstEid, address _receiver, uint256 _amountLD, uint256 _fare) internal {
        BusQueue storage queue = buses[_dstEid];
        uint72 ticketId = queue.nextTicketId;
        if (ticketId == queue.firstWaiting) queue.waitingSince = uint64(block.timestamp);
        queue.nextTicketId = ticketId + 1;
        tickets[_dstEid][ticketId] = Ticket(_receiver, _amountLD);
        emit BusRode(_dstEid, ticketId, uint80(_fare), abi.encode(_receiver, _amountLD));
        if (queue.nextTicketId - queue.firstWaiting >= busCapacity) _drive(_dstEid);
    }

    function _drive(uint32 _dstEid) internal returns (MessagingReceipt memory receipt) {
        BusQueue storage queue = buses[_dstEid];
        uint72 start = queue.firstWaiting;
        uint72 count = queue.nextTicketId - start;
        if (count == 0) revert BusEmpty(_dstEid);
        if (count > type(uint8).max) count = type(uint8).max;
        receipt = _message(_dstEid, MessagingFee(driveFee, 0));
        queue.firstWaiting = start + count;
        queue.waitingSince = queue.firstWaiting == queue.nextTicketId ? 0 : uint64(block.timestamp);
        emit BusDriven(_dstEid, start, uint8(count), receipt.guid);
    }

    function _message(uint32 _dstEid, MessagingFee memory _fee) internal returns (MessagingReceipt memory) {
        uint64 nonce = ++outboundNonce[_dstEid];
        bytes32 guid = keccak256(
            abi.encodePacked(nonce, localEid, bytes32(uint256(uint160(address(this)))), _dstEid,
                             bytes32(uint256(uint160(peers[_dstEid]))))
        );
        return MessagingReceipt(guid, nonce, _fee);
    }

    // -- delivery (the relayer's) ---------------------------------------------------

    function deliverTaxi(bytes32 _guid, uint32 _srcEid, address _receiver, uint256 _amountLD) external onlyRelayer {
        _accept(_srcEid, _guid);
        _pay(_guid, 0, _srcEid, _receiver, _amountLD);
    }

    function deliverBus(
        bytes32 _guid,
        uint32 _srcEid,
        address[] calldata _receivers,
        uint256[] calldata _amountsLD
    ) external onlyRelayer {
        if (_receivers.length == 0 || _receivers.length != _amountsLD.length || _receivers.length > type(uint8).max) {
            revert InvalidPassengers();
        }
        _accept(_srcEid, _guid);
        for (uint256 i = 0; i < _receivers.length; i++) {
            _pay(_guid, uint8(i), _srcEid, _receivers[i], _amountsLD[i]);
        }
    }

    /// @notice Pay a cached payout again: anyone, once.
    function retryReceiveToken(
        bytes32 _guid,
        uint8 _index,
        uint32 _srcEid,
        address _receiver,
        uint256 _amountLD,
        bytes calldata _composeMsg
    ) external {
        if (unreceivedTokens[_guid][_index] != keccak256(abi.encodePacked(_srcEid, _receiver, _amountLD, _composeMsg))) {
            revert UnreceivedTokenNotFound();
        }
        delete unreceivedTokens[_guid][_index];
        if (!_outflow(_receiver, _amountLD)) revert OutflowFailed();
        emit OFTReceived(_guid, _srcEid, _receiver, _amountLD);
    }

    function _accept(uint32 _srcEid, bytes32 _guid) internal {
        if (peers[_srcEid] == address(0)) revert InvalidPath(_srcEid);
        if (delivered[_srcEid][_guid]) revert AlreadyDelivered(_srcEid, _guid);
        delivered[_srcEid][_guid] = true;
    }

    function _pay(bytes32 _guid, uint8 _index, uint32 _srcEid, address _receiver, uint256 _amountLD) internal {
        if (_outflow(_receiver, _amountLD)) {
            emit OFTReceived(_guid, _srcEid, _receiver, _amountLD);
        } else {
            unreceivedTokens[_guid][_index] = keccak256(abi.encodePacked(_srcEid, _receiver, _amountLD, ""));
            emit UnreceivedTokenCached(_guid, _index, _srcEid, _receiver, _amountLD, "");
        }
    }

    function _outflow(address _receiver, uint256 _amountLD) internal returns (bool) {
        if (payoutsHeld || _receiver == address(0)) return false;
        if (token.balanceOf(address(this)) < _amountLD) return false;
        (bool ok, bytes memory data) =
            address(token).call(abi.encodeWithSelector(MockUSDC.transfer.selector, _receiver, _amountLD));
        return ok && (data.length == 0 || abi.decode(data, (bool)));
    }

    // -- helpers ----------------------------------------------------------------------

    function _checkPath(uint32 _eid) internal view {
        if (_eid == localEid || peers[_eid] == address(0)) revert InvalidPath(_eid);
    }

    function _isTaxi(bytes calldata _oftCmd) internal pure returns (bool) {
        if (_oftCmd.length == 0) return true;
        if (_oftCmd.length == 1) return false;
        revert InvalidOftCmd();
    }

    function _toAddress(bytes32 _to) internal pure returns (address) {
        if (uint256(_to) >> 160 != 0 || _to == bytes32(0)) revert InvalidReceiver();
        return address(uint160(uint256(_to)));
    }

    function _protocolFee(uint256 _amountLD) internal view returns (uint256) {
        return (_amountLD * feeBps) / 10_000;
    }
}
