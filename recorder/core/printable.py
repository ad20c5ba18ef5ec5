"""Values from the wire made safe to print: a model name, a header, an id an
upstream sent can carry characters a terminal (or a log viewer) acts on instead of
showing. Every text surface (console lines, logs, tables, `recorder top`, mitmweb
comments, plots) turns such a value into text through :func:`printable`; JSON
keeps the value exact, with the same characters written as ``\\uXXXX`` escapes by
:func:`json_text`.

The characters escaped, and why:

- C0 controls (U+0000-U+001F) and DEL (U+007F): ESC starts the sequences that set
  a window's title, clear the screen or write the clipboard (OSC 52); CR and LF
  start a new line that can pass for one the recorder wrote; BEL, BS and TAB move
  or hide what is shown.
- C1 controls (U+0080-U+009F): the 8-bit forms of the same sequences (U+009B is
  CSI, U+009D OSC, U+0085 a new line), which some terminals obey.
- The bidirectional controls (U+061C, U+200E, U+200F, U+202A-U+202E,
  U+2066-U+2069): they reorder the rest of the line as displayed (the "Trojan
  Source" trick), so a line can read as something it is not.
- The line and paragraph separators (U+2028, U+2029): log viewers and editors
  break lines there.

Other format characters (zero-width joiners, soft hyphens) are kept: emoji and
scripts need them, and they cannot move or forge text. A backslash is kept as it
is, so a value without these characters prints unchanged; the text form is for
reading, JSON (and CSV) for the exact value.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
# the characters JSON itself leaves unescaped: C0 is always escaped by a serializer
_UNSAFE_IN_JSON = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    named = _NAMED.get(ch)
    if named is not None:
        return named
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: str) -> str:
    """``value`` with the characters above escaped as ``\\x1b``, ``\\r``, ``\\n``,
    ``\\u202e``; unchanged (the same object) when it has none."""
    if _UNSAFE.search(value) is None:
        return value
    return _UNSAFE.sub(_escape, value)


def json_text(text: str) -> str:
    """A JSON document's text with the characters above that JSON allows raw (DEL,
    C1, the bidirectional controls, the separators) written as ``\\uXXXX``: the
    same document, decoded to the same values, that a terminal shows inertly. The
    serializer has escaped the C0 controls already; these characters can only
    stand inside a string, where the escape means the same character."""
    if _UNSAFE_IN_JSON.search(text) is None:
        return text
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
