"""Provider key ids matched to the recorder's key fingerprints (``--keys``).

The recorder never keeps a key: it keeps ``…<last four>:<keyed hash>``
(:func:`recorder.core.keys.fingerprint`). The providers' admin APIs list keys with a
redacted hint that also ends with the key's last characters:

- OpenAI ``GET /v1/organization/admin_api_keys`` and ``GET
  /v1/organization/projects/{id}/api_keys``: ``{"object": "list", "data":
  [{"id": "key_abc", "name", "redacted_value": "sk-abc...def", ...}],
  "has_more", ...}``;
- Anthropic ``GET /v1/organizations/api_keys``: ``{"data": [{"id":
  "apikey_01...", "name", "partial_key_hint": "sk-ant-api03-R2D...igAA",
  "workspace_id", ...}], "has_more", ...}``.

A provider key matches a fingerprint when the characters after the hint's
``...`` and the fingerprint's last four agree on their common length (OpenAI's
hints show three, Anthropic's four). Only the fingerprints recorded in the
period compared are candidates; a provider key that matches several (two keys
ending alike) is ambiguous and left unmapped, named on standard error, as is
one that matches none. Nothing here sees a key: hints and fingerprints only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from recorder.billing.export_model import ExportError

HINT_FIELDS = ("redacted_value", "partial_key_hint")
_ELLIPSES = ("...", "…")


@dataclass(frozen=True, slots=True)
class ProviderKey:
    """One key as the provider lists it: its id, name, and the characters its hint shows last."""

    id: str
    name: str | None
    tail: str


@dataclass(slots=True)
class KeyMatch:
    """What the hints told: provider id -> fingerprint, and what could not be told."""

    keys: dict[str, str] = field(default_factory=dict)
    ambiguous: dict[str, list[str]] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)


def _tail(hint: str) -> str | None:
    """The characters a redacted hint shows after its ellipsis."""
    for mark in _ELLIPSES:
        if mark in hint:
            tail = hint.rsplit(mark, 1)[1].strip()
            return tail or None
    return None


def read_key_list(text: str, *, source: str = "keys") -> list[ProviderKey]:
    """The keys of a list-keys response as returned (one page, or a JSON array of pages)."""
    try:
        doc = json.loads(text.lstrip("\ufeff"))
    except ValueError as e:
        raise ExportError(f"{source}: not JSON: {e}") from None
    pages = doc if isinstance(doc, list) else [doc]
    out: list[ProviderKey] = []
    for p, page in enumerate(pages):
        if not isinstance(page, Mapping) or not isinstance(page.get("data"), list):
            raise ExportError(f"{source}: not a list-keys response (a page has a 'data' list)")
        for n, item in enumerate(page["data"]):
            page_name = source if len(pages) == 1 else f"{source} page {p + 1}"
            where = f"{page_name}: data[{n}]"
            if not isinstance(item, Mapping) or not isinstance(item.get("id"), str):
                raise ExportError(f"{where}: a key object with an id")
            hint = next((item[f] for f in HINT_FIELDS if isinstance(item.get(f), str)), None)
            if hint is None:
                raise ExportError(f"{where}: no {' or '.join(HINT_FIELDS)}")
            tail = _tail(hint)
            if tail is None:
                raise ExportError(f"{where}: the hint {hint!r} shows no last characters")
            name = item.get("name")
            out.append(ProviderKey(item["id"], name if isinstance(name, str) else None, tail))
    return out


def last_four(fingerprint: str) -> str | None:
    """The last four characters of the key a fingerprint (``…abcd:0123456789ab``) stands for."""
    if not fingerprint.startswith("…") or ":" not in fingerprint:
        return None
    return fingerprint[1:].rsplit(":", 1)[0] or None


def _agree(tail: str, four: str) -> bool:
    n = min(len(tail), len(four))
    return n > 0 and tail[-n:] == four[-n:]


def match_keys(keys: Iterable[ProviderKey], fingerprints: Iterable[str | None]) -> KeyMatch:
    """Each provider key mapped to the one recorded fingerprint its hint agrees with."""
    recorded: dict[str, str] = {}
    for fp in fingerprints:
        if fp:
            four = last_four(fp)
            if four:
                recorded[fp] = four
    out = KeyMatch()
    for key in keys:
        found = sorted(fp for fp, four in recorded.items() if _agree(key.tail, four))
        if len(found) == 1:
            out.keys[key.id] = found[0]
        elif found:
            out.ambiguous[key.id] = found
        else:
            out.unmatched.append(key.id)
    return out


def describe(match: KeyMatch) -> list[str]:
    """Lines for standard error: what --keys could not map, and why."""
    lines = []
    for key_id, fps in sorted(match.ambiguous.items()):
        lines.append(f"--keys: {key_id} matches several recorded keys ({', '.join(fps)}): unmapped")
    if match.unmatched:
        lines.append(
            "--keys: no recorded key in the period ends like " + ", ".join(sorted(match.unmatched))
        )
    return lines
