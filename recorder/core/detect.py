"""Which protocol a captured SSE body speaks, told from its first events.

An AWS event stream (Amazon Bedrock) is told first, by its first message's
prelude (its CRC matches): ``chunk`` events are InvokeModel's, Converse's events
are named ``messageStart``, ``contentBlockDelta``, ….

`recorder replay FILE` needs the endpoint to choose an interpreter; a body shows
it: Anthropic Messages names its events ``message_start``/``content_block_*``
(``event:`` lines and ``type`` fields alike), OpenAI Responses names them
``response.*``, Chat Completions sends unnamed ``chat.completion.chunk``
objects. Google's ``generateContent`` sends whole ``GenerateContentResponse``
objects (``candidates``, ``usageMetadata``, ``promptFeedback``), as SSE with
``alt=sse`` or as a JSON array (the body starts with ``[``); its Interactions
API names its events ``interaction.*`` and ``step.*``. A body with no SSE field
line at all, and no JSON array or object of Google's, is not an SSE body.
"""

from __future__ import annotations

import struct
from zlib import crc32

from recorder.core.errors import UsageError
from recorder.core.eventstream import PRELUDE, EventStreamFramer
from recorder.core.framing import Comment, Event
from recorder.core.json_object import json_object
from recorder.core.sse import SSEFramer

# Event types that only one protocol uses (its ``event:`` line or ``type`` field).
_MESSAGES = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
_EVENTS_LOOKED_AT = 16
_CONVERSE = frozenset(
    {
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    }
)
# members only a GenerateContentResponse has
_GOOGLE_KEYS = ("candidates", "usageMetadata", "promptFeedback", "modelVersion")
_GOOGLE_MARKS = tuple(b'"' + key.encode() + b'"' for key in _GOOGLE_KEYS)


class NotSSE(UsageError, ValueError):
    """The bytes hold no Server-Sent Events (no ``data:``/``event:`` line)."""


def detect_endpoint(head: bytes) -> str | None:
    """The endpoint whose protocol the body starting with ``head`` speaks
    (``chat.completions``, ``responses``, ``messages``, ``generate_content`` or
    ``interactions``), or None when its first
    events do not tell (an empty body tells nothing, but is no error: a stream
    can end before its first byte). Raises NotSSE when ``head`` holds bytes that
    frame no event or comment."""
    if not head.strip():
        return None
    if is_eventstream(head):
        return _bedrock_endpoint(head)
    if body_is_json(head) and any(mark in head for mark in _GOOGLE_MARKS):
        return "generate_content"
    framer = SSEFramer()
    items = framer.feed(head) + framer.feed(b"")
    events = [i for i in items if isinstance(i, Event)]
    if not events and not any(isinstance(i, Comment) for i in items):
        raise NotSSE("no Server-Sent Events in it (no 'data:' or 'event:' line)")
    for event in events[:_EVENTS_LOOKED_AT]:
        found = _from_name(event.event) or _from_data(event.data)
        if found:
            return found
    return None


def is_eventstream(head: bytes) -> bool:
    """Whether ``head`` begins with an event-stream message's prelude (its CRC matches)."""
    if len(head) < PRELUDE:
        return False
    total, headers, crc = struct.unpack_from(">III", head)
    return bool(crc32(head[:8]) == crc and headers + 16 <= total)


def _bedrock_endpoint(head: bytes) -> str | None:
    framer = EventStreamFramer()
    for item in framer.feed(head)[:_EVENTS_LOOKED_AT]:
        if isinstance(item, Event) and item.id == "event":
            if item.event == "chunk":
                return "invoke_model"
            if item.event in _CONVERSE:
                return "converse"
    return None


def body_is_json(head: bytes) -> bool:
    """Whether a body starting with ``head`` is JSON (an array or an object), not SSE."""
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1] in (b"[", b"{")


def _from_name(name: str) -> str | None:
    if name in _MESSAGES:
        return "messages"
    if name.startswith("response."):
        return "responses"
    if name.startswith(("interaction.", "step.")):
        return "interactions"
    return None


def _from_data(data: bytes) -> str | None:
    doc = json_object(data)
    if doc is None:
        return None
    kind = doc.get("type") or doc.get("event_type")
    if isinstance(kind, str) and (found := _from_name(kind)):
        return found
    if any(key in doc for key in _GOOGLE_KEYS):
        return "generate_content"
    if doc.get("object") == "chat.completion.chunk" or "choices" in doc:
        return "chat.completions"
    return None
