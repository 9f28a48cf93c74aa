"""The speed-of-light views on a terminal (``report --by roofline`` / ``--by sol`` with ``--format table``): one
table per (run, batch size) of the frames :mod:`k25trace.analysis.sol` computes."""

from __future__ import annotations

import polars as pl
from rich.console import Console

from k25trace.render import output

_ROOFLINE_TABLE = {
    "source": "src",
    "op": "op",
    "shape": "shape",
    "dtype": "dtype",
    "calls_per_step": "calls/step",
    "us_per_call": "µs/call",
    "ms_per_step": "ms/step",
    "tflops": "TFLOP/s",
    "gbps": "GB/s",
    "pct_peak_flops": "% peak FLOP",
    "pct_peak_hbm": "% peak HBM",
    "bound": "bound",
    "pct_of_sol": "% of SOL",
    "note": "note",
}
_LAYOUT = output.Layout(
    names=("op", "shape"), wrap=("note", "floor basis"), drop_first=("src", "dtype", "calls/step", "TFLOP/s", "GB/s")
)
_SOL_TABLE = {
    "part": "part",
    "observed_ms": "observed ms/step",
    "floor_ms": "floor ms/step",
    "ratio": "observed/floor",
    "floor_gb": "floor GB",
    "floor_basis": "floor basis",
}


def print_tables(
    frame: pl.DataFrame,
    by: str,
    console: Console | None = None,
    labels: dict[str, str] | None = None,
    wide: bool = False,
) -> None:
    """``report --by roofline`` / ``--by sol`` on a terminal: one table per (run, batch size) with the columns that
    matter (CSV/JSON carry all of them), titled by the run's label from ``labels``
    (:func:`k25trace.analysis.report.run_labels`)."""
    labels = labels or {}  # a run without a label is titled by its id

    console = console or output.console()
    columns = _ROOFLINE_TABLE if by == "roofline" else _SOL_TABLE
    if by == "roofline" and not wide:  # the whole note is in CSV/JSON (and --wide); a table keeps its start
        frame = frame.with_columns(
            pl.when(pl.col("note").str.len_chars() > 60)
            .then(pl.col("note").str.slice(0, 59) + "…")
            .otherwise(pl.col("note"))
            .alias("note")
        )
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        label = labels.get(str(run_id), str(run_id))
        if by == "roofline":
            known = group.filter(pl.col("bound") != "unmodelled")["ms_per_step"].sum()
            total = group["ms_per_step"].sum()
            device = first["device"] or "device unmatched: give --peaks FILE"
            title = (
                f"{label}, batch size {batch if batch is not None else '?'}: ops with a cost "
                f"model take {known:.3f} of the {total:.3f} kernel ms/step listed ({device})"
            )
        else:
            title = (
                f"{label}, batch size {batch if batch is not None else '?'}, TP {first['tp']}: "
                f"{first['steps']} steps on {first['device'] or 'an unmatched device (give --peaks FILE)'}"
            )
        body = group.select(list(columns)).rename(columns)
        table = output.rich_table(body, title=title, width=None if wide else console.width, layout=_LAYOUT)
        output.print_table(table, target=console)
