"""Report: the per-step breakdowns users read, as polars DataFrames (drawing is left to the caller).

Each function runs one named query from ``queries/report_*.sql``; the CLI and the TUI both call these.
"""

from __future__ import annotations

import duckdb
import polars as pl

from k25trace.db import query_frame
from k25trace.errors import K25Error

VIEWS = ("batch", "category", "step", "rank", "kernel", "comm", "comm-site", "rank-comm", "floor")
PHASES = ("decode", "prefill", "mixed", "empty", "unknown", "all")


def _params(phase: str, rank: int | None, trace_id: int | None) -> dict[str, object]:
    if phase not in PHASES:
        raise K25Error(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
    return {"phase": phase, "rank": rank, "trace_id": trace_id}


def breakdown(con: duckdb.DuckDBPyConnection, *, by: str = "batch", phase: str = "decode", rank: int | None = None,
              trace_id: int | None = None, top: int = 20) -> pl.DataFrame:
    """The breakdown table for one view (``by``): batch, category, step, rank or kernel."""
    params = _params(phase, rank, trace_id)
    if by == "batch":
        return query_frame(con, "report_breakdown", params)
    if by == "category":
        return query_frame(con, "report_category", params)
    if by == "step":
        return query_frame(con, "report_steps", params)
    if by == "kernel":
        return query_frame(con, "report_kernels", {**params, "top": top})
    if by == "floor":
        from k25trace.bench import allreduce_floor

        return allreduce_floor(con, phase)
    if by == "comm":
        return query_frame(con, "report_comm", {"phase": phase})
    if by == "rank-comm":
        return query_frame(con, "report_rank_comm", {"phase": phase})
    if by == "comm-site":
        return query_frame(con, "report_comm_site", {"phase": phase})
    if by == "rank":
        params.pop("rank")
        return query_frame(con, "report_ranks", params)
    raise K25Error(f"unknown view {by!r}; one of {', '.join(VIEWS)}")


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per loaded trace: rank, device, events, steps by phase."""
    return query_frame(con, "summary")


def run_label(run_id: str) -> str:
    """A short name for a run id (capture dir + level, or the files' directory, + world size)."""
    base, _, world = run_id.rpartition("#ws")
    name = base.rstrip("#").rsplit("/", 1)[-1] or base
    return f"{name} (TP{world})" if world and world not in ("1", "?") else name
