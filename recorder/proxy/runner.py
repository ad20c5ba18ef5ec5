"""Running mitmproxy in-process with the recorder addon.

``recorder proxy`` and ``recorder demo`` (and the end-to-end tests) use this
instead of shelling out to ``mitmdump -s``, so that they own the sink's
lifecycle. On SIGINT/SIGTERM, traffic comes first: the addon's ``done``
finishes the record of every open flow (``client_disconnect``, "proxy shut
down") without waiting on the sink, then the proxy stops listening and every
connection still open is ended (within ``END_CONNECTIONS_S``), and only then is
the sink closed, which gives
the database a bounded time and spools the rest (``SqlSink.close``). A client
is never kept waiting on the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO, Any

from mitmproxy import options
from mitmproxy.master import Master
from mitmproxy.tools.dump import DumpMaster

from recorder.core.errors import RecorderError, UsageError
from recorder.proxy.addon import Recorder

# How long the connections still open at shutdown get to wind down once cancelled.
END_CONNECTIONS_S = 1.0


@dataclass(slots=True)
class Listener:
    """One address the proxy listens on, and its mode (``web``: mitmweb's interface,
    whose ``url`` carries its access token)."""

    mode: str
    host: str
    port: int
    url: str | None = None


@dataclass(slots=True)
class ProxySettings:
    """What mitmproxy needs to know."""

    modes: Sequence[str] = ("regular",)
    listen_host: str = "127.0.0.1"
    listen_port: int = 8080
    confdir: str | None = None
    ssl_insecure: bool = False  # trust any upstream certificate (tests only)
    web_port: int | None = None  # mitmweb's interface on this port instead of the console
    extra: dict[str, Any] = field(default_factory=dict)
    # mitmproxy options as `--set` gives them (NAME=VALUE), applied last: they win
    sets: Sequence[str] = ()
    addons: Sequence[Any] = ()  # more addons after the recorder (the live view)
    # where the log goes (mitmproxy's terminal log writes to stdout by default; a
    # command whose stdout is a document, `recorder demo --format json`, sends it away)
    log_out: IO[str] | None = None


STREAM_LARGE_BODIES = "1m"


class ListenError(RecorderError):
    """A listener's address cannot be bound (in use, not ours, a privileged port);
    ``option`` is the one that sets its port (``--mode`` when the mode spec does)."""

    def __init__(self, host: str, port: int, error: OSError, option: str) -> None:
        self.host, self.port, self.error, self.option = host, port, error, option
        super().__init__(f"{host}:{port}: {error.strerror or error}")


def probe_listeners(settings: ProxySettings, also: Sequence[tuple[str, int, str]] = ()) -> None:
    """Bind (and release) every address the proxy will listen on, as mitmproxy
    will (``SO_REUSEADDR``, every address the host resolves to), and the TCP
    addresses ``also`` gives (host, port, the option that sets it); raise
    ListenError for the first that cannot be. ``recorder proxy`` calls it before
    it opens the store, so that a port in use is one line and leaves nothing
    behind."""
    from mitmproxy.proxy.mode_specs import ProxyMode

    wanted: list[tuple[str, int, str, str]] = []  # host, port, protocol, option
    for spec in settings.modes:
        mode = ProxyMode.parse(spec)
        port = mode.listen_port(settings.listen_port)
        if not port:  # a mode without a port, or any free port
            continue
        option = "--mode" if mode.custom_listen_port is not None else "--listen-port"
        host = mode.listen_host(settings.listen_host)
        both = mode.transport_protocol == "both"
        for proto in ["tcp", "udp"] if both else [mode.transport_protocol]:
            wanted.append((host, port, proto, option))
    wanted += [(host, port, "tcp", option) for host, port, option in also if port]
    for host, port, proto, option in wanted:
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        try:
            infos = socket.getaddrinfo(host or None, port, type=kind, flags=socket.AI_PASSIVE)
        except OSError:
            continue  # mitmproxy reports a name it cannot resolve itself
        for family, _, _, _, addr in infos:
            try:
                with socket.socket(family, kind) as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(addr)
            except OSError as e:
                shown = str(addr[0]) if host else "*"
                raise ListenError(shown, port, e, option) from e


class Recording:
    """The recorder and the addons beside it, as one entry of mitmproxy's chain.

    mitmproxy calls every entry of its chain for every hook of every flow, and for
    every WebSocket message twice (``websocket_message``, then ``update``), each
    call through a context manager and a coroutine of its own; an addon nested in
    an entry costs that call a lookup. As one entry instead of four, the
    recorder's addons cost WebSocket traffic measurably less CPU per message
    (docs/performance.md). mitmproxy catches an exception per entry: one nested
    addon that raised would end the hook for those after it, so each keeps its
    exceptions to itself (as every one here does: the recorder counts them)."""

    def __init__(self, *addons: Any) -> None:
        self.addons = list(addons)


class _Started:
    """Addon that reports the bound addresses once the servers are up."""

    def __init__(self, callback: Callable[[list[Listener]], None]) -> None:
        self._callback = callback

    def running(self) -> None:
        from mitmproxy import ctx

        self._callback(listeners_of(ctx.master))


def listeners_of(master: Master) -> list[Listener]:
    """Where ``master`` listens, once its servers are up (``running``)."""
    proxyserver: Any = master.addons.get("proxyserver")
    listeners: list[Listener] = []
    for server in proxyserver.servers:
        for addr in server.listen_addrs:
            listener = Listener(server.mode.full_spec, str(addr[0]), int(addr[1]))
            if listener not in listeners:  # a server may report one address twice
                listeners.append(listener)
    web_url = getattr(master, "web_url", None)
    if web_url is not None:
        opts: Any = master.options
        listeners.append(Listener("web", opts.web_host, opts.web_port, url=web_url))
    return listeners


def build_master(
    recorder: Recorder,
    settings: ProxySettings,
    on_started: Callable[[list[Listener]], None] | None = None,
) -> Master:
    """A DumpMaster with the recorder addon (a WebMaster, mitmweb's, with
    ``web_port``); call inside a running event loop."""
    opts = options.Options(
        mode=list(settings.modes),
        listen_host=settings.listen_host,
        listen_port=settings.listen_port,
    )
    if settings.confdir:
        opts.update(confdir=settings.confdir)
    master: Master
    if settings.web_port is not None:
        from mitmproxy.tools.web.master import WebMaster

        master = WebMaster(opts, with_termlog=settings.log_out is None)
        opts.update(web_port=settings.web_port, web_host="127.0.0.1", web_open_browser=False)
    else:
        master = DumpMaster(opts, with_termlog=settings.log_out is None, with_dumper=False)
    if settings.log_out is not None:
        from mitmproxy.addons.termlog import TermLog

        master.addons.add(TermLog(settings.log_out))
    # mitmproxy's own log: warnings and errors only (a bound port, a TLS failure);
    # bodies past 1 MiB pass as they arrive instead of being held whole (what has no
    # Content-Length streams too: recorder.proxy.passthrough)
    opts.update(
        termlog_verbosity="warn",
        ssl_insecure=settings.ssl_insecure,
        stream_large_bodies=STREAM_LARGE_BODIES,
        **settings.extra,
    )
    if settings.sets:  # after every addon has declared its options
        opts.set(*settings.sets)
    # the runner closes the sink itself, once the connections are ended (see above)
    recorder.close_sink_on_done = False
    beside: list[Any] = list(settings.addons)
    if settings.web_port is not None:
        from recorder.proxy.webview import WebView

        if not any(isinstance(addon, WebView) for addon in settings.addons):
            beside.append(WebView(recorder))
    if on_started is not None:
        beside.append(_Started(on_started))
    master.addons.add(Recording(recorder, *beside))
    return master


class SetError(UsageError):
    """A ``--set`` mitmproxy option that mitmproxy refuses (unknown, or a bad value)."""


def check_sets(specs: Sequence[str], *, web: bool = False) -> None:
    """Try each ``NAME=VALUE`` on a master like the one the proxy will run (with
    every addon's options, mitmweb's too with ``web``), started nowhere; raise
    SetError naming the first one mitmproxy refuses."""
    if not specs:
        return
    from mitmproxy import exceptions

    async def attempt() -> None:
        opts = options.Options()
        master: Master
        if web:
            from mitmproxy.tools.web.master import WebMaster

            master = WebMaster(opts, with_termlog=False)
        else:
            master = DumpMaster(opts, with_termlog=False, with_dumper=False)
        try:
            for spec in specs:
                try:
                    opts.set(spec)
                except exceptions.OptionsError as e:
                    name = spec.split("=", 1)[0]
                    reason = str(e).replace("\n", " ").strip()
                    if reason.startswith("Unknown option"):
                        reason = "no such mitmproxy option (`mitmdump --options` lists them)"
                    raise SetError(f"--set {name}: {reason}") from None
        finally:
            with contextlib.suppress(Exception):
                master.shutdown()

    asyncio.run(attempt())


async def serve(
    recorder: Recorder,
    settings: ProxySettings,
    on_started: Callable[[list[Listener]], None] | None = None,
    *,
    handle_signals: bool = True,
) -> None:
    """Run the proxy until SIGINT/SIGTERM (or until the master shuts down)."""
    master = build_master(recorder, settings, on_started)
    loop = asyncio.get_running_loop()
    # Everything alive now (mitmproxy, SQLAlchemy, the price table: some 150,000
    # objects) lives as long as the process. Frozen, it is no longer scanned by the
    # collector's full passes, which otherwise stop the event loop for tens of
    # milliseconds every so often under load (docs/performance.md).
    gc.collect()
    gc.freeze()
    if handle_signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, master.shutdown)
    logging.getLogger("hpack").setLevel(logging.WARNING)
    try:
        await master.run()
    finally:
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        await end_connections(master)
        recorder.close()


async def end_connections(master: Master, timeout: float = END_CONNECTIONS_S) -> None:
    """Stop listening (a new client is refused at once, not left in the backlog
    while the sink closes), end every connection the proxy still serves (their
    tasks are all that runs besides the caller once the master has stopped), and
    let the loop close their sockets: the clients see their streams end now, not
    when the process exits."""
    proxyserver: Any = master.addons.get("proxyserver")
    for server in list(proxyserver.servers) if proxyserver is not None else []:
        with contextlib.suppress(Exception):  # it may never have started
            await asyncio.wait_for(server.stop(), timeout)
    current = asyncio.current_task()
    tasks = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=timeout)
    # a closed transport releases its socket in a callback of the next iterations
    for _ in range(3):
        await asyncio.sleep(0)


@contextmanager
def run_in_thread(recorder: Recorder, settings: ProxySettings) -> Iterator[list[Listener]]:
    """Run the proxy on its own event loop in a daemon thread (demo, tests).

    Inside the block the proxy is listening (the block gets its listeners);
    on exit it is shut down, which finishes open flows and closes the sink.
    """
    started = threading.Event()
    state: dict[str, Any] = {}

    def on_started(listeners: list[Listener]) -> None:
        state["listeners"] = listeners
        started.set()

    def run() -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        state["loop"] = loop

        async def main() -> None:
            master = build_master(recorder, settings, on_started)
            state["master"] = master
            try:
                await master.run()
            finally:
                await end_connections(master)

        try:
            loop.run_until_complete(main())
        except BaseException as e:  # reported to the caller below
            state["error"] = e
            started.set()
        finally:
            # connections still being served when the master stopped
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    thread = threading.Thread(target=run, name="recorder-proxy", daemon=True)
    thread.start()
    if not started.wait(30) or "error" in state:
        thread.join(5)
        raise RuntimeError(f"the proxy did not start: {state.get('error')!r}")
    try:
        yield state["listeners"]
    finally:
        state["loop"].call_soon_threadsafe(state["master"].shutdown)
        thread.join(30)
        recorder.close()
