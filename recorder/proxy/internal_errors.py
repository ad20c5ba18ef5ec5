"""The recorder's own failures, counted and logged: recording may fail, traffic may
not (``recorder/proxy/addon.py``), so every hook, the stream tap, the finishing
pipeline and the views catch what they raise and report it here."""

from __future__ import annotations

import logging

from recorder.metrics.health import Health

log = logging.getLogger("recorder")


class InternalErrors:
    """Counts each failure in ``health.internal_errors``; logs the first ten, then
    one in a thousand (a failure on every piece must not flood the console)."""

    def __init__(self, health: Health) -> None:
        self.health = health

    def __call__(self, where: str) -> None:
        """Report the exception being handled, caught in ``where``."""
        self.health.internal_errors += 1
        n = self.health.internal_errors
        if n <= 10 or n % 1000 == 0:
            log.exception("recorder: internal error in %s (#%d); traffic is unaffected", where, n)

    def decode_error(self) -> None:
        """A compressed body could not be decoded on the side."""
        self.health.decode_errors += 1
