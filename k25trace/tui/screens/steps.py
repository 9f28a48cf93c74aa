"""Steps: the engine steps of one trace (rank), filterable by phase and batch size, sortable, with a sparkline."""

from __future__ import annotations

from typing import ClassVar, cast

import polars as pl
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Header, Label, Sparkline

from k25trace.analysis import browse
from k25trace.tui.cells import cell
from k25trace.tui.messages import OpenStep, StepPrefetched, StepsLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, category_text

STEP_COLUMNS = (
    "step_index",
    "phase",
    "batch_size",
    "wall_ms",
    "busy_pct",
    "idle_ms",
    "kernel_count",
    "allreduce_pct",
    "top_categories",
)
SORTABLE = ("step_index", "wall_ms", "busy_pct", "idle_ms", "kernel_count", "allreduce_pct", "batch_size")


class StepsScreen(BrowseScreen):
    """The steps of one trace; Enter opens a step."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "cycle_phase", "Phase"),
        Binding("b", "cycle_batch", "Batch"),
        Binding("o", "cycle_sort", "Sort"),
        Binding("r", "next_rank", "Next rank"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, trace_id: int, *, steps: browse.TraceSteps | None = None) -> None:
        super().__init__()
        self.trace_id = trace_id
        self.given = steps
        """The trace's steps read ahead by the overview: shown on mount instead of fetched."""
        self.prefetched: dict[tuple[int, int], browse.StepDetail] = {}
        """Steps read ahead (the one under the cursor), by (trace_id, step_index); handed to the step screen."""
        self.rank: int | None = None
        self.next_trace_id: int | None = None
        """The trace ``r`` goes to (the next rank of the run), known once the steps are loaded."""
        self.loaded = False
        self.phase = "all"
        self.batch_size: int | None = None
        self.sort_column = "step_index"
        self.sort_descending = False
        self.all_steps = pl.DataFrame()
        """Every step of the trace (the batch filter cycles over its batch sizes)."""
        self.shown_steps = pl.DataFrame()

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="steps-screen"):
            yield Label("loading…", id="title")
            yield Label("", id="status")
            yield Sparkline([], id="wall-sparkline", summary_function=max)
            yield Label("", id="sparkline-caption", classes="dim")
            yield DataTable(id="steps", cursor_type="row", zebra_stripes=True)
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.reload()

    def reload(self) -> None:
        """Fetch the trace's steps (all phases; filters are applied to the fetched frame)."""
        trace_id = self.trace_id
        self.loaded = False
        given, self.given = self.given, None
        if given is not None and given.trace_id == trace_id:
            self.post_message(StepsLoaded(given, trace_id))
            return
        self.fetch(StepsLoaded, lambda cursor: browse.trace_steps(cursor, trace_id), request=trace_id)

    @on(StepsLoaded)
    def show_steps(self, message: StepsLoaded) -> None:
        if message.request != self.trace_id:
            return  # an earlier trace's steps, overtaken by r
        loaded = message.result
        self.rank, self.next_trace_id, self.all_steps = loaded.rank, loaded.next_trace_id, loaded.steps
        self.loaded = True
        self.redraw()
        self.query_one("#steps", DataTable).focus()

    def filtered(self) -> pl.DataFrame:
        """The steps passing the phase and batch filters, in the chosen order."""
        frame = self.all_steps
        if frame.is_empty():
            return frame
        if self.phase != "all":
            frame = frame.filter(pl.col("phase") == self.phase)
        if self.batch_size is not None:
            frame = frame.filter(pl.col("batch_size") == self.batch_size)
        return frame.sort(self.sort_column, descending=self.sort_descending, nulls_last=True)

    def redraw(self) -> None:
        rank = self.rank
        arrow = "↓" if self.sort_descending else "↑"
        self.query_one("#title", Label).update(
            f"[b]Steps[/b] of trace {self.trace_id} (rank {'?' if rank is None else rank})   "
            f"phase: [b]{self.phase}[/b]   batch: [b]{'all' if self.batch_size is None else self.batch_size}[/b]   "
            f"sort: [b]{self.sort_column} {arrow}[/b]"
        )
        frame = self.filtered()
        self.shown_steps = frame
        table = self.query_one("#steps", DataTable)
        table.clear(columns=True)
        for column in STEP_COLUMNS:
            table.add_column(column, key=column)
        if self.all_steps.is_empty():
            self.set_status(f"Trace {self.trace_id} has no steps (run [b]k25trace steps[/b] on the database).")
            self.query_one("#wall-sparkline", Sparkline).data = []
            return
        if frame.is_empty():
            self.set_status("No step matches these filters (p: phase, b: batch size).")
            self.query_one("#wall-sparkline", Sparkline).data = []
            return
        cap = browse.STEP_ROW_CAP
        walls = [w or 0.0 for w in frame["wall_ms"].to_list()]
        median = float(cast(float, frame["wall_ms"].median()) or 0.0)
        for row in frame.head(cap).iter_rows(named=True):
            table.add_row(*self.cells(row, median), key=str(row["step_index"]))
        shown = min(cap, frame.height)
        self.set_status(
            f"showing {shown} of {frame.height} steps"
            + (f" (of {self.all_steps.height} in the trace)" if frame.height != self.all_steps.height else "")
            + f" — median wall {median:.3f} ms; outliers (> 2× median) in red"
        )
        by_index = frame.sort("step_index")
        sparkline = self.query_one("#wall-sparkline", Sparkline)
        sparkline.data = [w or 0.0 for w in by_index["wall_ms"].to_list()]
        self.query_one("#sparkline-caption", Label).update(
            f"step wall time, in step order: min {min(walls):.3f} ms, max {max(walls):.3f} ms"
        )

    @staticmethod
    def cells(row: dict[str, object], median: float) -> list[object]:
        """A step row as table cells: outlier wall times in red, top categories in their colours."""
        cells: list[object] = []
        for column in STEP_COLUMNS:
            value = row[column]
            if column == "wall_ms" and isinstance(value, float) and median > 0 and value > 2 * median:
                cells.append(Text(f"{value:.3f}", style="bold red"))
            elif column == "top_categories" and isinstance(value, str):
                text = Text()
                for i, category in enumerate(value.split(", ")):
                    text.append(", " if i else "")
                    text.append_text(category_text(category))
                cells.append(text)
            else:
                cells.append(cell(value))
        return cells

    def action_cycle_phase(self) -> None:
        """Next phase filter: all → decode → prefill → mixed → unknown → empty → all."""
        phases = browse.PHASE_FILTERS
        self.phase = phases[(phases.index(self.phase) + 1) % len(phases)]
        self.redraw()

    def action_cycle_batch(self) -> None:
        """Next batch-size filter over the batch sizes the trace has (then back to all)."""
        sizes: list[int | None] = [None, *browse.batch_sizes(self.all_steps)]
        position = sizes.index(self.batch_size) if self.batch_size in sizes else 0
        self.batch_size = sizes[(position + 1) % len(sizes)]
        self.redraw()

    def action_cycle_sort(self) -> None:
        """Next sort order: step index, then wall time (longest first), busy %, idle, kernels, AllReduce %."""
        position = SORTABLE.index(self.sort_column) if self.sort_column in SORTABLE else 0
        self.sort_column = SORTABLE[(position + 1) % len(SORTABLE)]
        self.sort_descending = self.sort_column != "step_index"
        self.redraw()

    @on(DataTable.HeaderSelected, "#steps")
    def sort_by_header(self, event: DataTable.HeaderSelected) -> None:
        """A click on a column header sorts by it; a second click reverses the order."""
        column = str(event.column_key.value)
        if column == self.sort_column:
            self.sort_descending = not self.sort_descending
        else:
            self.sort_column, self.sort_descending = column, column not in ("step_index", "phase")
        self.redraw()

    def action_next_rank(self) -> None:
        """Show the same list for the next trace (rank) of the run."""
        if not self.loaded:
            self.notify("The steps are still loading.", severity="warning")
            return
        if self.next_trace_id is None:
            self.notify("This run has no other rank.", severity="warning")
            return
        self.trace_id = self.next_trace_id
        self.reload()

    @on(DataTable.RowHighlighted, "#steps")
    def step_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Read the step under the cursor once it rests there: Enter then shows it at once."""
        if event.row_key.value is None:
            self.stop_prefetch()
            return
        key = (self.trace_id, int(event.row_key.value))
        self.prefetch_on_rest(self.prefetched, StepPrefetched, lambda cursor: browse.step_detail(cursor, *key), key)

    @on(StepPrefetched)
    def keep_step(self, message: StepPrefetched) -> None:
        if message.result is not None:
            self.keep_prefetched(self.prefetched, message.request, message.result)

    @on(DataTable.RowSelected, "#steps")
    def open_step(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            key = (self.trace_id, int(event.row_key.value))
            self.post_message(OpenStep(*key, self.prefetched.get(key)))
