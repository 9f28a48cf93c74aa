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
import sys
from collections.abc import Collection
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

import orjson
import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from k25trace.db import SqlResult

_JSON_INT_RANGE = (-(2**63), 2**64 - 1)  # what orjson writes natively


def default_format() -> str:
    return "table" if sys.stdout.isatty() else "csv"


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


def rich_table(frame: pl.DataFrame, title: str | None = None, caption: str | None = None, *,
               right: Collection[str] = ()) -> Table:
    """A Rich table of a frame; cells, title and caption are plain text (a ``[/x]`` in a kernel name, a file name or
    a run label is not markup)."""
    table = Table(title=None if title is None else Text(title), caption=None if caption is None else Text(caption),
                  show_lines=False, header_style="bold", title_justify="left")
    for name, dtype in zip(frame.columns, frame.dtypes, strict=True):
        table.add_column(Text(name), justify="right" if dtype.is_numeric() or name in right else "left",
                         overflow="fold")
    for row in frame.iter_rows():
        table.add_row(*[Text(_cell(v)) for v in row])
    return table


def write(frame: pl.DataFrame, fmt: str, out: IO[str] | None = None, *, title: str | None = None,
          right: Collection[str] = ()) -> None:
    """Write a frame; ``right`` names text columns that hold numbers (right-aligned in tables)."""
    out = out or sys.stdout
    if fmt == "csv":
        out.write(_csv_ready(frame).write_csv())
    elif fmt == "json":
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in frame.iter_rows(named=True)]
        out.write(_dump_json(rows))
    elif fmt == "markdown":
        out.write(markdown(frame, right=right) + "\n")
    else:
        console = Console(file=out, width=None if out.isatty() else 200)
        console.print(rich_table(frame, title=title, right=right))


def markdown(frame: pl.DataFrame, *, right: Collection[str] = ()) -> str:
    lines = ["| " + " | ".join(_md(name) for name in frame.columns) + " |"]
    lines.append("|" + "|".join("---:" if d.is_numeric() or n in right else "---"
                                for n, d in zip(frame.columns, frame.dtypes, strict=True)) + "|")
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
            series = pl.Series(series.name, [None if v is None else _text(v) for v in series.to_list()],
                               dtype=pl.String)
        columns.append(series)
    return pl.DataFrame(columns)


def _csv_writable(dtype: pl.DataType) -> bool:
    return dtype.is_numeric() or dtype.is_temporal() or dtype in (pl.String, pl.Boolean, pl.Null, pl.Categorical) \
        or isinstance(dtype, (pl.Categorical, pl.Enum))


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
        return orjson.Fragment(str(value)) if value.is_finite() else ("NaN" if value.is_nan() else
                                                                     ("Infinity" if value > 0 else "-Infinity"))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return blob_text(value)
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) or k is None else _text(k): _jsonable(v)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value  # datetime, date, time, UUID: orjson writes them; anything else goes through _json_default


def _json_default(value: Any) -> Any:
    return str(value)


def _dump_json(rows: list[dict[str, Any]]) -> str:
    return orjson.dumps(rows, default=_json_default,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode() + "\n"


def write_json(value: Any, out: IO[str] | None = None) -> None:
    """Any nesting of dicts, lists and values (several tables in one document, e.g. ``compare --format json``),
    converted as :func:`write` converts JSON cells (NaN as "NaN", exact decimals, bytes as BLOB text)."""
    (out or sys.stdout).write(_dump_json(_jsonable(value)))


# ---------------------------------------------------------------------------------------- ad-hoc SQL results


def write_result(result: "SqlResult", fmt: str, out: IO[str] | None = None) -> None:
    """Write what :func:`k25trace.db.run_sql` returned (run with ``as_json=(fmt == "json")``)."""
    out = out or sys.stdout
    if fmt == "json":
        if not result.is_json:
            raise ValueError("run the SQL with as_json=True to write JSON")
        names = result.frame.columns
        rows = [{name: _json_fragment(text) for name, text in zip(names, row, strict=True)}
                for row in result.frame.iter_rows()]
        out.write(_dump_json(rows))
    else:
        write(result.frame, fmt, out, right=result.numeric_text)


def _json_fragment(text: str | None) -> Any:
    """DuckDB's JSON text of one value, kept as is unless it holds NaN or Infinity (DuckDB writes them bare,
    which is not JSON): then it is parsed and written again with those as strings."""
    if text is None:
        return None
    if "NaN" in text or "Infinity" in text:
        value = json.loads(text, parse_float=Decimal, parse_constant=str)
        return orjson.Fragment(orjson.dumps(_jsonable(value)))
    return orjson.Fragment(text)


__all__ = ["blob_text", "default_format", "markdown", "rich_table", "write", "write_json", "write_result"]
