"""Widgets of the k25trace TUI."""

from k25trace.tui.widgets.category_bar import CategoryBars, Timeline, category_text, stacked_bar
from k25trace.tui.widgets.lines import LineTable
from k25trace.tui.widgets.steady import SteadyFooter, SteadyLabel, SteadyStatic
from k25trace.tui.widgets.table import fill_table, one_cell_rows

__all__ = [
    "CategoryBars",
    "LineTable",
    "SteadyFooter",
    "SteadyLabel",
    "SteadyStatic",
    "Timeline",
    "category_text",
    "fill_table",
    "one_cell_rows",
    "stacked_bar",
]
