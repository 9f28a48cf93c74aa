"""The warnings ``k25trace load`` prints once its files are in: GPU activities timestamped far outside a trace, and
files that claim the same rank of one run. Plain rows, no polars: its import is ~0.1 s of every load's wall time."""

from __future__ import annotations

import duckdb

from k25trace.db import query_dicts


def run_warnings(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per rank that two or more files of one run claim (kept apart as sessions; ``trace_runs``)."""
    return [
        f"{r['run']}: {r['files']} files claim rank {r['rank']} ({r['sessions']}); kept apart as sessions (the "
        "k-th file of each rank, by first event, is session k)"
        for r in query_dicts(con, "report_run_duplicates")
    ]


def far_activity_warnings(con: duckdb.DuckDBPyConnection, trace_ids: set[int] | None = None) -> list[str]:
    """One line per trace (of ``trace_ids``; None: all) whose steps kept GPU activities timestamped far outside the
    trace out of their walls (``steps.far_activities``), naming its file and the count."""
    lines = []
    for r in query_dicts(con, "report_far_activities"):
        if trace_ids is None or r["trace_id"] in trace_ids:
            n = r["far_activities"]
            lines.append(
                f"{r['path']}: {n:,} GPU {'activity' if n == 1 else 'activities'} timestamped far outside "
                "the trace (more than 1 s past its CPU span and the GPU work after it) "
                f"{'was' if n == 1 else 'were'} kept out of its steps"
            )
    return lines
