"""The sides of a comparison: what a side selects in its database (:class:`Selection`), the side itself
(:class:`Side`), one side's per-step rows read by the ``queries/compare_*.sql`` queries (:func:`extract_side`), and
the tables of the sides themselves: who they are (:func:`sides_table`, :func:`device_notes`) and their capture
levels' client-side figures (:func:`macro_table`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

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
    layers: pl.DataFrame  # per (run_id, step_index, segment label): wall averaged over ranks (compare_layers)


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
        layers=query_frame(side.con, "compare_layers"),
    )


# ------------------------------------------------------------------------------ the sides side by side

MACRO_SCHEMA: dict[str, Any] = {
    "level_a": pl.String,
    "level_b": pl.String,
    "metric": pl.String,
    "unit": pl.String,
    "a": pl.Float64,
    "b": pl.Float64,
    "delta": pl.Float64,
    "delta_pct": pl.Float64,
    "better": pl.String,
}
"""The capture-level table's columns (``compare --by macro``)."""
MACRO_COLUMNS = list(MACRO_SCHEMA)

MACRO_METRICS = (
    ("output tok/s", "output_tok_s", "tok/s", "higher"),
    ("TTFT p50", "ttft_p50_ms", "ms", "lower"),
    ("TTFT p90", "ttft_p90_ms", "ms", "lower"),
    ("TTFT p99", "ttft_p99_ms", "ms", "lower"),
    ("TPOT p50", "tpot_p50_ms", "ms", "lower"),
    ("TPOT p90", "tpot_p90_ms", "ms", "lower"),
    ("TPOT p99", "tpot_p99_ms", "ms", "lower"),
    ("ITL p50", "itl_p50_ms", "ms", "lower"),
    ("ITL p90", "itl_p90_ms", "ms", "lower"),
    ("ITL p99", "itl_p99_ms", "ms", "lower"),
    ("requests", "requests", "", None),
    ("errors", "errors", "", "lower"),
)


def macro_table(da: SideData, db: SideData) -> tuple[pl.DataFrame, list[str]]:
    """The capture levels' client-side figures side by side (no test), and the notes on them."""
    empty = pl.DataFrame(schema=MACRO_SCHEMA)
    la, lb = da.levels, db.levels
    if la.is_empty() and lb.is_empty():
        return empty, []
    if la.is_empty() or lb.is_empty():
        only = "A" if lb.is_empty() else "B"
        return empty, [f"capture figures (TTFT, TPOT, tok/s): only {only} comes from `k25trace capture`; not compared"]
    pairs: list[tuple[dict, dict]] = []
    notes = []
    rows_a, rows_b = la.to_dicts(), lb.to_dicts()
    if len(rows_a) == 1 and len(rows_b) == 1:
        pairs.append((rows_a[0], rows_b[0]))
    else:
        by_b = {r["level"]: r for r in rows_b}
        for r in rows_a:
            if r["level"] in by_b:
                pairs.append((r, by_b[r["level"]]))
        unpaired = [f"A {r['level']}" for r in rows_a if r["level"] not in by_b] + [
            f"B {r['level']}" for r in rows_b if r["level"] not in {x["level"] for x in rows_a}
        ]
        if unpaired:
            notes.append(f"capture levels without a same-named level on the other side: {', '.join(unpaired)}")
    rows = []
    for ra, rb in pairs:
        for metric, column, unit, good in MACRO_METRICS:
            va, vb = ra.get(column), rb.get(column)
            va = None if va is None else float(va)
            vb = None if vb is None else float(vb)
            delta = None if va is None or vb is None else vb - va
            better = None
            if delta is not None and good is not None:
                better = "same" if delta == 0 else ("B" if (delta > 0) == (good == "higher") else "A")
            rows.append(
                {
                    "level_a": ra["level"],
                    "level_b": rb["level"],
                    "metric": metric,
                    "unit": unit,
                    "a": None if va is None else round(va, 3),
                    "b": None if vb is None else round(vb, 3),
                    "delta": None if delta is None else round(delta, 3),
                    "delta_pct": round(delta * 100 / va, 2) if delta is not None and va else None,
                    "better": better,
                }
            )
    notes.append(
        "capture figures are per-level aggregates (percentiles over requests), not per-request values: "
        "shown with their delta, no test"
    )
    return pl.DataFrame(rows, schema=MACRO_SCHEMA), notes


def sides_table(da: SideData, db: SideData) -> pl.DataFrame:
    """One row per side: its source, selection, runs, ranks, devices, vLLM versions, steps and batch sizes."""
    rows = []
    for d in (da, db):
        r = d.runs
        batches = sorted({b for b in d.obs["batch_size"].to_list() if b is not None})
        rows.append(
            {
                "side": d.side.name,
                "source": d.side.source,
                "selection": d.side.selection.describe(),
                "runs": ", ".join(r["label"].to_list()),
                "levels": ", ".join(sorted({lv for lv in d.obs["level"].to_list() if lv is not None})) or None,
                "ranks": int(cast(int, d.obs["ranks"].max()) or 0),
                "devices": ", ".join(sorted({x for v in r["devices"].to_list() if v for x in v.split(", ")})) or None,
                "vllm": ", ".join(sorted({x for v in r["vllm_versions"].to_list() if v for x in v.split(", ")}))
                or None,
                "steps": d.obs.height,
                "batch_sizes": ", ".join(str(b) for b in batches) or None,
            }
        )
    return pl.DataFrame(rows)


def device_notes(da: SideData, db: SideData) -> list[str]:
    """A note for each of GPUs and vLLM versions in which the sides differ."""

    def values(d: SideData, column: str) -> set[str]:
        return {x for v in d.runs[column].to_list() if v for x in v.split(", ")}

    notes = []
    for column, what in (("devices", "GPUs"), ("vllm_versions", "vLLM versions")):
        va, vb = values(da, column), values(db, column)
        if va and vb and va != vb:
            notes.append(
                f"the sides differ in {what} (A: {', '.join(sorted(va))}; B: {', '.join(sorted(vb))}): "
                "kernels of other builds match by family or not at all; see each row's match column"
            )
    return notes
