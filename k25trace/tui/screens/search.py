"""Search: kernel names containing a text, busiest first; Enter opens the kernel's first run."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Header, Input, Label

from k25trace.analysis import browse
from k25trace.tui.cells import cell, name_cell
from k25trace.tui.messages import FirstRunLoaded, OpenKernel, SearchLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, category_text


class SearchScreen(BrowseScreen):
    """Type part of a kernel name, Enter to search; Enter on a result opens it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, trace_id: int | None = None) -> None:
        super().__init__()
        self.trace_id = trace_id
        """Prefer this trace when opening a result."""

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="search-screen"):
            yield Input(
                placeholder="part of a kernel name, e.g. marlin, allreduce, fmha — Enter to search", id="pattern"
            )
            yield Label("", id="status")
            yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
        yield SteadyFooter()

    @on(Input.Submitted, "#pattern")
    def search(self, event: Input.Submitted) -> None:
        pattern = event.value.strip()
        if not pattern:
            self.set_status("Type part of a kernel name first.")
            return
        self.set_status(f"searching for {pattern!r}…")
        self.fetch(SearchLoaded, lambda cursor: browse.search_kernels(cursor, pattern))

    @on(SearchLoaded)
    def show_results(self, message: SearchLoaded) -> None:
        frame = message.result
        table = self.query_one("#results", DataTable)
        table.clear(columns=True)
        table.add_columns("short_name", "category", "calls", "total_ms")
        for row in frame.iter_rows(named=True):
            table.add_row(
                cell(name_cell(row["short_name"])),
                category_text(row["category"] or "other"),
                cell(row["calls"]),
                cell(row["total_ms"]),
                key=str(row["name_id"]),
            )
        if frame.is_empty():
            self.set_status("No kernel name matches.")
        else:
            self.set_status(
                f"{frame.height} kernel name(s)"
                + (" (first 200)" if frame.height >= 200 else "")
                + " — Enter: open its first run"
            )
            table.focus()

    @on(FirstRunLoaded)
    def open_first_run(self, message: FirstRunLoaded) -> None:
        where = message.result
        if where is None:
            self.set_status("That kernel never ran in a loaded trace.", error=True)
            return
        self.post_message(OpenKernel(int(where["trace_id"]), int(where["event_id"]), int(where["start_ns"])))

    @on(DataTable.RowSelected, "#results")
    def open_result(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is None:
            return
        name_id, trace_id = int(event.row_key.value), self.trace_id
        self.fetch(FirstRunLoaded, lambda cursor: browse.first_occurrence(cursor, name_id, trace_id))
