"""Fixtures of the store's tests: see storedb.py."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from storedb import (
    db_url,
    empty_db_url,
    engine,
    pg_admin,
    pg_template,
    sqlite_template,
)

__all__ = ["db_url", "empty_db_url", "engine", "pg_admin", "pg_template", "sqlite_template"]
