"""`recorder prices`: the price table in use, and the models it does not price.

- ``list``: every model of the table (the shipped one, overlaid with
  ``--prices FILE``): rates per million tokens, the tiers it prices, as of
  when and from which source;
- ``show MODEL``: the entry a model name resolves to, every rate and tier;
- ``missing [--since TIME]``: the models recorded without a price, by service
  tier and reason, since when, and whether the table in use would price them
  now (then `recorder reprice` fills their costs);
- ``import LITELLM.json -o overlay.json``: LiteLLM's table as an overlay in the
  project's format, for ``--prices``; the cost fields it does not read are named.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import sys
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from recorder.cli.db import CliError, add_db_option, db_url
from recorder.cli.render import add_format_option, default_format, emit
from recorder.cli.subcommands import Subcommands
from recorder.core.price_files import dump_entry, dump_prices, load_price_file, load_prices
from recorder.core.pricing import (
    PriceEntry,
    PriceTable,
    PriceTableError,
    Unpriced,
    tier_rates,
    unpriced_kind,
)
from recorder.store.models import format_started_at
from recorder.store.queries import parse_when
from recorder.store.reading import reading_store

FORMATS = ("table", "json", "csv")
_MILLION = Decimal(1_000_000)
# what the proxy taps: the providers an import keeps unless told otherwise
DEFAULT_PROVIDERS = "openai,anthropic"


def add_parser(sub: Subcommands) -> None:
    """Register the `prices` command and its subcommands."""
    p = sub.add_parser(
        "prices",
        help="the price table in use, the models it does not price, LiteLLM imports",
        description="Show the price table (the shipped one, overlaid with --prices FILE), "
        "list the recorded models without a price, or turn LiteLLM's table into an overlay.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)

    ls = verbs.add_parser("list", help="every model the table prices")
    _table_options(ls)
    ls.set_defaults(func=run)

    show = verbs.add_parser("show", help="the entry a model name resolves to, every rate")
    show.add_argument("model", metavar="MODEL")
    _table_options(show)
    show.set_defaults(func=run)

    missing = verbs.add_parser(
        "missing", help="recorded models without a price, since when, and why"
    )
    missing.add_argument(
        "--since", metavar="TIME", help="streams started at or after (7d, 2026-11-01)"
    )
    add_db_option(missing)
    _table_options(missing)
    missing.set_defaults(func=run)

    imp = verbs.add_parser("import", help="LiteLLM's table as an overlay for --prices")
    imp.add_argument("source", metavar="LITELLM.json", help="model_prices_and_context_window.json")
    imp.add_argument("-o", "--output", required=True, metavar="FILE", help="the overlay to write")
    imp.add_argument(
        "--provider",
        default=DEFAULT_PROVIDERS,
        help="keep these litellm_provider values, comma-separated, or 'all' "
        f"(default: {DEFAULT_PROVIDERS})",
    )
    imp.add_argument(
        "--model",
        action="append",
        metavar="GLOB",
        help="keep only models matching this pattern (repeatable), e.g. 'gpt-6*'",
    )
    imp.set_defaults(func=run)


def _table_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prices",
        metavar="FILE",
        help="overlay on the shipped table (as `recorder proxy` takes it)",
    )
    add_format_option(p, FORMATS)


def run(args: argparse.Namespace) -> int:
    """Execute `recorder prices VERB`."""
    if args.verb == "import":
        return _import(args)
    table = load_price_file(args.prices)
    if args.verb == "list":
        return _list(args, table)
    if args.verb == "show":
        return _show(args, table)
    return _missing(args, table)


def _per_m(value: Decimal | None) -> str | None:
    """USD per million tokens, without trailing zeros."""
    if value is None:
        return None
    text = f"{(value * _MILLION).normalize():f}"
    return text


def _tier_words(entry: PriceEntry) -> str:
    words = []
    for name, tier in sorted(entry.tiers.items()):
        if tier.same_as is not None:
            words.append(f"{name}={tier.same_as}")
        elif tier.multiplier is not None:
            words.append(f"{name}=x{tier.multiplier.normalize():f}")
        else:
            words.append(name)
    return " ".join(words)


def _row(table: PriceTable, entry: PriceEntry) -> dict[str, Any]:
    r = entry.rates
    return {
        "model": entry.key,
        "provider": entry.provider,
        "input_per_m": _per_m(r.input),
        "cached_input_per_m": _per_m(r.cache_read),
        "cache_write_per_m": _per_m(r.cache_write),
        "output_per_m": _per_m(r.output),
        "tiers": _tier_words(entry),
        "as_of": entry.as_of,
        "table": table.origin(entry.key),
        "source": entry.source,
    }


def _list(args: argparse.Namespace, table: PriceTable) -> int:
    rows = [_row(table, table.entries[k]) for k in sorted(table.entries)]
    fmt = default_format(args.format)
    if fmt == "table":
        cols = ["model", "input_per_m", "cached_input_per_m", "output_per_m", "tiers", "as_of"]
        emit(rows, fmt, columns=cols)
        print(f"{len(rows)} models, table {table.version}; USD per million tokens", file=sys.stderr)
    else:
        emit(rows, fmt)
    return 0


def _show(args: argparse.Namespace, table: PriceTable) -> int:
    entry = table.resolve(args.model)
    if entry is None:
        raise CliError(f"no price for {args.model!r} in table {table.version}", 1)
    doc = {"model": args.model, "entry": entry.key, "table": table.origin(entry.key)}
    doc.update(dump_entry(entry))
    fmt = default_format(args.format)
    if fmt == "json":
        emit(doc, "json", single=True)
        return 0
    # a table: the rates per million tokens, then one line per tier
    summary = {k: v for k, v in _row(table, entry).items() if k != "model"}
    summary = {"model": args.model, "entry": entry.key, **summary}
    if entry.long_context:
        summary["long_context_above"] = ", ".join(
            f"{lc.above_input_tokens} tokens: input {_per_m(lc.rates.input)}, "
            f"output {_per_m(lc.rates.output)}"
            for lc in entry.long_context
        )
    if entry.rates.cache_write_1h is not None:
        summary["cache_write_1h_per_m"] = _per_m(entry.rates.cache_write_1h)
    for hours, rate in entry.rates.cache_write_hours:
        summary[f"cache_write_{hours}h_per_m"] = _per_m(rate)
    for name in sorted(entry.tiers):
        try:
            rates, _, _ = tier_rates(entry, name)
        except Unpriced:  # pragma: no cover - a loaded table's tiers resolve
            continue
        summary[f"tier {name}"] = (
            f"input {_per_m(rates.input)}, cached {_per_m(rates.cache_read)}, "
            f"output {_per_m(rates.output)} per M"
        )
    if entry.server_tools:
        summary["server_tools"] = ", ".join(
            f"{k} {v}" for k, v in sorted(entry.server_tools.items())
        )
    emit(summary, fmt, single=True)
    return 0


def _priced_now(table: PriceTable, model: str | None, tier: str | None) -> bool:
    entry = table.resolve(model)
    if entry is None:
        return False
    try:
        tier_rates(entry, tier)
    except Unpriced:
        return False
    return True


def _missing(args: argparse.Namespace, table: PriceTable) -> int:
    from recorder.store.unpriced import unpriced_models

    since = parse_when(args.since) if args.since else None
    with reading_store(db_url(args)) as engine:
        found = unpriced_models(engine, since)
    rows = [
        {
            "model": u.model,
            "service_tier": u.service_tier,
            "missing": unpriced_kind(u.reason) or "unknown",
            "streams": u.streams,
            "first_seen": format_started_at(u.first_seen),
            "last_seen": format_started_at(u.last_seen),
            "priced_now": _priced_now(table, u.model, u.service_tier),
            "reason": u.reason,
        }
        for u in found
    ]
    fmt = default_format(args.format)
    emit(rows, fmt, columns=list(rows[0]) if rows else ["model", "streams", "first_seen"])
    if fmt == "table":
        if not rows:
            print("every recorded stream with known usage has a cost", file=sys.stderr)
        elif any(r["priced_now"] for r in rows):
            print(
                "priced_now: the table in use prices it; `recorder reprice --since ...` "
                "(with the same --prices) fills those costs",
                file=sys.stderr,
            )
    return 0


def _import(args: argparse.Namespace) -> int:
    source = Path(args.source)
    try:
        data = source.read_bytes()
    except OSError as e:
        raise CliError(f"{source}: {e.strerror or e}", 2) from None
    try:
        litellm = load_prices(data)
    except PriceTableError as e:
        raise CliError(f"{source}: {e}", 2) from None
    if litellm.source_format != "litellm":
        raise CliError(f"{source}: already in the project's format; use it with --prices", 2)
    providers = {p.strip() for p in args.provider.split(",") if p.strip()}
    patterns = [p.lower() for p in (args.model or [])]
    today = datetime.now(UTC).date().isoformat()
    digest = hashlib.sha256(data).hexdigest()[:12]
    kept: dict[str, PriceEntry] = {}
    for key, entry in litellm.entries.items():
        if "all" not in providers and entry.provider not in providers:
            continue
        if patterns and not any(fnmatch.fnmatchcase(key, p) for p in patterns):
            continue
        # dated the day of the import; the source is LiteLLM's own, else the file
        kept[key] = PriceEntry(
            key=entry.key,
            rates=entry.rates,
            provider=entry.provider,
            as_of=today,
            source=entry.source or f"LiteLLM model_prices_and_context_window.json ({source.name})",
            long_context=entry.long_context,
            tiers=entry.tiers,
            server_tools=entry.server_tools,
        )
    if not kept:
        raise CliError(
            f"{source}: no model matches --provider {args.provider} --model {patterns}", 1
        )
    note = (
        f"Imported on {today} from {source.name} (LiteLLM, sha256 {digest}) by "
        "`recorder prices import`: an overlay on the shipped table for --prices."
    )
    doc = dump_prices(kept, f"litellm-{digest}", note)
    out = Path(args.output)
    try:
        out.write_text(json.dumps(doc, indent=2) + "\n")
    except OSError as e:
        raise CliError(f"{out}: {e.strerror or e}", 2) from None
    print(f"wrote {len(kept)} models to {out} (table litellm-{digest})", file=sys.stderr)
    if litellm.unread:
        fields = ", ".join(f"{k} ({n})" for k, n in sorted(litellm.unread.items()))
        print(
            f"not read (no such figure in a record; models having it): {fields}",
            file=sys.stderr,
        )
    return 0
