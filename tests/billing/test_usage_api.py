"""The providers' usage and cost API responses, read as returned: each shape reads
as its flattened CSV does, buckets are carried onto every row, batch traffic is
told apart, money stays exact, pages are put together (and a page given twice or a
missing last page is caught), and what is not such a response is refused by name."""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path

import pytest

from recorder.billing.export_model import Export, ExportError, ExportRow, export_period
from recorder.billing.exports import read_exports, read_text
from recorder.billing.usage_api import read_pages

EXPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "usage_exports"


def read(name: str) -> Export:
    return read_text((EXPORTS / name).read_text(encoding="utf-8"), source=name)


def _plain(rows: list[ExportRow]) -> list[tuple[object, ...]]:
    return [(r.day, r.model, r.key, r.project, r.figures, r.provider) for r in rows]


@pytest.mark.parametrize(
    ("response", "flattened", "fmt"),
    [
        ("openai_usage_completions.json", "openai_usage_completions.csv", "openai-usage"),
        ("openai_costs.json", "openai_costs.csv", "openai-costs"),
        ("anthropic_usage_report.json", "anthropic_usage_report.csv", "anthropic-usage"),
        ("anthropic_cost_report.json", "anthropic_cost_report.csv", "anthropic-cost"),
    ],
)
def test_a_response_reads_as_its_flattened_csv(response: str, flattened: str, fmt: str) -> None:
    j, c = read(response), read(flattened)
    assert j.format == c.format == fmt
    assert j.figures == c.figures and j.providers == c.providers
    # the JSON samples hold a batch row more (Anthropic's CSV samples have none)
    assert _plain([r for r in j.rows if not r.batch]) == _plain([r for r in c.rows if not r.batch])


def test_buckets_are_carried_onto_every_row() -> None:
    e = read("openai_usage_completions.json")
    assert [(r.start, r.end) for r in e.rows] == [
        ("1775001600", "1775088000"),
        ("1775001600", "1775088000"),
        ("1775088000", "1775174400"),
    ]
    a = read("anthropic_usage_report.json")
    assert {(r.start, r.end) for r in a.rows} == {("2026-04-02T00:00:00Z", "2026-04-03T00:00:00Z")}
    start, end = export_period(a) or (None, None)
    assert (start and start.isoformat(), end and end.isoformat()) == (
        "2026-04-02T00:00:00+00:00",
        "2026-04-03T00:00:00+00:00",
    )


def test_an_hourly_export_covers_its_hours_only() -> None:
    page = {
        "data": [
            {
                "starting_at": "2026-04-02T10:00:00Z",
                "ending_at": "2026-04-02T11:00:00Z",
                "results": [{"uncached_input_tokens": 1, "output_tokens": 2, "model": "m"}],
            }
        ],
        "has_more": False,
        "next_page": None,
    }
    e = read_pages(json.dumps(page), source="hour.json")
    start, end = export_period(e) or (None, None)
    assert start is not None and end is not None
    assert (start.hour, end.hour) == (10, 11)


def test_batch_traffic_is_told_apart() -> None:
    assert [r.batch for r in read("openai_usage_completions.json").rows] == [False, True, False]
    assert [r.batch for r in read("anthropic_usage_report.json").rows] == [False, True]
    assert [r.batch for r in read("anthropic_cost_report.json").rows] == [False, False, True]


def test_money_is_exact() -> None:
    e = read("openai_costs.json")
    costs = [r.figures["cost_usd"] for r in e.rows]
    assert costs == [Decimal("0.00325"), Decimal("0.0032")]
    assert all(isinstance(c, Decimal) for c in costs)
    a = read("anthropic_cost_report.json")  # cents as decimal strings
    assert [r.figures["cost_usd"] for r in a.rows] == [
        Decimal("0.003"),
        Decimal("0.0105"),
        Decimal("0.12"),
    ]


def test_the_singular_result_key_and_missing_group_fields() -> None:
    # the reference's schema names the list "result" in places; ungrouped results
    # leave model, project and key out altogether
    page = {
        "object": "page",
        "data": [
            {
                "object": "bucket",
                "start_time": 1775001600,
                "end_time": 1775088000,
                "result": [
                    {
                        "object": "organization.usage.completions.result",
                        "input_tokens": 10,
                        "output_tokens": 5,
                        "num_model_requests": 1,
                    }
                ],
            }
        ],
        "has_more": False,
        "next_page": None,
    }
    e = read_pages(json.dumps(page), source="p.json")
    (r,) = e.rows
    assert (r.day, r.model, r.key, r.project) == ("2026-04-01", None, None, None)
    assert r.figures == {"input_tokens": 10, "output_tokens": 5, "requests": 1}
    # not grouped by batch: batch jobs may hide in the figures, and that is said
    (note,) = e.notes
    assert "no row says batch" in note and "Batch API traffic, if any" in note


def test_a_directory_of_pages_reads_as_the_whole_response(tmp_path: Path) -> None:
    whole = read("openai_usage_completions.json")

    def text(path: str) -> str:
        return Path(path).read_text(encoding="utf-8")

    pages = read_exports([str(EXPORTS / "openai_usage_pages")], text)
    assert pages.format == whole.format and pages.notes == []
    assert _plain(pages.rows) == _plain(whole.rows)
    assert [r.batch for r in pages.rows] == [r.batch for r in whole.rows]
    # the same, as two files named, and as one JSON array of both pages
    files = sorted(str(p) for p in (EXPORTS / "openai_usage_pages").iterdir())
    assert _plain(read_exports(files, text).rows) == _plain(whole.rows)
    both = "[" + ",".join(text(f) for f in files) + "]"
    assert _plain(read_text(both, source="both.json").rows) == _plain(whole.rows)


def test_a_page_given_twice_is_refused(tmp_path: Path) -> None:
    first = EXPORTS / "openai_usage_pages" / "page-1.json"
    # the same page fetched again: the same cursor, other bytes (here, spacing)
    (tmp_path / "again.json").write_text(json.dumps(json.loads(first.read_text())))
    with pytest.raises(ExportError, match=r"same page as .*count twice"):
        read_exports([str(first), str(tmp_path / "again.json")], lambda p: Path(p).read_text())


def test_a_missing_last_page_is_said() -> None:
    first = EXPORTS / "openai_usage_pages" / "page-1.json"
    e = read_exports([str(first)], lambda p: Path(p).read_text())
    assert len(e.rows) == 2
    assert any("last page is missing" in n for n in e.notes)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{not json", "not JSON"),
        ('{"object": "list", "items": []}', "not a usage or cost API response"),
        ('{"data": [{"start_time": 1}]}', r"data\[0\] has no results list"),
        (
            '{"data": [{"start_time": 1, "end_time": 2, "results": '
            '[{"object": "organization.usage.embeddings.result", "input_tokens": 1,'
            ' "num_model_requests": 1}]}]}',
            "embeddings.result results are not compared",
        ),
        (
            '{"data": [{"starting_at": "2026-04-01T00:00:00Z", "results": [{"foo": 1}]}]}',
            r"data\[0\]\.results\[0\]: not a result .*keys: foo",
        ),
        (
            '{"data": [{"starting_at": "2026-04-01T00:00:00Z", "ending_at": '
            '"2026-04-02T00:00:00Z", "results": [{"uncached_input_tokens": 1, '
            '"output_tokens": 1}, {"amount": "1", "currency": "USD"}]}]}',
            "one anthropic-cost result among anthropic-usage results",
        ),
        (
            '{"data": [{"starting_at": "2026-04-01T00:00:00Z", "ending_at": '
            '"2026-04-02T00:00:00Z", "results": [{"uncached_input_tokens": -1, '
            '"output_tokens": 1}]}]}',
            "uncached_input_tokens: not a count",
        ),
        (
            '{"data": [{"starting_at": "2026-04-01T00:00:00Z", "ending_at": '
            '"2026-04-02T00:00:00Z", "results": [{"amount": "100", "currency": "EUR"}]}]}',
            "amounts in EUR",
        ),
    ],
)
def test_what_is_not_such_a_response_is_refused_by_name(text: str, said: str) -> None:
    with pytest.raises(ExportError, match=said):
        read_text(text, source="r.json")


def test_an_empty_response_has_no_rows() -> None:
    e = read_text('{"object": "page", "data": [], "has_more": false}', source="e.json")
    assert e.rows == [] and export_period(e) is None


def test_the_same_file_twice_is_refused(tmp_path: Path) -> None:
    # a last page (no cursor to compare) saved twice under two names
    whole = EXPORTS / "openai_usage_completions.json"
    shutil.copy(whole, tmp_path / "copy.json")
    with pytest.raises(ExportError, match=r"same content as .*count twice"):
        read_exports([str(whole), str(tmp_path / "copy.json")], lambda p: Path(p).read_text())
