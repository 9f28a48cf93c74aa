"""The Collectives screen (`c`) on the real two-H200 CUDA-graph traces: the straggler by caused wait, wait
suffered and caused per rank, and the call sites of a batch size with the spin-delayed site first."""

from __future__ import annotations

from pathlib import Path

import pytest

from k25trace.tui.app import K25TraceApp
from k25trace.tui.screens.comm import CommScreen

from .conftest import DATA, SIZE, load_database, rows_of, table, text_of, wait_for_workers

pytestmark = pytest.mark.asyncio

GRAPH = DATA / "h200x2-decode-loop" / "graph"


@pytest.fixture(scope="module")
def tp2_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load_database(tmp_path_factory.mktemp("comm") / "tp2.duckdb", [GRAPH], files=2)


async def test_collectives_screen_straggler_ranks_and_call_sites(tp2_db: Path) -> None:
    app = K25TraceApp(tp2_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)  # the overview, then its second part
        # the overview's decode bars say how much time lies between steps, one line per bar at the app's width
        bars = text_of(app, "#breakdown")
        assert bars.count(" ms between steps") == 3, bars
        assert all(len(line) <= SIZE[0] - 2 for line in bars.splitlines()), bars
        await pilot.press("c")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, CommScreen)
        assert "alignment good" in text_of(app, "#status")
        batches = [r for r in rows_of(app, "#comm-batches") if r["category"] == "allreduce"]
        assert [r["batch_size"] for r in batches] == ["1", "8", "64"]
        # batch 8 and 64: rank 0 (the spin kernel, the heavier MoE ranks) causes most wait, rank 1 is more often last
        assert [(r["straggler_rank"], r["last_rank"]) for r in batches[1:]] == [("0", "1"), ("0", "1")]
        ranks = [r for r in rows_of(app, "#comm-ranks") if r["category"] == "allreduce"]
        assert [r["rank"] for r in ranks] == ["0", "1"]
        assert all(float(r["caused_wait_ms_per_step"]) > 0 for r in ranks)
        # Enter on the batch-8 all-reduce row: its call sites, the most waited-on first
        t = table(app, "#comm-batches")
        all_rows = rows_of(app, "#comm-batches")
        t.move_cursor(
            row=next(i for i, r in enumerate(all_rows) if r["batch_size"] == "8" and r["category"] == "allreduce")
        )
        await pilot.press("enter")
        await wait_for_workers(pilot)
        sites = rows_of(app, "#comm-sites")
        assert len(sites) == 123
        waits = [float(s["wait_us"].replace(",", "")) for s in sites]
        assert waits == sorted(waits, reverse=True)
        spun = next(s for s in sites if s["site"] == "9")
        assert spun["late_rank"] == "0" and float(spun["max_wait_us"].replace(",", "")) > 250
        assert "batch 8 allreduce" in text_of(app, "#sites-title")
