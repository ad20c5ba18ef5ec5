"""A real mitmproxy with the recorder addon, on its own thread, for sync tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.core.sink import Sink
from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.runner import Listener, ProxySettings, run_in_thread
from recorder.proxy.tokenizers import preload
from recorder.store.sinks import FanoutSink, MemorySink

# Stall threshold for tests: time is scaled, the meaning is not (a 1.0 s
# threshold against a 1.5 s silence is a stall; 0.2 s gaps are not).
STALL_AFTER = 1.0


class ThreadSafeSink(MemorySink):
    """MemorySink whose readers wait for records (written on the proxy's thread)."""

    def __init__(self) -> None:
        super().__init__()
        self._cond = threading.Condition()

    def submit(self, record: StreamRecord) -> None:
        with self._cond:
            self.records.append(record)
            self._cond.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[StreamRecord]:
        """Block until ``count`` records arrived; return them all."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.records) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"expected {count} records within {timeout}s, got {len(self.records)}:"
                        f" {[r.outcome for r in self.records]}"
                    )
                self._cond.wait(left)
            return list(self.records)


@dataclass
class RunningProxy:
    """What a test needs of the proxy it started."""

    recorder: Recorder
    sink: ThreadSafeSink
    listeners: list[Listener]
    confdir: str

    def port(self, mode_prefix: str = "") -> int:
        """The port of the first listener whose mode starts with ``mode_prefix``."""
        for lst in self.listeners:
            if lst.mode.startswith(mode_prefix):
                return lst.port
        raise LookupError(mode_prefix)

    def url(self, mode_prefix: str = "") -> str:
        """``http://127.0.0.1:<port>`` of that listener."""
        return f"http://127.0.0.1:{self.port(mode_prefix)}"


@contextmanager
def running_proxy(
    modes: list[str],
    confdir: str,
    *,
    stall_after: float = 30.0,
    extra_options: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    also: Sink | None = None,
) -> Iterator[RunningProxy]:
    """Start mitmproxy + recorder on the given loopback modes; stop it on exit.

    ``config`` sets more ``RecorderConfig`` fields (e.g. ``capture_bodies``);
    ``also`` receives every record too (e.g. a ``SqlSink``; closed with the proxy).
    The tokenizers are loaded first, as ``recorder proxy`` loads them at start: the
    first OpenAI request would otherwise wait some 0.3 s for its vocabulary on the
    proxy's loop, and its TTFT with it (whether a test runs first decided that).
    """
    preload()
    sink = ThreadSafeSink()
    recorder = Recorder(
        sink if also is None else FanoutSink(sink, also),
        RecorderConfig(
            key_secret=b"e2e-secret",
            prices=shipped_prices(),
            stall_after=stall_after,
            **(config or {}),
        ),
    )
    settings = ProxySettings(
        modes=modes,
        listen_host="127.0.0.1",
        listen_port=0,
        confdir=confdir,
        extra=dict(extra_options or {}),
    )
    with run_in_thread(recorder, settings) as listeners:
        yield RunningProxy(recorder, sink, listeners, confdir)
