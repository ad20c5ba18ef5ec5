"""`--metrics-tag NAME`: one tag of the request as a label of the stream metrics,
named after the tag, capped as models are (past the cap ``other``), empty for a
request without it; without the option the labels are the contract's."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from recorder.metrics import Metrics
from tests.kit.records import metric_record as record

S = {"endpoint": "chat.completions", "provider": "openai", "model": "gpt-4o"}


def families(registry: CollectorRegistry) -> dict[str, set[tuple[str, ...]]]:
    """Each family's label names, as a scrape reads them."""
    out: dict[str, set[tuple[str, ...]]] = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in fam.samples:
            out.setdefault(fam.name, set()).add(tuple(sorted(sample.labels)))
    return out


def test_the_tag_is_a_label_of_every_stream_metric() -> None:
    plain, tagged = CollectorRegistry(), CollectorRegistry()
    without, with_tag = Metrics(plain), Metrics(tagged, metrics_tag="team")
    for metrics in (without, with_tag):
        metrics.observe(
            record(cost_usd="0.5", tags={"team": "search"}, input_tokens=3, input_source="reported")
        )
    before, after = families(plain), families(tagged)
    assert before.keys() == after.keys()
    for name, labels in before.items():
        if any(set(S) <= set(ls) for ls in labels):  # a stream metric
            assert {tuple(sorted((*ls, "team"))) for ls in labels if set(S) <= set(ls)} <= after[
                name
            ], name
        else:  # the recorder's health, the live gauges: unchanged
            assert after[name] == labels, name
    assert "team" not in {label for ls in before.values() for s in ls for label in s}


def test_values_are_capped_and_a_request_without_the_tag_is_empty() -> None:
    registry = CollectorRegistry()
    metrics = Metrics(registry, max_model_labels=3, metrics_tag="team")
    teams = ["search", "ads", "infra", "growth", "legal", "search"]
    for team in teams:
        metrics.observe(record(cost_usd="1", tags={"team": team, "feature": "x"}))
    metrics.observe(record(cost_usd="1", tags={"feature": "x"}))
    metrics.observe(record(cost_usd="1"))
    get = registry.get_sample_value
    cost = "llm_cost_usd_total"
    src = {"source": "estimated"}
    assert get(cost, {**S, "team": "search", **src}) == 2
    assert get(cost, {**S, "team": "ads", **src}) == 1
    assert get(cost, {**S, "team": "infra", **src}) == 1
    assert get(cost, {**S, "team": "other", **src}) == 2  # growth, legal: past the cap
    assert get(cost, {**S, "team": "", **src}) == 2  # no tag team
    assert get("llm_streams_total", {**S, "team": "", "outcome": "completed"}) == 2
    # every stream counted once, whatever its tag
    total = sum(
        s.value
        for fam in text_string_to_metric_families(generate_latest(registry).decode())
        if fam.name == "llm_streams"
        for s in fam.samples
        if s.name == "llm_streams_total"
    )
    assert total == len(teams) + 2


def test_a_tag_may_not_take_a_label_name_any_metric_has() -> None:
    """Every label of every stream metric is refused as the exported tag (``measure``
    of the provider-timing histogram included), so no series gets a label twice."""
    import pytest

    from recorder.metrics.collectors import label_names
    from recorder.proxy.checks import OptionError, parse_metrics_tag

    assert {"measure", "endpoint", "model", "outcome", "token_type"} <= label_names()
    for name in sorted(label_names()):
        with pytest.raises(OptionError, match="do not use already"):
            parse_metrics_tag(name, "--metrics-tag")
    assert parse_metrics_tag("team", "--metrics-tag") == "team"
