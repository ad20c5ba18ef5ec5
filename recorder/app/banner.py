"""The start-up banner: where the proxy listens and how to point the SDKs at it,
where records, traces and metrics go, and a warning for every listener beyond
loopback. ``recorder proxy`` and the mitmproxy script print the same one, each
saying what is true of its own route: mitmproxy listens on every interface
unless told otherwise (``recorder proxy`` on 127.0.0.1), and under it a
``/metrics`` port that is taken is skipped rather than fatal.

A listener on every interface (``0.0.0.0``, ``::``; mitmproxy reports both for
one port) is one line, and the addresses to export are this machine's loopback
one: ``http://[::]:8080`` is where the proxy listens, not where a client
connects.
"""

from __future__ import annotations

from typing import Protocol

from recorder.app.settings import spool_dir_of
from recorder.proxy.exposure import exposure_warnings
from recorder.proxy.hints import command
from recorder.proxy.options import AppConfig

# a host that stands for every interface of this machine
EVERY_INTERFACE = frozenset({"", "0.0.0.0", "::"})
DEFAULT_METRICS = "http://127.0.0.1:9464"


class ListenerLike(Protocol):
    """One address the proxy listens on (``recorder.proxy.runner.Listener``)."""

    mode: str
    host: str
    port: int
    url: str | None


def size_text(n: int) -> str:
    """A byte count for people: ``8 MiB``, ``512 KiB``, ``1,000 bytes``."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n:,} bytes"


def inside_mitmproxy(config: AppConfig) -> bool:
    """Whether ``config`` came from mitmproxy's options (the mitmproxy script),
    not from `recorder proxy`'s flags: it then names its options ``recorder_…``."""
    return config.where("db") == "recorder_db"


def banner_lines(
    config: AppConfig,
    listeners: list[ListenerLike],
    confdir: str,
    *,
    title: str = "recorder: proxy running (Ctrl-C to stop)",
    mitmproxy: bool | None = None,
) -> list[str]:
    """The banner, a line each. ``mitmproxy``: printed by the mitmproxy script
    (None: told by ``config``, :func:`inside_mitmproxy`)."""
    under_mitmproxy = inside_mitmproxy(config) if mitmproxy is None else mitmproxy
    lines = [title]
    shown = _one_per_port(listeners)
    for lst in shown:
        lines += _listener_lines(lst, confdir)
    lines += _store_lines(config)
    lines += _metrics_lines(config)
    served = bool(config.metrics_url)
    lines += exposure_warnings(
        [(lst.mode, lst.host, lst.port) for lst in shown if lst.mode != "web"],
        (config.metrics_host, config.metrics_port_bound) if served else None,
        listen_hint=(
            "--listen-host 127.0.0.1; mitmproxy's default is every interface"
            if under_mitmproxy
            else "the default"
        ),
    )
    return lines


def _listener_lines(lst: ListenerLike, confdir: str) -> list[str]:
    """A listener, and how to point the SDKs at it."""
    if lst.mode == "web":
        return [f"  web UI   {lst.url}"]
    every = lst.host in EVERY_INTERFACE
    host = "127.0.0.1" if every else f"[{lst.host}]" if ":" in lst.host else lst.host
    base = f"http://{host}:{lst.port}"
    where = f"every interface, port {lst.port} ({base} here)" if every else base
    if lst.mode.startswith("reverse:"):
        upstream = lst.mode.split(":", 1)[1].split("@", 1)[0]
        lines = [f"  reverse  {where}  ->  {upstream}"]
        if "anthropic" not in upstream:
            lines.append(f"    OpenAI SDK:     OPENAI_BASE_URL={base}/v1")
        if "openai" not in upstream:
            lines.append(f"    Anthropic SDK:  ANTHROPIC_BASE_URL={base}")
        return lines
    kind = lst.mode.split("@")[0]
    lines = [
        f"  {kind}  {where}",
        f"    Python SDKs, curl, Go:  HTTPS_PROXY={base} \\",
        f"                    SSL_CERT_FILE={confdir}/mitmproxy-ca-cert.pem",
        "    Node's fetch ignores HTTPS_PROXY: NODE_USE_ENV_PROXY=1, or reverse mode (README)",
    ]
    if kind == "regular":
        lines.append(f'    As a base URL ({base}/v1) it answers 502 "Request destination unknown":')
        lines.append(
            "    base URLs need reverse mode, --mode reverse:https://api.openai.com@8081 (README)"
        )
    return lines


def _store_lines(config: AppConfig) -> list[str]:
    """Where records go."""
    from recorder.store.engine import display_url

    lines = [f"  records:  {display_url(config.db)}  (spool: {spool_dir_of(config)})"]
    if config.jsonl:
        lines.append(f"            and {config.jsonl} (JSON lines)")
    if config.capture_bodies:
        lines.append(
            f"            with SSE response bodies, compressed ({config.where('capture-bodies')}:"
            f" up to {size_text(config.capture_max_bytes)} each; they hold completion text)"
        )
    if config.otlp_endpoint:
        from recorder.otel.export import shown_url

        lines.append(
            f"  traces:   OTLP {config.otlp_protocol} to {shown_url(config.otlp_endpoint)}"
        )
    return lines


def _metrics_lines(config: AppConfig) -> list[str]:
    """Where metrics and the live view are served (or why not)."""
    served = bool(config.metrics_url)
    if served:
        lines = [f"  metrics:  {config.metrics_url}"]
    elif config.metrics_port:
        asked = _address(config.metrics_host, config.metrics_port)
        given = config.where("metrics-port")
        lines = [
            f"  metrics:  off: {asked} could not be served (see above)",
            f"            ({_setting(given, 'PORT')} for another, 0 for none)",
        ]
    else:
        lines = [f"  metrics:  off ({_setting(config.where('metrics-port'), '0')})"]
    if config.live and served:
        base = config.metrics_url.removesuffix("/metrics")
        if config.metrics_host in EVERY_INTERFACE:  # served everywhere: read it here
            base = f"http://127.0.0.1:{config.metrics_port_bound}"
        top = "top" + ("" if base == DEFAULT_METRICS else f" --url {base}")
        lines.append(f"  live:     {base}/streams  (watch it: {command(top)})")
    return lines


def _setting(given: str, value: str) -> str:
    """An option with its value, as it is written where it came from."""
    if given.startswith("--") and " " not in given:  # a flag; not `--set NAME`
        return f"{given} {value}"
    if given.startswith("recorder_"):
        return f"--set {given}={value}"
    return f"{given}={value}"


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _one_per_port(listeners: list[ListenerLike]) -> list[ListenerLike]:
    """The listeners, those on every interface once per mode and port (mitmproxy
    reports such a port once for IPv4 and once for IPv6)."""
    seen: set[tuple[str, int]] = set()
    kept = []
    for lst in listeners:
        if lst.mode != "web" and lst.host in EVERY_INTERFACE:
            if (lst.mode, lst.port) in seen:
                continue
            seen.add((lst.mode, lst.port))
        kept.append(lst)
    return kept
