"""Write query results to stdout as a table, CSV, JSON or Markdown (data only: diagnostics go to stderr).

Two entry points:

- :func:`write` takes a polars DataFrame (the reports). Any value polars holds prints in every format: decimals
  exactly, NaN/inf, NULL, nested lists and structs (as text in CSV), binary, strings that look like Rich markup.
- :func:`fetch_result` + :func:`write_result` take a DuckDB relation (``k25trace sql``, the TUI SQL panel), so
  that *every* DuckDB type prints, including the ones polars cannot hold or Arrow carries wrongly (HUGEINT and
  UHUGEINT overflow or round, INTERVAL and UNION do not import, BIT and BIGNUM arrive as raw bytes, TIME WITH
  TIME ZONE loses its offset, infinite or far dates overflow Python): DuckDB itself turns such a column into text
  (``CAST(… AS VARCHAR)``) and, for JSON, every column into JSON (``to_json``), before anything reaches Python.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any

import orjson
import polars as pl
from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    import duckdb

FORMATS = ("table", "csv", "json", "markdown")

#: DuckDB types that reach polars and Python exactly; every other type is converted to text by DuckDB first.
NATIVE_TYPES = frozenset({
    "boolean", "tinyint", "smallint", "integer", "bigint", "utinyint", "usmallint", "uinteger", "ubigint",
    "float", "double", "decimal", "varchar",
})
#: Types converted to text that are numbers (right-aligned in tables).
NUMERIC_TEXT_TYPES = frozenset({"hugeint", "uhugeint", "bignum", "varint"})

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
    """A Rich table of a frame; cells are plain text (a ``[/x]`` in a kernel name is not markup)."""
    table = Table(title=title, caption=caption, show_lines=False, header_style="bold", title_justify="left")
    for name, dtype in zip(frame.columns, frame.dtypes):
        table.add_column(Text(name), justify="right" if dtype.is_numeric() or name in right else "left", overflow="fold")
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
                                for n, d in zip(frame.columns, frame.dtypes)) + "|")
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
            series = pl.Series(series.name, [None if v is None else _text(v) for v in series.to_list()], dtype=pl.String)
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


# ---------------------------------------------------------------------------------------- DuckDB results


@dataclass
class Result:
    """Rows of a DuckDB result ready to print: ``frame`` has unique column names; in a JSON result every cell
    is the value's JSON text; ``numeric_text`` names text columns that hold numbers; ``truncated`` says that
    rows beyond the ``limit`` were left out."""

    frame: pl.DataFrame
    is_json: bool
    numeric_text: frozenset[str]
    truncated: bool = False


def unique_names(names: list[str]) -> list[str]:
    """``a, a, b`` → ``a, a_1, b`` (polars frames and JSON objects need unique names), as DuckDB renames."""
    seen: set[str] = set()
    out = []
    for name in names:
        candidate, k = name, 1
        while candidate in seen:
            candidate, k = f"{name}_{k}", k + 1
        seen.add(candidate)
        out.append(candidate)
    return out


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def user_relation(con: "duckdb.DuckDBPyConnection", text: str,
                  params: dict[str, Any] | None = None) -> "duckdb.DuckDBPyRelation | None":
    """Run a user's SQL (one or more statements; ``$name`` parameters bound where they are used) and return the
    last statement's result as a relation, not yet fetched; None when it has no result. Raises
    :class:`~k25trace.errors.K25Error` for SQL that holds no statement (blank, only comments) or a parameter
    that is missing or unused, ``duckdb.Error`` for the rest."""
    from k25trace.errors import K25Error

    params = dict(params or {})
    statements = con.extract_statements(text)
    if not statements:
        raise K25Error("no SQL statement to run (the SQL is empty or only comments)")
    wanted = set().union(*(set(s.named_parameters) for s in statements))
    missing = sorted(wanted - set(params))
    if missing:
        raise K25Error(f"missing parameter(s): {', '.join('$' + m for m in missing)}")
    unused = sorted(set(params) - wanted)
    if unused:
        raise K25Error(f"parameter(s) not used by the SQL: {', '.join('$' + u for u in unused)}")
    for statement in statements[:-1]:
        used = {k: params[k] for k in statement.named_parameters}
        cursor = con.execute(statement.query, used) if used else con.execute(statement.query)
        _finish(cursor)
    last = statements[-1]
    used = {k: params[k] for k in last.named_parameters}
    query = _without_trailer(con, last.query)
    return con.sql(query, params=used) if used else con.sql(query)


def read_only_hint(exc: BaseException) -> str:
    """For an error from the read-only guard (:func:`k25trace.db.forbid_external_access`), a line saying why."""
    text = str(exc)
    if any(m in text for m in ("disabled by configuration", "configuration has been locked", "disabled through configuration")):
        return ("\n(k25trace's SQL is read-only: it neither writes nor reads files, loads extensions or changes "
                "settings; for COPY … TO or EXPORT DATABASE use the duckdb CLI on the database file)")
    return ""


def _finish(cursor: "duckdb.DuckDBPyConnection") -> None:
    """Let go of a statement's result before the next one (DuckDB 2 refuses new work on an unfinished one)."""
    for method in ("complete", "fetchall"):  # complete(): DuckDB 2, without fetching the rows; else fetch them
        if hasattr(cursor, method):
            getattr(cursor, method)()
            return


def _without_trailer(con: "duckdb.DuckDBPyConnection", query: str) -> str:
    """The statement without a final ``;`` and what follows it (comments): DuckDB nests a relation's SQL in
    the outer query, where ``select 1; -- note`` is a syntax error. A cut is kept only where the rest holds no
    statement and the part before it still parses as one statement (a ``;`` in a string stays)."""
    import duckdb

    while (cut := query.rfind(";")) >= 0:
        try:
            if con.extract_statements(query[cut + 1:]) or len(con.extract_statements(query[:cut])) != 1:
                break
        except duckdb.Error:
            break
        query = query[:cut]
    return query


def fetch_result(rel: "duckdb.DuckDBPyRelation", *, as_json: bool = False, limit: int | None = None,
                 max_chars: int | None = None) -> Result:
    """Run ``rel`` with every column made printable by DuckDB (see the module doc); at most ``limit`` rows;
    text longer than ``max_chars`` is cut with "… (N more characters)". Raises ``duckdb.Error``."""
    names = unique_names(list(rel.columns))
    exprs, numeric = [], set()
    for i, (name, dtype) in enumerate(zip(names, rel.types), start=1):
        type_id = str(dtype.id).lower()
        ref = f"#{i}"
        if as_json:
            expr = f"to_json({ref})::VARCHAR"
        elif type_id in NATIVE_TYPES:
            expr = ref
        else:
            expr = f"CAST({ref} AS VARCHAR)"
            if type_id in NUMERIC_TEXT_TYPES:
                numeric.add(name)
        if max_chars is not None and not as_json and (type_id == "varchar" or type_id not in NATIVE_TYPES):
            expr = (f"CASE WHEN length({expr}) > {max_chars} THEN left({expr}, {max_chars}) || '… (' || "
                    f"(length({expr}) - {max_chars}) || ' more characters)' ELSE {expr} END")
        exprs.append(f"{expr} AS {_quote(name)}")
    projected = rel.project(", ".join(exprs)) if exprs else rel
    if limit is not None:
        projected = projected.limit(limit + 1)
    table = _arrow(projected)
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    truncated = limit is not None and frame.height > limit
    return Result(frame.head(limit) if truncated else frame, as_json, frozenset(numeric), truncated)


def _arrow(rel: "duckdb.DuckDBPyRelation") -> Any:
    for method in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fetch = getattr(rel, method, None)
        if fetch is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fetch()
    raise RuntimeError("this DuckDB version cannot return Arrow results")


def write_result(result: Result, fmt: str, out: IO[str] | None = None) -> None:
    """Write a :func:`fetch_result` result (fetched with ``as_json=(fmt == "json")``)."""
    out = out or sys.stdout
    if fmt == "json":
        if not result.is_json:
            raise ValueError("fetch the result with as_json=True to write JSON")
        names = result.frame.columns
        rows = [{name: _json_fragment(text) for name, text in zip(names, row)} for row in result.frame.iter_rows()]
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
