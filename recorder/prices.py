"""Loading a price table: the shipped one, or the file given with ``--prices``.

The only I/O of pricing lives here; parsing is ``recorder.core.pricing``.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from recorder.core.pricing import PriceTable, PriceTableError, load_prices

SHIPPED = "prices.json"


def shipped_prices() -> PriceTable:
    """The price table shipped with recorder (``recorder/data/prices.json``)."""
    return load_prices(resources.files("recorder.data").joinpath(SHIPPED).read_bytes())


def load_price_file(path: str | Path | None) -> PriceTable:
    """The table at ``path`` (the project's format or LiteLLM's), or the shipped one.

    Raises :class:`PriceTableError` naming the file when it cannot be read.
    """
    if path is None:
        return shipped_prices()
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise PriceTableError(f"{path}: {e.strerror or e}") from e
    try:
        return load_prices(data)
    except PriceTableError as e:
        raise PriceTableError(f"{path}: {e}") from e
