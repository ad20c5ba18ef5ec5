"""Attribution and retry chains through the real proxy, as a finance engineer
checks them: who spent it (users never stored raw unless the operator keeps
them, tags bounded, tag headers removed only when asked and nothing else
touched), and which request retried which (the same prompt from two keys never
chained, a completed request never the head of a chain). The chain of a cut
attempt and two retries, and what it costs to the cent, is
tests/e2e/test_interruption_cost.py."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import httpx
import openai
import pytest

from recorder.simulate import Simulator
from recorder.store.writer import SqlSink
from tests.kit.capture_upstream import Received, capture_upstream
from tests.kit.ports import free_port
from tests.kit.proxy_thread import running_proxy

pytestmark = pytest.mark.slow

SECRET = b"e2e-secret"  # the key secret tests.kit.proxy_thread gives the recorder
CUT = "gpt-4o+rst=6"  # the simulator cuts it after 6 events, every time


def client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def ask(c: openai.OpenAI, model: str, question: str, **more: object) -> bool:
    """One streamed request; whether it completed (a cut is the SDK's connection error)."""
    try:
        for _ in c.chat.completions.create(  # type: ignore[call-overload]
            model=model,
            messages=[{"role": "user", "content": question}],
            stream=True,
            stream_options={"include_usage": True},
            **more,
        ):
            pass
    except openai.APIConnectionError:
        return False
    return True


def test_the_same_prompt_from_two_keys_is_never_chained(
    sim: Simulator, confdir: Path, tmp_path: Path
) -> None:
    question = f"Who pays for this cut? ({tmp_path.name})"
    with running_proxy([f"reverse:{sim.url}@{free_port()}"], str(confdir)) as proxy:
        a = client(proxy.url(), "sk-e2e-team-a-000000000001")
        b = client(proxy.url(), "sk-e2e-team-b-000000000002")
        assert not ask(a, CUT, question)
        assert not ask(b, CUT, question)  # the same prompt, cut, from another key
        assert not ask(a, CUT, question)  # team A sends its request again
        a.close()
        b.close()
        first_a, first_b, again_a = proxy.sink.wait_for(3)
    assert first_a.request_fingerprint == first_b.request_fingerprint == again_a.request_fingerprint
    assert first_a.request_fingerprint is not None
    assert first_a.api_key_id != first_b.api_key_id
    assert (first_a.retry_of, first_a.attempt) == (None, 1)
    assert (first_b.retry_of, first_b.attempt) == (None, 1)  # never team A's retry
    assert (again_a.retry_of, again_a.attempt) == (first_a.id, 2)


def test_a_completed_request_is_never_the_head_of_a_chain(
    sim: Simulator, confdir: Path, tmp_path: Path
) -> None:
    question = f"Ask me twice ({tmp_path.name})"
    with running_proxy([f"reverse:{sim.url}@{free_port()}"], str(confdir)) as proxy:
        c = client(proxy.url(), "sk-e2e-finance-0000000003")
        assert ask(c, "gpt-4o", question)
        assert ask(c, "gpt-4o", question)  # the same request again: a new question
        assert not ask(c, CUT, question)  # another model: another request, cut
        assert not ask(c, CUT, question)  # its retry
        assert ask(c, "gpt-4o", question)  # the first one's again, after all that
        c.close()
        records = proxy.sink.wait_for(5)
    completed = {r.id for r in records if r.outcome == "completed"}
    assert len(completed) == 3
    assert all(r.retry_of not in completed for r in records)
    assert [r.attempt for r in records] == [1, 1, 1, 2, 1]
    assert records[3].retry_of == records[2].id
    # the model is part of what a request asks
    assert records[0].request_fingerprint == records[1].request_fingerprint
    assert records[0].request_fingerprint != records[2].request_fingerprint


def _hmac_user(user: str) -> str:
    """A user id's fingerprint, computed here from the documented rule."""
    return "u:" + hmac.new(SECRET, b"user\0" + user.encode(), hashlib.sha256).hexdigest()[:16]


@pytest.mark.parametrize("keep", [False, True])
def test_user_ids_are_never_stored_raw_unless_kept(
    sim: Simulator, confdir: Path, tmp_path: Path, keep: bool
) -> None:
    db = tmp_path / "users.db"
    users = ("alice.from.finance@example.com", "bob.from.search@example.com")
    sql = SqlSink(f"sqlite:///{db}", tmp_path / "spool")
    with running_proxy(
        [f"reverse:{sim.url}@{free_port()}"],
        str(confdir),
        config={"keep_user_ids": keep},
        also=sql,
    ) as proxy:
        c = client(proxy.url(), "sk-e2e-users-00000000004")
        assert ask(c, "gpt-4o", "hello", user=users[0], metadata={"team": "finance"})
        assert ask(c, "gpt-4o", "hello", safety_identifier=users[1])
        c.close()
        first, second = proxy.sink.wait_for(2)
    if keep:
        assert (first.user_id, second.user_id) == users
    else:
        assert (first.user_id, second.user_id) == tuple(_hmac_user(u) for u in users)
    assert first.tags == {"team": "finance"}
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("users.db*"))
    assert b"finance" in stored  # the rows are there ...
    for user in users:  # ... and the ids only when kept
        assert (user.encode() in stored) is keep


def _post(url: str, headers: dict[str, str], body: bytes) -> None:
    with httpx.Client(timeout=10) as h:
        h.post(url + "/v1/chat/completions", headers=headers, content=body).raise_for_status()


def test_strip_tag_headers_removes_them_and_nothing_else(confdir: Path) -> None:
    """The same request through a proxy that forwards the tag headers and one that
    strips them: the upstream gets the same body and the same head but for those
    header lines; both proxies record the same tags."""
    body = json.dumps(
        {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    headers = {
        "Authorization": "Bearer sk-e2e-strip-00000000005",
        "X-Recorder-Tag": "team=search,feature=summarise",
        "X-Cost-Center": "cc-42",
        "X-Recorder-Tagged": "a header that only looks like one",
        "session_id": "codex-conv-0001",  # Codex CLI's, underscore and all
        "Content-Type": "application/json",
    }
    got: dict[bool, tuple[Received, dict[str, str] | None, str | None]] = {}
    with capture_upstream() as upstream:
        for strip in (False, True):
            with running_proxy(
                [f"reverse:{upstream.url}@{free_port()}"],
                str(confdir),
                config={"strip_tag_headers": strip, "tag_headers": {"x-cost-center": "cc"}},
            ) as proxy:
                _post(proxy.url(), headers, body)
                (record,) = proxy.sink.wait_for(1)
            got[strip] = (upstream.received[-1], record.tags, record.session_id)
    kept, stripped = got[False][0], got[True][0]
    assert stripped.body == kept.body == body
    tag_lines = [
        line
        for line in kept.header_lines
        if line.lower().startswith((b"x-recorder-tag:", b"x-cost-center:"))
    ]
    assert len(tag_lines) == 2
    assert stripped.header_lines == [line for line in kept.header_lines if line not in tag_lines]
    assert stripped.head.split(b"\r\n")[0] == kept.head.split(b"\r\n")[0]
    expected = {"team": "search", "feature": "summarise", "cc": "cc-42"}
    assert got[False][1] == got[True][1] == expected
    # the session header is read, and never stripped
    assert got[False][2] == got[True][2] == "codex-conv-0001"
    assert any(line.startswith(b"session_id:") for line in stripped.header_lines)


def test_tags_are_bounded(confdir: Path) -> None:
    long_value = "y" * 5000
    many = ",".join([f"t00={long_value}", *(f"t{i:02d}=v{i}" for i in range(1, 40))])
    with (
        capture_upstream() as upstream,
        running_proxy([f"reverse:{upstream.url}@{free_port()}"], str(confdir)) as proxy,
    ):
        body = json.dumps(
            {
                "model": "gpt-4o",
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
                "metadata": {"team": "search", "bad name!": "x"},
            }
        ).encode()
        _post(proxy.url(), {"X-Recorder-Tag": many, "Content-Type": "application/json"}, body)
        (record,) = proxy.sink.wait_for(1)
    tags = record.tags or {}
    assert len(tags) == 16
    # the header's tags win the places over the metadata's, in the order sent
    assert list(tags) == [f"t{i:02d}" for i in range(16)]
    assert tags["t00"] == "y" * 128  # a value is cut, not dropped
    assert all(len(v) <= 128 for v in tags.values())
