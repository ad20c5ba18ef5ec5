"""`recorder show ID --plot FILE`: a stream's timeline drawn with matplotlib, from
the record alone or, when its body was captured, with every output piece and
keepalive at the time it arrived."""

from __future__ import annotations

import xml.etree.ElementTree as ET
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
