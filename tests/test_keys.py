"""API keys: found in headers, fingerprinted, never kept."""

from __future__ import annotations

from recorder.keys import extract_key, fingerprint, mask_key_bytes, scrub_key


def test_extract_key_from_each_header() -> None:
    assert extract_key({"authorization": "Bearer sk-abc"}) == "sk-abc"
    assert extract_key({"authorization": "bearer   sk-abc  "}) == "sk-abc"
    assert extract_key({"x-api-key": "sk-ant-xyz"}) == "sk-ant-xyz"
    assert extract_key({"api-key": "azure-key"}) == "azure-key"
    assert extract_key({"authorization": "Basic dXNlcjpwYXNz"}) is None
    assert extract_key({"authorization": "Bearer "}) is None
    assert extract_key({}) is None
    assert extract_key(object()) is None


def test_fingerprint_is_keyed_stable_and_short() -> None:
    key = "sk-live-SECRETKEY123456"
    fp = fingerprint(key, b"secret-a")
    assert fp == fingerprint(key, b"secret-a")
    assert fp != fingerprint(key, b"secret-b")
    assert fp.startswith("…3456:") and len(fp) == len("…3456:") + 12
    assert "SECRETKEY" not in fp


def test_extract_key_from_the_query_string_after_the_headers() -> None:
    assert extract_key({}, {"api-key": "q-key-123456"}) == "q-key-123456"
    assert extract_key({}, {"key": "AIzaXYZ"}) == "AIzaXYZ"
    assert extract_key({"x-api-key": "sk-ant-h"}, {"key": "q"}) == "sk-ant-h"
    assert extract_key({}, {"api-version": "2024-10-21"}) is None


def test_scrub_key_keeps_no_character_of_a_secret_part() -> None:
    key = "sk-proj-ABCDEFGHIJKLMNOP1234"
    assert scrub_key(f"bad key {key}!", key) == "bad key [api key]!"
    other = "sk-QRSTUVWX5678abcd"
    assert scrub_key(f"not {other}", key) == "not sk-…[masked]"
    assert scrub_key("AIza" + "B" * 35, "") == "AIza…[masked]"
    assert scrub_key("sk-ant-api03-abcdefghijkl", "") == "sk-ant-api03-…[masked]"
    assert scrub_key("a task-force-member list", "") == "a task-force-member list"


def test_mask_key_bytes_keeps_the_length() -> None:
    key = "sk-SECRET-0123456789"
    data = b'data: {"error": "' + key.encode() + b'"}\n\n'
    masked = mask_key_bytes(data, key)
    assert len(masked) == len(data) and key.encode() not in masked
    assert mask_key_bytes(data, None) == data and mask_key_bytes(data, "short") == data
