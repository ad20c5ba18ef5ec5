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
