"""Smoke runs of the proxy benchmarks: they run, and their correctness checks hold.

Each script checks, whatever its size, that every request through the recorder is
recorded exactly once, that its counters equal the rows, and (load, long streams)
that outcomes and records are right; it exits non-zero otherwise. Speed figures
are printed, never asserted (docs/ARCHITECTURE.md): the full runs and their results are
in docs/performance.md.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    "argv",
    [
        ["bench_overhead.py", "--quick", "--no-pin", "--otlp", "--paired"],
        ["bench_overhead.py", "--quick", "--no-pin", "--short", "--anchor", "master"],
        ["bench_overhead.py", "--quick", "--no-pin", "--bedrock"],
        ["bench_overhead.py", "--quick", "--no-pin", "--websocket"],
        ["bench_load.py", "--quick", "--no-pin"],
        ["bench_load.py", "--long", "--quick", "--no-pin"],
        ["bench_in_situ.py", "--quick"],
        ["bench_in_situ.py", "--quick", "--short", "--hooks-only"],
        ["bench_in_situ.py", "--quick", "--websocket"],
        ["bench_masking.py", "--quick"],
        ["bench_live.py", "--quick"],
        ["bench_otel.py", "--quick"],
        ["bench_metrics.py", "--quick"],
    ],
    ids=[
        "overhead",
        "overhead-short-master",
        "overhead-bedrock",
        "overhead-websocket",
        "load",
        "long",
        "in-situ",
        "in-situ-short",
        "in-situ-websocket",
        "masking",
        "live",
        "otel",
        "metrics",
    ],
)
def test_bench_runs_and_its_checks_hold(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "FAILED" not in proc.stdout
    assert "|" in proc.stdout or "record:" in proc.stdout  # it reported figures


@pytest.mark.skipif(shutil.which("perf") is None, reason="Linux's perf is not installed")
def test_the_sampled_share_runs_and_finds_the_recorder() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_share.py"), "--quick", "--bedrock"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "the recorder" in proc.stdout and "|" in proc.stdout


def test_estimator_measurement_runs_on_every_capture() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH / "measure_estimator.py"), "--json", "--cuts", "1"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=BENCH.parent,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    # every capture's reported responses, each estimated once held out
    assert result["summary"]["calibrated_visible"]["n"] == len(result["rows"]) >= 97
    families = set(result["summary"]["calibrated_by_family"])
    assert {"openai", "anthropic", "anthropic-new"} <= families
