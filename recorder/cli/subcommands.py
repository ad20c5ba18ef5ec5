"""What a command module needs of the parser it adds its subcommand to.

argparse names the type of ``add_subparsers()`` privately (``_SubParsersAction``);
this is the one method the commands call on it, so that they name nothing private.
"""

from __future__ import annotations

import argparse
from typing import Any, Protocol


class Subcommands(Protocol):
    """The object ``ArgumentParser.add_subparsers()`` returns, as the commands use it."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser: ...
