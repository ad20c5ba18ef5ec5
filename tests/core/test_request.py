"""What is kept of a request body, and of an error response body."""

from __future__ import annotations

import orjson
import pytest

from recorder.core.request import read_error_body, read_request


def test_request_facts() -> None:
    facts = read_request(
        orjson.dumps(
            {
                "model": "gpt-4o",
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 300,
                "messages": [{"role": "user", "content": "secret prompt"}],
            }
        )
    )
    assert (facts.model, facts.stream, facts.include_usage, facts.max_output_tokens) == (
        "gpt-4o",
        True,
        True,
        300,
    )
    assert "secret prompt" not in repr(facts)


def test_streaming_without_stream_options_has_include_usage_false() -> None:
    assert read_request(b'{"model": "m", "stream": true}').include_usage is False
    assert read_request(b'{"model": "m"}').include_usage is None


def test_garbage_and_absurd_values() -> None:
    assert read_request(b"not json").parsed is False
    assert read_request(b"[1, 2]").parsed is False
    huge = read_request(b'{"max_tokens": 9300000000000000000, "stream": "yes", "model": 3}')
    assert huge.max_output_tokens is None  # beyond what a BIGINT column holds
    assert huge.stream is None and huge.model is None
    assert read_request(b'{"max_tokens": true}').max_output_tokens is None


def test_error_bodies() -> None:
    assert read_error_body(
        b'{"error": {"message": "Rate limit", "type": "requests", "code": "rate_limit_exceeded"}}'
    ) == ("requests", "rate_limit_exceeded", "Rate limit")
    assert read_error_body(
        b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    ) == ("overloaded_error", None, "Overloaded")
    assert read_error_body(b'{"error": "plain words"}') == (None, None, "plain words")
    assert read_error_body(b"<html>Bad gateway</html>") == (None, None, "<html>Bad gateway</html>")
    assert read_error_body(b"") == (None, None, None)
    assert read_error_body(b'{"code": 404, "message": "no route"}') == (None, "404", "no route")


def test_the_requested_service_tier() -> None:
    assert read_request(b'{"model": "gpt-6-astra", "service_tier": "Ultrafast"}').service_tier == (
        "ultrafast"
    )
    # Anthropic's fast mode is a speed, billed as a tier of its own
    fast = read_request(b'{"model": "claude-opus-5-5", "speed": "fast", "service_tier": "auto"}')
    assert fast.service_tier == "fast"
    assert read_request(b'{"model": "m", "speed": "standard"}').service_tier is None
    assert read_request(b'{"model": "m", "service_tier": 3}').service_tier is None
    assert read_request(b'{"model": "m", "service_tier": "' + b"x" * 100 + b'"}').service_tier == (
        "x" * 32
    )


def test_the_model_of_a_body_nested_beyond_the_parsers_depth() -> None:
    """orjson refuses JSON nested deeper than 1,024 levels: the facts are then read
    from the top level alone, the deep value skipped (iteratively: no recursion)."""
    deep = b"[" * 100_000 + b"]" * 100_000
    body = b'{"model": "gpt-4o", "stream": true, "messages": ' + deep + b', "max_tokens": 64}'
    facts = read_request(body)
    assert facts.parsed is True
    assert (facts.model, facts.stream, facts.include_usage, facts.max_output_tokens) == (
        "gpt-4o",
        True,
        False,
        64,
    )
    # keys after the deep value, objects nested deep, strings holding brackets
    nested = b'{"a": ' * 5_000 + b"1" + b"}" * 5_000
    later = b'{"messages": [' + nested + b', "]}\\"["], "model": "claude-sonnet-4-5",'
    later += b' "stream_options": {"include_usage": true}, "stream": true}'
    facts = read_request(later)
    assert (facts.model, facts.include_usage, facts.stream) == ("claude-sonnet-4-5", True, True)
    # a later duplicate key wins, as in a full parse
    dup = b'{"model": "a", "x": ' + deep + b', "model": "b"}'
    assert read_request(dup).model == "b"
    # still not an object, or broken: nothing read
    assert read_request(deep).parsed is False
    assert read_request(b'{"model": "gpt-4o", "messages": ' + b"[" * 2_000).parsed is False
    assert read_request(b'{"model": "gpt-4o", "messages": ' + deep + b"} trailing").parsed is False


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "gpt-4o", "stream": true, "stream_options": {"include_usage": true}}',
        b'{ "model" : "m\\u00e9" , "max_completion_tokens" : 300 , "stream" : false }',
        b'{"model": "claude-opus-5-5", "speed": "fast", "service_tier": "auto"}',
        b'{"model": "gpt-6-astra", "service_tier": "Ultrafast", "max_tokens": 1e3}',
        b'{"model": 3, "stream": "yes", "max_tokens": 9300000000000000000}',
        # a wanted member itself too deep is left out (the stream_options here)
        b'{"model": "x", "stream_options": {"include_usage": [' + b"[" * 2000 + b"]" * 2001 + b"}}",
        b"{}",
    ],
)
def test_a_deep_member_changes_no_fact(body: bytes) -> None:
    """The same facts whether or not a member nested past the parser's depth sits
    beside the others (before them or after)."""
    deep = b"{" + b'"a": [' * 3000 + b"0" + b"]" * 3000 + b"}"
    shallow = read_request(body)
    inner = body.strip()[1:-1]
    for changed in (
        b'{"input": ' + deep + (b", " + inner if inner else b"") + b"}",
        b"{" + inner + (b", " if inner else b"") + b'"input": ' + deep + b"}",
    ):
        assert read_request(changed) == shallow, changed[:80]


def test_google_error_body_names_its_status() -> None:
    from recorder.core.request import read_error_body

    body = (
        b'{\n  "error": {\n    "code": 429,\n'
        b'    "message": "Resource has been exhausted.",\n'
        b'    "status": "RESOURCE_EXHAUSTED"\n  }\n}\n'
    )
    assert read_error_body(body) == ("RESOURCE_EXHAUSTED", "429", "Resource has been exhausted.")
