"""The SQL store: schema, migrations, the batching writer and its spool, queries.

SQLite (WAL) by default, PostgreSQL (psycopg 3) to share one database between
proxies; same schema and migrations on both. See docs/storage.md.
"""

from recorder.store.engine import StoreError, StoreUnavailable, make_engine, normalize_url
from recorder.store.migrate import upgrade
from recorder.store.secret import key_secret
from recorder.store.writer import SqlSink

__all__ = [
    "SqlSink",
    "StoreError",
    "StoreUnavailable",
    "key_secret",
    "make_engine",
    "normalize_url",
    "upgrade",
]
