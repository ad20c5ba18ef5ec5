"""recorder/core/printable.py: wire values made safe to print, JSON kept exact."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from recorder.core.printable import json_text, printable
from tests.kit.hostile import ESCAPED_MODEL, HOSTILE_MODEL


def unsafe(ch: str) -> bool:
    """What a terminal may act on (the module's documented set)."""
    code = ord(ch)
    return (
        code < 0x20
        or 0x7F <= code <= 0x9F
        or ch in "\u061c\u200e\u200f\u2028\u2029"
        or 0x202A <= code <= 0x202E
        or 0x2066 <= code <= 0x2069
    )


def test_the_issues_model_name_is_escaped() -> None:
    assert printable(HOSTILE_MODEL) == ESCAPED_MODEL


def test_c1_bidi_and_separators_are_escaped() -> None:
    assert printable("a\x9b2Jb") == "a\\x9b2Jb"  # CSI in its 8-bit form
    assert printable("\x7f") == "\\x7f"
    assert printable("x\u202egnp.exe") == "x\\u202egnp.exe"  # right-to-left override
    assert printable("\u2066a\u2069") == "\\u2066a\\u2069"
    assert printable("a\u2028b") == "a\\u2028b"
    assert printable("\t") == "\\t"


def test_ordinary_values_print_unchanged() -> None:
    for value in ("gpt-4o", "claude-sonnet-4-5", "プロジェクト-音楽", "👩‍💻", "a\\x1b", ""):
        assert printable(value) is value  # ZWJ emoji kept; a backslash is no escape


@given(st.text())
def test_no_unsafe_character_survives(value: str) -> None:
    shown = printable(value)
    assert not any(unsafe(ch) for ch in shown)
    if not any(unsafe(ch) for ch in value):
        assert shown == value


@given(st.text())
def test_json_text_is_the_same_document_shown_inertly(value: str) -> None:
    doc = {"model": value, "n": [value, 1]}
    serialized = json.dumps(doc, ensure_ascii=False)
    text = json_text(serialized)
    assert json.loads(text) == doc
    assert not any(unsafe(ch) for ch in text)
    if not any(unsafe(ch) for ch in value):
        assert text is serialized  # nothing a terminal acts on: the text as it was
