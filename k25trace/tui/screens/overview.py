"""Overview: the findings first (what costs the step and the most each fix could save), then the runs and ranks in
the database, capture levels, step counts and the decode breakdown."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import DataTable, Header, Label, Static

from k25trace.analysis import overview as overview_rows
from k25trace.tui.messages import (
    BreakdownLoaded,
    FetchFailed,
    FindingsLoaded,
    OpenSteps,
    OverviewLoaded,
    TraceStepsPrefetched,
)
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import CategoryBars, SteadyFooter, fill_table

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from k25trace.analysis import browse, findings


class FindingsPanel(Static):
    """The findings laid out as ``k25trace report`` prints them (:mod:`k25trace.render.findings`), at the panel's
    width, laid out again when it changes."""

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's own keyword
        super().__init__("[b]Findings[/b]: computing…", id=id)
        self.result: findings.Findings | None = None
        self.more: str | None = None
        self.text = Text("")

    def show_findings(self, result: findings.Findings, more: str) -> None:
        """Lay out ``result`` (``more``: the command that lists every finding) and show it."""
        self.result, self.more = result, more
        self._lay_out(self.size.width)

    def _lay_out(self, width: int) -> None:
        if self.result is not None:
            from k25trace.render.findings import findings_text

            self.text = findings_text(self.result, width or 120, more=self.more)
            self.update(self.text)

    def on_resize(self, event: events.Resize) -> None:
        self._lay_out(event.size.width)


class OverviewScreen(BrowseScreen):
    """The first screen: the findings, then pick a trace (rank) to see its steps."""

    DEFAULT_CSS = """
    #findings-scroll {
        height: auto;
        max-height: 45%;
        padding: 0 1;
        border-bottom: solid $primary-darken-2;
    }
    #findings {
        height: auto;
    }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_trace", "Steps of trace", show=False),
        Binding("R", "reload", "Reload"),
    ]

    def __init__(self, db_name: str = "FILE") -> None:
        super().__init__()
        self.db_name = db_name  # the database as the findings' commands name it
        self.prefetched: dict[int, browse.TraceSteps] = {}
        """The steps of traces read ahead (the trace under the cursor), by trace id; handed to the steps screen."""

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="findings-scroll"):
            yield FindingsPanel(id="findings")
        with VerticalScroll(id="overview"):
            yield Label("loading…", id="status")
            yield Label("[b]Traces[/b] (one per rank) — Enter: its steps", classes="section")
            yield DataTable(id="traces", cursor_type="row", zebra_stripes=True)
            yield Label("[b]Capture levels[/b]", classes="section", id="levels-title")
            yield DataTable(id="levels", cursor_type="row")
            yield Label("[b]Steps by phase and batch size[/b]", classes="section")
            yield DataTable(id="step-counts", cursor_type="row")
            yield Label(
                "[b]Decode breakdown per batch size[/b] (exclusive GPU time per step, all ranks)", classes="section"
            )
            yield CategoryBars(id="breakdown")
            yield Label(
                "[b]Collectives across ranks[/b] (decode; wait = time spent waiting for the slowest rank)",
                classes="section",
                id="comm-title",
            )
            yield DataTable(id="comm", cursor_type="row")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        """Query the overview again (after a load in another terminal); the findings once it is painted."""
        self.prefetched.clear()
        self.fetch(OverviewLoaded, overview_rows.overview)

    def fetch_findings(self) -> None:
        """The findings (and with them polars and the analysis modules, ~0.2 s to import: after the overview's
        first paint, which does without them)."""

        def read(cursor: duckdb.DuckDBPyConnection) -> findings.Findings:
            from k25trace.analysis import findings

            return findings.findings(cursor, db=self.db_name)

        self.fetch(FindingsLoaded, read, group="findings")

    @on(FindingsLoaded)
    def show_findings(self, message: FindingsLoaded) -> None:
        from k25trace.render.findings import all_command

        self.query_one("#findings", FindingsPanel).show_findings(
            message.result, all_command(self.db_name, message.result.phase)
        )

    @on(FetchFailed)
    def show_findings_failure(self, message: FetchFailed) -> None:
        if message.kind is FindingsLoaded:
            self.query_one("#findings", FindingsPanel).update(f"[b]Findings[/b]: none ({escape(message.error)})")
        elif message.kind is OverviewLoaded:
            self.fetch_findings()

    @on(BreakdownLoaded)
    def show_breakdown(self, message: BreakdownLoaded) -> None:
        breakdown, comm, idle, labels = message.result
        self.query_one("#breakdown", CategoryBars).show_bars(
            breakdown_rows(breakdown, idle, labels), width=60, empty_message="no decode steps in this database"
        )
        table = self.query_one("#comm", DataTable)
        fill_table(table, comm)
        table.display = not comm.is_empty()
        self.query_one("#comm-title", Label).update(
            "[b]Collectives across ranks[/b] (decode; wait = time spent waiting for the slowest rank)"
            if not comm.is_empty()
            else "[b]Collectives across ranks[/b]: none (needs two or more ranks of one run with decode steps)"
        )

    @on(OverviewLoaded)
    def show_overview(self, message: OverviewLoaded) -> None:
        overview = message.result
        traces = overview.traces
        if traces.is_empty():
            self.set_status("This database has no traces yet. Load some with [b]k25trace load TRACE… --db FILE[/b].")
        else:
            ranks = len({rank for rank in traces.column("rank") if rank is not None})
            runs = len(set(traces.column("run_key")))
            total_steps = int(sum(steps or 0 for steps in traces.column("steps")))
            self.set_status(
                f"{_plural(traces.height, 'trace')}, {_plural(ranks, 'rank')}, {_plural(runs, 'run')}, "
                f"{_plural(total_steps, 'rank-step')}"
                + ("" if total_steps else " — no steps: run [b]k25trace steps[/b]")
            )
        fill_table(
            self.query_one("#traces", DataTable),
            traces,
            key_column="trace_id",
            columns=[
                "trace_id",
                "run",
                "level",
                "rank",
                "device_name",
                "gpu_event_count",
                "steps",
                "decode",
                "prefill",
                "mixed",
                "unknown",
                "empty",
                "file_name",  # last: a long name would push the counts off a 120-column screen
            ],
        )
        levels_table = self.query_one("#levels", DataTable)
        fill_table(levels_table, overview.levels)
        has_levels = not overview.levels.is_empty()
        levels_table.display = has_levels
        self.query_one("#levels-title", Label).update(
            "[b]Capture levels[/b]"
            if has_levels
            else "[b]Capture levels[/b]: none (traces not from `k25trace capture`)"
        )
        fill_table(self.query_one("#step-counts", DataTable), overview.step_counts)
        self.query_one("#breakdown", CategoryBars).update("computing…")
        self.query_one("#traces", DataTable).focus()
        self.call_after_refresh(self.fetch_after_paint)

    def fetch_after_paint(self) -> None:
        """Once the overview is painted: the other screens imported (so that the first open of each does not wait
        for its imports), then the findings, the decode breakdown, the collectives and idle splits."""

        def imports() -> None:
            try:
                import_screens()
            finally:
                self.app.call_from_thread(self.fetch_analysis)

        self.run_worker(imports, thread=True, group="imports", exit_on_error=False)

    def fetch_analysis(self) -> None:
        """The findings, then the decode breakdown, the collectives and idle splits (polars frames)."""
        self.fetch_findings()

        def read(cursor: duckdb.DuckDBPyConnection) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, str]]:
            from k25trace.analysis import browse

            return (
                browse.decode_breakdown(cursor),
                browse.collective_split(cursor),
                browse.idle_split(cursor),
                browse.run_labels(cursor),
            )

        self.fetch_side(BreakdownLoaded, read)

    @on(DataTable.RowHighlighted, "#traces")
    def trace_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """Read the steps of the trace under the cursor once it rests there: Enter then shows them at once."""
        if event.row_key.value is None:
            self.stop_prefetch()
            return
        trace_id = int(event.row_key.value)

        def read(cursor: duckdb.DuckDBPyConnection) -> browse.TraceSteps:
            from k25trace.analysis import browse  # in the worker: not before the overview's first paint

            return browse.trace_steps(cursor, trace_id)

        self.prefetch_on_rest(self.prefetched, TraceStepsPrefetched, read, trace_id)

    @on(TraceStepsPrefetched)
    def keep_steps(self, message: TraceStepsPrefetched) -> None:
        self.keep_prefetched(self.prefetched, message.request, message.result)

    def open_steps(self, trace_id: int) -> None:
        self.post_message(OpenSteps(trace_id, self.prefetched.get(trace_id)))

    @on(DataTable.RowSelected, "#traces")
    def open_selected_trace(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value is not None:
            self.open_steps(int(event.row_key.value))

    def action_open_trace(self) -> None:
        table = self.query_one("#traces", DataTable)
        if table.row_count:
            row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
            if row_key.value is not None:
                self.open_steps(int(row_key.value))


SCREEN_MODULES = ("steps", "step", "kernel", "comm", "search", "sql")
"""The screens the app imports when first opened (:mod:`k25trace.tui.app`), imported here once the overview is
painted."""


def import_screens() -> None:
    """Import the other screens' modules (polars and the analysis modules with them), in a worker thread."""
    import importlib

    for name in SCREEN_MODULES:
        importlib.import_module(f"k25trace.tui.screens.{name}")


def _plural(count: int, noun: str) -> str:
    """``'1 trace'``, ``'2 traces'``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def breakdown_rows(
    frame: pl.DataFrame, idle: pl.DataFrame | None = None, labels: dict[str, str] | None = None
) -> list[tuple[str, list[tuple[str, float]], str]]:
    """``report_breakdown`` rows → one bar per (run, batch size): label (the run's, from ``labels``: run id → label,
    when several runs), category shares, a note (with the time between steps, from ``report_idle``, when given)."""
    labels = labels or {}
    between = {} if idle is None else {(r["run_id"], r["batch_size"]): r for r in idle.iter_rows(named=True)}
    rows: list[tuple[str, list[tuple[str, float]], str]] = []
    if frame.is_empty():
        return rows
    several_runs = frame["run_id"].n_unique() > 1
    for (run_id, batch_size), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        level = first["level"]
        run = labels.get(str(run_id), str(run_id))[:24] + " " if several_runs and not level else ""
        label = run + (f"{level} " if level else "") + f"bs={'?' if batch_size is None else batch_size}"
        shares = [(r["category"], float(r["pct_of_step"] or 0.0)) for r in group.iter_rows(named=True)]
        note = f"{first['step_ms']:.3f} ms/step, {first['steps']} rank-steps"
        why = between.get((run_id, batch_size))
        if why is not None and why["between_ms"]:  # none when the batch size has a single step
            note += f", +{why['between_ms']:.3f} ms between steps"
        rows.append((label, shares, note))
    return rows
