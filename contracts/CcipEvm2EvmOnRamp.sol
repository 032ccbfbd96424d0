// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {CcipHash, EVM2AnyMessage, EVM2EVMMessage, EVMTokenAmount, SourceTokenData} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title CcipEvm2EvmOnRamp (local double, v1.5)
/// @notice A CCIP v1.5 lane's source ramp (EVM2EVMOnRamp 1.5.0: one OnRamp per
/// lane, its destination fixed), written from the public interface so that
/// what it emits is what a v1.5 lane emits: `CCIPSendRequested(EVM2EVMMessage)`,
/// the message id Internal._hash(message, metadataHash) with
/// EVM2EVMMessageHashV2, the source and destination selectors and this
/// OnRamp. The Router's `getFee` / `forwardFromRouter` as v1.6's; the token
/// pool's role is a burn (the lane's EVM2EVMOffRamp mints), and each token's
/// sourceTokenData is abi.encode(SourceTokenData{this OnRamp, the
/// destination's token, no extra data, DEST_GAS_AMOUNT}).
///
/// Simplified: the fee is native only (FEE_BASE + gasLimit * FEE_PER_GAS
/// wei); one token, the chain's USDC; no price registry, RMN, rate limits or
/// nop fees. It serves a v1.5 lane in tests: the local world's lanes are v1.6.
contract CcipEvm2EvmOnRamp {
    bytes4 internal constant GENERIC_EXTRA_ARGS_V2_TAG = 0x181dcf10;
    uint256 internal constant DEFAULT_GAS_LIMIT = 200_000;
    uint32 internal constant DEST_GAS_AMOUNT = 90_000;
    uint256 internal constant FEE_BASE = 100_000_000_000_000;
    uint256 internal constant FEE_PER_GAS = 1_000_000_000;

    uint64 internal immutable sourceChainSelector;
    uint64 internal immutable destChainSelector;
    address internal immutable router;
    MockUSDC internal immutable token;
    address internal immutable destToken;

    uint64 private s_sequenceNumber;
    mapping(address => uint64) private s_senderNonces;

    event CCIPSendRequested(EVM2EVMMessage message);

    error MustBeCalledByRouter();
    error InvalidChainSelector(uint64 chainSelector);
    error UnsupportedToken(address token);
    error CannotSendZeroTokens();
    error InvalidExtraArgsTag();
    error InvalidEVMAddress(bytes encodedAddress);

    constructor(uint64 sourceChainSelector_, uint64 destChainSelector_, address router_, MockUSDC token_, address destToken_) {
        sourceChainSelector = sourceChainSelector_;
        destChainSelector = destChainSelector_;
        router = router_;
        token = token_;
        destToken = destToken_;
    }

    function typeAndVersion() external pure returns (string memory) {
        return "EVM2EVMOnRamp 1.5.0 (local double)";
    }

    function getExpectedNextSequenceNumber() external view returns (uint64) {
        return s_sequenceNumber + 1;
    }

    function getSenderNonce(address sender) external view returns (uint64) {
        return s_senderNonces[sender];
    }

    function getPoolBySourceToken(uint64 destChainSelector_, address sourceToken) external view returns (address) {
        return destChainSelector_ == destChainSelector && sourceToken == address(token) ? address(this) : address(0);
    }

    function _extraArgs(bytes calldata extraArgs) private pure returns (uint256, bool) {
        if (extraArgs.length == 0) return (DEFAULT_GAS_LIMIT, false);
        if (extraArgs.length != 68 || bytes4(extraArgs[0:4]) != GENERIC_EXTRA_ARGS_V2_TAG) {
            revert InvalidExtraArgsTag();
        }
        return abi.decode(extraArgs[4:], (uint256, bool));
    }

    function _receiver(bytes calldata encoded) private pure returns (address) {
        if (encoded.length != 32) revert InvalidEVMAddress(encoded);
        uint256 raw = abi.decode(encoded, (uint256));
        if (raw > type(uint160).max || raw < 1024) revert InvalidEVMAddress(encoded);
        return address(uint160(raw));
    }

    function getFee(uint64 destChainSelector_, EVM2AnyMessage calldata message) external view returns (uint256) {
        if (destChainSelector_ != destChainSelector) revert InvalidChainSelector(destChainSelector_);
        _receiver(message.receiver);
        (uint256 gasLimit,) = _extraArgs(message.extraArgs);
        return FEE_BASE + gasLimit * FEE_PER_GAS;
    }

    function forwardFromRouter(
        uint64 destChainSelector_,
        EVM2AnyMessage calldata message,
        uint256 feeTokenAmount,
        address originalSender
    ) external returns (bytes32) {
        if (msg.sender != router) revert MustBeCalledByRouter();
        if (destChainSelector_ != destChainSelector) revert InvalidChainSelector(destChainSelector_);
        (uint256 gasLimit, bool outOfOrder) = _extraArgs(message.extraArgs);
        EVM2EVMMessage memory sent = EVM2EVMMessage({
            sourceChainSelector: sourceChainSelector,
            sender: originalSender,
            receiver: _receiver(message.receiver),
            sequenceNumber: ++s_sequenceNumber,
            gasLimit: gasLimit,
            strict: false,
            nonce: outOfOrder ? 0 : ++s_senderNonces[originalSender],
            feeToken: message.feeToken,
            feeTokenAmount: feeTokenAmount,
            data: message.data,
            tokenAmounts: new EVMTokenAmount[](message.tokenAmounts.length),
            sourceTokenData: new bytes[](message.tokenAmounts.length),
            messageId: bytes32(0)
        });
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            EVMTokenAmount calldata moved = message.tokenAmounts[i];
            if (moved.token != address(token)) revert UnsupportedToken(moved.token);
            if (moved.amount == 0) revert CannotSendZeroTokens();
            token.burn(moved.amount);
            sent.tokenAmounts[i] = moved;
            sent.sourceTokenData[i] = abi.encode(
                SourceTokenData({
                    sourcePoolAddress: abi.encode(address(this)),
                    destTokenAddress: abi.encode(destToken),
                    extraData: "",
                    destGasAmount: DEST_GAS_AMOUNT
                })
            );
        }
        bytes32 metadataHash = keccak256(
            abi.encode(CcipHash.EVM_2_EVM_MESSAGE_HASH, sourceChainSelector, destChainSelector, address(this))
        );
        sent.messageId = CcipHash.evm2Evm(sent, metadataHash);
        emit CCIPSendRequested(sent);
        return sent.messageId;
    }
}
