"""`recorder proxy`: run the recording proxy until SIGINT/SIGTERM.

Every option can also come from ``RECORDER_<NAME>`` (``--listen-port`` from
``RECORDER_LISTEN_PORT``; ``--mode`` from ``RECORDER_MODE``, several specs
separated by spaces or commas); a flag on the command line wins.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from recorder.core.errors import UsageError
from recorder.proxy import tokenizers
from recorder.proxy.addon import Recorder, RecorderConfig
from recorder.store import SqlSink, StoreError, StoreUnavailable, key_secret, upgrade
from recorder.store.calibration import warm_from
from recorder.store.engine import display_url
from recorder.store.identity import default_spool_dir
from recorder.store.sinks import FanoutSink, JsonlSink, Sink

DEFAULT_DB = "sqlite:///recorder.db"


class OptionError(UsageError):
    """A bad option value; printed as one line, exit code 2."""


def _env(name: str) -> str | None:
    value = os.environ.get("RECORDER_" + name.upper().replace("-", "_"))
    return value if value not in (None, "") else None


# A finished stream's usage, cost, metrics and record are completed in batches,
# this long after it ended (RecorderConfig.finish_delay): cheaper, and off the
# path of the events of other streams (docs/performance.md).
FINISH_DELAY_S = 0.25


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `proxy` command."""
    p = sub.add_parser(
        "proxy",
        help="run the recording proxy (until SIGINT/SIGTERM)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--mode",
        action="append",
        metavar="SPEC",
        help="mitmproxy mode spec, repeatable: 'regular' (default), "
        "'reverse:https://api.openai.com', 'reverse:http://127.0.0.1:9000@8081'",
    )
    p.add_argument("--listen-host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--listen-port", help="port to listen on (default 8080)")
    p.add_argument("--db", help=f"SQLAlchemy URL of the store (default {DEFAULT_DB})")
    p.add_argument("--jsonl", metavar="FILE", help="also append every record to FILE as JSON lines")
    p.add_argument("--metrics-host", help="where /metrics is served (default 127.0.0.1)")
    p.add_argument("--metrics-port", help="port of /metrics (default 9464)")
    p.add_argument(
        "--stall-after",
        metavar="SECONDS",
        help="output silence that counts as a stall (default 30)",
    )
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="prices to overlay on the shipped table (its models replace the shipped ones)",
    )
    p.add_argument(
        "--spool-dir",
        metavar="DIR",
        help="where records wait while the database is unreachable (default: one directory "
        "per store: FILE.spool beside a SQLite FILE, else under ~/.local/state/recorder/spool)",
    )
    p.add_argument(
        "--max-model-labels",
        metavar="N",
        help="distinct model label values before 'other' (default 50)",
    )
    p.add_argument(
        "--capture-bodies",
        action="store_true",
        default=None,
        help="also keep raw SSE response bodies, compressed, for `recorder replay --id` "
        "(they hold the completion text; prompts are never kept)",
    )
    p.add_argument(
        "--capture-max-bytes",
        metavar="SIZE",
        help="with --capture-bodies: bytes kept per stream, beyond which a body is counted "
        "and marked truncated (default 8MiB; K, M, G suffixes are powers of 1024)",
    )
    p.add_argument(
        "--web",
        action="store_true",
        default=None,
        help="mitmweb's interface instead of the console: every metered flow with the"
        " record's summary, stalled and broken streams marked, an 'LLM stream' view",
    )
    p.add_argument("--web-port", help="with --web: port of the interface (default 8090)")
    p.add_argument(
        "--quiet",
        action="store_true",
        default=None,
        help="no line per stream on the console (stall lines neither)",
    )
    p.add_argument(
        "--log-format",
        choices=("text", "json"),
        help="the console lines: text (default; coloured on a terminal) or one JSON"
        " object per line",
    )
    p.add_argument(
        "--verbose",
        action="store_true",
        default=None,
        help="also a short line for each flow the recorder does not meter",
    )
    p.add_argument(
        "--no-live",
        action="store_true",
        default=None,
        help="none of the live view: no console lines, no live stall gauges, no /streams"
        " (to measure what it costs)",
    )
    p.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="also export one OpenTelemetry span per stream to this OTLP collector "
        "(e.g. http://127.0.0.1:4318; default: OTEL_EXPORTER_OTLP_ENDPOINT, else off)",
    )
    p.add_argument(
        "--otlp-protocol",
        choices=("http/protobuf", "grpc"),
        help="OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf; "
        "grpc needs the otlp-grpc extra)",
    )
    p.set_defaults(func=run)


def _pick(args: argparse.Namespace, name: str, default: str | None) -> str | None:
    value = getattr(args, name.replace("-", "_"))
    if value is None:
        value = _env(name)
    return default if value is None else value


def _flag(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name.replace("-", "_"))
    if value is None:
        value = (_env(name) or "").lower() in ("1", "true", "yes", "on")
    return bool(value)


def _name(args: argparse.Namespace, name: str) -> str:
    """How the user gave option ``name``, for messages: ``--name``, or the
    ``RECORDER_NAME`` variable when the value came from the environment."""
    if getattr(args, name.replace("-", "_"), None) is None and _env(name) is not None:
        return "RECORDER_" + name.upper().replace("-", "_")
    return "--" + name


def _port(text: str | None, what: str) -> int:
    try:
        port = int(text or "")
    except ValueError:
        raise OptionError(f"{what} must be a port number, not {text!r}") from None
    if not 0 <= port <= 65535:
        raise OptionError(f"{what} must be between 0 and 65535, not {port}")
    return port


def _positive_float(text: str | None, what: str) -> float:
    try:
        value = float(text or "")
    except ValueError:
        raise OptionError(f"{what} must be a number of seconds, not {text!r}") from None
    if not value > 0:
        raise OptionError(f"{what} must be positive, not {text}")
    return value


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_size(text: str | None, what: str) -> int:
    """A byte count: ``8388608``, ``512K``, ``8M``, ``8MiB``, ``1G`` (powers of 1024)."""
    raw = (text or "").strip().lower().removesuffix("ib").removesuffix("b")
    unit = raw[-1:] if raw[-1:] in ("k", "m", "g") else ""
    try:
        value = float(raw[: len(raw) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        raise OptionError(f"{what} must be a size such as 8MiB or 65536, not {text!r}") from None
    if not 1 <= value < 2**63:
        raise OptionError(f"{what} must be at least 1 byte, not {text}")
    return int(value)


def parse_modes(specs: list[str] | None) -> list[str]:
    """Mode specs from the flags or RECORDER_MODE, validated by mitmproxy's parser."""
    from mitmproxy.proxy.mode_specs import ProxyMode

    what = "--mode"
    if not specs:
        env = _env("mode")
        specs = env.replace(",", " ").split() if env else ["regular"]
        what = "RECORDER_MODE" if env else what
    for spec in specs:
        try:
            ProxyMode.parse(spec)
        except ValueError as e:
            raise OptionError(f"invalid {what} {spec!r}: {e}") from None
    return specs


class Settings:
    """Validated options of `recorder proxy`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.modes = parse_modes(args.mode)
        self.listen_host = _pick(args, "listen-host", "127.0.0.1") or "127.0.0.1"
        self.listen_port = _port(_pick(args, "listen-port", "8080"), _name(args, "listen-port"))
        self.db = _pick(args, "db", DEFAULT_DB) or DEFAULT_DB
        self.jsonl = _pick(args, "jsonl", None)
        self.metrics_host = _pick(args, "metrics-host", "127.0.0.1") or "127.0.0.1"
        self.metrics_port = _port(_pick(args, "metrics-port", "9464"), _name(args, "metrics-port"))
        self.stall_after = _positive_float(
            _pick(args, "stall-after", "30"), _name(args, "stall-after")
        )
        self.prices = _pick(args, "prices", None)
        from recorder.core.price_files import load_price_file
        from recorder.core.pricing import PriceTableError

        try:
            self.price_table = load_price_file(self.prices)
        except PriceTableError as e:
            raise OptionError(f"{_name(args, 'prices')} {e}") from None
        spool = _pick(args, "spool-dir", None)
        self.spool_dir = Path(spool) if spool else self._default_spool_dir()
        labels = _pick(args, "max-model-labels", "50")
        try:
            self.max_model_labels = int(labels or "")
        except ValueError:
            raise OptionError(
                f"{_name(args, 'max-model-labels')} must be an integer, not {labels!r}"
            ) from None
        if self.max_model_labels < 1:
            raise OptionError(f"{_name(args, 'max-model-labels')} must be at least 1")
        capture = args.capture_bodies
        if capture is None:
            capture = (_env("capture-bodies") or "").lower() in ("1", "true", "yes", "on")
        self.capture_bodies = bool(capture)
        self.capture_max_bytes = parse_size(
            _pick(args, "capture-max-bytes", "8MiB"), _name(args, "capture-max-bytes")
        )
        self.live = not _flag(args, "no-live")
        self.quiet = _flag(args, "quiet")
        self.verbose = _flag(args, "verbose")
        self.log_format = _pick(args, "log-format", "text") or "text"
        if self.log_format not in ("text", "json"):
            raise OptionError(f"--log-format must be text or json, not {self.log_format!r}")
        from recorder.otel.export import OtlpConfigError, env_endpoint, env_protocol, traces_url

        # the flag's URL goes to the exporter; the variables' it reads itself
        self.otlp_flag = _pick(args, "otlp-endpoint", None)
        self.otlp_endpoint = self.otlp_flag or env_endpoint()
        self.otlp_protocol = _pick(args, "otlp-protocol", None) or env_protocol()
        try:
            if self.otlp_endpoint:
                traces_url(self.otlp_endpoint, self.otlp_protocol)
        except OtlpConfigError as e:
            raise OptionError(str(e)) from None
        self.metrics_url = ""
        self.metrics_port_bound = self.metrics_port
        web = args.web
        if web is None:
            web = (_env("web") or "").lower() in ("1", "true", "yes", "on")
        self.web_port = (
            _port(_pick(args, "web-port", "8090"), _name(args, "web-port")) if web else None
        )

    def _default_spool_dir(self) -> Path:
        try:
            return default_spool_dir(self.db)
        except StoreError as e:
            raise OptionError(f"--db {e}") from None


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, resolved) is reachable from this machine
    only: every address it stands for is a loopback one. ``""`` and ``0.0.0.0`` /
    ``::`` (every interface) are not; neither is a name that cannot be resolved."""
    try:
        infos = socket.getaddrinfo(
            host or None, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        addrs = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    except (OSError, ValueError):
        return False
    return bool(addrs) and all(
        a.is_loopback
        or (
            isinstance(a, ipaddress.IPv6Address)
            and bool(a.ipv4_mapped and a.ipv4_mapped.is_loopback)
        )
        for a in addrs
    )


def exposure_warnings(listeners: list[tuple[str, str, int]], metrics: tuple[str, int]) -> list[str]:
    """Banner lines warning of every listener bound beyond loopback: (mode, host,
    port) of the proxy's listeners, (host, port) of /metrics. Empty if none is."""
    import textwrap

    def where(host: str, port: int) -> str:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    warnings = []
    for mode, host, port in listeners:
        if is_loopback(host):
            continue
        if mode.startswith("reverse:"):
            upstream = mode.split(":", 1)[1].split("@", 1)[0]
            what = f"send requests to {upstream} through it, with their own keys"
        else:
            what = (
                "use it as an open proxy: to the LLM APIs with their own keys, and to"
                " any other host this machine can reach"
            )
        warnings.append(
            f"the proxy listens on {where(host, port)}, beyond this machine: anyone who"
            f" can reach that port can {what}."
        )
    host, port = metrics
    if not is_loopback(host):
        warnings.append(
            f"/metrics is served on {where(host, port)}, beyond this machine: anyone who"
            " can reach that port can read it (models, streams, tokens, costs)."
        )
    lines = []
    for text in warnings:
        lines += textwrap.wrap(text, 88, initial_indent="  WARNING: ", subsequent_indent=" " * 11)
    if lines:
        lines.append(
            " " * 11 + "Keep them behind a firewall, or listen on 127.0.0.1 (the default)."
        )
    return lines


def _banner(settings: Settings, confdir: str) -> object:
    from recorder.proxy.runner import Listener

    def show(listeners: list[Listener]) -> None:
        lines = ["recorder: proxy running (Ctrl-C to stop)"]
        for lst in listeners:
            host = f"[{lst.host}]" if ":" in lst.host else lst.host
            base = f"http://{host}:{lst.port}"
            if lst.mode == "web":
                lines.append(f"  web UI   {lst.url}")
                continue
            if lst.mode.startswith("reverse:"):
                upstream = lst.mode.split(":", 1)[1].split("@", 1)[0]
                lines.append(f"  reverse  {base}  ->  {upstream}")
                if "anthropic" not in upstream:
                    lines.append(f"    OpenAI SDK:     OPENAI_BASE_URL={base}/v1")
                if "openai" not in upstream:
                    lines.append(f"    Anthropic SDK:  ANTHROPIC_BASE_URL={base}")
            else:
                lines.append(f"  {lst.mode.split('@')[0]}  {base}")
                lines.append(f"    Python SDKs, curl, Go:  HTTPS_PROXY={base} \\")
                lines.append(f"                    SSL_CERT_FILE={confdir}/mitmproxy-ca-cert.pem")
                lines.append(
                    "    Node's fetch ignores HTTPS_PROXY: NODE_USE_ENV_PROXY=1, or reverse mode"
                    " (README)"
                )
        lines.append(f"  records:  {display_url(settings.db)}  (spool: {settings.spool_dir})")
        if settings.jsonl:
            lines.append(f"            and {settings.jsonl} (JSON lines)")
        if settings.capture_bodies:
            lines.append(
                "            with SSE response bodies, compressed (--capture-bodies:"
                f" up to {_size(settings.capture_max_bytes)} each; they hold completion text)"
            )
        if settings.otlp_endpoint:
            from recorder.otel.export import shown_url

            lines.append(
                f"  traces:   OTLP {settings.otlp_protocol} to {shown_url(settings.otlp_endpoint)}"
            )
        lines.append(f"  metrics:  {settings.metrics_url}")
        if settings.live:
            base = settings.metrics_url.removesuffix("/metrics")
            top = "recorder top" + ("" if base == "http://127.0.0.1:9464" else f" --url {base}")
            lines.append(f"  live:     {base}/streams  (watch it: {top})")
        lines += exposure_warnings(
            [(lst.mode, lst.host, lst.port) for lst in listeners if lst.mode != "web"],
            (settings.metrics_host, settings.metrics_port_bound),
        )
        print("\n".join(lines), flush=True)

    return show


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def open_store(db: str, spool_dir: Path, who: str) -> tuple[bytes, SqlSink] | None:
    """Upgrade the database, read the key secret, open the writer; None after an error.

    A database that cannot be reached is not fatal: records are spooled in
    ``spool_dir`` and written once it answers (the writer upgrades it then).
    """
    try:
        upgrade(db)
        schema_ready = True
    except StoreUnavailable as e:
        print(f"recorder {who}: {e}; records will be spooled in {spool_dir}", file=sys.stderr)
        schema_ready = False
    except StoreError as e:
        print(f"recorder {who}: {e}", file=sys.stderr)
        return None
    try:
        secret = key_secret(db, cache_dir=spool_dir)
        # journal: finished records reach the spool file within 50 ms (kill -9)
        sink = SqlSink(db, spool_dir, upgrade=not schema_ready, journal=True)
    except (StoreUnavailable, OSError) as e:
        print(f"recorder {who}: {e}", file=sys.stderr)
        return None
    return secret, sink


def _cannot_listen(host: str, port: int, e: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = (e.strerror or str(e)).lower()
    return f"cannot listen on {where}: {reason}"


def run(args: argparse.Namespace) -> int:
    """Execute `recorder proxy`."""
    try:
        settings = Settings(args)
    except OptionError as e:
        print(f"recorder proxy: {e}", file=sys.stderr)
        return 2
    from prometheus_client import CollectorRegistry

    from recorder.core.meter import StreamMeter
    from recorder.core.record import StreamRecord
    from recorder.metrics import Metrics, serve_metrics
    from recorder.proxy.runner import ListenError, ProxySettings, probe_listeners, serve

    confdir = os.path.expanduser("~/.mitmproxy")
    # Listeners first, then the store: a port in use is one line, and leaves no
    # database behind (mitmproxy and the metrics server bind them again below).
    web_port = settings.web_port  # mitmweb's interface, if any
    try:
        probe_listeners(
            ProxySettings(
                modes=settings.modes,
                listen_host=settings.listen_host,
                listen_port=settings.listen_port,
            ),
            also=[(settings.metrics_host, settings.metrics_port, "--metrics-port")]
            + ([("127.0.0.1", web_port, "--web-port")] if web_port else []),
        )
    except ListenError as e:
        hint = "change the port in --mode" if e.option == "--mode" else f"use {e.option}"
        print(f"recorder: {_cannot_listen(e.host, e.port, e.error)} ({hint})", file=sys.stderr)
        return 1
    opened = open_store(settings.db, settings.spool_dir, "proxy")
    if opened is None:
        return 1
    secret, store = opened
    sink: Sink = store
    if settings.jsonl:
        try:
            sink = FanoutSink(store, JsonlSink(settings.jsonl))
        except OSError as e:
            store.close()
            print(f"recorder proxy: --jsonl {settings.jsonl}: {e.strerror or e}", file=sys.stderr)
            return 1

    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=settings.max_model_labels)

    def on_start(rec: StreamRecord) -> None:
        metrics.stream_started(rec.endpoint, rec.provider)

    def on_record(rec: StreamRecord, meter: StreamMeter) -> None:
        metrics.stream_ended(rec.endpoint, rec.provider)
        metrics.observe(rec, meter)

    recorder = Recorder(
        sink,
        RecorderConfig(
            key_secret=secret,
            prices=settings.price_table,
            stall_after=settings.stall_after,
            capture_bodies=settings.capture_bodies,
            capture_max_bytes=settings.capture_max_bytes,
            finish_delay=FINISH_DELAY_S,
        ),
        on_record=on_record,
        on_start=on_start,
    )
    metrics.watch_health(recorder.health)
    # the estimator's calibration is kept by the stored streams: relearn it
    if warm_from(settings.db, recorder.estimator) is None:
        print("recorder proxy: estimator not warmed (database unreadable)", file=sys.stderr)
    tokenizers.preload()  # a second or so, now rather than in the first request
    from recorder.proxy.live import Live

    live = (
        Live(
            recorder,
            log_format=settings.log_format,
            quiet=settings.quiet,
            verbose=settings.verbose,
            on_tick=metrics.live_streams,
            background=True,
            flush_on_done=False,  # flushed below, once the clients are let go
        )
        if settings.live
        else None
    )
    spans = None
    if settings.otlp_endpoint:
        from recorder.otel import OtlpConfigError, SpanExport
        from recorder.otel.metrics import register

        try:
            spans = SpanExport(settings.otlp_flag, protocol=settings.otlp_protocol)
        except OtlpConfigError as e:
            recorder.close()
            print(f"recorder proxy: {e}", file=sys.stderr)
            return 2
        register(registry, spans)
        recorder.on_span = spans.export

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
    try:
        server = serve_metrics(
            registry,
            settings.metrics_host,
            settings.metrics_port,
            streams=live.snapshot_json if live is not None else None,
        )
    except OSError as e:
        recorder.close()
        print(
            f"recorder proxy: cannot serve metrics on {settings.metrics_host}:"
            f"{settings.metrics_port}: {e.strerror or e}",
            file=sys.stderr,
        )
        return 1
    settings.metrics_url = server.url
    settings.metrics_port_bound = server.port
    proxy = ProxySettings(
        modes=settings.modes,
        listen_host=settings.listen_host,
        listen_port=settings.listen_port,
        confdir=confdir,
        web_port=settings.web_port,
        addons=[live] if live is not None else [],
    )
    try:
        asyncio.run(serve(recorder, proxy, _banner(settings, confdir)))  # type: ignore[arg-type]
    except KeyboardInterrupt:
        pass
    finally:
        recorder.close()  # drains the writer: every record written or spooled
        if spans is not None:
            spans.close()  # a few seconds at most; what is left is counted dropped
        server.close()
        if live is not None:
            live.flush()  # the last records' lines
    stats = store.stats()
    print(
        f"recorder: stopped; {recorder.health.records} records:"
        f" {stats['written']} written to the database, {stats['spooled']} spooled,"
        f" {stats['dropped']} dropped; {recorder.cut_at_shutdown} streams were still open"
        " and cut by the shutdown"
    )
    return 0
