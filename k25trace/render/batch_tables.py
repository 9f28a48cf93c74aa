"""The default ``report`` on a terminal (and ``demo``'s): one table per run, capture level and batch size, its
totals as the title and why the GPU was idle as the caption."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.text import Text

from k25trace.analysis.report import steps_seen
from k25trace.render.output import console as stdout_console
from k25trace.render.output import print_table, rich_table


def print_batch_tables(
    frame: Any,
    console: Console | None = None,
    idle: Any = None,
    labels: dict[str, str] | None = None,
    engine: dict[Any, int] | None = None,
) -> None:
    """The default report as one table per (level, batch size), with the group's totals as the title (named by
    the run's label from ``labels`` when several runs are shown; its engine steps from ``engine``,
    ``report.engine_steps``) and, when ``idle`` (``report --by idle``) is given, why the GPU was idle as the
    caption."""
    idle_rows = {} if idle is None else {(r["run_id"], r["batch_size"]): r for r in idle.iter_rows(named=True)}
    labels = labels or {}
    console = console or stdout_console()
    several_runs = frame["run_id"].n_unique() > 1
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        level = first["level"]
        run = labels.get(run_id, str(run_id)) if several_runs and not level else ""
        title = (  # two lines, so that a long run label does not wrap the numbers
            f"{run + ', ' if run else ''}{'level ' + str(level) + ', ' if level else ''}"
            f"batch size {batch if batch is not None else '?'}: mean step {first['step_ms']:.3f} ms "
            f"(median {first['median_step_ms']:.3f}), idle {first['idle_pct'] or 0:.1f} %\n"
            f"{steps_seen((engine or {}).get((run_id, batch)), first['steps'], first['ranks'])}"
        )
        body = group.select(
            ["category", "ms_per_step", "pct_of_step", "kernel_ms_per_step", "calls_per_step", "us_per_call"]
        )
        body = body.rename(
            {
                "ms_per_step": "ms/step",
                "pct_of_step": "% of step",
                "kernel_ms_per_step": "kernel ms/step",
                "calls_per_step": "calls/step",
                "us_per_call": "µs/call",
            }
        )
        table = rich_table(body, title=title, width=console.width)
        why = idle_rows.get((run_id, batch))
        caption = None
        if why:
            caption = (
                f"idle {why['idle_ms']:.3f} ms/step = host-bound {why['host_ms']:.3f} + after a host sync "
                f"{why['sync_ms']:.3f} + launch overhead {why['launch_overhead_ms']:.3f} + device-bound "
                f"{why['device_ms']:.3f}"
                + (f" + unknown {why['unknown_ms']:.3f}" if why["unknown_ms"] else "")
                + f"\nbetween steps {why['between_ms']:.3f} ms/step ({why['between_pct_of_span'] or 0:.1f} % of the "
                "GPU span) — report --by idle / --by timeline"
            )
        print_table(table, target=console)
        if caption:  # under the table at the console's width (a caption wraps to the table's)
            console.print(Text(caption))
            console.print()
