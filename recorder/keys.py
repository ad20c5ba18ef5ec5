"""API key fingerprints: keyed, non-reversible, recognisable.

A key is never stored or exported. What is kept is
``…<last four characters>:<12 hex digits of HMAC-SHA256(secret, key)>``: the
last four characters let a person tell their keys apart (providers' dashboards
show the same), the HMAC makes the fingerprint stable for one secret and
useless for guessing the key without it. The secret comes from
``RECORDER_KEY_SECRET`` or from the database (``recorder.store.secret``), so
that every proxy sharing a database shares it.
"""

from __future__ import annotations

import hashlib
import hmac
import re

KEY_HEADERS = ("authorization", "x-api-key", "api-key")


def extract_key(headers: dict[str, str] | object) -> str | None:
    """The API key carried by request headers (``Authorization: Bearer``, ``x-api-key``,
    ``api-key``), or None."""
    get = getattr(headers, "get", None)
    if get is None:
        return None
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
    return None


def fingerprint(key: str, secret: bytes) -> str:
    """The short, keyed, recognisable form of ``key``."""
    digest = hmac.new(secret, key.encode("utf-8", "replace"), hashlib.sha256).hexdigest()
    return f"…{key[-4:]}:{digest[:12]}"


SECRET_ENV = "RECORDER_KEY_SECRET"

# Provider key shapes (OpenAI sk-..., sk-proj-..., Anthropic sk-ant-...): an error
# text may echo another key than the one sent, or a prefix of it.
_KEY_SHAPES = re.compile(r"sk-[A-Za-z0-9_\-]{8,}")


def scrub_key(text: str | None, key: str) -> str | None:
    """``text`` with the key, and anything shaped like a provider key, masked."""
    if not text:
        return text
    if len(key) >= 8:
        text = text.replace(key, "[api key]")
    return _KEY_SHAPES.sub(lambda m: m.group(0)[:7] + "…[masked]", text)
