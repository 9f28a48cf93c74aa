"""``k25trace bench``: measure floors on the local machine. ``bench allreduce``: the all-reduce floor of a trace's
message sizes (:mod:`k25trace.analysis.floor`, measured by :mod:`k25trace.analysis.floor_bench`); ``bench import``:
rows measured elsewhere.

Registered lazily by :mod:`k25trace.cli`; also ``python3 -m k25trace.bench_cli allreduce ...`` (the bench alone,
e.g. on a GPU machine that has torch and click and no DuckDB, rich or polars: the rows are then printed as JSON
lines). Results go to stdout; progress (``bench: ...``) to stderr.
"""

from __future__ import annotations

import functools
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from k25trace.analysis.floor import (
    DTYPE_BYTES,
    MAX_BURSTS,
    MAX_COUNT,
    MAX_HIDDEN,
    MAX_ITERS,
    MAX_TIMEOUT_S,
    MAX_WARMUP,
    bench_specs,
    check_memory,
    has_bench_run,
    parse_batch_sizes,
    read_rows,
    resolve_backend,
    save_rows,
    write_rows,
)
from k25trace.analysis.floor_bench import run_allreduce_bench
from k25trace.errors import K25Error
from k25trace.options import database_option, format_option, phase_option

if TYPE_CHECKING:
    import duckdb


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


command = click.Group("bench", help="Measure floors on this machine (all-reduce) and store them in a database.")

DISPLAY = (
    "backend",
    "world_size",
    "batch_size",
    "size_bytes",
    "mode",
    "count",
    "median_us",
    "p90_us",
    "burst_ms",
    "busbw_gbps",
    "kernel_median_us",
)


def _emit(rows: list[dict[str, Any]], fmt: str | None) -> None:
    shown = [{k: r[k] for k in DISPLAY} for r in rows]
    try:  # deferred: a GPU machine with torch only prints JSON lines (see the module doc)
        import polars as pl

        from k25trace.render import output
    except ImportError:
        for r in shown:
            print(json.dumps(r, default=str))
        return
    frame = pl.DataFrame(
        shown,
        schema_overrides={
            "batch_size": pl.Int64,
            "burst_ms": pl.Float64,
            "busbw_gbps": pl.Float64,
            "kernel_median_us": pl.Float64,
        },
    )
    frame = frame.with_columns(
        pl.col(c).round(3) for c in ("median_us", "p90_us", "burst_ms", "busbw_gbps", "kernel_median_us")
    )
    output.write(frame, fmt or output.default_format(), title="All-reduce floor")


def _timeout_option(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise click.BadParameter(
            f"{value} is not a usable timeout: give seconds above 0, at most {MAX_TIMEOUT_S:g} (a week)", ctx, param
        )
    return value


@command.command("allreduce")
@database_option(
    "Read the per-step all-reduce pattern from this database (unless --sizes) and store the results in "
    "it; it must exist (`k25trace load` makes one)."
)
@click.option(
    "--sizes",
    default=None,
    help="Message sizes in bytes, comma-separated (K/M/G suffixes: KiB, MiB, GiB); instead of the database's pattern.",
)
@click.option(
    "--count",
    type=click.IntRange(1, MAX_COUNT),
    default=None,
    help="All-reduces per burst (default: the database's per-step count, else 122).",
)
@click.option(
    "--batch-sizes",
    default="1,8,64",
    show_default=True,
    help="Without --db or --sizes: sizes = hidden x batch x dtype for these.",
)
@click.option(
    "--hidden",
    type=click.IntRange(1, MAX_HIDDEN),
    default=7168,
    show_default=True,
    help="Hidden size when the trace has no message sizes.",
)
@click.option(
    "--dtype",
    type=click.Choice(sorted(DTYPE_BYTES)),
    default="bf16",
    show_default=True,
    help="Element type of the all-reduced tensors (the trace's activations: bf16 for most models).",
)
@phase_option(default="decode", help="Steps whose pattern is read from --db.")
@click.option(
    "--backend",
    type=click.Choice(["auto", "nccl", "gloo"]),
    default="auto",
    show_default=True,
    help="nccl on GPUs (auto when CUDA is there), gloo on CPUs.",
)
@click.option(
    "--world-size", type=click.IntRange(min=1), default=None, help="Processes (default: all local GPUs; gloo: 2)."
)
@click.option(
    "--iters",
    type=click.IntRange(1, MAX_ITERS),
    default=200,
    show_default=True,
    help=f"Single all-reduces timed per size (1 to {MAX_ITERS:,}).",
)
@click.option(
    "--warmup",
    type=click.IntRange(0, MAX_WARMUP),
    default=20,
    show_default=True,
    help=f"Untimed all-reduces per size before the timed ones (0 to {MAX_WARMUP:,}).",
)
@click.option(
    "--bursts",
    type=click.IntRange(1, MAX_BURSTS),
    default=20,
    show_default=True,
    help=f"Bursts timed per size and mode (1 to {MAX_BURSTS:,}).",
)
@click.option("--no-graph", is_flag=True, help="Skip the CUDA-graph burst.")
@click.option(
    "--profile",
    "profile_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write a torch.profiler trace of a few bursts per size here.",
)
@click.option("--run-name", default=None, help="Name of this bench run (default: backend-ws-time-pid).")
@click.option(
    "--timeout",
    "timeout_s",
    type=float,
    default=600.0,
    show_default=True,
    callback=_timeout_option,
    help="Seconds to wait for the ranks' results, above 0 and at most a week (a rank that dies stops the "
    "bench at once).",
)
@format_option
@click.option(
    "--save-json",
    "save_json",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write every result row (all allreduce_bench columns) to this JSON file, for "
    "`k25trace bench import` on a machine with the database (the GPU machine may have no DuckDB).",
)
def allreduce(
    db_path: Path | None,
    sizes: str | None,
    count: int | None,
    batch_sizes: str,
    hidden: int,
    dtype: str,
    phase: str,
    backend: str,
    world_size: int | None,
    iters: int,
    warmup: int,
    bursts: int,
    no_graph: bool,
    profile_dir: str | None,
    run_name: str | None,
    timeout_s: float,
    fmt: str | None,
    save_json: Path | None,
) -> None:
    """Measure the all-reduce floor for a trace's message sizes: single ops, eager bursts, CUDA-graph bursts.

    \b
    Examples:
      k25trace bench allreduce --db run.duckdb                 # sizes/counts of run.duckdb's decode steps
      k25trace bench allreduce --sizes 14K,112K,896K --count 122
      k25trace bench allreduce --backend gloo --world-size 2 --db run.duckdb --iters 50
      k25trace sql --db run.duckdb --query report_allreduce_floor -p phase=decode
    """
    plan = functools.partial(
        bench_specs, sizes=sizes, count=count, batch_sizes=batch_sizes, hidden=hidden, dtype=dtype, phase=phase
    )
    if sizes is None and db_path is None:
        parse_batch_sizes(batch_sizes)  # checked before torch starts
    elif sizes is not None:
        plan(None, world_size=1)
    con = _open_source(db_path, sizes)
    try:
        backend, world_size = resolve_backend(backend, world_size)
        notes: list[str] = []
        specs = plan(con, world_size=world_size, source=str(db_path), notes=notes)
        for note in notes:
            _log(note)
    finally:
        if con is not None:
            con.close()
    check_memory(specs, backend=backend, world_size=world_size)
    if world_size == 1:
        _log(
            "note: with one rank an all-reduce moves nothing (NCCL skips it; a captured graph stays empty): "
            "this is a smoke run of the code path, not a floor"
        )
    _log(
        f"{backend}, {world_size} process(es), {len(specs)} size(s): "
        + ", ".join(f"{s['size_bytes']:,} B x {s['count']}" for s in specs)
    )
    rows = run_allreduce_bench(
        specs,
        backend=backend,
        world_size=world_size,
        dtype=dtype,
        iters=iters,
        warmup=warmup,
        bursts=bursts,
        graph=not no_graph,
        profile=profile_dir,
        timeout_s=timeout_s,
        bench_run=run_name,
        on_progress=_log,
    )
    _store_rows(rows, save_json, db_path)
    if profile_dir:
        _log(f"profiler traces in {profile_dir} (k25trace load {profile_dir} --db ...)")
    _emit(rows, fmt)


def _open_source(db_path: Path | None, sizes: str | None) -> duckdb.DuckDBPyConnection | None:
    """The database the sizes are read from, read-only (None with ``--sizes`` or without ``--db``).

    Read-only: a bench that fails (no all-reduces in the database, a dead rank) leaves the file as it was; the rows
    are written only once measured. Opened with ``--sizes`` too: a ``--db`` that is missing or not a k25trace
    database is refused before the bench starts, not after it."""
    if db_path is None:
        return None
    from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

    con = pipeline.connect(db_path, read_only=True)
    if sizes is None:
        return con
    con.close()
    return None


def _store_rows(rows: list[dict[str, Any]], save_json: Path | None, db_path: Path | None) -> None:
    """Write the measured rows to ``--save-json`` and to the database (table allreduce_bench)."""
    if save_json is not None:
        save_rows(save_json, rows)
        _log(f"{len(rows)} rows written to {save_json}")
    if db_path is None:
        return
    from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

    con = pipeline.connect(db_path)
    try:
        write_rows(con, rows)
        _log(f"{len(rows)} rows written to {db_path} (table allreduce_bench, bench_run {rows[0]['bench_run']})")
    finally:
        con.close()


@command.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@database_option("Database to add the rows to (table allreduce_bench).", required=True)
def import_rows(files: tuple[Path, ...], db_path: Path) -> None:
    """Add the rows of `bench allreduce --save-json` files (measured on another machine) to a database.

    A bench run already in the database is skipped (same bench_run name), so importing twice adds nothing.
    """
    from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

    batches = [(f, read_rows(f)) for f in files]  # every file checked before anything is written
    con = pipeline.connect(db_path)
    try:
        for f, rows in batches:
            run = rows[0]["bench_run"]
            if has_bench_run(con, run):
                _log(f"{f}: bench run {run} is already in {db_path}; skipped")
                continue
            write_rows(con, rows)
            _log(f"{f}: {len(rows)} rows of bench run {run} added to {db_path}")
    finally:
        con.close()


def main() -> None:
    """``python3 -m k25trace.bench_cli``: the bench group alone, errors as one ``error:`` line (as the CLI's)."""
    try:
        command.main(prog_name="k25trace bench")
    except K25Error as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
