"""The spool's file format: one JSON line per record, after a header naming the
store, and the reading of a spool file back (see ``recorder.store.spool`` for how
files are written, owned and replayed).

A record line is the record's JSON (``recorder.store.sinks.record_json``: every
field, gaps included), plus ``body`` when it carries a captured body. The first
line of a file is a header, ``{"recorder_spool": 1, "store": KEY, "store_id":
ID}``; a file without one was written by an older recorder and names no store.
Records the database refused go, with the reason, to ``recorder-rejected.jsonl``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import orjson

from recorder.core.captured import BodyFormatError, CapturedRecord, PackedBody, body_of
from recorder.core.record import FIELDS, Gap, GapKind, StreamRecord
from recorder.store.identity import StoreIdentity
from recorder.store.sinks import record_json

log = logging.getLogger("recorder.store")

SPOOL_PREFIX = "recorder-spool-"
SPOOL_SUFFIX = ".jsonl"
REJECTED_FILE = "recorder-rejected.jsonl"
HEADER_KEY = "recorder_spool"
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
    # a gap's kind as the writer spooled it (its own record's: one of GapKind)
    gaps = [
        Gap(cast(GapKind, str(g["kind"])), g["start_ms"], g["length_ms"])
        for g in doc.get("gaps") or ()
    ]
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


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may take part of it)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@dataclass(slots=True)
class SpoolFile:
    """What a spool file says of itself: the store it waits for, how many records."""

    path: Path
    store: str | None  # None: a file without a header (an older recorder's)
    store_id: str | None
    records: int
    held: bool = False  # a live process holds it


def header_line(identity: StoreIdentity) -> bytes:
    """The first line of a spool file of ``identity``'s store."""
    doc = {HEADER_KEY: 1, "store": identity.key, "store_id": identity.store_id}
    return orjson.dumps(doc) + b"\n"


def header_of(line: bytes) -> dict[str, Any] | None:
    """The header of a spool file, if ``line`` (its first) is one."""
    if HEADER_KEY.encode() not in line[:64]:
        return None
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and HEADER_KEY in doc else None


def describe(path: Path, *, count: bool = True) -> SpoolFile:
    """Read a spool file's header and (``count``) count its whole record lines (a
    file that cannot be read counts as holding none)."""
    store: str | None = None
    store_id: str | None = None
    records = 0
    try:
        with path.open("rb") as fh:
            first = fh.readline()
            header = header_of(first) if first.endswith(b"\n") else None
            if header is not None:
                store = str(header.get("store") or "") or None
                sid = header.get("store_id")
                store_id = str(sid) if sid else None
            elif first.strip() and first.endswith(b"\n"):
                records += 1
            if count:
                records += sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
            elif first.endswith(b"\n") and fh.read(1):
                records += 1  # at least one: enough to tell an empty file
    except OSError:
        pass
    return SpoolFile(path, store, store_id, records)


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
            if lineno == 1 and header_of(line) is not None:
                continue
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
            write_all(fd, orjson.dumps(doc) + b"\n")
        finally:
            os.close(fd)
    except OSError as e:
        log.error("recorder: cannot keep rejected record %s: %s", record.id, e)
        return False
    return True
