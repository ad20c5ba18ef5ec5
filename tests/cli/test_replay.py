"""`recorder replay FILE [--endpoint E]`: a captured body metered offline."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from recorder.cli.main import main
from recorder.core.record import FIELDS
from tests.kit.cli import Cli
from tests.kit.records import DOCUMENTED_FIELDS, TIMING_FIELDS

EXPECTED: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "expected.json").read_text()
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
CHAT_TEXT = FIXTURES / "openai-chat" / "e2aad469b71d.sse"  # text + usage chunk + [DONE]
CHAT_TOOLS = FIXTURES / "openai-chat" / "a247c49c5fcd.sse"  # tool calls
CONSOLE_SCRIPT = Path(sys.executable).parent / "recorder"

# What a body alone cannot tell (docs/record.md: timings, stalls, HTTP status, key).
BODY_CANNOT_TELL = (
    *TIMING_FIELDS,
    "stalls",
    "http_status",
    "api_key_id",
)


def replay_json(cli: Cli, *args: str) -> dict[str, Any]:
    code, out, err = cli("replay", *args, "--format", "json")
    assert code == 0, err
    assert err == ""
    doc = json.loads(out)  # exactly one JSON document, nothing else on stdout
    assert isinstance(doc, dict)
    return doc


def count_events(body: bytes) -> int:
    return sum(1 for line in body.splitlines() if line.startswith(b"data:"))


def test_replay_chat_fixture_json(cli: Cli) -> None:
    doc = replay_json(cli, str(CHAT_TEXT), "--endpoint", "chat.completions")
    for name in DOCUMENTED_FIELDS:
        assert name in doc, name
    assert list(doc) == list(FIELDS)
    for name in BODY_CANNOT_TELL:
        assert doc[name] is None, name
    assert doc["outcome"] == "completed"
    assert doc["interrupted"] is False
    assert doc["endpoint"] == "chat.completions"
    assert doc["provider"] == "openai"
    assert doc["streamed"] is True
    assert doc["finish_reason"] == "stop"
    assert doc["response_id"] == "chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL"
    assert doc["response_model"] == "gpt-4o-2024-08-06"
    assert doc["events"] == count_events(CHAT_TEXT.read_bytes())
    assert doc["keepalives"] == 0
    assert doc["output_chars"] > 0
    assert (doc["input_tokens"], doc["output_tokens"]) == (14, 30)
    assert doc["usage_source"] == "reported"
    assert doc["partial_event_at_end"] is False


@pytest.mark.parametrize("path", sorted((FIXTURES / "openai-chat").glob("*.sse")), ids=str)
def test_replay_every_chat_fixture_completes(cli: Cli, path: Path) -> None:
    doc = replay_json(cli, str(path), "--endpoint", "chat.completions")
    assert doc["outcome"] == "completed"
    assert doc["events"] == count_events(path.read_bytes())
    assert doc["parse_issues"] == 0
    for name in BODY_CANNOT_TELL:
        assert doc[name] is None, name


def test_replay_tool_calls(cli: Cli) -> None:
    doc = replay_json(cli, str(CHAT_TOOLS), "--endpoint", "chat.completions")
    assert doc["outcome"] == "completed"
    assert doc["tool_calls"] >= 1
    assert doc["finish_reason"] == "tool_calls"


def test_body_cut_before_terminal_event_is_truncated(cli: Cli, tmp_path: Path) -> None:
    body = CHAT_TEXT.read_bytes()
    cut = body[: body.rindex(b"data: [DONE]")]
    path = tmp_path / "cut.sse"
    path.write_bytes(cut)
    doc = replay_json(cli, str(path), "--endpoint", "chat.completions")
    assert doc["outcome"] == "truncated"
    assert doc["interrupted"] is True
    assert doc["partial_event_at_end"] is False
    assert doc["events"] == count_events(body) - 1
    for name in BODY_CANNOT_TELL:
        assert doc[name] is None, name


def test_body_cut_mid_event_is_truncated_with_partial_event(cli: Cli, tmp_path: Path) -> None:
    body = CHAT_TEXT.read_bytes()
    path = tmp_path / "cut.sse"
    path.write_bytes(body[: len(body) // 2])
    doc = replay_json(cli, str(path), "--endpoint", "chat.completions")
    assert doc["outcome"] == "truncated"
    assert doc["interrupted"] is True
    assert doc["partial_event_at_end"] is True
    # the output received before the cut is billed: estimated; a body carries no request
    assert doc["output_source"] == "estimated" and doc["output_tokens"] > 0
    assert doc["input_source"] == "none" and doc["input_tokens"] is None
    assert doc["usage_source"] == "mixed"
    assert doc["estimate_method"] is not None
    # priced on what is known (the input is not): a lower bound, as input_source says
    assert doc["cost_usd"] is not None and doc["price_version"] is not None


def test_replay_error_event_after_200(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "err.sse"
    path.write_bytes(
        b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
        b": hopbase-keepalive\n\n"
        b'data: {"error": {"message": "stalled", "type": "server_error", "code": "x"}}\n\n'
    )
    doc = replay_json(cli, str(path), "--endpoint", "chat.completions")
    assert doc["outcome"] == "error"
    assert doc["interrupted"] is True
    assert doc["error_message"] == "stalled"
    assert doc["keepalives"] == 1
    assert doc["events"] == 2
    assert doc["http_status"] is None


def test_replay_anthropic_fixture(cli: Cli, tmp_path: Path) -> None:
    # The captured file lacks the blank line after its last event; a real wire body has it.
    path = tmp_path / "basic.sse"
    body = (FIXTURES / "anthropic-messages" / "basic_response.sse").read_bytes()
    path.write_bytes(body.rstrip(b"\n") + b"\n\n")
    doc = replay_json(cli, str(path), "--endpoint", "messages")
    assert doc["outcome"] == "completed"
    assert doc["provider"] == "anthropic"
    assert doc["finish_reason"] == "end_turn"
    assert doc["output_chars"] == len("Hello there!")
    assert doc["events"] == count_events(body) == 9
    assert doc["keepalives"] == 0  # ping is an event
    assert (doc["input_tokens"], doc["output_tokens"]) == (11, 6)


def test_format_table_prints_field_lines(cli: Cli) -> None:
    code, out, err = cli(
        "replay", str(CHAT_TEXT), "--endpoint", "chat.completions", "--format", "table"
    )
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == list(FIELDS)
    rows = {line.split()[0]: line.split(None, 1)[1] for line in lines}
    assert rows["outcome"] == "completed"
    assert rows["endpoint"] == "chat.completions"
    assert rows["interrupted"] == "no"
    assert rows["ttft_ms"] == "-"
    assert rows["http_status"] == "-"


def test_default_format_off_a_terminal_is_json(cli: Cli) -> None:
    code, out, _ = cli("replay", str(CHAT_TEXT), "--endpoint", "chat.completions")
    assert code == 0
    assert json.loads(out)["outcome"] == "completed"


def test_missing_file_exits_2_with_one_line_error(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.sse"
    code, out, err = cli(
        "replay", str(missing), "--endpoint", "chat.completions", "--format", "json"
    )
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert str(missing) in err
    assert "Traceback" not in err


def test_directory_exits_2(cli: Cli, tmp_path: Path) -> None:
    code, out, err = cli(
        "replay", str(tmp_path), "--endpoint", "chat.completions", "--format", "json"
    )
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1


def test_stdin_dash(cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeStdin:
        buffer = io.BytesIO(CHAT_TEXT.read_bytes())

    monkeypatch.setattr(sys, "stdin", FakeStdin())
    doc = replay_json(cli, "-", "--endpoint", "chat.completions")
    assert doc["outcome"] == "completed"
    assert doc["events"] == count_events(CHAT_TEXT.read_bytes())


def test_empty_body_is_truncated(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "empty.sse"
    path.write_bytes(b"")
    doc = replay_json(cli, str(path), "--endpoint", "responses")
    assert doc["outcome"] == "truncated"
    assert doc["events"] == 0
    assert doc["keepalives"] == 0


def test_unknown_endpoint_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(CHAT_TEXT), "--endpoint", "embeddings"])
    assert exc.value.code == 2
    assert "endpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    "body",
    sorted(p for p in FIXTURES.rglob("*.sse")),
    ids=lambda p: str(p.relative_to(FIXTURES)),
)
def test_endpoint_is_told_from_the_body(cli: Cli, body: Path) -> None:
    """Every captured fixture's protocol is told from its events, said on stderr,
    and the record is the one --endpoint gives."""
    endpoint = EXPECTED[str(body.relative_to(FIXTURES))]["endpoint"]
    ran = cli("replay", str(body), "--format", "json")
    assert ran.code == 0
    _, out, err = ran
    assert err.strip() == f"recorder replay: {body}: {endpoint} (told from its events)"
    assert json.loads(out) == replay_json(cli, str(body), "--endpoint", endpoint)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("usage.csv", b"date,model,input_tokens\n2026-01-01,gpt-4o,100\n"),
        ("page.json", b'{"object": "page", "data": []}'),
        ("binary.bin", bytes(range(256)) * 4),
    ],
)
def test_a_file_that_is_not_sse_is_one_line(
    cli: Cli, tmp_path: Path, name: str, content: bytes
) -> None:
    """Refused only when nothing tells what it is: no --endpoint and no event."""
    path = tmp_path / name
    path.write_bytes(content)
    ran = cli("replay", str(path))
    assert ran.code == 2
    _, out, err = ran
    assert out == ""
    assert err == (
        f"recorder replay: {path} is not an SSE body: "
        "no Server-Sent Events in it (no 'data:' or 'event:' line)\n"
    )
    # with the endpoint given it is metered as that, and says what it was
    ran = cli("replay", str(path), "--endpoint", "messages", "--format", "json")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["outcome"] == "truncated" and doc["events"] == 0
    assert "metered as messages" in ran.err


@pytest.mark.parametrize(
    "damage",
    [
        # cut inside the first event: its first line holds the tail of a JSON object
        lambda body: body[body.index(b"data: ") + 20 :],
        # damaged so that the first line is not data: and no newline ends it soon
        lambda body: b"x" * (300 * 1024) + body[body.index(b"data: ") + 20 :],
        # the first event glued to garbage, the rest whole
        lambda body: b"\x00garbage" + body,
    ],
    ids=["cut-in-first-event", "long-damaged-first-line", "garbage-before-first"],
)
def test_a_damaged_head_is_metered_with_the_endpoint(cli: Cli, tmp_path: Path, damage: Any) -> None:
    """issue 30: with --endpoint a capture cut inside its first event, or whose
    first line is not data:, is metered (its later events read, its damage
    counted), never refused as not an SSE body."""
    body = CHAT_TEXT.read_bytes()
    path = tmp_path / "cut.sse"
    path.write_bytes(damage(body))
    ran = cli("replay", str(path), "--endpoint", "chat.completions", "--format", "json")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    whole = replay_json(cli, str(CHAT_TEXT), "--endpoint", "chat.completions")
    # the usage chunk and [DONE] came whole: the same usage, completed
    assert doc["outcome"] == "completed"
    for name in ("input_tokens", "output_tokens", "response_model"):
        assert doc[name] == whole[name], name
    assert doc["events"] <= whole["events"]
    assert doc["output_chars"] <= whole["output_chars"]


def test_a_body_that_does_not_tell_asks_for_the_endpoint(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "keepalives.sse"
    path.write_bytes(b": ping\n\n: ping\n\n")
    ran = cli("replay", str(path))
    assert ran.code == 2
    assert "give --endpoint" in ran.err
    doc = replay_json(cli, str(path), "--endpoint", "messages")
    assert doc["keepalives"] == 2 and doc["outcome"] == "truncated"


def test_an_event_stream_of_an_exception_alone_asks_for_one_of_bedrocks_endpoints(
    cli: Cli,
) -> None:
    """A real ConverseStream body that is one ``modelStreamErrorException``: either
    Bedrock API sends it, so the body cannot tell which; given, it is that error."""
    path = Path(__file__).parents[1] / "fixtures" / "bedrock" / "exception_model_stream_error.bin"
    ran = cli("replay", str(path))
    assert ran.code == 2 and len(ran.err.strip().splitlines()) == 1
    assert "AWS event stream" in ran.err and "--endpoint converse" in ran.err
    for endpoint in ("converse", "invoke_model"):
        doc = replay_json(cli, str(path), "--endpoint", endpoint)
        assert (doc["outcome"], doc["error_type"]) == ("error", "modelStreamErrorException")


def test_no_command_prints_help_and_exits_2(cli: Cli) -> None:
    ran = cli()
    assert ran.code == 2
    assert "replay" in ran.out


def test_console_script_entry_point(tmp_path: Path) -> None:
    script = CONSOLE_SCRIPT if CONSOLE_SCRIPT.exists() else ROOT / ".venv" / "bin" / "recorder"
    if not script.exists():
        pytest.skip("the recorder console script is not installed")
    proc = subprocess.run(
        [str(script), "replay", str(CHAT_TEXT), "--endpoint", "chat.completions"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads(proc.stdout)  # stdout is a pipe: json by default
    assert doc["outcome"] == "completed"
    for name in DOCUMENTED_FIELDS:
        assert name in doc

    proc = subprocess.run(
        [str(script), "replay", "-", "--endpoint", "chat.completions", "--format", "json"],
        input=b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n',
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    doc = json.loads(proc.stdout)
    assert doc["outcome"] == "truncated"
    assert doc["output_chars"] == 2

    proc = subprocess.run(
        [str(script), "replay", str(tmp_path / "missing.sse"), "--endpoint", "messages"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == b""
    assert len(proc.stderr.decode().splitlines()) == 1


def test_a_damaged_head_is_told_from_the_events_after_it(cli: Cli, tmp_path: Path) -> None:
    """Without --endpoint, a body whose first 256 KiB frame no event is read on
    until its events tell the protocol; refused only when nothing tells it."""
    body = CHAT_TEXT.read_bytes()
    path = tmp_path / "cut.sse"
    path.write_bytes(b"x" * (300 * 1024) + body[body.index(b"data: ") + 20 :])
    ran = cli("replay", str(path), "--format", "json")
    assert ran.code == 0, ran.err
    doc = json.loads(ran.out)
    assert doc["endpoint"] == "chat.completions" and doc["outcome"] == "completed"
    assert "chat.completions (told from its events)" in ran.err


BEDROCK_CAPTURE = FIXTURES / "bedrock" / "converse_stream_nova_micro.bin"


def test_replay_a_captured_bedrock_event_stream(cli: Cli, tmp_path: Path) -> None:
    """A Bedrock body is told from its first message (binary, CRC-checked) and
    metered as the proxy meters it; its usage is botocore's reading of the last event."""
    from botocore.eventstream import EventStreamBuffer

    body = BEDROCK_CAPTURE.read_bytes()
    buf = EventStreamBuffer()
    buf.add_data(body)
    messages = list(buf)
    meta = json.loads(messages[-1].payload)
    doc = replay_json(cli, str(BEDROCK_CAPTURE), "--endpoint", "converse")
    assert (doc["endpoint"], doc["provider"], doc["transport"]) == (
        "converse",
        "aws.bedrock",
        "eventstream",
    )
    assert doc["outcome"] == "completed" and doc["events"] == len(messages)
    assert (doc["input_tokens"], doc["output_tokens"]) == (
        meta["usage"]["inputTokens"],
        meta["usage"]["outputTokens"],
    )
    assert doc["provider_latency_ms"] == meta["metrics"]["latencyMs"]
    cut = tmp_path / "cut.bin"
    cut.write_bytes(body[: len(body) // 2])
    doc = replay_json(cli, str(cut), "--endpoint", "converse")
    assert (doc["outcome"], doc["partial_event_at_end"]) == ("truncated", True)


GEMINI_CAPTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "gemini" / "vercel-ai-google-tool-call.jsonl"
)


@pytest.mark.parametrize("transport", ["sse", "json-array", "json"])
def test_gemini_is_told_from_its_body(cli: Cli, tmp_path: Path, transport: str) -> None:
    """A Gemini body, in each of its three forms, is told from the body and metered
    with the usage its last usageMetadata reports."""
    lines = [line for line in GEMINI_CAPTURE.read_bytes().splitlines() if line.strip()]
    usage = json.loads(lines[-1])["usageMetadata"]
    body = {
        "sse": b"".join(b"data: " + line + b"\r\n\r\n" for line in lines),
        "json-array": b"[" + b",\r\n".join(lines) + b"]",
        "json": lines[-1],
    }[transport]
    path = tmp_path / "gemini.body"
    path.write_bytes(body)
    ran = cli("replay", str(path), "--format", "json")
    assert ran.code == 0, ran
    rec = json.loads(ran[1])
    assert (rec["endpoint"], rec["provider"], rec["transport"]) == (
        "generate_content",
        "gcp.gemini",
        transport,
    )
    assert rec["input_tokens"] == usage["promptTokenCount"]
    assert rec["output_tokens"] == usage["candidatesTokenCount"] + usage["thoughtsTokenCount"]
    assert rec["outcome"] == "completed"
