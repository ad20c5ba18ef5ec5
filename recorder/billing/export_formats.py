"""The usage export formats the recorder reads, told apart by their columns.

Each :class:`~recorder.billing.export_model.Format` says how to recognise its
columns, which figures it covers and how to read one row into an
:class:`~recorder.billing.export_model.ExportRow`: the providers' first (their
columns are the more telling), the recorder's own last. docs/billing.md,
"Reconciliation", lists them. :func:`read_rows` turns the split rows of any
source (CSV lines, JSON results) into an export.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping
from decimal import Decimal

from recorder.billing.export_model import (
    FIGURES,
    Export,
    ExportRow,
    Format,
    Number,
    Row,
    check_currency,
    count_cell,
    first_cell,
    has_column,
    is_batch,
    parse_day,
    text_cell,
    usd_cell,
)
from recorder.core.money import EXACT

_CENT = Decimal("0.01")


def _counts(
    row: Row, cols: frozenset[str], where: str, names: Mapping[str, str]
) -> dict[str, Number]:
    """The token and request counts of a row: ``names`` maps the export's column
    to the recorder's figure; a column the export does not have is not read."""
    return {
        ours: count_cell(row[theirs], f"{where}, {theirs}")
        for theirs, ours in names.items()
        if theirs in cols
    }


def _covered(cols: frozenset[str], names: Mapping[str, str]) -> frozenset[str]:
    return frozenset(ours for theirs, ours in names.items() if theirs in cols)


# The recorder's own format: a column per figure, named as ours.
def _own_detect(cols: frozenset[str]) -> bool:
    return "model" in cols and has_column(cols, "date", "day") and any(f in cols for f in FIGURES)


def _own_covers(cols: frozenset[str]) -> frozenset[str]:
    return frozenset(f for f in FIGURES if f in cols)


def _own_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    figures: dict[str, Number] = {}
    for name in FIGURES:
        if name in cols:
            here = f"{where}, {name}"
            figures[name] = (
                usd_cell(row[name], here) if name == "cost_usd" else count_cell(row[name], here)
            )
    check_currency(row, where, "currency")
    return ExportRow(
        day=parse_day(first_cell(row, "date", "day") or "", where),
        model=text_cell(row.get("model")),
        key=text_cell(first_cell(row, "api_key_id", "key")),
        project=text_cell(row.get("project")),
        figures=figures,
        provider=text_cell(row.get("provider")),
    )


# OpenAI: the Usage API's completions results (organization/usage/completions),
# one line per bucket and group, as the usage dashboard exports them.
_OAI_TIME = ("start_time_iso", "start_time", "bucket_start_time", "date")

_OAI_END = ("end_time_iso", "end_time", "bucket_end_time")
_ANT_END = ("ending_at", "bucket_end")
# The Usage API's columns and ours (the first two are always there: detect asks for them).
_OAI_USAGE = {
    "input_tokens": "input_tokens",
    "output_tokens": "output_tokens",
    "num_model_requests": "requests",
    "input_cached_tokens": "cache_read_tokens",
}


def _oai_usage_detect(cols: frozenset[str]) -> bool:
    return (
        {"model", "input_tokens", "output_tokens"} <= cols
        and has_column(cols, "num_model_requests", "input_cached_tokens")
        and has_column(cols, *_OAI_TIME)
    )


def _oai_usage_covers(cols: frozenset[str]) -> frozenset[str]:
    return _covered(cols, _OAI_USAGE)


def _oai_usage_read(row: Row, cols: frozenset[str], where: str) -> ExportRow | None:
    return ExportRow(
        day=parse_day(first_cell(row, *_OAI_TIME) or "", where),
        model=text_cell(row.get("model")),
        key=text_cell(row.get("api_key_id")),
        project=text_cell(row.get("project_id")),
        figures=_counts(row, cols, where, _OAI_USAGE),
        provider="openai",
        batch=is_batch(row),  # Batch API jobs never pass through a proxy
        start=text_cell(first_cell(row, *_OAI_TIME)),
        end=text_cell(first_cell(row, *_OAI_END)),
    )


# OpenAI: the Costs API's results (organization/costs), amount in USD, per line item.
def _oai_costs_detect(cols: frozenset[str]) -> bool:
    return "amount_value" in cols and "line_item" in cols and has_column(cols, *_OAI_TIME)


def _oai_costs_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    check_currency(row, where, "amount_currency", "currency")
    item = text_cell(row.get("line_item"))
    model = item.split(",")[0].strip() if item else None
    return ExportRow(
        day=parse_day(first_cell(row, *_OAI_TIME) or "", where),
        model=model,
        key=None,
        project=text_cell(row.get("project_id")),
        figures={"cost_usd": usd_cell(row["amount_value"], f"{where}, amount_value")},
        provider="openai",
        start=text_cell(first_cell(row, *_OAI_TIME)),
        end=text_cell(first_cell(row, *_OAI_END)),
    )


# OpenAI's legacy activity export (the old /v1/usage fields).
_OAI_LEGACY = {
    "n_context_tokens_total": "input_tokens",
    "n_generated_tokens_total": "output_tokens",
    "n_requests": "requests",
    "n_cached_context_tokens_total": "cache_read_tokens",
}


def _oai_legacy_detect(cols: frozenset[str]) -> bool:
    return {
        "n_context_tokens_total",
        "n_generated_tokens_total",
        "snapshot_id",
    } <= cols and has_column(cols, "aggregation_timestamp", "timestamp", "date")


def _oai_legacy_covers(cols: frozenset[str]) -> frozenset[str]:
    return _covered(cols, _OAI_LEGACY)


def _oai_legacy_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    return ExportRow(
        day=parse_day(first_cell(row, "aggregation_timestamp", "timestamp", "date") or "", where),
        model=text_cell(row.get("snapshot_id")),
        key=text_cell(row.get("api_key_id")),
        project=text_cell(row.get("project_id")),
        figures=_counts(row, cols, where, _OAI_LEGACY),
        provider="openai",
    )


# Anthropic: the Admin API's usage report (usage_report/messages), flattened.
_ANT_TIME = ("starting_at", "bucket_start", "date", "usage_date_utc")
_ANT_WRITES = (
    "cache_creation_ephemeral_5m_input_tokens",
    "cache_creation_ephemeral_1h_input_tokens",
)


def _ant_usage_detect(cols: frozenset[str]) -> bool:
    return {"model", "uncached_input_tokens", "output_tokens"} <= cols and has_column(
        cols, *_ANT_TIME
    )


def _ant_usage_covers(cols: frozenset[str]) -> frozenset[str]:
    out = {"input_tokens", "output_tokens"}
    if "cache_read_input_tokens" in cols:
        out.add("cache_read_tokens")
    if has_column(cols, *_ANT_WRITES, "cache_creation_input_tokens"):
        out.add("cache_write_tokens")
    return frozenset(out)


def _ant_usage_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    uncached = count_cell(row["uncached_input_tokens"], f"{where}, uncached_input_tokens")
    read = count_cell(row.get("cache_read_input_tokens"), f"{where}, cache_read_input_tokens")
    if has_column(cols, *_ANT_WRITES):
        writes = sum(count_cell(row.get(c), f"{where}, {c}") for c in _ANT_WRITES)
    else:
        writes = count_cell(row.get("cache_creation_input_tokens"), f"{where}, cache_creation")
    covered = _ant_usage_covers(cols)
    figures: dict[str, Number] = {
        "input_tokens": uncached + read + writes,
        "output_tokens": count_cell(row["output_tokens"], f"{where}, output_tokens"),
    }
    if "cache_read_tokens" in covered:
        figures["cache_read_tokens"] = read
    if "cache_write_tokens" in covered:
        figures["cache_write_tokens"] = writes
    return ExportRow(
        day=parse_day(first_cell(row, *_ANT_TIME) or "", where),
        model=text_cell(row.get("model")),
        key=text_cell(row.get("api_key_id")),
        project=text_cell(row.get("workspace_id")),
        figures=figures,
        provider="anthropic",
        batch=is_batch(row),
        start=text_cell(first_cell(row, *_ANT_TIME)),
        end=text_cell(first_cell(row, *_ANT_END)),
    )


# Anthropic: the Admin API's cost report (cost_report): amounts in cents.
def _ant_cost_detect(cols: frozenset[str]) -> bool:
    return (
        "amount" in cols
        and "currency" in cols
        and has_column(cols, "cost_type", "token_type", "description")
        and has_column(cols, *_ANT_TIME)
    )


def _ant_cost_read(row: Row, cols: frozenset[str], where: str) -> ExportRow:
    check_currency(row, where, "currency")
    cents = usd_cell(row["amount"], f"{where}, amount")
    with decimal.localcontext(EXACT):
        usd = cents * _CENT
    return ExportRow(
        day=parse_day(first_cell(row, *_ANT_TIME) or "", where),
        model=text_cell(row.get("model")),
        key=None,
        project=text_cell(row.get("workspace_id")),
        figures={"cost_usd": usd},
        provider="anthropic",
        batch=is_batch(row),
        start=text_cell(first_cell(row, *_ANT_TIME)),
        end=text_cell(first_cell(row, *_ANT_END)),
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


def read_rows(
    fmt: Format,
    cols: frozenset[str],
    rows: Iterable[tuple[str, Row]],
    *,
    source: str,
) -> Export:
    """An export of format ``fmt`` from already split rows: (where, row), the row's
    names as :func:`header_name` makes them (the JSON readers come in here too)."""
    out: list[ExportRow] = []
    batch_told = False
    told_by = BATCH_FIELD.get(fmt.name)
    for where, row in rows:
        parsed = fmt.read(row, cols, where)
        if parsed is not None:
            out.append(parsed)
        batch_told = batch_told or bool(told_by and text_cell(row.get(told_by)))
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
BATCH_FIELD = {
    "openai-usage": "batch",
    "anthropic-usage": "service_tier",
    "anthropic-cost": "service_tier",
}
