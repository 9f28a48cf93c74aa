"""The answer above ``report --by layer``'s table: per run and batch size, the slowest layer against the median
layer, the layers flagged slow, the layers with outlier steps (the frame of ``k25trace.layers.layer_breakdown``)."""

from __future__ import annotations

import polars as pl
from rich.text import Text

from k25trace.render.output import console

_ENDS = ("pre", "post")
"""The segments before the first layer and after the last: not layers."""


def _listed(labels: list[str], limit: int = 8) -> str:
    """``'3, 7'``; ``'1, 2, …, 8 (12 layers)'`` past ``limit``."""
    if len(labels) <= limit:
        return ", ".join(labels)
    return ", ".join(labels[:limit]) + f", … ({len(labels)} layers)"


def layer_summary(frame: pl.DataFrame) -> list[str]:
    """Two lines per run and batch size: its layer count and kinds, its slowest layer (median GPU work per step, and
    how many times the median layer's; ties: the lower layer, as the HTML chart's sentence), then the layers
    flagged slow against their kind and those with outlier steps."""
    lines: list[str] = []
    if frame.is_empty() or "segment" not in frame.columns:
        return lines
    for (run, batch), group in frame.group_by(["run", "batch_size"], maintain_order=True):
        layers = group.filter(~pl.col("segment").is_in(_ENDS))
        if layers.is_empty():
            continue
        kinds = layers["kind"].value_counts(sort=True)
        if kinds.height == 1:
            made_of = f"{layers.height} {kinds.row(0)[0]} layers"
        else:
            made_of = f"{layers.height} layers (" + ", ".join(f"{n} {k}" for k, n in kinds.iter_rows()) + ")"
        by_busy = layers.with_columns(layer=pl.col("segment").cast(pl.Int64, strict=False))
        slowest = by_busy.sort(["busy_ms", "layer"], descending=[True, False], nulls_last=True).row(0, named=True)
        ratio = slowest["vs_median_layer"]
        lines.append(
            f"{run}, batch size {'?' if batch is None else batch}: {made_of}; slowest: layer "
            f"{slowest['segment']}, {slowest['busy_ms']:.3f} ms of GPU work per step"
            + (f", {ratio:.2f}× the median layer" if ratio is not None else "")
        )
        flagged = layers.filter(pl.col("flag") == "slow")["segment"].to_list()
        more = [f"slow against its kind: {_listed(flagged)}" if flagged else "no layer ≥ 10 % over its kind"]
        outliers = layers.filter(pl.col("outlier_steps") > 0)["segment"].to_list()
        if outliers:
            more.append(f"outlier steps in layer{'s' if len(outliers) > 1 else ''} {_listed(outliers)}")
        lines.append("  " + "; ".join(more))
    return lines


def print_layer_summary(frame: pl.DataFrame) -> None:
    """The summary lines on stdout, at the console's width, then a blank line."""
    lines = layer_summary(frame)
    for line in lines:
        console().print(Text(line))
    if lines:
        console().print()


__all__ = ["layer_summary", "print_layer_summary"]
