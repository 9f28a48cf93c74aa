"""The step screen's ranks line and legends: items never cut in two, many ranks summed up."""

from __future__ import annotations

import itertools
import statistics

import polars as pl
from rich.text import Text

from k25trace.tui.cells import flow
from k25trace.tui.screens.step import RANKS_LISTED, rank_items
from k25trace.tui.widgets.category_bar import legend


def ranks_frame(walls: list[float | None]) -> pl.DataFrame:
    """One row per rank (trace id = rank + 1), ``None``: the rank has no such step."""
    return pl.DataFrame(
        {
            "trace_id": list(range(1, len(walls) + 1)),
            "rank": list(range(len(walls))),
            "has_step": [w is not None for w in walls],
            "wall_ms": walls,
        },
        schema={"trace_id": pl.Int64, "rank": pl.Int64, "has_step": pl.Boolean, "wall_ms": pl.Float64},
    )


def test_flow_keeps_every_item_whole_within_the_width() -> None:
    items = [Text(f"{rank}: {12 + rank / 7:.3f} ms") for rank in range(20)]
    for width in (20, 37, 60):
        lines = flow(items, width, " · ").plain.split("\n")
        assert all(len(line) <= width for line in lines)
        assert " · ".join(lines).split(" · ") == [item.plain for item in items]  # every item whole, in order
        # greedy: the first item of each next line did not fit on the line before
        for line, following in itertools.pairwise(lines):
            assert len(line) + 3 + len(following.split(" · ")[0]) > width
    assert "\n" not in flow(items, 0).plain
    assert flow([Text("x" * 30), Text("y")], 10).plain == "x" * 30 + "\ny"  # too wide: a line of its own


def test_legend_breaks_between_categories_never_inside_one() -> None:
    categories = ["quant_gemm", "gemm", "attention", "norm", "moe_routing", "elementwise", "rotary", "idle"]
    lines = legend(categories, 36).plain.split("\n")
    assert len(lines) > 1 and all(len(line) <= 36 for line in lines)
    shown = [item.removeprefix("■ ").removeprefix("· ") for line in lines for item in line.split("  ")]
    assert shown == categories


def test_few_ranks_are_listed_each_with_its_time() -> None:
    walls = [12.5, 13.25, None, 12.75]
    line = flow(rank_items(ranks_frame(walls), 2, 7), 0, " · ").plain
    assert line.startswith("same step on 4 ranks:")
    assert "1 (this) 13.250 ms" in line and "0: 12.500 ms" in line and "3: 12.750 ms" in line
    assert "2: no step 7" in line


def test_many_ranks_are_summed_up_by_the_fastest_median_and_slowest() -> None:
    walls: list[float | None] = [10 + ((rank * 37) % 64) / 10 for rank in range(64)]
    walls[5] = walls[9] = None
    timed = [(w, rank) for rank, w in enumerate(walls) if w is not None]
    fastest, slowest = min(timed), max(timed)
    line = flow(rank_items(ranks_frame(walls), 1, 3), 0, " · ").plain
    assert len(walls) > RANKS_LISTED
    assert f"this rank 0 {walls[0]:.3f} ms" in line
    assert f"fastest rank {fastest[1]} {fastest[0]:.3f} ms" in line
    assert f"slowest rank {slowest[1]} {slowest[0]:.3f} ms" in line
    assert f"median {statistics.median(w for w, _ in timed):.3f} ms" in line
    assert "no step 3 on ranks 5, 9" in line
    assert line.count(" ms") == 4  # not a list of 64 times


def test_ranks_all_alike_are_said_to_be_so() -> None:
    line = flow(rank_items(ranks_frame([156.466] * 16), 1, 0), 0, " · ").plain
    assert "all 16 with the step: 156.466 ms" in line and "fastest" not in line
