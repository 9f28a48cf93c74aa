"""Report: the per-step breakdowns users read, as polars DataFrames (drawing is left to the caller).

Each function runs one named query from ``queries/report_*.sql``; the CLI and the TUI both call these.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import polars as pl

from k25trace.db import query_frame
from k25trace.errors import K25Error
from k25trace.vocab import CROSS_RANK_VIEWS, PHASES, VIEWS, check_phase, check_view

__all__ = ["CROSS_RANK_VIEWS", "PHASES", "VIEWS", "alignment_warnings", "allreduce_floor", "breakdown",
           "resolve_phase", "run_warnings", "summary"]


def _params(phase: str, rank: int | None, trace_id: int | None) -> dict[str, object]:
    return {"phase": check_phase(phase), "rank": rank, "trace_id": trace_id}


def breakdown(con: duckdb.DuckDBPyConnection, *, by: str = "batch", phase: str = "decode", rank: int | None = None,
              trace_id: int | None = None, top: int = 20, peaks: Path | None = None, model_config: Path | None = None,
              quant: str | None = None, context: int | None = None) -> pl.DataFrame:
    """The breakdown table for one view (``by``): batch, category, step, rank, kernel, …; the speed-of-light views
    (``roofline``, ``sol``: k25trace/sol.py) also take ``peaks`` (a device peaks CSV tried before the built-in one),
    and ``sol`` the model: ``model_config`` (a Hugging Face config.json), ``quant`` and ``context``."""
    params = _params(phase, rank, trace_id)
    if by in ("roofline", "sol"):
        from k25trace import sol

        if by == "roofline":
            return sol.roofline(con, phase=phase, rank=rank, trace_id=trace_id, top=top, peaks_file=peaks)
        return sol.step_sol(con, model_config=model_config, quant=quant, context=context, phase=phase, rank=rank,
                            trace_id=trace_id, peaks_file=peaks)
    if by == "batch":
        return query_frame(con, "report_breakdown", params)
    if by == "category":
        return query_frame(con, "report_category", params)
    if by == "step":
        return query_frame(con, "report_steps", params)
    if by == "kernel":
        return query_frame(con, "report_kernels", {**params, "top": top})
    if by == "floor":
        from k25trace.floor import allreduce_floor

        return allreduce_floor(con, phase)
    if by == "idle":
        return query_frame(con, "report_idle", {"phase": phase})
    if by == "timeline":
        return query_frame(con, "report_timeline", params)
    if by == "comm":
        return query_frame(con, "report_comm", {"phase": phase})
    if by == "rank-comm":
        return query_frame(con, "report_rank_comm", {"phase": phase})
    if by == "comm-site":
        return query_frame(con, "report_comm_site", {"phase": phase})
    if by == "comm-bw":
        from k25trace.floor import ensure_table

        ensure_table(con)  # the bench table is optional: an empty one when none was measured
        return query_frame(con, "report_comm_bandwidth", {"phase": phase})
    if by == "rank":
        params.pop("rank")
        return query_frame(con, "report_ranks", params)
    raise K25Error(f"unknown view {check_view(by)!r}")


MARKER_FORMS = ("vLLM execute_… annotations (every known form)", "SGLang step[…]", "their gpu_user_annotation copies")


def resolve_phase(con: duckdb.DuckDBPyConnection, phase: str | None) -> tuple[str, str | None]:
    """The phase to report when the user gave none, and a note saying why when it is not 'decode'.

    'decode' when some trace has decode steps; else, when the steps of every trace were inferred from idle gaps
    (no step markers), 'all' with a note naming those traces and the marker forms looked for.
    """
    if phase is not None:
        return phase, None
    cover = query_frame(con, "marker_coverage")
    if cover.is_empty() or cover["decode_steps"].sum() > 0:
        return "decode", None
    inferred = cover.filter(pl.col("inferred"))
    if inferred.is_empty():
        return "decode", None
    names = ", ".join(inferred["file_name"].head(4).to_list()) + (" …" if inferred.height > 4 else "")
    return "all", (f"no step markers in {inferred.height} trace(s) ({names}); looked for "
                   f"{', '.join(MARKER_FORMS)}. Showing the {int(inferred['steps'].sum())} steps inferred from GPU "
                   f"idle gaps (phase unknown, no batch size); --phase decode shows marker steps only.")


def alignment_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per multi-rank run whose cross-rank figures should not be read as exact (``comm_alignment``)."""
    try:
        frame = query_frame(con, "report_alignment")
    except duckdb.CatalogException:  # a database from before the table existed: nothing to say
        return []
    lines = []
    for r in frame.iter_rows(named=True):
        what = []
        if r["residual_p90_us"] is not None and r["alignment"] == "poor":
            what.append(f"paired collectives end {r['residual_p90_us']:,.1f} µs apart at p90 after clock alignment "
                        f"(median transfer {r['transfer_p50_us']:,.1f} µs)")
        if r["unpaired_events"]:
            what.append(f"{r['unpaired_events']} of {r['collective_events']} collective kernels could not be paired")
        lines.append(f"{run_label(r['run_id'])}: cross-rank wait and straggler figures are approximate: "
                     + "; ".join(what or ["nothing could be paired"]))
    return lines


def run_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per rank that two or more files of one run claim (kept apart as sessions; ``trace_runs``)."""
    try:
        frame = query_frame(con, "report_run_duplicates")
    except (duckdb.CatalogException, duckdb.BinderException):  # a database from before trace_runs had the column
        return []
    return [f"{run_label(r['run'])}: {r['files']} files claim rank {r['rank']} ({r['sessions']}); kept apart as "
            "sessions (the k-th file of each rank, by first event, is session k)" for r in frame.iter_rows(named=True)]


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per loaded trace: rank, device, events, steps by phase."""
    return query_frame(con, "summary")


def run_label(run_id: str) -> str:
    """A short name for a run id (capture dir + level, or the files' directory, + world size)."""
    base, _, world = run_id.rpartition("#ws")
    name = base.rstrip("#").rsplit("/", 1)[-1] or base
    return f"{name} (TP{world})" if world and world not in ("1", "?") else name
