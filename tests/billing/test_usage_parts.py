"""Issue 30: a request billed in several priced parts (Anthropic's usage.iterations),
end to end: the real advisor stream metered, each iteration priced at its own
model's rates, then stored (SQLite and PostgreSQL) and read back by the audit and
the reconciliation, and counted by the metrics, each part under its own model.

The expected figures come from the capture read with plain ``json`` here, and the
expected costs from the test's own rates, the slow, obvious way.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from recorder.billing import audit
from recorder.billing.reprice import reprice_record
from recorder.core import StreamMeter, StreamRecord
from recorder.core.billing import complete_usage
from recorder.metrics import Metrics
from recorder.store.audit_sql import read_frame
from recorder.store.engine import make_engine
from recorder.store.queries import SessionFilter
from recorder.store.reconcile_sql import read_streams
from recorder.store.reprice_sql import reprice
from tests.kit import framing
from tests.kit.billing import store
from tests.kit.prices import prices

ADVISOR = (
    framing.FIXTURES
    / "payload-only"
    / "anthropic-messages"
    / "anthropic-advisor-20250301.1.chunks.txt"
)
EXECUTOR = "claude-sonnet-4-6"  # the request's model (message_start's)
Q = Decimal("0.000000000001")
RATES = {  # the test's own: per token, input and output
    EXECUTOR: (Decimal("0.000003"), Decimal("0.000015")),
    "claude-opus-4-7": (Decimal("0.000005"), Decimal("0.000025")),
}
TABLE = {
    "format": "recorder-prices/1",
    "version": "t1",
    "models": {
        name: {"input": str(i), "output": str(o), "as_of": "2026-01-01"}
        for name, (i, o) in RATES.items()
    },
}


def iterations() -> list[dict[str, Any]]:
    """The final usage's iterations, read from the capture with plain json."""
    for line in framing.payload_lines(ADVISOR):
        obj = json.loads(line)
        if obj.get("type") == "message_delta":
            found: list[dict[str, Any]] = obj["usage"]["iterations"]
            return found
    raise AssertionError("no message_delta")


def expected_parts() -> list[tuple[str, int, int, Decimal]]:
    """(model, input, output, cost) per iteration (no cache in this capture)."""
    out = []
    for it in iterations():
        assert it["cache_read_input_tokens"] == it["cache_creation_input_tokens"] == 0
        model = it.get("model") or EXECUTOR
        rate_in, rate_out = RATES[model]
        cost = (it["input_tokens"] * rate_in + it["output_tokens"] * rate_out).quantize(Q)
        out.append((model, it["input_tokens"], it["output_tokens"], cost))
    return out


def metered(table: dict[str, Any] = TABLE) -> StreamRecord:
    meter = StreamMeter("messages", record=StreamRecord(model=EXECUTOR))
    meter.feed(framing.load_body(ADVISOR))
    rec = meter.finish()
    rec.id = "0190c0de-0000-7000-8000-00000000a001"
    rec.started_at = "2026-12-01T10:00:00.000Z"
    rec.provider = "anthropic"
    rec.http_status = 200
    complete_usage(rec, meter.interpreter.obs, None, prices(table), None, learn=False)
    return rec


def by_model() -> dict[str, tuple[int, int, int, Decimal]]:
    """model -> (requests, input, output, cost), the slow way."""
    out: dict[str, tuple[int, int, int, Decimal]] = {}
    for i, (model, inp, outp, cost) in enumerate(expected_parts()):
        req, a, b, c = out.get(model, (0, 0, 0, Decimal(0)))
        own = model == EXECUTOR and not any(m == EXECUTOR for m, *_ in expected_parts()[:i])
        out[model] = (req + int(own), a + inp, b + outp, c + cost)
    return out


def test_every_iteration_is_billed_each_at_its_own_model() -> None:
    rec = metered()
    want = expected_parts()
    assert rec.input_tokens == sum(p[1] for p in want)
    assert rec.output_tokens == sum(p[2] for p in want)
    assert rec.input_source == rec.output_source == "reported"
    assert rec.usage_parts is not None
    got = [
        (p["model"] or EXECUTOR, p["input_tokens"], p["output_tokens"], Decimal(p["cost_usd"]))
        for p in rec.usage_parts
    ]
    assert got == want
    assert Decimal(rec.cost_usd or "nan") == sum(p[3] for p in want)
    # the advisor's part is priced by Opus's entry, the record by its own model's
    opus = [p for p in rec.usage_parts if p["model"] == "claude-opus-4-7"]
    assert len(opus) == 1 and ":claude-opus-4-7@" in opus[0]["price_version"]
    assert rec.price_version is not None and f":{EXECUTOR}@" in rec.price_version
    # priced as one request at the executor's rates, it would cost less
    rate_in, rate_out = RATES[EXECUTOR]
    flat = (rec.input_tokens * rate_in + rec.output_tokens * rate_out).quantize(Q)
    assert Decimal(rec.cost_usd or "nan") > flat


def test_a_part_without_a_price_leaves_the_cost_unknown() -> None:
    """A sum that leaves a part out is not the cost: null, with the part's reason."""
    table = {**TABLE, "models": {EXECUTOR: TABLE["models"][EXECUTOR]}}
    rec = metered(table)
    assert rec.cost_usd is None and rec.price_version is None
    assert rec.unpriced_reason == "no price for model 'claude-opus-4-7'"
    assert rec.usage_parts is not None
    own = [p for p in rec.usage_parts if p["model"] is None]
    assert all(p["cost_usd"] is not None for p in own)
    # the audit shows no cost in any part of it, and one unpriced request
    groups = audit.aggregate(audit.frame([rec.to_dict()]), ("model",))
    assert all(g["cost_usd"] == 0 for g in groups)
    assert audit.totals(groups)["unpriced_requests"] == 1
    assert audit.totals(groups)["input_tokens"] == rec.input_tokens


def check_audit(groups: list[dict[str, Any]]) -> None:
    want = by_model()
    assert {g["model"]: g for g in groups}.keys() == want.keys()
    for g in groups:
        req, inp, outp, cost = want[g["model"]]
        assert (g["requests"], g["input_tokens"], g["output_tokens"]) == (req, inp, outp)
        assert g["cost_usd"] == cost
    total = audit.totals(groups)
    assert total["requests"] == 1
    assert total["cost_usd"] == sum(p[3] for p in expected_parts())


def test_the_audit_counts_each_part_under_its_model_in_memory() -> None:
    rec = metered()
    check_audit(audit.aggregate(audit.frame([rec.to_dict()]), ("model",)))
    # grouped by nothing, the request is one and its cost whole
    (everything,) = audit.aggregate(audit.frame([rec.to_dict()]), ())
    assert everything["requests"] == 1
    assert everything["input_tokens"] == rec.input_tokens


def test_stored_parts_read_back_by_the_audit_and_reconcile(db_url: str, tmp_path: Path) -> None:
    rec = metered()
    store(db_url, tmp_path / "spool", [rec])
    engine = make_engine(db_url)
    try:
        df = read_frame(engine, SessionFilter(limit=None))
        when = datetime(2026, 12, 1, tzinfo=UTC)
        streams = read_streams(engine, when, when + timedelta(days=1))
    finally:
        engine.dispose()
    check_audit(audit.aggregate(df, ("model",)))
    summed: dict[str | None, tuple[int, int]] = {}
    for s in streams:
        req, inp = summed.get(s.model, (0, 0))
        summed[s.model] = (req + s.requests, inp + (s.input_tokens or 0))
    assert summed == {m: (req, inp) for m, (req, inp, _, _) in by_model().items()}
    assert sum((s.cost_usd or Decimal(0)) for s in streams) == Decimal(rec.cost_usd or "nan")


def test_metrics_count_each_part_under_its_model() -> None:
    rec = metered()
    registry = CollectorRegistry()
    Metrics(registry).observe(rec)
    get = registry.get_sample_value
    for model, (req, inp, outp, cost) in by_model().items():
        s = {"endpoint": "messages", "provider": "anthropic", "model": model}
        assert get("llm_tokens_total", {**s, "token_type": "input", "source": "reported"}) == inp
        assert get("llm_tokens_total", {**s, "token_type": "output", "source": "reported"}) == outp
        assert get("llm_cost_usd_total", {**s, "source": "reported"}) == pytest.approx(float(cost))
        assert get("llm_streams_total", {**s, "outcome": "completed"}) == (req or None)


def test_reprice_prices_each_part_again_and_stores_it(db_url: str, tmp_path: Path) -> None:
    """The advisor's model gets dearer: the record's cost and its advisor part's
    change in the store; the executor's parts keep theirs."""
    rec = metered()
    store(db_url, tmp_path / "spool", [rec])
    opus = "claude-opus-4-7"
    dearer = {**TABLE, "version": "t2", "models": {**TABLE["models"]}}
    dearer["models"][opus] = {**TABLE["models"][opus], "output": "0.00005"}
    engine = make_engine(db_url)
    try:
        report = reprice(engine, prices(dearer), SessionFilter(limit=None))
        df = read_frame(engine, SessionFilter(limit=None))
    finally:
        engine.dispose()
    assert report.total.changed == 1
    stored = audit.parts_of(df["usage_parts"][0])
    want = []
    for model, inp, outp, cost in expected_parts():
        if model == opus:
            cost = (inp * RATES[opus][0] + outp * Decimal("0.00005")).quantize(Q)
        want.append((model, cost))
    assert [(p["model"] or EXECUTOR, Decimal(p["cost_usd"])) for p in stored] == want
    assert df["cost_usd"][0] == sum(c for _, c in want)
    assert ":claude-opus-4-7@" in stored[1]["price_version"] and "t2:" in stored[1]["price_version"]


def test_pricing_a_copy_leaves_the_record_as_it_was() -> None:
    """reprice's dry run prices a copy: the record's parts must not change with it."""
    rec = metered()
    before = [dict(p) for p in rec.usage_parts or ()]
    reprice_record(rec, prices({**TABLE, "version": "t2"}))
    assert rec.usage_parts == before
