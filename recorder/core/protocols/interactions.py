"""Google's Interactions API (``POST /v1beta/interactions`` with ``stream: true``).

Named SSE events, each with its ``event_type`` in the data too:
``interaction.created`` (the interaction's id and model), ``step.start`` (a
step: a ``function_call`` step is a tool call), ``step.delta`` (output: a
``text`` delta's ``text``, an ``arguments_delta``'s ``arguments``, a
``thought_summary``'s text, which is not billed as such: the thinking is, and
only its count is reported), ``step.stop``, ``interaction.status_update``,
``interaction.completed`` (the interaction's final ``status`` and its
``usage``) and ``error``. A ``data: [DONE]`` may close the stream.

Outcome: ``interaction.completed`` with status ``completed`` (or
``requires_action``: the model waits for a tool's result) is ``completed``,
``incomplete`` and ``cancelled`` are ``incomplete``, ``failed`` is ``error``;
an ``error`` event is ``error`` with its code. Usage: the completed
interaction's (``recorder.core.usage.from_gemini_interactions``); a stream cut
before it has its output estimated from the deltas.
"""

from __future__ import annotations

from typing import Any

import orjson

from recorder.core.framing import Event
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import OutputKind
from recorder.core.record import Outcome
from recorder.core.usage import from_gemini_interactions

_DONE = b"[DONE]"
_STATUS: dict[str, Outcome] = {
    "completed": "completed",
    "requires_action": "completed",
    "incomplete": "incomplete",
    "cancelled": "incomplete",
    "failed": "error",
}
_TOOL_STEPS = frozenset({"function_call", "mcp_server_tool_call", "code_execution_call"})


class InteractionsInterpreter(Interpreter):
    """Interpreter for ``/v1beta/interactions``."""

    endpoint = "interactions"
    provider = "gcp.gemini"

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(fast=False)

    def interpret(self, event: Event) -> int:
        if event.data == _DONE:
            return 0
        obj = self.parse(event.data)
        if obj is None:
            if event.event == "error":
                self.obs.decide("error")
                self.obs.set_error("error", None, "unreadable error event")
            return 0
        kind = obj.get("event_type")
        if not isinstance(kind, str):
            kind = event.event
        if kind == "step.delta":
            return self._delta(obj.get("delta"))
        if kind == "step.start":
            step = obj.get("step")
            if isinstance(step, dict) and step.get("type") in _TOOL_STEPS:
                self.obs.tool_calls += 1
        elif kind in ("interaction.created", "interaction.completed"):
            self._interaction(obj.get("interaction"), final=kind == "interaction.completed")
        elif kind == "error":
            err = obj.get("error")
            if not isinstance(err, dict):
                err = {}
            self.obs.decide("error")
            self.obs.set_error("error", err.get("code"), err.get("message"))
        return 0

    def read_body(self, body: bytes) -> int:
        obj = self.parse(body)
        if obj is None:
            return 0
        self._interaction(obj, final=True)
        steps = obj.get("steps")
        return self._steps(steps) if isinstance(steps, list) else 0

    def _steps(self, steps: list[Any]) -> int:
        """The output of a whole interaction (``stream: false``): its steps' text,
        thought summaries and tool calls (their arguments as JSON), counted as the
        stream's deltas would be."""
        obs = self.obs
        n = 0
        for step in steps:
            if not isinstance(step, dict):
                continue
            kind = step.get("type")
            if kind == "model_output" or kind == "thought":
                key, out = (
                    ("content", OutputKind.TEXT)
                    if kind == "model_output"
                    else ("summary", OutputKind.SUMMARY)
                )
                blocks = step.get(key)
                for block in blocks if isinstance(blocks, list) else ():
                    if isinstance(block, dict) and block.get("type") == "text":
                        n += obs.add(out, block.get("text"))
            elif kind in _TOOL_STEPS:
                obs.tool_calls += 1
                args = step.get("arguments")
                if isinstance(args, dict) and args:
                    n += obs.add(OutputKind.TOOL, orjson.dumps(args).decode())
        obs.output_chars += n
        return n

    def _delta(self, delta: Any) -> int:
        if not isinstance(delta, dict):
            return 0
        kind = delta.get("type")
        obs = self.obs
        if kind == "text":
            n = obs.add(OutputKind.TEXT, delta.get("text"))
        elif kind == "arguments_delta":
            n = obs.add(OutputKind.TOOL, delta.get("arguments"))
        elif kind == "thought_summary":
            content = delta.get("content")
            text = content.get("text") if isinstance(content, dict) else None
            n = obs.add(OutputKind.SUMMARY, text)
        else:
            return 0
        obs.output_chars += n
        return n

    def _interaction(self, inter: Any, *, final: bool) -> int:
        if not isinstance(inter, dict):
            return 0
        obs = self.obs
        iid = inter.get("id")
        if iid and obs.response_id is None:
            obs.response_id = str(iid)
        model = inter.get("model")
        if isinstance(model, str) and model:
            obs.response_model = model
        tier = inter.get("service_tier")
        if isinstance(tier, str) and tier:
            obs.service_tier = tier.lower()
        if not final:
            return 0
        status = inter.get("status")
        outcome = _STATUS.get(status) if isinstance(status, str) else None
        if outcome is not None:
            if status != "completed":
                obs.finish_reason = str(status)
            obs.decide(outcome)
        usage = inter.get("usage")
        if isinstance(usage, dict):
            obs.report_usage(from_gemini_interactions(usage), usage)
        return 0
