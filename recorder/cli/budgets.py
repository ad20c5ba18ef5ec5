"""`recorder budgets check FILE` / `recorder budgets rules FILE [--metrics-tag NAME]`:
the budgets file, checked, and the Prometheus rules that alert on the rate of
spend against it (`recorder audit --budgets FILE` says where each budget stands).

``rules`` prints the rule file on standard output (``-o FILE`` writes it), and
one line on standard error for each budget no metric can watch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from recorder.billing.budgets import Budget, BudgetError, load_budgets
from recorder.cli.db import CliError
from recorder.cli.subcommands import Subcommands
from recorder.core import money


def add_parser(sub: Subcommands) -> None:
    """Register the `budgets` command group."""
    p = sub.add_parser(
        "budgets",
        help="a budgets file (monthly amounts per tag, project or key): check it, make its"
        " Prometheus rules",
    )
    bsub = p.add_subparsers(dest="budgets_command", metavar="SUBCOMMAND", required=True)
    check = bsub.add_parser("check", help="read a budgets file and list its budgets")
    check.add_argument("file", metavar="FILE", help="the budgets file (budgets.yml)")
    check.set_defaults(func=run_check)
    rules = bsub.add_parser(
        "rules",
        help="Prometheus rules that alert on the rate of spend against each budget",
        description="Prometheus rules (recording rules and alerts) that judge the rate of"
        " spend against each budget the metrics can see: all spend, and a tag's spend when"
        " the proxies export that tag as a label (--metrics-tag).",
    )
    rules.add_argument("file", metavar="FILE", help="the budgets file (budgets.yml)")
    rules.add_argument(
        "--metrics-tag",
        metavar="NAME",
        help="the tag the proxies export as a label (their --metrics-tag): its budgets get rules",
    )
    rules.add_argument("--output", "-o", metavar="FILE", help="write the rules to FILE")
    rules.set_defaults(func=run_rules)


def read_budgets(path: str) -> list[Budget]:
    """The budgets of ``path``; a usage error (exit 2) in one line otherwise."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror or e}", 2) from None
    except UnicodeDecodeError:
        raise CliError(f"{path}: not UTF-8 text", 2) from None
    try:
        return load_budgets(text, path)
    except BudgetError as e:
        raise CliError(str(e), 2) from None


def run_check(args: argparse.Namespace) -> int:
    """Execute `recorder budgets check`."""
    for budget in read_budgets(args.file):
        print(f"{budget.name}: {budget.selector}, {money.display(budget.monthly_usd)} USD a month")
    return 0


def run_rules(args: argparse.Namespace) -> int:
    """Execute `recorder budgets rules`."""
    from recorder.metrics.budget_rules import rules

    budgets = read_budgets(args.file)
    try:
        text, skipped = rules(budgets, args.metrics_tag, source=args.file)
    except ValueError as e:
        raise CliError(str(e), 2) from None
    for left_out in skipped:
        print(
            f"recorder budgets rules: no rule for {left_out.budget.name!r}"
            f" ({left_out.budget.selector}): {left_out.why}",
            file=sys.stderr,
        )
    if len(skipped) == len(budgets):
        print(
            "recorder budgets rules: no budget the metrics can see: the file has no rule",
            file=sys.stderr,
        )
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot write {args.output}: {e.strerror or e}") from None
    return 0
