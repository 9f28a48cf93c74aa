"""The pipeline, in one place: ingest -> classify -> steps -> cross-rank.

The front door of the headless core (HTA's ``TraceAnalysis`` shape). Each stage is a module that knows nothing of
the ones after it:

* :mod:`k25trace.ingest` turns trace JSON into the event tables (``traces``, ``gpu_events``, ``launches``, …);
* :mod:`k25trace.classify` maps kernel names to categories (rules as data, ``queries/kernel_rules.csv``);
* :mod:`k25trace.steps` splits each trace's timeline into engine steps and GPU idle gaps;
* :mod:`k25trace.crossrank` pairs the collectives of the ranks of a run (``trace_runs``, ``collectives``).

This module owns the order. Per file, classification and steps run inside the file's own transaction (a
failure rolls the whole file back); the cross-rank tables are rebuilt once after all files. The CLI, the TUI,
the benchmarks and the tests load through :func:`load_paths`; nothing here prints.

The cross-rank tables span every trace, so they cannot be part of a file's transaction: each file's commit marks
them stale (``meta.crossrank_stale``), their rebuild marks them fresh. A load that is stopped (Ctrl-C, SIGTERM)
rebuilds them for the files that committed before it stops; after a stop nothing can catch (kill -9, power) the
flag stays set and :func:`connect` rebuilds them when the database is next opened.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import duckdb

from k25trace import classify, crossrank, db, ingest, layers, steps
from k25trace.errors import K25Error, Stopped, is_interrupt
from k25trace.ingest import FileResult, LoadOptions, TraceFile

if TYPE_CHECKING:
    from k25trace.ingest.workers import _Workers

__all__ = [
    "FileResult",
    "LoadOptions",
    "Stopped",
    "analyze_file",
    "build_runs",
    "connect",
    "load_paths",
    "rebuild",
    "reclassify",
    "runs_stale",
    "upgrade",
]


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While a load runs in the main thread, SIGTERM raises :class:`Stopped` instead of ending the process on the
    spot (which would skip the rebuild of the cross-rank tables). Only where nobody else handles SIGTERM."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    received: list[int] = []

    def stop(signum: int, _frame: Any) -> None:
        received.append(signum)
        raise Stopped(signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    except BaseException as exc:
        # DuckDB reports a query stopped by the handler's exception as its own interrupt (no signal number left)
        if received and not isinstance(exc, Stopped) and is_interrupt(exc):
            raise Stopped(received[0]) from exc
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def analyze_file(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    """The stages after ingest for one freshly loaded trace: classify its new kernel names, build its steps; and
    mark the cross-rank tables stale (they do not hold this trace until :func:`build_runs`), in the same
    transaction."""
    classify.classify_trace(con, trace_id)
    steps.build_steps(con, trace_id)
    layers.build_layers(con, trace_id)
    _mark_runs(con, stale=True)


def share_file(con: duckdb.DuckDBPyConnection) -> None:
    """What a file stored beside others writes first, in a transaction of its own (the loader's ``after_shared``):
    the classes of its staged kernel keys, and the cross-rank tables marked stale."""
    classify.classify_staged(con)
    _mark_runs(con, stale=True)


def _mark_runs(con: duckdb.DuckDBPyConnection, *, stale: bool) -> None:
    db.run_query(con, "ingest_runs_stale", {"stale": "true" if stale else "false"})


def runs_stale(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the cross-rank tables miss a trace committed (or steps rebuilt) since they were last built."""
    try:
        rows = db.run_query(con, "meta_get", {"prefix": "crossrank_stale"}).fetchall()
    except K25Error:
        return False
    return dict(rows).get("crossrank_stale") == "true"


def build_runs(con: duckdb.DuckDBPyConnection) -> None:
    """Rebuild the cross-rank tables (:func:`k25trace.crossrank.build`, one transaction, in bounded memory:
    :func:`k25trace.db.memory_bounded`; once more without it if DuckDB runs out or cannot spill), then mark them fresh
    (a second one: a stop between the two leaves them marked stale, and they are only rebuilt once more)."""
    try:
        with db.memory_bounded(con):
            crossrank.build(con)
    except K25Error as exc:
        if not isinstance(exc.__cause__, (duckdb.OutOfMemoryException, duckdb.IOException)):
            raise
        crossrank.build(con)  # rolled back: again without the bound (not every operator spills; a disk may refuse)
    with db.transaction(con):
        _mark_runs(con, stale=False)


def load_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    options: LoadOptions | None = None,
    *,
    analyze: bool = True,
    on_result: Callable[[FileResult], None] | None = None,
    progress_factory: Callable[[list[TraceFile]], Any] | None = None,
    workers: _Workers | None = None,
) -> tuple[list[FileResult], list[str]]:
    """Load every trace under ``paths`` and run the later stages; returns (per-file results, notes).

    Never raises for a bad file: each file is loaded, classified and split into steps in one transaction, or
    not at all, and reported in its :class:`FileResult`. ``analyze=False`` loads the events only (no classes,
    steps or cross-rank tables; ``k25trace classify`` builds them later). ``workers``: decode processes started
    earlier for this load (:func:`k25trace.ingest.start_workers`), closed when it ends.
    """
    with _sigterm_raises():
        try:
            if analyze and not classify.rules_installed(con):
                with db.transaction(con):
                    classify.install_rules(con, classify.load_rules())
        except BaseException:
            if workers is not None:
                workers.close()
            raise
        try:
            results, notes = ingest.load_paths(
                con,
                paths,
                options,
                on_result=on_result,
                progress_factory=progress_factory,
                after_file=analyze_file if analyze else None,
                workers=workers,
                after_shared=share_file if analyze else None,
            )
        except BaseException:  # Ctrl-C, SIGTERM (or a bug): the files that committed get their cross-rank tables
            if analyze:
                _build_runs_after_stop(con)
            raise
        if analyze and (any(r.status == "loaded" for r in results) or runs_stale(con)):
            try:
                build_runs(con)
            except (duckdb.Error, K25Error) as exc:
                result = FileResult(
                    "cross-rank analysis",
                    "failed",
                    f"cross-rank analysis not rebuilt: "
                    f"{ingest.db_problem(exc)} (the traces are loaded; `k25trace steps` rebuilds it)",
                )
                results.append(result)
                if on_result:
                    on_result(result)
    return results, notes


def _build_runs_after_stop(con: duckdb.DuckDBPyConnection) -> None:
    """After a stopped load: rebuild the cross-rank tables if a file committed before the stop. Whatever goes wrong
    here (the database gave up, another Ctrl-C) leaves them marked stale, for the next :func:`connect`; the stop
    itself is what the caller reports."""
    try:
        if runs_stale(con):
            build_runs(con)
    except (duckdb.Error, K25Error, KeyboardInterrupt):
        pass


def rebuild(con: duckdb.DuckDBPyConnection, *, gap_ns: int = steps.DEFAULT_GAP_NS) -> int:
    """Rebuild every trace's steps and their layer segments (one transaction per trace), then the cross-rank
    tables; returns the number of traces. After a re-classification, or with another ``gap_ns`` for traces without
    step markers."""
    with db.transaction(con):
        _mark_runs(con, stale=True)  # a rebuild stopped half-way leaves every trace's old or new steps: runs stale
    ids = steps.trace_ids(con)
    for trace_id in ids:
        with db.transaction(con):
            steps.build_steps(con, trace_id, gap_ns=gap_ns)
            layers.build_layers(con, trace_id)  # the segments read the steps and the categories
    build_runs(con)
    return len(ids)


def reclassify(con: duckdb.DuckDBPyConnection, rules: Path | None = None, *, replace: bool = False) -> None:
    """Re-classify every kernel name with the built-in rules (plus ``rules``), in one transaction. The steps are
    then stale: call :func:`rebuild`."""
    with db.transaction(con):
        classify.classify(con, rules, replace=replace)
        _mark_runs(con, stale=True)


def upgrade(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring an older k25trace database to the current schema in one transaction: new tables and columns; below
    :data:`~k25trace.db.REBUILT_BELOW`, this k25trace's built-in classification rules (a user's rules kept, first)
    and every name re-classified, then every trace's derived tables (steps, gaps, op calls, graph kernels, step
    idle, layer segments) rebuilt from the stored events; from it on, the stored rows kept and only the tables the
    version lacks built (op calls, graph kernels, step idle); then the cross-rank tables."""

    def rebuild_every_trace(old_version: int) -> None:
        if old_version < db.REBUILT_BELOW:
            _reinstall_builtin_rules(con)
            for trace_id in steps.trace_ids(con):
                steps.build_steps(con, trace_id)
                layers.build_layers(con, trace_id)
            return
        for trace_id in steps.trace_ids(con):
            if old_version < db.OP_CALLS_FROM:
                steps.build_op_calls(con, trace_id)
            if old_version < db.STEP_SUMMARIES_FROM:
                steps.build_step_summaries(con, trace_id)

    db.upgrade_schema(con, version, rebuild=rebuild_every_trace)
    build_runs(con)


def _reinstall_builtin_rules(con: duckdb.DuckDBPyConnection) -> None:
    """For an upgrade: the built-in rules of this k25trace after the user's rules the database holds, and every
    kernel name classified again (what a fresh load would give). A database without rules (never classified) or
    with the user's rules alone (``classify --replace``) keeps its rules."""
    rows = db.run_query(con, "kernel_rules_user").fetchall()
    if not rows or not rows[0][7]:
        return
    user = [
        classify.Rule(i, category, kind, name, coll, note or "", source)
        for i, (_id, category, kind, name, coll, note, source, _b) in enumerate(
            (r for r in rows if r[0] is not None), start=1
        )
    ]
    builtin = classify.read_rules(classify.builtin_rules_path(), first_id=len(user) + 1, source="builtin")
    classify.install_rules(con, user + builtin)
    db.run_query(con, "kernel_classes_reset")
    classify.classify_trace(con, None)


def connect(path: str | Path | None, *, read_only: bool = False, create: bool = True) -> duckdb.DuckDBPyConnection:
    """:func:`k25trace.db.connect`, upgrading a database an older k25trace wrote (when opened for writing), and
    rebuilding cross-rank tables left stale by a load that was killed (:func:`runs_stale`). Read-only, that rebuild
    goes through a short write connection first; where the file cannot be written it is an error that says so."""
    con = db.connect(path, read_only=read_only, create=create, upgrade=upgrade)
    if path is None or not runs_stale(con):
        return con
    if not read_only:
        build_runs(con)
        return con
    con.close()
    try:
        writer = db.connect(path, create=False, upgrade=upgrade)
    except K25Error as exc:
        raise K25Error(
            f"{path}: its cross-rank run tables are out of date (a load was stopped before it rebuilt "
            f"them) and cannot be rebuilt here ({exc}); run `k25trace steps --db {path}` where the "
            "database can be written"
        ) from exc
    try:
        build_runs(writer)
    finally:
        writer.close()
    return db.connect(path, read_only=True, create=False, upgrade=upgrade)
