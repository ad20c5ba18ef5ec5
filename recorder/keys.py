"""API key fingerprints: keyed, non-reversible, recognisable.

A key is never stored or exported. What is kept is
``…<last four characters>:<12 hex digits of HMAC-SHA256(secret, key)>``: the
last four characters let a person tell their keys apart (providers' dashboards
show the same), the HMAC makes the fingerprint stable for one secret and
useless for guessing the key without it. The secret comes from
``RECORDER_KEY_SECRET`` or from the database (``recorder.store.secret``), so
that every proxy sharing a database shares it.

A key travels in a header (``Authorization: Bearer``, ``x-api-key``, Azure's
``api-key``) or, with some gateways, in the query string (``?api-key=``,
``?key=``). An upstream may echo it back in an error: :func:`scrub_key` masks it
in error texts, :func:`mask_key_bytes` in a captured body (same length, so the
body's timeline still fits it).
"""

from __future__ import annotations

import hmac
import re

KEY_HEADERS = ("authorization", "x-api-key", "api-key")


QUERY_KEY_PARAMS = ("api-key", "api_key", "key")


def extract_key(headers: dict[str, str] | object, query: object = None) -> str | None:
    """The API key carried by request headers (``Authorization: Bearer``, ``x-api-key``,
    ``api-key``) or, failing those, by the query string (``query``: a mapping of its
    parameters, e.g. mitmproxy's ``request.query``), or None."""
    get = getattr(headers, "get", None)
    if get is not None:
        for name in KEY_HEADERS:
            value = get(name)
            if not value:
                continue
            value = str(value).strip()
            if name == "authorization":
                scheme, _, token = value.partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    continue
                value = token.strip()
            return value
    qget = getattr(query, "get", None)
    if qget is not None:
        for name in QUERY_KEY_PARAMS:
            value = qget(name)
            if value and str(value).strip():
                return str(value).strip()
    return None


def fingerprint(key: str, secret: bytes) -> str:
    """The short, keyed, recognisable form of ``key``."""
    # hmac.digest: the one-shot C path (hmac.new builds two hash objects in Python)
    digest = hmac.digest(secret, key.encode("utf-8", "replace"), "sha256").hex()
    return f"…{key[-4:]}:{digest[:12]}"


SECRET_ENV = "RECORDER_KEY_SECRET"

# Provider key shapes (OpenAI sk-..., sk-proj-..., Anthropic sk-ant-..., Google
# AIza...): an error text may echo another key than the one sent, or a prefix of
# it. Only the shape's fixed prefix is kept, never a character of the secret part
# (and a word that merely ends in "sk-", such as "task-force", is left alone).
_KEY_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(sk-(?:proj-|svcacct-|admin-|ant-(?:[a-z]+\d*-)?)?|AIza)[A-Za-z0-9_\-]{8,}"
)


def scrub_key(text: str | None, key: str) -> str | None:
    """``text`` with the key, and anything shaped like a provider key, masked."""
    if not text:
        return text
    if len(key) >= 8:
        text = text.replace(key, "[api key]")
    return _KEY_SHAPES.sub(lambda m: m.group(1) + "…[masked]", text)


def mask_key_bytes(data: bytes, key: str | None) -> bytes:
    """``data`` with every occurrence of ``key`` replaced by as many ``*``: the
    length does not change (a captured body's timeline counts its bytes)."""
    if not key or len(key) < 8:
        return data
    k = key.encode("utf-8", "surrogateescape")
    return data.replace(k, b"*" * len(k)) if k in data else data
