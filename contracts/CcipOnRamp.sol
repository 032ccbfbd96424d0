// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {
    EVM2AnyMessage,
    EVM2AnyRampMessage,
    EVM2AnyTokenTransfer,
    RampMessageHeader
} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title CcipOnRamp (local double)
/// @notice The CCIP OnRamp of a local chain for every destination it is told
/// of, written from the public v1.6 interface, with the token pool's role
/// folded in: the Router moves the sender's tokens here and the OnRamp BURNS
/// them (burn and mint: the destination's OffRamp mints as much), then emits
/// `CCIPMessageSent(destChainSelector, sequenceNumber, EVM2AnyRampMessage)`
/// with the message id in the header.
///
/// Per destination: a sequence number from 1; a per-sender nonce for ordered
/// messages (0 when allowOutOfOrderExecution). extraArgs: empty (gasLimit
/// 200000, in order) or 0x181dcf10 ‖ abi.encode(uint256 gasLimit, bool
/// allowOutOfOrderExecution). The fee, native only: FEE_BASE + gasLimit *
/// FEE_PER_GAS wei.
///
/// Simplified: the message id is keccak256 of the metadata hash and the
/// ABI-encoded message (the production one hashes field by field, leaf
/// domain first); feeValueJuels is 0; one token, the chain's MockUSDC.
contract CcipOnRamp {
    bytes4 public constant EVM_EXTRA_ARGS_V2_TAG = 0x181dcf10;
    uint256 public constant DEFAULT_GAS_LIMIT = 200_000;
    uint256 public constant MAX_GAS_LIMIT = 3_000_000;
    uint256 public constant FEE_BASE = 100_000_000_000_000; // 0.0001 native
    uint256 public constant FEE_PER_GAS = 1_000_000_000; // 1 gwei a unit of destination gas
    bytes32 public constant EVM_2_ANY_MESSAGE_HASH = keccak256("EVM2AnyMessageHashV1");

    address public immutable owner;
    address public immutable router;
    uint64 public immutable localChainSelector;
    MockUSDC public immutable token;

    /// @notice the destination's token (abi.encode(address)) by destination selector; empty: unknown
    mapping(uint64 => bytes) public destToken;
    mapping(uint64 => uint64) public sequenceNumbers;
    mapping(uint64 => mapping(address => uint64)) public senderNonces;

    event CCIPMessageSent(
        uint64 indexed destChainSelector, uint64 indexed sequenceNumber, EVM2AnyRampMessage message
    );
    event DestChainConfigSet(uint64 indexed destChainSelector, bytes destToken);

    error OnlyOwner();
    error MustBeCalledByRouter();
    error UnsupportedDestinationChain(uint64 destChainSelector);
    error UnsupportedToken(address token);
    error InvalidExtraArgsTag();
    error MessageGasLimitTooHigh();
    error InvalidEVMAddress(bytes encodedAddress);

    constructor(uint64 localChainSelector_, address router_, MockUSDC token_) {
        owner = msg.sender;
        localChainSelector = localChainSelector_;
        router = router_;
        token = token_;
    }

    function setDestChain(uint64 destChainSelector, address destToken_) external {
        if (msg.sender != owner) revert OnlyOwner();
        destToken[destChainSelector] = abi.encode(destToken_);
        emit DestChainConfigSet(destChainSelector, destToken[destChainSelector]);
    }

    /// @notice (gasLimit, allowOutOfOrderExecution) of a message's extraArgs.
    function parseExtraArgs(bytes calldata extraArgs) public pure returns (uint256, bool) {
        if (extraArgs.length == 0) return (DEFAULT_GAS_LIMIT, false);
        if (extraArgs.length != 68 || bytes4(extraArgs[0:4]) != EVM_EXTRA_ARGS_V2_TAG) {
            revert InvalidExtraArgsTag();
        }
        (uint256 gasLimit, bool outOfOrder) = abi.decode(extraArgs[4:], (uint256, bool));
        if (gasLimit > MAX_GAS_LIMIT) revert MessageGasLimitTooHigh();
        return (gasLimit, outOfOrder);
    }

    function getFee(uint64 destChainSelector, EVM2AnyMessage calldata message)
        external
        view
        returns (uint256)
    {
        if (destToken[destChainSelector].length == 0) revert UnsupportedDestinationChain(destChainSelector);
        _receiver(message.receiver);
        (uint256 gasLimit,) = parseExtraArgs(message.extraArgs);
        return FEE_BASE + gasLimit * FEE_PER_GAS;
    }

    function _receiver(bytes calldata encoded) private pure returns (address) {
        if (encoded.length != 32) revert InvalidEVMAddress(encoded);
        uint256 raw = abi.decode(encoded, (uint256));
        if (raw > type(uint160).max || raw < 10) revert InvalidEVMAddress(encoded);
        return address(uint160(raw));
    }

    /// @notice The Router's half of ccipSend: the tokens are here already.
    function forwardFromRouter(
        uint64 destChainSelector,
        EVM2AnyMessage calldata message,
        uint256 feeTokenAmount,
        address originalSender
    ) external returns (bytes32) {
        if (msg.sender != router) revert MustBeCalledByRouter();
        bytes memory remoteToken = destToken[destChainSelector];
        if (remoteToken.length == 0) revert UnsupportedDestinationChain(destChainSelector);
        _receiver(message.receiver);
        (, bool outOfOrder) = parseExtraArgs(message.extraArgs);

        EVM2AnyTokenTransfer[] memory transfers = new EVM2AnyTokenTransfer[](message.tokenAmounts.length);
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            if (message.tokenAmounts[i].token != address(token)) {
                revert UnsupportedToken(message.tokenAmounts[i].token);
            }
            token.burn(message.tokenAmounts[i].amount);
            transfers[i] = EVM2AnyTokenTransfer({
                sourcePoolAddress: address(this),
                destTokenAddress: remoteToken,
                extraData: "",
                amount: message.tokenAmounts[i].amount,
                destExecData: abi.encode(uint32(90_000))
            });
        }

        uint64 sequenceNumber = ++sequenceNumbers[destChainSelector];
        uint64 nonce = outOfOrder ? 0 : ++senderNonces[destChainSelector][originalSender];
        EVM2AnyRampMessage memory sent = EVM2AnyRampMessage({
            header: RampMessageHeader({
                messageId: bytes32(0),
                sourceChainSelector: localChainSelector,
                destChainSelector: destChainSelector,
                sequenceNumber: sequenceNumber,
                nonce: nonce
            }),
            sender: originalSender,
            data: message.data,
            receiver: message.receiver,
            extraArgs: message.extraArgs,
            feeToken: message.feeToken,
            feeTokenAmount: feeTokenAmount,
            feeValueJuels: 0,
            tokenAmounts: transfers
        });
        bytes32 metadataHash = keccak256(
            abi.encode(EVM_2_ANY_MESSAGE_HASH, localChainSelector, destChainSelector, address(this))
        );
        sent.header.messageId = keccak256(abi.encode(metadataHash, sent));
        emit CCIPMessageSent(destChainSelector, sequenceNumber, sent);
        return sent.header.messageId;
    }
}
