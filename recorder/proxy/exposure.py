"""Which listeners are reachable beyond this machine, and the banner's warnings
about them (``recorder proxy`` and the mitmproxy script print the same)."""

from __future__ import annotations

import ipaddress
import socket
import textwrap


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


def exposure_warnings(
    listeners: list[tuple[str, str, int]],
    metrics: tuple[str, int] | None,
    *,
    listen_hint: str = "the default",
) -> list[str]:
    """Banner lines warning of every listener bound beyond loopback: (mode, host,
    port) of the proxy's listeners, (host, port) of /metrics (None: not served).
    Empty if none is. ``listen_hint`` says how the proxy listens on 127.0.0.1
    where that is not the default (mitmproxy's own listens on every interface);
    /metrics is on 127.0.0.1 by default everywhere."""

    def where(host: str, port: int) -> str:
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    warnings = []
    hint = "the default"
    for mode, host, port in listeners:
        if is_loopback(host):
            continue
        hint = listen_hint
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
    if metrics is not None and not is_loopback(metrics[0]):
        host, port = metrics
        warnings.append(
            f"/metrics is served on {where(host, port)}, beyond this machine: anyone who"
            " can reach that port can read it (models, streams, tokens, costs)."
        )
    lines = []
    for line in warnings:
        lines += textwrap.wrap(line, 88, initial_indent="  WARNING: ", subsequent_indent=" " * 11)
    if lines:
        lines += textwrap.wrap(
            f"Keep them behind a firewall, or listen on 127.0.0.1 ({hint}).",
            88,
            initial_indent=" " * 11,
            subsequent_indent=" " * 11,
        )
    return lines
