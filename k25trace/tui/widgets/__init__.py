"""Widgets of the k25trace TUI."""

from k25trace.tui.widgets.category_bar import CategoryBars, Timeline, category_text, stacked_bar
from k25trace.tui.widgets.table import PaintTable, fill_table, one_cell_rows

__all__ = ["CategoryBars", "PaintTable", "Timeline", "category_text", "fill_table", "one_cell_rows", "stacked_bar"]
