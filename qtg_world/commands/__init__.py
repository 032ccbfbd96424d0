"""The world's sub-commands of the `qtg` CLI (qtg_cli adds them to the
runtime's): demo, world, chains, drill."""
