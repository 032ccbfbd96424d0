"""``python -m qtg_cli``: the `qtg` command line."""

from qtg_cli import run

run()
