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
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import duckdb

from k25trace import classify, crossrank, db, ingest, steps
from k25trace.errors import K25Error
from k25trace.ingest import FileResult, LoadOptions, TraceFile

if TYPE_CHECKING:
    from k25trace.ingest.workers import _Workers

__all__ = ["FileResult", "LoadOptions", "analyze_file", "connect", "load_paths", "rebuild", "reclassify", "upgrade"]


def analyze_file(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    """The stages after ingest for one freshly loaded trace: classify its new kernel names, build its steps."""
    steps.analyze_trace(con, trace_id)


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
    try:
        if analyze and not classify.rules_installed(con):
            with db.transaction(con):
                classify.install_rules(con, classify.load_rules())
    except BaseException:
        if workers is not None:
            workers.close()
        raise
    results, notes = ingest.load_paths(con, paths, options, on_result=on_result, progress_factory=progress_factory,
                                       after_file=analyze_file if analyze else None, workers=workers)
    if analyze and any(r.status == "loaded" for r in results):
        try:
            crossrank.build(con)
        except (duckdb.Error, K25Error) as exc:
            result = FileResult("cross-rank analysis", "failed", f"cross-rank analysis not rebuilt: "
                                f"{ingest.db_problem(exc)} (the traces are loaded; `k25trace steps` rebuilds it)")
            results.append(result)
            if on_result:
                on_result(result)
    return results, notes


def rebuild(con: duckdb.DuckDBPyConnection, *, gap_ns: int = steps.DEFAULT_GAP_NS) -> int:
    """Rebuild every trace's steps (one transaction per trace), then the cross-rank tables; returns the number of
    traces. After a re-classification, or with another ``gap_ns`` for traces without step markers."""
    n = steps.rebuild(con, gap_ns=gap_ns)
    crossrank.build(con)
    return n


def reclassify(con: duckdb.DuckDBPyConnection, rules: Path | None = None, *, replace: bool = False) -> None:
    """Re-classify every kernel name with the built-in rules (plus ``rules``), in one transaction. The steps are
    then stale: call :func:`rebuild`."""
    with db.transaction(con):
        classify.classify(con, rules, replace=replace)


def upgrade(con: duckdb.DuckDBPyConnection, version: int) -> None:
    """Bring an older k25trace database to the current schema in one transaction: new tables and columns, then
    every trace's derived tables rebuilt from the stored events; then the cross-rank tables."""
    def rebuild_every_trace() -> None:
        for trace_id in steps.trace_ids(con):
            steps.build_steps(con, trace_id)

    db.upgrade_schema(con, version, rebuild=rebuild_every_trace)
    crossrank.build(con)


def connect(path: str | Path | None, *, read_only: bool = False, create: bool = True) -> duckdb.DuckDBPyConnection:
    """:func:`k25trace.db.connect`, upgrading a database an older k25trace wrote (when opened for writing)."""
    return db.connect(path, read_only=read_only, create=create, upgrade=upgrade)
