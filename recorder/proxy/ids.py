"""Record ids: time-ordered (UUIDv7 layout), so ids sort by creation time; and the
record's start stamp, from the same clock reading.

Both run once per request on the event loop, so they avoid what made them dear
there: ``os.urandom`` is a system call that lets go of the GIL (the writer and
console threads then take it, and the loop waits for it back, up to a switch
interval): random bytes are read for 256 ids at a time. ``uuid.UUID`` validates and
converts in Python: the text is formatted directly (the same text). The start
stamp's date and time of day are formatted once per second.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime

_RANDOM_BYTES = 10  # 80 random bits per id, of which the version and variant take 6
_BATCH = 256
_lock = threading.Lock()
_pool = b""
_at = 0
# the start stamp's "YYYY-MM-DDTHH:MM:SS" for one Unix second (one tuple: read and
# replaced whole, so that no thread sees one second's text with another's number)
_stamp = (-1, "")


def _reset_after_fork() -> None:
    # a child must not hand out the random bits its parent also holds
    global _pool, _at, _lock
    _lock = threading.Lock()
    _pool, _at = b"", 0


os.register_at_fork(after_in_child=_reset_after_fork)


def _random_bits() -> int:
    """80 bits from ``os.urandom``, read in batches."""
    global _pool, _at
    with _lock:
        at = _at
        if at + _RANDOM_BYTES > len(_pool):
            _pool, at = os.urandom(_RANDOM_BYTES * _BATCH), 0
        _at = at + _RANDOM_BYTES
        return int.from_bytes(_pool[at : at + _RANDOM_BYTES], "big")


def _uuid7(ms: int) -> str:
    value = (ms & ((1 << 48) - 1)) << 80 | _random_bits()
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    h = f"{value:032x}"  # str(uuid.UUID(int=value)), without its checks
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_record_id() -> str:
    """A UUIDv7: 48 bits of Unix milliseconds, then random bits."""
    return _uuid7(time.time_ns() // 1_000_000)


def started_at_text(ms: int) -> str:
    """Unix milliseconds as a record's ``started_at``: ``2026-12-01T17:03:13.042Z``
    (what ``datetime.now(UTC).isoformat(timespec="milliseconds")`` gives, with Z)."""
    global _stamp
    second, milli = divmod(ms, 1000)
    cached, text = _stamp
    if second != cached:
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _stamp = (second, text)
    return f"{text}.{milli:03d}Z"


def new_record_start(ms: int | None = None) -> tuple[str, str]:
    """A new record's id and its ``started_at``, from one reading of the clock: now,
    or ``ms`` (Unix milliseconds) read before."""
    if ms is None:
        ms = time.time_ns() // 1_000_000
    return _uuid7(ms), started_at_text(ms)
