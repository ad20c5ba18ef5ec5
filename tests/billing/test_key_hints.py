"""The providers' list-keys responses matched to the recorder's key fingerprints:
by the last characters both show, never guessing between keys that end alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorder.billing.export_model import ExportError
from recorder.billing.key_hints import last_four, match_keys, read_key_list
from recorder.core.keys import fingerprint

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "usage_exports"
SECRET = b"test-secret"


def test_both_providers_lists_as_returned() -> None:
    openai = read_key_list((EXPORTS / "openai_project_api_keys.json").read_text())
    assert [(k.id, k.name, k.tail) for k in openai] == [
        ("key_AAA", "team A", "111"),
        ("key_ZZZ", "unused", "999"),
    ]
    anthropic = read_key_list((EXPORTS / "anthropic_api_keys.json").read_text())
    assert [(k.id, k.tail) for k in anthropic] == [("apikey_01BBB", "2222")]


def test_real_keys_match_their_fingerprints() -> None:
    a = "sk-proj-" + "x" * 40 + "Qz7f"
    b = "sk-ant-api03-" + "y" * 80 + "igAA"
    fps = [fingerprint(a, SECRET), fingerprint(b, SECRET), None]
    listing = {
        "data": [
            {"id": "key_a", "redacted_value": f"{a[:6]}...{a[-3:]}"},  # OpenAI: 3 shown
            {"id": "apikey_b", "partial_key_hint": f"{b[:16]}...{b[-4:]}"},  # Anthropic: 4
        ]
    }
    match = match_keys(read_key_list(json.dumps(listing)), fps)
    assert match.keys == {"key_a": fps[0], "apikey_b": fps[1]}
    assert match.ambiguous == {} and match.unmatched == []
    assert last_four(fps[0] or "") == "Qz7f"


def test_keys_ending_alike_are_ambiguous_and_others_unmatched() -> None:
    fps = ["…a111:000000000000", "…b111:111111111111", "…2222:222222222222"]
    listing = {
        "data": [
            {"id": "k1", "redacted_value": "sk-abc...111"},  # both a111 and b111
            {"id": "k2", "redacted_value": "sk-abc...b111"},  # four shown: only b111
            {"id": "k3", "redacted_value": "sk-abc...333"},
        ]
    }
    match = match_keys(read_key_list(json.dumps(listing)), fps)
    assert match.keys == {"k2": fps[1]}
    assert match.ambiguous == {"k1": fps[:2]}
    assert match.unmatched == ["k3"]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[nope", "not JSON"),
        ('{"object": "list"}', "not a list-keys response"),
        ('{"data": [{"name": "x"}]}', r"data\[0\]: a key object with an id"),
        ('{"data": [{"id": "k"}]}', "no redacted_value or partial_key_hint"),
        ('{"data": [{"id": "k", "redacted_value": "sk-abc"}]}', "shows no last characters"),
    ],
)
def test_what_is_not_a_key_list_is_refused(text: str, said: str) -> None:
    with pytest.raises(ExportError, match=said):
        read_key_list(text, source="keys.json")
