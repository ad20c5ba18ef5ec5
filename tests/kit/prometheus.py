"""Prometheus and promtool for the tests: Debian's ``prometheus`` package,
installed when missing (as root, with apt-get); the tests that need it are
skipped, saying why, only where there is no root or no apt-get, and fail if the
installation itself fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def ensure_prometheus() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``, installing Debian's package if needed."""
    found = shutil.which("prometheus"), shutil.which("promtool")
    if found[0] and found[1]:
        return found[0], found[1]
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")):
        pytest.skip(
            "prometheus/promtool not found and cannot be installed here (needs root and "
            "apt-get): `apt-get install prometheus` to run this test"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:  # a stale package list: refresh it once and retry
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which("prometheus"), shutil.which("promtool")
    if not (found[0] and found[1]):  # installable here, so a failure is a failure
        pytest.fail(f"installing Debian's prometheus failed:\n{result.stderr[-2000:]}")
    return found[0], found[1]


def promtool(binary: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``promtool ARGS`` run in ``cwd``."""
    return subprocess.run([binary, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
