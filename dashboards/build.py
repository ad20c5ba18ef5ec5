"""The Grafana dashboard, built with Grafana's own library (grafana-foundation-sdk).

Run it to write ``recorder-overview.json`` beside it (``--check``: say whether the
committed file is what it builds, exit 1 if not); tests/dashboards/test_build.py
runs the same. The library's types are Grafana's dashboard schema, so a panel
option Grafana does not know cannot be written here; the test also reads the JSON
back through the library's model and finds it unchanged.

Every panel says the question it answers (its description, and docs/metrics.md
under its title). Panels keep their ids from one version to the next: links to a
panel name it by id.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import heatmap, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import (
    HideSeriesConfig,
    ReduceDataOptions,
    ScaleDistributionConfig,
    StackingConfig,
    VizLegendOptions,
    VizTooltipOptions,
)
from grafana_foundation_sdk.builders.dashboard import (
    AnnotationQuery,
    Dashboard,
    DatasourceVariable,
    FieldColor,
    QueryVariable,
    Row,
    TextBoxVariable,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.dashboard import TimePicker as TimePickerBuilder
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import heatmap as heatmap_model
from grafana_foundation_sdk.models import prometheus as prometheus_model

# what `recorder budgets rules` records for each budget (docs/billing.md, "Budgets")
from recorder.metrics.budget_rules import BUDGET_AMOUNT, BUDGET_PACE

HERE = Path(__file__).resolve().parent
OUTPUT = HERE / "recorder-overview.json"

DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# the stream panels' filters: the endpoint and model variables
STREAM = 'endpoint=~"$endpoint", model=~"$model"'
INTERRUPTED = "error|upstream_disconnect|client_disconnect|truncated"
# the label --metrics-tag exports a tag under is the tag's name; the dashboard asks for it
TAG_VARIABLE = "tag"
DEFAULT_TAG = "team"


def query(expr: str, legend: str, ref: str, *, instant: bool = False) -> prometheus.Dataquery:
    """One PromQL target, on the datasource variable."""
    q = (
        prometheus.Dataquery()
        .datasource(DS)
        .editor_mode(prometheus_model.QueryEditorMode.CODE)
        .expr(expr)
        .legend_format(legend)
        .ref_id(ref)
    )
    return q.instant() if instant else q.range()


def targets(*items: tuple[str, str]) -> list[prometheus.Dataquery]:
    """Range targets ``(expr, legend)``, with refIds A, B, ..."""
    return [query(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(items)]


def _green() -> ThresholdsConfig:
    return (
        ThresholdsConfig()
        .mode(model.ThresholdsMode.ABSOLUTE)
        .steps([model.Threshold(value=None, color="green")])
    )


def big_number(
    panel_id: int,
    title: str,
    question: str,
    unit: str,
    target: prometheus.Dataquery,
    *,
    width: int = 6,
    decimals: int | None = None,
    thresholds: ThresholdsConfig | None = None,
) -> stat.Panel:
    """A stat panel: one number (or one per series) for the time range."""
    p = (
        stat.Panel()
        .id(panel_id)
        .title(title)
        .description(question)
        .datasource(DS)
        .height(4)
        .span(width)
        .unit(unit)
        .color_scheme(FieldColor().mode(model.FieldColorModeId.THRESHOLDS))
        .thresholds(thresholds or _green())
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.NONE)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
        .text_mode(common.BigValueTextMode.AUTO)
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .with_target(target)
    )
    return p.decimals(decimals) if decimals is not None else p


def graph(
    panel_id: int,
    title: str,
    question: str,
    unit: str,
    queries: Sequence[prometheus.Dataquery],
    *,
    width: int = 12,
    height: int = 8,
    stacked: bool = False,
    right_axis: tuple[str, str] | None = None,
) -> timeseries.Panel:
    """A time series panel: lines (stacked areas when ``stacked``); ``right_axis``
    puts one target (by refId) on a right axis of its own unit."""
    p = (
        timeseries.Panel()
        .id(panel_id)
        .title(title)
        .description(question)
        .datasource(DS)
        .height(height)
        .span(width)
        .unit(unit)
        .min(0)
        .color_scheme(FieldColor().mode(model.FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(20 if stacked else 5)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(
            StackingConfig()
            .group("A")
            .mode(common.StackingMode.NORMAL if stacked else common.StackingMode.NONE)
        )
        .legend(
            VizLegendOptions()
            .calcs(["mean", "max"])
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
        .targets(list(queries))
    )
    if right_axis is not None:
        ref, axis_unit = right_axis
        p = p.override_by_query(
            ref,
            [
                model.DynamicConfigValue(id_val="unit", value=axis_unit),
                model.DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
            ],
        )
    return p


def distribution(panel_id: int, title: str, question: str, bucket: str) -> heatmap.Panel:
    """A heatmap of a histogram's buckets: how many streams fell in each, over time."""
    expr = f"sum by (le) (increase({bucket}{{{STREAM}}}[$__rate_interval]))"
    target = query(expr, "{{le}}", "A").format(prometheus_model.PromQueryFormat.HEATMAP)
    return (
        heatmap.Panel()
        .id(panel_id)
        .title(title)
        .description(question)
        .datasource(DS)
        .height(9)
        .span(12)
        .calculate(False)
        .cell_gap(1)
        .color(
            heatmap.HeatmapColorOptions()
            .mode(heatmap_model.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .fill("dark-orange")
            .scale(heatmap_model.HeatmapColorScale.EXPONENTIAL)
            .exponent(0.5)
            .steps(64)
            .reverse(False)
        )
        .exemplars_color("rgba(255,0,255,0.7)")
        .filter_values(heatmap.FilterValueRange().le(1e-09))
        .show_legend()
        .rows_frame(
            heatmap.RowsHeatmapOptions().layout(common.HeatmapCellLayout.AUTO).value("count")
        )
        .mode(common.TooltipDisplayMode.SINGLE)
        .show_y_histogram()
        .show_color_scale(False)
        .y_axis(
            heatmap.YAxisConfig().axis_placement(common.AxisPlacement.LEFT).reverse(False).unit("s")
        )
        .hide_from(HideSeriesConfig().legend(False).tooltip(False).viz(False))
        .scale_distribution(ScaleDistributionConfig().type(common.ScaleDistribution.LINEAR))
        .with_target(target)
    )


def label_variable(name: str, label: str, query_text: str) -> QueryVariable:
    """A multi-select of a label's values ("All" by default: every value)."""
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query(
            {
                "qryType": 1,
                "query": query_text,
                "refId": "PrometheusVariableQueryEditor-VariableQuery",
            }
        )
        .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .regex("")
    )


def rate(metric: str, *, by: str, scale: str = "", matchers: str = STREAM) -> str:
    """``sum by (BY) (rate(METRIC{matchers}[$__rate_interval]))``, times ``scale``."""
    return f"sum by ({by}) (rate({metric}{{{matchers}}}[$__rate_interval])){scale}"


def overview() -> Builder[model.Dashboard]:
    """The recorder's dashboard: every row, every panel."""
    streams = f"llm_streams_total{{{STREAM}}}"
    interrupted = f'llm_streams_total{{outcome=~"{INTERRUPTED}", {STREAM}}}'
    histogram = (
        "histogram_quantile({q}, sum by (le, {by}) (rate({metric}{{{m}}}[$__rate_interval])))"
    )

    def quantiles(metric: str, by: str, qs: Sequence[str]) -> list[prometheus.Dataquery]:
        return targets(
            *(
                (
                    histogram.format(q=q, by=by, metric=metric, m=STREAM),
                    f"p{q[2:].ljust(2, '0')} {{{{{by}}}}}",
                )
                for q in qs
            )
        )

    d = (
        Dashboard("recorder: LLM streams overview")
        .uid("recorder-overview")
        .description(
            "LLM streams metered by recorder: traffic, latency, usage and cost, what"
            " interruptions cost, spend by tag, budgets, stream rhythm, and the"
            " recorder's own health. docs/metrics.md says what each panel answers."
        )
        .tags(["llm", "recorder"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .timezone("")
        .timepicker(TimePickerBuilder())
        .fiscal_year_start_month(0)
        .week_start("")
        .refresh("30s")
        .version(1)
        .annotation(
            AnnotationQuery()
            .name("Annotations & Alerts")
            .datasource(model.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
            .enable(True)
            .hide(True)
            .icon_color("rgba(0, 211, 255, 1)")
            .type("dashboard")
            .built_in(1)
        )
        .with_variable(
            DatasourceVariable("datasource")
            .label("Data source")
            .type("prometheus")
            .regex("")
            .multi(False)
            .include_all(False)
        )
        .with_variable(
            label_variable("endpoint", "Endpoint", "label_values(llm_streams_total, endpoint)")
        )
        .with_variable(
            label_variable(
                "model", "Model", 'label_values(llm_streams_total{endpoint=~"$endpoint"}, model)'
            )
        )
        .with_variable(
            TextBoxVariable(TAG_VARIABLE)
            .label("Tag (--metrics-tag)")
            .default_value(DEFAULT_TAG)
            .description(
                "The tag the proxies export as a label (their --metrics-tag NAME): the"
                " 'Spend by tag' row groups by it."
            )
        )
    )

    # -- Overview ------------------------------------------------------------------
    d = d.with_row(Row("Overview").id(1))
    d = d.with_panel(
        big_number(
            2,
            "Requests",
            "How many requests went through the proxy in the selected time range?",
            "short",
            query(f"sum(increase({streams}[$__range]))", "requests", "A", instant=True),
            decimals=0,
        )
    )
    d = d.with_panel(
        big_number(
            3,
            "Interrupted",
            "What share of requests in the range ended without their terminal event"
            " (error event, cut by either side, truncated)?",
            "percentunit",
            query(
                f"sum(increase({interrupted}[$__range])) / sum(increase({streams}[$__range]))",
                "interrupted",
                "A",
                instant=True,
            ),
        )
    )
    d = d.with_panel(
        big_number(
            4,
            "Cost in range",
            "How much did the requests in the range cost, from reported usage and from estimates?",
            "currencyUSD",
            query(
                f"sum by (source) (increase(llm_cost_usd_total{{{STREAM}}}[$__range]))",
                "{{source}}",
                "A",
                instant=True,
            ),
        )
    )
    d = d.with_panel(
        big_number(
            5,
            "In flight now",
            "How many requests is the proxy metering right now?",
            "short",
            query(
                'sum(llm_streams_in_flight{endpoint=~"$endpoint"})', "in flight", "A", instant=True
            ),
            decimals=0,
        )
    )

    # -- Traffic -------------------------------------------------------------------
    d = d.with_row(Row("Traffic").id(6))
    d = d.with_panel(
        graph(
            7,
            "Requests by endpoint and outcome",
            "How many requests per second reach each endpoint, and how do they end"
            " (completed, incomplete, error, cut by the upstream or the client, truncated,"
            " HTTP error)?",
            "reqps",
            targets(
                (rate("llm_streams_total", by="endpoint, outcome"), "{{endpoint}} {{outcome}}")
            ),
            stacked=True,
        )
    )
    d = d.with_panel(
        graph(
            8,
            "Stalls and interruptions per minute",
            "How often do upstreams go silent mid-answer for at least the stall"
            " threshold, and how often are streams interrupted, by endpoint and kind?",
            "short",
            targets(
                (
                    rate("llm_stream_stalls_total", by="endpoint", scale=" * 60"),
                    "stalls {{endpoint}}",
                ),
                (
                    f"sum by (endpoint, outcome) (rate({interrupted}[$__rate_interval])) * 60",
                    "{{outcome}} {{endpoint}}",
                ),
            ),
        )
    )
    d = d.with_panel(
        graph(
            9,
            "Streams in flight",
            "How many streams are open right now, per endpoint (and is that number"
            " growing: are streams hanging)?",
            "short",
            targets(
                ('sum by (endpoint) (llm_streams_in_flight{endpoint=~"$endpoint"})', "{{endpoint}}")
            ),
        )
    )
    d = d.with_panel(
        graph(
            10,
            "Keepalives per minute",
            "Do the upstreams send SSE keepalive comments while they think, and how many?",
            "short",
            targets(
                (rate("llm_stream_keepalives_total", by="endpoint", scale=" * 60"), "{{endpoint}}")
            ),
        )
    )

    # -- Latency -------------------------------------------------------------------
    d = d.with_row(Row("Latency").id(11))
    d = d.with_panel(
        graph(
            12,
            "Time to first token p50 / p95 / p99 by model",
            "How long does each model make a streaming client wait for its first output"
            " chunk (text, tool-call arguments, reasoning)?",
            "s",
            quantiles(
                "gen_ai_client_operation_time_to_first_chunk_seconds_bucket",
                "model",
                ("0.5", "0.95", "0.99"),
            ),
        )
    )
    d = d.with_panel(
        graph(
            13,
            "Request duration p50 / p95 / p99 by endpoint",
            "How long do requests take from start to the end of the stream, whatever their"
            " outcome?",
            "s",
            quantiles(
                "gen_ai_client_operation_duration_seconds_bucket",
                "endpoint",
                ("0.5", "0.95", "0.99"),
            ),
        )
    )
    d = d.with_panel(
        graph(
            14,
            "Output tokens per second by model",
            "How fast does each model stream its answer: output tokens (reported or"
            " estimated) per second of request time, the wait for the first token"
            " included?",
            "suffix: tok/s",
            targets(
                (
                    rate("llm_tokens_total", by="model", matchers=f'token_type="output", {STREAM}')
                    + " / "
                    + rate(
                        "gen_ai_client_operation_duration_seconds_sum",
                        by="model",
                        matchers=f'outcome!="http_error", {STREAM}',
                    ),
                    "{{model}}",
                )
            ),
        )
    )
    d = d.with_panel(
        graph(
            15,
            "Time between output chunks p50 / p99 by model",
            "How smooth is the stream once it has started: the interval between"
            " consecutive output chunks?",
            "s",
            quantiles(
                "gen_ai_client_operation_time_per_output_chunk_seconds_bucket",
                "model",
                ("0.5", "0.99"),
            ),
        )
    )

    # -- Usage and cost ------------------------------------------------------------
    d = d.with_row(Row("Usage and cost").id(16))
    d = d.with_panel(
        graph(
            17,
            "Tokens per hour by type and source",
            "How many tokens (input, output, cache read/write, reasoning) are being used"
            " per hour, and how many of them are estimated because the stream never"
            " reported usage?",
            "short",
            targets(
                (
                    rate("llm_tokens_total", by="token_type, source", scale=" * 3600"),
                    "{{token_type}} ({{source}})",
                )
            ),
        )
    )
    d = d.with_panel(
        graph(
            18,
            "Cost per hour by source",
            "How much are we spending per hour, from reported usage and from estimates"
            " (interrupted streams are billed too)?",
            "currencyUSD",
            targets((rate("llm_cost_usd_total", by="source", scale=" * 3600"), "{{source}}")),
            stacked=True,
        )
    )
    d = d.with_panel(
        graph(
            19,
            "Cost per hour by model",
            "Which models does the money go to?",
            "currencyUSD",
            targets((rate("llm_cost_usd_total", by="model", scale=" * 3600"), "{{model}}")),
            stacked=True,
        )
    )
    d = d.with_panel(
        graph(
            20,
            "Tokens per request p50 / p95",
            "How large are prompts and answers, per request?",
            "short",
            quantiles("gen_ai_client_token_usage_bucket", "token_type", ("0.5", "0.95")),
        )
    )

    # -- What interruptions cost (issue 32) -------------------------------------------
    cut_cost = f"llm_interruption_cost_usd_total{{{STREAM}}}"
    d = d.with_row(Row("What interruptions cost").id(30))
    d = d.with_panel(
        big_number(
            31,
            "Interruption cost in range",
            "How much did the requests that did not complete (cut by either side, error"
            " events, truncated) cost in the range: the output generated before the cut,"
            " and their input?",
            "currencyUSD",
            query(f"sum(increase({cut_cost}[$__range]))", "interruptions", "A", instant=True),
            width=8,
        )
    )
    d = d.with_panel(
        big_number(
            32,
            "Interruptions' share of spend",
            "What share of the range's spend went to requests that did not complete?",
            "percentunit",
            query(
                f"sum(increase({cut_cost}[$__range]))"
                f" / sum(increase(llm_cost_usd_total{{{STREAM}}}[$__range]))",
                "share",
                "A",
                instant=True,
            ),
            width=8,
            thresholds=ThresholdsConfig()
            .mode(model.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    model.Threshold(value=None, color="green"),
                    model.Threshold(value=0.05, color="orange"),
                    model.Threshold(value=0.1, color="red"),
                ]
            ),
        )
    )
    d = d.with_panel(
        big_number(
            33,
            "Retries in range",
            "How many requests in the range were sent again after an attempt that did"
            " not complete (each pays its whole input again)?",
            "short",
            query(
                f"sum(increase(llm_retries_total{{{STREAM}}}[$__range]))",
                "retries",
                "A",
                instant=True,
            ),
            width=8,
            decimals=0,
        )
    )
    d = d.with_panel(
        graph(
            34,
            "Interruption cost per hour by outcome",
            "How much per hour do interruptions cost, by how the requests ended (an"
            " error event, cut by the upstream or the client, truncated), and what share"
            " of the spend is that (right axis)?",
            "currencyUSD",
            targets(
                (
                    rate("llm_interruption_cost_usd_total", by="outcome", scale=" * 3600"),
                    "{{outcome}}",
                ),
                (
                    f"sum(rate({cut_cost}[$__rate_interval]))"
                    f" / sum(rate(llm_cost_usd_total{{{STREAM}}}[$__rate_interval]))",
                    "share of spend",
                ),
            ),
            stacked=False,
            right_axis=("B", "percentunit"),
        )
    )
    d = d.with_panel(
        graph(
            35,
            "Retries per minute by model",
            "How often do clients send a request again after an attempt that did not"
            " complete, per model?",
            "short",
            targets((rate("llm_retries_total", by="model", scale=" * 60"), "{{model}}")),
        )
    )

    # -- Spend by tag (issue 32) -------------------------------------------------------
    tag = f"${TAG_VARIABLE}"
    d = d.with_row(Row("Spend by tag").id(36))
    d = d.with_panel(
        graph(
            37,
            "Cost per hour by tag",
            "Who spends it: how much per hour goes to each value of the chosen tag (the"
            " proxies' --metrics-tag; 'other' past the label cap, empty for requests"
            " without the tag)?",
            "currencyUSD",
            targets((rate("llm_cost_usd_total", by=tag, scale=" * 3600"), "__auto")),
            stacked=True,
        )
    )
    d = d.with_panel(
        graph(
            38,
            "Requests by tag and outcome",
            "How many requests per second does each value of the chosen tag send, and"
            " how do they end?",
            "reqps",
            targets((rate("llm_streams_total", by=f"{tag}, outcome"), "__auto")),
            stacked=True,
        )
    )
    d = d.with_panel(
        graph(
            39,
            "Tokens per hour by tag",
            "How many tokens per hour does each value of the chosen tag use, by type?",
            "short",
            targets((rate("llm_tokens_total", by=f"{tag}, token_type", scale=" * 3600"), "__auto")),
            width=24,
        )
    )

    # -- Budgets (issue 32) --------------------------------------------------------------
    d = d.with_row(Row("Budgets").id(40))
    d = d.with_panel(
        graph(
            41,
            "Monthly pace against budget",
            "At the last hour's rate of spend, what would a month cost, against each"
            " budget's monthly amount (the rules `recorder budgets rules` generates)?",
            "currencyUSD",
            targets(
                (f"max by (budget) ({BUDGET_PACE})", "{{budget}} at this pace"),
                (f"max by (budget) ({BUDGET_AMOUNT})", "{{budget}} budget"),
            ),
            width=16,
        )
    )
    d = d.with_panel(
        big_number(
            42,
            "Budget used at this pace",
            "What share of each monthly budget would a month at the last hour's rate"
            " of spend use (over 100%: the budget goes before the month ends)?",
            "percentunit",
            query(
                f"max by (budget) ({BUDGET_PACE}) / max by (budget) ({BUDGET_AMOUNT})",
                "{{budget}}",
                "A",
                instant=True,
            ),
            width=8,
            thresholds=ThresholdsConfig()
            .mode(model.ThresholdsMode.ABSOLUTE)
            .steps(
                [
                    model.Threshold(value=None, color="green"),
                    model.Threshold(value=0.8, color="orange"),
                    model.Threshold(value=1, color="red"),
                ]
            ),
        ).height(8)
    )

    # -- Stream rhythm -------------------------------------------------------------------
    d = d.with_row(Row("Stream rhythm").id(21))
    d = d.with_panel(
        distribution(
            22,
            "Keepalive gap distribution",
            "How far apart are keepalive comments: do they come often enough to keep every"
            " idle timeout on the path (often 60-150 s) from cutting a silent stream?",
            "llm_stream_keepalive_gap_seconds_bucket",
        )
    )
    d = d.with_panel(
        distribution(
            23,
            "Longest output silence per stream",
            "How long is the worst silence inside each stream, and how many streams come"
            " near the stall threshold or a gateway's 90-150 s cut?",
            "llm_stream_max_output_gap_seconds_bucket",
        )
    )
    d = d.with_panel(
        graph(
            29,
            "Stalled streams now, and the oldest output silence",
            "Set every second while streams are open, so a stall shows while it lasts,"
            " not when its stream ends: how many open streams are stalled right now"
            " (output silent for at least --stall-after; left axis), and what is the"
            " longest current output silence among them (right axis)?",
            "short",
            targets(
                (
                    'sum by (endpoint) (llm_streams_stalled{endpoint=~"$endpoint"})',
                    "stalled {{endpoint}}",
                ),
                (
                    'max by (endpoint) (llm_stream_oldest_silence_seconds{endpoint=~"$endpoint"})',
                    "oldest silence {{endpoint}}",
                ),
            ),
            width=24,
            right_axis=("B", "s"),
        )
    )

    # -- Recorder health -----------------------------------------------------------------
    def per_minute(name: str) -> str:
        return f"sum(rate(llm_recorder_{name}_total[$__rate_interval])) * 60"

    d = d.with_row(Row("Recorder health").id(24))
    d = d.with_panel(
        graph(
            25,
            "Write queue and spool",
            "Is the recorder keeping up with writing records, and are records waiting in"
            " the local spool for the database?",
            "short",
            targets(
                ("sum by (instance) (llm_recorder_write_queue_depth)", "queue {{instance}}"),
                ("sum by (instance) (llm_recorder_spool_depth)", "spool {{instance}}"),
            ),
            width=8,
        )
    )
    d = d.with_panel(
        graph(
            26,
            "Records per minute",
            "Is every finished record reaching the database: handed to the writer,"
            " written, spooled, failed, dropped?",
            "short",
            targets(
                *(
                    (per_minute(f"records_{what}"), what)
                    for what in ("submitted", "written", "spooled", "failed", "dropped")
                )
            ),
            width=8,
        )
    )
    d = d.with_panel(
        graph(
            27,
            "Recorder problems per minute",
            "Is the recorder itself healthy: malformed events seen, exceptions caught"
            " inside it, bodies it could not decode, models folded into 'other'?",
            "short",
            targets(
                (per_minute("parse_issues"), "parse issues"),
                (per_minute("internal_errors"), "internal errors"),
                (per_minute("decode_errors"), "decode errors"),
                (per_minute("model_label_overflow"), "model label overflow"),
            ),
            width=8,
        )
    )
    d = d.with_panel(
        graph(
            28,
            "Scrape targets up",
            "Can Prometheus reach every proxy's /metrics?",
            "short",
            targets(('up{job="recorder"}', "{{instance}}")),
            width=24,
            height=5,
        )
    )
    return d


def as_json(built: Builder[model.Dashboard]) -> dict[str, Any]:
    """The dashboard as Grafana imports it: the library's JSON."""
    doc: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(built.build()))
    return doc


def text(built: Builder[model.Dashboard]) -> str:
    """The file's text: the JSON, keys sorted, two-space indents, a final newline."""
    return json.dumps(as_json(built), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from the build"
    )
    parser.add_argument(
        "--file", type=Path, default=OUTPUT, help=f"the dashboard file (default {OUTPUT.name})"
    )
    args = parser.parse_args(argv)
    built = text(overview())
    if args.check:
        same = args.file.read_text(encoding="utf-8") == built
        print(
            f"{args.file.name}: {'up to date' if same else 'differs from the build: run build.py'}"
        )
        return 0 if same else 1
    args.file.write_text(built, encoding="utf-8")
    print(f"wrote {args.file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
