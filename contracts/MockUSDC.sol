// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title MockUSDC
/// @notice A USDC-like ERC-20 for the local test chains: 6 decimals, standard
/// transfer / approve / transferFrom semantics with Transfer and Approval events,
/// and the minter interface of Circle's FiatTokenV2_2 that a CCTP or CCIP token
/// minter uses: `configureMinter` (the owner stands in for the master minter),
/// `mint` within a minter's allowance, `burn` of a minter's own balance, with
/// FiatToken's MinterConfigured, Mint and Burn events. The owner (the deployer)
/// also mints, to fund the local treasury.
contract MockUSDC {
    string public constant name = "Mock USD Coin";
    string public constant symbol = "USDC";
    uint8 public constant decimals = 6;

    address public immutable owner;
    uint256 public totalSupply;

    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    mapping(address => bool) public isMinter;
    mapping(address => uint256) public minterAllowance;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event MinterConfigured(address indexed minter, uint256 minterAllowedAmount);
    event Mint(address indexed minter, address indexed to, uint256 amount);
    event Burn(address indexed burner, uint256 amount);

    error NotOwner(address caller);
    error InsufficientBalance(address account, uint256 balance, uint256 needed);
    error InsufficientAllowance(address spender, uint256 allowance, uint256 needed);
    error ZeroAddress();
    error NotMinter(address caller);
    error MintAllowanceExceeded(address minter, uint256 allowance, uint256 needed);

    constructor() {
        owner = msg.sender;
    }

    /// @notice Let `minter` mint up to `minterAllowedAmount` (and burn its own
    /// balance); the owner only, as FiatToken's master minter.
    function configureMinter(address minter, uint256 minterAllowedAmount) external returns (bool) {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        if (minter == address(0)) revert ZeroAddress();
        isMinter[minter] = true;
        minterAllowance[minter] = minterAllowedAmount;
        emit MinterConfigured(minter, minterAllowedAmount);
        return true;
    }

    /// @notice Create `value` tokens for `to`: a minter within its allowance, or the owner.
    function mint(address to, uint256 value) external returns (bool) {
        if (to == address(0)) revert ZeroAddress();
        if (msg.sender != owner) {
            if (!isMinter[msg.sender]) revert NotMinter(msg.sender);
            uint256 left = minterAllowance[msg.sender];
            if (left < value) revert MintAllowanceExceeded(msg.sender, left, value);
            unchecked {
                minterAllowance[msg.sender] = left - value;
            }
        }
        totalSupply += value;
        balanceOf[to] += value;
        emit Mint(msg.sender, to, value);
        emit Transfer(address(0), to, value);
        return true;
    }

    /// @notice Destroy `value` of the caller's own tokens; a minter only.
    function burn(uint256 value) external {
        if (!isMinter[msg.sender]) revert NotMinter(msg.sender);
        uint256 balance = balanceOf[msg.sender];
        if (balance < value) revert InsufficientBalance(msg.sender, balance, value);
        unchecked {
            balanceOf[msg.sender] = balance - value;
            totalSupply -= value;
        }
        emit Burn(msg.sender, value);
        emit Transfer(msg.sender, address(0), value);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        if (spender == address(0)) revert ZeroAddress();
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < value) revert InsufficientAllowance(msg.sender, allowed, value);
            unchecked {
                allowance[from][msg.sender] = allowed - value;
            }
        }
        _move(from, to, value);
        return true;
    }

    function _move(address from, address to, uint256 value) private {
        if (to == address(0)) revert ZeroAddress();
        uint256 balance = balanceOf[from];
        if (balance < value) revert InsufficientBalance(from, balance, value);
        unchecked {
            balanceOf[from] = balance - value;
        }
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }
}
