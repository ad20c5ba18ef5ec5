"""The last minute of the proxy, as the header of `recorder top` shows it: streams
finished, tokens and spend, per second over ``WINDOW_S`` seconds.

Output tokens count as they stream (each walk adds what every open stream produced
since the one before, estimated as ``/streams`` shows it when not reported), so a
long stream shows in tokens per second while it runs; its record adds its input,
the rest of its output and its cost when it is completed. Streams count when they
finish.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from recorder.proxy.open_streams import StreamView

WINDOW_S = 60

# a stream's output tokens so far, and whether estimated
OutputTokens = Callable[[StreamView], tuple[int | None, bool]]


class LastMinute:
    """Streams, tokens and cost by second, over the last ``WINDOW_S`` seconds."""

    def __init__(self, wall: Callable[[], float], output_tokens: OutputTokens) -> None:
        self._wall = wall
        self._output_tokens = output_tokens
        # second -> [streams, tokens, cost]
        self._window: dict[int, list[float]] = {}
        # per open stream: (output characters, output tokens) counted so far
        self._streamed: dict[str, tuple[int, float]] = {}

    def _bucket(self) -> list[float]:
        """This second's [streams, tokens, cost]."""
        second = int(self._wall())
        bucket = self._window.get(second)
        if bucket is None:
            bucket = self._window[second] = [0.0, 0.0, 0.0]
            for old in [k for k in self._window if k <= second - WINDOW_S]:
                del self._window[old]
        return bucket

    def streamed(self, views: list[StreamView]) -> None:
        """The output tokens each open stream produced since the last walk (estimated
        only for streams whose output grew)."""
        counted = self._streamed
        now_counted: dict[str, tuple[int, float]] = {}
        grown = 0.0
        for view in views:
            rid = view.id
            if rid is None:
                continue
            chars = view.observations.output_chars
            before = counted.get(rid, (0, 0.0))
            tokens = before[1]
            if chars != before[0]:
                tokens = float(self._output_tokens(view)[0] or 0)
                grown += max(0.0, tokens - before[1])
            now_counted[rid] = (chars, tokens)
        self._streamed = now_counted
        if grown:
            self._bucket()[1] += grown

    def finished(self, rid: str | None, summary: dict[str, Any]) -> None:
        """A completed record: its input, what of its output the walks did not count
        yet, its cost."""
        counted = self._streamed.pop(rid or "", (0, 0.0))[1]
        bucket = self._bucket()
        bucket[0] += 1
        output = summary["output_tokens"] or 0
        bucket[1] += (summary["input_tokens"] or 0) + max(0.0, output - counted)
        with contextlib.suppress(TypeError, ValueError):
            bucket[2] += float(summary["cost_usd"] or 0)

    def figures(self) -> dict[str, Any]:
        """The last minute's totals and rates."""
        second = int(self._wall())
        window = [b for k, b in self._window.items() if second - WINDOW_S < k <= second]
        streams = sum(b[0] for b in window)
        tokens = sum(b[1] for b in window)
        cost = sum(b[2] for b in window)
        return {
            "streams": int(streams),
            "tokens": int(tokens),
            "cost_usd": round(cost, 6),
            "streams_per_s": round(streams / WINDOW_S, 3),
            "tokens_per_s": round(tokens / WINDOW_S, 3),
            "usd_per_hour": round(cost * 3600 / WINDOW_S, 6),
        }
