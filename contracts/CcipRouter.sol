// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {EVM2AnyMessage} from "./CcipTypes.sol";
import {CcipOnRamp} from "./CcipOnRamp.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// @title CcipRouter (local double)
/// @notice The CCIP Router of a local chain, written from the public v1.6
/// interface: `getFee` and `ccipSend` for the destinations it has an OnRamp
/// for. The tokens are pulled from the sender (approve this Router first) into
/// the OnRamp, which is also the token pool here.
///
/// Differences from the production Router: the fee is paid in the native coin
/// only (a feeToken other than address(0) is refused); an overpaid native fee
/// is kept, as the production Router keeps it; there is no wrapped native, no
/// ARM/RMN curse check and no receiving side (the OffRamp mints directly).
contract CcipRouter {
    address public immutable owner;
    uint64 public immutable localChainSelector;

    /// @notice the OnRamp of each destination chain selector (none: unsupported)
    mapping(uint64 => address) public getOnRamp;

    event OnRampSet(uint64 indexed destChainSelector, address onRamp);

    error UnsupportedDestinationChain(uint64 destChainSelector);
    error InsufficientFeeTokenAmount();
    error InvalidMsgValue();
    error UnsupportedFeeToken(address feeToken);
    error InvalidTokenAmount(address token);
    error OnlyOwner();

    constructor(uint64 localChainSelector_) {
        owner = msg.sender;
        localChainSelector = localChainSelector_;
    }

    function setOnRamp(uint64 destChainSelector, address onRamp) external {
        if (msg.sender != owner) revert OnlyOwner();
        getOnRamp[destChainSelector] = onRamp;
        emit OnRampSet(destChainSelector, onRamp);
    }

    function isChainSupported(uint64 chainSelector) public view returns (bool) {
        return getOnRamp[chainSelector] != address(0);
    }

    /// @notice The native fee `ccipSend` needs for `message` to `destinationChainSelector`.
    function getFee(uint64 destinationChainSelector, EVM2AnyMessage calldata message)
        public
        view
        returns (uint256 fee)
    {
        address onRamp = getOnRamp[destinationChainSelector];
        if (onRamp == address(0)) revert UnsupportedDestinationChain(destinationChainSelector);
        if (message.feeToken != address(0)) revert UnsupportedFeeToken(message.feeToken);
        return CcipOnRamp(onRamp).getFee(destinationChainSelector, message);
    }

    /// @notice Send `message` to `destinationChainSelector`, paying at least
    /// getFee in the native coin; returns the message id (also in the
    /// OnRamp's CCIPMessageSent header).
    function ccipSend(uint64 destinationChainSelector, EVM2AnyMessage calldata message)
        external
        payable
        returns (bytes32)
    {
        uint256 fee = getFee(destinationChainSelector, message);
        if (msg.value < fee) revert InsufficientFeeTokenAmount();
        address onRamp = getOnRamp[destinationChainSelector];
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            address token = message.tokenAmounts[i].token;
            uint256 amount = message.tokenAmounts[i].amount;
            if (amount == 0 || token == address(0)) revert InvalidTokenAmount(token);
            // into the pool (the OnRamp), from the sender's allowance to this Router
            require(MockUSDC(token).transferFrom(msg.sender, onRamp, amount), "transfer failed");
        }
        return CcipOnRamp(onRamp).forwardFromRouter(destinationChainSelector, message, msg.value, msg.sender);
    }
}
