"""Report: the per-step breakdowns users read, as polars DataFrames (drawing is left to the caller).

Each view is one named query from ``queries/report_*.sql``; the CLI, the TUI and the HTML page call these. The
speed-of-light views (``roofline``, ``sol``) are :mod:`k25trace.analysis.sol`'s, which builds on this module. The words
(phases, views) are :mod:`k25trace.vocab`'s; what a run is and what it is called are the database's
(``trace_runs`` and its label columns, the ``run_labels`` view).
"""

from __future__ import annotations

import duckdb
import polars as pl

from k25trace.db import query_frame
from k25trace.errors import K25Error
from k25trace.vocab import ALL, CROSS_RANK_VIEWS, PHASES, VIEWS, check_phase, check_view

__all__ = ["CROSS_RANK_VIEWS", "PHASES", "SOL_VIEWS", "VIEWS", "alignment_warnings", "allreduce_floor", "breakdown",
           "check_filters", "far_activity_warnings", "resolve_phase", "run_labels", "run_warnings", "summary",
           "view_filters"]

SOL_VIEWS = ("roofline", "sol")
"""The views :mod:`.sol` computes (:func:`.sol.roofline`, :func:`.sol.step_sol`)."""

_VIEW_QUERIES = {  # view -> (its query, the parameters it takes of phase, rank, trace_id, top)
    "batch": ("report_breakdown", ("phase", "rank", "trace_id")),
    "category": ("report_category", ("phase", "rank", "trace_id")),
    "step": ("report_steps", ("phase", "rank", "trace_id")),
    "rank": ("report_ranks", ("phase", "trace_id")),
    "kernel": ("report_kernels", ("phase", "rank", "trace_id", "top")),
    "idle": ("report_idle", ("phase", "rank", "trace_id")),
    "timeline": ("report_timeline", ("phase", "rank", "trace_id")),
    "comm": ("report_comm", ("phase",)),
    "comm-site": ("report_comm_site", ("phase",)),
    "comm-bw": ("report_comm_bandwidth", ("phase",)),
    "rank-comm": ("report_rank_comm", ("phase",)),
    "floor": ("report_allreduce_floor", ("phase",)),
    "layer": ("layers_report", ("phase", "rank", "trace_id")),
    "layer-late": ("layers_lateness", ("phase",)),
}


def breakdown(con: duckdb.DuckDBPyConnection, *, by: str = "batch", phase: str = "decode", rank: int | None = None,
              trace_id: int | None = None, top: int = 20) -> pl.DataFrame:
    """The table of one view (``by``): batch, category, step, rank, kernel, idle, timeline, comm, comm-site, comm-bw,
    rank-comm, floor, layer or layer-late, over the steps of ``phase`` (``'all'``: every phase), optionally of one rank or trace (the
    views that take them); ``top`` kernels for ``kernel``. ``roofline`` and ``sol`` are :mod:`.sol`'s."""
    if check_view(by) in SOL_VIEWS:
        raise K25Error(f"view {by!r} is computed by analysis.sol ({'roofline' if by == 'roofline' else 'step_sol'})")
    refuse_filters(by, rank=rank, trace_id=trace_id)
    query, takes = _VIEW_QUERIES[by]
    given = {"phase": check_phase(phase), "rank": rank, "trace_id": trace_id, "top": top}
    return query_frame(con, query, {name: given[name] for name in takes})


_SOL_FILTERS = ("phase", "rank", "trace_id", "top")  # roofline and sol (k25trace.analysis.sol) take all of them


def view_filters(by: str) -> tuple[str, ...]:
    """The filters (of phase, rank, trace_id, top) that view ``by`` honours."""
    return _SOL_FILTERS if check_view(by) in SOL_VIEWS else _VIEW_QUERIES[by][1]


def refuse_filters(by: str, *, rank: int | None, trace_id: int | None) -> None:
    """A K25Error when ``rank`` or ``trace_id`` is given to a view that does not honour it (it would print every
    rank's or trace's rows as if they were the one asked for)."""
    takes = view_filters(by)
    for name, option, value in (("rank", "--rank", rank), ("trace_id", "--trace", trace_id)):
        if value is not None and name not in takes:
            honour = ", ".join(v for v in VIEWS if name in view_filters(v))
            raise K25Error(f"--by {by} does not take {option}: it sums every {'rank' if name == 'rank' else 'trace'} "
                           f"of a run (views that take {option}: {honour})")


def _span(values: list[int]) -> str:
    """Sorted integers as ranges: 0–1, 3, 5–7."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def check_filters(con: duckdb.DuckDBPyConnection, *, phase: str, rank: int | None = None,
                  trace_id: int | None = None) -> None:
    """A K25Error saying what exists when ``rank``, ``trace_id`` or ``phase`` selects no step of the database:
    "no rank 99: ranks 0–1", "no trace 999: traces 1–2", "no prefill steps (rank 0): phases present: decode 9"."""
    traces = summary(con)
    ranks = {int(t): int(r) for t, r in traces.select("trace_id", "rank").iter_rows() if r is not None}
    if trace_id is not None and trace_id not in set(traces["trace_id"].to_list()):
        raise K25Error(f"no trace {trace_id}: traces {_span(traces['trace_id'].to_list()) or 'none (empty database)'}")
    if rank is not None and rank not in set(ranks.values()):
        raise K25Error(f"no rank {rank}: ranks {_span(list(ranks.values())) or 'none (empty database)'}")
    if rank is not None and trace_id is not None and ranks.get(trace_id) != rank:
        raise K25Error(f"trace {trace_id} is rank {ranks.get(trace_id)}, not rank {rank}: give one of --rank and "
                       "--trace, or a trace of that rank")
    if check_phase(phase) == ALL:
        return
    steps = query_frame(con, "report_steps", {"phase": ALL, "rank": rank, "trace_id": trace_id})
    if steps.filter(pl.col("phase") == phase).is_empty():
        where = ", ".join(w for w in (f"rank {rank}" if rank is not None else "",
                                      f"trace {trace_id}" if trace_id is not None else "") if w)
        present = steps.group_by("phase").len().sort("phase")
        listed = ", ".join(f"{p} {n}" for p, n in present.iter_rows()) or "none (no steps)"
        raise K25Error(f"no {phase} steps{f' ({where})' if where else ''}: phases present: {listed}")


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


def far_activity_warnings(con: duckdb.DuckDBPyConnection, trace_ids: set[int] | None = None) -> list[str]:
    """One line per trace (of ``trace_ids``; None: all) whose steps kept GPU activities timestamped far outside the
    trace out of their walls (``steps.far_activities``), naming its file and the count."""
    lines = []
    for r in query_frame(con, "report_far_activities").iter_rows(named=True):
        if trace_ids is None or r["trace_id"] in trace_ids:
            n = r["far_activities"]
            lines.append(f"{r['path']}: {n:,} GPU {'activity' if n == 1 else 'activities'} timestamped far outside "
                         "the trace (more than 1 s past its CPU span and the GPU work after it) "
                         f"{'was' if n == 1 else 'were'} kept out of its steps")
    return lines


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per loaded trace: rank, device, events, steps by phase."""
    return query_frame(con, "summary")


def run_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every run's id → its label as reports print it (``trace_runs.run_label`` through the ``run_labels`` view:
    e.g. 'graph (TP2)')."""
    return dict(query_frame(con, "report_run_labels").select("run_id", "run_label").iter_rows())
