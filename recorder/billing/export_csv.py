"""A usage export from the text of a CSV file, its format recognised by its columns."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from recorder.billing.export_formats import FORMATS, read_rows
from recorder.billing.export_model import Export, ExportError, header_name


def read_export(text: str, *, source: str = "export") -> Export:
    """An export from the text of a CSV file, its format recognised by its columns."""
    reader = csv.reader(io.StringIO(text.lstrip("\ufeff")))
    try:
        header = next(reader)
    except StopIteration:
        raise ExportError(f"{source}: empty file") from None
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None
    names = [header_name(h) for h in header]
    cols = frozenset(n for n in names if n)
    fmt = next((f for f in FORMATS if f.detect(cols)), None)
    if fmt is None:
        raise ExportError(
            f"{source}: not a usage export this recorder reads (columns: "
            f"{', '.join(h.strip() for h in header)}); see docs/billing.md, 'Reconciliation'"
        )
    return read_rows(fmt, cols, csv_rows(reader, names, source), source=source)


def csv_rows(
    reader: Any, names: list[str], source: str
) -> Iterable[tuple[str, dict[str, str | None]]]:
    """Each non-blank line of a CSV as (where, row); a line whose cells are not
    as many as the header's is refused with its file and line number."""
    start = reader.line_num + 1
    try:
        for cells in reader:
            where = f"{source} line {start}"
            start = reader.line_num + 1
            if not any(c.strip() for c in cells):
                continue
            if len(cells) != len(names):
                raise ExportError(f"{where}: {len(cells)} cells, the header has {len(names)}")
            yield where, dict(zip(names, cells, strict=True))
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None
