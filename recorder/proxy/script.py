"""The addon as a mitmproxy script (``mitmdump -s addons/recorder_addon.py``).

`recorder proxy` is the supported way to run the recorder (it also serves the
metrics); this exists for people who already run mitmproxy with their own
options and addons. Records go to the same SQL store. Options
(``--set name=value``):

- ``recorder_db``: SQLAlchemy URL of the store (default ``sqlite:///recorder.db``);
- ``recorder_spool_dir``: where records wait while the database is away
  (default: one directory per store, ``recorder.db.spool`` beside a SQLite file);
- ``recorder_stall_after``: seconds of output silence that count as a stall (30);
- ``recorder_prices``: a price table file (default: the shipped one);
- ``recorder_quiet``: no console line per stream (false);
- ``recorder_log_format``: ``text`` (coloured on a terminal) or ``json`` lines;
- ``recorder_verbose``: also a short line for each flow not metered (false);
- ``recorder_metrics``: ``HOST:PORT`` where ``/metrics`` and ``/streams`` (for
  `recorder top`) are served, e.g. ``127.0.0.1:9464`` (default: not served).
- ``recorder_otlp_endpoint``: export one OpenTelemetry span per stream to this OTLP
  collector (default: OTEL_EXPORTER_OTLP_ENDPOINT, else off; the other OTEL_*
  variables apply too). Dropped spans are logged (no /metrics here).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mitmproxy import exceptions

from recorder.core.price_files import load_price_file
from recorder.core.pricing import PriceTableError
from recorder.otel import OtlpConfigError, SpanExport
from recorder.otel.export import env_endpoint
from recorder.proxy import tokenizers
from recorder.proxy.addon import Recorder, RecorderConfig
from recorder.proxy.live import Live
from recorder.store import SqlSink, StoreError, StoreUnavailable, key_secret, upgrade
from recorder.store.calibration import warm_from
from recorder.store.identity import default_spool_dir
from recorder.store.sinks import MemorySink

if TYPE_CHECKING:
    from recorder.metrics import Metrics


class ScriptRecorder(Recorder):
    """A Recorder configured through mitmproxy options."""

    def __init__(self) -> None:
        super().__init__(MemorySink(), RecorderConfig(key_secret=b""))
        self._configured = False
        self.live = Live(self, background=True)
        self.addons = [self.live]  # mitmproxy runs its hooks too
        self.metrics_server: Any = None
        self._spans: SpanExport | None = None
        self._metrics: Metrics | None = None

    def load(self, loader: Any) -> None:
        """Declare the options."""
        loader.add_option(
            "recorder_db", str, "sqlite:///recorder.db", "SQLAlchemy URL of the record store."
        )
        loader.add_option(
            "recorder_spool_dir",
            str,
            "",
            "Where records wait while the database is unreachable (default: one directory"
            " per store, see docs/storage.md).",
        )
        loader.add_option(
            "recorder_stall_after", str, "30", "Seconds of output silence that count as a stall."
        )
        loader.add_option(
            "recorder_prices",
            str,
            "",
            "Prices to overlay on the shipped table (default: the shipped table alone).",
        )
        loader.add_option("recorder_quiet", bool, False, "No console line per stream.")
        loader.add_option(
            "recorder_log_format", str, "text", "Console lines: text or json (one object a line)."
        )
        loader.add_option(
            "recorder_verbose", bool, False, "Also a short line for each flow not metered."
        )
        loader.add_option(
            "recorder_metrics",
            str,
            "",
            "HOST:PORT to serve /metrics and /streams on (recorder top); empty: not served.",
        )
        loader.add_option(
            "recorder_otlp_endpoint",
            str,
            "",
            "OTLP collector to export one span per stream to (default: "
            "OTEL_EXPORTER_OTLP_ENDPOINT, else off).",
        )

    def configure(self, updated: set[str]) -> None:
        """Apply the options (the store is opened once, on the first configure)."""
        from mitmproxy import ctx

        try:
            stall = float(ctx.options.recorder_stall_after)
            if not stall > 0:
                raise ValueError("must be positive")
        except ValueError as e:
            raise exceptions.OptionsError(f"recorder_stall_after: {e}") from e
        self.config.stall_after = stall
        if ctx.options.recorder_log_format not in ("text", "json"):
            raise exceptions.OptionsError("recorder_log_format: must be text or json")
        self.live.log_format = ctx.options.recorder_log_format
        self.live.quiet = ctx.options.recorder_quiet
        self.live.verbose = ctx.options.recorder_verbose
        if ctx.options.recorder_metrics and self.metrics_server is None:
            self._serve_metrics(ctx.options.recorder_metrics)
        if self._configured:
            return
        db = ctx.options.recorder_db
        try:
            given = ctx.options.recorder_spool_dir
            spool = Path(given) if given else default_spool_dir(db)
            self.config.prices = load_price_file(ctx.options.recorder_prices or None)
            try:
                upgrade(db)
                ready = True
            except StoreUnavailable:
                ready = False  # records are spooled until the database answers
            self.config.key_secret = key_secret(db, cache_dir=spool)
            # the exporter before the store: a bad OTLP setting must not leave a
            # store (its threads, its locked spool) open behind a failed configure
            flag = ctx.options.recorder_otlp_endpoint or None
            spans = SpanExport(flag) if flag or env_endpoint() else None
            self.sink = SqlSink(db, spool, upgrade=not ready, journal=True)
        except (PriceTableError, StoreError, OSError, OtlpConfigError) as e:
            raise exceptions.OptionsError(f"recorder: {e}") from e
        if spans is not None:  # the variables' URL the exporter reads itself
            self._spans = spans
            self.on_span = spans.export
        self._configured = True
        if self._metrics is not None:
            self._watch_store()
        # as `recorder proxy` does: the stored streams' calibration, the vocabularies
        warm_from(db, self.estimator)
        tokenizers.preload()

    def _watch_store(self) -> None:
        """The store's and the exporter's figures on /metrics, as `recorder proxy`
        shows them (the write queue, the spool, records written; spans dropped)."""
        assert self._metrics is not None and isinstance(self.sink, SqlSink)
        store = self.sink

        def stat(name: str) -> Callable[[], float]:
            return lambda: float(store.stats()[name])

        self._metrics.watch(
            write_queue_depth=stat("queue_depth"),
            spool_depth=stat("spool_files"),
            records_written=stat("written"),
            records_spooled=stat("spooled"),
            records_replayed=stat("replayed"),
            records_dropped=stat("dropped"),
            records_failed=stat("failed"),
        )
        if self._spans is not None:
            from recorder.otel.metrics import register

            register(self._metrics.registry, self._spans)

    def _serve_metrics(self, where: str) -> None:
        """/metrics and /streams, wired as `recorder proxy` wires them."""
        from prometheus_client import CollectorRegistry

        from recorder.core.meter import StreamMeter
        from recorder.core.record import StreamRecord
        from recorder.metrics import Metrics, serve_metrics

        host, _, port = where.rpartition(":")
        try:
            number = int(port)
        except ValueError:
            raise exceptions.OptionsError(
                f"recorder_metrics: HOST:PORT expected, not {where!r}"
            ) from None
        registry = CollectorRegistry()
        metrics = Metrics(registry)

        def on_start(rec: StreamRecord) -> None:
            metrics.stream_started(rec.endpoint, rec.provider)

        def on_record(rec: StreamRecord, meter: StreamMeter) -> None:
            metrics.stream_ended(rec.endpoint, rec.provider)
            metrics.observe(rec, meter)

        self._on_start, self._on_record = on_start, on_record
        metrics.watch_health(self.health)
        self._metrics = metrics
        self.live.on_tick = metrics.live_streams
        try:
            self.metrics_server = serve_metrics(
                registry, host.strip("[]") or "127.0.0.1", number, streams=self.live.snapshot_json
            )
        except OSError as e:
            raise exceptions.OptionsError(f"recorder_metrics: cannot serve on {where}: {e}") from e
        if self._configured:  # the store is open already
            self._watch_store()

    def done(self) -> None:
        """Shutdown: finish the records, then stop serving metrics."""
        super().done()
        if self.metrics_server is not None:
            self.metrics_server.close()

    def close(self) -> None:
        """Flush the store, then the spans (a few seconds at most)."""
        super().close()
        if self._spans is not None:
            self._spans.close()
