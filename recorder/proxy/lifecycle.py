"""The life of one metered exchange (a request and its response: one record), as a
state machine in the manner of h11: named phases, one table of the legal moves,
one function that makes a move.

Every step of the addon and the finishing pipeline is named after the phase it
produces (``_note`` makes NOTED, ``_open`` OPEN, ``_end`` ENDED, ``_close`` CLOSED,
``_defer`` DEFERRED, ``_settle`` SETTLED, ``_complete`` COMPLETED, ``_drop``
DROPPED), and each begins with :func:`move`, which refuses a move the table does
not hold: a wrong move is the recorder's own bug, counted as an internal error by
the hook it happened in; traffic never notices.

The phase also says where the exchange is held: NOTED and OPEN in the recorder's
registry of open streams (NOTED also in the queue of records to make); ENDED and
SETTLED, with ``finish_delay``, in the finishing queue; DEFERRED with the
finishing pipeline until its request body is read. CLOSED is passed through in
one step. COMPLETED and DROPPED are held by nothing: no container grows with the
number of exchanges served.

A WebSocket connection that carries many responses is many exchanges on one
flow, each with this life (its NOTED when the client asks for a response, its
ENDED at that response's last event or when the connection closes under it).
``docs/ARCHITECTURE.md`` draws the table (:func:`diagram`).
"""

from __future__ import annotations

import enum


class Phase(enum.Enum):
    """Where an exchange is in its life."""

    NOTED = "noted"  # a metered request was seen; its record is not made yet
    OPEN = "open"  # its record and meter exist; the exchange goes on
    ENDED = "ended"  # the exchange is over; its record is not closed yet
    CLOSED = "closed"  # the meter finished the record
    DEFERRED = "deferred"  # the record waits for its request body, read on a thread
    SETTLED = "settled"  # the request's facts are on the record, key echoes masked
    COMPLETED = "completed"  # usage and cost, observers told, handed to the sink
    DROPPED = "dropped"  # no record can be made: the exchange is not recorded


NOTED, OPEN, ENDED, CLOSED = Phase.NOTED, Phase.OPEN, Phase.ENDED, Phase.CLOSED
DEFERRED, SETTLED, COMPLETED, DROPPED = (
    Phase.DEFERRED,
    Phase.SETTLED,
    Phase.COMPLETED,
    Phase.DROPPED,
)

# The legal moves, and why each exists.
MOVES: dict[Phase, dict[Phase, str]] = {
    NOTED: {
        OPEN: "its record is made (the start batch, or something needs it sooner)",
        ENDED: "the exchange ended before its record was made",
        DROPPED: "its record could not be made",
    },
    OPEN: {
        ENDED: "response, error, or shutdown",
    },
    ENDED: {
        CLOSED: "the meter finishes the record",
        DROPPED: "its record could not be made at the close",
    },
    CLOSED: {
        DEFERRED: "its request body is still being read",
        SETTLED: "facts applied, key echoes masked",
    },
    DEFERRED: {
        SETTLED: "the body was read (or shutdown stopped waiting)",
    },
    SETTLED: {
        COMPLETED: "usage, cost, observers, sink",
    },
    COMPLETED: {},
    DROPPED: {},
}

LIVE = frozenset({NOTED, OPEN})  # counted in flight


class IllegalMove(RuntimeError):
    """A move the table does not hold: a bug of the recorder's, never the traffic's."""


def move(current: Phase, to: Phase) -> Phase:
    """``to``, if the table allows the move from ``current``; raises IllegalMove."""
    if to not in MOVES[current]:
        raise IllegalMove(f"an exchange cannot move from {current.name} to {to.name}")
    return to


def diagram() -> str:
    """The table as a Mermaid state diagram (``docs/ARCHITECTURE.md`` shows it)."""
    lines = ["stateDiagram-v2", f"    [*] --> {NOTED.name}: a metered request"]
    for source, targets in MOVES.items():
        for target, why in targets.items():
            lines.append(f"    {source.name} --> {target.name}: {why}")
    for final in (COMPLETED, DROPPED):
        lines.append(f"    {final.name} --> [*]")
    return "\n".join(lines)
