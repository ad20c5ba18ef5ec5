"""Optional capture of SSE response bodies (``--capture-bodies``), and their re-metering.

Theory of operation. A response body holds the completion text, so nothing is
kept unless the user asks; request bodies (the prompts) are never kept. With
capture on, the addon's stream tap hands every piece the meter sees (the
content-DECODED bytes: what an upstream compressed is stored plain, so a replay
needs no decoder) to :meth:`CapturedBody.add` with its arrival time: two
appends and a size check on the event loop, nothing else. Past ``limit`` bytes
(``--capture-max-bytes``, 8 MiB by default) pieces are no longer kept but still
counted, and the body is marked ``truncated``. With capture off, the tap is the
plain one: no added work per piece.

The body travels to the sink on the record itself (:class:`CapturedRecord`, a
``StreamRecord`` with one attribute more, which is not a field: it is never
printed, exported or made a column of ``streams``). The SQL writer packs it on
its own thread (:meth:`CapturedBody.pack`: one ``b"".join`` and zstd, which
releases the GIL while it compresses) and inserts it in the same transaction as
its record; a spool line carries the packed body too (``PackedBody.to_doc``),
so a database outage loses no body.

What is stored (one ``stream_bodies`` row, see docs/storage.md):

- ``body``: the captured bytes, compressed (``encoding``: ``zstd``);
- ``timings``: the transport's timeline, compressed the same way, a JSON object
  ``{"v": 1, "unit": "us", "headers": H, "end": E, "ending": "eof",
  "stall_after": 30.0, "max_event_bytes": N, "chunks": [[offset, length], ...]}``
  with every offset in integer microseconds from the request start: when the
  headers came, when each captured piece came and how long it was, when and how
  the body ended, and the meter settings that judged it;
- ``size``: the bytes the meter saw in all (beyond the cap too), ``truncated``.

:func:`remeter` feeds a stored body through a fresh ``StreamMeter`` at the
stored times (the request start is 0), so outcome, events, keepalives, stalls,
usage and timings come out as the proxy measured them (timings to the
microsecond the timeline keeps).
"""

from __future__ import annotations

import base64
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from recorder.core.billing import complete_usage, input_tokenizer
from recorder.core.counts import InputCounts
from recorder.core.errors import RecorderError
from recorder.core.keys import KeyMask
from recorder.core.meter import DEFAULT_STALL_AFTER_S, ENDINGS, StreamMeter
from recorder.core.pricing import PriceTable
from recorder.core.record import StreamRecord
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES

try:  # the same zstd mitmproxy itself uses
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # Python < 3.14
    from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]

DEFAULT_CAPTURE_MAX_BYTES = 8 * 1024 * 1024
ENCODING = "zstd"
ENCODINGS = ("zstd", "zlib", "identity")  # what can be read back
TIMELINE_VERSION = 1
ZSTD_LEVEL = 3


class BodyFormatError(RecorderError, ValueError):
    """A stored body or timeline that cannot be read back."""


def compress(data: bytes, encoding: str = ENCODING) -> bytes:
    """``data`` compressed with ``encoding``."""
    if encoding == "zstd":
        return bytes(zstd.compress(data, ZSTD_LEVEL))
    if encoding == "zlib":
        return zlib.compress(data)
    if encoding == "identity":
        return data
    raise BodyFormatError(f"unknown body encoding {encoding!r}")


def decompress(data: bytes, encoding: str) -> bytes:
    """``data`` back from ``encoding``. Raises BodyFormatError."""
    try:
        if encoding == "zstd":
            return bytes(zstd.decompress(data))
        if encoding == "zlib":
            return zlib.decompress(data)
        if encoding == "identity":
            return bytes(data)
    except Exception as e:  # zstd.ZstdError, zlib.error
        raise BodyFormatError(f"cannot decompress a {encoding} body: {e}") from e
    raise BodyFormatError(f"unknown body encoding {encoding!r}")


@dataclass(slots=True, frozen=True)
class Timeline:
    """How a captured body arrived: offsets in microseconds from the request start."""

    headers_us: int | None
    end_us: int
    ending: str
    stall_after: float
    max_event_bytes: int
    chunks: list[tuple[int, int]]  # (offset, length) of every captured piece

    def to_json(self) -> bytes:
        """The stored (uncompressed) form."""
        return orjson.dumps(
            {
                "v": TIMELINE_VERSION,
                "unit": "us",
                "headers": self.headers_us,
                "end": self.end_us,
                "ending": self.ending,
                "stall_after": self.stall_after,
                "max_event_bytes": self.max_event_bytes,
                "chunks": self.chunks,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Timeline:
        """A timeline from its stored form. Raises BodyFormatError."""
        try:
            doc = orjson.loads(data)
            if doc.get("v") != TIMELINE_VERSION or doc.get("unit") != "us":
                raise ValueError(f"unknown timeline version {doc.get('v')!r}")
            headers = doc["headers"]
            return cls(
                headers_us=None if headers is None else int(headers),
                end_us=int(doc["end"]),
                ending=str(doc["ending"]),
                stall_after=float(doc["stall_after"]),
                max_event_bytes=int(doc["max_event_bytes"]),
                chunks=[(int(o), int(n)) for o, n in doc["chunks"]],
            )
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as e:
            raise BodyFormatError(f"unreadable timeline: {e}") from e


@dataclass(slots=True, frozen=True)
class PackedBody:
    """A body as stored: one ``stream_bodies`` row without its stream id."""

    encoding: str
    data: bytes = field(repr=False)
    timings: bytes = field(repr=False)
    size: int  # bytes the meter saw in all, beyond the cap too
    truncated: bool

    @property
    def queued_bytes(self) -> int:
        """Memory it holds while waiting to be written."""
        return len(self.data) + len(self.timings)

    def pack(self) -> PackedBody:
        """Itself (a body read back from the spool is packed already)."""
        return self

    def body(self) -> bytes:
        """The captured bytes. Raises BodyFormatError."""
        return decompress(self.data, self.encoding)

    def timeline(self) -> Timeline:
        """The arrival times. Raises BodyFormatError."""
        return Timeline.from_json(decompress(self.timings, self.encoding))

    def to_doc(self) -> dict[str, Any]:
        """The spool's JSON form (bytes as base64)."""
        return {
            "encoding": self.encoding,
            "data": base64.b64encode(self.data).decode("ascii"),
            "timings": base64.b64encode(self.timings).decode("ascii"),
            "size": self.size,
            "truncated": self.truncated,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> PackedBody:
        """A body back from its spool form. Raises BodyFormatError."""
        try:
            encoding = str(doc["encoding"])
            if encoding not in ENCODINGS:
                raise ValueError(f"unknown encoding {encoding!r}")
            return cls(
                encoding=encoding,
                data=base64.b64decode(doc["data"], validate=True),
                timings=base64.b64decode(doc["timings"], validate=True),
                size=int(doc["size"]),
                truncated=bool(doc["truncated"]),
            )
        except (KeyError, TypeError, ValueError) as e:  # binascii.Error is a ValueError
            raise BodyFormatError(f"unreadable spooled body: {e}") from e


class CapturedBody:
    """The pieces of one body as the meter saw them, with their arrival times.

    Filled on the event loop (``add``), ended by the addon (``end``), packed once
    on the writer's thread (``pack``), after which the pieces are let go.
    """

    __slots__ = (
        "_packed",
        "chunks",
        "end_at",
        "ending",
        "headers_at",
        "limit",
        "mask",
        "max_event_bytes",
        "size",
        "stall_after",
        "t0",
        "times",
        "truncated",
    )

    def __init__(
        self,
        t0: float,
        headers_at: float | None,
        *,
        limit: int = DEFAULT_CAPTURE_MAX_BYTES,
        stall_after: float = DEFAULT_STALL_AFTER_S,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        mask: KeyMask | None = None,
    ) -> None:
        self.t0 = t0
        self.mask = mask  # the request's credentials: masked (same length) when packed
        self.headers_at = headers_at
        self.limit = limit
        self.stall_after = stall_after
        self.max_event_bytes = max_event_bytes
        self.chunks: list[bytes] = []
        self.times = array("d")
        self.size = 0
        self.truncated = False
        self.end_at: float | None = None
        self.ending = "eof"
        self._packed: PackedBody | None = None

    def add(self, data: bytes, now: float) -> None:
        """One piece the meter saw, at ``now`` (runs on the event loop: keep it lean)."""
        size = self.size + len(data)
        self.size = size
        if size <= self.limit:
            self.chunks.append(data)
            self.times.append(now)
        else:
            self.truncated = True

    def end(self, now: float, ending: str, *, damaged: bool = False) -> None:
        """The body ended at ``now`` (``eof`` or a disconnect); ``damaged``: the tap
        gave up on the stream, so what was kept is not the whole body."""
        self.end_at = now
        self.ending = ending if ending in ENDINGS else "upstream_disconnect"
        if damaged:
            self.truncated = True

    @property
    def queued_bytes(self) -> int:
        """Memory the pieces hold while waiting to be written (fixed once ended)."""
        return min(self.size, self.limit)

    def timeline(self) -> Timeline:
        """The arrival times, as stored."""
        t0 = self.t0
        offsets = [round((t - t0) * 1e6) for t in self.times]
        lengths = [len(c) for c in self.chunks]
        end = self.end_at
        if end is None:  # never ended (a bug upstream): the last piece is the end
            end = self.times[-1] if self.times else (self.headers_at or t0)
        return Timeline(
            headers_us=None if self.headers_at is None else round((self.headers_at - t0) * 1e6),
            end_us=round((end - t0) * 1e6),
            ending=self.ending,
            stall_after=self.stall_after,
            max_event_bytes=self.max_event_bytes,
            chunks=list(zip(offsets, lengths, strict=True)),
        )

    def pack(self) -> PackedBody:
        """Compress the body and its timeline (once; off the event loop)."""
        packed = self._packed
        if packed is None:
            # masked over the whole body, so an echo split across pieces is masked
            # whole; a body cut (at the cap, or by a disconnect) also loses a key's
            # start that ends it
            data = b"".join(self.chunks)
            if self.mask is not None:
                cut = self.truncated or self.ending != "eof"
                data = self.mask.mask_bytes(data, cut=cut)
            self.mask = None
            timings = self.timeline().to_json()
            packed = PackedBody(
                encoding=ENCODING,
                data=compress(data),
                timings=compress(timings),
                size=self.size,
                truncated=self.truncated,
            )
            self._packed = packed
            self.chunks = []  # let the pieces go: the packed form is all that is needed
            self.times = array("d")
        return packed


@dataclass(slots=True)
class CapturedRecord(StreamRecord):
    """A record carrying its captured body to the sink. ``body`` is not a record
    field: ``to_dict``, the JSON lines and the ``streams`` columns never see it."""

    body: CapturedBody | PackedBody | None = field(default=None, repr=False)


def body_of(record: StreamRecord) -> CapturedBody | PackedBody | None:
    """The body a record carries, if any."""
    return getattr(record, "body", None)


# Facts of the request and the transport, which the body does not hold: copied
# from the stored record so the replayed one is comparable field for field.
_CARRIED = (
    "id",
    "started_at",
    "upstream",
    "model",
    "request_id",
    "project",
    "api_key_id",
    "organization",
    "include_usage",
    "max_output_tokens",
    "requested_tier",
    # attribution and the retry chain: read from the request, or resolved by the proxy
    "user_id",
    "session_id",
    "prompt_cache_key",
    "tags",
    "request_fingerprint",
    "retry_of",
    "attempt",
)


def remeter(
    packed: PackedBody,
    stored: StreamRecord,
    *,
    prices: PriceTable | None = None,
    stall_after: float | None = None,
) -> StreamRecord:
    """Meter a stored body again, each piece at its stored offset (the request
    start is 0), and complete it for billing as the proxy did.

    ``stored`` is the record the proxy wrote: its endpoint picks the protocol, and
    what a body cannot tell (the request's facts, the HTTP status, the transport's
    words for an ending) is taken from it. Input usage that was estimated is
    estimated again from its ``input_breakdown`` (counts, never text).
    ``stall_after`` overrides the threshold the proxy used. Raises
    BodyFormatError for a body that cannot be read back.
    """
    endpoint = stored.endpoint
    if endpoint is None:
        raise BodyFormatError("the stored record has no endpoint")
    body = packed.body()
    tl = packed.timeline()
    rec = StreamRecord(**{name: getattr(stored, name) for name in _CARRIED})
    meter = StreamMeter(
        endpoint,
        start=0.0,
        stall_after=tl.stall_after if stall_after is None else stall_after,
        max_event_bytes=tl.max_event_bytes,
        record=rec,
    )
    rec.provider = stored.provider or rec.provider  # (Vertex AI's path said it)
    if tl.headers_us is not None:
        meter.headers(tl.headers_us / 1e6, stored.http_status)
    else:
        rec.http_status = stored.http_status
    view = memoryview(body)
    pos = 0
    for offset, length in tl.chunks:
        meter.feed(bytes(view[pos : pos + length]), offset / 1e6)
        pos += length
    if pos != len(body):
        raise BodyFormatError(f"the timeline covers {pos} bytes, the body holds {len(body)}")
    out = meter.finish(tl.end_us / 1e6, ending=tl.ending, transport_error=stored.transport_error)
    counts = None
    if stored.input_breakdown is not None:
        counts = InputCounts.from_breakdown(stored.input_breakdown)
        if counts.text_tokens is not None:  # the count's tokenizer, as the proxy named it
            counts.encoding = input_tokenizer(stored.estimate_method)
    complete_usage(out, meter.interpreter.obs, counts, prices, None, learn=False)
    return out
