"""End to end: Google's official SDK (google-genai) through a real mitmproxy with the
recorder, in reverse mode (the SDK's ``base_url``), against the simulator's Gemini,
streamed and not, and with an error after status 200. Each record is checked
against the simulator's ground truth (what it really sent)."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import errors, types

from recorder.core.keys import fingerprint
from recorder.simulate import Simulator
from tests.e2e.test_sdks import KEY, assert_matches, one_record
from tests.kit.proxy_thread import RunningProxy

PROMPT = "Say something about harmony."


def client(proxy: RunningProxy) -> genai.Client:
    return genai.Client(
        api_key=KEY,
        http_options=types.HttpOptions(base_url=proxy.url(), timeout=20_000),
    )


def test_generate_content_stream(records: RunningProxy, sim: Simulator) -> None:
    sdk = client(records)  # (kept: a client closes its connections when collected)
    stream = sdk.models.generate_content_stream(model="gemini-2.5-flash", contents=PROMPT)
    text = "".join(chunk.text or "" for chunk in stream)
    rec, sent = one_record(records, sim)
    assert text == sent.text
    assert_matches(rec, sent)
    assert (rec.endpoint, rec.provider, rec.model) == (
        "generate_content",
        "gcp.gemini",
        "gemini-2.5-flash",
    )
    assert rec.transport == "sse" and rec.outcome == "completed"
    assert rec.ttft_ms is not None and rec.cost_usd is not None
    assert rec.api_key_id == fingerprint(KEY, b"e2e-secret")


def test_generate_content_whole(records: RunningProxy, sim: Simulator) -> None:
    sdk = client(records)
    answer = sdk.models.generate_content(
        model="gemini-2.5-pro",
        contents=PROMPT,
        config=types.GenerateContentConfig(max_output_tokens=400),
    )
    rec, sent = one_record(records, sim)
    assert answer.text == sent.text
    assert_matches(rec, sent)
    assert rec.streamed is False and rec.transport == "json"
    assert rec.max_output_tokens == 400 and rec.cost_usd is not None


def test_error_after_200_reaches_the_sdk_and_the_record(
    records: RunningProxy, sim: Simulator
) -> None:
    sdk = client(records)
    with pytest.raises(errors.APIError):
        for _ in sdk.models.generate_content_stream(
            model="gemini-2.5-flash+error=3", contents=PROMPT
        ):
            pass
    rec, sent = one_record(records, sim)
    assert_matches(rec, sent)
    assert (rec.outcome, rec.error_type, rec.error_code) == ("error", "UNAVAILABLE", "503")
