"""Completing a finished record for billing: sources, estimates, cost.

The meter copies what the provider reported (``StreamMeter.finish``). This
module does the rest, in three steps that each work from the record alone, so
``recorder reprice`` and calibration can run them again on stored rows:

1. :func:`absorb`: the facts the stream and the request gave beyond tokens:
   service tier, cache writes by lifetime, provider-side tool requests, and the
   counts estimation needs (``output_breakdown``, ``input_breakdown``).
2. :func:`fill_usage`: ``input_source`` / ``output_source`` / ``usage_source``,
   and an estimate wherever a figure was not reported, whatever the reason: a
   cut stream (output generated before an interruption is billed), Chat
   Completions without ``stream_options.include_usage``. A cut Anthropic stream
   keeps its exact input and cache counts from ``message_start``; its
   provisional ``output_tokens`` is only a floor under the output estimate.
   An ``http_error`` generated nothing and is not billed: every source ``none``;
   the same for a request that got no response at all (no status, no event).
3. :func:`apply_prices`: ``cost_usd`` and ``price_version`` (null when the
   model has no price, its service tier no rate, or nothing is known of the
   usage), and ``unpriced_reason`` saying which when usage is known.

``estimate_method`` is ``<estimator version>;input:<method>;output:<method>``,
naming only the figures that were estimated (``recorder.core.estimate``).
"""

from __future__ import annotations

import math
from typing import Any

from recorder.core.counts import InputCounts, OutputCounts
from recorder.core.estimate import ESTIMATOR_VERSION, Estimator, thinking_ms
from recorder.core.pricing import PriceTable, Unpriced
from recorder.core.protocols.observations import Observations
from recorder.core.record import StreamRecord, combine_sources
from recorder.core.record_cost import cost_or_reason, price_parts


def complete_usage(
    record: StreamRecord,
    obs: Observations | None,
    request: InputCounts | None,
    prices: PriceTable | None,
    estimator: Estimator | None,
    *,
    learn: bool = True,
) -> None:
    """Fill sources, estimates and cost on a record ``StreamMeter.finish`` returned.

    ``obs`` is the meter's ``interpreter.obs`` (None: the record's own counts
    are used); ``request`` the counts of the request body
    (:func:`recorder.core.counts.count_request`; None when there was no
    readable body); ``prices`` None leaves the cost unset; ``estimator`` None
    uses the built-in ratios. With ``learn``, a record whose usage was reported
    teaches the estimator (it must then be fed from one thread).
    """
    output = absorb(record, obs, request)
    est = estimator if estimator is not None else Estimator()
    # the counts the breakdowns were just made of, not made again from them
    fill_usage(record, est, output=output, request=request)
    if prices is not None:
        apply_prices(record, prices)
    if learn and estimator is not None:
        estimator.observe(record, output=output, request=request)


def absorb(
    record: StreamRecord, obs: Observations | None, request: InputCounts | None
) -> OutputCounts | None:
    """Copy onto the record what billing needs of the stream and of the request;
    the output's counts (None without ``obs``: then the record's breakdown stands)."""
    output = None
    if obs is not None:
        # the response's word on the tier, unless it said nothing decisive ("auto"
        # echoes the request until the final event): then what the request asked
        reported = obs.service_tier
        silent = reported is None or reported.lower() == "auto"
        if record.requested_tier == "fast" and record.endpoint == "messages":
            # Anthropic reports fast mode in usage.speed, apart from service_tier
            raw = obs.raw_usage
            silent = silent or not (isinstance(raw, dict) and "speed" in raw)
        record.service_tier = (record.requested_tier or reported) if silent else reported
        usage = obs.usage
        if usage is not None:
            record.cache_write_5m_tokens = usage.cache_write_5m_tokens
            record.cache_write_1h_tokens = usage.cache_write_1h_tokens
        record.server_tool_requests = dict(obs.server_tools) if obs.server_tools else None
        output = OutputCounts.from_observations(obs)
        record.output_breakdown = output.to_breakdown()
    if request is not None:
        record.input_breakdown = request.to_breakdown()
    return output


def _provisional_output(record: StreamRecord) -> int:
    """Anthropic's ``message_start`` output count of a stream cut before ``message_delta``."""
    raw: Any = record.raw_usage
    # (Bedrock's InvokeModel carries Anthropic's events for its Claude models)
    if record.endpoint not in ("messages", "invoke_model") or not isinstance(raw, dict):
        return 0
    value = raw.get("output_tokens")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def fill_usage(
    record: StreamRecord,
    estimator: Estimator,
    *,
    output: OutputCounts | None = None,
    request: InputCounts | None = None,
) -> None:
    """Set the three sources and estimate every figure that was not reported.

    ``output`` and ``request`` are the counts the record's breakdowns were made
    of (:func:`absorb`), if at hand; else they are read back from the breakdowns.
    """
    never_answered = record.http_status is None and not record.events and not record.output_chars
    if (record.outcome == "http_error" or never_answered) and record.input_tokens is None:
        # Nothing was generated, and a failed request is not billed. A request
        # that got no response at all (connection refused, TLS failure, closed
        # before headers) may never have reached the provider: nothing is known.
        record.input_source = record.output_source = record.usage_source = "none"
        record.estimate_method = None
        return
    model = record.response_model or record.model
    methods = []
    if record.input_tokens is not None:
        record.input_source = "reported"
    elif record.input_breakdown is not None:
        counts = (
            request if request is not None else InputCounts.from_breakdown(record.input_breakdown)
        )
        estimate = estimator.input(model, record.endpoint, counts)
        record.input_tokens = estimate.tokens
        record.input_source = "estimated"
        methods.append(f"input:{estimate.method}")
    else:
        record.input_source = "none"
    if record.output_tokens is not None:
        record.output_source = "reported"
    elif record.recorder_error is not None:
        # the recorder could not meter the output: what it counted is not what was
        # sent, so there is nothing to estimate from (unknown, never a zero estimate)
        record.output_source = "none"
    else:
        if output is not None:
            out = output
        elif record.output_breakdown is not None:
            out = OutputCounts.from_breakdown(record.output_breakdown, record.tool_calls)
        else:  # a record from before breakdowns were kept: all of it as ASCII text
            out = OutputCounts(latin=record.output_chars, tool_calls=record.tool_calls)
        estimate = estimator.output(
            model,
            record.endpoint,
            out,
            thinking_ms=thinking_ms(record),
            cut=record.interrupted is True,  # a short cut: allowances in proportion
        )
        record.output_tokens = max(estimate.tokens, _provisional_output(record))
        if record.reasoning_tokens is None:
            record.reasoning_tokens = estimate.reasoning_tokens
        record.output_source = "estimated"
        method = f"output:{estimate.method}"
        if record.endpoint == "realtime":
            audio = audio_output_tokens(record.output_audio_ms)
            record.output_audio_tokens = audio
            if audio:
                record.output_tokens += audio
                method += "+audio-from-duration"
        methods.append(method)
    record.usage_source = combine_sources(record.input_source, record.output_source)
    record.estimate_method = ";".join((ESTIMATOR_VERSION, *methods)) if methods else None


# OpenAI's Realtime bills an assistant's audio at one token per 50 ms of it
# (https://developers.openai.com/api/docs/guides/realtime-costs)
AUDIO_OUTPUT_MS_PER_TOKEN = 50.0


def audio_output_tokens(audio_ms: float | None) -> int:
    """The output tokens of ``audio_ms`` of a Realtime response's audio (0: none)."""
    if not audio_ms or audio_ms <= 0:
        return 0
    return math.ceil(audio_ms / AUDIO_OUTPUT_MS_PER_TOKEN)


def input_tokenizer(estimate_method: str | None) -> str | None:
    """The vocabulary named by an ``estimate_method``'s ``input:tokenizer/<name>``
    (None when the input was not counted by a named tokenizer).

    A breakdown keeps a tokenizer's count, not its name: a stored record estimated
    again from its breakdown names the tokenizer its method already named.
    """
    for part in (estimate_method or "").split(";"):
        if part.startswith("input:tokenizer/"):
            name = part[len("input:tokenizer/") :].split("+", 1)[0]
            return name if name and name != "unknown" else None
    return None


def apply_prices(record: StreamRecord, prices: PriceTable) -> None:
    """Set ``cost_usd`` and ``price_version`` (both null when unpriced), and
    ``unpriced_reason`` when there is usage but no price for it."""
    record.cost_usd = record.price_version = record.unpriced_reason = None
    if record.usage_source == "none":
        return
    if record.usage_parts:
        record.usage_parts, parts_cost, reason = price_parts(record, prices)
        record.unpriced_reason = reason
        if parts_cost is not None:
            record.cost_usd = parts_cost.usd
            record.price_version = parts_cost.price_version
        return
    try:
        cost = cost_or_reason(record, prices)
    except Unpriced as e:
        record.unpriced_reason = str(e)
        return
    if cost is not None:
        record.cost_usd = cost.usd
        record.price_version = cost.price_version
