"""The addon as a mitmproxy script (``mitmdump -s addons/recorder_addon.py``).

`recorder proxy` is the supported way to run the recorder; this exists for
people who already run mitmproxy with their own options and addons. Options
(``--set name=value``):

- ``recorder_jsonl``: file that receives one JSON line per record
  (default ``recorder.jsonl`` in the working directory);
- ``recorder_stall_after``: seconds of output silence that count as a stall (30);
- ``recorder_secret_file``: where the key-fingerprint secret is kept, unless
  ``RECORDER_KEY_SECRET`` is set (default ``.recorder-key-secret``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mitmproxy import exceptions

from recorder.keys import load_secret
from recorder.proxy.addon import Recorder, RecorderConfig
from recorder.sinks import JsonlSink, MemorySink


class ScriptRecorder(Recorder):
    """A Recorder configured through mitmproxy options."""

    def __init__(self) -> None:
        super().__init__(MemorySink(), RecorderConfig(key_secret=b""))
        self._configured = False

    def load(self, loader: Any) -> None:
        """Declare the options."""
        loader.add_option(
            "recorder_jsonl", str, "recorder.jsonl", "File receiving one JSON line per record."
        )
        loader.add_option(
            "recorder_stall_after", str, "30", "Seconds of output silence that count as a stall."
        )
        loader.add_option(
            "recorder_secret_file",
            str,
            ".recorder-key-secret",
            "File holding the API-key fingerprint secret (unless RECORDER_KEY_SECRET is set).",
        )

    def configure(self, updated: set[str]) -> None:
        """Apply the options (once; the sink is opened on first configure)."""
        from mitmproxy import ctx

        try:
            stall = float(ctx.options.recorder_stall_after)
            if not stall > 0:
                raise ValueError("must be positive")
        except ValueError as e:
            raise exceptions.OptionsError(f"recorder_stall_after: {e}") from e
        self.config.stall_after = stall
        if not self._configured:
            try:
                self.config.key_secret = load_secret(Path(ctx.options.recorder_secret_file))
                self.sink = JsonlSink(ctx.options.recorder_jsonl)
            except OSError as e:
                raise exceptions.OptionsError(f"recorder: {e}") from e
            self._configured = True
