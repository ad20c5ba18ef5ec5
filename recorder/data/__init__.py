"""Data files shipped with recorder (the price table, ``prices.json``)."""
