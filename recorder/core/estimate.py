"""Token estimates where usage was not reported: output from what was received,
input from the request body.

Theory of operation
-------------------
No tokenizer is needed, or downloaded. The figures come from counts taken as
the stream passed (``Observations.add_*``: characters by kind and by writing
system, and the number of output deltas; never the text) and from counts of
the request body (:func:`count_request`, run off the event loop; again only
counts are kept).

Output tokens, two methods (``Estimate.method`` names the one used):

- ``deltas``: OpenAI's servers (and DeepSeek's, xAI's, ...) stream about one
  token per delta, so on the OpenAI protocols the number of output deltas IS
  the token count, whatever the language. It is used when the deltas look like
  tokens: at least half as many deltas as the characters would make tokens
  (a gateway that batches deltas fails that test and falls to ``chars``).
- ``chars``: characters divided by a characters-per-token ratio per model
  family and per kind: ``latin`` (ASCII text), ``alphabetic`` (U+0080..U+07FF:
  accented Latin, Greek, Cyrillic, Hebrew, Arabic), ``cjk`` (U+0800 and up:
  CJK, kana, Hangul, Indic, Thai) and ``tool`` (tool-call arguments, code).
  Japanese and English differ about fourfold here.

Both add a fixed number of tokens per tool call (the call's name and framing,
never streamed as argument characters), and per response with text (the
message's framing). Those allowances were fitted on complete responses, and
complete responses of a handful of tokens carry them whole (docs/billing.md).
A stream cut short never produced its closing framing, and how much of the
allowance comes before the text is not known: for a cut stream (``cut``) the
per-response allowance grows with what the model produced (the streamed output
and its estimated hidden reasoning), whole from :data:`FRAMING_WHOLE_AT` tokens
on. It is thus never more than a fifth of that output (4 tokens over 20 for
OpenAI's reasoning models, the largest), where it was up to several times a
cut of one or two tokens. A call's allowance stays whole: a call that started
has streamed its name.

Reasoning a provider does not stream (OpenAI's reasoning models stream at most
a summary, which is not billed as output) is not in what was received; what the
stream does show is how long the model thought before its first output
(:func:`thinking_ms`). Completed streams of the model teach its rate (reasoning
tokens per second of that time); a cut stream's hidden reasoning is its thinking time at that rate
(``+reasoning-from-time``). Without a learned rate the figure is a lower bound,
and the method says ``+hidden-reasoning``.

Claude Opus 4.7 and later count with a newer tokenizer that makes more tokens of
the same text: they are a family of their own (``anthropic-new``), with their
own ratios and calibration.

Input tokens: the request's text characters by the same kinds, tool and schema
definitions as ``tool`` characters, plus framing per message and per request,
Anthropic's tool-use system prompt when tools are defined, and a default per
image (dimensions are not read). The model's own tokenizer, when one is
installed that needs no download (``recorder.proxy.tokenizers``: OpenAI's), counts
the text exactly instead.

Calibration (:class:`Calibration`): the built-in ratios (:data:`PROFILES`)
are a fallback. Every completed record whose usage was reported teaches the
estimator its model's ratio for the kind that dominates it (at least 90 % of
the estimate); once a model (or, failing that, its family) has enough samples
for a kind, its learned ratio replaces the default. Fallback order: the model,
its family, the built-in default. The built-in OpenAI ratios were measured with
the o200k_base and cl100k_base vocabularies on sample texts in ten languages;
the Anthropic ASCII and tool ratios and the overheads were fitted to the real
captured streams in ``tests/fixtures``; Anthropic's non-Latin ratios are
unmeasured guesses (no current Claude tokenizer is public) until calibration
replaces them. The calibration is not saved apart: the store's completed
streams hold what it learns from, and a proxy relearns it from them at start-up
(``recorder.store.calibration``). ``bench/measure_estimator.py`` measures the
error; ``docs/billing.md`` states it.
"""

from __future__ import annotations

import bisect
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from recorder.core.counts import InputCounts, OutputCounts
from recorder.core.model_families import KINDS, PROFILES, family_for, hides_reasoning, model_base
from recorder.core.record import StreamRecord

ESTIMATOR_VERSION = "e3"
# Endpoints whose counts teach nothing: a Realtime response's output tokens are
# mostly audio, which no character of its transcript measures
_NOT_TAUGHT = frozenset({"realtime"})
# A cut stream's per-response allowance is whole from this many output tokens on,
# and in proportion below (see the module's docstring).
FRAMING_WHOLE_AT = 20.0
# Claude models whose thinking is streamed in full (later ones stream a summary).
_FULL_THINKING = re.compile(r"^claude-3")


# -- estimates ------------------------------------------------------------------

# Shorter thinking times are mostly network and queueing: no rate is learned from them.
_MIN_THINKING_MS = 200.0


def thinking_ms(record: StreamRecord) -> float | None:
    """The time a model spent before its first visible output, in milliseconds.

    From the stream's first event to its first output delta; for a stream cut
    before any output, to the end. None when the record was not timed (a replay).
    """
    start = record.first_event_ms
    end = record.ttft_ms if record.ttft_ms is not None else record.duration_ms
    if start is None or end is None or end <= start:
        return None
    return end - start


@dataclass(frozen=True, slots=True)
class Estimate:
    """An estimated token figure and how it was obtained."""

    tokens: int
    reasoning_tokens: int | None
    method: str


class Calibration:
    """Characters per token learned from completed records, per model and kind.

    Keys are ``(scope, direction, kind)``: ``scope`` is a model (``model_base``)
    or a family (``PROFILES`` key), ``direction`` is ``input`` or ``output``.
    Each key keeps the ratios of its last ``window`` records; the learned ratio
    is their median, so one odd record (a capture with hidden output, a
    compaction) cannot drag it, and it follows a model whose behaviour drifts.
    Not thread-safe: feed it from one thread.
    """

    __slots__ = (
        "_medians",
        "_sorted",
        "max_ratio",
        "min_ratio",
        "min_samples",
        "ratios",
        "window",
    )

    def __init__(self, *, min_samples: int = 20, window: int = 256) -> None:
        self.min_samples = min_samples
        self.window = window
        self.min_ratio = 0.3
        self.max_ratio = 12.0
        self.ratios: dict[tuple[str, str, str], deque[float]] = {}
        self._medians: dict[tuple[str, str, str], float] = {}
        # each key's window kept sorted as well, so that a new median after every
        # record costs a bisection, not a sort of the whole window
        self._sorted: dict[tuple[str, str, str], list[float]] = {}

    def add(self, scope: str, direction: str, kind: str, chars: float, tokens: float) -> None:
        """Learn that ``chars`` of ``kind`` made ``tokens`` (one record's worth)."""
        if chars <= 0 or tokens <= 0:
            return
        self.add_value(
            scope, direction, kind, min(self.max_ratio, max(self.min_ratio, chars / tokens))
        )

    def add_value(self, scope: str, direction: str, kind: str, ratio: float) -> None:
        """Learn one record's value of ``(scope, direction, kind)`` as it is (not clamped)."""
        if not ratio > 0:
            return
        key = (scope, direction, kind)
        values = self.ratios.get(key)
        if values is None:
            values = self.ratios[key] = deque(maxlen=self.window)
        order = self._sorted.get(key)
        if order is not None:
            if len(values) == values.maxlen:  # the oldest leaves the window
                del order[bisect.bisect_left(order, values[0])]
            bisect.insort(order, ratio)
        values.append(ratio)
        self._medians.pop(key, None)

    def ratio(self, scope: str, direction: str, kind: str) -> float | None:
        """The learned ratio, or None while there are too few samples."""
        key = (scope, direction, kind)
        values = self.ratios.get(key)
        if values is None or len(values) < self.min_samples:
            return None
        median = self._medians.get(key)
        if median is None:
            order = self._sorted.get(key)
            if order is None or len(order) != len(values):
                order = self._sorted[key] = sorted(values)
            n = len(order)
            mid = n // 2
            median = order[mid] if n % 2 else (order[mid - 1] + order[mid]) / 2
            median = self._medians[key] = float(median)
        return median

    def samples(self, scope: str, direction: str, kind: str) -> int:
        """How many records (of the last ``window``) taught ``(scope, direction, kind)``."""
        values = self.ratios.get((scope, direction, kind))
        return 0 if values is None else len(values)

    def to_dict(self) -> dict[str, list[float]]:
        """A JSON-able copy, for saving between runs."""
        return {"|".join(key): list(values) for key, values in self.ratios.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], **kwargs: int) -> Calibration:
        """Back from :meth:`to_dict` (malformed entries are skipped)."""
        cal = cls(**kwargs)
        for key, values in data.items():
            parts = key.split("|")
            if len(parts) != 3 or not isinstance(values, list):
                continue
            try:
                ratios = [float(v) for v in values]
            except (TypeError, ValueError):
                continue
            cal.ratios[(parts[0], parts[1], parts[2])] = deque(
                (r for r in ratios if r > 0), maxlen=cal.window
            )
        return cal


class Estimator:
    """Estimates input and output tokens; learns from completed records."""

    __slots__ = ("calibration",)

    def __init__(self, calibration: Calibration | None = None) -> None:
        self.calibration = calibration if calibration is not None else Calibration()

    def _ratios(
        self, model: str | None, family: str, direction: str
    ) -> tuple[dict[str, float], bool]:
        profile = PROFILES[family]
        scope = model_base(model) if model else None
        ratios: dict[str, float] = {}
        learned = False
        for kind in KINDS:
            value = None
            if scope is not None:
                value = self.calibration.ratio(scope, direction, kind)
            if value is None:
                value = self.calibration.ratio(family, direction, kind)
            if value is None:
                value = profile.ratio(kind)
            else:
                learned = True
            ratios[kind] = value
        return ratios, learned

    def reasoning_rate(self, model: str | None, family: str) -> float | None:
        """Hidden reasoning tokens per second of thinking time, learned; None if unknown."""
        if model:
            rate = self.calibration.ratio(model_base(model), "reasoning", "per_second")
            if rate is not None:
                return rate
        return self.calibration.ratio(family, "reasoning", "per_second")

    def output(
        self,
        model: str | None,
        endpoint: str | None,
        counts: OutputCounts,
        *,
        thinking_ms: float | None = None,
        cut: bool = False,
    ) -> Estimate:
        """Output tokens of a stream whose output usage was not reported.

        ``thinking_ms`` (:func:`thinking_ms`) is the time the model spent before
        its first visible output: for a model that hides its reasoning, that time
        at the rate its completed streams showed estimates the hidden reasoning.
        ``cut``: the stream was interrupted (the record's ``interrupted``), so its
        per-response allowance is scaled to what it produced (module docstring).
        """
        family = family_for(model, endpoint)
        profile = PROFILES[family]
        ratios, learned = self._ratios(model, family, "output")
        text_tokens = (
            counts.latin / ratios["latin"]
            + counts.alphabetic / ratios["alphabetic"]
            + counts.cjk / ratios["cjk"]
        )
        tool_tokens = counts.tool / ratios["tool"]
        # framing never streamed as characters: per call, per response with text,
        # and arguments that came whole in an output item instead of as deltas
        fixed = counts.tool_calls * profile.call_tokens + counts.unstreamed / ratios["tool"]
        framing = profile.response_tokens if counts.text else 0.0
        # Do the deltas look like tokens? Judged with the built-in ratios: a
        # yardstick of the stream's shape that calibration must not move.
        shape = (
            counts.latin / profile.latin
            + counts.alphabetic / profile.alphabetic
            + counts.cjk / profile.cjk
            + counts.tool / profile.tool
        )
        per_token = endpoint != "messages" and profile.per_token_deltas
        if per_token and counts.deltas and counts.deltas >= 0.5 * shape:
            # one token per delta; the text's share of them from the characters
            body = float(counts.deltas)
            share = text_tokens / (text_tokens + tool_tokens) if text_tokens else 0.0
            text_part = body * share
            method = "deltas"
        else:
            body = text_tokens + tool_tokens
            text_part = text_tokens
            method = "chars/calibrated" if learned else "chars/default"
        hidden = None
        hides = hides_reasoning(model, endpoint)
        if hides:
            rate = self.reasoning_rate(model, family) if thinking_ms else None
            if rate is not None and thinking_ms:
                hidden = round(rate * thinking_ms / 1000.0)
        if cut and framing:
            produced = body + counts.unstreamed / ratios["tool"] + (hidden or 0)
            framing *= min(1.0, produced / FRAMING_WHOLE_AT)
        tokens = round(body + fixed + framing)
        reasoning = None
        if counts.reasoning and counts.text:
            reasoning = min(tokens, round(text_part * counts.reasoning / counts.text))
        if hidden is not None:
            tokens += hidden
            reasoning = (reasoning or 0) + hidden
            method += "+reasoning-from-time"
        elif hides:
            method += "+hidden-reasoning"
        elif (
            counts.reasoning
            and family.startswith("anthropic")
            and not _FULL_THINKING.match(model_base(model or ""))
        ):
            method += "+summarised-thinking"  # billed for the full thinking, shown a summary
        return Estimate(tokens, reasoning, method)

    def input(self, model: str | None, endpoint: str | None, counts: InputCounts) -> Estimate:
        """Input tokens of a request whose input usage was not reported."""
        family = family_for(model, endpoint)
        profile = PROFILES[family]
        if counts.text_tokens is not None:
            text = float(counts.text_tokens)
            method = f"tokenizer/{counts.encoding or 'unknown'}"
        else:
            ratios, learned = self._ratios(model, family, "input")
            text = sum(getattr(counts, kind) / ratios[kind] for kind in KINDS)
            method = "chars/calibrated" if learned else "chars/default"
        framing = counts.messages * profile.message_tokens + profile.request_tokens
        if counts.tools:
            framing += profile.tools_prompt_tokens
        tokens = round(text + framing + counts.images * profile.image_tokens)
        if counts.files:
            method += "+files-uncounted"
        return Estimate(tokens, None, method)

    # -- learning ---------------------------------------------------------------

    def observe(
        self,
        record: StreamRecord,
        *,
        output: OutputCounts | None = None,
        request: InputCounts | None = None,
    ) -> None:
        """Learn from a finished record whose usage was reported (others are ignored).

        ``output`` and ``request`` are the counts its breakdowns were made of, if at
        hand (``recorder.core.billing.complete_usage``); else they are read back
        from the breakdowns.
        """
        model = record.response_model or record.model
        if not model or record.endpoint in _NOT_TAUGHT or record.usage_parts:
            # (a usage of several parts sums several samplings, each reading the
            # prompt again, some whose output was never streamed: no ratio of
            # what was sent and streamed to what was billed)
            return
        family = family_for(model, record.endpoint)
        profile = PROFILES[family]
        scopes = (model_base(model), family)
        out = record.output_breakdown
        if (
            record.output_source == "reported"
            and record.output_tokens is not None
            and record.output_tokens >= 20
            and out
        ):
            counts = (
                output
                if output is not None
                else OutputCounts.from_breakdown(out, record.tool_calls)
            )
            hidden = (record.reasoning_tokens or 0) > 0 and not counts.reasoning
            if not hidden:
                overhead = counts.tool_calls * profile.call_tokens
                if counts.text:
                    overhead += profile.response_tokens
                chars = {
                    "latin": counts.latin,
                    "alphabetic": counts.alphabetic,
                    "cjk": counts.cjk,
                    "tool": counts.tool,
                }
                self._learn(scopes, family, "output", chars, record.output_tokens - overhead)
        if (
            record.output_source == "reported"
            and (record.reasoning_tokens or 0) > 0
            and hides_reasoning(model, record.endpoint)
        ):
            elapsed = thinking_ms(record)
            if elapsed is not None and elapsed >= _MIN_THINKING_MS:
                rate = (record.reasoning_tokens or 0) / (elapsed / 1000.0)
                for scope in scopes:
                    self.calibration.add_value(scope, "reasoning", "per_second", rate)
        inp = record.input_breakdown
        if (
            record.input_source == "reported"
            and record.input_tokens is not None
            and record.input_tokens >= 50
            and inp
        ):
            counts_in = request if request is not None else InputCounts.from_breakdown(inp)
            if not counts_in.images and not counts_in.files:
                framing = counts_in.messages * profile.message_tokens + profile.request_tokens
                if counts_in.tools:
                    framing += profile.tools_prompt_tokens
                chars = {kind: getattr(counts_in, kind) for kind in KINDS}
                self._learn(scopes, family, "input", chars, record.input_tokens - framing)

    def _learn(
        self,
        scopes: tuple[str, str],
        family: str,
        direction: str,
        chars: dict[str, int],
        tokens: float,
    ) -> None:
        if tokens <= 0:
            return
        ratios, _ = self._ratios(scopes[0], family, direction)
        weights = {kind: chars[kind] / ratios[kind] for kind in KINDS}
        total = sum(weights.values())
        if total <= 0:
            return
        kind = max(weights, key=lambda k: weights[k])
        if weights[kind] < 0.9 * total:
            return  # no dominant kind: nothing clean to learn from
        own = tokens - (total - weights[kind])
        if own <= 0:
            return
        for scope in scopes:
            self.calibration.add(scope, direction, kind, chars[kind], own)
