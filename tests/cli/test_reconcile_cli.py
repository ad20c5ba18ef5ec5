"""`recorder reconcile`, on SQLite and PostgreSQL: exit status (0 reconciled,
1 differences, 2 could not compare), the JSON, CSV and table outputs, the
mapping file, the export's provider and period."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from recorder.core.record import StreamRecord
from tests.kit.billing import store
from tests.kit.cli import Cli, parse
from tests.kit.records import REFUSED, rec

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "usage_exports"
KEY_A = "…1111:aaaaaaaaaaaa"


def openai_stream(inp: int, cached: int, out: int, **kw: Any) -> StreamRecord:
    values: dict[str, Any] = dict(
        started_at="2026-04-01T09:00:00.000Z",
        provider="openai",
        model="gpt-4o",
        response_model="gpt-4o-2024-08-06",
        api_key_id=KEY_A,
        project="proj_abc",
        input_tokens=inp,
        cache_read_tokens=cached,
        output_tokens=out,
    )
    values.update(kw)
    return rec(**values)


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    """What matches the first line of openai_usage_completions.csv exactly, plus
    an Anthropic stream (another provider: not compared) and a refused request."""
    records = [
        openai_stream(500, 100, 100),
        openai_stream(400, 100, 100, started_at="2026-04-01T23:59:59.999Z"),
        openai_stream(
            400,
            0,
            120,
            outcome="truncated",
            interrupted=True,
            output_source="estimated",
            usage_source="mixed",
        ),
        openai_stream(
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            None,  # type: ignore[arg-type]
            started_at="2026-04-01T09:00:01.000Z",
            **REFUSED,
        ),
        rec(
            started_at="2026-04-01T10:00:00.000Z",
            provider="anthropic",
            endpoint="messages",
            model="claude-sonnet-4-5",
            api_key_id=KEY_A,
        ),
    ]
    store(db_url, tmp_path / "spool", records)
    return records


def test_openai_export_with_a_missing_key(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    export = str(EXPORTS / "openai_usage_completions.csv")
    mapping = str(EXPORTS / "mapping.json")
    code, out, err = cli(
        "reconcile", export, "--mapping", mapping, "--db", db_url, "--format", "json"
    )
    assert code == 1
    docs = json.loads(out)
    # 2026-04-01 agrees (the Anthropic stream is another provider's); 2026-04-02's
    # key_BBB is in the bill but not in the mapping, and nothing was recorded for it
    (doc,) = docs
    assert (doc["day"], doc["model"], doc["key"]) == ("2026-04-02", "gpt-4o-mini", "key_BBB")
    assert doc["in_export"] is True and doc["recorded_streams"] == 0 and doc["streams"] == []
    assert doc["difference"] == {
        "requests": 1,
        "input_tokens": 50,
        "output_tokens": 10,
        "cache_read_tokens": 0,
    }
    assert "key_BBB" in err and "does not cover cache_write_tokens, cost_usd" in err
    assert "openai-usage export, 3 rows (1 batch); 4 recorded streams" in err


def test_all_groups(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    export = str(EXPORTS / "openai_usage_completions.csv")
    mapping = str(EXPORTS / "mapping.csv")
    code, out, _ = cli(
        "reconcile", export, "--mapping", mapping, "--db", db_url, "--format", "json", "--all"
    )
    assert code == 1
    docs = json.loads(out)
    first = docs[0]
    assert (first["day"], first["model"], first["key"]) == ("2026-04-01", "gpt-4o", KEY_A)
    assert first["beyond_tolerance"] == [] and first["recorded_streams"] == 3
    assert (
        first["recorded"]
        == first["exported"]
        == {
            "requests": 3,
            "input_tokens": 1300,
            "output_tokens": 320,
            "cache_read_tokens": 200,
        }
    )


def own_export(tmp_path: Path, rows: list[list[Any]]) -> str:
    path = tmp_path / "export.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["date", "model", "api_key_id", "input_tokens", "output_tokens", "provider"])
        w.writerows(rows)
    return str(path)


def test_reconciled_exits_0(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    export = own_export(tmp_path, [["2026-04-01", "gpt-4o", KEY_A, 1300, 320, "openai"]])
    code, out, err = cli("reconcile", export, "--db", db_url, "--format", "json")
    assert code == 0, err
    assert json.loads(out) == []


def test_tolerance_options(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    export = own_export(tmp_path, [["2026-04-01", "gpt-4o", KEY_A, 1300, 330, "openai"]])
    # 10 of 330 is 3 %
    assert cli("reconcile", export, "--db", db_url, "--format", "json")[0] == 1
    assert cli("reconcile", export, "--db", db_url, "--format", "json", "--tolerance", "5%")[0] == 0
    code, *_ = cli(
        "reconcile", export, "--db", db_url, "--format", "json", "--tolerance-tokens", "10"
    )
    assert code == 0


def test_the_truncated_stream_is_named(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    export = own_export(tmp_path, [["2026-04-01", "gpt-4o", KEY_A, 1300, 400, "openai"]])
    code, out, _ = cli("reconcile", export, "--db", db_url, "--format", "json")
    assert code == 1
    (doc,) = json.loads(out)
    assert doc["beyond_tolerance"] == ["output_tokens"]
    assert [(s["id"], s["why"]) for s in doc["streams"]] == [
        (stored[2].id, "truncated; output estimated"),
        (stored[3].id, "http_error, not billed here"),
    ]
    code, out, _ = cli("reconcile", export, "--db", db_url, "--format", "table")
    assert code == 1
    assert "output_tokens" in out and "+80" in out
    assert f"{stored[2].id}  truncated" in out
    code, out, _ = cli("reconcile", export, "--db", db_url, "--format", "csv")
    (row,) = csv.DictReader(io.StringIO(out))
    assert row["difference_output_tokens"] == "80"
    assert row["stream_ids"].split() == [stored[2].id, stored[3].id]


def test_period_options(cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path) -> None:
    export = own_export(tmp_path, [["2026-04-01", "gpt-4o", KEY_A, 1300, 320, "openai"]])
    # the last stream of the day left out: the bill is then larger than what was recorded
    code, out, _ = cli(
        "reconcile", export, "--db", db_url, "--format", "json", "--until", "2026-04-01T23:00"
    )
    assert code == 1
    assert json.loads(out)[0]["difference"] == {"input_tokens": 400, "output_tokens": 100}


def test_anthropic_export_by_project(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    export = str(EXPORTS / "anthropic_cost_report.csv")
    code, out, err = cli("reconcile", export, "--db", db_url, "--format", "json", "--all")
    assert code == 1  # 0.0135 USD billed on 2026-04-02, nothing recorded then
    (doc,) = json.loads(out)
    assert doc["project"] == "wrkspc_01" and doc["exported"] == {"cost_usd": "0.013500000000"}
    assert "by day, model, project" in err


@pytest.mark.parametrize(
    ("content", "message"),
    [("when,what\n1,2\n", "not a usage export"), (None, "cannot read")],
)
def test_unreadable_export_exits_2(
    cli: Cli,
    db_url: str,
    tmp_path: Path,
    content: str | None,
    message: str,
) -> None:
    path = tmp_path / "export.csv"
    if content is not None:
        path.write_text(content)
    code, out, err = cli("reconcile", str(path), "--db", db_url)
    assert code == 2 and out == "" and message in err


def test_missing_database_exits_2(cli: Cli, tmp_path: Path) -> None:
    export = own_export(tmp_path, [["2026-04-01", "gpt-4o", KEY_A, 1, 1, "openai"]])
    code, _, err = cli("reconcile", export, "--db", f"sqlite:///{tmp_path / 'absent.db'}")
    assert code == 2 and "no database" in err


def test_bad_tolerance_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse("reconcile", "x.csv", "--tolerance", "lots")


# -- the providers' own responses (issue: reconcile reads what they return) ---------


def test_the_providers_usage_response_in_one_command(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    """The OpenAI usage response as returned, and the list of the project's keys as
    returned: no flattening, no hand-written mapping."""
    export = str(EXPORTS / "openai_usage_completions.json")
    keys = str(EXPORTS / "openai_project_api_keys.json")
    code, out, err = cli(
        "reconcile", export, "--keys", keys, "--db", db_url, "--format", "json", "--all"
    )
    assert code == 1, err
    docs = json.loads(out)
    first, second = docs
    # key_AAA (redacted "sk-pro...111") is the recorded key ending in 1111
    assert (first["day"], first["model"], first["key"]) == ("2026-04-01", "gpt-4o", KEY_A)
    assert first["beyond_tolerance"] == [] and first["recorded_streams"] == 3
    # the batch row (5 requests, 9999 tokens each way) is not in the comparison
    assert first["exported"]["requests"] == 3 and first["exported"]["input_tokens"] == 1300
    assert (second["key"], second["recorded_streams"]) == ("key_BBB", 0)
    assert "batch traffic (not proxied, left out of the comparison): 1 row" in err
    assert "requests 5, input_tokens 9999, output_tokens 9999" in err
    assert "no recorded key in the period ends like key_ZZZ" in err
    assert (
        "tolerance: a difference counts beyond 2% of the larger side and beyond 0 tokens "
        "or requests (0.01 USD for cost)"
    ) in err


def test_keys_that_end_alike_are_not_guessed(cli: Cli, db_url: str, tmp_path: Path) -> None:
    twin = "…1111:bbbbbbbbbbbb"  # another key whose last four are 1111 too
    store(
        db_url,
        tmp_path / "spool",
        [openai_stream(1300, 200, 320), openai_stream(1, 0, 1, api_key_id=twin)],
    )
    export = str(EXPORTS / "openai_usage_completions.json")
    keys = str(EXPORTS / "openai_project_api_keys.json")
    code, out, err = cli("reconcile", export, "--keys", keys, "--db", db_url, "--format", "json")
    assert code == 1
    assert f"key_AAA matches several recorded keys ({KEY_A}, {twin}): unmapped" in err
    assert "key_AAA" in {d["key"] for d in json.loads(out)}


def test_anthropic_batch_is_left_out(cli: Cli, db_url: str, tmp_path: Path) -> None:
    """An Anthropic usage report with a service_tier=batch row: only the standard
    row is compared with the proxied traffic."""
    key_b = "…2222:bbbbbbbbbbbb"
    store(
        db_url,
        tmp_path / "spool",
        [
            rec(
                started_at="2026-04-02T10:00:00.000Z",
                provider="anthropic",
                endpoint="messages",
                model="claude-sonnet-4-5",
                api_key_id=key_b,
                project="wrkspc_01",
                input_tokens=5500,
                cache_read_tokens=4000,
                cache_write_tokens=500,
                output_tokens=700,
            )
        ],
    )
    export = str(EXPORTS / "anthropic_usage_report.json")
    keys = str(EXPORTS / "anthropic_api_keys.json")
    code, out, err = cli("reconcile", export, "--keys", keys, "--db", db_url, "--format", "json")
    assert code == 0, (out, err)
    assert json.loads(out) == []
    assert "batch traffic (not proxied, left out of the comparison): 1 row" in err
    assert "input_tokens 80000" in err


def test_a_directory_of_pages(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    pages = str(EXPORTS / "openai_usage_pages")
    whole = str(EXPORTS / "openai_usage_completions.json")
    mapping = str(EXPORTS / "mapping.json")
    a = cli("reconcile", pages, "--mapping", mapping, "--db", db_url, "--format", "json", "--all")
    b = cli("reconcile", whole, "--mapping", mapping, "--db", db_url, "--format", "json", "--all")
    assert a[0] == b[0] == 1 and json.loads(a[1]) == json.loads(b[1])


def test_unpriced_recorded_cost_is_a_dash_not_zero(cli: Cli, db_url: str, tmp_path: Path) -> None:
    store(
        db_url,
        tmp_path / "spool",
        [
            openai_stream(
                1300,
                200,
                320,
                model="gpt-9",
                response_model="gpt-9",
                cost_usd=None,
                price_version=None,
            )
        ],
    )
    path = tmp_path / "export.csv"
    path.write_text("date,model,api_key_id,cost_usd\n2026-04-01,gpt-9," + KEY_A + ",1.5\n")
    code, out, _ = cli("reconcile", str(path), "--db", db_url, "--format", "json")
    assert code == 1
    (doc,) = json.loads(out)
    assert doc["recorded"] == {"cost_usd": None} and doc["difference"] == {"cost_usd": None}
    assert doc["streams"][0]["why"] == "no price"
    code, out, _ = cli("reconcile", str(path), "--db", db_url, "--format", "table")
    line = next(x for x in out.splitlines() if "cost_usd" in x and "gpt-9" in x)
    assert "0.000000" not in line and " - " in f" {line} "
    assert "(tolerance: a difference counts beyond 2% of the larger side" in out


def test_a_csv_line_with_missing_or_extra_cells_exits_2(
    cli: Cli, db_url: str, stored: list[StreamRecord], tmp_path: Path
) -> None:
    path = tmp_path / "export.csv"
    path.write_text(
        "date,model,api_key_id,input_tokens\n2026-04-01,gpt-4o," + KEY_A + ",1300\n"
        "2026-04-01,gpt-4o,1300\n"
    )
    code, out, err = cli("reconcile", str(path), "--db", db_url)
    assert code == 2 and out == ""
    assert f"{path} line 3: 3 cells, the header has 4" in err


def test_fetch_reads_as_the_saved_responses(
    cli: Cli,
    db_url: str,
    stored: list[StreamRecord],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--fetch against the recorded responses served locally (not the live API)
    compares exactly as the same responses saved to files do."""
    from tests.kit.recorded_api import recorded_api

    monkeypatch.setenv("OPENAI_ADMIN_KEY", "sk-admin-test-0000")
    keys = str(EXPORTS / "openai_project_api_keys.json")
    common = ("--keys", keys, "--db", db_url, "--format", "json", "--all")
    with recorded_api() as api:
        fetched = cli(
            "reconcile",
            "--fetch",
            "openai",
            "--since",
            "2026-04-01",
            "--until",
            "2026-04-03",
            "--base-url",
            api.base_url,
            *common,
        )
    saved = cli(
        "reconcile",
        str(EXPORTS / "openai_usage_pages"),
        str(EXPORTS / "openai_costs.json"),
        "--since",
        "2026-04-01",
        "--until",
        "2026-04-03",
        *common,
    )
    assert fetched[0] == saved[0] == 1
    assert json.loads(fetched[1]) == json.loads(saved[1])
    assert "sk-admin-test-0000" not in fetched[1] + fetched[2]
    assert len(api.asked) == 3


def test_fetch_needs_a_period_and_a_key(
    cli: Cli, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_ADMIN_KEY", raising=False)
    code, _, err = cli("reconcile", "--fetch", "anthropic", "--db", db_url)
    assert code == 2 and "--fetch needs --since" in err
    code, _, err = cli("reconcile", "--fetch", "anthropic", "--since", "2026-04-01", "--db", db_url)
    assert code == 2 and "set ANTHROPIC_ADMIN_KEY" in err
    code, _, err = cli("reconcile", "--db", db_url)
    assert code == 2 and "give export FILEs" in err
