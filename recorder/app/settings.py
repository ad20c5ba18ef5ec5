"""The recorder's options as the composition root takes them: the option table's
checks (``recorder.proxy.options``), then those that need the store, which the
proxy layer does not know: whether the store takes the database URL, and the
spool directory, by default the store's own."""

from __future__ import annotations

from pathlib import Path

from recorder.proxy.options import AppConfig, Given, OptionError
from recorder.store import StoreError
from recorder.store.identity import default_spool_dir


def checked(given: Given, *, under: str = "proxy", table: type[AppConfig] = AppConfig) -> AppConfig:
    """Every option checked (see ``OptionTable.resolve``), the database URL too.
    Raises OptionError naming where the bad value came from."""
    config = table.resolve(given, under=under)
    spool_dir_of(config)
    return config


def spool_dir_of(config: AppConfig) -> Path:
    """Where records wait while the store is away: the option's directory, else the
    store's own (``recorder.store.identity``). Raises OptionError naming the
    database option for a URL the store does not take."""
    try:
        default = default_spool_dir(config.db)
    except StoreError as e:
        raise OptionError(f"{config.where('db')} {e}") from None
    return config.spool_dir or default
