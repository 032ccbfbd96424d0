// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title MessageTransmitterV2 (local double)
/// @notice The CCTP v2 message transmitter for the local chains, written from the
/// public interface: the v2 message layout, `MessageSent` with a zero nonce and
/// zeroed execution fields (the attestation service fills them in), and
/// `receiveMessage` that verifies threshold-many attester signatures over
/// keccak256(message) in ascending signer order, spends the nonce once and hands
/// the body to the recipient's finalized or unfinalized handler.
///
/// Message layout (byte offsets): version u32 at 0, sourceDomain u32 at 4,
/// destinationDomain u32 at 8, nonce bytes32 at 12, sender bytes32 at 44, recipient
/// bytes32 at 76, destinationCaller bytes32 at 108, minFinalityThreshold u32 at 140,
/// finalityThresholdExecuted u32 at 144, messageBody at 148.
///
/// The recipient's handler reverts a message it refuses, and that revert reaches
/// the caller of `receiveMessage` as it is, the nonce left unused: past a fast
/// message's expirationBlock, TokenMessengerV2's "Message expired and must be
/// re-signed" (as in Circle's v2.1 contracts, where the messenger checks it too),
/// so that the message re-attested by Iris can still be received once.
///
/// Differences from the production contract: no proxy, pauser or rescuer; the
/// owner is the attester manager; only the local token messenger may send; a
/// message attested below its own minFinalityThreshold is refused here (the
/// production attester never signs one).
contract MessageTransmitterV2 {
    uint32 public constant version = 1;
    uint32 public constant FINALITY_THRESHOLD_FINALIZED = 2000;
    uint256 private constant HEADER_LENGTH = 148;
    uint256 private constant SIGNATURE_LENGTH = 65;
    // secp256k1n / 2: a higher s is the malleable twin of a valid signature
    uint256 private constant MAX_S = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0;

    uint32 public immutable localDomain;
    address public immutable owner;
    address public tokenMessenger;
    uint256 public signatureThreshold;
    uint256 private _enabledAttesterCount;

    mapping(address => bool) public isEnabledAttester;
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(
        address indexed caller,
        uint32 sourceDomain,
        bytes32 indexed nonce,
        bytes32 sender,
        uint32 indexed finalityThresholdExecuted,
        bytes messageBody
    );
    event AttesterEnabled(address indexed attester);
    event AttesterDisabled(address indexed attester);
    event SignatureThresholdUpdated(uint256 oldSignatureThreshold, uint256 newSignatureThreshold);
    event TokenMessengerSet(address tokenMessenger);

    constructor(uint32 localDomain_) {
        localDomain = localDomain_;
        owner = msg.sender;
    }

    modifier onlyOwner() {
        require(msg.sender == owner, "Caller is not the owner");
        _;
    }

    // ---------------------------------------------------------------- admin

    /// @notice The local TokenMessengerV2, the only sender of messages.
    function setTokenMessenger(address messenger) external onlyOwner {
        require(messenger != address(0), "TokenMessenger is the zero address");
        tokenMessenger = messenger;
        emit TokenMessengerSet(messenger);
    }

    function enableAttester(address attester) external onlyOwner {
        require(attester != address(0), "New attester must be nonzero");
        require(!isEnabledAttester[attester], "Attester already enabled");
        isEnabledAttester[attester] = true;
        _enabledAttesterCount += 1;
        emit AttesterEnabled(attester);
    }

    function disableAttester(address attester) external onlyOwner {
        require(isEnabledAttester[attester], "Attester already disabled");
        require(_enabledAttesterCount > signatureThreshold, "Signature threshold is too low");
        isEnabledAttester[attester] = false;
        _enabledAttesterCount -= 1;
        emit AttesterDisabled(attester);
    }

    function getNumEnabledAttesters() external view returns (uint256) {
        return _enabledAttesterCount;
    }

    function setSignatureThreshold(uint256 threshold) external onlyOwner {
        require(threshold > 0, "Invalid signature threshold");
        require(threshold <= _enabledAttesterCount, "New signature threshold too high");
        require(threshold != signatureThreshold, "Signature threshold already set");
        emit SignatureThresholdUpdated(signatureThreshold, threshold);
        signatureThreshold = threshold;
    }

    // ---------------------------------------------------------------- send

    /// @notice Emit `MessageSent` for the destination; the nonce and the
    /// finalityThresholdExecuted fields are left zero.
    function sendMessage(
        uint32 destinationDomain,
        bytes32 recipient,
        bytes32 destinationCaller,
        uint32 minFinalityThreshold,
        bytes calldata messageBody
    ) external {
        require(msg.sender == tokenMessenger, "Caller is not the local TokenMessenger");
        require(destinationDomain != localDomain, "Domain is local domain");
        require(recipient != bytes32(0), "Recipient must be nonzero");
        bytes memory message = abi.encodePacked(
            version,
            localDomain,
            destinationDomain,
            bytes32(0),
            bytes32(uint256(uint160(msg.sender))),
            recipient,
            destinationCaller,
            minFinalityThreshold,
            uint32(0),
            messageBody
        );
        emit MessageSent(message);
    }

    // ---------------------------------------------------------------- receive

    /// @notice Deliver an attested message once: signatures, destination domain,
    /// caller, version and nonce checked, then the recipient's handler called.
    function receiveMessage(bytes calldata message, bytes calldata attestation)
        external
        returns (bool)
    {
        _verifyAttestation(message, attestation);
        require(message.length >= HEADER_LENGTH, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[108:140]);
        if (destinationCaller != bytes32(0)) {
            require(
                destinationCaller == bytes32(uint256(uint160(msg.sender))),
                "Invalid caller for message"
            );
        }
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");
        bytes32 nonce = bytes32(message[12:44]);
        require(usedNonces[nonce] == 0, "Nonce already used");
        uint32 minFinality = uint32(bytes4(message[140:144]));
        uint32 executed = uint32(bytes4(message[144:148]));
        require(executed >= minFinality, "Finality below the message's minimum");
        usedNonces[nonce] = 1;

        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        bytes32 sender = bytes32(message[44:76]);
        address recipient = address(uint160(uint256(bytes32(message[76:108]))));
        bytes calldata body = message[HEADER_LENGTH:];
        string memory handler = executed >= FINALITY_THRESHOLD_FINALIZED
            ? "handleReceiveFinalizedMessage(uint32,bytes32,uint32,bytes)"
            : "handleReceiveUnfinalizedMessage(uint32,bytes32,uint32,bytes)";
        (bool ok, bytes memory ret) = recipient.call(
            abi.encodeWithSignature(handler, sourceDomain, sender, executed, body)
        );
        if (!ok) {
            assembly {
                revert(add(ret, 32), mload(ret))
            }
        }
        require(ret.length == 32 && abi.decode(ret, (bool)), "Message handler failed");

        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, executed, body);
        return true;
    }

    /// @dev exactly `signatureThreshold` 65-byte signatures (r, s, v) over
    /// keccak256(message), each by an enabled attester, signers strictly ascending.
    function _verifyAttestation(bytes calldata message, bytes calldata attestation) private view {
        uint256 threshold = signatureThreshold;
        require(threshold > 0, "Signature threshold is not set");
        require(attestation.length == threshold * SIGNATURE_LENGTH, "Invalid attestation length");
        bytes32 digest = keccak256(message);
        address previous = address(0);
        for (uint256 i = 0; i < threshold; i++) {
            bytes calldata sig = attestation[i * SIGNATURE_LENGTH:(i + 1) * SIGNATURE_LENGTH];
            bytes32 r = bytes32(sig[0:32]);
            bytes32 s = bytes32(sig[32:64]);
            uint8 v = uint8(sig[64]);
            require(uint256(s) <= MAX_S, "ECDSA: invalid signature 's' value");
            require(v == 27 || v == 28, "ECDSA: invalid signature 'v' value");
            address signer = ecrecover(digest, v, r, s);
            require(signer != address(0), "ECDSA: invalid signature");
            require(signer > previous, "Invalid signature order or dupe");
            require(isEnabledAttester[signer], "Invalid signature: not attester");
            previous = signer;
        }
    }
}
