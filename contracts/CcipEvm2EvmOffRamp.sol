// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {CcipHash, EVM2EVMMessage} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title CcipEvm2EvmOffRamp (local double, v1.5)
/// @notice A CCIP v1.5 lane's destination ramp (EVM2EVMOffRamp 1.5.0: one
/// OffRamp per lane, its source fixed), written from the public interface so
/// that what it emits is what a v1.5 lane emits:
/// `ExecutionStateChanged(uint64 indexed sequenceNumber, bytes32 indexed
/// messageId, uint8 state, bytes returnData)` with SUCCESS (2) or FAILURE (3),
/// and `getExecutionState(uint64 sequenceNumber)` answers.
///
/// `executeMessages` is the executing network's (an address the owner
/// enables): each message's id must be its hash on the lane (the v1.5 leaf,
/// with the lane's OnRamp), then the tokens are minted to the receiver (the
/// lane's OnRamp burned them); `failMessages` records a FAILURE instead, for
/// tests of the stranded path. Simplified: no commit store, merkle proofs,
/// OCR2 reports, RMN, rate limits or receiver callback, and no manual
/// execution: it serves a v1.5 lane in tests, the local world's lanes are v1.6.
contract CcipEvm2EvmOffRamp {
    uint8 internal constant UNTOUCHED = 0;
    uint8 internal constant SUCCESS = 2;
    uint8 internal constant FAILURE = 3;

    address public immutable owner;
    uint64 internal immutable sourceChainSelector;
    uint64 internal immutable chainSelector;
    address internal immutable onRamp;
    MockUSDC internal immutable token;

    mapping(address => bool) internal isTransmitter;
    mapping(uint64 => uint8) private s_states;

    event ExecutionStateChanged(
        uint64 indexed sequenceNumber, bytes32 indexed messageId, uint8 state, bytes returnData
    );

    error OnlyCallableByOwner();
    error UnauthorizedTransmitter();
    error InvalidSourceChain(uint64 sourceChainSelector);
    error InvalidMessageId(bytes32 messageId);
    error AlreadyExecuted(uint64 sequenceNumber);

    constructor(uint64 sourceChainSelector_, uint64 chainSelector_, address onRamp_, MockUSDC token_) {
        owner = msg.sender;
        sourceChainSelector = sourceChainSelector_;
        chainSelector = chainSelector_;
        onRamp = onRamp_;
        token = token_;
    }

    function typeAndVersion() external pure returns (string memory) {
        return "EVM2EVMOffRamp 1.5.0 (local double)";
    }

    function setTransmitter(address transmitter, bool enabled) external {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        isTransmitter[transmitter] = enabled;
    }

    function getExecutionState(uint64 sequenceNumber) external view returns (uint8) {
        return s_states[sequenceNumber];
    }

    function executeMessages(EVM2EVMMessage[] calldata messages) external {
        _run(messages, false);
    }

    function failMessages(EVM2EVMMessage[] calldata messages) external {
        _run(messages, true);
    }

    function _run(EVM2EVMMessage[] calldata messages, bool fail) private {
        if (!isTransmitter[msg.sender]) revert UnauthorizedTransmitter();
        bytes32 metadataHash =
            keccak256(abi.encode(CcipHash.EVM_2_EVM_MESSAGE_HASH, sourceChainSelector, chainSelector, onRamp));
        for (uint256 i = 0; i < messages.length; ++i) {
            EVM2EVMMessage memory message = messages[i];
            if (message.sourceChainSelector != sourceChainSelector) {
                revert InvalidSourceChain(message.sourceChainSelector);
            }
            if (CcipHash.evm2Evm(message, metadataHash) != message.messageId) revert InvalidMessageId(message.messageId);
            if (s_states[message.sequenceNumber] == SUCCESS) revert AlreadyExecuted(message.sequenceNumber);
            uint8 state = fail ? FAILURE : SUCCESS;
            if (!fail) {
                for (uint256 t = 0; t < message.tokenAmounts.length; ++t) {
                    token.mint(message.receiver, message.tokenAmounts[t].amount);
                }
            }
            s_states[message.sequenceNumber] = state;
            emit ExecutionStateChanged(message.sequenceNumber, message.messageId, state, "");
        }
    }
}
