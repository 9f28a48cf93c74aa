"""Filling a table: a DataTable from a query's frame, or several columns laid out in one line per row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import DataTable

from k25trace.tui.cells import LineText, cell

if TYPE_CHECKING:
    import polars as pl

    from k25trace.analysis.overview import Rows


def fill_table(
    table: DataTable, frame: pl.DataFrame | Rows, *, key_column: str | None = None, columns: list[str] | None = None
) -> None:
    """Replace a DataTable's contents with a frame's rows (NULLs as blanks), keyed by ``key_column``; a polars frame,
    or the overview's plain rows (read without polars)."""
    table.clear(columns=True)
    columns = columns or frame.columns
    table.add_columns(*columns)
    for row in frame.iter_rows(named=True):
        cells = [cell(row[c]) for c in columns]
        table.add_row(*cells, key=None if key_column is None else str(row[key_column]))


def one_cell_rows(labels: list[str], rows: list[list[Text]]) -> tuple[LineText, list[LineText]]:
    """Columns laid out in one cell per row, looking as a DataTable of those columns would (each column as wide as
    its widest cell or label, cells justified as they ask, two spaces between columns): for a :class:`LineTable`,
    which the step screen refills on every key press. Returns the header line and the lines."""
    widths = [max([len(label), *(row[i].cell_len for row in rows)]) for i, label in enumerate(labels)]

    def line(cells: list[Text]) -> LineText:
        out = LineText(no_wrap=True)
        for i, (value, width) in enumerate(zip(cells, widths, strict=True)):
            pad = " " * (width - value.cell_len)
            out.append("  " if i else "")
            if value.justify == "right":
                out.append(pad)
                out.append_text(value)
            else:
                out.append_text(value)
                out.append(pad)
        return out

    return line([Text(label) for label in labels]), [line(row) for row in rows]
