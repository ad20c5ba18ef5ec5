"""The Prometheus rules made of a budgets file (recorder.metrics.budget_rules),
checked by promtool (`promtool check rules`) and unit-tested by it (`promtool
test rules`) with series of spend that cross the budgets: no alert while the
pace is under a budget, the warning once a month at the last 6 hours' rate
would cost more, the critical alert once the last hour's rate would spend four
budgets; budgets no metric can see get no rule, and say why."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from recorder.billing.budgets import load_budgets
from recorder.metrics.budget_rules import (
    BUDGET_AMOUNT,
    BUDGET_PACE,
    COST_SERIES,
    FAST_ALERT,
    PACE_ALERT,
    rules,
)
from tests.kit.prometheus import ensure_prometheus, promtool

pytestmark = pytest.mark.slow

BUDGETS = """\
budgets:
  - name: search team
    tag: team=search
    monthly_usd: 50
  - name: "every \\"thing\\""
    all: true
    monthly_usd: "5000"
  - name: production
    project: proj_abc
    monthly_usd: 100
  - name: batch key
    key: "…3456"
    monthly_usd: 75
  - name: ads
    tag: "feature=a\\\\b"
    monthly_usd: 10
"""


@pytest.fixture(scope="module")
def tools() -> tuple[str, str]:
    return ensure_prometheus()


def spend(per_minute: list[tuple[int, float]]) -> str:
    """A counter's values a minute apart: ``(minutes, increase a minute)`` pieces."""
    values, total = ["0"], 0.0
    for minutes, step in per_minute:
        for _ in range(minutes):
            total += step
            values.append(f"{total:.6f}")
    return " ".join(values)


def series(name: str, labels: str, values: str) -> dict[str, str]:
    return {"series": f'{name}{{job="recorder",instance="p:9464",{labels}}}', "values": values}


def test_rules_check_and_cross_the_budget(tools: tuple[str, str], tmp_path: Path) -> None:
    text, skipped = rules(load_budgets(BUDGETS), "team", source="budgets.yml")
    (tmp_path / "budgets-rules.yml").write_text(text)
    checked = promtool(tools[1], "check", "rules", "budgets-rules.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 8 rules found" in checked.stdout  # two budgets, four rules each
    assert [(s.budget.name, s.why.split(";")[0]) for s in skipped] == [
        ("production", "no metric carries projects"),
        ("batch key", "no metric carries keys"),
        ("ads", "the metrics carry the tag 'team', not 'feature'"),
    ]

    # search team: 50 USD a month is 0.001157 USD a minute. Six hours at 0.001 a
    # minute (under), six at 0.002 (over: the 6-hour pace crosses 50 some 57 minutes
    # in, and the alert waits 30 more), then one at 0.01 (over four budgets at the
    # last hour's rate, for 10 minutes). The pace of a counter younger than the
    # window is not judged here: rate() divides by the whole window.
    search = spend([(360, 0.001), (360, 0.002), (60, 0.01)])
    other = spend([(780, 0.0001)])  # another team: in "every thing", in no tag budget
    common = 'endpoint="messages",provider="anthropic",model="claude-sonnet-4",source="reported"'
    doc = {
        "rule_files": ["budgets-rules.yml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series(COST_SERIES, f'{common},team="search"', search),
                    series(COST_SERIES, f'{common},team="ads"', other),
                ],
                "alert_rule_test": [
                    {"eval_time": "360m", "alertname": PACE_ALERT, "exp_alerts": []},
                    {"eval_time": "440m", "alertname": PACE_ALERT, "exp_alerts": []},
                    {
                        "eval_time": "720m",
                        "alertname": PACE_ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "budget": "search team"},
                                "exp_annotations": {
                                    "summary": "Budget 'search team' is spent faster than it lasts",
                                    "description": (
                                        "At the rate of the last 6 hours, the spend of tag"
                                        " team=search would come to 86.4 USD in 30 days,"
                                        " over its monthly budget of 50 USD. `recorder audit"
                                        " --budgets` says where the month stands."
                                    ),
                                },
                            }
                        ],
                    },
                    {"eval_time": "720m", "alertname": FAST_ALERT, "exp_alerts": []},
                    {
                        "eval_time": "780m",
                        "alertname": FAST_ALERT,
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "critical", "budget": "search team"},
                                "exp_annotations": {
                                    "summary": "Budget 'search team' is burning fast",
                                    "description": (
                                        "At the rate of the last hour, the spend of tag"
                                        " team=search would come to 432 USD in 30 days, more"
                                        " than 4 times its monthly budget of 50 USD: at this"
                                        " rate the budget is gone in about a week."
                                    ),
                                },
                            }
                        ],
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": BUDGET_AMOUNT,
                        "eval_time": "10m",
                        "exp_samples": [
                            {"labels": f'{BUDGET_AMOUNT}{{budget="search team"}}', "value": 50},
                            {
                                "labels": f'{BUDGET_AMOUNT}{{budget="every \\"thing\\""}}',
                                "value": 5000,
                            },
                        ],
                    },
                    {
                        "expr": f'round({BUDGET_PACE}{{budget="search team"}}, 0.01)',
                        "eval_time": "300m",
                        "exp_samples": [{"labels": '{budget="search team"}', "value": 43.2}],
                    },
                ],
            }
        ],
    }
    out = tmp_path / "budgets-rules_test.yml"
    with out.open("w") as f:
        YAML(typ="safe", pure=True).dump(doc, f)
    tested = promtool(tools[1], "test", "rules", out.name, cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_without_the_metrics_tag_only_all_spend_has_rules(
    tools: tuple[str, str], tmp_path: Path
) -> None:
    text, skipped = rules(load_budgets(BUDGETS), None)
    assert [s.budget.name for s in skipped] == ["search team", "production", "batch key", "ads"]
    assert "--metrics-tag team" in skipped[0].why
    (tmp_path / "r.yml").write_text(text)
    checked = promtool(tools[1], "check", "rules", "r.yml", cwd=tmp_path)
    assert checked.returncode == 0 and "SUCCESS: 4 rules found" in checked.stdout


def test_a_tag_value_is_quoted_as_promql_reads_it(tools: tuple[str, str], tmp_path: Path) -> None:
    text, skipped = rules(load_budgets(BUDGETS), "feature")
    assert 'llm_cost_usd_total{feature="a\\\\b"}' in text
    (tmp_path / "r.yml").write_text(text)
    checked = promtool(tools[1], "check", "rules", "r.yml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "ads" not in {s.budget.name for s in skipped}


@pytest.mark.parametrize("name", ["2team", "te-am", "__name", ""])
def test_a_metrics_tag_must_be_a_label_name(name: str) -> None:
    with pytest.raises(ValueError, match="--metrics-tag"):
        rules(load_budgets(BUDGETS), name)
