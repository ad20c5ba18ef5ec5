"""What `recorder reconcile` prints of a comparison: the groups beyond tolerance
as JSON objects, each with the streams that may explain its difference."""

from __future__ import annotations

import decimal
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from recorder.billing.comparison import Group, Result
from recorder.billing.export_model import Number
from recorder.billing.recorded_streams import Stream
from recorder.core import money
from recorder.core.money import EXACT
from recorder.core.record_time import format_started_at


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
    return money.exact(value) if figure == "cost_usd" and isinstance(value, Decimal) else value


def group_document(
    g: Group, beyond: Sequence[str], by: str, figures: Sequence[str], max_streams: int = 50
) -> dict[str, Any]:
    """One group as `recorder reconcile --format json` prints it."""
    doc: dict[str, Any] = {"day": g.day, "model": g.model}
    if by != "none":
        doc[by] = g.dim
    doc["recorded"] = {f: _value(f, g.recorded[f]) for f in figures}
    doc["exported"] = {f: _value(f, g.exported[f]) for f in figures}
    with decimal.localcontext(EXACT):
        doc["difference"] = {f: _value(f, g.exported[f] - g.recorded[f]) for f in figures}
    if "cost_usd" in figures and unpriced(g):
        # no recorded stream of the group has a price: its cost is unknown, not zero
        doc["recorded"]["cost_usd"] = None
        doc["difference"]["cost_usd"] = None
    doc["beyond_tolerance"] = list(beyond)
    doc["in_export"] = g.in_export
    doc["recorded_streams"] = sum(s.requests for s in g.streams if s.billed)
    explained = explain(g, beyond)
    doc["streams"] = [
        {
            "id": s.id,
            "started_at": format_started_at(s.started_at),
            "outcome": s.outcome,
            "usage_source": s.usage_source,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "cost_usd": None if s.cost_usd is None else money.exact(s.cost_usd),
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
