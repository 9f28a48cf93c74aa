"""What the ``k25trace html`` page shows, fetched once: the report views, the representative steps' timelines, and
the few figures derived from them (bars per run and batch size, a run's main batch size, step-time quartiles)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import duckdb
import polars as pl

from k25trace.analysis import report
from k25trace.analysis.findings_base import Findings
from k25trace.db import query_frame
from k25trace.stats import quantile


@dataclass(frozen=True)
class PageFilters:
    """The step filters of the page (``--rank``, ``--trace``, ``--batch``, ``--run``; None: every one)."""

    rank: int | None = None
    trace_id: int | None = None
    batch_size: int | None = None
    run_id: str | None = None

    @property
    def per_rank(self) -> bool:
        """Whether the steps are those of one rank or one trace (the cross-rank sections cannot be)."""
        return self.rank is not None or self.trace_id is not None

    def ranks(self) -> dict[str, Any]:
        """The rank and trace filters, as the report's queries take them."""
        return {"rank": self.rank, "trace_id": self.trace_id}

    def steps(self) -> dict[str, Any]:
        """The batch-size and run filters, as the report's queries take them."""
        return {"batch_size": self.batch_size, "run_id": self.run_id}

    def keep(self, frame: pl.DataFrame, *, ranks: bool = True) -> pl.DataFrame:
        """The rows of ``frame`` (with run_id, batch_size and, when ``ranks``, rank and trace_id columns) that the
        filters select."""
        wanted = {"run_id": self.run_id, "batch_size": self.batch_size}
        if ranks:
            wanted |= {"rank": self.rank, "trace_id": self.trace_id}
        for column, value in wanted.items():
            if value is not None and column in frame.columns:
                frame = frame.filter(pl.col(column) == value)
        return frame


@dataclass
class Lane:
    """One rank's part of a representative step: its aligned window and its slices, run-length encoded."""

    rank: int
    trace_id: int
    offset_ns: int
    aligned: bool
    start_ns: int  # aligned GPU start / end of this rank's step
    end_ns: int
    wall_ns: int
    idle_ns: int
    collectives: int
    wait_ns: int
    caused_wait_ns: int
    marker: str | None
    segments: list[tuple[int, int, str]] = field(default_factory=list)  # (first slice, end slice, category)


@dataclass
class Timeline:
    """One representative step of a run and batch size, on every rank (``representative_steps``)."""

    run_id: str
    level: str | None
    batch_size: int | None
    step_index: int
    candidates: int
    wall_ms: float
    median_wall_ms: float
    inferred: bool
    start_ns: int  # the aligned window: first GPU activity of any rank → last of any rank
    end_ns: int
    buckets: int
    lanes: list[Lane]


@dataclass
class ReportData:
    """Everything the page shows, fetched once from the database."""

    source: str
    phase: str
    notes: list[str]
    runs: pl.DataFrame
    batch: pl.DataFrame
    idle: pl.DataFrame
    comm: pl.DataFrame
    kernels: pl.DataFrame
    step_times: pl.DataFrame
    levels: pl.DataFrame
    timelines: list[Timeline]
    top: int
    labels: dict[str, str] = field(default_factory=dict)  # run_id -> its label (trace_runs.run_label)
    filters: PageFilters = field(default_factory=PageFilters)
    layers: pl.DataFrame = field(default_factory=pl.DataFrame)  # report --by layer
    layer_parts: pl.DataFrame = field(default_factory=pl.DataFrame)  # html_layer_categories
    layer_late: pl.DataFrame = field(default_factory=pl.DataFrame)  # report --by layer-late
    layer_reasons: pl.DataFrame = field(default_factory=pl.DataFrame)  # html_layer_reasons

    def run_name(self, run_id: str, level: str | None = None) -> str:
        """The run's label (the id itself for an unknown run), with the capture level when given."""
        name = self.labels.get(str(run_id), str(run_id))
        return f"{name}, level {level}" if level else name


def collect(
    con: duckdb.DuckDBPyConnection,
    *,
    source: str = "",
    phase: str | None = None,
    top: int = 20,
    buckets: int,
    filters: PageFilters | None = None,
) -> ReportData:
    """Run every query the page needs (the report views and the representative steps' timelines), of the steps
    ``filters`` select; the views that pair ranks (collectives, layer lateness) take only its batch size and run."""
    phase, note = report.resolve_phase(con, phase)
    chosen = filters or PageFilters()
    step_times = query_frame(con, "step_times", {"phase": phase})
    if chosen.trace_id is not None and chosen.run_id is None:  # one trace is of one run: the cross-rank views too
        runs = step_times.filter(pl.col("trace_id") == chosen.trace_id)["run_id"].unique().to_list()
        chosen = dataclasses.replace(chosen, run_id=runs[0]) if len(runs) == 1 else chosen
    notes = ([note] if note else []) + report.run_warnings(con) + report.alignment_warnings(con)
    each = {"phase": phase, **chosen.ranks(), **chosen.steps()}
    timelines = [
        step_timeline(con, row, buckets, chosen)
        for row in chosen.keep(query_frame(con, "representative_steps", {"phase": phase})).iter_rows(named=True)
    ]
    return ReportData(
        source=source,
        phase=phase,
        notes=notes,
        runs=chosen.keep(query_frame(con, "runs"), ranks=False),
        batch=report.breakdown(con, by="batch", **each),
        idle=report.breakdown(con, by="idle", **each),
        comm=report.breakdown(con, by="comm", phase=phase, **chosen.steps()),
        kernels=report.breakdown(con, by="kernel", **each, top=top),
        step_times=chosen.keep(step_times),
        levels=chosen.keep(query_frame(con, "run_levels"), ranks=False),
        timelines=[t for t in timelines if t.lanes],
        top=top,
        labels=report.run_labels(con),
        filters=chosen,
        layers=report.breakdown(con, by="layer", **each),
        layer_parts=query_frame(con, "html_layer_categories", each),
        layer_late=report.breakdown(con, by="layer-late", phase=phase, **chosen.steps()),
        layer_reasons=query_frame(con, "html_layer_reasons", each),
    )


def chosen_findings(result: Findings, filters: PageFilters) -> Findings:
    """The findings of the groups (run, batch size) the filters' batch size and run choose (each group's findings
    are computed from its own steps alone, so the others can be left out)."""
    return dataclasses.replace(
        result,
        groups=tuple(
            g
            for g in result.groups
            if filters.batch_size in (None, g.batch_size) and filters.run_id in (None, g.run_id)
        ),
    )


def step_timeline(
    con: duckdb.DuckDBPyConnection, rep: dict[str, Any], buckets: int, filters: PageFilters | None = None
) -> Timeline:
    """One step on every rank of its run (of the rank or trace ``filters`` name, when one is), cut into
    ``buckets`` slices of one common aligned window; each slice is the category that ran longest in it, or the
    cause of the idle time there (``browse_step_timeline``)."""
    lanes_frame = query_frame(con, "step_lanes", {"run_id": rep["run_id"], "step_index": rep["step_index"]})
    lanes_frame = (filters or PageFilters()).keep(lanes_frame.filter(pl.col("wall_ns") > 0))
    timeline = Timeline(
        run_id=rep["run_id"],
        level=rep["level"],
        batch_size=rep["batch_size"],
        step_index=rep["step_index"],
        candidates=rep["candidates"],
        wall_ms=rep["wall_ms"],
        median_wall_ms=rep["median_wall_ms"],
        inferred=bool(rep["inferred"]),
        start_ns=0,
        end_ns=0,
        buckets=buckets,
        lanes=[],
    )
    if lanes_frame.is_empty():
        return timeline
    start = int(cast(int, lanes_frame["aligned_start_ns"].min()))
    end = int(cast(int, lanes_frame["aligned_end_ns"].max()))
    timeline.start_ns, timeline.end_ns = start, end
    rows = list(lanes_frame.iter_rows(named=True))
    strips = _lane_strips(
        con,
        [
            {
                "trace_id": row["trace_id"],
                "step_index": rep["step_index"],
                "start_ns": start + row["offset_ns"],
                "end_ns": end + row["offset_ns"],
                "buckets": buckets,
            }
            for row in rows
        ],
    )
    for row, slices in zip(rows, strips, strict=True):
        lane = Lane(
            rank=row["rank"],
            trace_id=row["trace_id"],
            offset_ns=row["offset_ns"],
            aligned=row["aligned"],
            start_ns=row["aligned_start_ns"],
            end_ns=row["aligned_end_ns"],
            wall_ns=row["wall_ns"],
            idle_ns=row["idle_ns"],
            collectives=row["collectives"],
            wait_ns=row["wait_ns"],
            caused_wait_ns=row["caused_wait_ns"],
            marker=row["marker"],
        )
        for i in range(len(slices)):  # slices wholly outside this rank's own step are not drawn
            s0, s1 = start + (end - start) * i // buckets, start + (end - start) * (i + 1) // buckets
            if s1 <= lane.start_ns or s0 >= lane.end_ns:
                slices[i] = None
        lane.segments = run_lengths(slices)
        timeline.lanes.append(lane)
    return timeline


LANE_THREADS = 4
"""The lanes' strips are read this many at a time, each thread through a cursor of its own (64 ranks: 64 lanes
a step)."""


def _lane_strips(con: duckdb.DuckDBPyConnection, lanes: list[dict[str, Any]]) -> list[list[str | None]]:
    """Each lane's strip (``browse_step_timeline`` with that lane's parameters), in the order of ``lanes``."""

    def strips(cursor: duckdb.DuckDBPyConnection, part: list[dict[str, Any]]) -> list[list[str | None]]:
        return [query_frame(cursor, "browse_step_timeline", params)["category"].to_list() for params in part]

    threads = min(LANE_THREADS, os.cpu_count() or 1, len(lanes))
    if threads <= 1:
        return strips(con, lanes)
    parts = [lanes[i::threads] for i in range(threads)]  # one thread, one cursor, one part
    cursors = [con.cursor() for _ in parts]
    try:
        with ThreadPoolExecutor(threads) as pool:
            done = list(pool.map(strips, cursors, parts))
    finally:
        for cursor in cursors:
            cursor.close()
    out: list[list[str | None]] = [[] for _ in lanes]
    for i, part in enumerate(done):
        out[i::threads] = part
    return out


def run_lengths(values: list[str | None]) -> list[tuple[int, int, str]]:
    """Runs of equal values as (first index, end index, value); runs of ``None`` are left out."""
    out: list[tuple[int, int, str]] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        value = values[i]
        if value is not None:
            out.append((i, j, value))
        i = j
    return out


def groups(frame: pl.DataFrame, keys: list[str]) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    """The frame's groups by ``keys`` in order of first appearance, each with its key tuple."""
    if frame.is_empty():
        return []
    return [(tuple(k), g) for k, g in frame.group_by(keys, maintain_order=True)]


@dataclass
class Bar:
    """One run and batch size of ``report --by batch``: its step figures and its category rows in drawing order."""

    run_id: str
    batch: int | None
    level: str | None
    steps: int
    ranks: int
    step_ms: float
    median_ms: float
    idle_pct: float
    segments: list[dict[str, Any]]


def bars(frame: pl.DataFrame, category_order: Sequence[str]) -> list[Bar]:
    """``report_breakdown`` rows → one :class:`Bar` per (run, batch): the categories of ``category_order`` in that
    order, then any others by name, then ``overlap`` and ``idle``."""
    out = []
    for (run_id, batch), group in groups(frame, ["run_id", "batch_size"]):
        first = group.row(0, named=True)
        by_cat = {r["category"]: r for r in group.iter_rows(named=True)}
        order = [c for c in category_order if c in by_cat] + sorted(
            c for c in by_cat if c not in category_order and c not in ("overlap", "idle")
        )
        order += [c for c in ("overlap", "idle") if c in by_cat]
        out.append(
            Bar(
                run_id=run_id,
                batch=batch,
                level=first["level"],
                steps=first["steps"],
                ranks=first["ranks"],
                step_ms=first["step_ms"],
                median_ms=first["median_step_ms"],
                idle_pct=first["idle_pct"],
                segments=[by_cat[c] for c in order],
            )
        )
    return out


def step_ms_at(bar_list: list[Bar], run_id: str, batch: int | None) -> float | None:
    """The mean step time of a run at one batch size (``None`` when the run has no such bar)."""
    return next((b.step_ms for b in bar_list if b.run_id == run_id and b.batch == batch), None)


def series_key(runs: pl.DataFrame, run_id: str) -> str:
    """Capture levels of one capture (same directory and world size) form one series; other runs are their own."""
    row = runs.filter(pl.col("run_id") == run_id)
    if not row.is_empty() and row["capture_dir"][0] is not None:
        return f"{row['capture_dir'][0]}#ws{row['world_size'][0]}"
    return run_id


def main_batch(data: ReportData, run_id: str) -> int | None:
    """The batch size a run spent most steps at (ties: the one nearest its capture level's concurrency)."""
    rows = data.batch.filter((pl.col("run_id") == run_id) & pl.col("batch_size").is_not_null())
    if rows.is_empty():
        return None
    run = data.runs.filter(pl.col("run_id") == run_id)
    concurrency = run["concurrency"][0] if not run.is_empty() else None
    counts = {r["batch_size"]: r["steps"] for r in rows.iter_rows(named=True)}
    return min(counts, key=lambda b: (-counts[b], abs(b - concurrency) if concurrency else b, b))


@dataclass
class Box:
    """The quartiles of some step times and Tukey's fences (1.5 × the interquartile range beyond them)."""

    q1: float
    median: float
    q3: float
    lo_fence: float
    hi_fence: float
    whisker_lo: float  # the extreme values within the fences (the extremes of all values when none is)
    whisker_hi: float

    def is_outlier(self, value: float) -> bool:
        """Whether ``value`` lies beyond a fence."""
        return value < self.lo_fence or value > self.hi_fence


def box(values: list[float]) -> Box:
    """The box-plot figures of ``values`` (at least one), quartiles by linear interpolation (:func:`.quantile`)."""
    q1, med, q3 = (quantile(values, q) for q in (0.25, 0.5, 0.75))
    iqr = q3 - q1
    lo_fence, hi_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
    inside = [v for v in values if lo_fence <= v <= hi_fence] or values
    return Box(
        q1=q1, median=med, q3=q3, lo_fence=lo_fence, hi_fence=hi_fence, whisker_lo=min(inside), whisker_hi=max(inside)
    )


@dataclass
class LayerSegment:
    """One segment (pre, a layer, post) of a run and batch size's steps: ``report --by layer``'s row, with the
    median of each category's exclusive time in it (``html_layer_categories``) and who was late there."""

    label: str
    layer: int | None
    kind: str
    evidence: str
    steps: int
    wall_ms: float  # medians over the segment's rank-steps
    busy_ms: float
    parts: list[tuple[str, float]]  # (category, median ms) in drawing order; overlap and idle last; zeros left out
    vs_median_layer: float | None
    vs_kind: float | None
    flag: str | None
    outlier_steps: int  # rank-steps whose wall is ≥ 25 % over the segment's median
    outlier_list: list[int]  # their step indexes (of the first 10 such rank-steps), each once
    late: list[dict[str, Any]] = field(default_factory=list)  # report --by layer-late rows, the latest rank first


@dataclass
class LayerChart:
    """The segments of one run and batch size, in step order, and the median layer's busy time."""

    run_id: str
    batch_size: int | None
    segments: list[LayerSegment]
    median_layer_ms: float | None

    @property
    def layers(self) -> list[LayerSegment]:
        """The transformer layers alone (no pre, no post)."""
        return [s for s in self.segments if s.layer is not None]

    def slowest(self, n: int = 3) -> list[LayerSegment]:
        """The ``n`` layers with the most busy time, the slowest first (ties: the lower layer)."""
        return sorted(self.layers, key=lambda s: (-s.busy_ms, s.layer))[:n]


def layer_charts(data: ReportData, category_order: Sequence[str]) -> list[LayerChart]:
    """One :class:`LayerChart` per run and batch size of ``report --by layer`` (``data.layers``), its segments'
    category medians in the order of ``category_order`` (then any others by name, then overlap and idle)."""
    by_label = {label: run for run, label in data.labels.items()}
    parts: dict[tuple[str, int | None, str], dict[str, float]] = {}
    exact: dict[tuple[str, int | None, str], tuple[float, float]] = {}
    for r in data.layer_parts.iter_rows(named=True):
        key = (r["run_id"], r["batch_size"], r["segment"])
        parts.setdefault(key, {})[r["category"]] = r["ms"]
        exact[key] = (r["wall_ms"], r["busy_ms"])
    late: dict[tuple[str, int | None, str], list[dict[str, Any]]] = {}
    for r in data.layer_late.sort("lateness_ms", descending=True).iter_rows(named=True):
        late.setdefault((r["run_id"], r["batch_size"], r["segment"]), []).append(r)
    charts = []
    for (run, batch), group in groups(data.layers, ["run", "batch_size"]):
        run_id = by_label.get(run, run)
        segments = []
        for r in group.iter_rows(named=True):
            key = (run_id, batch, r["segment"])
            split = parts.get(key, {})
            order = [c for c in category_order if c in split] + sorted(
                c for c in split if c not in category_order and c not in ("overlap", "idle")
            )
            wall, busy = exact.get(key, (r["wall_ms"], r["busy_ms"]))
            segments.append(
                LayerSegment(
                    label=r["segment"],
                    layer=int(r["segment"]) if r["segment"].isdigit() else None,
                    kind=r["kind"],
                    evidence=r["evidence"],
                    steps=r["steps"],
                    wall_ms=wall,
                    busy_ms=busy,
                    parts=[(c, split[c]) for c in [*order, "overlap", "idle"] if split.get(c)],
                    vs_median_layer=r["vs_median_layer"],
                    vs_kind=r["vs_kind"],
                    flag=r["flag"],
                    outlier_steps=r["outlier_steps"],
                    outlier_list=sorted({int(s) for s in (r["outlier_list"] or "").split(",") if s}),
                    late=late.get(key, []),
                )
            )
        busy_layers = [s.busy_ms for s in segments if s.layer is not None]
        median = quantile(busy_layers, 0.5) if busy_layers else None
        charts.append(LayerChart(run_id=run_id, batch_size=batch, segments=segments, median_layer_ms=median))
    return charts


def unsegmented(data: ReportData) -> list[tuple[str, int | None, int, list[tuple[str, int]]]]:
    """The runs and batch sizes of the selection with no step segmented into layers: (run id, batch size, its
    steps, (reason, steps) pairs), from ``html_layer_reasons``."""
    out = []
    for (run_id, batch), group in groups(data.layer_reasons, ["run_id", "batch_size"]):
        if group.filter(pl.col("reason").is_null()).is_empty():
            reasons = [(r["reason"], r["steps"]) for r in group.iter_rows(named=True)]
            out.append((run_id, batch, sum(n for _, n in reasons), reasons))
    return out


@dataclass
class LateRank:
    """One rank of a multi-rank run as the latest at some segments' collectives (``report --by layer-late``)."""

    rank: int
    segments: list[str]  # the segments where it was the latest (the most summed lateness), in step order
    collectives: int  # the collectives of those segments it was late to
    lateness_ms: float  # its summed lateness there
    cause: str | None  # the most common cause over those segments


def late_ranks(chart: LayerChart) -> list[LateRank]:
    """Per rank, the segments of ``chart`` where it arrived latest at the collectives, the most lateness first."""
    out: dict[int, LateRank] = {}
    causes: dict[int, dict[str, int]] = {}
    for seg in chart.segments:
        if not seg.late:
            continue
        top = seg.late[0]
        rank = int(top["late_rank"])
        entry = out.setdefault(rank, LateRank(rank=rank, segments=[], collectives=0, lateness_ms=0.0, cause=None))
        entry.segments.append(seg.label)
        entry.collectives += int(top["late_collectives"])
        entry.lateness_ms += float(top["lateness_ms"] or 0.0)
        if top["cause"]:
            tally = causes.setdefault(rank, {})
            tally[top["cause"]] = tally.get(top["cause"], 0) + 1
    for rank, tally in causes.items():
        out[rank].cause = min(tally, key=lambda c: (-tally[c], c))
    return sorted(out.values(), key=lambda r: (-r.lateness_ms, r.rank))
