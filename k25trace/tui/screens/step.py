"""Step: one engine step's kernels in time order, its timeline strip, per-category times and its other ranks.

Moving between steps is the screen's hot path (n/p held down, or pressed while reading). Every step it has read is
kept (:data:`CACHE_STEPS` of them), and after each move a worker reads ahead — the next steps in the direction of
travel, the one behind, the same step on the next rank — so the next key press usually paints from memory, with
the step's kernel and category tables drawn by the worker already (:class:`DrawnStep`).
Whether a step comes from a worker or from memory, it reaches the screen as a :class:`StepLoaded` message and is
painted by one handler, which drops any step but the one asked for last.
"""

from __future__ import annotations

import statistics
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import polars as pl
from rich.console import Console
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Header, Label

from k25trace.analysis import browse
from k25trace.tui.cells import LineText, cell, flow, name_cell
from k25trace.tui.messages import KernelPageLoaded, OpenKernel, StepLoaded, StepsPrefetched
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import (
    CategoryBars,
    LineTable,
    SteadyFooter,
    SteadyLabel,
    SteadyStatic,
    Timeline,
    category_text,
    one_cell_rows,
)
from k25trace.tui.widgets.layer_strip import LayerStrip, segment_summary
from k25trace.tui.widgets.lines import Drawn, draw_lines

if TYPE_CHECKING:
    import duckdb

KERNEL_HEADER = f"{'offset_us':>11} {'dur_us':>9}  {'category':<12} {'stream':>6} {'kind':<6} short_name"
"""The kernel table's columns, laid out in one line per kernel (:func:`kernel_line`): a step move refills and
repaints the whole visible list, and a :class:`LineTable` paints a line drawn in advance for far less than a
DataTable paints its cells."""

CATEGORY_COLUMNS = ["category", "busy_ms", "pct", "kernel_ms", "calls"]
"""The category table's columns, laid out in one line per row too (:func:`one_cell_rows`)."""

StepKey = tuple[int, int]
"""(trace_id, step_index)."""

CACHE_STEPS = 64
"""Steps kept in memory per step screen (a step is its header, one page of kernels and a few small tables)."""

RANKS_LISTED = 8
"""Up to this many ranks the ranks line gives each one's wall time; beyond, the fastest, median and slowest."""

READ_AHEAD = 2
"""Steps read ahead in the direction of travel (plus one behind and the same step on the next rank)."""


def kernel_line(row: dict[str, object]) -> Text:
    """One kernel as a fixed-width line: offset, duration, category (in colour), stream, kind, short name (made
    printable and cut: :func:`name_cell`)."""
    category = str(row["category"])
    line = LineText(f"{row['offset_us']:>11,.1f} {row['dur_us']:>9,.1f}  ", no_wrap=True)
    line.append_text(category_text(category))
    line.append(" " * max(1, 13 - len(category)))
    stream = "" if row["stream"] is None else str(row["stream"])
    line.append(f"{stream:>6} {str(row['kind']):<6} {name_cell(str(row['short_name']))}")
    return line


def kernel_lines(page: pl.DataFrame) -> list[Text]:
    """A page of kernels as table lines."""
    return [kernel_line(row) for row in page.iter_rows(named=True)]


def pct_cell(value: float | None) -> Text:
    """A percent with one decimal (``78.3``), blank for NULL."""
    return LineText("" if value is None else f"{value:.1f}", justify="right")


def category_lines(rows: list[dict[str, Any]]) -> tuple[Text, Sequence[Text]]:
    """The category table's header and lines (``rows``: browse_step_categories' columns)."""
    return one_cell_rows(
        CATEGORY_COLUMNS,
        [
            [
                category_text(row["category"]),
                cell(row["busy_ms"]),
                pct_cell(row["pct_of_step"]),
                cell(row["kernel_ms"]),
                cell(row["calls"]),
            ]
            for row in rows
        ],
    )


def rank_items(ranks: pl.DataFrame, trace_id: int, step_index: int) -> list[Text]:
    """The ranks line's items: this rank's wall time and every other rank's (``2: 12.9 ms``), or beyond
    :data:`RANKS_LISTED` ranks the fastest, the median and the slowest of them; the ranks without the step."""
    rows = list(ranks.iter_rows(named=True))

    def name(row: dict[str, Any]) -> str:
        return "?" if row["rank"] is None else str(row["rank"])

    if len(rows) < 2:
        return [Text("no other rank in this run", style="italic")]
    items = [Text(f"same step on {len(rows)} ranks:")]
    timed = [row for row in rows if row["has_step"] and row["wall_ms"] is not None]
    missing = [name(row) for row in rows if not row["has_step"]]
    if len(rows) <= RANKS_LISTED:
        for row in rows:
            if row["trace_id"] == trace_id:
                wall = "" if row["wall_ms"] is None else f" {row['wall_ms']:.3f} ms"
                items.append(Text(f"{name(row)} (this){wall}", style="bold"))
            elif row["has_step"]:
                items.append(Text(f"{name(row)}: {row['wall_ms']:.3f} ms"))
            else:
                items.append(Text(f"{name(row)}: no step {step_index}", style="italic"))
    else:
        this = next((row for row in timed if row["trace_id"] == trace_id), None)
        if this is not None:
            items.append(Text(f"this rank {name(this)} {this['wall_ms']:.3f} ms", style="bold"))
        if timed:
            fastest = min(timed, key=lambda row: row["wall_ms"])
            slowest = max(timed, key=lambda row: row["wall_ms"])
            if fastest["wall_ms"] == slowest["wall_ms"]:
                items.append(Text(f"all {len(timed)} with the step: {fastest['wall_ms']:.3f} ms"))
            else:
                items.append(Text(f"fastest rank {name(fastest)} {fastest['wall_ms']:.3f} ms"))
                items.append(Text(f"median {statistics.median(row['wall_ms'] for row in timed):.3f} ms"))
                items.append(Text(f"slowest rank {name(slowest)} {slowest['wall_ms']:.3f} ms"))
        if missing:
            shown = ", ".join(missing[:6]) + (f" and {len(missing) - 6} more" if len(missing) > 6 else "")
            items.append(Text(f"no step {step_index} on rank{'s' if len(missing) > 1 else ''} {shown}", style="italic"))
    items.append(Text("(r: next rank)", style="dim"))
    return items


@dataclass
class DrawnStep:
    """A step's first kernel page and its category table drawn in advance, by the read-ahead worker: a step move
    then only hands the screen what is drawn."""

    kernel_lines: list[Text]
    kernel_keys: list[str | None]
    kernel_start_ns: dict[str, int]
    kernels: Drawn
    category_rows: list[dict[str, Any]]
    category_lines: Sequence[Text]
    categories: Drawn


PaintFor = tuple[Style, int] | None
"""A table's style and width, to paint its rows for in advance (:meth:`LineTable.paint_key`)."""


def draw_step(
    console: Console, detail: browse.StepDetail, kernels_for: PaintFor = None, categories_for: PaintFor = None
) -> DrawnStep:
    """Draw a step's first kernel page and its category table (off the UI thread), painted for the tables'
    current style and width when given."""
    lines = kernel_lines(detail.kernels)
    keys: list[str | None] = []
    start_ns: dict[str, int] = {}
    for event_id, start in detail.kernels.select("event_id", "start_ns").iter_rows():
        keys.append(str(event_id))
        start_ns[str(event_id)] = start
    rows = list(detail.categories.iter_rows(named=True))
    header, categories = category_lines(rows)
    return DrawnStep(
        kernel_lines=lines,
        kernel_keys=keys,
        kernel_start_ns=start_ns,
        kernels=draw_lines(console, Text(KERNEL_HEADER), lines, paint_for=kernels_for),
        category_rows=rows,
        category_lines=categories,
        categories=draw_lines(console, header, categories, paint_for=categories_for),
    )


class StepScreen(BrowseScreen):
    """One step of one trace; n/p move along the trace, r jumps to the same step on the next rank."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n,right_square_bracket", "move(1)", "Next step"),
        Binding("p,left_square_bracket", "move(-1)", "Prev step"),
        Binding("r", "other_rank", "Next rank"),
        Binding("m", "more_kernels", "More kernels"),
        Binding("full_stop", "layer(1)", "Next layer (pre, layers, post, whole step)", show=False),
        Binding("comma", "layer(-1)", "Prev layer", show=False),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, trace_id: int, step_index: int, *, detail: browse.StepDetail | None = None) -> None:
        super().__init__()
        self.trace_id = trace_id
        self.step_index = step_index
        self.detail: browse.StepDetail | None = None
        """The step on screen (None before the first one arrives, or when it does not exist)."""
        self.shown: StepKey | None = None
        self.kernel_rows = 0
        """GPU activities loaded into the kernel table so far."""
        self.kernel_start_ns: dict[str, int] = {}
        self.direction = 1
        """+1 after a move forward, -1 after one back: where reading ahead goes first."""
        self.steps: OrderedDict[StepKey, browse.StepDetail | None] = OrderedDict()
        """Steps read so far, least recently used first."""
        if detail is not None:  # read ahead by the steps screen
            self.steps[(trace_id, step_index)] = detail
        self.drawn: dict[StepKey, DrawnStep] = {}
        """The tables of steps read ahead, drawn already (in the worker)."""
        self.reading_ahead: set[StepKey] = set()
        """Steps the read-ahead worker is reading now."""
        self.layer_rows: list[dict[str, Any]] = []
        """The segments of the step on screen (browse_step_layers rows; one ``step`` row when unsegmented)."""
        self.segment: int | None = None
        """The layer strip's current segment (an index into :attr:`layer_rows`), or None for the whole step."""
        self.segment_label: str | None = None
        """Its label, kept across step moves: the next step opens at the same layer when it has it."""

    @property
    def wanted(self) -> StepKey:
        """The step asked for last: the one the screen shows once it is read."""
        return (self.trace_id, self.step_index)

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="step-screen"):
            yield SteadyLabel("loading…", id="title")
            yield SteadyLabel("", id="status")
            yield Timeline(id="timeline")
            yield LayerStrip(id="layer-strip")
            with Horizontal(id="step-body"):
                with Vertical(id="kernel-pane"):
                    yield SteadyLabel("", id="kernel-count")
                    yield LineTable(id="kernels")
                with Vertical(id="category-pane"):
                    # its size only grows: a step move lays the screen out again only for a larger one
                    yield LineTable(id="categories", keep_rows=True)
                    yield CategoryBars(id="category-bar")
                    yield SteadyLabel("", id="ranks")
        yield SteadyFooter()

    def on_mount(self) -> None:
        for steady in ("#timeline", "#category-bar", "#ranks"):  # their heights only grow, as the category table's
            self.query_one(steady, SteadyStatic).keep_height = True
        self.load()

    def load(self) -> None:
        """Show the wanted step: from memory when it was read already, else when the worker reading it is done."""
        key = self.wanted
        if key in self.steps:
            self.steps.move_to_end(key)
            self.post_message(StepLoaded(self.steps[key], key))
        elif key not in self.reading_ahead:  # else the read-ahead worker posts it in a moment
            self.fetch(StepLoaded, lambda cursor: browse.step_detail(cursor, *key), request=key)

    def remember(self, key: StepKey, detail: browse.StepDetail | None) -> None:
        self.steps[key] = detail
        self.steps.move_to_end(key)
        while len(self.steps) > CACHE_STEPS:
            self.drawn.pop(self.steps.popitem(last=False)[0], None)

    @on(StepLoaded)
    def step_loaded(self, message: StepLoaded) -> None:
        key: StepKey = message.request  # type: ignore[assignment]
        self.remember(key, message.result)
        if key != self.wanted:
            return  # the user has moved on
        self.show_step(message.result)
        self.shown = key
        kernels = self.query_one("#kernels", LineTable)
        if self.focused is not kernels:  # focusing it again redraws the footer's keys, each step
            kernels.focus()
        # after the paint, so that the read-ahead worker does not compete with it for the CPU and the GIL. The app's
        # call_after_refresh waits for the screen's paint; the screen's own ran ~4 ms after the key, before a paint
        # that ends ~12 ms after it (a step move 4 ms slower going forward, where there is something to read ahead)
        self.app.call_after_refresh(self.read_ahead)

    @on(StepsPrefetched)
    def steps_read_ahead(self, message: StepsPrefetched) -> None:
        asked = self.reading_ahead
        self.reading_ahead = set()
        for key, detail, drawn in message.result:
            self.remember(key, detail)
            if drawn is not None:
                self.drawn[key] = drawn
        if self.wanted in asked and self.shown != self.wanted:
            self.load()  # the user moved to a step the worker was reading: it is in memory now, or fetched if it failed
        else:
            self.read_ahead()

    def read_ahead(self) -> None:
        """Read the steps the user is likely to ask for next, in one worker at a time, unless all are in memory."""
        if self.reading_ahead or self.detail is None or self.shown != self.wanted:
            return
        plan = self.read_ahead_plan(self.detail)
        known = {key: (None if detail is None else detail.header) for key, detail in self.steps.items()}
        self.reading_ahead, passed = plan_walk(plan, known)
        undrawn = [  # read already (fetched while the user moved faster than the reading ahead), not drawn yet
            (key, detail)
            for key in dict.fromkeys([self.wanted, *passed])
            if (detail := self.steps.get(key)) is not None and key not in self.drawn
        ]
        self.reading_ahead |= {key for key, _ in undrawn}  # what the worker is on: read_ahead waits for it
        if self.reading_ahead:
            paint_for = (
                self.query_one("#kernels", LineTable).paint_key(),
                self.query_one("#categories", LineTable).paint_key(),
            )
            self.fetch(
                StepsPrefetched,
                read_steps(plan, known, self.app.console, paint_for, undrawn),
                group="read-ahead",
            )

    def read_ahead_plan(self, detail: browse.StepDetail) -> list[tuple[StepKey, int]]:
        """Steps to read, in order, each as (a step already known, how far to walk from it: +k next, -k previous)."""
        start = (int(detail.header["trace_id"]), int(detail.header["step_index"]))
        plan: list[tuple[StepKey, int]] = [(start, self.direction * i) for i in range(1, READ_AHEAD + 1)]
        plan.append((start, -self.direction))
        trace_ids = detail.ranks["trace_id"].to_list()
        if len(trace_ids) > 1 and start[0] in trace_ids:
            position = trace_ids.index(start[0])
            other = detail.ranks.row((position + 1) % len(trace_ids), named=True)
            if other["has_step"]:
                plan.append(((int(other["trace_id"]), start[1]), 0))
        return plan

    def show_step(self, detail: browse.StepDetail | None) -> None:
        self.detail = detail
        self.segment = None  # the kernel table lists the whole step until the layer strip is painted
        categories = self.query_one("#categories", LineTable)
        if detail is None:
            self.clear_kernels()
            categories.set_lines(Text(), [])
            self.query_one("#title", Label).update(f"[b]Step {self.step_index}[/b] of trace {self.trace_id}")
            self.set_status(f"Trace {self.trace_id} has no step {self.step_index}.", error=True)
            self.query_one("#timeline", Timeline).show_slices([])
            self.query_one("#kernel-count", Label).update("")
            self.query_one("#category-bar", CategoryBars).show_bars([], empty_message="")
            self.query_one("#ranks", Label).update("")
            self.layer_rows, self.segment = [{"label": "step", "reason": "no such step"}], None
            self.query_one("#layer-strip", LayerStrip).show_segments(self.layer_rows, None)
            return
        header = detail.header
        tokens = ""
        if header["ctx_tokens"] or header["gen_tokens"]:
            tokens = (
                f"  ctx {header['ctx_reqs'] or 0} req/{header['ctx_tokens'] or 0} tok, "
                f"gen {header['gen_reqs'] or 0} req/{header['gen_tokens'] or 0} tok"
            )
        self.query_one("#title", Label).update(
            f"[b]Step {header['step_index']}[/b] of {header['trace_steps']} — trace {header['trace_id']} "
            f"(rank {'?' if header['rank'] is None else header['rank']})  phase [b]{header['phase']}[/b]  "
            f"batch [b]{'?' if header['batch_size'] is None else header['batch_size']}[/b]{tokens}"
        )
        wall_ms = (header["wall_ns"] or 0) / 1e6
        busy_pct = 100.0 * (header["busy_ns"] or 0) / header["wall_ns"] if header["wall_ns"] else 0.0
        self.set_status(
            f"wall {wall_ms:.3f} ms  busy {busy_pct:.1f} %  idle {(header['idle_ns'] or 0) / 1e6:.3f} ms  "
            f"graph launches {header['graph_launches'] or 0}"
            + ("  [i](inferred from GPU gaps: no step marker)[/i]" if header["is_inferred"] else "")
            + ("  [i]empty step[/i]" if header["is_empty"] else "")
            + (f"  [b]suspicious:[/b] {detail.flag}" if detail.flag else ""),
            error=bool(detail.flag),
        )
        self.query_one("#timeline", Timeline).show_slices(
            detail.timeline, caption=f"0 … {wall_ms:.3f} ms, {len(detail.timeline)} slices"
        )
        self.show_whole_step(detail)
        self.query_one("#ranks", Label).update(self.ranks_line(detail.ranks))
        self.layer_rows = [] if detail.layers is None else list(detail.layers.iter_rows(named=True))
        labels = [row["label"] for row in self.layer_rows] if len(self.layer_rows) > 1 else []
        self.segment = labels.index(self.segment_label) if self.segment_label in labels else None
        if self.segment is None:
            self.query_one("#layer-strip", LayerStrip).show_segments(self.layer_rows, None)
        else:
            self.show_segment()

    def show_whole_step(self, detail: browse.StepDetail) -> None:
        """Fill the kernel and category tables with the whole step's (drawn already when it was read ahead)."""
        key = (int(detail.header["trace_id"]), int(detail.header["step_index"]))
        drawn = self.drawn.get(key)
        wall_ms = (detail.header["wall_ns"] or 0) / 1e6
        if drawn is None or len(drawn.kernel_lines) != detail.kernels.height:
            self.append_kernels(detail.kernels, first=True)
            self.paint_categories(list(detail.categories.iter_rows(named=True)), wall_ms)
            return
        self.kernel_rows = 0
        self.kernel_start_ns = dict(drawn.kernel_start_ns)
        self.query_one("#kernels", LineTable).set_lines(
            drawn.kernels.header, drawn.kernel_lines, drawn.kernel_keys, drawn=drawn.kernels
        )
        self.kernels_added(detail.kernels.height)
        self.paint_categories(drawn.category_rows, wall_ms, drawn)

    def paint_categories(self, rows: list[dict[str, Any]], wall_ms: float, drawn: DrawnStep | None = None) -> None:
        """Fill the category table and bar (``rows``: browse_step_categories' columns; ``drawn``: their table
        drawn already)."""
        table = self.query_one("#categories", LineTable)
        if drawn is None:
            table.set_lines(*category_lines(rows))
        else:
            table.set_lines(drawn.categories.header, drawn.category_lines, drawn=drawn.categories)
        shares = [
            (r["category"], float(r["pct_of_step"] or 0))
            for r in rows
            if not r["category"].startswith("idle: ") and r["category"] != "gap before step"
        ]  # parts of idle
        self.query_one("#category-bar", CategoryBars).show_bars(
            [("", shares, "")] if wall_ms else [], width=40, empty_message=""
        )

    def current_segment(self) -> dict[str, Any] | None:
        """The layer strip's current segment (a browse_step_layers row), or None for the whole step."""
        return None if self.segment is None else self.layer_rows[self.segment]

    def kernel_total(self) -> int:
        """GPU activities of what the kernel table lists: the current segment, else the step."""
        segment = self.current_segment()
        if segment is not None:
            return int(segment["kernel_count"] or 0)
        return self.detail.kernel_total if self.detail else 0

    def show_segment(self) -> None:
        """Show the current segment in the strip, its kernels (fetched) and its category split; the whole step's
        when there is none."""
        detail = self.detail
        if detail is None:
            return
        self.query_one("#layer-strip", LayerStrip).show_segments(self.layer_rows, self.segment)
        segment = self.current_segment()
        if segment is None:
            self.show_whole_step(detail)
            return
        self.clear_kernels()
        self.paint_categories(segment_categories(segment), float(segment["wall_ms"] or 0))
        self.query_one("#kernel-count", Label).update(segment_summary(segment) + " — loading kernels…")
        header, index = detail.header, segment["segment_index"]
        self.fetch(
            KernelPageLoaded,
            lambda cursor: browse.segment_kernels(cursor, header, segment),
            request=(*self.wanted, index, 0),
        )

    def action_layer(self, delta: int) -> None:
        """Move the layer strip's current segment: pre, the layers, post, then the whole step again."""
        if self.detail is None or self.shown != self.wanted:
            return
        if len(self.layer_rows) < 2:
            reason = self.layer_rows[0]["reason"] if self.layer_rows else "no layer segmentation stored"
            self.notify(f"This step is not segmented: {reason}.", severity="warning")
            return
        positions: list[int | None] = [None, *range(len(self.layer_rows))]
        self.segment = positions[(positions.index(self.segment) + delta) % len(positions)]
        segment = self.current_segment()
        self.segment_label = None if segment is None else segment["label"]
        self.show_segment()

    def ranks_line(self, ranks: pl.DataFrame) -> Text:
        """The same step on the run's ranks (:func:`rank_items`), laid out for the ranks label's width."""
        width = self.query_one("#ranks", Label).content_region.width
        return flow(rank_items(ranks, self.trace_id, self.step_index), width, " · ")

    def clear_kernels(self) -> None:
        """Empty the kernel table."""
        self.query_one("#kernels", LineTable).set_lines(Text(KERNEL_HEADER), [])
        self.kernel_rows = 0
        self.kernel_start_ns = {}

    def append_kernels(self, page: pl.DataFrame, *, first: bool = False) -> None:
        """Add a page of kernels to the table, or with ``first`` put it in place of what the table lists, and
        update the ``showing N of M`` label. The table is refilled in one call: its size changes once, if at all
        (each change lays the screen out again)."""
        lines = kernel_lines(page)
        if first:
            self.kernel_rows = 0
            self.kernel_start_ns = {}
        keys: list[str | None] = []
        for event_id, start_ns in page.select("event_id", "start_ns").iter_rows():
            keys.append(str(event_id))
            self.kernel_start_ns[str(event_id)] = start_ns
        table = self.query_one("#kernels", LineTable)
        if first:
            table.set_lines(Text(KERNEL_HEADER), lines, keys)
        else:
            table.add_lines(lines, keys)
        self.kernels_added(page.height)

    def kernels_added(self, rows: int) -> None:
        """Count ``rows`` more kernels in the table and say how many it shows of how many."""
        self.kernel_rows += rows
        segment = self.current_segment()
        total = self.kernel_total()
        if total == 0:
            text = "no GPU activity in this " + ("step" if segment is None else "segment")
        else:
            text = (
                ("" if segment is None else segment_summary(segment) + " — ")
                + f"kernels: showing {self.kernel_rows} of {total}"
                + ("  (m: load more)" if self.kernel_rows < total else "")
                + "  — Enter: kernel details"
            )
        self.query_one("#kernel-count", Label).update(text)

    def action_move(self, delta: int) -> None:
        """Go to the previous/next step of this trace."""
        header = None if self.detail is None else self.detail.header
        if header is None or (header["trace_id"], header["step_index"]) != (self.trace_id, self.step_index):
            target = self.step_index + delta  # a load is in flight: count key presses from the step asked for
        else:
            target = header["next_step" if delta > 0 else "prev_step"]
        if target is None or target < 0:
            self.notify("No " + ("next" if delta > 0 else "previous") + " step.", severity="warning")
            return
        self.direction = 1 if delta > 0 else -1
        self.step_index = int(target)
        self.load()

    def action_other_rank(self) -> None:
        """Open the same step on the next rank of the run (says so when that rank has no such step)."""
        if self.detail is None:
            return
        ranks = self.detail.ranks
        trace_ids = ranks["trace_id"].to_list()
        if len(trace_ids) < 2:
            self.notify("This run has no other rank.", severity="warning")
            return
        position = trace_ids.index(self.trace_id) if self.trace_id in trace_ids else -1
        target = ranks.row((position + 1) % len(trace_ids), named=True)
        if not target["has_step"]:
            self.notify(
                f"Rank {target['rank']} (trace {target['trace_id']}) has no step {self.step_index}.", severity="warning"
            )
        self.trace_id = int(target["trace_id"])
        self.load()

    def action_more_kernels(self) -> None:
        """Fetch the next page of kernels (of the step on screen, unless another one is on its way)."""
        if self.detail is None or self.shown != self.wanted or self.kernel_rows >= self.kernel_total():
            return
        header, offset, segment = self.detail.header, self.kernel_rows, self.current_segment()
        if segment is None:
            self.fetch(
                KernelPageLoaded,
                lambda cursor: browse.step_kernels(cursor, header, offset=offset),
                request=(*self.wanted, None, offset),
            )
        else:
            self.fetch(
                KernelPageLoaded,
                lambda cursor: browse.segment_kernels(cursor, header, segment, offset=offset),
                request=(*self.wanted, segment["segment_index"], offset),
            )

    @on(KernelPageLoaded)
    def kernel_page_loaded(self, message: KernelPageLoaded) -> None:
        segment = self.current_segment()
        index = None if segment is None else segment["segment_index"]
        if self.shown is not None and message.request == (*self.shown, index, self.kernel_rows):
            self.append_kernels(message.result)

    @on(LineTable.RowSelected, "#kernels")
    def open_kernel(self, event: LineTable.RowSelected) -> None:
        key = event.key
        if key is not None and key in self.kernel_start_ns:
            self.post_message(OpenKernel(self.trace_id, int(key), self.kernel_start_ns[key]))


def walk(key: StepKey, offset: int, header_of: Callable[[StepKey], dict[str, Any] | None]) -> None:
    """Visit ``offset`` steps from ``key`` (forward when positive), through the next/previous step indexes of each
    step's header (``header_of`` reads a step's header; it may raise :class:`KeyError` to stop the walk)."""
    header = header_of(key)
    for _ in range(abs(offset)):
        index = None if header is None else header["next_step" if offset > 0 else "prev_step"]
        if index is None:
            return
        key = (key[0], int(index))
        header = header_of(key)


def plan_walk(
    plan: list[tuple[StepKey, int]], known: dict[StepKey, dict[str, Any] | None]
) -> tuple[set[StepKey], list[StepKey]]:
    """What a read-ahead of ``plan`` walks through, as far as ``known`` goes: the steps it is sure to read (on each
    walk, the first step not in ``known``, where the walk stops) and the known steps it passes, in order."""
    unknown: set[StepKey] = set()
    passed: dict[StepKey, None] = {}

    def header_of(key: StepKey) -> dict[str, Any] | None:
        if key not in known:
            unknown.add(key)
            raise KeyError(key)
        passed[key] = None
        return known[key]

    for key, offset in plan:
        try:
            walk(key, offset, header_of)
        except KeyError:
            pass
    return unknown, list(passed)


def read_steps(
    plan: list[tuple[StepKey, int]],
    known: dict[StepKey, dict[str, Any] | None],
    console: Console,
    paint_for: tuple[PaintFor, PaintFor] = (None, None),
    undrawn: list[tuple[StepKey, browse.StepDetail]] | None = None,
) -> Callable[[duckdb.DuckDBPyConnection], list[tuple[StepKey, browse.StepDetail | None, DrawnStep | None]]]:
    """The read-ahead worker's call: from each plan's step (read first when not known), walk ``offset`` steps
    through the headers' next/previous step indexes and read every step not known yet, with its tables drawn
    (off the UI thread, for ``console``; painted for the kernel and category tables' ``paint_for``); first, the
    tables of the steps read already but not drawn (``undrawn``). A failure (ctrl+g, a query error) ends the
    reading quietly: a step that was not read is fetched, with its error, when the user asks for it."""

    def call(cursor: duckdb.DuckDBPyConnection) -> list[tuple[StepKey, browse.StepDetail | None, DrawnStep | None]]:
        headers = dict(known)
        read: list[tuple[StepKey, browse.StepDetail | None, DrawnStep | None]] = [
            (key, detail, draw_step(console, detail, *paint_for)) for key, detail in undrawn or []
        ]

        def header_of(key: StepKey) -> dict[str, Any] | None:
            if key not in headers:
                detail = browse.step_detail(cursor, *key)
                headers[key] = None if detail is None else detail.header
                read.append((key, detail, None if detail is None else draw_step(console, detail, *paint_for)))
            return headers[key]

        try:
            for key, offset in plan:
                walk(key, offset, header_of)
        except Exception:  # noqa: BLE001 — reading ahead is a guess; the step's own fetch reports its error
            pass
        return read

    return call


def segment_categories(segment: dict[str, Any]) -> list[dict[str, Any]]:
    """A segment's category split as the category table's rows: each category's exclusive busy ms, then overlap
    and idle, each with its percent of the segment's wall (they add up to 100 %)."""
    wall = float(segment["wall_ms"] or 0)
    rows = [{**row, "pct_of_step": None} for row in segment["categories"] or []]
    rows.append({"category": "overlap", "busy_ms": segment["overlap_ms"], "kernel_ms": None, "calls": None})
    rows.append({"category": "idle", "busy_ms": segment["idle_ms"], "kernel_ms": None, "calls": None})
    for row in rows:
        row["pct_of_step"] = round(100.0 * float(row["busy_ms"] or 0) / wall, 1) if wall else None
    return rows
