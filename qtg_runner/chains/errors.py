"""The error of a chain the engine or its setup could not use: a node that did
not answer, a transaction that reverted or was not mined in time, a local file
it needs (a key file, a state file) missing or unusable. The local world's
chains raise it too (qtg_world.chains.local), and their own kinds of it."""

from __future__ import annotations

__all__ = ["ChainError"]


class ChainError(RuntimeError):
    """A chain could not be started, reached, deployed to or stopped, or what
    it needs could not be read."""
