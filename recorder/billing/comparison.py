"""Recorded usage against a provider's usage export (`recorder reconcile`).

Both sides are summed per group, (day, model, key or project), and compared
figure by figure: requests, input, output, cache read and cache write tokens,
cost. A figure is compared only when an export covers it (has its column); a
group absent from the export then counts as zero there, since the export would
have listed what was billed. A difference is reported when it exceeds both the
relative tolerance (of the larger side) and the absolute one. Each reported
group names the streams that may explain it: usage estimated here (a cut
stream, Chat Completions without ``include_usage``), interrupted streams,
``http_error`` streams (not billed here), streams without a price.

The two sides are made comparable:

- day: the UTC date the stream started / the export's bucket start;
- model: the model that served the request (``response_model``, else the
  requested one) and the export's model, both without provider prefix, snapshot
  date or ``-latest`` (``recorder.core.estimate.model_base``), unless exact
  names are asked for; the mapping file may rename an export's models;
- key or project: the export's ids are translated to the recorder's
  ``api_key_id`` / ``project`` through the mapping file; an id it does not name
  is used as it is (an export in the recorder's own format already has ours);
- input tokens are all prompt tokens on both sides (Anthropic's uncached input,
  cache reads and cache writes are added up, as the recorder counts them).

Batch API traffic in an export (OpenAI's ``batch``, Anthropic's ``service_tier``
batch) never passes through a proxy: its rows are summed apart
(:attr:`Result.batch_total`) and compared with nothing.

The recorded side is the streams of the days the export covers (or of
``--since``/``--until``), of the export's provider when its format tells; a
stream whose usage is unknown (``usage_source`` ``none``) is not billed and
counts in no figure. Export formats are recognised by their columns
(:data:`recorder.billing.export_formats.FORMATS`, the providers' first: their
columns are the more telling; docs/billing.md, "Reconciliation"). Parsing and
comparison are pure (the exports: :mod:`recorder.billing.export_model` and the modules it
names; the mapping: :mod:`recorder.billing.id_mapping`; the report:
:mod:`recorder.billing.reconcile_report`); :mod:`recorder.store.reconcile_sql`
reads the recorded streams."""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal

from recorder.billing.export_model import FIGURES, Export, ExportError, ExportRow, Number
from recorder.billing.id_mapping import IdMapping
from recorder.billing.recorded_streams import Stream
from recorder.core.model_families import model_base
from recorder.core.money import EXACT, ZERO

DIMENSIONS = ("key", "project", "none")


@dataclass(frozen=True, slots=True)
class Tolerance:
    """A difference counts when it exceeds ``relative`` of the larger side AND the
    absolute allowance (``tokens`` for counts, ``usd`` for cost)."""

    relative: Decimal = Decimal("0.02")
    tokens: int = 0
    usd: Decimal = Decimal("0.01")

    def describe(self) -> str:
        """The tolerance in words, as the output states it."""
        percent = f"{(self.relative * 100).normalize():f}"
        return (
            f"tolerance: a difference counts beyond {percent}% of the larger side and"
            f" beyond {self.tokens} tokens or requests ({self.usd:f} USD for cost)"
        )

    def exceeded(self, figure: str, recorded: Number, exported: Number) -> bool:
        """Whether ``exported - recorded`` is beyond this tolerance."""
        with decimal.localcontext(EXACT):
            diff = abs(Decimal(exported) - Decimal(recorded))
            base = max(abs(Decimal(exported)), abs(Decimal(recorded)))
            allowance = self.usd if figure == "cost_usd" else Decimal(self.tokens)
            return diff > allowance and diff > self.relative * base


GroupKey = tuple[str, str | None, str | None]  # day, model, key/project (None: not grouped)


@dataclass(slots=True)
class Group:
    """One (day, model, key or project): both sides and the streams in it."""

    day: str
    model: str | None
    dim: str | None
    recorded: dict[str, Number]
    exported: dict[str, Number]
    streams: list[Stream] = field(default_factory=list)
    in_export: bool = False


@dataclass(slots=True)
class Result:
    """What reconciliation found."""

    by: str
    figures: tuple[str, ...]
    groups: list[Group]
    differing: list[tuple[Group, list[str]]]  # and the figures beyond tolerance
    unmapped_keys: set[str] = field(default_factory=set)
    unmapped_projects: set[str] = field(default_factory=set)
    recorded_total: dict[str, Number] = field(default_factory=dict)
    exported_total: dict[str, Number] = field(default_factory=dict)
    tolerance: Tolerance = field(default_factory=Tolerance)
    # Batch API traffic the export reports: left out of the comparison, summed apart
    # (per figure the export covers) with the number of its rows.
    batch_rows: int = 0
    batch_total: dict[str, Number] = field(default_factory=dict)


def choose_by(export: Export, by: str | None) -> str:
    """``key`` when the export names keys, else ``project`` when it names
    projects, else ``none`` (unless ``by`` is given)."""
    if by and by != "auto":
        if by not in DIMENSIONS:
            raise ExportError(f"--by: one of {', '.join(DIMENSIONS)}, auto")
        return by
    if export.has_key:
        return "key"
    if export.has_project:
        return "project"
    return "none"


def _model_key(name: str | None, exact: bool) -> str | None:
    if name is None:
        return None
    return name if exact else model_base(name)


def _zero(figure: str) -> Number:
    return ZERO if figure == "cost_usd" else 0


def _stream_figures(s: Stream) -> dict[str, Number]:
    return {
        "requests": s.requests,
        "input_tokens": s.input_tokens or 0,
        "output_tokens": s.output_tokens or 0,
        "cache_read_tokens": s.cache_read_tokens or 0,
        "cache_write_tokens": s.cache_write_tokens or 0,
        "cost_usd": s.cost_usd or ZERO,
    }


@dataclass(slots=True)
class _Sums:
    """Both sides summed into groups as they are read (in :data:`EXACT`)."""

    dim: str
    figures: tuple[str, ...]
    mapping: IdMapping
    exact_models: bool
    groups: dict[GroupKey, Group] = field(default_factory=dict)
    unmapped_keys: set[str] = field(default_factory=set)
    unmapped_projects: set[str] = field(default_factory=set)
    batch_rows: int = 0
    batch_total: dict[str, Number] = field(default_factory=dict)  # the figures batch rows carry

    def group(self, day: str, model: str | None, who: str | None) -> Group:
        key = (day, _model_key(model, self.exact_models), who)
        if key not in self.groups:
            zeros = {f: _zero(f) for f in self.figures}
            self.groups[key] = Group(key[0], key[1], who, dict(zeros), dict(zeros))
        return self.groups[key]

    def _who(self, row: ExportRow) -> str | None:
        """The row's key or project as the recorder names it (noting ids the
        mapping file does not name, when it names some)."""
        m = self.mapping
        if self.dim == "key":
            if row.key is not None and m.keys and row.key not in m.keys:
                self.unmapped_keys.add(row.key)
            return m.key(row.key)
        if self.dim == "project":
            if row.project is not None and m.projects and row.project not in m.projects:
                self.unmapped_projects.add(row.project)
            return m.project(row.project)
        return None

    def add_export(self, rows: Iterable[ExportRow]) -> None:
        for row in rows:
            if row.batch:
                # never proxied: summed apart, compared with nothing recorded
                self.batch_rows += 1
                for f, value in row.figures.items():
                    self.batch_total[f] = self.batch_total.get(f, _zero(f)) + value
                continue
            g = self.group(row.day, self.mapping.model(row.model), self._who(row))
            g.in_export = True
            for f, value in row.figures.items():
                if f in g.exported:
                    g.exported[f] += value

    def add_streams(self, streams: Iterable[Stream]) -> None:
        dim = self.dim
        for s in streams:
            who = s.api_key_id if dim == "key" else s.project if dim == "project" else None
            g = self.group(s.day, s.model, who)
            g.streams.append(s)
            if not s.billed:
                continue
            values = _stream_figures(s)
            for f in self.figures:
                g.recorded[f] += values[f]


def reconcile(
    export: Export,
    streams: Iterable[Stream],
    *,
    mapping: IdMapping | None = None,
    by: str | None = None,
    tolerance: Tolerance | None = None,
    exact_models: bool = False,
) -> Result:
    """Compare the export with the recorded streams, group by group."""
    tolerance = tolerance or Tolerance()
    figures = tuple(f for f in FIGURES if f in export.figures)
    sums = _Sums(choose_by(export, by), figures, mapping or IdMapping(), exact_models)
    with decimal.localcontext(EXACT):
        sums.add_export(export.rows)
        sums.add_streams(streams)
    ordered = sorted(
        sums.groups.values(),
        key=lambda g: (g.day, g.model is None, g.model or "", g.dim is None, g.dim or ""),
    )
    differing = []
    for g in ordered:
        beyond = [f for f in figures if tolerance.exceeded(f, g.recorded[f], g.exported[f])]
        if beyond:
            differing.append((g, beyond))
    with decimal.localcontext(EXACT):
        recorded_total = {f: sum((g.recorded[f] for g in ordered), _zero(f)) for f in figures}
        exported_total = {f: sum((g.exported[f] for g in ordered), _zero(f)) for f in figures}
    return Result(
        sums.dim,
        figures,
        ordered,
        differing,
        sums.unmapped_keys,
        sums.unmapped_projects,
        recorded_total,
        exported_total,
        tolerance,
        sums.batch_rows,
        {f: sums.batch_total[f] for f in FIGURES if f in sums.batch_total},
    )
