"""Google's Interactions API (``POST /v1beta/interactions``): named SSE events, each
with its ``event_type`` in the data too, as Google's streaming guide shows them:
``interaction.created`` (the id, ``in_progress``), ``interaction.status_update``,
then one step per part of the answer (``step.start``, its ``step.delta``s,
``step.stop``): a ``thought`` step (``thought_summary`` deltas and a
``thought_signature``), a ``model_output`` step (``text`` deltas), a
``function_call`` step per tool call (``arguments_delta``s); then
``interaction.completed`` with the final ``status`` (``completed``,
``requires_action`` after tool calls, ``incomplete`` at the output cap) and the
``usage`` (``total_input_tokens``, ``total_output_tokens`` without the thinking,
``total_thought_tokens``, ``total_cached_tokens``, ``total_tokens``), and
``event: done`` with ``[DONE]``. An error after status 200 is ``event: error``
(``{"code", "message"}``); ``stream: false`` gets the whole interaction with its
``steps``."""

from __future__ import annotations

import datetime as dt
from typing import Any

import orjson

from recorder.simulate.content import Content, Ids
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import (
    INTERRUPTED_MESSAGE,
    Builder,
    Reply,
    SimEvent,
    google_error,
)


class InteractionsBuilder(Builder):
    """``/v1beta/interactions``, streamed (``stream: true``) or not."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "v1_" + ids.b62("interaction", 40)
        if c.truncated:
            self.status = "incomplete"
        elif c.tool_calls:
            self.status = "requires_action"  # the model waits for the tools' results
        else:
            self.status = "completed"
        self.created = _iso(ids.created())

    def _usage(self) -> dict[str, int]:
        u = self.usage
        thoughts = u.reasoning_tokens or 0
        output = (u.output_tokens or 0) - thoughts
        return {
            "total_input_tokens": u.input_tokens,
            "total_output_tokens": output,
            "total_thought_tokens": thoughts,
            "total_cached_tokens": u.cache_read_tokens or 0,
            "total_tool_use_tokens": 0,
            "total_tokens": u.input_tokens + output + thoughts,
        }

    def _interaction(self, status: str, *, final: bool) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "id": self.id,
            "status": status,
            "object": "interaction",
            "model": self.p.model,
        }
        if final:
            obj["created"] = obj["updated"] = self.created
            if self.faults.usage != "off":
                obj["usage"] = self._usage()
        return obj

    def _event(self, kind: str, obj: dict[str, Any], **truth: Any) -> SimEvent:
        return SimEvent(kind, {**obj, "event_type": kind}, **truth)

    def _steps(self) -> list[tuple[dict[str, Any], list[SimEvent]]]:
        """Each step as it starts, and its deltas (with their ground truth)."""
        c = self.c
        steps: list[tuple[dict[str, Any], list[SimEvent]]] = []

        def delta(index: int, d: dict[str, Any], output: str = "", tokens: int = 0) -> SimEvent:
            obj = {"index": index, "delta": d}
            return self._event("step.delta", obj, output=output, tokens=tokens)

        if c.reasoning:
            n = len(steps)
            deltas = [
                delta(n, {"type": "thought_summary", "content": {"type": "text", "text": t}}, t, 1)
                for t in c.reasoning
            ]
            signature = self.ids.b62("thought-signature", 32)
            deltas.append(delta(n, {"type": "thought_signature", "signature": signature}))
            steps.append(({"type": "thought"}, deltas))
        if c.text:
            n = len(steps)
            deltas = [delta(n, {"type": "text", "text": t}, t, 1) for t in c.text]
            steps.append(({"type": "model_output"}, deltas))
        for call in c.tool_calls:
            n = len(steps)
            start = {
                "type": "function_call",
                "id": call.call_id,
                "name": call.name,
                "arguments": {},
            }
            deltas = [
                delta(n, {"type": "arguments_delta", "arguments": a}, a, 1) for a in call.pieces
            ]
            steps.append((start, deltas))
        return steps

    def reply(self) -> Reply:
        events = [
            self._event(
                "interaction.created",
                {"interaction": self._interaction("in_progress", final=False)},
            ),
            self._event(
                "interaction.status_update", {"interaction_id": self.id, "status": "in_progress"}
            ),
        ]
        for index, (step, deltas) in enumerate(self._steps()):
            calls = 1 if step["type"] == "function_call" else 0
            events.append(
                self._event("step.start", {"index": index, "step": step}, tool_calls=calls)
            )
            events += deltas
            events.append(self._event("step.stop", {"index": index}))
        terminal = "incomplete" if self.status == "incomplete" else "completed"
        events.append(
            self._event(
                "interaction.completed",
                {"interaction": self._interaction(self.status, final=True)},
                finish_reason=None if self.status == "completed" else self.status,
                usage=None if self.faults.usage == "off" else self.usage,
                terminal=terminal,
            )
        )
        events.append(SimEvent("done", raw=b"[DONE]"))
        return Reply(events, self._body(), self.id, self.status, self.usage)

    def _body(self) -> SimEvent:
        """The whole interaction, its output as steps (``stream: false``)."""
        c = self.c
        steps: list[dict[str, Any]] = []
        output = ""
        if c.reasoning:
            summary = c.reasoning_text
            steps.append(
                {
                    "type": "thought",
                    "signature": self.ids.b62("thought-signature", 32),
                    "summary": [{"type": "text", "text": summary}],
                }
            )
            output += summary
        if c.text:
            steps.append({"type": "model_output", "content": [{"type": "text", "text": c.answer}]})
            output += c.answer
        for call in c.tool_calls:
            try:
                args = orjson.loads(call.arguments)
            except orjson.JSONDecodeError:
                args = {}
            args = args if isinstance(args, dict) else {}
            steps.append(
                {"type": "function_call", "id": call.call_id, "name": call.name, "arguments": args}
            )
            output += orjson.dumps(args).decode() if args else ""
        obj = {**self._interaction(self.status, final=True), "steps": steps}
        terminal = "incomplete" if self.status == "incomplete" else "completed"
        return SimEvent(
            None,
            obj,
            output=output,
            tokens=c.output_tokens - c.hidden,
            tool_calls=len(c.tool_calls),
            finish_reason=None if self.status == "completed" else self.status,
            usage=None if self.faults.usage == "off" else self.usage,
            terminal=terminal,
        )

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        if interrupt:
            code, message = "UNAVAILABLE", INTERRUPTED_MESSAGE
        else:
            err = google_error(self.faults.error_code, "UNAVAILABLE")
            code, message = str(err["status"]), str(err["message"])
        obj = {"error": {"code": code, "message": message}}
        return [self._event("error", obj, terminal="error", error=("error", code, message))]


def _iso(epoch: int) -> str:
    """An ISO 8601 time of the request's derived clock (``YYYY-MM-DDThh:mm:ssZ``)."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
