"""``k25trace html``: a thin click wrapper over :mod:`k25trace.html` (registered lazily by :mod:`k25trace.cli`).
The page goes where ``-o`` says (``-o -``: stdout); what was written and notes go to stderr.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import click

from k25trace.report import PHASES

db_option = click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
                         help="The k25trace DuckDB database file.")


def _err(message: str) -> None:
    from k25trace.cli import _esc, err

    err.print(_esc(message), soft_wrap=True)


def _write(out: Path, data: bytes) -> None:
    """Write ``data`` to ``out`` atomically (a temporary file beside it, then renamed); ``-`` is stdout."""
    if str(out) == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    out = out.expanduser()
    parent = out.parent if str(out.parent) else Path(".")
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


@click.command("html")
@db_option
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The HTML file to write (- for stdout).")
@click.option("--phase", type=click.Choice(PHASES), default=None,
              help="Steps to show (default: decode; when no trace has step markers, the inferred steps).")
@click.option("--top", type=click.IntRange(1, 500), default=20, show_default=True, help="Kernels in the top-kernels table.")
@click.option("--title", default=None, help="The page's title (default: k25trace report).")
def html_command(db_path: Path, out: Path, phase: str | None, top: int, title: str | None) -> None:
    """Write the report as one self-contained HTML page with charts (opens offline; share it as a file).

    Per run and batch size: ms/step by category (with overlap and idle), decode step time and throughput vs
    batch size (TPOT and tok/s of capture levels), collectives across ranks (transfer vs wait, the straggler),
    why the GPU is idle, the step-time distribution, one representative step on every rank on an aligned
    clock (a Gantt chart by category), and the top kernels.

    \b
    Example:
      k25trace html --db run.duckdb -o report.html
    """
    from k25trace import db, html

    started = time.perf_counter()
    con = db.connect(db_path, read_only=True)
    page, data = html.build(con, source=db_path.name, phase=phase, top=top, title=title)
    con.close()
    for note in data.notes:
        _err(f"note: {note}")
    encoded = page.encode("utf-8")
    _write(out, encoded)
    if str(out) != "-":
        _err(f"wrote {out}: {_size(len(encoded))}, {data.batch['run_id'].n_unique() if not data.batch.is_empty() else 0}"
             f" run(s), {len(data.timelines)} step timeline(s), in {time.perf_counter() - started:.1f} s")
