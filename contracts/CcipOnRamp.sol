// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {
    CcipHash,
    EVM2AnyMessage,
    EVM2AnyRampMessage,
    EVM2AnyTokenTransfer,
    RampMessageHeader,
    SourceTokenDataPayload
} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// CCTP v2's TokenMessengerV2.depositForBurn, as Chainlink's USDC pool calls it.
interface ICctpTokenMessengerV2 {
    function depositForBurn(
        uint256 amount,
        uint32 destinationDomain,
        bytes32 mintRecipient,
        address burnToken,
        bytes32 destinationCaller,
        uint256 maxFee,
        uint32 minFinalityThreshold
    ) external;
}

/// @title CcipOnRamp (local double, v1.6)
/// @notice The CCIP v1.6 OnRamp of a local chain for every destination it is
/// told of, written from the public OnRamp 1.6 interface, with the USDC token
/// pool's role folded in (Chainlink's USDCTokenPoolCCTPV2): the Router moves
/// the sender's USDC here (`getPoolBySourceToken` is this contract) and the
/// OnRamp burns it through CCTP v2 (`depositForBurn` on the chain's
/// TokenMessengerV2: maxFee 0, standard finality 2000, the receiver the mint
/// recipient, the destination's OffRamp the only caller that may receive it),
/// then emits `CCIPMessageSent(destChainSelector, sequenceNumber,
/// EVM2AnyRampMessage)`. The token transfer's extraData is the pool's
/// SourceTokenDataPayload (CCTP v2), its destExecData abi.encode(uint32 gas
/// for the release on the destination); the message id is
/// Internal._hash(message, metadataHash) as the real OnRamp computes it.
///
/// Per destination: a sequence number from 1; a per-sender nonce for ordered
/// messages (0 when allowOutOfOrderExecution). extraArgs: empty (gasLimit
/// DEFAULT_GAS_LIMIT, in order), EVMExtraArgsV1 (0x97a657c9 ‖
/// abi.encode(uint256 gasLimit), in order) or GenericExtraArgsV2 (0x181dcf10 ‖
/// abi.encode(uint256 gasLimit, bool allowOutOfOrderExecution)), emitted
/// converted to GenericExtraArgsV2 as the real OnRamp emits the FeeQuoter's
/// conversion; gas limit 0 is a token-only message (no receiver callback on
/// the destination).
///
/// Simplified: the fee is native only, feeBase + gasLimit * feePerGas wei,
/// both the owner's (`setFeeConfig`; the real fee follows the FeeQuoter's
/// prices, which change between a quote and a send just as this can);
/// feeValueJuels is 0; one token, the chain's USDC; no RMN, allowlists or
/// message interceptor.
contract CcipOnRamp {
    bytes4 internal constant GENERIC_EXTRA_ARGS_V2_TAG = 0x181dcf10;
    bytes4 internal constant EVM_EXTRA_ARGS_V1_TAG = 0x97a657c9;
    uint256 internal constant DEFAULT_GAS_LIMIT = 200_000;
    uint256 internal constant MAX_GAS_LIMIT = 3_000_000;
    uint32 internal constant DEST_GAS_AMOUNT = 180_000;
    uint32 internal constant CCTP_FINALITY_THRESHOLD = 2000;
    uint8 private constant CCTP_V2 = 2;
    uint256 private constant EVM_PRECOMPILE_SPACE = 1024;

    address public immutable owner;
    address internal immutable router;
    uint64 internal immutable localChainSelector;
    MockUSDC internal immutable token;
    ICctpTokenMessengerV2 internal immutable tokenMessenger;
    uint32 internal immutable localDomain;

    struct DestChain {
        uint64 sequenceNumber;
        bytes destToken; // abi.encode(address); empty: not a destination
        uint32 domain; // the destination's CCTP domain
        bytes32 allowedCaller; // who may receive the burn there: its OffRamp
    }

    mapping(uint64 => DestChain) private s_destChains;
    mapping(uint64 => mapping(address => uint64)) private s_senderNonces;
    uint256 internal feeBase = 100_000_000_000_000; // 0.0001 native
    uint256 internal feePerGas = 1_000_000_000; // 1 gwei a unit of destination gas

    event CCIPMessageSent(
        uint64 indexed destChainSelector, uint64 indexed sequenceNumber, EVM2AnyRampMessage message
    );
    event DestChainConfigSet(
        uint64 indexed destChainSelector, uint64 sequenceNumber, address router, bool allowlistEnabled
    );
    event FeeConfigSet(uint256 feeBase, uint256 feePerGas);

    error OnlyCallableByOwner();
    error MustBeCalledByRouter();
    error RouterMustSetOriginalSender();
    error InvalidDestChainConfig(uint64 destChainSelector);
    error UnsupportedToken(address token);
    error CannotSendZeroTokens();
    error InvalidExtraArgsTag();
    error MessageGasLimitTooHigh();
    error InvalidEVMAddress(bytes encodedAddress);

    constructor(
        uint64 localChainSelector_,
        address router_,
        MockUSDC token_,
        ICctpTokenMessengerV2 tokenMessenger_,
        uint32 localDomain_
    ) {
        owner = msg.sender;
        localChainSelector = localChainSelector_;
        router = router_;
        token = token_;
        tokenMessenger = tokenMessenger_;
        localDomain = localDomain_;
        // the pool role burns through CCTP: the messenger pulls what it burns
        token_.approve(address(tokenMessenger_), type(uint256).max);
    }

    function typeAndVersion() external pure returns (string memory) {
        return "OnRamp 1.6.0 (local double)";
    }

    /// @notice Make `destChainSelector` a destination: its USDC, its CCTP
    /// domain and the contract there that receives the burn (its OffRamp).
    function setDestChain(uint64 destChainSelector, address destToken, uint32 destDomain, address destCaller)
        external
    {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        if (destChainSelector == 0 || destToken == address(0) || destCaller == address(0)) {
            revert InvalidDestChainConfig(destChainSelector);
        }
        DestChain storage dest = s_destChains[destChainSelector];
        dest.destToken = abi.encode(destToken);
        dest.domain = destDomain;
        dest.allowedCaller = bytes32(uint256(uint160(destCaller)));
        emit DestChainConfigSet(destChainSelector, dest.sequenceNumber, router, false);
    }

    /// @notice The fee's parameters (native wei): the owner's.
    function setFeeConfig(uint256 feeBase_, uint256 feePerGas_) external {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        feeBase = feeBase_;
        feePerGas = feePerGas_;
        emit FeeConfigSet(feeBase_, feePerGas_);
    }

    /// @notice (sequenceNumber, allowlistEnabled, router) of a destination.
    function getDestChainConfig(uint64 destChainSelector) external view returns (uint64, bool, address) {
        return (s_destChains[destChainSelector].sequenceNumber, false, router);
    }

    function getExpectedNextSequenceNumber(uint64 destChainSelector) external view returns (uint64) {
        return s_destChains[destChainSelector].sequenceNumber + 1;
    }

    /// @notice This contract for the chain's USDC to a known destination (the pool role), else 0.
    function getPoolBySourceToken(uint64 destChainSelector, address sourceToken) external view returns (address) {
        if (sourceToken != address(token) || s_destChains[destChainSelector].destToken.length == 0) {
            return address(0);
        }
        return address(this);
    }

    /// @notice (gasLimit, allowOutOfOrderExecution) of a message's extraArgs.
    function _parseExtraArgs(bytes calldata extraArgs) internal pure returns (uint256, bool) {
        if (extraArgs.length == 0) return (DEFAULT_GAS_LIMIT, false);
        uint256 gasLimit;
        bool outOfOrder;
        if (extraArgs.length == 68 && bytes4(extraArgs[0:4]) == GENERIC_EXTRA_ARGS_V2_TAG) {
            (gasLimit, outOfOrder) = abi.decode(extraArgs[4:], (uint256, bool));
        } else if (extraArgs.length == 36 && bytes4(extraArgs[0:4]) == EVM_EXTRA_ARGS_V1_TAG) {
            gasLimit = abi.decode(extraArgs[4:], (uint256));
        } else {
            revert InvalidExtraArgsTag();
        }
        if (gasLimit > MAX_GAS_LIMIT) revert MessageGasLimitTooHigh();
        return (gasLimit, outOfOrder);
    }

    function getFee(uint64 destChainSelector, EVM2AnyMessage calldata message) external view returns (uint256) {
        if (s_destChains[destChainSelector].destToken.length == 0) {
            revert InvalidDestChainConfig(destChainSelector);
        }
        _receiver(message.receiver);
        (uint256 gasLimit,) = _parseExtraArgs(message.extraArgs);
        return feeBase + gasLimit * feePerGas;
    }

    function _receiver(bytes calldata encoded) private pure returns (address) {
        if (encoded.length != 32) revert InvalidEVMAddress(encoded);
        uint256 raw = abi.decode(encoded, (uint256));
        if (raw > type(uint160).max || raw < EVM_PRECOMPILE_SPACE) revert InvalidEVMAddress(encoded);
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
        if (originalSender == address(0)) revert RouterMustSetOriginalSender();
        DestChain storage dest = s_destChains[destChainSelector];
        if (dest.destToken.length == 0) revert InvalidDestChainConfig(destChainSelector);
        address receiver = _receiver(message.receiver);
        (uint256 gasLimit, bool outOfOrder) = _parseExtraArgs(message.extraArgs);

        EVM2AnyRampMessage memory sent = EVM2AnyRampMessage({
            header: RampMessageHeader({
                messageId: bytes32(0),
                sourceChainSelector: localChainSelector,
                destChainSelector: destChainSelector,
                sequenceNumber: ++dest.sequenceNumber,
                nonce: outOfOrder ? 0 : ++s_senderNonces[destChainSelector][originalSender]
            }),
            sender: originalSender,
            data: message.data,
            receiver: message.receiver,
            extraArgs: abi.encodeWithSelector(GENERIC_EXTRA_ARGS_V2_TAG, gasLimit, outOfOrder),
            feeToken: message.feeToken,
            feeTokenAmount: feeTokenAmount,
            feeValueJuels: 0,
            tokenAmounts: new EVM2AnyTokenTransfer[](message.tokenAmounts.length)
        });
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            sent.tokenAmounts[i] = _burn(dest, receiver, message.tokenAmounts[i].token, message.tokenAmounts[i].amount);
        }
        bytes32 metadataHash =
            keccak256(abi.encode(CcipHash.EVM_2_ANY_MESSAGE_HASH, localChainSelector, destChainSelector, address(this)));
        sent.header.messageId = CcipHash.evm2Any(sent, metadataHash);
        emit CCIPMessageSent(destChainSelector, sent.header.sequenceNumber, sent);
        return sent.header.messageId;
    }

    /// @dev The USDC pool's lockOrBurn (USDCTokenPoolCCTPV2): a CCTP v2 burn to
    /// the receiver, received only by the destination's OffRamp.
    function _burn(DestChain storage dest, address receiver, address sourceToken, uint256 amount)
        private
        returns (EVM2AnyTokenTransfer memory)
    {
        if (sourceToken != address(token)) revert UnsupportedToken(sourceToken);
        if (amount == 0) revert CannotSendZeroTokens();
        bytes32 mintRecipient = bytes32(uint256(uint160(receiver)));
        tokenMessenger.depositForBurn(
            amount, dest.domain, mintRecipient, address(token), dest.allowedCaller, 0, CCTP_FINALITY_THRESHOLD
        );
        SourceTokenDataPayload memory payload = SourceTokenDataPayload({
            nonce: 0,
            sourceDomain: localDomain,
            cctpVersion: CCTP_V2,
            amount: amount,
            destinationDomain: dest.domain,
            mintRecipient: mintRecipient,
            burnToken: address(token),
            destinationCaller: dest.allowedCaller,
            maxFee: 0,
            minFinalityThreshold: CCTP_FINALITY_THRESHOLD
        });
        return EVM2AnyTokenTransfer({
            sourcePoolAddress: address(this),
            destTokenAddress: dest.destToken,
            extraData: abi.encode(payload),
            amount: amount,
            destExecData: abi.encode(DEST_GAS_AMOUNT)
        });
    }
}
