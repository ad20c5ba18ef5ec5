"""What the recorder does not meter: passed on as it arrives, and never unseen.

Held back: mitmproxy buffers a response body whole unless an addon streams it,
so an event stream the recorder does not meter (a provider's endpoint it does
not know, an MCP server's events, NDJSON) would reach the client only at its end.
Every ``text/event-stream``, ``application/vnd.amazon.eventstream`` and
NDJSON response therefore streams, metered or not, in every route; under
``recorder proxy`` (``stream_unsized``) every response without a Content-Length
streams too (mitmproxy's ``stream_large_bodies`` takes the rest), while inside a
user's own mitmproxy plain downloads keep the user's settings. The bytes are
never changed.

Unseen: every request to a provider's host (``recorder.core.provider_hosts``) that
the recorder does not meter, and every streamed response it does not meter, is
counted (``llm_recorder_unmetered_requests_total{host,reason}``) and said once per
host and path shape on the console.

The recorder's own exchanges are left to it (it taps them first: this addon runs
after it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from mitmproxy import http

from recorder.core.provider_hosts import is_provider_host, path_shape
from recorder.metrics.unmetered import UnmeteredTally
from recorder.proxy.addon import Recorder

STREAMING_TYPES = (
    "text/event-stream",
    "application/vnd.amazon.eventstream",
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
)
# distinct (method, host, path shape) said on the console, at most
SAID_KEPT = 1000


class Why(enum.Enum):
    """Why a call was not metered."""

    NOT_AN_ENDPOINT = "not an endpoint the recorder meters"
    STREAM = "a stream the recorder does not meter"


def streams_by_type(content_type: str) -> bool:
    """Whether a body of this declared type is a stream (its pieces must pass as
    they come)."""
    low = content_type.lower()
    return any(kind in low for kind in STREAMING_TYPES)


class Passthrough:
    """A mitmproxy addon beside the recorder (after it): unmetered streams pass as
    they arrive; unmetered calls are counted and said."""

    def __init__(
        self,
        recorder: Recorder,
        tally: UnmeteredTally,
        *,
        stream_unsized: bool,
        say: Callable[[str, dict[str, object]], None] | None = None,
    ) -> None:
        self._recorder = recorder
        self._tally = tally
        self._stream_unsized = stream_unsized
        self._say = say
        self._said: set[tuple[str, str, str]] = set()
        # flows of a provider's host already counted at their request
        self._counted: set[str] = set()

    def _metered(self, flow: http.HTTPFlow) -> bool:
        return self._recorder.streams.get(flow.id) is not None

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        try:
            if self._metered(flow):
                return
            host = flow.request.pretty_host
            if is_provider_host(host):
                self._counted.add(flow.id)
                self._note(flow, Why.NOT_AN_ENDPOINT)
        except Exception:
            self._recorder.internal_error("passthrough")

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        try:
            resp = flow.response
            if resp is None or self._metered(flow):
                return
            streamed = streams_by_type(resp.headers.get("content-type", ""))
            if streamed:
                if not resp.stream:
                    resp.stream = True
                if flow.id not in self._counted:
                    self._note(flow, Why.STREAM)
            elif (
                self._stream_unsized
                and not resp.stream
                and "content-length" not in resp.headers
                and flow.request.method != "HEAD"
                and resp.status_code not in (204, 304)
            ):
                resp.stream = True
        except Exception:
            self._recorder.internal_error("passthrough")

    def response(self, flow: http.HTTPFlow) -> None:
        self._counted.discard(flow.id)

    def error(self, flow: http.HTTPFlow) -> None:
        self._counted.discard(flow.id)

    def _note(self, flow: http.HTTPFlow, why: Why) -> None:
        req = flow.request
        host = req.pretty_host
        self._tally.count(host, why.value)
        shape = path_shape(req.path)
        key = (req.method, host, shape)
        if self._say is None or key in self._said or len(self._said) >= SAID_KEPT:
            return
        self._said.add(key)
        self._say(
            f"not metered: {req.method} {host} {shape} ({why.value})",
            {"method": req.method, "host": host, "path": shape, "reason": why.value},
        )
