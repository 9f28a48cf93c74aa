"""``k25trace load``, ``sql``, ``classify``, ``steps`` and ``tui``: the commands that fill, query, rebuild or browse
one database (registered lazily by :mod:`k25trace.cli`, whose console, interrupt handling and :func:`run_load`
they use). stdout carries only data; progress, warnings and errors go to stderr.
"""

from __future__ import annotations

import math
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

# this module is one of the CLI's lazy commands: k25trace.cli is loaded already
from k25trace.cli import err, esc, interrupted, run_load
from k25trace.errors import K25Error, is_interrupt
from k25trace.options import all_option, database_option, db_option, format_option, model_config_option, wide_option


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@db_option
@click.option("--keep-python", is_flag=True, help="Also keep python_function events (50-90 % of a default trace).")
@click.option(
    "--include-frontend", is_flag=True, help="Also load front-end (*.async_llm.*) CPU-only traces found in directories."
)
@click.option(
    "-q", "--quiet", is_flag=True, help="No progress or per-file lines; errors and warnings still go to stderr."
)
@model_config_option("The traced model's Hugging Face config.json, kept in the database for `report --by sol`.")
def load(
    paths: tuple[Path, ...],
    db_path: Path,
    keep_python: bool,
    include_frontend: bool,
    quiet: bool,
    model_config: Path | None,
) -> None:
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
        con, failed = run_load(
            db_path, list(paths), keep_python=keep_python, include_frontend=include_frontend, quiet=quiet
        )
    except BaseException as exc:  # Ctrl-C (SIGTERM: pipeline.Stopped): the file being loaded was rolled back
        if not is_interrupt(exc):
            raise
        interrupted(
            "the file being loaded was rolled back; the files loaded before it are kept (with their "
            "cross-rank tables): run the same command again to load the rest",
            exc,
        )
    if model_config is not None:
        models.store_config(con, model_config)
        err.print(esc(f"model config {model_config} kept in {db_path} (report --by sol uses it)"), soft_wrap=True)
    con.close()
    if failed:
        sys.exit(1)


# ---------------------------------------------------------------------------------------------------------- sql


@click.command()
@click.argument("query", required=False)
@db_option
@click.option(
    "-f",
    "--file",
    "sql_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the SQL from a file.",
)
@click.option("--query", "-q", "query_name", help="Run a named query from queries/ (see --list).")
@click.option(
    "--param",
    "-p",
    "params",
    multiple=True,
    help="name=value parameter: $name in the SQL or a named query (repeatable; null for NULL).",
)
@click.option(
    "--list",
    "list_queries",
    is_flag=True,
    help="List the named queries a user runs (reports, browsing) with their parameters.",
)
@all_option("With --list: also the queries k25trace runs itself (loading, building tables, settings).")
@format_option
@wide_option
def sql(
    query: str | None,
    db_path: Path,
    sql_file: Path | None,
    query_name: str | None,
    params: tuple[str, ...],
    list_queries: bool,
    fmt: str | None,
    all_rows: bool = False,
    wide: bool = False,
) -> None:
    """Run SQL against a database: a query argument, -f FILE, - for stdin, or --query NAME.

    \b
    Examples:
      k25trace sql --db run.duckdb "select category, sum(dur_ns)/1e6 ms from kernels group by all order by ms desc"
      k25trace sql --db run.duckdb --query report_kernels -p phase=decode -p rank=null -p trace_id=null -p top=10
      echo "select * from steps limit 5" | k25trace sql --db run.duckdb - --format csv
    """
    import polars as pl  # deferred: start-up time

    from k25trace import db, pipeline
    from k25trace.render import output, views  # deferred: start-up time

    if list_queries:
        from k25trace.analysis import browse  # deferred: start-up time

        rows = [
            {
                "name": q.name,
                "params": ", ".join("$" + p for p in q.params),
                "creates": q.creates,
                "grain": q.grain,
                "summary": q.summary,
            }
            for q in browse.user_queries(everything=all_rows)
        ]
        views.write_view(pl.DataFrame(rows), "sql-list", fmt or output.default_format(), wide=wide)
        if not all_rows:
            err.print(
                f"note: {len(db.named_queries()) - len(rows)} queries k25trace runs itself are not listed: "
                "--list --all lists them",
                soft_wrap=True,
            )
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
            output.write(db.fetch_frame(cursor), fmt, wide=wide)
        return
    try:
        result = db.run_sql(con, text, bound, as_json=fmt == "json")
    except BaseException as exc:  # Ctrl-C: KeyboardInterrupt, or DuckDB's interrupt (run_sql leaves those as they are)
        if is_interrupt(exc):
            interrupted("the query was stopped (Ctrl-C)")
        raise
    if result is not None:
        output.write_result(result, fmt, wide=wide)


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
        raise K25Error(
            f"{source}: not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start} (line {line}); "
            "save it as UTF-8"
        ) from exc


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
        raise click.BadParameter(
            f"{value} is not a usable gap: give microseconds from 0 to {MAX_GAP_US:.0e}", ctx, param
        )
    return value


MAX_GAP_US = 9e15  # 9e18 ns: the largest gap that fits in a BIGINT of nanoseconds


def _close(con: Any) -> None:
    """Close a connection after an interrupt (its transaction is already rolled back); a second Ctrl-C or a
    connection DuckDB already gave up on must not turn the clean message into a traceback."""
    if con is not None:
        try:
            con.close()
        except BaseException:  # noqa: BLE001
            pass


@click.command()
@db_option
@click.option(
    "--rules",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    callback=_rules_option,
    help="Your rules CSV (UTF-8), tried before the built-in rules.",
)
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
    from k25trace.render import output, views  # deferred: start-up time

    if show:
        reader = pipeline.connect(db_path, read_only=True)
        views.write_view(db.query_frame(reader, "kernel_rule_matches"), "classify", fmt or output.default_format())
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
        if not is_interrupt(exc):
            raise
        _close(con)
        if stage == "classify":
            interrupted("nothing changed: the classification was rolled back")
        interrupted(
            f"the kernels are re-classified, but not every trace's steps were rebuilt (none is half-built); "
            f"run `k25trace steps --db {esc(str(db_path))}` to finish"
        )
    err.print(f"re-classified and rebuilt the steps of {n} trace(s)")


@click.command("steps")
@db_option
@click.option(
    "--gap-us",
    type=float,
    default=1000.0,
    show_default=True,
    callback=_gap_us_option,
    help="Idle gap that separates inferred steps (traces without step markers).",
)
def steps_cmd(db_path: Path, gap_us: float) -> None:
    """Rebuild the engine steps of every trace (say, with another --gap-us for traces without markers).

    Each trace is rebuilt in a transaction of its own; Ctrl-C stops cleanly (exit 130), leaving every trace with
    either its old or its new steps.
    """
    con = None
    from k25trace import pipeline  # deferred: start-up time

    try:
        con = pipeline.connect(db_path, create=False)
        n = pipeline.rebuild(con, gap_ns=round(gap_us * 1000))
    except BaseException as exc:
        if not is_interrupt(exc):
            raise
        _close(con)
        interrupted(
            f"the traces not reached keep their previous steps (none is half-built); "
            f"run `k25trace steps --db {esc(str(db_path))}` again to finish"
        )
    err.print(f"rebuilt the steps of {n} trace(s)")


# ---------------------------------------------------------------------------------------------------------- tui


@click.command()
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@database_option("Database to browse; with PATHs, the traces are loaded into it first (default: a temporary one).")
def tui(paths: tuple[Path, ...], db_path: Path | None) -> None:
    """Browse captures, decode steps and kernels in a terminal UI.

    \b
    Examples:
      k25trace tui --db run.duckdb
      k25trace tui run.duckdb               # the same: a database named alone is opened
      k25trace tui /tmp/vllm_profile        # load first (progress on stderr), then browse
    """
    from k25trace.ingest.discover import is_duckdb_file
    from k25trace.tui.app import run_tui  # deferred: start-up time (Textual)

    if not paths and db_path is None:
        raise K25Error("give --db FILE, or trace PATHs to load first")
    databases = [p for p in paths if p.is_file() and is_duckdb_file(p)]
    if databases and (db_path is not None or len(paths) > 1):
        raise K25Error(
            f"{databases[0]}: a DuckDB database among the trace paths; browse it alone "
            f"(k25trace tui --db {databases[0]}) or load traces into it with --db"
        )
    if databases:
        paths, db_path = (), databases[0]
    with tempfile.TemporaryDirectory(prefix="k25trace-tui-") as tmp:
        path = db_path or Path(tmp) / "tui.duckdb"
        if paths:
            con, failed = run_load(path, list(paths))
            con.close()
        elif not path.exists():
            raise K25Error(f"{path}: no such database")
        run_tui(path)
