// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// The CCIP message types of the local double (CcipRouter, CcipOnRamp,
/// CcipOffRamp), written from the public v1.6 interfaces (Client.sol and
/// Internal.sol): field names, order and types as there, so an event or a call
/// encoded here decodes with the public ABI.

// ---------------------------------------------------------------- Client

/// A token and an amount in its base units (Client.EVMTokenAmount).
struct EVMTokenAmount {
    address token;
    uint256 amount;
}

/// What a sender hands the Router (Client.EVM2AnyMessage): the receiver is
/// abi.encode(address) for an EVM destination; feeToken address(0) is the
/// native coin; extraArgs is EVM_EXTRA_ARGS_V2_TAG ‖ abi.encode(gasLimit,
/// allowOutOfOrderExecution), or empty for the defaults.
struct EVM2AnyMessage {
    bytes receiver;
    bytes data;
    EVMTokenAmount[] tokenAmounts;
    address feeToken;
    bytes extraArgs;
}

// ---------------------------------------------------------------- Internal

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
