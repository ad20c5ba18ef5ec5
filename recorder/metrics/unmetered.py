"""Calls the recorder did not meter, counted: ``llm_recorder_unmetered_requests_total
{host,reason}`` (docs/metrics.md), so that a user learns from the proxy, not from
the invoice, that something went unrecorded.

The proxy counts on its event loop (:meth:`UnmeteredTally.count`); a scrape reads
the counts from its own thread (the collector). Hosts are capped as model labels
are: past ``max_hosts`` distinct ones, the rest count under ``other``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

NAME = "llm_recorder_unmetered_requests"
OTHER = "other"


class UnmeteredTally:
    """Counts by (host, reason), with a bounded number of hosts."""

    def __init__(self, max_hosts: int = 50) -> None:
        self._max_hosts = max_hosts
        self._counts: dict[tuple[str, str], int] = {}
        self._hosts: set[str] = set()
        self._lock = threading.Lock()

    def count(self, host: str, reason: str) -> None:
        with self._lock:
            if host not in self._hosts:
                if len(self._hosts) >= self._max_hosts:
                    host = OTHER
                else:
                    self._hosts.add(host)
            key = (host, reason)
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class UnmeteredCollector(Collector):
    """The tally as a Prometheus counter family."""

    def __init__(self, tally: UnmeteredTally) -> None:
        self._tally = tally

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            NAME,
            "Requests to a provider's host, and streamed responses, that the recorder "
            "did not meter, by host and why",
            labels=["host", "reason"],
        )
        for (host, reason), n in sorted(self._tally.snapshot().items()):
            family.add_metric([host, reason], n)
        yield family
