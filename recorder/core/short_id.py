"""The short form of a record id: the one every screen shows (the console line,
`recorder sessions`, `recorder top`, mitmweb's comment, the demo's hint) and
`recorder show` takes.

A record id is a UUIDv7 (``recorder.proxy.ids``): 48 bits of Unix milliseconds,
then random bits. Ids made in the same minute share their first characters, so
the start cannot tell them apart at a glance; the short form is the end instead,
the last group's 12 hex digits: 48 random bits, so two ids share it about once in
16 million pairs (`recorder show` answers a part several ids hold with a few of
them to choose from).
"""

from __future__ import annotations

import re

SHORT_ID_CHARS = 12
# a UUID's groups of hex digits, as its text writes them between dashes
_GROUPS = (8, 4, 4, 4, 12)
_HEX = re.compile(r"^[0-9a-f]+$")


def short_id(record_id: str | None) -> str:
    """The short form of ``record_id`` (``-`` for none): its last 12 characters."""
    if not record_id:
        return "-"
    return record_id[-SHORT_ID_CHARS:]


def _dashed(digits: str, groups: tuple[int, ...]) -> str:
    parts, at = [], 0
    for size in groups:
        if at >= len(digits):
            break
        parts.append(digits[at : at + size])
        at += size
    return "-".join(parts)


def dashed_start(part: str) -> str | None:
    """``part``, hex digits with or without dashes, as the start of a UUID's text
    (``01a23c96a789`` → ``01a23c96-a789``); None when it cannot be one."""
    digits = part.replace("-", "").lower()
    if not _HEX.match(digits) or len(digits) > 32:
        return None
    return _dashed(digits, _GROUPS)


def dashed_end(part: str) -> str | None:
    """``part`` as the end of a UUID's text, its groups counted from the last
    (``9ebf4606b6f250f2`` → ``9ebf-4606b6f250f2``); None when it cannot be one."""
    digits = part.replace("-", "").lower()
    if not _HEX.match(digits) or len(digits) > 32:
        return None
    return _dashed(digits[::-1], tuple(reversed(_GROUPS)))[::-1]
