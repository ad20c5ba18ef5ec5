"""The cost of a record under a price table: its model's entry, or each of its
usage parts at its own model's (``usage_parts``: Anthropic's iterations).

The rates and the cost of a set of token figures are ``recorder.core.pricing``;
this module decides which entry prices which figures of a record.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from recorder.core.model_families import bedrock_model_id, model_base
from recorder.core.pricing import (
    BEDROCK,
    QUANTUM,
    Cost,
    Modality,
    PriceEntry,
    PriceTable,
    Unpriced,
    cost_of,
)
from recorder.core.record import StreamRecord

_ZERO = Decimal(0)


def own_entry(record: StreamRecord, table: PriceTable) -> PriceEntry | None:
    """The entry of the record's own model: the serving one's first (a dated
    snapshot), the requested one's if the table lacks it; the other way round on
    Amazon Bedrock, whose request's model id carries the price's profile and region."""
    first, second = record.response_model, record.model
    if record.provider == BEDROCK:
        first, second = second, first
    return table.resolve(first) or table.resolve(second)


def price_record(record: StreamRecord, table: PriceTable) -> Cost | None:
    """The cost of a record's usage, or None when it cannot be priced (no usage,
    no price for its model, no rate for its service tier)."""
    try:
        return cost_or_reason(record, table)
    except Unpriced:
        return None


def cost_or_reason(record: StreamRecord, table: PriceTable) -> Cost | None:
    """The cost of a record's usage; None without usage; :class:`Unpriced` (the
    reason) when there is usage but no price for it.

    The model that served the request (``response_model``, e.g. a dated
    snapshot) is priced first, the requested one if the table lacks it; but
    Amazon Bedrock's model id (the request's) names the provider, profile and
    region the price depends on, where its answer names only the model.
    """
    if record.input_tokens is None and record.output_tokens is None:
        return None
    if record.usage_parts:
        _, cost, reason = price_parts(record, table)
        if reason is not None:
            raise Unpriced(reason)
        return cost
    entry = own_entry(record, table)
    if entry is None:
        model = record.response_model or record.model
        raise Unpriced(f"no price for model {model!r}" if model else "no model named")
    return cost_of(
        entry,
        table.origin(entry.key),
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cache_read_tokens=record.cache_read_tokens,
        cache_write_tokens=record.cache_write_tokens,
        cache_write_1h_tokens=record.cache_write_1h_tokens,
        reasoning_tokens=record.reasoning_tokens,
        service_tier=record.service_tier,
        server_tool_requests=record.server_tool_requests,
        modality=Modality.of(record),
    )


def price_parts(
    record: StreamRecord, table: PriceTable
) -> tuple[list[dict[str, Any]], Cost | None, str | None]:
    """A record of several priced parts (``usage_parts``) priced part by part: new
    part objects with their ``cost_usd``, ``price_version`` and
    ``unpriced_reason`` (the record's are left as they are), the record's cost,
    and the first part's reason when any part has no price (the cost is then
    None: a partial sum is not the cost).

    Each part at its own model's rates (the record's when it names none), under
    the record's service tier; the provider-side tool requests once, with the
    first part of the record's own model. The cost's ``price_version`` is that of
    the record's own model's part."""
    own = own_entry(record, table)
    tools: Mapping[str, int] | None = record.server_tool_requests
    total = _ZERO
    versions: list[str] = []
    reason: str | None = None
    parts = []
    for given in record.usage_parts or ():
        part = {**given, "cost_usd": None, "price_version": None, "unpriced_reason": None}
        parts.append(part)
        named = part.get("model")
        entry = part_entry(record, table, named) if named else own
        if entry is None:
            model = named or record.response_model or record.model
            part["unpriced_reason"] = f"no price for model {model!r}" if model else "no model named"
            reason = reason or part["unpriced_reason"]
            continue
        mine = not named or entry is own
        try:
            cost = cost_of(
                entry,
                table.origin(entry.key),
                input_tokens=_count(part.get("input_tokens")),
                output_tokens=_count(part.get("output_tokens")),
                cache_read_tokens=_count(part.get("cache_read_tokens")),
                cache_write_tokens=_count(part.get("cache_write_tokens")),
                cache_write_1h_tokens=_count(part.get("cache_write_1h_tokens")),
                reasoning_tokens=_count(part.get("reasoning_tokens")),
                service_tier=record.service_tier,
                server_tool_requests=tools if mine else None,
            )
        except Unpriced as e:
            part["unpriced_reason"] = str(e)
            reason = reason or str(e)
            continue
        if mine:
            tools = None  # billed once
            versions.insert(0, cost.price_version)
        else:
            versions.append(cost.price_version)
        part["cost_usd"], part["price_version"] = cost.usd, cost.price_version
        total += Decimal(cost.usd)
    if reason is not None:
        return parts, None, reason
    usd = total.quantize(QUANTUM, rounding=ROUND_HALF_EVEN)
    return parts, Cost(f"{usd:.12f}", versions[0]), None


def part_entry(record: StreamRecord, table: PriceTable, named: str) -> PriceEntry | None:
    """The entry of a part that names its own model. On Amazon Bedrock that is
    Bedrock's entry for the model in the request's inference profile (an advisor
    iteration of another Claude model is billed at Bedrock's rate for it, in the
    same region), found among the table's Bedrock model ids; any other provider's
    part, or a model the table has no Bedrock id for, resolves by its name as the
    record's own model would."""
    if record.provider == BEDROCK and record.model:
        found = _bedrock_entry(table, bedrock_model_id(record.model.strip().lower()), named)
        if found is not None:
            return found
    return table.resolve(named)


_VENDOR = "anthropic."  # only Claude's responses carry parts priced by model


def _bedrock_entry(table: PriceTable, request_id: str, named: str) -> PriceEntry | None:
    at = request_id.find(_VENDOR)
    if at < 0:
        return None
    prefix = request_id[: at + len(_VENDOR)]  # "us.anthropic.", "anthropic."
    base = model_base(named)
    for alias, key in table.aliases.items():
        if alias.startswith(prefix) and model_base(alias[len(prefix) :]) == base:
            entry = table.entries.get(key)
            if entry is not None and entry.provider == BEDROCK:
                return entry
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
