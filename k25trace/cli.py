"""The ``k25trace`` command line: thin wrappers over the headless core (no query logic here).

stdout carries only data (tables, CSV, JSON); progress, warnings and errors go to stderr.

Start-up time is kept low on purpose: at import this module loads only click, rich's console and the vocabulary.
Each command imports the core modules it needs (DuckDB, polars, msgspec, …) inside its body, and the commands
that live in other modules are registered by name (``LAZY_COMMANDS``). Those deferred imports are marked
"deferred: start-up time"; they are the only function-level imports of this module.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape as esc

from k25trace import __version__
from k25trace.errors import K25Error
from k25trace.vocab import ALL, COMPARE_MATCHES, COMPARE_TABLES, FORMATS, PHASES, VIEW_HELP, VIEWS

err = Console(stderr=True, highlight=False)

MAX_CONTEXT = 1 << 24
"""The largest --context taken (16,777,216 tokens per request; the longest public context window is 10 M)."""

db_option = click.option(
    "--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="The k25trace DuckDB database file.",
)
format_option = click.option(
    "--format", "fmt", type=click.Choice(FORMATS), default=None,
    help="Output format (default: table on a terminal, csv otherwise).",
)


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {esc(message)}", soft_wrap=True)
    sys.exit(1)


# Commands whose modules live beside the core; imported only when used (or listed by --help), so that
# `k25trace load` does not pay for httpx/asyncio (capture) at start-up.
LAZY_COMMANDS = {
    "capture": ("k25trace.capture.cli", "capture_command"),
    "synth": ("k25trace.synth", "command"),
    "bench": ("k25trace.analysis.floor", "command"),
    "html": ("k25trace.share_cli", "html_command"),
    "export": ("k25trace.share_cli", "export_command"),
}


class _Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS and name not in self.commands:
            import importlib

            module, attr = LAZY_COMMANDS[name]
            try:
                command = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:  # a partial installation: the command is simply absent
                if exc.name and module.startswith(exc.name):
                    return None
                raise
            self.add_command(command, name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except K25Error as exc:
            _fail(str(exc))
        except KeyboardInterrupt as exc:  # a command without its own handler (e.g. compare loading a trace side)
            _interrupted("stopped before it finished", exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="k25trace")
def cli() -> None:
    """Where does the time of a large-model decode step go?

    vLLM torch-profiler traces -> DuckDB -> per-step breakdown (AllReduce, Marlin GEMM, attention, …, idle).

    \b
    Typical session:
      k25trace load traces/ --db run.duckdb
      k25trace report --db run.duckdb
      k25trace report --db run.duckdb --by kernel --top 15
      k25trace sql --db run.duckdb "select phase, count(*) from steps group by all"
      k25trace tui --db run.duckdb
    """


# --------------------------------------------------------------------------------------------------------- load


class _Progress:
    """Rich progress on stderr: files done and compressed bytes read."""

    def __init__(self, files: list[Any], quiet: bool) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TransferSpeedColumn,
        )

        from k25trace.ingest import file_size  # deferred: start-up time

        self.quiet = quiet or not files
        total = sum(file_size(f.path) for f in files)
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeElapsedColumn(),
            console=err, transient=False, disable=self.quiet,
        )
        self.nfiles = len(files)
        self.done = 0
        self.task = self.progress.add_task(f"loading {self.nfiles} file(s)", total=total)
        if not self.quiet:
            self.progress.start()

    def start_file(self, tf: Any) -> None:
        self.done += 1
        self.progress.update(self.task, description=f"[{self.done}/{self.nfiles}] {tf.path.name[:60]}")

    def advance(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def close(self) -> None:
        self.progress.stop()


def run_load(db_path: Path | None, paths: list[Path], *, keep_python: bool = False, include_frontend: bool = False,
             quiet: bool = False, con: Any = None) -> tuple[Any, int]:
    """Load paths into a database, reporting each file on stderr; returns (connection, number of failures)."""
    from k25trace.ingest import LoadOptions, start_workers  # deferred: start-up time (both light)

    options = LoadOptions(keep_python=keep_python, include_frontend=include_frontend)
    early = start_workers(paths, options)  # decode processes boot while this process imports DuckDB and the rest
    try:
        return _load(db_path, paths, options, quiet, con, early)
    finally:
        if early is not None:
            early.close()  # already closed by the load, unless it failed before it started


def _load(db_path: Path | None, paths: list[Path], options: Any, quiet: bool, con: Any, early: Any) -> tuple[Any, int]:
    from k25trace import pipeline  # deferred: start-up time
    from k25trace.ingest import pyarrow_skips_pandas

    pyarrow_skips_pandas()  # this process is ours: pyarrow need not import pandas to ask whether it exists
    con = con or pipeline.connect(db_path)

    def on_result(r: pipeline.FileResult) -> None:
        for warning in r.warnings:
            err.print(f"[yellow]warning:[/] {esc(warning)}", soft_wrap=True)
        if r.status == "failed":
            err.print(f"[bold red]error:[/] {esc(r.message)}", soft_wrap=True)
        elif r.status == "skipped":
            err.print(f"[dim]skipped:[/] {esc(r.message)}", soft_wrap=True)
        elif not quiet:
            err.print(f"loaded {esc(r.path)}: rank {r.rank}, {r.events:,} events, {r.gpu_events:,} GPU activities "
                      f"in {r.seconds:.1f} s (trace {r.trace_id})", soft_wrap=True)

    results, notes = pipeline.load_paths(
        con, paths, options, on_result=on_result, progress_factory=lambda files: _Progress(files, quiet),
        workers=early,
    )
    for note in notes:
        err.print(f"[dim]note:[/] {esc(note)}", soft_wrap=True)
    loaded_ids = {r.trace_id for r in results if r.status == "loaded"}
    if loaded_ids:  # said at load time: far timestamps of the files just loaded, sessions that share a rank
        from k25trace.analysis import report  # deferred: start-up time

        for line in [*report.far_activity_warnings(con, loaded_ids), *report.run_warnings(con)]:
            err.print(f"[yellow]warning:[/] {esc(line)}", soft_wrap=True)
    failed = sum(r.status == "failed" for r in results)
    loaded = sum(r.status == "loaded" for r in results)
    if not quiet:
        err.print(f"{loaded} loaded, {sum(r.status == 'skipped' for r in results)} already there, {failed} failed")
    return con, failed


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@click.option("--keep-python", is_flag=True, help="Also keep python_function events (50-90 % of a default trace).")
@click.option("--include-frontend", is_flag=True,
              help="Also load front-end (*.async_llm.*) CPU-only traces found in directories.")
@click.option("-q", "--quiet", is_flag=True,
              help="No progress or per-file lines; errors and warnings still go to stderr.")
@click.option("--model-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="The traced model's Hugging Face config.json, kept in the database for `report --by sol`.")
def load(paths: tuple[Path, ...], db_path: Path, keep_python: bool, include_frontend: bool, quiet: bool,
         model_config: Path | None) -> None:
    """Load Kineto trace files or directories (or a `k25trace capture` directory) into a database.

    Directories are searched for *.pt.trace.json[.gz]; other .json[.gz] files load when named. Loading the same
    file again is a no-op. A bad file gets a one-line error; the good ones are still loaded; exit status 1 if
    any file failed.

    \b
    Example:
      k25trace load /tmp/vllm_profile --db run.duckdb
    """
    from k25trace import models  # deferred: start-up time

    if model_config is not None:
        models.load_config(model_config)  # a config the bound cannot read is refused before anything is loaded
    if not any(p.exists() for p in paths):  # nothing to load: the database is not opened (opening it writes it)
        for p in paths:
            err.print(f"[bold red]error:[/] {esc(str(p))}: no such file or directory", soft_wrap=True)
        if not quiet:
            err.print(f"0 loaded, 0 already there, {len(paths)} failed")
        sys.exit(1)
    try:
        con, failed = run_load(db_path, list(paths), keep_python=keep_python, include_frontend=include_frontend,
                               quiet=quiet)
    except BaseException as exc:  # Ctrl-C (SIGTERM: pipeline.Stopped): the file being loaded was rolled back
        if not _is_interrupt(exc):
            raise
        _interrupted("the file being loaded was rolled back; the files loaded before it are kept (with their "
                     "cross-rank tables): run the same command again to load the rest", exc)
    if model_config is not None:
        models.store_config(con, model_config)
        err.print(esc(f"model config {model_config} kept in {db_path} (report --by sol uses it)"), soft_wrap=True)
    con.close()
    if failed:
        sys.exit(1)


# ---------------------------------------------------------------------------------------------------------- sql


@cli.command()
@click.argument("query", required=False)
@db_option
@click.option("-f", "--file", "sql_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Read the SQL from a file.")
@click.option("--query", "-q", "query_name", help="Run a named query from queries/ (see --list).")
@click.option("--param", "-p", "params", multiple=True,
              help="name=value parameter: $name in the SQL or a named query (repeatable; null for NULL).")
@click.option("--list", "list_queries", is_flag=True, help="List the named queries with their parameters.")
@format_option
def sql(query: str | None, db_path: Path, sql_file: Path | None, query_name: str | None, params: tuple[str, ...],
        list_queries: bool, fmt: str | None) -> None:
    """Run SQL against a database: a query argument, -f FILE, - for stdin, or --query NAME.

    \b
    Examples:
      k25trace sql --db run.duckdb "select category, sum(dur_ns)/1e6 ms from kernels group by all order by ms desc"
      k25trace sql --db run.duckdb --query report_kernels -p phase=decode -p rank=null -p trace_id=null -p top=10
      echo "select * from steps limit 5" | k25trace sql --db run.duckdb - --format csv
    """
    import polars as pl  # deferred: start-up time

    from k25trace import db, pipeline
    from k25trace.render import output  # deferred: start-up time

    if list_queries:
        rows = [
            {"name": q.name, "params": ", ".join("$" + p for p in q.params), "creates": q.creates, "grain": q.grain,
             "summary": q.summary}
            for q in db.named_queries().values()
        ]
        output.write(pl.DataFrame(rows), fmt or output.default_format())
        return
    fmt = fmt or output.default_format()
    bound = dict(db.parse_param(item) for item in params)
    if not query_name:
        if sql_file:
            text = _read_utf8(sql_file.read_bytes, f"{sql_file}")
        elif query == "-":
            text = _read_utf8(sys.stdin.buffer.read, "stdin")
        elif query:
            text = _read_utf8(lambda: query.encode("utf-8", "surrogateescape"), "the query argument")
        else:
            raise K25Error("give a query, -f FILE, - (stdin) or --query NAME")
    con = pipeline.connect(db_path, read_only=True)
    if query_name:
        db.forbid_external_access(con)  # read-only means no file written (or read) either: see README
        cursor = db.run_query(con, query_name, bound)
        if cursor.description is not None:
            output.write(db.fetch_frame(cursor), fmt)
        return
    try:
        result = db.run_sql(con, text, bound, as_json=fmt == "json")
    except BaseException as exc:  # Ctrl-C: KeyboardInterrupt, or DuckDB's interrupt (run_sql leaves those as they are)
        if _is_interrupt(exc):
            _interrupted("the query was stopped (Ctrl-C)")
        raise
    if result is not None:
        output.write_result(result, fmt)


def _read_utf8(read: Any, source: str) -> str:
    """The SQL text from ``read()`` (bytes); a clear error, not a traceback, when it is not UTF-8."""
    try:
        data = read()
    except OSError as exc:
        raise K25Error(f"{source}: cannot read: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise K25Error(f"{source}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}); "
                       "save it as UTF-8") from exc


# ------------------------------------------------------------------------------------------------------- report


@cli.command()
@db_option
@click.option("--phase", type=click.Choice(PHASES), default=None,
              help="Steps to report (default: decode; when no trace has step markers, the inferred steps).")
@click.option("--by", "by", type=click.Choice(VIEWS), default="batch", show_default=True,
              help="; ".join(f"{view}: {what}" for view, what in VIEW_HELP.items()) + ".")
@click.option("--peaks", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Device peaks CSV (columns of queries/device_peaks.csv), tried before the built-in peaks.")
@click.option("--model-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="--by sol: the Hugging Face config.json of the traced model.")
@click.option("--quant", default=None,
              help="--by sol: weight/KV storage over the config's, e.g. experts=w4a16-g32,kv=fp8.")
@click.option("--context", type=click.IntRange(min=0, max=MAX_CONTEXT), default=None,
              help="--by sol: tokens in each request's KV cache (the context length read per step).")
@click.option("--rank", type=int, default=None, help="Only this rank (default: all ranks).")
@click.option("--trace", "trace_id", type=int, default=None, help="Only this trace_id.")
@click.option("--top", type=click.IntRange(min=1), default=None,
              help="Rows to list with --by kernel, and per group with --by roofline (default 20).")
@format_option
def report(db_path: Path, phase: str, by: str, peaks: Path | None, model_config: Path | None, quant: str | None,
           context: int | None, rank: int | None, trace_id: int | None, top: int, fmt: str | None) -> None:
    """Print where the time of a step goes (default: decode steps, grouped by batch size).

    ms/step and % are exclusive GPU time (only that category running); with the 'overlap' and 'idle' rows they
    add up to the step's wall time. kernel ms/step sums kernel durations (overlaps counted twice).

    \b
    Examples:
      k25trace report --db run.duckdb
      k25trace report --db run.duckdb --by kernel --top 15 --rank 0
      k25trace report --db run.duckdb --by step --phase all --format csv
    """
    from k25trace import pipeline
    from k25trace.analysis import report as core
    from k25trace.render import output  # deferred: start-up time

    for option, value, views in (("--model-config", model_config, ("sol",)), ("--quant", quant, ("sol",)),
                                 ("--context", context, ("sol",)), ("--peaks", peaks, core.SOL_VIEWS),
                                 ("--top", top, ("kernel", "roofline"))):
        if value is not None and by not in views:
            raise K25Error(f"--by {by} does not take {option} (only --by {' / '.join(views)})")
    core.refuse_filters(by, rank=rank, trace_id=trace_id)
    con = pipeline.connect(db_path, read_only=True)
    filtered = rank is not None or trace_id is not None or phase is not None
    phase, note = core.resolve_phase(con, phase)
    core.check_filters(con, phase=phase, rank=rank, trace_id=trace_id)
    if note:
        err.print(f"note: {esc(note)}", soft_wrap=True)
    for line in core.run_warnings(con):
        err.print(f"warning: {esc(line)}", soft_wrap=True)
    if by in core.SOL_VIEWS:
        from k25trace.analysis import sol  # deferred: start-up time (the speed-of-light model)

        if by == "roofline":
            frame = sol.roofline(con, phase=phase, rank=rank, trace_id=trace_id, top=20 if top is None else top,
                                 peaks_file=peaks)
        else:
            notes: list[str] = []
            frame = sol.step_sol(con, model_config=model_config, quant=quant, context=context, phase=phase,
                                 rank=rank, trace_id=trace_id, peaks_file=peaks, notes=notes)
            for line in notes:
                err.print(f"[yellow]warning:[/] {esc(line)}", soft_wrap=True)
    else:
        frame = core.breakdown(con, by=by, phase=phase, rank=rank, trace_id=trace_id,
                               top=20 if top is None else top)
    fmt = fmt or output.default_format()
    if by in core.CROSS_RANK_VIEWS:
        for line in core.alignment_warnings(con):
            err.print(f"warning: {esc(line)}", soft_wrap=True)
    if frame.is_empty():
        err.print(esc(f"no {phase + ' ' if phase != 'all' else ''}steps with GPU activity in {db_path}"
                      + ("" if phase == "all" else " (try --phase all)")), soft_wrap=True)
        if fmt != "table":
            output.write(frame, fmt)
        if filtered:
            sys.exit(1)
        return
    whole_runs = rank is None and trace_id is None  # rank-comm sums every rank of a run
    if fmt == "table" and by == "batch":  # the idle caption: of the same steps as the table (--rank, --trace)
        print_batch_tables(frame, idle=core.breakdown(con, by="idle", phase=phase, rank=rank, trace_id=trace_id),
                           labels=core.run_labels(con))
    elif fmt == "table" and by in core.SOL_VIEWS:
        sol.print_tables(frame, by, labels=core.run_labels(con))
    elif fmt == "table" and by == "rank":
        output.write(frame, fmt, title="Per rank and category")
        comm = core.breakdown(con, by="rank-comm", phase=phase) if whole_runs else frame.clear()
        if not comm.is_empty():
            output.write(comm, fmt, title="Collectives per rank: transfer vs wait (waiting for the slowest rank)")
    else:
        output.write(frame, fmt)


def print_batch_tables(frame: Any, console: Console | None = None, idle: Any = None,
                       labels: dict[str, str] | None = None) -> None:
    """The default report as one table per (level, batch size), with the group's totals as the title (named by
    the run's label from ``labels`` when several runs are shown) and, when ``idle`` (``report --by idle``) is
    given, why the GPU was idle as the caption."""
    from k25trace.render.output import rich_table  # deferred: start-up time

    idle_rows = {} if idle is None else {(r["run_id"], r["batch_size"]): r for r in idle.iter_rows(named=True)}
    labels = labels or {}
    console = console or Console(width=None if sys.stdout.isatty() else 160)
    several_runs = frame["run_id"].n_unique() > 1
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        level = first["level"]
        run = labels.get(run_id, str(run_id)) if several_runs and not level else ""
        title = (f"{run + ': ' if run else ''}{'level ' + str(level) + ', ' if level else ''}"
                 f"batch size {batch if batch is not None else '?'}: "
                 f"{first['steps']} steps on {first['ranks']} rank(s), mean step {first['step_ms']:.3f} ms "
                 f"(median {first['median_step_ms']:.3f}), idle {first['idle_pct'] or 0:.1f} %")
        body = group.select(["category", "ms_per_step", "pct_of_step", "kernel_ms_per_step", "calls_per_step",
                             "us_per_call"])
        body = body.rename({"ms_per_step": "ms/step", "pct_of_step": "% of step",
                            "kernel_ms_per_step": "kernel ms/step", "calls_per_step": "calls/step",
                            "us_per_call": "µs/call"})
        table = rich_table(body, title=title)
        why = idle_rows.get((run_id, batch))
        if why:
            table.caption = (
                f"idle {why['idle_ms']:.3f} ms/step = host-bound {why['host_ms']:.3f} + after a host sync "
                f"{why['sync_ms']:.3f} + launch overhead {why['launch_overhead_ms']:.3f} + device-bound "
                f"{why['device_ms']:.3f}" + (f" + unknown {why['unknown_ms']:.3f}" if why["unknown_ms"] else "")
                + f"; between steps {why['between_ms']:.3f} ms/step ({why['between_pct_of_span'] or 0:.1f} % of the "
                "GPU span) — report --by idle / --by timeline")
        console.print(table)


# ------------------------------------------------------------------------------------------------------ compare


def _is_trace_path(path: Path) -> bool:
    """A directory or a trace file (.json, .json.gz) is loaded into a temporary database; anything else is a
    database."""
    return path.is_dir() or path.name.endswith((".json", ".json.gz"))


@cli.command()
@click.argument("sides", nargs=-1, type=click.Path(path_type=Path), metavar="[A] [B]")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The database side A comes from (and side B, unless a path B is given).")
@click.option("--a", "select_a", multiple=True, metavar="KEY=VALUE",
              help="What side A holds: run=ID|LABEL|PART, level=NAME, trace=ID[,ID], rank=N, batch=N (repeatable).")
@click.option("--b", "select_b", multiple=True, metavar="KEY=VALUE", help="What side B holds (as --a).")
@click.option("--by", type=click.Choice((ALL, *COMPARE_TABLES)), default=None,
              help="The table to print (default: all of them with the verdict; category with --format csv).")
@click.option("--match", type=click.Choice(COMPARE_MATCHES), default="auto", show_default=True,
              help="Pair steps by phase and batch size, by capture level, or each side's selection as one group "
                   "(auto: side when --a and --b pick different batch sizes or levels, else batch).")
@click.option("--phase", type=click.Choice(PHASES), default="decode", show_default=True, help="Steps to compare.")
@click.option("--alpha", type=float, default=0.05, show_default=True,
              help="Significance level of the Holm-adjusted Welch t-test.")
@click.option("--min-change", type=float, default=5.0, show_default=True,
              help="A significant delta below this % of the row's value on the smaller side (A or B) is "
              "'negligible'; so compare B A mirrors compare A B.")
@click.option("--min-step", type=float, default=0.5, show_default=True,
              help="A significant delta below this % of the shorter side's mean step time (A or B) is "
              "'negligible'.")
@click.option("--top", type=click.IntRange(min=0), default=30, show_default=True,
              help="Kernel rows per group in table/Markdown output besides the changed ones (0: all).")
@format_option
def compare(sides: tuple[Path, ...], db_path: Path | None, select_a: tuple[str, ...], select_b: tuple[str, ...],
            by: str | None, match: str, phase: str, alpha: float, min_change: float, min_step: float, top: int,
            fmt: str | None) -> None:
    """What changed between two captures, and is it more than the step-to-step noise?

    Each side is a database, a trace directory (loaded into a temporary database), or a run, capture level,
    traces, rank or batch size inside one (--a/--b). Steps are paired by phase and batch size (--match); per
    category, kernel, step time and (several ranks) collective wait/transfer it prints A, B, the delta and a
    verdict from Welch's t-test on the per-step values (Holm-adjusted per table): within noise, negligible,
    slower or faster.

    \b
    Examples:
      k25trace compare before.duckdb after.duckdb
      k25trace compare traces/eager traces/graph --by kernel
      k25trace compare --db cap.duckdb --a level=c1 --b level=c64
      k25trace compare --db run.duckdb --a batch=1 --b batch=64 --format markdown
    """
    from k25trace import pipeline
    from k25trace.analysis import compare as core  # deferred: start-up time
    from k25trace.render import output

    sources = ([db_path] if db_path is not None else []) + list(sides)
    if not sources:
        raise K25Error("give two databases or trace directories (A B), or --db FILE with --a/--b selections")
    if len(sources) > 2:
        raise K25Error("two sides at most: --db FILE and one path B, or two paths A B")
    if len(sources) == 1:
        sources *= 2
    fmt = fmt or output.default_format()
    with tempfile.TemporaryDirectory(prefix="k25trace-compare-") as tmp:
        opened: dict[Path, Any] = {}

        def open_side(path: Path, name: str) -> Any:
            key = path.resolve()
            if key not in opened:
                if _is_trace_path(path):
                    if not path.exists():
                        raise K25Error(f"side {name}: {path}: no such file or directory")
                    err.print(f"loading side {name} ({esc(str(path))}) into a temporary database")
                    temp = Path(tmp) / f"side-{len(opened)}.duckdb"
                    con, failed = run_load(temp, [path], quiet=True)
                    con.close()
                    if failed:
                        raise K25Error(f"side {name}: {failed} file(s) of {path} could not be loaded; not comparing "
                                       "a partial side")
                    path = temp
                opened[key] = pipeline.connect(path, read_only=True)
            return opened[key]

        a = core.Side("A", open_side(sources[0], "A"), str(sources[0]), core.Selection.parse(select_a))
        b = core.Side("B", open_side(sources[1], "B"), str(sources[1]), core.Selection.parse(select_b))
        result = core.compare(a, b, phase=phase, match=match, alpha=alpha, min_change_pct=min_change,
                              min_step_pct=min_step)
        for side in result.sides.iter_rows(named=True):
            err.print(esc(f"{side['side']}: {side['source']} [{side['selection']}]: {side['runs']}, {side['ranks']} "
                           f"rank(s), {side['devices'] or 'GPU unknown'}, {side['steps']} "
                           f"{'' if phase == 'all' else phase + ' '}steps, batch sizes "
                           f"{side['batch_sizes'] or '?'}"), soft_wrap=True)
        for note in result.notes:
            err.print(f"note: {esc(note)}", soft_wrap=True)
        core.write(result, fmt, by=by or ("category" if fmt == "csv" else "all"), top=top)
        if fmt not in ("table", "markdown") or (by or "all") != "all":
            err.print(f"verdict: {esc(result.summary())}", soft_wrap=True)
        for con in opened.values():
            con.close()


# ------------------------------------------------------------------------------------------- classify and steps


def _rules_option(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """--rules must be a readable UTF-8 file (checked here: a bad byte is a usage error, not a traceback)."""
    if value is not None:
        try:
            _read_utf8(value.read_bytes, str(value))
        except K25Error as exc:
            raise click.BadParameter(str(exc), ctx, param) from exc
    return value


def _gap_us_option(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--gap-us must be a finite, non-negative number of microseconds that fits in 64-bit nanoseconds."""
    if not math.isfinite(value) or not 0 <= value <= MAX_GAP_US:
        raise click.BadParameter(f"{value} is not a usable gap: give microseconds from 0 to {MAX_GAP_US:.0e}", ctx,
                                 param)
    return value


MAX_GAP_US = 9e15  # 9e18 ns: the largest gap that fits in a BIGINT of nanoseconds


def _is_interrupt(exc: BaseException) -> bool:
    """Ctrl-C, as Python raises it or as DuckDB reports a query it stopped for it."""
    import duckdb

    if isinstance(exc, (KeyboardInterrupt, duckdb.InterruptException)):
        return True
    return isinstance(exc, (RuntimeError, K25Error)) and "interrupted" in str(exc).lower()


def _close(con: Any) -> None:
    """Close a connection after an interrupt (its transaction is already rolled back); a second Ctrl-C or a
    connection DuckDB already gave up on must not turn the clean message into a traceback."""
    if con is not None:
        try:
            con.close()
        except BaseException:  # noqa: BLE001
            pass


def _interrupted(message: str, exc: BaseException | None = None) -> NoReturn:
    """One line and the shell's status for the signal: 130 for Ctrl-C, 128 + signum for a signal the pipeline
    turned into an interrupt (``pipeline.Stopped``: SIGTERM, 143)."""
    signum = getattr(exc, "signum", None) if isinstance(exc, KeyboardInterrupt) else None
    if isinstance(signum, int) and signum > 0:
        import signal  # deferred: start-up time (only when stopped)

        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        err.print(f"[bold red]interrupted ({name}):[/] {message}", soft_wrap=True)
        sys.exit(128 + signum)
    err.print(f"[bold red]interrupted:[/] {message}", soft_wrap=True)
    sys.exit(130)


@cli.command()
@db_option
@click.option("--rules", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=_rules_option,
              help="Your rules CSV (UTF-8), tried before the built-in rules.")
@click.option("--replace", is_flag=True, help="Use only --rules, not the built-in rules.")
@click.option("--show", is_flag=True, help="Print which rule matched each kernel name (no re-classification).")
@format_option
def classify(db_path: Path, rules: Path | None, replace: bool, show: bool, fmt: str | None) -> None:
    """Re-classify every kernel with the built-in rules (plus --rules FILE) and rebuild the steps.

    A rules file has the columns category,kind,name_pattern,collective_pattern,note; rules are RE2 regexes
    tried in order, first match wins; yours come before the built-in ones. Ctrl-C stops it cleanly (exit 130).

    \b
    Examples:
      k25trace classify --db run.duckdb --rules my_rules.csv
      k25trace classify --db run.duckdb --show --format csv | grep ',other,'
    """
    from k25trace import db, pipeline
    from k25trace.render import output  # deferred: start-up time

    if show:
        con = pipeline.connect(db_path, read_only=True)
        output.write(db.query_frame(con, "kernel_rule_matches"), fmt or output.default_format())
        return
    if replace and rules is None:
        raise K25Error("--replace needs --rules FILE")
    stage, con = "classify", None
    try:
        con = pipeline.connect(db_path, create=False)
        pipeline.reclassify(con, rules, replace=replace)
        stage = "steps"
        n = pipeline.rebuild(con)
    except BaseException as exc:
        if not _is_interrupt(exc):
            raise
        _close(con)
        if stage == "classify":
            _interrupted("nothing changed: the classification was rolled back")
        _interrupted(f"the kernels are re-classified, but not every trace's steps were rebuilt (none is half-built); "
                     f"run `k25trace steps --db {esc(str(db_path))}` to finish")
    err.print(f"re-classified and rebuilt the steps of {n} trace(s)")


@cli.command("steps")
@db_option
@click.option("--gap-us", type=float, default=1000.0, show_default=True, callback=_gap_us_option,
              help="Idle gap that separates inferred steps (traces without step markers).")
def steps_cmd(db_path: Path, gap_us: float) -> None:
    """Rebuild the engine steps of every trace (e.g. with another --gap-us for traces without markers).

    Each trace is rebuilt in a transaction of its own; Ctrl-C stops cleanly (exit 130), leaving every trace with
    either its old or its new steps.
    """
    con = None
    from k25trace import pipeline  # deferred: start-up time

    try:
        con = pipeline.connect(db_path, create=False)
        n = pipeline.rebuild(con, gap_ns=round(gap_us * 1000))
    except BaseException as exc:
        if not _is_interrupt(exc):
            raise
        _close(con)
        _interrupted(f"the traces not reached keep their previous steps (none is half-built); "
                     f"run `k25trace steps --db {esc(str(db_path))}` again to finish")
    err.print(f"rebuilt the steps of {n} trace(s)")


# --------------------------------------------------------------------------------------------------------- demo


def sample_paths() -> list[Path]:
    from importlib import resources

    root = Path(str(resources.files("k25trace") / "samples"))
    return sorted(p for p in root.rglob("*.json.gz"))


@cli.command()
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Keep the database here (default: a temporary file, removed afterwards).")
def demo(db_path: Path | None) -> None:
    """Load the sample traces bundled with k25trace and show what k25trace finds in them."""
    from k25trace.analysis import report as core
    from k25trace.render import output  # deferred: start-up time

    samples = sample_paths()
    if not samples:
        raise K25Error("no bundled sample traces found in this installation")
    with tempfile.TemporaryDirectory(prefix="k25trace-demo-") as tmp:
        path = db_path or Path(tmp) / "demo.duckdb"
        con, failed = run_load(path, samples)
        console = Console(width=None if sys.stdout.isatty() else 160)
        console.print(output.rich_table(
            core.summary(con).select(["trace_id", "file_name", "rank", "world_size", "device_name", "gpu_event_count",
                                      "steps", "decode", "prefill", "mixed", "decode_batch_sizes"]),
            title=f"Traces loaded into {path}"))
        frame = core.breakdown(con, by="batch", phase="decode")
        print_batch_tables(frame, console, idle=core.breakdown(con, by="idle", phase="decode"),
                           labels=core.run_labels(con))
        console.print(output.rich_table(
            core.breakdown(con, by="step", phase="all").select(["trace_id", "rank", "step_index", "phase", "batch_size",
                                                                "graph_launches", "kernel_count", "wall_ms", "busy_pct",
                                                                "allreduce_pct", "top_categories"]),
            title="All steps"))
        con.close()
        if failed:
            sys.exit(1)


@cli.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Database to browse; with PATHs, the traces are loaded into it first (default: a temporary one).")
def tui(paths: tuple[Path, ...], db_path: Path | None) -> None:
    """Browse captures, decode steps and kernels in a terminal UI.

    \b
    Examples:
      k25trace tui --db run.duckdb
      k25trace tui /tmp/vllm_profile        # load first (progress on stderr), then browse
    """
    from k25trace.tui.app import run_tui  # deferred: start-up time (Textual)

    if not paths and db_path is None:
        raise K25Error("give --db FILE, or trace PATHs to load first")
    with tempfile.TemporaryDirectory(prefix="k25trace-tui-") as tmp:
        path = db_path or Path(tmp) / "tui.duckdb"
        if paths:
            con, failed = run_load(path, list(paths))
            con.close()
        elif not path.exists():
            raise K25Error(f"{path}: no such database")
        run_tui(path)


def main() -> None:
    cli(prog_name="k25trace")


if __name__ == "__main__":
    main()
