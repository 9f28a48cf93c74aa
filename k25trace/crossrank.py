"""Cross-rank analysis: pair the collectives of all ranks of a run, estimate clock offsets, split transfer/wait.

All logic is in ``queries/collectives.sql`` (its temporary table too); this module runs it (after every load, and on
demand).
"""

from __future__ import annotations

import duckdb

from k25trace.db import run_query, transaction


def build(con: duckdb.DuckDBPyConnection) -> None:
    """(Re)build trace_runs, rank_offsets and collectives for the whole database, in one transaction."""
    with transaction(con):
        run_query(con, "collectives")
