"""API key fingerprints: keyed, non-reversible, recognisable.

A key is never stored or exported. What is kept is
``…<last four characters>:<12 hex digits of HMAC-SHA256(secret, key)>``: the
last four characters let a person tell their keys apart (providers' dashboards
show the same), the HMAC makes the fingerprint stable for one secret and
useless for guessing the key without it. The secret comes from
``RECORDER_KEY_SECRET`` or, once the store exists, from the database, so that
every proxy sharing a database shares it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

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


def load_secret(path: Path, environ: Mapping[str, str] | None = None) -> bytes:
    """The fingerprint secret: ``RECORDER_KEY_SECRET`` if set, else the file at
    ``path``, created (mode 0600, 32 random bytes) on first use.

    Raises OSError when the file can neither be read nor created.
    """
    env = os.environ if environ is None else environ
    given = env.get(SECRET_ENV)
    if given:
        return given.encode("utf-8")
    try:
        data = path.read_bytes().strip()
        if data:
            return data
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_hex(32).encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as fh:
        fh.write(secret + b"\n")
    return secret
