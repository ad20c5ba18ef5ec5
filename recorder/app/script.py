"""The recorder as a mitmproxy script: ``mitmdump -s addons/recorder_addon.py``
(or ``mitmweb -s …``), for people who run mitmproxy with their own options and
addons. It records what ``recorder proxy`` records: the same option table
(``recorder.proxy.options``: every ``--set recorder_…=…``, also in
``~/.mitmproxy/config.yaml``), the same composition root (``recorder.app``),
``/metrics`` on 127.0.0.1:9464 unless ``recorder_metrics_port=0``, the same
finishing delay, banner and warnings.

The recorder is built on the first ``configure``. A later change of a
``recorder_…`` option (``--set`` in mitmweb's options, ``ctx.options.update`` of
another addon, a config file reloaded) is applied when it can be while the
proxy runs (``recorder_stall_after``, ``recorder_prices``, ``recorder_quiet``,
``recorder_verbose``, ``recorder_log_format``) and refused with an
``OptionsError`` otherwise (mitmproxy then keeps the old value): the store, the
spool, the sinks, the metrics address and the exporter are opened once.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from mitmproxy import ctx, exceptions

from recorder.app.banner import banner_lines
from recorder.app.compose import App, StartError, build
from recorder.app.settings import checked
from recorder.otel import SpanExport
from recorder.proxy.observers import SpanObserver
from recorder.proxy.options import AppConfig, Given, OptionError
from recorder.proxy.webview import register_view

log = logging.getLogger("recorder")


class _Shutdown:
    """The script's last addon: once the recorder has finished its records and
    closed the sink (its ``done``), the span exporter sends what is left."""

    def __init__(self, script: ScriptRecorder) -> None:
        self.script = script

    def done(self) -> None:
        app = self.script.app
        if app is not None and app.spans is not None:
            app.spans.close()


class ScriptRecorder:
    """The mitmproxy addon of the script: declares the options, builds the recorder
    from them, and hands mitmproxy the recorder's addons (:attr:`addons`)."""

    def __init__(self, table: type[AppConfig] = AppConfig) -> None:
        self.table = table  # the option table (another one in tests)
        self.app: App | None = None
        self.config: AppConfig | None = None
        self._given: Given = {}  # the options' values as last configured
        self._shutdown = _Shutdown(self)

    # -- what the app built ---------------------------------------------------

    @property
    def addons(self) -> list[Any]:
        """The recorder, its live and web views, the /metrics server, then the
        shutdown of the exporter (mitmproxy calls their hooks in this order)."""
        if self.app is None:
            return []
        return [self.app.recorder, *self.app.addons, self.app.serving, self._shutdown]

    @property
    def sink(self) -> Any:
        """The recorder's sink (None before the first configure)."""
        return self.app.sink if self.app is not None else None

    @property
    def estimator(self) -> Any:
        """The recorder's estimator (None before the first configure)."""
        return self.app.recorder.estimator if self.app is not None else None

    @property
    def on_span(self) -> Any:
        """The span export, if one is configured (else None)."""
        if self.app is None:
            return None
        for observer in self.app.recorder.observers:
            if isinstance(observer, SpanObserver):
                return observer.spans.export
        return None

    @property
    def spans(self) -> SpanExport | None:
        """The OTLP exporter, if any."""
        return self.app.spans if self.app is not None else None

    # -- mitmproxy hooks --------------------------------------------------------

    def load(self, loader: Any) -> None:
        """Declare the ``recorder_…`` options (generated from the option table)."""
        self.table.add_mitmproxy_options(loader)
        register_view()  # the "LLM stream" content view, for mitmweb

    def configure(self, updated: set[str]) -> None:
        """Build the recorder on the first call; later, apply or refuse changes of
        the recorder's options (see the module's docstring)."""
        if self.app is not None and not (set(updated) & self.table.mitmproxy_names()):
            return  # another addon's options
        try:
            given = self.table.from_mitmproxy(ctx.options)
            config = checked(given, under="mitmproxy", table=self.table)
        except OptionError as e:
            raise exceptions.OptionsError(f"recorder: {e}") from None
        if self.app is None:
            self._build(config)
        else:
            self._change(config, given)
        self._given = given

    def _build(self, config: AppConfig) -> None:
        web = type(ctx.master).__name__ == "WebMaster"
        try:
            self.app = build(
                config,
                web=web,
                embedded=True,
                # /metrics on the default port is a convenience: taken (another
                # mitmdump, a recorder proxy), the recording still starts
                metrics_optional=not ctx.options.has_changed("recorder_metrics_port")
                and not ctx.options.recorder_metrics,
                warn=lambda line: log.warning("recorder: %s", line),
            )
        except StartError as e:
            raise exceptions.OptionsError(f"recorder: {e}") from None
        self.config = config
        for line in config.notes:
            log.info("recorder: %s", line)

    def _change(self, new: AppConfig, given: Given) -> None:
        """Apply what may change while the proxy runs; refuse the rest. A change is
        a value given differently than before (not one derived: the spool
        directory follows the store unless it is given). A change is applied to
        the addon's configuration and the live view, whichever has the option's
        attribute; mitmproxy's own options (``mode``) are mitmproxy's to apply."""
        assert self.app is not None and self.config is not None
        before = self._given
        changed = [
            opt
            for opt in self.table.options()
            if opt.declared is not None and given.get(opt.name) != before.get(opt.name)
        ]
        fixed = [opt for opt in changed if not opt.runtime]
        if fixed:
            names = ", ".join(new.where(opt.name) for opt in fixed)
            raise exceptions.OptionsError(
                f"recorder: {names} cannot change while mitmproxy runs (the store, the"
                " sinks, /metrics and the exporter are opened at start); restart mitmproxy"
                " with the new value"
            )
        targets = [self.app.recorder.config, self.app.live]
        for opt in changed:
            for target in targets:
                if target is not None and hasattr(target, opt.attr):
                    setattr(target, opt.attr, getattr(new, opt.attr))
        self.config = new
        if changed:
            log.info("recorder: %s changed", ", ".join(new.where(o.name) for o in changed))

    def running(self) -> None:
        """mitmproxy listens: the banner, as `recorder proxy` prints it."""
        if self.app is None or self.config is None:
            return
        from recorder.proxy.runner import listeners_of

        try:
            lines = banner_lines(
                self.config,
                listeners_of(ctx.master),  # type: ignore[arg-type]
                os.path.expanduser(ctx.options.confdir),
                title="recorder: recording inside mitmproxy",
                mitmproxy=True,
            )
        except Exception:
            log.exception("recorder: banner")
            return
        print("\n".join(lines), flush=True)

    def close(self) -> None:
        """Close the recorder's sink, the exporter, /metrics (tests; mitmproxy's
        ``done`` does it in a run)."""
        if self.app is not None:
            self.app.close()
