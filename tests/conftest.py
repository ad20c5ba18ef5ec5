"""The suite's shared fixtures, registered from the test kit (tests/kit/):
databases (``db_url``, ``empty_db_url``, ``engine``, ``pg_admin`` and the
templates), the private PostgreSQL cluster (``pg_cluster``), the in-process
command line (``cli``) and a real terminal (``tmux``). Helpers are imported from the
kit's modules by name."""

pytest_plugins = [
    "tests.kit.databases",
    "tests.kit.pgcluster",
    "tests.kit.cli",
    "tests.kit.terminal",
]


def pytest_configure() -> None:
    """The suite runs as a user with the venv activated does: `recorder` is on PATH,
    so the hints commands print read `recorder …` (the tests of the hints themselves
    set PATH and RECORDER_PROG as they need)."""
    import os
    import sys
    from pathlib import Path

    here = str(Path(sys.executable).parent)
    if here not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([here, os.environ.get("PATH", "")])
