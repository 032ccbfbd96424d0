// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {Any2EVMRampMessage} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title CcipOffRamp (local double)
/// @notice The CCIP OffRamp of a local chain, written from the public v1.6
/// interface, with the destination token pool's role folded in: it MINTS the
/// message's tokens to the receiver (the source OnRamp burned them) and emits
/// `ExecutionStateChanged(sourceChainSelector, sequenceNumber, messageId,
/// messageHash, state, returnData, gasUsed)` with SUCCESS (2) or FAILURE (3).
///
/// `execute` is the executing network's (a transmitter, the "DON" key the
/// owner enables): executing a message also commits its hash, so a message
/// that FAILED can be executed again by anyone with `manuallyExecute`, for the
/// same message only (its hash checked) and with at least its gas limit. A
/// message succeeds at most once: SUCCESS is final, and any later execution of
/// it reverts (AlreadyExecuted); the message id is bound to one (source,
/// sequence number) for good.
///
/// The release runs in a call to this contract limited to the message's gas
/// limit (or an override: 0 for none; the production manual execution takes
/// one too): a release that reverts or runs out of gas is a FAILURE, its
/// revert data the returnData. The local executing network injects failures
/// by executing with an override the release cannot run in.
///
/// Simplified: no commit reports, merkle proofs, RMN blessing or OCR
/// signatures (the transmitter's execute stands for commit and execute);
/// no receiver callback (ccipReceive): tokens only, `data` is carried but not
/// delivered; a message never executed cannot be executed manually (the
/// production one allows it after a permissionless threshold).
contract CcipOffRamp {
    uint8 public constant UNTOUCHED = 0;
    uint8 public constant IN_PROGRESS = 1;
    uint8 public constant SUCCESS = 2;
    uint8 public constant FAILURE = 3;
    uint256 private constant GAS_RESERVE = 20_000;

    address public immutable owner;
    uint64 public immutable localChainSelector;
    MockUSDC public immutable token;

    mapping(address => bool) public isTransmitter;
    /// @notice the OnRamp (abi.encode(address)) of each source chain selector
    mapping(uint64 => bytes) public sourceOnRamp;

    mapping(uint64 => mapping(uint64 => uint8)) private s_states;
    mapping(uint64 => mapping(uint64 => bytes32)) private s_hashes;
    mapping(bytes32 => uint8) private s_statesById;
    mapping(bytes32 => bytes32) private s_keyOfId; // messageId => keccak(source, seq)

    event ExecutionStateChanged(
        uint64 indexed sourceChainSelector,
        uint64 indexed sequenceNumber,
        bytes32 indexed messageId,
        bytes32 messageHash,
        uint8 state,
        bytes returnData,
        uint256 gasUsed
    );
    event TransmitterSet(address indexed transmitter, bool enabled);
    event SourceChainConfigSet(uint64 indexed sourceChainSelector, bytes onRamp);

    error OnlyOwner();
    error OnlyTransmitter(address caller);
    error OnlySelf();
    error InvalidDestination(uint64 destChainSelector);
    error SourceChainNotEnabled(uint64 sourceChainSelector);
    error InvalidSourcePool(bytes sourcePoolAddress);
    error UnsupportedToken(address token);
    error AlreadyExecuted(uint64 sourceChainSelector, uint64 sequenceNumber);
    error AlreadyAttempted(uint64 sourceChainSelector, uint64 sequenceNumber);
    error NotFailed(uint64 sourceChainSelector, uint64 sequenceNumber, uint8 state);
    error MessageIdReused(bytes32 messageId);
    error MessageHashMismatch(bytes32 committed, bytes32 given);
    error InvalidManualExecutionGasLimit(uint256 messageGasLimit, uint256 given);
    error NotEnoughGasToExecute(uint256 needed, uint256 left);

    constructor(uint64 localChainSelector_, MockUSDC token_) {
        owner = msg.sender;
        localChainSelector = localChainSelector_;
        token = token_;
    }

    function setTransmitter(address transmitter, bool enabled) external {
        if (msg.sender != owner) revert OnlyOwner();
        isTransmitter[transmitter] = enabled;
        emit TransmitterSet(transmitter, enabled);
    }

    function setSourceChain(uint64 sourceChainSelector, address onRamp) external {
        if (msg.sender != owner) revert OnlyOwner();
        sourceOnRamp[sourceChainSelector] = abi.encode(onRamp);
        emit SourceChainConfigSet(sourceChainSelector, sourceOnRamp[sourceChainSelector]);
    }

    function getExecutionState(uint64 sourceChainSelector, uint64 sequenceNumber)
        external
        view
        returns (uint8)
    {
        return s_states[sourceChainSelector][sequenceNumber];
    }

    function getExecutionStateById(bytes32 messageId) external view returns (uint8) {
        return s_statesById[messageId];
    }

    /// @notice Commit and execute `message`: the executing network's transmitter only.
    function execute(Any2EVMRampMessage calldata message, uint256 gasLimitOverride) external {
        if (!isTransmitter[msg.sender]) revert OnlyTransmitter(msg.sender);
        _validate(message);
        uint64 source = message.header.sourceChainSelector;
        uint64 seq = message.header.sequenceNumber;
        uint8 state = s_states[source][seq];
        if (state == SUCCESS) revert AlreadyExecuted(source, seq);
        if (state != UNTOUCHED) revert AlreadyAttempted(source, seq);
        if (s_keyOfId[message.header.messageId] != bytes32(0)) revert MessageIdReused(message.header.messageId);
        s_keyOfId[message.header.messageId] = keccak256(abi.encode(source, seq));
        s_hashes[source][seq] = keccak256(abi.encode(message));
        _run(message, gasLimitOverride == 0 ? message.gasLimit : gasLimitOverride);
    }

    /// @notice Execute a FAILED message again: anyone, the same message, at
    /// least its gas limit (0: its own).
    function manuallyExecute(Any2EVMRampMessage calldata message, uint256 gasLimitOverride) external {
        _validate(message);
        uint64 source = message.header.sourceChainSelector;
        uint64 seq = message.header.sequenceNumber;
        uint8 state = s_states[source][seq];
        if (state == SUCCESS) revert AlreadyExecuted(source, seq);
        if (state != FAILURE) revert NotFailed(source, seq, state);
        bytes32 given = keccak256(abi.encode(message));
        if (given != s_hashes[source][seq]) revert MessageHashMismatch(s_hashes[source][seq], given);
        if (gasLimitOverride != 0 && gasLimitOverride < message.gasLimit) {
            revert InvalidManualExecutionGasLimit(message.gasLimit, gasLimitOverride);
        }
        _run(message, gasLimitOverride == 0 ? message.gasLimit : gasLimitOverride);
    }

    function _validate(Any2EVMRampMessage calldata message) private view {
        if (message.header.destChainSelector != localChainSelector) {
            revert InvalidDestination(message.header.destChainSelector);
        }
        bytes memory onRamp = sourceOnRamp[message.header.sourceChainSelector];
        if (onRamp.length == 0) revert SourceChainNotEnabled(message.header.sourceChainSelector);
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            if (keccak256(message.tokenAmounts[i].sourcePoolAddress) != keccak256(onRamp)) {
                revert InvalidSourcePool(message.tokenAmounts[i].sourcePoolAddress);
            }
            if (message.tokenAmounts[i].destTokenAddress != address(token)) {
                revert UnsupportedToken(message.tokenAmounts[i].destTokenAddress);
            }
        }
    }

    function _run(Any2EVMRampMessage calldata message, uint256 gasLimit) private {
        uint64 source = message.header.sourceChainSelector;
        uint64 seq = message.header.sequenceNumber;
        // all of gasLimit must reach the release (EIP-150 keeps 1/64 back), or
        // a caller short of gas could make a good message FAIL
        uint256 needed = gasLimit + gasLimit / 63 + GAS_RESERVE;
        if (gasleft() < needed) revert NotEnoughGasToExecute(needed, gasleft());
        s_states[source][seq] = IN_PROGRESS;
        uint256 start = gasleft();
        uint8 newState;
        bytes memory returnData;
        try this.executeSingleMessage{gas: gasLimit}(message) {
            newState = SUCCESS;
        } catch (bytes memory err) {
            newState = FAILURE;
            returnData = err;
        }
        uint256 gasUsed = start - gasleft();
        s_states[source][seq] = newState;
        s_statesById[message.header.messageId] = newState;
        emit ExecutionStateChanged(
            source, seq, message.header.messageId, s_hashes[source][seq], newState, returnData, gasUsed
        );
    }

    /// @notice The release of one message's tokens; this contract only (_run).
    function executeSingleMessage(Any2EVMRampMessage calldata message) external {
        if (msg.sender != address(this)) revert OnlySelf();
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            token.mint(message.receiver, message.tokenAmounts[i].amount);
        }
    }
}
