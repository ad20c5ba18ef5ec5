"""Coverage-guided fuzzing of the SSE framer and the three stream meters (atheris).

Not part of CI, not a dependency of the project (atheris is not in pyproject.toml):
a standalone script for an occasional longer hunt than the hypothesis tests of
tests/core/test_fuzz.py. atheris 3.1.0 ships manylinux wheels for CPython 3.12 and
3.13; it runs in a throwaway venv with the repository on its path (tried on 3.12.1:
about 1,070 executions a second on one core):

    /root/.pyenv/versions/3.12.1/bin/python -m venv /tmp/atheris-venv
    /tmp/atheris-venv/bin/pip install atheris orjson
    PYTHONPATH=. /tmp/atheris-venv/bin/python bench/fuzz_atheris.py \\
        -max_total_time=60 -rss_limit_mb=2048 [corpus_dir]

Any libFuzzer flag may follow (``-runs=N``, ``-max_len=N``, ``-jobs=N``...). The
seed corpus is every capture in tests/fixtures (framed as the wire carries it),
added to ``corpus_dir`` if one is given, else used in memory.

One input is: a header byte choosing the endpoint (chat.completions, responses,
messages), one choosing the event cap (16 B to 4 MiB, so the skipping of
oversized events is reached), a few bytes of cut points, then the body. Each
input is checked for what the core promises:

- the framer never raises, reports only ``oversized_event`` / ``unterminated_event``,
  and never holds more than the cap (``pending_bytes``); its items are the same
  whatever the chunking (but, once an event was skipped, the sizes of issues,
  which by design depend on how much had arrived when the cap was passed);
- the meter never raises, through ``finish()`` and ``to_dict()``; the outcome is
  one of the documented values; and the record is the same whether the body
  came whole or in the pieces the cut points make.

A violated promise raises AssertionError, which atheris reports with the input
that caused it (saved as ``crash-*``; replay with ``bench/fuzz_atheris.py crash-...``).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from recorder.core.framing import Event, FramingIssue
    from recorder.core.meter import StreamMeter
    from recorder.core.record import OUTCOMES
    from recorder.core.sse import SSEFramer

ROOT = Path(__file__).resolve().parents[1]
ENDPOINTS = ("chat.completions", "responses", "messages")
CAPS = (16, 64, 256, 1024, 4096, 65536, 4 * 1024 * 1024)
ISSUES = {"oversized_event", "unterminated_event"}


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(min(c, len(body)) for c in cuts), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(bounds)]


def frame(body: list[bytes], cap: int) -> list[object]:
    framer = SSEFramer(cap)
    items: list[object] = []
    for piece in body:
        if piece:
            items += framer.feed(piece)
            assert framer.pending_bytes <= max(cap, 2), (framer.pending_bytes, cap)
    items += framer.feed(b"")
    skipped = False
    for item in items:
        if isinstance(item, FramingIssue):
            assert item.kind in ISSUES, item
            if item.kind == "oversized_event":
                assert item.size > cap, (item, cap)
                skipped = True
        elif isinstance(item, Event):
            assert b"\r" not in item.data
    if skipped:
        # an oversized event is reported on crossing the cap, its size "at least the
        # cap": issue sizes then depend on the chunking by design, so are not compared
        items = [FramingIssue(i.kind, -1) if isinstance(i, FramingIssue) else i for i in items]
    return items


def meter(endpoint: str, pieces: list[bytes], cap: int) -> dict[str, object]:
    m = StreamMeter(endpoint, start=0.0, stall_after=1.0, max_event_bytes=cap)
    m.headers(0.25, 200)
    for piece in pieces:
        m.feed(piece, 1.0)
    record = m.finish(2.5).to_dict(with_gaps=True)
    assert record["outcome"] in OUTCOMES, record["outcome"]
    return record


def test_one_input(data: bytes) -> None:
    if len(data) < 4:
        return
    endpoint = ENDPOINTS[data[0] % 3]
    cap = CAPS[data[1] % len(CAPS)]
    ncuts = data[2] % 8
    header = 3 + ncuts
    body = data[header:]
    cuts = [b * max(1, len(body) // 255) for b in data[3:header]]
    pieces = split(body, cuts)
    assert frame(pieces, cap) == frame([body], cap)
    assert meter(endpoint, pieces, cap) == meter(endpoint, [body], cap)


def seeds() -> list[bytes]:
    sys.path.insert(0, str(ROOT / "tests" / "kit"))
    import framing  # tests/kit/framing.py: the fixtures as the wire carries them

    out = []
    for path in framing.fixture_files():
        endpoint = framing.endpoint_for(path)
        out.append(bytes([ENDPOINTS.index(endpoint), len(CAPS) - 1, 0]) + framing.load_body(path))
    return out


def main() -> None:
    argv = list(sys.argv)
    dirs = [a for a in argv[1:] if not a.startswith("-")]
    if dirs and Path(dirs[0]).is_dir():
        corpus = Path(dirs[0])
        for i, seed in enumerate(seeds()):
            (corpus / f"seed-{i:03d}").write_bytes(seed)
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
