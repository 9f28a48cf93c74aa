"""The step screen's layer strip: moving through a step's segments (pre, layers, post) lists each one's kernels.

The truth is the eager h200-layers fixture's ``record_function`` ranges (tests/data/h200-layers/truth.json, written
from the raw eager traces and checked by tests/test_h200_layers_fixture.py): per batch size, each segment's [start,
end) indices into the step's GPU activities, the same in the eager trace and its CUDA-graph twin (where the
segments are inferred from the kernel sequence). Positions become event ids by SQL written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from textual.pilot import Pilot

from k25trace.tui.app import K25TraceApp
from k25trace.tui.messages import OpenStep
from k25trace.tui.screens.step import StepScreen
from k25trace.tui.widgets.layer_strip import LayerStrip

from .conftest import DATA, SIZE, TWO_RANK, load_database, navigate, wait_for_workers

LAYERS = DATA / "h200-layers"
TRUTH = json.loads((LAYERS / "truth.json").read_text()) if (LAYERS / "truth.json").exists() else None
GRAPH, EAGER, HTA = 1, 2, 3
"""Trace ids in the database: the Marlin graph twin, its eager truth, one rank of a training trace."""


@pytest.fixture(scope="module")
def layers_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if TRUTH is None:
        pytest.skip("tests/data/h200-layers is not there")
    return load_database(
        tmp_path_factory.mktemp("tui-layers") / "k25trace-layers.duckdb",
        [LAYERS / "graph", LAYERS / "eager", TWO_RANK[0]],
        files=3,
    )


def step_events(db: Path, trace_id: int, step_index: int) -> tuple[list[str], int]:
    """The step's GPU activities' event ids in GPU order (start, end, event id), and its batch size."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        ids = [
            str(r[0])
            for r in con.execute(
                "select event_id from gpu_events where trace_id = ? and step_index = ? order by start_ns, end_ns, event_id",
                [trace_id, step_index],
            ).fetchall()
        ]
        (batch,) = con.execute(
            "select batch_size from steps where trace_id = ? and step_index = ?", [trace_id, step_index]
        ).fetchone() or (None,)
    finally:
        con.close()
    return ids, int(batch)


def truth_ranges(batch: int) -> list[tuple[str, int, int]]:
    """The segments of a step of ``batch``: (label, start, end) positions; the post also holds the next tokens'
    DtoH copy, which the truth leaves out of its steps."""
    segments = TRUTH["sets"]["marlin"]["batches"][str(batch)]["segments"]  # type: ignore[index]
    out = [("pre" if n == "pre" else "post" if n == "post" else n.rsplit(".", 1)[1], s, e) for n, s, e in segments]
    label, start, end = out[-1]
    return [*out[:-1], (label, start, end + 1)]


def table_keys(app: K25TraceApp) -> list[str | None]:
    from k25trace.tui.widgets import LineTable

    kernels = app.screen.query_one("#kernels", LineTable)
    return [kernels.key(i) for i in range(kernels.row_count)]


def strip_of(app: K25TraceApp) -> str:
    return app.screen.query_one("#layer-strip", LayerStrip).render().plain


def label_of(app: K25TraceApp, selector: str) -> str:
    from textual.widgets import Label

    return str(app.screen.query_one(selector, Label).render())


async def press(pilot: Pilot, *keys: str) -> None:
    await pilot.press(*keys)
    await wait_for_workers(pilot)


@pytest.mark.asyncio
@pytest.mark.parametrize(("trace_id", "step_index"), [(GRAPH, 1), (GRAPH, 14), (EAGER, 9)])
async def test_moving_through_layers_lists_each_segments_kernels(
    layers_db: Path, trace_id: int, step_index: int
) -> None:
    """``.`` walks pre, layers 0..15, post and back to the whole step; each segment's kernels are the truth's."""
    ids, batch = step_events(layers_db, trace_id, step_index)
    truth = truth_ranges(batch)
    app = K25TraceApp(layers_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(trace_id, step_index))
        assert isinstance(app.screen, StepScreen)
        evidence = "from the kernel sequence" if trace_id == GRAPH else "from layer annotations"
        assert f"layers: {TRUTH['layers']} {evidence}" in strip_of(app)  # type: ignore[index]
        assert "whole step" in strip_of(app) and table_keys(app) == ids[:100]
        for label, start, end in truth:
            await press(pilot, "full_stop")
            assert table_keys(app) == ids[start:end], label
            name = "layer " + label if label not in ("pre", "post") else label
            assert label_of(app, "#kernel-count").startswith(name)
            assert f"showing {end - start} of {end - start}" in label_of(app, "#kernel-count")
            assert f"   {name}   " in strip_of(app)
        await press(pilot, "full_stop")  # past post: the whole step again
        assert "whole step" in strip_of(app) and table_keys(app) == ids[:100]
        await press(pilot, "comma")  # back from the whole step: post
        assert table_keys(app) == ids[truth[-1][1] : truth[-1][2]]


@pytest.mark.asyncio
async def test_the_layer_stays_across_steps_and_the_odd_layer_is_flagged(layers_db: Path) -> None:
    """n keeps the layer the strip is on; the layer with twice the experts' work is the one marked slow, and its
    category split adds up to its wall."""
    odd = TRUTH["odd_layer"]  # type: ignore[index]
    app = K25TraceApp(layers_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(GRAPH, 6))
        screen = app.screen
        assert isinstance(screen, StepScreen)
        strip = strip_of(app)
        cells = strip[strip.index("pre ") + 4 : strip.index(" post")]
        assert cells == "d" + "m" * (odd - 1) + "!" + "m" * (TRUTH["layers"] - odd - 1)  # type: ignore[index]
        await press(pilot, *["full_stop"] * (odd + 2))
        assert label_of(app, "#kernel-count").startswith(f"layer {odd} (moe)") and ", slow —" in label_of(
            app, "#kernel-count"
        )
        await press(pilot, "n")
        assert screen.step_index == 7 and label_of(app, "#kernel-count").startswith(f"layer {odd} (moe)")
        ids, batch = step_events(layers_db, GRAPH, 7)
        _, start, end = truth_ranges(batch)[odd + 1]
        assert table_keys(app) == ids[start:end]
        from k25trace.tui.widgets import LineTable

        categories = app.screen.query_one("#categories", LineTable)
        pct = [float(categories.line(i).plain.split()[2]) for i in range(categories.row_count)]
        assert abs(sum(pct) - 100) < 0.5 * len(pct)


@pytest.mark.asyncio
async def test_unsegmented_step_says_why(layers_db: Path) -> None:
    app = K25TraceApp(layers_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(HTA, 1))
        assert strip_of(app) == "layers: not segmented: no repeating kernel sequence (not periodic)"
        before = table_keys(app)
        await press(pilot, "full_stop")
        assert table_keys(app) == before


def test_layer_strip_snapshot(snap_compare, layers_db: Path) -> None:
    """The step screen of a CUDA-graph step on its odd layer: the strip, the layer's kernels and category split."""

    async def run_before(pilot: Pilot) -> None:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(GRAPH, 14))
        await press(pilot, *["full_stop"] * (TRUTH["odd_layer"] + 2))  # type: ignore[index]

    assert snap_compare(K25TraceApp(layers_db), run_before=run_before, terminal_size=SIZE)
