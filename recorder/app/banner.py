"""The start-up banner: where the proxy listens and how to point the SDKs at it,
where records, traces and metrics go, and a warning for every listener beyond
loopback. ``recorder proxy`` and the mitmproxy script print the same one."""

from __future__ import annotations

from typing import Protocol

from recorder.app.settings import spool_dir_of
from recorder.proxy.exposure import exposure_warnings
from recorder.proxy.options import AppConfig


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


def banner_lines(
    config: AppConfig,
    listeners: list[ListenerLike],
    confdir: str,
    *,
    title: str = "recorder: proxy running (Ctrl-C to stop)",
) -> list[str]:
    """The banner, a line each."""
    from recorder.store.engine import display_url

    lines = [title]
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
    lines.append(f"  records:  {display_url(config.db)}  (spool: {spool_dir_of(config)})")
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
    served = bool(config.metrics_url)
    lines.append(f"  metrics:  {config.metrics_url if served else 'off (metrics port 0)'}")
    if config.live and served:
        base = config.metrics_url.removesuffix("/metrics")
        top = "recorder top" + ("" if base == "http://127.0.0.1:9464" else f" --url {base}")
        lines.append(f"  live:     {base}/streams  (watch it: {top})")
    lines += exposure_warnings(
        [(lst.mode, lst.host, lst.port) for lst in listeners if lst.mode != "web"],
        (config.metrics_host, config.metrics_port_bound) if served else None,
    )
    return lines
