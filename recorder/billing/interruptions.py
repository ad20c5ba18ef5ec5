"""The price of interruptions: `recorder audit --interruptions`.

A stream cut in the middle cannot be resumed: the client sends the whole request
again, and what the cut attempt generated before the cut is billed. So an
interruption is paid twice: the cut attempt's billed tokens, and the input its
retry sends again. This module says how much, per group of streams, from the
figures every record already has and, where the store keeps retry chains
(issue 32: ``retry_of``, the record id of the attempt a request retries), from
the chains.

The figures of one stream (:func:`stream_figures`), summed per group exactly as
the audit sums its own (:func:`recorder.billing.audit.group_sums`), so sums over
groups equal sums over streams for every grouping:

- ``requests``, ``cost_usd``: every stream, and every stream's cost (all spend);
- ``interrupted_attempts``: attempts that did not complete: an error event after
  status 200, cut by either side, truncated (the record's ``interrupted``), or
  refused with status 429 or 5xx, the refusals a client retries;
- ``interruption_cost_usd``: their billed cost, split by where its usage came
  from: ``reported_interruption_cost_usd`` (reported by the provider) and
  ``estimated_interruption_cost_usd`` (estimated from what was streamed, wholly
  or in part). A refused attempt is not billed and adds nothing;
  ``unpriced_interruptions`` counts those whose cost is unknown (no price);
- ``retries``: streams that retry an attempt that did not complete (``retry_of``
  set), ``resent_input_tokens`` their input (all of it was sent again), and
  ``resent_input_cost_usd`` what that input cost, priced with the price table
  given (the shipped one, or ``--prices``) at the retry's model, tier and cache
  use. The resent input is part of the retries' own cost, not added to
  ``interruption_cost_usd``: the cut attempt's cost already holds the input its
  retry pays again, so ``interruption_cost_usd`` alone is what the interruptions
  added to the bill (the chain's completed attempt would have been paid anyway);
- ``interruption_share``: ``interruption_cost_usd / cost_usd`` of the group, to
  six places (:func:`recorder.billing.audit.share`; null without spend): a
  ratio, computed again for the totals, never summed.

Each figure belongs to the stream it comes from: the resent input to the retry
that sent it (its group, its day), the cost to the attempt that was cut.
Money is ``Decimal`` throughout, summed in :data:`recorder.core.money.EXACT`.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from recorder.billing import audit
from recorder.core.money import EXACT, ZERO
from recorder.core.pricing import PriceTable, Unpriced, cost_of
from recorder.core.retries import did_not_complete as _did_not_complete

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]

# what pricing a retry's input reads beyond the audit's columns
PRICING_COLUMNS = ("http_status", "response_model", "service_tier", "cache_write_1h_tokens")
# the retry chain's fields (issue 32, section 2): read when the store has them
CHAIN_COLUMNS = ("retry_of", "attempt", "request_fingerprint")
COLUMNS = (*audit.COLUMNS, *PRICING_COLUMNS, *audit.OPTIONAL_COLUMNS, *CHAIN_COLUMNS)

SHARE = "interruption_share"
# in the order the table shows them (a narrow one leaves out the last first)
METRICS = (
    "requests",
    "cost_usd",
    "interrupted_attempts",
    "interruption_cost_usd",
    SHARE,
    "retries",
    "resent_input_tokens",
    "resent_input_cost_usd",
    "reported_interruption_cost_usd",
    "estimated_interruption_cost_usd",
    "unpriced_interruptions",
)
SUMMED = tuple(m for m in METRICS if m != SHARE)
MONEY_METRICS = frozenset(
    {
        "cost_usd",
        "interruption_cost_usd",
        "reported_interruption_cost_usd",
        "estimated_interruption_cost_usd",
        "resent_input_cost_usd",
    }
)


def did_not_complete(outcome: Any, http_status: Any) -> bool:
    """Whether a stream is an attempt that did not complete (module docstring), as
    the proxy judged it when it chained the retries (``recorder.core.retries``)."""
    return _did_not_complete(outcome if isinstance(outcome, str) else None, _int(http_status))


def _int(value: Any) -> int | None:
    """A nullable count as read from a row or a DataFrame (NA and NaN: None)."""
    if value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):  # NaN, pandas' NA
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def input_cost(row: Mapping[str, Any], table: PriceTable) -> Decimal | None:
    """What a stream's input cost under ``table``: its input tokens (cache reads
    and writes at their rates) at its model's and tier's rates, no output; None
    when it has no input count or the table cannot price it."""
    tokens = _int(row.get("input_tokens"))
    if tokens is None:
        return None
    entry = table.resolve(_text(row.get("response_model"))) or table.resolve(
        _text(row.get("model"))
    )
    if entry is None:
        return None
    try:
        cost = cost_of(
            entry,
            table.origin(entry.key),
            input_tokens=tokens,
            output_tokens=0,
            cache_read_tokens=_int(row.get("cache_read_tokens")),
            cache_write_tokens=_int(row.get("cache_write_tokens")),
            cache_write_1h_tokens=_int(row.get("cache_write_1h_tokens")),
            service_tier=_text(row.get("service_tier")),
        )
    except Unpriced:
        return None
    return Decimal(cost.usd)


def stream_figures(row: Mapping[str, Any], table: PriceTable) -> dict[str, Any]:
    """One stream's figures (:data:`SUMMED`), from a record's fields (a store row,
    ``StreamRecord.to_dict()``, or a row of the audit's DataFrame)."""
    cost = audit.cost_value(row.get("cost_usd"))
    cut = did_not_complete(row.get("outcome"), row.get("http_status"))
    reported = row.get("usage_source") == "reported"
    usage_known = row.get("usage_source") not in (None, "none")
    retry = _text(row.get("retry_of")) is not None
    resent_tokens = (_int(row.get("input_tokens")) or 0) if retry else 0
    resent_cost = (input_cost(row, table) or ZERO) if retry else ZERO
    return {
        "requests": 1,
        "cost_usd": cost,
        "interrupted_attempts": int(cut),
        "interruption_cost_usd": cost if cut else ZERO,
        "reported_interruption_cost_usd": cost if cut and reported else ZERO,
        "estimated_interruption_cost_usd": cost if cut and not reported else ZERO,
        "unpriced_interruptions": int(
            cut and usage_known and row.get("price_version") in (None, "")
        ),
        "retries": int(retry),
        "resent_input_tokens": resent_tokens,
        "resent_input_cost_usd": resent_cost,
    }


def _with_share(group: dict[str, Any]) -> dict[str, Any]:
    """The group (its keys, then :data:`METRICS` in order) with its share."""
    figures = {**group, SHARE: audit.share(group["interruption_cost_usd"], group["cost_usd"])}
    keys = {k: v for k, v in group.items() if k not in METRICS}
    return {**keys, **{name: figures[name] for name in METRICS}}


def aggregate(df: pd.DataFrame, by: Sequence[str], table: PriceTable) -> list[dict[str, Any]]:
    """One dict per group: its keys (in ``by``'s order), then :data:`METRICS`;
    money as exact ``Decimal``; ordered by the keys (unknown last). No streams,
    no groups."""
    audit.check_by(by)
    if df.empty:
        return []
    import pandas

    columns = [c for c in COLUMNS if c in df]
    per_stream = [
        stream_figures(dict(zip(columns, values, strict=True)), table)
        for values in zip(*(df[c] for c in columns), strict=True)
    ]
    figures = {
        name: pandas.Series(
            [f[name] for f in per_stream],
            dtype=object if name in MONEY_METRICS else "int64",
            index=df.index,
        )
        for name in SUMMED
    }
    return [_with_share(g) for g in audit.group_sums(df, by, figures, MONEY_METRICS)]


def totals(groups: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sums of :data:`SUMMED` over groups, and the share of the sums."""
    out: dict[str, Any] = {name: ZERO if name in MONEY_METRICS else 0 for name in SUMMED}
    with decimal.localcontext(EXACT):
        for group in groups:
            for name in SUMMED:
                out[name] += group[name]
    return _with_share(out)


def summary(rows: Iterable[Mapping[str, Any]], table: PriceTable) -> dict[str, Any]:
    """The totals of :data:`METRICS` over ``rows`` (record dicts), without pandas
    (`recorder demo` says them in its closing lines)."""
    return totals(stream_figures(row, table) for row in rows)
