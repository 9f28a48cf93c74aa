"""Kernel: one GPU activity in full — name, launch, launch config, collective args — and how it varies."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Footer, Header, Label, Sparkline, Static

from k25trace import browse
from k25trace.tui.messages import Fetched
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.screens.overview import fill_table

PER_STEP_CAP = 500


def describe_kernel(row: dict[str, Any]) -> Text:
    """The kernel's properties, one ``key: value`` per line, missing ones left out (plain Text: names have [ ])."""

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
        ("launched by", None if row["launch_name"] is None else f"{row['launch_name']} ({row['launch_api']}), "
                                                                f"{row['launch_to_start_us']} µs before start"),
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
        ("msg in / out nelems", None if row["msg_in_nelems"] is None else f"{row['msg_in_nelems']} / {row['msg_out_nelems']}"),
        ("dtype", row["msg_dtype"]),
        ("group size", row["group_size"]),
        ("process group", None if row["pg_name"] is None else f"{row['pg_name']} ranks {row['pg_ranks']}"),
    ]
    text = Text()
    text.append(str(row["short_name"]) + "\n", style="bold")
    text.append(str(row["name"]) + "\n\n", style="dim")
    for key, value in fields:
        if value is not None:
            text.append(f"{key:>20}: ", style="bold")
            text.append(f"{value}\n")
    return text


class KernelScreen(BrowseScreen):
    """Details of one GPU activity."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, trace_id: int, event_id: int, start_ns: int) -> None:
        super().__init__()
        self.trace_id, self.event_id, self.start_ns = trace_id, event_id, start_ns

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
        yield Footer()

    def on_mount(self) -> None:
        trace_id, event_id, start_ns = self.trace_id, self.event_id, self.start_ns
        self.fetch("kernel", lambda cursor: browse.kernel_detail(cursor, trace_id, event_id, start_ns))

    @on(Fetched)
    def show_kernel(self, message: Fetched) -> None:
        if message.request == "ranks":
            fill_table(self.query_one("#per-rank", DataTable), message.result)
            return
        if message.request != "kernel":
            return
        detail: browse.KernelDetail | None = message.result
        if detail is None:
            self.set_status(f"No GPU activity {self.event_id} in trace {self.trace_id}.", error=True)
            return
        self.set_status(f"trace {self.trace_id}, event {self.event_id}")
        self.query_one("#kernel-info", Static).update(describe_kernel(detail.row))
        means = detail.per_step["mean_us"].to_list()
        self.query_one("#step-sparkline", Sparkline).data = means
        if means:
            self.query_one("#step-caption", Label).update(
                f"{len(means)} step(s): min {min(detail.per_step['min_us'])} µs, "
                f"max {max(detail.per_step['max_us'])} µs")
        else:
            self.query_one("#step-caption", Label).update("not in any step")
        trace_id, name_id = self.trace_id, detail.row["name_id"]
        self.fetch_side("ranks", lambda cursor: browse.kernel_ranks(cursor, trace_id, name_id))
        fill_table(self.query_one("#per-step", DataTable), detail.per_step.head(PER_STEP_CAP))
        self.browse_app.mark_painted("kernel", message.elapsed_ms)
