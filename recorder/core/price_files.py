"""Loading a price table: the shipped one, overlaid with the file given with ``--prices``.

``--prices FILE`` is an overlay: its models are added to the shipped table or
replace the shipped entry of the same name, whole; every other shipped model
keeps its price (a two-model file does not leave the rest unpriced, and
``recorder reprice`` with it does not wipe their costs).

The only I/O of pricing lives here; parsing is ``recorder.core.pricing``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from recorder.core.pricing import PriceTable, PriceTableError, load_prices, overlay

SHIPPED = "prices.json"


def shipped_prices() -> PriceTable:
    """The price table shipped with recorder (``recorder/data/prices.json``)."""
    return load_prices(resources.files("recorder.data").joinpath(SHIPPED).read_bytes())


def load_price_file(path: str | Path | None) -> PriceTable:
    """The shipped table overlaid with the table at ``path`` (the project's format
    or LiteLLM's); the shipped one alone without ``path``.

    Raises :class:`PriceTableError` naming the file when it cannot be read.
    """
    if path is None:
        return shipped_prices()
    return overlay(shipped_prices(), read_price_file(path))


def read_price_file(path: str | Path) -> PriceTable:
    """The table at ``path`` alone (the project's format or LiteLLM's).

    Raises :class:`PriceTableError` naming the file when it cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PriceTableError(f"{path}: {e.strerror or e}") from e
    try:
        return load_prices(data)
    except PriceTableError as e:
        raise PriceTableError(f"{path}: {e}") from e
