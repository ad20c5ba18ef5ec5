"""The addon as a mitmproxy script (``mitmdump -s addons/recorder_addon.py``).

`recorder proxy` is the supported way to run the recorder (it also serves the
metrics); this exists for people who already run mitmproxy with their own
options and addons. Records go to the same SQL store. Options
(``--set name=value``):

- ``recorder_db``: SQLAlchemy URL of the store (default ``sqlite:///recorder.db``);
- ``recorder_spool_dir``: where records wait while the database is away
  (default: the working directory);
- ``recorder_stall_after``: seconds of output silence that count as a stall (30);
- ``recorder_prices``: a price table file (default: the shipped one);
- ``recorder_otlp_endpoint``: export one OpenTelemetry span per stream to this OTLP
  collector (default: OTEL_EXPORTER_OTLP_ENDPOINT, else off; the other OTEL_*
  variables apply too). Dropped spans are logged (no /metrics here).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mitmproxy import exceptions

from recorder.core.pricing import PriceTableError
from recorder.otel import OtlpConfigError, SpanExport
from recorder.otel.export import env_endpoint
from recorder.prices import load_price_file
from recorder.proxy.addon import Recorder, RecorderConfig
from recorder.sinks import MemorySink
from recorder.store import SqlSink, StoreError, StoreUnavailable, key_secret, upgrade


class ScriptRecorder(Recorder):
    """A Recorder configured through mitmproxy options."""

    def __init__(self) -> None:
        super().__init__(MemorySink(), RecorderConfig(key_secret=b""))
        self._configured = False
        self._spans: SpanExport | None = None

    def load(self, loader: Any) -> None:
        """Declare the options."""
        loader.add_option(
            "recorder_db", str, "sqlite:///recorder.db", "SQLAlchemy URL of the record store."
        )
        loader.add_option(
            "recorder_spool_dir",
            str,
            ".",
            "Where records wait while the database is unreachable.",
        )
        loader.add_option(
            "recorder_stall_after", str, "30", "Seconds of output silence that count as a stall."
        )
        loader.add_option(
            "recorder_prices", str, "", "Price table file (default: the one shipped)."
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
        if self._configured:
            return
        db, spool = ctx.options.recorder_db, Path(ctx.options.recorder_spool_dir)
        try:
            self.config.prices = load_price_file(ctx.options.recorder_prices or None)
            try:
                upgrade(db)
                ready = True
            except StoreUnavailable:
                ready = False  # records are spooled until the database answers
            self.config.key_secret = key_secret(db, cache_dir=spool)
            self.sink = SqlSink(db, spool, upgrade=not ready)
            flag = ctx.options.recorder_otlp_endpoint or None
            if flag or env_endpoint():  # the variables' URL the exporter reads itself
                self._spans = SpanExport(flag)
                self.on_span = self._spans.export
        except (PriceTableError, StoreError, OSError, OtlpConfigError) as e:
            raise exceptions.OptionsError(f"recorder: {e}") from e
        self._configured = True

    def close(self) -> None:
        """Flush the store, then the spans (a few seconds at most)."""
        super().close()
        if self._spans is not None:
            self._spans.close()
