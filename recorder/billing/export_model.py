"""A provider's usage export, read: its rows, its figures, and the cell readers
the formats share.

An export is a list of :class:`ExportRow` (day, model, key, project and the
figures it covers, normalised to the recorder's names and units) whatever file
or API response it came from. The formats that produce it are in
:mod:`recorder.billing.export_formats`; the CSV reader is
:mod:`recorder.billing.export_csv`, the JSON pages :mod:`recorder.billing.usage_api`.
Money is ``Decimal`` from the text, never a float.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from recorder.core.money import ZERO

FIGURES = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
)

Number = int | Decimal
Row = Mapping[str, str | None]


class ExportError(ValueError):
    """An export or mapping file that cannot be read; the message names the place."""


@dataclass(slots=True)
class ExportRow:
    """One line of an export, normalised."""

    day: str
    model: str | None
    key: str | None
    project: str | None
    figures: dict[str, Number]
    provider: str | None = None
    # Batch API traffic (OpenAI ``batch``, Anthropic ``service_tier`` batch): never
    # proxied, so reported apart and left out of the comparison.
    batch: bool = False
    # The provider's bucket, as given (ISO 8601 or Unix seconds), when the row has one.
    start: str | None = None
    end: str | None = None


@dataclass(slots=True)
class Export:
    """A usage export, read: which format, which figures it covers, its rows."""

    format: str
    figures: frozenset[str]
    rows: list[ExportRow]
    providers: frozenset[str] = frozenset()
    source: str = "export"
    notes: list[str] = field(default_factory=list)  # said on standard error
    # Of an API response's pages: how many say has_more true / false, and the
    # next_page cursors they give (two pages with the same cursor are one page twice).
    pages_more: int = 0
    pages_last: int = 0
    next_pages: tuple[str, ...] = ()

    @property
    def has_key(self) -> bool:
        """Some row names an API key."""
        return any(r.key for r in self.rows)

    @property
    def has_project(self) -> bool:
        """Some row names a project or workspace."""
        return any(r.project for r in self.rows)


@dataclass(frozen=True, slots=True)
class Format:
    """A recognised export format: how to tell it, what it covers, how to read a row."""

    name: str
    provider: str | None
    detect: Callable[[frozenset[str]], bool]
    covers: Callable[[frozenset[str]], frozenset[str]]
    read: Callable[[Row, frozenset[str], str], ExportRow | None]
    description: str = ""


def merge_exports(exports: Sequence[Export]) -> Export:
    """Several exports as one (say, a usage export and a costs export): their rows
    and the union of the figures they cover."""
    if len(exports) == 1:
        return exports[0]
    return Export(
        "+".join(dict.fromkeys(e.format for e in exports)),
        frozenset().union(*(e.figures for e in exports)),
        [r for e in exports for r in e.rows],
        frozenset().union(*(e.providers for e in exports)),
        ", ".join(e.source for e in exports),
        [n for e in exports for n in e.notes],
        sum(e.pages_more for e in exports),
        sum(e.pages_last for e in exports),
        tuple(c for e in exports for c in e.next_pages),
    )


def _instant(value: str) -> datetime | None:
    """A bucket edge (ISO 8601 or Unix seconds) as an aware UTC time, or None."""
    text = value.strip()
    try:
        if text.replace(".", "", 1).isdigit():
            return datetime.fromtimestamp(float(text), UTC)
        when = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except (ValueError, OverflowError):
        return None
    return when.astimezone(UTC) if when.tzinfo else when.replace(tzinfo=UTC)


def export_period(export: Export) -> tuple[datetime, datetime] | None:
    """The time the export covers (None: no rows): from its first bucket's start to
    its last bucket's end when every row carries its bucket (an hourly export
    covers those hours only), else from the first day it names to the end of its
    last."""
    if not export.rows:
        return None
    starts = [_instant(r.start) if r.start else None for r in export.rows]
    ends = [_instant(r.end) if r.end else None for r in export.rows]
    if all(starts) and all(ends):
        return min(w for w in starts if w), max(w for w in ends if w)
    days = [r.day for r in export.rows]
    first = datetime.combine(date.fromisoformat(min(days)), datetime.min.time(), UTC)
    last = datetime.combine(date.fromisoformat(max(days)), datetime.min.time(), UTC)
    return first, last + timedelta(days=1)


# -- cells --------------------------------------------------------------------------


def header_name(name: str) -> str:
    """A column name compared loosely: case, spaces, dots (flattened JSON) and a BOM aside."""
    out = name.strip().lstrip("\ufeff").strip().lower()
    for ch in " .-/":
        out = out.replace(ch, "_")
    return out


def parse_day(value: str, where: str) -> str:
    """``YYYY-MM-DD`` (UTC) of an ISO 8601 date or time, or of Unix seconds."""
    text = value.strip()
    try:
        if text.replace(".", "", 1).isdigit():
            return datetime.fromtimestamp(float(text), UTC).date().isoformat()
        text = text.removesuffix(" UTC").replace(" ", "T", 1)
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        if len(text) == 10:
            return date.fromisoformat(text).isoformat()
        when = datetime.fromisoformat(text)
    except (ValueError, OverflowError):
        raise ExportError(f"{where}: not a date: {value!r}") from None
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    return when.date().isoformat()


def count_cell(value: str | None, where: str) -> int:
    text = (value or "").strip().replace("_", "")
    if not text:
        return 0
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ExportError(f"{where}: not a count: {value!r}") from None
    if not number.is_finite() or number != number.to_integral_value() or number < 0:
        raise ExportError(f"{where}: not a count: {value!r}")
    return int(number)


def usd_cell(value: str | None, where: str) -> Decimal:
    text = (value or "").strip().removeprefix("$").replace(",", "")
    if not text:
        return ZERO
    try:
        amount = Decimal(text)
    except InvalidOperation:
        raise ExportError(f"{where}: not an amount: {value!r}") from None
    if not amount.is_finite():
        raise ExportError(f"{where}: not an amount: {value!r}")
    return amount


def text_cell(value: str | None) -> str | None:
    text = (value or "").strip()
    return text or None


def first_cell(row: Row, *names: str) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None and value.strip():
            return value
    return None


def has_column(cols: frozenset[str], *names: str) -> bool:
    return any(n in cols for n in names)


def check_currency(row: Row, where: str, *names: str) -> None:
    currency = text_cell(first_cell(row, *names))
    if currency is not None and currency.upper() != "USD":
        raise ExportError(f"{where}: amounts in {currency}, not USD")


def is_batch(row: Row) -> bool:
    """OpenAI's ``batch`` group, or a ``service_tier`` of batch (Anthropic's)."""
    return (text_cell(row.get("batch")) or "").lower() == "true" or (
        text_cell(row.get("service_tier")) or ""
    ).lower() == "batch"
