"""Price tables and exact costs (Decimal, never float).

The table's types (:class:`PriceTable`, one :class:`PriceEntry` per model, its
:class:`Rates`, long-context and service-tier rates) and the cost of a record
under them. Reading and writing table files (the project's format and
LiteLLM's) is ``recorder.core.price_files``.

A model name resolves to an entry by: the exact key; an alias the table
declares (Amazon Bedrock's model ids and inference profiles, ``us.anthropic.claude-
sonnet-4-5-20250929-v1:0``, are aliases of Bedrock's own entries, also inside an
ARN); the name without provider prefix, snapshot date or ``-latest``
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

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from recorder.core.errors import RecorderError, UsageError
from recorder.core.model_families import bedrock_model_id, model_base
from recorder.core.record import StreamRecord

BEDROCK = "aws.bedrock"  # the provider whose request names the price (its model id)

FORMAT = "recorder-prices/1"
QUANTUM = Decimal("0.000000000001")  # 12 fractional digits
_ZERO = Decimal(0)
RATE_FIELDS = (
    "input",
    "output",
    "cache_read",
    "cache_write",
    "cache_write_1h",
    "reasoning",
    # by modality, where a model prices audio and images apart from text (Realtime)
    "input_audio",
    "cache_read_audio",
    "output_audio",
    "input_image",
    "cache_read_image",
)
# the reasons of a record whose usage's modality parts cannot be priced
MODALITY_REASONS = ("no audio-token rate", "no image-token rate", "no modality split")


# the tiers that are the standard rates ("auto": the provider's default, which a
# cut Responses stream still echoes from response.created; "on_demand": Vertex AI's
# trafficType for pay-as-you-go)
STANDARD_TIERS = frozenset({"default", "standard", "auto", "standard_only", "on_demand"})


class PriceTableError(UsageError, ValueError):
    """A price table that cannot be read; the message names the entry and field."""


class Unpriced(RecorderError, ValueError):
    """A request the table cannot price; the message is the record's ``unpriced_reason``."""


def unpriced_kind(reason: str | None) -> str | None:
    """``model`` (no price for the model) or ``tier`` (none for its service tier)
    of a record's ``unpriced_reason``; None when it has none."""
    if not reason:
        return None
    if reason.startswith(MODALITY_REASONS):
        return "modality"
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
    # audio and image tokens, where priced apart from text (the parts of the figures)
    input_audio: Decimal | None = None
    cache_read_audio: Decimal | None = None
    output_audio: Decimal | None = None
    input_image: Decimal | None = None
    cache_read_image: Decimal | None = None
    # cache writes of lifetimes beyond one hour, by hours (LiteLLM's ``_above_<N>hr``):
    # kept and shown; a record has no counts for them yet (docs/billing.md)
    cache_write_hours: tuple[tuple[int, Decimal], ...] = ()

    def over(self, base: Rates) -> Rates:
        """These rates, with ``base``'s wherever these say nothing."""
        values: dict[str, Decimal | None] = {
            name: getattr(self, name) if getattr(self, name) is not None else getattr(base, name)
            for name in RATE_FIELDS
        }
        return Rates(**values, cache_write_hours=self.cache_write_hours or base.cache_write_hours)

    def times(self, factor: Decimal) -> Rates:
        """Every rate multiplied by ``factor``."""
        values: dict[str, Decimal | None] = {
            name: None if (v := getattr(self, name)) is None else v * factor for name in RATE_FIELDS
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
        for candidate in (name, bedrock_model_id(name), model_base(name)):
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


@dataclass(frozen=True, slots=True)
class Modality:
    """The parts of a request's token figures by modality (None: not told)."""

    input_audio: int | None = None
    cache_read_audio: int | None = None
    input_image: int | None = None
    cache_read_image: int | None = None
    output_audio: int | None = None

    @classmethod
    def of(cls, record: StreamRecord) -> Modality | None:
        """A record's parts; None when it has none at all (not a Realtime record)."""
        parts = cls(
            record.input_audio_tokens,
            record.cache_read_audio_tokens,
            record.input_image_tokens,
            record.cache_read_image_tokens,
            record.output_audio_tokens,
        )
        return None if parts == _NO_MODALITY else parts


_NO_MODALITY = Modality()


@dataclass(frozen=True, slots=True)
class _Parts:
    """Known modality parts, as counts (0 where a part was not told)."""

    input_audio: int = 0
    cache_read_audio: int = 0
    input_image: int = 0
    cache_read_image: int = 0
    output_audio: int = 0


_NO_PARTS = _Parts()


def _modal_parts(
    entry: PriceEntry, rates: Rates, modality: Modality | None, inp: int, out: int
) -> _Parts:
    """The parts to price apart from text (``_NO_PARTS``: none), or :class:`Unpriced`:
    audio or image tokens the entry has no rate for; or an entry that prices audio
    apart and usage whose split is not known (pricing it all as text would bill
    an audio model's output at a fraction of its price)."""
    audio_model = rates.input_audio is not None or rates.output_audio is not None
    if modality is None:
        if audio_model and (inp or out):
            raise Unpriced(f"no modality split in the usage: {entry.key} prices audio apart")
        return _NO_PARTS
    if audio_model and (
        (inp and modality.input_audio is None) or (out and modality.output_audio is None)
    ):
        raise Unpriced(f"no modality split in the usage: {entry.key} prices audio apart")
    parts = _Parts(
        min(_n(modality.input_audio), inp),
        min(_n(modality.cache_read_audio), _n(modality.input_audio)),
        min(_n(modality.input_image), inp),
        min(_n(modality.cache_read_image), _n(modality.input_image)),
        min(_n(modality.output_audio), out),
    )
    if (parts.input_audio and rates.input_audio is None) or (
        parts.output_audio and rates.output_audio is None
    ):
        raise Unpriced(f"no audio-token rate for {entry.key}")
    if parts.input_image and rates.input_image is None:
        raise Unpriced(f"no image-token rate for {entry.key}")
    return parts


def _modal_cost(rates: Rates, parts: _Parts) -> Decimal:
    """The audio and image parts' cost (their rates checked by ``_modal_parts``);
    a cached part without a cached rate costs the part's input rate."""
    total = _ZERO
    if parts.input_audio:
        rate = rates.input_audio or _ZERO
        cached = rates.cache_read_audio if rates.cache_read_audio is not None else rate
        total += (parts.input_audio - parts.cache_read_audio) * rate
        total += parts.cache_read_audio * cached
    if parts.input_image:
        rate = rates.input_image or _ZERO
        cached = rates.cache_read_image if rates.cache_read_image is not None else rate
        total += (parts.input_image - parts.cache_read_image) * rate
        total += parts.cache_read_image * cached
    if parts.output_audio:
        total += parts.output_audio * (rates.output_audio or _ZERO)
    return total


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
    modality: Modality | None = None,
) -> Cost:
    """The exact cost of one request's usage under ``entry``.

    Raises :class:`Unpriced` when ``service_tier`` is one the entry has no rate
    for, and when ``modality`` has audio or image tokens it has no rate for (or
    an entry that prices audio apart is given no modality split).
    """
    inp = _n(input_tokens)
    rates, long_tiers, tier_used = tier_rates(entry, service_tier, inp)
    long_used = False
    for lc in reversed(long_tiers):  # sorted by threshold: the highest one exceeded
        if inp > lc.above_input_tokens:
            rates = lc.rates.over(rates)
            long_used = True
            break
    in_rate = rates.input or _ZERO
    cache_read = _n(cache_read_tokens)
    cache_write = _n(cache_write_tokens)
    write_1h = min(_n(cache_write_1h_tokens), cache_write)
    write_default = cache_write - write_1h
    out = _n(output_tokens)
    parts = _modal_parts(entry, rates, modality, inp, out)
    if parts is not _NO_PARTS:
        # the audio and image parts are priced apart; text is the rest
        inp -= parts.input_audio + parts.input_image
        cache_read = max(0, cache_read - parts.cache_read_audio - parts.cache_read_image)
        out -= parts.output_audio
    uncached = max(0, inp - cache_read - cache_write)
    reasoning = min(_n(reasoning_tokens), out) if rates.reasoning is not None else 0
    write_rate = rates.cache_write if rates.cache_write is not None else in_rate
    # only the terms with tokens (most requests read or write no cache, and reason
    # apart from output on few models): fewer Decimal operations per record on the
    # event loop; the value is the same
    total = _ZERO
    if uncached:
        total += uncached * in_rate
    if cache_read:
        total += cache_read * (rates.cache_read if rates.cache_read is not None else in_rate)
    if write_default:
        total += write_default * write_rate
    if write_1h:
        total += write_1h * (
            rates.cache_write_1h if rates.cache_write_1h is not None else write_rate
        )
    if out - reasoning:
        total += (out - reasoning) * (rates.output or _ZERO)
    if reasoning:
        total += reasoning * (rates.reasoning or _ZERO)
    if parts is not _NO_PARTS:
        total += _modal_cost(rates, parts)
    for tool, count in (server_tool_requests or {}).items():
        price = entry.server_tools.get(tool)
        if price is not None and count > 0:
            total += count * price
    usd = total.quantize(QUANTUM, rounding=ROUND_HALF_EVEN)
    version = f"{table_version}:{entry.key}@{entry.as_of or 'undated'}"
    return Cost(f"{usd:.12f}", version, tier_used, long_used)
