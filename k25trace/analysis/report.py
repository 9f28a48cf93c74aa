"""Report: the per-step breakdowns users read, as polars DataFrames (drawing is left to the caller).

Each view is one named query from ``queries/report_*.sql``; the CLI, the TUI and the HTML page call these. The
speed-of-light views (``roofline``, ``sol``) are :mod:`k25trace.analysis.sol`'s, which builds on this module. The words
(phases, views) are :mod:`k25trace.vocab`'s; what a run is and what it is called are the database's
(``trace_runs`` and its label columns, the ``run_labels`` view).
"""

from __future__ import annotations

import duckdb
import polars as pl

from k25trace.analysis.load_warnings import far_activity_warnings, run_warnings
from k25trace.db import query_frame
from k25trace.errors import K25Error
from k25trace.vocab import ALL, CROSS_RANK_VIEWS, PHASES, VIEWS, check_phase, check_view

__all__ = [
    "CROSS_RANK_VIEWS",
    "PHASES",
    "SOL_VIEWS",
    "VIEWS",
    "alignment_warnings",
    "allreduce_floor",
    "breakdown",
    "check_filters",
    "empty_view_reason",
    "engine_steps",
    "far_activity_warnings",
    "refuse_filters",
    "resolve_phase",
    "resolve_run",
    "run_labels",
    "run_warnings",
    "steps_seen",
    "summary",
    "view_filters",
]

SOL_VIEWS = ("roofline", "sol")
"""The views :mod:`.sol` computes (:func:`.sol.roofline`, :func:`.sol.step_sol`)."""

STEP_FILTERS = ("batch_size", "run_id")
"""The filters every view of this module and the findings take (``--batch``, ``--run``): a view's rows are per run
and batch size, so choosing steps by either keeps each row what it was."""

_VIEW_QUERIES = {  # view -> (its query, the parameters it takes of phase, rank, trace_id, batch_size, run_id, top)
    "batch": ("report_breakdown", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "category": ("report_category", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "step": ("report_steps", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "rank": ("report_ranks", ("phase", "trace_id", *STEP_FILTERS)),
    "kernel": ("report_kernels", ("phase", "rank", "trace_id", *STEP_FILTERS, "top")),
    "idle": ("report_idle", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "timeline": ("report_timeline", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "comm": ("report_comm", ("phase", *STEP_FILTERS)),
    "comm-site": ("report_comm_site", ("phase", *STEP_FILTERS)),
    "comm-bw": ("report_comm_bandwidth", ("phase", *STEP_FILTERS)),
    "rank-comm": ("report_rank_comm", ("phase", *STEP_FILTERS)),
    "floor": ("report_allreduce_floor", ("phase", *STEP_FILTERS)),
    "layer": ("layers_report", ("phase", "rank", "trace_id", *STEP_FILTERS)),
    "layer-late": ("layers_lateness", ("phase", *STEP_FILTERS)),
}

FILTER_OPTIONS = {"rank": "--rank", "trace_id": "--trace", "batch_size": "--batch", "run_id": "--run"}
"""Each step filter's command-line option."""

_WHY_NOT = {  # why a view does not take a filter
    "rank": "it sums every rank of a run",
    "trace_id": "it sums every trace of a run",
    "batch_size": "its steps are chosen by the speed-of-light model, per rank and phase",
    "run_id": "its steps are chosen by the speed-of-light model, per rank and phase",
}


def breakdown(
    con: duckdb.DuckDBPyConnection,
    *,
    by: str = "batch",
    phase: str = "decode",
    rank: int | None = None,
    trace_id: int | None = None,
    batch_size: int | None = None,
    run_id: str | None = None,
    top: int = 20,
) -> pl.DataFrame:
    """The table of one view (``by``): batch, category, step, rank, kernel, idle, timeline, comm, comm-site, comm-bw,
    rank-comm, floor, layer or layer-late, over the steps of ``phase`` (``'all'``: every phase), of one batch size
    and one run (``run_id``: :func:`resolve_run`) when given, optionally of one rank or trace (the views that take
    them); ``top`` kernels for ``kernel``. ``roofline`` and ``sol`` are :mod:`.sol`'s."""
    if check_view(by) in SOL_VIEWS:
        raise K25Error(f"view {by!r} is computed by analysis.sol ({'roofline' if by == 'roofline' else 'step_sol'})")
    if by == "findings":
        raise K25Error("view 'findings' is computed by analysis.findings (findings), above this module")
    refuse_filters(by, rank=rank, trace_id=trace_id, batch_size=batch_size, run_id=run_id)
    query, takes = _VIEW_QUERIES[by]
    given = {
        "phase": check_phase(phase),
        "rank": rank,
        "trace_id": trace_id,
        "batch_size": batch_size,
        "run_id": run_id,
        "top": top,
    }
    return query_frame(con, query, {name: given[name] for name in takes})


_SOL_FILTERS = ("phase", "rank", "trace_id", "top")  # roofline and sol (k25trace.analysis.sol) take all of them


def view_filters(by: str) -> tuple[str, ...]:
    """The filters (of phase, rank, trace_id, batch_size, run_id, top) that view ``by`` honours."""
    if check_view(by) == "findings":  # analysis.findings: whole runs (a rank's wait is another rank's lateness)
        return ("phase", *STEP_FILTERS)  # per run and batch size: the CLI keeps the groups asked for
    return _SOL_FILTERS if by in SOL_VIEWS else _VIEW_QUERIES[by][1]


def refuse_filters(
    by: str, *, rank: int | None, trace_id: int | None, batch_size: int | None = None, run_id: str | None = None
) -> None:
    """A K25Error when ``rank``, ``trace_id``, ``batch_size`` or ``run_id`` is given to a view that does not honour
    it (it would print every rank's, trace's, batch size's or run's rows as if they were the one asked for)."""
    takes = view_filters(by)
    for name, value in (("rank", rank), ("trace_id", trace_id), ("batch_size", batch_size), ("run_id", run_id)):
        if value is not None and name not in takes:
            option = FILTER_OPTIONS[name]
            honour = ", ".join(v for v in VIEWS if name in view_filters(v))
            raise K25Error(f"--by {by} does not take {option}: {_WHY_NOT[name]} (views that take {option}: {honour})")


def _span(values: list[int]) -> str:
    """Sorted integers as ranges: 0–1, 3, 5–7."""
    runs: list[list[int]] = []
    for v in sorted(set(values)):
        if runs and runs[-1][1] == v - 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}–{b}" for a, b in runs)


def check_filters(
    con: duckdb.DuckDBPyConnection,
    *,
    phase: str,
    rank: int | None = None,
    trace_id: int | None = None,
    batch_size: int | None = None,
    run_id: str | None = None,
    with_empty: bool = False,
) -> None:
    """A K25Error saying what exists when ``rank``, ``trace_id``, ``phase``, ``batch_size`` or ``run_id`` selects
    no step of the database: "no rank 99: ranks 0–1", "no trace 999: traces 1–2", "no prefill steps (rank 1):
    phases present: decode 9 engine steps (9 rank-steps); use --phase decode or --phase all", "no decode steps of
    batch size 3: batch sizes present: 1: 3 engine steps (6 rank-steps), …". ``with_empty``: empty steps (no GPU
    work) count as selected, for a view that lists them (``--by step``)."""
    _check_trace_and_rank(con, rank, trace_id)
    where = ", ".join(
        w
        for w in (
            f"rank {rank}" if rank is not None else "",
            f"trace {trace_id}" if trace_id is not None else "",
            f"run {run_labels(con).get(run_id, run_id)}" if run_id is not None else "",
        )
        if w
    )
    within = f" ({where})" if where else ""
    counts = query_frame(con, "report_selection", {"rank": rank, "trace_id": trace_id, "run_id": run_id})
    if with_empty:  # a view that lists empty steps too (--by step): they count as selected
        counts = counts.with_columns(rank_steps=pl.col("rank_steps") + pl.col("empty_steps"), empty_steps=0)
    if run_id is not None and counts.is_empty():
        raise K25Error(
            f"no steps in run {run_labels(con).get(run_id, run_id)}"
            + (f" of {where.rsplit(', ', 1)[0]}" if rank is not None or trace_id is not None else "")
        )
    of_phase = counts if check_phase(phase) == ALL else counts.filter(pl.col("phase") == phase)
    if of_phase["rank_steps"].sum() == 0:
        raise K25Error(_no_phase_steps(counts, of_phase, phase, within))
    if batch_size is not None and of_phase.filter(pl.col("batch_size") == batch_size)["rank_steps"].sum() == 0:
        sizes = (
            of_phase.filter(pl.col("rank_steps") > 0)
            .group_by("batch_size")
            .agg(pl.col("engine_steps").sum(), pl.col("rank_steps").sum())
            .sort("batch_size", nulls_last=True)
        )
        listed = ", ".join(
            f"{'none (inferred steps)' if b is None else b}: {_steps_text(e, r)}" for b, e, r in sizes.iter_rows()
        )
        what = "steps" if phase == ALL else f"{phase} steps"
        raise K25Error(f"no {what} of batch size {batch_size}{within}: batch sizes present: {listed}")


def _check_trace_and_rank(con: duckdb.DuckDBPyConnection, rank: int | None, trace_id: int | None) -> None:
    """A K25Error when the database has no traces, no trace ``trace_id``, no rank ``rank``, or the trace is of
    another rank."""
    traces = summary(con)
    if traces.is_empty():
        raise K25Error("no traces in the database: load some first (`k25trace load TRACE... --db FILE`)")
    ranks = {int(t): int(r) for t, r in traces.select("trace_id", "rank").iter_rows() if r is not None}
    if trace_id is not None and trace_id not in set(traces["trace_id"].to_list()):
        raise K25Error(f"no trace {trace_id}: traces {_span(traces['trace_id'].to_list()) or 'none (empty database)'}")
    if rank is not None and rank not in set(ranks.values()):
        raise K25Error(f"no rank {rank}: ranks {_span(list(ranks.values())) or 'none (empty database)'}")
    if rank is not None and trace_id is not None and ranks.get(trace_id) != rank:
        raise K25Error(
            f"trace {trace_id} is rank {ranks.get(trace_id)}, not rank {rank}: give one of --rank and "
            "--trace, or a trace of that rank"
        )


def _no_phase_steps(counts: pl.DataFrame, of_phase: pl.DataFrame, phase: str, within: str) -> str:
    """The message for a phase with no selected steps: the phases present, and which ``--phase`` to use."""
    present = (
        counts.group_by("phase")
        .agg(pl.col("engine_steps").sum(), pl.col("rank_steps").sum(), pl.col("empty_steps").sum())
        .sort("phase")
    )
    listed = ", ".join(f"{p} {_steps_text(e, r)}" for p, e, r, _ in present.iter_rows() if r) or "none"
    empty = int(of_phase["empty_steps"].sum())
    others = [p for p, _, r, _ in present.iter_rows() if r]
    advice = (
        f"; use --phase {others[0]}{' or --phase all' if phase != ALL else ''}"
        if len(others) == 1
        else "; use --phase all"
        if others
        else ""
    )
    what = "steps" if phase == ALL else f"{phase} steps"
    return (
        f"no {what}{within}"
        + (f" with GPU work ({empty} empty {what}, no GPU activity)" if empty else "")
        + f": phases present: {listed}{advice}"
    )


def engine_steps(
    con: duckdb.DuckDBPyConnection,
    *,
    phase: str,
    rank: int | None = None,
    trace_id: int | None = None,
    run_id: str | None = None,
) -> dict[tuple[str, int | None], int]:
    """(run id, batch size) → its engine steps with GPU work (one scheduler step, however many ranks saw it) among
    the steps the filters select; a breakdown's ``steps`` column counts rank-steps instead."""
    counts = query_frame(con, "report_selection", {"rank": rank, "trace_id": trace_id, "run_id": run_id})
    if check_phase(phase) != ALL:
        counts = counts.filter(pl.col("phase") == phase)
    summed = counts.group_by("run_id", "batch_size").agg(pl.col("engine_steps").sum())
    return {(run, batch): int(n) for run, batch, n in summed.iter_rows()}


def steps_seen(engine: int | None, rank_steps: int, ranks: int) -> str:
    """How many steps a group holds, in the one wording of every front end (the findings' headings too): ``'3
    engine steps × 2 ranks (6 rank-steps)'`` when every rank saw each, else ``'3 engine steps on 2 ranks (5
    rank-steps)'``; ``'3 engine steps on 1 rank'``; ``'6 rank-steps on 2 ranks'`` when the engine steps are not
    known."""
    on = f"{ranks} rank{'s' if ranks != 1 else ''}"
    if engine is None:
        return f"{rank_steps} rank-step{'s' if rank_steps != 1 else ''} on {on}"
    steps = f"{engine} engine step{'s' if engine != 1 else ''}"
    if ranks == 1:
        return f"{steps} on 1 rank"
    return f"{steps} {'×' if engine * ranks == rank_steps else 'on'} {on} ({rank_steps} rank-steps)"


def _steps_text(engine_steps: int, rank_steps: int) -> str:
    """``'9 engine steps (18 rank-steps)'``: an engine step is one scheduler step, seen on every rank; a rank-step
    is one rank's observation of it."""
    return (
        f"{engine_steps} engine step{'s' if engine_steps != 1 else ''} "
        f"({rank_steps} rank-step{'s' if rank_steps != 1 else ''})"
    )


_PAIRED_VIEWS = ("comm", "comm-site", "comm-bw", "rank-comm", "layer-late")
"""The views of collectives paired across the ranks of a run (empty for a run of one loaded rank)."""


def empty_view_reason(con: duckdb.DuckDBPyConnection, by: str, phase: str) -> str:
    """Why view ``by`` has no row for steps that exist (:func:`check_filters` passed), and what to do: e.g. a
    cross-rank view on runs of which one rank was loaded."""
    what = "steps" if phase == ALL else f"{phase} steps"
    if by in _PAIRED_VIEWS or by == "floor":
        ranks = query_frame(con, "report_selection", {"rank": None, "trace_id": None, "run_id": None})["ranks"]
        if by in _PAIRED_VIEWS and _int(ranks.max()) <= 1:
            worlds = sorted(set(int(w) for w in summary(con)["world_size"].drop_nulls().to_list()))
            return (
                f"--by {by} pairs the collectives of a run's ranks, and each run here has one rank loaded"
                + (f" (of world size {', '.join(map(str, worlds))})" if worlds and max(worlds) > 1 else "")
                + ": load every rank's trace of the run into the database"
            )
        return f"--by {by}: the {what} hold no {'all-reduce' if by == 'floor' else 'collective'} kernels"
    if by in ("layer", "layer-late"):
        return f"--by {by}: no layer segments were found in the {what} (see docs/methods.md, layers)"
    return f"--by {by}: nothing to show for the {what}"


def _int(value: object) -> int:
    """A polars scalar (an aggregate) as an int; 0 for None."""
    return int(value) if isinstance(value, (int, float)) else 0


def resolve_run(con: duckdb.DuckDBPyConnection, wanted: str | None) -> str | None:
    """The run id ``--run`` names: a run's id, its label as reports print it (e.g. 'graph (TP2)'), or a part of
    its id that only one run has; a K25Error naming the runs otherwise (None stays None: every run)."""
    if wanted is None:
        return None
    labels = run_labels(con)
    if wanted in labels:
        return wanted
    matches = [run for run, label in labels.items() if label == wanted] or [run for run in labels if wanted in run]
    if len(matches) == 1:
        return matches[0]
    known = "; ".join(f"{label} = {run}" for run, label in labels.items()) or "none (no traces loaded)"
    if matches:
        raise K25Error(f"--run {wanted!r} matches {len(matches)} runs; give more of the id. Runs: {known}")
    raise K25Error(f"no run matches --run {wanted!r}. Runs: {known}")


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
    return "all", (
        f"no step markers in {inferred.height} trace(s) ({names}); looked for "
        f"{', '.join(MARKER_FORMS)}. Showing the {int(inferred['steps'].sum())} steps inferred from GPU "
        f"idle gaps (phase unknown, no batch size); --phase decode shows marker steps only."
    )


def alignment_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per multi-rank run whose cross-rank figures should not be read as exact (``comm_alignment``)."""
    lines = []
    for r in query_frame(con, "report_alignment").iter_rows(named=True):
        what = []
        if r["residual_p90_us"] is not None and r["alignment"] == "poor":
            what.append(
                f"paired collectives end {r['residual_p90_us']:,.1f} µs apart at p90 after clock alignment "
                f"(median transfer {r['transfer_p50_us']:,.1f} µs)"
            )
        if r["unpaired_events"]:
            what.append(f"{r['unpaired_events']} of {r['collective_events']} collective kernels could not be paired")
        lines.append(
            f"{r['run_label']}: cross-rank wait and straggler figures are approximate: "
            + "; ".join(what or ["nothing could be paired"])
        )
    return lines


def summary(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per loaded trace: rank, device, events, steps by phase."""
    return query_frame(con, "summary")


def run_labels(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Every run's id → its label as reports print it (``trace_runs.run_label`` through the ``run_labels`` view:
    e.g. 'graph (TP2)')."""
    return dict(query_frame(con, "report_run_labels").select("run_id", "run_label").iter_rows())
