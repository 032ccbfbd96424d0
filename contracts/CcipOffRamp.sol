// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {
    Any2EVMRampMessage,
    Any2EVMTokenTransfer,
    CcipHash,
    CommitReport,
    ExecutionReport,
    GasLimitOverride,
    MerkleRoot,
    MessageAndAttestation,
    PriceUpdates,
    ReleaseOrMintInV1,
    ReleaseOrMintOutV1,
    SourceChainConfig,
    SourceChainConfigArgs,
    SourceTokenDataPayload
} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// CCTP v2's MessageTransmitterV2.receiveMessage, as Chainlink's USDC pool calls it.
interface ICctpMessageTransmitterV2 {
    function receiveMessage(bytes calldata message, bytes calldata attestation) external returns (bool);
}

/// @title CcipOffRamp (local double, v1.6)
/// @notice The CCIP v1.6 OffRamp of a local chain, written from the public
/// OffRamp 1.6 source (contracts-ccip 1.6.2 on npm) with the USDC token
/// pool's role folded in (Chainlink's USDCTokenPoolCCTPV2). What a caller
/// sees is the real one's:
///
/// - `commit(reportContext, report, rs, ss, rawVs)` of a CommitReport: each
///   unblessed merkle root of a source chain's messages from its next
///   sequence number on is stored with the block's timestamp
///   (`getMerkleRoot`), `CommitReportAccepted` emitted.
/// - `execute(reportContext, report)` of abi.encode(ExecutionReport[]) and
///   `manuallyExecute(ExecutionReport[] reports, GasLimitOverride[][]
///   gasLimitOverrides)`: each report's messages are hashed as leaves
///   (Internal._hash with the lane's metadata hash: Any2EVMMessageHashV1, the
///   source and this chain's selectors, keccak256 of the source OnRamp), their
///   root computed from the proofs (MerkleMultiProof: one message alone is a
///   one-leaf tree, no proofs, proofFlagBits 0) must be committed; then every
///   message UNTOUCHED (or FAILURE, manually) is run and ends in
///   `ExecutionStateChanged(source, sequence, messageId, leaf, state,
///   returnData, gasUsed)` with SUCCESS (2) or FAILURE (3). A message run by
///   the DON once is never run by it again (`AlreadyAttempted`); a SUCCESS is
///   skipped by any later execution (`SkippedAlreadyExecutedMessage`); a
///   manual execution needs a FAILURE (or a commit older than
///   `permissionLessExecutionThresholdSeconds`), overrides no lower than the
///   message's gas limit and each token's gas, and reverts whole
///   (`ExecutionError`) where the message fails again.
/// - `getExecutionState(sourceChainSelector, sequenceNumber)`,
///   `getSourceChainConfig`, `applySourceChainConfigUpdates`.
///
/// The release of a USDC transfer (the pool's releaseOrMint, run with the
/// transfer's destGasAmount or its override): its offchain token data is
/// abi.encode(MessageAndAttestation{message, attestation}), the CCTP v2
/// message as the attestation service returns it, checked against the
/// transfer's SourceTokenDataPayload (version 1, the source domain, this
/// chain's domain, CCTP v2, finality 2000 minimum and executed) and handed to
/// the chain's MessageTransmitterV2 (`receiveMessage`), which mints to the
/// receiver; the receiver's balance must grow by exactly the amount. Missing
/// or wrong offchain data makes the release revert: the message FAILS and
/// waits for a manual execution that carries the attestation.
///
/// Simplified: commit and execute are the transmitter's (an address the
/// owner enables, `setTransmitter`) without OCR3 signatures (rs, ss and
/// rawVs are not checked) or config digests; no RMN (a source must disable
/// RMN verification, and blessed roots are refused); price updates are not
/// applied (no FeeQuoter); no receiver callback (`ccipReceive`): tokens only,
/// `data` is carried but not delivered; ordered messages keep their inbound
/// nonce here, not in a NonceManager; one token, the chain's USDC.
contract CcipOffRamp {
    uint8 internal constant UNTOUCHED = 0;
    uint8 internal constant IN_PROGRESS = 1;
    uint8 internal constant SUCCESS = 2;
    uint8 internal constant FAILURE = 3;
    uint32 internal constant CCTP_MESSAGE_VERSION = 1;
    uint32 internal constant CCTP_FINALITY_THRESHOLD = 2000;
    uint8 private constant CCTP_V2 = 2;
    uint256 private constant GAS_FOR_CALL_EXACT_CHECK = 5_000;
    uint256 private constant MAX_RET_BYTES = 4 + 4 * 32;

    address public immutable owner;
    uint64 internal immutable localChainSelector;
    MockUSDC internal immutable token;
    ICctpMessageTransmitterV2 internal immutable messageTransmitter;
    uint32 internal immutable localDomain;
    uint32 internal immutable permissionLessExecutionThresholdSeconds;

    mapping(address => bool) internal isTransmitter;
    mapping(uint64 => SourceChainConfig) private s_sourceChainConfigs;
    mapping(uint64 => mapping(uint64 => uint256)) private s_executionStates;
    mapping(uint64 => mapping(bytes32 => uint256)) private s_roots;
    mapping(uint64 => mapping(bytes => uint64)) private s_inboundNonces;

    event ExecutionStateChanged(
        uint64 indexed sourceChainSelector,
        uint64 indexed sequenceNumber,
        bytes32 indexed messageId,
        bytes32 messageHash,
        uint8 state,
        bytes returnData,
        uint256 gasUsed
    );
    event SourceChainConfigSet(uint64 indexed sourceChainSelector, SourceChainConfig sourceConfig);
    event SkippedAlreadyExecutedMessage(uint64 sourceChainSelector, uint64 sequenceNumber);
    event AlreadyAttempted(uint64 sourceChainSelector, uint64 sequenceNumber);
    event CommitReportAccepted(
        MerkleRoot[] blessedMerkleRoots, MerkleRoot[] unblessedMerkleRoots, PriceUpdates priceUpdates
    );
    event Transmitted(uint8 indexed ocrPluginType, bytes32 configDigest, uint64 sequenceNumber);
    event TransmitterSet(address indexed transmitter, bool enabled);

    error OnlyCallableByOwner();
    error UnauthorizedTransmitter();
    error ExecutionError(bytes32 messageId, bytes err);
    error SourceChainNotEnabled(uint64 sourceChainSelector);
    error TokenDataMismatch(uint64 sourceChainSelector, uint64 sequenceNumber);
    error UnexpectedTokenData();
    error ManualExecutionNotYetEnabled(uint64 sourceChainSelector);
    error ManualExecutionGasLimitMismatch();
    error InvalidManualExecutionGasLimit(uint64 sourceChainSelector, bytes32 messageId, uint256 newLimit);
    error InvalidManualExecutionTokenGasOverride(
        bytes32 messageId, uint256 tokenIndex, uint256 oldLimit, uint256 tokenGasOverride
    );
    error ManualExecutionGasAmountCountMismatch(bytes32 messageId, uint64 sequenceNumber);
    error RootNotCommitted(uint64 sourceChainSelector);
    error RootAlreadyCommitted(uint64 sourceChainSelector, bytes32 merkleRoot);
    error InvalidRoot();
    error CanOnlySelfCall();
    error TokenHandlingError(address target, bytes err);
    error ReleaseOrMintBalanceMismatch(uint256 amountReleased, uint256 balancePre, uint256 balancePost);
    error EmptyReport(uint64 sourceChainSelector);
    error EmptyBatch();
    error NotACompatiblePool(address notPool);
    error InvalidMessageDestChainSelector(uint64 messageDestChainSelector);
    error SourceChainSelectorMismatch(uint64 reportSourceChainSelector, uint64 messageSourceChainSelector);
    error CommitOnRampMismatch(bytes reportOnRamp, bytes configOnRamp);
    error InvalidInterval(uint64 sourceChainSelector, uint64 min, uint64 max);
    error RootBlessingMismatch(uint64 sourceChainSelector, bytes32 merkleRoot, bool isBlessed);
    error ZeroChainSelectorNotAllowed();
    error NotEnoughGasForCall();
    error InvalidMessageLength(uint256 length);
    error InvalidMessageVersion(uint32 expected, uint32 got);
    error InvalidSourceDomain(uint32 expected, uint32 got);
    error InvalidDestinationDomain(uint32 expected, uint32 got);
    error InvalidCCTPVersion(uint8 expected, uint8 got);
    error InvalidMinFinalityThreshold(uint32 expected, uint32 got);
    error InvalidExecutionFinalityThreshold(uint32 expected, uint32 got);
    error UnlockingUSDCFailed();

    constructor(
        uint64 localChainSelector_,
        MockUSDC token_,
        ICctpMessageTransmitterV2 messageTransmitter_,
        uint32 localDomain_,
        uint32 permissionLessExecutionThresholdSeconds_
    ) {
        if (localChainSelector_ == 0) revert ZeroChainSelectorNotAllowed();
        owner = msg.sender;
        localChainSelector = localChainSelector_;
        token = token_;
        messageTransmitter = messageTransmitter_;
        localDomain = localDomain_;
        permissionLessExecutionThresholdSeconds = permissionLessExecutionThresholdSeconds_;
    }

    function typeAndVersion() external pure returns (string memory) {
        return "OffRamp 1.6.0 (local double)";
    }

    // ------------------------------------------------------------ configuration

    function setTransmitter(address transmitter, bool enabled) external {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        isTransmitter[transmitter] = enabled;
        emit TransmitterSet(transmitter, enabled);
    }

    function applySourceChainConfigUpdates(SourceChainConfigArgs[] calldata sourceChainConfigUpdates) external {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        for (uint256 i = 0; i < sourceChainConfigUpdates.length; ++i) {
            SourceChainConfigArgs calldata update = sourceChainConfigUpdates[i];
            if (update.sourceChainSelector == 0) revert ZeroChainSelectorNotAllowed();
            // no RMN here: every source's roots are unblessed
            if (!update.isRMNVerificationDisabled || update.onRamp.length != 32) {
                revert SourceChainNotEnabled(update.sourceChainSelector);
            }
            SourceChainConfig storage config = s_sourceChainConfigs[update.sourceChainSelector];
            if (config.minSeqNr == 0) config.minSeqNr = 1;
            config.router = update.router;
            config.isEnabled = update.isEnabled;
            config.isRMNVerificationDisabled = true;
            config.onRamp = update.onRamp;
            emit SourceChainConfigSet(update.sourceChainSelector, config);
        }
    }

    function getSourceChainConfig(uint64 sourceChainSelector) external view returns (SourceChainConfig memory) {
        return s_sourceChainConfigs[sourceChainSelector];
    }

    function _enabledSource(uint64 sourceChainSelector) private view returns (SourceChainConfig storage config) {
        config = s_sourceChainConfigs[sourceChainSelector];
        if (!config.isEnabled) revert SourceChainNotEnabled(sourceChainSelector);
    }

    // ------------------------------------------------------------ states

    function getExecutionState(uint64 sourceChainSelector, uint64 sequenceNumber) public view returns (uint8) {
        return uint8(s_executionStates[sourceChainSelector][sequenceNumber]);
    }

    function _setExecutionState(uint64 sourceChainSelector, uint64 sequenceNumber, uint8 newState) private {
        s_executionStates[sourceChainSelector][sequenceNumber] = newState;
    }

    function getMerkleRoot(uint64 sourceChainSelector, bytes32 root) external view returns (uint256) {
        return s_roots[sourceChainSelector][root];
    }

    // ------------------------------------------------------------ commit

    /// @notice Commit the report's roots: the transmitter's.
    function commit(
        bytes32[2] calldata reportContext,
        bytes calldata report,
        bytes32[] calldata,
        bytes32[] calldata,
        bytes32
    ) external {
        if (!isTransmitter[msg.sender]) revert UnauthorizedTransmitter();
        CommitReport memory commitReport = abi.decode(report, (CommitReport));
        if (commitReport.blessedMerkleRoots.length != 0) {
            MerkleRoot memory blessed = commitReport.blessedMerkleRoots[0];
            revert RootBlessingMismatch(blessed.sourceChainSelector, blessed.merkleRoot, true);
        }
        for (uint256 i = 0; i < commitReport.unblessedMerkleRoots.length; ++i) {
            _commitRoot(commitReport.unblessedMerkleRoots[i]);
        }
        emit CommitReportAccepted(
            commitReport.blessedMerkleRoots, commitReport.unblessedMerkleRoots, commitReport.priceUpdates
        );
        emit Transmitted(0, reportContext[0], uint64(uint256(reportContext[1])));
    }

    function _commitRoot(MerkleRoot memory root) private {
        SourceChainConfig storage config = _enabledSource(root.sourceChainSelector);
        if (keccak256(root.onRampAddress) != keccak256(config.onRamp)) {
            revert CommitOnRampMismatch(root.onRampAddress, config.onRamp);
        }
        if (config.minSeqNr != root.minSeqNr || root.minSeqNr > root.maxSeqNr) {
            revert InvalidInterval(root.sourceChainSelector, root.minSeqNr, root.maxSeqNr);
        }
        if (root.merkleRoot == bytes32(0)) revert InvalidRoot();
        if (s_roots[root.sourceChainSelector][root.merkleRoot] != 0) {
            revert RootAlreadyCommitted(root.sourceChainSelector, root.merkleRoot);
        }
        config.minSeqNr = root.maxSeqNr + 1;
        s_roots[root.sourceChainSelector][root.merkleRoot] = block.timestamp;
    }

    // ------------------------------------------------------------ execution

    /// @notice Execute abi.encode(ExecutionReport[]): the transmitter's.
    function execute(bytes32[2] calldata reportContext, bytes calldata report) external {
        if (!isTransmitter[msg.sender]) revert UnauthorizedTransmitter();
        _batchExecute(abi.decode(report, (ExecutionReport[])), new GasLimitOverride[][](0));
        emit Transmitted(1, reportContext[0], uint64(uint256(reportContext[1])));
    }

    /// @notice Execute reports again by hand: anyone, for messages that FAILED
    /// (or whose commit is older than the permissionless threshold), with gas
    /// overrides per message (0: none) no lower than the message's own.
    function manuallyExecute(ExecutionReport[] memory reports, GasLimitOverride[][] memory gasLimitOverrides)
        external
    {
        uint256 numReports = reports.length;
        if (numReports != gasLimitOverrides.length) revert ManualExecutionGasLimitMismatch();
        for (uint256 reportIndex = 0; reportIndex < numReports; ++reportIndex) {
            ExecutionReport memory report = reports[reportIndex];
            GasLimitOverride[] memory overrides = gasLimitOverrides[reportIndex];
            if (report.messages.length != overrides.length) revert ManualExecutionGasLimitMismatch();
            for (uint256 msgIndex = 0; msgIndex < report.messages.length; ++msgIndex) {
                _checkOverride(report.sourceChainSelector, report.messages[msgIndex], overrides[msgIndex]);
            }
        }
        _batchExecute(reports, gasLimitOverrides);
    }

    function _checkOverride(
        uint64 sourceChainSelector,
        Any2EVMRampMessage memory message,
        GasLimitOverride memory gasOverride
    ) private pure {
        uint256 newLimit = gasOverride.receiverExecutionGasLimit;
        if (newLimit != 0 && newLimit < message.gasLimit) {
            revert InvalidManualExecutionGasLimit(sourceChainSelector, message.header.messageId, newLimit);
        }
        if (message.tokenAmounts.length != gasOverride.tokenGasOverrides.length) {
            revert ManualExecutionGasAmountCountMismatch(message.header.messageId, message.header.sequenceNumber);
        }
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            uint256 tokenGasOverride = gasOverride.tokenGasOverrides[i];
            uint256 destGasAmount = message.tokenAmounts[i].destGasAmount;
            if (tokenGasOverride != 0 && tokenGasOverride < destGasAmount) {
                revert InvalidManualExecutionTokenGasOverride(
                    message.header.messageId, i, destGasAmount, tokenGasOverride
                );
            }
        }
    }

    function _batchExecute(ExecutionReport[] memory reports, GasLimitOverride[][] memory manualOverrides) private {
        if (reports.length == 0) revert EmptyBatch();
        bool manual = manualOverrides.length != 0;
        GasLimitOverride[] memory none = new GasLimitOverride[](0);
        for (uint256 i = 0; i < reports.length; ++i) {
            _executeSingleReport(reports[i], manual ? manualOverrides[i] : none);
        }
    }

    function _executeSingleReport(ExecutionReport memory report, GasLimitOverride[] memory manualOverrides)
        private
    {
        uint64 sourceChainSelector = report.sourceChainSelector;
        uint256 numMsgs = report.messages.length;
        if (numMsgs == 0) revert EmptyReport(sourceChainSelector);
        if (numMsgs != report.offchainTokenData.length) revert UnexpectedTokenData();
        (uint256 timestampCommitted, bytes32[] memory hashedLeaves) = _verifyReport(report);
        for (uint256 i = 0; i < numMsgs; ++i) {
            _executeMessage(
                report.messages[i],
                report.offchainTokenData[i],
                hashedLeaves[i],
                timestampCommitted,
                manualOverrides.length != 0,
                manualOverrides.length != 0 ? manualOverrides[i] : GasLimitOverride(0, new uint32[](0))
            );
        }
    }

    /// @dev The leaves of the report's messages and the commit time of their root.
    function _verifyReport(ExecutionReport memory report)
        private
        view
        returns (uint256 timestampCommitted, bytes32[] memory hashedLeaves)
    {
        uint64 sourceChainSelector = report.sourceChainSelector;
        bytes32 metadataHash = keccak256(
            abi.encode(
                CcipHash.ANY_2_EVM_MESSAGE_HASH,
                sourceChainSelector,
                localChainSelector,
                keccak256(_enabledSource(sourceChainSelector).onRamp)
            )
        );
        hashedLeaves = new bytes32[](report.messages.length);
        for (uint256 i = 0; i < report.messages.length; ++i) {
            Any2EVMRampMessage memory message = report.messages[i];
            if (message.header.destChainSelector != localChainSelector) {
                revert InvalidMessageDestChainSelector(message.header.destChainSelector);
            }
            if (message.header.sourceChainSelector != sourceChainSelector) {
                revert SourceChainSelectorMismatch(sourceChainSelector, message.header.sourceChainSelector);
            }
            hashedLeaves[i] = CcipHash.any2Evm(message, metadataHash);
        }
        bytes32 root = CcipHash.merkleRoot(hashedLeaves, report.proofs, report.proofFlagBits);
        timestampCommitted = s_roots[sourceChainSelector][root];
        if (timestampCommitted == 0) revert RootNotCommitted(sourceChainSelector);
    }

    function _executeMessage(
        Any2EVMRampMessage memory message,
        bytes[] memory offchainTokenData,
        bytes32 leaf,
        uint256 timestampCommitted,
        bool manual,
        GasLimitOverride memory gasOverride
    ) private {
        uint256 gasStart = gasleft();
        uint64 source = message.header.sourceChainSelector;
        uint64 seq = message.header.sequenceNumber;
        uint8 originalState = getExecutionState(source, seq);
        if (originalState != UNTOUCHED && originalState != FAILURE) {
            emit SkippedAlreadyExecutedMessage(source, seq);
            return;
        }
        if (manual) {
            bool isOldCommitReport =
                (block.timestamp - timestampCommitted) > permissionLessExecutionThresholdSeconds;
            if (!(isOldCommitReport || originalState == FAILURE)) revert ManualExecutionNotYetEnabled(source);
            if (gasOverride.receiverExecutionGasLimit != 0) message.gasLimit = gasOverride.receiverExecutionGasLimit;
        } else if (originalState != UNTOUCHED) {
            emit AlreadyAttempted(source, seq);
            return;
        }
        if (message.header.nonce != 0 && originalState == UNTOUCHED) {
            // ordered: executed in nonce order per sender, a skipped one ignored
            if (s_inboundNonces[source][message.sender] + 1 != message.header.nonce) return;
            s_inboundNonces[source][message.sender] = message.header.nonce;
        }
        if (message.tokenAmounts.length != offchainTokenData.length) revert TokenDataMismatch(source, seq);

        _setExecutionState(source, seq, IN_PROGRESS);
        uint8 newState = SUCCESS;
        bytes memory returnData;
        try this.executeSingleMessage(message, offchainTokenData, gasOverride.tokenGasOverrides) {}
        catch (bytes memory err) {
            newState = FAILURE;
            returnData = err;
        }
        _setExecutionState(source, seq, newState);
        if (manual && newState == FAILURE && originalState != UNTOUCHED) {
            revert ExecutionError(message.header.messageId, returnData);
        }
        emit ExecutionStateChanged(
            source, seq, message.header.messageId, leaf, newState, returnData, gasStart - gasleft()
        );
    }

    /// @notice The release of one message's tokens; this contract only.
    function executeSingleMessage(
        Any2EVMRampMessage memory message,
        bytes[] calldata offchainTokenData,
        uint32[] calldata tokenGasOverrides
    ) external {
        if (msg.sender != address(this)) revert CanOnlySelfCall();
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            Any2EVMTokenTransfer memory transfer = message.tokenAmounts[i];
            if (tokenGasOverrides.length != 0 && tokenGasOverrides[i] != 0) {
                transfer.destGasAmount = tokenGasOverrides[i];
            }
            _releaseOrMintSingleToken(
                transfer, message.sender, message.receiver, message.header.sourceChainSelector, offchainTokenData[i]
            );
        }
    }

    function _releaseOrMintSingleToken(
        Any2EVMTokenTransfer memory transfer,
        bytes memory originalSender,
        address receiver,
        uint64 sourceChainSelector,
        bytes memory offchainTokenData
    ) private {
        if (transfer.destTokenAddress != address(token)) revert NotACompatiblePool(address(0));
        uint256 gasLimit = transfer.destGasAmount;
        // all of the transfer's gas must reach the release (EIP-150 keeps 1/64
        // back), or a caller short of gas could make a good message FAIL
        if (gasleft() < gasLimit + gasLimit / 63 + GAS_FOR_CALL_EXACT_CHECK) revert NotEnoughGasForCall();
        uint256 balancePre = token.balanceOf(receiver);
        uint256 released;
        try this.releaseOrMint{gas: gasLimit}(
            ReleaseOrMintInV1({
                originalSender: originalSender,
                remoteChainSelector: sourceChainSelector,
                receiver: receiver,
                sourceDenominatedAmount: transfer.amount,
                localToken: transfer.destTokenAddress,
                sourcePoolAddress: transfer.sourcePoolAddress,
                sourcePoolData: transfer.extraData,
                offchainTokenData: offchainTokenData
            })
        ) returns (ReleaseOrMintOutV1 memory out) {
            released = out.destinationAmount;
        } catch (bytes memory err) {
            if (err.length > MAX_RET_BYTES) {
                assembly {
                    mstore(err, 132) // MAX_RET_BYTES
                }
            }
            revert TokenHandlingError(address(this), err);
        }
        uint256 balancePost = token.balanceOf(receiver);
        if (balancePost < balancePre || balancePost - balancePre != released) {
            revert ReleaseOrMintBalanceMismatch(released, balancePre, balancePost);
        }
    }

    /// @notice The USDC pool's releaseOrMint (USDCTokenPoolCCTPV2's
    /// signature): the CCTP message and attestation of the offchain token
    /// data, checked against the source's payload (sourcePoolData), received
    /// by the chain's MessageTransmitterV2, which mints to the receiver; the
    /// amount released is the amount sent (USDC has 6 decimals on every
    /// chain). Only this contract may call it: the double is its own pool,
    /// where the real pool accepts the Router's OffRamps.
    function releaseOrMint(ReleaseOrMintInV1 calldata releaseOrMintIn)
        external
        returns (ReleaseOrMintOutV1 memory)
    {
        if (msg.sender != address(this)) revert CanOnlySelfCall();
        if (releaseOrMintIn.localToken != address(token)) revert NotACompatiblePool(address(0));
        if (
            keccak256(releaseOrMintIn.sourcePoolAddress)
                != keccak256(_enabledSource(releaseOrMintIn.remoteChainSelector).onRamp)
        ) {
            revert NotACompatiblePool(releaseOrMintIn.receiver);
        }
        MessageAndAttestation memory given = abi.decode(releaseOrMintIn.offchainTokenData, (MessageAndAttestation));
        SourceTokenDataPayload memory payload = abi.decode(releaseOrMintIn.sourcePoolData, (SourceTokenDataPayload));
        _validateMessage(given.message, payload);
        if (!messageTransmitter.receiveMessage(given.message, given.attestation)) revert UnlockingUSDCFailed();
        return ReleaseOrMintOutV1({destinationAmount: releaseOrMintIn.sourceDenominatedAmount});
    }

    function _validateMessage(bytes memory usdcMessage, SourceTokenDataPayload memory sourceTokenData)
        private
        view
    {
        if (usdcMessage.length < 148) revert InvalidMessageLength(usdcMessage.length);
        uint32 version;
        uint32 messageSourceDomain;
        uint32 destinationDomain;
        uint32 minFinalityThreshold;
        uint32 finalityThresholdExecuted;
        assembly {
            version := mload(add(usdcMessage, 4))
            messageSourceDomain := mload(add(usdcMessage, 8))
            destinationDomain := mload(add(usdcMessage, 12))
            minFinalityThreshold := mload(add(usdcMessage, 144))
            finalityThresholdExecuted := mload(add(usdcMessage, 148))
        }
        if (version != CCTP_MESSAGE_VERSION) revert InvalidMessageVersion(CCTP_MESSAGE_VERSION, version);
        if (messageSourceDomain != sourceTokenData.sourceDomain) {
            revert InvalidSourceDomain(sourceTokenData.sourceDomain, messageSourceDomain);
        }
        if (destinationDomain != localDomain) revert InvalidDestinationDomain(localDomain, destinationDomain);
        if (sourceTokenData.cctpVersion != CCTP_V2) revert InvalidCCTPVersion(CCTP_V2, sourceTokenData.cctpVersion);
        if (minFinalityThreshold != CCTP_FINALITY_THRESHOLD) {
            revert InvalidMinFinalityThreshold(CCTP_FINALITY_THRESHOLD, minFinalityThreshold);
        }
        if (finalityThresholdExecuted != CCTP_FINALITY_THRESHOLD) {
            revert InvalidExecutionFinalityThreshold(CCTP_FINALITY_THRESHOLD, finalityThresholdExecuted);
        }
    }
}
