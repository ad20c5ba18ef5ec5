"""Price tables and exact costs (Decimal, never float).

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

Parsing is pure (bytes in): the file is read by ``recorder.core.price_files``.

A model name resolves to an entry by: the exact key; an alias the table
declares; the name without provider prefix, snapshot date or ``-latest``
(``gpt-4o-2024-08-06`` -> ``gpt-4o``, unless the snapshot has an entry of its
own, as ``gpt-4o-2024-05-13`` does). Nothing fuzzier: ``gpt-4o-mini`` must
never be priced as ``gpt-4o``.

The cost of a record: uncached input, cache reads, cache writes by lifetime
(``cache_write`` for the default five minutes and for writes whose lifetime is
unknown, ``cache_write_1h`` for one hour), output, reasoning where the entry
prices it apart from output, and per-request provider-side tools (web search).
When the input exceeds a long-context threshold the whole request is priced at
that tier, as both providers bill it.

Service tiers: ``default``, ``standard``, ``auto`` (and no tier at all) are the
standard rates. Any other tier (``priority``, ``fast``, ``ultrafast``, ``flex``,
``batch``, ...) is priced only by a rate the entry has for it: its own rates
over the standard ones, a ``multiplier`` of the standard rates (Claude's fast
mode), or ``same_as`` another tier (OpenAI's ``fast`` is its ``priority``). A
tier the entry has no rate for is never priced at the standard rate: the cost
is unknown and :class:`Unpriced` says why. The result is a decimal string with
12 fractional digits, and ``price_version`` is
``<table version>:<entry key>@<entry date>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Any

from recorder.core.errors import RecorderError, UsageError
from recorder.core.estimate import model_base
from recorder.core.record import StreamRecord

FORMAT = "recorder-prices/1"
QUANTUM = Decimal("0.000000000001")  # 12 fractional digits
_MILLION = Decimal(1_000_000)
_RATE_FIELDS = ("input", "output", "cache_read", "cache_write", "cache_write_1h", "reasoning")


# the tiers that are the standard rates ("auto": the provider's default, which a
# cut Responses stream still echoes from response.created)
STANDARD_TIERS = frozenset({"default", "standard", "auto", "standard_only"})


class PriceTableError(UsageError, ValueError):
    """A price table that cannot be read; the message names the entry and field."""


class Unpriced(RecorderError, ValueError):
    """A request the table cannot price; the message is the record's ``unpriced_reason``."""


def unpriced_kind(reason: str | None) -> str | None:
    """``model`` (no price for the model) or ``tier`` (none for its service tier)
    of a record's ``unpriced_reason``; None when it has none."""
    if not reason:
        return None
    return "model" if reason.startswith(("no price for model", "no model named")) else "tier"


@dataclass(frozen=True, slots=True)
class Rates:
    """USD per token; None where the table says nothing (then a fallback applies)."""

    input: Decimal | None = None
    output: Decimal | None = None
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None  # the default lifetime (Anthropic: 5 minutes)
    cache_write_1h: Decimal | None = None
    reasoning: Decimal | None = None  # only where reasoning is priced apart from output
    # cache writes of lifetimes beyond one hour, by hours (LiteLLM's ``_above_<N>hr``):
    # kept and shown; a record has no counts for them yet (docs/billing.md)
    cache_write_hours: tuple[tuple[int, Decimal], ...] = ()

    def over(self, base: Rates) -> Rates:
        """These rates, with ``base``'s wherever these say nothing."""
        values: dict[str, Decimal | None] = {
            name: getattr(self, name) if getattr(self, name) is not None else getattr(base, name)
            for name in _RATE_FIELDS
        }
        return Rates(**values, cache_write_hours=self.cache_write_hours or base.cache_write_hours)

    def times(self, factor: Decimal) -> Rates:
        """Every rate multiplied by ``factor``."""
        values: dict[str, Decimal | None] = {
            name: None if (v := getattr(self, name)) is None else v * factor
            for name in _RATE_FIELDS
        }
        hours = tuple((h, r * factor) for h, r in self.cache_write_hours)
        return Rates(**values, cache_write_hours=hours)


@dataclass(frozen=True, slots=True)
class LongContext:
    """Rates for a whole request whose input exceeds ``above_input_tokens``."""

    above_input_tokens: int
    rates: Rates


@dataclass(frozen=True, slots=True)
class Tier:
    """A service tier's rates (``priority``, ``flex``, ``batch``, ``ultrafast``, ...).

    ``multiplier``: the tier costs the standard rates (long context included)
    times this, and ``rates`` is empty. ``same_as``: the tier is another tier of
    the same entry under a second name.
    """

    rates: Rates
    long_context: tuple[LongContext, ...] = ()
    multiplier: Decimal | None = None
    same_as: str | None = None


@dataclass(frozen=True, slots=True)
class PriceEntry:
    """One model's prices."""

    key: str
    rates: Rates
    provider: str | None = None
    as_of: str | None = None
    source: str | None = None
    long_context: tuple[LongContext, ...] = ()
    tiers: Mapping[str, Tier] = field(default_factory=dict)
    server_tools: Mapping[str, Decimal] = field(default_factory=dict)  # USD per request
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PriceTable:
    """A loaded price table."""

    version: str
    entries: Mapping[str, PriceEntry]
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> entry key
    source_format: str = FORMAT
    # LiteLLM only: cost fields this reader does not use -> how many entries had one
    unread: Mapping[str, int] = field(default_factory=dict)
    # an overlay's: entry key -> version of the table the entry came from (the
    # version a cost names); keys not here are the table's own version's
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        """The version of the table entry ``key`` came from."""
        return self.origins.get(key, self.version)

    def resolve(self, model: str | None) -> PriceEntry | None:
        """The entry pricing ``model``, or None (see the module docstring)."""
        if not model:
            return None
        name = model.strip().lower()
        for candidate in (name, model_base(name)):
            entry = self.entries.get(candidate)
            if entry is None and candidate in self.aliases:
                entry = self.entries.get(self.aliases[candidate])
            if entry is not None:
                return entry
        return None


@dataclass(frozen=True, slots=True)
class Cost:
    """A computed cost and the entry it came from."""

    usd: str  # 12 fractional digits
    price_version: str
    tier: str | None = None  # the service tier whose rates were used
    long_context: bool = False


def overlay(base: PriceTable, top: PriceTable) -> PriceTable:
    """``base`` with ``top``'s entries added or replacing base's, whole entry by entry.

    The overlay's version names both (``<base>+<top>``); a cost names the
    version of the table its entry came from (``price_version``), so a record
    priced from the overlay file says so. An alias of ``top`` wins over the same
    alias in ``base``; a model ``top`` adds hides a ``base`` alias of that name.
    """
    entries = dict(base.entries)
    entries.update(top.entries)
    aliases = {a: k for a, k in base.aliases.items() if a not in top.entries}
    aliases.update(top.aliases)
    for key in top.entries:
        aliases.pop(key, None)
    origins = {key: base.origin(key) for key in base.entries}
    origins.update({key: top.origin(key) for key in top.entries})
    version = f"{base.version}+{top.version}"
    return PriceTable(version, entries, aliases, base.source_format, top.unread, origins)


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
    for name in _RATE_FIELDS:
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
        key = str(raw_key).strip().lower()
        where = str(raw_key)
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
            continue
        rates = _rates(base, long_writes.get((0, ""), {}))
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
        tools: dict[str, Decimal] = {}
        search = spec.get("search_context_cost_per_query")
        if isinstance(search, dict):
            medium = search.get("search_context_size_medium")
            if medium is not None:
                price = _decimal(medium, f"{where}.search_context_cost_per_query")
                if price is not None:
                    tools["web_search"] = price
        per_1k = spec.get("file_search_cost_per_1k_calls")
        if per_1k is not None:
            price = _decimal(per_1k, f"{where}.file_search_cost_per_1k_calls")
            if price is not None:
                tools["file_search"] = price / 1000
        session = spec.get("code_interpreter_cost_per_session")
        if session is not None:
            price = _decimal(session, f"{where}.code_interpreter_cost_per_session")
            if price is not None:
                tools["code_interpreter"] = price
        entries[key] = PriceEntry(
            key=key,
            rates=rates,
            provider=None if provider is None else str(provider),
            as_of=None,
            source=None if spec.get("source") is None else str(spec["source"]),
            long_context=_litellm_long(groups, ""),
            tiers=tiers,
            server_tools=tools,
        )
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
        name: f"{value:f}" for name in _RATE_FIELDS if (value := getattr(rates, name)) is not None
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


# -- costs ----------------------------------------------------------------------


def _n(value: int | None) -> int:
    return value if value is not None and value > 0 else 0


def tier_rates(
    entry: PriceEntry, service_tier: str | None, input_tokens: int = 0
) -> tuple[Rates, tuple[LongContext, ...], str | None]:
    """The rates, long-context tiers and tier name ``service_tier`` is priced at.

    Raises :class:`Unpriced` for a tier the entry has no rate for, and for a
    request above a long-context threshold of a tier with rates of its own but
    none for long context (its standard long-context rates would be a guess).
    """
    name = (service_tier or "").strip().lower()
    if not name or name in STANDARD_TIERS:
        return entry.rates, entry.long_context, None
    base, plus, extra = name.partition("+")
    if plus:  # "priority+fast": Anthropic's fast mode on top of another tier
        speed = entry.tiers.get(extra)
        if speed is None or speed.multiplier is None:
            raise Unpriced(f"no {name!r} service-tier rate for {entry.key}")
        rates, long_tiers, _ = tier_rates(entry, base, input_tokens)
        scaled = tuple(
            LongContext(lc.above_input_tokens, lc.rates.over(rates).times(speed.multiplier))
            for lc in long_tiers
        )
        return rates.times(speed.multiplier), scaled, name
    tier = entry.tiers.get(name)
    if tier is not None and tier.same_as is not None:
        tier = entry.tiers.get(tier.same_as)
    if tier is None:
        raise Unpriced(f"no {name!r} service-tier rate for {entry.key}")
    if tier.multiplier is not None:
        rates = entry.rates.times(tier.multiplier)
        long_tiers = tuple(
            LongContext(lc.above_input_tokens, lc.rates.over(entry.rates).times(tier.multiplier))
            for lc in entry.long_context
        )
        return rates, long_tiers, name
    if not tier.long_context and any(
        input_tokens > lc.above_input_tokens for lc in entry.long_context
    ):
        raise Unpriced(f"no long-context {name!r} service-tier rate for {entry.key}")
    return tier.rates.over(entry.rates), tier.long_context, name


def cost_of(
    entry: PriceEntry,
    table_version: str,
    *,
    input_tokens: int | None,
    output_tokens: int | None,
    cache_read_tokens: int | None = None,
    cache_write_tokens: int | None = None,
    cache_write_1h_tokens: int | None = None,
    reasoning_tokens: int | None = None,
    service_tier: str | None = None,
    server_tool_requests: Mapping[str, int] | None = None,
) -> Cost:
    """The exact cost of one request's usage under ``entry``.

    Raises :class:`Unpriced` when ``service_tier`` is one the entry has no rate for.
    """
    inp = _n(input_tokens)
    rates, long_tiers, tier_used = tier_rates(entry, service_tier, inp)
    long_used = False
    for lc in reversed(long_tiers):  # sorted by threshold: the highest one exceeded
        if inp > lc.above_input_tokens:
            rates = lc.rates.over(rates)
            long_used = True
            break
    in_rate = rates.input or Decimal(0)
    cache_read = _n(cache_read_tokens)
    cache_write = _n(cache_write_tokens)
    write_1h = min(_n(cache_write_1h_tokens), cache_write)
    write_default = cache_write - write_1h
    uncached = max(0, inp - cache_read - cache_write)
    out = _n(output_tokens)
    reasoning = min(_n(reasoning_tokens), out) if rates.reasoning is not None else 0
    write_rate = rates.cache_write if rates.cache_write is not None else in_rate
    total = (
        uncached * in_rate
        + cache_read * (rates.cache_read if rates.cache_read is not None else in_rate)
        + write_default * write_rate
        + write_1h * (rates.cache_write_1h if rates.cache_write_1h is not None else write_rate)
        + (out - reasoning) * (rates.output or Decimal(0))
        + reasoning * (rates.reasoning or Decimal(0))
    )
    for tool, count in (server_tool_requests or {}).items():
        price = entry.server_tools.get(tool)
        if price is not None and count > 0:
            total += count * price
    usd = total.quantize(QUANTUM, rounding=ROUND_HALF_EVEN)
    version = f"{table_version}:{entry.key}@{entry.as_of or 'undated'}"
    return Cost(f"{usd:.12f}", version, tier_used, long_used)


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
    snapshot) is priced first, the requested one if the table lacks it.
    """
    if record.input_tokens is None and record.output_tokens is None:
        return None
    entry = table.resolve(record.response_model) or table.resolve(record.model)
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
    )
