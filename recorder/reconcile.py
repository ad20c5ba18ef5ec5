"""Recorded usage against a provider's usage export (`recorder reconcile`).

Both sides are summed per group, (day, model, key or project), and compared
figure by figure: requests, input, output, cache read and cache write tokens,
cost. A figure is compared only when an export covers it (has its column); a
group absent from the export then counts as zero there, since the export would
have listed what was billed. A difference is reported when it exceeds both the
relative tolerance (of the larger side) and the absolute one. Each reported
group names the streams that may explain it: usage estimated here (a cut
stream, Chat Completions without ``include_usage``), interrupted streams,
``http_error`` streams (not billed here), streams without a price.

The two sides are made comparable:

- day: the UTC date the stream started / the export's bucket start;
- model: the model that served the request (``response_model``, else the
  requested one) and the export's model, both without provider prefix, snapshot
  date or ``-latest`` (``recorder.core.estimate.model_base``), unless exact
  names are asked for; the mapping file may rename an export's models;
- key or project: the export's ids are translated to the recorder's
  ``api_key_id`` / ``project`` through the mapping file; an id it does not name
  is used as it is (an export in the recorder's own format already has ours);
- input tokens are all prompt tokens on both sides (Anthropic's uncached input,
  cache reads and cache writes are added up, as the recorder counts them).

Batch API traffic in an export (OpenAI's ``batch``, Anthropic's ``service_tier``
batch) never passes through a proxy: its rows are summed apart
(:attr:`Result.batch_total`) and compared with nothing.

The recorded side is the streams of the days the export covers (or of
``--since``/``--until``), of the export's provider when its format tells; a
stream whose usage is unknown (``usage_source`` ``none``) is not billed and
counts in no figure. Export formats are recognised by their columns
(:data:`FORMATS`, the providers' first: their columns are the more telling;
docs/billing.md, "Reconciliation"). Parsing and comparison
are pure; :func:`read_streams` reads the store.
"""

from __future__ import annotations

import csv
import decimal
import io
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import ColumnElement, Engine, select

from recorder.core.estimate import model_base
from recorder.store.models import STREAMS, format_started_at, parse_started_at

FIGURES = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
)
DIMENSIONS = ("key", "project", "none")
ZERO = Decimal(0)
_QUANTUM = Decimal(1).scaleb(-12)
_EXACT = decimal.Context(prec=80, traps=[decimal.Inexact, decimal.InvalidOperation])
_CENT = Decimal("0.01")

Number = int | Decimal


from recorder.core.errors import UsageError  # noqa: E402


class ExportError(UsageError, ValueError):
    """An export or mapping file that cannot be read; the message names the place."""


def money(value: Decimal) -> str:
    """Money as INTERFACES.md prints it: 12 fractional digits, never a float."""
    return f"{value.quantize(_QUANTUM, context=_EXACT):f}"


# -- exports --------------------------------------------------------------------


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


def _header(name: str) -> str:
    """A column name compared loosely: case, spaces, dots (flattened JSON) and a BOM aside."""
    out = name.strip().lstrip("\ufeff").strip().lower()
    for ch in " .-/":
        out = out.replace(ch, "_")
    return out


header_name = _header  # for the JSON readers (recorder.billing.usage_api)


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


def _int(value: str | None, where: str) -> int:
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


def _usd(value: str | None, where: str) -> Decimal:
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


def _text(value: str | None) -> str | None:
    text = (value or "").strip()
    return text or None


Row = Mapping[str, str | None]


def _get(row: Row, *names: str) -> str | None:
    for name in names:
        value = row.get(name)
        if value is not None and value.strip():
            return value
    return None


def _has(cols: frozenset[str], *names: str) -> bool:
    return any(n in cols for n in names)


def _check_currency(row: Row, where: str, *names: str) -> None:
    currency = _text(_get(row, *names))
    if currency is not None and currency.upper() != "USD":
        raise ExportError(f"{where}: amounts in {currency}, not USD")


@dataclass(frozen=True, slots=True)
class Format:
    """A recognised export format: how to tell it, what it covers, how to read a row."""

    name: str
    provider: str | None
    detect: Callable[[frozenset[str]], bool]
    covers: Callable[[frozenset[str]], frozenset[str]]
    read: Callable[[Row, frozenset[str], str], ExportRow | None]
    description: str = ""


# The recorder's own format: a column per figure, named as ours.
def _own_detect(cols: frozenset[str]) -> bool:
    return "model" in cols and _has(cols, "date", "day") and any(f in cols for f in FIGURES)


def _own_covers(cols: frozenset[str]) -> frozenset[str]:
    return frozenset(f for f in FIGURES if f in cols)


def _own_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    figures: dict[str, Number] = {}
    for name in FIGURES:
        if name in cols:
            here = f"{where}, {name}"
            figures[name] = _usd(row[name], here) if name == "cost_usd" else _int(row[name], here)
    _check_currency(row, where, "currency")
    return ExportRow(
        day=parse_day(_get(row, "date", "day") or "", where),
        model=_text(row.get("model")),
        key=_text(_get(row, "api_key_id", "key")),
        project=_text(row.get("project")),
        figures=figures,
        provider=_text(row.get("provider")),
    )


# OpenAI: the Usage API's completions results (organization/usage/completions),
# one line per bucket and group, as the usage dashboard exports them.
_OAI_TIME = ("start_time_iso", "start_time", "bucket_start_time", "date")


def _oai_usage_detect(cols: frozenset[str]) -> bool:
    return (
        {"model", "input_tokens", "output_tokens"} <= cols
        and _has(cols, "num_model_requests", "input_cached_tokens")
        and _has(cols, *_OAI_TIME)
    )


def _oai_usage_covers(cols: frozenset[str]) -> frozenset[str]:
    out = {"input_tokens", "output_tokens"}
    if "num_model_requests" in cols:
        out.add("requests")
    if "input_cached_tokens" in cols:
        out.add("cache_read_tokens")
    return frozenset(out)


def _is_batch(row: Row) -> bool:
    """OpenAI's ``batch`` group, or a ``service_tier`` of batch (Anthropic's)."""
    return (_text(row.get("batch")) or "").lower() == "true" or (
        _text(row.get("service_tier")) or ""
    ).lower() == "batch"


_OAI_END = ("end_time_iso", "end_time", "bucket_end_time")
_ANT_END = ("ending_at", "bucket_end")


def _oai_usage_read(row: Row, cols: frozenset[str], where: str) -> ExportRow | None:
    figures: dict[str, Number] = {
        "input_tokens": _int(row["input_tokens"], f"{where}, input_tokens"),
        "output_tokens": _int(row["output_tokens"], f"{where}, output_tokens"),
    }
    if "num_model_requests" in cols:
        figures["requests"] = _int(row["num_model_requests"], f"{where}, num_model_requests")
    if "input_cached_tokens" in cols:
        figures["cache_read_tokens"] = _int(
            row["input_cached_tokens"], f"{where}, input_cached_tokens"
        )
    return ExportRow(
        day=parse_day(_get(row, *_OAI_TIME) or "", where),
        model=_text(row.get("model")),
        key=_text(row.get("api_key_id")),
        project=_text(row.get("project_id")),
        figures=figures,
        provider="openai",
        batch=_is_batch(row),  # Batch API jobs never pass through a proxy
        start=_text(_get(row, *_OAI_TIME)),
        end=_text(_get(row, *_OAI_END)),
    )


# OpenAI: the Costs API's results (organization/costs), amount in USD, per line item.
def _oai_costs_detect(cols: frozenset[str]) -> bool:
    return "amount_value" in cols and "line_item" in cols and _has(cols, *_OAI_TIME)


def _oai_costs_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    _check_currency(row, where, "amount_currency", "currency")
    item = _text(row.get("line_item"))
    model = item.split(",")[0].strip() if item else None
    return ExportRow(
        day=parse_day(_get(row, *_OAI_TIME) or "", where),
        model=model,
        key=None,
        project=_text(row.get("project_id")),
        figures={"cost_usd": _usd(row["amount_value"], f"{where}, amount_value")},
        provider="openai",
        start=_text(_get(row, *_OAI_TIME)),
        end=_text(_get(row, *_OAI_END)),
    )


# OpenAI's legacy activity export (the old /v1/usage fields).
def _oai_legacy_detect(cols: frozenset[str]) -> bool:
    return {"n_context_tokens_total", "n_generated_tokens_total", "snapshot_id"} <= cols and _has(
        cols, "aggregation_timestamp", "timestamp", "date"
    )


def _oai_legacy_covers(cols: frozenset[str]) -> frozenset[str]:
    out = {"input_tokens", "output_tokens"}
    if "n_requests" in cols:
        out.add("requests")
    if "n_cached_context_tokens_total" in cols:
        out.add("cache_read_tokens")
    return frozenset(out)


def _oai_legacy_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    figures: dict[str, Number] = {
        "input_tokens": _int(row["n_context_tokens_total"], f"{where}, n_context_tokens_total"),
        "output_tokens": _int(
            row["n_generated_tokens_total"], f"{where}, n_generated_tokens_total"
        ),
    }
    if "n_requests" in cols:
        figures["requests"] = _int(row["n_requests"], f"{where}, n_requests")
    if "n_cached_context_tokens_total" in cols:
        figures["cache_read_tokens"] = _int(
            row["n_cached_context_tokens_total"], f"{where}, n_cached_context_tokens_total"
        )
    return ExportRow(
        day=parse_day(_get(row, "aggregation_timestamp", "timestamp", "date") or "", where),
        model=_text(row.get("snapshot_id")),
        key=_text(row.get("api_key_id")),
        project=_text(row.get("project_id")),
        figures=figures,
        provider="openai",
    )


# Anthropic: the Admin API's usage report (usage_report/messages), flattened.
_ANT_TIME = ("starting_at", "bucket_start", "date", "usage_date_utc")
_ANT_WRITES = (
    "cache_creation_ephemeral_5m_input_tokens",
    "cache_creation_ephemeral_1h_input_tokens",
)


def _ant_usage_detect(cols: frozenset[str]) -> bool:
    return {"model", "uncached_input_tokens", "output_tokens"} <= cols and _has(cols, *_ANT_TIME)


def _ant_usage_covers(cols: frozenset[str]) -> frozenset[str]:
    out = {"input_tokens", "output_tokens"}
    if "cache_read_input_tokens" in cols:
        out.add("cache_read_tokens")
    if _has(cols, *_ANT_WRITES, "cache_creation_input_tokens"):
        out.add("cache_write_tokens")
    return frozenset(out)


def _ant_usage_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    uncached = _int(row["uncached_input_tokens"], f"{where}, uncached_input_tokens")
    read = _int(row.get("cache_read_input_tokens"), f"{where}, cache_read_input_tokens")
    if _has(cols, *_ANT_WRITES):
        writes = sum(_int(row.get(c), f"{where}, {c}") for c in _ANT_WRITES)
    else:
        writes = _int(row.get("cache_creation_input_tokens"), f"{where}, cache_creation")
    covered = _ant_usage_covers(cols)
    figures: dict[str, Number] = {
        "input_tokens": uncached + read + writes,
        "output_tokens": _int(row["output_tokens"], f"{where}, output_tokens"),
    }
    if "cache_read_tokens" in covered:
        figures["cache_read_tokens"] = read
    if "cache_write_tokens" in covered:
        figures["cache_write_tokens"] = writes
    return ExportRow(
        day=parse_day(_get(row, *_ANT_TIME) or "", where),
        model=_text(row.get("model")),
        key=_text(row.get("api_key_id")),
        project=_text(row.get("workspace_id")),
        figures=figures,
        provider="anthropic",
        batch=_is_batch(row),
        start=_text(_get(row, *_ANT_TIME)),
        end=_text(_get(row, *_ANT_END)),
    )


# Anthropic: the Admin API's cost report (cost_report): amounts in cents.
def _ant_cost_detect(cols: frozenset[str]) -> bool:
    return (
        "amount" in cols
        and "currency" in cols
        and _has(cols, "cost_type", "token_type", "description")
        and _has(cols, *_ANT_TIME)
    )


def _ant_cost_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    _check_currency(row, where, "currency")
    cents = _usd(row["amount"], f"{where}, amount")
    with decimal.localcontext(_EXACT):
        usd = cents * _CENT
    return ExportRow(
        day=parse_day(_get(row, *_ANT_TIME) or "", where),
        model=_text(row.get("model")),
        key=None,
        project=_text(row.get("workspace_id")),
        figures={"cost_usd": usd},
        provider="anthropic",
        batch=_is_batch(row),
        start=_text(_get(row, *_ANT_TIME)),
        end=_text(_get(row, *_ANT_END)),
    )


def _cost_only(_cols: frozenset[str]) -> frozenset[str]:
    return frozenset({"cost_usd"})


FORMATS: tuple[Format, ...] = (
    Format(
        "openai-usage",
        "openai",
        _oai_usage_detect,
        _oai_usage_covers,
        _oai_usage_read,
        "OpenAI Usage API, completions",
    ),
    Format(
        "openai-costs",
        "openai",
        _oai_costs_detect,
        _cost_only,
        _oai_costs_read,
        "OpenAI Costs API",
    ),
    Format(
        "openai-legacy",
        "openai",
        _oai_legacy_detect,
        _oai_legacy_covers,
        _oai_legacy_read,
        "OpenAI's legacy activity export",
    ),
    Format(
        "anthropic-usage",
        "anthropic",
        _ant_usage_detect,
        _ant_usage_covers,
        _ant_usage_read,
        "Anthropic Admin API usage report (messages)",
    ),
    Format(
        "anthropic-cost",
        "anthropic",
        _ant_cost_detect,
        _cost_only,
        _ant_cost_read,
        "Anthropic Admin API cost report",
    ),
    Format(
        "recorder",
        None,
        _own_detect,
        _own_covers,
        _own_read,
        "date, model, api_key_id or project, a column per figure",
    ),
)


def read_export(text: str, *, source: str = "export") -> Export:
    """An export from the text of a CSV file, its format recognised by its columns."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = next(reader)
    except StopIteration:
        raise ExportError(f"{source}: empty file") from None
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None
    names = [_header(h) for h in header]
    cols = frozenset(n for n in names if n)
    fmt = next((f for f in FORMATS if f.detect(cols)), None)
    if fmt is None:
        raise ExportError(
            f"{source}: not a usage export this recorder reads (columns: "
            f"{', '.join(h.strip() for h in header)}); see docs/billing.md, 'Reconciliation'"
        )
    return read_rows(fmt, cols, _csv_rows(reader, names, source), source=source)


def _csv_rows(
    reader: Any, names: list[str], source: str
) -> Iterable[tuple[str, dict[str, str | None]]]:
    """Each non-blank line of a CSV as (where, row); a line whose cells are not
    as many as the header's is refused with its file and line number."""
    start = reader.line_num + 1
    try:
        for cells in reader:
            where = f"{source} line {start}"
            start = reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(names):
                raise ExportError(f"{where}: {len(cells)} cells, the header has {len(names)}")
            yield where, dict(zip(names, cells, strict=True))
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None


def read_rows(
    fmt: Format,
    cols: frozenset[str],
    rows: Iterable[tuple[str, Row]],
    *,
    source: str,
) -> Export:
    """An export of format ``fmt`` from already split rows: (where, row), the row's
    names as :func:`_header` makes them (the JSON readers come in here too)."""
    out: list[ExportRow] = []
    batch_told = False
    told_by = _BATCH_FIELD.get(fmt.name)
    for where, row in rows:
        parsed = fmt.read(row, cols, where)
        if parsed is not None:
            out.append(parsed)
        batch_told = batch_told or bool(told_by and _text(row.get(told_by)))
    providers = {r.provider for r in out if r.provider}
    if fmt.provider is not None:
        providers.add(fmt.provider)
    export = Export(fmt.name, fmt.covers(cols), out, frozenset(providers), source)
    if told_by and out and not batch_told:
        export.notes.append(
            f"{source}: no row says {told_by} (the response was not grouped by it), so "
            f"Batch API traffic, if any, is in the figures compared; ask with group_by "
            f"{told_by} to leave it out"
        )
    return export


# The field that tells batch traffic in each format, when the response is grouped by it.
_BATCH_FIELD = {
    "openai-usage": "batch",
    "anthropic-usage": "service_tier",
    "anthropic-cost": "service_tier",
}


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


# -- the mapping file -------------------------------------------------------------


@dataclass(slots=True)
class IdMapping:
    """The provider's ids as the recorder knows them."""

    keys: dict[str, str] = field(default_factory=dict)  # provider key id/name -> api_key_id
    projects: dict[str, str] = field(default_factory=dict)  # project/workspace id -> project
    models: dict[str, str] = field(default_factory=dict)  # export model -> recorded model

    def key(self, value: str | None) -> str | None:
        """The recorder's ``api_key_id`` for an export's key."""
        return None if value is None else self.keys.get(value, value)

    def project(self, value: str | None) -> str | None:
        """The recorder's ``project`` for an export's project or workspace."""
        return None if value is None else self.projects.get(value, value)

    def model(self, value: str | None) -> str | None:
        """The recorded model name for an export's."""
        return None if value is None else self.models.get(value, value)


_MAP_KINDS = {"key": "keys", "keys": "keys", "project": "projects", "projects": "projects"}
_MAP_KINDS |= {"workspace": "projects", "model": "models", "models": "models"}


def read_mapping(text: str, *, source: str = "mapping") -> IdMapping:
    """A mapping file: JSON ``{"keys": {...}, "projects": {...}, "models": {...}}``
    or CSV with the columns ``kind`` (key, project, model), ``provider_id``,
    ``recorded_as``."""
    mapping = IdMapping()
    body = text.lstrip("\ufeff").strip()
    if body.startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise ExportError(f"{source}: not JSON: {e}") from None
        for name, table in doc.items():
            kind = _MAP_KINDS.get(str(name).lower())
            if kind is None or not isinstance(table, dict):
                raise ExportError(
                    f"{source}: {name!r} is not one of keys, projects, models (each an object)"
                )
            target: dict[str, str] = getattr(mapping, kind)
            for provider_id, ours in table.items():
                if not isinstance(ours, str):
                    raise ExportError(f"{source}: {name}.{provider_id}: a string")
                target[str(provider_id)] = ours
        return mapping
    reader = csv.reader(io.StringIO(body))
    try:
        names = [_header(h) for h in next(reader, [])]
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None
    if not {"kind", "provider_id", "recorded_as"} <= set(names):
        raise ExportError(f"{source}: a JSON object, or CSV with kind,provider_id,recorded_as")
    for where, row in _csv_rows(reader, names, source):
        kind = _MAP_KINDS.get((row["kind"] or "").strip().lower())
        if kind is None:
            raise ExportError(f"{where}: kind is key, project or model")
        provider_id = (row["provider_id"] or "").strip()
        ours = (row["recorded_as"] or "").strip()
        if provider_id and ours:
            getattr(mapping, kind)[provider_id] = ours
    return mapping


# -- recorded streams ---------------------------------------------------------------

STREAM_COLUMNS = (
    "id",
    "started_at",
    "provider",
    "model",
    "response_model",
    "api_key_id",
    "project",
    "outcome",
    "interrupted",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "input_source",
    "output_source",
    "usage_source",
    "cost_usd",
    "price_version",
)


@dataclass(frozen=True, slots=True)
class Stream:
    """What reconciliation needs of a recorded stream."""

    id: str
    started_at: datetime
    provider: str | None
    model: str | None  # the model that served it, else the requested one
    api_key_id: str | None
    project: str | None
    outcome: str
    interrupted: bool
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_write_tokens: int | None
    input_source: str
    output_source: str
    usage_source: str
    cost_usd: Decimal | None
    price_version: str | None

    @property
    def day(self) -> str:
        """The UTC date it started."""
        return self.started_at.astimezone(UTC).date().isoformat()

    @property
    def billed(self) -> bool:
        """Whether the stream counts in the recorded figures (its usage is known)."""
        return self.usage_source != "none"


def stream_from_row(row: Mapping[Any, Any]) -> Stream:
    """A :class:`Stream` from a store row or ``StreamRecord.to_dict()``."""
    started = row["started_at"]
    when = started if isinstance(started, datetime) else parse_started_at(started)
    if when is None:
        raise ValueError(f"stream {row['id']} has no started_at")
    cost = row.get("cost_usd")
    return Stream(
        id=row["id"],
        started_at=when if when.tzinfo else when.replace(tzinfo=UTC),
        provider=row.get("provider"),
        model=row.get("response_model") or row.get("model"),
        api_key_id=row.get("api_key_id"),
        project=row.get("project"),
        outcome=row.get("outcome") or "truncated",
        interrupted=bool(row.get("interrupted")),
        input_tokens=row.get("input_tokens"),
        output_tokens=row.get("output_tokens"),
        cache_read_tokens=row.get("cache_read_tokens"),
        cache_write_tokens=row.get("cache_write_tokens"),
        input_source=row.get("input_source") or "none",
        output_source=row.get("output_source") or "none",
        usage_source=row.get("usage_source") or "none",
        cost_usd=None if cost is None else Decimal(cost),
        price_version=row.get("price_version"),
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


def read_streams(
    engine: Engine,
    since: datetime,
    until: datetime,
    providers: Iterable[str] = (),
) -> list[Stream]:
    """The streams started in [since, until), of ``providers`` if any are named."""
    c = STREAMS.c
    where: list[ColumnElement[bool]] = [c.started_at >= since, c.started_at < until]
    names = sorted(set(providers))
    if names:
        where.append(c.provider.in_(names))
    stmt = select(*(c[n] for n in STREAM_COLUMNS)).where(*where).order_by(c.started_at, c.id)
    with engine.connect() as conn:
        return [stream_from_row(row._mapping) for row in conn.execute(stmt)]


# -- comparison ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Tolerance:
    """A difference counts when it exceeds ``relative`` of the larger side AND the
    absolute allowance (``tokens`` for counts, ``usd`` for cost)."""

    relative: Decimal = Decimal("0.02")
    tokens: int = 0
    usd: Decimal = Decimal("0.01")

    def describe(self) -> str:
        """The tolerance in words, as the output states it."""
        percent = f"{(self.relative * 100).normalize():f}"
        return (
            f"tolerance: a difference counts beyond {percent}% of the larger side and"
            f" beyond {self.tokens} tokens or requests ({self.usd:f} USD for cost)"
        )

    def exceeded(self, figure: str, recorded: Number, exported: Number) -> bool:
        """Whether ``exported - recorded`` is beyond this tolerance."""
        with decimal.localcontext(_EXACT):
            diff = abs(Decimal(exported) - Decimal(recorded))
            base = max(abs(Decimal(exported)), abs(Decimal(recorded)))
            allowance = self.usd if figure == "cost_usd" else Decimal(self.tokens)
            return diff > allowance and diff > self.relative * base


GroupKey = tuple[str, str | None, str | None]  # day, model, key/project (None: not grouped)


@dataclass(slots=True)
class Group:
    """One (day, model, key or project): both sides and the streams in it."""

    day: str
    model: str | None
    dim: str | None
    recorded: dict[str, Number]
    exported: dict[str, Number]
    streams: list[Stream] = field(default_factory=list)
    in_export: bool = False


@dataclass(slots=True)
class Result:
    """What reconciliation found."""

    by: str
    figures: tuple[str, ...]
    groups: list[Group]
    differing: list[tuple[Group, list[str]]]  # and the figures beyond tolerance
    unmapped_keys: set[str] = field(default_factory=set)
    unmapped_projects: set[str] = field(default_factory=set)
    recorded_total: dict[str, Number] = field(default_factory=dict)
    exported_total: dict[str, Number] = field(default_factory=dict)
    tolerance: Tolerance = field(default_factory=Tolerance)
    # Batch API traffic the export reports: left out of the comparison, summed apart
    # (per figure the export covers) with the number of its rows.
    batch_rows: int = 0
    batch_total: dict[str, Number] = field(default_factory=dict)


def choose_by(export: Export, by: str | None) -> str:
    """``key`` when the export names keys, else ``project`` when it names
    projects, else ``none`` (unless ``by`` is given)."""
    if by and by != "auto":
        if by not in DIMENSIONS:
            raise ExportError(f"--by: one of {', '.join(DIMENSIONS)}, auto")
        return by
    if export.has_key:
        return "key"
    if export.has_project:
        return "project"
    return "none"


def _model_key(name: str | None, exact: bool) -> str | None:
    if name is None:
        return None
    return name if exact else model_base(name)


def _zero(figure: str) -> Number:
    return ZERO if figure == "cost_usd" else 0


def _stream_figures(s: Stream) -> dict[str, Number]:
    return {
        "requests": 1,
        "input_tokens": s.input_tokens or 0,
        "output_tokens": s.output_tokens or 0,
        "cache_read_tokens": s.cache_read_tokens or 0,
        "cache_write_tokens": s.cache_write_tokens or 0,
        "cost_usd": s.cost_usd or ZERO,
    }


def reconcile(
    export: Export,
    streams: Iterable[Stream],
    *,
    mapping: IdMapping | None = None,
    by: str | None = None,
    tolerance: Tolerance | None = None,
    exact_models: bool = False,
) -> Result:
    """Compare the export with the recorded streams, group by group."""
    mapping = mapping or IdMapping()
    tolerance = tolerance or Tolerance()
    dim = choose_by(export, by)
    figures = tuple(f for f in FIGURES if f in export.figures)
    groups: dict[GroupKey, Group] = {}
    unmapped_keys: set[str] = set()
    unmapped_projects: set[str] = set()

    def group(day: str, model: str | None, who: str | None) -> Group:
        key = (day, model, who)
        if key not in groups:
            groups[key] = Group(
                day,
                model,
                who,
                {f: _zero(f) for f in figures},
                {f: _zero(f) for f in figures},
            )
        return groups[key]

    batch_rows = 0
    batch_total: dict[str, Number] = {}  # the figures the batch rows carry
    with decimal.localcontext(_EXACT):
        for row in export.rows:
            if row.batch:
                # never proxied: summed apart, compared with nothing recorded
                batch_rows += 1
                for f, value in row.figures.items():
                    batch_total[f] = batch_total.get(f, _zero(f)) + value
                continue
            if dim == "key":
                who = mapping.key(row.key)
                if row.key is not None and mapping.keys and row.key not in mapping.keys:
                    unmapped_keys.add(row.key)
            elif dim == "project":
                who = mapping.project(row.project)
                if (
                    row.project is not None
                    and mapping.projects
                    and row.project not in mapping.projects
                ):
                    unmapped_projects.add(row.project)
            else:
                who = None
            g = group(row.day, _model_key(mapping.model(row.model), exact_models), who)
            g.in_export = True
            for f, value in row.figures.items():
                if f in g.exported:
                    g.exported[f] += value
        for s in streams:
            who = s.api_key_id if dim == "key" else s.project if dim == "project" else None
            g = group(s.day, _model_key(s.model, exact_models), who)
            g.streams.append(s)
            if not s.billed:
                continue
            values = _stream_figures(s)
            for f in figures:
                g.recorded[f] += values[f]
    ordered = sorted(
        groups.values(),
        key=lambda g: (g.day, g.model is None, g.model or "", g.dim is None, g.dim or ""),
    )
    differing = []
    for g in ordered:
        beyond = [f for f in figures if tolerance.exceeded(f, g.recorded[f], g.exported[f])]
        if beyond:
            differing.append((g, beyond))
    with decimal.localcontext(_EXACT):
        recorded_total = {f: sum((g.recorded[f] for g in ordered), _zero(f)) for f in figures}
        exported_total = {f: sum((g.exported[f] for g in ordered), _zero(f)) for f in figures}
    return Result(
        dim,
        figures,
        ordered,
        differing,
        unmapped_keys,
        unmapped_projects,
        recorded_total,
        exported_total,
        tolerance,
        batch_rows,
        {f: batch_total[f] for f in FIGURES if f in batch_total},
    )


def unpriced(g: Group) -> bool:
    """Whether the group's recorded cost is unknown: it has billed streams, none priced."""
    billed = [s for s in g.streams if s.billed]
    return bool(billed) and all(s.cost_usd is None for s in billed)


def explain(g: Group, beyond: Sequence[str]) -> list[tuple[Stream, str]]:
    """The streams of a group that may explain its difference, and why."""
    out = []
    for s in g.streams:
        reasons = []
        if s.outcome == "http_error":
            reasons.append("http_error, not billed here")
        elif s.interrupted:
            reasons.append(s.outcome)
        if s.input_source == "estimated":
            reasons.append("input estimated")
        if s.output_source == "estimated":
            reasons.append("output estimated")
        if s.billed and s.price_version is None and "cost_usd" in beyond:
            reasons.append("no price")
        if reasons:
            out.append((s, "; ".join(reasons)))
    return out


def _value(figure: str, value: Number) -> Any:
    return money(value) if figure == "cost_usd" and isinstance(value, Decimal) else value


def group_document(
    g: Group, beyond: Sequence[str], by: str, figures: Sequence[str], max_streams: int = 50
) -> dict[str, Any]:
    """One group as `recorder reconcile --format json` prints it."""
    doc: dict[str, Any] = {"day": g.day, "model": g.model}
    if by != "none":
        doc[by] = g.dim
    doc["recorded"] = {f: _value(f, g.recorded[f]) for f in figures}
    doc["exported"] = {f: _value(f, g.exported[f]) for f in figures}
    with decimal.localcontext(_EXACT):
        doc["difference"] = {f: _value(f, g.exported[f] - g.recorded[f]) for f in figures}
    if "cost_usd" in figures and unpriced(g):
        # no recorded stream of the group has a price: its cost is unknown, not zero
        doc["recorded"]["cost_usd"] = None
        doc["difference"]["cost_usd"] = None
    doc["beyond_tolerance"] = list(beyond)
    doc["in_export"] = g.in_export
    doc["recorded_streams"] = sum(1 for s in g.streams if s.billed)
    explained = explain(g, beyond)
    doc["streams"] = [
        {
            "id": s.id,
            "started_at": format_started_at(s.started_at),
            "outcome": s.outcome,
            "usage_source": s.usage_source,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "cost_usd": None if s.cost_usd is None else money(s.cost_usd),
            "why": why,
        }
        for s, why in explained[:max_streams]
    ]
    doc["streams_omitted"] = max(0, len(explained) - max_streams)
    return doc


def result_document(
    result: Result, *, include_all: bool = False, max_streams: int = 50
) -> list[dict[str, Any]]:
    """The groups beyond tolerance (every group with ``include_all``), as JSON objects."""
    if include_all:
        beyond = {id(g): b for g, b in result.differing}
        chosen = [(g, beyond.get(id(g), [])) for g in result.groups]
    else:
        chosen = result.differing
    return [group_document(g, b, result.by, result.figures, max_streams) for g, b in chosen]
