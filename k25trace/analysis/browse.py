"""Browse: the headless core behind ``k25trace tui`` — overview, steps, one step, one kernel, search, ad-hoc SQL.

Every function takes a DuckDB connection or cursor and runs named queries from ``queries/browse_*.sql`` (and
``report_*.sql`` through :mod:`.report`), returning polars DataFrames or small dataclasses of them (ad-hoc
SQL runs through :func:`k25trace.db.run_sql`). No UI
code lives here and nothing here imports Textual: the TUI only calls these functions from its worker threads,
each with its own ``con.cursor()``.

Invariants: step-level queries always filter on ``(trace_id, step_index)`` plus the step's GPU span
(``start_ns``), so they touch one step's rows of ``gpu_events`` (sorted by trace_id, start_ns) however large the
database is; lists are fetched a page at a time with a hard ``limit``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis import report
from k25trace.analysis.overview import Overview, overview  # noqa: F401 - the overview, without polars
from k25trace.db import NamedQuery, get_query, named_queries, parse_param, query_frame
from k25trace.vocab import PHASES, check_phase

KERNEL_PAGE = 100
"""GPU activities of a step fetched per page (a prefill step can have tens of thousands)."""

STEP_ROW_CAP = 2000
"""Steps shown at most in the steps table; the rest are counted and announced."""

SQL_ROW_CAP = 1000
"""Rows of an ad-hoc query the TUI shows at most (``k25trace.db.run_sql``'s ``cap``)."""

PHASE_FILTERS = PHASES
"""The TUI's phase filter cycles through these (:data:`k25trace.vocab.PHASES`)."""


@dataclass(frozen=True)
class StepDetail:
    """One step: its header row, a page of its kernels, per-category times, timeline strip and the other ranks."""

    header: dict[str, Any]
    kernels: pl.DataFrame
    categories: pl.DataFrame
    timeline: list[str]
    ranks: pl.DataFrame
    flag: str | None = None
    """Why the step is suspicious (one copy or one gap over half its wall), else None."""
    layers: pl.DataFrame | None = None
    """Its segments (pre, layers, post; one ``step`` row when unsegmented): :func:`step_layers`."""

    @property
    def kernel_total(self) -> int:
        """GPU activities in the step (the kernel table may show only the first page)."""
        return int(self.header.get("kernel_count") or 0)


@dataclass(frozen=True)
class KernelDetail:
    """One GPU activity with its launch, and how its kernel's duration varies over the steps of its rank."""

    row: dict[str, Any]
    per_step: pl.DataFrame


def decode_breakdown(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The decode breakdown per (level, batch size) over all ranks (``report_breakdown``; the slowest overview part)."""
    return report.breakdown(con, by="batch", phase="decode")


def collective_split(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Collectives across the ranks of each run: transfer vs wait per step, skew, straggler (``report_comm``)."""
    frame = report.breakdown(con, by="comm", phase="decode")
    if frame.is_empty():
        return frame
    return _with_run_label(frame, report.run_labels(con)).select(
        [
            "run",
            "level",
            "batch_size",
            "category",
            "ranks",
            "calls_per_step",
            "ms_per_step",
            "transfer_ms_per_step",
            "wait_ms_per_step",
            "wait_pct",
            "wait_host_ms_per_step",
            "wait_gpu_work_ms_per_step",
            "skew_p90_us",
            "straggler_rank",
            "straggler_wait_pct",
            "last_rank",
            "last_pct",
            "why_late",
        ]
    )


def idle_split(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Why the GPU is idle per run and decode batch size, and the time between steps (``report_idle``)."""
    return report.breakdown(con, by="idle", phase="decode")


@dataclass
class Collectives:
    """The collectives screen: per run and batch size, per rank, the alignment warnings."""

    per_batch: pl.DataFrame
    per_rank: pl.DataFrame
    warnings: list[str]


def collectives(con: duckdb.DuckDBPyConnection) -> Collectives:
    """Cross-rank figures for the collectives screen (``report_comm``, ``report_rank_comm``, ``comm_alignment``)."""
    labels = report.run_labels(con)
    per_batch = _with_run_label(report.breakdown(con, by="comm", phase="decode"), labels)
    per_rank = _with_run_label(report.breakdown(con, by="rank-comm", phase="decode"), labels)
    return Collectives(per_batch, per_rank, report.alignment_warnings(con))


def _with_run_label(frame: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    """``frame`` with a ``run`` column: the label of its ``run_id`` (:func:`k25trace.analysis.report.run_labels`)."""
    if frame.is_empty():
        return frame
    return frame.with_columns(
        pl.col("run_id").replace_strict(labels, default=pl.col("run_id"), return_dtype=pl.String).alias("run")
    )


def call_sites(con: duckdb.DuckDBPyConnection, run_id: str, batch_size: int | None, category: str) -> pl.DataFrame:
    """The call sites of one run, batch size and category, the most waited-on first (``report_comm_site``)."""
    frame = report.breakdown(con, by="comm-site", phase="decode")
    frame = frame.filter(
        (pl.col("run_id") == run_id) & (pl.col("category") == category) & (pl.col("batch_size").eq_missing(batch_size))
    )
    return frame.sort(["wait_us", "site"], descending=[True, False])


def steps(
    con: duckdb.DuckDBPyConnection, trace_id: int, *, phase: str = "all", batch_size: int | None = None
) -> pl.DataFrame:
    """The steps of one trace (rank), optionally one phase and one batch size, in step order."""
    return query_frame(
        con, "browse_steps", {"trace_id": trace_id, "phase": check_phase(phase), "batch_size": batch_size}
    )


def batch_sizes(step_frame: pl.DataFrame) -> list[int]:
    """The distinct batch sizes in a steps frame, ascending (for the batch filter)."""
    if step_frame.is_empty():
        return []
    return sorted(int(b) for b in step_frame["batch_size"].drop_nulls().unique().to_list())


def first_row(frame: pl.DataFrame) -> dict[str, Any] | None:
    """The first row of a frame as a dict, or None when it is empty."""
    return frame.row(0, named=True) if frame.height else None


def step_kernels(
    con: duckdb.DuckDBPyConnection, header: dict[str, Any], *, offset: int = 0, limit: int = KERNEL_PAGE
) -> pl.DataFrame:
    """A page of a step's GPU activities in time order (``header`` is a :func:`step_detail` header row)."""
    if header.get("gpu_start_ns") is None:
        return _step_page(con, header, 0, -1, offset=offset, limit=limit)
    return _step_page(con, header, header["gpu_start_ns"], header["gpu_end_ns"], offset=offset, limit=limit)


def _step_page(
    con: duckdb.DuckDBPyConnection,
    header: dict[str, Any],
    start_ns: int,
    end_ns: int,
    *,
    first_pos: int | None = None,
    count: int | None = None,
    offset: int,
    limit: int,
) -> pl.DataFrame:
    """``browse_step_kernels``: a page of the step's activities between ``start_ns`` and ``end_ns``, or of the
    segment at positions ``first_pos`` .. ``first_pos + count - 1``."""
    step = {"trace_id": header["trace_id"], "step_index": header["step_index"], "start_ns": start_ns, "end_ns": end_ns}
    page = {"first_pos": first_pos, "count": count, "offset": offset, "limit": limit}
    return query_frame(con, "browse_step_kernels", {**step, **page})


def step_detail(
    con: duckdb.DuckDBPyConnection, trace_id: int, step_index: int, *, limit: int = KERNEL_PAGE, buckets: int = 100
) -> StepDetail | None:
    """One step with the first page of its kernels; None when the trace has no such step."""
    header = first_row(query_frame(con, "browse_step", {"trace_id": trace_id, "step_index": step_index}))
    if header is None:
        return None
    kernels = step_kernels(con, header, limit=limit)
    categories = query_frame(con, "browse_step_categories", {"trace_id": trace_id, "step_index": step_index})
    timeline: list[str] = []
    if header.get("gpu_start_ns") is not None and (header.get("wall_ns") or 0) > 0 and buckets > 0:
        strip = query_frame(
            con,
            "browse_step_timeline",
            {
                "trace_id": trace_id,
                "step_index": step_index,
                "start_ns": header["gpu_start_ns"],
                "end_ns": header["gpu_end_ns"],
                "buckets": buckets,
            },
        )
        timeline = strip["category"].to_list()
    ranks = query_frame(con, "browse_step_ranks", {"trace_id": trace_id, "step_index": step_index})
    flag = first_row(query_frame(con, "browse_step_flag", {"trace_id": trace_id, "step_index": step_index}))
    return StepDetail(
        header=header,
        kernels=kernels,
        categories=categories,
        timeline=timeline,
        ranks=ranks,
        flag=None if flag is None else flag["flag"],
        layers=step_layers(con, trace_id, step_index),
    )


def step_layers(con: duckdb.DuckDBPyConnection, trace_id: int, step_index: int) -> pl.DataFrame:
    """One step's layer segments in order, with their times, slow flag and category split
    (``browse_step_layers``); empty when the database has no segmentation of the step."""
    return query_frame(con, "browse_step_layers", {"trace_id": trace_id, "step_index": step_index})


def segment_kernels(
    con: duckdb.DuckDBPyConnection,
    header: dict[str, Any],
    segment: dict[str, Any],
    *,
    offset: int = 0,
    limit: int = KERNEL_PAGE,
) -> pl.DataFrame:
    """A page of one segment's GPU activities (``segment``: a :func:`step_layers` row of the step of ``header``),
    with :func:`step_kernels`' columns."""
    return _step_page(
        con,
        header,
        header.get("gpu_start_ns") or 0,
        header.get("gpu_end_ns") or -1,
        first_pos=segment["first_pos"] or 0,
        count=segment["kernel_count"] or 0,
        offset=offset,
        limit=limit,
    )


def kernel_detail(con: duckdb.DuckDBPyConnection, trace_id: int, event_id: int, start_ns: int) -> KernelDetail | None:
    """One GPU activity (by trace, event id and start) with its variation over steps; None if missing."""
    row = first_row(
        query_frame(con, "browse_kernel", {"trace_id": trace_id, "event_id": event_id, "start_ns": start_ns})
    )
    if row is None:
        return None
    return KernelDetail(
        row=row, per_step=query_frame(con, "browse_kernel_steps", {"trace_id": trace_id, "name_id": row["name_id"]})
    )


def kernel_ranks(con: duckdb.DuckDBPyConnection, trace_id: int, name_id: int) -> pl.DataFrame:
    """A kernel's calls and min/mean/max µs on every rank of the run ``trace_id`` belongs to (scans all ranks)."""
    return query_frame(con, "browse_kernel_ranks", {"trace_id": trace_id, "name_id": name_id})


def first_occurrence(con: duckdb.DuckDBPyConnection, name_id: int, trace_id: int | None) -> dict[str, Any] | None:
    """Where a kernel picked by name first ran, preferring ``trace_id``; None when it never ran."""
    return first_row(query_frame(con, "browse_kernel_first", {"trace_id": trace_id, "name_id": name_id}))


def search_kernels(con: duckdb.DuckDBPyConnection, pattern: str, *, limit: int = 200) -> pl.DataFrame:
    """Kernel names containing ``pattern`` (case-insensitive), busiest first."""
    return query_frame(con, "browse_search", {"pattern": pattern, "limit": limit})


def schema_columns(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Tables and views with their columns and types."""
    return query_frame(con, "browse_schema")


def query_catalog() -> pl.DataFrame:
    """The named queries that return rows (not the ones that build tables): name, params, summary, grain."""
    rows = [
        {"name": q.name, "params": ", ".join("$" + p for p in q.params), "summary": q.summary, "grain": q.grain}
        for q in named_queries().values()
        if q.is_report and q.name != "schema"
    ]
    return pl.DataFrame(rows, schema={"name": pl.String, "params": pl.String, "summary": pl.String, "grain": pl.String})


INTERNAL_QUERIES = ("ingest_", "meta_", "settings_", "db_", "export_", "floor_bench_", "kernel_rules_")
"""Name prefixes of the queries of one stage's own work: loading, the meta table, the database check, export, the
bench table, the rules table."""

_WRITES = re.compile(
    r"^\s*(insert|update|delete|create|drop|alter|set|copy|attach|detach|install|load)\b", re.IGNORECASE | re.MULTILINE
)


def is_internal(query: NamedQuery) -> bool:
    """A step of k25trace's own work rather than a query a user runs (``sql --list`` leaves it out unless ``--all``):
    its header declares what it creates or writes (``creates:``, even "none"), it reads a relation only k25trace
    registers (a name starting with ``_``, a table named by a parameter, a macro another query makes) or no table
    (``reads: none``, only settings), its SQL writes (insert, update, delete, …), or its name is one of
    :data:`INTERNAL_QUERIES`."""
    registered = any(r.startswith("_") or "$" in r or "macro of" in r for r in query.reads)
    no_table = not query.reads or all(r in ("none", "current_setting()") for r in query.reads)
    code = "\n".join(line.split("--", 1)[0] for line in query.sql.splitlines())
    return (
        "creates" in query.header
        or registered
        or no_table
        or bool(_WRITES.search(code))
        or query.name.startswith(INTERNAL_QUERIES)
    )


def user_queries(everything: bool = False) -> list[NamedQuery]:
    """The named queries a user runs (every one with ``everything``), by name."""
    return [q for q in named_queries().values() if everything or not is_internal(q)]


def named_query_text(name: str) -> str:
    """The SQL text of a named query (header included), to put in the SQL editor."""
    return get_query(name).sql


def parse_params(text: str) -> dict[str, Any]:
    """The TUI's parameter line, ``"phase=decode rank=null top=10"``: ``name=value`` items separated by white space,
    each read by :func:`k25trace.db.parse_param` (as ``k25trace sql -p`` reads its items)."""
    return dict(parse_param(item) for item in text.split())


# ------------------------------------------------------------------------------- the steps screen of the TUI


@dataclass(frozen=True)
class TraceSteps:
    """The steps of one trace (rank) with what the steps screen shows around them: the rank, and the trace the
    ``r`` key goes to."""

    trace_id: int
    rank: int | None
    next_trace_id: int | None
    """The next trace of the same run, ordered by rank, wrapping around; None when the run has one trace."""
    steps: pl.DataFrame


def next_rank_trace(traces: pl.DataFrame, trace_id: int) -> int | None:
    """In a ``browse_traces`` frame: the trace after ``trace_id`` in its run (by rank, then trace id; traces without
    a rank last), wrapping around; None when the run has no other trace or ``trace_id`` is not in the frame."""
    this = traces.filter(pl.col("trace_id") == trace_id)
    if this.is_empty():
        return None
    same_run = traces.filter(pl.col("run_key") == this["run_key"][0])
    ordered = sorted(
        same_run.select("trace_id", "rank").iter_rows(), key=lambda row: (row[1] is None, row[1] or 0, row[0])
    )
    if len(ordered) < 2:
        return None
    ids = [row[0] for row in ordered]
    return ids[(ids.index(trace_id) + 1) % len(ids)]


def trace_steps(con: duckdb.DuckDBPyConnection, trace_id: int) -> TraceSteps:
    """The steps of one trace (all phases, in step order) with its rank and the next trace of its run."""
    traces = query_frame(con, "browse_traces")
    this = traces.filter(pl.col("trace_id") == trace_id)
    rank = None if this.is_empty() else this["rank"][0]
    return TraceSteps(
        trace_id, None if rank is None else int(rank), next_rank_trace(traces, trace_id), steps(con, trace_id)
    )


def run_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every run's id → its label as the reports print it (``trace_runs.run_label``)."""
    return report.run_labels(con)
