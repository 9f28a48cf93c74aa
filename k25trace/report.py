"""Report: the per-step breakdowns users read, as polars DataFrames (drawing is left to the caller).

Each view is one named query from ``queries/report_*.sql``; the CLI, the TUI and the HTML page call these. The
speed-of-light views (``roofline``, ``sol``) are :mod:`k25trace.sol`'s, which builds on this module. The words
(phases, views) are :mod:`k25trace.vocab`'s; what a run is and what it is called are the database's
(``trace_runs`` and its label columns, the ``run_labels`` view).
"""

from __future__ import annotations

import duckdb
import polars as pl

from k25trace.db import query_frame
from k25trace.errors import K25Error
from k25trace.vocab import CROSS_RANK_VIEWS, PHASES, VIEWS, check_phase, check_view

__all__ = ["CROSS_RANK_VIEWS", "PHASES", "SOL_VIEWS", "VIEWS", "alignment_warnings", "allreduce_floor", "breakdown",
           "resolve_phase", "run_labels", "run_warnings", "summary"]

SOL_VIEWS = ("roofline", "sol")
"""The views :mod:`k25trace.sol` computes (:func:`k25trace.sol.roofline`, :func:`k25trace.sol.step_sol`)."""

_VIEW_QUERIES = {  # view -> (its query, the parameters it takes of phase, rank, trace_id, top)
    "batch": ("report_breakdown", ("phase", "rank", "trace_id")),
    "category": ("report_category", ("phase", "rank", "trace_id")),
    "step": ("report_steps", ("phase", "rank", "trace_id")),
    "rank": ("report_ranks", ("phase", "trace_id")),
    "kernel": ("report_kernels", ("phase", "rank", "trace_id", "top")),
    "idle": ("report_idle", ("phase",)),
    "timeline": ("report_timeline", ("phase", "rank", "trace_id")),
    "comm": ("report_comm", ("phase",)),
    "comm-site": ("report_comm_site", ("phase",)),
    "comm-bw": ("report_comm_bandwidth", ("phase",)),
    "rank-comm": ("report_rank_comm", ("phase",)),
    "floor": ("report_allreduce_floor", ("phase",)),
}


def breakdown(con: duckdb.DuckDBPyConnection, *, by: str = "batch", phase: str = "decode", rank: int | None = None,
              trace_id: int | None = None, top: int = 20) -> pl.DataFrame:
    """The table of one view (``by``): batch, category, step, rank, kernel, idle, timeline, comm, comm-site, comm-bw,
    rank-comm or floor, over the steps of ``phase`` (``'all'``: every phase), optionally of one rank or trace (the
    views that take them); ``top`` kernels for ``kernel``. ``roofline`` and ``sol`` are :mod:`k25trace.sol`'s."""
    if check_view(by) in SOL_VIEWS:
        raise K25Error(f"view {by!r} is computed by k25trace.sol ({'roofline' if by == 'roofline' else 'step_sol'})")
    query, takes = _VIEW_QUERIES[by]
    given = {"phase": check_phase(phase), "rank": rank, "trace_id": trace_id, "top": top}
    return query_frame(con, query, {name: given[name] for name in takes})


def allreduce_floor(con: duckdb.DuckDBPyConnection, phase: str = "decode") -> pl.DataFrame:
    """``report --by floor``: the observed all-reduce time per step of each run and batch size against the floor
    ``k25trace bench allreduce`` measured (``queries/report_allreduce_floor.sql``; floor columns NULL without one)."""
    return breakdown(con, by="floor", phase=phase)


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
    lines = []
    for r in query_frame(con, "report_alignment").iter_rows(named=True):
        what = []
        if r["residual_p90_us"] is not None and r["alignment"] == "poor":
            what.append(f"paired collectives end {r['residual_p90_us']:,.1f} µs apart at p90 after clock alignment "
                        f"(median transfer {r['transfer_p50_us']:,.1f} µs)")
        if r["unpaired_events"]:
            what.append(f"{r['unpaired_events']} of {r['collective_events']} collective kernels could not be paired")
        lines.append(f"{r['run_label']}: cross-rank wait and straggler figures are approximate: "
                     + "; ".join(what or ["nothing could be paired"]))
    return lines


def run_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per rank that two or more files of one run claim (kept apart as sessions; ``trace_runs``)."""
    return [f"{r['run']}: {r['files']} files claim rank {r['rank']} ({r['sessions']}); kept apart as sessions (the "
            "k-th file of each rank, by first event, is session k)"
            for r in query_frame(con, "report_run_duplicates").iter_rows(named=True)]


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per loaded trace: rank, device, events, steps by phase."""
    return query_frame(con, "summary")


def run_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every run's id → its label as reports print it (``trace_runs.run_label`` through the ``run_labels`` view:
    e.g. 'graph (TP2)')."""
    return dict(query_frame(con, "report_run_labels").select("run_id", "run_label").iter_rows())
