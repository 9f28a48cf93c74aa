"""Kernel: one GPU activity in full — name, launch, launch config, collective args — and how it varies."""

from __future__ import annotations

import tempfile
from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.markup import escape
from textual.screen import Screen
from textual.widgets import DataTable, Header, Label, Sparkline, Static

from k25trace.analysis import browse
from k25trace.tui.cells import printable
from k25trace.tui.messages import KernelLoaded, KernelRanksLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, fill_table

PER_STEP_CAP = 500
NAME_CAP = 4096
"""Characters of a kernel name drawn on the kernel screen; the rest is a key away (a 20 MB name drawn in full
froze the screen for half a minute: Textual wraps and measures all of it)."""
PAGE_CHARS = 8192
"""Characters per page of the full-name view."""


def capped(text: str, cap: int = NAME_CAP) -> tuple[str, int]:
    """The first ``cap`` characters of ``text`` (printable) and how many were left out."""
    return printable(text[:cap]), max(0, len(text) - cap)


def describe_kernel(row: dict[str, Any], *, cap: int = NAME_CAP) -> Text:
    """The kernel's properties, one ``key: value`` per line, missing ones left out (plain Text: names have [ ]);
    the names cut at ``cap`` characters."""

    def dims(prefix: str) -> str | None:
        values = [row[f"{prefix}_{axis}"] for axis in "xyz"]
        return None if all(v is None for v in values) else " × ".join("?" if v is None else str(v) for v in values)

    launch = "direct"
    if row["launch_name"] is None:
        launch = "unknown (no launch with this correlation)"
    elif row["is_graph"]:
        launch = "CUDA graph"
    fields: list[tuple[str, Any]] = [
        ("category", row["category"]),
        ("kind", row["kind"]),
        ("trace / rank", f"{row['trace_id']} / {'?' if row['rank'] is None else row['rank']}"),
        ("step", row["step_index"]),
        ("device / stream", f"{row['device']} / {row['stream']}"),
        ("duration", f"{row['dur_us']} µs"),
        ("launch", launch),
        (
            "launched by",
            None
            if row["launch_name"] is None
            else f"{row['launch_name']} ({row['launch_api']}), {row['launch_to_start_us']} µs before start",
        ),
        ("correlation", row["correlation"]),
        ("grid", dims("grid")),
        ("block", dims("block")),
        ("registers / thread", row["registers"]),
        ("shared memory", None if row["shared_mem_bytes"] is None else f"{row['shared_mem_bytes']} B"),
        ("blocks / SM", row["blocks_per_sm"]),
        ("warps / SM", row["warps_per_sm"]),
        ("occupancy", None if row["occupancy_pct"] is None else f"{row['occupancy_pct']} %"),
        ("bytes", row["bytes"]),
        ("collective", row["collective_name"]),
        (
            "msg in / out nelems",
            None if row["msg_in_nelems"] is None else f"{row['msg_in_nelems']} / {row['msg_out_nelems']}",
        ),
        ("dtype", row["msg_dtype"]),
        ("group size", row["group_size"]),
        ("process group", None if row["pg_name"] is None else f"{row['pg_name']} ranks {row['pg_ranks']}"),
    ]
    text = Text()
    short, short_more = capped(str(row["short_name"]), cap)
    name, more = capped(str(row["name"]), cap)
    text.append(short + (f"… ({short_more:,} more characters)" if short_more else "") + "\n", style="bold")
    text.append(name + ("" if more else "\n\n"), style="dim")
    if more:
        text.append(f"… {more:,} more characters", style="bold")
        text.append(" (f: read the full name page by page, w: write it to a file)\n\n", style="italic")
    for key, value in fields:
        if value is not None:
            text.append(f"{key:>20}: ", style="bold")
            text.append(f"{value}\n")
    return text


class KernelScreen(BrowseScreen):
    """Details of one GPU activity."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("f", "full_name", "Full name, page by page", show=False),
        Binding("w", "write_name", "Write the full name to a file", show=False),
    ]

    def __init__(self, trace_id: int, event_id: int, start_ns: int) -> None:
        super().__init__()
        self.trace_id, self.event_id, self.start_ns = trace_id, event_id, start_ns
        self.full_name: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="kernel-screen"):
            yield Label("loading…", id="status")
            yield Static("", id="kernel-info")
            yield Label("[b]Duration per step[/b] on this rank (mean µs, step order)", classes="section")
            yield Sparkline([], id="step-sparkline", summary_function=max)
            yield Label("", id="step-caption")
            yield Label("[b]Across ranks[/b] of the run", classes="section")
            yield DataTable(id="per-rank", cursor_type="row")
            yield Label("[b]Per step[/b] on this rank", classes="section")
            yield DataTable(id="per-step", cursor_type="row", zebra_stripes=True)
        yield SteadyFooter()

    def on_mount(self) -> None:
        trace_id, event_id, start_ns = self.trace_id, self.event_id, self.start_ns
        self.fetch(KernelLoaded, lambda cursor: browse.kernel_detail(cursor, trace_id, event_id, start_ns))

    @on(KernelRanksLoaded)
    def show_ranks(self, message: KernelRanksLoaded) -> None:
        fill_table(self.query_one("#per-rank", DataTable), message.result)

    @on(KernelLoaded)
    def show_kernel(self, message: KernelLoaded) -> None:
        detail = message.result
        if detail is None:
            self.set_status(f"No GPU activity {self.event_id} in trace {self.trace_id}.", error=True)
            return
        self.set_status(f"trace {self.trace_id}, event {self.event_id}")
        self.full_name = str(detail.row["name"])
        self.query_one("#kernel-info", Static).update(describe_kernel(detail.row))
        means = detail.per_step["mean_us"].to_list()
        self.query_one("#step-sparkline", Sparkline).data = means
        if means:
            self.query_one("#step-caption", Label).update(
                f"{len(means)} step(s): min {min(detail.per_step['min_us'])} µs, "
                f"max {max(detail.per_step['max_us'])} µs"
            )
        else:
            self.query_one("#step-caption", Label).update("not in any step")
        trace_id, name_id = self.trace_id, detail.row["name_id"]
        self.fetch_side(KernelRanksLoaded, lambda cursor: browse.kernel_ranks(cursor, trace_id, name_id))
        fill_table(self.query_one("#per-step", DataTable), detail.per_step.head(PER_STEP_CAP))

    def action_full_name(self) -> None:
        """The whole name in a view of its own, one page of PAGE_CHARS at a time."""
        if self.full_name is None:
            self.notify("the kernel is still loading")
            return
        self.app.push_screen(
            LongTextScreen(
                f"trace {self.trace_id}, event {self.event_id}: full kernel name",
                self.full_name,
                file_label=f"kernel-{self.trace_id}-{self.event_id}",
            )
        )

    def action_write_name(self) -> None:
        if self.full_name is None:
            self.notify("the kernel is still loading")
            return
        notify_written(self, self.full_name, f"kernel-{self.trace_id}-{self.event_id}")


def write_text_file(text: str, label: str) -> str:
    """Write ``text`` to a new file in the temporary directory; returns its path."""
    with tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", prefix=f"k25trace-{label}-", suffix=".txt", delete=False
    ) as handle:
        handle.write(text)
        return handle.name


def notify_written(screen: Screen[Any], text: str, label: str) -> None:
    try:
        path = write_text_file(text, label)
    except OSError as exc:
        screen.notify(escape(f"cannot write the name: {exc.strerror or exc}"), severity="error")
        return
    screen.notify(escape(f"{len(text):,} characters written to {path}"), title="full name", timeout=15)


class LongTextScreen(Screen[None]):
    """A long text (a kernel name of megabytes) one page at a time: drawing a page costs the same whatever the
    length of the whole."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "page(1)", "Next page"),
        Binding("p", "page(-1)", "Previous page"),
        Binding("w", "write", "Write to a file"),
    ]

    def __init__(self, title: str, text: str, *, file_label: str = "text", page_chars: int = PAGE_CHARS) -> None:
        super().__init__()
        self.title_text, self.text, self.file_label, self.page_chars = title, text, file_label, page_chars
        self.pages = max(1, -(-len(text) // page_chars))
        self.page = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label(Text(self.title_text), id="long-title")
        yield Label("", id="status")
        with VerticalScroll(id="long-scroll"):
            yield Static("", id="long-text")
        yield SteadyFooter()

    def on_mount(self) -> None:
        self.show_page()

    def show_page(self) -> None:
        start = self.page * self.page_chars
        chunk = self.text[start : start + self.page_chars]
        self.query_one("#long-text", Static).update(Text(printable(chunk)))
        self.query_one("#status", Label).update(
            f"page {self.page + 1:,} of {self.pages:,}: characters {start + 1:,}–{start + len(chunk):,} "
            f"of {len(self.text):,} (n/p: next/previous page, w: write all to a file)"
        )
        self.query_one("#long-scroll", VerticalScroll).scroll_home(animate=False)

    def action_page(self, delta: int) -> None:
        page = min(max(self.page + delta, 0), self.pages - 1)
        if page != self.page:
            self.page = page
            self.show_page()

    def action_write(self) -> None:
        notify_written(self, self.text, self.file_label)
