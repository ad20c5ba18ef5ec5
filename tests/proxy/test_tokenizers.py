"""Unit tests of recorder/proxy/tokenizers.py: a tokenizer only when one needs no download."""
# (the real packages of the ``tokenizers`` extra are run with the network cut at the end)

from __future__ import annotations

import random
import subprocess
import sys
import textwrap
import types
from importlib import metadata
from pathlib import Path

import pytest

from recorder.proxy import tokenizers


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    tokenizers._counter.cache_clear()
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setitem(sys.modules, "toktok", None)  # not installed
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    monkeypatch.setitem(sys.modules, "anthropic_tokenizer", None)


def test_encodings_of_models_with_a_public_tokenizer() -> None:
    assert tokenizers.encoding_for("gpt-4o-2024-08-06") == "o200k_base"
    assert tokenizers.encoding_for("o3") == "o200k_base"
    assert tokenizers.encoding_for("gpt-4-turbo") == "cl100k_base"
    assert tokenizers.encoding_for("claude-sonnet-4-5") == "claude-65k"
    assert tokenizers.encoding_for(None, "messages") == "claude-65k"
    # Claude Opus 4.7 and later: the same public vocabulary (a reference, no more)
    assert tokenizers.encoding_for("claude-opus-4-7") == "claude-65k"
    assert tokenizers.encoding_for("claude-sonnet-5") == "claude-65k"
    assert tokenizers.encoding_for(None, "chat.completions") is None


def test_nothing_installed_means_no_tokenizer() -> None:
    assert tokenizers.counter_for("gpt-4o") is None
    assert tokenizers.counter_for("claude-sonnet-4-5") is None


def test_toktok_is_used_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("toktok")
    fake.truncate = lambda text, most, encoding: (text, len(text.split()))  # type: ignore[attr-defined]
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


def test_the_claude_tokenizer_counts_locally_never_through_its_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("anthropic_tokenizer")
    fake.count_tokens = lambda text: len(text.split())  # type: ignore[attr-defined]

    class ApiTokenizer:  # the package's client of Anthropic's count_tokens API
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("the API client must not be used")

    fake.ApiTokenizer = ApiTokenizer  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anthropic_tokenizer", fake)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    found = tokenizers.reference_counter_for("claude-sonnet-4-5-20250929")
    assert found is not None
    assert found[0] == "claude-65k" and found[1]("four words right here") == 4
    # not the model's own tokenizer: the proxy does not count with it
    assert tokenizers.counter_for("claude-sonnet-4-5-20250929") is None


def test_a_broken_install_degrades_to_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    # a build whose native part fails on this machine, and a toktok without the encoding
    broken = types.ModuleType("anthropic_tokenizer")

    def fail(text: str) -> int:
        raise OSError("cannot load the native library")

    broken.count_tokens = fail  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anthropic_tokenizer", broken)
    old = types.ModuleType("toktok")

    def truncate(text: str, most: int, encoding: str) -> tuple[str, int]:
        raise KeyError(encoding)

    old.truncate = truncate  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "toktok", old)
    assert tokenizers.reference_counter_for("claude-sonnet-4-5") is None
    assert tokenizers.counter_for("gpt-4o") is None
    assert tokenizers.preload() == []


def test_toktoks_whole_text_count_is_its_batch_count() -> None:
    # The proxy counts with ``truncate``'s total (one pass, on the caller's thread),
    # not ``batch_count`` (a thread pool): the two must agree on any text, special
    # token strings (counted as ordinary text by both), odd Unicode and all.
    del sys.modules["toktok"]  # the fixture's "not installed"
    toktok = pytest.importorskip("toktok")

    rng = random.Random(17)
    pieces = [
        "a",
        "b c",
        " ",
        "\n",
        "\t",
        "<|endoftext|>",
        "<|fim_prefix|>",
        "é",
        "日本語",
        "🧠",
        "12345",
        ".,!?",
        "'",
        '"',
        "\\",
        "   ",
        "\r\n",
        "ﬁ",
        "e\u0301",
    ]
    texts = ["", "Hi", "You are helpful. " * 500]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 300))) for _ in range(400)]
    for encoding in ("o200k_base", "cl100k_base"):
        found = tokenizers._toktok(encoding)
        assert found is not None
        want = toktok.batch_count(texts, encoding, threads=1)
        assert [found(t) for t in texts] == want


_OFFLINE = textwrap.dedent(
    """
    import socket

    def refuse(*args, **kwargs):
        raise OSError("network blocked by the test")

    socket.socket.connect = refuse
    socket.socket.connect_ex = refuse
    socket.getaddrinfo = refuse
    socket.create_connection = refuse
    from recorder.proxy import tokenizers

    print(tokenizers.preload())
    for model in ("gpt-4o", "gpt-4-turbo", "claude-sonnet-4-5"):
        encoding, count = tokenizers.reference_counter_for(model)
        print(encoding, count("Hello, world!"), count("日本語のテキストです"))
    """
)


def test_the_extra_counts_exactly_with_the_network_cut() -> None:
    for package in ("toktok-rs", "anthropic-tokenizer"):  # the extra, as the dev extra installs it
        try:
            metadata.version(package)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{package} is not installed (no wheel for this platform)")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "TIKTOKEN_CACHE_DIR": "/nonexistent"}
    done = subprocess.run(
        [sys.executable, "-c", _OFFLINE], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.split("\n")
    assert lines.pop(0) == "['o200k_base', 'cl100k_base']"
    # the counts tiktoken gives for these vocabularies
    assert lines[0].split()[:2] == ["o200k_base", "4"]
    assert lines[1].split()[:2] == ["cl100k_base", "4"]
    assert lines[2].split()[0] == "claude-65k" and int(lines[2].split()[1]) > 0
