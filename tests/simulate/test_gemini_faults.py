"""The simulator's Gemini, read by the recorder's meter offline: for each transport
(``alt=sse``, the JSON array, one answer) and each fault, what the meter finds is
what the simulator says it sent (its ground truth), so that the end-to-end tests
built on it test the recorder, not the simulator."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from recorder.core.meter import StreamMeter
from recorder.simulate import Simulator, run_in_thread

BODY = json.dumps({"contents": [{"role": "user", "parts": [{"text": "Hello"}]}]}).encode()
PATHS = {
    "sse": "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    "json-array": "/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro"
    ":streamGenerateContent",
    "json": "/v1beta/models/gemini-2.5-flash:generateContent",
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def _ask(sim: Simulator, path: str, fault: str, sim_id: str) -> tuple[int, str, bytes]:
    headers = {"content-type": "application/json", "x-sim-fault": fault, "x-sim-id": sim_id}
    req = urllib.request.Request(sim.url + path, data=BODY, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers["content-type"], resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["content-type"], e.read()


@pytest.mark.parametrize("transport", list(PATHS))
@pytest.mark.parametrize(
    "fault", ["", "error=2", "interrupt=3", "reasoning,tools", "usage=off", "cache_read=5"]
)
def test_the_meter_reads_what_the_simulator_sent(
    sim: Simulator, transport: str, fault: str
) -> None:
    sim_id = f"g-{transport}-{fault}"
    status, ctype, body = _ask(sim, PATHS[transport], fault, sim_id)
    sent = sim.wait_sent_blocking(sim_id)
    assert status == 200
    m = StreamMeter("generate_content")
    m.headers(None, status)
    if transport == "json":
        assert ctype.startswith("application/json")
        m.read_body(body)
    else:
        if transport == "json-array":
            assert ctype.startswith("application/json") and body[:1] == b"["
            assert m.frames_json_array()
        else:
            assert ctype.startswith("text/event-stream")
        m.feed(body)
    rec = m.finish()
    assert rec.outcome == sent.outcome
    assert (rec.output_chars, rec.tool_calls) == (sent.output_chars, sent.tool_calls)
    assert rec.finish_reason == sent.finish_reason
    assert (rec.error_type, rec.error_code) == (sent.error_type, sent.error_code)
    if sent.usage is None:
        assert rec.output_tokens is None
    else:
        assert (rec.input_tokens, rec.output_tokens) == (
            sent.usage["input_tokens"],
            sent.usage["output_tokens"],
        )
        assert rec.cache_read_tokens == sent.usage["cache_read_tokens"]
        assert rec.reasoning_tokens == sent.usage["reasoning_tokens"]
    assert rec.parse_issues == 0


def test_an_error_status_is_googles_error_body(sim: Simulator) -> None:
    status, _, body = _ask(sim, PATHS["sse"], "status=429", "g-429")
    assert status == 429
    err = json.loads(body)["error"]
    assert (err["code"], err["status"]) == (429, "RESOURCE_EXHAUSTED")
