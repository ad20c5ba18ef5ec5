"""Who and what a request was for: its attribution, read from what clients already
send (docs/record.md, "Attribution"). Never prompt text, always bounded.

- **User**: OpenAI's ``safety_identifier`` (else its older ``user``) and
  Anthropic's ``metadata.user_id`` name the end user. That is personal data: the
  record keeps an HMAC fingerprint of it, keyed by the store's secret as API keys
  are (:func:`user_fingerprint`), unless the operator keeps ids as sent
  (``--keep-user-ids``).
- **Session**: the session or conversation an agent client names, in a header
  (:data:`SESSION_HEADERS`, first found wins), else in the body: the Responses
  API's ``conversation``, else the session Claude Code's ``metadata.user_id``
  holds: ``user_<hash>_account_<uuid or nothing>_session_<uuid>``, or in newer
  versions a JSON object's ``session_id``.
- **Tags**: name -> value pairs. The request's ``metadata`` object (OpenAI Chat
  and Responses: string values) gives tags; the operator's tag headers
  (``X-Recorder-Tag: team=search,feature=summarise``, ``--tag-header NAME``)
  give more and win on a name both give. At most :data:`MAX_TAGS` per request,
  names of :data:`MAX_TAG_NAME` characters from a small alphabet, values cut to
  :data:`MAX_TAG_VALUE` characters; the rest is left out.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

MAX_TAGS = 16
MAX_TAG_NAME = 64
MAX_TAG_VALUE = 128
# a session id, a prompt cache key, a user id kept as sent
MAX_ID_CHARS = 128

# the header read by default: "team=search,feature=summarise"
TAG_HEADER = "x-recorder-tag"
# the session or conversation headers of agent clients, in the order they are
# read (docs/record.md, "Attribution" says which client sends which)
SESSION_HEADERS = (
    "x-claude-code-session-id",  # Claude Code
    "session_id",  # Codex CLI (its conversation id)
    "session-id",
    "x-session-id",
    "conversation_id",  # Codex CLI, older versions
)

_TAG_NAME = re.compile(rf"[A-Za-z0-9_.:-]{{1,{MAX_TAG_NAME}}}")
# Claude Code's metadata.user_id: user_<hash>_account_<uuid or nothing>_session_<uuid>
_CLAUDE_SESSION = re.compile(r"_session_([0-9A-Fa-f-]{36})$")
# C0 and C1 controls, DEL: never part of an id or a tag
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def clean(value: Any, limit: int = MAX_ID_CHARS) -> str | None:
    """A wire value as bounded text: a string (a number is written as text),
    stripped, controls removed, cut to ``limit``; None when nothing is left."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    text = _CONTROLS.sub("", str(value)).strip()
    return text[:limit] or None


def tag_name_ok(name: str) -> bool:
    """Whether ``name`` can name a tag (letters, digits, ``_ . : -``; bounded)."""
    return bool(_TAG_NAME.fullmatch(name))


def parse_tag_header(value: str) -> list[tuple[str, str]]:
    """``team=search,feature=summarise`` as (name, value) pairs, in order; a part
    without ``=`` or with a name that cannot be a tag is left out."""
    pairs = []
    for part in value.split(","):
        name, sep, text = part.partition("=")
        name = name.strip().lower()
        if sep and tag_name_ok(name):
            pairs.append((name, text))
    return pairs


def bounded_tags(*sources: Iterable[tuple[str, Any]]) -> dict[str, str] | None:
    """The tags of ``sources``, the later sources winning on a name; names that
    cannot be tags and values that are not text are left out, values cut to
    :data:`MAX_TAG_VALUE`, at most :data:`MAX_TAGS` names (the winning sources'
    first); None when there are none."""
    merged: dict[str, str] = {}
    for pairs in reversed(sources):  # the winners first: they take the places
        for name, raw in pairs:
            if len(merged) >= MAX_TAGS:
                break
            if not isinstance(name, str) or not tag_name_ok(name) or name in merged:
                continue
            value = clean(raw, MAX_TAG_VALUE)
            if value is not None:
                merged[name] = value
    return merged or None


def metadata_tags(metadata: Any) -> list[tuple[str, Any]]:
    """The tags an OpenAI request's ``metadata`` object gives (Anthropic's
    ``metadata`` holds only ``user_id``, which is the user, not a tag)."""
    if not isinstance(metadata, Mapping):
        return []
    return [(k, v) for k, v in metadata.items() if k != "user_id"]


def user_fingerprint(user: str, secret: bytes) -> str:
    """An end user's id as the record keeps it: ``u:`` and 16 hex digits of an
    HMAC-SHA256 keyed by the store's secret (stable across proxies sharing it;
    nothing of the id itself, not even its end, is kept)."""
    digest = hmac.digest(secret, b"user\0" + user.encode("utf-8", "replace"), "sha256")
    return "u:" + digest.hex()[:16]


def body_user(obj: Mapping[str, Any]) -> str | None:
    """The end user a request body names, as sent (bounded)."""
    for name in ("safety_identifier", "user"):
        found = clean(obj.get(name))
        if found is not None:
            return found
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        return clean(metadata.get("user_id"), 512)
    return None


def body_session(obj: Mapping[str, Any], user: str | None) -> str | None:
    """The session a request body names: the Responses API's ``conversation`` (an
    id, or an object with one), else Claude Code's session in its user id."""
    conversation = obj.get("conversation")
    if isinstance(conversation, Mapping):
        conversation = conversation.get("id")
    found = clean(conversation)
    if found is not None:
        return found
    if user is None:
        return None
    claude = _CLAUDE_SESSION.search(user)
    if claude is not None:
        return claude.group(1)
    if user.startswith("{"):
        try:
            inner = orjson.loads(user)
        except orjson.JSONDecodeError:
            return None
        if isinstance(inner, Mapping):
            return clean(inner.get("session_id"))
    return None


def header_session(headers: Mapping[str, str]) -> str | None:
    """The session an agent client's header names (:data:`SESSION_HEADERS`)."""
    for name in SESSION_HEADERS:
        found = clean(headers.get(name))
        if found is not None:
            return found
    return None


def header_tags(
    headers: Mapping[str, str], tag_headers: Mapping[str, str]
) -> list[tuple[str, str]]:
    """The tags of the request's headers: ``X-Recorder-Tag``'s pairs, then each
    ``--tag-header`` (header name -> tag name) that the request carries."""
    pairs: list[tuple[str, str]] = []
    given = headers.get(TAG_HEADER)
    if given:
        pairs.extend(parse_tag_header(given))
    for header, tag in tag_headers.items():
        value = headers.get(header)
        if value is not None:
            pairs.append((tag, value))
    return pairs
