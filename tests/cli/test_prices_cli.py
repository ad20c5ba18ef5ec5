"""`recorder prices`: list, show, missing (SQLite and PostgreSQL), import."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorder.core.billing import apply_prices
from recorder.core.price_files import load_price_file, load_prices, shipped_prices
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.prices import LITELLM
from tests.kit.records import priced_record as record


def test_list_is_the_shipped_table_overlaid(cli: Cli, tmp_path: Path) -> None:
    code, out, _ = cli("prices", "list", "--format", "json")
    assert code == 0
    rows = {r["model"]: r for r in json.loads(out)}
    assert set(rows) == set(shipped_prices().entries)
    mine = tmp_path / "mine.json"
    mine.write_text(
        json.dumps({"version": "mine", "models": {"my-model": {"input": "1", "output": "2"}}})
    )
    code, out, _ = cli("prices", "list", "--prices", str(mine), "--format", "json")
    rows = {r["model"]: r for r in json.loads(out)}
    assert set(rows) == set(shipped_prices().entries) | {"my-model"}
    assert rows["my-model"]["table"] == "mine" and rows["my-model"]["input_per_m"] == "1000000"


def test_show_resolves_a_snapshot_and_says_when_unpriced(
    cli: Cli,
) -> None:
    code, out, _ = cli("prices", "show", "gpt-4o-2024-08-06", "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["entry"] == "gpt-4o" and doc["input"] == "0.0000025"
    assert doc["service_tiers"]["priority"]["input"]
    code, _, err = cli("prices", "show", "no-such-model-x")
    assert code == 1 and "no price for 'no-such-model-x'" in err


def test_missing_lists_unpriced_models_since_when(
    capsys: pytest.CaptureFixture[str], cli: Cli, db_url: str, tmp_path: Path
) -> None:
    shipped = shipped_prices()
    recs = [
        record("mystery-model", 100, 10, "2026-04-02T10:00:00.000Z", cost_usd=None),
        record("mystery-model", 100, 10, "2026-04-03T11:00:00.000Z", cost_usd=None),
        record("gpt-5", 100, 10, "2026-04-04T12:00:00.000Z", cost_usd=None),  # priced
        record("gpt-5", 100, 10, "2026-04-05T12:00:00.000Z", service_tier="ultrafast"),
        record("old-model", 100, 10, "2026-03-01T00:00:00.000Z", cost_usd=None),
        record("mystery-model", None, None, "2026-04-04T00:00:00.000Z", outcome="http_error"),
    ]
    for r in recs:
        r.price_version = None
        apply_prices(r, shipped)
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in recs:
        sink.submit(r)
    sink.close()
    code, out, _ = cli(
        "prices", "missing", "--db", db_url, "--since", "2026-04-01", "--format", "json"
    )
    assert code == 0
    rows = json.loads(out)
    got = [
        (r["model"], r["service_tier"], r["missing"], r["streams"], r["priced_now"]) for r in rows
    ]
    assert got == [
        ("mystery-model", None, "model", 2, False),
        ("gpt-5", "ultrafast", "tier", 1, False),
    ]
    assert rows[0]["first_seen"].startswith("2026-04-02T10:00")
    assert rows[0]["last_seen"].startswith("2026-04-03T11:00")
    assert rows[1]["reason"] == "no 'ultrafast' service-tier rate for gpt-5"
    # with an overlay that prices the model, it says the table would price it now
    mine = tmp_path / "mine.json"
    mine.write_text(
        json.dumps({"version": "m", "models": {"mystery-model": {"input": "1", "output": "1"}}})
    )
    code, out, _ = cli(
        "prices", "missing", "--db", db_url, "--prices", str(mine), "--format", "json"
    )
    rows = {r["model"]: r for r in json.loads(out)}
    assert rows["mystery-model"]["priced_now"] is True and rows["old-model"]["streams"] == 1


def test_import_writes_an_overlay_that_prices_every_tier(cli: Cli, tmp_path: Path) -> None:
    src = tmp_path / "model_prices_and_context_window.json"
    src.write_bytes(LITELLM)
    out = tmp_path / "overlay.json"
    code, _, err = cli("prices", "import", str(src), "-o", str(out))
    assert code == 0
    assert "wrote 2 models" in err and "input_cost_per_audio_token (1)" in err
    overlay = load_prices(out.read_bytes())
    assert overlay.source_format == "recorder-prices/1"
    astra = overlay.resolve("gpt-6-astra")
    assert astra is not None and astra.as_of and astra.source
    # the overlay read back prices exactly as LiteLLM's own file does
    litellm = load_prices(LITELLM)
    for name in ("gpt-6-astra", "claude-opus-5-5"):
        a, b = overlay.resolve(name), litellm.resolve(name)
        assert a is not None and b is not None
        assert (a.rates, a.long_context, dict(a.tiers)) == (b.rates, b.long_context, dict(b.tiers))
    table = load_price_file(out)  # as --prices: on top of the shipped table
    assert table.resolve("claude-sonnet-4-5") is not None
    code, _, err = cli("prices", "import", str(src), "-o", str(out), "--model", "nothing-*")
    assert code == 1 and "no model matches" in err
