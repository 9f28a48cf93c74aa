"""Staged files and files stored at once: :class:`Staging` (one file's Arrow tables registered on a connection),
:class:`StoreThreads` (big files stored at once on many CPUs, each in a transaction of its own)."""

from __future__ import annotations

import datetime as _dt
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from k25trace.db import release_cached_blocks, run_query
from k25trace.errors import K25Error
from k25trace.ingest import limits
from k25trace.ingest.columns import TABLE_ORDER, _Columns, empty_table
from k25trace.ingest.model import FileResult, TraceFile

if TYPE_CHECKING:
    from k25trace.ingest.loader import Loader

_NO_NAMES: dict[str, int] = {}  # the name ids of a table without rows


def staged_tables(chunks: dict[str, list[pa.Table]]) -> dict[str, pa.Table]:
    """One file's staging tables, each from its chunks' tables concatenated (no copy), in ``TABLE_ORDER``; an empty
    one where there is none."""
    tables = {}
    for key in TABLE_ORDER:
        parts = chunks.get(key)
        if parts:
            tables[key] = pa.concat_tables(parts, promote_options="permissive")
        else:
            empty = empty_table(key)
            tables[key] = _with_name_ids(empty, _NO_NAMES.__getitem__) if key == "gpu" else empty
    return tables


class Staging:
    """One file's staged events on one connection: Arrow tables registered as the views ``_stage_<key>`` that the
    ingest queries read."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.tables: dict[str, pa.Table] = {}  # referenced here while DuckDB may read them

    def stage(self, key: str, table: pa.Table) -> None:
        """Register ``table`` as the view ``_stage_<key>`` (replacing the last one)."""
        self.con.unregister(f"_stage_{key}")
        self.con.register(f"_stage_{key}", table)
        self.tables[key] = table

    def register_chunks(self, chunks: dict[str, list[pa.Table]]) -> None:
        """Each staging table from its chunks' tables, concatenated (no copy); an empty one where there is none."""
        self.register_tables(staged_tables(chunks))

    def register_tables(self, tables: dict[str, pa.Table]) -> None:
        """Stage tables made by :func:`staged_tables` (read in another thread)."""
        for key, table in tables.items():
            self.stage(key, table)

    def clean(self, base: int, problems: Counter[str]) -> None:
        """Before the move into the final tables: drop rows whose absolute times would not fit in 64 bits (the
        decoder already dropped what is no time on its own), and exact duplicate events (``ingest_clean.sql``
        lists them, they are filtered out of the staged tables here)."""
        run_query(self.con, "ingest_clean", {"base": base})
        for staged, problem, n in run_query(self.con, "ingest_dropped").fetchall():
            problems[f"{problem}:{staged}"] += n
            table = self.tables[staged]
            ids = pa.array(
                [i for (i,) in run_query(self.con, "ingest_dropped_ids", {"staged": staged}).fetchall()], pa.int64()
            )
            self.stage(staged, table.filter(pc.invert(pc.is_in(table.column("event_id"), ids))))

    def drop(self) -> None:
        """Unregister the views and let go of their tables; drop the cleaning's temporary table."""
        self.tables = {}
        for key in TABLE_ORDER:
            try:
                self.con.unregister(f"_stage_{key}")
            except duckdb.Error:
                pass
        try:
            run_query(self.con, "ingest_stage_drop")
        except K25Error:
            pass


@dataclass
class ReadFile:
    """A file read and staged here, its shared rows committed, waiting for its store (:meth:`Loader.store`)."""

    tf: TraceFile
    shown: str
    started: _dt.datetime
    sha: str
    read_bytes: int
    meta: dict[str, Any]
    counts: int
    cols: _Columns
    tables: dict[str, pa.Table]  # its staged tables: the GPU activities cleaned (Loader.read), the rest by its store
    trace_id: int
    changed: bool  # between its hash and its read
    name_ids: list[int]  # the kernel names of its GPU activities
    new_name_ids: list[int]  # the names it brought to the database
    capture_keys: tuple[str | None, str | None]  # its capture as the captures and the traces tables hold it


class StoreThreads:
    """Big files stored at once, each in a transaction of its own on a DuckDB cursor of its own, in a thread, while
    this process reads the next (on many CPUs: :attr:`LoadOptions.store_threads`). What files share was written
    first, one file at a time in file order (:meth:`Loader.read`): the trace id, new kernel names and their classes,
    the capture, the stale flag. Results are reported in file order. A file that fails in its store leaves shared
    rows no activity uses: removed at the end (``ingest_orphans_drop.sql``)."""

    def __init__(self, loader: "Loader", threads: int, report: Callable[[FileResult], None]) -> None:
        self.loader = loader
        self.threads = threads
        self.report = report
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="k25trace-store")
        self.pending: deque[tuple[ReadFile, Future[FileResult]]] = deque()
        self.cursors: set[duckdb.DuckDBPyConnection] = set()  # those of the stores running, for an interrupt
        self.failed: list[ReadFile] = []
        self.stored_since_release = 0

    def wait_for(self, sha: str) -> bool:
        """Wait for the stores up to one of a file with this content; whether there was one."""
        if not any(read.sha == sha for read, _ in self.pending):
            return False
        while any(read.sha == sha for read, _ in self.pending):
            self._finish_first()
        return True

    def submit(self, read: ReadFile) -> None:
        """Store ``read`` in a thread, once fewer than :attr:`threads` stores run; DuckDB's cached blocks are dropped
        every ``limits.STORES_PER_RELEASE`` files, between stores (the limit it lowers holds for every query)."""
        if self.loader.release_cache and self.stored_since_release >= limits.STORES_PER_RELEASE:
            self.drain()
            release_cached_blocks(self.loader.con)
            self.stored_since_release = 0
        while len(self.pending) >= self.threads:
            self._finish_first()
        self.pending.append((read, self.pool.submit(self.loader.store, read, self.cursors)))
        self.stored_since_release += 1

    def report_done(self) -> None:
        """Report the stores ended, in file order (up to the first still running)."""
        while self.pending and self.pending[0][1].done():
            self._finish_first()

    def drain(self) -> None:
        """Wait for every store, reporting each."""
        while self.pending:
            self._finish_first()

    def _finish_first(self) -> None:
        read, future = self.pending[0]
        result = future.result()  # what the thread raised (an interrupt, a bug) is raised here
        self.pending.popleft()
        if result.status != "loaded":
            self.failed.append(read)
        self.report(result)

    def close(self) -> None:
        """Interrupt the stores still running (Ctrl-C, a bug), wait for their threads, report those that committed
        meanwhile (each is in the database), then remove the shared rows of the files that failed."""
        for cur in list(self.cursors):
            try:
                cur.interrupt()
            except duckdb.Error:
                pass
        self.pool.shutdown(wait=True, cancel_futures=True)
        for read, future in self.pending:
            if future.cancelled() or future.exception() is not None or future.result().status != "loaded":
                self.failed.append(read)
            else:  # committed before the stop (maybe after a file before it failed): said, in file order
                self.report(future.result())
        self.pending.clear()
        for read in self.failed:
            _drop_orphans(self.loader.con, read)
        self.failed = []


def _drop_orphans(con: duckdb.DuckDBPyConnection, read: ReadFile) -> None:
    """The shared rows of a file whose store failed that no other trace uses (``ingest_orphans_drop.sql``)."""
    try:
        con.execute("begin transaction")
        run_query(
            con,
            "ingest_orphans_drop",
            {
                "name_ids": read.name_ids,
                "new_name_ids": read.new_name_ids,
                "capture_key": read.capture_keys[0],
                "trace_capture_dir": read.capture_keys[1],
            },
        )
        con.execute("commit")
    except (duckdb.Error, K25Error, OSError):
        try:
            con.execute("rollback")
        except duckdb.Error:
            pass


def _with_name_ids(table: pa.Table, name_id: Callable[[str], int]) -> pa.Table:
    """A GPU chunk table as staged: its ``name`` column swapped for ``name_id`` (the database's name ids). The column
    comes dictionary-encoded from the decoder (:func:`k25trace.ingest.chunks._names_encoded`), else is encoded here;
    either way the names meet ``name_id`` in order of first appearance."""
    column = table.column("name")
    if pa.types.is_dictionary(column.type) and column.num_chunks == 1:
        names = column.chunk(0)
    else:
        names = column.cast(pa.string()).combine_chunks().dictionary_encode()
    ids = pa.array([name_id(v) for v in names.dictionary.to_pylist()], pa.int32())
    return table.drop_columns(["name"]).append_column("name_id", pc.take(ids, names.indices))
