"""Price table files: the two formats read and written, the shipped table, ``--prices``.

Two formats are read, told apart by the document itself:

- the project's own (``"format": "recorder-prices/1"``, ``recorder/data/prices.json``):
  one entry per model, dated and sourced, prices as decimal strings in USD per
  token (or per million tokens with ``"unit": "1M"``);
- LiteLLM's ``model_prices_and_context_window.json``, as is: its
  ``*_cost_per_token`` fields, ``cache_read_input_token_cost``,
  ``cache_creation_input_token_cost`` and its ``..._above_<N>hr`` lifetimes, the
  long-context ``..._above_<N>k_tokens`` fields, every service-tier suffix
  (``_priority``, ``_flex``, ``_batches``, ``_ultrafast``, ``_fast``, any other),
  ``provider_specific_entry.fast`` (the fast-mode multiplier of a Claude model)
  and ``search_context_cost_per_query``. Its floats are read as the decimals they
  are written as, never through a binary float. Cost fields it does not read
  (audio, images, ...) are listed in ``PriceTable.unread`` so an import can say so.

``--prices FILE`` is an overlay: its models are added to the shipped table or
replace the shipped entry of the same name, whole; every other shipped model
keeps its price (a two-model file does not leave the rest unpriced, and
``recorder reprice`` with it does not wipe their costs).

:func:`load_prices` parses bytes (pure); the only I/O of pricing is
:func:`shipped_prices` and :func:`read_price_file`. The table's types and costs
are ``recorder.core.pricing``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

from recorder.core.model_families import model_base
from recorder.core.pricing import (
    FORMAT,
    RATE_FIELDS,
    LongContext,
    PriceEntry,
    PriceTable,
    PriceTableError,
    Rates,
    Tier,
    overlay,
)

_MILLION = Decimal(1_000_000)
SHIPPED = "prices.json"


def shipped_prices() -> PriceTable:
    """The price table shipped with recorder (``recorder/data/prices.json``)."""
    return load_prices(resources.files("recorder.data").joinpath(SHIPPED).read_bytes())


def load_price_file(path: str | Path | None) -> PriceTable:
    """The shipped table overlaid with the table at ``path`` (the project's format
    or LiteLLM's); the shipped one alone without ``path``.

    Raises :class:`PriceTableError` naming the file when it cannot be read.
    """
    if path is None:
        return shipped_prices()
    return overlay(shipped_prices(), read_price_file(path))


def read_price_file(path: str | Path) -> PriceTable:
    """The table at ``path`` alone (the project's format or LiteLLM's).

    Raises :class:`PriceTableError` naming the file when it cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PriceTableError(f"{path}: {e.strerror or e}") from e
    try:
        return load_prices(data)
    except PriceTableError as e:
        raise PriceTableError(f"{path}: {e}") from e


# -- loading --------------------------------------------------------------------


def load_prices(data: bytes | str, *, version: str | None = None) -> PriceTable:
    """A price table from the bytes of a file in either format.

    ``version`` overrides the table's own (ours: its ``version`` field; LiteLLM's
    has none, so ``litellm-<first 12 hex digits of the file's SHA-256>``).
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        doc = json.loads(raw, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as e:
        raise PriceTableError(f"not a JSON document: {e}") from e
    if not isinstance(doc, dict):
        raise PriceTableError("a price table is a JSON object")
    digest = hashlib.sha256(raw).hexdigest()[:12]
    if doc.get("format") == FORMAT or "models" in doc:
        return _load_own(doc, version, digest)
    return _load_litellm(doc, version or f"litellm-{digest}")


def _decimal(value: Any, where: str) -> Decimal | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise PriceTableError(f"{where}: a price, not {value!r}")
    try:
        result = Decimal(value) if isinstance(value, int | str | Decimal) else None
    except InvalidOperation:
        result = None
    if result is None or not result.is_finite() or result < 0:
        raise PriceTableError(f"{where}: {value!r} is not a price")
    return result


def _own_rates(spec: Mapping[str, Any], scale: Decimal, where: str) -> Rates:
    values: dict[str, Decimal | None] = {}
    for name in RATE_FIELDS:
        price = _decimal(spec.get(name), f"{where}.{name}")
        values[name] = None if price is None else price / scale
    hours = spec.get("cache_write_hours") or {}
    if not isinstance(hours, dict):
        raise PriceTableError(f"{where}.cache_write_hours: an object of hours -> price")
    long_writes = []
    for h, value in hours.items():
        if not str(h).isdigit() or int(h) < 2:
            raise PriceTableError(f"{where}.cache_write_hours: {h!r} is not a number of hours > 1")
        price = _decimal(value, f"{where}.cache_write_hours.{h}")
        if price is not None:
            long_writes.append((int(h), price / scale))
    return Rates(**values, cache_write_hours=tuple(sorted(long_writes)))


def _own_tier(spec: Any, scale: Decimal, where: str) -> Tier:
    if not isinstance(spec, dict):
        raise PriceTableError(f"{where}: an object")
    same_as = spec.get("same_as")
    if same_as is not None and (not isinstance(same_as, str) or not same_as):
        raise PriceTableError(f"{where}.same_as: the name of another tier")
    multiplier = _decimal(spec.get("multiplier"), f"{where}.multiplier")
    rates = _own_rates(spec, scale, where)
    if (same_as is not None) + (multiplier is not None) + (rates != Rates()) > 1:
        raise PriceTableError(f"{where}: rates, a multiplier or same_as, only one of them")
    return Tier(
        rates,
        _own_long(spec.get("long_context"), scale, f"{where}.long_context"),
        multiplier,
        None if same_as is None else same_as.lower(),
    )


def _own_long(spec: Any, scale: Decimal, where: str) -> tuple[LongContext, ...]:
    if spec is None:
        return ()
    if not isinstance(spec, list):
        raise PriceTableError(f"{where}: a list of tiers")
    tiers = []
    for n, item in enumerate(spec):
        here = f"{where}[{n}]"
        if not isinstance(item, dict):
            raise PriceTableError(f"{here}: an object")
        above = item.get("above_input_tokens")
        if isinstance(above, Decimal) and above == above.to_integral_value():
            above = int(above)
        if not isinstance(above, int) or isinstance(above, bool) or above < 0:
            raise PriceTableError(f"{here}.above_input_tokens: a token count")
        tiers.append(LongContext(above, _own_rates(item, scale, here)))
    return tuple(sorted(tiers, key=lambda t: t.above_input_tokens))


def _server_tools(spec: Any, where: str) -> dict[str, Decimal]:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise PriceTableError(f"{where}: an object of USD per request")
    out = {}
    for name, value in spec.items():
        price = _decimal(value, f"{where}.{name}")
        if price is not None:
            out[str(name)] = price
    return out


def _load_own(doc: Mapping[str, Any], version: str | None, digest: str) -> PriceTable:
    unit = doc.get("unit", "token")
    if unit not in ("token", "1M"):
        raise PriceTableError(f"unit: 'token' or '1M', not {unit!r}")
    scale = _MILLION if unit == "1M" else Decimal(1)
    models = doc.get("models")
    if not isinstance(models, dict):
        raise PriceTableError("models: an object of model name -> prices")
    providers = doc.get("providers") or {}
    if not isinstance(providers, dict):
        raise PriceTableError("providers: an object")
    provider_tools = {
        str(name): _server_tools(spec.get("server_tools"), f"providers.{name}.server_tools")
        for name, spec in providers.items()
        if isinstance(spec, dict)
    }
    entries: dict[str, PriceEntry] = {}
    aliases: dict[str, str] = {}
    for raw_key, spec in models.items():
        key = str(raw_key).strip().lower()
        where = f"models.{raw_key}"
        if not isinstance(spec, dict):
            raise PriceTableError(f"{where}: an object")
        rates = _own_rates(spec, scale, where)
        if rates.input is None or rates.output is None:
            raise PriceTableError(f"{where}: input and output prices are required")
        provider = spec.get("provider")
        tiers = {}
        for tier_name, tier_spec in (spec.get("service_tiers") or {}).items():
            here = f"{where}.service_tiers.{tier_name}"
            tiers[str(tier_name).lower()] = _own_tier(tier_spec, scale, here)
        for name, tier in tiers.items():
            if tier.same_as is not None and (
                tier.same_as not in tiers or tiers[tier.same_as].same_as is not None
            ):
                raise PriceTableError(f"{where}.service_tiers.{name}.same_as: no such tier")
        tools = dict(provider_tools.get(str(provider), {}))
        tools.update(_server_tools(spec.get("server_tools"), f"{where}.server_tools"))
        names = spec.get("aliases") or []
        if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
            raise PriceTableError(f"{where}.aliases: a list of model names")
        entry = PriceEntry(
            key=key,
            rates=rates,
            provider=None if provider is None else str(provider),
            as_of=None if spec.get("as_of") is None else str(spec["as_of"]),
            source=None if spec.get("source") is None else str(spec["source"]),
            long_context=_own_long(spec.get("long_context"), scale, f"{where}.long_context"),
            tiers=tiers,
            server_tools=tools,
            aliases=tuple(a.lower() for a in names),
        )
        entries[key] = entry
        for alias in entry.aliases:
            if alias in aliases and aliases[alias] != key:
                raise PriceTableError(f"alias {alias!r} names both {aliases[alias]} and {key}")
            aliases[alias] = key
    for alias in aliases:
        if alias in entries:
            raise PriceTableError(f"alias {alias!r} is also a model of its own")
    table_version = version or str(doc.get("version") or f"prices-{digest}")
    return PriceTable(table_version, entries, aliases, FORMAT)


# LiteLLM: "<base>[_above_<N>hr][_above_<N>k_tokens][_<tier>]", the tier also seen
# before the threshold ("input_cost_per_token_flex_above_272k_tokens")
_LITELLM_FIELDS = {
    "input_cost_per_token": "input",
    "output_cost_per_token": "output",
    "cache_read_input_token_cost": "cache_read",
    "cache_creation_input_token_cost": "cache_write",
    "output_cost_per_reasoning_token": "reasoning",
}
_LITELLM_KEY = re.compile(
    r"^(?P<base>input_cost_per_token|output_cost_per_token|cache_read_input_token_cost"
    r"|cache_creation_input_token_cost|output_cost_per_reasoning_token)"
    r"(?:_above_(?P<hr>\d+)hr)?"
    r"(?:_(?P<tier1>[a-z]+))?"
    r"(?:_above_(?P<k>\d+)k_tokens)?"
    r"(?:_(?P<tier2>[a-z]+))?$"
)
_LITELLM_TIERS = {"batches": "batch"}  # LiteLLM's suffix -> the tier providers report
# not tiers: LiteLLM words that end a cost field name for another reason
_NOT_TIERS = frozenset({"above", "tokens", "token", "hit", "miss", "character", "second"})
_LITELLM_MODES = frozenset({"chat", "responses", "completion"})
# OpenAI renamed Priority processing to Fast mode (2026-07-30): either name in the
# request, and the response reports either, at the same price
_OPENAI_FAST = "priority"


def _litellm_field(name: str) -> tuple[str, int, int, str] | None:
    """``(rate field, threshold tokens, lifetime hours, tier)`` of a LiteLLM cost key."""
    match = _LITELLM_KEY.match(name)
    if match is None:
        return None
    tiers = [t for t in (match["tier1"], match["tier2"]) if t]
    if len(tiers) > 1 or any(t in _NOT_TIERS for t in tiers):
        return None
    hours = int(match["hr"]) if match["hr"] else 0
    if hours and match["base"] != "cache_creation_input_token_cost":
        return None
    field_name = _LITELLM_FIELDS[match["base"]]
    if hours == 1:
        field_name, hours = "cache_write_1h", 0
    tier = _LITELLM_TIERS.get(tiers[0], tiers[0]) if tiers else ""
    threshold = int(match["k"]) * 1000 if match["k"] else 0
    return field_name, threshold, hours, tier


def _rates(values: Mapping[str, Decimal], hours: Mapping[int, Decimal]) -> Rates:
    rates: dict[str, Decimal | None] = dict(values)
    return Rates(**rates, cache_write_hours=tuple(sorted(hours.items())))


def _load_litellm(doc: Mapping[str, Any], version: str) -> PriceTable:
    entries: dict[str, PriceEntry] = {}
    unread: dict[str, int] = {}
    for raw_key, spec in doc.items():
        if raw_key == "sample_spec" or not isinstance(spec, dict):
            continue
        mode = spec.get("mode")
        if mode is not None and mode not in _LITELLM_MODES:
            continue
        entry = _litellm_entry(str(raw_key), spec, unread)
        if entry is not None:
            entries[entry.key] = entry
    # "anthropic/claude-…", "azure/gpt-4o": the bare name, when no entry has it,
    # points at the provider's own entry first, then any other.
    aliases: dict[str, str] = {}
    first = ("openai", "anthropic", "text-completion-openai")
    ordered = sorted(entries.values(), key=lambda e: (e.provider not in first, e.key))
    for entry in ordered:
        bare = model_base(entry.key)
        if bare != entry.key and bare not in entries and bare not in aliases:
            aliases[bare] = entry.key
    return PriceTable(version, entries, aliases, "litellm", unread)


def _litellm_entry(
    where: str, spec: Mapping[str, Any], unread: dict[str, int]
) -> PriceEntry | None:
    """The entry of one LiteLLM model (None without an input and an output price);
    cost fields it does not read are counted in ``unread``."""
    # (threshold or 0, tier or "") -> field -> price; and -> hours -> price
    groups: dict[tuple[int, str], dict[str, Decimal]] = {}
    long_writes: dict[tuple[int, str], dict[int, Decimal]] = {}
    for name, value in spec.items():
        parsed = _litellm_field(name)
        if parsed is None:
            if "cost" in name and name not in _LITELLM_OTHER and value is not None:
                unread[name] = unread.get(name, 0) + 1
            continue
        price = _decimal(value, f"{where}.{name}")
        if price is None:
            continue
        field_name, threshold, hours, tier = parsed
        if hours:
            long_writes.setdefault((threshold, tier), {})[hours] = price
        else:
            groups.setdefault((threshold, tier), {})[field_name] = price
    base = groups.get((0, ""), {})
    if "input" not in base or "output" not in base:
        return None
    provider = spec.get("litellm_provider")
    key = where.strip().lower()
    return PriceEntry(
        key=key,
        rates=_rates(base, long_writes.get((0, ""), {})),
        provider=None if provider is None else str(provider),
        as_of=None,
        source=None if spec.get("source") is None else str(spec["source"]),
        long_context=_litellm_long(groups, ""),
        tiers=_litellm_tiers(groups, long_writes, spec, where),
        server_tools=_litellm_tools(spec, where),
    )


def _litellm_tiers(
    groups: Mapping[tuple[int, str], Mapping[str, Decimal]],
    long_writes: Mapping[tuple[int, str], Mapping[int, Decimal]],
    spec: Mapping[str, Any],
    where: str,
) -> dict[str, Tier]:
    """A LiteLLM model's service tiers: its tiered cost fields, and fast mode."""
    names = {tier for (_, tier) in (*groups, *long_writes) if tier}
    tiers = {
        tier: Tier(
            _rates(groups.get((0, tier), {}), long_writes.get((0, tier), {})),
            _litellm_long(groups, tier),
        )
        for tier in names
    }
    provider = spec.get("litellm_provider")
    if provider in ("openai", "azure") and _OPENAI_FAST in tiers and "fast" not in tiers:
        tiers["fast"] = Tier(Rates(), same_as=_OPENAI_FAST)
    extra = spec.get("provider_specific_entry")
    fast = extra.get("fast") if isinstance(extra, dict) else None
    if fast is not None and "fast" not in tiers:
        multiplier = _decimal(fast, f"{where}.provider_specific_entry.fast")
        if multiplier is not None:
            tiers["fast"] = Tier(Rates(), multiplier=multiplier)
    return tiers


def _litellm_tools(spec: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    """A LiteLLM model's prices per server-tool call."""
    tools: dict[str, Decimal] = {}
    search = spec.get("search_context_cost_per_query")
    if isinstance(search, dict):
        medium = search.get("search_context_size_medium")
        price = _decimal(medium, f"{where}.search_context_cost_per_query")
        if price is not None:
            tools["web_search"] = price
    price = _decimal(
        spec.get("file_search_cost_per_1k_calls"), f"{where}.file_search_cost_per_1k_calls"
    )
    if price is not None:
        tools["file_search"] = price / 1000
    price = _decimal(
        spec.get("code_interpreter_cost_per_session"), f"{where}.code_interpreter_cost_per_session"
    )
    if price is not None:
        tools["code_interpreter"] = price
    return tools


# cost fields read elsewhere in the loader (server tools)
_LITELLM_OTHER = frozenset(
    {
        "search_context_cost_per_query",
        "file_search_cost_per_1k_calls",
        "code_interpreter_cost_per_session",
    }
)


def _litellm_long(
    groups: Mapping[tuple[int, str], Mapping[str, Decimal]], tier: str
) -> tuple[LongContext, ...]:
    return tuple(
        LongContext(threshold, _rates(values, {}))
        for (threshold, name), values in sorted(groups.items())
        if threshold and name == tier
    )


# -- writing ----------------------------------------------------------------------


def _dump_rates(rates: Rates) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: f"{value:f}" for name in RATE_FIELDS if (value := getattr(rates, name)) is not None
    }
    if rates.cache_write_hours:
        out["cache_write_hours"] = {str(h): f"{r:f}" for h, r in rates.cache_write_hours}
    return out


def _dump_long(long_context: tuple[LongContext, ...]) -> list[dict[str, Any]]:
    return [
        {"above_input_tokens": lc.above_input_tokens, **_dump_rates(lc.rates)}
        for lc in long_context
    ]


def dump_entry(entry: PriceEntry) -> dict[str, Any]:
    """One entry in the project's format (USD per token, decimal strings)."""
    out: dict[str, Any] = {}
    if entry.provider is not None:
        out["provider"] = entry.provider
    if entry.as_of is not None:
        out["as_of"] = entry.as_of
    if entry.source is not None:
        out["source"] = entry.source
    out.update(_dump_rates(entry.rates))
    if entry.long_context:
        out["long_context"] = _dump_long(entry.long_context)
    tiers: dict[str, Any] = {}
    for name, tier in sorted(entry.tiers.items()):
        if tier.same_as is not None:
            tiers[name] = {"same_as": tier.same_as}
        elif tier.multiplier is not None:
            tiers[name] = {"multiplier": f"{tier.multiplier:f}"}
        else:
            spec = _dump_rates(tier.rates)
            if tier.long_context:
                spec["long_context"] = _dump_long(tier.long_context)
            tiers[name] = spec
    if tiers:
        out["service_tiers"] = tiers
    if entry.server_tools:
        out["server_tools"] = {k: f"{v:f}" for k, v in sorted(entry.server_tools.items())}
    if entry.aliases:
        out["aliases"] = list(entry.aliases)
    return out


def dump_prices(
    entries: Mapping[str, PriceEntry], version: str, note: str | None = None
) -> dict[str, Any]:
    """A table in the project's format (``unit: token``), loadable by :func:`load_prices`."""
    doc: dict[str, Any] = {"format": FORMAT, "version": version, "currency": "USD", "unit": "token"}
    if note:
        doc["note"] = note
    doc["models"] = {key: dump_entry(entries[key]) for key in sorted(entries)}
    return doc
