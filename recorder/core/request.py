"""What the recorder keeps of a request body: a few facts, never the prompt.

With the store's secret, also its attribution (``recorder.core.attribution``:
the user, as a fingerprint unless ids are kept; the session; the prompt cache
key; the metadata's tags) and the fingerprint of what it asks
(``recorder.core.retries``), both computed where the facts are read: on a worker
thread for a large body, as prompt counting is.

The facts are top-level members of the JSON object. A body the parser refuses
(orjson stops at 1,024 levels of nesting, and a request may nest deeper) is
walked at its top level instead (:func:`_top_level`): each member's extent is
found by counting brackets, iteratively, and only the members the facts need
are parsed, so a deep ``messages`` value costs a linear scan, never a recursion.

Also the error body of a non-2xx response (OpenAI ``{"error": {...}}``,
Anthropic ``{"type": "error", "error": {...}}``, Google ``{"error": {"code",
"message", "status"}}``), read into the record's error fields.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from recorder.core import attribution
from recorder.core.retries import FINGERPRINTED, Unread, fingerprint


@dataclass(slots=True)
class RequestFacts:
    """Facts of a request body; None where the body did not say."""

    model: str | None = None
    stream: bool | None = None
    include_usage: bool | None = None
    max_output_tokens: int | None = None
    # the service tier asked for: OpenAI's ``service_tier``; Anthropic's
    # ``speed: "fast"`` is the tier ``fast`` (its ``service_tier`` when not)
    service_tier: str | None = None
    parsed: bool = False
    # attribution (recorder.core.attribution) and the retry chain's fingerprint,
    # read only when the secret is given (``Reading``)
    user_id: str | None = None
    session_id: str | None = None
    prompt_cache_key: str | None = None
    tags: list[tuple[str, Any]] | None = None  # the metadata's, before the headers'
    request_fingerprint: str | None = None


@dataclass(slots=True, frozen=True)
class Reading:
    """How attribution is read: the store's secret (user ids and request
    fingerprints are HMACs keyed by it) and whether user ids are kept as sent."""

    secret: bytes
    keep_user_ids: bool = False


_MAX_KEYS = ("max_completion_tokens", "max_output_tokens", "max_tokens")
# the members the facts are read from
_ATTRIBUTION = ("user", "safety_identifier", "metadata", "prompt_cache_key")
_WANTED = frozenset(
    {
        "model",
        "stream",
        "stream_options",
        "service_tier",
        "speed",
        "generationConfig",
        *_MAX_KEYS,
        *_ATTRIBUTION,
        *FINGERPRINTED,
        # Amazon Bedrock Converse: the limit and the tier asked for
        "inferenceConfig",
        "serviceTier",
        "performanceConfig",
    }
)


def read_request(body: bytes, reading: Reading | None = None, endpoint: str = "") -> RequestFacts:
    """Facts of a JSON request body (unparseable bodies give an empty result)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = _top_level(body)
    if not isinstance(obj, dict):
        return RequestFacts()
    facts = RequestFacts(parsed=True)
    model = obj.get("model")
    if isinstance(model, str) and model:
        facts.model = model
    stream = obj.get("stream")
    if isinstance(stream, bool):
        facts.stream = stream
    options = obj.get("stream_options")
    if isinstance(options, dict) and isinstance(options.get("include_usage"), bool):
        facts.include_usage = options["include_usage"]
    elif facts.stream:
        facts.include_usage = False
    tier = obj.get("service_tier")
    if isinstance(tier, str) and tier.strip():
        facts.service_tier = tier.strip().lower()[:32]
    speed = obj.get("speed")
    if isinstance(speed, str) and speed.strip().lower() == "fast":
        facts.service_tier = "fast"
    config = obj.get("generationConfig")  # Google's generateContent
    limits = [obj.get(key) for key in _MAX_KEYS]
    if isinstance(config, dict):
        limits.append(config.get("maxOutputTokens"))
    for value in limits:
        # a client may send anything here; only what a BIGINT column holds is kept
        if _count(value):
            facts.max_output_tokens = value
            break
    _bedrock_facts(obj, facts)
    if reading is not None:
        _attribute(facts, obj, reading, endpoint)
    return facts


def _attribute(facts: RequestFacts, obj: dict[str, Any], reading: Reading, endpoint: str) -> None:
    """The request's attribution and fingerprint, on ``facts``."""
    user = attribution.body_user(obj)
    facts.session_id = attribution.body_session(obj, user)
    if user is not None:
        facts.user_id = (
            user[: attribution.MAX_ID_CHARS]
            if reading.keep_user_ids
            else attribution.user_fingerprint(user, reading.secret)
        )
    facts.prompt_cache_key = attribution.clean(obj.get("prompt_cache_key"))
    tags = attribution.metadata_tags(obj.get("metadata"))
    facts.tags = tags or None
    facts.request_fingerprint = fingerprint(obj, endpoint, reading.secret)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63


def _bedrock_facts(obj: dict[str, Any], facts: RequestFacts) -> None:
    """Converse's ``inferenceConfig.maxTokens``, ``serviceTier.type`` and
    ``performanceConfig.latency`` (``optimized``: the tier ``latency-optimized``)."""
    config = obj.get("inferenceConfig")
    if isinstance(config, dict) and _count(config.get("maxTokens")):
        facts.max_output_tokens = config["maxTokens"]
    tier = obj.get("serviceTier")
    if isinstance(tier, dict):
        tier = tier.get("type")
    if isinstance(tier, str) and tier.strip():
        facts.service_tier = tier.strip().lower()[:32]
    perf = obj.get("performanceConfig")
    if facts.service_tier is None and isinstance(perf, dict) and perf.get("latency") == "optimized":
        facts.service_tier = "latency-optimized"


_SPACE = re.compile(rb"[ \t\r\n]*")
# the rest of a string after its opening quote, through its closing one
_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
# what changes the nesting: a run of opening or of closing brackets, or a string
# (whose brackets do not count); a run at a time, so a deep nest is a few steps
_STRUCTURE = re.compile(rb'"|[\[{]+|[\]}]+')
# a number, true, false or null: up to the next separator
_SCALAR = re.compile(rb"[^,}\] \t\r\n]+")


def _top_level(body: bytes) -> dict[str, Any] | None:
    """The wanted members of a JSON object the parser refused, each parsed alone
    (a wanted value that is itself too deep, or not JSON, is left out); None when
    ``body`` is not one well-bracketed object. Linear in ``body``'s length."""
    pos = _skip_space(body, 0)
    if body[pos : pos + 1] != b"{":
        return None
    members: dict[str, Any] = {}
    pos = _skip_space(body, pos + 1)
    if body[pos : pos + 1] == b"}":
        return members if _skip_space(body, pos + 1) == len(body) else None
    while True:
        if body[pos : pos + 1] != b'"':
            return None
        key_end = _string_end(body, pos)
        if key_end < 0:
            return None
        try:
            key = orjson.loads(body[pos:key_end])
        except orjson.JSONDecodeError:
            return None
        pos = _skip_space(body, key_end)
        if body[pos : pos + 1] != b":":
            return None
        start = _skip_space(body, pos + 1)
        end = _value_end(body, start)
        if end < 0:
            return None
        if key in _WANTED:
            try:
                members[key] = orjson.loads(body[start:end])
            except orjson.JSONDecodeError:
                members.pop(key, None)  # as deep as the rest, or broken: not read
                if key in FINGERPRINTED:  # what it asks, by its bytes
                    members[key] = Unread(body[start:end])
        pos = _skip_space(body, end)
        sep = body[pos : pos + 1]
        if sep == b"}":
            return members if _skip_space(body, pos + 1) == len(body) else None
        if sep != b",":
            return None
        pos = _skip_space(body, pos + 1)


def _skip_space(body: bytes, pos: int) -> int:
    found = _SPACE.match(body, pos)
    return found.end() if found is not None else pos


def _string_end(body: bytes, pos: int) -> int:
    """Past the closing quote of the string that opens at ``pos`` (-1: unclosed)."""
    found = _STRING_REST.match(body, pos + 1)
    return found.end() if found is not None else -1


def _value_end(body: bytes, pos: int) -> int:
    """Past the JSON value that starts at ``pos`` (-1: none there, or unclosed)."""
    first = body[pos : pos + 1]
    if first == b'"':
        return _string_end(body, pos)
    if first not in (b"[", b"{"):
        found = _SCALAR.match(body, pos)
        return found.end() if found is not None else -1
    depth = 0
    while True:
        found = _STRUCTURE.search(body, pos)
        if found is None:
            return -1
        char = body[found.start()]
        if char == 0x22:  # a string: skip it whole
            pos = _string_end(body, found.start())
            if pos < 0:
                return -1
            continue
        run = found.end() - found.start()
        if char in (0x5B, 0x7B):
            depth += run
        elif run >= depth:  # the value closes within this run
            return found.start() + depth
        else:
            depth -= run
        pos = found.end()


def read_error_body(body: bytes) -> tuple[str | None, str | None, str | None]:
    """``(type, code, message)`` of an error response body; Nones when unreadable."""
    try:
        obj: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        text = body[:500].decode("utf-8", "replace").strip()
        return None, None, text or None
    if not isinstance(obj, dict):
        return None, None, None
    err = obj.get("error")
    if isinstance(err, dict):
        # Google names the kind of error its "status" (RESOURCE_EXHAUSTED, ...)
        etype = err.get("type") or err.get("status")
        code, message = err.get("code"), err.get("message")
    elif isinstance(err, str):
        etype, code, message = None, None, err
    else:
        etype, code, message = obj.get("type"), obj.get("code"), obj.get("message")
        if etype == "error":
            etype = None
    return (
        None if etype is None else str(etype),
        None if code is None else str(code),
        None if message is None else str(message),
    )
