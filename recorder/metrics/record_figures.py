"""A record's figures as the metrics count them: its token figures with their
sources, a usage part's, and its cost as the counter's float.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from recorder.core.record import StreamRecord

log = logging.getLogger("recorder.metrics")

# (token type, figure, its source: "reported", "estimated" or unknown)
Figures = tuple[tuple[str, int | None, str | None], ...]
TOKEN_TYPES = ("input", "cache_read", "cache_write", "output", "reasoning")
_OUTPUT = frozenset({"output", "reasoning"})


def record_tokens(record: StreamRecord) -> Figures:
    """The record's own token figures, each with the source of its side."""
    input_source = record.input_source
    output_source = record.output_source
    return (
        ("input", record.input_tokens, input_source),
        ("cache_read", record.cache_read_tokens, input_source),
        ("cache_write", record.cache_write_tokens, input_source),
        ("output", record.output_tokens, output_source),
        ("reasoning", record.reasoning_tokens, output_source),
    )


def part_tokens(record: StreamRecord, part: Mapping[str, Any]) -> Figures:
    """One usage part's token figures (``usage_parts``), with the record's sources."""
    return tuple(
        (
            name,
            _count(part.get(f"{name}_tokens")),
            record.output_source if name in _OUTPUT else record.input_source,
        )
        for name in TOKEN_TYPES
    )


def provider_gaps(record: StreamRecord) -> list[tuple[str, float]]:
    """What the recorder measured less what the provider says it took (Amazon
    Bedrock's own timing), in seconds, for each measure both give."""
    return [
        (measure, (ours - theirs) / 1000.0)
        for measure, ours, theirs in (
            ("duration", record.duration_ms, record.provider_latency_ms),
            ("first_byte", record.ttft_ms, record.provider_first_byte_ms),
        )
        if ours is not None and theirs is not None
    ]


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cost_float(text: str | None) -> float | None:
    """A record's ``cost_usd`` as the counter's float; None (and a warning) when it is
    not a finite number. (Read as a float directly: a Decimal first, then its float,
    costs twice as much per record, for the same float.)"""
    if text is None:
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        log.warning("recorder: cost %r is not a decimal; not counted", text)
        return None
    return value if math.isfinite(value) else None
