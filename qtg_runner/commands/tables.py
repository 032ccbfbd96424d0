"""The command line's tables: every cell whole within the terminal's width, or
every column in full with --wide.

rich fits a table that is too wide by cutting its cells ("nod…", "FAI…"),
ids, states and amounts among them. A ``Grid`` fits itself to the width it
is printed in (100 columns in mind, and whatever the terminal has) without
cutting anything:

- every column wraps at spaces, and is never narrower than its longest word,
  so an id, a state, an amount or a time is never split (an amount's asset,
  a time's clock may go under it); a ``text`` column (an error, a detail, a
  reference, a node key) may also fold a word longer than TEXT_MIN onto its
  next line, never ending it with "…";
- when the columns do not fit so, the grid leaves out its least important
  columns (``drop``, the least important first) and its caption names them:
  --wide shows them;
- with ``wide``, every column is shown in full, each cell on one line,
  whatever the width (``show`` prints it uncropped).

The room left once every column has its narrowest goes first to the
columns that do not fold, so that they wrap no more than they must, then
evenly to the ``text`` columns.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any

import typer
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

TEXT_MIN = 20
"""The narrowest a ``text`` column gets (or its longest word, when shorter)."""

EDGE = 1
PER_COLUMN = 3
"""A table's width beside its cells: its left border, then each column's two
spaces of padding and its right border (rich's default box)."""

WideOption = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Show every column in full, each cell on one line, whatever the terminal's width.",
    ),
]


def header_of(name: str) -> str:
    """A column's header from a view's column name: its words, so that it wraps."""
    return name.replace("_", " ")


@dataclass
class Grid:
    """A table of text cells, fitted to the width it is printed in (the module's
    docstring). ``columns`` are the columns' names (a view's, say: each header is
    its name's words), by which ``text``, ``drop`` and ``right`` name them."""

    title: str | None
    columns: Sequence[str]
    rows: list[list[str]] = field(default_factory=list)
    text: Iterable[str] = ()
    drop: Sequence[str] = ()
    right: Iterable[str] = ()
    wide: bool = False
    show_header: bool = True

    def add_row(self, *cells: str) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a grid of {len(self.columns)}")
        self.rows.append(list(cells))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.wide:
            table = self.table(None)
            width = EDGE + sum(PER_COLUMN + n for n in self._naturals(range(len(self.columns))))
            yield from console.render(table, options.update_width(max(width, options.max_width)))
        else:
            yield self.table(options.max_width)

    def table(self, width: int | None) -> Table:
        """The rich table within ``width`` columns (None: every column in full)."""
        shown = list(range(len(self.columns)))
        widths = self._naturals(shown)
        if width is not None:
            shown, widths = self._fit(width)
        left_out = [self.columns[i] for i in range(len(self.columns)) if i not in shown]
        table = Table(
            title=self.title,
            title_justify="left",
            show_header=self.show_header,
            caption=(
                f"left out for the width: {', '.join(left_out)} (--wide shows every column)"
                if left_out
                else None
            ),
            caption_justify="left",
        )
        right = set(self.right)
        for i, w in zip(shown, widths, strict=True):
            name = self.columns[i]
            table.add_column(
                Text(header_of(name), overflow="fold"),
                width=w,
                no_wrap=width is None,
                overflow="fold",
                justify="right" if name in right else "left",
            )
        for row in self.rows:
            table.add_row(*(Text(row[i]) for i in shown))
        return table

    def _cells(self, i: int) -> list[str]:
        header = header_of(self.columns[i]) if self.show_header else ""
        return [header, *(row[i] for row in self.rows)]

    def _naturals(self, shown: Iterable[int]) -> list[int]:
        return [
            max(1, *(cell_len(line) for cell in self._cells(i) for line in cell.splitlines()))
            for i in shown
        ]

    def _narrowest(self, i: int) -> int:
        words = [cell_len(w) for row in self.rows for w in row[i].split()]
        header = (
            [cell_len(w) for w in header_of(self.columns[i]).split()] if self.show_header else []
        )
        longest = max(words, default=1)
        if self.columns[i] in set(self.text):
            longest = min(longest, TEXT_MIN)
        return max(1, longest, *header)

    def _fit(self, width: int) -> tuple[list[int], list[int]]:
        """The columns shown within ``width`` and their widths."""
        shown = list(range(len(self.columns)))
        droppable = [self.columns.index(name) for name in self.drop]

        def room() -> int:
            return width - EDGE - PER_COLUMN * len(shown)

        narrowest = {i: self._narrowest(i) for i in shown}
        while sum(narrowest[i] for i in shown) > room() and droppable:
            shown.remove(droppable.pop(0))
        natural = dict(zip(shown, self._naturals(shown), strict=True))
        widths = {i: narrowest[i] for i in shown}
        spare = room() - sum(widths.values())
        text = {self.columns.index(name) for name in self.text}
        # the columns that do not fold first, the least wanting first, then the text evenly
        for i in sorted((i for i in shown if i not in text), key=lambda i: natural[i] - widths[i]):
            grow = max(0, min(spare, natural[i] - widths[i]))
            widths[i] += grow
            spare -= grow
        wanting = [i for i in shown if i in text and widths[i] < natural[i]]
        while spare > 0 and wanting:
            for i in list(wanting):
                if spare == 0:
                    break
                widths[i] += 1
                spare -= 1
                if widths[i] >= natural[i]:
                    wanting.remove(i)
        return shown, [widths[i] for i in shown]


UNPRINTABLE = re.compile(
    "[\x01-\x1f\x7f-\x9f\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]"
)
"""The characters a terminal does not print as themselves: SQL's unprintable()
(sql/functions/inline/unprintable.sql), which a test holds this to."""


def printable(text: str) -> str:
    """``text`` with every character UNPRINTABLE names written as its escape
    (a backslash and x1b, u202e): what a runner or a caller stored is shown,
    never obeyed, by the terminal that prints it."""
    return UNPRINTABLE.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def cell(value: Any) -> str:
    """A value as a cell's text: numbers without trailing zeros, times to the
    second in UTC, lists comma-joined, texts printable()."""
    if value is None:
        return ""
    if isinstance(value, Decimal) and value.is_finite():
        return f"{value.normalize():f}"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, timedelta):
        return str(value - timedelta(microseconds=value.microseconds))
    if isinstance(value, list):
        return printable(",".join(map(str, value)))
    return printable(str(value))


def show(console: Console, *renderables: RenderableType) -> None:
    """Print grids (and anything else) uncropped: a wide grid's lines in full."""
    console.print(*renderables, crop=False)
