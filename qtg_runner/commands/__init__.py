"""Sub-commands of the `qtg` CLI, one module per group."""
