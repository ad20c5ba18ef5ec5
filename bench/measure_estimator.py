"""Measure the output-token estimator against real captured streams.

Usage: ``.venv/bin/python bench/measure_estimator.py [--json] [--fixtures DIR] [--cuts N]
[--seed N] [--cost]`` (with the ``tokenizers`` extra installed, as the dev install has it)

Every fixture under ``tests/fixtures`` (raw ``.sse`` captures and payload-only
``.chunks.txt`` files, framed as ``tests/kit/framing.py`` says) is split
into its responses (several payload-only captures hold a whole multi-turn
exchange: a new ``message_start`` id or ``response.created`` starts the next
one). Each response whose usage reports output tokens (more than zero) is
metered, its output usage is then forgotten, as if the stream had been cut just
before its usage arrived, and ``recorder.core.billing.fill_usage`` estimates it
from what was received. The error is ``|estimate - reported| / reported``.

Two targets are reported:

- ``visible``: the reported output tokens, less the reported reasoning tokens
  when the model does not stream its reasoning (OpenAI's reasoning models
  stream a summary at most; no estimator that sees only the stream can count
  those). This is the estimator's own error.
- ``billed``: the reported output tokens as billed, hidden reasoning included:
  what an estimated row under-counts for such models.

Two estimators: the built-in defaults (some of them were fitted on these very
captures, so this is an in-sample figure), and held-out calibration: the
captures are split in two halves by a fixed hash of their names, and each half
is estimated by an ``Estimator`` taught only by the other half's records through
``Estimator.observe``, as the proxy teaches it from completed streams (with a
lower threshold than the proxy's, see CAL_SAMPLES). Figures are per provider
family: median and p90 of the error, and the bias of the total (signed).

Random cuts: each response is cut at ``--cuts`` random byte offsets, and the
estimate for the delivered prefix is compared with a tokenizer's count of the
text delivered (``recorder.proxy.tokenizers``, the ``tokenizers`` extra): exact for
OpenAI, the public Claude vocabulary (an approximation) for Claude up to 4.6.

Both are also reported by output size (``SIZES``: up to 10 tokens, 11 to 100,
more), the target's size: a fixed allowance (framing per response, per tool
call) weighs most where little was streamed, so short outputs get a row of their own.

``--cost`` times counting request bodies with each tokenizer against counting
characters only, in the same run (docs/billing.md quotes it).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The captures are too few for the proxy's threshold (20 records per model or
# family and kind): the calibrated run lowers it.
CAL_SAMPLES = 5
# output sizes reported apart: (label, largest target in tokens)
SIZES = (("<= 10 tokens", 10), ("11-100 tokens", 100), ("> 100 tokens", None))
sys.path.insert(0, str(ROOT))

from recorder.core.billing import absorb, fill_usage  # noqa: E402
from recorder.core.counts import OutputCounts, count_request  # noqa: E402
from recorder.core.estimate import Calibration, Estimator  # noqa: E402
from recorder.core.meter import StreamMeter  # noqa: E402
from recorder.core.model_families import PROFILES, family_for, hides_reasoning  # noqa: E402
from recorder.core.record import StreamRecord  # noqa: E402
from recorder.proxy import tokenizers  # noqa: E402


def _framing(fixtures: Path) -> Any:
    # The reader lives in the test kit; pointed at ``fixtures`` (--fixtures DIR).
    spec = importlib.util.spec_from_file_location(
        "fixture_framing", ROOT / "tests" / "kit" / "framing.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    module.FIXTURES = fixtures
    return module


def responses(framing: Any, path: Path) -> list[tuple[str, str, bytes]]:
    """``(name, endpoint, wire bytes)`` of each response a capture holds."""
    endpoint = framing.endpoint_for(path)
    name = framing.fixture_name(path)
    if not framing.is_payload_only(path):
        return [(name, endpoint, path.read_bytes())]
    groups: list[list[bytes]] = [[]]
    last_id = None
    for line in framing.payload_lines(path):
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        kind = obj.get("type") if isinstance(obj, dict) else None
        starts = False
        if endpoint == "messages" and kind == "message_start":
            message = obj.get("message") if isinstance(obj, dict) else None
            mid = message.get("id") if isinstance(message, dict) else None
            starts = mid != last_id
            last_id = mid
        elif endpoint == "responses" and kind == "response.created":
            starts = True
        if starts and groups[-1]:
            groups.append([])
        groups[-1].append(line)
    many = len(groups) > 1
    return [
        (f"{name}#{n}" if many else name, endpoint, framing.frame_payloads(lines, endpoint))
        for n, lines in enumerate(groups, 1)
    ]


def meter(endpoint: str, body: bytes) -> StreamRecord:
    """The finished record of a body, with the billing facts absorbed."""
    m = StreamMeter(endpoint)
    m.feed(body)
    record = m.finish()
    absorb(record, m.interpreter.obs, None)
    return record


def forget_output(record: StreamRecord) -> StreamRecord:
    """The record as if the stream had been cut just before its usage arrived."""
    return replace(
        record,
        output_tokens=None,
        reasoning_tokens=None,
        raw_usage=None,
        output_source="none",
        gaps=[],
    )


# -- the text a stream delivered (for the exact tokenizers) ---------------------


def delivered_text(endpoint: str, body: bytes) -> str:
    """The billed output text of complete events in ``body``: text, full reasoning,
    tool arguments (never reasoning summaries), concatenated in arrival order."""
    parts: list[str] = []
    for line in body.split(b"\n"):
        if not line.startswith(b"data:"):
            continue
        try:
            obj = json.loads(line[5:])
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if endpoint == "chat.completions":
            for choice in obj.get("choices") or []:
                delta = choice.get("delta") or {}
                for key in ("content", "reasoning_content", "reasoning", "refusal"):
                    if isinstance(delta.get(key), str):
                        parts.append(delta[key])
                for call in delta.get("tool_calls") or []:
                    args = (call.get("function") or {}).get("arguments")
                    if isinstance(args, str):
                        parts.append(args)
        elif endpoint == "messages":
            if obj.get("type") == "content_block_delta":
                delta = obj.get("delta") or {}
                for key in ("text", "thinking", "partial_json"):
                    if isinstance(delta.get(key), str):
                        parts.append(delta[key])
        else:
            kind = str(obj.get("type", ""))
            if (
                kind.endswith(".delta")
                and "summary" not in kind
                and isinstance(obj.get("delta"), str)
            ):
                parts.append(obj["delta"])
    return "".join(parts)


# provider families of the report: the estimator's families, OpenAI's merged
_GROUPS = {
    "openai-o200k": "openai",
    "openai-reasoning": "openai",
    "openai-cl100k": "openai",
    "anthropic": "anthropic",
    "anthropic-new": "anthropic-new",
    "default": "other",
}


def group_of(model: str | None, endpoint: str) -> str:
    """The provider family a response is reported under."""
    return _GROUPS[family_for(model, endpoint)]


# methods that say part of the billed output was never in the stream
_UNSEEN = re.compile(r"hidden-reasoning|summarised-thinking|reasoning-from-time")


def half_of(capture: str) -> int:
    """0 or 1: the half of the captures this one belongs to (a fixed hash of its name)."""
    return hashlib.sha256(capture.encode()).digest()[0] & 1


def measure(fixtures: Path, cuts: int = 5, seed: int = 15) -> dict[str, Any]:
    """Every response's estimate and error, and the summary figures."""
    framing = _framing(fixtures)
    samples = []
    for path in framing.fixture_files():
        for name, endpoint, body in responses(framing, path):
            record = meter(endpoint, body)
            if not record.output_tokens:
                continue
            model = record.response_model or record.model
            reasoning = record.reasoning_tokens or 0
            hidden = hides_reasoning(model, endpoint) and reasoning > 0
            visible = record.output_tokens - (reasoning if hidden else 0)
            capture = name.split("#")[0]
            samples.append(
                {
                    "name": name,
                    "capture": capture,
                    "half": half_of(capture),
                    "endpoint": endpoint,
                    "model": model,
                    "group": group_of(model, endpoint),
                    "reported": record.output_tokens,
                    "visible": visible,
                    "record": record,
                    "body": body,
                }
            )
    # two-fold: each half is estimated by an estimator taught by the other half only
    teachers = []
    for half in (0, 1):
        teacher = Estimator(Calibration(min_samples=CAL_SAMPLES))
        for other in samples:
            if other["half"] != half:
                teacher.observe(other["record"])
        teachers.append(teacher)
    for sample in samples:
        est = forget_output(sample["record"])
        fill_usage(est, Estimator())
        sample["estimate"] = est.output_tokens
        sample["method"] = est.estimate_method
        cal = forget_output(sample["record"])
        fill_usage(cal, teachers[sample["half"]])
        sample["calibrated"] = cal.output_tokens
    rows = []
    for s in samples:
        row = {k: s[k] for k in ("name", "endpoint", "model", "group", "half", "reported")}
        row.update(visible=s["visible"], estimate=s["estimate"], calibrated=s["calibrated"])
        row["method"] = s["method"]
        row["error_visible"] = _err(s["estimate"], s["visible"])
        row["error_billed"] = _err(s["estimate"], s["reported"])
        row["error_calibrated"] = _err(s["calibrated"], s["visible"])
        rows.append(row)
    groups = sorted({r["group"] for r in rows})

    def of(group: str) -> list[dict[str, Any]]:
        return [r for r in rows if r["group"] == group]

    summary = {
        "visible": _summary(rows, "error_visible", "visible", "estimate"),
        "billed": _summary(rows, "error_billed", "reported", "estimate"),
        "calibrated_visible": _summary(rows, "error_calibrated", "visible", "calibrated"),
        "by_family": {g: _summary(of(g), "error_visible", "visible", "estimate") for g in groups},
        "calibrated_by_family": {
            g: _summary(of(g), "error_calibrated", "visible", "calibrated") for g in groups
        },
        "by_size": _by_size(rows, "visible", "error_visible", "visible", "estimate"),
        "calibrated_by_size": _by_size(
            rows, "visible", "error_calibrated", "visible", "calibrated"
        ),
        # responses whose whole output is in the stream: the estimator's own error
        "in_stream_by_family": {
            g: _summary(
                [r for r in of(g) if not _UNSEEN.search(r["method"] or "")],
                "error_calibrated",
                "visible",
                "calibrated",
            )
            for g in groups
        },
    }
    return {
        "rows": rows,
        "summary": summary,
        "cuts": measure_cuts(samples, teachers, cuts, seed),
    }


def measure_cuts(
    samples: list[dict[str, Any]], teachers: list[Estimator], cuts: int, seed: int
) -> dict[str, Any]:
    """Cut each response at ``cuts`` random byte offsets; compare the estimate of the
    delivered prefix with the exact tokenizer's count of its text (where one exists).
    Claude has no public tokenizer of its own: its rows are compared with the
    older public vocabulary, marked approximate, a reference and not a truth.

    What a provider bills for a cut stream's framing is not known, so two
    references bracket it: ``streamed``, the count plus each started tool call's
    allowance (kept whole by the estimator), and ``framed``, that plus a whole
    response's allowance (as if the stream had ended). Two estimates: ``whole``
    gives a cut stream the whole per-response allowance (the estimator's way
    before it knew of cuts), ``scaled`` scales it to what the stream produced
    (``Estimator.output(cut=True)`` for an interrupted record, as the proxy's
    billing passes it)."""
    rng = random.Random(seed)
    rows = []
    for sample in samples:
        found = tokenizers.reference_counter_for(sample["model"], sample["endpoint"])
        if found is None or sample["group"] == "anthropic-new":
            continue  # no tokenizer, or one far from the model's (about 1.6 times fewer)
        encoding, count = found
        exact = encoding not in tokenizers.APPROXIMATE
        body: bytes = sample["body"]
        teacher = teachers[sample["half"]]
        for _ in range(cuts):
            at = rng.randrange(1, len(body))
            prefix = body[:at]
            record = meter(sample["endpoint"], prefix)
            text = delivered_text(sample["endpoint"], prefix)
            if not text or record.output_breakdown is None:
                continue
            counts = OutputCounts.from_breakdown(record.output_breakdown, record.tool_calls)
            model = record.response_model or record.model
            whole = teacher.output(model, sample["endpoint"], counts).tokens
            scaled = teacher.output(
                model, sample["endpoint"], counts, cut=record.interrupted is True
            ).tokens
            profile = PROFILES[family_for(sample["model"], sample["endpoint"])]
            streamed = count(text) + record.tool_calls * profile.call_tokens
            framed = streamed + profile.response_tokens
            row = {
                "name": sample["name"],
                "group": sample["group"],
                "encoding": encoding if exact else f"{encoding} (approximate)",
                "whole": whole,
                "scaled": scaled,
                "streamed": streamed,
                "framed": framed,
            }
            for estimate in ("whole", "scaled"):
                for reference in ("streamed", "framed"):
                    row[f"error_{estimate}_{reference}"] = _err(row[estimate], row[reference])
            rows.append(row)
    groups = sorted({r["group"] for r in rows})
    versus: dict[str, Any] = {}
    for estimate in ("whole", "scaled"):
        for reference in ("streamed", "framed"):
            key = f"error_{estimate}_{reference}"
            versus[f"{estimate}_vs_{reference}"] = {
                "by_size": _by_size(rows, "streamed", key, reference, estimate),
                "by_family": {
                    g: _summary([r for r in rows if r["group"] == g], key, reference, estimate)
                    for g in groups
                },
            }
    return {
        "n": len(rows),
        "encoding": {g: sorted({r["encoding"] for r in rows if r["group"] == g}) for g in groups},
        **versus,
    }


def measure_cost(fixtures: Path, repeats: int = 7) -> dict[str, Any]:
    """What counting a request body costs with each tokenizer, per request, against
    counting characters only (the anchor), all in this run. The bodies are built
    from the captures' own output text: a conversation of growing length, as an
    agent's requests are (each resends the history)."""
    framing = _framing(fixtures)
    texts = []
    for path in framing.fixture_files():
        for _, endpoint, body in responses(framing, path):
            text = delivered_text(endpoint, body)
            if text:
                texts.append(text)
    bodies = []
    history: list[dict[str, str]] = [{"role": "system", "content": "You are helpful."}]
    for n, text in enumerate(texts):
        history.append({"role": "user" if n % 2 else "assistant", "content": text})
        bodies.append(json.dumps({"model": "m", "messages": list(history)}).encode())
    size = sum(len(b) for b in bodies)
    variants: dict[str, Any] = {"characters only": None}
    for model, endpoint in (("gpt-4o", "chat.completions"), ("claude-sonnet-4-5", "messages")):
        found = tokenizers.reference_counter_for(model, endpoint)
        if found is not None:
            variants[found[0]] = found
    runs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, found in variants.items():  # interleaved: the same noise for each
            start = time.perf_counter()
            for body in bodies:
                if found is None:
                    count_request(body, "chat.completions")
                else:
                    count_request(body, "chat.completions", counter=found[1], encoding=found[0])
            runs[name].append((time.perf_counter() - start) / len(bodies))
    anchor = statistics.median(runs["characters only"])
    return {
        "requests": len(bodies),
        "mean_body_bytes": round(size / len(bodies)),
        "repeats": repeats,
        "per_request_us": {
            name: {
                "median": round(statistics.median(v) * 1e6, 1),
                "min": round(min(v) * 1e6, 1),
                "max": round(max(v) * 1e6, 1),
                "ratio_to_anchor": round(statistics.median(v) / anchor, 2),
            }
            for name, v in runs.items()
        },
    }


def _err(estimate: int | None, target: int) -> float | None:
    if estimate is None or target <= 0:
        return None
    return abs(estimate - target) / target


def _summary(rows: list[dict[str, Any]], key: str, target: str, estimate: str) -> dict[str, Any]:
    errors = sorted(r[key] for r in rows if r[key] is not None)
    if not errors:
        return {"n": 0}
    pairs = [(r[estimate], r[target]) for r in rows if r[key] is not None]
    total = sum(t for _, t in pairs)
    return {
        "n": len(errors),
        "median": round(statistics.median(errors), 4),
        "p90": round(errors[min(len(errors) - 1, int(0.9 * len(errors)))], 4),
        "within_10pct": sum(1 for e in errors if e <= 0.10),
        # what a bill would see: the signed error of the totals (negative: under)
        "bias": round((sum(e for e, _ in pairs) - total) / total, 4),
    }


def _size_of(tokens: int) -> str:
    for label, most in SIZES:
        if most is None or tokens <= most:
            return label
    raise AssertionError("the last size has no bound")


def _by_size(
    rows: list[dict[str, Any]], size: str, key: str, target: str, estimate: str
) -> dict[str, Any]:
    """:func:`_summary` of the rows in each of ``SIZES``, by the ``size`` column."""
    return {
        label: _summary([r for r in rows if _size_of(r[size]) == label], key, target, estimate)
        for label, _ in SIZES
    }


def _line(label: str, f: dict[str, Any]) -> str:
    if not f.get("n"):
        return f"{label}: N=0"
    return (
        f"{label}: N={f['n']} median={f['median']:.1%} p90={f['p90']:.1%} "
        f"within 10%: {f['within_10pct']}/{f['n']} bias of the total: {f['bias']:+.1%}"
    )


def main() -> None:
    """Print the per-response table and the summary (or JSON with --json)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--fixtures", type=Path, default=ROOT / "tests" / "fixtures")
    parser.add_argument("--cuts", type=int, default=5, help="random cuts per response")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--cost", action="store_true", help="time request counting too")
    args = parser.parse_args()
    result = measure(args.fixtures, args.cuts, args.seed)
    if args.cost:
        result["cost"] = measure_cost(args.fixtures)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{'response':<64} {'family':<13} {'rep':>6} {'vis':>6} {'est':>6} {'cal':>6}  method")
    for r in result["rows"]:
        print(
            f"{r['name'][:64]:<64} {r['group']:<13} {r['reported']:>6} {r['visible']:>6} "
            f"{r['estimate']:>6} {r['calibrated']:>6}  {r['method']}"
        )
    s = result["summary"]
    print()
    print(_line("visible output, built-in defaults", s["visible"]))
    print(_line("billed output (hidden reasoning included), built-in defaults", s["billed"]))
    print(
        _line(
            f"visible output, held-out half calibration (>= {CAL_SAMPLES})", s["calibrated_visible"]
        )
    )
    for g, f in s["by_family"].items():
        print(_line(f"  {g}, defaults", f))
        print(_line(f"  {g}, held-out calibrated", s["calibrated_by_family"][g]))
        print(_line(f"  {g}, held-out, whole output in the stream", s["in_stream_by_family"][g]))
    print("by output size (the target's), built-in defaults / held-out calibrated:")
    for label, f in s["by_size"].items():
        print(_line(f"  {label}, defaults", f))
        print(_line(f"  {label}, held-out calibrated", s["calibrated_by_size"][label]))
    c = result["cuts"]
    print(f"\nrandom cuts ({args.cuts} per response, seed {args.seed}) vs the exact tokenizer")
    print("(streamed: its count of the text delivered, plus the started calls' allowance;")
    print(" framed: that plus a whole response's allowance)")
    for estimate, what in (
        ("whole", "the whole per-response allowance"),
        ("scaled", "the allowance scaled to a cut"),
    ):
        for reference in ("streamed", "framed"):
            print(f"estimated with {what}, against {reference}:")
            versus = c[f"{estimate}_vs_{reference}"]
            for g, f in versus["by_family"].items():
                print(_line(f"  {g} ({', '.join(c['encoding'][g])})", f))
            for label, f in versus["by_size"].items():
                print(_line(f"  {label}", f))
    if args.cost:
        cost = result["cost"]
        print(
            f"\ncounting a request body ({cost['requests']} requests, mean"
            f" {cost['mean_body_bytes']} bytes, {cost['repeats']} interleaved repeats):"
        )
        for name, v in cost["per_request_us"].items():
            print(
                f"  {name}: median {v['median']} us (min {v['min']}, max {v['max']}),"
                f" x{v['ratio_to_anchor']} the characters-only count"
            )


if __name__ == "__main__":
    main()
