"""OpenAI Responses: `event:` lines, `sequence_number` from 0, items and content
parts opened and closed around their deltas, `response.completed` with the usage."""

from __future__ import annotations

from typing import Any

from recorder.simulate.content import Content, Ids, ToolCall
from recorder.simulate.faults import Faults
from recorder.simulate.prompts import Prompt
from recorder.simulate.protocols.base import (
    Builder,
    Reply,
    SimEvent,
    openai_error,
)


class ResponsesBuilder(Builder):
    """``/v1/responses``."""

    def __init__(self, p: Prompt, c: Content, ids: Ids, faults: Faults) -> None:
        super().__init__(p, c, ids, faults)
        self.id = "resp_" + ids.hex("resp", 50)
        self.created = ids.created()
        self.msg_id = "msg_" + ids.hex("msg", 50)
        self.rs_id = "rs_" + ids.hex("rs", 50)
        self.finish = "max_output_tokens" if c.truncated else "completed"

    def _wire_usage(self) -> dict[str, Any]:
        u = self.usage
        out = u.output_tokens or 0
        details: dict[str, Any] = {"cached_tokens": u.cache_read_tokens}
        if u.cache_write_tokens:
            details["cache_write_tokens"] = u.cache_write_tokens
        return {
            "input_tokens": u.input_tokens,
            "input_tokens_details": details,
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": u.reasoning_tokens},
            "total_tokens": u.input_tokens + out,
        }

    def _response(
        self,
        status: str,
        output: list[dict[str, Any]],
        usage: dict[str, Any] | None = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        body = self.p.body
        reasoning = body.get("reasoning")
        if not isinstance(reasoning, dict):
            reasoning = {"effort": None, "summary": None}
        incomplete = {"reason": self.finish} if status == "incomplete" else None
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": error,
            "incomplete_details": incomplete,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "max_tool_calls": None,
            "model": self.p.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": reasoning,
            "service_tier": "default",
            "store": body.get("store", True),
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_logprobs": 0,
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    @staticmethod
    def _ev(typ: str, **fields: Any) -> dict[str, Any]:
        return {"type": typ, "sequence_number": 0, **fields}

    def _items(self) -> list[dict[str, Any]]:
        c = self.c
        items: list[dict[str, Any]] = []
        if c.reasoning:
            summary = [{"type": "summary_text", "text": c.reasoning_text}]
            items.append({"id": self.rs_id, "type": "reasoning", "summary": summary})
        if c.text:
            items.append(
                {
                    "id": self.msg_id,
                    "type": "message",
                    "status": "incomplete" if c.truncated else "completed",
                    "content": [self._part(c.answer)],
                    "role": "assistant",
                }
            )
        for call in c.tool_calls:
            items.append(
                {
                    "id": call.item_id,
                    "type": "function_call",
                    "status": "incomplete" if c.truncated else "completed",
                    "arguments": call.arguments,
                    "call_id": call.call_id,
                    "name": call.name,
                }
            )
        return items

    @staticmethod
    def _part(text: str) -> dict[str, Any]:
        return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}

    def reply(self) -> Reply:
        c = self.c
        ev = self._ev
        events = [
            SimEvent(
                "response.created",
                ev("response.created", response=self._response("in_progress", [])),
            ),
            SimEvent(
                "response.in_progress",
                ev("response.in_progress", response=self._response("in_progress", [])),
            ),
        ]
        items = self._items()
        index = 0
        if c.reasoning:
            events += self._reasoning_events(items[index], index)
            index += 1
        if c.text:
            events += self._text_events(items[index], index)
            index += 1
        for call in c.tool_calls:
            events += self._call_events(call, items[index], index)
            index += 1
        usage = self._wire_usage() if self.faults.usage != "off" else None
        sim_usage = self.usage if usage is not None else None
        if c.truncated:
            final = self._response("incomplete", items, usage)
            typ, terminal = "response.incomplete", "incomplete"
        else:
            final = self._response("completed", items, usage)
            typ, terminal = "response.completed", "completed"
        events.append(
            SimEvent(
                typ,
                ev(typ, response=final),
                finish_reason=self.finish,
                usage=sim_usage,
                terminal=terminal,
            )
        )
        output = "".join(
            c.reasoning + c.text + [piece for call in c.tool_calls for piece in call.pieces]
        )
        body = SimEvent(
            None,
            final,
            output=output,
            tokens=c.output_tokens - c.hidden,
            tool_calls=len(c.tool_calls),
            finish_reason=self.finish,
            usage=sim_usage,
            terminal=terminal,
        )
        return Reply(events, body, self.id, self.finish, self.usage)

    def _reasoning_events(self, item: dict[str, Any], index: int) -> list[SimEvent]:
        c = self.c
        rid = item["id"]
        empty = {"id": rid, "type": "reasoning", "summary": []}
        part = {"type": "summary_text", "text": ""}
        full = {"type": "summary_text", "text": c.reasoning_text}
        where = {"item_id": rid, "output_index": index, "summary_index": 0}
        events = [
            self._plain("response.output_item.added", output_index=index, item=empty),
            self._plain("response.reasoning_summary_part.added", **where, part=part),
        ]
        for piece in c.reasoning:
            typ = "response.reasoning_summary_text.delta"
            obj = self._ev(typ, **where, delta=piece)
            events.append(SimEvent(typ, obj, output=piece, tokens=1))
        events += [
            self._plain("response.reasoning_summary_text.done", **where, text=c.reasoning_text),
            self._plain("response.reasoning_summary_part.done", **where, part=full),
            self._plain("response.output_item.done", output_index=index, item=item),
        ]
        return events

    def _text_events(self, item: dict[str, Any], index: int) -> list[SimEvent]:
        c = self.c
        added = {**item, "status": "in_progress", "content": []}
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        events = [
            self._plain("response.output_item.added", output_index=index, item=added),
            self._plain("response.content_part.added", **where, part=self._part("")),
        ]
        for piece in c.text:
            typ = "response.output_text.delta"
            obj = self._ev(typ, **where, delta=piece, logprobs=[])
            events.append(SimEvent(typ, obj, output=piece, tokens=1))
        events += [
            self._plain("response.output_text.done", **where, text=c.answer, logprobs=[]),
            self._plain("response.content_part.done", **where, part=self._part(c.answer)),
            self._plain("response.output_item.done", output_index=index, item=item),
        ]
        return events

    def _call_events(self, call: ToolCall, item: dict[str, Any], index: int) -> list[SimEvent]:
        added = {**item, "status": "in_progress", "arguments": ""}
        where = {"item_id": item["id"], "output_index": index}
        obj = self._ev("response.output_item.added", output_index=index, item=added)
        events = [SimEvent("response.output_item.added", obj, tool_calls=1)]
        for piece in call.pieces:
            typ = "response.function_call_arguments.delta"
            events.append(
                SimEvent(typ, self._ev(typ, **where, delta=piece), output=piece, tokens=1)
            )
        events += [
            self._plain("response.function_call_arguments.done", **where, arguments=call.arguments),
            self._plain("response.output_item.done", output_index=index, item=item),
        ]
        return events

    def _plain(self, typ: str, **fields: Any) -> SimEvent:
        return SimEvent(typ, self._ev(typ, **fields))

    def error_events(self, interrupt: bool) -> list[SimEvent]:
        code = "stream_interrupted" if interrupt else self.faults.error_code
        err = openai_error(code, "server_error")
        fields = (err["type"], err["code"], err["message"])
        shape = self.faults.error_shape
        events = []
        if shape in ("both", "error"):
            obj = self._ev("error", error=err)
            events.append(SimEvent("error", obj, terminal="error", error=fields))
        if shape in ("both", "failed"):
            failed_err = {"code": err["code"], "message": err["message"]}
            resp = self._response("failed", [], None, failed_err)
            failed_fields = ("response.failed", err["code"], err["message"])
            events.append(
                SimEvent(
                    "response.failed",
                    self._ev("response.failed", response=resp),
                    terminal="error",
                    error=failed_fields if shape == "failed" else None,
                )
            )
        return events

    def finalize(self, events: list[SimEvent]) -> None:
        for n, event in enumerate(events):
            if event.obj is not None and "sequence_number" in event.obj:
                event.obj["sequence_number"] = n
