"""What the sub-commands share: the root command, which loads each when it is
run; the --network and --as options; their inputs parsed strictly; and every
error as one line.

The error contract of `qtg`: whatever goes wrong (a bad argument, file, id,
amount or duration, a procedure's refusal, an unreachable database, a bug)
ends in exactly one line on stderr, `qtg: error: ...`, and a non-zero exit:

    2   the command line or an input is wrong (usage), or a procedure refused
        the call with its QT SQLSTATE (the line carries the code and its hint)
    1   the environment is: a setting, the database, a migration; or a bug
        (the traceback is logged only with --verbose)
    130 interrupted (Ctrl-C)

``QtgGroup`` is the root command's class: it runs the command without click's
own error display and turns every exception into that line. The parsers below
(``parse_amount``, ``parse_duration``, ``read_json_file``, ...) refuse what
PostgreSQL or Python would otherwise fail on later: NaN and Infinity, numbers
a double cannot hold, JSON nested too deep, a file that is not UTF-8.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import json
import logging
import math
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any, ClassVar, NamedTuple, NoReturn

import psycopg
import typer
import typer.main
from typer import _click as click  # typer vendors click
from typer._click.exceptions import NoArgsIsHelpError, UsageError  # typer vendors click
from typer.core import TyperCommand, TyperGroup

from qtg_runner.config import NETWORK_MODES, ConfigError, NetworkMode, load_settings
from qtg_runner.credentials import CredentialsError
from qtg_runner.db import procs
from qtg_runner.db.embedded import EmbeddedServerError
from qtg_runner.db.logins import LoginError
from qtg_runner.db.migrate import MigrationError
from qtg_runner.deploy import DeployError
from qtg_runner.signers import SignerError

log = logging.getLogger("qtg.cli")

BIGINT_MAX = 2**63 - 1
"""The largest id a movement, node or proposal can have (bigint)."""

MAX_JSON_FILE_BYTES = 4 * 1024 * 1024
"""A plan file larger than this is refused before it is read (the engine's own
bound, engine_limits.max_plan_bytes, is 1 MiB)."""

MAX_JSON_DEPTH = 64
"""JSON nested deeper than this is refused (a plan is four levels deep)."""

FIXABLE: tuple[type[BaseException], ...] = (
    ConfigError,
    CredentialsError,
    DeployError,
    EmbeddedServerError,
    LoginError,
    MigrationError,
    SignerError,
    psycopg.Error,
)
"""Errors of the environment that say what to fix: one `qtg: error:` line, exit 1."""

USAGE = 2
ENVIRONMENT = 1
INTERRUPTED = 130


class CommandError(Exception):
    """A command's own refusal: printed as the one error line, with its exit code."""

    def __init__(self, message: str, exit_code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def one_line(exc: BaseException | str) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def fail(exc: BaseException) -> typer.Exit:
    """Print ``exc`` as the one error line; the caller raises the returned Exit."""
    message, code = describe(exc)
    typer.echo(f"qtg: error: {message}", err=True)
    return typer.Exit(code)


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


def describe(exc: BaseException) -> tuple[str, int]:
    """The one line (without ``qtg: error:``) and the exit code for ``exc``."""
    if isinstance(exc, CommandError):
        return one_line(exc.message), exc.exit_code
    if isinstance(exc, procs.Refused):
        hint = f" hint: {exc.hint}" if exc.hint else ""
        return one_line(f"refused ({exc.sqlstate}): {exc.message}.{hint}"), USAGE
    if isinstance(exc, psycopg.Error):
        sqlstate = exc.sqlstate or ""
        if sqlstate.startswith("QT"):
            diag = exc.diag
            hint = f" hint: {diag.message_hint}" if diag.message_hint else ""
            return one_line(f"({sqlstate}) {diag.message_primary}.{hint}"), USAGE
        return one_line(exc), ENVIRONMENT
    if isinstance(exc, typer.TyperException):  # click's usage errors and friends
        return one_line(exc.format_message()), exc.exit_code
    if isinstance(exc, FIXABLE) or type(exc).__module__.startswith("yoyo"):
        return one_line(exc), ENVIRONMENT
    return (
        one_line(f"unexpected {type(exc).__name__}: {exc} (run with --verbose for the traceback)"),
        ENVIRONMENT,
    )


class LazyCommand(NamedTuple):
    """A sub-command of the root loaded when it is run: where it is
    (``module:attribute``, a typer.Typer or a command function) and its line in
    `qtg --help`'s listing (also its help when the module gives none)."""

    target: str
    summary: str


class QtgGroup(TyperGroup):
    """The root command: every error ends as one `qtg: error:` line (see the
    module's contract), never click's error box nor a traceback.

    Its sub-commands are loaded when one is run (``lazy``, listed by
    `qtg --help` in this order after the commands added to the group itself).
    So `qtg movement approve` loads the movement commands and none of the
    runner's executors, chain or exchange clients, and `qtg --help` lists every
    command by its summary without loading any."""

    lazy: ClassVar[Mapping[str, LazyCommand]] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        eager = [name for name in super().list_commands(ctx) if name not in self.lazy]
        return [*eager, *self.lazy]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            if ctx.meta.get(_LISTING):
                # the help's listing: its line, the command left unloaded
                return TyperCommand(cmd_name, short_help=self.lazy[cmd_name].summary)
            self.add_command(_load_command(cmd_name, self.lazy[cmd_name]))
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            readable(command)
        return command

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        readable(self)
        ctx.meta[_LISTING] = True
        try:
            super().format_help(ctx, formatter)
        finally:
            del ctx.meta[_LISTING]

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:
            # not a command: the "did you mean" from every name, none loaded
            # (typer's own, from the loaded ones, is off: suggest_commands=False)
            matches = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                suggestions = ", ".join(f"{m!r}" for m in matches)
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {suggestions}?"
            raise

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:
            # `qtg` or `qtg movement` alone: the help, as click shows it
            typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
            sys.exit(USAGE)
        except (KeyboardInterrupt, typer.Abort):
            typer.echo("qtg: error: interrupted", err=True)
            sys.exit(INTERRUPTED)
        except Exception as exc:  # the contract: one line for anything
            if not isinstance(exc, (typer.TyperException, CommandError, procs.Refused, *FIXABLE)):
                log.debug("unexpected error", exc_info=exc)
            try:
                message, status = describe(exc)
            except Exception:  # the description itself failed: still one line
                message, status = f"unexpected {type(exc).__name__}", ENVIRONMENT
            typer.echo(f"qtg: error: {message}", err=True)
            sys.exit(status)
        sys.exit(code if isinstance(code, int) else 0)


_LISTING = "qtg.listing"
"""ctx.meta's mark while the root's help is written: its commands are listed, not loaded."""


def paragraphs(text: str) -> str:
    """Help written as hard-wrapped lines (a docstring) as paragraphs of one line
    each, for the help to wrap them at the terminal's width: typer's rich help
    prints a docstring's line breaks as they are. A paragraph that starts with
    click's \\b, or whose lines after its first are indented or start a list
    item (an example, a table), keeps its lines."""
    kept = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines = paragraph.split("\n")
        if paragraph.startswith("\b") or any(
            line.startswith((" ", "\t", "- ", "* ")) for line in lines[1:]
        ):
            kept.append(paragraph)
        else:
            kept.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(kept)


def readable(command: click.Command) -> None:
    """The help of ``command``, its parameters' and its sub-commands' as
    paragraphs (``paragraphs``), once."""
    if getattr(command, "_qtg_readable", False):
        return
    command._qtg_readable = True  # type: ignore[attr-defined]
    for name in ("help", "short_help"):
        text = getattr(command, name)
        if text:
            setattr(command, name, paragraphs(text))
    for param in command.params:
        text = getattr(param, "help", None)
        if text:
            param.help = paragraphs(text)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():
        readable(sub)


def _load_command(name: str, lazy: LazyCommand) -> click.Command:
    module, _, attribute = lazy.target.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    if isinstance(value, typer.Typer):
        command: click.Command = typer.main.get_group(value)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(value)
        command = typer.main.get_command(single)
    command.name = name
    command.short_help = lazy.summary
    command.help = command.help or lazy.summary
    return command


# -- the options the commands share ----------------------------------------------

NetworkOption = Annotated[
    str | None,
    typer.Option(
        "--network", "-n", help="mainnet or testnet (default: QTG_NETWORK_MODE, else testnet)."
    ),
]


AsOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help=(
            "Log in as this login (made by `qtg operator add` or `qtg runner add`) on the "
            "server of QTG_DATABASE_URL (or the embedded one), its password from the "
            "credentials file. Default: whoever QTG_DATABASE_URL names."
        ),
    ),
]


def resolve_network(network: str | None) -> NetworkMode:
    settings = load_settings()
    if network is None:
        return settings.network_mode
    if network not in NETWORK_MODES:
        raise typer.BadParameter(
            f"{network!r} is not a network (use one of: {', '.join(NETWORK_MODES)})"
        )
    return network


# -- parsing the inputs strictly -------------------------------------------------

_AMOUNT = re.compile(r"^[0-9]{1,32}(\.[0-9]{1,6})?$")
_DURATION = re.compile(r"^([0-9]{1,9}(?:\.[0-9]{1,6})?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_DURATION = timedelta(days=3650)


def bad(message: str, param: str | None = None) -> NoReturn:
    """Refuse an input: the one error line, exit 2."""
    raise typer.BadParameter(message, param_hint=param)


def parse_amount(text: str, param: str = "--amount") -> Decimal:
    """A positive decimal amount written plainly (digits, at most 6 decimals):
    no exponent, sign, NaN or Infinity. The engine's own bound
    (engine_limits.max_amount) is checked by create_movement."""
    value = text.strip()
    if not _AMOUNT.match(value):
        bad(
            f"{text!r} is not an amount: write it as digits with at most 6 decimals, e.g. 250000.5",
            param,
        )
    try:
        amount = Decimal(value)
    except InvalidOperation:  # pragma: no cover - the pattern admits only decimals
        bad(f"{text!r} is not a number", param)
    if amount <= 0:
        bad(f"{text!r} is not positive", param)
    return amount


def parse_duration(text: str, param: str = "--expires-in") -> timedelta:
    """A positive duration such as 90s, 30m, 2h or 1d, at most ten years."""
    match = _DURATION.match(text.strip())
    if not match:
        bad(f"{text!r} is not a duration like 90s, 30m, 2h or 1d", param)
    seconds = Decimal(match.group(1)) * _UNITS[match.group(2)]
    if seconds <= 0:
        bad(f"{text!r} is not a positive duration", param)
    if seconds > Decimal(MAX_DURATION.total_seconds()):
        bad(f"{text!r} is longer than {MAX_DURATION.days} days", param)
    return timedelta(seconds=float(seconds))


def finite(value: float, param: str, low: float | None = None, high: float | None = None) -> float:
    """``value`` when it is a finite number within [low, high] (click's own
    ranges let NaN through: it compares false with every bound)."""
    if (
        not math.isfinite(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        bounds = f" in [{low:g}, {high:g}]" if low is not None and high is not None else ""
        bad(f"{value!r} is not a finite number{bounds}", param)
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    """A JSON number as a float, refused when a double cannot hold it: beyond
    1.8e308 (it would read as Infinity) or so small it reads as 0."""
    value = float(text)
    mantissa = re.split("[eE]", text, maxsplit=1)[0]
    if not math.isfinite(value) or (value == 0 and any(c in "123456789" for c in mantissa)):
        raise ValueError(f"the number {text[:30]} is beyond what a double holds")
    return value


def _depth(value: Any) -> int:
    """How many arrays and objects are nested in ``value`` (0 for a scalar),
    counted level by level, without recursion."""
    depth, level = 0, [value]
    while True:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            return depth
        depth += 1
        level = [
            child
            for item in containers
            for child in (item.values() if isinstance(item, dict) else item)
        ]


JSON_RECURSION_LIMIT = 1000
"""The recursion limit while JSON is parsed: deep nesting then ends in a
RecursionError, not in a C stack overflow, even where an imported library
raised the process's limit (web3's py_ecc sets it to 100000)."""


@contextmanager
def _recursion_limit(limit: int) -> Iterator[None]:
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(min(saved, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def loads(text: str, what: str, param: str | None = None) -> Any:
    """Parse JSON strictly: no NaN or Infinity, no number beyond a double, at
    most MAX_JSON_DEPTH levels."""
    try:
        with _recursion_limit(JSON_RECURSION_LIMIT):
            value = json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        bad(f"{what} is nested too deeply (at most {MAX_JSON_DEPTH} levels)", param)
    except ValueError as exc:  # JSONDecodeError included, and an integer of thousands of digits
        bad(f"{what} is not valid JSON: {one_line(exc)}", param)
    if _depth(value) > MAX_JSON_DEPTH:
        bad(f"{what} is nested too deeply (at most {MAX_JSON_DEPTH} levels)", param)
    return value


def read_json_file(
    path: Path, what: str, param: str, stdin: Callable[[], str] | None = None
) -> Any:
    """The JSON document in ``path`` ('-' for stdin), with every way a file can
    be wrong refused as one line: missing, a directory, unreadable, too large,
    not UTF-8, not JSON."""
    if str(path) == "-":
        text = (stdin or sys.stdin.read)()
        return loads(text, what, param)
    try:
        if path.is_dir():
            bad(f"{path} is a directory, not a {what} file", param)
        with path.open("rb") as fh:
            data = fh.read(MAX_JSON_FILE_BYTES + 1)
    except FileNotFoundError:
        bad(f"{path}: no such file", param)
    except PermissionError:
        bad(f"{path}: permission denied", param)
    except OSError as exc:
        bad(f"{path}: cannot be read: {exc.strerror or exc}", param)
    if len(data) > MAX_JSON_FILE_BYTES:
        bad(f"{path} is larger than {MAX_JSON_FILE_BYTES // (1024 * 1024)} MiB", param)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad(f"{path} is not UTF-8 text (byte {exc.start})", param)
    return loads(text, f"{path}", param)


def parse_params(items: Sequence[str], param: str = "--param") -> dict[str, Any]:
    """``key=value`` pairs; a value that parses as JSON is taken as JSON
    (strictly, see ``loads``), anything else as a string."""
    params: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            bad(f"{item!r} is not key=value", param)
        key, raw = item.split("=", 1)
        if not key:
            bad(f"{item!r} has no key", param)
        try:
            json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            params[key] = raw
            continue
        params[key] = loads(raw, f"the value of {key}", param)
    return params
