"""The root of every exception the recorder raises to its user.

A ``RecorderError`` is a failure the user can act on: ``recorder``'s ``main``
prints it as one line, ``recorder COMMAND: message``, and exits with its
``exit_code`` (1: something failed; 2: the command line was wrong, the way
argparse exits for a usage mistake). Each layer keeps its own classes (a price
table, a query, the store, an export) under this root, so a command never lists
the exceptions it may meet: what is not a ``RecorderError`` is a bug and keeps
its traceback.

``suggest`` names commands that would help (``("db upgrade",)``); the CLI prints
them in the form the user started the program with, which the lower layers do
not know.
"""

from __future__ import annotations

USAGE = 2
FAILURE = 1


class RecorderError(Exception):
    """A failure to report in one line; ``exit_code`` is the process's status."""

    exit_code: int = FAILURE
    suggest: tuple[str, ...] = ()

    def __init__(
        self, *args: object, exit_code: int | None = None, suggest: tuple[str, ...] = ()
    ) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code
        if suggest:
            self.suggest = suggest


class UsageError(RecorderError):
    """A mistake in what the user gave (an option, a time, a file's format): exit 2."""

    exit_code = USAGE
