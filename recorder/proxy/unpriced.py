"""One warning line per unpriced model per process.

A stream whose usage is known but whose cost is not (no price for its model, or
none for its service tier: the record's ``unpriced_reason``) is counted by
``llm_recorder_unpriced_streams_total``; this module also says so once on the
log, the first time each model is seen unpriced, so the gap is noticed before
the bill. Bounded: after :data:`MAX_NAMED` models, one last line says that
further ones are not named (junk model names cannot flood the log).
"""

from __future__ import annotations

import logging
import threading

from recorder.core.printable import printable
from recorder.core.record import StreamRecord
from recorder.proxy.hints import command

MAX_NAMED = 100

log = logging.getLogger("recorder.prices")


class UnpricedWarnings:
    """Remembers the models already warned about."""

    def __init__(self, max_named: int = MAX_NAMED) -> None:
        self.max_named = max_named
        self._seen: set[str] = set()
        self._full = False
        self._lock = threading.Lock()

    def check(self, record: StreamRecord) -> bool:
        """Warn about ``record``'s model if it is unpriced and new; True if a line was written."""
        reason = record.unpriced_reason
        if reason is None:
            return False
        model = (record.response_model or record.model or "(none)")[:200]
        if model in self._seen:
            return False
        with self._lock:
            if model in self._seen or self._full:
                return False
            if len(self._seen) >= self.max_named:
                self._full = True
                log.warning(
                    "recorder: more than %d models have no price; further ones are not named "
                    "(see llm_recorder_unpriced_streams_total or `%s`)",
                    self.max_named,
                    command("prices missing"),
                )
                return True
            self._seen.add(model)
        log.warning(
            "recorder: %s streams are recorded without a cost: %s (add it with --prices FILE; "
            "`%s` lists every unpriced model)",
            printable(model),  # a client's name for it: it must not write to the terminal
            printable(reason),
            command("prices missing"),
        )
        return True


# the process's own: one line per model per process, whatever the number of addons
WARNINGS = UnpricedWarnings()
