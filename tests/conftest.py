"""The suite's shared fixtures, registered from the test kit (tests/kit/):
databases (``db_url``, ``empty_db_url``, ``engine``, ``pg_admin`` and the
templates), the private PostgreSQL cluster (``pg_cluster``) and the in-process
command line (``cli``). Helpers are imported from the kit's modules by name."""

pytest_plugins = [
    "tests.kit.databases",
    "tests.kit.pgcluster",
    "tests.kit.cli",
]
