"""`recorder db upgrade` / `recorder db prune --before DATE` / `recorder db
purge-bodies [--before DATE]` / `recorder db spool [--spool-dir DIR]`: schema,
retention, and what waits in a spool directory.

``spool`` lists, by store, the records waiting in a spool directory (by default
the one of ``--db``): files, records, and how many files a running process holds
(a running recorder's journal: its records may already be in the database). It
never connects to a database.

``prune`` deletes streams with their gaps and captured bodies; ``purge-bodies``
deletes only the captured response bodies (``--capture-bodies``), keeping the
streams' records.

The database is ``--db URL``, else ``RECORDER_DB``, else ``sqlite:///recorder.db``
(the proxy's default). ``postgresql://`` URLs use psycopg 3.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sqlalchemy.exc import SQLAlchemyError

from recorder.cli.subcommands import Subcommands
from recorder.core.errors import RecorderError
from recorder.store.engine import StoreError, display_url, normalize_url
from recorder.store.migrate import head_revision, upgrade
from recorder.store.queries import (
    SessionFilter,
    count_before,
    count_bodies,
    parse_when,
    prune,
    purge_bodies,
)
from recorder.store.reading import database_error, reading_store

DEFAULT_DB = "sqlite:///recorder.db"


class CliError(RecorderError):
    """A failure a command reports in one line (``main`` prints it); ``code`` is
    the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message, exit_code=code)

    @property
    def code(self) -> int:
        return self.exit_code


def add_db_option(p: argparse.ArgumentParser) -> None:
    """The ``--db`` option every store command takes."""
    p.add_argument(
        "--db",
        metavar="URL",
        help=f"SQLAlchemy URL of the store (default: RECORDER_DB, else {DEFAULT_DB})",
    )


def add_filter_options(p: argparse.ArgumentParser) -> None:
    """The stream filters every reading command shares (sessions, audit, reprice)."""
    from recorder.core.protocols import ENDPOINTS
    from recorder.core.record import OUTCOMES

    p.add_argument("--since", metavar="TIME", help="started at or after (2026-01-31, 12h, 7d)")
    p.add_argument("--until", metavar="TIME", help="started before")
    p.add_argument("--endpoint", choices=ENDPOINTS, help="only this endpoint")
    p.add_argument("--model", help="only this requested model ('*' matches anything)")
    p.add_argument(
        "--outcome",
        action="append",
        metavar="OUTCOME",
        help=f"only these outcomes (repeatable or comma-separated): {', '.join(OUTCOMES)}",
    )
    p.add_argument(
        "--key",
        help="only this API key: its fingerprint, the fingerprint's hex or last-four part, "
        "or the key itself (fingerprinted, never stored)",
    )
    p.add_argument(
        "--tag",
        action="append",
        metavar="NAME=VALUE",
        help="only requests with this tag (repeatable: all of them)",
    )
    p.add_argument(
        "--retries",
        action="store_true",
        help="only retries: requests that sent again one that did not complete",
    )


def filter_from(args: argparse.Namespace, limit: int | None) -> SessionFilter:
    """The filter the options of :func:`add_filter_options` ask for, at most ``limit``."""
    outcomes = [o.strip() for v in args.outcome or [] for o in v.split(",") if o.strip()]
    return SessionFilter(
        since=parse_when(args.since) if args.since else None,
        until=parse_when(args.until) if args.until else None,
        endpoint=args.endpoint,
        model=args.model,
        outcomes=outcomes,
        key=args.key,
        limit=limit,
        tags=[_tag(spec) for spec in args.tag or []],
        retries=bool(getattr(args, "retries", False)),
    )


def _tag(spec: str) -> tuple[str, str]:
    """``--tag NAME=VALUE`` as (name, value)."""
    name, sep, value = spec.partition("=")
    if not sep or not name.strip():
        raise CliError(f"--tag {spec!r}: NAME=VALUE expected (team=search)", 2)
    return name.strip(), value.strip()


def db_url(args: argparse.Namespace) -> str:
    """The database a command works on."""
    return getattr(args, "db", None) or os.environ.get("RECORDER_DB") or DEFAULT_DB


def add_parser(sub: Subcommands) -> None:
    """Register the `db` command group."""
    p = sub.add_parser("db", help="schema migrations and retention of the store")
    dbsub = p.add_subparsers(dest="db_command", metavar="SUBCOMMAND", required=True)
    up = dbsub.add_parser(
        "upgrade", help="create or migrate the store's tables (the proxy also does on start)"
    )
    add_db_option(up)
    up.set_defaults(func=run)
    pr = dbsub.add_parser("prune", help="delete streams that started before a date")
    pr.add_argument(
        "--before",
        required=True,
        metavar="DATE",
        help="streams started before this go: 2026-01-01, 2026-01-01T12:00Z, or an age (90d)",
    )
    pr.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    add_db_option(pr)
    pr.set_defaults(func=run)
    pb = dbsub.add_parser(
        "purge-bodies",
        help="delete captured response bodies (--capture-bodies), keeping the streams",
    )
    pb.add_argument(
        "--before",
        metavar="DATE",
        help="only bodies of streams started before this (2026-01-01, or an age: 30d); "
        "default: every body",
    )
    pb.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    add_db_option(pb)
    pb.set_defaults(func=run)
    sp = dbsub.add_parser("spool", help="what waits in a spool directory, by store")
    sp.add_argument(
        "--spool-dir",
        metavar="DIR",
        help="the directory to look in (default: the spool directory of --db)",
    )
    sp.add_argument(
        "--adopt",
        action="store_true",
        help="give the files that name no store (an older recorder's) to the store of "
        "--db: moved, with a header, into its default spool directory (or --into)",
    )
    sp.add_argument("--into", metavar="DIR", help="with --adopt: the spool directory to move to")
    sp.add_argument("--format", choices=("table", "json", "csv"), default=None)
    add_db_option(sp)
    sp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder db ...`."""
    if args.db_command == "upgrade":
        return _upgrade(args)
    if args.db_command == "purge-bodies":
        return _purge_bodies(args)
    if args.db_command == "spool":
        return _spool(args)
    return _prune(args)


def _upgrade(args: argparse.Namespace) -> int:
    url = db_url(args)
    normalize_url(url)  # a bad URL is a usage error, said as is
    try:
        rev = upgrade(url)
    except StoreError as e:  # unreachable, or cannot be migrated
        raise CliError(f"{display_url(url)}: {e}") from None
    except SQLAlchemyError as e:
        raise database_error(e, url) from None
    head = head_revision()
    print(f"{display_url(url)}: at revision {rev} (newest: {head})")
    return 0


def _prune(args: argparse.Namespace) -> int:
    before = parse_when(args.before)
    with reading_store(db_url(args)) as engine:
        if args.dry_run:
            n = count_before(engine, before)
            print(f"{n} stream(s) started before {before.isoformat()} would be deleted")
        else:
            n = prune(engine, before)
            print(f"deleted {n} stream(s) started before {before.isoformat()}")
    return 0


def _purge_bodies(args: argparse.Namespace) -> int:
    before = parse_when(args.before) if args.before else None
    which = "" if before is None else f" of streams started before {before.isoformat()}"
    with reading_store(db_url(args)) as engine:
        if args.dry_run:
            n, size = count_bodies(engine, before)
            print(f"{n} stored body(ies){which} would be deleted ({size:,} bytes compressed)")
        else:
            n = purge_bodies(engine, before)
            print(f"deleted {n} stored body(ies){which}; the streams' records are kept")
    return 0


SPOOL_COLUMNS = ("store", "store_id", "files", "records", "held_files")


def _adopt(args: argparse.Namespace, directory: Path) -> int:
    from recorder.store.identity import StoreIdentity, default_spool_dir, read_cached_id, store_key
    from recorder.store.spool import adopt, list_spool

    url = db_url(args)
    key = store_key(url)
    into = Path(args.into) if args.into else default_spool_dir(url)
    identity = StoreIdentity(key, read_cached_id(into, key))
    files = records = 0
    for f in list_spool(directory):
        if f.held or f.store is not None or f.store_id is not None:
            continue
        try:
            n = adopt(f.path, identity, into)
        except OSError as e:
            raise CliError(f"cannot adopt {f.path}: {e.strerror or e}") from None
        if n is not None:
            files += 1
            records += n
    print(f"adopted {files} file(s), {records} record(s), for {key}, into {into}")
    return 0


def _spool(args: argparse.Namespace) -> int:
    from recorder.cli.render import default_format, emit
    from recorder.store.identity import default_spool_dir
    from recorder.store.spool import list_spool

    directory = Path(args.spool_dir) if args.spool_dir else default_spool_dir(db_url(args))
    if not directory.is_dir():
        if args.spool_dir:
            raise CliError(f"no spool directory at {directory}")
        print(f"nothing waits: no spool directory at {directory}")  # never spooled
        return 0
    if args.adopt:
        return _adopt(args, directory)
    counts: dict[tuple[str, str | None], list[int]] = {}  # files, records, held files
    for f in list_spool(directory):
        store = f.store or "(no store named: written by an older recorder)"
        c = counts.setdefault((store, f.store_id), [0, 0, 0])
        c[0] += 1
        c[1] += f.records
        c[2] += f.held
    out = [
        {"store": s, "store_id": i, "files": c[0], "records": c[1], "held_files": c[2]}
        for (s, i), c in counts.items()
    ]
    if default_format(args.format) == "table":
        print(f"spool directory {directory}")
        if not out:
            print("nothing waits here")
            return 0
    emit(out, args.format, columns=SPOOL_COLUMNS)
    return 0
