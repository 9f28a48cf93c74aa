"""Steps: split each trace's timeline into engine steps and compute per-step and per-category time.

All logic is SQL (``queries/step_markers.sql``, ``step_assign.sql``, ``steps_build.sql``, ``gaps_build.sql``: the
GPU idle gaps, classified; ``op_calls_build.sql``: the steps' CPU-op calls, for the speed-of-light views;
``graph_kernels_build.sql``, ``step_idle_build.sql``: per-step sums the views read); this module only runs the
files in order for one trace. The temporary tables live
and die inside those files (``steps_build.sql`` drops them). Called by the loader inside the file's transaction,
and by :func:`rebuild` (``k25trace steps``) after a classification change.
"""

from __future__ import annotations

import duckdb

from k25trace.db import run_query, transaction

DEFAULT_GAP_NS = 1_000_000  # idle gap that separates inferred steps (traces without step markers)


def build_steps(con: duckdb.DuckDBPyConnection, trace_id: int, *, gap_ns: int = DEFAULT_GAP_NS) -> None:
    """(Re)build the steps of one trace from the classified GPU activities."""
    run_query(con, "step_markers", {"trace_id": trace_id, "gap_ns": gap_ns})
    run_query(con, "step_assign", {"trace_id": trace_id})
    run_query(con, "steps_build", {"trace_id": trace_id})
    run_query(con, "gaps_build", {"trace_id": trace_id})
    build_op_calls(con, trace_id)
    build_step_summaries(con, trace_id)


def build_op_calls(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    """(Re)build one trace's ``op_calls`` from its steps, kernels, launches and CPU ops."""
    run_query(con, "sol_steps")  # the kernel_signature macro (temporary, idempotent)
    run_query(con, "op_calls_build", {"trace_id": trace_id})


def build_step_summaries(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    """(Re)build one trace's per-step sums: ``graph_kernels`` (kernels replayed from a CUDA graph) and
    ``step_idle`` (its gaps added up by cause)."""
    run_query(con, "graph_kernels_build", {"trace_id": trace_id})
    run_query(con, "step_idle_build", {"trace_id": trace_id})


def trace_ids(con: duckdb.DuckDBPyConnection) -> list[int]:
    """The ids of every trace in the database, in order (``queries/step_traces.sql``)."""
    return [row[0] for row in run_query(con, "step_traces").fetchall()]


def rebuild(con: duckdb.DuckDBPyConnection, *, gap_ns: int = DEFAULT_GAP_NS) -> int:
    """Rebuild the steps of every trace, one transaction per trace; returns the number of traces. The cross-rank
    tables read the steps: :func:`k25trace.pipeline.rebuild` rebuilds both."""
    ids = trace_ids(con)
    for trace_id in ids:
        with transaction(con):
            build_steps(con, trace_id, gap_ns=gap_ns)
    return len(ids)
