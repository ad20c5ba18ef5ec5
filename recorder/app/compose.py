"""The composition root: from one :class:`~recorder.proxy.options.AppConfig`, the
store (key secret, SQL writer, spool, journal), the sinks (``--jsonl``), the
metrics (registry, exporter, the store's and the exporter's figures), the live
view, mitmweb's view, the OTLP span exporter, the ``/metrics`` server, and the
recorder addon with its observers, in that order; and their shutdown.

``recorder proxy`` (``recorder.cli.proxy``), the mitmproxy script
(``recorder.app.script``, ``addons/recorder_addon.py``) and ``recorder demo``
(``recorder.cli.scenarios``) all build here, so they record alike.

Shutdown, under ``recorder proxy`` (``recorder.proxy.runner``): mitmproxy's
``done`` lets the recorder finish every open stream's record (without waiting on
the database), the runner ends the connections, then :meth:`App.close` closes
the sink (a bounded wait, then the spool), the span exporter, the ``/metrics``
server, and writes the live view's last lines. Under ``mitmdump -s`` the same
happens in mitmproxy's ``done`` hooks, in the order of :attr:`App.addons`.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from recorder.app.settings import spool_dir_of
from recorder.core.errors import RecorderError
from recorder.core.sink import Sink
from recorder.metrics import Metrics
from recorder.metrics.serving import MetricsServing
from recorder.metrics.unmetered import UnmeteredCollector, UnmeteredTally
from recorder.otel import SpanExport
from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.live import Live
from recorder.proxy.observers import MetricsObserver, SpanObserver
from recorder.proxy.options import AppConfig
from recorder.proxy.passthrough import Passthrough
from recorder.proxy.webview import WebView
from recorder.store import SqlSink, StoreError, StoreUnavailable, key_secret, upgrade
from recorder.store.sinks import FanoutSink, JsonlSink


class StartError(RecorderError):
    """The recorder cannot start: one line for the user; ``code`` the exit status
    (2 for a bad setting, 1 for anything else)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message, exit_code=code)
        self.code = code


def quiet_migrations() -> None:
    """Alembic announces every migration step at INFO: not on the proxy's console."""
    alembic = logging.getLogger("alembic")
    alembic.setLevel(max(alembic.getEffectiveLevel(), logging.WARNING))


def open_store(db: str, spool_dir: Path) -> tuple[bytes, SqlSink, str | None]:
    """Upgrade the database, read the key secret, open the writer.

    A database that cannot be reached is not fatal: records are spooled in
    ``spool_dir`` and written once it answers (the writer upgrades it then); the
    third value is then the line that says so. Raises StartError otherwise.
    """
    quiet_migrations()
    note = None
    try:
        upgrade(db)
        schema_ready = True
    except StoreUnavailable as e:
        note = f"{e}; records will be spooled in {spool_dir}"
        schema_ready = False
    except StoreError as e:
        raise StartError(str(e)) from None
    try:
        secret = key_secret(db, cache_dir=spool_dir)
        # journal: finished records reach the spool file within milliseconds (kill -9)
        sink = SqlSink(db, spool_dir, upgrade=not schema_ready, journal=True)
    except (StoreUnavailable, OSError) as e:
        raise StartError(str(e)) from None
    return secret, sink, note


@dataclass
class App:
    """A built recorder: its parts, and how they end."""

    config: AppConfig
    recorder: Recorder
    sink: Sink  # what the recorder writes to (the store, and --jsonl)
    store: SqlSink | None  # None when the caller gave its own sink (the demo)
    registry: CollectorRegistry
    metrics: Metrics
    live: Live | None
    web: WebView | None
    spans: SpanExport | None
    serving: MetricsServing
    passthrough: Passthrough

    @property
    def addons(self) -> list[Any]:
        """The mitmproxy addons after the recorder (what it does not meter passes
        and is counted; the live view, mitmweb's view)."""
        return [a for a in (self.passthrough, self.live, self.web) if a is not None]

    @property
    def metrics_url(self) -> str:
        """Where ``/metrics`` is served ("" when it is not)."""
        return self.serving.url

    def close(self) -> None:
        """Close what the recorder wrote to, then the rest: the sink (every record
        written or spooled), the span exporter (a few seconds at most; what is
        left is counted dropped), the ``/metrics`` server, the live view's lines."""
        self.recorder.close()
        if self.spans is not None:
            self.spans.close()
        self.serving.close()
        if self.live is not None:
            self.live.flush()


def build(
    config: AppConfig,
    *,
    sink: Sink | None = None,
    secret: bytes | None = None,
    web: bool = False,
    embedded: bool = False,
    metrics_optional: bool = False,
    warn: Callable[[str], None] | None = None,
) -> App:
    """Build the recorder from ``config``.

    ``sink`` and ``secret``: the caller's own (the demo), instead of the store
    ``config.db`` names. ``web``: under mitmweb's interface (its view of the
    flows). ``embedded``: inside mitmproxy's own process (``mitmdump -s``), where
    mitmproxy's ``done`` hooks close the sink and write the last console lines.
    ``metrics_optional``: a ``/metrics`` address that cannot be bound is a warning,
    not an error. ``warn`` gets the lines that do not stop the start (stderr by
    default).

    Raises StartError; whatever was opened before the error is closed again.
    """
    say = warn or (lambda line: print(line, file=sys.stderr))
    # the exporter before the store: a bad OTLP setting leaves no store open
    spans = _spans(config)
    store = None
    if sink is None:
        try:
            secret, store, sink = _open_sinks(config, say)
        except StartError:
            if spans is not None:
                spans.close(timeout_s=0)
            raise
    assert secret is not None, "a sink of one's own comes with its key secret"

    registry = CollectorRegistry()
    metrics = Metrics(
        registry, max_model_labels=config.max_model_labels, metrics_tag=config.metrics_tag
    )
    recorder = Recorder(
        sink,
        RecorderConfig.of(config, key_secret=secret),
        # with /metrics off (port 0: the demo, or asked for) nobody reads them
        observers=[MetricsObserver(metrics)] if config.metrics_port else [],
    )
    metrics.watch_health(recorder.health)
    # a record the metrics cannot count is an internal error like an observer's
    metrics.on_error = functools.partial(recorder.internal_error, "metrics")
    if store is not None:
        _warm(config, recorder, say)
        _watch_store(metrics, store)
    # the observers in the order they are called: metrics, mitmweb's view, the
    # live view, the spans (each adds itself)
    view = WebView(recorder) if web else None
    live = _live(config, recorder, metrics, embedded) if config.live else None
    if spans is not None:
        from recorder.otel.metrics import register

        register(registry, spans)
        recorder.add_observer(SpanObserver(spans))
    serving = MetricsServing(
        registry,
        config.metrics_host,
        config.metrics_port,
        streams=live.snapshot_json if live is not None else None,
    )
    unmetered = UnmeteredTally(max_hosts=config.max_model_labels)
    registry.register(UnmeteredCollector(unmetered))
    passthrough = Passthrough(
        recorder,
        unmetered,
        # inside a user's own mitmproxy, plain downloads keep the user's settings
        stream_unsized=not embedded,
        say=live.notice if live is not None else None,
    )
    app = App(
        config, recorder, sink, store, registry, metrics, live, view, spans, serving, passthrough
    )
    _serve(app, metrics_optional, say)
    return app


def _warm(config: AppConfig, recorder: Recorder, say: Callable[[str], None]) -> None:
    """The estimator's calibration relearnt from the stored streams; the tokenizers
    loaded now (a second or so) rather than in the first request."""
    from recorder.proxy import tokenizers
    from recorder.store.calibration import warm_from

    if warm_from(config.db, recorder.estimator) is None:
        say("estimator not warmed (database unreadable)")
    tokenizers.preload()


def _spans(config: AppConfig) -> SpanExport | None:
    """The OTLP span exporter, if asked for; a bad setting is a StartError (2)."""
    if not config.otlp_endpoint:
        return None
    from recorder.otel import OtlpConfigError

    try:
        return SpanExport(config.otlp_flag, protocol=config.otlp_protocol)
    except OtlpConfigError as e:
        raise StartError(str(e), code=2) from None


def _live(config: AppConfig, recorder: Recorder, metrics: Metrics, embedded: bool) -> Live:
    return Live(
        recorder,
        log_format=config.log_format,
        quiet=config.quiet,
        verbose=config.verbose,
        on_tick=metrics.live_streams,
        background=True,
        # under recorder proxy flushed by App.close, once the clients are let go
        flush_on_done=embedded,
    )


def _serve(app: App, optional: bool, say: Callable[[str], None]) -> None:
    """Start serving ``/metrics``; an address that cannot be bound is an error, or
    with ``optional`` a warning (recording goes on without it)."""
    config = app.config
    try:
        app.serving.start()
    except OSError as e:
        where = f"{config.metrics_host}:{config.metrics_port}"
        why = f"cannot serve metrics on {where}: {e.strerror or e}"
        if not optional:
            app.close()
            raise StartError(why) from None
        say(f"{why}; recording without /metrics (set the metrics port, 0 for none)")
    config.metrics_url = app.serving.url
    config.metrics_port_bound = app.serving.bound_port


def _open_sinks(config: AppConfig, say: Callable[[str], None]) -> tuple[bytes, SqlSink, Sink]:
    """The store, and ``--jsonl`` beside it: (key secret, store, what to write to)."""
    secret, store, note = open_store(config.db, spool_dir_of(config))
    if note is not None:
        say(note)
    if not config.jsonl:
        return secret, store, store
    try:
        return secret, store, FanoutSink(store, JsonlSink(config.jsonl))
    except OSError as e:
        store.close()
        raise StartError(f"{config.where('jsonl')} {config.jsonl}: {e.strerror or e}") from None


def _watch_store(metrics: Metrics, store: SqlSink) -> None:
    """The store's figures on /metrics, read at scrape time (the write queue, the
    spool, records written, spooled, replayed, dropped, failed)."""

    def stat(name: str) -> Callable[[], float]:
        return lambda: float(store.stats()[name])

    metrics.watch(
        write_queue_depth=stat("queue_depth"),
        spool_depth=stat("spool_files"),
        records_written=stat("written"),
        records_spooled=stat("spooled"),
        records_replayed=stat("replayed"),
        records_dropped=stat("dropped"),
        records_failed=stat("failed"),
    )
