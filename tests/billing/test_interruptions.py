"""The price of interruptions (recorder.billing.interruptions), as a finance
engineer checks it: a chain of a cut attempt and two retries costs, to the cent and
beyond, what its rows say; sums over groups equal sums over streams for every
grouping (tags and upstreams included); what is and is not an attempt that did
not complete; the resent input priced at the retry's rates.

The chain's fields (``retry_of``, ``attempt``, ``request_fingerprint``, ``tags``)
are recorded by issue 32's attribution work; here they are set on the rows by the
kit (``chain_row``), as the store returns them once recorded."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import pytest

from recorder.billing import audit, interruptions
from recorder.core.money import ZERO
from recorder.core.record import INTERRUPTED_OUTCOMES
from tests.kit.prices import V1, expected_cost, prices
from tests.kit.records import (
    REFUSED,
    UPSTREAMS,
    chain_row,
    random_records,
    rec,
    retry_chain,
)

TABLE = prices(V1)
CENT = Decimal("0.01")


def cents(value: Decimal) -> Decimal:
    return value.quantize(CENT, rounding=ROUND_HALF_EVEN)


def test_a_cut_attempt_and_two_retries_cost_what_their_rows_say() -> None:
    chain = retry_chain()
    _cut, retry, done = chain
    df = audit.frame(chain, interruptions.COLUMNS)
    (group,) = interruptions.aggregate(df, (), TABLE)
    costs = [Decimal(r["cost_usd"]) for r in chain]
    wasted = costs[0] + costs[1]
    # what the interruptions added to the bill: the two attempts that did not
    # complete, exactly (and so to the cent)
    assert group["interruption_cost_usd"] == wasted
    assert cents(group["interruption_cost_usd"]) == cents(wasted)
    assert group["cost_usd"] == sum(costs, ZERO)
    assert group["interrupted_attempts"] == 2
    # which of it is reported, which estimated: the cut attempt's usage was
    # estimated, the error's partly (its output): both are estimates
    assert group["estimated_interruption_cost_usd"] == wasted
    assert group["reported_interruption_cost_usd"] == ZERO
    # the two retries sent the whole input again, priced at their rates
    assert group["retries"] == 2
    assert group["resent_input_tokens"] == retry["input_tokens"] + done["input_tokens"]
    resent = sum(
        (expected_cost(V1, "gpt-4o", r["input_tokens"], 0) or ZERO for r in (retry, done)), ZERO
    )
    assert group["resent_input_cost_usd"] == resent
    assert group["interruption_share"] == (wasted / sum(costs, ZERO)).quantize(
        Decimal("0.000001"), rounding=ROUND_HALF_EVEN
    )
    # money is Decimal all the way: a float sum of these rows drifts
    assert all(isinstance(group[m], Decimal) for m in interruptions.MONEY_METRICS)
    assert interruptions.totals([group]) == group


def test_the_totals_of_several_chains_are_the_sum_of_their_rows() -> None:
    rows = [*retry_chain("fp:1"), *retry_chain("fp:2", model="claude-x")]
    rows += [chain_row(rec(cost_usd="0.100000000001"))]  # a completed stream of its own
    df = audit.frame(rows, interruptions.COLUMNS)
    groups = interruptions.aggregate(df, ("model",), TABLE)
    total = interruptions.totals(groups)
    cut = [r for r in rows if r["outcome"] != "completed"]
    assert total["interruption_cost_usd"] == sum((Decimal(r["cost_usd"]) for r in cut), ZERO)
    assert total["cost_usd"] == sum((Decimal(r["cost_usd"]) for r in rows), ZERO)
    assert total["retries"] == 4
    assert [g["model"] for g in groups] == ["claude-x", "gpt-4o"]


@pytest.mark.parametrize(
    ("outcome", "status", "counts"),
    [
        ("completed", 200, False),
        ("incomplete", 200, False),
        ("error", 200, True),
        ("upstream_disconnect", 200, True),
        ("client_disconnect", 200, True),
        ("truncated", 200, True),
        ("http_error", 429, True),
        ("http_error", 500, True),
        ("http_error", 529, True),
        ("http_error", 400, False),
        ("http_error", 401, False),
        ("http_error", None, False),
    ],
)
def test_what_an_attempt_that_did_not_complete_is(
    outcome: str, status: int | None, counts: bool
) -> None:
    refused = REFUSED if outcome == "http_error" else {}
    record = rec(
        outcome=outcome,
        interrupted=outcome in INTERRUPTED_OUTCOMES,
        http_status=status,
        **{k: v for k, v in refused.items() if k != "outcome"},
    )
    figures = interruptions.stream_figures(chain_row(record), TABLE)
    assert figures["interrupted_attempts"] == int(counts)
    # a refusal is never billed: it counts, and costs nothing
    expected = Decimal(record.cost_usd) if counts and record.cost_usd else ZERO
    assert figures["interruption_cost_usd"] == expected


def test_an_unpriced_cut_attempt_is_counted_not_costed() -> None:
    record = rec(
        outcome="upstream_disconnect",
        interrupted=True,
        cost_usd=None,
        price_version=None,
        usage_source="estimated",
    )
    figures = interruptions.stream_figures(chain_row(record), TABLE)
    assert figures["interrupted_attempts"] == 1
    assert figures["unpriced_interruptions"] == 1
    assert figures["interruption_cost_usd"] == ZERO


def test_resent_input_is_priced_at_the_retrys_rates_cache_included() -> None:
    table = prices(
        {
            "format": "recorder-prices/1",
            "version": "t",
            "models": {
                "m": {
                    "input": "0.000002",
                    "output": "0.00001",
                    "cache_read": "0.0000002",
                    "as_of": "2026-01-01",
                }
            },
        }
    )
    retry = rec(model="m", input_tokens=1000, cache_read_tokens=800, output_tokens=50)
    figures = interruptions.stream_figures(chain_row(retry, retry_of="x", attempt=2), table)
    assert figures["resent_input_tokens"] == 1000
    # 200 uncached at the input rate, 800 read from the cache at its rate; no output
    assert figures["resent_input_cost_usd"] == Decimal("0.000560000000")
    # a retry the table cannot price still counts its tokens
    stranger = rec(model="nobody-prices-me", input_tokens=70)
    figures = interruptions.stream_figures(chain_row(stranger, retry_of="x"), table)
    assert (figures["resent_input_tokens"], figures["resent_input_cost_usd"]) == (70, ZERO)


def test_without_retry_chains_the_rest_still_adds_up() -> None:
    """Rows recorded before retry chains (no ``retry_of``): no retries, and the
    attempts that did not complete still cost what they cost."""
    records = random_records(random.Random(5), 200)
    df = audit.frame((r.to_dict() for r in records), interruptions.COLUMNS)
    (group,) = interruptions.aggregate(df, (), TABLE)
    assert group["retries"] == 0 and group["resent_input_cost_usd"] == ZERO
    cut = [r for r in records if r.interrupted]
    assert group["interrupted_attempts"] == len(cut)
    assert group["interruption_cost_usd"] == sum(
        (Decimal(r.cost_usd) for r in cut if r.cost_usd), ZERO
    )


# -- every grouping ---------------------------------------------------------------


def chained_random_rows(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Random streams (every outcome, source, unknown), a third of them retries
    of an earlier one, and tags on some."""
    records = random_records(rng, n)
    rows: list[dict[str, Any]] = []
    for i, record in enumerate(records):
        retry_of = records[rng.randrange(i)].id if i and rng.random() < 0.33 else None
        team = rng.choice([None, "search", "ads"])
        tags = {"team": team, "feature": "summarise"} if team else None
        rows.append(chain_row(record, retry_of=retry_of, attempt=2 if retry_of else 1, tags=tags))
    return rows


def brute_force(
    rows: Sequence[Mapping[str, Any]], by: Sequence[str]
) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The interruption figures the slow, obvious way."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = []
        for k in by:
            if k.startswith("tag:"):
                key.append((row.get("tags") or {}).get(k[4:]))
            elif k == "day":
                key.append(row["started_at"][:10])
            elif k == "hour":
                key.append(row["started_at"][:13] + ":00Z")
            else:
                key.append(row[audit.KEY_COLUMNS[k]])
        g = out.setdefault(tuple(key), dict.fromkeys(interruptions.SUMMED, 0))
        cost = Decimal(row["cost_usd"]) if row["cost_usd"] else ZERO
        cut = row["outcome"] in INTERRUPTED_OUTCOMES
        g["requests"] += 1
        g["cost_usd"] += cost
        g["interrupted_attempts"] += cut
        g["interruption_cost_usd"] += cost if cut else 0
        g["retries"] += row["retry_of"] is not None
        if row["retry_of"] is not None:
            g["resent_input_tokens"] += row["input_tokens"] or 0
            model = row["model"] or ""
            g["resent_input_cost_usd"] += expected_cost(V1, model, row["input_tokens"] or 0, 0) or 0
    return out


GROUPINGS = [
    (),
    ("day",),
    ("model",),
    ("upstream",),
    ("tag:team",),
    ("day", "model", "upstream", "tag:team"),
    ("tag:feature", "outcome"),
    ("key", "project", "endpoint", "hour"),
]


@pytest.mark.parametrize("seed", [1, 2])
def test_group_sums_equal_row_sums_for_every_grouping(seed: int) -> None:
    rows = chained_random_rows(random.Random(seed), 250)
    assert {r["upstream"] for r in rows} == set(UPSTREAMS)
    df = audit.frame(rows, interruptions.COLUMNS)
    everything = interruptions.totals(interruptions.aggregate(df, (), TABLE))
    for by in GROUPINGS:
        groups = interruptions.aggregate(df, by, TABLE)
        assert list(groups[0]) == [*by, *interruptions.METRICS]
        expected = brute_force(rows, by)
        assert len(groups) == len(expected), by
        for g in groups:
            want = expected[tuple(g[k] for k in by)]
            for name in (
                "requests",
                "cost_usd",
                "interrupted_attempts",
                "interruption_cost_usd",
                "retries",
                "resent_input_tokens",
                "resent_input_cost_usd",
            ):
                assert g[name] == want[name], (by, name)
            assert (
                g["reported_interruption_cost_usd"] + g["estimated_interruption_cost_usd"]
                == g["interruption_cost_usd"]
            )
            assert g["interruption_share"] == audit.share(g["interruption_cost_usd"], g["cost_usd"])
        assert interruptions.totals(groups) == everything, by


def test_a_tag_missing_from_a_stream_groups_as_unknown_and_sorts_last() -> None:
    rows = [
        chain_row(rec(), tags={"team": "search"}),
        chain_row(rec()),
        chain_row(rec(), tags={"feature": "x"}),
        chain_row(rec(), tags={"team": "ads"}),
    ]
    df = audit.frame(rows, interruptions.COLUMNS)
    groups = interruptions.aggregate(df, ("tag:team",), TABLE)
    assert [(g["tag:team"], g["requests"]) for g in groups] == [
        ("ads", 1),
        ("search", 1),
        (None, 2),
    ]


def test_a_share_without_spend_is_unknown() -> None:
    assert audit.share(ZERO, ZERO) is None
    assert audit.share(Decimal(1), Decimal(3)) == Decimal("0.333333")


def test_the_demos_summary_is_the_aggregates_totals() -> None:
    rows = chained_random_rows(random.Random(9), 120)
    df = audit.frame(rows, interruptions.COLUMNS)
    assert interruptions.summary(rows, TABLE) == interruptions.totals(
        interruptions.aggregate(df, ("model",), TABLE)
    )
