"""Google's Interactions API (``POST /v1beta/interactions`` with ``stream: true``).

Named SSE events, each with its ``event_type`` in the data too:
``interaction.created`` (the interaction's id and model), ``step.start`` (a
step: a ``function_call`` step is a tool call), ``step.delta`` (output: a
``text`` delta's ``text``, an ``arguments_delta``'s ``arguments``, a
``thought_summary``'s text, which is not billed as such: the thinking is, and
only its count is reported), ``step.stop``, ``interaction.status_update``,
``interaction.completed`` (the interaction's final ``status`` and its
``usage``) and ``error``. A ``data: [DONE]`` may close the stream.

The legacy events, which the API still sends when steps are disabled (and sent
alone before steps existed), are read as their step counterparts:
``interaction.start`` and ``interaction.complete``, ``content.start`` (its
``content`` in place of ``step``), ``content.delta`` and ``content.stop``. There
a call's ``function_call`` (or ``code_execution_call``, ``mcp_server_tool_call``)
delta carries its whole ``arguments`` object: one tool call for its index.

Outcome: ``interaction.completed`` with status ``completed`` (or
``requires_action``: the model waits for a tool's result) is ``completed``,
``incomplete`` and ``cancelled`` are ``incomplete``, ``failed`` is ``error``;
an ``error`` event is ``error`` with its code, and so is a bare ``{"error": ...}``
line, which is how a streamed refusal by the content filter comes. Usage: the completed
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
# the legacy (content-based) event names, read as the step-based ones
_LEGACY = {
    "interaction.start": "interaction.created",
    "interaction.complete": "interaction.completed",
    "content.start": "step.start",
    "content.delta": "step.delta",
    "content.stop": "step.stop",
}


class InteractionsInterpreter(Interpreter):
    """Interpreter for ``/v1beta/interactions``."""

    endpoint = "interactions"
    provider = "gcp.gemini"
    # a refusal by the content filter comes as a bare ``{"error": ...}`` line, with no
    # ``data:`` in front (googleapis/js-genai#1973): the framer hands it over
    bare_json = True

    __slots__ = ("_tool_steps",)

    def __init__(self) -> None:
        super().__init__(fast=False)
        self._tool_steps: set[object] = set()  # the indexes of the tool calls counted

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
        kind = _LEGACY.get(kind, kind) if kind else kind
        if kind == "step.delta":
            return self._delta(obj.get("index"), obj.get("delta"))
        if kind == "step.start":
            step = obj.get("step") or obj.get("content")
            if isinstance(step, dict) and step.get("type") in _TOOL_STEPS:
                self._tool_step(obj.get("index"))
        elif kind in ("interaction.created", "interaction.completed"):
            self._interaction(obj.get("interaction"), final=kind == "interaction.completed")
        elif kind == "error" or ("event_type" not in obj and "error" in obj):
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

    def _tool_step(self, index: Any) -> None:
        """Count a tool call once for its step (or, in the legacy events, its content)."""
        key = index if isinstance(index, int) else len(self._tool_steps)
        if key not in self._tool_steps:
            self._tool_steps.add(key)
            self.obs.tool_calls += 1

    def _delta(self, index: Any, delta: Any) -> int:
        if not isinstance(delta, dict):
            return 0
        kind = delta.get("type")
        obs = self.obs
        if kind == "text":
            n = obs.add(OutputKind.TEXT, delta.get("text"))
        elif kind == "arguments_delta":
            n = obs.add(OutputKind.TOOL, delta.get("arguments"))
        elif kind in _TOOL_STEPS:
            # legacy: the call whole, its arguments an object (code execution's: the code)
            self._tool_step(index)
            args = delta.get("arguments")
            code = args.get("code") if isinstance(args, dict) else None
            n = obs.add(OutputKind.TOOL, code if isinstance(code, str) else _compact(args))
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


def _compact(value: Any) -> str | None:
    """A legacy call's arguments as compact JSON (none: nothing)."""
    if not value:
        return None
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return None
