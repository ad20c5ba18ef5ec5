"""`recorder proxy`: run the recording proxy until SIGINT/SIGTERM.

Every option can also come from ``RECORDER_<NAME>`` (``--listen-port`` from
``RECORDER_LISTEN_PORT``; ``--mode`` from ``RECORDER_MODE``, several specs
separated by spaces or commas); a flag on the command line wins. ``--set
recorder_stall_after=5`` (or ``mode=…``) is the same as its flag. Any mitmproxy
option passes with ``--set NAME=VALUE`` (repeatable): an upstream's private CA
(``ssl_verify_upstream_trusted_ca=ca.pem``), ``ssl_insecure=true``,
``upstream_cert=false``, client certificates; ``--mode upstream:http://HOST:PORT``
sends everything through a corporate proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path

from recorder.app import StartError, build
from recorder.app import open_store as _open_store
from recorder.app.banner import banner_lines
from recorder.app.settings import checked
from recorder.cli.subcommands import Subcommands
from recorder.proxy.options import AppConfig, OptionError
from recorder.store import SqlSink

__all__ = ["Settings", "add_parser", "open_store", "run"]


def add_parser(sub: Subcommands) -> None:
    """Register the `proxy` command (its flags come from the option table)."""
    p = sub.add_parser(
        "proxy",
        help="run the recording proxy (until SIGINT/SIGTERM)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    AppConfig.add_flags(p)
    p.set_defaults(func=run)


def Settings(args: argparse.Namespace) -> AppConfig:
    """The checked options of `recorder proxy` (flags, --set, RECORDER_* variables)."""
    return checked(AppConfig.from_args(args))


def _banner(settings: AppConfig, confdir: str) -> object:
    def show(listeners: list[object]) -> None:
        print("\n".join(banner_lines(settings, listeners, confdir)), flush=True)  # type: ignore[arg-type]

    return show


def open_store(db: str, spool_dir: Path, who: str) -> tuple[bytes, SqlSink] | None:
    """Upgrade the database, read the key secret, open the writer; None after an
    error (printed). A database that cannot be reached is not fatal: records are
    spooled in ``spool_dir`` and written once it answers."""
    try:
        secret, sink, note = _open_store(db, spool_dir)
    except StartError as e:
        print(f"recorder {who}: {e}", file=sys.stderr)
        return None
    if note is not None:
        print(f"recorder {who}: {note}", file=sys.stderr)
    return secret, sink


def _cannot_listen(host: str, port: int, e: OSError) -> str:
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    reason = (e.strerror or str(e)).lower()
    return f"cannot listen on {where}: {reason}"


def _say(line: str) -> None:
    print(f"recorder proxy: {line}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder proxy`."""
    from recorder.proxy.runner import (
        ListenError,
        ProxySettings,
        SetError,
        check_sets,
        probe_listeners,
        serve,
    )

    try:
        settings = Settings(args)
        sets = AppConfig.mitmproxy_sets(args.mitm_set)
        check_sets(sets, web=settings.web)
    except (OptionError, SetError) as e:
        _say(str(e))
        return 2
    for line in settings.notes:
        _say(line)
    confdir = os.path.expanduser("~/.mitmproxy")
    # Listeners first, then the store: a port in use is one line, and leaves no
    # database behind (mitmproxy and the metrics server bind them again below).
    web_port = settings.web_port if settings.web else None  # mitmweb's interface, if any
    also = [(settings.metrics_host, settings.metrics_port, "--metrics-port")]
    try:
        probe_listeners(
            ProxySettings(
                modes=settings.modes,
                listen_host=settings.listen_host,
                listen_port=settings.listen_port,
            ),
            also=also + ([("127.0.0.1", web_port, "--web-port")] if web_port else []),
        )
    except ListenError as e:
        hint = "change the port in --mode" if e.option == "--mode" else f"use {e.option}"
        print(f"recorder: {_cannot_listen(e.host, e.port, e.error)} ({hint})", file=sys.stderr)
        return 1
    try:
        app = build(settings, web=web_port is not None, warn=_say)
    except StartError as e:
        _say(str(e))
        return e.code
    proxy = ProxySettings(
        modes=settings.modes,
        listen_host=settings.listen_host,
        listen_port=settings.listen_port,
        confdir=confdir,
        web_port=web_port,
        addons=app.addons,
        sets=sets,
    )
    show: Callable[..., None] = _banner(settings, confdir)  # type: ignore[assignment]
    try:
        asyncio.run(serve(app.recorder, proxy, show))
    except KeyboardInterrupt:
        pass
    finally:
        app.close()  # the sink (every record written or spooled), spans, /metrics, lines
    assert app.store is not None
    stats = app.store.stats()
    records, cut = app.recorder.health.records, app.recorder.cut_at_shutdown
    print(
        f"recorder: stopped; {records} record{'' if records == 1 else 's'}:"
        f" {stats['written']} written to the database, {stats['spooled']} spooled,"
        f" {stats['dropped']} dropped; {cut} stream{' was' if cut == 1 else 's were'} still"
        " open and cut by the shutdown"
    )
    return 0
