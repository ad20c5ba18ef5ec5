"""WebSocket pings and pongs, as mitmproxy's log tells them.

mitmproxy (12.x) answers and relays a WebSocket's ping and pong frames inside its
WebSocket layer and calls no addon hook for them: an addon cannot see one
directly. What it does is log each one, at INFO on the logger
``mitmproxy.proxy.server``, as "Received WebSocket ping from client (payload:
...)" (or "pong", "from server"), with the client's address in the record
(``record.client``), while it relays the frame. :class:`PingWatch` is a logging
handler on that logger which tells the recorder of each such line, with the
client's address, on the event loop that relays the frame (so the time read is
the frame's).

It is installed while metered WebSocket connections are open. If that logger
would drop INFO records (under ``recorder proxy`` the root logger's level is
WARNING), the watch lowers that one logger's level to INFO while it watches and
puts it back after; mitmproxy's terminal log keeps its own level, so nothing
more is printed. Reading a log line depends on mitmproxy's wording: the
end-to-end tests send real pings through the proxy, and fail if it changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from recorder.proxy.internal_errors import InternalErrors

LOGGER = "mitmproxy.proxy.server"
_PREFIXES = ("Received WebSocket ping from ", "Received WebSocket pong from ")


class PingWatch(logging.Handler):
    """Calls ``on_ping(client address)`` for every ping or pong mitmproxy relays."""

    def __init__(self, on_ping: Callable[[Any], None], errors: InternalErrors) -> None:
        super().__init__(logging.INFO)
        self._on_ping = on_ping
        self._errors = errors
        self._installed = False
        self._level: int | None = None  # the logger's own level before we lowered it

    def watch(self) -> None:
        """Listen (once), lowering the logger's level to INFO if it is higher."""
        if self._installed:
            return
        logger = logging.getLogger(LOGGER)
        if logger.getEffectiveLevel() > logging.INFO:
            self._level = logger.level
            logger.setLevel(logging.INFO)
        logger.addHandler(self)
        self._installed = True

    def unwatch(self) -> None:
        """Stop listening, and put the logger's level back."""
        if not self._installed:
            return
        logger = logging.getLogger(LOGGER)
        logger.removeHandler(self)
        if self._level is not None:
            logger.setLevel(self._level)
            self._level = None
        self._installed = False

    def emit(self, record: logging.LogRecord) -> None:
        # every INFO line of the proxy server comes here: a prefix check, no formatting
        try:
            msg = record.msg
            if isinstance(msg, str) and msg.startswith(_PREFIXES):
                self._on_ping(getattr(record, "client", None))
        except Exception:
            self._errors("websocket ping")

    def handleError(self, record: logging.LogRecord) -> None:
        """Never print a traceback into mitmproxy's log."""
