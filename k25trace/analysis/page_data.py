"""What the ``k25trace html`` page shows, fetched once: the report views, the representative steps' timelines, and
the few figures derived from them (bars per run and batch size, a run's main batch size, step-time quartiles)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import duckdb
import polars as pl

from k25trace.analysis import report
from k25trace.db import query_frame
from k25trace.stats import quantile


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

    def run_name(self, run_id: str, level: str | None = None) -> str:
        """The run's label (the id itself for an unknown run), with the capture level when given."""
        name = self.labels.get(str(run_id), str(run_id))
        return f"{name}, level {level}" if level else name


def collect(
    con: duckdb.DuckDBPyConnection, *, source: str = "", phase: str | None = None, top: int = 20, buckets: int
) -> ReportData:
    """Run every query the page needs (the report views and the representative steps' timelines)."""
    phase, note = report.resolve_phase(con, phase)
    notes = ([note] if note else []) + report.run_warnings(con) + report.alignment_warnings(con)
    timelines = [
        step_timeline(con, row, buckets)
        for row in query_frame(con, "representative_steps", {"phase": phase}).iter_rows(named=True)
    ]
    return ReportData(
        source=source,
        phase=phase,
        notes=notes,
        runs=query_frame(con, "runs"),
        batch=report.breakdown(con, by="batch", phase=phase),
        idle=report.breakdown(con, by="idle", phase=phase),
        comm=report.breakdown(con, by="comm", phase=phase),
        kernels=report.breakdown(con, by="kernel", phase=phase, top=top),
        step_times=query_frame(con, "step_times", {"phase": phase}),
        levels=query_frame(con, "run_levels"),
        timelines=[t for t in timelines if t.lanes],
        top=top,
        labels=report.run_labels(con),
    )


def step_timeline(con: duckdb.DuckDBPyConnection, rep: dict[str, Any], buckets: int) -> Timeline:
    """One step on every rank of its run, cut into ``buckets`` slices of one common aligned window; each slice is
    the category that ran longest in it, or the cause of the idle time there (``browse_step_timeline``)."""
    lanes_frame = query_frame(con, "step_lanes", {"run_id": rep["run_id"], "step_index": rep["step_index"]})
    lanes_frame = lanes_frame.filter(pl.col("wall_ns") > 0)
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
    for row in lanes_frame.iter_rows(named=True):
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
        slices = query_frame(
            con,
            "browse_step_timeline",
            {
                "trace_id": lane.trace_id,
                "step_index": rep["step_index"],
                "start_ns": start + lane.offset_ns,
                "end_ns": end + lane.offset_ns,
                "buckets": buckets,
            },
        )["category"].to_list()
        for i in range(len(slices)):  # slices wholly outside this rank's own step are not drawn
            s0, s1 = start + (end - start) * i // buckets, start + (end - start) * (i + 1) // buckets
            if s1 <= lane.start_ns or s0 >= lane.end_ns:
                slices[i] = None
        lane.segments = run_lengths(slices)
        timeline.lanes.append(lane)
    return timeline


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
