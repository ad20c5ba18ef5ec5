"""A real tokenizer for input estimates, when one is there without a download.

Plain ``tiktoken`` downloads its vocabulary on first use, which fails (or
hangs) on a machine without internet: it is used only when the vocabulary is
already in its cache. ``toktok`` (PyPI ``toktok-rs``) compiles the o200k_base
and cl100k_base vocabularies into its binary and needs nothing else. Neither is
a dependency: without them :mod:`recorder.core.estimate` uses its calibrated
characters-per-token ratios. Only OpenAI models have a public tokenizer.
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

from recorder.core.estimate import family_for

TokenCounter = Callable[[str], int]

_ENCODINGS = {"openai-o200k": "o200k_base", "openai-reasoning": "o200k_base"}
_ENCODINGS["openai-cl100k"] = "cl100k_base"
_BLOB = "https://openaipublic.blob.core.windows.net/encodings/{}.tiktoken"


def encoding_for(model: str | None, endpoint: str | None = None) -> str | None:
    """The vocabulary of an OpenAI model (``o200k_base`` / ``cl100k_base``), else None."""
    return _ENCODINGS.get(family_for(model, endpoint))


def counter_for(model: str | None, endpoint: str | None = None) -> tuple[str, TokenCounter] | None:
    """``(encoding, count)`` for ``model``, or None when no tokenizer is at hand offline."""
    encoding = encoding_for(model, endpoint)
    if encoding is None:
        return None
    count = _counter(encoding)
    return None if count is None else (encoding, count)


@cache
def _counter(encoding: str) -> TokenCounter | None:
    return _toktok(encoding) or _cached_tiktoken(encoding)


def _toktok(encoding: str) -> TokenCounter | None:
    try:
        toktok: Any = importlib.import_module("toktok")
    except ImportError:
        return None

    def count(text: str) -> int:
        return int(toktok.batch_count([text], encoding, threads=1)[0])

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
