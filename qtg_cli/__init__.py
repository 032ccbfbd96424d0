"""The `qtg` console script: the runtime's commands (qtg_runner.cli), the
local outside world's (qtg_world.commands: demo, chains, world, drill) and the
rehearsal's (qtg_rehearsal) in one app. The runtime never imports the world
nor the rehearsal; this package, outside them, joins them. Every sub-command
is still loaded only when it is run."""

from __future__ import annotations

from collections.abc import Mapping

from qtg_runner.cli import RUNTIME_COMMANDS, build_app
from qtg_runner.commands.common import LazyCommand

WORLD_COMMANDS: Mapping[str, LazyCommand] = {
    "demo": LazyCommand(
        "qtg_world.commands.demo:demo_cmd",
        "Run realistic movements end to end and check them.",
    ),
    "chains": LazyCommand(
        "qtg_world.commands.chains:app", "Local EVM chains for development and tests."
    ),
    "world": LazyCommand(
        "qtg_world.commands.world:app",
        "The local outside world: chains, fake Iris, fake Bybit.",
    ),
    "drill": LazyCommand(
        "qtg_world.commands.drill:app", "Drills: real movements through the whole engine."
    ),
}
"""The world's sub-commands, loaded (with qtg_world) only when one is run."""

REHEARSAL_COMMANDS: Mapping[str, LazyCommand] = {
    "rehearse": LazyCommand(
        "qtg_rehearsal.command:rehearse_cmd",
        "Rehearse a movement on forks of its chains before approval.",
    ),
}
"""The rehearsal (qtg_rehearsal: the runtime's executors on the world's doubles)."""

ORDER = (
    "run",
    "worker",
    "status",
    "demo",
    "operator",
    "runner",
    "executors",
    "movement",
    "rehearse",
    "node",
    "pause",
    "resume",
    "proposals",
    "registry",
    "chains",
    "world",
    "drill",
    "audit",
    "callbacks",
    "balances",
    "api",
    "reader",
)
"""The order `qtg --help` lists the sub-commands in (after `db`)."""

_EVERY = {**RUNTIME_COMMANDS, **WORLD_COMMANDS, **REHEARSAL_COMMANDS}
COMMANDS: Mapping[str, LazyCommand] = {
    name: _EVERY[name] for name in sorted(_EVERY, key=ORDER.index)
}

app = build_app(COMMANDS)
"""Every `qtg` command: the runtime's and the world's."""


def run() -> None:
    """The `qtg` console script. Every error, whatever raised it, ends as one
    `qtg: error: ...` line on stderr and a non-zero exit (QtgGroup: 2 for a
    bad input or a procedure's refusal, 1 for the environment), never a
    traceback."""
    app()


if __name__ == "__main__":
    run()
