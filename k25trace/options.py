"""The command-line options that more than one command takes, each defined (name, type, default, help) once here.

An option whose meaning is the same everywhere is a ready decorator (:data:`db_option`, :data:`format_option`);
one whose wording names what the command does with it is a function of that wording (:func:`phase_option`,
:func:`output_option`). Imports only click and the vocabulary: ``k25trace bench`` runs on GPU machines without
rich or DuckDB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from k25trace.vocab import COMPARE_MATCHES, FORMATS, PHASES

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]
"""What ``click.option`` returns: adds one option to a command function."""

DB_HELP = "The k25trace DuckDB database file."


def database_option(help: str, *, required: bool = False) -> Decorator:  # noqa: A002 - click's own keyword
    """``--db FILE`` (into ``db_path``), with the command's own help when the database means more than the input."""
    return click.option(
        "--db", "db_path", required=required, default=None, type=click.Path(dir_okay=False, path_type=Path), help=help
    )


db_option = database_option(DB_HELP, required=True)
"""``--db FILE``: the database a command reads (or writes), required."""

format_option = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default=None,
    help="Output format (default: table on a terminal, csv otherwise).",
)
"""``--format``: table, csv, json or markdown; None lets the command choose (table on a terminal)."""


def phase_option(what: str = "report", *, default: str | None = None, help: str | None = None) -> Decorator:  # noqa: A002
    """``--phase``: the steps to ``what``; without a default, decode steps or, when no trace has step markers, the
    inferred steps (the command resolves it)."""
    if default is None:
        text = f"Steps to {what} (default: decode; when no trace has step markers, the inferred steps)."
    else:
        text = f"Steps to {what}."
    return click.option(
        "--phase", type=click.Choice(PHASES), default=default, show_default=default is not None, help=help or text
    )


rank_option = click.option("--rank", type=int, default=None, help="Only this rank (default: all ranks).")
"""``--rank N``: the steps of one rank."""

trace_option = click.option("--trace", "trace_id", type=int, default=None, help="Only this trace_id.")
"""``--trace ID`` (into ``trace_id``): the steps of one trace."""

batch_option = click.option(
    "--batch",
    "batch_size",
    type=int,
    default=None,
    help="Only steps of this batch size (requests per engine step; default: every one).",
)
"""``--batch N`` (into ``batch_size``): the steps of one batch size."""

run_option = click.option(
    "--run",
    "run",
    default=None,
    help="Only this run: its id, its label as reports print it (e.g. 'graph (TP2)'), or a part "
    "of its id (default: every run).",
)
"""``--run ID|LABEL|PART`` (into ``run``): the steps of one run (``analysis.report.resolve_run``)."""


def output_option(help: str) -> Decorator:  # noqa: A002 - click's own keyword
    """``-o/--output FILE`` (into ``out``), required; ``-`` is stdout."""
    return click.option(
        "-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path), help=help
    )


def model_config_option(help: str) -> Decorator:  # noqa: A002 - click's own keyword
    """``--model-config FILE``: a Hugging Face config.json (it must exist)."""
    return click.option(
        "--model-config", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help=help
    )


SELECTION_KEYS = "run=ID|LABEL|PART, level=NAME, trace=ID[,ID], rank=N, batch=N"
"""What ``--a`` / ``--b`` may name (``analysis.compare.Selection.parse``)."""

MATCH_HELP = (
    "pair steps by phase and batch size, by capture level, or each side's selection as one group "
    "(auto: side when --a and --b pick different batch sizes or levels, else batch)."
)


def _sentence(prefix: str, text: str) -> str:
    return f"{prefix}{text}" if prefix else text[:1].upper() + text[1:]


def side_options(prefix: str = "") -> Decorator:
    """``--a`` and ``--b`` (into ``select_a`` / ``select_b``): what each side of a comparison holds; ``prefix``
    (e.g. ``"Compare: "``) starts their help where comparing is one use of the command."""
    option_a = click.option(
        "--a",
        "select_a",
        multiple=True,
        metavar="KEY=VALUE",
        help=_sentence(prefix, f"what side A holds: {SELECTION_KEYS} (repeatable)."),
    )
    option_b = click.option(
        "--b", "select_b", multiple=True, metavar="KEY=VALUE", help=_sentence(prefix, "what side B holds (as --a).")
    )

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        return option_a(option_b(function))

    return decorate


def match_option(prefix: str = "") -> Decorator:
    """``--match``: how the steps of the two sides are paired."""
    return click.option(
        "--match",
        type=click.Choice(COMPARE_MATCHES),
        default="auto",
        show_default=True,
        help=_sentence(prefix, MATCH_HELP),
    )


wide_option = click.option(
    "--wide", is_flag=True, help="Tables: every column at full width, full kernel names (wider than the terminal)."
)
"""``--wide``: a table prints every column (CSV/JSON always do)."""


def all_option(help: str = "Tables: every row (default: the first 40).") -> Decorator:  # noqa: A002
    """``--all`` (into ``all_rows``): everything, not the capped or the usual selection."""
    return click.option("--all", "all_rows", is_flag=True, help=help)
