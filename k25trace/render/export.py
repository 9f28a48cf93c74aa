"""``k25trace export``: take the data elsewhere.

- :func:`export_parquet`: the database's tables as Parquet, the per-trace ones partitioned hive-style by run and
  rank (``gpu_events/run=graph_TP2/rank=0/…``), readable by DuckDB, polars, pandas/pyarrow and Spark.
- :func:`input_files`: the files a command reading a database must never write over.
- the Perfetto/Chrome trace of chosen steps is :mod:`k25trace.render.perfetto` (its names used by the tests are
  re-exported here).

Every query is a named one (``queries/export_*.sql``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace import __version__
from k25trace.analysis import report
from k25trace.db import get_query, query_frame, run_query
from k25trace.errors import K25Error
from k25trace.outputs import check_not_input, check_output_dir, terminate_raises
from k25trace.render.perfetto import CATEGORY_CNAME as CATEGORY_CNAME  # re-exported: the tests' one import
from k25trace.render.perfetto import CNAME_RGB as CNAME_RGB
from k25trace.render.perfetto import STEP_CNAME as STEP_CNAME
from k25trace.render.perfetto import WAIT_CNAME as WAIT_CNAME
from k25trace.render.perfetto import _Lanes as _Lanes
from k25trace.render.perfetto import check_chrome_trace as check_chrome_trace

# ---------------------------------------------------------------------------------------------- inputs


def input_files(con: duckdb.DuckDBPyConnection, db_path: Path | str, side: str = "") -> list[tuple[str, str]]:
    """The files a command reading this database must never write over, as (what, path) pairs: the database
    itself, every trace file it holds (``traces.path``), the manifest of each capture directory and the model
    config it was loaded with (``meta.model_config_source``)."""
    base = f"database {side}" if side else "the database"
    out = [(base, str(db_path))]
    for path, capture_dir in run_query(con, "trace_paths").fetchall():
        if path:
            out.append((f"a trace file loaded in {base}", str(path)))
        if capture_dir:
            out.append((f"a capture manifest loaded in {base}", str(Path(capture_dir) / "manifest.json")))
    for _key, value in query_frame(con, "meta_get", {"prefix": "model_config_source"}).iter_rows():
        if value:
            out.append((f"the model config loaded in {base}", str(value)))
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------------------------------------- parquet

PARTITIONED_TABLES = (
    "gpu_events",
    "launches",
    "annotations",
    "cpu_ops",
    "python_functions",
    "steps",
    "step_categories",
    "gpu_gaps",
    "collectives",
)
"""Tables written as ``TABLE/run=…/rank=…/*.parquet`` (one row per event or step: the big ones); every other table
is one ``TABLE.parquet`` file."""


@dataclass
class TableExport:
    table: str
    rows: int
    path: str  # relative to the export directory
    partitioned_by: list[str]


def run_keys(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """trace_id → run (a file-name-safe key from the run's label, unique per run_id) and run_id."""
    frame = query_frame(con, "export_run_keys")
    labels = report.run_labels(con)
    keys: dict[str, str] = {}
    used: set[str] = set()
    for run_id in sorted({r for r in frame["run_id"].to_list() if r is not None}):
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", labels.get(run_id, run_id)).strip("_.") or "run"
        key, k = base, 2
        while key in used:
            key, k = f"{base}_{k}", k + 1
        used.add(key)
        keys[run_id] = key
    frontend = "frontend" if "frontend" not in used else "frontend_traces"
    return frame.with_columns(
        pl.col("run_id").replace_strict(keys, default=None, return_dtype=pl.String).fill_null(frontend).alias("run")
    ).select(["trace_id", "run", "run_id"])


MANIFEST = "manifest.json"
"""Written last into every export: the tables, their rows and layout, and ``files``: every file the export wrote
(relative paths), which is how a later ``--overwrite`` knows what it may replace."""

_LAYOUT_RE = re.compile(r"(run=[^/]+/rank=[^/]+/data_\d+\.parquet|empty\.parquet)")
"""The files of a partitioned table as k25trace writes them (for a manifest of a version without ``files``)."""

_TMP_RE = re.compile(r"\.k25trace-export-(\d+)-")


def export_parquet(
    con: duckdb.DuckDBPyConnection,
    out_dir: Path,
    *,
    overwrite: bool = False,
    source: str = "",
    inputs: tuple[tuple[str, str], ...] = (),
) -> list[TableExport]:
    """Write every table of the database under ``out_dir`` (see :data:`PARTITIONED_TABLES`), plus
    ``run_keys.parquet`` (trace_id, run, run_id) and ``manifest.json``. Written into a temporary folder inside
    ``out_dir`` and moved into place at the end; the temporary folder is removed on every exit path (an error,
    Ctrl-C, SIGTERM). An existing table there is an error unless ``overwrite``, and even then only what an earlier
    k25trace export wrote (listed in its ``manifest.json``) is replaced: a file or folder k25trace did not write,
    or a file of the user's inside a table folder, is refused, never deleted. ``inputs``: (what, path) pairs
    that no output may be (the database)."""
    tables = query_frame(con, "export_tables")
    check_output_dir(out_dir)
    targets = []
    for r in tables.iter_rows(named=True):
        partitioned = r["table_name"] in PARTITIONED_TABLES and r["has_trace_id"] and r["has_rank"]
        targets.append((r["table_name"], partitioned, r["table_name"] if partitioned else f"{r['table_name']}.parquet"))
    ours = [t[2] for t in targets] + ["run_keys.parquet", MANIFEST]
    for name in ours:
        check_not_input(out_dir / name, inputs, option="export parquet")
    present = [name for name in ours if os.path.lexists(out_dir / name)]
    if present and not overwrite:
        raise K25Error(
            f"{out_dir}: already holds {', '.join(present[:5])}{' …' if len(present) > 5 else ''} "
            "(--overwrite replaces them)"
        )
    if present:
        _check_replaceable(out_dir, present)
    _remove_stale_temporaries(out_dir)
    with terminate_raises():
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f".k25trace-export-{os.getpid()}-", dir=out_dir))
        except OSError as exc:
            raise K25Error(f"{out_dir}: cannot write into the folder: {exc.strerror or exc}") from None
        try:
            done, keys = _write_tables(con, tmp, targets)
            files = sorted(str(f.relative_to(tmp)) for f in tmp.rglob("*") if f.is_file()) + [MANIFEST]
            manifest = {
                "generator": f"k25trace {__version__}",
                "source": source,
                "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "tables": {t.table: {"rows": t.rows, "path": t.path, "partitioned_by": t.partitioned_by} for t in done},
                "runs": dict(
                    sorted({(r["run"], r["run_id"]) for r in keys.iter_rows(named=True)}, key=lambda kv: kv[0])
                ),
                "read_with": {
                    "duckdb": "select * from read_parquet('DIR/gpu_events/**/*.parquet', hive_partitioning=true)",
                    "polars": "pl.read_parquet('DIR/gpu_events/')",
                    "pandas": "pd.read_parquet('DIR/gpu_events')",
                    "spark": "spark.read.parquet('DIR/gpu_events')",
                },
                "files": files,
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str) + "\n", encoding="utf-8")
            for name in ours:  # the manifest last: it names what is there
                target = out_dir / name
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif os.path.lexists(target):
                    target.unlink()
                os.replace(tmp / name, target)
        except OSError as exc:
            raise K25Error(
                f"{out_dir}: cannot write the export: {exc.strerror or exc}"
                + (f" ({exc.filename})" if exc.filename else "")
            ) from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return done


def _write_tables(
    con: duckdb.DuckDBPyConnection, tmp: Path, targets: list[tuple[str, bool, str]]
) -> tuple[list[TableExport], pl.DataFrame]:
    done: list[TableExport] = []
    keys = run_keys(con)
    con.register("_export_run_keys", keys.to_arrow())
    try:
        for table, partitioned, name in targets:
            if partitioned:
                rel = _relation(con, "export_table_by_run", table)
                rows = _count(con, table)
                if rows:
                    rel.to_parquet(str(tmp / name), partition_by=["run", "rank"])
                else:  # no partition to write: one empty file keeps the columns (and the folder readable)
                    (tmp / name).mkdir()
                    rel.to_parquet(str(tmp / name / "empty.parquet"))
                done.append(TableExport(table, rows, name + "/", ["run", "rank"]))
            else:
                rel = _relation(con, "export_table", table)
                rows = _count(con, table)
                rel.to_parquet(str(tmp / name))
                done.append(TableExport(table, rows, name, []))
        keys.write_parquet(tmp / "run_keys.parquet")
    finally:
        con.unregister("_export_run_keys")
    return done, keys


def _previous_manifest(out_dir: Path) -> dict[str, Any] | None:
    """The manifest of an earlier k25trace export in ``out_dir`` (None: there is none, or it is not k25trace's)."""
    path = out_dir / MANIFEST
    if path.is_symlink() or not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or not str(manifest.get("generator", "")).startswith("k25trace"):
        return None
    return manifest


def _check_replaceable(out_dir: Path, present: list[str]) -> None:
    """Refuse ``--overwrite`` over anything an earlier k25trace export did not write."""
    previous = _previous_manifest(out_dir)
    if previous is None:
        raise K25Error(
            f"{out_dir}: {', '.join(present[:5])} {'is' if len(present) == 1 else 'are'} not from a "
            f"k25trace export (no k25trace {MANIFEST} there lists {'it' if len(present) == 1 else 'them'}): "
            "refusing to replace what k25trace did not write; export into another folder"
        )
    tables = previous.get("tables")
    if not isinstance(tables, dict):
        tables = {}
    recorded = {str(t.get("path", "")).rstrip("/") for t in tables.values() if isinstance(t, dict)}
    recorded |= {"run_keys.parquet", MANIFEST}
    files = previous.get("files")
    written = {str(f) for f in files} if isinstance(files, list) else None
    for name in present:
        target = out_dir / name
        if target.is_symlink():
            raise K25Error(f"{target}: a symbolic link, not written by k25trace: refusing to replace it")
        if name not in recorded:
            raise K25Error(
                f"{target}: not listed in {out_dir / MANIFEST} (not written by k25trace): refusing to replace it"
            )
        if target.is_dir():
            foreign = []
            for root, dirs, names in os.walk(target):
                for entry in names + [d for d in dirs if (Path(root) / d).is_symlink()]:
                    rel = str((Path(root) / entry).relative_to(out_dir))
                    inner = str((Path(root) / entry).relative_to(target))
                    ours = rel in written if written is not None else bool(_LAYOUT_RE.fullmatch(inner))
                    if not ours or (Path(root) / entry).is_symlink():
                        foreign.append(rel)
            if foreign:
                raise K25Error(
                    f"{target}: holds {len(foreign)} file(s) k25trace did not write "
                    f"({', '.join(sorted(foreign)[:3])}{' …' if len(foreign) > 3 else ''}): refusing to "
                    "replace the folder; move them away or export into another folder"
                )


def _remove_stale_temporaries(out_dir: Path) -> None:
    """Temporary folders of exports killed outright (SIGKILL, a crash): those whose process is gone."""
    try:
        entries = list(out_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        m = _TMP_RE.match(entry.name)
        if not m or not entry.is_dir() or entry.is_symlink() or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(entry, ignore_errors=True)
        except OSError:
            pass


WIDE_INTEGERS = ("HUGEINT", "UHUGEINT")
"""128-bit integers: Parquet has none and DuckDB would write them as DOUBLE (inexact); they go as DECIMAL(38, 0)."""


def _relation(con: duckdb.DuckDBPyConnection, query: str, table: str) -> duckdb.DuckDBPyRelation:
    """A named query over one table as a relation, not yet run (so DuckDB streams it into the Parquet writer), with
    128-bit integer columns (e.g. a summed ``caused_wait_ns``) cast to an exact Parquet type."""
    rel = con.sql(get_query(query).sql, params={"table": table})
    if not any(str(t).upper() in WIDE_INTEGERS for t in rel.types):
        return rel

    def quote(name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    return rel.project(
        ", ".join(
            f"CAST({quote(n)} AS DECIMAL(38, 0)) AS {quote(n)}" if str(t).upper() in WIDE_INTEGERS else quote(n)
            for n, t in zip(rel.columns, rel.types, strict=True)
        )
    )


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    return int(query_frame(con, "export_table_rows", {"table": table})["rows"][0])
