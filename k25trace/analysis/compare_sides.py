"""The sides of a comparison: what a side selects in its database (:class:`Selection`), the side itself
(:class:`Side`), and one side's per-step rows read by the ``queries/compare_*.sql`` queries (:func:`extract_side`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl

from k25trace.db import query_frame, run_query
from k25trace.errors import K25Error

SELECTION_KEYS = ("run", "level", "trace", "rank", "batch")


@dataclass(frozen=True)
class Selection:
    """What a side holds inside its database; None = everything. ``run`` is a run id, its label or a unique part
    of an id (resolved against ``compare_runs``)."""

    run: str | None = None
    level: str | None = None
    traces: tuple[int, ...] | None = None
    rank: int | None = None
    batch: int | None = None

    @classmethod
    def parse(cls, items: Iterable[str]) -> "Selection":
        """``["level=c1", "batch=1"]``, ``["run=graph"]``, ``["trace=3,4"]`` → a Selection."""
        values: dict[str, Any] = {}
        for item in items:
            for part in _split_items(item):
                key, sep, value = part.partition("=")
                key, value = key.strip().lower(), value.strip()
                if not sep or not value:
                    raise K25Error(
                        f"side selection {part!r}: expected KEY=VALUE with KEY one of {', '.join(SELECTION_KEYS)}"
                    )
                if key not in SELECTION_KEYS:
                    raise K25Error(f"side selection {part!r}: unknown key {key!r}; one of {', '.join(SELECTION_KEYS)}")
                if key in values:
                    raise K25Error(f"side selection: {key}= given twice")
                try:
                    if key == "trace":
                        values["traces"] = tuple(int(v) for v in value.replace("+", ",").split(",") if v.strip())
                    elif key in ("rank", "batch"):
                        values[key] = int(value)
                    else:
                        values[key] = value
                except ValueError:
                    raise K25Error(f"side selection {part!r}: {key} must be a whole number") from None
        return cls(**values)

    def describe(self) -> str:
        """The selection as ``KEY=VALUE`` items (``all`` for everything)."""
        parts = []
        if self.run is not None:
            parts.append(f"run={self.run}")
        if self.level is not None:
            parts.append(f"level={self.level}")
        if self.traces is not None:
            parts.append("trace=" + ",".join(str(t) for t in self.traces))
        if self.rank is not None:
            parts.append(f"rank={self.rank}")
        if self.batch is not None:
            parts.append(f"batch={self.batch}")
        return " ".join(parts) or "all"


def _split_items(item: str) -> list[str]:
    """``"level=c1,batch=1"`` → two items; a comma inside ``trace=3,4`` stays with its key."""
    out: list[str] = []
    for piece in item.split(","):
        if "=" in piece or not out:
            out.append(piece)
        else:
            out[-1] += "," + piece
    return [p for p in (o.strip() for o in out) if p]


@dataclass
class Side:
    """One side of a comparison: a connection (its database), where it came from, and what it selects."""

    name: str
    con: duckdb.DuckDBPyConnection
    source: str
    selection: Selection = field(default_factory=Selection)


def runs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The runs of a database a side can pick (``compare_runs``), with their ``label`` (``trace_runs.run_label``)."""
    return query_frame(con, "compare_runs")


def resolve_run(frame: pl.DataFrame, wanted: str) -> str:
    """A run id from an id, a label or a unique part of an id; a clear error naming the runs otherwise."""
    ids = frame["run_id"].to_list()
    labels = frame["label"].to_list()
    if wanted in ids:
        return wanted
    by_label = [i for i, label in zip(ids, labels, strict=True) if label == wanted]
    if len(by_label) == 1:
        return by_label[0]
    partial = [i for i in ids if wanted in i]
    if len(partial) == 1:
        return partial[0]
    known = "; ".join(f"{label} = {i}" for i, label in zip(ids, labels, strict=True)) or "none (no traces loaded)"
    if len(by_label) > 1 or len(partial) > 1:
        raise K25Error(
            f"run={wanted!r} matches {max(len(by_label), len(partial))} runs; give more of the id. Runs: {known}"
        )
    raise K25Error(f"no run matches run={wanted!r}. Runs: {known}")


@dataclass
class SideData:
    """One side's extracted rows (:func:`extract_side`)."""

    side: Side
    runs: pl.DataFrame
    rank_steps: pl.DataFrame  # one row per (trace, step)
    obs: pl.DataFrame  # one row per (run_id, step_index): the observation
    categories: pl.DataFrame  # per (run_id, step_index, category): sums over ranks
    kernels: pl.DataFrame  # per (run_id, step_index, name_id, category)
    names: pl.DataFrame  # name_id → name, short_name, kind
    comm: pl.DataFrame  # per (run_id, step_index, category)
    levels: pl.DataFrame  # capture_levels of the side


def extract_side(side: Side, phase: str) -> SideData:
    """One side's rows for ``phase``; a clear error for a run, level or trace the database does not hold."""
    sel = side.selection
    all_runs = runs(side.con)
    run_id = resolve_run(all_runs, sel.run) if sel.run is not None else None
    if sel.level is not None:
        levels = {lv for lv in all_runs["level"].to_list() if lv is not None}
        if sel.level not in levels:
            raise K25Error(
                f"side {side.name} ({side.source}): no capture level {sel.level!r}; "
                f"levels: {', '.join(sorted(levels)) or 'none (traces not from k25trace capture)'}"
            )
    if sel.traces is not None:
        known = {t for ids in all_runs["trace_ids"].to_list() for t in ids}
        missing = sorted(set(sel.traces) - known)
        if missing:
            raise K25Error(
                f"side {side.name} ({side.source}): no trace {', '.join(map(str, missing))}; "
                f"trace ids: {', '.join(map(str, sorted(known))) or 'none'}"
            )
    params = {
        "phase": phase,
        "run_id": run_id,
        "level": sel.level,
        "trace_ids": list(sel.traces) if sel.traces is not None else None,
        "rank": sel.rank,
        "batch_size": sel.batch,
    }
    run_query(side.con, "compare_select", params)  # the side's steps, once, for the compare_* queries below
    try:
        return _read_side(side, sel, phase, params, all_runs)
    finally:
        run_query(side.con, "compare_select_drop")


def _read_side(side: Side, sel: Selection, phase: str, params: dict[str, Any], all_runs: pl.DataFrame) -> SideData:
    """The per-side frames, from the steps ``compare_select`` put in ``_compare_selection``."""
    rank_steps = query_frame(side.con, "compare_steps")
    if rank_steps.is_empty():
        what = f"{phase} steps" if phase != "all" else "steps"
        raise K25Error(
            f"side {side.name} ({side.source}, {sel.describe()}) has no {what} with GPU activity"
            + (" (--phase all compares every step, inferred ones too)" if phase != "all" else "")
        )
    obs = rank_steps.group_by(["run_id", "step_index"], maintain_order=True).agg(
        pl.col("phase").first(),
        pl.col("batch_size").first(),
        pl.col("level").first(),
        pl.col("rank").n_unique().alias("ranks"),
        *(pl.col(c).cast(pl.Float64).mean() for c in ("wall_ns", "busy_ns", "idle_ns", "overlap_ns")),
    )
    selected_runs = all_runs.filter(pl.col("run_id").is_in(obs["run_id"].unique().to_list()))
    level_params = {k: params[k] for k in ("run_id", "level", "trace_ids")}
    return SideData(
        side=side,
        runs=selected_runs,
        rank_steps=rank_steps,
        obs=obs,
        categories=query_frame(side.con, "compare_categories"),
        kernels=query_frame(side.con, "compare_kernels"),
        names=query_frame(side.con, "compare_kernel_names"),
        comm=query_frame(side.con, "compare_comm_steps") if sel.rank is None else pl.DataFrame(),
        levels=query_frame(side.con, "compare_levels", level_params),
    )
