"""Reconciliation (recorder.billing): the export formats, the mapping file, the
tolerance, the comparison; and audit, reconcile and reprice on a database
filled with real traffic through the proxy and the simulator (completed, cut,
errored, refused and non-streamed requests)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from recorder.billing import audit
from recorder.billing.comparison import Tolerance, reconcile
from recorder.billing.export_csv import read_export
from recorder.billing.export_model import (
    FIGURES,
    Export,
    ExportError,
    export_period,
    merge_exports,
    parse_day,
)
from recorder.billing.id_mapping import IdMapping, read_mapping
from recorder.billing.reconcile_report import result_document
from recorder.billing.recorded_streams import Stream
from recorder.core.keys import fingerprint
from recorder.core.price_files import load_prices, shipped_prices
from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, run_in_thread
from recorder.store.audit_sql import read_frame
from recorder.store.engine import make_engine
from recorder.store.migrate import upgrade
from recorder.store.queries import SessionFilter, list_sessions
from recorder.store.reprice_sql import reprice
from recorder.store.writer import SqlSink
from tests.kit.billing import check_every_grouping, groupings
from tests.kit.cli import Cli
from tests.kit.ports import free_port
from tests.kit.proxy_thread import running_proxy
from tests.kit.records import REFUSED

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "usage_exports"
Q12 = Decimal("0.000000000001")
KEY_A = fingerprint("sk-audit-A-0001", b"e2e-secret")  # the harness's key secret
KEY_B = fingerprint("sk-ant-audit-B-0002", b"e2e-secret")


def read(name: str) -> Export:
    return read_export((EXPORTS / name).read_text(encoding="utf-8"), source=name)


# -- formats ----------------------------------------------------------------------


def test_recorder_format() -> None:
    e = read("recorder.csv")
    assert e.format == "recorder" and e.providers == frozenset()
    assert e.figures == frozenset(FIGURES)
    first = e.rows[0]
    assert (first.day, first.model, first.key) == ("2026-04-01", "gpt-4o", "…1111:aaaaaaaaaaaa")
    assert first.figures["cost_usd"] == Decimal("0.006000000000")
    assert first.figures["requests"] == 2 and first.figures["input_tokens"] == 1200


def test_openai_usage_export() -> None:
    e = read("openai_usage_completions.csv")
    assert e.format == "openai-usage" and e.providers == {"openai"}
    assert e.figures == {"requests", "input_tokens", "output_tokens", "cache_read_tokens"}
    # the batch line is kept, marked: batch jobs never pass a proxy, reported apart
    assert [r.batch for r in e.rows] == [False, True, False]
    r = e.rows[0]
    assert (r.day, r.model, r.key, r.project) == (
        "2026-04-01",
        "gpt-4o-2024-08-06",
        "key_AAA",
        "proj_abc",
    )
    assert r.figures == {
        "input_tokens": 1300,
        "output_tokens": 320,
        "requests": 3,
        "cache_read_tokens": 200,
    }


def test_openai_costs_export() -> None:
    e = read("openai_costs.csv")
    assert e.format == "openai-costs" and e.figures == {"cost_usd"}
    assert [r.model for r in e.rows] == ["gpt-4o-2024-08-06"] * 2
    assert sum((r.figures["cost_usd"] for r in e.rows), Decimal(0)) == Decimal("0.00645")
    assert not e.has_key and e.has_project


def test_openai_legacy_export() -> None:
    e = read("openai_legacy_activity.csv")
    assert e.format == "openai-legacy"
    assert [(r.day, r.model, r.figures["input_tokens"]) for r in e.rows] == [
        ("2026-04-01", "gpt-4o-2024-08-06", 1200),
        ("2026-04-01", "gpt-4o-2024-08-06", 100),
    ]


def test_anthropic_usage_export_adds_up_the_input() -> None:
    e = read("anthropic_usage_report.csv")
    assert e.format == "anthropic-usage" and e.providers == {"anthropic"}
    (r,) = e.rows
    # uncached + cache reads + cache writes (5 m and 1 h): all prompt tokens, as recorded
    assert r.figures == {
        "input_tokens": 1000 + 4000 + 300 + 200,
        "output_tokens": 700,
        "cache_read_tokens": 4000,
        "cache_write_tokens": 500,
    }
    assert (r.key, r.project) == ("apikey_01BBB", "wrkspc_01")


def test_anthropic_cost_report_is_in_cents() -> None:
    e = read("anthropic_cost_report.csv")
    assert e.format == "anthropic-cost" and e.figures == {"cost_usd"}
    assert [r.figures["cost_usd"] for r in e.rows] == [Decimal("0.003"), Decimal("0.0105")]


def test_unknown_columns_are_refused() -> None:
    with pytest.raises(ExportError, match="not a usage export"):
        read_export("when,what\n2026-01-01,x\n", source="mystery.csv")
    with pytest.raises(ExportError, match="empty"):
        read_export("", source="empty.csv")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("date,model,input_tokens\n2026-13-01,m,1\n", "line 2"),
        ("date,model,input_tokens\n2026-01-01,m,1.5\n", "input_tokens"),
        ("date,model,cost_usd\n2026-01-01,m,abc\n", "cost_usd"),
        ("date,model,cost_usd,currency\n2026-01-01,m,1,EUR\n", "EUR"),
    ],
)
def test_bad_cells_are_named(text: str, where: str) -> None:
    with pytest.raises(ExportError, match=where):
        read_export(text, source="x.csv")


def test_headers_are_matched_loosely() -> None:
    text = "\ufeffDate, Model ,Input Tokens,OUTPUT_TOKENS\n2026-01-02,m,5,6\n\n"
    e = read_export(text)
    assert e.format == "recorder" and e.rows[0].figures == {"input_tokens": 5, "output_tokens": 6}


@pytest.mark.parametrize(
    ("value", "day"),
    [
        ("2026-04-01", "2026-04-01"),
        ("2026-04-01T23:30:00Z", "2026-04-01"),
        ("2026-04-01T23:30:00-02:00", "2026-04-02"),
        ("2026-04-01 10:00:00 UTC", "2026-04-01"),
        ("1775001600", "2026-04-01"),
        ("1775001600.0", "2026-04-01"),
    ],
)
def test_parse_day(value: str, day: str) -> None:
    assert parse_day(value, "here") == day


def test_mapping_json_and_csv_agree() -> None:
    a = read_mapping((EXPORTS / "mapping.json").read_text(encoding="utf-8"))
    b = read_mapping((EXPORTS / "mapping.csv").read_text(encoding="utf-8"))
    assert a == b
    assert a.key("key_AAA") == "…1111:aaaaaaaaaaaa" and a.key("other") == "other"
    assert a.project("wrkspc_01") == "workspace-one"


@pytest.mark.parametrize(
    "text",
    [
        '{"users": {}}',
        '{"keys": {"a": 1}}',
        "{not json",
        "a,b\n1,2\n",
        "kind,provider_id,recorded_as\nuser,a,b\n",
    ],
)
def test_bad_mapping(text: str) -> None:
    with pytest.raises(ExportError):
        read_mapping(text)


# -- comparison -------------------------------------------------------------------


def test_tolerance_needs_both_allowances_exceeded() -> None:
    t = Tolerance(Decimal("0.02"), tokens=5, usd=Decimal("0.01"))
    assert not t.exceeded("output_tokens", 100, 102)  # within 5 tokens
    assert t.exceeded("output_tokens", 100, 106)  # beyond 5 tokens and beyond 2 %
    assert not t.exceeded("output_tokens", 1000, 1015)  # beyond 5 tokens, within 2 %
    assert t.exceeded("output_tokens", 1000, 1025)
    assert t.exceeded("input_tokens", 6, 0)  # either side may be the larger
    assert not t.exceeded("cost_usd", Decimal("0.001"), Decimal("0.005"))  # under a cent
    assert t.exceeded("cost_usd", Decimal("1.00"), Decimal("1.50"))
    assert Tolerance(Decimal(0), 0, Decimal(0)).exceeded("cost_usd", Decimal(0), Q12)
    assert not Tolerance(Decimal(0), 0, Decimal(0)).exceeded("requests", 3, 3)


def stream(ident: str, **kw: Any) -> Stream:
    values: dict[str, Any] = dict(
        id=ident,
        started_at=datetime(2026, 4, 1, 12, tzinfo=UTC),
        provider="openai",
        model="gpt-4o-2024-08-06",
        api_key_id="…1111:aaaaaaaaaaaa",
        project="proj_abc",
        outcome="completed",
        interrupted=False,
        input_tokens=100,
        output_tokens=10,
        cache_read_tokens=0,
        cache_write_tokens=None,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd=Decimal("0.00035"),
        price_version="v",
    )
    values.update(kw)
    return Stream(**values)


def test_reconcile_names_the_streams_that_explain_a_difference() -> None:
    export = read_export(
        "date,model,api_key_id,input_tokens,output_tokens,requests\n"
        "2026-04-01,gpt-4o,key_AAA,300,70,3\n"
        "2026-04-01,gpt-4o-mini,key_AAA,100,10,1\n"
        "2026-04-02,gpt-4o,key_AAA,50,5,1\n"
    )
    mapping = IdMapping(keys={"key_AAA": "…1111:aaaaaaaaaaaa"})
    streams = [
        stream("s1"),
        stream("s2"),
        stream(  # cut: billed in full upstream, estimated here
            "cut",
            outcome="upstream_disconnect",
            interrupted=True,
            output_tokens=4,
            output_source="estimated",
            usage_source="mixed",
        ),
        stream(  # refused: not billed anywhere
            "refused", **REFUSED
        ),
        stream("mini", model="gpt-4o-mini"),
        stream("elsewhere", api_key_id="…9999:ffffffffffff"),  # a key the export lacks
    ]
    result = reconcile(export, streams, mapping=mapping)
    assert result.by == "key"
    assert result.figures == ("requests", "input_tokens", "output_tokens")
    docs = result_document(result)
    by_group = {(d["day"], d["model"], d["key"]): d for d in docs}
    assert set(by_group) == {
        ("2026-04-01", "gpt-4o", "…1111:aaaaaaaaaaaa"),
        ("2026-04-01", "gpt-4o", "…9999:ffffffffffff"),
        ("2026-04-02", "gpt-4o", "…1111:aaaaaaaaaaaa"),
    }
    cut = by_group[("2026-04-01", "gpt-4o", "…1111:aaaaaaaaaaaa")]
    assert cut["recorded"] == {"requests": 3, "input_tokens": 300, "output_tokens": 24}
    assert cut["exported"] == {"requests": 3, "input_tokens": 300, "output_tokens": 70}
    assert cut["difference"] == {"requests": 0, "input_tokens": 0, "output_tokens": 46}
    assert cut["beyond_tolerance"] == ["output_tokens"]
    assert [(s["id"], s["why"]) for s in cut["streams"]] == [
        ("cut", "upstream_disconnect; output estimated"),
        ("refused", "http_error, not billed here"),
    ]
    stray = by_group[("2026-04-01", "gpt-4o", "…9999:ffffffffffff")]
    assert stray["in_export"] is False and stray["exported"]["requests"] == 0
    missing = by_group[("2026-04-02", "gpt-4o", "…1111:aaaaaaaaaaaa")]
    assert missing["recorded_streams"] == 0 and missing["difference"]["input_tokens"] == 50
    every = result_document(result, include_all=True)
    assert len(every) == 4  # the gpt-4o-mini group agrees
    assert next(d for d in every if d["model"] == "gpt-4o-mini")["beyond_tolerance"] == []


def test_models_match_without_snapshot_unless_exact() -> None:
    export = read_export("date,model,input_tokens\n2026-04-01,gpt-4o-2024-08-06,100\n")
    streams = [stream("a", model="gpt-4o")]
    assert reconcile(export, streams).differing == []
    assert len(reconcile(export, streams, exact_models=True).differing) == 2


def test_grouping_by_project_and_by_nothing() -> None:
    export = read("openai_costs.csv")
    streams = [stream("a", cost_usd=Decimal("0.0064")), stream("b", cost_usd=Decimal("0.00005"))]
    result = reconcile(export, streams, tolerance=Tolerance(usd=Decimal(0)))
    assert result.by == "project" and result.differing == []  # 0.00645 both sides
    flat = reconcile(export, streams, by="none", tolerance=Tolerance(usd=Decimal(0)))
    assert flat.by == "none" and [g.dim for g in flat.groups] == [None]
    doc = result_document(flat, include_all=True)[0]
    assert "key" not in doc and "project" not in doc
    assert doc["recorded"]["cost_usd"] == "0.006450000000"


def test_merged_exports_cover_the_union_of_figures() -> None:
    merged = merge_exports([read("openai_usage_completions.csv"), read("openai_costs.csv")])
    assert merged.figures == {
        "requests",
        "input_tokens",
        "output_tokens",
        "cache_read_tokens",
        "cost_usd",
    }
    assert len(merged.rows) == 5 and merged.providers == {"openai"}  # one of them batch


def test_export_period() -> None:
    period = export_period(read("openai_usage_completions.csv"))
    assert period == (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 4, 3, tzinfo=UTC))


# -- a database filled through the proxy ------------------------------------------

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
PROMPT = [{"role": "user", "content": "Say something about harmony."}]


@dataclass
class Simulated:
    url: str
    root: Path
    records: list[StreamRecord]  # as the proxy handed them to the sink
    sent: dict[str, SentRecord]  # the simulator's ground truth, by request id
    kinds: dict[str, str]  # request id -> what the test asked for


def _openai(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}", "openai-project": "proj_abc"}


def _anthropic(key: str) -> dict[str, str]:
    return {"x-api-key": key, "anthropic-version": "2023-06-01"}


# (kind, path, headers, body, fault)
TRAFFIC: list[tuple[str, str, dict[str, str], dict[str, Any], str]] = [
    (
        "completed",
        CHAT,
        _openai("sk-audit-A-0001"),
        {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}},
        "",
    ),
    (
        "completed",
        CHAT,
        _openai("sk-audit-A-0001"),
        {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}},
        "lang=ja",
    ),
    (
        "cut",
        CHAT,
        _openai("sk-audit-A-0001"),
        {"model": "gpt-4o", "stream": True, "stream_options": {"include_usage": True}},
        "rst=5",
    ),
    (
        "completed",
        CHAT,
        _openai("sk-audit-A-0001"),
        {"model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True}},
        "",
    ),
    (
        "refused",
        CHAT,
        _openai("sk-audit-A-0001"),
        {"model": "gpt-4o-mini", "stream": True},
        "status=429",
    ),
    (
        "completed",
        MESSAGES,
        _anthropic("sk-ant-audit-B-0002"),
        {"model": "claude-sonnet-4-5", "max_tokens": 400, "stream": True},
        "",
    ),
    (
        "errored",
        MESSAGES,
        _anthropic("sk-ant-audit-B-0002"),
        {"model": "claude-sonnet-4-5", "max_tokens": 400, "stream": True},
        "error=8",
    ),
    (
        "unstreamed",
        RESPONSES,
        {"authorization": "Bearer sk-ant-audit-B-0002"},
        {"model": "gpt-4o-mini", "stream": False},
        "",
    ),
]


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulated]:
    root = tmp_path_factory.mktemp("simulated")
    url = f"sqlite:///{root / 'recorder.db'}"
    upgrade(url)
    kinds: dict[str, str] = {}
    sql = SqlSink(url, root / "spool")
    with (
        run_in_thread() as sim,
        running_proxy(
            [f"reverse:{sim.url}@{free_port()}"], str(root / "mitmproxy"), also=sql
        ) as proxy,
    ):
        with httpx.Client(base_url=proxy.url(), timeout=20) as client:
            for kind, path, headers, body, fault in TRAFFIC:
                doc = dict(body)
                if path == RESPONSES:
                    doc["input"] = PROMPT[0]["content"]
                else:
                    doc["messages"] = PROMPT
                hdrs = dict(headers)
                if fault:
                    hdrs["x-sim-fault"] = fault
                try:
                    with client.stream("POST", path, json=doc, headers=hdrs) as r:
                        for _ in r.iter_bytes():
                            pass
                except httpx.HTTPError:
                    assert kind == "cut"
                last = sim.last()
                assert last is not None
                kinds[last.request_id] = kind
        records = proxy.sink.wait_for(len(TRAFFIC))
        sent = {rid: sim.wait_sent_blocking(rid) for rid in kinds}
    sql.close()
    assert sql.stats()["written"] == len(TRAFFIC)
    yield Simulated(url, root, records, sent, kinds)


def stored(sim: Simulated) -> list[StreamRecord]:
    engine = make_engine(sim.url)
    try:
        return list_sessions(engine, SessionFilter(limit=None))
    finally:
        engine.dispose()


def test_the_traffic_is_what_was_asked_for(simulated: Simulated) -> None:
    rows = {r.request_id: r for r in stored(simulated)}
    assert set(rows) == set(simulated.kinds)
    outcomes = {kind: [] for kind in simulated.kinds.values()}  # type: dict[str, list[str]]
    for rid, kind in simulated.kinds.items():
        outcomes[kind].append(rows[rid].outcome)
        assert rows[rid].outcome == simulated.sent[rid].outcome
    assert outcomes == {
        "completed": ["completed"] * 4,
        "cut": ["upstream_disconnect"],
        "refused": ["http_error"],
        "errored": ["error"],
        "unstreamed": ["completed"],
    }
    cut = next(r for r in rows.values() if r.outcome == "upstream_disconnect")
    assert cut.usage_source == "estimated" and cut.cost_usd is not None
    errored = next(r for r in rows.values() if r.outcome == "error")
    assert (errored.input_source, errored.output_source) == ("reported", "estimated")
    refused = next(r for r in rows.values() if r.outcome == "http_error")
    assert refused.usage_source == "none" and refused.cost_usd is None
    assert {r.api_key_id for r in rows.values()} == {KEY_A, KEY_B}


def test_audit_of_simulated_traffic(simulated: Simulated) -> None:
    records = stored(simulated)
    engine = make_engine(simulated.url)
    try:
        df = read_frame(engine, SessionFilter(limit=None))
    finally:
        engine.dispose()
    assert check_every_grouping(lambda by: audit.aggregate(df, by), records) == len(groupings())
    by_outcome = {g["outcome"]: g for g in audit.aggregate(df, ("outcome",))}
    assert {o: g["requests"] for o, g in by_outcome.items()} == {
        "completed": 5,
        "error": 1,
        "http_error": 1,
        "upstream_disconnect": 1,
    }
    (total,) = audit.aggregate(df, ())
    cut = next(r for r in records if r.outcome == "upstream_disconnect")
    errored = next(r for r in records if r.outcome == "error")
    assert total["interrupted_requests"] == 2
    assert total["interrupted_cost_usd"] == Decimal(cut.cost_usd or "") + Decimal(
        errored.cost_usd or ""
    )
    assert total["estimated_input_tokens"] == cut.input_tokens
    assert total["estimated_output_tokens"] == (cut.output_tokens or 0) + (
        errored.output_tokens or 0
    )
    assert total["estimated_cost_usd"] == total["interrupted_cost_usd"]  # the estimated ones
    assert total["unpriced_requests"] == 0  # the http_error has no usage: not unpriced
    by_key = {g["key"]: g for g in audit.aggregate(df, ("key",))}
    assert by_key[KEY_A]["requests"] == 5 and by_key[KEY_B]["requests"] == 3


def billed_export(sim: Simulated) -> str:
    """What the provider would bill, from the simulator's ground truth: a cut stream
    in full (the model generated it all), an errored one up to the error, a refused
    request not at all. The recorder's own format, keys as the provider names them."""
    rows = {r.request_id: r for r in stored(sim)}
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["date", "model", "api_key_id", "input_tokens", "output_tokens", "requests"])
    for rid, sent in sim.sent.items():
        if sent.outcome == "http_error":
            continue
        planned = sent.planned_usage or {}
        output = sent.output_tokens_sent if sent.outcome == "error" else planned["output_tokens"]
        rec = rows[rid]
        day = (rec.started_at or "")[:10]
        key = "key_A" if rec.api_key_id == KEY_A else "key_B"
        w.writerow([day, sent.model, key, planned["input_tokens"], output, 1])
    return out.getvalue()


def run_cli(cli: Cli, *argv: str) -> tuple[int, Any, str]:
    code, out, err = cli(*argv)
    return code, json.loads(out) if out.strip().startswith("[") else out, err


def test_reconcile_flags_the_cut_stream(simulated: Simulated, tmp_path: Path, cli: Cli) -> None:
    export = tmp_path / "billed.csv"
    export.write_text(billed_export(simulated), encoding="utf-8")
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"keys": {"key_A": KEY_A, "key_B": KEY_B}}), encoding="utf-8")
    code, docs, err = run_cli(
        cli,
        "reconcile",
        str(export),
        "--mapping",
        str(mapping),
        "--db",
        simulated.url,
        "--format",
        "json",
    )
    assert code == 1, err
    assert "beyond tolerance" in err
    rows = {r.request_id: r for r in stored(simulated)}
    cut = next(r for r in rows.values() if r.outcome == "upstream_disconnect")
    errored = next(r for r in rows.values() if r.outcome == "error")
    groups = {(d["model"], d["key"]): d for d in docs}
    g = groups[("gpt-4o", KEY_A)]
    assert "output_tokens" in g["beyond_tolerance"]
    assert [s["id"] for s in g["streams"]] == [cut.id]
    assert "upstream_disconnect" in g["streams"][0]["why"]
    assert "output estimated" in g["streams"][0]["why"]
    sent_cut = simulated.sent[cut.request_id or ""]
    planned_out = (sent_cut.planned_usage or {})["output_tokens"]
    assert g["difference"]["output_tokens"] == planned_out - (cut.output_tokens or 0)
    assert g["difference"]["requests"] == 0
    # the completed and the refused gpt-4o-mini requests agree with the bill
    assert ("gpt-4o-mini", KEY_A) not in groups
    # the non-streamed request reported its usage: no difference
    assert ("gpt-4o-mini", KEY_B) not in groups
    # the errored stream, if its estimate is off, is named
    if ("claude-sonnet-4-5", KEY_B) in groups:
        assert errored.id in [s["id"] for s in groups[("claude-sonnet-4-5", KEY_B)]["streams"]]


def test_reconcile_against_the_recorders_own_figures_is_clean(
    simulated: Simulated, tmp_path: Path, cli: Cli
) -> None:
    """An export holding exactly what was recorded (made with `recorder audit`)
    reconciles: exit 0, nothing printed."""
    code, groups, _ = run_cli(
        cli, "audit", "--db", simulated.url, "--by", "day,model,key", "--format", "json"
    )
    assert code == 0
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["date", "model", "api_key_id", "input_tokens", "output_tokens", "cost_usd"])
    assert groups[-1]["day"] == "TOTAL"
    for g in groups[:-1]:  # the last object is the totals
        w.writerow(
            [g["day"], g["model"], g["key"], g["input_tokens"], g["output_tokens"], g["cost_usd"]]
        )
    export = tmp_path / "ours.csv"
    export.write_text(out.getvalue(), encoding="utf-8")
    code, docs, err = run_cli(
        cli,
        "reconcile",
        str(export),
        "--db",
        simulated.url,
        "--format",
        "json",
        "--tolerance",
        "0",
        "--tolerance-usd",
        "0",
    )
    assert code == 0, err
    assert docs == []


def test_reprice_of_simulated_traffic(simulated: Simulated, tmp_path: Path) -> None:
    db = tmp_path / "copy.db"
    shutil.copyfile(simulated.root / "recorder.db", db)
    url = f"sqlite:///{db}"
    shipped = json.loads(
        (Path(__file__).resolve().parents[2] / "recorder" / "data" / "prices.json").read_text()
    )
    shipped["version"] = "sim-reprice"
    old_rate = Decimal(shipped["models"]["gpt-4o"]["output"])
    shipped["models"]["gpt-4o"]["output"] = str(old_rate * 2)
    table = load_prices(json.dumps(shipped))
    before = {r.id: r for r in list_sessions(make_engine(url), SessionFilter(limit=None))}
    engine = make_engine(url)
    try:
        report = reprice(
            engine, table, SessionFilter(since=datetime(2000, 1, 1, tzinfo=UTC), limit=None)
        ).as_dict()
        after = {r.id: r for r in list_sessions(engine, SessionFilter(limit=None))}
    finally:
        engine.dispose()
    assert report["rows"] == len(TRAFFIC)
    assert report["changed"] == len(TRAFFIC) - 1  # every priced row; not the http_error
    gpt = next(m for m in report["models"] if m["model"] == "gpt-4o")
    out_tokens = sum(r.output_tokens or 0 for r in before.values() if r.model == "gpt-4o")
    scale = Decimal(1) if shipped.get("unit", "token") == "token" else Decimal(1_000_000)
    assert Decimal(gpt["difference_usd"]) == out_tokens * old_rate / scale
    for m in report["models"]:
        if m["model"] != "gpt-4o":
            assert m["difference_usd"] == "0.000000000000", m
    assert Decimal(report["old_cost_usd"]) == sum(
        (Decimal(r.cost_usd) for r in before.values() if r.cost_usd), Decimal(0)
    )
    assert Decimal(report["new_cost_usd"]) == sum(
        (Decimal(r.cost_usd) for r in after.values() if r.cost_usd), Decimal(0)
    )
    for r in after.values():
        if r.cost_usd is not None:
            assert (r.price_version or "").startswith("sim-reprice:")
    assert shipped_prices().version != "sim-reprice"


# -- CSV lines of the wrong width ---------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("date,model,input_tokens\n2026-01-01,m\n", "x.csv line 2: 2 cells, the header has 3"),
        ("date,model,input_tokens\n2026-01-01,m,1,2\n", "x.csv line 2: 4 cells, the header has 3"),
        # a quoted cell over two lines: the next record starts on line 4
        (
            'date,model,input_tokens\n2026-01-01,"m\nx",1\n\n2026-01-02,m\n',
            "x.csv line 5: 2 cells",
        ),
    ],
)
def test_a_line_with_missing_or_extra_cells_is_refused(text: str, where: str) -> None:
    with pytest.raises(ExportError, match=where):
        read_export(text, source="x.csv")


def test_a_mapping_line_with_missing_cells_is_refused() -> None:
    with pytest.raises(ExportError, match=r"m\.csv line 3: 2 cells, the header has 3"):
        read_mapping("kind,provider_id,recorded_as\nkey,a,b\nkey,c\n", source="m.csv")


def test_anthropic_batch_rows_are_not_compared_with_proxied_traffic() -> None:
    export = read_export(
        "starting_at,ending_at,api_key_id,model,service_tier,uncached_input_tokens,output_tokens\n"
        "2026-04-01T00:00:00Z,2026-04-02T00:00:00Z,k,gpt-4o,standard,100,10\n"
        "2026-04-01T00:00:00Z,2026-04-02T00:00:00Z,k,gpt-4o,batch,5000,500\n"
    )
    result = reconcile(
        export,
        [stream("s", api_key_id="k")],
        tolerance=Tolerance(Decimal(0), 0, Decimal(0)),
    )
    assert result.differing == []
    assert result.batch_rows == 1
    assert result.batch_total == {"input_tokens": 5000, "output_tokens": 500}
