"""EVM chains: the local anvil chains the tests and `qtg chains` run."""
