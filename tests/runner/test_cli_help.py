"""`qtg ... --help` prints a command's docstring as paragraphs, not as the
lines it is wrapped in in the source (typer's rich help keeps a docstring's
line breaks: commands/common.py's ``readable``)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer.main
from typer import _click as click  # typer vendors click
from typer.core import TyperGroup
from typer.testing import CliRunner

from qtg_cli import app


def every_command() -> Iterator[tuple[list[str], Any]]:
    """Every command of `qtg` (each lazy one loaded) with its path."""
    root = typer.main.get_command(app)
    ctx = click.Context(root)
    stack: list[tuple[list[str], Any]] = [([], root)]
    while stack:
        path, command = stack.pop()
        yield path, command
        if isinstance(command, TyperGroup):
            for name in command.list_commands(ctx):
                stack.append(([*path, name], command.get_command(ctx, name)))


def test_help_prints_a_docstrings_paragraphs_as_paragraphs() -> None:
    """A docstring hard-wrapped in the source is printed as
    paragraphs, each on one line in a terminal wide enough, in the command's own
    help and (its first) in its group's listing."""
    checked = 0
    for path, command in every_command():
        doc = inspect.getdoc(command.callback) if command.callback else None
        if not path or not doc or "\n" not in doc or command.help.split() != doc.split():
            continue  # no help, a help= text, or help in one line
        own = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "1000"})
        group = CliRunner().invoke(app, [*path[:-1], "--help"], env={"COLUMNS": "1000"})
        assert own.exit_code == 0 and group.exit_code == 0, path
        lines = [" ".join(line.strip("│ ").split()) for line in own.stdout.splitlines()]
        listing = " ".join(group.stdout.split())
        paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]
        for paragraph in paragraphs:
            assert any(paragraph in line for line in lines), (path, paragraph, own.stdout)
        if not command.short_help:  # the root lists its commands by their summaries
            assert paragraphs[0] in listing, (path, group.stdout)
        checked += 1
    assert checked > 20
