"""Database access: open a k25trace DuckDB file, create the schema, find and run the named queries.

Every SQL statement the project runs lives in ``queries/*.sql`` (one query per file). Each file opens with a
header of ``-- key: value`` lines::

    -- name: steps
    -- creates: steps (table)
    -- reads: gpu_events, launches, annotations
    -- params: $trace_id
    -- grain: one row per engine step per trace

The loader parses the header, checks that the declared parameters are the ``$name`` tokens the SQL uses,
and binds parameters (never formats them into the SQL string). DuckDB errors are wrapped in
:class:`~k25trace.errors.QueryError` carrying the query name.
"""

from __future__ import annotations

import functools
import re
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import polars as pl

import duckdb

from k25trace.errors import K25Error, QueryError


_PARAM_RE = re.compile(r"(?<![:$\w])\$([A-Za-z_][A-Za-z0-9_]*)")
_HEADER_RE = re.compile(r"^--\s*([a-z_]+)\s*:\s*(.*)$")


def queries_dir() -> Path:
    """Where the SQL files are: ``k25trace/queries`` (a link to the checkout's ``queries/``, a folder in the wheel)."""
    here = Path(__file__).resolve().parent / "queries"
    if here.is_dir():
        return here
    raise K25Error(f"the SQL files are missing from this installation (no folder {here})")


@dataclass(frozen=True)
class NamedQuery:
    """One ``queries/*.sql`` file: its header fields and its SQL text."""

    name: str
    path: Path
    sql: str
    summary: str = ""
    creates: str = ""
    reads: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    grain: str = ""
    header: dict[str, str] = field(default_factory=dict)

    @property
    def is_report(self) -> bool:
        """A query that returns rows (no ``creates:``), as opposed to one that builds a table."""
        return not self.creates


def _parse_query_file(path: Path) -> NamedQuery:
    text = path.read_text(encoding="utf-8")
    header: dict[str, str] = {}
    summary_lines: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _HEADER_RE.match(line)
        if match:
            key, value = match.group(1), match.group(2).strip()
            header[key] = (header[key] + " " + value).strip() if key in header else value
        elif line.strip("- "):
            summary_lines.append(line.lstrip("- ").rstrip())
    name = header.get("name", path.stem)
    if name != path.stem:
        raise K25Error(f"{path}: header name {name!r} does not match the file name")
    declared = tuple(p.strip().lstrip("$") for p in header.get("params", "").split(",") if p.strip() and p.strip() != "none")
    used = sorted(set(_PARAM_RE.findall(_strip_sql_comments(text))))
    if sorted(set(declared)) != used:
        raise K25Error(f"{path}: header declares params {sorted(set(declared))} but the SQL uses {used}")
    reads = tuple(r.strip() for r in header.get("reads", "").split(",") if r.strip())
    return NamedQuery(
        name=name,
        path=path,
        sql=text,
        summary=" ".join(summary_lines),
        creates=header.get("creates", ""),
        reads=reads,
        params=declared,
        grain=header.get("grain", ""),
        header=header,
    )


def split_statements(sql: str) -> list[str]:
    """Split a query file into statements at semicolons that end a line (the project's SQL style)."""
    parts = re.split(r";[ \t]*(?:--[^\n]*)?\n", sql + "\n")
    return [p for p in parts if _strip_sql_comments(p).strip()]


def _strip_sql_comments(text: str) -> str:
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


@functools.lru_cache(maxsize=1)
def named_queries() -> dict[str, NamedQuery]:
    """All ``queries/*.sql`` files by name."""
    return {p.stem: _parse_query_file(p) for p in sorted(queries_dir().glob("*.sql"))}


def get_query(name: str) -> NamedQuery:
    queries = named_queries()
    if name not in queries:
        raise K25Error(f"no query named {name!r}; known: {', '.join(sorted(queries))}")
    return queries[name]


def run_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Run a named query with bound parameters; returns the cursor (fetch with ``.pl()``, ``.arrow()``, …)."""
    query = get_query(name)
    params = dict(params or {})
    missing = [p for p in query.params if p not in params]
    if missing:
        raise QueryError(name, f"missing parameter(s): {', '.join('$' + m for m in missing)}")
    unknown = [p for p in params if p not in query.params]
    if unknown:
        raise QueryError(name, f"unknown parameter(s): {', '.join('$' + u for u in unknown)}; it takes {list(query.params) or 'none'}")
    try:
        statements = split_statements(query.sql)
        for i, statement in enumerate(statements):
            used = {p: v for p, v in params.items() if p in _PARAM_RE.findall(_strip_sql_comments(statement))}
            cursor = con.execute(statement, used) if used else con.execute(statement)
            if query.creates or i < len(statements) - 1:
                cursor.fetchall()  # finish DDL/DML results so the connection is free for the next statement
        return cursor
    except duckdb.Error as exc:
        raise QueryError(name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from exc


SCHEMA_VERSION = 2
"""The schema this k25trace writes (``meta.schema_version``). 1: the first release; 2: gpu_gaps, comm_alignment,
trace_runs sessions, traces.rank_source, collectives' caused wait / wait kind, allreduce_bench kernel times."""


def check_database(con: duckdb.DuckDBPyConnection, path: Path | str, *, read_only: bool) -> int | None:
    """Refuse a DuckDB file that is not k25trace's, or that a newer k25trace wrote, before anything touches it.

    Returns the file's schema version (None for an empty file). Nothing is created or altered here.
    """
    tables = [r[0] for r in con.execute(
        "select table_name from duckdb_tables() where database_name = current_database() and not temporary "
        "order by table_name").fetchall()]
    if not tables:
        return None
    if "meta" not in tables:
        shown = ", ".join(tables[:6]) + (" …" if len(tables) > 6 else "")
        raise K25Error(f"{path}: not a k25trace database (it holds {shown} and no k25trace `meta` table); "
                       "refusing to change it: give --db a new file")
    try:
        row = con.execute("select value from meta where key = 'schema_version'").fetchone()
        version = int(row[0]) if row else None
    except (duckdb.Error, TypeError, ValueError):
        version = None
    if version is None:
        raise K25Error(f"{path}: its `meta` table has no k25trace schema_version: not a k25trace database; "
                       "refusing to change it: give --db a new file")
    if version > SCHEMA_VERSION:
        raise K25Error(f"{path}: written by a newer k25trace (schema version {version}; this one reads up to "
                       f"{SCHEMA_VERSION}): upgrade k25trace")
    if version < SCHEMA_VERSION and read_only:
        raise K25Error(f"{path}: schema version {version} is older than this k25trace's ({SCHEMA_VERSION}): run "
                       f"`k25trace steps --db {path}` once to upgrade it (it rebuilds the derived tables)")
    return version


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``with transaction(con):`` begin, then commit, or roll back on any exception (Ctrl-C included)."""
    con.execute("begin transaction")
    try:
        yield con
    except BaseException:
        con.execute("rollback")
        raise
    con.execute("commit")


def upgrade_schema(con: duckdb.DuckDBPyConnection, version: int, rebuild: Callable[[], Any]) -> None:
    """Bring an older k25trace database to SCHEMA_VERSION in one transaction: new tables and columns, then
    ``rebuild()`` (the derived tables, see :func:`k25trace.pipeline.upgrade`), then the version."""
    print(f"upgrading the database from schema version {version} to {SCHEMA_VERSION} …", file=sys.stderr)
    with transaction(con):
        ensure_schema(con)
        rebuild()
        con.execute("update meta set value = ? where key = 'schema_version'", [str(SCHEMA_VERSION)])


def connect(path: str | Path | None, *, read_only: bool = False, create: bool = True,
            upgrade: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None) -> duckdb.DuckDBPyConnection:
    """Open (and if needed initialise) a k25trace database. ``None`` means in-memory.

    A DuckDB file that is not k25trace's, or from a newer k25trace, is refused before anything is written to it;
    one from an older k25trace is upgraded by ``upgrade(con, version)`` (:func:`k25trace.pipeline.connect` passes
    it); without ``upgrade``, or read-only, it is refused with the command that upgrades it."""
    if path is None:
        con = duckdb.connect(":memory:")
    else:
        path = Path(path)
        if not path.exists():
            if read_only or not create:
                raise K25Error(f"{path}: no such database (create one with `k25trace load TRACE... --db {path}`)")
        try:
            con = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            raise K25Error(f"{path}: cannot open as a DuckDB database: {str(exc).splitlines()[0]}") from exc
        try:
            version = check_database(con, path, read_only=read_only)
        except BaseException:
            con.close()
            raise
        if version is not None and version < SCHEMA_VERSION:
            if upgrade is None:
                con.close()
                raise K25Error(f"{path}: schema version {version} is older than this k25trace's ({SCHEMA_VERSION}): "
                               f"run `k25trace steps --db {path}` once to upgrade it (it rebuilds the derived tables)")
            upgrade(con, version)
    if not read_only:
        with transaction(con):
            ensure_schema(con)
    return con


def forbid_external_access(con: duckdb.DuckDBPyConnection) -> None:
    """Make a connection safe for the user's SQL: no file or network access at all (``COPY … TO``, ``EXPORT
    DATABASE``, ``ATTACH``, ``read_csv``, ``INSTALL``/``LOAD``, …) and the configuration locked, so the SQL
    cannot turn it back on or point a log or profile at a file. The setting belongs to the database instance:
    every cursor of ``con`` (and every other connection to the same instance) is covered; idempotent."""
    (locked, external), = con.execute(
        "select current_setting('lock_configuration'), current_setting('enable_external_access')").fetchall()
    if locked:
        if not external:
            return
        raise K25Error("this database connection has a locked configuration that allows file access")
    con.execute("set enable_external_access = false").fetchall()
    con.execute("set lock_configuration = true").fetchall()


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the tables of the public schema if they are missing (idempotent)."""
    run_query(con, "schema")


def fetch_frame(cursor: duckdb.DuckDBPyConnection) -> "pl.DataFrame":
    """The pending result of ``cursor`` as a polars DataFrame (works across DuckDB 1.x and 2.x APIs)."""
    import polars as pl

    for method in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fetch = getattr(cursor, method, None)
        if fetch is not None:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # DuckDB 2 warns that DB-API results copy once; they are small
                    table = fetch()
            except duckdb.Error as exc:
                raise QueryError("result", str(exc).splitlines()[0]) from exc
            frame = pl.from_arrow(table)
            assert isinstance(frame, pl.DataFrame)
            return frame
    raise K25Error("this DuckDB version cannot return Arrow results")


def query_frame(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> "pl.DataFrame":
    """Run a named query and return its rows as a polars DataFrame."""
    return fetch_frame(run_query(con, name, params))
