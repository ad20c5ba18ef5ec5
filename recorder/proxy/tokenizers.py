"""Real tokenizers for estimates, when they are there without a download.

The optional extra ``pip install 'recorder[tokenizers]'`` brings two, both
MIT-licensed and both counting with data compiled into their binaries (nothing
is fetched, ever; the tests run them with the network cut):

- ``toktok`` (PyPI ``toktok-rs``): OpenAI's o200k_base and cl100k_base
  vocabularies, ids identical to tiktoken's: exact for OpenAI models.
- ``anthropic_tokenizer`` (PyPI ``anthropic-tokenizer``): the Claude BPE
  vocabulary Anthropic published (65,000 tokens, the Claude 1 and 2
  generation). Claude 3 and later count with tokenizers that are not public:
  for them it is a reference only (measured in ``docs/billing.md``: Claude 3 to
  4.6 make about 5 % more tokens, Claude Opus 4.7 and later over 1.6 times as
  many), and it is slow (about 1 MB/s, holding the GIL). So the proxy never
  uses it (:func:`counter_for` is exact tokenizers only); the estimator's
  benchmark does (:func:`reference_counter_for`). Only its local
  ``count_tokens`` is used, never its API client.

The vocabularies load on first use (about a second for toktok's):
:func:`preload` does that at start-up, before any request waits for it.

Plain ``tiktoken`` downloads its vocabulary on first use, which fails (or
hangs) on a machine without internet: it is used only when the vocabulary is
already in its cache. None of these is a dependency: without them
:mod:`recorder.core.estimate` uses its calibrated characters-per-token ratios.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from recorder.core.model_families import family_for

TokenCounter = Callable[[str], int]

_ENCODINGS = {"openai-o200k": "o200k_base", "openai-reasoning": "o200k_base"}
_ENCODINGS["openai-cl100k"] = "cl100k_base"
_ENCODINGS["anthropic"] = _ENCODINGS["anthropic-new"] = "claude-65k"
# vocabularies that are not the models' own (see the module's docstring)
APPROXIMATE = frozenset({"claude-65k"})
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def encoding_for(model: str | None, endpoint: str | None = None) -> str | None:
    """The vocabulary of a model (``o200k_base``, ``cl100k_base``, ``claude-65k``), else None."""
    return _ENCODINGS.get(family_for(model, endpoint))


def counter_for(model: str | None, endpoint: str | None = None) -> tuple[str, TokenCounter] | None:
    """``(encoding, count)`` of the model's own tokenizer, or None when no exact one
    is at hand offline (the proxy counts request bodies with it)."""
    encoding = encoding_for(model, endpoint)
    if encoding is None or encoding in APPROXIMATE:
        return None
    count = _counter(encoding)
    return None if count is None else (encoding, count)


def reference_counter_for(
    model: str | None, endpoint: str | None = None
) -> tuple[str, TokenCounter] | None:
    """Like :func:`counter_for`, approximate tokenizers included (``claude-65k``)."""
    encoding = encoding_for(model, endpoint)
    if encoding is None:
        return None
    count = _counter(encoding)
    return None if count is None else (encoding, count)


def preload() -> list[str]:
    """Load every exact vocabulary that is installed; return their names."""
    return [name for name in ("o200k_base", "cl100k_base") if _counter(name) is not None]


@cache
def _counter(encoding: str) -> TokenCounter | None:
    if encoding == "claude-65k":
        return _claude()
    return _toktok(encoding) or _cached_tiktoken(encoding)


def _claude() -> TokenCounter | None:
    try:
        module: Any = importlib.import_module("anthropic_tokenizer")
        local = module.count_tokens  # the embedded BPE; never ApiTokenizer
        local("probe")
    except Exception:  # absent, or a build for another platform
        return None

    def count(text: str) -> int:
        return int(local(text))

    return count


# More tokens than any text has: ``truncate`` then cuts nothing and counts all.
_ALL_TOKENS = 2**62


def _toktok(encoding: str) -> TokenCounter | None:
    try:
        toktok: Any = importlib.import_module("toktok")
        truncate = toktok.truncate
        truncate("probe", _ALL_TOKENS, encoding)
    except Exception:  # absent, or an older build without this encoding
        return None

    # ``truncate`` returns the whole text's count, exactly ``batch_count``'s, in one
    # pass on the caller's thread, where ``batch_count`` hands its batch to a Rust
    # thread pool even with threads=1 (docs/performance.md has the figures). The
    # proxy counts every OpenAI prompt with this.
    def count(text: str) -> int:
        return int(truncate(text, _ALL_TOKENS, encoding)[1])

    return count


def _cached_tiktoken(encoding: str) -> TokenCounter | None:
    # tiktoken's own cache: $TIKTOKEN_CACHE_DIR, $DATA_GYM_CACHE_DIR, or
    # <tmp>/data-gym-cache, the file named by the SHA-1 of the vocabulary's URL
    base = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    folder = Path(base) if base else Path(tempfile.gettempdir()) / "data-gym-cache"
    key = hashlib.sha1(_BLOB.format(encoding).encode()).hexdigest()
    if not (folder / key).is_file():
        return None
    try:
        tiktoken: Any = importlib.import_module("tiktoken")
        enc = tiktoken.get_encoding(encoding)
    except Exception:  # an absent or broken install: estimate from characters
        return None

    def count(text: str) -> int:
        return len(enc.encode_ordinary(text))

    return count
