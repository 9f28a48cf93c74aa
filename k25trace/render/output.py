"""Write query results to stdout as a table, CSV, JSON or Markdown (data only: diagnostics go to stderr).

Two entry points:

- :func:`write` takes a polars DataFrame (the reports). Any value polars holds prints in every format: decimals
  exactly, NaN/inf, NULL, nested lists and structs (as text in CSV), binary, strings that look like Rich markup.
- :func:`write_result` takes the rows of ad-hoc SQL (``k25trace sql``, the TUI SQL panel) as
  :func:`k25trace.db.run_sql` returns them: there DuckDB itself has turned every value polars cannot hold or
  Arrow carries wrongly into text (or, for JSON, every value into JSON), so that *every* DuckDB type prints.
"""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

import orjson
import polars as pl
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from k25trace.db import SqlResult

_JSON_INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson writes natively


DEFAULT_WIDTH = 120
"""The width tables are drawn to when stdout is no terminal and ``COLUMNS`` is not set."""


def default_format() -> str:
    return "table" if sys.stdout.isatty() else "csv"


def console_width(out: IO[str] | None = None) -> int:
    """The width a table on ``out`` is drawn to: the terminal's, else ``$COLUMNS``, else :data:`DEFAULT_WIDTH`."""
    out = out or sys.stdout
    try:
        if out.isatty():
            return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, OSError, ValueError):  # a stream without a file descriptor (CliRunner, StringIO)
        pass
    columns = os.environ.get("COLUMNS", "").strip()
    return int(columns) if columns.isdigit() and int(columns) > 0 else DEFAULT_WIDTH


def console(out: IO[str] | None = None, width: int | None = None) -> Console:
    """A Rich console on ``out`` (stdout) of :func:`console_width` (or ``width``) columns."""
    out = out or sys.stdout
    return Console(file=out, width=width or console_width(out))


# ------------------------------------------------------------------------------------------ one value as text


def blob_text(value: bytes | bytearray | memoryview) -> str:
    """Bytes as DuckDB writes a BLOB: printable ASCII as is, every other byte as ``\\xHH``."""
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}" for b in bytes(value))


def _text(value: object) -> str:
    """Any Python value as one line of text (no newlines: they would break a table or Markdown row)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(value)
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else str(value)
    if isinstance(value, (list, tuple, dict)):
        return str(_plain(value))
    return str(value)


def _plain(value: object) -> object:
    """Nested values with bytes and decimals made printable (for ``str`` of a list or a struct)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(value)
    if isinstance(value, Decimal):
        return _text(value)
    return value


def _cell(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1e15 else f"{value:.6g}"
    return _text(value)


def _one_line(text: str) -> str:
    return text.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\r")


# ------------------------------------------------------------------------------------------- DataFrame output


TEXT_MIN = 12
"""The fewest columns a text column is squeezed to before columns are left out."""

NAME_MAX = 48
"""The widest a name column (kernel names) is drawn: longer names keep their head and tail (:func:`shorten`)."""


def shorten(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells: its head and its tail around a "…" (a kernel's family and its
    template arguments both tell kernels apart)."""
    if cell_len(text) <= width or width < 2:
        return text
    head = (width - 1) * 3 // 5
    tail = width - 1 - head
    return text[:head] + "…" + (text[-tail:] if tail else "")


@dataclass(frozen=True)
class Layout:
    """How a frame is drawn as a table: header titles, columns holding numbers (kept whole, right-aligned), name
    columns (shortened in the middle), columns that may wrap over lines, and the order columns (or groups of
    columns) are left out in when the table is wider than the console (then the rest from the right), and the
    widest some text columns are drawn (``caps``)."""

    titles: dict[str, str] | None = None
    right: Collection[str] = ()
    names: Collection[str] = ()
    wrap: Collection[str] = ()
    drop_first: tuple[str | tuple[str, ...], ...] = ()
    caps: dict[str, int] | None = None


def _width(text: str) -> int:
    return max((cell_len(line) for line in text.splitlines()), default=0)


def _longest_word(text: str) -> int:
    return max((cell_len(word) for word in text.split()), default=0)


WRAP_MIN = 28
"""The fewest columns a wrapping text column (a sentence) is squeezed to before columns are left out."""

NAME_MIN = 24
"""The fewest columns a name column is squeezed to before columns are left out."""


def _text_widths(wants: list[int], floors: list[int], room: int) -> list[int] | None:
    """Each text column's width: min(want, max(L, floor)) for the widest level L that fits in ``room``; None when
    not even the floors fit."""

    def at(level: int) -> list[int]:
        return [min(w, max(level, f)) for w, f in zip(wants, floors, strict=True)]

    if sum(at(0)) > room:
        return None
    level = 0
    top = max(wants, default=0)
    while level < top and sum(at(level + 1)) <= room:
        level += 1
    return at(level)


def fit_table(
    frame: pl.DataFrame,
    width: int | None,
    title: str | None = None,
    caption: str | None = None,
    layout: Layout = Layout(),
) -> tuple[Table, list[str]]:
    """A Rich table of a frame that fits ``width`` columns (None: as wide as its cells), and the frame columns left
    out to fit. Numbers are never wrapped or cut (no_wrap, right-aligned), text is cut with "…" (or wrapped at
    word boundaries in ``layout.wrap`` columns), names keep head and tail; cells, title and caption are plain
    text (a ``[/x]`` in a kernel name, a file name or a run label is not markup)."""
    titles = layout.titles or {}
    numeric = {n for n, d in zip(frame.columns, frame.dtypes, strict=True) if d.is_numeric() or n in layout.right}
    cells = {n: [_cell(v) for v in frame.get_column(n).to_list()] for n in frame.columns}
    names = list(frame.columns)
    while True:
        wants = {n: max([_width(c) for c in cells[n]] + [_longest_word(titles.get(n, n))]) for n in names}
        for n in layout.names:
            if n in wants:
                wants[n] = min(wants[n], max(NAME_MAX, _longest_word(titles.get(n, n))))
        for n, cap in (layout.caps or {}).items():
            if n in wants and n not in numeric:
                wants[n] = min(wants[n], cap)
        room = None if width is None else width - 3 * len(names) - 1 - sum(wants[n] for n in names if n in numeric)
        texts = [n for n in names if n not in numeric]
        floors = [WRAP_MIN if n in layout.wrap else NAME_MIN if n in layout.names else TEXT_MIN for n in texts]
        fitted = None if room is None else _text_widths([wants[n] for n in texts], floors, room)
        if room is None or (room >= 0 and fitted is not None) or len(names) <= 1:
            break
        groups = [(g,) if isinstance(g, str) else g for g in layout.drop_first]
        first = [[n for n in g if n in names] for g in groups]
        for n in next((g for g in first if g), [names[-1]]):
            names.remove(n)
    widths = dict(wants) if fitted is None else {**wants, **dict(zip(texts, fitted, strict=True))}
    table = Table(
        title=None if title is None else Text(title),
        caption=None if caption is None else Text(caption),
        show_lines=False,
        header_style="bold",
        title_justify="left",
        caption_justify="left",
    )
    for n in names:
        header = "\n".join(textwrap.wrap(titles.get(n, n), widths[n], break_long_words=False)) or titles.get(n, n)
        if n in numeric:
            table.add_column(Text(header), justify="right", no_wrap=True, min_width=widths[n])
        elif n in layout.wrap:
            table.add_column(Text(header), overflow="fold", max_width=widths[n])
        else:
            table.add_column(Text(header), no_wrap=True, overflow="ellipsis", max_width=widths[n])
    for i in range(frame.height):
        table.add_row(*[Text(shorten(cells[n][i], widths[n]) if n in layout.names else cells[n][i]) for n in names])
    return table, [n for n in frame.columns if n not in names]


def rich_table(
    frame: pl.DataFrame,
    title: str | None = None,
    caption: str | None = None,
    *,
    right: Collection[str] = (),
    width: int | None = None,
    layout: Layout | None = None,
) -> Table:
    """A Rich table of a frame (:func:`fit_table`): ``width`` None draws every column at its full width."""
    layout = layout or Layout(right=right)
    if right and not layout.right:
        layout = Layout(
            titles=layout.titles, right=right, names=layout.names, wrap=layout.wrap, drop_first=layout.drop_first
        )
    table, hidden = fit_table(frame, width, title, caption, layout)
    if hidden:
        note = f"{len(hidden)} more column(s) in --format csv: {', '.join(hidden)}"
        table.caption = Text(note if caption is None else f"{caption}; {note}")
    return table


def write(
    frame: pl.DataFrame,
    fmt: str,
    out: IO[str] | None = None,
    *,
    title: str | None = None,
    right: Collection[str] = (),
    caption: str | None = None,
    layout: Layout | None = None,
    wide: bool = False,
) -> None:
    """Write a frame; ``right`` names text columns that hold numbers (right-aligned in tables); a table fits the
    console (:func:`console_width`) unless ``wide``."""
    out = out or sys.stdout
    if fmt == "csv":
        out.write(_csv_ready(frame).write_csv())
    elif fmt == "json":
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in frame.iter_rows(named=True)]
        out.write(_dump_json(rows))
    elif fmt == "markdown":
        out.write(markdown(frame, right=right) + "\n")
    else:
        width = console_width(out)
        table = rich_table(
            frame, title=title, caption=caption, right=right, layout=layout, width=None if wide else width
        )
        print_table(table, out, width, wide=wide)


def print_table(
    table: Table,
    out: IO[str] | None = None,
    width: int | None = None,
    *,
    wide: bool = False,
    target: Console | None = None,
) -> None:
    """Print a table on ``target`` or a console of ``width`` columns (:func:`console_width`), or as wide as the
    table (``wide``); a title or caption wider than the table is printed above or below it at the console's width
    (Rich wraps them to the table's)."""
    if target is None:
        out = out or sys.stdout
        width = width or console_width(out)
        target = console(out, width)
        if wide:
            target = console(out, max(width, target.measure(table, options=target.options.update_width(10**6)).maximum))
    natural = target.measure(table).maximum
    title, caption = table.title, table.caption
    above = title is not None and cell_len(str(title)) > natural
    below = caption is not None and cell_len(str(caption)) > natural
    if above:
        table.title = None
        target.print(Text(str(title), style="italic"))
    if below:
        table.caption = None
    target.print(table)
    if below:
        target.print(Text(str(caption), style="dim"))
    table.title, table.caption = title, caption


def markdown(frame: pl.DataFrame, *, right: Collection[str] = ()) -> str:
    lines = ["| " + " | ".join(_md(name) for name in frame.columns) + " |"]
    lines.append(
        "|"
        + "|".join(
            "---:" if d.is_numeric() or n in right else "---" for n, d in zip(frame.columns, frame.dtypes, strict=True)
        )
        + "|"
    )
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(_md(_cell(v)) for v in row) + " |")
    return "\n".join(lines)


def _md(text: str) -> str:
    return _one_line(text).replace("|", "\\|")


def _csv_ready(frame: pl.DataFrame) -> pl.DataFrame:
    """Columns polars cannot write as CSV (lists, structs, binary, objects, …) as text."""
    simple = (pl.List, pl.Array, pl.Struct, pl.Binary, pl.Object)
    columns = []
    for series in frame.get_columns():
        dtype = series.dtype
        if isinstance(dtype, simple) or dtype.base_type() in simple or not _csv_writable(dtype):
            series = pl.Series(
                series.name, [None if v is None else _text(v) for v in series.to_list()], dtype=pl.String
            )
        columns.append(series)
    return pl.DataFrame(columns)


def _csv_writable(dtype: pl.DataType) -> bool:
    return (
        dtype.is_numeric()
        or dtype.is_temporal()
        or dtype in (pl.String, pl.Boolean, pl.Null, pl.Categorical)
        or isinstance(dtype, (pl.Categorical, pl.Enum))
    )


def _jsonable(value: Any) -> Any:
    """A value orjson writes as valid JSON without losing anything: NaN/±inf as the strings "NaN",
    "Infinity", "-Infinity" (JSON has no such numbers), decimals and integers beyond 64 bits as exact numbers,
    bytes as DuckDB's BLOB text."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if _JSON_INT_RANGE[0] <= value <= _JSON_INT_RANGE[1] else orjson.Fragment(str(value))
    if isinstance(value, Decimal):
        return (
            orjson.Fragment(str(value))
            if value.is_finite()
            else ("NaN" if value.is_nan() else ("Infinity" if value > 0 else "-Infinity"))
        )
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(value)
    if isinstance(value, dict):
        return {
            k if isinstance(k, (str, int, float, bool)) or k is None else _text(k): _jsonable(v)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value  # datetime, date, time, UUID: orjson writes them; anything else goes through _json_default


def _json_default(value: Any) -> Any:
    return str(value)


def _dump_json(rows: list[dict[str, Any]]) -> str:
    return (
        orjson.dumps(rows, default=_json_default, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"
    )


def write_json(value: Any, out: IO[str] | None = None) -> None:
    """Any nesting of dicts, lists and values (several tables in one document, e.g. ``compare --format json``),
    converted as :func:`write` converts JSON cells (NaN as "NaN", exact decimals, bytes as BLOB text)."""
    (out or sys.stdout).write(_dump_json(_jsonable(value)))


# ---------------------------------------------------------------------------------------- ad-hoc SQL results


def write_result(result: "SqlResult", fmt: str, out: IO[str] | None = None, *, wide: bool = False) -> None:
    """Write what :func:`k25trace.db.run_sql` returned (run with ``as_json=(fmt == "json")``)."""
    out = out or sys.stdout
    if fmt == "json":
        if not result.is_json:
            raise ValueError("run the SQL with as_json=True to write JSON")
        names = result.frame.columns
        rows = [
            {name: _json_fragment(text) for name, text in zip(names, row, strict=True)}
            for row in result.frame.iter_rows()
        ]
        out.write(_dump_json(rows))
    else:
        write(result.frame, fmt, out, right=result.numeric_text, wide=wide)


def _json_fragment(text: str | None) -> Any:
    """DuckDB's JSON text of one value, kept as is unless it holds NaN or Infinity (DuckDB writes them bare,
    which is not JSON): then it is parsed and written again with those as strings."""
    if text is None:
        return None
    if "NaN" in text or "Infinity" in text:
        value = json.loads(text, parse_float=Decimal, parse_constant=str)
        return orjson.Fragment(orjson.dumps(_jsonable(value)))
    return orjson.Fragment(text)


__all__ = [
    "DEFAULT_WIDTH",
    "Layout",
    "blob_text",
    "console",
    "console_width",
    "default_format",
    "fit_table",
    "markdown",
    "print_table",
    "rich_table",
    "shorten",
    "write",
    "write_json",
    "write_result",
]
