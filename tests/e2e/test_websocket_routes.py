"""OpenAI over a WebSocket through the recorder as users run it, in a process of its
own: `recorder proxy`, and `mitmdump -s addons/recorder_addon.py`. The official
SDK's clients (``client.realtime.connect``, ``client.responses.connect``) talk to
the simulator through it; the proxy is stopped (SIGINT, as Ctrl-C) while a response
streams. Every response is one row, to the token where it ended; the one cut by the
shutdown is the client's disconnect with its output estimated; the proxy exits by
itself, without waiting for the connection to end."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import websockets

from recorder.simulate import Simulator
from tests.kit.databases import sqlite_stream_rows
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmdump, start_proxy, stop, wait_listening

pytestmark = pytest.mark.slow

TERMINAL = ("response.completed", "response.failed", "response.incomplete")
SLOW = "gpt-5+deltas=400+delay=0.05"  # 20 s if nothing cuts it


class Route:
    def __init__(self, proc: subprocess.Popen[str], port: int, db: Path) -> None:
        self.proc, self.port, self.db = proc, port, db

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(params=["recorder proxy", "mitmdump -s"])
def route(request: pytest.FixtureRequest, sim: Simulator, tmp_path: Path) -> Iterator[Route]:
    # the connections' upgrade requests carry a tag header, read then stripped
    if request.param == "recorder proxy":
        proc, port, _, _ = start_proxy(
            tmp_path, sim, "--tag-header", "x-team=team", "--strip-tag-headers"
        )
        db = tmp_path / "recorder.db"
    else:
        port, db = free_port(), tmp_path / "mitm.db"
        proc = start_mitmdump(
            tmp_path,
            sim.url,
            port,
            f"recorder_db=sqlite:///{db}",
            "recorder_metrics_port=0",
            "recorder_tag_header=x-team=team",
            "recorder_strip_tag_headers=true",
        )
        wait_listening(port, proc)
    yield Route(proc, port, db)
    stop(proc)


def _ground_truth(sim: Simulator, row: sqlite3.Row) -> tuple[object, object, str]:
    """What the simulator sent for the row's response: input, output, outcome."""
    for sent in list(sim.sent.values()):
        if sent.response_id == row["response_id"]:
            done = sim.wait_sent_blocking(sent.request_id)
            assert done.usage is not None
            return done.usage["input_tokens"], done.usage["output_tokens"], done.outcome
    raise AssertionError(f"the simulator sent no {row['response_id']}")


def test_responses_and_realtime_through_the_process_and_a_shutdown_mid_response(
    route: Route, sim: Simulator
) -> None:
    cut_seen = asyncio.Event()

    async def talk() -> int:
        client = openai.AsyncOpenAI(base_url=route.url(), api_key="sk-ws-route", max_retries=0)
        team = {"X-Team": "search"}
        async with client.realtime.connect(model="gpt-realtime", extra_headers=team) as rt:
            await rt.response.create()
            async for event in rt:
                if event.type == "response.done":
                    break
        deltas = 0
        async with client.responses.connect(extra_headers=team) as conn:
            for n in range(2):
                await conn.response.create(model="gpt-5+deltas=4", input=f"Say hello {n}")
                async for event in conn:
                    if event.type in TERMINAL:
                        break
            await conn.response.create(model=SLOW, input="A long answer")
            try:
                async for event in conn:
                    if event.type == "response.output_text.delta":
                        deltas += 1
                        if deltas == 5:
                            cut_seen.set()
            except (openai.OpenAIError, websockets.ConnectionClosed):
                pass  # the connection ended under the client: what a client sees
        return deltas

    async def shut_down() -> None:
        await cut_seen.wait()
        route.proc.send_signal(2)  # SIGINT, as Ctrl-C

    async def both() -> int:
        talking = asyncio.create_task(talk())
        await shut_down()
        return await asyncio.wait_for(talking, 30)

    deltas = asyncio.run(both())
    assert 5 <= deltas < 400
    route.proc.wait(30)  # by itself: the open connection does not hold it
    assert route.proc.returncode == 0

    rows = sqlite_stream_rows(route.db, 4)
    assert [(r["endpoint"], r["transport"], r["http_status"]) for r in rows] == [
        ("realtime", "websocket", 101),
        *[("responses", "websocket", 101)] * 3,
    ]
    for row in rows[:3]:
        inp, out, outcome = _ground_truth(sim, row)
        assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == (outcome, inp, out)
        assert outcome == "completed" and row["usage_source"] == "reported"
    cut = rows[3]
    assert cut["model"] == SLOW and cut["outcome"] == "client_disconnect"
    assert cut["output_source"] == "estimated" and cut["output_tokens"] >= deltas
    assert cut["cost_usd"] is not None
    assert len({r["connection_id"] for r in rows}) == 2  # one per WebSocket connection
    # a Responses `response.create` carries its prompt: fingerprinted, first attempts;
    # a Realtime one does not (the conversation lives on the server)
    assert [r["attempt"] for r in rows] == [None, 1, 1, 1]
    assert rows[0]["request_fingerprint"] is None
    assert rows[1]["request_fingerprint"] != rows[2]["request_fingerprint"]
    assert b"sk-ws-route" not in route.db.read_bytes()
    assert [r["tags"] for r in rows] == ['{"team":"search"}'] * 4
