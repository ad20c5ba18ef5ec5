"""`recorder replay FILE.ws.jsonl`: a WebSocket capture (a connection's messages
with their times) metered again, each response one record with its timings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from recorder.core.ws_capture import NotACapture, read_capture
from tests.kit.cli import Cli
from tests.kit.websockets import create, realtime_session, realtime_turn, responses_turn


def _write(path: Path, lines: list[dict[str, Any]], header: str | None = None) -> Path:
    out = [json.dumps({"websocket": header})] if header else []
    out += [json.dumps(line) for line in lines]
    path.write_text("\n".join(out) + "\n")
    return path


def _msg(t: float, obj: dict[str, Any], *, client: bool = False) -> dict[str, Any]:
    return {"t": t, "dir": "c2s" if client else "s2c", "text": orjson.dumps(obj).decode()}


def _replay(cli: Cli, *args: str) -> list[dict[str, Any]]:
    code, out, err = cli("replay", *args, "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc, list)
    return doc


def test_a_responses_capture_gives_each_response_with_its_timings(cli: Cli, tmp_path: Path) -> None:
    lines = [_msg(1.0, create(), client=True)]
    turn = responses_turn("resp_a", ["x", "y"])
    lines += [_msg(1.2 + 0.1 * n, e) for n, e in enumerate(turn)]
    lines.append({"t": 1.9, "dir": "c2s", "ping": True})
    lines.append(_msg(2.0, create(), client=True))
    second = responses_turn("resp_b", ["z"])
    lines += [_msg(2.5, second[0]), _msg(40.0, second[1])]  # 37.5 s silent: a stall
    path = _write(tmp_path / "conn.ws.jsonl", lines)
    first, cut = _replay(cli, str(path))
    assert first["endpoint"] == "responses" and first["transport"] == "websocket"
    assert first["outcome"] == "completed" and first["response_id"] == "resp_a"
    assert first["ttft_ms"] == pytest.approx(300.0) and first["duration_ms"] == pytest.approx(500.0)
    assert first["model"] == "gpt-5" and first["cost_usd"] is not None
    assert cut["outcome"] == "truncated" and cut["stalls"] == 1  # the capture ends before its end
    assert cut["output_source"] == "estimated"


def test_a_realtime_capture_with_its_path(cli: Cli, tmp_path: Path) -> None:
    lines = [_msg(0.0, realtime_session()), _msg(0.5, {"type": "response.create"}, client=True)]
    lines += [_msg(0.6 + 0.05 * n, e) for n, e in enumerate(realtime_turn("r1", ["Hi", "!"]))]
    path = _write(tmp_path / "rt.jsonl", lines, header="/v1/realtime?model=gpt-realtime")
    (rec,) = _replay(cli, str(path))
    assert rec["endpoint"] == "realtime" and rec["model"] == "gpt-realtime"
    assert rec["response_model"] == "gpt-realtime-2025-08-28"
    assert rec["output_audio_tokens"] == 91 and rec["cost_usd"] is not None
    assert rec["ttft_ms"] == pytest.approx(150.0)


def test_lines_that_are_not_messages_are_skipped_and_a_file_without_any_refused(
    tmp_path: Path,
) -> None:
    capture = read_capture(
        [b'{"t": 1, "dir": "s2c", "text": "{}"}', b"junk", b'{"t": "x", "dir": "s2c"}']
    )
    assert len(capture.lines) == 1 and capture.skipped == 2
    with pytest.raises(NotACapture):
        read_capture([b'{"hello": 1}'])
