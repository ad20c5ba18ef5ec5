"""Fixtures for end-to-end tests: the simulator and a real mitmproxy with the recorder.

Everything listens on 127.0.0.1 and on free ports; every test is bounded in time.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from recorder.simulate import Simulator, run_in_thread
from tests.e2e.harness import RunningProxy, running_proxy

# Stall threshold for tests: time is scaled, the meaning is not (a 1.0 s
# threshold against a 1.5 s silence is a stall; 0.2 s gaps are not).
STALL_AFTER = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def confdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """mitmproxy's confdir (its CA is created there on first start)."""
    return tmp_path_factory.mktemp("mitmproxy")


@pytest.fixture(scope="module")
def proxy(sim: Simulator, confdir: Path) -> Iterator[RunningProxy]:
    """The recorder in reverse mode in front of the simulator."""
    with running_proxy(
        [f"reverse:{sim.url}@{free_port()}"], str(confdir), stall_after=STALL_AFTER
    ) as running:
        yield running


@pytest.fixture
def records(proxy: RunningProxy) -> Iterator[RunningProxy]:
    """The proxy with its sink emptied before the test."""
    with proxy.sink._cond:
        proxy.sink.records.clear()
    yield proxy
