"""Rendering of command output: one JSON document, a table, or CSV."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.table import Table
from rich.text import Text

from recorder.core.errors import UsageError
from recorder.core.printable import json_text, printable
from recorder.proxy.hints import command as command  # (the CLI's hints: one rule)


def default_format(requested: str | None) -> str:
    """``table`` when stdout is a terminal, ``json`` otherwise (docs/record.md)."""
    if requested:
        return requested
    return "table" if sys.stdout.isatty() else "json"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(doc: Any) -> str:
    """Exactly one JSON document, money as decimal strings; every value exact, the
    characters a terminal acts on written as escapes (recorder.core.printable)."""
    return json_text(json.dumps(doc, ensure_ascii=False, indent=2, default=_json_default))


def _cell(value: Any) -> str:
    """A value as a table shows it: values from the wire (a model, an id, an error
    message) with their control characters escaped."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return printable(json.dumps(value, ensure_ascii=False, default=_json_default))
    return printable(str(value))


def vertical(doc: dict[str, Any]) -> str:
    """One object as ``field  value`` lines."""
    width = max((len(k) for k in doc), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in doc.items())


ELLIPSIS = "…"
# A column whose values are wider than WHOLE is shortened in the middle, down to
# SHORTEN_TO, before any column is left out: the start and the end of a model are
# what tell models apart. Shorter values (an outcome such as upstream_disconnect, a
# short id, a key, a number) are never cut while a column can be left out instead.
WHOLE = 20
SHORTEN_TO = 16
GAP = 2  # spaces between two columns


@dataclass(frozen=True, slots=True)
class Fit:
    """How a table meets the terminal: its width (None: ``COLUMNS`` when set, else
    the terminal's; a table written to a file or pipe keeps every column, as
    ``wide`` does), or the columns a user chose (``--columns``)."""

    width: int | None = None
    wide: bool = False
    columns: tuple[str, ...] | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Fit:
        """The fit a command's ``--wide`` / ``--columns`` ask for."""
        chosen = getattr(args, "columns", None)
        return cls(
            wide=bool(getattr(args, "wide", False)),
            columns=tuple(c.strip() for c in chosen.split(",") if c.strip()) if chosen else None,
        )

    def terminal_width(self) -> int | None:
        """The width to fit, None for no limit."""
        if self.wide:
            return None
        if self.width:
            return self.width
        columns = os.environ.get("COLUMNS", "")
        if columns.isdigit() and int(columns) > 0:
            return int(columns)
        if sys.stdout.isatty():
            return shutil.get_terminal_size((80, 24)).columns
        return None


class ColumnsError(UsageError, ValueError):
    """``--columns`` names a column the table does not have."""


# The fit of the command being run (main() sets it from --wide / --columns), so
# that every table a command prints honours them without passing them down.
_current = Fit()


def use_fit(fit: Fit) -> None:
    """Make ``fit`` the default of every table printed from now on."""
    global _current
    _current = fit


def add_format_option(p: argparse.ArgumentParser, formats: Sequence[str]) -> None:
    """``--format`` for a reading command, one of ``formats`` (unset: see default_format)."""
    p.add_argument(
        "--format",
        choices=formats,
        default=None,
        help="output format (default: table on a terminal, json otherwise)",
    )


def add_table_options(p: argparse.ArgumentParser) -> None:
    """``--wide`` and ``--columns`` for a command that prints tables."""
    p.add_argument(
        "--wide",
        action="store_true",
        help="table: every column at full width, however wide the terminal",
    )
    p.add_argument(
        "--columns",
        metavar="A,B,…",
        help="these columns, in this order, in every format (names as in the header, CSV and JSON)",
    )


def shorten(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` terminal cells, marked with ``…``."""
    if cell_len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    head = width // 2  # the start gets the odd cell: ids share their start less often
    tail = width - 1 - head
    left = set_cell_size(text, head)
    right = "".join(reversed(set_cell_size("".join(reversed(text)), tail))) if tail else ""
    return left.rstrip() + ELLIPSIS + right.lstrip() if tail else left + ELLIPSIS


_NUMBER = re.compile(r"^~?[-+]?[\d,]*\.?\d+(?:e[-+]?\d+)?$")


def _is_number(column: str, cells: Sequence[str]) -> bool:
    """A column of numbers (estimates marked ``~`` included) is right-aligned; an
    identifier is text even when its characters are all digits (a short id, once
    in a few hundred, is)."""
    if column in ("id", "key") or column.endswith("_id"):
        return False
    seen = [c for c in cells if c != "-"]
    return bool(seen) and all(_NUMBER.match(c) for c in seen)


def chosen(columns: Sequence[str], more: Sequence[str] = (), fit: Fit | None = None) -> list[str]:
    """The columns to show: those ``--columns`` chose (any of ``columns`` and
    ``more``, in the order given), else ``columns``. Raises ColumnsError naming
    the ones there are not."""
    fit = fit or _current
    if fit.columns is None:
        return list(columns)
    there = [*columns, *(c for c in more if c not in columns)]
    unknown = [c for c in fit.columns if c not in there]
    if unknown:
        raise ColumnsError(
            f"--columns: no column {', '.join(unknown)} (there are: {', '.join(there)})"
        )
    return list(fit.columns)


def table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    fit: Fit | None = None,
    *,
    keep: Sequence[str] = (),
    more: Sequence[str] = (),
) -> str:
    """Rows as a text table that fits the terminal.

    ``columns`` come most useful first; ``more`` are further columns of the rows
    that ``--columns`` may choose. When they do not fit, long values are shortened
    in the middle (``…``), the longest first, then columns are left out from the
    end, never one of ``keep`` (what answers the command's question), and a last
    line names them. Numbers are right-aligned. Lines carry no colour unless
    standard output is a terminal."""
    fit = fit or _current
    columns = chosen(columns, more, fit)
    cells = {c: [_cell(r.get(c)) for r in rows] for c in columns}
    natural = {c: max([cell_len(c), *(cell_len(v) for v in cells[c])]) for c in columns}
    limit = fit.terminal_width()
    widths, shown = fit_widths(
        columns, natural, limit, keep=columns if fit.columns is not None else keep
    )
    hidden = [c for c in columns if c not in shown]

    console = Console(
        file=io.StringIO(),
        width=sum(widths[c] for c in shown) + GAP * len(shown) + 1,
        force_terminal=sys.stdout.isatty(),
        color_system="standard" if sys.stdout.isatty() else None,
        highlight=False,
        soft_wrap=False,
    )
    grid = Table(box=None, show_edge=False, pad_edge=False, padding=(0, GAP, 0, 0))
    for c in shown:
        numeric = _is_number(c, cells[c])
        grid.add_column(
            shorten(c, widths[c]),
            justify="right" if numeric else "left",
            no_wrap=True,
            width=widths[c],
            header_style="bold",
        )
    for i in range(len(rows)):
        grid.add_row(*(Text(shorten(cells[c][i], widths[c])) for c in shown))
    console.print(grid)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    lines = [line.rstrip() for line in text.splitlines()]
    if hidden:
        note = (
            f"({len(hidden)} more column{'s' if len(hidden) > 1 else ''} left out to fit "
            f"{limit} characters: {', '.join(hidden)}; --wide or --columns to choose)"
        )
        lines.append(fold(note, fit))
    return "\n".join(lines)


def fold(note: str, fit: Fit | None = None) -> str:
    """A note under a table, folded to the width the table was fitted to."""
    limit = (fit or _current).terminal_width()
    if limit is None:
        return note
    return "\n".join(
        folded
        for line in note.split("\n")
        for folded in (
            [line]
            if cell_len(line) <= limit
            else textwrap.wrap(
                line,
                width=max(limit, 20),
                break_on_hyphens=False,
                subsequent_indent=" " * min(len(line) - len(line.lstrip()) + 4, limit // 2),
            )
        )
    )


def _total(widths: dict[str, int], shown: Sequence[str], gap: int) -> int:
    return sum(widths[c] for c in shown) + gap * (len(shown) - 1)


def _narrow(widths: dict[str, int], shown: Sequence[str], floor: dict[str, int], over: int) -> int:
    """Take ``over`` cells from the widest of ``shown`` above their ``floor``, one
    at a time (long values give way first, evenly); what could not be taken."""
    while over > 0:
        wide = [c for c in shown if widths[c] > floor[c]]
        if not wide:
            break
        top = max(widths[c] for c in wide)
        for c in wide:
            if widths[c] == top and over > 0:
                widths[c] -= 1
                over -= 1
    return over


def fit_widths(
    columns: Sequence[str],
    natural: dict[str, int],
    limit: int | None,
    *,
    keep: Sequence[str] = (),
    gap: int = GAP,
) -> tuple[dict[str, int], list[str]]:
    """Widths and the columns shown within ``limit`` cells (None: no limit):
    the longest values are shortened first, those wider than WHOLE down to
    SHORTEN_TO cells (never below their header); then columns are left out from
    the end, never one of ``keep``; if what is left still does not fit (the kept
    ones alone are too wide), the widest give way further."""
    if limit is None or _total(natural, columns, gap) <= limit:
        return dict(natural), list(columns)
    floor = {
        c: natural[c] if natural[c] <= WHOLE else max(cell_len(c), SHORTEN_TO) for c in columns
    }
    shown = list(columns)
    for c in reversed(columns):
        if _total(floor, shown, gap) <= limit:
            break
        if c not in keep and len(shown) > 1:
            shown.remove(c)
    widths = {c: natural[c] for c in shown}
    over = _narrow(widths, shown, floor, _total(widths, shown, gap) - limit)
    if over > 0:  # the kept (or chosen) columns alone are wider: narrower still
        _narrow(widths, shown, dict.fromkeys(shown, 1), over)
    return widths, shown


def emit(
    doc: Any,
    fmt: str | None,
    *,
    single: bool = False,
    columns: Sequence[str] | None = None,
    aliases: Mapping[str, str] | None = None,
) -> None:
    """Print ``doc`` (an object when ``single``, else a list of objects). A list
    keeps the columns ``--columns`` chose in every format (JSON and CSV by their
    field names; ``aliases`` maps a table's own name of a field to it)."""
    fmt = default_format(fmt)
    out = sys.stdout
    if not single and fmt in ("json", "csv") and _current.columns is not None:
        doc = list(doc)
        there = list(columns or (doc[0].keys() if doc else []))
        names = [(aliases or {}).get(c, c) for c in _current.columns]
        columns = chosen(there, fit=Fit(columns=tuple(dict.fromkeys(names))))
        doc = [{c: r.get(c) for c in columns} for r in doc]
    if fmt == "json":
        out.write(to_json(doc) + "\n")
    elif fmt == "csv":
        rows = [doc] if single else list(doc)
        cols = list(columns or (rows[0].keys() if rows else []))
        writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv(v) for k, v in r.items()})
    elif single:
        out.write(vertical(doc) + "\n")
    else:
        rows = list(doc)
        out.write(table(rows, list(columns or (rows[0].keys() if rows else []))) + "\n")


# A spreadsheet opening a CSV runs a cell that starts so as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv(value: Any) -> Any:
    """A CSV cell: the value exact (CSV is data, not a terminal), but for a text
    that a spreadsheet would run as a formula (``=HYPERLINK(…)``, ``@SUM(…)``,
    ``-2+3``): that one gets a leading ``'``, which spreadsheets show as text. A
    number, negative ones included, is written as it is."""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(_FORMULA_START) and not _NUMBER.match(value):
        return "'" + value
    return value
