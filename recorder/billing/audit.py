"""The billing audit: usage and cost of recorded streams, grouped (`recorder audit`).

One row per stream goes in, one row per group comes out, and every figure of a
group is a sum or a count over its streams, so sums over groups equal sums over
streams whatever the grouping (the tests check it for every combination of
keys). The figures, as docs/billing.md ("Audit") defines them:

- ``input_tokens`` ... ``reasoning_tokens``, ``cost_usd``: every stream's
  figure, reported or estimated; an unknown figure adds nothing.
- ``estimated_input_tokens`` / ``estimated_output_tokens``: the input (output)
  tokens of streams whose ``input_source`` (``output_source``) is ``estimated``,
  as ``llm_tokens_total{source="estimated"}`` counts them.
- ``estimated_cost_usd``: the cost of streams whose ``usage_source`` is
  ``estimated`` or ``mixed``: any cost not wholly from reported usage, the rule
  of ``llm_cost_usd_total{source="estimated"}``.
- ``interrupted_requests`` / ``interrupted_cost_usd``: streams with
  ``interrupted`` set (error, disconnects, truncated), and their cost.
- ``unpriced_requests``: usage is known (``usage_source`` is not ``none``) but
  no price was found (``price_version`` is null): cost the audit cannot show.

A stream of several priced parts (``usage_parts``: Anthropic's compaction,
advisor and fallback iterations) is one row per part before grouping (:func:`by_part`):
each part's tokens and cost under the model it ran on (an Opus advisor inside a
Sonnet request is Opus's), the request counted once, with the part of its own
model. The parts' figures sum to the stream's, so sums over groups still equal
sums over streams; a stream whose cost is unknown (a part unpriced) adds no cost
in any of its parts.

Money stays exact: ``cost_usd`` is a ``Decimal`` per stream (the store gives one
on both backends; SQLite keeps it as text), held in an object column and summed
in a decimal context wide enough that no sum is ever rounded. Neither SQL ``SUM``
nor a float column ever touches it.

Reading the store is :func:`recorder.store.audit_sql.read_frame`; this module
takes a DataFrame (built by :func:`frame` from any rows) and does no I/O.
pandas is imported on first use, not with the module: every ``recorder``
command imports this one through the command line, and pandas alone takes
about 0.4 s to import.
"""

from __future__ import annotations

import decimal
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from recorder.core import money
from recorder.core.errors import UsageError
from recorder.core.money import EXACT, ZERO
from recorder.core.record_time import parse_started_at

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]

GROUP_KEYS = (
    "key",
    "project",
    "model",
    "endpoint",
    "outcome",
    "day",
    "hour",
    "transport",
    "upstream",
    "user",
    "session",
)
KEY_COLUMNS = {
    "key": "api_key_id",
    "project": "project",
    "model": "model",
    "endpoint": "endpoint",
    "outcome": "outcome",
    "transport": "transport",
    "upstream": "upstream",
    "user": "user_id",
    "session": "session_id",
}
# ``tag:NAME`` groups by the value of the request's tag NAME (issue 32): a key of
# its own per name, beside GROUP_KEYS
TAG_PREFIX = "tag:"
TAGS_COLUMN = "tags"
TOKEN_FIGURES = (
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
METRICS = (
    "requests",
    *TOKEN_FIGURES,
    "cost_usd",
    "estimated_input_tokens",
    "estimated_output_tokens",
    "estimated_cost_usd",
    "interrupted_requests",
    "interrupted_cost_usd",
    "unpriced_requests",
)
MONEY_METRICS = frozenset({"cost_usd", "estimated_cost_usd", "interrupted_cost_usd"})
# What the audit reads of a stream.
COLUMNS = (
    "id",
    "started_at",
    "api_key_id",
    "project",
    "model",
    "endpoint",
    "outcome",
    "interrupted",
    *TOKEN_FIGURES,
    "input_source",
    "output_source",
    "usage_source",
    "cost_usd",
    "price_version",
    "transport",
    "upstream",
)
# Columns read when the store has them (a row without one reads as null).
PARTS_COLUMN = "usage_parts"
OPTIONAL_COLUMNS = (TAGS_COLUMN, "user_id", "session_id", PARTS_COLUMN)
# which row of a stream cut into parts counts the request (its own model's part)
_REQUEST = "_request"
DEFAULT_BY = ("day", "model")
SHARE_PLACES = Decimal("0.000001")


def _pandas() -> Any:
    import pandas

    return pandas


class AuditError(UsageError, ValueError):
    """A grouping or filter the audit cannot do (printed to the user as is)."""


def parse_by(text: str | None) -> tuple[str, ...]:
    """``--by`` as group keys: comma-separated names from :data:`GROUP_KEYS` and
    ``tag:NAME`` (NAME as written: tags are told apart by case); ``none`` (or an
    empty string) for one group of everything."""
    if text is None:
        return DEFAULT_BY
    names = [_key_name(n.strip()) for n in text.split(",") if n.strip()]
    if names in ([], ["none"]):
        return ()
    bad = [n for n in names if not is_group_key(n)]
    if bad:
        raise AuditError(
            f"cannot group by {bad[0]!r}: use {', '.join(GROUP_KEYS)}, {TAG_PREFIX}NAME or none"
        )
    if len(set(names)) != len(names):
        raise AuditError(f"--by names a key twice: {text!r}")
    return tuple(names)


def _key_name(text: str) -> str:
    lower = text.lower()
    return TAG_PREFIX + text[len(TAG_PREFIX) :] if lower.startswith(TAG_PREFIX) else lower


def is_group_key(name: str) -> bool:
    """Whether ``--by`` may name ``name``: one of :data:`GROUP_KEYS`, or
    ``tag:NAME`` with a NAME."""
    return name in GROUP_KEYS or (name.startswith(TAG_PREFIX) and len(name) > len(TAG_PREFIX))


def tag_value(tags: Any, name: str) -> str | None:
    """The value of tag ``name`` in a row's ``tags`` (a mapping, or its JSON text);
    None when the row has no such tag."""
    if isinstance(tags, str):
        try:
            tags = json.loads(tags)
        except ValueError:
            return None
    if not isinstance(tags, Mapping):
        return None
    value = tags.get(name)
    return None if value is None else str(value)


def cost_value(value: Any) -> Decimal:
    """A stream's ``cost_usd`` (a Decimal or a decimal string) as a Decimal; 0
    when unknown."""
    if value is None or (isinstance(value, float) and value != value):
        return ZERO
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):
        return Decimal(value)
    raise TypeError(f"cost_usd must be a Decimal or a decimal string, not {type(value).__name__}")


def _started(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    when = parse_started_at(value)
    if when is None:
        raise ValueError("a stream without started_at")
    return when


def frame(
    rows: Iterable[Mapping[Any, Any]], columns: Sequence[str] = (*COLUMNS, *OPTIONAL_COLUMNS)
) -> pd.DataFrame:
    """The audit's DataFrame of streams: one row per mapping (a store row, or
    ``StreamRecord.to_dict()``), with ``columns`` (:data:`COLUMNS` and
    :data:`OPTIONAL_COLUMNS` by default; a mapping without one gives null).

    Token counts are nullable integers, ``cost_usd`` Decimals (null: unpriced),
    ``started_at`` aware UTC timestamps.
    """
    pd = _pandas()
    columns = tuple(dict.fromkeys(columns))  # a column named twice is read once
    data: dict[str, list[Any]] = {name: [] for name in columns}
    for row in rows:
        for name in columns:
            data[name].append(row.get(name))
    out = pd.DataFrame(index=pd.RangeIndex(len(data["id"])))
    for name in columns:
        values = data[name]
        if name == "started_at":
            out[name] = pd.to_datetime([_started(v) for v in values], utc=True)
        elif name in TOKEN_FIGURES:
            out[name] = pd.array(values, dtype="Int64")
        elif name == "interrupted":
            out[name] = pd.array([bool(v) for v in values], dtype=bool)
        elif name == "cost_usd":
            out[name] = pd.Series(
                [None if v is None else cost_value(v) for v in values],
                dtype=object,
                index=out.index,
            )
        else:
            out[name] = pd.Series(values, dtype=object, index=out.index)
    return out


def key_series(df: pd.DataFrame, key: str) -> pd.Series:
    """Each stream's value of the group key ``key`` (None: it has none)."""
    if key.startswith(TAG_PREFIX):
        name = key[len(TAG_PREFIX) :]
        tags = df[TAGS_COLUMN] if TAGS_COLUMN in df else [None] * len(df)
        return _pandas().Series([tag_value(t, name) for t in tags], dtype=object, index=df.index)
    if key == "day":
        return df["started_at"].dt.floor("D")
    if key == "hour":
        return df["started_at"].dt.floor("h")
    return df[KEY_COLUMNS[key]].astype(object).where(df[KEY_COLUMNS[key]].notna(), None)


def key_value(key: str, value: Any) -> Any:
    """A group's key as the audit prints it (None: unknown)."""
    pd = _pandas()
    if value is None or value is pd.NaT or (isinstance(value, float) and value != value):
        return None
    if key == "day":
        return pd.Timestamp(value).strftime("%Y-%m-%d")
    if key == "hour":
        return pd.Timestamp(value).strftime("%Y-%m-%dT%H:00Z")
    return str(value)


def _sort_key(values: tuple[Any, ...]) -> tuple[tuple[bool, Any], ...]:
    return tuple((v is None, "" if v is None else v) for v in values)


def aggregate(df: pd.DataFrame, by: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per group: the group's keys (in ``by``'s order), then
    :data:`METRICS`; money as exact ``Decimal``. Groups are ordered by their keys
    (unknown last). No streams, no groups."""
    check_by(by)
    if df.empty:
        return []
    pd = _pandas()
    df = by_part(df)
    request = df[_REQUEST].astype(bool) if _REQUEST in df else pd.Series(True, index=df.index)
    figures: dict[str, Any] = {"requests": request.astype("int64")}
    for name in TOKEN_FIGURES:
        figures[name] = df[name].fillna(0).astype("int64")
    est_in = df["input_source"] == "estimated"
    est_out = df["output_source"] == "estimated"
    cost = costs(df)
    estimated = df["usage_source"].isin(("estimated", "mixed"))
    interrupted = df["interrupted"].astype(bool)
    figures["cost_usd"] = cost
    figures["estimated_input_tokens"] = (
        df["input_tokens"].where(est_in, 0).fillna(0).astype("int64")
    )
    figures["estimated_output_tokens"] = (
        df["output_tokens"].where(est_out, 0).fillna(0).astype("int64")
    )
    figures["estimated_cost_usd"] = money_where(cost, estimated)
    figures["interrupted_requests"] = (interrupted & request).astype("int64")
    figures["interrupted_cost_usd"] = money_where(cost, interrupted)
    figures["unpriced_requests"] = (
        df["price_version"].isna() & (df["usage_source"] != "none") & request
    ).astype("int64")
    return group_sums(df, by, {name: figures[name] for name in METRICS}, MONEY_METRICS)


def parts_of(value: Any) -> list[dict[str, Any]]:
    """A row's ``usage_parts`` (a list, or its JSON text) as a list; [] for none."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    return [p for p in value if isinstance(p, dict)]


def by_part(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with each stream of several priced parts as one row per part (see
    the module's docstring), and a ``_request`` column saying which row counts
    the stream's request; ``df`` itself when no stream has parts."""
    if PARTS_COLUMN not in df or not any(parts_of(v) for v in df[PARTS_COLUMN]):
        return df
    pd = _pandas()
    rows: list[dict[str, Any]] = []
    for record in df.to_dict("records"):
        parts = parts_of(record.get(PARTS_COLUMN))
        if not parts:
            rows.append({**record, _REQUEST: True})
            continue
        own = next((i for i, p in enumerate(parts) if not p.get("model")), 0)
        priced = record.get("cost_usd") is not None
        for i, part in enumerate(parts):
            row = {**record, _REQUEST: i == own}
            if part.get("model"):
                row["model"] = part["model"]
            for name in TOKEN_FIGURES:
                row[name] = part.get(name)
            row["cost_usd"] = cost_value(part.get("cost_usd")) if priced else None
            rows.append(row)
    out = pd.DataFrame(rows, columns=[*df.columns, _REQUEST])
    for name in TOKEN_FIGURES:
        out[name] = pd.array(out[name].tolist(), dtype="Int64")
    out["cost_usd"] = pd.Series(out["cost_usd"].tolist(), dtype=object, index=out.index)
    return out


def check_by(by: Sequence[str]) -> None:
    """Refuse a group key ``--by`` may not name."""
    for key in by:
        if not is_group_key(key):
            raise AuditError(f"cannot group by {key!r}")


def costs(df: pd.DataFrame) -> pd.Series:
    """Each stream's ``cost_usd`` as a ``Decimal`` (0 when unpriced)."""
    return _pandas().Series([cost_value(v) for v in df["cost_usd"]], dtype=object, index=df.index)


def money_where(money: pd.Series, where: Iterable[Any]) -> pd.Series:
    """``money`` where ``where`` holds, 0 elsewhere (an object column of Decimals)."""
    return _pandas().Series(
        [m if w else ZERO for m, w in zip(money, where, strict=True)],
        dtype=object,
        index=money.index,
    )


def group_sums(
    df: pd.DataFrame, by: Sequence[str], figures: Mapping[str, Any], money: frozenset[str]
) -> list[dict[str, Any]]:
    """Each figure (a Series over ``df``'s streams, in the order given) summed per
    group of ``by``: one dict per group, its keys then the figures, the ``money``
    ones exact ``Decimal``s, the rest ints; ordered by the keys (unknown last)."""
    pd = _pandas()
    names = list(by) or ["_all"]
    work = pd.DataFrame(index=df.index)
    if by:
        for key in by:
            work[key] = key_series(df, key)
    else:
        work["_all"] = 0
    for name, series in figures.items():
        work[name] = series
    with decimal.localcontext(EXACT):
        sums = work.groupby(names, dropna=False, sort=False).sum()[list(figures)]
    groups: list[dict[str, Any]] = []
    for index, values in zip(sums.index, sums.itertuples(index=False), strict=True):
        keys = index if isinstance(index, tuple) else (index,)
        group: dict[str, Any] = {
            key: key_value(key, value) for key, value in zip(by, keys, strict=False)
        }
        for name, value in zip(figures, values, strict=True):
            group[name] = cost_value(value) if name in money else int(value)
        groups.append(group)
    groups.sort(key=lambda g: _sort_key(tuple(g[k] for k in by)))
    return groups


def totals(groups: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The sums of :data:`METRICS` over groups (the totals row of `recorder audit`)."""
    out: dict[str, Any] = {name: ZERO if name in MONEY_METRICS else 0 for name in METRICS}
    with decimal.localcontext(EXACT):
        for group in groups:
            for name in METRICS:
                out[name] += group[name]
    return out


def as_document(groups: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The JSON shape: money as decimal strings."""
    return [
        {k: money.exact(v) if k in MONEY_METRICS else v for k, v in group.items()}
        for group in groups
    ]


def share(part: Decimal, whole: Decimal) -> Decimal | None:
    """``part / whole`` to six places (half-even): the shares the billing commands
    print (of spend, of a budget); None when ``whole`` is 0."""
    if not whole:
        return None
    with decimal.localcontext(decimal.Context(prec=80)):
        return (part / whole).quantize(SHARE_PLACES, rounding=decimal.ROUND_HALF_EVEN)


def key_combinations() -> Iterable[tuple[str, ...]]:
    """Every ``--by`` the audit supports that names a key at most once (order aside)."""
    for n in range(len(GROUP_KEYS) + 1):
        yield from itertools.combinations(GROUP_KEYS, n)
