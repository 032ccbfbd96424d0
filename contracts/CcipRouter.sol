// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

import {EVM2AnyMessage} from "./CcipTypes.sol";
import {MockUSDC} from "./MockUSDC.sol";

/// The Router's view of an OnRamp (IEVM2AnyOnRampClient): v1.6's OnRamp and
/// v1.5's EVM2EVMOnRamp both answer these.
interface IEVM2AnyOnRampClient {
    function getFee(uint64 destChainSelector, EVM2AnyMessage calldata message) external view returns (uint256);
    function getPoolBySourceToken(uint64 destChainSelector, address sourceToken) external view returns (address);
    function forwardFromRouter(
        uint64 destChainSelector,
        EVM2AnyMessage calldata message,
        uint256 feeTokenAmount,
        address originalSender
    ) external returns (bytes32);
}

/// @title CcipRouter (local double)
/// @notice The CCIP Router of a local chain (Router 1.2.0, which v1.5 and v1.6
/// lanes share), written from the public interface: `getFee` and `ccipSend`
/// for the destinations it has an OnRamp for, `applyRampUpdates`,
/// `getOnRamp`, `isOffRamp`, `isChainSupported`. The tokens are pulled from
/// the sender (approve this Router first) into the OnRamp's pool for the
/// token (`getPoolBySourceToken`), the OnRamp takes them from there.
///
/// Differences from the production Router: the fee is paid in the native coin
/// only (a feeToken other than address(0) is refused) and stays here as the
/// coin (the production Router wraps it, WETH, for the OnRamp); all of
/// msg.value is the fee: an overpaid one is kept, as the production Router
/// keeps it; there is no RMN curse check and no receiving side
/// (`routeMessage`: the OffRamps deliver tokens only).
contract CcipRouter {
    struct OnRamp {
        uint64 destChainSelector;
        address onRamp;
    }

    struct OffRamp {
        uint64 sourceChainSelector;
        address offRamp;
    }

    address public immutable owner;
    uint64 internal immutable localChainSelector;

    mapping(uint64 => address) private s_onRamps;
    mapping(uint64 => mapping(address => bool)) private s_offRamps;

    event OnRampSet(uint64 indexed destChainSelector, address onRamp);
    event OffRampAdded(uint64 indexed sourceChainSelector, address offRamp);
    event OffRampRemoved(uint64 indexed sourceChainSelector, address offRamp);

    error UnsupportedDestinationChain(uint64 destChainSelector);
    error InsufficientFeeTokenAmount();
    error UnsupportedFeeToken(address feeToken);
    error InvalidTokenAmount(address token);
    error OffRampMismatch(uint64 chainSelector, address offRamp);
    error OnlyCallableByOwner();

    constructor(uint64 localChainSelector_) {
        owner = msg.sender;
        localChainSelector = localChainSelector_;
    }

    function typeAndVersion() external pure returns (string memory) {
        return "Router 1.2.0 (local double)";
    }

    /// @notice Set OnRamps and add or remove OffRamps (the owner's).
    function applyRampUpdates(
        OnRamp[] calldata onRampUpdates,
        OffRamp[] calldata offRampRemoves,
        OffRamp[] calldata offRampAdds
    ) external {
        if (msg.sender != owner) revert OnlyCallableByOwner();
        for (uint256 i = 0; i < onRampUpdates.length; ++i) {
            s_onRamps[onRampUpdates[i].destChainSelector] = onRampUpdates[i].onRamp;
            emit OnRampSet(onRampUpdates[i].destChainSelector, onRampUpdates[i].onRamp);
        }
        for (uint256 i = 0; i < offRampRemoves.length; ++i) {
            OffRamp calldata removed = offRampRemoves[i];
            if (!s_offRamps[removed.sourceChainSelector][removed.offRamp]) {
                revert OffRampMismatch(removed.sourceChainSelector, removed.offRamp);
            }
            s_offRamps[removed.sourceChainSelector][removed.offRamp] = false;
            emit OffRampRemoved(removed.sourceChainSelector, removed.offRamp);
        }
        for (uint256 i = 0; i < offRampAdds.length; ++i) {
            OffRamp calldata added = offRampAdds[i];
            if (!s_offRamps[added.sourceChainSelector][added.offRamp]) {
                s_offRamps[added.sourceChainSelector][added.offRamp] = true;
                emit OffRampAdded(added.sourceChainSelector, added.offRamp);
            }
        }
    }

    function getOnRamp(uint64 destChainSelector) external view returns (address) {
        return s_onRamps[destChainSelector];
    }

    function isOffRamp(uint64 sourceChainSelector, address offRamp) external view returns (bool) {
        return s_offRamps[sourceChainSelector][offRamp];
    }

    function isChainSupported(uint64 chainSelector) public view returns (bool) {
        return s_onRamps[chainSelector] != address(0);
    }

    /// @notice The native fee `ccipSend` needs for `message` to `destinationChainSelector`.
    function getFee(uint64 destinationChainSelector, EVM2AnyMessage calldata message)
        public
        view
        returns (uint256 fee)
    {
        address onRamp = s_onRamps[destinationChainSelector];
        if (onRamp == address(0)) revert UnsupportedDestinationChain(destinationChainSelector);
        if (message.feeToken != address(0)) revert UnsupportedFeeToken(message.feeToken);
        return IEVM2AnyOnRampClient(onRamp).getFee(destinationChainSelector, message);
    }

    /// @notice Send `message` to `destinationChainSelector`, paying at least
    /// getFee in the native coin (all of msg.value is the fee); returns the
    /// message id (also in the OnRamp's event).
    function ccipSend(uint64 destinationChainSelector, EVM2AnyMessage calldata message)
        external
        payable
        returns (bytes32)
    {
        uint256 fee = getFee(destinationChainSelector, message);
        if (msg.value < fee) revert InsufficientFeeTokenAmount();
        address onRamp = s_onRamps[destinationChainSelector];
        for (uint256 i = 0; i < message.tokenAmounts.length; ++i) {
            address token = message.tokenAmounts[i].token;
            uint256 amount = message.tokenAmounts[i].amount;
            if (amount == 0 || token == address(0)) revert InvalidTokenAmount(token);
            address pool = IEVM2AnyOnRampClient(onRamp).getPoolBySourceToken(destinationChainSelector, token);
            if (pool == address(0)) revert InvalidTokenAmount(token);
            // into the token's pool, from the sender's allowance to this Router
            require(MockUSDC(token).transferFrom(msg.sender, pool, amount), "transfer failed");
        }
        return IEVM2AnyOnRampClient(onRamp).forwardFromRouter(destinationChainSelector, message, msg.value, msg.sender);
    }
}
