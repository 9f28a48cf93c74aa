"""``k25trace html`` and ``k25trace export perfetto|parquet``: thin click wrappers over :mod:`k25trace.render.html`,
:mod:`k25trace.render.perfetto` and :mod:`k25trace.render.export` (registered lazily by :mod:`k25trace.cli`). Files
go where ``-o``/``DIR`` says (``-o -``: stdout); what was written, notes and warnings go to stderr.
"""

from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import click

from k25trace.cli import err, esc  # this module is one of the CLI's lazy commands: k25trace.cli is loaded already
from k25trace.errors import is_interrupt
from k25trace.options import (
    batch_option,
    db_option,
    match_option,
    output_option,
    phase_option,
    rank_option,
    run_option,
    side_options,
    trace_option,
)
from k25trace.vocab import ALL


def _err(message: str) -> None:
    err.print(esc(message), soft_wrap=True)


def _write(out: Path, data: bytes, inputs: list[tuple[str, str]]) -> None:
    """Write ``data`` to ``out`` (``-``: stdout) without harming the user's files (:mod:`k25trace.outputs`): never
    over an input, atomically for a regular file, through a symbolic link, streamed to a FIFO or a device."""
    from k25trace.outputs import write_output  # deferred: start-up time

    write_output(out, data, inputs=inputs)


@contextmanager
def _reading(db_path: Path, out: Path) -> Iterator[tuple[Any, list[tuple[str, str]]]]:
    """The database opened read-only for a command that writes ``out``, and the files it was loaded from (as
    :func:`_write` takes them): ``out`` is refused first when it is the database, then when it is one of those."""
    from k25trace import outputs, pipeline  # deferred: start-up time
    from k25trace.render import export

    outputs.check_not_input(out, [("the database", str(db_path))])
    con = pipeline.connect(db_path, read_only=True)
    try:
        inputs = export.input_files(con, db_path)
        outputs.check_not_input(out, inputs)
        yield con, inputs
    finally:
        con.close()


@contextmanager
def _guarded(what: str | Path) -> Iterator[None]:
    """The command's body: a DuckDB error while reading is one ``error:`` line naming ``what`` (via the CLI's
    K25Error handling); Ctrl-C and SIGTERM are one line and exit 130 / 143, after the temporary files are gone
    (every writer removes its own in ``finally``)."""
    from k25trace import db  # deferred: start-up time
    from k25trace.outputs import Terminated, terminate_raises, was_terminated

    def stop(signal_name: str, code: int) -> None:
        _err(f"error: {signal_name}: stopped, nothing was written")
        sys.exit(code)

    try:
        with terminate_raises(), db.reading(what):
            yield
    except Terminated:
        stop("terminated (SIGTERM)", 143)
    except KeyboardInterrupt:
        stop("interrupted", 130)
    except Exception as exc:
        # a signal during a DuckDB query comes out as DuckDB's interrupt (RuntimeError: Query interrupted, or
        # duckdb.InterruptException), whichever exception its handler raised
        interrupted = is_interrupt(exc)
        if was_terminated() and (interrupted or "interrupted" in str(exc).lower()):
            stop("terminated (SIGTERM)", 143)
        if interrupted:
            stop("interrupted", 130)
        raise


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


@click.command("html")
@db_option
@output_option("The HTML file to write (- for stdout).")
@phase_option("show")
@click.option(
    "--top", type=click.IntRange(1, 500), default=20, show_default=True, help="Kernels in the top-kernels table."
)
@click.option("--title", default=None, help="The page's title (default: k25trace report).")
@rank_option
@trace_option
@batch_option
@run_option
@click.option(
    "--vs",
    "vs_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Compare: the database of side B (side A is --db); the page of `k25trace compare`.",
)
@side_options("Compare: ")
@match_option("Compare: ")
def html_command(
    db_path: Path,
    out: Path,
    phase: str | None,
    top: int,
    title: str | None,
    rank: int | None,
    trace_id: int | None,
    batch_size: int | None,
    run: str | None,
    vs_path: Path | None,
    select_a: tuple[str, ...],
    select_b: tuple[str, ...],
    match: str,
) -> None:
    """Write the report as one self-contained HTML page with charts (opens offline; share it as a file).

    Per run and batch size: ms/step by category (with overlap and idle), decode step time and throughput vs
    batch size (TPOT and tok/s of capture levels), collectives across ranks (transfer vs wait, the straggler),
    why the GPU is idle, the step-time distribution, one representative step on every rank on an aligned
    clock (a Gantt chart by category), the time per layer (stacked by category, slow layers flagged, the rank
    late at each layer's collectives), and the top kernels.

    --rank, --trace, --batch and --run choose the steps, as for `report`; the findings, the collectives and the
    layers' late ranks stay across all ranks of each run (the page says so).

    With --vs B.duckdb and/or --a/--b selections, the page of a comparison instead (`k25trace compare`): the
    verdict, each step group's categories A beside B and the change per category with its 95 % interval, the
    step time, collectives, kernels and capture figures, each with its verdict.

    \b
    Examples:
      k25trace html --db run.duckdb -o report.html
      k25trace html --db run.duckdb --rank 0 --batch 8 -o rank0-bs8.html
      k25trace html --db before.duckdb --vs after.duckdb -o compare.html
      k25trace html --db cap.duckdb --a level=c1 --b level=c64 -o levels.html
    """
    from k25trace.render import html  # deferred: start-up time (`export --help` needs no HTML)

    started = time.perf_counter()
    if vs_path is not None or select_a or select_b:
        for option, value in (("--rank", rank), ("--trace", trace_id), ("--batch", batch_size), ("--run", run)):
            if value is not None:
                raise click.UsageError(f"{option} chooses the steps of the report page; a comparison takes --a/--b")
        with _guarded(db_path if vs_path is None else f"{db_path} or {vs_path}"):
            _html_comparison(db_path, vs_path, select_a, select_b, match, phase or "decode", out, title, started)
        return
    with _guarded(db_path):
        with _reading(db_path, out) as (con, inputs):
            filters = _check_steps(con, phase, rank=rank, trace_id=trace_id, batch_size=batch_size, run=run)
            page, data = html.build(con, source=db_path.name, phase=phase, top=top, title=title, filters=filters)
        for note in data.notes:
            _err(f"note: {note}")
        encoded = page.encode("utf-8", "surrogateescape")
        _write(out, encoded, inputs)
    if str(out) != "-":
        runs = data.batch["run_id"].n_unique() if not data.batch.is_empty() else 0
        _err(
            f"wrote {out}: {_size(len(encoded))}, {runs}"
            f" run(s), {len(data.timelines)} step timeline(s), in {time.perf_counter() - started:.1f} s"
        )


def _check_steps(
    con: Any, phase: str | None, *, rank: int | None, trace_id: int | None, batch_size: int | None, run: str | None
) -> Any:
    """The page's filters (``page_data.PageFilters``), or a K25Error saying what the database holds when ``phase``
    (None: as the report resolves it) and the filters select no step with GPU work, before anything is written (a
    page of "0 runs" is not worth a file); a database without traces still gets its page, which says so, unless a
    filter was given."""
    from k25trace.analysis import page_data, report  # deferred: start-up time

    given = any(v is not None for v in (rank, trace_id, batch_size, run))
    if report.summary(con).is_empty() and not given:
        return page_data.PageFilters()
    resolved, _ = report.resolve_phase(con, phase)
    run_id = report.resolve_run(con, run)
    report.check_filters(con, phase=resolved, rank=rank, trace_id=trace_id, batch_size=batch_size, run_id=run_id)
    return page_data.PageFilters(rank=rank, trace_id=trace_id, batch_size=batch_size, run_id=run_id)


def _html_comparison(
    db_path: Path,
    vs_path: Path | None,
    select_a: tuple[str, ...],
    select_b: tuple[str, ...],
    match: str,
    phase: str,
    out: Path,
    title: str | None,
    started: float,
) -> None:
    from k25trace import outputs, pipeline
    from k25trace.analysis import compare
    from k25trace.render import export, html  # deferred: start-up time

    outputs.check_not_input(
        out,
        [("the database (A)", str(db_path))]
        + ([("the database (B, --vs)", str(vs_path))] if vs_path is not None else []),
    )
    con_a = pipeline.connect(db_path, read_only=True)
    con_b = con_a
    try:
        same = vs_path is None or outputs.same_file(vs_path, db_path)
        con_b = con_a if same else pipeline.connect(vs_path, read_only=True)
        inputs = export.input_files(con_a, db_path, "A")
        if con_b is not con_a and vs_path is not None:
            inputs += export.input_files(con_b, vs_path, "B")
        outputs.check_not_input(out, inputs)
        a = compare.Side("A", con_a, str(db_path), compare.Selection.parse(select_a))
        b = compare.Side("B", con_b, str(vs_path or db_path), compare.Selection.parse(select_b))
        result = compare.compare(a, b, phase=phase, match=match)
    finally:
        con_a.close()
        if con_b is not con_a:
            con_b.close()
    for note in result.notes:
        _err(f"note: {note}")
    encoded = html.render_comparison(result, title).encode("utf-8", "surrogateescape")
    _write(out, encoded, inputs)
    if str(out) != "-":
        _err(f"wrote {out}: {_size(len(encoded))}, {result.verdict}, in {time.perf_counter() - started:.1f} s")


@click.group("export")
def export_command() -> None:
    """Take the data elsewhere: a Perfetto/Chrome trace of chosen steps, or the tables as Parquet."""


@export_command.command("perfetto")
@db_option
@output_option("The JSON trace to write (- for stdout; a name ending in .gz is gzipped).")
@click.option(
    "--run",
    default=None,
    help="The run: its id, its label as reports print it (e.g. 'graph (TP2)'), or a "
    "part of its id (default: the only run with steps).",
)
@click.option(
    "--steps",
    default=None,
    help="Step indexes, e.g. 3,4 or 10-12, or 'all' (default: one representative "
    "step per batch size: the one nearest the median wall time).",
)
@click.option("--batch", type=int, default=None, help="Only steps of this batch size (alone: its representative step).")
@click.option("--rank", "ranks", default=None, help="Ranks to include, e.g. 0,1 (default: all).")
@click.option(
    "--details",
    is_flag=True,
    help="Also each activity's full demangled name (often KBs), raw start, "
    "correlation, registers, shared memory, occupancy, NCCL args (larger).",
)
def perfetto_command(
    db_path: Path, out: Path, run: str | None, steps: str | None, batch: int | None, ranks: str | None, details: bool
) -> None:
    """Write a trimmed Chrome trace (JSON) of chosen steps on every chosen rank, clocks aligned.

    One process per rank, one track per GPU stream plus the step markers; timestamps moved onto the reference
    rank's clock with the offsets k25trace computed from paired collectives; each activity's category in `cat`
    and args (and as a cname colour for chrome://tracing); each paired collective carries its transfer/wait
    split, and its wait is a nested 'wait for rank N' slice. Open it in ui.perfetto.dev or chrome://tracing.

    \b
    Examples:
      k25trace export perfetto --db run.duckdb -o steps.json                  # a representative step per batch size
      k25trace export perfetto --db run.duckdb --batch 8 --steps 9,10 --rank 0,1 -o bs8.json
    """
    import orjson

    from k25trace.analysis import report
    from k25trace.render import perfetto  # deferred: start-up time

    started = time.perf_counter()
    with _guarded(db_path):
        with _reading(db_path, out) as (con, inputs):
            report.check_filters(con, phase=ALL)  # no traces, or no step with GPU work: say what the database holds
            run_id = perfetto.resolve_run(con, run)
            if steps is None:  # a batch size the run lacks: name those it has
                report.check_filters(con, phase=ALL, batch_size=batch, run_id=run_id)
            chosen = perfetto.select_steps(con, run_id, steps, batch)
            rank_list = perfetto.parse_int_list(ranks, "--rank")
            result = perfetto.perfetto_trace(con, run_id, chosen, rank_list, details=details, source=db_path.name)
            label = report.run_labels(con).get(run_id, run_id)
        data = result.to_json()
        problems = perfetto.check_chrome_trace(orjson.loads(data))  # the file as a viewer will parse it
        if problems:  # never expected: the exporter builds what the check asks for
            raise click.ClickException("the trace failed its own validity check: " + "; ".join(problems[:5]))
        if out.name.endswith(".gz"):  # both viewers open gzipped JSON traces
            import gzip

            data = gzip.compress(data, compresslevel=6, mtime=0)
        _write(out, data, inputs)
    for note in result.notes:
        _err(f"note: {note}")
    offsets = ", ".join(f"rank {r} {ns:+,} ns" for r, ns in result.offsets_ns.items())
    _err(
        f"wrote {out}: {_size(len(data))}, run {label}, step(s) {perfetto.ranges_text(result.steps)}, rank(s) "
        f"{', '.join(map(str, result.ranks))}: {result.activities:,} GPU activities, {result.waits:,} collective "
        f"waits, {result.markers} step markers; clock offsets {offsets}; in {time.perf_counter() - started:.1f} s"
    )


@export_command.command("parquet")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@db_option
@click.option("--overwrite", is_flag=True, help="Replace tables already exported into DIR.")
def parquet_command(out_dir: Path, db_path: Path, overwrite: bool) -> None:
    """Write every table of the database as Parquet into DIR: per-event and per-step tables partitioned by run and
    rank (TABLE/run=…/rank=…/), the others one file each, plus run_keys.parquet and manifest.json.

    \b
    Example:
      k25trace export parquet out/ --db run.duckdb
      duckdb -c "select run, rank, category, sum(dur_ns)/1e6 as ms
                 from read_parquet('out/gpu_events/**/*.parquet', hive_partitioning=true) group by all"
    """
    from k25trace import pipeline
    from k25trace.render import export  # deferred: start-up time

    started = time.perf_counter()
    with _guarded(db_path):
        con = pipeline.connect(db_path, read_only=True)
        try:
            inputs = tuple(export.input_files(con, db_path))
            done = export.export_parquet(con, out_dir, overwrite=overwrite, source=str(db_path), inputs=inputs)
        finally:
            con.close()
    total = sum(
        f.stat().st_size
        for t in done
        for f in ([out_dir / t.path] if not t.partitioned_by else (out_dir / t.path).rglob("*.parquet"))
        if f.is_file()
    )
    _err(
        f"wrote {len(done)} tables ({sum(t.rows for t in done):,} rows, {_size(total)}) to {out_dir} in "
        f"{time.perf_counter() - started:.1f} s"
    )
