"""Where finished records go.

A sink's ``submit`` is called on mitmproxy's event loop, so it must neither
block nor raise: it hands the record to a queue and returns. Writing happens
on the sink's own thread. ``close`` drains everything submitted before it.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from pathlib import Path
from typing import Any

import orjson

from recorder.core.record import StreamRecord
from recorder.core.sink import Sink

log = logging.getLogger("recorder.sinks")


def record_json(record: StreamRecord) -> bytes:
    """One record as a JSON object (with its gaps and raw usage).

    Never fails on a value JSON cannot carry: an integer beyond 64 bits becomes
    its decimal string, a string with lone surrogates (bytes a header could not
    decode) gets them escaped, so a bad record can still be written somewhere.
    """
    doc = record.to_dict(with_gaps=True)
    try:
        return orjson.dumps(doc)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return orjson.dumps(_jsonable(doc))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return str(value)


class MemorySink:
    """Keeps records in a list (tests, the demo's summary)."""

    def __init__(self) -> None:
        self.records: list[StreamRecord] = []

    def submit(self, record: StreamRecord) -> None:
        self.records.append(record)

    def close(self) -> None:
        return None


class JsonlSink:
    """Appends one JSON line per record to a file, from a writer thread."""

    _STOP = object()

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # opened here, so that a file that cannot be written is an error to the
        # caller now, not a writer thread that dies while records pile up
        # mode 0600, whatever the umask: the lines are records
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._file = os.fdopen(fd, "ab")
        self.written = 0
        self.failed = 0
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="recorder-jsonl", daemon=True)
        self._thread.start()

    def submit(self, record: StreamRecord) -> None:
        self._queue.put(record)  # SimpleQueue.put never blocks

    def close(self) -> None:
        self._queue.put(self._STOP)
        self._thread.join()

    def _run(self) -> None:
        with self._file as fh:
            while True:
                item = self._queue.get()
                batch = [item]
                while not self._queue.empty() and batch[-1] is not self._STOP:
                    batch.append(self._queue.get())
                stop = batch[-1] is self._STOP
                for rec in batch:
                    if isinstance(rec, StreamRecord):
                        try:
                            fh.write(record_json(rec) + b"\n")
                            self.written += 1
                        except (OSError, TypeError) as e:
                            self.failed += 1
                            log.error(
                                "recorder: could not write record %s to %s: %s",
                                rec.id,
                                self.path,
                                e,
                            )
                try:
                    fh.flush()
                except OSError as e:
                    log.error("recorder: could not flush %s: %s", self.path, e)
                if stop:
                    return


class FanoutSink:
    """Hands each record to several sinks."""

    def __init__(self, *sinks: Sink) -> None:
        self.sinks = list(sinks)

    def submit(self, record: StreamRecord) -> None:
        for sink in self.sinks:
            sink.submit(record)

    def close(self) -> None:
        errors: list[Exception] = []
        for sink in self.sinks:  # one sink failing to close must not keep the others open
            try:
                sink.close()
            except Exception as e:
                log.error("recorder: closing %s failed: %s", type(sink).__name__, e)
                errors.append(e)
        if errors:
            raise errors[0]
