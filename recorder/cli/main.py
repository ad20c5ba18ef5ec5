"""Entry point of the `recorder` console script: parse, dispatch, exit code."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from recorder import __version__
from recorder.cli import (
    audit,
    budgets,
    db,
    demo,
    prices,
    proxy,
    reconcile,
    render,
    replay,
    reprice,
    sessions,
    simulate,
    top,
)
from recorder.core.errors import RecorderError


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    parser = _Parser(
        prog="recorder",
        description="Observability and metering recorder for LLM API streaming traffic.",
    )
    parser.add_argument("--version", action="version", version=f"recorder {__version__}")
    # (its parsers are _Parsers: argparse makes a subcommand's parser of the parent's class)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    proxy.add_parser(sub)
    sessions.add_parser(sub)
    audit.add_parser(sub)
    reconcile.add_parser(sub)
    reprice.add_parser(sub)
    prices.add_parser(sub)
    demo.add_parser(sub)
    replay.add_parser(sub)
    simulate.add_parser(sub)
    db.add_parser(sub)
    top.add_parser(sub)
    budgets.add_parser(sub)
    return parser


class _Parser(argparse.ArgumentParser):
    """A parser that records itself as a default: after parsing, the deepest one
    given is the one whose usage fits an unrecognized argument. Its subcommands'
    parsers are of its class (argparse makes them so)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(_parser=self)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the process exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # the usage of the command they were meant for, not the top level's
        getattr(args, "_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        render.use_fit(render.Fit.from_args(args))
        return int(args.func(args))
    except RecorderError as e:
        # the one place a failure is said: one line, the (sub)command's name first
        print(f"{getattr(args, '_parser', parser).prog}: {describe(e)}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def describe(e: RecorderError) -> str:
    """The error's line: its message, then the commands it suggests, spelled as the
    user started the program."""
    text = str(e).strip() or type(e).__name__
    if "\n" in text:  # one line, whatever a lower layer put in it
        text = " ".join(line.strip() for line in text.splitlines() if line.strip())
    if e.suggest:
        text += " (run " + " or ".join(f"`{render.command(c)}`" for c in e.suggest) + ")"
    return text


if __name__ == "__main__":
    sys.exit(main())
