"""Filling a DataTable: from a query's frame, or several columns drawn in one cell per row."""

from __future__ import annotations

import polars as pl
from rich.style import Style
from rich.text import Text
from textual.color import Color
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable

from k25trace.tui.cells import LineText, cell


def fill_table(table: DataTable, frame: pl.DataFrame, *, key_column: str | None = None,
               columns: list[str] | None = None) -> None:
    """Replace a DataTable's contents with a frame's rows (NULLs as blanks), keyed by ``key_column``."""
    table.clear(columns=True)
    columns = columns or frame.columns
    table.add_columns(*columns)
    for row in frame.iter_rows(named=True):
        cells = [cell(row[c]) for c in columns]
        table.add_row(*cells, key=None if key_column is None else str(row[key_column]))


def one_cell_rows(labels: list[str], rows: list[list[Text]]) -> tuple[LineText, list[LineText]]:
    """Columns laid out in one cell per row, looking as a DataTable of those columns would (each column as wide as
    its widest cell or label, cells justified as they ask, two spaces between columns): for tables refilled on
    every key press, since a DataTable pays per cell when it paints. Returns the header label and the lines."""
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


class PaintTable(DataTable):
    """A DataTable that works out its own style once per paint instead of once per line.

    DataTable asks for ``rich_style`` (and ``background_colors``) for every line it draws, and each time Textual
    walks the widget's ancestors to compute it; nothing they depend on changes in the middle of a paint, and on
    the step screen, repainted on every key press, these walks were a quarter of drawing a table."""

    _paint_style: Style | None = None
    _paint_backgrounds: tuple[Color, Color] | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        self._paint_style, self._paint_backgrounds = super().rich_style, super().background_colors
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = self._paint_backgrounds = None

    @property
    def rich_style(self) -> Style:
        return super().rich_style if self._paint_style is None else self._paint_style

    @property
    def background_colors(self) -> tuple[Color, Color]:
        return super().background_colors if self._paint_backgrounds is None else self._paint_backgrounds
