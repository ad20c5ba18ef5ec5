"""Hints the recorder prints name commands the way the user can run them."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def command(words: str) -> str:
    """A ``recorder`` command line to print as a hint, runnable as printed:
    ``scripts/run`` exports RECORDER_PROG (``scripts/run top``); else ``recorder``
    when it is on PATH; else the console script beside this Python (a mitmdump
    started as ``.venv/bin/mitmdump`` without the venv activated)."""
    prog = os.environ.get("RECORDER_PROG") or "recorder"
    ours = Path(sys.executable).parent / "recorder"
    if prog == "recorder" and shutil.which("recorder") is None and ours.exists():
        here = os.path.relpath(ours)
        prog = str(ours) if here.startswith("..") else here
    return f"{prog} {words}"
