"""The fingerprint secret: in the database, created once, shared, overridable."""

from __future__ import annotations

import stat
import threading
from pathlib import Path

import pytest

from recorder.core.keys import SECRET_ENV
from recorder.store.engine import make_engine
from recorder.store.migrate import StoreUnavailable
from recorder.store.secret import CACHE_FILE, get_or_create_secret, key_secret, read_secret
from tests.kit.databases import unreachable_url


def test_created_once_and_stable(db_url: str, tmp_path: Path) -> None:
    first = key_secret(db_url, environ={})
    again = key_secret(db_url, environ={})  # another engine, as another proxy would
    assert first == again and len(first) == 64
    engine = make_engine(db_url)
    assert read_secret(engine, environ={}) == first
    assert get_or_create_secret(engine, propose=b"ignored") == first
    engine.dispose()


def test_concurrent_creation_agrees(db_url: str) -> None:
    results: list[bytes] = []
    barrier = threading.Barrier(6)

    def run() -> None:
        engine = make_engine(db_url)
        barrier.wait()
        results.append(get_or_create_secret(engine))
        engine.dispose()

    threads = [threading.Thread(target=run) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 6 and len(set(results)) == 1


def test_environment_overrides_and_is_not_stored(db_url: str) -> None:
    assert key_secret(db_url, environ={SECRET_ENV: "from-env"}) == b"from-env"
    engine = make_engine(db_url)
    assert read_secret(engine, environ={}) is None  # nothing written
    engine.dispose()


def test_proposed_secret_seeds_an_empty_database(db_url: str) -> None:
    engine = make_engine(db_url)
    assert get_or_create_secret(engine, propose=b"seed-from-old-file") == b"seed-from-old-file"
    engine.dispose()


def test_cached_copy_serves_a_start_during_an_outage(db_url: str, tmp_path: Path) -> None:
    cache_dir = tmp_path / "spool"
    secret = key_secret(db_url, cache_dir=cache_dir, environ={})
    cache = cache_dir / CACHE_FILE
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    # same database, now unreachable: the cache answers (a stand-in engine that fails)
    down = make_engine(unreachable_url("postgresql", tmp_path))
    assert key_secret(db_url, cache_dir=cache_dir, environ={}, engine=down) == secret
    down.dispose()


def test_no_cache_for_another_database(tmp_path: Path, db_url: str) -> None:
    cache_dir = tmp_path / "spool"
    key_secret(db_url, cache_dir=cache_dir, environ={})
    other = unreachable_url("postgresql", tmp_path)
    with pytest.raises(StoreUnavailable, match=SECRET_ENV):
        key_secret(other, cache_dir=cache_dir, environ={})
