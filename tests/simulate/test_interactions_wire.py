"""The simulator's Interactions API, read by the recorder's meter offline: for each
shape of request (``input`` as a string, content blocks or steps; tools; thought
summaries; an output cap) and each answer (streamed or whole), what the meter
finds is what the simulator says it sent, so that the end-to-end tests built on
it (tests/e2e/test_interactions_faults.py) test the recorder, not the simulator."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from recorder.core.meter import StreamMeter
from recorder.simulate import Simulator, run_in_thread

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
REQUESTS: dict[str, dict[str, Any]] = {
    "a string": {"input": "Hello"},
    "content blocks": {"input": [{"type": "text", "text": "Hello"}], "system_instruction": "Be"},
    "steps": {"input": [{"type": "user_input", "content": [{"type": "text", "text": "Hi"}]}]},
    "tools": {"input": "Weather in Paris?", "tools": [WEATHER]},
    "after a tool's result": {
        "input": [
            {"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"type": "function_call", "id": "c1", "name": "get_weather", "arguments": {}},
            {"type": "function_result", "call_id": "c1", "result": "sunny"},
        ],
        "tools": [WEATHER],
    },
    "thought summaries": {"input": "Hello", "generation_config": {"thinking_summaries": "auto"}},
    "an output cap": {"input": "Hello", "generation_config": {"max_output_tokens": 4}},
}
EXPECTED = {  # the final status of each
    "tools": "requires_action",
    "an output cap": "incomplete",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def _ask(sim: Simulator, doc: dict[str, Any], sim_id: str) -> tuple[int, bytes]:
    headers = {"content-type": "application/json", "x-sim-id": sim_id}
    req = urllib.request.Request(
        sim.url + "/v1beta/interactions", data=json.dumps(doc).encode(), headers=headers
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("shape", list(REQUESTS))
def test_the_meter_reads_what_the_simulator_sent(sim: Simulator, shape: str, stream: bool) -> None:
    sim_id = f"i-{shape}-{stream}"
    doc = {"model": "gemini-3-flash-preview", "stream": stream, **REQUESTS[shape]}
    status, body = _ask(sim, doc, sim_id)
    sent = sim.wait_sent_blocking(sim_id)
    assert status == 200 and sent.endpoint == "interactions"
    m = StreamMeter("interactions")
    m.headers(None, status)
    if stream:
        m.feed(body)
    else:
        m.read_body(body)
    rec = m.finish()
    assert rec.outcome == sent.outcome
    assert (rec.output_chars, rec.tool_calls) == (sent.output_chars, sent.tool_calls)
    assert rec.finish_reason == sent.finish_reason
    assert sent.planned_finish_reason == EXPECTED.get(shape, "completed")
    assert sent.usage is not None
    assert (rec.input_tokens, rec.output_tokens, rec.reasoning_tokens) == (
        sent.usage["input_tokens"],
        sent.usage["output_tokens"],
        sent.usage["reasoning_tokens"],
    )
    if shape == "thought summaries":
        assert rec.reasoning_tokens
    if shape == "after a tool's result":
        assert rec.tool_calls == 0  # it answers with text, so an agent loop ends
    assert rec.parse_issues == 0


@pytest.mark.parametrize(
    "doc",
    [{"input": []}, {"input": 3}, {"model": ""}],
    ids=["no input", "a number", "no model"],
)
def test_a_request_it_cannot_answer_is_a_400(sim: Simulator, doc: dict[str, Any]) -> None:
    status, body = _ask(sim, {"model": "gemini-3-flash-preview", **doc}, f"i-bad-{doc}")
    assert status == 400
    assert json.loads(body)["error"]["code"] == 400
