"""The Python API for notebooks and scripts: open a database, get the CLI's tables as polars frames.

    import k25trace
    run = k25trace.open("run.duckdb")      # read-only
    run.breakdown(batch=1)                  # what `k25trace report` prints, as a frame
    run.steps(); run.kernels(top=10); run.comm(); run.idle()
    k25trace.api.compare("before.duckdb", "after.duckdb").verdict

Every method returns the frame the matching ``k25trace report --by VIEW --format csv`` writes (same rows, same
numbers): it calls the same analysis functions. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace import db, pipeline
from k25trace.analysis import compare as compare_core
from k25trace.analysis import report
from k25trace.errors import K25Error

__all__ = ["LoadSummary", "Run", "compare", "load", "open"]

PathLike = str | Path


class Run:
    """A k25trace database opened read-only; each method is one report view as a polars DataFrame.

    ``phase`` is ``'decode'`` (the default), ``'prefill'``, ``'mixed'`` or ``'all'``; ``rank`` and ``trace`` keep
    one rank or trace where the view has them; ``batch`` keeps one batch size where the view has a
    ``batch_size`` column. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self.con: duckdb.DuckDBPyConnection = pipeline.connect(self.path, read_only=True)

    def __repr__(self) -> str:
        return f"k25trace.Run({str(self.path)!r})"

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the database connection."""
        self.con.close()

    def view(
        self,
        by: str,
        *,
        phase: str | None = None,
        rank: int | None = None,
        trace: int | None = None,
        batch: int | None = None,
        top: int = 20,
    ) -> pl.DataFrame:
        """Any ``report --by`` view except the speed-of-light ones (see :data:`k25trace.vocab.VIEWS`)."""
        phase, _ = report.resolve_phase(self.con, phase)
        frame = report.breakdown(self.con, by=by, phase=phase, rank=rank, trace_id=trace, top=top)
        return _batch(frame, batch, by)

    def breakdown(self, **filters: Any) -> pl.DataFrame:
        """Per run, batch size and category: ms/step, % of step (``report``, the default view)."""
        return self.view("batch", **filters)

    def categories(self, **filters: Any) -> pl.DataFrame:
        """Per category over all batch sizes (``report --by category``)."""
        return self.view("category", **filters)

    def steps(self, **filters: Any) -> pl.DataFrame:
        """One row per rank-step: wall, busy, idle, top categories (``report --by step``)."""
        return self.view("step", **filters)

    def kernels(self, *, top: int = 20, **filters: Any) -> pl.DataFrame:
        """The ``top`` kernels by time per step (``report --by kernel``)."""
        return self.view("kernel", top=top, **filters)

    def comm(self, **filters: Any) -> pl.DataFrame:
        """Collectives across ranks: transfer vs wait, the straggler (``report --by comm``)."""
        return self.view("comm", **filters)

    def idle(self, **filters: Any) -> pl.DataFrame:
        """GPU idle inside and between steps, by cause (``report --by idle``)."""
        return self.view("idle", **filters)

    def traces(self) -> pl.DataFrame:
        """One row per loaded trace: rank, device, events, steps by phase."""
        return report.summary(self.con)

    def sql(self, query: str, params: dict[str, Any] | list[Any] | None = None) -> pl.DataFrame:
        """Any SQL over the database as a frame (the tables of the schema docs); as ``k25trace sql``, it can read
        and write no file."""
        db.forbid_external_access(self.con)
        try:
            cursor = self.con.execute(query, params)
        except duckdb.Error as exc:
            raise K25Error(f"SQL error: {exc}{db.read_only_hint(exc)}") from exc
        return db.fetch_frame(cursor)


def _batch(frame: pl.DataFrame, batch: int | None, by: str) -> pl.DataFrame:
    """Keep one batch size; a clear error when the view has none."""
    if batch is None:
        return frame
    if "batch_size" not in frame.columns:
        raise K25Error(f"view {by!r} has no batch_size column: batch= does not apply")
    return frame.filter(pl.col("batch_size") == batch)


def open(path: PathLike) -> Run:  # noqa: A001  # the API's name, as `k25trace.open`
    """Open a k25trace database read-only (one that ``k25trace load`` wrote)."""
    return Run(path)


@dataclass(frozen=True)
class LoadSummary:
    """What :func:`load` did: per-file results and the loader's notes."""

    db: Path
    results: list[pipeline.FileResult]
    notes: list[str]

    @property
    def failed(self) -> list[pipeline.FileResult]:
        """The files that could not be loaded (each with its reason)."""
        return [r for r in self.results if r.status == "failed"]


def load(
    paths: PathLike | Iterable[PathLike], *, db: PathLike, keep_python: bool = False, include_frontend: bool = False
) -> LoadSummary:
    """Load trace files or directories into the database ``db`` (created if missing), as ``k25trace load``."""
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    options = pipeline.LoadOptions(keep_python=keep_python, include_frontend=include_frontend)
    con = pipeline.connect(Path(db))
    try:
        results, notes = pipeline.load_paths(con, [Path(p) for p in items], options)
    finally:
        con.close()
    return LoadSummary(Path(db), results, notes)


def compare(
    a: PathLike | Run,
    b: PathLike | Run,
    *,
    a_select: Iterable[str] = (),
    b_select: Iterable[str] = (),
    phase: str = "decode",
    **options: Any,
) -> compare_core.Comparison:
    """What changed from database ``a`` to ``b`` (``k25trace compare A B``); ``a_select``/``b_select`` take the
    CLI's ``--a``/``--b`` items (``"batch=1"``, ``"level=c64"``) and may pick two parts of one database."""
    opened: dict[Path, Run] = {}  # the databases this call opened (one, when both sides are the same file)
    sides = []
    try:
        for name, side, select in (("A", a, a_select), ("B", b, b_select)):
            if isinstance(side, Run):
                run = side
            else:
                key = Path(side).resolve()
                if key not in opened:
                    opened[key] = open(side)
                run = opened[key]
            sides.append(compare_core.Side(name, run.con, str(run.path), compare_core.Selection.parse(select)))
        return compare_core.compare(sides[0], sides[1], phase=phase, **options)
    finally:
        for run in opened.values():
            run.close()
