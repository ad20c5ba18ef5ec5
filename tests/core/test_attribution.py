"""Attribution read from a request (recorder.core.attribution, read_request): the
user only as a keyed fingerprint unless kept, the sessions agent clients name,
tags bounded whatever a client sends."""

from __future__ import annotations

import hashlib
import hmac

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core import attribution
from recorder.core.request import Reading, RequestFacts, read_request

SECRET = b"store-secret"


def read(body: dict[str, object], *, keep: bool = False) -> RequestFacts:
    return read_request(orjson.dumps(body), Reading(SECRET, keep), "chat.completions")


def test_a_user_is_a_keyed_fingerprint_unless_kept() -> None:
    for body, user in (
        ({"model": "m", "user": "alice@example.com"}, "alice@example.com"),
        ({"safety_identifier": "sid-7", "user": "old-style"}, "sid-7"),  # the newer field first
        ({"metadata": {"user_id": "user_abc"}}, "user_abc"),  # Anthropic
    ):
        expected = "u:" + hmac.new(SECRET, b"user\0" + user.encode(), hashlib.sha256).hexdigest()
        facts = read(body)
        assert facts.user_id == expected[:18]
        assert user not in repr(facts)
        assert read(body, keep=True).user_id == user
    assert read({"model": "m"}).user_id is None
    assert read({"user": 42}).user_id is not None  # a number is an id too
    assert read({"user": {"x": 1}}).user_id is None


def test_sessions_agent_clients_name() -> None:
    # Claude Code's metadata.user_id, in the forms its versions send (the account
    # part may be empty), and as a JSON object in newer ones
    device = "5dd07c33da27e6d2968d94ea20bf47a7b090b6b158b82328d54da2909a108e84"
    for user_id, session in (
        (
            f"user_{device}_account__session_d2e70091-3007-41a3-a916-cb8b0d3098de",
            "d2e70091-3007-41a3-a916-cb8b0d3098de",
        ),
        (
            f"user_{device}_account_0b3a6a52-1111-4aaa-8bbb-0123456789ab_session_7c9e6679-7425-40de-944b-e07fc1f90ae7",
            "7c9e6679-7425-40de-944b-e07fc1f90ae7",
        ),
        (
            orjson.dumps(
                {
                    "device_id": device,
                    "account_uuid": "",
                    "session_id": "2c4e1cf0-7a67-4d2e-9a4b-1d16d3f44752",
                }
            ).decode(),
            "2c4e1cf0-7a67-4d2e-9a4b-1d16d3f44752",
        ),
        ("same-user-across-chats", None),
        ("{not json", None),
    ):
        facts = read({"metadata": {"user_id": user_id}})
        assert facts.session_id == session, user_id
        assert facts.user_id is not None and device not in facts.user_id
    # the Responses API's conversation, as an id or an object
    assert read({"conversation": "conv_123"}).session_id == "conv_123"
    conv = read({"conversation": {"id": "conv_9"}})
    assert conv.session_id == "conv_9"
    # headers: Claude Code's, Codex's
    assert attribution.header_session({"x-claude-code-session-id": "s-1"}) == "s-1"
    assert attribution.header_session({"session_id": "codex-conv"}) == "codex-conv"
    assert attribution.header_session({"user-agent": "Agents/Python 0.6"}) is None
    assert read({"prompt_cache_key": "conv-1"}).prompt_cache_key == "conv-1"


def test_the_tag_header() -> None:
    pairs = attribution.parse_tag_header("team=search, Feature=summarise,,no-equals,bad name=x")
    assert pairs == [("team", "search"), ("feature", "summarise")]
    tags = attribution.bounded_tags(
        [("team", "from-metadata"), ("cost", 3)], attribution.parse_tag_header("team=search")
    )
    assert tags == {"team": "search", "cost": "3"}  # the header wins; a number is text


texts = st.text(max_size=300)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(texts, st.one_of(texts, st.integers(), st.none())), max_size=60))
def test_tags_are_bounded_whatever_a_client_sends(pairs: list[tuple[str, object]]) -> None:
    tags = attribution.bounded_tags(pairs) or {}
    assert len(tags) <= attribution.MAX_TAGS
    for name, value in tags.items():
        assert attribution.tag_name_ok(name) and len(name) <= attribution.MAX_TAG_NAME
        assert 0 < len(value) <= attribution.MAX_TAG_VALUE
        assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value)
    # every name that could be a tag, with a value, is kept while there is room
    usable = {n for n, v in pairs if attribution.tag_name_ok(n) and attribution.clean(v, 128)}
    assert len(tags) == min(len(usable), attribution.MAX_TAGS)
