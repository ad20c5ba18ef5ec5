"""`recorder show ID --plot FILE.svg|.png|.pdf`: a stream's timeline as a picture.

Time runs left to right from the request (0). The top lane holds the stream's
phases: waiting for the first output token, output, the end (a cross when the
stream was interrupted). Below, one lane per kind of gap the record holds
(stalls, keepalive gaps, the longest silence), shaded over their extent. A
stream whose body was captured (``--capture-bodies``) also gets a tick per
piece that carried output and per keepalive comment, each at the time it
arrived, and a second panel with the output over time (characters as they
arrived, and the record's output tokens spread over them).

Without a body the record holds no per-event times: the picture then shows
phases and gaps only, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from recorder.core.captured import PackedBody
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord

FORMATS = (".svg", ".png", ".pdf")
# one colour per kind of gap, the same in every picture
GAP_COLOURS = {"stall": "#d62728", "keepalive": "#7f7f7f", "silence": "#ff7f0e"}
LANES = ("stream", "output", "keepalive", "stall", "silence")


@dataclass(slots=True)
class Arrivals:
    """What a captured body shows piece by piece: when output came (and how much
    in total by then), when keepalive comments came. Times in ms from the request."""

    output_ms: list[float] = field(default_factory=list)
    output_chars: list[int] = field(default_factory=list)  # cumulative, per output_ms
    keepalive_ms: list[float] = field(default_factory=list)


def arrivals(packed: PackedBody, endpoint: str) -> Arrivals:
    """Feed the stored pieces to a meter at their stored times and note, piece by
    piece, whether output or keepalives arrived in it."""
    body = packed.body()
    tl = packed.timeline()
    meter = StreamMeter(endpoint, start=0.0, stall_after=tl.stall_after)
    obs = meter.interpreter.obs
    out = Arrivals()
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
    return out


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
    rows = {name: n for n, name in enumerate(reversed(LANES))}

    first = record.ttft_ms
    if record.duration_ms is not None:
        y = rows["stream"]
        wait_end = first if first is not None else record.duration_ms
        ax.broken_barh([(0, wait_end)], (y - 0.3, 0.6), color="#c7c7c7", label="waiting")
        if first is not None:
            ax.broken_barh(
                [(first, record.duration_ms - first)],
                (y - 0.3, 0.6),
                color="#2ca02c",
                label="output",
            )
            ax.axvline(first, color="#2ca02c", linestyle="--", linewidth=1)
            ax.annotate(f"first token {first:,.0f} ms", (first, y + 0.35), fontsize=8)
        ax.plot(
            [record.duration_ms],
            [y],
            marker="X" if record.interrupted else "|",
            markersize=14,
            color="#d62728" if record.interrupted else "black",
            linestyle="none",
            label=f"end: {record.outcome}",
        )
    for kind, colour in GAP_COLOURS.items():
        spans = [(g.start_ms, g.length_ms) for g in record.gaps if g.kind == kind]
        if spans:
            ax.broken_barh(
                spans,
                (rows[kind] - 0.3, 0.6),
                color=colour,
                alpha=0.8,
                label=f"{kind} gap" if kind != "stall" else "stall",
            )
            if kind == "stall":  # a stall is also seen on the stream itself
                ax.broken_barh(spans, (rows["stream"] - 0.3, 0.6), color=colour, alpha=0.5)
    if seen is not None:
        ax.eventplot(
            [seen.output_ms],
            lineoffsets=rows["output"],
            linelengths=0.6,
            colors="#1f77b4",
            linewidths=0.8,
        )
        ax.eventplot(
            [seen.keepalive_ms],
            lineoffsets=rows["keepalive"],
            linelengths=0.6,
            colors="#7f7f7f",
            linewidths=0.8,
        )
    ax.set_yticks(list(rows.values()), list(rows))
    ax.set_ylim(-0.6, len(LANES) - 0.4)
    ax.set_xlim(0, max(end, 1.0) * 1.02)
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    title = f"{record.endpoint} {record.model or '?'}: {record.outcome}"
    if record.stalls:
        title += f", {record.stalls} stall{'s' if record.stalls > 1 else ''}"
    ax.set_title(f"{title}\n{record.id}", fontsize=10)
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
        growth.step(
            seen.output_ms,
            seen.output_chars,
            where="post",
            color="#1f77b4",
            label="output characters",
        )
        growth.set_ylabel("characters")
        tokens = record.output_tokens
        if tokens and seen.output_chars[-1]:
            twin = growth.twinx()
            scale = tokens / seen.output_chars[-1]
            twin.step(
                seen.output_ms,
                [c * scale for c in seen.output_chars],
                where="post",
                color="#9467bd",
                linestyle=":",
                label="output tokens",
            )
            source = "estimated" if record.output_source == "estimated" else "reported"
            twin.set_ylabel(f"tokens ({source}, spread over characters)", fontsize=8)
        growth.grid(alpha=0.3)
    (growth or ax).set_xlabel("ms since the request")
    # SVG: text stays text (searchable, selectable), and no creation date, so the
    # same stream draws the same file
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "recorder"}):
        fig.savefig(path, format=suffix[1:], metadata={"Date": None} if suffix == ".svg" else None)
