"""A hostile upstream costs bounded memory and nobody else's time, through the real
`recorder proxy`: a decompression bomb of each encoding, a JSON answer far larger
than any LLM's. The client gets every byte as it comes; the proxy's peak memory
stays bounded (it grew by gigabytes before); another stream at the same time is
never held back; the record says what was not metered and why."""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import brotli
import orjson
import pytest

from recorder.proxy.decoding import zstd
from tests.kit.databases import sqlite_stream_rows
from tests.kit.lockstep import Lockstep, fetch, lockstep
from tests.kit.processes import start_proxy, stop

pytestmark = pytest.mark.slow

MIB = 1 << 20
BOMB_MIB = 512  # decoded; a few KiB to half a MiB encoded
# what the proxy may grow to while a bomb or a huge body passes (it grew by 4 GiB)
PEAK_BOUND_MIB = 700


def _bomb(
    compressor: object, process: Callable[[bytes], bytes], finish: Callable[[], bytes]
) -> bytes:
    chunk = b"a" * MIB
    out = [process(b"data: ")]
    out += [process(chunk) for _ in range(BOMB_MIB)]
    out.append(finish())
    return b"".join(out)


def gzip_bomb() -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    return _bomb(c, c.compress, c.flush)


def br_bomb() -> bytes:
    c = brotli.Compressor(quality=5)
    return _bomb(c, c.process, c.finish)


def zstd_bomb() -> bytes:
    c = zstd.ZstdCompressor(level=3)
    return _bomb(c, c.compress, c.flush)


BOMBS = {"gzip": gzip_bomb, "br": br_bomb, "zstd": zstd_bomb}


def memory_mib(pid: int) -> tuple[float, float]:
    """(peak, now) resident memory of process ``pid``, MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value
    return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024


@pytest.fixture(scope="module")
def upstream() -> Iterator[Lockstep]:
    with lockstep() as server:
        yield server


def _records(db: Path, want: int) -> list[sqlite3.Row]:
    rows = sqlite_stream_rows(db, want, timeout=30)
    assert len(rows) >= want
    return rows


def _alongside(port: int, upstream: Lockstep) -> tuple[threading.Thread, list[bool]]:
    """Another chat stream at the same time, in lockstep: whether it was held back."""
    pieces = [b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'] * 20
    pieces.append(b"data: [DONE]\n\n")
    held: list[bool] = []

    def run() -> None:
        path = "/v1/chat/completions?alongside=1"
        reply = upstream.respond(pieces, "text/event-stream", path=path)
        fetch(port, path, reply)
        held.append(reply.held_back)

    thread = threading.Thread(target=run)
    return thread, held


@pytest.mark.parametrize("encoding", list(BOMBS))
def test_a_decompression_bomb_costs_bounded_memory_and_nobody_elses_time(
    upstream: Lockstep, tmp_path: Path, encoding: str
) -> None:
    bomb = BOMBS[encoding]()
    assert len(bomb) < BOMB_MIB * MIB // 500
    pieces = [bomb[i : i + 16 * 1024] for i in range(0, len(bomb), 16 * 1024)]
    proc, port, _, _ = start_proxy(tmp_path, upstream)  # type: ignore[arg-type]
    try:
        before, _ = memory_mib(proc.pid)
        other, held = _alongside(port, upstream)
        reply = upstream.respond(
            pieces,
            "text/event-stream",
            headers=[("content-encoding", encoding)],
            path="/v1/chat/completions",
        )
        other.start()
        got = fetch(port, "/v1/chat/completions", reply, orjson.dumps({"model": "gpt-4o"}))
        other.join(60)
        assert got == bomb  # the client gets the compressed bytes, untouched
        assert not reply.held_back and held == [False]
        records = _records(tmp_path / "recorder.db", 2)
        peak, _ = memory_mib(proc.pid)
    finally:
        stop(proc)
    assert peak - before < PEAK_BOUND_MIB, (before, peak)
    errors = [r["recorder_error"] for r in records]
    assert errors.count(None) == 1  # the other stream, metered as ever
    (said,) = [e for e in errors if e is not None]
    assert said.startswith("events not metered: the body decodes to more than")


def test_a_huge_json_answer_streams_and_its_memory_comes_back(
    upstream: Lockstep, tmp_path: Path
) -> None:
    piece = b"a" * MIB  # a string of 200 MiB in an answer
    body = [b'{"id":"x","object":"chat.completion","choices":[],"pad":"', *[piece] * 200, b'"}']
    proc, port, _, _ = start_proxy(tmp_path, upstream)  # type: ignore[arg-type]
    try:
        before, _ = memory_mib(proc.pid)
        reply = upstream.respond(body, "application/json", sized=True)
        got = fetch(port, "/v1/chat/completions", reply, orjson.dumps({"model": "gpt-4o"}))
        assert len(got) == sum(map(len, body)) and not reply.held_back
        (rec,) = _records(tmp_path / "recorder.db", 1)
        peak, now = memory_mib(proc.pid)
    finally:
        stop(proc)
    assert peak - before < PEAK_BOUND_MIB, (before, peak)
    assert now - before < 100, (before, now)  # and it comes back
    assert "over 16 MiB" in (rec["recorder_error"] or "")
