"""How the addon meters: :class:`RecorderConfig`, read on the hot path (a slotted
dataclass: one attribute load per read). Its fields that are options of the
recorder (``stall_after``, ``prices``, …) take their values from the option table
(``recorder.proxy.options``) by name: :meth:`RecorderConfig.of`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from recorder.core.captured import DEFAULT_CAPTURE_MAX_BYTES
from recorder.core.meter import DEFAULT_STALL_AFTER_S
from recorder.core.pricing import PriceTable
from recorder.core.request import Reading
from recorder.core.retries import DEFAULT_RETRY_WINDOW_S
from recorder.core.sse import DEFAULT_MAX_EVENT_BYTES


@dataclass(slots=True)
class RecorderConfig:
    """How the addon meters."""

    key_secret: bytes
    prices: PriceTable | None = None  # None: records are not costed
    stall_after: float = DEFAULT_STALL_AFTER_S
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    strip_accept_encoding: bool = True
    # Keep raw SSE response bodies (decoded, compressed later) for `recorder replay
    # --id`; never request bodies. Pieces past the cap are counted, not kept.
    capture_bodies: bool = False
    capture_max_bytes: int = DEFAULT_CAPTURE_MAX_BYTES
    # Seconds a finished stream waits before its usage, cost, metrics and record are
    # completed, together with the others that ended meanwhile (0: at once). In a
    # batch that work runs hot, and it is done in slices between the loop's other
    # callbacks instead of as one block in mitmproxy's `response` hook.
    finish_delay: float = 0.0
    # Seconds a new flow's record, meter and key mask wait to be made, together with
    # those of the flows that started meanwhile (0: in ``requestheaders``). What the
    # hooks read of the request and the response meanwhile is kept as they read it,
    # and anything that needs the record sooner makes it then.
    start_delay: float = 0.0
    # Under mitmweb (recorder.proxy.webview): keep each tapped body with its arrival
    # times, capped at capture_max_bytes, for the flow shown in the UI; not stored.
    keep_for_ui: bool = False
    # Attribution (recorder.core.attribution): user ids kept as sent instead of
    # fingerprinted; the headers read into tags (header name -> tag name, besides
    # X-Recorder-Tag); whether those headers are removed before the request goes on
    keep_user_ids: bool = False
    tag_headers: Mapping[str, str] = field(default_factory=dict)
    strip_tag_headers: bool = False
    # how long after an attempt that did not complete a request may be its retry
    retry_window: float = DEFAULT_RETRY_WINDOW_S

    @property
    def reading(self) -> Reading:
        """How request bodies' attribution and fingerprints are read."""
        return Reading(self.key_secret, self.keep_user_ids)

    @classmethod
    def of(cls, options: Any, key_secret: bytes, **more: Any) -> RecorderConfig:
        """The addon's configuration from the recorder's checked options (an
        ``AppConfig``): each field the options have, by name; ``more`` on top."""
        names = [f.name for f in fields(cls) if f.name != "key_secret"]
        taken = {name: getattr(options, name) for name in names if hasattr(options, name)}
        return cls(key_secret=key_secret, **{**taken, **more})
