"""Retry chains (recorder.core.retries): what a request's fingerprint covers, and
the chains, checked against a reference written here from the documented rule
over random sequences of attempts: never across keys, never from a completed
request, never from an attempt still under way, never past the window."""

from __future__ import annotations

import random

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from recorder.core.request import Reading, read_request
from recorder.core.retries import RetryChains, did_not_complete

SECRET = b"store-secret"
READING = Reading(SECRET)
ASK = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "What does a cut cost?"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
}


def fp(body: dict[str, object], endpoint: str = "chat.completions") -> str | None:
    return read_request(orjson.dumps(body), READING, endpoint).request_fingerprint


def test_the_fingerprint_is_what_is_asked_not_how() -> None:
    base = fp(ASK)
    assert base is not None and len(base) == 24
    # stream flags, limits, metadata, the user and tags do not change what is asked
    for extra in (
        {"stream": True, "stream_options": {"include_usage": True}},
        {"max_tokens": 10, "temperature": 0.2},
        {"metadata": {"team": "search"}, "user": "alice", "safety_identifier": "a"},
    ):
        assert fp({**ASK, **extra}) == base, extra
    # member order neither
    assert fp(dict(reversed(ASK.items()))) == base
    # what is asked does
    for changed in (
        {"model": "gpt-4o-mini"},
        {"messages": [{"role": "user", "content": "What does a cut cost!"}]},
        {"tools": []},
        {"system": "be brief"},
    ):
        assert fp({**ASK, **changed}) != base, changed
    assert fp(ASK, "responses") != base  # another endpoint asks another thing
    assert fp({"model": "gpt-4o"}) is None  # nothing asked
    # keyed: another store's secret, another fingerprint; never the text
    other = read_request(orjson.dumps(ASK), Reading(b"other"), "chat.completions")
    assert other.request_fingerprint != base
    assert "cut cost" not in repr(read_request(orjson.dumps(ASK), READING, "chat.completions"))


def test_google_and_bedrock_bodies_are_fingerprinted_by_what_they_ask() -> None:
    gemini = {"contents": [{"role": "user", "parts": [{"text": "What does a cut cost?"}]}]}
    base = fp(gemini, "generate_content")
    assert base is not None
    assert fp({**gemini, "generationConfig": {"maxOutputTokens": 9}}, "generate_content") == base
    assert (
        fp({**gemini, "systemInstruction": {"parts": [{"text": "brief"}]}}, "generate_content")
        != base
    )
    converse = {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    assert fp({**converse, "toolConfig": {"tools": []}}, "converse") != fp(converse, "converse")


def test_a_body_too_deep_for_the_parser_is_fingerprinted_by_its_bytes() -> None:
    deep = b"[" * 1500 + b"]" * 1500
    body = b'{"model": "gpt-4o", "stream": true, "messages": ' + deep + b"}"
    first = read_request(body, READING, "chat.completions").request_fingerprint
    assert first is not None
    unstreamed = body.replace(b"true", b"false")
    assert read_request(unstreamed, READING, "chat.completions").request_fingerprint == first
    other = body.replace(b"[]", b"[1]", 1)
    assert read_request(other, READING, "chat.completions").request_fingerprint != first


@pytest.mark.parametrize(
    ("outcome", "status", "expected"),
    [
        ("completed", 200, False),
        ("incomplete", 200, False),
        ("error", 200, True),
        ("upstream_disconnect", 200, True),
        ("client_disconnect", None, True),
        ("truncated", 200, True),
        ("http_error", 429, True),
        ("http_error", 503, True),
        ("http_error", 400, False),
        ("http_error", None, False),
    ],
)
def test_what_did_not_complete(outcome: str, status: int | None, expected: bool) -> None:
    assert did_not_complete(outcome, status) is expected


# -- chains against a reference -----------------------------------------------------

attempts = st.lists(
    st.tuples(
        st.sampled_from(["key-a", "key-b", None]),  # the key's fingerprint
        st.sampled_from(["fp-1", "fp-2"]),  # what it asks
        st.floats(0, 400),  # pause before it starts (seconds)
        st.floats(0, 120),  # how long it runs
        st.booleans(),  # whether it completed
        st.booleans(),  # whether it starts before the previous one ends (concurrent)
    ),
    max_size=40,
)


def reference(
    seq: list[tuple[str | None, str, float, float, bool, bool]], window: float
) -> list[tuple[int | None, int]]:
    """Each request's (index of the attempt it retries, attempt number), from the
    documented rule, replayed from the start for every request: the head is the
    attempt of the same key and fingerprint that did not complete and ended last,
    unless a request completed after it ended, or its window passed before a
    later request of theirs started; a request that starts after the head ended,
    within the window, retries it."""
    out: list[tuple[int | None, int]] = []
    spans = _spans(seq)
    for i, (start, _) in enumerate(spans):
        head: int | None = None
        for j in range(i):
            if seq[j][:2] != seq[i][:2]:
                continue
            if head is not None and spans[head][1] + window < spans[j][0]:
                head = None  # its window passed
            completed = seq[j][4]
            if completed and head is not None and spans[head][1] <= spans[j][0]:
                head = None
            elif not completed and (head is None or spans[j][1] >= spans[head][1]):
                head = j
        if head is not None and spans[head][1] <= start <= spans[head][1] + window:
            out.append((head, out[head][1] + 1))
        else:
            out.append((None, 1))
    return out


def _spans(
    seq: list[tuple[str | None, str, float, float, bool, bool]],
) -> list[tuple[float, float]]:
    """(start, end) of each request: after a pause, or overlapping the one before."""
    spans: list[tuple[float, float]] = []
    clock = 0.0
    for _, _, pause, length, _, overlap in seq:
        start = clock - min(length, 5.0) if overlap and spans else clock + pause
        clock = max(clock, start + length)
        spans.append((start, start + length))
    return spans


@settings(max_examples=300, deadline=None)
@given(attempts)
# a start exactly the window after the last attempt ended, by a sum that rounds
# (found by CI): within the window, as link says, not let go of by the expiry
@example([("key-a", "fp-1", 0.0, 112.11108295946423, False, False),
          ("key-a", "fp-1", 80.0, 120.0, False, False),
          ("key-a", "fp-1", 200.0, 0.0, False, False)])  # fmt: skip
# a request that started (200) before the one recorded before it (201): the
# attempt it retries (ended at 0) is not let go of by the other's start
@example([("key-a", "fp-2", 0.0, 0.0, False, False),
          ("key-a", "fp-1", 0.0, 49.0, False, True),
          ("key-a", "fp-1", 157.0, 0.0, False, False),
          ("key-a", "fp-2", 0.0, 1.0, False, True)])  # fmt: skip
def test_chains_follow_the_rule(
    seq: list[tuple[str | None, str, float, float, bool, bool]],
) -> None:
    window = 200.0
    chains = RetryChains(window)
    got: list[tuple[int | None, int | None]] = []
    ids = [f"rec-{i}" for i in range(len(seq))]
    for i, ((key, asked, _, _, completed, _), (start, end)) in enumerate(
        zip(seq, _spans(seq), strict=True)
    ):
        retry_of, attempt = chains.link(
            key, asked, ids[i], started=start, ended=end, complete=completed
        )
        got.append((None if retry_of is None else ids.index(retry_of), attempt))
    want = reference(seq, window)
    for i, ((head, attempt), (ref_head, ref_attempt)) in enumerate(zip(got, want, strict=True)):
        assert (head, attempt) == (ref_head, ref_attempt), (i, seq[: i + 1])
        if head is not None:
            assert seq[head][0] == seq[i][0]  # never across keys
            assert not seq[head][4]  # never from a completed request


def test_the_table_is_bounded_and_forgets_what_the_window_left() -> None:
    chains = RetryChains(window=10.0, limit=100)
    rng = random.Random(7)
    for i in range(1000):
        chains.link("k", f"fp-{rng.randrange(10**9)}", f"r{i}", started=i, ended=i, complete=False)
        # two windows of attempts, one a second: the window, and the margin for a
        # request that started before the one recorded last
        assert len(chains) <= 21
    many = RetryChains(window=1e9, limit=100)
    for i in range(1000):
        many.link("k", f"fp-{i}", f"r{i}", started=i, ended=i, complete=False)
    assert len(many) == 100
    # the oldest were let go first: the latest one is still there to be retried
    assert many.link("k", "fp-999", "again", started=2000, ended=2001, complete=True) == ("r999", 2)
    assert many.link("k", "fp-0", "again", started=2000, ended=2001, complete=True) == (None, 1)
