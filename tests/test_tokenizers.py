"""Unit tests of recorder/tokenizers.py: a tokenizer only when one needs no download."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from recorder import tokenizers


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tokenizers._counter.cache_clear()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setitem(sys.modules, "toktok", None)  # not installed
    monkeypatch.setitem(sys.modules, "tiktoken", None)


def test_encodings_of_openai_models_only() -> None:
    assert tokenizers.encoding_for("gpt-4o-2024-08-06") == "o200k_base"
    assert tokenizers.encoding_for("o3") == "o200k_base"
    assert tokenizers.encoding_for("gpt-4-turbo") == "cl100k_base"
    assert tokenizers.encoding_for("claude-sonnet-4-5") is None
    assert tokenizers.encoding_for(None, "chat.completions") is None


def test_nothing_installed_means_no_tokenizer() -> None:
    assert tokenizers.counter_for("gpt-4o") is None
    assert tokenizers.counter_for("claude-sonnet-4-5") is None


def test_toktok_is_used_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("toktok")
    fake.batch_count = lambda texts, encoding, threads=0: [len(t.split()) for t in texts]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toktok", fake)
    found = tokenizers.counter_for("gpt-4o")
    assert found is not None
    encoding, count = found
    assert encoding == "o200k_base" and count("three little words") == 3


def test_tiktoken_only_with_its_vocabulary_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []

    class Encoding:
        def encode_ordinary(self, text: str) -> list[int]:
            return [0] * len(text)

    fake = types.ModuleType("tiktoken")

    def get_encoding(name: str) -> Encoding:
        calls.append(name)
        return Encoding()

    fake.get_encoding = get_encoding  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tiktoken", fake)
    assert tokenizers.counter_for("gpt-4o") is None
    assert calls == []  # never asked: it would have tried to download
    import hashlib

    url = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_text("cached")
    tokenizers._counter.cache_clear()
    found = tokenizers.counter_for("gpt-4o")
    assert found is not None and found[1]("abcd") == 4
    assert calls == ["o200k_base"]
