"""Retry chains: a request sent again after an attempt that did not complete.

A stream cut in the middle cannot be resumed: the client sends the whole request
again (docs/billing.md, "The price of interruptions"). To know a retry when it
comes, each request gets a **fingerprint** of what it asks (:func:`fingerprint`):
an HMAC, keyed by the store's secret, of its endpoint and of the members that say
what is asked (:data:`FINGERPRINTED`: the model, the messages or input, the
system prompt or instructions, the tools, the conversation it continues), never
of the stream flags, the metadata, the user or the tags, and never the text.

:class:`RetryChains` links a finished request to the attempt it retries: the
last attempt with the same fingerprint from the same API key (its fingerprint)
that did not complete (:func:`did_not_complete`), that had ended before this
request started, at most ``window`` seconds before, and that no request of the
same key and fingerprint completed after. The retry's record then
names it (``retry_of``) and counts on from it (``attempt``: 1, 2, ...). A
completed request is never the head of a chain; the same request from two keys
is never chained; a request sent while an identical one is still under way is a
request of its own, not its retry.

The table is in memory, bounded (:data:`MAX_OPEN`, the oldest let go first), and
holds only attempts that did not complete, for two windows at most after they
ended (the second for a request that started earlier than the one recorded before
it, which finished first; one that started more than a window earlier may miss its
head): chains are
resolved in one proxy process, not across proxies sharing a store. Times are the
caller's monotonic clock, given as arguments.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from recorder.core.record import INTERRUPTED_OUTCOMES

DEFAULT_RETRY_WINDOW_S = 600.0
# attempts that did not complete, kept while their window lasts
MAX_OPEN = 65_536

# what a request asks, by protocol: Chat (messages, tools), Responses (input,
# instructions, tools, the response or conversation it continues), Messages and
# Bedrock's Converse (messages, system, tools; Converse's toolConfig), Google's
# generateContent (contents, systemInstruction, tools, toolConfig)
FINGERPRINTED = (
    "model",
    "messages",
    "input",
    "contents",
    "system",
    "instructions",
    "systemInstruction",
    "tools",
    "toolConfig",
    "previous_response_id",
    "conversation",
)
# a request that names none of these asks nothing a retry could repeat
_ASKED = ("messages", "input", "contents")

# the refusals a client sends again (the SDKs' own retry does): rate limits and
# server errors; other 4xx are the request's fault
RETRIED_STATUS = 429
RETRIED_STATUS_FROM = 500


def did_not_complete(outcome: str | None, http_status: int | None) -> bool:
    """Whether an attempt did not complete: an error event after status 200, cut
    by either side (a stall the gateway cut off included), truncated; or refused
    with a status a client retries (429, 5xx)."""
    if outcome in INTERRUPTED_OUTCOMES:
        return True
    return (
        outcome == "http_error"
        and http_status is not None
        and (http_status == RETRIED_STATUS or http_status >= RETRIED_STATUS_FROM)
    )


@dataclass(slots=True, frozen=True)
class Unread:
    """A member the body's parser could not read (nested past its limit): it is
    fingerprinted by its bytes as sent."""

    raw: bytes


def _default(value: object) -> str:
    if isinstance(value, Unread):
        return "unread:" + hashlib.sha256(value.raw).hexdigest()
    raise TypeError(type(value).__name__)


def fingerprint(members: Mapping[str, Any], endpoint: str, secret: bytes) -> str | None:
    """The request's fingerprint (24 hex digits), from its top-level members;
    None when it asks nothing (no messages, no input)."""
    if not any(members.get(name) is not None for name in _ASKED):
        return None
    asked = {name: members[name] for name in FINGERPRINTED if members.get(name) is not None}
    try:
        canonical = orjson.dumps(
            asked, default=_default, option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS
        )
    except (TypeError, orjson.JSONEncodeError):
        return None
    message = b"request\0" + endpoint.encode("utf-8", "replace") + b"\0" + canonical
    return hmac.digest(secret, message, "sha256").hex()[:24]


@dataclass(slots=True)
class _Open:
    record_id: str
    attempt: int
    ended: float


class RetryChains:
    """The attempts that did not complete, by (key fingerprint, request
    fingerprint), for the window; see the module's docstring."""

    def __init__(self, window: float = DEFAULT_RETRY_WINDOW_S, limit: int = MAX_OPEN) -> None:
        self.window = window
        self.limit = limit
        self._open: OrderedDict[tuple[str | None, str], _Open] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def link(
        self,
        key: str | None,
        request: str | None,
        record_id: str,
        *,
        started: float,
        ended: float,
        complete: bool,
    ) -> tuple[str | None, int | None]:
        """``(retry_of, attempt)`` of a finished request (``(None, None)`` without
        a fingerprint); remembers it while it may be retried."""
        if request is None:
            return None, None
        self._expire(started)
        slot = (key, request)
        before = self._open.get(slot)
        retry_of, attempt = None, 1
        if before is not None and before.ended <= started <= before.ended + self.window:
            retry_of, attempt = before.record_id, before.attempt + 1
        if complete:
            if before is not None and before.ended <= started:
                del self._open[slot]  # a request completed after the failure: the chain is over
            return retry_of, attempt
        if before is None or before.ended <= ended:
            self._open[slot] = _Open(record_id, attempt, ended)
            self._open.move_to_end(slot)
            while len(self._open) > self.limit:
                self._open.popitem(last=False)
        return retry_of, attempt

    def _expire(self, now: float) -> None:
        """Let go of the attempts whose window is over by another window (oldest
        first; an attempt is at the end when it was remembered, so the front ended
        first, but for records completed out of order, which only stay a little
        longer)."""
        # Records come in the order their requests finish, not started: a request
        # that started before the one linked last may come next and still be
        # within an attempt's window. So an attempt is kept a second window (the
        # margin for such a request), and the test is ``link``'s own sum
        # (``now - window`` would round otherwise, and let go of an attempt
        # ``link`` counts as within its window).
        keep = 2 * self.window
        while self._open:
            first = next(iter(self._open.values()))
            if not first.ended + keep < now:
                break
            self._open.popitem(last=False)
