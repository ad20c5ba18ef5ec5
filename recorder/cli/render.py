"""Rendering of command output: one JSON document, a table, or CSV."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Sequence
from decimal import Decimal
from typing import Any


def default_format(requested: str | None) -> str:
    """``table`` when stdout is a terminal, ``json`` otherwise (INTERFACES.md)."""
    if requested:
        return requested
    return "table" if sys.stdout.isatty() else "json"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(doc: Any) -> str:
    """Exactly one JSON document, money as decimal strings."""
    return json.dumps(doc, ensure_ascii=False, indent=2, default=_json_default)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    return str(value)


def vertical(doc: dict[str, Any]) -> str:
    """One object as ``field  value`` lines."""
    width = max((len(k) for k in doc), default=0)
    return "\n".join(f"{k.ljust(width)}  {_cell(v)}" for k, v in doc.items())


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as an aligned text table."""
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]
    return "\n".join(lines)


def emit(
    doc: Any, fmt: str | None, *, single: bool = False, columns: Sequence[str] | None = None
) -> None:
    """Print ``doc`` (an object when ``single``, else a list of objects)."""
    fmt = default_format(fmt)
    out = sys.stdout
    if fmt == "json":
        out.write(to_json(doc) + "\n")
    elif fmt == "csv":
        rows = [doc] if single else list(doc)
        cols = list(columns or (rows[0].keys() if rows else []))
        writer = csv.DictWriter(out, fieldnames=cols, extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: _csv(v) for k, v in r.items()})
    elif single:
        out.write(vertical(doc) + "\n")
    else:
        rows = list(doc)
        out.write(table(rows, list(columns or (rows[0].keys() if rows else []))) + "\n")


def _csv(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=_json_default)
    return "" if value is None else value
