"""The spool: records waiting on local disk while the database cannot take them.

Theory of operation. A spool directory holds append-only files of JSON lines,
one finished record per line (``recorder.sinks.record_json``: every field, gaps
included). Each process writes its own files, named
``recorder-spool-<pid>-<start ms>-<n>.jsonl``, and holds an exclusive
``flock`` on every file it owns for as long as it owns it. Whoever can take
that lock owns the file: a file left by a process that died (its locks died
with it) is claimed by the next writer that scans the directory, and two live
processes never replay the same file.

A file is written as a sequence of ``os.write`` calls on a descriptor opened
once with ``O_APPEND``: no buffering in user space, so a record is in the
kernel's page cache when ``append`` returns and survives the death of the
process (kill -9 included); only a power cut can lose it. An append is all or
nothing: a write that fails part-way (a disk that fills up: ENOSPC) is cut back
to the lines before it, so the records of the failed append are exactly the
ones counted as dropped, and the file stays the current one (a disk that stays
full costs no new file, nor descriptor, per attempt). The error raised names
the file. Only if the file cannot be cut back is it retired (``sealed``) and the
next record starts a new one; its broken tail is skipped, and counted, when the
file is read back (as is the torn last line a kill -9 mid-write leaves).

Replaying a file inserts its records with ``ON CONFLICT DO NOTHING`` on the
record id, so a file replayed twice (a crash between the commit and the
``unlink``) still leaves every record in the database exactly once. A file is
removed only after every record in it is committed.

Records the database refuses (a value it cannot store) are not spooled again:
they go to ``recorder-rejected.jsonl`` in the same directory, for a person to
look at, and are counted as ``failed``.

A record that carries a captured body (``--capture-bodies``) has one key more on
its line, ``body``: the packed body (``recorder.proxy.capture.PackedBody``,
compressed, its bytes in base64), so a body waits in the spool with its record.
A reader that does not know the key ignores it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from recorder.core.record import FIELDS, Gap, StreamRecord
from recorder.proxy.capture import BodyFormatError, CapturedRecord, PackedBody, body_of
from recorder.sinks import record_json

log = logging.getLogger("recorder.store")

SPOOL_PREFIX = "recorder-spool-"
SPOOL_SUFFIX = ".jsonl"
REJECTED_FILE = "recorder-rejected.jsonl"
_FIELD_SET = frozenset(FIELDS)


def record_line(record: StreamRecord) -> bytes:
    """One record as a spool line (with its captured body, packed, if it has one:
    on the caller's thread, so the writer packs before it spools)."""
    body = body_of(record)
    if body is None:
        return record_json(record) + b"\n"
    doc = record.to_dict(with_gaps=True)
    try:
        doc["body"] = body.pack().to_doc()
    except Exception as e:  # the record matters more than its body
        log.error(
            "recorder: cannot pack the body of record %s (%s: %s); spooled without it",
            record.id,
            type(e).__name__,
            e,
        )
    return orjson.dumps(doc) + b"\n"


def record_from_doc(doc: dict[str, Any]) -> StreamRecord:
    """A record from its JSON object (unknown keys are ignored, missing ones default).

    Raises TypeError, ValueError or KeyError for an object that is not a record. A
    ``body`` that cannot be read is logged and left out; the record is kept.
    """
    values = {k: v for k, v in doc.items() if k in _FIELD_SET}
    gaps = [Gap(str(g["kind"]), g["start_ms"], g["length_ms"]) for g in doc.get("gaps") or ()]
    body_doc = doc.get("body")
    if body_doc is None:
        return StreamRecord(**values, gaps=gaps)
    try:
        if not isinstance(body_doc, dict):
            raise BodyFormatError("not an object")
        body: PackedBody | None = PackedBody.from_doc(body_doc)
    except BodyFormatError as e:
        log.error(
            "recorder: spooled body of record %s is unreadable (%s); dropped", doc.get("id"), e
        )
        body = None
    return CapturedRecord(**values, gaps=gaps, body=body)


@dataclass(slots=True, eq=False)
class Segment:
    """One spool file this process holds the lock of."""

    path: Path
    fd: int
    records: int = 0
    size: int = 0
    first_seq: int = 0  # spool-first mode: the sequence numbers of the records in it
    last_seq: int = 0
    dirty: bool = False  # holds records that did not reach the database otherwise
    sealed: bool = False  # no longer appended to
    opened_at: float = field(default_factory=time.monotonic)

    def release(self, *, remove: bool) -> None:
        """Let go of the file (removing it first if asked); never raises."""
        if remove:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as e:
                log.error("recorder: cannot remove spool file %s: %s", self.path, e)
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _cut_back(seg: Segment) -> bool:
    """After a failed write: bring the file back to the whole lines appended
    before it; False if it cannot be."""
    try:
        if os.fstat(seg.fd).st_size != seg.size:
            os.ftruncate(seg.fd, seg.size)
        return os.fstat(seg.fd).st_size == seg.size
    except OSError:
        return False


def os_error_text(e: OSError) -> str:
    """An OSError for a log line: what, the errno's name, and the path if known
    (``No space left on device (ENOSPC) on /spool/recorder-spool-….jsonl``)."""
    name = errno.errorcode.get(e.errno or 0, f"errno {e.errno}")
    text = f"{e.strerror or e} ({name})"
    return f"{text} on {e.filename}" if e.filename else text


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


class Spool:
    """This process's spool files in one directory. Thread-safe: ``lock`` guards
    the current file (held for one ``os.write``)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        # reentrant: a signal handler that closes the sink may interrupt an append
        self.lock = threading.RLock()
        self.segments: list[Segment] = []  # every file owned, the current one last
        self.current: Segment | None = None
        self._prefix = f"{SPOOL_PREFIX}{os.getpid()}-{time.time_ns() // 1_000_000}-"
        self._n = 0

    # -- writing (under ``lock``) --------------------------------------------------

    def append_locked(self, data: bytes, records: int, seq: int = 0) -> Segment:
        """Append whole lines to the current file (opened on first use); the caller
        holds ``lock``. Raises OSError; the file that failed is sealed."""
        seg = self.current
        if seg is None:
            seg = self._open()
        try:
            _write_all(seg.fd, data)
        except OSError as e:
            # All or nothing: what part of it reached the file (a disk that filled
            # up half-way) is cut off again, and the file stays the current one. If
            # even that fails it may end in a partial line (read back, it is
            # skipped): retire it.
            if not _cut_back(seg):
                seg.dirty = True
                self._seal_locked()
            if e.filename is None:  # say which file: os.write does not
                raise OSError(e.errno, e.strerror, str(seg.path)) from e
            raise
        seg.records += records
        seg.size += len(data)
        if seq:
            if not seg.first_seq:
                seg.first_seq = seq
            seg.last_seq = seq
        return seg

    def append(self, data: bytes, records: int) -> Segment:
        """``append_locked`` taking the lock. Raises OSError."""
        with self.lock:
            seg = self.append_locked(data, records)
            seg.dirty = True
            return seg

    def _open(self) -> Segment:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._n += 1
        path = self.directory / f"{self._prefix}{self._n:04d}{SPOOL_SUFFIX}"
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        seg = Segment(path, fd)
        self.segments.append(seg)
        self.current = seg
        return seg

    def _seal_locked(self) -> Segment | None:
        seg = self.current
        if seg is not None:
            seg.sealed = True
            self.current = None
        return seg

    def seal(self) -> Segment | None:
        """Stop appending to the current file (the next append opens a new one)."""
        with self.lock:
            return self._seal_locked()

    # -- bookkeeping (the writer thread) ----------------------------------------

    def sealed(self) -> list[Segment]:
        """The owned files no longer appended to."""
        with self.lock:
            return [s for s in self.segments if s.sealed]

    def forget(self, seg: Segment, *, remove: bool) -> None:
        """Drop an owned file from the list and release it."""
        with self.lock:
            if seg in self.segments:
                self.segments.remove(seg)
            if self.current is seg:
                self.current = None
        seg.release(remove=remove)

    def mark_dirty(self, lo: int, hi: int) -> None:
        """Spool-first mode: records ``lo..hi`` did not reach the database from the
        queue, so the files holding them must be replayed."""
        with self.lock:
            for seg in self.segments:
                if seg.records and seg.first_seq <= hi and seg.last_seq >= lo:
                    seg.dirty = True

    def owned_paths(self) -> set[Path]:
        """Paths of the files this spool holds."""
        with self.lock:
            return {s.path for s in self.segments}

    def close(self) -> None:
        """Release every file (a file still holding records stays for the next
        process); empty files are removed."""
        with self.lock:
            self.close_locked()

    def close_locked(self) -> None:
        """``close`` for a caller holding ``lock``."""
        segments, self.segments, self.current = self.segments, [], None
        for seg in segments:
            seg.release(remove=seg.records == 0)

    # -- other processes' files ------------------------------------------------

    def claim_orphans(self, exclude: set[Path]) -> list[Segment]:
        """Lock and take over the spool files in the directory that no live process
        holds (oldest first)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as e:
            log.error("recorder: cannot list spool directory %s: %s", self.directory, e)
            return []
        out = []
        for name in names:
            if not (name.startswith(SPOOL_PREFIX) and name.endswith(SPOOL_SUFFIX)):
                continue
            path = self.directory / name
            if path in exclude:
                continue
            seg = claim(path)
            if seg is not None:
                out.append(seg)
        return out


def claim(path: Path) -> Segment | None:
    """Lock a spool file for replay; None if a live process holds it or it is gone."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        log.error("recorder: cannot open spool file %s: %s", path, e)
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.fstat(fd).st_nlink == 0:  # replayed and removed while we opened it
            raise BlockingIOError(errno.ENOENT, "removed")
    except OSError:
        os.close(fd)
        return None
    return Segment(path, fd, dirty=True, sealed=True)


@dataclass(slots=True)
class BadLine:
    """A spool line that is not a record (a torn write, or damage)."""

    lineno: int
    reason: str


def read_records(path: Path, batch: int) -> Iterator[list[StreamRecord | BadLine]]:
    """The records of a spool file, ``batch`` at a time. Raises OSError."""
    out: list[StreamRecord | BadLine] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.endswith(b"\n"):
                out.append(BadLine(lineno, "incomplete last line (torn write)"))
                break
            if not line.strip():
                continue
            try:
                doc = orjson.loads(line)
                if not isinstance(doc, dict):
                    raise TypeError("not an object")
                out.append(record_from_doc(doc))
            except (orjson.JSONDecodeError, TypeError, ValueError, KeyError) as e:
                out.append(BadLine(lineno, f"{type(e).__name__}: {e}"))
            if len(out) >= batch:
                yield out
                out = []
    if out:
        yield out


def append_rejected(directory: Path, record: StreamRecord, reason: str) -> bool:
    """Keep a record the database refused, with the reason; False if even that fails."""
    doc = orjson.loads(record_json(record))
    doc["rejected_because"] = reason
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / REJECTED_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            _write_all(fd, orjson.dumps(doc) + b"\n")
        finally:
            os.close(fd)
    except OSError as e:
        log.error("recorder: cannot keep rejected record %s: %s", record.id, e)
        return False
    return True
