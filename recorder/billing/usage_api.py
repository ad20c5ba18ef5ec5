"""The providers' usage and cost API responses, read as returned.

Four shapes, each a page of time buckets holding results (docs/billing.md,
"Reconciliation"; a sample of each, with the reference it follows, is under
tests/fixtures/usage_exports/):

- OpenAI ``GET /v1/organization/usage/completions``: ``{"object": "page",
  "data": [{"object": "bucket", "start_time", "end_time", "results": [...]}],
  "has_more", "next_page"}``, each result an
  ``organization.usage.completions.result`` (``input_tokens``,
  ``input_cached_tokens``, ``output_tokens``, audio tokens,
  ``num_model_requests``, and the group-by fields ``project_id``, ``user_id``,
  ``api_key_id``, ``model``, ``batch``, ``service_tier``);
- OpenAI ``GET /v1/organization/costs``: the same page, each result an
  ``organization.costs.result`` (``amount: {value, currency}``, ``line_item``,
  ``project_id``);
- Anthropic ``GET /v1/organizations/usage_report/messages``: ``{"data":
  [{"starting_at", "ending_at", "results": [...]}], "has_more", "next_page"}``,
  each result with ``uncached_input_tokens``, ``cache_creation:
  {ephemeral_1h_input_tokens, ephemeral_5m_input_tokens}``,
  ``cache_read_input_tokens``, ``output_tokens``, ``server_tool_use``, and the
  group-by fields ``model``, ``api_key_id``, ``workspace_id``, ``service_tier``,
  ``context_window``;
- Anthropic ``GET /v1/organizations/cost_report``: the same page, each result
  with ``amount`` (a decimal string in cents), ``currency``, ``description``,
  ``cost_type``, ``model``, ``service_tier``, ``token_type``, ``workspace_id``.

Each result becomes one flat row, nested objects joined with ``_``
(``cache_creation.ephemeral_5m_input_tokens`` as the flattened CSV names it),
its bucket's start and end carried onto it, and is read by the same reader
(:data:`recorder.billing.export_formats.FORMATS`) as the flattened CSV: one
meaning per field, whichever way the file came. Numbers are parsed as ``Decimal`` (a cost
of ``0.06`` stays 0.06, never a float).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

from recorder.billing.export_formats import FORMATS, read_rows
from recorder.billing.export_model import Export, ExportError, header_name

_FORMATS = {f.name: f for f in FORMATS}

# The columns each shape's reader needs, present (null) even when the response
# leaves a group-by field out.
_NEEDED = {
    "openai-usage": ("model", "input_tokens", "output_tokens", "start_time", "end_time"),
    "openai-costs": ("amount_value", "line_item", "start_time", "end_time"),
    "anthropic-usage": (
        "model",
        "uncached_input_tokens",
        "output_tokens",
        "starting_at",
        "ending_at",
    ),
    "anthropic-cost": ("amount", "currency", "description", "starting_at", "ending_at"),
}


def looks_like_json(text: str) -> bool:
    """Whether a file's text is JSON rather than CSV (by its first character)."""
    return text.lstrip("\ufeff \t\r\n")[:1] in ("{", "[")


def _shape(result: Mapping[str, Any], where: str) -> str:
    obj = result.get("object")
    if obj == "organization.usage.completions.result" or (
        obj is None and "num_model_requests" in result and "input_tokens" in result
    ):
        return "openai-usage"
    if obj == "organization.costs.result" or (
        obj is None and isinstance(result.get("amount"), dict)
    ):
        return "openai-costs"
    if "uncached_input_tokens" in result:
        return "anthropic-usage"
    if "amount" in result and "currency" in result and not isinstance(result["amount"], dict):
        return "anthropic-cost"
    if isinstance(obj, str) and obj.startswith("organization.usage."):
        raise ExportError(
            f"{where}: {obj} results are not compared; read the completions usage "
            "(organization/usage/completions) and the costs"
        )
    keys = ", ".join(sorted(str(k) for k in result)) or "none"
    raise ExportError(
        f"{where}: not a result of the usage or cost APIs this recorder reads (keys: {keys})"
    )


def _cell(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | Decimal | str):
        return str(value)
    return json.dumps(value)


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str | None]]:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flatten(value, f"{name}.")
        else:
            yield header_name(name), _cell(value)


def _pages(doc: Any, source: str) -> list[Mapping[str, Any]]:
    pages = doc if isinstance(doc, list) else [doc]
    for n, page in enumerate(pages):
        if not isinstance(page, Mapping) or not isinstance(page.get("data"), list):
            where = source if len(pages) == 1 else f"{source} page {n + 1}"
            raise ExportError(
                f"{where}: not a usage or cost API response (a page has a 'data' list)"
            )
    return pages


def read_pages(text: str, *, source: str = "response") -> Export:
    """An export from a file holding one API response page, or a JSON array of
    pages, of one of the four shapes (a file mixing shapes is refused)."""
    try:
        doc = json.loads(text.lstrip("\ufeff"), parse_float=Decimal)
    except ValueError as e:
        raise ExportError(f"{source}: not JSON: {e}") from None
    pages = _pages(doc, source)
    shape: str | None = None
    rows: list[tuple[str, dict[str, str | None]]] = []
    cols: set[str] = set()
    for p, page in enumerate(pages):
        here = source if len(pages) == 1 else f"{source} page {p + 1}"
        for b, bucket in enumerate(page["data"]):
            if not isinstance(bucket, Mapping):
                raise ExportError(f"{here}: data[{b}] is not a bucket object")
            results = bucket.get("results", bucket.get("result"))
            if not isinstance(results, list):
                raise ExportError(f"{here}: data[{b}] has no results list")
            edges = {
                name: _cell(bucket.get(name))
                for name in ("start_time", "end_time", "starting_at", "ending_at")
                if name in bucket
            }
            for r, result in enumerate(results):
                where = f"{here}: data[{b}].results[{r}]"
                if not isinstance(result, Mapping):
                    raise ExportError(f"{where}: not an object")
                this = _shape(result, where)
                if shape is None:
                    shape = this
                elif this != shape:
                    raise ExportError(f"{where}: one {this} result among {shape} results")
                row = dict(_flatten(result))
                row.update(edges)
                cols.update(row)
                rows.append((where, row))
    more = sum(1 for page in pages if page.get("has_more") is True)
    cursors = tuple(
        str(page["next_page"])
        for page in pages
        if page.get("has_more") is True and page.get("next_page")
    )
    if shape is None:
        # no results at all: nothing to read, and no way to tell the shape
        return Export(
            "empty-response",
            frozenset(),
            [],
            frozenset(),
            source,
            pages_more=more,
            pages_last=len(pages) - more,
            next_pages=cursors,
        )
    fmt = _FORMATS[shape]
    cols.update(_NEEDED[shape])
    full = [(where, {c: row.get(c) for c in cols}) for where, row in rows]
    export = read_rows(fmt, frozenset(cols), full, source=source)
    export.pages_more = more
    export.pages_last = len(pages) - more
    export.next_pages = cursors
    return export
