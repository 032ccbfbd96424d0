// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {MessageTransmitterV2} from "./MessageTransmitterV2.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title TokenMessengerV2 (local double)
/// @notice The CCTP v2 token messenger for the local chains, written from the
/// public interface, with the token minter's role folded in: it holds the
/// local <-> remote token links and burns and mints the local MockUSDC through
/// that token's minter role.
///
/// Burn body layout (byte offsets): version u32 at 0, burnToken bytes32 at 4,
/// mintRecipient bytes32 at 36, amount u256 at 68, messageSender bytes32 at 100,
/// maxFee u256 at 132, feeExecuted u256 at 164, expirationBlock u256 at 196, hookData at 228.
///
/// As v2.1 runs it: a burn must allow at least the minimum fee (`minFee`, in
/// 1/1000 basis points of the amount, set by the min fee controller; 0 is no
/// minimum) or it reverts "Insufficient max fee"; a mint past the message's
/// `expirationBlock` (non-zero on fast attestations) reverts "Message expired
/// and must be re-signed", the revert reaching `receiveMessage`'s caller and
/// leaving the nonce unused for a re-attested message.
contract TokenMessengerV2 {
    uint32 public constant messageBodyVersion = 1;
    uint32 public constant FINALITY_THRESHOLD_FINALIZED = 2000;
    // the lowest finality an unfinalized (fast) message may have been attested at
    uint32 public constant TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD = 500;
    uint256 private constant BURN_BODY_LENGTH = 228;
    /// @notice minFee's unit: 1/1000 of a basis point of the amount
    uint256 public constant MIN_FEE_MULTIPLIER = 10_000_000;

    address public immutable owner;
    MessageTransmitterV2 public immutable localMessageTransmitter;
    address public feeRecipient;
    /// @notice who may change minFee (the deployer at first)
    address public minFeeController;
    /// @notice the lowest maxFee a burn may name, in 1/1000 basis points of its amount
    uint256 public minFee;

    /// @notice the TokenMessengerV2 of each remote domain (bytes32(0): none)
    mapping(uint32 => bytes32) public remoteTokenMessengers;
    /// @notice keccak256(abi.encodePacked(remoteDomain, remoteToken)) => local token
    mapping(bytes32 => address) public remoteTokensToLocalTokens;
    /// @notice the most one message may burn of a local token (0: not burnable)
    mapping(address => uint256) public burnLimitsPerMessage;

    event DepositForBurn(
        address indexed burnToken,
        uint256 amount,
        address indexed depositor,
        bytes32 mintRecipient,
        uint32 destinationDomain,
        bytes32 destinationTokenMessenger,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 indexed minFinalityThreshold,
        bytes hookData
    );
    event MintAndWithdraw(
        address indexed mintRecipient, uint256 amount, address indexed mintToken, uint256 feeCollected
    );
    event RemoteTokenMessengerAdded(uint32 domain, bytes32 tokenMessenger);
    event TokenPairLinked(address localToken, uint32 remoteDomain, bytes32 remoteToken);
    event SetBurnLimitPerMessage(address indexed token, uint256 burnLimitPerMessage);
    event FeeRecipientSet(address feeRecipient);
    event MinFeeControllerSet(address minFeeController);
    event MinFeeSet(uint256 minFee);

    constructor(MessageTransmitterV2 transmitter, address feeRecipient_) {
        require(address(transmitter) != address(0), "MessageTransmitter not set");
        require(feeRecipient_ != address(0), "Invalid fee recipient address");
        owner = msg.sender;
        localMessageTransmitter = transmitter;
        feeRecipient = feeRecipient_;
        minFeeController = msg.sender;
        emit MinFeeControllerSet(msg.sender);
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "Caller is not the owner");
        _;
    }

    modifier onlyMinFeeController() {
        require(msg.sender == minFeeController, "Caller is not the min fee controller");
        _;
    }

    // ---------------------------------------------------------------- admin

    function addRemoteTokenMessenger(uint32 domain, bytes32 tokenMessenger) external onlyOwner {
        require(tokenMessenger != bytes32(0), "bytes32(0) not allowed");
        require(remoteTokenMessengers[domain] == bytes32(0), "TokenMessenger already set");
        remoteTokenMessengers[domain] = tokenMessenger;
        emit RemoteTokenMessengerAdded(domain, tokenMessenger);
    }

    function linkTokenPair(address localToken, uint32 remoteDomain, bytes32 remoteToken)
        external
        onlyOwner
    {
        bytes32 key = keccak256(abi.encodePacked(remoteDomain, remoteToken));
        require(remoteTokensToLocalTokens[key] == address(0), "Unable to link token pair");
        remoteTokensToLocalTokens[key] = localToken;
        emit TokenPairLinked(localToken, remoteDomain, remoteToken);
    }

    function setMaxBurnAmountPerMessage(address localToken, uint256 limit) external onlyOwner {
        burnLimitsPerMessage[localToken] = limit;
        emit SetBurnLimitPerMessage(localToken, limit);
    }

    function setFeeRecipient(address feeRecipient_) external onlyOwner {
        require(feeRecipient_ != address(0), "Invalid fee recipient address");
        feeRecipient = feeRecipient_;
        emit FeeRecipientSet(feeRecipient_);
    }

    function setMinFeeController(address controller) external onlyOwner {
        require(controller != address(0), "Zero address not allowed");
        minFeeController = controller;
        emit MinFeeControllerSet(controller);
    }

    /// @notice The minimum fee of every burn from now on, in 1/1000 basis points.
    function setMinFee(uint256 minFee_) external onlyMinFeeController {
        require(minFee_ < MIN_FEE_MULTIPLIER, "Min fee too high");
        minFee = minFee_;
        emit MinFeeSet(minFee_);
    }

    /// @notice The least maxFee a burn of `amount` may name (0 while there is no minimum).
    function getMinFeeAmount(uint256 amount) external view returns (uint256) {
        if (minFee == 0) return 0;
        require(amount > 1, "Amount too low");
        return _minFeeAmount(amount);
    }

    /// @dev minFee's share of `amount`, rounded down but never below one unit
    function _minFeeAmount(uint256 amount) private view returns (uint256) {
        uint256 least = amount * minFee / MIN_FEE_MULTIPLIER;
        return least == 0 ? 1 : least;
    }

    // ---------------------------------------------------------------- burn

    /// @notice Burn `amount` of the caller's `burnToken` (pulled with
    /// transferFrom: approve this contract first) and send the burn message to
    /// `destinationDomain`, to be minted to `mintRecipient` less the fee executed
    /// (at most `maxFee`) once attested at `minFinalityThreshold` or better.
    function depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold
    ) external {
        require(amount > 0, "Amount must be nonzero");
        require(mintRecipient != bytes32(0), "Mint recipient must be nonzero");
        require(maxFee < amount, "Max fee must be less than amount");
        if (minFee > 0) {
            require(maxFee >= _minFeeAmount(amount), "Insufficient max fee");
        }
        bytes32 destinationMessenger = remoteTokenMessengers[destinationDomain];
        require(destinationMessenger != bytes32(0), "No TokenMessenger for domain");
        uint256 limit = burnLimitsPerMessage[burnToken];
        require(limit > 0, "Burn token not supported");
        require(amount <= limit, "Burn amount exceeds per tx limit");

        MockUSDC token = MockUSDC(burnToken);
        require(token.transferFrom(msg.sender, address(this), amount), "Transfer operation failed");
        token.burn(amount);

        bytes memory body = abi.encodePacked(
            messageBodyVersion,
            bytes32(uint256(uint160(burnToken))),
            mintRecipient,
            amount,
            bytes32(uint256(uint160(msg.sender))),
            maxFee,
            uint256(0),
            uint256(0),
            bytes("")
        );
        localMessageTransmitter.sendMessage(
            destinationDomain, destinationMessenger, destinationCaller, minFinalityThreshold, body
        );
        emit DepositForBurn(
            burnToken,
            amount,
            msg.sender,
            mintRecipient,
            destinationDomain,
            destinationMessenger,
            destinationCaller,
            maxFee,
            minFinalityThreshold,
            bytes("")
        );
    }

    // ---------------------------------------------------------------- mint

    function handleReceiveFinalizedMessage(
        uint32 remoteDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    ) external returns (bool) {
        require(finalityThresholdExecuted >= FINALITY_THRESHOLD_FINALIZED, "Unsupported finality");
        _mintFor(remoteDomain, sender, messageBody);
        return true;
    }

    function handleReceiveUnfinalizedMessage(
        uint32 remoteDomain,
        bytes32 sender,
        uint32 finalityThresholdExecuted,
        bytes calldata messageBody
    ) external returns (bool) {
        require(
            finalityThresholdExecuted >= TOKEN_MESSENGER_MIN_FINALITY_THRESHOLD,
            "Unsupported finality threshold"
        );
        _mintFor(remoteDomain, sender, messageBody);
        return true;
    }

    function _mintFor(uint32 remoteDomain, bytes32 sender, bytes calldata body) private {
        require(msg.sender == address(localMessageTransmitter), "Invalid message transmitter");
        require(
            sender != bytes32(0) && remoteTokenMessengers[remoteDomain] == sender,
            "Remote TokenMessenger unsupported"
        );
        require(body.length >= BURN_BODY_LENGTH, "Invalid burn message");
        require(uint32(bytes4(body[0:4])) == messageBodyVersion, "Invalid message body version");
        bytes32 remoteToken = bytes32(body[4:36]);
        address mintRecipient = address(uint160(uint256(bytes32(body[36:68]))));
        uint256 amount = uint256(bytes32(body[68:100]));
        uint256 maxFee = uint256(bytes32(body[132:164]));
        uint256 feeExecuted = uint256(bytes32(body[164:196]));
        uint256 expirationBlock = uint256(bytes32(body[196:228]));
        require(
            expirationBlock == 0 || expirationBlock > block.number,
            "Message expired and must be re-signed"
        );
        require(feeExecuted <= maxFee, "Fee exceeds max fee");
        require(feeExecuted < amount, "Fee equals or exceeds amount");
        require(mintRecipient != address(0), "Mint recipient must be nonzero");

        address localToken =
            remoteTokensToLocalTokens[keccak256(abi.encodePacked(remoteDomain, remoteToken))];
        require(localToken != address(0), "Mint token not supported");
        MockUSDC token = MockUSDC(localToken);
        token.mint(mintRecipient, amount - feeExecuted);
        if (feeExecuted > 0) token.mint(feeRecipient, feeExecuted);
        emit MintAndWithdraw(mintRecipient, amount - feeExecuted, localToken, feeExecuted);
    }
}
