"""Database access: open a k25trace DuckDB file, create the schema, run the named queries and the user's SQL.

The named queries are the ``queries/*.sql`` files (:mod:`k25trace.query_files` reads them and their headers; the
names are re-exported here). :func:`run_query` binds their parameters (never formats them into the SQL string);
``-- optional:`` parameters are NULL when not given. DuckDB errors are wrapped in
:class:`~k25trace.errors.QueryError` carrying the query name.
"""

from __future__ import annotations

import functools
import os
import stat
import sys
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:
    import polars as pl

import duckdb

from k25trace.errors import K25Error, QueryError
from k25trace.machine import cpus
from k25trace.query_files import PARAM_RE, get_query, split_statements, strip_sql_comments
from k25trace.query_files import NamedQuery as NamedQuery  # re-exported: callers import the query files' names here
from k25trace.query_files import named_queries as named_queries
from k25trace.query_files import queries_dir as queries_dir


def run_query(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """Run a named query with bound parameters; returns the cursor (fetch with ``.pl()``, ``.arrow()``, …)."""
    cursor = _run_named(con, name, params, last_as_relation=False)
    assert isinstance(cursor, duckdb.DuckDBPyConnection)
    return cursor


def _run_named(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None, last_as_relation: bool
) -> duckdb.DuckDBPyConnection | duckdb.DuckDBPyRelation:
    """Run a named query's statements; the last one of a query that only reads is a relation (not yet run)
    when ``last_as_relation``, else every statement has run and the cursor holds the last one's rows."""
    query = get_query(name)
    params = {**dict.fromkeys(query.optional), **(params or {})}
    missing = [p for p in query.params if p not in params]
    if missing:
        raise QueryError(name, f"missing parameter(s): {', '.join('$' + m for m in missing)}")
    unknown = [p for p in params if p not in query.params]
    if unknown:
        raise QueryError(
            name,
            f"unknown parameter(s): {', '.join('$' + u for u in unknown)}; it takes {list(query.params) or 'none'}",
        )
    reads_only = not query.creates or query.creates.startswith("none")
    try:
        statements = split_statements(query.sql)
        for i, statement in enumerate(statements):
            used = {p: v for p, v in params.items() if p in PARAM_RE.findall(strip_sql_comments(statement))}
            last = i == len(statements) - 1
            if last and last_as_relation and reads_only:
                # a relation cannot run while this cursor holds a result of execute() not read to its end (as a
                # new execute() could); finish it as that execute() would have, then read the query
                finish = getattr(con, "complete", None)  # DuckDB 2; DuckDB 1 replaces the result itself
                if finish is not None:
                    finish()
                relation = con.sql(statement, params=used) if used else con.sql(statement)
                if relation is None:
                    raise QueryError(name, "its last statement returns no rows (a query that reads must end in one)")
                return relation
            cursor = con.execute(statement, used) if used else con.execute(statement)
            if not last or not reads_only:
                cursor.fetchall()  # finish DDL/DML results; a query that creates nothing returns its last result
        return cursor
    except duckdb.Error as exc:
        raise QueryError(name, describe_error(exc)) from exc


def describe_error(exc: BaseException) -> str:
    """DuckDB's message in one line; for a damaged file (a block whose checksum does not match, which DuckDB
    checks on every block it reads) with what to do about it."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "Corrupt database file" in text or "does not match stored checksum" in text:
        return (
            f"the database file is damaged ({text}): nothing was read from the damaged part; restore the file "
            "from a copy or load the traces into a new database"
        )
    return text


@contextmanager
def reading(what: str | Path) -> Iterator[None]:
    """``with reading(path):`` turns a DuckDB error raised while reading a database (a damaged block, a failed
    read) into one :class:`K25Error` line naming ``what``; an interrupt (Ctrl-C) is left as it is."""
    try:
        yield
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        raise K25Error(f"{what}: {describe_error(exc)}") from exc


SCHEMA_VERSION = 8
"""The schema this k25trace writes (``meta.schema_version``). 1: the first release; 2: gpu_gaps, comm_alignment,
trace_runs sessions, traces.rank_source, collectives' caused wait / wait kind, allreduce_bench kernel times; 3: the
allreduce_bench table in every database (it was made by the first `bench allreduce`), the phase_steps and
selected_steps table macros and the run_labels view (what the report and TUI queries read); 4: the run's name as
columns of trace_runs (session, run_name, group_label, run_label; the run_labels view projects them), the
phase_collectives table macro; 5: collective_causes (why the late rank was late), steps.far_activities,
trace_runs.session_label (in the run_labels view), step_layers and step_layer_categories (layer segments), the
categories all2all, quantize and embedding (the built-in rules re-installed and every name re-classified); 6: the
step filters' table macros (phase_steps, selected_steps, phase_collectives) take a batch size and a run; 7: op_calls
(each trace's CPU-op calls per phase and batch size, built with its steps); 8: graph_kernels and step_idle (each
step's kernels replayed from a CUDA graph, and its gaps added up by cause, built with its steps)."""

REBUILT_BELOW = 5
"""An upgrade from a version below this one rebuilds the derived tables; from it on, the stored rows stay as they
are: the upgrade re-runs the schema and builds the tables that version lacks (:data:`OP_CALLS_FROM`,
:data:`STEP_SUMMARIES_FROM`)."""

OP_CALLS_FROM = 7
"""The first version with ``op_calls``: an upgrade from an older one (and from :data:`REBUILT_BELOW` on) builds it
for every trace."""

STEP_SUMMARIES_FROM = 8
"""The first version with ``graph_kernels`` and ``step_idle``: an upgrade from an older one (and from
:data:`REBUILT_BELOW` on) builds them for every trace."""


def check_database(con: duckdb.DuckDBPyConnection, path: Path | str, *, read_only: bool) -> int | None:
    """Refuse a DuckDB file that is not k25trace's, or that a newer k25trace wrote, before anything touches it.

    Returns the file's schema version (None for an empty file). Nothing is created or altered here.
    """
    tables = [name for (name,) in run_query(con, "db_tables").fetchall()]
    if not tables:
        return None
    if "meta" not in tables:
        shown = ", ".join(tables[:6]) + (" …" if len(tables) > 6 else "")
        raise K25Error(
            f"{path}: not a k25trace database (it holds {shown} and no k25trace `meta` table); "
            "refusing to change it: give --db a new file"
        )
    try:
        meta = dict(run_query(con, "meta_get", {"prefix": "schema_version"}).fetchall())
        version = int(meta["schema_version"]) if meta.get("schema_version") is not None else None
    except (QueryError, TypeError, ValueError):
        version = None
    if version is None:
        raise K25Error(
            f"{path}: its `meta` table has no k25trace schema_version: not a k25trace database; "
            "refusing to change it: give --db a new file"
        )
    if version > SCHEMA_VERSION:
        raise K25Error(
            f"{path}: written by a newer k25trace (schema version {version}; this one reads up to "
            f"{SCHEMA_VERSION}): upgrade k25trace"
        )
    if version < SCHEMA_VERSION and read_only:
        raise K25Error(
            f"{path}: schema version {version} is older than this k25trace's ({SCHEMA_VERSION}): run "
            f"`k25trace steps --db {path}` once to upgrade it (it rebuilds the derived tables)"
        )
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


CACHE_FLOOR = "32MB"
"""The memory limit :func:`release_cached_blocks` sets for a moment: below what DuckDB keeps cached after a file."""


def memory_limit(con: duckdb.DuckDBPyConnection) -> str | None:
    """The database instance's memory limit as DuckDB prints it (``'18.8 GiB'``); None where it cannot be read."""
    try:
        return str(run_query(con, "settings_memory_limit").fetchall()[0][0])
    except (QueryError, duckdb.Error, IndexError):
        return None


@functools.cache
def default_memory_limit() -> str | None:
    """DuckDB's default memory limit on this machine, as a new in-memory database gets it (read once a process: a
    new database instance costs 45-80 ms, and a load asks twice, once on its critical path before the cross-rank
    build)."""
    fresh = duckdb.connect()
    try:
        return memory_limit(fresh)
    finally:
        fresh.close()


def has_default_memory_limit(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con``'s memory limit is DuckDB's default on this machine (what a new in-memory database gets): the
    one :func:`release_cached_blocks` can set back exactly (``RESET``)."""
    return memory_limit(con) == default_memory_limit() is not None


def threads_within_cpus(con: duckdb.DuckDBPyConnection) -> None:
    """DuckDB starts a thread for every CPU of the machine, whatever ``taskset`` or a container's cpuset allows; where
    this process may run on fewer, the database instance gets as many threads as it has CPUs (a thread per CPU of a
    16-CPU machine fought over 2 allowed CPUs). Threads someone set lower stay as they are, and so does an instance
    whose configuration is locked (:func:`forbid_external_access`, after its first connect here set them)."""
    allowed = cpus()
    ((threads,),) = run_query(con, "settings_threads").fetchall()
    if int(threads) > allowed:
        try:
            con.execute(f"set threads = {allowed}")
        except duckdb.Error:  # a locked configuration
            pass


CROSS_RANK_MEMORY = "1GB"  # the cross-rank build's memory limit (:func:`memory_bounded`)


@contextmanager
def memory_bounded(con: duckdb.DuckDBPyConnection, limit: str | None = None) -> Iterator[None]:
    """Run the block under the memory limit ``limit`` (:data:`CROSS_RANK_MEMORY`), then set DuckDB's default back
    (``RESET``). Sorts, joins and windows past it spill to the database's own temporary folder (``FILE.duckdb.tmp``,
    removed by DuckDB), so the block's memory does not grow with the data: the cross-rank build of 24 real-structure
    ranks took 0.53 GB without it, and its ASOF joins grow with every GPU activity of the run. Only for a file
    database (an in-memory one would spill into the working folder) whose limit is the default: a limit someone set
    stays as it is."""
    ((temp_directory, database_path),) = run_query(con, "settings_spill").fetchall()
    bounded = False
    if database_path and temp_directory == f"{database_path}.tmp" and has_default_memory_limit(con):
        try:
            con.execute(f"set memory_limit = '{limit or CROSS_RANK_MEMORY}'")
            bounded = True
        except duckdb.Error:  # more than that already in use, or a locked configuration: unbounded, as before
            pass
    try:
        yield
    finally:
        if bounded:
            con.execute("reset memory_limit")


def release_cached_blocks(con: duckdb.DuckDBPyConnection) -> None:
    """Have DuckDB drop the table blocks it keeps cached (a load caches every block it wrote: ~30 MB per real rank
    file, 2 GB over 64), by lowering its memory limit to :data:`CACHE_FLOOR` for a moment, then back to the default
    (``RESET``: exact; the printed value, set again, would be rounded down). Only for a connection with the default
    limit (:func:`has_default_memory_limit`): a limit someone set stays as it is. Blocks still in use stay; a locked
    configuration: nothing happens."""
    try:
        con.execute(f"set memory_limit = '{CACHE_FLOOR}'")
    except duckdb.Error:
        return  # more than that is in use (DuckDB freed what it could), or the configuration is locked
    con.execute("reset memory_limit")


def upgrade_schema(con: duckdb.DuckDBPyConnection, version: int, rebuild: Callable[[int], Any]) -> None:
    """Bring an older k25trace database to SCHEMA_VERSION in one transaction: new tables, columns and macros, then
    ``rebuild(version)`` (the derived tables that version lacks or had otherwise, see
    :func:`k25trace.pipeline.upgrade`), then the version."""
    print(f"upgrading the database from schema version {version} to {SCHEMA_VERSION} …", file=sys.stderr)
    with transaction(con):
        ensure_schema(con)
        rebuild(version)
        con.execute("update meta set value = ? where key = 'schema_version'", [str(SCHEMA_VERSION)])


DUCKDB_MAGIC = b"DUCK"
"""What a DuckDB database file holds at byte offset 8 (after the header block's checksum)."""


def printable_path(path: str | Path) -> str:
    """A path as text that can be printed: bytes that are not UTF-8 (held as surrogates) as ``\\xHH``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def check_database_file(path: Path) -> None:
    """Refuse, before DuckDB opens it, a ``--db`` path that DuckDB cannot open or would not keep a database in:
    a name that is not UTF-8 (DuckDB's path conversion fails with ``std::bad_cast``), something that is not a
    regular file, or an existing file that is not a DuckDB database (no ``DUCK`` at byte 8: a CSV, JSON, Parquet
    or trace file, which DuckDB would open as an empty in-memory database and keep nothing in, or an empty file).
    Such a file is only read, never changed."""
    try:
        os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        raise K25Error(
            f"{printable_path(path)}: the database's path is not valid UTF-8, which DuckDB cannot open; "
            "rename the file or a folder on its path"
        ) from None
    try:
        st = path.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise K25Error(f"{path}: cannot open the database: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise K25Error(f"{path}: not a DuckDB database file (it is a {_file_kind(st.st_mode)})")
    if st.st_size == 0:
        raise K25Error(
            f"{path}: an empty file, not a DuckDB database; refusing to use it: remove it or give --db a new name"
        )
    try:
        with path.open("rb") as fh:
            head = fh.read(12)
    except OSError as exc:
        raise K25Error(f"{path}: cannot read the database: {exc.strerror or exc}") from None
    if head[8:12] != DUCKDB_MAGIC:
        raise K25Error(
            f"{path}: not a DuckDB database file (it does not start with DuckDB's header; "
            f"{_sniff(head)}); refusing to use it: give --db a .duckdb file"
        )


def _file_kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def _sniff(head: bytes) -> str:
    """What an existing non-DuckDB file seems to be, for the error message."""
    if head[:2] == b"\x1f\x8b":
        return "it is gzip data"
    if head[:4] == b"PAR1":
        return "it is a Parquet file"
    if head[:6] == b"SQLite":
        return "it is an SQLite database"
    if head.lstrip()[:1] in (b"{", b"["):
        return "it looks like JSON"
    return f"{len(head) if len(head) < 12 else 'its first 12'} bytes: {head!r}"


def connect(
    path: str | Path | None,
    *,
    read_only: bool = False,
    create: bool = True,
    upgrade: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None,
) -> duckdb.DuckDBPyConnection:
    """Open (and if needed initialise) a k25trace database. ``None`` means in-memory.

    A DuckDB file that is not k25trace's, or from a newer k25trace, is refused before anything is written to it;
    one from an older k25trace is upgraded by ``upgrade(con, version)`` (:func:`k25trace.pipeline.connect` passes
    it); without ``upgrade``, or read-only, it is refused with the command that upgrades it."""
    if path is None:
        con = duckdb.connect(":memory:")
    else:
        path = Path(path)
        check_database_file(path)
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
        if version is None and read_only:  # a DuckDB file with no tables at all (made by another tool): left as it is
            con.close()
            raise K25Error(
                f"{path}: an empty DuckDB file (no k25trace tables, no traces): load some into it first "
                f"(`k25trace load TRACE... --db {path}`)"
            )
        if version is not None and version < SCHEMA_VERSION:
            if upgrade is None:
                con.close()
                raise K25Error(
                    f"{path}: schema version {version} is older than this k25trace's ({SCHEMA_VERSION}): "
                    f"run `k25trace steps --db {path}` once to upgrade it (it rebuilds the derived tables)"
                )
            upgrade(con, version)
            version = SCHEMA_VERSION
    threads_within_cpus(con)
    if not read_only and (path is None or version is None or missing_tables(con)):
        # only a new (empty) file, or one missing a table, is written to here: opening a current database for
        # writing changes none of its bytes (a load whose files all fail leaves it as it was)
        with transaction(con):
            ensure_schema(con)
    return con


@functools.lru_cache(maxsize=1)
def schema_columns() -> frozenset[tuple[str, str]]:
    """The (table or view, column) pairs of the public schema, as ``queries/schema.sql`` makes them (in memory)."""
    con = duckdb.connect(":memory:")
    try:
        ensure_schema(con)
        return frozenset(run_query(con, "db_columns").fetchall())
    finally:
        con.close()


def missing_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables and views of the public schema that the open database lacks, or that lack one of their columns
    (none for a database this k25trace made)."""
    have = set(run_query(con, "db_columns").fetchall())
    return sorted({table for table, column in schema_columns() - have})


def forbid_external_access(con: duckdb.DuckDBPyConnection) -> None:
    """Make a connection safe for the user's SQL: no file or network access at all (``COPY … TO``, ``EXPORT
    DATABASE``, ``ATTACH``, ``read_csv``, ``INSTALL``/``LOAD``, …) and the configuration locked, so the SQL
    cannot turn it back on or point a log or profile at a file. The setting belongs to the database instance:
    every cursor of ``con`` (and every other connection to the same instance) is covered; idempotent."""
    ((locked, external),) = run_query(con, "settings_access").fetchall()
    if locked:
        if not external:
            return
        raise K25Error("this database connection has a locked configuration that allows file access")
    run_query(con, "settings_lock").fetchall()


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    """Create the tables of the public schema if they are missing (idempotent)."""
    run_query(con, "schema")


def fetch_frame(cursor: duckdb.DuckDBPyConnection) -> "pl.DataFrame":
    """The pending result of ``cursor`` as a polars DataFrame (works across DuckDB 1.x and 2.x APIs)."""
    import polars as pl  # deferred: polars is needed only once rows are fetched

    try:
        table = _arrow_table(cursor)
    except duckdb.Error as exc:
        raise QueryError("result", describe_error(exc)) from exc
    frame = pl.from_arrow(table)
    assert isinstance(frame, pl.DataFrame)
    return frame


def _arrow_table(result: duckdb.DuckDBPyConnection | duckdb.DuckDBPyRelation) -> Any:
    """The pending rows of a cursor or a relation as an Arrow table, by whichever name this DuckDB spells it."""
    for method in ("to_arrow_table", "fetch_arrow_table", "arrow"):
        fetch = getattr(result, method, None)
        if fetch is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # DuckDB 2 warns that DB-API results copy once; they are small
                return fetch()
    raise K25Error("this DuckDB version cannot return Arrow results")


def query_dicts(
    con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Run a named query and return its rows as dicts by column name (no polars: for start-up paths)."""
    cursor = run_query(con, name, params)
    columns = [column[0] for column in cursor.description or []]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def query_frame(con: duckdb.DuckDBPyConnection, name: str, params: dict[str, Any] | None = None) -> "pl.DataFrame":
    """Run a named query and return its rows as a polars DataFrame.

    A query that only reads hands its rows to polars through Arrow's C stream interface: no pyarrow import
    (~0.15 s of every command's start-up) and no extra copy of the rows."""
    import polars as pl  # deferred: polars is needed only once rows are fetched

    result = _run_named(con, name, params, last_as_relation=True)
    if isinstance(result, duckdb.DuckDBPyConnection):
        return fetch_frame(result)
    try:
        if hasattr(result, "__arrow_c_stream__"):
            return pl.DataFrame(result)
        frame = pl.from_arrow(_arrow_table(result))  # an older DuckDB: through pyarrow
        assert isinstance(frame, pl.DataFrame)
        return frame
    except duckdb.Error as exc:
        raise QueryError(name, describe_error(exc)) from exc


# ------------------------------------------------------------------------------------------------- ad-hoc SQL


def parse_param(item: str) -> tuple[str, Any]:
    """One ``name=value`` parameter as both front ends take it (``k25trace sql -p``, the TUI's parameter line):
    ``"rank=0"`` → ``("rank", 0)``. ``null`` or ``none`` (any case) is NULL; a whole number is an integer, another
    number a float; anything else is text as written, commas included, and an empty value is the empty string.
    A ``$`` before the name is dropped."""
    name, sep, value = item.partition("=")
    name = name.strip().lstrip("$")
    if not sep or not name:
        raise K25Error(f"parameter {item!r}: expected name=value")
    if value.lower() in ("null", "none"):
        return name, None
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


@dataclass
class SqlResult:
    """Rows of ad-hoc SQL ready to print: ``frame`` has unique column names; in a JSON result every cell is the
    value's JSON text; ``numeric_text`` names text columns that hold numbers; ``truncated`` says that rows beyond
    the cap were left out."""

    frame: "pl.DataFrame"
    is_json: bool
    numeric_text: frozenset[str]
    truncated: bool = False


NATIVE_TYPES = frozenset(
    {
        "boolean",
        "tinyint",
        "smallint",
        "integer",
        "bigint",
        "utinyint",
        "usmallint",
        "uinteger",
        "ubigint",
        "float",
        "double",
        "decimal",
        "varchar",
    }
)
"""DuckDB types that reach polars and Python exactly; :func:`run_sql` has DuckDB turn every other type into text."""

NUMERIC_TEXT_TYPES = frozenset({"hugeint", "uhugeint", "bignum", "varint"})
"""Types turned into text that are numbers (right-aligned in tables)."""


def run_sql(
    cursor: duckdb.DuckDBPyConnection,
    sql: str,
    params: dict[str, Any] | None = None,
    *,
    cap: int | None = None,
    as_json: bool = False,
    max_chars: int | None = None,
) -> SqlResult | None:
    """Run a user's SQL: the one way both front ends run ad-hoc SQL (``k25trace sql``, the TUI's SQL panel).

    Every statement runs in order, each with the ``$name`` parameters it uses bound (a missing or unused one is
    an error); the last statement's rows come back, at most ``cap`` of them (``truncated`` says when there were
    more), or None when it returns none. The connection's file access is switched off first
    (:func:`forbid_external_access`): the user's SQL neither reads nor writes files. So that *every* DuckDB type
    prints, DuckDB itself turns each value polars cannot hold or Arrow carries wrongly (HUGEINT and UHUGEINT
    overflow or round, INTERVAL and UNION do not import, BIT and BIGNUM arrive as raw bytes, TIME WITH TIME ZONE
    loses its offset, infinite or far dates overflow Python) into text (``CAST(… AS VARCHAR)``) and, with
    ``as_json``, every value into its JSON text (``to_json``); text longer than ``max_chars`` is cut with
    "… (N more characters)".

    Every failure is a :class:`~k25trace.errors.K25Error` reading ``SQL error: <DuckDB's message>`` (with why,
    when the read-only guard refused it); an interrupt (``cursor.interrupt()``, Ctrl-C) is left as DuckDB raises it.
    """
    try:
        forbid_external_access(cursor)
        relation = _user_relation(cursor, sql, params)
        if relation is None:
            return None
        return _fetch_printable(relation, as_json=as_json, limit=cap, max_chars=max_chars)
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        raise K25Error(f"SQL error: {exc}{read_only_hint(exc)}") from exc


def read_only_hint(exc: BaseException) -> str:
    """For an error from the read-only guard (:func:`forbid_external_access`), a line saying why."""
    text = str(exc)
    if any(
        m in text
        for m in ("disabled by configuration", "configuration has been locked", "disabled through configuration")
    ):
        return (
            "\n(k25trace's SQL is read-only: it neither writes nor reads files, loads extensions or changes "
            "settings; for COPY … TO or EXPORT DATABASE use the duckdb CLI on the database file)"
        )
    return ""


def _user_relation(
    con: duckdb.DuckDBPyConnection, text: str, params: dict[str, Any] | None = None
) -> duckdb.DuckDBPyRelation | None:
    """Run every statement of ``text`` but the last; the last one's result as a relation, not yet fetched (None
    when it has no result). K25Error for SQL without a statement or a missing or unused parameter."""
    params = dict(params or {})
    statements = con.extract_statements(text)
    if not statements:
        raise K25Error("SQL error: no SQL statement to run (the SQL is empty or only comments)")
    wanted = set().union(*(set(s.named_parameters) for s in statements))
    missing = sorted(wanted - set(params))
    if missing:
        raise K25Error(f"SQL error: missing parameter(s): {', '.join('$' + m for m in missing)}")
    unused = sorted(set(params) - wanted)
    if unused:
        raise K25Error(f"SQL error: parameter(s) not used by the SQL: {', '.join('$' + u for u in unused)}")
    for statement in statements[:-1]:
        used = {k: params[k] for k in statement.named_parameters}
        _finish(con.execute(statement.query, used) if used else con.execute(statement.query))
    last = statements[-1]
    used = {k: params[k] for k in last.named_parameters}
    query = _without_trailer(con, last.query)
    return con.sql(query, params=used) if used else con.sql(query)


def _finish(cursor: duckdb.DuckDBPyConnection) -> None:
    """Let go of a statement's result before the next one (DuckDB 2 refuses new work on an unfinished one)."""
    for method in ("complete", "fetchall"):  # complete(): DuckDB 2, without fetching the rows; else fetch them
        if hasattr(cursor, method):
            getattr(cursor, method)()
            return


def _without_trailer(con: duckdb.DuckDBPyConnection, query: str) -> str:
    """The statement without a final ``;`` and what follows it (comments): DuckDB nests a relation's SQL in
    the outer query, where ``select 1; -- note`` is a syntax error. A cut is kept only where the rest holds no
    statement and the part before it still parses as one statement (a ``;`` in a string stays)."""
    while (cut := query.rfind(";")) >= 0:
        try:
            if con.extract_statements(query[cut + 1 :]) or len(con.extract_statements(query[:cut])) != 1:
                break
        except duckdb.Error:
            break
        query = query[:cut]
    return query


def _fetch_printable(
    rel: duckdb.DuckDBPyRelation, *, as_json: bool = False, limit: int | None = None, max_chars: int | None = None
) -> SqlResult:
    """Fetch ``rel`` with every column made printable by DuckDB (see :func:`run_sql`); at most ``limit`` rows.
    Raises ``duckdb.Error``."""
    import polars as pl  # deferred: polars is needed only once rows are fetched

    names = _unique_names(list(rel.columns))
    exprs, numeric = [], set()
    for i, (name, dtype) in enumerate(zip(names, rel.types, strict=True), start=1):
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
            expr = (
                f"CASE WHEN length({expr}) > {max_chars} THEN left({expr}, {max_chars}) || '… (' || "
                f"(length({expr}) - {max_chars}) || ' more characters)' ELSE {expr} END"
            )
        exprs.append(f"{expr} AS {_quote(name)}")
    projected = rel.project(", ".join(exprs)) if exprs else rel
    if limit is not None:
        projected = projected.limit(limit + 1)
    frame = pl.from_arrow(_arrow_table(projected))
    assert isinstance(frame, pl.DataFrame)
    truncated = limit is not None and frame.height > limit
    return SqlResult(
        frame.head(limit) if limit is not None and truncated else frame, as_json, frozenset(numeric), truncated
    )


def _unique_names(names: list[str]) -> list[str]:
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
