"""Tables fitted to the terminal's width by us, not left to rich: rich shrinks every column
evenly when a table is too wide, so at 80 columns a step number vanished and headers read
``st…``. Here the columns that must stay whole get their full width, and the columns of free
text share what is left (they wrap, fold or end in a visible …)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import JustifyMethod, OverflowMethod
from rich.table import Table
from rich.text import Text


def plain(value: object) -> Text:
    """Text from outside (a goal, a model's output, an error) as it is: never markup."""
    return value if isinstance(value, Text) else Text(str(value))


@dataclass
class Column:
    """A column and how it may give way: a ``share`` of 0 keeps it whole (up to ``cap``,
    where it folds); columns with a share split what the others leave, in proportion."""

    header: str
    share: int = 0
    cap: int | None = None
    overflow: OverflowMethod = "fold"
    no_wrap: bool = False
    justify: JustifyMethod = "left"


def fitted_table(columns: Sequence[Column], rows: Sequence[Sequence[Text]], width: int,
                 **table_options: Any) -> Table:
    """A table of ``rows`` at most ``width`` wide (with rich's default box), if the
    whole columns fit; every header stays whole."""
    wanted = [max([len(c.header), *(row[i].cell_len for row in rows)])
              for i, c in enumerate(columns)]
    widths = [w if c.share or c.cap is None else min(w, max(c.cap, len(c.header)))
              for c, w in zip(columns, wanted, strict=True)]
    flexible = [i for i, c in enumerate(columns) if c.share]
    left = width - (3 * len(columns) + 1) - sum(  # the box: a rule each side, padding
        w for i, w in enumerate(widths) if i not in flexible)
    for i, share in zip(flexible, _split(left, [columns[i].share for i in flexible],
                                         [wanted[i] for i in flexible],
                                         [len(columns[i].header) for i in flexible]),
                        strict=True):
        widths[i] = share
    table = Table(**table_options)
    for column, column_width in zip(columns, widths, strict=True):
        table.add_column(column.header, width=column_width, overflow=column.overflow,
                         no_wrap=column.no_wrap, justify=column.justify)
    for row in rows:
        table.add_row(*row)
    return table


def _split(room: int, shares: list[int], wanted: list[int], least: list[int]) -> list[int]:
    """``room`` split in proportion to ``shares``: none gets more than it wants or less than
    its ``least``; what one does not want goes to the others."""
    widths = list(least)
    while (spare := room - sum(widths)) > 0:
        hungry = [i for i, w in enumerate(widths) if w < wanted[i]]
        if not hungry:
            break
        total = sum(shares[i] for i in hungry)
        grown = False
        for i in hungry:
            more = min(wanted[i] - widths[i], max(1, spare * shares[i] // total))
            more = min(more, room - sum(widths))
            if more > 0:
                widths[i] += more
                grown = True
        if not grown:
            break
    return widths
