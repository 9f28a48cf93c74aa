"""The TUI's first screen, read without polars: the traces, capture levels and step counts as plain rows.

The overview is what a user waits for after ``k25trace tui``; it paints before polars (~0.1–0.2 s to import) is
loaded. Everything else the TUI shows comes as polars frames (:mod:`k25trace.analysis.browse`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import duckdb

from k25trace.db import run_query


@dataclass(frozen=True)
class Rows:
    """A query's rows (tuples) and their column names: what a table shows, without a data frame library."""

    columns: list[str]
    rows: list[tuple[Any, ...]]

    @property
    def height(self) -> int:
        return len(self.rows)

    def is_empty(self) -> bool:
        return not self.rows

    def column(self, name: str) -> list[Any]:
        """One column's values, in row order."""
        index = self.columns.index(name)
        return [row[index] for row in self.rows]

    def iter_rows(self, *, named: bool = False) -> Iterator[Any]:
        """Each row as a tuple, or as a dict of column -> value (``named``), as a polars frame gives them."""
        for row in self.rows:
            yield dict(zip(self.columns, row, strict=True)) if named else row


def query_rows(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> Rows:
    """A named query's rows with their column names."""
    cursor = run_query(con, name, params)
    columns = [d[0] for d in cursor.description or []]
    return Rows(columns, cursor.fetchall())


@dataclass(frozen=True)
class Overview:
    """What the first screen shows first: traces (ranks) by run, capture levels, step counts."""

    traces: Rows
    levels: Rows
    step_counts: Rows


def overview(con: duckdb.DuckDBPyConnection) -> Overview:
    """The overview's tables; they read only the small per-trace and per-step tables."""
    return Overview(
        traces=query_rows(con, "browse_traces"),
        levels=query_rows(con, "browse_levels"),
        step_counts=query_rows(con, "browse_step_counts", {"trace_id": None}),
    )
