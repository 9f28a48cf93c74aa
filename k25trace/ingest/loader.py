"""Loading files into the event tables: stage each file's chunks (Arrow tables, in memory), then clean them and
move them into the final tables, in one transaction per file."""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import signal
import threading
from pathlib import Path
from typing import Any, Callable, Iterator

import duckdb
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from k25trace import __version__
from k25trace.capture.files import sha256_file
from k25trace.db import has_default_memory_limit, release_cached_blocks, run_query
from k25trace.errors import K25Error, TraceError, is_interrupt
from k25trace.ingest.chunks import _chunks
from k25trace.ingest.columns import _Columns
from k25trace.ingest.discover import discover, file_size, is_frontend_name
from k25trace.ingest.events import _dumps
from k25trace.ingest.file_meta import (
    base_time,
    device_name,
    metadata_text,
    problem_warnings,
    rank_of,
    skipped_counts,
    span_text,
)
from k25trace.ingest.messages import Chunk, End, Progress
from k25trace.ingest.model import FileResult, LoadOptions, TraceFile
from k25trace.ingest.scan import scanner_note
from k25trace.ingest.stores import ReadFile, Staging, StoreThreads, _with_name_ids, staged_tables
from k25trace.ingest.workers import _Workers, decode_workers
from k25trace.names import short_name

# ---------------------------------------------------------------------------------------------------------------
# Loading one file

LONG_GPU_NS = 3_600 * 10**9  # a GPU activity longer than an hour is reported


class Loader:
    """Loads trace files into one database connection, one transaction per file."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        options: LoadOptions | None = None,
        progress: Callable[[int], None] | None = None,
        after_file: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None,
        workers: _Workers | None = None,
        after_shared: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    ) -> None:
        self.con = con
        self.options = options or LoadOptions()
        self._executor: _Workers | None = workers  # decode processes started before (start_workers); closed here
        self._closing: threading.Thread | None = None  # the thread ending them after the last big file is read
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._chunks: dict[str, list[pa.Table]] = {}  # this file's chunk tables per staging table, in file order
        self.staging = Staging(con)  # the tables registered as the _stage_* views
        self.progress = progress or (lambda n: None)
        self.names: dict[str, int] = dict(run_query(con, "ingest_names").fetchall())
        self.next_name_id = max(self.names.values(), default=0) + 1
        self.after_file = after_file  # the later stages (k25trace.pipeline), inside the file's transaction
        # what the later stages share between files (their classes), for a file stored beside others (read())
        self.after_shared = after_shared
        self.last_counts = (0, 0, 0)  # (rank, events, GPU activities) of the last file committed by _commit_file
        # the last file the decode workers stream: once it is read they end, before its commit and analysis (their
        # memory is not held through the tail of the load: ~400 MB of a real 80 MB rank's peak, measured)
        self.workers_until: Path | None = None
        self.big_files = 0  # files of this load big enough for the decode workers (decode_workers)
        # DuckDB keeps every block a file wrote cached, up to its memory limit: dropped after each file but the last
        # (what follows reads it), so that a load's memory does not grow with its files (64 real ranks: 3.4 GB, was
        # measured); not under a memory limit of one's own
        self.release_cache = has_default_memory_limit(con)
        self.last_file: Path | None = None
        # (the first of several big files, the others): the others are streamed ahead once the first is read
        self.prefetch_after: tuple[Path, list[Path]] | None = None

    def _known(self, sha: str) -> tuple[int, str] | None:
        rows = run_query(self.con, "ingest_known", {"sha256": sha}).fetchall()
        return rows[0] if rows else None

    def _hash(self, path: Path) -> str:
        """The file's sha256, computed once per (path, size, mtime) in this load."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._hashes:
            self._hashes[key] = _sha256(path)
        return self._hashes[key]

    def _size_known(self, path: Path) -> bool:
        """Whether a stored trace has this file's size: only such a file can be loaded already, and is hashed before
        it is read (any other's sha256 comes from its read, :meth:`_stream`)."""
        return bool(run_query(self.con, "ingest_size_known", {"file_size": path.stat().st_size}).fetchall()[0][0])

    def already_loaded(self, path: Path) -> bool:
        try:
            return self._size_known(path) and self._known(self._hash(path)) is not None
        except (OSError, duckdb.Error):
            return False

    def _precheck(self, path: Path, result: FileResult) -> tuple[bool, str | None]:
        """Before a file is read: whether it is to be read (else ``result`` says why not: unreadable, or loaded
        already), and its sha256 where it was hashed first (only a file whose size is stored may be loaded)."""
        shown = result.path
        sha: str | None = None
        try:
            with open(path, "rb"):
                pass
            if self._size_known(path):
                sha = self._hash(path)
        except OSError as exc:
            result.message = f"{shown}: cannot read: {exc.strerror}"
            return False, None
        except duckdb.Error as exc:
            if is_interrupt(exc):  # Ctrl-C or SIGTERM during the query: no problem of the file
                raise
            result.message = f"{shown}: {db_problem(exc)}"
            return False, None
        try:
            row = self._known(sha) if sha is not None else None
        except duckdb.Error as exc:
            if is_interrupt(exc):  # Ctrl-C or SIGTERM during the query: no problem of the file
                raise
            result.message = f"{shown}: {db_problem(exc)}"
            return False, None
        if row:
            _skipped(result, row)
            return False, None
        return True, sha

    def load(self, tf: TraceFile) -> FileResult:
        path = tf.path
        shown = _shown(path)
        started = _dt.datetime.now()
        result = FileResult(shown, "failed")
        go_on, sha = self._precheck(path, result)
        if not go_on:
            return result
        names = _NameIds(self.names, self.next_name_id)
        con = self.con
        committing = False
        try:
            con.execute("begin transaction")
        except duckdb.Error as exc:
            if is_interrupt(exc):
                raise
            result.message = f"{shown}: not loaded: {db_problem(exc)}"
            return result
        try:
            run_query(con, "ingest_stage")
            meta, counts, cols, read_sha, read_bytes = self._stream(path, names)
            self._after_read(path)
            changed = sha is not None and read_sha != sha  # between the hash and the read (still being written?)
            if read_sha != sha:  # not hashed first, or changed: is what was read loaded already?
                row = self._known(read_sha)
                if row:
                    con.execute("rollback")
                    return _skipped(result, row, changed)
            trace_id, warnings = self._commit_file(tf, path, read_sha, read_bytes, meta, counts, cols, names.new)
            if changed:
                warnings.append(_changed_warning(shown, read_bytes, read_sha))
            committing = True
            con.execute("commit")
        except BaseException as exc:
            _rollback(self.con)
            message = _failure(exc, shown, committing)
            if message is None:
                raise
            self.prefetch_rest(path)  # the first file failed: the others are still loaded
            result.message = message
            return result
        finally:
            self._unstage()
        if self.release_cache and path != self.last_file:
            release_cached_blocks(con)
        self.names.update(names.new)
        self.next_name_id = names.next_id
        result.status = "loaded"
        result.trace_id = trace_id
        result.warnings = warnings
        result.rank, result.events, result.gpu_events = self.last_counts
        result.seconds = (_dt.datetime.now() - started).total_seconds()
        return result

    def _after_read(self, path: Path) -> None:
        """Once a file's chunks are all taken: the other big files streamed, the next one received ahead, the
        decode workers ended after the last."""
        self.prefetch_rest(path)
        if self.options.receive_ahead and self._executor is not None:
            self._executor.receive_ahead(self.options.receive_ahead_files)  # come in while this one is stored
        if self.workers_until is not None and path == self.workers_until:
            self._close_in_background()

    def _close_in_background(self) -> None:
        """End the decode workers in a thread: the last file's store need not wait for their processes to exit
        (eight idle ones: 0.04 s; more after a file), on the load's critical path. :meth:`close` waits for it."""
        executor, self._executor = self._executor, None
        if executor is not None:
            self._closing = threading.Thread(target=executor.close, name="k25trace-close-workers", daemon=True)
            self._closing.start()

    def read(self, tf: TraceFile, wait_for: Callable[[str], bool]) -> "FileResult | ReadFile":
        """A file to be stored beside others (:class:`StoreThreads`): read here, one file after another, and what it
        shares with other files (:meth:`shared_rows`, ``after_shared``) committed in a short transaction of its
        own. Its staged GPU activities are cleaned here when a key of theirs has no class yet; every other table,
        and the GPU activities otherwise, by :meth:`store`, in a thread. Returns the file ready for :meth:`store`,
        or its result (skipped, failed). ``wait_for(sha256)`` waits for a file of the same content being stored,
        and says whether there was one."""
        path = tf.path
        shown = _shown(path)
        started = _dt.datetime.now()
        result = FileResult(shown, "failed")
        go_on, sha = self._precheck(path, result)
        if not go_on:
            return result
        names = _NameIds(self.names, self.next_name_id)
        con = self.con
        try:
            run_query(con, "ingest_stage")
            meta, counts, cols, read_sha, read_bytes = self._stream(path, names)
            self._after_read(path)
            changed = sha is not None and read_sha != sha
            if wait_for(read_sha) or read_sha != sha:
                row = self._known(read_sha)
                if row:
                    return _skipped(result, row, changed)
            tables = staged_tables(self._chunks)
            self._chunks = {}
            # cleaned here: the GPU activities only, and only when a key of theirs has no class yet (after_shared
            # classifies what is left of them); the rest by the store, in its thread, where a second cleaning of
            # the GPU activities finds nothing. With every key classified the store cleans them too: removing rows
            # adds no key, so no class changes (the reads are serial, on the critical path of 8 files on 16 CPUs)
            self.staging.register_tables({key: t if key == "gpu" else t.slice(0, 0) for key, t in tables.items()})
            if names.new or run_query(con, "ingest_stage_unclassified").fetchall()[0][0]:
                self.staging.clean(base_time(meta, path), cols.problems)
                tables["gpu"] = self.staging.tables["gpu"]
            name_ids = pc.unique(tables["gpu"].column("name_id")).to_pylist()
            con.execute("begin transaction")
            trace_id = self.shared_rows(con, tf, names.new)
            if self.after_shared is not None:
                self.after_shared(con)
            con.execute("commit")
        except BaseException as exc:
            _rollback(self.con)
            message = _failure(exc, shown, False)
            if message is None:
                raise
            self.prefetch_rest(path)  # the first file failed: the others are still loaded
            result.message = message
            return result
        finally:
            self._unstage()
        self.names.update(names.new)
        self.next_name_id = names.next_id
        return ReadFile(
            tf,
            shown,
            started,
            read_sha,
            read_bytes,
            meta,
            counts,
            cols,
            tables,
            trace_id,
            changed,
            name_ids,
            list(names.new.values()),
            _capture_keys(tf),
        )

    def store(self, read: "ReadFile", cursors: set[duckdb.DuckDBPyConnection]) -> FileResult:
        """Store a file :meth:`read` before, in a transaction of its own on a cursor of its own (in a thread of
        :class:`StoreThreads`; the cursor is in ``cursors`` while it is used, for an interrupt): its staged tables
        cleaned (``ingest_clean.sql``), moved into the final tables, the later stages run."""
        path = read.tf.path
        result = FileResult(read.shown, "failed", trace_id=None)
        cur = self.con.cursor()
        cursors.add(cur)
        staging = Staging(cur)
        committing = False
        try:
            cur.execute("begin transaction")
            run_query(cur, "ingest_stage")  # the cleaning's temporary table, on this cursor
            staging.register_tables(read.tables)
            read.tables = {}
            staging.clean(base_time(read.meta, path), read.cols.problems)
            warnings, counts = self.file_rows(
                cur, read.tf, path, read.sha, read.read_bytes, read.meta, read.counts, read.cols, read.trace_id
            )
            if read.changed:
                warnings.append(_changed_warning(read.shown, read.read_bytes, read.sha))
            committing = True
            cur.execute("commit")
        except BaseException as exc:
            _rollback(cur)
            message = _failure(exc, read.shown, committing)
            if message is None:
                raise
            result.message = message
            return result
        finally:
            staging.drop()
            cursors.discard(cur)
            cur.close()
        result.status = "loaded"
        result.trace_id = read.trace_id
        result.warnings = warnings
        result.rank, result.events, result.gpu_events = counts
        result.seconds = (_dt.datetime.now() - read.started).total_seconds()
        return result

    def _stream(self, path: Path, name_id: Callable[[str], int]) -> tuple[dict[str, Any], int, _Columns, str, int]:
        """Read, decode and stage one file's events; returns (top-level metadata, event count, counters, sha256 of
        the bytes read, bytes read)."""
        cols = _Columns(self.options.keep_python)
        workers = self._workers() if file_size(path) >= self.options.parallel_min_bytes else None
        if workers is not None and workers.streams(path):
            chunks = workers.run(path, self.options.keep_python)
        elif workers is not None and workers.ring_ok():
            chunks = workers.feed(path, self.options.keep_python, self.progress)
        else:
            chunks = _chunks(path, self.options.keep_python, self.progress)
        total = 0
        end: End | None = None
        for item in chunks:
            if isinstance(item, Chunk):
                cols.skipped.update(item.skipped)
                cols.unknown.update(item.unknown)
                cols.problems.update(item.problems)
                self._append(item.tables, total, name_id)
                total += item.events
            elif isinstance(item, Progress):
                self.progress(item.read)
            elif isinstance(item, End):
                end = item
        if end is None:  # a stream always ends with End; anything else is a bug, not a bad file
            raise RuntimeError(f"{path}: the decode stream ended without its End message")
        meta_text, sha, read_bytes = end
        try:
            meta = orjson.loads(meta_text)
        except orjson.JSONDecodeError as exc:
            raise TraceError(str(path), f"invalid JSON outside traceEvents: {exc}") from exc
        if not isinstance(meta, dict):
            raise TraceError(str(path), "top-level JSON is not an object")
        return meta, total, cols, sha, read_bytes

    def prefetch(self, big: list[Path]) -> None:
        """With several big files (not loaded yet, in load order), start decoding them in the worker processes ahead
        of loading. The first is shared out among the workers and this process through the shared-memory ring
        (:meth:`_Workers.feed`): it is read sooner than one worker decodes it whole, while this process would only
        wait. The others are streamed whole by the workers from the moment the first is read
        (:meth:`prefetch_rest`), ahead of its commit. Without ``options.share_first_file`` (the default from 12 CPUs:
        :func:`~k25trace.ingest.model.files_at_once`) every file is given to the workers at once, from the start."""
        if len(big) < 2:
            return
        workers = self._workers()
        if workers is None:
            return
        if self.options.share_first_file and workers.ring_ok():
            self.prefetch_after = (big[0], big[1:])
        else:
            self._stream_whole(workers, big)
            if self.options.receive_ahead:  # from the start: a worker waits once its file fills its queue
                workers.receive_ahead(self.options.receive_ahead_files)

    def prefetch_rest(self, path: Path) -> None:
        """Once the first of several big files is read (or failed, or was skipped), start streaming the others."""
        if self.prefetch_after is None or path != self.prefetch_after[0]:
            return
        rest = self.prefetch_after[1]
        self.prefetch_after = None
        workers = self._workers()
        if workers is not None:
            workers.release_ring()  # its 16 MB buffers, mapped by every process, until the workers end
            self._stream_whole(workers, rest)

    def _stream_whole(self, workers: "_Workers", paths: list[Path]) -> None:
        """Give these files to the workers to stream whole, with this load's options."""
        o = self.options
        workers.prefetch(paths, o.keep_python, o.threaded_read, o.decode_threads, o.files_ahead_per_worker)

    def _workers(self) -> "_Workers | None":
        if self.options.workers <= 1:
            return None
        if self._executor is None or not self._executor.procs:
            self._executor = _Workers(decode_workers(self.options, self.big_files))
        return self._executor

    def close(self) -> None:
        """End the decode workers, and wait for those ended in the background (:meth:`_close_in_background`)."""
        if self._executor is not None:
            self._executor.close()
            self._executor = None
        if self._closing is not None:
            self._closing.join()
            self._closing = None

    def _append(self, tables: dict[str, pa.Table], first_event_id: int, name_id: Callable[[str], int]) -> None:
        for key, table in tables.items():
            if first_event_id:
                table = table.set_column(0, "event_id", pc.add(table.column("event_id"), first_event_id))
            self._chunks.setdefault(key, []).append(_with_name_ids(table, name_id) if key == "gpu" else table)

    def _register_staged(self) -> None:
        """The file's staged events, one Arrow table per staging table (the chunks' tables concatenated, no copy;
        an empty one where there is none), registered for ingest_clean.sql, ingest_stage_summary.sql and
        ingest_commit.sql. Nothing is copied into DuckDB before the move into the final tables."""
        self.staging.register_chunks(self._chunks)
        self._chunks = {}

    def _unstage(self) -> None:
        self._chunks = {}
        self.staging.drop()

    def _commit_file(
        self,
        tf: TraceFile,
        path: Path,
        sha: str,
        read_bytes: int,
        meta: dict[str, Any],
        counts: int,
        cols: _Columns,
        new_names: dict[str, int],
    ) -> tuple[int, list[str]]:
        """Clean the staged events, move them into the final tables, write the traces row, record the capture, run
        the later stages (``after_file``); all inside the file's transaction. Returns (trace id, warnings)."""
        self._register_staged()
        self.staging.clean(base_time(meta, path), cols.problems)
        trace_id = self.shared_rows(self.con, tf, new_names)
        warnings, self.last_counts = self.file_rows(self.con, tf, path, sha, read_bytes, meta, counts, cols, trace_id)
        return trace_id, warnings

    def shared_rows(self, con: duckdb.DuckDBPyConnection, tf: TraceFile, new_names: dict[str, int]) -> int:
        """The rows a file shares with the files loaded beside it: its trace id (from the sequence), its new kernel
        names, its capture's manifest. Returns the trace id."""
        trace_id = int(run_query(con, "ingest_next_trace_id").fetchall()[0][0])
        if new_names:
            run_query(
                con,
                "ingest_names_add",
                {"names": [{"name_id": i, "name": n, "short_name": short_name(n)} for n, i in new_names.items()]},
            )
        if tf.capture_dir is not None:
            _record_capture(con, tf.capture_dir)
        return trace_id

    def file_rows(
        self,
        con: duckdb.DuckDBPyConnection,
        tf: TraceFile,
        path: Path,
        sha: str,
        read_bytes: int,
        meta: dict[str, Any],
        counts: int,
        cols: _Columns,
        trace_id: int,
    ) -> tuple[list[str], tuple[int, int, int]]:
        """Move the staged (cleaned) events of ``con`` into the final tables as trace ``trace_id``, write its traces
        row, run the later stages (``after_file``). Returns the file's warnings and (rank, events, GPU
        activities)."""
        shown = _shown(path)
        dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        rank, world, rank_source = rank_of(dist, path.name)
        base = base_time(meta, path)
        devices = meta.get("deviceProperties") if isinstance(meta.get("deviceProperties"), list) else None
        gpu_n, main_device, long_n, longest = run_query(
            con, "ingest_stage_summary", {"long_ns": LONG_GPU_NS}
        ).fetchall()[0]
        frontend = is_frontend_name(path.name)
        warnings = _file_warnings(path, cols, gpu_n, frontend, long_n, longest)
        run_query(con, "ingest_commit", {"trace_id": trace_id, "rank": rank, "base": base})
        metadata_json = metadata_text(meta, shown, warnings)
        vllm_version = meta.get("vllm_version")
        if isinstance(vllm_version, (list, dict)):
            vllm_version = _dumps(vllm_version)
        run_query(
            con,
            "ingest_trace",
            {
                "trace_id": trace_id,
                "path": _shown(path.resolve()),
                "file_name": _shown(Path(path.name)),
                "file_size": read_bytes,
                "sha256": sha,
                "rank": rank,
                "world_size": world,
                "base_time_ns": base,
                "device_name": device_name(devices, main_device, rank),
                "device_count": len(devices) if devices else None,
                "vllm_version": str(vllm_version) if vllm_version is not None else None,
                "is_frontend": frontend,
                "capture_dir": _shown(tf.capture_dir) if tf.capture_dir else None,
                "level": tf.level,
                "concurrency": tf.concurrency,
                "event_count": counts,
                "gpu_event_count": gpu_n,
                "distributed_info": _dumps(dist) if dist else None,
                "device_properties": _dumps(devices) if devices else None,
                "metadata": metadata_json,
                "skipped": orjson.dumps(skipped_counts(cols)).decode(),
                "loaded_at": _dt.datetime.now(),
                "loader_version": __version__,
                "rank_source": rank_source,
            },
        )
        if self.after_file is not None:
            self.after_file(con, trace_id)
        return warnings, (rank, counts, gpu_n)


def _capture_keys(tf: TraceFile) -> tuple[str | None, str | None]:
    """A file's capture as the captures table keys it (resolved) and as its traces row holds it."""
    if tf.capture_dir is None:
        return None, None
    return _shown(tf.capture_dir.resolve()), _shown(tf.capture_dir)


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    """Roll back a file's transaction; after a failed commit DuckDB has already ended it."""
    try:
        con.execute("rollback")
    except duckdb.Error:
        pass


def _skipped(result: FileResult, row: tuple[int, str], changed: bool = False) -> FileResult:
    """``result`` as a file already loaded as trace ``row`` (id, path) says it."""
    result.status = "skipped"
    result.trace_id = row[0]
    result.message = f"{result.path}: already loaded as trace {row[0]} ({row[1]})" + (
        " (it changed while it was read)" if changed else ""
    )
    return result


def _changed_warning(shown: str, read_bytes: int, read_sha: str) -> str:
    return (
        f"{shown}: the file changed while it was read (still being written?); stored what was "
        f"read ({read_bytes:,} bytes, sha256 {read_sha[:12]}…)"
    )


def _file_warnings(path: Path, cols: _Columns, gpu_n: int, frontend: bool, long_n: int, longest: int) -> list[str]:
    """The warnings of one file's load: a file name that is not UTF-8, the events' problems, unknown categories,
    GPU activities longer than an hour."""
    shown = _shown(path)
    warnings: list[str] = []
    if shown != str(path):
        warnings.append(
            f"{shown}: the file name is not valid UTF-8; path and file_name are stored with U+FFFD (�) "
            "in place of the bytes that are not"
        )
    warnings += problem_warnings(shown, cols.problems, gpu_n, frontend)
    if cols.unknown:
        unknown = ", ".join(f"{k} ({v})" for k, v in cols.unknown.most_common())
        warnings.append(f"{shown}: skipped events of unknown categories: {unknown}")
    if long_n:
        warnings.append(
            f"{shown}: {long_n:,} GPU activit{'y' if long_n == 1 else 'ies'} longer than an hour (the "
            f"longest {span_text(longest)}): kept; such times usually mean a broken trace"
        )
    return warnings


class _NameIds:
    """GPU activity name -> kernel_names id: the database's names, plus the new ones a file brings (they become the
    loader's only when the file commits)."""

    def __init__(self, known: dict[str, int], next_id: int) -> None:
        self.known = known
        self.new: dict[str, int] = {}
        self.next_id = next_id

    def __call__(self, name: str) -> int:
        got = self.known.get(name)
        if got is None:
            got = self.new.get(name)
            if got is None:
                got = self.new[name] = self.next_id
                self.next_id += 1
        return got


def _failure(exc: BaseException, shown: str, committing: bool) -> str | None:
    """The one-line message of a file that failed to load with ``exc``; None for what is no problem of the file
    (Ctrl-C, a bug): re-raised. The file's transaction is rolled back in both cases."""
    if is_interrupt(exc):  # Ctrl-C or SIGTERM while DuckDB or Arrow ran
        return None
    if isinstance(exc, TraceError):
        return f"{_shown(exc.path)}: {exc.problem}"
    if isinstance(exc, K25Error):
        return f"{shown}: {exc}"
    if isinstance(exc, duckdb.Error):
        what = "not stored: the commit failed" if committing else "not loaded"
        return f"{shown}: {what}: {db_problem(exc)} (nothing of this file is in the database)"
    if isinstance(exc, RecursionError):
        return f"{shown}: nested too deep to load (RecursionError)"
    if isinstance(exc, OSError):
        return f"{shown}: cannot read: {exc.strerror or exc}"
    # a file too big, or data no decoder reads
    if isinstance(exc, (MemoryError, UnicodeError, ValueError, OverflowError)):
        return f"{shown}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def _shown(path: Path | str) -> str:
    """The path as text that any database or terminal takes: bytes of a file name that are not UTF-8 become
    U+FFFD (the file itself is opened by its real name)."""
    text = str(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "replace")


def db_problem(exc: BaseException) -> str:
    """A database error as one line: ``database error: <its first line>``."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"database error: {first}"


def _record_capture(con: duckdb.DuckDBPyConnection, capture_dir: Path) -> None:
    """The capture's manifest (as far as it is sound: ``capture.manifest.check_manifest``) and its levels' request
    statistics, inserted by column name."""
    from k25trace.capture.manifest import LEVEL_COLUMNS, check_manifest, level_rows

    m = check_manifest(capture_dir)
    if m is None or not m.usable:  # changed since discovery
        raise TraceError(
            str(capture_dir / "manifest.json"),
            "the capture manifest is gone or unusable: " + (m.summary() if m else "missing"),
        )
    key = _shown(capture_dir.resolve())
    rows = level_rows(m)
    levels = pa.table(
        {
            "capture_dir": pa.array([key] * len(rows), pa.string()),
            **{c: pa.array([row[c] for row in rows]) for c in LEVEL_COLUMNS},
        }
    )
    con.register("_capture_levels", levels)
    try:
        run_query(con, "ingest_capture", {"capture_dir": key, "manifest": m.json_text()})
    finally:
        con.unregister("_capture_levels")


def _sha256(path: Path) -> str:
    """The file's content hash (what identifies a loaded trace); one definition, shared with capture."""
    return sha256_file(path)


def load_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    options: LoadOptions | None = None,
    *,
    on_result: Callable[[FileResult], None] | None = None,
    progress_factory: Callable[[list[TraceFile]], Any] | None = None,
    after_file: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None,
    workers: _Workers | None = None,
    after_shared: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
) -> tuple[list[FileResult], list[str]]:
    """Load every trace under ``paths`` into the event tables; returns (per-file results, notes). Never raises
    for a bad file. ``after_file(con, trace_id)`` runs inside each file's transaction (the pipeline's later
    stages: a failure there rolls the file back like a bad event would); ``after_shared(con)``, what they share
    between files, for big files stored at once (:class:`StoreThreads`). ``workers``: decode processes started
    earlier for this load (:func:`~k25trace.ingest.workers.start_workers`); they are closed when it ends.

    Past a file-size limit (``ulimit -f``; CPython ignores SIGXFSZ) a write to the database fails and the file's
    transaction reports it; the shared-memory ring is not used under a limit smaller than its buffers."""
    options = options or LoadOptions()
    files, notes, errors = discover(paths, include_frontend=options.include_frontend)
    notes = [_shown(n) for n in notes]
    big = [tf.path for tf in files if file_size(tf.path) >= options.parallel_min_bytes]  # decoded by the workers
    if big and not options.keep_python:
        notes.extend(scanner_note())
    results = [FileResult(_shown(e.split(":", 1)[0]), "failed", _shown(e)) for e in errors]
    for r in results:
        if on_result:
            on_result(r)
    progress_ctx = None
    try:
        if progress_factory is not None:
            with _interrupts_deferred():  # a display started is one this function closes, whenever Ctrl-C comes
                progress_ctx = progress_factory(files)
        _load_files(con, files, big, options, results, on_result, progress_ctx, (after_file, after_shared), workers)
    finally:
        if workers is not None:
            workers.close()  # closed by the loader already, unless it stopped before it took them (idempotent)
        if progress_ctx is not None:
            progress_ctx.close()  # also when interrupted: a terminal's progress display is ended (cursor shown)
    return results, notes


@contextlib.contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Ctrl-C (and SIGTERM where Python handles it) held back for a moment and raised right after: what is made
    meanwhile is made whole before the interrupt can be raised. In the main thread only (the only one Python's
    signal handlers run in; a blocked signal mask would not do: another thread would take the signal)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: Any) -> None:
        held.append(signum)

    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(signum)
        if callable(handler):  # Python's own (KeyboardInterrupt, pipeline.Stopped); not SIG_DFL or SIG_IGN
            previous[signum] = handler
            signal.signal(signum, hold)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            signal.raise_signal(held[0])  # through the handler just restored


def _load_files(
    con: duckdb.DuckDBPyConnection,
    files: list[TraceFile],
    big: list[Path],
    options: LoadOptions,
    results: list[FileResult],
    on_result: Callable[[FileResult], None] | None,
    progress_ctx: Any,
    stages: tuple[
        Callable[[duckdb.DuckDBPyConnection, int], None] | None, Callable[[duckdb.DuckDBPyConnection], None] | None
    ],
    workers: _Workers | None,
) -> None:
    """:func:`load_paths`'s loop over the files, appending to ``results``; ``stages``: (after_file, after_shared).
    The decode workers are closed at its end, however it ends."""

    def _nothing(_: object) -> None:
        return None

    def report(result: FileResult) -> None:
        results.append(result)
        if on_result:
            # said whole, once: Ctrl-C in the middle of Rich's write of a line left it in Rich's buffer, and the
            # progress display's last refresh wrote it a second time (Rich deletes its buffer after the write)
            with _interrupts_deferred():
                on_result(result)

    advance: Callable[[int], None] = _nothing
    start_file: Callable[[TraceFile], None] = _nothing
    if progress_ctx is not None:
        advance, start_file = progress_ctx.advance, progress_ctx.start_file
    loader: Loader | None = None
    stores: StoreThreads | None = None
    after_file, after_shared = stages
    try:
        loader = Loader(
            con,
            options,
            progress=lambda n: advance(n),
            after_file=after_file,
            workers=workers,
            after_shared=after_shared,
        )
        loader.big_files = len(big)
        loader.last_file = files[-1].path if files else None
        if big:
            loader._workers()  # start the processes now: their imports overlap the hashing below
        big = [path for path in big if not loader.already_loaded(path)]
        loader.workers_until = big[-1] if big else None
        loader.prefetch(big)
        if options.store_threads > 1 and len(big) >= 2:
            stores = StoreThreads(loader, options.store_threads, report)
        stored_at_once = set(big) if stores is not None else set()
        for tf in files:
            start_file(tf)
            if stores is not None and tf.path in stored_at_once:
                read = loader.read(tf, stores.wait_for)
                loader.prefetch_rest(tf.path)
                if isinstance(read, ReadFile):
                    stores.submit(read)
                else:
                    stores.drain()  # the results in file order
                    report(read)
                stores.report_done()
                continue
            if stores is not None:
                stores.drain()
            result = loader.load(tf)
            loader.prefetch_rest(tf.path)  # (done already when the file was read; not when it was not)
            report(result)
        if stores is not None:
            stores.drain()
    finally:
        if stores is not None:
            stores.close()
        if loader is not None:
            loader.close()
