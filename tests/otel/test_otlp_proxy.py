"""`recorder proxy --otlp-endpoint` as users run it, against a real OTLP receiver.

The proxy runs as a subprocess in reverse mode before an in-thread simulator and
exports to Arize Phoenix (tests/otel/phoenix.py), which the test then asks for
the spans it stored: attributes, events, and the parent of the span of a request
that carried a ``traceparent``. With no receiver at all, traffic is unaffected
(the client's bytes are the simulator's) and the drop counter says what was lost.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from recorder.simulate import Simulator, run_in_thread
from tests.kit.phoenix import Phoenix, running_phoenix
from tests.kit.ports import free_port
from tests.kit.processes import scrape_metrics, start_proxy

pytestmark = pytest.mark.slow

KEY = "sk-otel-test-5eCr3t-0123456789abcdef"
PROMPT = "Tell me about the harmony of the spheres."
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread(keep_bodies=True) as simulator:
        yield simulator


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    with running_phoenix(tmp_path_factory.mktemp("phoenix")) as receiver:
        yield receiver


def stream(port: int, rid: str, model: str, traceparent: str | None = None) -> bytes:
    """One streamed chat completion through the proxy; the body bytes as received."""
    headers = {"authorization": f"Bearer {KEY}", "x-sim-id": rid}
    if traceparent:
        headers["traceparent"] = traceparent
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    got = bytearray()
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as resp:
            for piece in resp.iter_raw():
                got += piece
    except httpx.HTTPError:
        pass  # a cut stream: what arrived is what counts
    return bytes(got)


def scrape(metrics_port: int) -> dict[str, float]:
    return scrape_metrics(metrics_port, "llm_recorder_otlp_")


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def rows(tmp_path: Path) -> int:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'recorder.db'}")
    with engine.connect() as conn:
        n = conn.execute(sa.text("select count(*) from streams")).scalar_one()
    engine.dispose()
    return int(n)


def column(tmp_path: Path, request_id: str, name: str) -> Any:
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'recorder.db'}")
    with engine.connect() as conn:
        value = conn.execute(
            sa.text(f"select {name} from streams where request_id = :rid"), {"rid": request_id}
        ).scalar_one()
    engine.dispose()
    return value


CASES = {
    # request id: (model with its faults, outcome the record should have)
    "otel-ok": ("gpt-4o", "completed"),
    "otel-stall": ("gpt-4o+keepalive=0.2+stall=1.3", "completed"),
    "otel-error": ("gpt-4o+error=4", "error"),
    "otel-cut": ("gpt-4o+rst=5", "upstream_disconnect"),
}


def test_each_stream_is_a_span_in_phoenix_child_of_its_callers_span(
    tmp_path: Path, sim: Simulator, phoenix: Phoenix
) -> None:
    proc, port, metrics_port, banner = start_proxy(tmp_path, sim, "--otlp-endpoint", phoenix.url)
    try:
        assert f"traces:   OTLP http/protobuf to {phoenix.url}" in banner
        received = {
            rid: stream(port, rid, model, TRACEPARENT if rid == "otel-ok" else None)
            for rid, (model, _) in CASES.items()
        }
        sent = {rid: sim.wait_sent_blocking(rid) for rid in CASES}
        spans = phoenix.wait_spans(len(CASES))
        counters = scrape(metrics_port)
    finally:
        stop(proc)
    # the traceparent went upstream untouched, and no byte of any stream changed
    assert sent["otel-ok"].traceparent == TRACEPARENT
    assert sent["otel-stall"].traceparent is None
    for rid in CASES:
        assert sent[rid].body is not None and received[rid] == bytes(sent[rid].body), rid

    assert counters["llm_recorder_otlp_exported_total"] == len(CASES)
    assert counters["llm_recorder_otlp_dropped_total"] == 0
    by_rid = {s["attributes"].get("recorder.request_id"): s for s in spans}
    assert set(by_rid) == set(CASES), [s["attributes"] for s in spans]

    ok = by_rid["otel-ok"]
    assert ok["name"] == "chat gpt-4o"
    assert ok["context"]["trace_id"] == TRACE_ID
    assert ok["parent_id"] == PARENT_ID
    attrs: dict[str, Any] = ok["attributes"]
    usage = sent["otel-ok"].usage
    assert usage is not None
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-4o"
    assert attrs["gen_ai.response.model"] == sent["otel-ok"].model
    assert attrs["gen_ai.response.id"] == sent["otel-ok"].response_id
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert attrs["gen_ai.usage.input_tokens"] == usage["input_tokens"]
    assert attrs["gen_ai.usage.output_tokens"] == usage["output_tokens"]
    assert attrs["gen_ai.response.time_to_first_chunk"] > 0
    assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == sim.port
    assert attrs["http.response.status_code"] == 200
    assert "error.type" not in attrs and ok["status_code"] != "ERROR"
    assert attrs["recorder.outcome"] == "completed"
    assert attrs["recorder.usage_source"] == "reported"
    assert Decimal(attrs["recorder.cost_usd"]) > 0
    assert attrs["recorder.price_version"]
    # the key's fingerprint id, as in the database: never the key
    assert attrs["recorder.api_key_id"] == column(tmp_path, "otel-ok", "api_key_id")
    names = [e["name"] for e in ok["events"]]
    assert names[:2] == ["recorder.first_event", "recorder.first_output_token"]

    stall = by_rid["otel-stall"]
    assert stall["parent_id"] is None  # no traceparent: a trace of its own
    assert stall["attributes"]["recorder.stalls"] >= 1
    assert stall["attributes"]["recorder.keepalives"] >= 1
    stalls = [e for e in stall["events"] if e["name"] == "recorder.stall"]
    assert stalls and stalls[0]["attributes"]["recorder.stall.length_ms"] >= 1000

    error = by_rid["otel-error"]
    assert error["status_code"] == "ERROR"
    assert error["attributes"]["error.type"] == sent["otel-error"].error_type
    assert {"recorder.error", "recorder.interrupted"} <= {e["name"] for e in error["events"]}

    cut = by_rid["otel-cut"]
    assert cut["attributes"]["error.type"] == "upstream_disconnect"
    assert cut["attributes"]["recorder.outcome"] == "upstream_disconnect"
    assert "recorder.interrupted" in [e["name"] for e in cut["events"]]

    # neither the prompt, nor the completion, nor the key left the proxy
    dump = json.dumps(spans)
    assert PROMPT not in dump and KEY not in dump
    for rid in CASES:
        text = sent[rid].text
        assert len(text) < 20 or text not in dump
    assert rows(tmp_path) == len(CASES)


def test_a_collector_that_is_down_drops_spans_counted_and_leaves_traffic_alone(
    tmp_path: Path, sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the standard variable alone turns export on
    nobody = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", nobody)
    proc, port, metrics_port, banner = start_proxy(tmp_path, sim)
    assert f"traces:   OTLP http/protobuf to {nobody}" in banner
    try:
        rids = [f"otel-down-{i}" for i in range(5)]
        received = {rid: stream(port, rid, "gpt-4o") for rid in rids}
        for rid in rids:
            body = sim.wait_sent_blocking(rid).body
            assert body is not None and received[rid] == bytes(body)
        deadline = time.monotonic() + 90  # the exporter retries for ~10 s first
        while scrape(metrics_port).get("llm_recorder_otlp_dropped_total", 0) < len(rids):
            assert time.monotonic() < deadline, scrape(metrics_port)
            time.sleep(0.5)
        samples = scrape(metrics_port)
        assert samples["llm_recorder_otlp_dropped_total"] == len(rids)
        assert samples["llm_recorder_otlp_exported_total"] == 0
    finally:
        out = stop(proc)
    assert "OTLP export dropped" in out  # the log line
    assert rows(tmp_path) == len(rids)  # the records are all there
