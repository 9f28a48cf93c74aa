"""Compare: pick two runs (a capture level is a run) and see what changed between them, and whether it is more than
the step-to-step noise (:mod:`.analysis.compare`: Welch's t-test on per-step values, Holm-adjusted per table)."""

from __future__ import annotations

from typing import ClassVar

import polars as pl
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import DataTable, Header, Label

from k25trace.analysis import compare
from k25trace.tui.cells import cell
from k25trace.tui.messages import ComparisonLoaded, RunsLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, fill_table

RUN_COLUMNS = ["side", "run", "level", "ranks", "devices", "decode_steps", "decode_batch_sizes"]
MATCH_CYCLE = ("auto", "batch", "level", "side")
KERNEL_ROWS = 15
"""Kernel rows per group shown besides the changed ones."""


class CompareScreen(BrowseScreen):
    """Two runs side by side: categories, kernels, step times, collectives, capture figures, with a verdict."""

    DEFAULT_CSS = """
    #compare-screen { padding: 0 1; }
    #compare-runs { max-height: 10; }
    #compare-verdict { margin-top: 1; height: auto; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("a", "pick('A')", "Side A"),
        Binding("b", "pick('B')", "Side B"),
        Binding("s", "swap", "Swap"),
        Binding("m", "cycle_match", "Match"),
        Binding("R", "reload", "Reload"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, source: str = "database") -> None:
        super().__init__()
        self.source = source
        """How the database is named in the comparison's notes (its file name)."""
        self.runs = pl.DataFrame()
        self.side_a: str | None = None
        self.side_b: str | None = None
        self.match = "auto"

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="compare-screen"):
            yield Label("loading…", id="status")
            yield Label(
                "[b]Runs[/b] (a capture level is a run) — a: side A, b: side B, s: swap, m: match by "
                "batch size / level / side",
                classes="section",
            )
            yield DataTable(id="compare-runs", cursor_type="row", zebra_stripes=True)
            yield Label("", id="compare-verdict")
            for name in compare.SECTIONS:
                yield Label(f"[b]{escape(compare.TITLES[name])}[/b]", classes="section", id=f"compare-{name}-title")
                yield DataTable(id=f"compare-{name}", cursor_type="row", zebra_stripes=True)
        yield SteadyFooter()

    def on_mount(self) -> None:
        for name in compare.SECTIONS:
            self._show_section(name, False)
        self.action_reload()

    def action_reload(self) -> None:
        self.fetch(RunsLoaded, compare.runs)

    def _show_section(self, name: str, visible: bool) -> None:
        self.query_one(f"#compare-{name}-title", Label).display = visible
        self.query_one(f"#compare-{name}", DataTable).display = visible

    @on(RunsLoaded)
    def show_runs(self, message: RunsLoaded) -> None:
        self.runs = message.result
        self._fill_runs()
        if self.runs.height < 2:
            self.set_status(
                "Comparing needs two runs (or capture levels) in this database; "
                "`k25trace compare A B` compares two databases or trace directories."
            )
        else:
            self.set_status("Pick side A (a) and side B (b) in the runs below.")
        self.query_one("#compare-runs", DataTable).focus()

    @on(ComparisonLoaded)
    def show_comparison(self, message: ComparisonLoaded) -> None:
        self._show_comparison(message.result)

    def _fill_runs(self) -> None:
        table = self.query_one("#compare-runs", DataTable)
        cursor = table.cursor_row
        table.clear(columns=True)
        table.add_columns(*RUN_COLUMNS)
        for i, row in enumerate(self.runs.iter_rows(named=True)):
            side = "A" if row["run_id"] == self.side_a else ("B" if row["run_id"] == self.side_b else "")
            values = {
                **row,
                "side": side,
                "run": row["label"],
                "decode_batch_sizes": ", ".join(str(b) for b in row["decode_batch_sizes"] or []),
            }
            table.add_row(*[cell(values[c]) for c in RUN_COLUMNS], key=str(i))
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))

    def _run_under_cursor(self) -> str | None:
        table = self.query_one("#compare-runs", DataTable)
        if not table.row_count:
            return None
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return None if key is None else str(self.runs["run_id"][int(key)])

    def action_pick(self, side: str) -> None:
        run = self._run_under_cursor()
        if run is None:
            return
        if side == "A":
            self.side_a = run
        else:
            self.side_b = run
        self._fill_runs()
        self._start()

    def action_swap(self) -> None:
        self.side_a, self.side_b = self.side_b, self.side_a
        self._fill_runs()
        self._start()

    def action_cycle_match(self) -> None:
        self.match = MATCH_CYCLE[(MATCH_CYCLE.index(self.match) + 1) % len(MATCH_CYCLE)]
        self._start()

    def _start(self) -> None:
        """Compare the picked runs (when both are picked) in a worker."""
        if self.side_a is None or self.side_b is None:
            missing = " and ".join(s for s, r in (("A", self.side_a), ("B", self.side_b)) if r is None)
            keys = missing.lower().replace(" and ", " / ")
            self.set_status(f"Now pick side {missing} (move to a run, press {keys}).")
            return
        run_a, run_b, match = self.side_a, self.side_b, self.match
        labels = dict(self.runs.select("run_id", "label").iter_rows()) if not self.runs.is_empty() else {}
        self.set_status(
            f"comparing A {escape(labels.get(run_a, run_a))} with B {escape(labels.get(run_b, run_b))} (match {match})…"
        )
        source = self.source

        def call(cursor: object) -> compare.Comparison:
            return compare.compare(
                compare.Side("A", cursor, source, compare.Selection(run=run_a)),  # type: ignore[arg-type]
                compare.Side("B", cursor, source, compare.Selection(run=run_b)),  # type: ignore[arg-type]
                match=match,
            )

        self.fetch_side(ComparisonLoaded, call)

    def _show_comparison(self, result: compare.Comparison) -> None:
        notes = " | ".join(result.notes)
        self.set_status(f"A and B matched by {result.match} (m: cycle)" + (f" — {escape(notes)}" if notes else ""))
        changes = result.changes()
        verdict = f"[b]Verdict: {escape(result.summary())}[/b]"
        if changes:
            verdict += "\n" + "\n".join(f"  {escape(c)}" for c in changes[:12])
            if len(changes) > 12:
                verdict += f"\n  … and {len(changes) - 12} more"
        self.query_one("#compare-verdict", Label).update(verdict)
        for name in compare.SECTIONS:
            frame = result.section(name)
            hidden = 0
            if name == "kernel":
                frame, hidden = compare.top_kernels(frame, KERNEL_ROWS)
            visible = not frame.is_empty()
            self._show_section(name, visible)
            if visible:
                fill_table(self.query_one(f"#compare-{name}", DataTable), compare.display_frame(frame, name))
            title = f"[b]{escape(compare.TITLES[name])}[/b]"
            if hidden:
                title += f" ({hidden} more rows within noise or negligible)"
            self.query_one(f"#compare-{name}-title", Label).update(title)
