"""A private PostgreSQL cluster for one test, which the test may hang.

The shared server (tests.kit.databases) must never be stopped or frozen, so a test that
needs a database that stops answering (its processes stopped with SIGSTOP: TCP
still accepts, nothing replies) starts its own cluster with ``initdb`` and
``pg_ctl`` from the PostgreSQL install on this machine, in a temporary
directory, listening on a free loopback port. ``initdb`` refuses to run as
root: as root the cluster runs as the ``postgres`` user (``runuser``). Where
none of that is possible the test is skipped with the reason (failed under CI).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kit.ports import free_port


def _bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


class PgCluster:
    """A running cluster: ``url`` of its ``recorder`` database, ``freeze`` and
    ``thaw`` to stop and resume every one of its processes."""

    def __init__(self, bindir: Path, root: Path, user: str | None) -> None:
        self.bindir = bindir
        self.root = root
        self.data = root / "data"
        self.user = user  # run as this user (we are root), else as ourselves
        self.port = free_port()
        self.frozen = False

    def _cmd(self, *args: str) -> list[str]:
        return ["runuser", "-u", self.user, "--", *args] if self.user else list(args)

    def _run(self, *args: str, timeout: float = 60) -> None:
        res = subprocess.run(self._cmd(*args), capture_output=True, text=True, timeout=timeout)
        if res.returncode:
            raise RuntimeError(f"{' '.join(args)}: {res.stdout}{res.stderr}")

    def start(self) -> None:
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        )
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root}"
            " -c fsync=off -c max_connections=20"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            opts,
            "-l",
            str(self.root / "log"),
            "-w",
            "-t",
            "60",
            "start",
        )
        self._run(
            str(self.bindir / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "recorder",
        )

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/recorder"

    def pids(self) -> list[int]:
        """The postmaster and its children (read from /proc)."""
        head = int((self.data / "postmaster.pid").read_text().split()[0])
        pids = [head]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid == head:
                    pids.append(int(entry))
        return pids

    def freeze(self) -> None:
        """SIGSTOP every process of the cluster: connections open, nothing answers."""
        self.frozen = True
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen = False

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.thaw()  # always: a stopped postmaster cannot be shut down
        with contextlib.suppress(Exception):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    """A private cluster on a free port, stopped (and resumed first) in teardown."""
    bindir = _bindir()
    if bindir is None:
        _unavailable("no PostgreSQL install (initdb) on this machine")
    assert bindir is not None
    user: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("initdb refuses root, and there is no postgres user to run it as")
        if not shutil.which("runuser"):
            _unavailable("initdb refuses root, and runuser is missing")
        user = "postgres"
    root = Path(tempfile.mkdtemp(prefix="recorder-pg-"))
    if user:
        shutil.chown(root, user)
    cluster = PgCluster(bindir, root, user)
    try:
        try:
            cluster.start()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
            _unavailable(f"cannot start a private PostgreSQL cluster: {e}")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
