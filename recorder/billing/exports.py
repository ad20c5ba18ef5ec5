"""Export files and directories of pages, CSV or JSON, read as one export.

`recorder reconcile FILE...` takes any mix of: the flattened CSV exports
(:func:`recorder.billing.export_csv.read_export`), the providers' API responses as
returned (:func:`recorder.billing.usage_api.read_pages`), and directories of
such files (every ``*.json`` and ``*.csv`` in it, in name order: a directory of
pages saved one per request). The pages of one response are checked as a set:
two files with the same ``next_page`` cursor are the same page twice (their
rows would be counted twice), as are two files of the same content, and when
every page says ``has_more: true`` the last page is missing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from recorder.billing.export_csv import read_export
from recorder.billing.export_model import Export, ExportError, merge_exports
from recorder.billing.usage_api import looks_like_json, read_pages

SUFFIXES = (".json", ".csv")


def expand(paths: Iterable[str]) -> list[str]:
    """The files named, a directory standing for its ``*.json`` and ``*.csv``
    files in name order (an empty directory is refused)."""
    out: list[str] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.is_file() and p.suffix.lower() in SUFFIXES
            )
            if not found:
                raise ExportError(f"{name}: a directory without .json or .csv files")
            out.extend(str(p) for p in found)
        else:
            out.append(name)
    return out


def read_text(text: str, *, source: str) -> Export:
    """One file's export: JSON (an API response) or CSV, told by its first character."""
    if looks_like_json(text):
        return read_pages(text, source=source)
    return read_export(text, source=source)


def _check_pages(exports: Sequence[Export]) -> list[str]:
    """Refuse a page given twice; say when a response's last page is missing."""
    seen: dict[str, str] = {}
    for e in exports:
        for cursor in e.next_pages:
            if cursor in seen:
                raise ExportError(
                    f"{e.source}: the same page as {seen[cursor]} (both give next_page "
                    f"{cursor!r}); its rows would count twice"
                )
            seen[cursor] = e.source
    notes = []
    by_format: dict[str, list[Export]] = {}
    for e in exports:
        if e.pages_more or e.pages_last:
            by_format.setdefault(e.format, []).append(e)
    for fmt, group in by_format.items():
        if fmt != "empty-response" and not any(e.pages_last for e in group):
            notes.append(
                f"{fmt}: every page says has_more: true, so its last page is missing "
                "(ask again with page=NEXT_PAGE); the figures compared are partial"
            )
    return notes


def read_exports(
    paths: Iterable[str],
    read: Callable[[str], str],
    fetched: Sequence[tuple[str, str]] = (),
) -> Export:
    """Every file (directories expanded) read with ``read``, and the pages fetched
    (name, text), merged into one export."""
    texts = [(f, read(f)) for f in expand(paths)]
    seen: dict[str, str] = {}
    for name, text in texts:
        digest = hashlib.sha256(text.strip().encode()).hexdigest()
        if digest in seen:
            raise ExportError(f"{name}: the same content as {seen[digest]}; it would count twice")
        seen[digest] = name
    exports = [read_text(text, source=name) for name, text in texts]
    exports += [read_pages(text, source=name) for name, text in fetched]
    notes = _check_pages(exports)
    real = [e for e in exports if e.format != "empty-response"] or exports
    merged = merge_exports(real)
    merged.notes.extend(notes)
    return merged
