"""A :class:`~recorder.simulate.server.Simulator` on an event loop of its own, in a thread.

For callers that have no loop to run it on: the CLI's demo, the tests, the benchmarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from collections.abc import Iterator
from typing import Any

from recorder.simulate.server import Simulator


@contextlib.contextmanager
def run_in_thread(
    host: str = "127.0.0.1",
    port: int = 0,
    tls: ssl.SSLContext | None = None,
    **kwargs: Any,
) -> Iterator[Simulator]:
    """Run a :class:`Simulator` on its own event loop in a daemon thread.

    ``with run_in_thread() as sim: sim.port`` — the simulator is listening
    inside the block and stopped (every connection dropped) after it.
    """
    sim = Simulator(host, port, tls, **kwargs)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    errors: list[BaseException] = []
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            await sim.start()
        except BaseException as e:
            errors.append(e)
            started.set()
            return
        started.set()
        try:
            await stop.wait()
        finally:
            await sim.stop()

    thread = threading.Thread(
        target=loop.run_until_complete, args=(main(),), name="recorder-simulate", daemon=True
    )
    thread.start()
    if not started.wait(10.0):
        raise TimeoutError("the simulator did not start")
    if errors:
        thread.join(5.0)
        loop.close()
        raise errors[0]
    try:
        yield sim
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(10.0)
        if not thread.is_alive():
            loop.close()
