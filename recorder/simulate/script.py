"""The pure scheduler: a response's events laid out in time as the steps to write.

Waits (``body_delay``, ``delay``, ``ttft``, ``stall``) become the delay before a
step, and a ``: hopbase-keepalive`` comment falls at every multiple of the
keepalive interval on that planned timeline (counted from the headers), between
events as a gateway writes them. Keepalives thus depend on the plan, not on the
clock: the same request gives the same bytes. Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from recorder.simulate.faults import Faults
from recorder.simulate.protocols import SimEvent

KEEPALIVE_COMMENT = b": hopbase-keepalive"


@dataclass(slots=True)
class Step:
    """One write of the script, after sleeping ``delay`` seconds."""

    delay: float
    raw: bytes
    kind: str  # event | keepalive | end
    event: SimEvent | None = None
    pause: float = 0.0  # split: the seconds between the two halves of the event


def script(
    events: list[SimEvent], faults: Faults, line_end: bytes
) -> tuple[list[Step], int | None]:
    """Lay the events out in time; the index of the step where a cut falls."""
    steps: list[Step] = []
    keepalive = KEEPALIVE_COMMENT + line_end + line_end
    clock = 0.0  # planned seconds since the headers
    due = 1  # the next keepalive is due at due * interval

    def wait_then(seconds: float, step: Step) -> None:
        nonlocal clock, due
        interval = faults.keepalive
        end = clock + seconds
        last = clock
        while interval is not None and due * interval < end:
            steps.append(Step(due * interval - last, keepalive, "keepalive"))
            last = due * interval
            due += 1
        step.delay = end - last
        steps.append(step)
        clock = end

    first_output = next((i for i, e in enumerate(events) if e.tokens), None)
    stall_at = faults.stall_at
    if stall_at is None and faults.stall:
        stall_at = first_output + 1 if first_output is not None else 1
    split_at = faults.split_at
    if split_at is None and faults.split is not None:
        split_at = first_output if first_output is not None else 0
    event_steps: list[int] = []
    for i, ev in enumerate(events):
        wait = faults.body_delay if i == 0 else faults.delay
        if i == first_output:
            wait += faults.ttft
        if i == stall_at:
            wait += faults.stall
        wait_then(wait, Step(0.0, ev.encode(line_end), "event", ev))
        event_steps.append(len(steps) - 1)
        if i == split_at and faults.split:
            steps[-1].pause = faults.split
            clock += faults.split  # inside the event: no keepalive falls there
    tail = faults.stall if stall_at is not None and stall_at >= len(events) else 0.0
    wait_then(tail, Step(0.0, b"", "end"))
    cut_index: int | None = None
    if faults.cut is not None:
        k = faults.cut_after
        cut_index = event_steps[k] if k < len(event_steps) else len(steps) - 1
    return steps, cut_index
