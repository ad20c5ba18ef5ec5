"""The mapping file: the provider's key, project and model ids as the recorder knows them.

An export names keys and projects by the provider's ids; the recorder by its
own (``api_key_id``, ``project``). The mapping file, JSON or CSV, says which is
which, and may rename an export's models; an id it does not name is taken as it is.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from recorder.billing.export_csv import csv_rows
from recorder.billing.export_model import ExportError, header_name


@dataclass(slots=True)
class IdMapping:
    """The provider's ids as the recorder knows them."""

    keys: dict[str, str] = field(default_factory=dict)  # provider key id/name -> api_key_id
    projects: dict[str, str] = field(default_factory=dict)  # project/workspace id -> project
    models: dict[str, str] = field(default_factory=dict)  # export model -> recorded model

    def key(self, value: str | None) -> str | None:
        """The recorder's ``api_key_id`` for an export's key."""
        return None if value is None else self.keys.get(value, value)

    def project(self, value: str | None) -> str | None:
        """The recorder's ``project`` for an export's project or workspace."""
        return None if value is None else self.projects.get(value, value)

    def model(self, value: str | None) -> str | None:
        """The recorded model name for an export's."""
        return None if value is None else self.models.get(value, value)


_MAP_KINDS = {"key": "keys", "keys": "keys", "project": "projects", "projects": "projects"}
_MAP_KINDS |= {"workspace": "projects", "model": "models", "models": "models"}


def read_mapping(text: str, *, source: str = "mapping") -> IdMapping:
    """A mapping file: JSON ``{"keys": {...}, "projects": {...}, "models": {...}}``
    or CSV with the columns ``kind`` (key, project, model), ``provider_id``,
    ``recorded_as``."""
    mapping = IdMapping()
    body = text.lstrip("\ufeff").strip()
    if body.startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError as e:
            raise ExportError(f"{source}: not JSON: {e}") from None
        for name, table in doc.items():
            kind = _MAP_KINDS.get(str(name).lower())
            if kind is None or not isinstance(table, dict):
                raise ExportError(
                    f"{source}: {name!r} is not one of keys, projects, models (each an object)"
                )
            target: dict[str, str] = getattr(mapping, kind)
            for provider_id, ours in table.items():
                if not isinstance(ours, str):
                    raise ExportError(f"{source}: {name}.{provider_id}: a string")
                target[str(provider_id)] = ours
        return mapping
    reader = csv.reader(io.StringIO(body))
    try:
        names = [header_name(h) for h in next(reader, [])]
    except csv.Error as e:
        raise ExportError(f"{source}: not CSV: {e}") from None
    if not {"kind", "provider_id", "recorded_as"} <= set(names):
        raise ExportError(f"{source}: a JSON object, or CSV with kind,provider_id,recorded_as")
    for where, row in csv_rows(reader, names, source):
        kind = _MAP_KINDS.get((row["kind"] or "").strip().lower())
        if kind is None:
            raise ExportError(f"{where}: kind is key, project or model")
        provider_id = (row["provider_id"] or "").strip()
        ours = (row["recorded_as"] or "").strip()
        if provider_id and ours:
            getattr(mapping, kind)[provider_id] = ours
    return mapping
