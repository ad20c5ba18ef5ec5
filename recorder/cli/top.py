"""`recorder top`: the proxy's open streams, live, in the terminal.

Reads ``GET /streams`` from a running `recorder proxy` (or ``mitmdump -s
addons/recorder_addon.py``; both serve it beside ``/metrics``) once a second and
shows the open streams, longest current output silence first, stalled ones
highlighted, the recently finished ones below, and the last minute's streams/s,
tokens/s and spend per hour on top. Keys: ``s`` sort by silence, ``a`` by age,
``o`` by output tokens, ``q`` quit. Rendered with Rich.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
from rich.cells import cell_len
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from recorder.cli.render import GAP, Fit, command, fit_widths, shorten
from recorder.cli.subcommands import Subcommands
from recorder.core.errors import RecorderError, UsageError
from recorder.core.printable import printable
from recorder.core.short_id import short_id
from recorder.proxy.live_lines import duration, money

DEFAULT_URL = "http://127.0.0.1:9464"
SORTS = {"s": "silence", "a": "age", "o": "output tokens"}
FINISHED_SHOWN = 15


def add_parser(sub: Subcommands) -> None:
    """Register the `top` command."""
    p = sub.add_parser(
        "top",
        help="watch the proxy's open streams live (stalls while they happen)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--url",
        default=os.environ.get("RECORDER_TOP_URL") or DEFAULT_URL,
        help=f"the proxy's metrics server (default {DEFAULT_URL})",
    )
    p.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="refresh (default 1)"
    )
    p.add_argument(
        "--once", action="store_true", help="print one screen and exit (1 if no proxy answers)"
    )
    p.add_argument("--svg", metavar="FILE", help="with --once: also save the screen as SVG")
    p.set_defaults(func=run)


class NoProxy(RecorderError):
    """Nothing answers at the URL."""


def fetch(url: str, timeout: float = 3.0) -> dict[str, Any]:
    """The proxy's ``/streams`` document."""
    target = url.rstrip("/").removesuffix("/metrics") + "/streams"
    try:
        with urllib.request.urlopen(target, timeout=timeout) as resp:
            doc: dict[str, Any] = orjson.loads(resp.read())
            return doc
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise NoProxy(f"{target} answers 404: not a recorder proxy, or too old") from None
        raise NoProxy(f"{target} answers HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise NoProxy(f"no proxy answers at {target} ({reason})") from None


def _s(seconds: float | None) -> str:
    return duration(None if seconds is None else seconds * 1000.0)


def _endpoint(row: dict[str, Any]) -> str | None:
    """A row's endpoint, ``ws`` after it for a response of a WebSocket connection."""
    endpoint = row.get("endpoint")
    if endpoint is not None and row.get("transport") == "websocket":
        return f"{endpoint} ws"
    return endpoint


def _t(value: Any, style: str = "") -> Text:
    """A value from the wire (a model, an endpoint, an id) as a cell: escaped, and
    a Text, never read as Rich markup (``[link=…]`` would write a hyperlink)."""
    return Text("-" if value is None or value == "" else printable(str(value)), style=style)


def _n(value: Any, estimated: bool = False) -> str:
    if value is None:
        return "-"
    return f"~{value}" if estimated else str(value)


def _sorted(rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    if sort == "age":
        return sorted(rows, key=lambda r: -(r.get("age_s") or 0.0))
    if sort == "output tokens":
        return sorted(rows, key=lambda r: -(r.get("output_tokens") or 0))
    return sorted(rows, key=lambda r: -(r.get("silence_s") or 0.0))


# The columns of each table, most useful first: a narrow terminal leaves out the
# last ones, never those of *_KEEP, and shortens a long model first.
OPEN_COLUMNS = (
    ("state", "left"),
    ("silence", "right"),
    ("id", "left"),
    ("model", "left"),
    ("tokens", "right"),
    ("ttft", "right"),
    ("age", "right"),
    ("ka", "right"),
    ("endpoint", "left"),
    ("key", "left"),
    ("events", "right"),
    ("chars", "right"),
)
OPEN_KEEP = ("state", "silence", "id", "model", "tokens")
FINISHED_COLUMNS = (
    ("id", "left"),
    ("model", "left"),
    ("outcome", "left"),
    ("cost", "right"),
    ("stalls", "right"),
    ("ttft", "right"),
    ("duration", "right"),
    ("out", "right"),
    ("in", "right"),
    ("status", "right"),
    ("endpoint", "left"),
)
FINISHED_KEEP = ("id", "model", "outcome", "cost", "stalls")


def _grid(
    title: str,
    columns: tuple[tuple[str, str], ...],
    keep: tuple[str, ...],
    rows: list[tuple[list[Text], str | None]],
    width: int | None,
) -> Table:
    """A table of ``rows`` (cells, row style) within ``width`` cells (None: every
    column whole), fitted as `recorder sessions` fits its tables."""
    names = [name for name, _ in columns]
    natural = {
        name: max([cell_len(name), *(cell_len(cells[i].plain) for cells, _ in rows)])
        for i, name in enumerate(names)
    }
    widths, shown = fit_widths(names, natural, width, keep=keep)
    grid = Table(
        title=title,
        title_justify="left",
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, GAP, 0, 0),
    )
    for name, justify in columns:
        if name in shown:
            grid.add_column(name, justify=justify, no_wrap=True, width=widths[name])  # type: ignore[arg-type]
    at = [names.index(name) for name in shown]
    for cells, style in rows:
        grid.add_row(
            *(Text(shorten(cells[i].plain, widths[names[i]]), style=cells[i].style) for i in at),
            style=style,
        )
    return grid


KEYS = "  keys: s silence · a age · o output tokens · q quit"


def render(
    doc: dict[str, Any] | None,
    url: str,
    sort: str,
    problem: str | None = None,
    width: int | None = None,
) -> Group:
    """One screen: the header, the open streams, the finished ones, fitted to
    ``width`` cells (None: every column whole, as for a pipe)."""
    if doc is None:
        title = Text(f"recorder top — {printable(url)}", style="bold")
        msg = Text(
            f"\n{printable(problem or '')}\n\nStart the proxy (`{command('proxy')}`), or"
            " point --url at its metrics server.\nRetrying every second.",
            style="bold red",
        )
        return Group(title, msg, Text(KEYS, style="dim"))
    rows = _sorted(doc.get("open") or [], sort)
    open_rows = [_open_cells(r) for r in rows]
    if not open_rows:
        none = [Text("(none)"), *(Text("") for _ in OPEN_COLUMNS[1:])]
        open_rows.append((none, "dim"))
    open_table = _grid("open streams", OPEN_COLUMNS, OPEN_KEEP, open_rows, width)
    done_rows = [_finished_cells(f) for f in (doc.get("finished") or [])[:FINISHED_SHOWN]]
    done = _grid("finished", FINISHED_COLUMNS, FINISHED_KEEP, done_rows, width)
    parts: list[Any] = [_header(doc, rows, url, sort), Text(""), open_table, Text(""), done]
    if problem:
        parts.insert(1, Text(printable(problem), style="bold red"))
    parts.append(Text(KEYS, style="dim"))
    return Group(*parts)


def _header(doc: dict[str, Any], rows: list[dict[str, Any]], url: str, sort: str) -> Text:
    stalled = sum(1 for r in rows if r.get("stalled"))
    minute = doc.get("last_minute") or {}
    header = Text()
    header.append(f"recorder top — {printable(url)}", style="bold")
    header.append(f"   open {len(rows)}   ")
    header.append(f"stalled {stalled}", style="bold red" if stalled else "")
    header.append(f"   (stall after {doc.get('stall_after_s', '?')} s)\n")
    header.append(
        f"last minute: {minute.get('streams_per_s', 0):.2f} streams/s"
        f"   {minute.get('tokens_per_s', 0):.1f} tokens/s"
        f"   ${minute.get('usd_per_hour', 0):.4f}/hour"
        f"   sorted by {sort}"
    )
    return header


def _open_cells(r: dict[str, Any]) -> tuple[list[Text], str | None]:
    stall = bool(r.get("stalled"))
    cells = {
        "state": Text("STALLED" if stall else "streaming"),
        "silence": Text(_s(r.get("silence_s"))),
        "id": _t(short_id(r.get("id"))),
        "model": _t(r.get("model")),
        "tokens": Text(_n(r.get("output_tokens"), bool(r.get("output_tokens_estimated")))),
        "ttft": Text(_s(r.get("ttft_s"))),
        "age": Text(_s(r.get("age_s"))),
        "ka": Text(_n(r.get("keepalives"))),
        "endpoint": _t(_endpoint(r)),
        "key": _t(r.get("key_last4")),
        "events": Text(_n(r.get("events"))),
        "chars": Text(_n(r.get("output_chars"))),
    }
    return [cells[name] for name, _ in OPEN_COLUMNS], "bold white on red" if stall else None


def _finished_cells(f: dict[str, Any]) -> tuple[list[Text], str | None]:
    outcome = f.get("outcome") or "-"
    colour = "green" if outcome == "completed" else "yellow"
    if outcome not in ("completed", "http_error", "client_disconnect"):
        colour = "red"
    cells = {
        "id": _t(short_id(f.get("id"))),
        "model": _t(f.get("model")),
        "outcome": _t(outcome, colour),
        "cost": Text(money(f.get("cost_usd"))),
        "stalls": Text(str(f.get("stalls") or 0), style="yellow" if f.get("stalls") else ""),
        "ttft": Text(duration(f.get("ttft_ms"))),
        "duration": Text(duration(f.get("duration_ms"))),
        "out": Text(_n(f.get("output_tokens"), f.get("output_source") == "estimated")),
        "in": Text(_n(f.get("input_tokens"), f.get("input_source") == "estimated")),
        "status": Text(_n(f.get("http_status"))),
        "endpoint": _t(_endpoint(f)),
    }
    return [cells[name] for name, _ in FINISHED_COLUMNS], None


@contextlib.contextmanager
def _keys() -> Iterator[int | None]:
    """stdin in cbreak mode (keys without Enter), or None when it is no terminal."""
    if not sys.stdin.isatty():
        yield None
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield fd
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder top`."""
    url = args.url.rstrip("/")
    if args.interval <= 0:
        raise UsageError("--interval must be positive")
    if args.once:
        first = fetch(url)  # NoProxy: main says so, exit 1
        width = Fit().terminal_width()  # the terminal's, COLUMNS, or None for a pipe
        screen = render(first, url, "silence", width=width)
        if width is None:  # a pipe: as wide as the screen's longest line
            width = max(80, Console(width=100_000).measure(screen).maximum)
        console = Console(record=bool(args.svg), width=width)
        console.print(screen)
        if args.svg:
            console.save_svg(args.svg, title="recorder top")
        return 0
    sort = "silence"
    doc: dict[str, Any] | None = None
    problem: str | None = None
    # stdout is not redirected: Rich would then measure the terminal through its
    # proxy, which has no size, and draw 80 columns in any terminal
    live = Live(
        console=Console(),
        auto_refresh=False,
        screen=True,
        transient=True,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    with _keys() as fd, live:
        while True:
            try:
                doc, problem = fetch(url), None
            except NoProxy as e:
                problem = str(e)
            cols = live.console.width  # read each time: the terminal may be resized
            live.update(render(doc if problem is None else None, url, sort, problem, cols))
            live.refresh()
            deadline = time.monotonic() + args.interval
            while (left := deadline - time.monotonic()) > 0:
                if fd is None:
                    time.sleep(left)
                    break
                ready, _, _ = select.select([fd], [], [], left)
                if not ready:
                    break
                key = os.read(fd, 1).decode("ascii", "replace").lower()
                if key == "q":
                    return 0
                if key in SORTS:
                    sort = SORTS[key]
                    cols = live.console.width
                    live.update(render(doc if problem is None else None, url, sort, problem, cols))
                    live.refresh()
