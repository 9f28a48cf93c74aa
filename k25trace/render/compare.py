"""The terminal view of a :class:`~k25trace.analysis.compare.Comparison` (``k25trace compare``): one table, or
every non-empty table with the verdict and the changes, as a rich table, Markdown, CSV or JSON."""

from __future__ import annotations

import sys
from typing import Any

import polars as pl
from rich.text import Text

from k25trace.analysis.compare import SECTIONS, TITLES, Comparison, display_frame, top_kernels
from k25trace.errors import K25Error
from k25trace.render import output

RIGHT = ("p_value",)  # text columns that hold numbers (right-aligned)
NAMES = ("kernel", "name", "name_a", "name_b")  # kernel names: shortened in the middle in a table
DROP_FIRST = (
    ("calls_a", "calls_b"),
    ("us_per_call_a", "us_per_call_b"),
    ("steps_a", "steps_b"),
    ("ranks_a", "ranks_b"),
    "ci95_ms",
    "match",
)  # left out first when a table is wider than the console
MAX_CHANGES = 15  # changes listed under the verdict in a table (Markdown lists every one)


def write(comparison: Comparison, fmt: str, *, by: str = "all", top: int | None = 30, out: Any = None) -> None:
    """Print a comparison: one section (``by``), or every non-empty section with the verdict (``all``; not CSV)."""
    out = out or sys.stdout
    if by != "all":
        frame = comparison.section(by)
        if by == "kernel" and fmt in ("table", "markdown"):
            frame, _ = top_kernels(frame, top)
        output.write(
            display_frame(frame, by) if fmt in ("table", "markdown") else frame,
            fmt,
            out,
            title=TITLES[by],
            right=RIGHT,
            layout=output.Layout(right=RIGHT, names=NAMES, drop_first=DROP_FIRST),
        )
        return
    if fmt == "csv":
        raise K25Error("CSV holds one table: choose --by category, kernel, step, comm or macro (or --format json)")
    if fmt == "json":
        output.write_json(comparison.as_dict(), out)
        return
    sections: list[tuple[str, pl.DataFrame, str]] = [("sides", comparison.sides, "")]
    for name in SECTIONS:
        frame = comparison.section(name)
        if frame.is_empty():
            continue
        note = ""
        if name == "kernel":
            frame, hidden = top_kernels(frame, top)
            if hidden:
                note = f"{hidden} more kernel rows within noise or negligible (--top 0 shows every row)"
        sections.append((name, display_frame(frame, name), note))
    if fmt == "markdown":
        lines = [f"**Verdict: {comparison.summary()}**", ""]
        lines += [f"- {change}" for change in comparison.changes()]
        for name, frame, note in sections:
            lines += ["", f"### {TITLES[name]}", "", output.markdown(frame, right=RIGHT)]
            if note:
                lines += ["", f"*{note}*"]
        out.write("\n".join(lines) + "\n")
        return
    console = output.console(out)
    console.print(Text("Verdict: " + comparison.summary(), style="bold"))
    changes = comparison.changes()
    for change in changes[:MAX_CHANGES]:
        console.print(Text("  " + change))
    if len(changes) > MAX_CHANGES:
        console.print(
            Text(
                f"  … {len(changes) - MAX_CHANGES} more changes: in the tables below (--format markdown "
                "lists them all)",
                style="dim",
            )
        )
    layout = output.Layout(right=RIGHT, names=NAMES, drop_first=DROP_FIRST)
    for name, frame, note in sections:
        table = output.rich_table(
            _one_name(frame), title=TITLES[name], caption=note or None, width=console.width, layout=layout
        )
        output.print_table(table, target=console)


def _one_name(frame: pl.DataFrame) -> pl.DataFrame:
    """A kernel table's two names as one ``kernel`` column (a terminal is too narrow for both): the name, or
    "A → B" when the sides' names differ (matched by family, or only on one side)."""
    if not {"name_a", "name_b"} <= set(frame.columns):
        return frame
    a, b = pl.col("name_a").fill_null("—"), pl.col("name_b").fill_null("—")
    kernel = pl.when(a == b).then(a).otherwise(a + " → " + b).alias("kernel")
    at = frame.columns.index("name_a")
    frame = frame.with_columns(kernel).drop("name_a", "name_b")
    return frame.select([*frame.columns[:at], "kernel", *frame.columns[at:-1]])
