"""How each ``report --by`` view reads on a terminal: its default columns (a set that fits 120 columns), their
titles, which text columns hold numbers or kernel names, and how many rows a table shows.

CSV, JSON and Markdown are written as the frames are (every column, run ids, full names); only ``--format table``
is shaped here. A table names runs by their labels (:func:`k25trace.analysis.report.run_labels`; a single run is
named in the title), leaves out the columns that do not fit the console (``--wide`` prints them all) and caps its
rows at :data:`MAX_ROWS` (``--all`` prints every row), saying in its caption what was left out.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from typing import IO

import polars as pl
from rich.text import Text

from k25trace.render import output

MAX_ROWS = 40
"""The rows a table shows unless ``--all`` (a view with ``--top`` is capped by it instead)."""


@dataclass(frozen=True)
class View:
    """One view's table: a title, the default columns (in order; the others only with ``--wide``), header titles
    beyond the automatic ones (:func:`title_of`), kernel-name columns, text columns that may wrap, text columns
    holding numbers, the columns left out first when the console is narrow, whether rows are capped, and text
    columns shown by their first sentence (all of it with ``--wide``), what shows the rows left out, and the widest
    some text columns are drawn."""

    title: str
    columns: tuple[str, ...] = ()
    titles: dict[str, str] = field(default_factory=dict)
    names: tuple[str, ...] = ()
    wrap: tuple[str, ...] = ()
    right: tuple[str, ...] = ()
    drop_first: tuple[str, ...] = ()
    capped: bool = True
    sentence: tuple[str, ...] = ()
    more: str = "--all"
    caps: dict[str, int] = field(default_factory=dict)


_RUN = ("run",)

VIEWS: dict[str, View] = {
    "category": View("All steps by category", capped=False),
    "step": View(
        "Steps (one row per rank-step)",
        (
            "trace_id",
            "rank",
            "step_index",
            "phase",
            "batch_size",
            "ctx_tokens",
            "gen_tokens",
            "graph_launches",
            "kernel_count",
            "wall_ms",
            "busy_ms",
            "idle_ms",
            "busy_pct",
            "allreduce_pct",
            "top_categories",
        ),
        titles={
            "trace_id": "trace",
            "step_index": "step",
            "batch_size": "batch",
            "ctx_tokens": "ctx tok",
            "gen_tokens": "gen tok",
            "graph_launches": "graphs",
            "kernel_count": "kernels",
            "top_categories": "top categories",
        },
        drop_first=("ctx_tokens", "gen_tokens", "phase"),
    ),
    "rank": View(
        "Per rank and category",
        (
            *_RUN,
            "rank",
            "category",
            "steps",
            "step_ms",
            "ms_per_step",
            "pct_of_step",
            "kernel_ms_per_step",
            "calls_per_step",
        ),
    ),
    "kernel": View(
        "Top kernels",
        ("category", "short_name", "calls_per_step", "ms_per_step", "pct_of_step", "mean_us", "min_us", "max_us"),
        titles={"short_name": "kernel"},
        names=("short_name",),
        capped=False,
    ),
    "idle": View(
        "Why the GPU is idle (ms per step)",
        (
            *_RUN,
            "batch_size",
            "steps",
            "wall_ms",
            "busy_ms",
            "idle_ms",
            "idle_pct",
            "host_ms",
            "sync_ms",
            "launch_overhead_ms",
            "device_ms",
            "unknown_ms",
            "between_ms",
            "between_pct_of_span",
        ),
        titles={
            "launch_overhead_ms": "launch ms",
            "between_ms": "between steps ms",
            "between_pct_of_span": "between % of span",
        },
    ),
    "timeline": View(
        "Timeline (one row per rank-step, ms)",
        (
            "trace_id",
            "rank",
            "step_index",
            "batch_size",
            "cpu_ms",
            "wall_ms",
            "busy_ms",
            "idle_ms",
            "host_ms",
            "sync_ms",
            "launch_ms",
            "device_ms",
            "gaps",
            "launch_p50_us",
            "gap_before_ms",
            "flag",
        ),
        titles={
            "trace_id": "trace",
            "step_index": "step",
            "batch_size": "batch",
            "launch_p50_us": "launch p50 µs",
            "gap_before_ms": "gap before ms",
        },
        wrap=("flag",),
    ),
    "comm": View(
        "Collectives across ranks (ms per step)",
        (
            *_RUN,
            "level",
            "batch_size",
            "category",
            "calls_per_step",
            "ms_per_step",
            "transfer_ms_per_step",
            "wait_ms_per_step",
            "wait_pct",
            "skew_p50_us",
            "straggler_rank",
            "straggler_wait_pct",
            "why_late",
        ),
        titles={
            "transfer_ms_per_step": "transfer",
            "wait_ms_per_step": "wait",
            "straggler_rank": "straggler",
            "straggler_wait_pct": "straggler wait %",
            "skew_p50_us": "skew p50 µs",
        },
        wrap=("why_late",),
        drop_first=("level", "skew_p50_us", "calls_per_step", "straggler_wait_pct"),
    ),
    "comm-site": View(
        "Collectives per call site",
        (
            *_RUN,
            "batch_size",
            "category",
            "site",
            "steps",
            "wait_kind",
            "transfer_us",
            "wait_us",
            "max_wait_us",
            "wait_share_pct",
            "late_rank",
            "late_rank_last_pct",
            "why_late",
        ),
        titles={"wait_kind": "wait kind", "late_rank_last_pct": "late rank last %"},
        wrap=("why_late",),
    ),
    "comm-bw": View(
        "Collective bus bandwidth per message size",
        (
            *_RUN,
            "batch_size",
            "category",
            "collective",
            "size_bytes",
            "calls",
            "transfer_p50_us",
            "transfer_p90_us",
            "busbw_gbps",
            "bench_kernel_us",
            "bench_busbw_gbps",
            "transfer_vs_bench",
        ),
        titles={
            "busbw_gbps": "bus GB/s",
            "bench_busbw_gbps": "bench bus GB/s",
            "transfer_vs_bench": "transfer vs bench",
        },
    ),
    "rank-comm": View(
        "Collectives per rank: transfer vs wait (waiting for the slowest rank), ms per step",
        (
            *_RUN,
            "rank",
            "category",
            "calls_per_step",
            "ms_per_step",
            "transfer_ms_per_step",
            "wait_ms_per_step",
            "caused_wait_ms_per_step",
            "caused_wait_pct",
            "late_pct",
            "late_ms_per_step",
            "late_host_ms_per_step",
            "late_sync_ms_per_step",
            "late_gpu_work_ms_per_step",
            "late_other_ms_per_step",
        ),
        titles={
            "transfer_ms_per_step": "transfer",
            "wait_ms_per_step": "wait",
            "caused_wait_ms_per_step": "caused wait",
            "late_ms_per_step": "late",
            "late_host_ms_per_step": "late host",
            "late_sync_ms_per_step": "late sync",
            "late_gpu_work_ms_per_step": "late GPU work",
            "late_other_ms_per_step": "late other",
        },
    ),
    "floor": View(
        "AllReduce per step against the bench floor",
        (
            *_RUN,
            "level",
            "batch_size",
            "steps",
            "ranks",
            "allreduce_per_step",
            "msg_bytes",
            "observed_ms",
            "wait_ms",
            "transfer_ms",
            "floor_ms",
            "floor_basis",
            "efficiency",
            "transfer_efficiency",
        ),
        titles={
            "allreduce_per_step": "all-reduces/step",
            "msg_bytes": "message bytes",
            "floor_basis": "floor basis",
            "transfer_efficiency": "transfer efficiency",
        },
        drop_first=("level",),
    ),
    "layer": View(
        "Per decoder layer (median ms per step)",
        (
            *_RUN,
            "batch_size",
            "segment",
            "kind",
            "steps",
            "wall_ms",
            "busy_ms",
            "kernels",
            "collectives",
            "vs_median_layer",
            "flag",
            "outlier_steps",
            "top_categories",
        ),
        titles={
            "vs_median_layer": "vs median layer",
            "outlier_steps": "outlier steps",
            "top_categories": "top categories (ms)",
        },
        wrap=("top_categories",),
    ),
    "layer-late": View(
        "Per layer and rank: lateness at the layer's collectives",
        (
            *_RUN,
            "batch_size",
            "segment",
            "kind",
            "late_rank",
            "late_collectives",
            "lateness_ms",
            "lateness_p50_us",
            "cause",
            "host_ms",
            "launch_ms",
            "sync_ms",
            "device_ms",
            "gpu_ms",
            "other_ms",
        ),
        titles={"late_rank": "late rank", "late_collectives": "late collectives", "lateness_p50_us": "lateness p50 µs"},
    ),
    "sql": View("", capped=False),
    "traces": View(
        "",
        (
            "trace_id",
            "file_name",
            "rank",
            "world_size",
            "device_name",
            "gpu_event_count",
            "steps",
            "decode",
            "prefill",
            "mixed",
            "decode_batch_sizes",
        ),
        titles={
            "trace_id": "trace",
            "file_name": "file",
            "world_size": "world",
            "device_name": "device",
            "gpu_event_count": "GPU events",
            "decode_batch_sizes": "decode batch sizes",
        },
        names=("file_name",),
        capped=False,
    ),
    "sql-list": View(
        "Named queries (k25trace sql --query NAME -p name=value)",
        ("name", "params", "summary"),
        wrap=("params",),
        sentence=("summary",),
        capped=False,
        caps={"params": 30},
    ),
    "classify": View(
        "Which rule matched each kernel name",
        ("category", "short_name", "kind", "calls", "total_ms", "rule_id", "rule_source", "rule_name_pattern"),
        titles={"short_name": "kernel", "rule_id": "rule", "rule_source": "source", "rule_name_pattern": "pattern"},
        names=("short_name",),
        more="--format csv lists them all",
    ),
}
"""The terminal view of each ``report --by`` view (``batch``, ``findings``, ``roofline`` and ``sol`` have tables
of their own), of ``sql`` results and of ``classify --show``."""

_WORDS = (
    ("_per_step", "/step"),
    ("_per_call", "/call"),
    ("pct_of_", "% of "),
    ("_pct", " %"),
    ("pct_", "% "),
    ("_ms", " ms"),
    ("_us", " µs"),
    ("_gbps", " GB/s"),
    ("_", " "),
)


def title_of(column: str) -> str:
    """A column's header: ``ms_per_step`` → "ms/step", ``wait_pct`` → "wait %", ``host_ms`` → "host ms"."""
    text = column
    for old, new in _WORDS:
        text = text.replace(old, new)
    return re.sub(r"\s+", " ", text).strip()


def _run_column(frame: pl.DataFrame, labels: dict[str, str]) -> tuple[pl.DataFrame, str | None]:
    """The frame with its run ids as labels in a ``run`` column, and the run's label when only one run is shown
    (then the column is left out and the title names the run)."""
    if "run_id" in frame.columns:
        ids = frame["run_id"].cast(pl.String)
        if "run" not in frame.columns:
            frame = frame.with_columns(ids.replace_strict(labels, default=ids, return_dtype=pl.String).alias("run"))
        frame = frame.drop("run_id")
    if "run" not in frame.columns or frame.is_empty():
        return frame, None
    runs = frame["run"].unique().to_list()
    if len(runs) == 1:
        return frame.drop("run"), str(runs[0])
    return frame, None


def table_parts(
    frame: pl.DataFrame,
    view: View,
    *,
    labels: dict[str, str] | None = None,
    wide: bool = False,
    all_rows: bool = False,
    title: str | None = None,
) -> tuple[pl.DataFrame, str, list[str], int]:
    """The frame as its table shows it (run labels, the default columns unless ``wide``, at most
    :data:`MAX_ROWS` rows unless ``all_rows``), its title, the caption's notes and how many columns it leaves out."""
    frame, run = _run_column(frame, labels or {})
    notes: list[str] = []
    heading = title if title is not None else view.title
    if run is not None:
        heading = f"{run}: {heading}" if heading else run
    if not wide:
        frame = frame.with_columns(
            pl.col(c).str.replace(r"^(.*?\.)\s.*$", "$1") for c in view.sentence if c in frame.columns
        )
    left = 0
    if not wide and view.columns:
        shown = [c for c in view.columns if c in frame.columns]
        left = len(frame.columns) - len(shown)
        frame = frame.select(shown)
    rows = frame.height
    if view.capped and not all_rows and rows > MAX_ROWS:
        frame = frame.head(MAX_ROWS)
        notes.append(f"{rows - MAX_ROWS} more of {rows} rows: {view.more}")
    if heading:
        heading = f"{heading} ({rows} row{'s' if rows != 1 else ''})"
    return frame, heading, notes, left


def layout_of(view: View, columns: list[str], right: tuple[str, ...] = ()) -> output.Layout:
    """The :class:`~k25trace.render.output.Layout` of a view's table of ``columns``."""
    return output.Layout(
        titles={c: view.titles.get(c, title_of(c)) for c in columns},
        right=(*view.right, *right),
        names=view.names,
        wrap=view.wrap,
        drop_first=view.drop_first,
        caps=view.caps,
    )


def write_view(
    frame: pl.DataFrame,
    by: str,
    fmt: str,
    out: IO[str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    wide: bool = False,
    all_rows: bool = False,
    title: str | None = None,
    right: tuple[str, ...] = (),
    more: str | None = None,
) -> None:
    """Write one view's frame: as it is in CSV, JSON and Markdown; shaped by :data:`VIEWS` in a table (``more``:
    what shows the rows left out, when not the view's own)."""
    out = out or sys.stdout
    if fmt != "table":
        output.write(frame, fmt, out, right=right)
        return
    view = VIEWS.get(by, View(""))
    if more is not None:
        view = replace(view, more=more)
    shown, heading, notes, left = table_parts(frame, view, labels=labels, wide=wide, all_rows=all_rows, title=title)
    width = output.console_width(out)
    layout = layout_of(view, shown.columns, right)
    table, hidden = output.fit_table(shown, None if wide else width, heading or None, None, layout)
    if hidden or left:
        fitted = f" ({', '.join(hidden)} to fit {width} columns)" if hidden else ""
        notes.insert(0, f"{len(hidden) + left} more columns{fitted}: --wide")
    if notes:
        table.caption = Text("; ".join(notes))
    output.print_table(table, out, width, wide=wide)


__all__ = ["MAX_ROWS", "VIEWS", "View", "layout_of", "table_parts", "title_of", "write_view"]
