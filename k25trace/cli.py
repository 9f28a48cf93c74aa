"""The ``k25trace`` command line: thin wrappers over the headless core (no query logic here).

stdout carries only data (tables, CSV, JSON); progress, warnings and errors go to stderr.

Start-up time is kept low on purpose: at import this module loads only click, rich's console and the vocabulary.
Each command imports the core modules it needs (DuckDB, polars, msgspec, …) inside its body, and the commands
that live in other modules are registered by name (``LAZY_COMMANDS``). Those deferred imports are marked
"deferred: start-up time"; they are the only function-level imports of this module.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.markup import escape as esc

from k25trace import __version__
from k25trace.errors import K25Error
from k25trace.options import (
    all_option,
    batch_option,
    database_option,
    db_option,
    format_option,
    model_config_option,
    phase_option,
    run_option,
    wide_option,
)
from k25trace.vocab import VIEW_HELP, VIEWS


class _Stderr(Console):
    """The messages' console: in a terminal a message wraps at words to its width; into a pipe or a file each
    message stays one line (for grep), as the callers' ``soft_wrap=True`` asks."""

    def print(self, *objects: Any, soft_wrap: bool | None = None, **kwargs: Any) -> None:
        super().print(*objects, soft_wrap=False if self.is_terminal else soft_wrap, **kwargs)


err = _Stderr(stderr=True, highlight=False)

MAX_CONTEXT = 1 << 24
"""The largest --context taken (16,777,216 tokens per request; the longest public context window is 10 M)."""


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {esc(message)}", soft_wrap=True)
    sys.exit(1)


# Commands whose modules live beside the core; imported only when used (or listed by --help), so that
# `k25trace load` does not pay for httpx/asyncio (capture) at start-up.
LAZY_COMMANDS = {
    "load": ("k25trace.load_cli", "load"),
    "sql": ("k25trace.load_cli", "sql"),
    "classify": ("k25trace.load_cli", "classify"),
    "steps": ("k25trace.load_cli", "steps_cmd"),
    "tui": ("k25trace.load_cli", "tui"),
    "capture": ("k25trace.capture.cli", "capture_command"),
    "synth": ("k25trace.synth", "command"),
    "bench": ("k25trace.bench_cli", "command"),
    "html": ("k25trace.share_cli", "html_command"),
    "export": ("k25trace.share_cli", "export_command"),
    "compare": ("k25trace.compare_cli", "compare"),
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
            interrupted("stopped before it finished", exc)


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
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=False,
            disable=self.quiet,
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


def run_load(
    db_path: Path | None,
    paths: list[Path],
    *,
    keep_python: bool = False,
    include_frontend: bool = False,
    quiet: bool = False,
    con: Any = None,
) -> tuple[Any, int]:
    """Load paths into a database, reporting each file on stderr; returns (connection, number of failures)."""
    from k25trace.ingest import LoadOptions, one_blas_thread, start_workers  # deferred: start-up time (all light)

    one_blas_thread()  # this process is ours, and so are the decode workers that inherit it
    options = LoadOptions(keep_python=keep_python, include_frontend=include_frontend)
    early = start_workers(paths, options)  # decode processes boot while this process imports DuckDB and the rest
    try:
        return _load(db_path, paths, options, quiet, con, early)
    finally:
        if early is not None:
            early.close()  # already closed by the load, unless it failed before it started


def _fit_path(path: str, width: int) -> str:
    """``path`` in at most ``width`` cells (a terminal's line): its folder cut to "…/", then its name to a "…"."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(path) <= width:
        return path
    name = "…/" + Path(path).name
    return name if cell_len(name) <= width else set_cell_size(name, max(width - 1, 8)) + "…"


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
            facts = (
                f": rank {r.rank}, {r.events:,} events, {r.gpu_events:,} GPU activities in {r.seconds:.1f} s "
                f"(trace {r.trace_id})"
            )
            path = _fit_path(r.path, err.width - len("loaded ") - len(facts)) if err.is_terminal else r.path
            err.print(f"loaded {esc(path)}{facts}", soft_wrap=True)

    results, notes = pipeline.load_paths(
        con,
        paths,
        options,
        on_result=on_result,
        progress_factory=lambda files: _Progress(files, quiet),
        workers=early,
    )
    for note in notes:
        err.print(f"[dim]note:[/] {esc(note)}", soft_wrap=True)
    loaded_ids = {r.trace_id for r in results if r.status == "loaded" and r.trace_id is not None}
    if loaded_ids:  # said at load time: far timestamps of the files just loaded, sessions that share a rank
        from k25trace.analysis import load_warnings  # deferred: start-up time

        for line in [*load_warnings.far_activity_warnings(con, loaded_ids), *load_warnings.run_warnings(con)]:
            err.print(f"[yellow]warning:[/] {esc(line)}", soft_wrap=True)
    failed = sum(r.status == "failed" for r in results)
    loaded = sum(r.status == "loaded" for r in results)
    if not quiet:
        err.print(f"{loaded} loaded, {sum(r.status == 'skipped' for r in results)} already there, {failed} failed")
    return con, failed


# ------------------------------------------------------------------------------------------------------- report


@cli.command()
@db_option
@phase_option("report")
@click.option(
    "--by",
    "by",
    type=click.Choice(VIEWS),
    default="batch",
    show_default=True,
    help="; ".join(f"{view}: {what}" for view, what in VIEW_HELP.items()) + ".",
)
@click.option(
    "--peaks",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Device peaks CSV (columns of queries/device_peaks.csv), tried before the built-in peaks.",
)
@model_config_option("--by sol: the Hugging Face config.json of the traced model.")
@click.option(
    "--quant", default=None, help="--by sol: weight/KV storage over the config's, e.g. experts=w4a16-g32,kv=fp8."
)
@click.option(
    "--context",
    type=click.IntRange(min=0, max=MAX_CONTEXT),
    default=None,
    help="--by sol: tokens in each request's KV cache (the context length read per step).",
)
@click.option("--rank", type=int, default=None, help="Only this rank (default: all ranks).")
@click.option("--trace", "trace_id", type=int, default=None, help="Only this trace_id.")
@batch_option
@run_option
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=None,
    help="Rows to list with --by kernel, and per group with --by roofline (default 20).",
)
@format_option
@wide_option
@all_option()
def report(
    db_path: Path,
    phase: str,
    by: str,
    peaks: Path | None,
    model_config: Path | None,
    quant: str | None,
    context: int | None,
    rank: int | None,
    trace_id: int | None,
    batch_size: int | None,
    run: str | None,
    top: int,
    fmt: str | None,
    wide: bool = False,
    all_rows: bool = False,
) -> None:
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

    _check_view_options(by, model_config=model_config, quant=quant, context=context, peaks=peaks, top=top)
    core.refuse_filters(by, rank=rank, trace_id=trace_id, batch_size=batch_size, run_id=run)
    con = pipeline.connect(db_path, read_only=True)
    filtered = rank is not None or trace_id is not None or phase is not None
    phase, note = core.resolve_phase(con, phase)
    run_id = core.resolve_run(con, run)
    core.check_filters(
        con, phase=phase, rank=rank, trace_id=trace_id, batch_size=batch_size, run_id=run_id, with_empty=by == "step"
    )  # the step view lists empty steps too
    steps: dict[str, Any] = {"batch_size": batch_size, "run_id": run_id}  # --batch, --run: every view takes them
    if note:
        err.print(f"note: {esc(note)}", soft_wrap=True)
    for line in core.run_warnings(con):
        err.print(f"warning: {esc(line)}", soft_wrap=True)
    if by == "findings":  # above analysis.report: the ranked findings of analysis.findings
        _report_findings(con, db_path, phase, peaks, fmt or output.default_format(), filtered, **steps)
        return
    if by in core.SOL_VIEWS:
        frame = _sol_frame(
            con, by, phase, rank, trace_id, top, peaks, model_config=model_config, quant=quant, context=context
        )
    else:
        frame = core.breakdown(
            con, by=by, phase=phase, rank=rank, trace_id=trace_id, **steps, top=20 if top is None else top
        )
    if by in core.CROSS_RANK_VIEWS:
        for line in core.alignment_warnings(con):
            err.print(f"warning: {esc(line)}", soft_wrap=True)
    if frame.is_empty():  # the steps exist (check_filters): say why this view has nothing of them
        raise K25Error(core.empty_view_reason(con, by, phase))
    _write_report(con, db_path, frame, by, fmt or output.default_format(), phase, rank, trace_id, steps, wide, all_rows)


def _check_view_options(by: str, **given: Any) -> None:
    """An option given to a view that does not take it is an error naming the views that do."""
    from k25trace.analysis import report as core  # deferred: start-up time

    for option, name, takes in (
        ("--model-config", "model_config", ("sol",)),
        ("--quant", "quant", ("sol",)),
        ("--context", "context", ("sol",)),
        ("--peaks", "peaks", (*core.SOL_VIEWS, "findings")),
        ("--top", "top", ("kernel", "roofline")),
    ):
        if given[name] is not None and by not in takes:
            raise K25Error(f"--by {by} does not take {option} (only --by {' / '.join(takes)})")


def _sol_frame(
    con: Any,
    by: str,
    phase: str,
    rank: int | None,
    trace_id: int | None,
    top: int | None,
    peaks: Path | None,
    **model: Any,
) -> Any:
    """``--by roofline`` or ``--by sol`` (``model``: model_config, quant, context); sol's warnings on stderr."""
    from k25trace.analysis import sol  # deferred: start-up time (the speed-of-light model)

    if by == "roofline":
        return sol.roofline(
            con, phase=phase, rank=rank, trace_id=trace_id, top=20 if top is None else top, peaks_file=peaks
        )
    notes: list[str] = []
    frame = sol.step_sol(con, **model, phase=phase, rank=rank, trace_id=trace_id, peaks_file=peaks, notes=notes)
    for line in notes:
        err.print(f"[yellow]warning:[/] {esc(line)}", soft_wrap=True)
    return frame


def _write_report(
    con: Any,
    db_path: Path,
    frame: Any,
    by: str,
    fmt: str,
    phase: str,
    rank: int | None,
    trace_id: int | None,
    steps: dict[str, Any],
    wide: bool,
    all_rows: bool,
) -> None:
    """Print a view's frame: the default view as one table per batch size after the top findings, sol and
    roofline by their own tables, the rank view with its collectives, any other through render.views."""
    from k25trace.analysis import report as core
    from k25trace.render import batch_tables, views  # deferred: start-up time

    whole_runs = rank is None and trace_id is None  # rank-comm sums every rank of a run
    if fmt == "table" and by == "batch":  # the idle caption: of the same steps as the table (--rank, --trace)
        _print_findings_first(con, db_path, phase, whole_runs, **steps)
        batch_tables.print_batch_tables(
            frame,
            idle=core.breakdown(con, by="idle", phase=phase, rank=rank, trace_id=trace_id, **steps),
            labels=core.run_labels(con),
            engine=core.engine_steps(con, phase=phase, rank=rank, trace_id=trace_id, run_id=steps["run_id"]),
        )
    elif fmt == "table" and by in core.SOL_VIEWS:
        from k25trace.render import sol as sol_tables  # deferred: start-up time

        sol_tables.print_tables(frame, by, labels=core.run_labels(con))
    elif fmt == "table" and by == "rank":
        views.write_view(frame, "rank", fmt, labels=core.run_labels(con), wide=wide, all_rows=all_rows)
        comm = core.breakdown(con, by="rank-comm", phase=phase, **steps) if whole_runs else frame.clear()
        if not comm.is_empty():
            views.write_view(comm, "rank-comm", fmt, labels=core.run_labels(con), wide=wide, all_rows=all_rows)
    else:
        if fmt == "table" and by == "layer":  # the answer above the table
            from k25trace.render.layer_summary import print_layer_summary

            print_layer_summary(frame)
        views.write_view(
            frame, by, fmt, labels=core.run_labels(con) if fmt == "table" else None, wide=wide, all_rows=all_rows
        )


def _report_findings(
    con: Any,
    db_path: Path,
    phase: str,
    peaks: Path | None,
    fmt: str,
    filtered: bool,
    batch_size: int | None = None,
    run_id: str | None = None,
) -> None:
    """``report --by findings``: every finding per run and batch size (:mod:`k25trace.render.findings`), of one
    batch size and run when given."""
    from k25trace.analysis import findings
    from k25trace.analysis import report as core
    from k25trace.render import findings as findings_view  # deferred: start-up time

    for line in core.alignment_warnings(con):
        err.print(f"warning: {esc(line)}", soft_wrap=True)
    result = _chosen_groups(findings.findings(con, phase=phase, db=str(db_path), peaks_file=peaks), batch_size, run_id)
    if not result.groups:
        err.print(
            esc(
                f"no {phase + ' ' if phase != 'all' else ''}steps with GPU activity in {db_path}"
                + ("" if phase == "all" else " (try --phase all)")
            ),
            soft_wrap=True,
        )
        if fmt != "table":
            findings_view.write(result, fmt)
        if filtered:
            sys.exit(1)
        return
    findings_view.write(result, fmt)


def _chosen_groups(result: Any, batch_size: int | None, run_id: str | None) -> Any:
    """The findings of the groups (run, batch size) that ``--batch`` and ``--run`` choose (each group's findings
    are computed from its own steps alone)."""
    import dataclasses  # deferred: start-up time

    return dataclasses.replace(
        result,
        groups=tuple(g for g in result.groups if batch_size in (None, g.batch_size) and run_id in (None, g.run_id)),
    )


def _print_findings_first(
    con: Any,
    db_path: Path,
    phase: str,
    whole_runs: bool,
    console: Console | None = None,
    batch_size: int | None = None,
    run_id: str | None = None,
) -> None:
    """The default report's opening on a terminal: the top findings per run and batch size (whole runs: with
    --rank or --trace a note on stderr says where they are instead)."""
    from k25trace.analysis import findings
    from k25trace.render import findings as findings_view  # deferred: start-up time

    if not whole_runs:
        err.print(
            f"note: the findings are of whole runs: {esc(findings_view.all_command(db_path, phase))}", soft_wrap=True
        )
        return
    result = _chosen_groups(findings.findings(con, phase=phase, db=str(db_path)), batch_size, run_id)
    findings_view.print_findings(
        result,
        console or Console(width=None if sys.stdout.isatty() else 120),
        more=findings_view.all_command(db_path, phase),
    )


# --------------------------------------------------------------------------------------------------- interrupts


def interrupted(message: str, exc: BaseException | None = None) -> NoReturn:
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


# --------------------------------------------------------------------------------------------------------- demo


def sample_paths() -> list[Path]:
    from importlib import resources

    root = Path(str(resources.files("k25trace") / "samples"))
    return sorted(p for p in root.rglob("*.json.gz"))


@cli.command()
@database_option("Keep the database here (default: a temporary file, removed afterwards).")
def demo(db_path: Path | None) -> None:
    """Load the sample traces bundled with k25trace and show what k25trace finds in them."""
    from k25trace.analysis import report as core
    from k25trace.render import batch_tables, output, views  # deferred: start-up time

    samples = sample_paths()
    if not samples:
        raise K25Error("no bundled sample traces found in this installation")
    with tempfile.TemporaryDirectory(prefix="k25trace-demo-") as tmp:
        path = db_path or Path(tmp) / "demo.duckdb"
        con, failed = run_load(path, samples)
        console = output.console()
        views.write_view(core.summary(con), "traces", "table", title=f"Traces loaded into {path}")
        frame = core.breakdown(con, by="batch", phase="decode")
        _print_findings_first(con, path, "decode", True, console)
        batch_tables.print_batch_tables(
            frame,
            console,
            idle=core.breakdown(con, by="idle", phase="decode"),
            labels=core.run_labels(con),
            engine=core.engine_steps(con, phase="decode"),
        )
        views.write_view(
            core.breakdown(con, by="step", phase="all"),
            "step",
            "table",
            title="All steps",
            more="k25trace demo --db FILE, then k25trace report --db FILE --by step --phase all --all",
        )
        con.close()
        if failed:
            sys.exit(1)


def main() -> None:
    cli(prog_name="k25trace")


if __name__ == "__main__":
    main()
