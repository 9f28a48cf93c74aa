"""``k25trace compare``: two sides (databases, trace directories loaded into temporary databases, or selections
inside one), the comparison of :mod:`k25trace.analysis.compare`, printed by :mod:`k25trace.render.compare`.
Registered lazily by :mod:`k25trace.cli`, whose console and :func:`~k25trace.cli.run_load` it uses. stdout carries
only data; the sides, the notes and (CSV, JSON) the verdict go to stderr.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import click

# this module is one of the CLI's lazy commands: k25trace.cli is loaded already
from k25trace.cli import err, esc, run_load
from k25trace.errors import K25Error
from k25trace.options import all_option, database_option, format_option, match_option, phase_option, side_options
from k25trace.vocab import ALL, COMPARE_TABLES


def is_trace_path(path: Path) -> bool:
    """A directory or a trace file (.json, .json.gz) is loaded into a temporary database; anything else is a
    database."""
    return path.is_dir() or path.name.endswith((".json", ".json.gz"))


def side_sources(db_path: Path | None, sides: tuple[Path, ...]) -> list[Path]:
    """The paths of side A and side B (one path: both sides are in it)."""
    sources = ([db_path] if db_path is not None else []) + list(sides)
    if not sources:
        raise K25Error("give two databases or trace directories (A B), or --db FILE with --a/--b selections")
    if len(sources) > 2:
        raise K25Error("two sides at most: --db FILE and one path B, or two paths A B")
    return sources * 2 if len(sources) == 1 else sources


class SideDatabases:
    """The read-only connections of the sides, each path opened once; a trace path is loaded into a temporary
    database under ``tmp`` first."""

    def __init__(self, tmp: str) -> None:
        self.tmp = Path(tmp)
        self.opened: dict[Path, Any] = {}

    def open(self, path: Path, name: str) -> Any:
        from k25trace import pipeline  # deferred: start-up time

        key = path.resolve()
        if key not in self.opened:
            if is_trace_path(path):
                if not path.exists():
                    raise K25Error(f"side {name}: {path}: no such file or directory")
                err.print(f"loading side {name} ({esc(str(path))}) into a temporary database")
                temp = self.tmp / f"side-{len(self.opened)}.duckdb"
                con, failed = run_load(temp, [path], quiet=True)
                con.close()
                if failed:
                    raise K25Error(
                        f"side {name}: {failed} file(s) of {path} could not be loaded; not comparing a partial side"
                    )
                path = temp
            self.opened[key] = pipeline.connect(path, read_only=True)
        return self.opened[key]

    def close(self) -> None:
        for con in self.opened.values():
            con.close()


def print_sides(result: Any, phase: str) -> None:
    """One line per side on stderr (source, selection, runs, ranks, GPUs, steps, batch sizes), then the notes."""
    for side in result.sides.iter_rows(named=True):
        err.print(
            esc(
                f"{side['side']}: {side['source']} [{side['selection']}]: {side['runs']}, {side['ranks']} "
                f"rank{'' if side['ranks'] == 1 else 's'}, {side['devices'] or 'GPU unknown'}, {side['steps']} "
                f"{'' if phase == 'all' else phase + ' '}engine steps, batch sizes "
                f"{side['batch_sizes'] or '?'}"
            ),
            soft_wrap=True,
        )
    for note in result.notes:
        err.print(f"note: {esc(note)}", soft_wrap=True)


@click.command()
@click.argument("sides", nargs=-1, type=click.Path(path_type=Path), metavar="[A] [B]")
@database_option("The database side A comes from (and side B, unless a path B is given).")
@side_options()
@click.option(
    "--by",
    type=click.Choice((ALL, *COMPARE_TABLES)),
    default=None,
    help="The table to print (default: all of them with the verdict; category with --format csv).",
)
@match_option()
@phase_option("compare", default="decode")
@click.option(
    "--alpha", type=float, default=0.05, show_default=True, help="Significance level of the Holm-adjusted Welch t-test."
)
@click.option(
    "--min-change",
    type=float,
    default=5.0,
    show_default=True,
    help="A significant delta below this % of the row's value on the smaller side (A or B) is "
    "'negligible'; so compare B A mirrors compare A B.",
)
@click.option(
    "--min-step",
    type=float,
    default=0.5,
    show_default=True,
    help="A significant delta below this % of the shorter side's mean step time (A or B) is 'negligible'.",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="Kernel rows per group in table/Markdown output besides the changed ones (0: all).",
)
@format_option
@all_option("Tables: every layer row (default: the 40 that changed most).")
def compare(
    sides: tuple[Path, ...],
    db_path: Path | None,
    select_a: tuple[str, ...],
    select_b: tuple[str, ...],
    by: str | None,
    match: str,
    phase: str,
    alpha: float,
    min_change: float,
    min_step: float,
    top: int,
    fmt: str | None,
    all_rows: bool = False,
) -> None:
    """What changed between two captures, and is it more than the step-to-step noise?

    Each side is a database, a trace directory (loaded into a temporary database), or a run, capture level,
    traces, rank or batch size inside one (--a/--b). Steps are paired by phase and batch size (--match); per
    category, kernel, step time, layer (same layer count on both sides) and (several ranks) collective
    wait/transfer it prints A, B, the delta and a verdict from Welch's t-test on the per-step values
    (Holm-adjusted per table): within noise, negligible, slower or faster.

    \b
    Examples:
      k25trace compare before.duckdb after.duckdb
      k25trace compare traces/eager traces/graph --by kernel
      k25trace compare before.duckdb after.duckdb --by layer
      k25trace compare --db cap.duckdb --a level=c1 --b level=c64
      k25trace compare --db run.duckdb --a batch=1 --b batch=64 --format markdown
    """
    from k25trace.analysis import compare as core  # deferred: start-up time
    from k25trace.render import compare as compare_view
    from k25trace.render import output

    sources = side_sources(db_path, sides)
    fmt = fmt or output.default_format()
    with tempfile.TemporaryDirectory(prefix="k25trace-compare-") as tmp:
        databases = SideDatabases(tmp)
        try:
            a = core.Side("A", databases.open(sources[0], "A"), str(sources[0]), core.Selection.parse(select_a))
            b = core.Side("B", databases.open(sources[1], "B"), str(sources[1]), core.Selection.parse(select_b))
            result = core.compare(
                a, b, phase=phase, match=match, alpha=alpha, min_change_pct=min_change, min_step_pct=min_step
            )
            print_sides(result, phase)
            compare_view.write(
                result, fmt, by=by or ("category" if fmt == "csv" else "all"), top=top, all_rows=all_rows
            )
            if fmt not in ("table", "markdown"):  # a table and Markdown open with it
                err.print(f"verdict: {esc(result.summary())}", soft_wrap=True)
        finally:
            databases.close()
