"""The recorder's options, once: :class:`AppConfig`, the option table from which
the ``recorder proxy`` flags, the ``RECORDER_*`` variables, the mitmproxy options
(``--set recorder_…=…``, ``~/.mitmproxy/config.yaml``) and the checked
configuration's attributes are all made (``recorder.proxy.option_table`` says
how), with the same checks whichever way a value came.

Adding an option is adding one attribute below; the addon's configuration
(``recorder.proxy.config.RecorderConfig``) takes every option named like one of
its fields. What needs the store (the spool directory by default, whether the
store takes the URL) is checked by the composition root (``recorder.app.settings``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from recorder.proxy.checks import (
    Choice,
    OptionError,
    db_note,
    optional_path,
    optional_text,
    parse_count,
    parse_db,
    parse_metrics_tag,
    parse_modes,
    parse_port,
    parse_prices,
    parse_seconds,
    parse_size,
    parse_switch,
    parse_tag_headers,
    text,
)
from recorder.proxy.option_table import Given, Option, OptionTable

DEFAULT_DB = "sqlite:///recorder.db"
DEFAULT_METRICS_PORT = 9464
# A finished stream's usage, cost, metrics and record are completed in batches,
# this long after it ended (RecorderConfig.finish_delay): cheaper, and off the
# path of the events of other streams (docs/performance.md). Both ways of running
# the recorder (`recorder proxy`, `mitmdump -s`) use it.
FINISH_DELAY_S = 0.25
# Likewise a new flow's record, meter and key mask are made this long after its
# request came (RecorderConfig.start_delay), with those of the others that came
# meanwhile, unless something needs them sooner.
START_DELAY_S = 0.25
# The mitmproxy option of earlier versions: HOST:PORT of /metrics, then off by default.
METRICS_ALIAS = "recorder_metrics"

__all__ = ["DEFAULT_DB", "FINISH_DELAY_S", "AppConfig", "Given", "OptionError"]


def _otlp_env_protocol() -> str:
    from recorder.otel.export import env_protocol

    return env_protocol()


class AppConfig(OptionTable):
    """The option table, one attribute per option; an instance holds every option
    checked: what the composition root builds the recorder from."""

    modes = Option(
        "regular",
        "mitmproxy mode spec, repeatable: 'regular' (default), "
        "'reverse:https://api.openai.com', 'reverse:http://127.0.0.1:9000@8081', "
        "'upstream:http://corp-proxy:3128'",
        parse_modes,
        name="mode",
        metavar="SPEC",
        mitmproxy="mode",
        repeat=True,
        doc="`regular`, `reverse:URL[@PORT]` (the URL with its scheme),"
        " `upstream:http://HOST:PORT`, …; in the variable several, by spaces or commas",
    )
    listen_host = Option(
        "127.0.0.1",
        "address to listen on (default 127.0.0.1)",
        text,
        metavar="HOST",
        mitmproxy=False,
        doc="the proxy's address (under mitmproxy, its own `--listen-host`)",
    )
    listen_port = Option(
        8080,
        "port to listen on (default 8080)",
        parse_port,
        metavar="PORT",
        mitmproxy=False,
        doc="the proxy's port (under mitmproxy, its own `--listen-port`)",
    )
    db = Option(
        DEFAULT_DB,
        f"SQLAlchemy URL of the store, or a SQLite file's path ending in .db or .sqlite"
        f" (default {DEFAULT_DB})",
        parse_db,
        metavar="URL",
        note=db_note,
        doc="the store; a path ending in `.db` or `.sqlite` is that SQLite file",
    )
    spool_dir = Option(
        "",
        "where records wait while the database is unreachable (default: one directory "
        "per store: FILE.spool beside a SQLite FILE, else under ~/.local/state/recorder/spool)",
        optional_path,
        metavar="DIR",
        doc="where records wait while the database is away",
        shown="one per store",
    )
    jsonl = Option(
        "",
        "also append every record to FILE as JSON lines",
        optional_text,
        metavar="FILE",
        doc="also every record as a JSON line",
    )
    metrics_host = Option(
        "127.0.0.1",
        "where /metrics (and /streams, for `recorder top`) is served (default 127.0.0.1)",
        text,
        metavar="HOST",
        doc="where `/metrics` and `/streams` are served",
    )
    metrics_port = Option(
        DEFAULT_METRICS_PORT,
        f"port of /metrics (default {DEFAULT_METRICS_PORT}; 0: not served)",
        parse_port,
        metavar="PORT",
        doc="their port; 0: not served",
    )
    stall_after = Option(
        "30",
        "output silence that counts as a stall (default 30)",
        parse_seconds,
        metavar="SECONDS",
        runtime=True,
        doc="output silence that counts as a stall",
    )
    prices = Option(
        "",
        "prices to overlay on the shipped table (its models replace the shipped ones)",
        parse_prices,
        metavar="FILE",
        runtime=True,
        doc="prices overlaid on the shipped ones",
        shown="the shipped table",
    )
    max_model_labels = Option(
        50,
        "distinct model label values before 'other' (default 50)",
        parse_count,
        metavar="N",
        doc="model label values before `other`",
    )
    tag_headers = Option(
        "",
        "a request header read into a tag, repeatable: NAME (the tag NAME) or HEADER=TAG;"
        " X-Recorder-Tag: team=search,feature=summarise is always read",
        parse_tag_headers,
        name="tag-header",
        metavar="NAME",
        repeat=True,
        doc="a request header read into a tag (`NAME` or `HEADER=TAG`), besides"
        " `X-Recorder-Tag: team=search,…`; in the variable several, by spaces or commas",
        shown="none",
    )
    strip_tag_headers = Option(
        False,
        "remove X-Recorder-Tag and the --tag-header headers before the request goes"
        " upstream (the request is otherwise forwarded unchanged)",
        parse_switch,
        doc="remove the tag headers before the request goes on",
    )
    keep_user_ids = Option(
        False,
        "store end-user ids (OpenAI user, safety_identifier; Anthropic metadata.user_id)"
        " as sent, not as an HMAC fingerprint (they are personal data)",
        parse_switch,
        doc="store end-user ids as sent, not fingerprinted",
    )
    retry_window = Option(
        "600",
        "how long after an attempt that did not complete the same request from the"
        " same key counts as its retry (default 600)",
        parse_seconds,
        metavar="SECONDS",
        doc="how long a request may come after a failed attempt and be its retry",
    )
    metrics_tag = Option(
        "",
        "one tag exported as a label of the stream metrics (capped as models are,"
        " past the cap 'other'; empty for requests without it)",
        parse_metrics_tag,
        metavar="NAME",
        doc="one tag as a label of the stream metrics",
        shown="none",
    )
    capture_bodies = Option(
        False,
        "also keep raw SSE response bodies, compressed, for `recorder replay --id` "
        "(they hold the completion text; prompts are never kept)",
        parse_switch,
        doc="keep SSE response bodies for `recorder replay --id`",
    )
    capture_max_bytes = Option(
        "8MiB",
        "with --capture-bodies: bytes kept per stream, beyond which a body is counted "
        "and marked truncated (default 8MiB; K, M, G suffixes are powers of 1024)",
        parse_size,
        metavar="SIZE",
        doc="per captured body",
    )
    web = Option(
        False,
        "mitmweb's interface instead of the console: every metered flow with the"
        " record's summary, stalled and broken streams marked, an 'LLM stream' view",
        parse_switch,
        mitmproxy=False,
        doc="mitmweb's interface (under mitmproxy: run `mitmweb`)",
    )
    web_port = Option(
        8090,
        "with --web: port of the interface (default 8090)",
        parse_port,
        metavar="PORT",
        mitmproxy=False,
        doc="its port",
    )
    quiet = Option(
        False,
        "no line per stream on the console (stall lines neither)",
        parse_switch,
        runtime=True,
        doc="fewer console lines: none per stream",
    )
    log_format = Option(
        "text",
        "the console lines: text (default; coloured on a terminal) or one JSON object per line",
        Choice("text", "json"),
        runtime=True,
        doc="the console lines",
    )
    verbose = Option(
        False,
        "also a short line for each flow the recorder does not meter",
        parse_switch,
        runtime=True,
        doc="more console lines: one for each flow not metered",
    )
    no_live = Option(
        False,
        "none of the live view: no console lines, no live stall gauges, no /streams"
        " (to measure what it costs)",
        parse_switch,
        doc="no live view at all",
    )
    # the flag's URL goes to the exporter; the variables' it reads itself
    otlp_flag = Option(
        "",
        "also export one OpenTelemetry span per stream to this OTLP collector "
        "(e.g. http://127.0.0.1:4318; default: OTEL_EXPORTER_OTLP_ENDPOINT, else off)",
        optional_text,
        name="otlp-endpoint",
        metavar="URL",
        doc="one span per stream",
        shown="`OTEL_EXPORTER_OTLP_ENDPOINT`, else off",
    )
    otlp_protocol = Option(
        "",
        "OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf; "
        "grpc needs the otlp-grpc extra)",
        Choice("http/protobuf", "grpc", unset=_otlp_env_protocol),
        doc="the OTLP transport",
        shown="`OTEL_EXPORTER_OTLP_PROTOCOL`, else http/protobuf",
    )

    set_hints: ClassVar[dict[str, str]] = {METRICS_ALIAS: "use --metrics-host and --metrics-port"}

    # Not options: the composition root's delays, and what it fills in once
    # /metrics is served.
    finish_delay: float = FINISH_DELAY_S
    start_delay: float = START_DELAY_S
    metrics_url: str = ""
    _bound_port: int | None = None

    @property
    def metrics_port_bound(self) -> int:
        """The port /metrics is served on (the option's, until it is bound)."""
        return self.metrics_port if self._bound_port is None else self._bound_port

    @metrics_port_bound.setter
    def metrics_port_bound(self, port: int) -> None:
        self._bound_port = port

    @property
    def live(self) -> bool:
        """Whether the live view runs (``--no-live`` is off)."""
        return not self.no_live

    @property
    def otlp_endpoint(self) -> str | None:
        """Where spans go: the option's URL, else the standard variables' (none: off)."""
        from recorder.otel.export import env_endpoint

        return self.otlp_flag or env_endpoint()

    def check(self) -> None:
        """The OTLP endpoint, whichever way it came, is one the exporter takes."""
        from recorder.otel.export import OtlpConfigError, traces_url

        endpoint = self.otlp_endpoint
        try:
            if endpoint:
                traces_url(endpoint, self.otlp_protocol)
        except OtlpConfigError as e:
            raise OptionError(str(e)) from None

    # -- the older recorder_metrics=HOST:PORT, under mitmproxy ----------------------------

    @classmethod
    def mitmproxy_names(cls) -> frozenset[str]:
        return super().mitmproxy_names() | {METRICS_ALIAS}

    @classmethod
    def add_mitmproxy_options(cls, loader: Any) -> None:
        super().add_mitmproxy_options(loader)
        loader.add_option(
            METRICS_ALIAS,
            str,
            "",
            "HOST:PORT of /metrics: the same as recorder_metrics_host and recorder_metrics_port"
            " (kept from earlier versions).",
        )

    @classmethod
    def from_mitmproxy(cls, options: Any) -> Given:
        """The values of the mitmproxy options, with the older
        ``recorder_metrics=HOST:PORT`` read as the metrics host and port."""
        given = super().from_mitmproxy(options)
        alias = getattr(options, METRICS_ALIAS, "") if METRICS_ALIAS in options else ""
        if alias:
            host, sep, port = str(alias).rpartition(":")
            if not sep:
                raise OptionError(f"{METRICS_ALIAS} must be HOST:PORT, not {alias!r}")
            given["metrics-host"] = (host.strip("[]") or "127.0.0.1", METRICS_ALIAS)
            given["metrics-port"] = (port, METRICS_ALIAS)
        return given
