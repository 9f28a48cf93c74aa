"""Write DataFrames to stdout as a table, CSV, JSON or Markdown (data only: diagnostics go to stderr)."""

from __future__ import annotations

import sys
from typing import IO

import orjson
import polars as pl
from rich.console import Console
from rich.table import Table

FORMATS = ("table", "csv", "json", "markdown")


def default_format() -> str:
    return "table" if sys.stdout.isatty() else "csv"


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    return str(value)


def rich_table(frame: pl.DataFrame, title: str | None = None, caption: str | None = None) -> Table:
    table = Table(title=title, caption=caption, show_lines=False, header_style="bold", title_justify="left")
    for name, dtype in zip(frame.columns, frame.dtypes):
        table.add_column(name, justify="right" if dtype.is_numeric() else "left", overflow="fold")
    for row in frame.iter_rows():
        table.add_row(*[_cell(v) for v in row])
    return table


def write(frame: pl.DataFrame, fmt: str, out: IO[str] | None = None, *, title: str | None = None) -> None:
    out = out or sys.stdout
    if fmt == "csv":
        out.write(frame.write_csv())
    elif fmt == "json":
        out.write(orjson.dumps(frame.to_dicts(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n")
    elif fmt == "markdown":
        out.write(markdown(frame) + "\n")
    else:
        console = Console(file=out, width=None if out.isatty() else 200)
        console.print(rich_table(frame, title=title))


def markdown(frame: pl.DataFrame) -> str:
    lines = ["| " + " | ".join(frame.columns) + " |"]
    lines.append("|" + "|".join("---:" if d.is_numeric() else "---" for d in frame.dtypes) + "|")
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(_cell(v).replace("|", "\\|") for v in row) + " |")
    return "\n".join(lines)
