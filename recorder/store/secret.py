"""The API-key fingerprint secret, kept in the database it fingerprints for.

Every proxy writing to one database must fingerprint a key the same way, so
the secret lives in that database: a ``settings`` row named ``key_secret``,
created on first use with ``INSERT ... ON CONFLICT DO NOTHING`` and then read
back, so two processes creating it at once end up with the one that won.
``RECORDER_KEY_SECRET`` overrides it (and is then never written anywhere).

Whoever can read the database can test a guessed key against its fingerprints;
setting ``RECORDER_KEY_SECRET`` keeps the secret out of the database.

A proxy that starts while its database is unreachable still needs the secret,
so each successful read leaves a copy (mode 0600) beside the spool, tagged with
the database it came from; it is used only when the database cannot be reached.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import orjson
from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, OperationalError

from recorder.core.keys import SECRET_ENV
from recorder.store.engine import StoreUnavailable, make_engine, normalize_url
from recorder.store.models import SETTINGS

log = logging.getLogger("recorder.store")

SECRET_SETTING = "key_secret"
CACHE_FILE = ".recorder-key-secret.cache"


def get_or_create_secret(engine: Engine, *, propose: bytes | None = None) -> bytes:
    """The database's fingerprint secret, created on first use (``propose``, or 32
    random bytes as hex). Race-safe: every caller gets the one stored value.

    The schema must exist (``recorder.store.migrate.upgrade``).
    """
    value = (propose or secrets.token_hex(32).encode("ascii")).decode("utf-8")
    ins = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    stmt = ins(SETTINGS).on_conflict_do_nothing(index_elements=["name"])
    with engine.begin() as conn:
        conn.execute(
            stmt,
            {"name": SECRET_SETTING, "value": value, "created_at": datetime.now(UTC)},
        )
    with engine.connect() as conn:
        stored = conn.execute(
            select(SETTINGS.c.value).where(SETTINGS.c.name == SECRET_SETTING)
        ).scalar_one()
    return str(stored).encode("utf-8")


def read_secret(engine: Engine, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The fingerprint secret in force, without creating one (None if there is none)."""
    env = os.environ if environ is None else environ
    given = env.get(SECRET_ENV)
    if given:
        return given.encode("utf-8")
    with engine.connect() as conn:
        value = conn.execute(
            select(SETTINGS.c.value).where(SETTINGS.c.name == SECRET_SETTING)
        ).scalar_one_or_none()
    return None if value is None else str(value).encode("utf-8")


def _db_tag(url: str | URL) -> str:
    u = normalize_url(url)
    ident = f"{u.get_backend_name()}|{u.username}|{u.host}|{u.port}|{u.database}"
    return hashlib.sha256(ident.encode("utf-8")).hexdigest()[:16]


def key_secret(
    url: str | URL,
    *,
    cache_dir: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    engine: Engine | None = None,
) -> bytes:
    """The secret to fingerprint keys with: ``RECORDER_KEY_SECRET`` if set, else
    the database's (created on first use; the schema must exist), else, when the
    database is unreachable, the copy cached in ``cache_dir`` by an earlier run.

    Raises StoreUnavailable when the database is unreachable and nothing is cached.
    """
    env = os.environ if environ is None else environ
    given = env.get(SECRET_ENV)
    if given:
        return given.encode("utf-8")
    cache = Path(cache_dir) / CACHE_FILE if cache_dir is not None else None
    tag = _db_tag(url)
    eng = engine if engine is not None else make_engine(url)
    try:
        secret = get_or_create_secret(eng)
    except (OperationalError, DBAPIError) as e:
        cached = _read_cache(cache, tag)
        if cached is not None:
            return cached
        raise StoreUnavailable(
            f"cannot read the key secret from the database ({e.orig}) and no copy is "
            f"cached; set {SECRET_ENV} or start when the database is reachable"
        ) from e
    finally:
        if engine is None:
            eng.dispose()
    _write_cache(cache, tag, secret)
    return secret


def _read_cache(cache: Path | None, tag: str) -> bytes | None:
    if cache is None:
        return None
    try:
        doc = orjson.loads(cache.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("db") != tag or not doc.get("secret"):
        return None
    return str(doc["secret"]).encode("utf-8")


def _write_cache(cache: Path | None, tag: str, secret: bytes) -> None:
    if cache is None:
        return
    data = orjson.dumps({"db": tag, "secret": secret.decode("utf-8")})
    try:
        if cache.read_bytes() == data:
            return
    except OSError:
        pass
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_name(cache.name + f".{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, cache)
    except OSError as e:  # only a convenience for a later start during an outage
        log.warning("recorder: cannot cache the key secret in %s: %s", cache, e)
