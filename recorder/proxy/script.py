"""The addon as a mitmproxy script (``mitmdump -s addons/recorder_addon.py``).

`recorder proxy` is the supported way to run the recorder (it also serves the
metrics); this exists for people who already run mitmproxy with their own
options and addons. Records go to the same SQL store. Options
(``--set name=value``):

- ``recorder_db``: SQLAlchemy URL of the store (default ``sqlite:///recorder.db``);
- ``recorder_spool_dir``: where records wait while the database is away
  (default: one directory per store, ``recorder.db.spool`` beside a SQLite file);
- ``recorder_stall_after``: seconds of output silence that count as a stall (30);
- ``recorder_prices``: a price table file (default: the shipped one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mitmproxy import exceptions

from recorder.core.pricing import PriceTableError
from recorder.prices import load_price_file
from recorder.proxy.addon import Recorder, RecorderConfig
from recorder.sinks import MemorySink
from recorder.store import SqlSink, StoreError, StoreUnavailable, key_secret, upgrade
from recorder.store.identity import default_spool_dir


class ScriptRecorder(Recorder):
    """A Recorder configured through mitmproxy options."""

    def __init__(self) -> None:
        super().__init__(MemorySink(), RecorderConfig(key_secret=b""))
        self._configured = False

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
            "recorder_prices", str, "", "Price table file (default: the one shipped)."
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
            self.sink = SqlSink(db, spool, upgrade=not ready, journal=True)
        except (PriceTableError, StoreError, OSError) as e:
            raise exceptions.OptionsError(f"recorder: {e}") from e
        self._configured = True
