"""`recorder show ID --plot FILE.svg|.png|.pdf`: a stream's timeline as a picture.

Time runs left to right from the request (0). The top lane holds the stream's
phases: waiting for the first output token, output, a stall while it lasted,
the end (a cross when the stream was interrupted). Below, one lane per kind of
gap (stalls, keepalive gaps, the longest silence), shaded over their extent. A
stream whose body was captured (``--capture-bodies``) also gets a tick per
piece that carried output and per keepalive comment, each at the time it
arrived, and a second panel with the output over time (characters as they
arrived, and the record's output tokens spread over them).

Every mark is named in the legend, drawn opaque in the legend's colour (a mark
laid over another keeps its colour, never a blend the legend does not show),
and gaps of one kind are drawn alike:

- keepalive gaps: with a body, every interval between two keepalive comments
  (as many as the record counted); without one, only the longest few the record
  keeps, and the legend says how many of how many;
- silences: every silence as long as the longest (within 1 % or 1 ms) when the
  body shows them all; without a body the record holds the longest, the first
  of equal ones, and the legend says so when a kept keepalive gap is as long.

Without a body the record holds no per-event times: the picture then shows
phases and gaps only, and says so. Values that came off the wire (the model
name, the id) are shown escaped (recorder.core.printable).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from recorder.core.captured import PackedBody
from recorder.core.meter import StreamMeter
from recorder.core.printable import printable
from recorder.core.record import Gap, StreamRecord

FORMATS = (".svg", ".png", ".pdf")
# one colour per kind of mark, the same in every picture
WAITING, OUTPUT, END_CUT = "#c7c7c7", "#2ca02c", "#d62728"
GAP_COLOURS = {"stall": "#d62728", "keepalive": "#7f7f7f", "silence": "#ff7f0e"}
TICK_COLOURS = {"output": "#1f77b4", "keepalive": "#4d4d4d"}
CHARS_COLOUR, TOKENS_COLOUR = "#1f77b4", "#9467bd"
LANES = ("stream", "output", "keepalive", "stall", "silence")
# two silences this close are as long as each other
SILENCE_TIE = (0.01, 1.0)  # relative, and absolute in ms


@dataclass(slots=True)
class Arrivals:
    """What a captured body shows piece by piece: when output came (and how much
    in total by then), when keepalive comments came, and every moment bytes
    arrived (the request, the headers, each piece, the end). Times in ms from
    the request."""

    output_ms: list[float] = field(default_factory=list)
    output_chars: list[int] = field(default_factory=list)  # cumulative, per output_ms
    keepalive_ms: list[float] = field(default_factory=list)
    bytes_ms: list[float] = field(default_factory=list)


def arrivals(packed: PackedBody, endpoint: str) -> Arrivals:
    """Feed the stored pieces to a meter at their stored times and note, piece by
    piece, whether output or keepalives arrived in it."""
    body = packed.body()
    tl = packed.timeline()
    meter = StreamMeter(endpoint, start=0.0, stall_after=tl.stall_after)
    obs = meter.interpreter.obs
    out = Arrivals()
    out.bytes_ms.append(0.0)
    if tl.headers_us is not None:
        out.bytes_ms.append(tl.headers_us / 1000)
    view = memoryview(body)
    pos = 0
    for offset, length in tl.chunks:
        chars, keepalives = obs.output_chars, meter.keepalives
        meter.feed(bytes(view[pos : pos + length]), offset / 1e6)
        pos += length
        ms = offset / 1000
        if obs.output_chars > chars:
            out.output_ms.append(ms)
            out.output_chars.append(obs.output_chars)
        out.keepalive_ms.extend([ms] * (meter.keepalives - keepalives))
        out.bytes_ms.append(ms)
    out.bytes_ms.append(tl.end_us / 1000)
    return out


def keepalive_gaps(record: StreamRecord, seen: Arrivals | None) -> tuple[list[Gap], str]:
    """The keepalive gaps to shade, and their legend label: every one the body
    shows, else those the record keeps (the longest), saying of how many."""
    if seen is not None:
        gaps = [Gap("keepalive", a, b - a) for a, b in pairwise(seen.keepalive_ms)]
        return gaps, "keepalive gap"
    kept = [g for g in record.gaps if g.kind == "keepalive"]
    total = max((record.keepalives or 0) - 1, len(kept))
    if total > len(kept):
        return kept, f"keepalive gap (the {len(kept)} longest of {total})"
    return kept, "keepalive gap"


def silences(record: StreamRecord, seen: Arrivals | None) -> tuple[list[Gap], str]:
    """The silences to shade, and their legend label: the record's longest, and
    with a body every other one as long (:data:`SILENCE_TIE`)."""
    longest = [g for g in record.gaps if g.kind == "silence"]
    if not longest:
        return [], "longest silence"

    def as_long(length: float) -> bool:
        top = longest[0].length_ms
        return length >= top - max(top * SILENCE_TIE[0], SILENCE_TIE[1])

    if seen is not None and len(seen.bytes_ms) > 1:
        ties = [Gap("silence", a, b - a) for a, b in pairwise(seen.bytes_ms) if as_long(b - a)]
        if len(ties) > 1:
            return ties, f"longest silence ({len(ties)} as long)"
        return longest, "longest silence"
    if any(g.kind == "keepalive" and as_long(g.length_ms) for g in record.gaps):
        return longest, "longest silence (the first of equal ones)"
    return longest, "longest silence"


def draw(record: StreamRecord, path: Path, seen: Arrivals | None) -> None:
    """Draw ``record`` (and what its body showed, if any) to ``path``; its suffix
    chooses the format. Raises ValueError for a suffix matplotlib is not asked for."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"--plot {path}: give a .svg, .png or .pdf file")
    # Figure without pyplot: no global state, no GUI backend (works headless).
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4.8 if seen and seen.output_ms else 3.2), layout="constrained")
    if seen and seen.output_ms:
        ax, growth = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    else:
        ax, growth = fig.subplots(1, 1), None
    end = max([record.duration_ms or 0.0, *(g.start_ms + g.length_ms for g in record.gaps)])
    _timeline(ax, record, seen)
    ax.set_xlim(0, max(end, 1.0) * 1.02)
    title = f"{record.endpoint} {printable(record.model or '?')}: {record.outcome}"
    if record.stalls:
        title += f", {record.stalls} stall{'s' if record.stalls > 1 else ''}"
    # parse_math off: a model name with two dollar signs is a name, not TeX
    ax.set_title(f"{title}\n{printable(record.id or '')}", fontsize=10, parse_math=False)
    if seen is None:
        ax.text(
            0.99,
            0.02,
            "no captured body: phases and gaps only (--capture-bodies for event ticks)",
            transform=ax.transAxes,
            ha="right",
            fontsize=7,
            color="#555",
        )
    if growth is not None and seen is not None:
        _growth(growth, record, seen)
    (growth or ax).set_xlabel("ms since the request")
    # SVG: text stays text (searchable, selectable), and no creation date, so the
    # same stream draws the same file
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "recorder"}):
        fig.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None)


def _bars(ax: Any, gid: str, spans: list[tuple[float, float]], y: float, **style: Any) -> None:
    if spans:
        # a thin white edge: gaps that touch (equal keepalive gaps) stay apart
        bars = ax.broken_barh(spans, (y - 0.3, 0.6), edgecolor="white", linewidth=1.0, **style)
        bars.set_gid(gid)


def _timeline(ax: Any, record: StreamRecord, seen: Arrivals | None) -> None:
    rows = {name: n for n, name in enumerate(reversed(LANES))}
    first = record.ttft_ms
    stalls = [(g.start_ms, g.length_ms) for g in record.gaps if g.kind == "stall"]
    if record.duration_ms is not None:
        y = rows["stream"]
        wait_end = first if first is not None else record.duration_ms
        _bars(ax, "stream-waiting", [(0, wait_end)], y, facecolor=WAITING, label="waiting")
        if first is not None:
            _bars(
                ax,
                "stream-output",
                [(first, record.duration_ms - first)],
                y,
                facecolor=OUTPUT,
                label="output",
            )
            line = ax.axvline(first, color=OUTPUT, linestyle="--", linewidth=1, label="first token")
            line.set_gid("first-token")
            ax.annotate(f"first token {first:,.0f} ms", (first, y + 0.35), fontsize=8)
        # a stall is also seen on the stream itself: the stall's own mark
        _bars(ax, "stream-stall", stalls, y, facecolor=GAP_COLOURS["stall"])
        (marker,) = ax.plot(
            [record.duration_ms],
            [y],
            marker="X" if record.interrupted else "|",
            markersize=14,
            color=END_CUT if record.interrupted else "black",
            linestyle="none",
            label=f"end: {record.outcome}",
        )
        marker.set_gid("stream-end")
    _bars(ax, "stall", stalls, rows["stall"], facecolor=GAP_COLOURS["stall"], label="stall")
    kept, label = keepalive_gaps(record, seen)
    spans = [(g.start_ms, g.length_ms) for g in kept]
    _bars(
        ax,
        "keepalive-gap",
        spans,
        rows["keepalive"],
        facecolor=GAP_COLOURS["keepalive"],
        label=label,
    )
    quiet, label = silences(record, seen)
    spans = [(g.start_ms, g.length_ms) for g in quiet]
    _bars(ax, "silence", spans, rows["silence"], facecolor=GAP_COLOURS["silence"], label=label)
    if seen is not None:
        for lane, times, what in (
            ("output", seen.output_ms, "output piece"),
            ("keepalive", seen.keepalive_ms, "keepalive comment"),
        ):
            if times:
                (ticks,) = ax.eventplot(
                    [times],
                    lineoffsets=rows[lane],
                    linelengths=0.6,
                    colors=TICK_COLOURS[lane],
                    linewidths=0.8,
                    label=what,
                )
                ticks.set_gid(f"{lane}-ticks")
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_ylim(-0.6, len(LANES) - 0.4)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)


def _growth(growth: Any, record: StreamRecord, seen: Arrivals) -> None:
    (chars,) = growth.step(
        seen.output_ms,
        seen.output_chars,
        where="post",
        color=CHARS_COLOUR,
        label="output characters",
    )
    chars.set_gid("growth-characters")
    growth.set_ylabel("characters")
    handles = [chars]
    tokens = record.output_tokens
    if tokens and seen.output_chars[-1]:
        twin = growth.twinx()
        scale = tokens / seen.output_chars[-1]
        source = "estimated" if record.output_source == "estimated" else "reported"
        (spread,) = twin.step(
            seen.output_ms,
            [c * scale for c in seen.output_chars],
            where="post",
            color=TOKENS_COLOUR,
            linestyle=":",
            label=f"output tokens ({source})",
        )
        spread.set_gid("growth-tokens")
        twin.set_ylabel(f"tokens ({source}, spread over characters)", fontsize=8)
        handles.append(spread)
    growth.grid(alpha=0.3)
    growth.legend(
        handles=handles, loc="upper left", bbox_to_anchor=(1.06, 1.0), fontsize=8, frameon=False
    )
