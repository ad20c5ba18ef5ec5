"""`recorder demo`: the newcomer's first five minutes.

Starts the simulator and a recording proxy on free loopback ports (so it runs
beside a `recorder proxy` already listening on 8080), sends a mix of traffic
through the official OpenAI and Anthropic SDKs, boto3 and google-genai (streams of
all three protocols, Amazon Bedrock's ConverseStream, Gemini's generateContent and
Interactions streams, a keepalive-filled stall, an
upstream cut that its client retries, an error event after status 200, the
gateway's "Response stream interrupted", a client that walks away, a rate limit),
and returns the records. Time is scaled:
the demo's stall threshold is one second, not thirty.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai

from recorder.app import build
from recorder.cli.demo_time import DEMO_STALL_AFTER
from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.core.sink import Sink
from recorder.proxy.addon import Recorder
from recorder.proxy.options import AppConfig
from recorder.proxy.runner import ProxySettings, run_in_thread
from recorder.simulate import run_in_thread as simulator_in_thread
from recorder.store.sinks import FanoutSink, MemorySink

DEMO_KEY = "sk-demo-0000000000000000"
# Any: the SDKs type their message params per method; these serve every method.
PROMPT: Any = [{"role": "user", "content": "Tell me about harmony in music."}]
PROMPT_TEXT = "Tell me about harmony in music."
PROMPT_JA: Any = [{"role": "user", "content": "音楽における調和について教えてください。"}]


@dataclass(frozen=True)
class Scenario:
    """One request of the demo, and what a user should learn from it."""

    name: str
    shows: str
    run: Callable[[openai.OpenAI, anthropic.Anthropic], None]
    requests: int = 1  # the requests it sends (a retried one sends two)


def _drain(stream: Any) -> None:
    for _ in stream:
        pass


def _chat(model: str, **kw: Any) -> Callable[[openai.OpenAI, anthropic.Anthropic], None]:
    def run(oai: openai.OpenAI, _: anthropic.Anthropic) -> None:
        _drain(oai.chat.completions.create(model=model, messages=kw.pop("messages", PROMPT), **kw))

    return run


RETRIED_MODEL = "gpt-4o+rst=8+fail_first"  # reset once; the same request again is answered


def _reset_and_retried(oai: openai.OpenAI, _: anthropic.Anthropic) -> None:
    """The retry a user writes: the SDK does not send a stream again once its
    response has begun, so when the upstream cuts it, the caller does, whole."""
    for _attempt in range(3):
        try:
            _drain(
                oai.chat.completions.create(
                    model=RETRIED_MODEL,
                    messages=PROMPT,
                    stream=True,
                    stream_options={"include_usage": True},
                )
            )
            return
        except openai.APIConnectionError:  # the SDK's word for the cut connection
            continue


def _client_walks_away(oai: openai.OpenAI, _: anthropic.Anthropic) -> None:
    stream = oai.chat.completions.create(model="gpt-4o+delay=0.05", messages=PROMPT, stream=True)
    for n, _chunk in enumerate(stream):
        if n == 3:
            break
    stream.close()


def _responses(oai: openai.OpenAI, _: anthropic.Anthropic) -> None:
    with oai.responses.stream(
        model="gpt-5", input="Tell me about harmony.", reasoning={"summary": "auto"}
    ) as stream:
        stream.get_final_response()


def _responses_failed(oai: openai.OpenAI, _: anthropic.Anthropic) -> None:
    _drain(oai.responses.create(model="gpt-5+error=6", input="hello", stream=True))


def _claude(model: str, **kw: Any) -> Callable[[openai.OpenAI, anthropic.Anthropic], None]:
    def run(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
        _drain(
            ant.messages.create(model=model, max_tokens=2000, messages=PROMPT, stream=True, **kw)
        )

    return run


def _claude_json(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
    ant.messages.create(model="claude-haiku-4-5", max_tokens=400, messages=PROMPT_JA)


def _rate_limited(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
    ant.messages.create(model="claude-sonnet-4-5+status=429", max_tokens=10, messages=PROMPT)


def _bedrock(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
    """boto3's bedrock-runtime through the same listener (the simulator speaks Bedrock
    too), with the demo's key as a Bedrock API key (``Authorization: Bearer``), so that
    its record is the demo's like the others."""
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config

    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=str(ant.base_url).rstrip("/"),
        config=Config(signature_version=UNSIGNED, retries={"max_attempts": 1}, read_timeout=30),
    )

    def bearer(request: Any, **_: Any) -> None:
        request.headers["Authorization"] = f"Bearer {DEMO_KEY}"

    client.meta.events.register("before-send.bedrock-runtime.*", bearer)
    response = client.converse_stream(
        modelId="global.anthropic.claude-haiku-4-5-20251001-v1:0",
        messages=[{"role": "user", "content": [{"text": "Tell me about harmony in music."}]}],
    )
    _drain(response["stream"])


def _genai(ant: anthropic.Anthropic) -> Any:
    """google-genai's client through the same listener, with the demo's key (sent as
    ``x-goog-api-key``, so that its records are the demo's like the others)."""
    from google import genai
    from google.genai import types

    base = str(ant.base_url).rstrip("/")
    return genai.Client(api_key=DEMO_KEY, http_options=types.HttpOptions(base_url=base))


def _gemini(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
    """Gemini's generateContent, streamed (``:streamGenerateContent?alt=sse``)."""
    client = _genai(ant)  # kept while the stream is read: a client collected closes
    _drain(client.models.generate_content_stream(model="gemini-2.5-flash", contents=PROMPT_TEXT))


def _interactions(_: openai.OpenAI, ant: anthropic.Anthropic) -> None:
    """Gemini's Interactions API, streamed (``POST /v1beta/interactions``)."""
    client = _genai(ant)
    _drain(
        client.interactions.create(model="gemini-3-flash-preview", input=PROMPT_TEXT, stream=True)
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "chat, usage requested",
        "a normal stream: TTFT, reported usage",
        _chat("gpt-4o", stream=True, stream_options={"include_usage": True}),
    ),
    Scenario(
        "chat, Japanese, no include_usage",
        "usage not reported by the stream (still billed)",
        _chat("gpt-4o-mini", stream=True, messages=PROMPT_JA),
    ),
    Scenario(
        "chat, tool calls",
        "tool calls counted, arguments are output",
        _chat("gpt-4o+tools=2", stream=True, stream_options={"include_usage": True}),
    ),
    Scenario(
        "chat, stall with keepalives",
        f"a 1.5 s output silence filled with keepalive comments is still a stall (here a"
        f" stall is {DEMO_STALL_AFTER:g} s of output silence; 30 s by default)",
        _chat(
            "gpt-4o+keepalive=0.25+stall=1.5",
            stream=True,
            stream_options={"include_usage": True},
        ),
    ),
    Scenario(
        "chat, upstream reset, retried",
        "the upstream cut the stream (upstream_disconnect); its client sent it again whole,"
        " and paid for the cut output and the input twice",
        _reset_and_retried,
        requests=2,
    ),
    Scenario("chat, client walks away", "the client left: client_disconnect", _client_walks_away),
    Scenario("responses, reasoning", "Responses stream with reasoning summary", _responses),
    Scenario(
        "responses, failed",
        "an error event after status 200: outcome error",
        _responses_failed,
    ),
    Scenario(
        "messages, thinking",
        "Anthropic stream with thinking and cache reads",
        _claude(
            "claude-sonnet-4-5+cache_read=10", thinking={"type": "enabled", "budget_tokens": 1024}
        ),
    ),
    Scenario(
        "messages, stream interrupted",
        "the gateway's 'Response stream interrupted, please retry'",
        _claude("claude-sonnet-4-5+interrupt=8"),
    ),
    Scenario("messages, not streamed", "a JSON response: streamed false", _claude_json),
    Scenario("messages, rate limited", "a 429: http_error with its error type", _rate_limited),
    Scenario(
        "bedrock, converse stream",
        "Amazon Bedrock through boto3: AWS's binary event stream, Bedrock's own latency",
        _bedrock,
    ),
    Scenario(
        "gemini, generate_content",
        "Gemini through google-genai: a generateContent stream (alt=sse), usageMetadata",
        _gemini,
    ),
    Scenario(
        "gemini, interactions",
        "Gemini's Interactions API: named step events, the usage on interaction.completed",
        _interactions,
    ),
)


# the requests the scenarios send, the retry included: the records the demo waits for
REQUESTS = sum(s.requests for s in SCENARIOS)


@contextlib.contextmanager
def demo_environment(
    sink: Sink, key_secret: bytes, confdir: str | None = None
) -> Iterator[tuple[str, str, Recorder]]:
    """Simulator + recording proxy on free ports; yields (openai base, anthropic base, addon)."""
    with simulator_in_thread() as sim:
        # the same composition root as `recorder proxy`: no /metrics, no console lines
        # (the demo prints its own table), time scaled
        config = AppConfig(
            stall_after=DEMO_STALL_AFTER,
            prices=shipped_prices(),
            metrics_port=0,
            no_live=True,
        )
        app = build(config, sink=sink, secret=key_secret)
        recorder = app.recorder
        settings = ProxySettings(
            modes=[f"reverse:{sim.url}"],
            listen_host="127.0.0.1",
            listen_port=0,
            confdir=confdir,
            log_out=sys.stderr,  # the demo's stdout is its table or its JSON document
            addons=app.addons,
        )
        with run_in_thread(recorder, settings) as listeners:
            base = f"http://127.0.0.1:{listeners[0].port}"
            yield base + "/v1", base, recorder


def run_demo(
    sink: Sink,
    key_secret: bytes,
    *,
    confdir: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> list[StreamRecord]:
    """Run every scenario through the SDKs; return the records, in request order."""
    memory = MemorySink()
    with demo_environment(FanoutSink(memory, sink), key_secret, confdir) as (
        oai_base,
        ant_base,
        _recorder,
    ):
        oai = openai.OpenAI(base_url=oai_base, api_key=DEMO_KEY, max_retries=0, timeout=30)
        ant = anthropic.Anthropic(base_url=ant_base, api_key=DEMO_KEY, max_retries=0, timeout=30)
        for n, scenario in enumerate(SCENARIOS, 1):
            if progress is not None:
                progress(f"  [{n:2}/{len(SCENARIOS)}] {scenario.name}: {scenario.shows}")
            # Failures are part of the show: the SDK raises where the stream broke.
            with contextlib.suppress(openai.APIError, anthropic.APIError):
                scenario.run(oai, ant)
        deadline = time.monotonic() + 10
        while len(memory.records) < REQUESTS and time.monotonic() < deadline:
            time.sleep(0.02)
        oai.close()
        ant.close()
    return list(memory.records)  # finish order: the requests ran one after another
