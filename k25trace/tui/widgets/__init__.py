"""Widgets of the k25trace TUI."""

from k25trace.tui.widgets.category_bar import CategoryBars, Timeline, category_text, stacked_bar
from k25trace.tui.widgets.table import fill_table

__all__ = ["CategoryBars", "Timeline", "category_text", "fill_table", "stacked_bar"]
