"""The `recorder` command line run in-process, as the console script runs it.

The ``cli`` fixture calls ``recorder.cli.main.main()`` with the arguments given
(the command first: ``cli("sessions", "--db", url)``) and returns the exit code
with what the command wrote to stdout and stderr (read through pytest's capsys).
An argparse refusal (``SystemExit``) is returned as its exit code, as the shell
would see it. ``parse`` is main's own parser, for tests of the parsing alone.
"""

from __future__ import annotations

import argparse
import os
from typing import NamedTuple

import pytest

from recorder.cli.main import build_parser, main


class Ran(NamedTuple):
    """What one command left: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str


class Cli:
    """``cli(*argv)``: run `recorder *argv` in this process."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self._capsys = capsys

    def __call__(self, *argv: str | os.PathLike[str]) -> Ran:
        try:
            code = main([os.fspath(a) for a in argv])
        except SystemExit as e:  # argparse's refusals; the console script exits the same
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
        out, err = self._capsys.readouterr()
        return Ran(code, out, err)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    """Run `recorder` commands in-process (see the module's docstring)."""
    return Cli(capsys)


def parse(*argv: str) -> argparse.Namespace:
    """``argv`` parsed by main's parser (raises ``SystemExit`` where it refuses)."""
    return build_parser().parse_args(list(argv))
