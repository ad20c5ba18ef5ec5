"""The writer's counters: what became of every record handed to ``SqlSink``.

``Counters`` owns two ``Tally``s and the rate of the drop log. Invariants:

- Each tally is written by one side only: ``caller`` by the threads that hand
  records in (``submit`` on the event loop, the journal's thread, ``close``),
  ``writer`` by the writer thread. A count is never written by two threads at
  once, so no lock is needed and none is taken on the event loop.
- ``totals`` is the sum of both sides, under the names of ``SqlSink.stats``.
- Every dropped record is counted; the log says so for each of the first
  ``LOG_FIRST`` drops, then every 1000th, each line with the running total (a
  disk that stays full must not flood the log).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("recorder.store")

LOG_FIRST = 10  # log every one of the first N drops, then every 1000th
LOG_EVERY = 1000


@dataclass(slots=True)
class Tally:
    """What one side did with records, since start."""

    written: int = 0  # committed from the queue
    spooled: int = 0  # appended to the spool to wait for the database
    replayed: int = 0  # committed from spool files
    dropped: int = 0  # lost: the spool could not be written, or a line was unreadable
    failed: int = 0  # refused by the database (kept in the rejected file)
    bodies_written: int = 0
    bodies_failed: int = 0


class Counters:
    """Both sides' tallies, and the drop log."""

    def __init__(self) -> None:
        self.caller = Tally()
        self.writer = Tally()
        self._drops_logged = 0

    def drop(self, tally: Tally, n: int, reason: str, record_id: str | None) -> None:
        """Count ``n`` records lost on ``tally``'s side, and say so (rate-limited)."""
        tally.dropped += n
        self._drops_logged += 1
        k = self._drops_logged
        if k <= LOG_FIRST or k % LOG_EVERY == 0:
            log.error(
                "recorder: DROPPED %d record(s) (e.g. %s): %s; %d dropped so far",
                n,
                record_id,
                reason,
                self.caller.dropped + self.writer.dropped,
            )

    def totals(self) -> dict[str, int]:
        """Both sides added up."""
        c, w = self.caller, self.writer
        return {
            "written": c.written + w.written,
            "spooled": c.spooled + w.spooled,
            "replayed": c.replayed + w.replayed,
            "dropped": c.dropped + w.dropped,
            "failed": c.failed + w.failed,
            "bodies_written": c.bodies_written + w.bodies_written,
            "bodies_failed": c.bodies_failed + w.bodies_failed,
        }
