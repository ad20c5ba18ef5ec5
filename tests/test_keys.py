"""API keys: found in headers, fingerprinted, never kept."""

from __future__ import annotations

from recorder.keys import extract_key, fingerprint


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
