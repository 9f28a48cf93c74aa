"""Collectives: who waits for whom across the ranks of each run, per batch size, per rank and per call site."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.widgets import DataTable, Header, Label

from k25trace.analysis import browse
from k25trace.tui.cells import cell
from k25trace.tui.messages import CallSitesLoaded, CollectivesLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, fill_table

BATCH_COLUMNS = [
    "run",
    "batch_size",
    "category",
    "ranks",
    "calls_per_step",
    "ms_per_step",
    "transfer_ms_per_step",
    "wait_ms_per_step",
    "wait_host_ms_per_step",
    "wait_sync_ms_per_step",
    "wait_gpu_work_ms_per_step",
    "straggler_rank",
    "straggler_wait_ms_per_step",
    "straggler_wait_pct",
    "last_rank",
    "last_pct",
    "alignment",
    "why_late",
]
RANK_COLUMNS = [
    "run",
    "rank",
    "category",
    "steps",
    "wait_ms_per_step",
    "caused_wait_ms_per_step",
    "caused_wait_pct",
    "late_pct",
    "clock_offset_us",
]
SITE_COLUMNS = [
    "site",
    "wait_kind",
    "steps",
    "transfer_us",
    "wait_us",
    "max_wait_us",
    "wait_share_pct",
    "late_rank",
    "late_rank_last_pct",
    "why_late",
]


class CommScreen(BrowseScreen):
    """Decode collectives across ranks; Enter on a batch row lists its call sites, the most waited-on first."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_sites", "Call sites", show=False),
        Binding("R", "reload", "Reload"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self._batch_keys: dict[str, tuple[str, str, int | None, str]] = {}  # run id, its label, batch, category

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="comm-screen"):
            yield Label("loading…", id="status")
            yield Label(
                "[b]Per run and batch size[/b] (decode; straggler = the rank whose lateness caused the most "
                "wait; last = the rank most often last to arrive; why late = what the late rank did since "
                "the previous collective, against the on-time rank) — Enter: call sites",
                classes="section",
            )
            yield DataTable(id="comm-batches", cursor_type="row", zebra_stripes=True)
            yield Label("[b]Per rank[/b]: wait suffered and wait caused", classes="section")
            yield DataTable(id="comm-ranks", cursor_type="row")
            yield Label("[b]Call sites[/b]: pick a batch row above", classes="section", id="sites-title")
            yield DataTable(id="comm-sites", cursor_type="row")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.fetch(CollectivesLoaded, browse.collectives)

    @on(CallSitesLoaded)
    def show_sites(self, message: CallSitesLoaded) -> None:
        (run, batch, category), frame = message.result
        fill_table(self.query_one("#comm-sites", DataTable), frame, columns=SITE_COLUMNS)
        self.query_one("#sites-title", Label).update(
            f"[b]Call sites[/b] of {escape(run)} batch {batch if batch is not None else '?'} {category} "
            f"({frame.height}, the most waited-on first; site k = the k-th {category} of every step)"
        )

    @on(CollectivesLoaded)
    def show(self, message: CollectivesLoaded) -> None:
        data = message.result
        if data.per_batch.is_empty():
            self.set_status("No collectives across ranks: this needs two or more ranks of one run with decode steps.")
        elif data.warnings:
            self.set_status("[b]warning[/b]: " + escape(" | ".join(data.warnings)), error=True)
        else:
            self.set_status("Clock alignment good for every run (paired collectives end together after alignment).")
        batches = self.query_one("#comm-batches", DataTable)
        self._batch_keys = {}
        batches.clear(columns=True)
        batches.add_columns(*BATCH_COLUMNS)
        for i, row in enumerate(data.per_batch.iter_rows(named=True)):
            key = str(i)
            self._batch_keys[key] = (row["run_id"], row["run"], row["batch_size"], row["category"])
            batches.add_row(*[cell(row[c]) for c in BATCH_COLUMNS], key=key)
        fill_table(
            self.query_one("#comm-ranks", DataTable),
            data.per_rank,
            columns=RANK_COLUMNS if not data.per_rank.is_empty() else None,
        )
        batches.focus()

    def _open(self, key: str | None) -> None:
        if key is None or key not in self._batch_keys:
            return
        run_id, run, batch, category = self._batch_keys[key]
        label = (run, batch, category)
        self.fetch_side(CallSitesLoaded, lambda cursor: (label, browse.call_sites(cursor, run_id, batch, category)))

    @on(DataTable.RowSelected, "#comm-batches")
    def selected(self, event: DataTable.RowSelected) -> None:
        self._open(event.row_key.value)

    def action_open_sites(self) -> None:
        table = self.query_one("#comm-batches", DataTable)
        if table.row_count:
            self._open(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
