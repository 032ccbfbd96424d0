"""What the sub-commands share: the errors an operator can fix, as one line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import typer

from qtg_runner.config import ConfigError
from qtg_runner.credentials import CredentialsError
from qtg_runner.db.embedded import EmbeddedServerError
from qtg_runner.db.logins import LoginError
from qtg_runner.db.migrate import MigrationError
from qtg_runner.runtime import DeployError

FIXABLE: tuple[type[BaseException], ...] = (
    ConfigError,
    CredentialsError,
    DeployError,
    EmbeddedServerError,
    LoginError,
    MigrationError,
    psycopg.Error,
)
"""Errors that say what to fix: `qtg` prints them as one `qtg: error:` line, exit 1."""


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def fail(exc: BaseException) -> typer.Exit:
    """Print ``exc`` as the one error line; the caller raises the returned Exit(1)."""
    typer.echo(f"qtg: error: {one_line(exc)}", err=True)
    return typer.Exit(1)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn the errors an operator can fix into one line on stderr and exit 1."""
    try:
        yield
    except FIXABLE as exc:
        raise fail(exc) from None
    except Exception as exc:
        # yoyo's LockTimeout and friends do not share a base class with psycopg's
        if type(exc).__module__.startswith("yoyo"):
            raise fail(exc) from None
        raise
