"""Which store a record is meant for, also while that store cannot be reached.

A spooled record must only ever be written to the store it was meant for. Two
names say which store that is:

- the **store id**: a random UUID kept in the database itself (a ``settings``
  row named ``store_id``, created on first use with ``INSERT ... ON CONFLICT DO
  NOTHING`` and read back, so every process on one database gets the same one).
  It survives a change of address (another host name, a port forwarder) and
  tells apart two databases that were, at different times, at one address (a
  SQLite file deleted and created again);
- the **store key**: the URL normalised (``sqlite:////abs/path/recorder.db``;
  ``postgresql://user@host:5432/db``), never with a password. It is all a process
  knows of a store it has never reached.

The spool is written while the database is away, so the id may not be readable
then: each time a process reads it, it leaves a copy (mode 0600) in the spool
directory, ``.recorder-store.cache``, keyed by store key. A spool file's header
carries the key and, when known, the id (``recorder.store.spool``). A file is a
store's own when the ids match, or, for a file written before its store was
ever reached (no id), when the keys match.

Default spool directories are per store, so that two stores never share one by
accident: beside a SQLite file, a directory named after it (``recorder.db`` ->
``recorder.db.spool``); for a server database, a directory under the user's
state directory (``$XDG_STATE_HOME``, else ``~/.local/state``):
``recorder/spool/postgresql-user@host-5432-db-<hash>``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson
from sqlalchemy import Engine, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL

from recorder.store.engine import normalize_url
from recorder.store.models import SETTINGS

log = logging.getLogger("recorder.store")

STORE_ID_SETTING = "store_id"
CACHE_FILE = ".recorder-store.cache"
_PG_DEFAULT_PORT = 5432


def store_key(url: str | URL) -> str:
    """The store's normalised URL: what names it without the database, and what
    is shown for it (no password, ever). Raises StoreError for a bad URL."""
    u = normalize_url(url)
    backend = u.get_backend_name()
    if backend == "sqlite":
        db = u.database
        if db in (None, "", ":memory:"):
            return "sqlite://:memory:"
        return "sqlite:///" + str(Path(db).expanduser().resolve())
    host = (u.host or str(u.query.get("host") or "") or "localhost").lower()
    port = u.port or _PG_DEFAULT_PORT
    user = f"{u.username}@" if u.username else ""
    return f"{backend}://{user}{host}:{port}/{u.database or ''}"


def default_spool_dir(url: str | URL, environ: Mapping[str, str] | None = None) -> Path:
    """Where a store's records wait by default (see the module's docstring)."""
    key = store_key(url)
    if key.startswith("sqlite:///"):
        path = Path(key[len("sqlite:///") :])
        return path.with_name(path.name + ".spool")
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    slug = re.sub(r"[^A-Za-z0-9@._-]+", "-", key.split("://", 1)[1]).strip("-")[:80]
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]
    backend = key.split("://", 1)[0]
    return Path(state) / "recorder" / "spool" / f"{backend}-{slug}-{digest}"


def get_or_create_store_id(engine: Engine) -> str:
    """The database's store id, created on first use. Race-safe: every caller
    gets the one stored value. The schema must exist."""
    ins = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    stmt = ins(SETTINGS).on_conflict_do_nothing(index_elements=["name"])
    with engine.begin() as conn:
        conn.execute(
            stmt,
            {"name": STORE_ID_SETTING, "value": str(uuid.uuid4()), "created_at": datetime.now(UTC)},
        )
    with engine.connect() as conn:
        stored = conn.execute(
            select(SETTINGS.c.value).where(SETTINGS.c.name == STORE_ID_SETTING)
        ).scalar_one()
    return str(stored)


@dataclass(slots=True)
class StoreIdentity:
    """What a process knows of its store: the key always, the id once read (from
    the database, or from the cache a process left in the spool directory)."""

    key: str
    store_id: str | None = None

    def owns(self, key: str | None, store_id: str | None) -> bool:
        """Whether a spool file with this header is this store's."""
        if store_id is not None and self.store_id is not None:
            return store_id == self.store_id
        if store_id is not None:  # this process has not read its id yet: wait
            return False
        return key is not None and key == self.key


def read_cached_id(spool_dir: Path, key: str) -> str | None:
    """The store id an earlier process cached for ``key`` (None if none)."""
    doc = _read_cache(spool_dir)
    entry = doc.get(key)
    return str(entry) if isinstance(entry, str) and entry else None


def cache_id(spool_dir: Path, key: str, store_id: str) -> None:
    """Remember ``store_id`` for ``key`` beside the spool (0600); never raises."""
    doc = _read_cache(spool_dir)
    if doc.get(key) == store_id:
        return
    doc[key] = store_id
    path = spool_dir / CACHE_FILE
    try:
        spool_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps(doc))
        os.replace(tmp, path)
    except OSError as e:  # only needed while the database is away
        log.warning("recorder: cannot cache the store id in %s: %s", path, e)


def _read_cache(spool_dir: Path) -> dict[str, object]:
    try:
        doc = orjson.loads((spool_dir / CACHE_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}
