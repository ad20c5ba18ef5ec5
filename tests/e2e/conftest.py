"""Fixtures for end-to-end tests: the simulator and a real mitmproxy with the recorder.

Everything listens on 127.0.0.1 and on free ports; every test is bounded in time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from recorder.simulate import Simulator, run_in_thread
from tests.kit.ports import free_port
from tests.kit.proxy_thread import STALL_AFTER, RunningProxy, running_proxy


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
