"""The terminal view of a :class:`~k25trace.analysis.compare.Comparison` (``k25trace compare``): one table, or
every non-empty table with the verdict and the changes, as a rich table, Markdown, CSV or JSON."""

from __future__ import annotations

import sys
from typing import Any

import polars as pl
from rich.console import Console
from rich.text import Text

from k25trace.analysis.compare import SECTIONS, TITLES, Comparison, display_frame, top_kernels
from k25trace.errors import K25Error
from k25trace.render import output

RIGHT = ("p_value",)  # text columns that hold numbers (right-aligned)


def write(comparison: Comparison, fmt: str, *, by: str = "all", top: int | None = 30, out: Any = None) -> None:
    """Print a comparison: one section (``by``), or every non-empty section with the verdict (``all``; not CSV)."""
    out = out or sys.stdout
    if by != "all":
        frame = comparison.section(by)
        if by == "kernel" and fmt in ("table", "markdown"):
            frame, _ = top_kernels(frame, top)
        output.write(display_frame(frame, by) if fmt in ("table", "markdown") else frame, fmt, out, title=TITLES[by],
                     right=RIGHT)
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
    console = Console(file=out, width=None if out.isatty() else 200)
    for name, frame, note in sections:
        console.print(output.rich_table(frame, title=TITLES[name], caption=note or None, right=RIGHT))
    console.print(Text("Verdict: " + comparison.summary(), style="bold"))
    for change in comparison.changes():
        console.print(Text("  " + change))
