"""A stream's events as a person reads them: one line per event with its time
since the request and since the event before, keepalives and stalls flagged,
and the output reassembled below (text, reasoning, tool arguments).

This is what mitmweb's "LLM stream" content view shows for a metered flow. It
reads the body with the arrival time of each piece (every event of a piece
gets that piece's time), so it needs the pieces as the tap saw them. Display
only: the figures of record come from the meter, never from here.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from recorder.core.eventstream import EventStreamFramer
from recorder.core.framing import Comment, Event, Framer, FramingIssue
from recorder.core.json_object import json_object
from recorder.core.protocols import EVENTSTREAM_ENDPOINTS, INTERPRETERS
from recorder.core.sse import SSEFramer

EVENT_WIDTH = 160  # characters of an event's data shown on its line
_TEXT = "text"
_REASONING = "reasoning"
_TOOL = "tool arguments"
_RESPONSES_SKIPPED = ("response.audio.delta", "response.shell_call_output_content.delta")


@dataclass(slots=True)
class Transcript:
    """The lines of the view and the output reassembled, by kind."""

    lines: list[str] = field(default_factory=list)
    output: dict[str, list[str]] = field(
        default_factory=lambda: {_TEXT: [], _REASONING: [], _TOOL: []}
    )
    events: int = 0
    keepalives: int = 0
    stalls: int = 0

    def render(self) -> str:
        """The whole view as text."""
        head = (
            f"{self.events} events, {self.keepalives} keepalives, "
            f"{self.stalls} stall{'s' if self.stalls != 1 else ''} (times in ms)"
        )
        out = [head, f"{'+t':>10} {'Δt':>9}  event", *self.lines]
        for kind, parts in self.output.items():
            if parts:
                out += ["", f"── {kind} ──", "".join(parts)]
        return "\n".join(out)


def transcript(
    pieces: Iterable[tuple[float, bytes]], endpoint: str, stall_after: float
) -> Transcript:
    """Read ``pieces`` (seconds since the request, bytes) of an ``endpoint``
    stream; a gap of ``stall_after`` seconds or more between two outputs is
    flagged as a stall on the output that ends it (as the meter counts them; a
    silence running into a cut is the record's to tell, not the body's)."""
    framer: Framer = (
        EventStreamFramer()
        if endpoint in EVENTSTREAM_ENDPOINTS
        # Google's errors after status 200 come as bare JSON: read as the meter reads them
        else SSEFramer(bare_json=endpoint in INTERPRETERS and INTERPRETERS[endpoint].bare_json)
    )
    t = Transcript()
    last: float | None = None
    last_output: float | None = None
    for now, data in [*pieces, (None, b"")]:
        items = framer.feed(data) if now is not None else framer.feed(b"")
        at = now if now is not None else (last or 0.0)
        for item in items:
            delta = 0.0 if last is None else at - last
            last = at
            stamp = f"{at * 1000:>10.1f} {delta * 1000:>9.1f}  "
            if isinstance(item, Comment):
                t.keepalives += 1
                t.lines.append(f"{stamp}:{item.text}    [keepalive]")
                continue
            if isinstance(item, FramingIssue):
                t.lines.append(f"{stamp}!! {item.kind.replace('_', ' ')} ({item.size} bytes)")
                continue
            t.events += 1
            found = _output(item, endpoint)
            # an output event shows its output (the rest of it is the same every
            # time); any other shows its data
            line = stamp + (_output_text(item, found) if found else _event_text(item))
            if found:
                if last_output is not None and at - last_output >= stall_after:
                    t.stalls += 1
                    line += f"    [STALL: {at - last_output:.1f} s without output]"
                last_output = at
                for kind, text in found:
                    t.output[kind].append(text)
            t.lines.append(line)
    return t


def _event_text(event: Event) -> str:
    name = f"{event.event} " if event.event != "message" else ""
    text = event.data.decode("utf-8", "replace").replace("\n", "⏎")
    if len(text) > EVENT_WIDTH:
        text = text[: EVENT_WIDTH - 1] + "…"
    return f"{name}{text}"


def _output_text(event: Event, found: list[tuple[str, str]]) -> str:
    name = f"{event.event} " if event.event != "message" else ""
    shown = "  ".join(f"{kind}: {orjson.dumps(text).decode()}" for kind, text in found)
    if len(shown) > EVENT_WIDTH:
        shown = shown[: EVENT_WIDTH - 1] + "…"
    return f"{name}{shown}"


def _output(event: Event, endpoint: str) -> list[tuple[str, str]]:
    """The output an event carries, by kind (empty when none or unreadable)."""
    doc = json_object(event.data)
    if doc is None:
        return []
    if endpoint == "invoke_model":  # Bedrock's chunk: the model's JSON in base64
        inner = _chunk_json(doc)
        if inner is None:
            return []
        doc, endpoint = inner, "messages"
    found: list[tuple[str, str]] = []
    if endpoint == "converse" and event.event == "contentBlockDelta":
        delta = doc.get("delta")
        if isinstance(delta, dict):
            _add(found, _TEXT, delta.get("text"))
            tool = delta.get("toolUse")
            _add(found, _TOOL, tool.get("input") if isinstance(tool, dict) else None)
            thinking = delta.get("reasoningContent")
            _add(found, _REASONING, thinking.get("text") if isinstance(thinking, dict) else None)
    if endpoint == "chat.completions":
        for choice in doc.get("choices") or ():
            delta = choice.get("delta") if isinstance(choice, dict) else None
            if not isinstance(delta, dict):
                continue
            for key, kind in (
                ("content", _TEXT),
                ("refusal", _TEXT),
                ("reasoning_content", _REASONING),
                ("reasoning", _REASONING),
            ):
                _add(found, kind, delta.get(key))
            _content_parts(found, delta.get("content"))
            for call in delta.get("tool_calls") or ():
                fn = call.get("function") if isinstance(call, dict) else None
                _add(found, _TOOL, fn.get("arguments") if isinstance(fn, dict) else None)
    elif endpoint == "responses":
        kind_name = doc.get("type")
        if (
            isinstance(kind_name, str)
            and kind_name.endswith(".delta")
            and kind_name not in _RESPONSES_SKIPPED
        ):
            kind = (
                _REASONING
                if "reasoning" in kind_name
                else _TOOL
                if any(w in kind_name for w in ("arguments", "input", "code", "command", "diff"))
                else _TEXT
            )
            _add(found, kind, doc.get("delta"))
    elif endpoint == "messages" and doc.get("type") == "content_block_delta":
        delta = doc.get("delta")
        if isinstance(delta, dict):
            _add(found, _TEXT, delta.get("text"))
            _add(found, _TOOL, delta.get("partial_json"))
            _add(found, _REASONING, delta.get("thinking"))
            if delta.get("type") == "compaction_delta":  # a summary the model wrote
                _add(found, _TEXT, delta.get("content"))
    elif endpoint == "generate_content":
        _google_output(doc, found)
    elif endpoint == "interactions" and doc.get("event_type") in ("step.delta", "content.delta"):
        delta = doc.get("delta")
        if isinstance(delta, dict):
            _add(found, _TEXT, delta.get("text"))
            _add(found, _TOOL, delta.get("arguments"))
    return found


def _content_parts(found: list[tuple[str, str]], parts: object) -> None:
    """Mistral's content as a list of parts: text parts, and thinking parts'
    text parts (reasoning)."""
    if not isinstance(parts, list):
        return
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            _add(found, _TEXT, part.get("text"))
        elif part.get("type") == "thinking" and isinstance(part.get("thinking"), list):
            for inner in part["thinking"]:
                if isinstance(inner, dict) and inner.get("type") == "text":
                    _add(found, _REASONING, inner.get("text"))


def _chunk_json(envelope: dict[str, Any]) -> dict[str, Any] | None:
    raw = envelope.get("bytes")
    if not isinstance(raw, str):
        return None
    try:
        return json_object(base64.b64decode(raw, validate=True))
    except ValueError:
        return None


def _google_output(doc: dict[str, object], found: list[tuple[str, str]]) -> None:
    """A GenerateContentResponse's parts: text, thought text, a call's arguments."""
    for cand in doc.get("candidates") or ():  # type: ignore[attr-defined]
        content = cand.get("content") if isinstance(cand, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts or ():
            if not isinstance(part, dict):
                continue
            _add(found, _REASONING if part.get("thought") is True else _TEXT, part.get("text"))
            call = part.get("functionCall")
            if isinstance(call, dict) and call.get("args"):
                _add(found, _TOOL, json.dumps(call["args"], separators=(",", ":")))


def _add(found: list[tuple[str, str]], kind: str, value: object) -> None:
    if isinstance(value, str) and value:
        found.append((kind, value))
