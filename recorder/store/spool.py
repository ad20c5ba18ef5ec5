"""The spool: records waiting on local disk while the database cannot take them.

Theory of operation. A spool directory holds append-only files of JSON lines,
one finished record per line (``recorder.store.sinks.record_json``: every field, gaps
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

Every file begins with a header line naming the store its records are meant
for (``{"recorder_spool": 1, "store": KEY, "store_id": ID}``, see
``recorder.store.identity``): a process claims only the files of its own store
and leaves every other file where it is, however long it waits there. A file
without a header (written by an older recorder) names no store and is never
replayed automatically.

A record that carries a captured body (``--capture-bodies``) has one key more on
its line, ``body``: the packed body (``recorder.core.captured.PackedBody``,
compressed, its bytes in base64), so a body waits in the spool with its record.
A reader that does not know the key ignores it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import math
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from recorder.store.identity import StoreIdentity
from recorder.store.spool_format import (
    HEADER_KEY,
    REJECTED_FILE,
    SPOOL_PREFIX,
    SPOOL_SUFFIX,
    BadLine,
    SpoolFile,
    append_rejected,
    describe,
    header_line,
    read_records,
    record_from_doc,
    record_line,
    write_all,
)

# The file format lives in spool_format; its names are this module's too.
__all__ = [
    "HEADER_KEY",
    "REJECTED_FILE",
    "SPOOL_PREFIX",
    "SPOOL_SUFFIX",
    "BadLine",
    "Segment",
    "Spool",
    "SpoolFile",
    "adopt",
    "append_rejected",
    "claim",
    "describe",
    "header_line",
    "list_spool",
    "os_error_text",
    "read_records",
    "record_from_doc",
    "record_line",
]

log = logging.getLogger("recorder.store")


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
    # Spool-first: which of its records did not reach the database (seq ranges);
    # its n-th record line has seq ``first_seq + n``, unless ``mixed`` (lines
    # without a seq were added, or a failed write left the file uncertain): then
    # a replay takes every line.
    dirty_seqs: list[tuple[int, int]] = field(default_factory=list)
    mixed: bool = False
    header: bytes = b""  # still to be written, before the first records

    def mark(self, lo: int, hi: int) -> None:
        """Records ``lo..hi`` (seqs) in this file must be replayed."""
        self.dirty = True
        self.dirty_seqs.append((lo, hi))

    def replays(self, n: int) -> bool:
        """Whether a replay of this file (by its owner) takes its ``n``-th record
        line (0-based): every line, unless the file says which records are dirty."""
        if not self.first_seq or self.mixed:
            return True
        seq = self.first_seq + n
        return any(lo <= seq <= hi for lo, hi in self.dirty_seqs)

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


def _size(seg: Segment) -> int:
    try:
        return os.fstat(seg.fd).st_size
    except OSError:
        return -1


class Spool:
    """This process's spool files in one directory. Thread-safe: ``lock`` guards
    the current file (held for one ``os.write``)."""

    def __init__(self, directory: str | Path, identity: StoreIdentity | None = None) -> None:
        self.directory = Path(directory)
        # the store the records are meant for, written at the head of every file
        self.identity = identity
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
        header = seg.header
        try:
            write_all(seg.fd, header + data if header else data)
        except OSError as e:
            # All or nothing: what part of it reached the file (a disk that filled
            # up half-way) is cut off again, and the file stays the current one. If
            # even that fails it may end in a partial line (read back, it is
            # skipped): retire it.
            if not _cut_back(seg):
                seg.dirty = seg.mixed = True
                self._seal_locked()
            if e.filename is None:  # say which file: os.write does not
                raise OSError(e.errno, e.strerror, str(seg.path)) from e
            raise
        seg.header = b""
        seg.records += records
        seg.size += len(header) + len(data)
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
            if seg.first_seq:  # lines without a seq among sequenced ones
                seg.mixed = True
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
        if self.identity is not None:  # written with the first records (all or nothing)
            seg.header = header_line(self.identity)
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
        """Drop an owned file from the list and release it (unless ``close``
        released it already: its descriptor may be another file's by now)."""
        with self.lock:
            if seg not in self.segments:
                return
            self.segments.remove(seg)
            if self.current is seg:
                self.current = None
        seg.release(remove=remove)

    def detach(self, seg: Segment) -> None:
        """Hand an owned file over to a replay: no longer this spool's, still locked."""
        with self.lock:
            if seg in self.segments:
                self.segments.remove(seg)
            if self.current is seg:
                self.current = None

    def name_store(self, store_id: str) -> None:
        """The store's id, read from its database: named in every new file's header."""
        with self.lock:
            if self.identity is not None:
                self.identity.store_id = store_id

    def mark_dirty(self, lo: int, hi: int) -> None:
        """Spool-first mode: records ``lo..hi`` did not reach the database from the
        queue, so the files holding them must be replayed."""
        with self.lock:
            for seg in self.segments:
                if seg.records and seg.first_seq <= hi and seg.last_seq >= lo:
                    seg.mark(lo, hi)

    def dirty_files(self) -> int:
        """Owned files holding records that did not reach the database otherwise."""
        with self.lock:
            return sum(1 for s in self.segments if s.dirty)

    def next_upkeep(self, retire_after: float | None) -> float:
        """When (``time.monotonic()``) the writer's upkeep next has work in these
        files: now for a file with records to replay or to remove; the current
        file's retirement, ``retire_after`` seconds after it opened, when its
        records all went to the queue (spool-first: committed or on their way);
        infinity when no file holds records."""
        with self.lock:
            due = math.inf
            for seg in self.segments:
                if not seg.records:
                    continue
                if seg.dirty or seg is not self.current or retire_after is None:
                    return 0.0
                due = min(due, seg.opened_at + retire_after)
            return due

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

    def _owns(self, info: SpoolFile) -> bool:
        if self.identity is None:  # a spool of no store (tests): files naming none
            return info.store is None and info.store_id is None
        return self.identity.owns(info.store, info.store_id)

    def claim_orphans(self, exclude: set[Path]) -> tuple[list[Segment], list[SpoolFile]]:
        """Lock and take over the spool files in the directory that no live process
        holds and that belong to this spool's store (oldest first); also return the
        others found unheld, left untouched (another store's, or a file naming no
        store; their records not counted: ``describe`` does)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return [], []
        except OSError as e:
            log.error("recorder: cannot list spool directory %s: %s", self.directory, e)
            return [], []
        out: list[Segment] = []
        others: list[SpoolFile] = []
        for name in names:
            if not (name.startswith(SPOOL_PREFIX) and name.endswith(SPOOL_SUFFIX)):
                continue
            path = self.directory / name
            if path in exclude:
                continue
            seg = claim(path)
            if seg is None:
                continue
            info = describe(path, count=False)  # the header says whose it is
            if self._owns(info):
                out.append(seg)
            elif info.store is None and _size(seg) == 0:
                seg.release(remove=True)  # empty: its owner died before the first write
            else:
                seg.release(remove=False)
                others.append(info)
        return out, others


def list_spool(directory: Path) -> list[SpoolFile]:
    """Every spool file in ``directory``, described; ``held`` when a live process
    holds it (its records may be waiting, or already written: a journal)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return []
    out = []
    for name in names:
        if not (name.startswith(SPOOL_PREFIX) and name.endswith(SPOOL_SUFFIX)):
            continue
        path = directory / name
        seg = claim(path)
        info = describe(path)
        if seg is None:
            if not path.exists():
                continue
            info.held = True
        else:
            seg.release(remove=False)
        out.append(info)
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


def adopt(path: Path, identity: StoreIdentity, into: Path) -> int | None:
    """Give a spool file that names no store (an older recorder's) to
    ``identity``'s store: copy it, with a header, into ``into`` and remove it.
    Returns its records, or None if it is held, gone, or already names a store.
    A crash between the copy and the removal leaves both: the old one is never
    replayed, and a second adoption is stored once (``ON CONFLICT DO NOTHING``)."""
    seg = claim(path)
    if seg is None:
        return None
    try:
        info = describe(path)
        if info.store is not None or info.store_id is not None:
            return None
        into.mkdir(parents=True, exist_ok=True)
        stamp = f"{os.getpid()}-{time.time_ns() // 1_000_000}"
        tmp = into / f".adopting-{stamp}-{path.name}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, header_line(identity) + path.read_bytes())
        finally:
            os.close(fd)
        os.rename(tmp, into / f"{SPOOL_PREFIX}adopted-{stamp}-{path.name[len(SPOOL_PREFIX) :]}")
        path.unlink()
        return info.records
    finally:
        seg.release(remove=False)
