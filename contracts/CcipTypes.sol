// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// The CCIP message types of the local double (CcipRouter, CcipOnRamp,
/// CcipOffRamp for v1.6; CcipEvm2EvmOnRamp, CcipEvm2EvmOffRamp for v1.5),
/// written from the public interfaces of @chainlink/contracts-ccip 1.6.2
/// (Client.sol, Internal.sol, OffRamp.sol, MerkleMultiProof.sol,
/// USDCTokenPool.sol) and of v1.5 (Internal.EVM2EVMMessage): field names, order
/// and types as there, so a call or an event encoded here decodes with the
/// public ABI and a hash computed here is the one the real contracts compute.

// ---------------------------------------------------------------- Client

/// A token and an amount in its base units (Client.EVMTokenAmount).
struct EVMTokenAmount {
    address token;
    uint256 amount;
}

/// What a sender hands the Router (Client.EVM2AnyMessage): the receiver is
/// abi.encode(address) for an EVM destination; feeToken address(0) is the
/// native coin; extraArgs is GENERIC_EXTRA_ARGS_V2_TAG ‖ abi.encode(gasLimit,
/// allowOutOfOrderExecution) (Client.GenericExtraArgsV2), or empty for the
/// defaults.
struct EVM2AnyMessage {
    bytes receiver;
    bytes data;
    EVMTokenAmount[] tokenAmounts;
    address feeToken;
    bytes extraArgs;
}

// ---------------------------------------------------------------- Internal (v1.6)

/// The header both ramp messages share (Internal.RampMessageHeader).
struct RampMessageHeader {
    bytes32 messageId;
    uint64 sourceChainSelector;
    uint64 destChainSelector;
    uint64 sequenceNumber;
    uint64 nonce;
}

/// One token of a sent message (Internal.EVM2AnyTokenTransfer).
struct EVM2AnyTokenTransfer {
    address sourcePoolAddress;
    bytes destTokenAddress;
    bytes extraData;
    uint256 amount;
    bytes destExecData;
}

/// The message the OnRamp emits (Internal.EVM2AnyRampMessage).
struct EVM2AnyRampMessage {
    RampMessageHeader header;
    address sender;
    bytes data;
    bytes receiver;
    bytes extraArgs;
    address feeToken;
    uint256 feeTokenAmount;
    uint256 feeValueJuels;
    EVM2AnyTokenTransfer[] tokenAmounts;
}

/// One token of a message to execute (Internal.Any2EVMTokenTransfer).
struct Any2EVMTokenTransfer {
    bytes sourcePoolAddress;
    address destTokenAddress;
    uint32 destGasAmount;
    bytes extraData;
    uint256 amount;
}

/// The message an OffRamp executes (Internal.Any2EVMRampMessage).
struct Any2EVMRampMessage {
    RampMessageHeader header;
    bytes sender;
    bytes data;
    address receiver;
    uint256 gasLimit;
    Any2EVMTokenTransfer[] tokenAmounts;
}

/// Messages of one source chain with their merkle proof and, per message and
/// token, the pool's offchain data (Internal.ExecutionReport).
struct ExecutionReport {
    uint64 sourceChainSelector;
    Any2EVMRampMessage[] messages;
    bytes[][] offchainTokenData;
    bytes32[] proofs;
    uint256 proofFlagBits;
}

/// A committed root of one source chain's messages from minSeqNr to maxSeqNr
/// (Internal.MerkleRoot); onRampAddress is abi.encode(address).
struct MerkleRoot {
    uint64 sourceChainSelector;
    bytes onRampAddress;
    uint64 minSeqNr;
    uint64 maxSeqNr;
    bytes32 merkleRoot;
}

/// Internal.TokenPriceUpdate
struct TokenPriceUpdate {
    address sourceToken;
    uint224 usdPerToken;
}

/// Internal.GasPriceUpdate
struct GasPriceUpdate {
    uint64 destChainSelector;
    uint224 usdPerUnitGas;
}

/// Internal.PriceUpdates
struct PriceUpdates {
    TokenPriceUpdate[] tokenPriceUpdates;
    GasPriceUpdate[] gasPriceUpdates;
}

/// IRMNRemote.Signature
struct RMNSignature {
    bytes32 r;
    bytes32 s;
}

/// What the committing DON reports (OffRamp.CommitReport).
struct CommitReport {
    PriceUpdates priceUpdates;
    MerkleRoot[] blessedMerkleRoots;
    MerkleRoot[] unblessedMerkleRoots;
    RMNSignature[] rmnSignatures;
}

/// A manual execution's gas overrides of one message, 0 for none
/// (OffRamp.GasLimitOverride); one token override per token of the message.
struct GasLimitOverride {
    uint256 receiverExecutionGasLimit;
    uint32[] tokenGasOverrides;
}

/// An OffRamp's configuration of one source chain (OffRamp.SourceChainConfig).
struct SourceChainConfig {
    address router;
    bool isEnabled;
    uint64 minSeqNr;
    bool isRMNVerificationDisabled;
    bytes onRamp;
}

/// OffRamp.SourceChainConfigArgs
struct SourceChainConfigArgs {
    address router;
    uint64 sourceChainSelector;
    bool isEnabled;
    bool isRMNVerificationDisabled;
    bytes onRamp;
}

// ---------------------------------------------------------------- USDC over CCTP

/// What Chainlink's USDC token pool (USDCTokenPoolCCTPV2) puts in a token
/// transfer's extraData on the source (USDCTokenPool.SourceTokenDataPayload);
/// cctpVersion 2 is CCTPVersion.CCTP_V2.
struct SourceTokenDataPayload {
    uint64 nonce;
    uint32 sourceDomain;
    uint8 cctpVersion;
    uint256 amount;
    uint32 destinationDomain;
    bytes32 mintRecipient;
    address burnToken;
    bytes32 destinationCaller;
    uint256 maxFee;
    uint32 minFinalityThreshold;
}

/// @notice Pool.ReleaseOrMintInV1: what the OffRamp hands a token pool's
/// releaseOrMint for one transfer.
struct ReleaseOrMintInV1 {
    bytes originalSender;
    uint64 remoteChainSelector;
    address receiver;
    uint256 sourceDenominatedAmount;
    address localToken;
    bytes sourcePoolAddress;
    bytes sourcePoolData;
    bytes offchainTokenData;
}

/// @notice Pool.ReleaseOrMintOutV1: what the pool released, in local units.
struct ReleaseOrMintOutV1 {
    uint256 destinationAmount;
}

/// The USDC pool's offchain token data on the destination: the CCTP message
/// as attested and its attestation (USDCTokenPool.MessageAndAttestation).
struct MessageAndAttestation {
    bytes message;
    bytes attestation;
}

// ---------------------------------------------------------------- Internal (v1.5)

/// The message a v1.5 EVM2EVMOnRamp emits and its EVM2EVMOffRamp executes
/// (Internal.EVM2EVMMessage); tokenAmounts name the SOURCE chain's tokens.
struct EVM2EVMMessage {
    uint64 sourceChainSelector;
    address sender;
    address receiver;
    uint64 sequenceNumber;
    uint256 gasLimit;
    bool strict;
    uint64 nonce;
    address feeToken;
    uint256 feeTokenAmount;
    bytes data;
    EVMTokenAmount[] tokenAmounts;
    bytes[] sourceTokenData;
    bytes32 messageId;
}

/// v1.5's Internal.SourceTokenData, abi-encoded into EVM2EVMMessage.sourceTokenData.
struct SourceTokenData {
    bytes sourcePoolAddress;
    bytes destTokenAddress;
    bytes extraData;
    uint32 destGasAmount;
}

// ---------------------------------------------------------------- hashing

/// The hashes of Internal._hash and MerkleMultiProof, as the real ramps compute them.
library CcipHash {
    bytes32 internal constant LEAF_DOMAIN_SEPARATOR = bytes32(0);
    bytes32 internal constant INTERNAL_DOMAIN_SEPARATOR = bytes32(uint256(1));
    bytes32 internal constant ANY_2_EVM_MESSAGE_HASH = keccak256("Any2EVMMessageHashV1");
    bytes32 internal constant EVM_2_ANY_MESSAGE_HASH = keccak256("EVM2AnyMessageHashV1");
    bytes32 internal constant EVM_2_EVM_MESSAGE_HASH = keccak256("EVM2EVMMessageHashV2");
    uint256 internal constant MAX_NUM_HASHES = 256;

    error InvalidProof();
    error LeavesCannotBeEmpty();

    /// @notice The OffRamp's leaf of a message (Internal._hash(Any2EVMRampMessage, metadataHash)).
    function any2Evm(Any2EVMRampMessage memory original, bytes32 metadataHash)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(
            abi.encode(
                LEAF_DOMAIN_SEPARATOR,
                metadataHash,
                keccak256(
                    abi.encode(
                        original.header.messageId,
                        original.receiver,
                        original.header.sequenceNumber,
                        original.gasLimit,
                        original.header.nonce
                    )
                ),
                keccak256(original.sender),
                keccak256(original.data),
                keccak256(abi.encode(original.tokenAmounts))
            )
        );
    }

    /// @notice The OnRamp's message id (Internal._hash(EVM2AnyRampMessage, metadataHash)).
    function evm2Any(EVM2AnyRampMessage memory original, bytes32 metadataHash)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(
            abi.encode(
                LEAF_DOMAIN_SEPARATOR,
                metadataHash,
                keccak256(
                    abi.encode(
                        original.sender,
                        original.header.sequenceNumber,
                        original.header.nonce,
                        original.feeToken,
                        original.feeTokenAmount
                    )
                ),
                keccak256(original.receiver),
                keccak256(original.data),
                keccak256(abi.encode(original.tokenAmounts)),
                keccak256(original.extraArgs)
            )
        );
    }

    /// @notice A v1.5 message's id and leaf (v1.5 Internal._hash(EVM2EVMMessage, metadataHash)).
    function evm2Evm(EVM2EVMMessage memory original, bytes32 metadataHash)
        internal
        pure
        returns (bytes32)
    {
        return keccak256(
            abi.encode(
                LEAF_DOMAIN_SEPARATOR,
                metadataHash,
                keccak256(
                    abi.encode(
                        original.sender,
                        original.receiver,
                        original.sequenceNumber,
                        original.gasLimit,
                        original.strict,
                        original.nonce,
                        original.feeToken,
                        original.feeTokenAmount
                    )
                ),
                keccak256(original.data),
                keccak256(abi.encode(original.tokenAmounts)),
                keccak256(abi.encode(original.sourceTokenData))
            )
        );
    }

    /// @notice The root of ``leaves`` with ``proofs`` (MerkleMultiProof._merkleRoot).
    function merkleRoot(bytes32[] memory leaves, bytes32[] memory proofs, uint256 proofFlagBits)
        internal
        pure
        returns (bytes32)
    {
        unchecked {
            uint256 leavesLen = leaves.length;
            uint256 proofsLen = proofs.length;
            if (leavesLen == 0) revert LeavesCannotBeEmpty();
            if (!(leavesLen <= MAX_NUM_HASHES + 1 && proofsLen <= MAX_NUM_HASHES + 1)) revert InvalidProof();
            uint256 totalHashes = leavesLen + proofsLen - 1;
            if (!(totalHashes <= MAX_NUM_HASHES)) revert InvalidProof();
            if (totalHashes == 0) return leaves[0];
            bytes32[] memory hashes = new bytes32[](totalHashes);
            (uint256 leafPos, uint256 hashPos, uint256 proofPos) = (0, 0, 0);
            for (uint256 i = 0; i < totalHashes; ++i) {
                bytes32 a;
                if (proofFlagBits & (1 << i) == (1 << i)) {
                    a = leafPos < leavesLen ? leaves[leafPos++] : hashes[hashPos++];
                } else {
                    a = proofs[proofPos++];
                }
                bytes32 b = leafPos < leavesLen ? leaves[leafPos++] : hashes[hashPos++];
                if (!(hashPos <= i)) revert InvalidProof();
                hashes[i] = a < b
                    ? keccak256(abi.encode(INTERNAL_DOMAIN_SEPARATOR, a, b))
                    : keccak256(abi.encode(INTERNAL_DOMAIN_SEPARATOR, b, a));
            }
            if (!(hashPos == totalHashes - 1 && leafPos == leavesLen && proofPos == proofsLen)) revert InvalidProof();
            return hashes[totalHashes - 1];
        }
    }
}
