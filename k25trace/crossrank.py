"""Cross-rank analysis: pair the collectives of all ranks of a run, estimate clock offsets, split transfer/wait.

All logic is in ``queries/collectives.sql`` (its temporary table too) and ``queries/comm_lateness.sql`` (why each late
rank was late); this module runs them (after every load, and on demand).
"""

from __future__ import annotations

import duckdb

from k25trace.db import run_query, transaction


def build(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)build trace_runs, rank_offsets, collectives and collective_causes for the whole database, in one
    transaction."""
    with transaction(con):
        run_query(con, "collectives")
        run_query(con, "comm_lateness")
