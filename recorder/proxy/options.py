"""The recorder's options, once: the table from which the ``recorder proxy`` flags,
the ``RECORDER_*`` variables and the mitmproxy options (``--set recorder_…=…``,
``~/.mitmproxy/config.yaml``) are generated, and the checks every value passes
whichever way it came.

Each :class:`Option` has one name (``stall-after``) and gives the flag
(``--stall-after``), the variable (``RECORDER_STALL_AFTER``) and, unless it is one
mitmproxy has already (``--mode``, ``--listen-host``, …), the mitmproxy option
(``recorder_stall_after``). A value is read as text (or as the mitmproxy option's
own type) and checked by the option's ``parse``, whose error names where the value
came from: the flag, the variable or the mitmproxy option. :func:`from_args` and
:func:`from_mitmproxy` collect the given values; :func:`resolve` checks them all
and returns an :class:`AppConfig`, what ``recorder.app`` builds the recorder from.

A flag on the command line wins over the variable, which wins over the default.
Under mitmproxy the variables are not read: its own options and config file are
the place.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recorder.core.captured import DEFAULT_CAPTURE_MAX_BYTES
from recorder.core.pricing import PriceTable
from recorder.proxy.checks import (
    OptionError,
    choice,
    parse_count,
    parse_modes,
    parse_port,
    parse_seconds,
    parse_size,
    parse_switch,
    text,
)
from recorder.proxy.exposure import exposure_warnings, is_loopback

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
PREFIX = "recorder_"  # of the mitmproxy options


__all__ = [
    "OptionError",
    "exposure_warnings",
    "is_loopback",
    "parse_size",
]


# -- the table ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Option:
    """One option of the recorder, and every way to give it."""

    name: str  # "stall-after": --stall-after, RECORDER_STALL_AFTER, recorder_stall_after
    kind: type  # the mitmproxy option's type: str, int or bool
    default: Any  # as mitmproxy holds it ("" for none)
    help: str
    parse: Callable[[Any, str], Any] = text  # bool options: always parse_switch
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    # False: mitmproxy has this option itself (--mode, --listen-host, …)
    mitmproxy: bool = True
    # True: under mitmproxy it may change while the proxy runs (``--set`` in
    # mitmweb's options, ``ctx.options.update``); any other change is refused
    runtime: bool = False

    @property
    def flag(self) -> str:
        """The ``recorder proxy`` flag."""
        return "--" + self.name

    @property
    def env(self) -> str:
        """The environment variable of ``recorder proxy``."""
        return "RECORDER_" + self.name.upper().replace("-", "_")

    @property
    def mitm(self) -> str | None:
        """The mitmproxy option (``recorder_…``), or None when mitmproxy has its own."""
        return PREFIX + self.name.replace("-", "_") if self.mitmproxy else None

    @property
    def dest(self) -> str:
        """The argparse attribute."""
        return self.name.replace("-", "_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "mode",
        str,
        "regular",
        "mitmproxy mode spec, repeatable: 'regular' (default), "
        "'reverse:https://api.openai.com', 'reverse:http://127.0.0.1:9000@8081', "
        "'upstream:http://corp-proxy:3128'",
        parse=parse_modes,
        metavar="SPEC",
        mitmproxy=False,
    ),
    Option(
        "listen-host",
        str,
        "127.0.0.1",
        "address to listen on (default 127.0.0.1)",
        mitmproxy=False,
    ),
    Option(
        "listen-port",
        int,
        8080,
        "port to listen on (default 8080)",
        parse=parse_port,
        mitmproxy=False,
    ),
    Option("db", str, DEFAULT_DB, f"SQLAlchemy URL of the store (default {DEFAULT_DB})"),
    Option(
        "jsonl",
        str,
        "",
        "also append every record to FILE as JSON lines",
        metavar="FILE",
    ),
    Option(
        "metrics-host",
        str,
        "127.0.0.1",
        "where /metrics (and /streams, for `recorder top`) is served (default 127.0.0.1)",
    ),
    Option(
        "metrics-port",
        int,
        DEFAULT_METRICS_PORT,
        f"port of /metrics (default {DEFAULT_METRICS_PORT}; 0: not served)",
        parse=parse_port,
    ),
    Option(
        "stall-after",
        str,
        "30",
        "output silence that counts as a stall (default 30)",
        parse=parse_seconds,
        metavar="SECONDS",
        runtime=True,
    ),
    Option(
        "prices",
        str,
        "",
        "prices to overlay on the shipped table (its models replace the shipped ones)",
        metavar="FILE",
        runtime=True,
    ),
    Option(
        "spool-dir",
        str,
        "",
        "where records wait while the database is unreachable (default: one directory "
        "per store: FILE.spool beside a SQLite FILE, else under ~/.local/state/recorder/spool)",
        metavar="DIR",
    ),
    Option(
        "max-model-labels",
        int,
        50,
        "distinct model label values before 'other' (default 50)",
        parse=parse_count,
        metavar="N",
    ),
    Option(
        "capture-bodies",
        bool,
        False,
        "also keep raw SSE response bodies, compressed, for `recorder replay --id` "
        "(they hold the completion text; prompts are never kept)",
    ),
    Option(
        "capture-max-bytes",
        str,
        "8MiB",
        "with --capture-bodies: bytes kept per stream, beyond which a body is counted "
        "and marked truncated (default 8MiB; K, M, G suffixes are powers of 1024)",
        parse=parse_size,
        metavar="SIZE",
    ),
    Option(
        "web",
        bool,
        False,
        "mitmweb's interface instead of the console: every metered flow with the"
        " record's summary, stalled and broken streams marked, an 'LLM stream' view",
        mitmproxy=False,
    ),
    Option(
        "web-port",
        int,
        8090,
        "with --web: port of the interface (default 8090)",
        parse=parse_port,
        mitmproxy=False,
    ),
    Option(
        "quiet",
        bool,
        False,
        "no line per stream on the console (stall lines neither)",
        runtime=True,
    ),
    Option(
        "log-format",
        str,
        "text",
        "the console lines: text (default; coloured on a terminal) or one JSON object per line",
        parse=choice("text", "json"),
        choices=("text", "json"),
        runtime=True,
    ),
    Option(
        "verbose",
        bool,
        False,
        "also a short line for each flow the recorder does not meter",
        runtime=True,
    ),
    Option(
        "no-live",
        bool,
        False,
        "none of the live view: no console lines, no live stall gauges, no /streams"
        " (to measure what it costs)",
    ),
    Option(
        "otlp-endpoint",
        str,
        "",
        "also export one OpenTelemetry span per stream to this OTLP collector "
        "(e.g. http://127.0.0.1:4318; default: OTEL_EXPORTER_OTLP_ENDPOINT, else off)",
        metavar="URL",
    ),
    Option(
        "otlp-protocol",
        str,
        "",
        "OTLP transport (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf; "
        "grpc needs the otlp-grpc extra)",
        parse=choice("http/protobuf", "grpc"),
        choices=("http/protobuf", "grpc"),
    ),
)
BY_NAME: dict[str, Option] = {opt.name: opt for opt in OPTIONS}
BY_MITM: dict[str, Option] = {opt.mitm: opt for opt in OPTIONS if opt.mitm}
# The mitmproxy option of earlier versions: HOST:PORT of /metrics, then off by default.
METRICS_ALIAS = "recorder_metrics"


# -- the ways in ---------------------------------------------------------------------

# name -> (value as given, where it came from: the flag, the variable, the option)
Given = dict[str, tuple[Any, str]]


def add_flags(parser: Any) -> None:
    """The ``recorder proxy`` flags, one per option (defaults are None: unset, so
    that the variable or the default applies), and ``--set``."""
    for opt in OPTIONS:
        if opt.kind is bool:
            parser.add_argument(opt.flag, action="store_true", default=None, help=opt.help)
        elif opt.name == "mode":
            parser.add_argument(opt.flag, action="append", metavar=opt.metavar, help=opt.help)
        else:
            parser.add_argument(opt.flag, metavar=opt.metavar, choices=opt.choices, help=opt.help)
    parser.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        dest="mitm_set",
        help="any mitmproxy option, repeatable: ssl_insecure=true,"
        " ssl_verify_upstream_trusted_ca=ca.pem, upstream_cert=false, client_certs=DIR, …"
        " (`mitmdump --options` lists them); a recorder_… option is the same as its flag",
    )


def from_args(args: Any, environ: Mapping[str, str] | None = None) -> Given:
    """The values ``recorder proxy`` was given: each flag, else its variable."""
    env = os.environ if environ is None else environ
    given: Given = {}
    for opt in OPTIONS:
        value = getattr(args, opt.dest, None)
        if value is not None and value != []:
            given[opt.name] = (value, opt.flag)
            continue
        raw = env.get(opt.env)
        if raw not in (None, ""):
            given[opt.name] = (raw, opt.env)
    # `--set recorder_db=…` is the same as --db (but the flag wins)
    for name, value in parse_sets(getattr(args, "mitm_set", None)):
        if not name.startswith(PREFIX):
            continue  # mitmproxy's own: checked by mitmproxy
        known = BY_MITM.get(name)
        if known is None:
            hint = (
                "use --metrics-host and --metrics-port"
                if name == METRICS_ALIAS
                else "known: " + ", ".join(sorted(BY_MITM))
            )
            raise OptionError(f"--set {name}: no such recorder option ({hint})")
        if getattr(args, known.dest, None) in (None, []):
            given[known.name] = (value, f"--set {name}")
    return given


def mitmproxy_sets(specs: Sequence[str] | None) -> list[str]:
    """The ``--set`` specs that are mitmproxy's own (not ``recorder_…``), as given."""
    return [f"{name}={value}" for name, value in parse_sets(specs) if not name.startswith(PREFIX)]


def from_mitmproxy(options: Any) -> Given:
    """The values of the ``recorder_…`` mitmproxy options, with the older
    ``recorder_metrics=HOST:PORT`` read as the metrics host and port."""
    given: Given = {}
    for name, opt in BY_MITM.items():
        given[opt.name] = (getattr(options, name), name)
    alias = getattr(options, METRICS_ALIAS, "") if METRICS_ALIAS in options else ""
    if alias:
        host, sep, port = str(alias).rpartition(":")
        if not sep:
            raise OptionError(f"{METRICS_ALIAS} must be HOST:PORT, not {alias!r}")
        given["metrics-host"] = (host.strip("[]") or "127.0.0.1", METRICS_ALIAS)
        given["metrics-port"] = (port, METRICS_ALIAS)
    return given


def add_mitmproxy_options(loader: Any) -> None:
    """Declare every ``recorder_…`` option to mitmproxy (an addon's ``load``)."""
    for opt in OPTIONS:
        if opt.mitm is not None:
            loader.add_option(
                opt.mitm, opt.kind, opt.default, opt.help, list(opt.choices or ()) or None
            )
    loader.add_option(
        METRICS_ALIAS,
        str,
        "",
        "HOST:PORT of /metrics: the same as recorder_metrics_host and recorder_metrics_port"
        " (kept from earlier versions).",
    )


# -- checked values ----------------------------------------------------------------------


@dataclass
class AppConfig:
    """Every option checked: what the composition root builds the recorder from."""

    db: str = DEFAULT_DB
    modes: list[str] = field(default_factory=lambda: ["regular"])
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    jsonl: str | None = None
    metrics_host: str = "127.0.0.1"
    metrics_port: int = DEFAULT_METRICS_PORT  # 0: /metrics is not served
    stall_after: float = 30.0
    prices: str | None = None
    price_table: PriceTable | None = None
    spool_dir: Path = Path("recorder.db.spool")
    max_model_labels: int = 50
    capture_bodies: bool = False
    capture_max_bytes: int = DEFAULT_CAPTURE_MAX_BYTES
    live: bool = True
    quiet: bool = False
    verbose: bool = False
    log_format: str = "text"
    # the flag's URL goes to the exporter; the variables' it reads itself
    otlp_flag: str | None = None
    otlp_endpoint: str | None = None
    otlp_protocol: str = "http/protobuf"
    web_port: int | None = None  # mitmweb's interface (`recorder proxy --web`)
    mitm_set: list[str] = field(default_factory=list)  # `--set NAME=VALUE`, as given
    finish_delay: float = FINISH_DELAY_S
    start_delay: float = START_DELAY_S
    # where each value came from (flag, variable, mitmproxy option), for messages
    origin: dict[str, str] = field(default_factory=dict)
    # filled in once /metrics is served
    metrics_url: str = ""
    metrics_port_bound: int = 0

    def where(self, name: str) -> str:
        """How option ``name`` was given, for a message: ``--db``, ``RECORDER_DB``, …"""
        return self.origin.get(name) or BY_NAME[name].flag

    def value_of(self, name: str) -> Any:
        """The checked value of option ``name`` (for comparing two configs)."""
        return getattr(self, _FIELDS.get(name, name.replace("-", "_")))


_FIELDS = {"mode": "modes", "no-live": "live", "otlp-endpoint": "otlp_flag"}


def resolve(given: Given, *, under: str = "proxy") -> AppConfig:
    """Check every option (given ones, else defaults) into an AppConfig.

    ``under`` is ``"proxy"`` (names in messages are flags) or ``"mitmproxy"``
    (they are ``recorder_…`` options). Raises OptionError naming the flag, the
    variable or the mitmproxy option the bad value came from.
    """
    from recorder.core.price_files import load_price_file
    from recorder.core.pricing import PriceTableError
    from recorder.otel.export import OtlpConfigError, env_endpoint, env_protocol, traces_url
    from recorder.store import StoreError
    from recorder.store.identity import default_spool_dir

    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for opt in OPTIONS:
        if opt.name in given:
            raw, what = given[opt.name]
        else:
            raw, what = opt.default, (opt.mitm if under == "mitmproxy" else None) or opt.flag
        origin[opt.name] = what
        if raw == "" and opt.kind is str:
            raw = opt.default  # an empty text is unset: the default applies
            if raw == "":
                values[opt.name] = None
                continue
        parse = parse_switch if opt.kind is bool else opt.parse
        values[opt.name] = parse(raw, what)
    cfg = AppConfig(origin=origin)
    cfg.modes = values["mode"]
    cfg.listen_host = values["listen-host"] or "127.0.0.1"
    cfg.listen_port = values["listen-port"]
    cfg.db = values["db"] or DEFAULT_DB
    cfg.jsonl = values["jsonl"] or None
    cfg.metrics_host = values["metrics-host"] or "127.0.0.1"
    cfg.metrics_port = values["metrics-port"]
    cfg.stall_after = values["stall-after"]
    cfg.prices = values["prices"] or None
    try:
        cfg.price_table = load_price_file(cfg.prices)
    except PriceTableError as e:
        raise OptionError(f"{cfg.where('prices')} {e}") from None
    try:
        spool = values["spool-dir"]
        cfg.spool_dir = Path(spool) if spool else default_spool_dir(cfg.db)
    except StoreError as e:
        raise OptionError(f"{cfg.where('db')} {e}") from None
    cfg.max_model_labels = values["max-model-labels"]
    cfg.capture_bodies = values["capture-bodies"]
    cfg.capture_max_bytes = values["capture-max-bytes"]
    cfg.live = not values["no-live"]
    cfg.quiet = values["quiet"]
    cfg.verbose = values["verbose"]
    cfg.log_format = values["log-format"]
    cfg.otlp_flag = values["otlp-endpoint"] or None
    cfg.otlp_endpoint = cfg.otlp_flag or env_endpoint()
    cfg.otlp_protocol = values["otlp-protocol"] or env_protocol()
    try:
        if cfg.otlp_endpoint:
            traces_url(cfg.otlp_endpoint, cfg.otlp_protocol)
    except OtlpConfigError as e:
        raise OptionError(str(e)) from None
    cfg.web_port = values["web-port"] if values["web"] else None
    cfg.metrics_port_bound = cfg.metrics_port
    return cfg


def parse_sets(specs: Sequence[str] | None) -> list[tuple[str, str]]:
    """``--set NAME=VALUE`` as (name, value) pairs, checked for their form only
    (mitmproxy checks the names and values: :func:`check_sets`)."""
    pairs = []
    for spec in specs or ():
        name, sep, value = spec.partition("=")
        if not name.strip():
            raise OptionError(f"--set {spec!r}: NAME=VALUE expected")
        pairs.append((name.strip(), value if sep else "true"))
    return pairs
