"""`recorder show ID --plot FILE`: a stream's timeline drawn with matplotlib, from
the record alone or, when its body was captured, with every output piece and
keepalive at the time it arrived."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from recorder.cli.plot import arrivals
from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord
from recorder.store.engine import make_engine
from recorder.store.queries import get_body
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.records import simple_record

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openai-chat" / "e2aad469b71d.sse"
STALL_AFTER = 1.0


def captured(tmp_path: Path) -> tuple[str, StreamRecord]:
    """A real captured stream, its events arriving every 20 ms with a keepalive-
    filled 2.5 s silence in the middle: metered and stored as the proxy does."""
    events = FIXTURE.read_bytes().split(b"\n\n")
    pieces: list[tuple[float, bytes]] = []
    now = 0.2
    for n, event in enumerate(e for e in events if e.strip()):
        if n == 3:
            for _ in range(5):
                now += 0.5
                pieces.append((now, b": keepalive\n\n"))
        now += 0.02
        pieces.append((now, event + b"\n\n"))
    url = f"sqlite:///{tmp_path / 'plot.db'}"
    meter = StreamMeter(
        "chat.completions", start=0.0, stall_after=STALL_AFTER, record=CapturedRecord()
    )
    body = CapturedBody(0.0, 0.1, stall_after=STALL_AFTER)
    meter.headers(0.1, 200)
    for t, data in pieces:
        meter.feed(data, t)
        body.add(data, t)
    body.end(now + 0.01, "eof")
    rec = meter.finish(now + 0.01)
    rec.id = simple_record().id
    rec.model = "gpt-4o"
    rec.started_at = "2026-02-01T00:00:00.000Z"
    rec.events, rec.keepalives = meter.events, meter.keepalives
    rec.body = body  # type: ignore[attr-defined]
    sink = SqlSink(url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    return url, rec


def test_arrivals_are_the_pieces_as_metered(tmp_path: Path) -> None:
    url, rec = captured(tmp_path)
    engine = make_engine(url)
    try:
        stored, packed = get_body(engine, rec.id or "")
    finally:
        engine.dispose()
    seen = arrivals(packed, "chat.completions")
    assert len(seen.keepalive_ms) == rec.keepalives == 5
    assert seen.output_chars[-1] == rec.output_chars
    assert seen.output_ms == sorted(seen.output_ms) and len(seen.output_ms) >= 3
    # the stall the record holds lies between two output ticks, with no tick inside
    (stall,) = [g for g in stored.gaps if g.kind == "stall"]
    inside = [t for t in seen.output_ms if stall.start_ms < t < stall.start_ms + stall.length_ms]
    assert inside == []
    assert any(abs(t - stall.start_ms) < 1 for t in seen.output_ms)


def _svg_text(path: Path) -> str:
    root = ET.parse(path).getroot()  # a well-formed SVG document
    assert root.tag.endswith("svg")
    return " ".join(t for t in root.itertext() if t.strip())


def test_plot_with_a_captured_body(tmp_path: Path, cli: Cli) -> None:
    url, rec = captured(tmp_path)
    out = tmp_path / "stream.svg"
    ran = cli("show", (rec.id or "")[-12:], "--db", url, "--plot", str(out))
    assert ran.code == 0
    assert "with its events" in ran.err
    svg = out.read_text()
    assert "chat.completions gpt-4o: completed, 1 stall" in svg
    assert rec.id in svg and "first token" in svg
    assert "characters" in svg and "tokens (reported, spread over characters)" in svg
    png = tmp_path / "stream.png"
    assert cli("show", rec.id or "", "--db", url, "--plot", str(png)).code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the same stream draws the same SVG (no date in it)
    again = tmp_path / "again.svg"
    assert cli("show", rec.id or "", "--db", url, "--plot", str(again)).code == 0
    assert again.read_bytes() == out.read_bytes()


def test_plot_from_the_record_alone(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    rec = simple_record(1, outcome="upstream_disconnect", interrupted=True)
    sink = SqlSink(url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    out = tmp_path / "r.svg"
    ran = cli("show", rec.id or "", "--db", url, "--plot", str(out))
    assert ran.code == 0
    assert "no captured body" in ran.err
    text = _svg_text(out)
    assert "upstream_disconnect" in text and "no captured body" in text


def test_plot_refuses_an_unknown_format(tmp_path: Path, cli: Cli) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    rec = simple_record(1)
    sink = SqlSink(url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    ran = cli("show", rec.id or "", "--db", url, "--plot", str(tmp_path / "x.gif"))
    assert ran.code == 2
    err = ran.err
    assert err == f"recorder show: --plot {tmp_path / 'x.gif'}: give a .svg, .png or .pdf file\n"
    assert not (tmp_path / "x.gif").exists()


# -- the picture read back: every mark named, every gap drawn alike ------------------

SVG = "{http://www.w3.org/2000/svg}"
HREF = "{http://www.w3.org/1999/xlink}href"
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def keepalive_stall(tmp_path: Path, *, with_body: bool) -> tuple[str, StreamRecord]:
    """A real captured stream that stalls 87 s after its first output, filled with
    a keepalive comment every 3 s (29 comments, 28 equal gaps), then resumes:
    stored with its body, or as the record alone."""
    events = [e for e in FIXTURE.read_bytes().split(b"\n\n") if e.strip()]
    pieces: list[tuple[float, bytes]] = []
    now = 0.2
    for n, event in enumerate(events):
        if n == 3:
            for _ in range(29):
                now += 3.0
                pieces.append((now, b": keepalive\n\n"))
        now += 0.02
        pieces.append((now, event + b"\n\n"))
    meter = StreamMeter("chat.completions", start=0.0, stall_after=30.0, record=CapturedRecord())
    body = CapturedBody(0.0, 0.1, stall_after=30.0)
    meter.headers(0.1, 200)
    for t, data in pieces:
        meter.feed(data, t)
        body.add(data, t)
    body.end(now + 0.01, "eof")
    rec = meter.finish(now + 0.01)
    rec.id = simple_record(2).id
    rec.model = "gpt-4o"
    rec.started_at = "2026-02-01T00:00:00.000Z"
    if with_body:
        rec.body = body  # type: ignore[attr-defined]
    url = f"sqlite:///{tmp_path / 'ka.db'}"
    sink = SqlSink(url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    return url, rec


@dataclass
class Mark:
    """One drawn element: how it is painted, its extent in the picture."""

    group: str
    paint: tuple[str, ...]
    width: float
    height: float


@dataclass
class Picture:
    marks: list[Mark]
    legend: dict[str, tuple[str, ...]]  # label -> how its handle is painted

    def named(self, label: str) -> list[Mark]:
        """The marks painted as the legend entry whose label starts with ``label``."""
        (paint,) = [p for text, p in self.legend.items() if text.startswith(label)]
        return [m for m in self.marks if m.paint == paint]


def _paint(style: str) -> tuple[str, ...]:
    props = dict(
        (k.strip(), v.strip()) for k, _, v in (p.partition(":") for p in style.split(";")) if k
    )
    if props.get("fill", "none") != "none":
        return ("fill", props["fill"], props.get("fill-opacity", "1"), props.get("opacity", "1"))
    return (
        "stroke",
        props.get("stroke", "none"),
        props.get("stroke-opacity", "1"),
        props.get("opacity", "1"),
        props.get("stroke-dasharray", ""),
    )


def _extent(d: str) -> tuple[float, float]:
    numbers = [float(n) for n in NUMBER.findall(d)]
    xs, ys = numbers[0::2], numbers[1::2]
    return max(xs) - min(xs), max(ys) - min(ys)


def read_picture(path: Path) -> Picture:
    """Every mark of every panel (not the axes, ticks, spines and texts), and
    every legend entry, as the SVG file holds them."""
    root = ET.parse(path).getroot()
    defs = {el.get("id"): el for el in root.iter(f"{SVG}path") if el.get("id")}

    def drawn(group: ET.Element) -> list[tuple[tuple[str, ...], float, float]]:
        out = []
        for el in group.iter():
            if el.tag == f"{SVG}path" and not el.get("id"):
                out.append((_paint(el.get("style", "")), *_extent(el.get("d", ""))))
            elif el.tag == f"{SVG}use":
                shape = defs[el.get(HREF, "").lstrip("#")]
                style = shape.get("style", "") + ";" + el.get("style", "")
                out.append((_paint(style), *_extent(shape.get("d", ""))))
        return out

    marks: list[Mark] = []
    legend: dict[str, tuple[str, ...]] = {}
    for axes in root.iter(f"{SVG}g"):
        if not (axes.get("id") or "").startswith("axes_"):
            continue
        for child in axes.findall(f"{SVG}g"):
            gid = child.get("id") or ""
            if gid.startswith(("patch_", "matplotlib.axis", "text_")):
                continue  # the panel's background and spines, ticks, texts
            if gid.startswith("legend"):
                entries = child.findall(f"{SVG}g")
                for handle, text in zip(entries[::2], entries[1::2], strict=True):
                    label = "".join(text.itertext()).strip()
                    (paint,) = {p for p, _, _ in drawn(handle)}
                    legend[label] = paint
                continue
            marks += [Mark(gid, p, w, h) for p, w, h in drawn(child)]
    return Picture(marks, legend)


def _draw(tmp_path: Path, cli: Cli, with_body: bool) -> tuple[StreamRecord, Picture]:
    url, rec = keepalive_stall(tmp_path, with_body=with_body)
    out = tmp_path / "ka.svg"
    ran = cli("show", rec.id or "", "--db", url, "--plot", str(out))
    assert ran.code == 0, ran.err
    assert ("with its events" in ran.err) is with_body
    return rec, read_picture(out)


def test_every_mark_is_named_in_the_legend(tmp_path: Path, cli: Cli) -> None:
    """Whatever is drawn, with or without a body, is painted as a legend entry is:
    no colour of its own, no blend of two (a stall laid over the output bar)."""
    for with_body in (False, True):
        (tmp_path / str(with_body)).mkdir()
        _, picture = _draw(tmp_path / str(with_body), cli, with_body)
        unnamed = {m.paint for m in picture.marks} - set(picture.legend.values())
        assert not unnamed, (with_body, unnamed, picture.legend)
        assert {"waiting", "output", "first token", "stall"} <= set(picture.legend)
        if with_body:
            assert {"output piece", "keepalive comment", "output characters"} <= set(picture.legend)


def test_every_keepalive_gap_is_shaded_and_alike(tmp_path: Path, cli: Cli) -> None:
    """With the body: every interval between two keepalive comments, as many as
    the record counts, drawn alike; the equally long silences too, all of them."""
    rec, picture = _draw(tmp_path, cli, with_body=True)
    gaps = picture.named("keepalive gap")
    assert rec.keepalives == 29 and len(gaps) == rec.keepalives - 1 == 28
    widths = [m.width for m in gaps]
    assert max(widths) - min(widths) < 0.01 * max(widths)  # equal gaps, equal bars
    assert len({m.height for m in gaps}) == 1
    # the longest silence is 3 s, and so is every gap between two keepalives (and
    # the first output to the first keepalive): each is marked, alike
    quiet = picture.named("longest silence")
    assert len(quiet) == 29
    assert max(m.width for m in quiet) - min(m.width for m in quiet) < 0.01 * widths[0]
    (label,) = [t for t in picture.legend if t.startswith("longest silence")]
    assert label == "longest silence (29 as long)"


def test_without_a_body_the_kept_gaps_are_shaded_and_the_legend_says_which(
    tmp_path: Path, cli: Cli
) -> None:
    """The record keeps the longest 5 keepalive gaps: those are shaded, each the
    record's, and the legend says of how many; its one silence is the first of
    equal ones, and the legend says that too."""
    rec, picture = _draw(tmp_path, cli, with_body=False)
    kept = [g for g in rec.gaps if g.kind == "keepalive"]
    gaps = picture.named("keepalive gap")
    assert len(gaps) == len(kept) == 5
    assert f"keepalive gap (the 5 longest of {rec.keepalives - 1})" in picture.legend
    assert len(picture.named("longest silence")) == 1
    assert "longest silence (the first of equal ones)" in picture.legend


def test_wire_values_in_the_picture_are_escaped(tmp_path: Path, cli: Cli) -> None:
    """A model name is whatever the request said: control characters are shown
    escaped, and dollar signs are not read as TeX."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    rec = simple_record(1)
    rec.model = "gpt-4o\x1b[31m\nred$x^2$"
    sink = SqlSink(url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    out = tmp_path / "r.svg"
    ran = cli("show", rec.id or "", "--db", url, "--plot", str(out))
    assert ran.code == 0, ran.err
    text = _svg_text(out)
    assert "gpt-4o\\x1b[31m\\nred$x^2$" in text  # (as every text surface shows it)
    assert "\x1b" not in out.read_text()
