"""Filling a DataTable from a query's frame."""

from __future__ import annotations

import polars as pl
from textual.widgets import DataTable

from k25trace.tui.cells import cell


def fill_table(table: DataTable, frame: pl.DataFrame, *, key_column: str | None = None,
               columns: list[str] | None = None) -> None:
    """Replace a DataTable's contents with a frame's rows (NULLs as blanks), keyed by ``key_column``."""
    table.clear(columns=True)
    columns = columns or frame.columns
    table.add_columns(*columns)
    for row in frame.iter_rows(named=True):
        cells = [cell(row[c]) for c in columns]
        table.add_row(*cells, key=None if key_column is None else str(row[key_column]))
