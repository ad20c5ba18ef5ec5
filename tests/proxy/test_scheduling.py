"""The one scheduler (recorder.proxy.scheduling): put-off work waits its delay, runs a
slice per callback in the order it came, comes back for the rest, and is taken
whole at shutdown; on the real event loop as on the tests' own."""

from __future__ import annotations

import asyncio
import threading

import pytest

from recorder.proxy.scheduling import LoopScheduler, Sliced
from tests.kit.flows import Clock
from tests.kit.timers import Timers


def test_items_wait_their_delay_then_go_a_slice_per_callback_in_order() -> None:
    timers = Timers(Clock())
    slices: list[list[int]] = []
    drained: list[int] = []
    work = Sliced(timers, 0.25, 3, slices.append, lambda: drained.append(len(slices)))
    for i in range(8):
        work.add(i)
    assert timers.advance(0.2) == 0 and slices == []  # not yet due
    timers.advance(0.05)
    assert slices == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert timers.ran == 3  # one callback a slice, the loop served between them
    assert drained == [3] and len(work) == 0
    work.add(8)  # a new run starts its own delay
    timers.advance(0.1)
    assert slices[-1] == [6, 7] and timers.ran == 3  # it waits its delay
    timers.advance(0.2)
    assert slices[-1] == [8] and drained == [3, 4]


def test_taking_all_calls_off_the_run_and_keeps_the_order() -> None:
    timers = Timers(Clock())
    slices: list[list[str]] = []
    work = Sliced(timers, 1.0, 2, slices.append)
    for item in "abcde":
        work.add(item)
    timers.advance(1.0)
    timers.run_due()
    assert work.take_all() == []  # all ran
    for item in "fgh":
        work.add(item)
    assert work.take_all() == ["f", "g", "h"]
    assert timers.advance(5.0) == 0  # its run was called off
    assert slices == [["a", "b"], ["c", "d"], ["e"]]


def test_work_that_raises_still_lets_the_rest_run() -> None:
    timers = Timers(Clock())
    seen: list[int] = []

    def work(batch: list[int]) -> None:
        seen.extend(batch)
        if batch[0] == 0:
            raise RuntimeError("a bug in one slice")

    sliced = Sliced(timers, 0.0, 2, work)
    for i in range(5):
        sliced.add(i)
    with pytest.raises(RuntimeError):
        timers.run_due()
    timers.run_due()
    assert seen == [0, 1, 2, 3, 4]


def test_a_slice_holds_one_item_at_least() -> None:
    with pytest.raises(ValueError):
        Sliced(Timers(Clock()), 0.0, 0, lambda batch: None)


async def test_on_the_event_loop_and_posted_from_another_thread() -> None:
    scheduler = LoopScheduler()
    loop_thread = threading.get_ident()
    ran: list[tuple[str, int]] = []
    done = asyncio.Event()
    sliced: Sliced[str] = Sliced(
        scheduler,
        0.01,
        2,
        lambda batch: ran.extend((x, threading.get_ident()) for x in batch),
        done.set,
    )
    post = scheduler.poster()

    def from_a_thread() -> None:
        for item in "xyz":
            post(lambda item=item: sliced.add(item))  # type: ignore[misc]

    worker = threading.Thread(target=from_a_thread)
    worker.start()
    worker.join()
    await asyncio.wait_for(done.wait(), 5)
    assert [x for x, _ in ran] == ["x", "y", "z"]
    assert {t for _, t in ran} == {loop_thread}  # run on the loop, never the thread
    handle = scheduler.call_later(10, lambda: ran.append(("late", 0)))
    handle.cancel()
    await asyncio.sleep(0.02)
    assert ran[-1][0] == "z"
