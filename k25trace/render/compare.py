"""The terminal view of a :class:`~k25trace.analysis.compare.Comparison` (``k25trace compare``): one table, or
every non-empty table, the verdict and the changes first, as a rich table, Markdown, CSV or JSON."""

from __future__ import annotations

import sys
from typing import Any

import polars as pl
from rich.console import Console
from rich.text import Text

from k25trace.analysis.compare import (
    CHANGED,
    SECTIONS,
    STANDS_OUT,
    TITLES,
    Comparison,
    display_frame,
    top_kernels,
)
from k25trace.errors import K25Error
from k25trace.render import output
from k25trace.render.views import MAX_ROWS

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
LAYOUT = output.Layout(right=RIGHT, names=NAMES, drop_first=DROP_FIRST)
MAX_CHANGES = 15  # changes listed under the verdict in a table (Markdown lists every one)


def write(
    comparison: Comparison,
    fmt: str,
    *,
    by: str = "all",
    top: int | None = 30,
    out: Any = None,
    all_rows: bool = False,
) -> None:
    """Print a comparison: one section (``by``), or every non-empty section (``all``; not CSV); a table or Markdown
    opens with the verdict. A table caps the layer rows at :data:`~k25trace.render.views.MAX_ROWS` unless
    ``all_rows``."""
    out = out or sys.stdout
    if fmt == "csv" and by == "all":
        raise K25Error(
            "CSV holds one table: choose --by " + ", ".join(SECTIONS[:-1]) + f" or {SECTIONS[-1]} (or --format json)"
        )
    if fmt in ("csv", "json") and by != "all":
        output.write(comparison.section(by), fmt, out)
        return
    if fmt == "json":
        output.write_json(comparison.as_dict(), out)
        return
    names = list(SECTIONS) if by == "all" else [by]
    sections = [("sides", comparison.sides, "")] if by == "all" else []
    for name in names:
        frame, note = _shown(comparison, name, fmt, top, all_rows)
        if not frame.is_empty() or by != "all":
            sections.append((name, display_frame(frame, name), note))
    if fmt == "markdown":
        _markdown(comparison, sections, out, None if by == "all" else by)
        return
    console = output.console(out)
    _verdict(comparison, console, None if by == "all" else by)
    for name, frame, note in sections:
        if frame.is_empty():
            console.print(Text(TITLES[name], style="italic"))
            console.print(Text("Nothing to compare: " + "; ".join(comparison.notes_on(name) or ["no rows"])))
            continue
        table = output.rich_table(
            _one_name(frame), title=TITLES[name], caption=note or None, width=console.width, layout=LAYOUT
        )
        output.print_table(table, target=console)


def _shown(comparison: Comparison, name: str, fmt: str, top: int | None, all_rows: bool) -> tuple[pl.DataFrame, str]:
    """A section's rows as a table or Markdown shows them, and the caption that says what was left out."""
    frame = comparison.section(name)
    if name == "kernel":
        frame, hidden = top_kernels(frame, top)
        return (
            frame,
            f"{hidden} more kernel rows within noise or negligible (--top 0 shows every row)" if hidden else "",
        )
    if name == "layer" and fmt == "table" and not all_rows and frame.height > MAX_ROWS:
        kept = cap_layers(frame, MAX_ROWS)
        return (
            kept,
            f"{frame.height - kept.height} of {frame.height} layer rows left out, the least changed (--all shows all)",
        )
    return frame, ""


def cap_layers(frame: pl.DataFrame, rows: int) -> pl.DataFrame:
    """At most ``rows`` layer rows, in their order: those that stand out, then the changed ones, then the others,
    each by |delta| (the rows with the most to say)."""
    ranked = frame.with_row_index("_row").with_columns(
        (pl.col("flag") == STANDS_OUT).fill_null(False).alias("_out"),
        pl.col("verdict").is_in(CHANGED).alias("_changed"),
        pl.col("delta_ms").abs().fill_null(0).alias("_size"),
    )
    kept = ranked.sort(["_out", "_changed", "_size", "_row"], descending=[True, True, True, False]).head(rows)
    return kept.sort("_row").drop("_row", "_out", "_changed", "_size")


def _verdict(comparison: Comparison, console: Console, section: str | None) -> None:
    """The verdict and the first changes, of one section when given (a table opens with them)."""
    console.print(Text("Verdict: " + comparison.summary(), style="bold"))
    changes = comparison.changes(section)
    if section is not None and not comparison.section(section).is_empty():
        console.print(Text(_tally(comparison.section(section), section, len(changes))))
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


def _tally(frame: pl.DataFrame, section: str, listed: int) -> str:
    """How one table's rows came out: ``--by layer: 54 rows; 6 changed (6 faster), 1 stands out``."""
    if "verdict" not in frame.columns:
        return f"--by {section}: {frame.height} rows, no test"
    counts = frame.group_by("verdict").len().sort(["len", "verdict"], descending=[True, False])
    changed = {r["verdict"]: r["len"] for r in counts.iter_rows(named=True) if r["verdict"] in CHANGED}
    text = f"--by {section}: {frame.height} rows; {sum(changed.values())} changed"
    if changed:
        text += " (" + ", ".join(f"{n} {v}" for v, n in changed.items()) + ")"
    if section == "layer" and "flag" in frame.columns:
        out = frame.filter(pl.col("flag") == STANDS_OUT).height
        text += f"; {out or 'no'} layer{'s' if out != 1 else ''} {'stand' if out != 1 else 'stands'} out"
    return text + (":" if listed else "")


def _markdown(
    comparison: Comparison, sections: list[tuple[str, pl.DataFrame, str]], out: Any, single: str | None
) -> None:
    """The verdict, every change (of the ``single`` section shown), then each section as a Markdown table."""
    lines = [f"**Verdict: {comparison.summary()}**", ""]
    if single is not None and not comparison.section(single).is_empty():
        lines += [_tally(comparison.section(single), single, 0), ""]
    lines += [f"- {change}" for change in comparison.changes(single)]
    for name, frame, note in sections:
        lines += ["", f"### {TITLES[name]}", ""]
        if frame.is_empty():
            lines.append("Nothing to compare: " + "; ".join(comparison.notes_on(name) or ["no rows"]))
            continue
        lines.append(output.markdown(frame, right=RIGHT))
        if note:
            lines += ["", f"*{note}*"]
    out.write("\n".join(lines) + "\n")


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
