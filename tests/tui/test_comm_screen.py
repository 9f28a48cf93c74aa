"""The Collectives screen (`c`) on the real two-H200 CUDA-graph traces: the straggler by caused wait, wait
suffered and caused per rank, and the call sites of a batch size with the spin-delayed site first."""

from __future__ import annotations

from pathlib import Path

import pytest

from k25trace import db, ingest, pipeline
from k25trace.tui.app import K25TraceApp
from k25trace.tui.screens.comm import CommScreen

from .test_app import SIZE, settle, table, text_of

pytestmark = pytest.mark.asyncio

GRAPH = Path(__file__).resolve().parent.parent / "data" / "h200x2-decode-loop" / "graph"


@pytest.fixture(scope="module")
def tp2_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("comm") / "tp2.duckdb"
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, [GRAPH])
    assert [r.status for r in results] == ["loaded", "loaded"]
    con.close()
    return path


def rows_of(app: K25TraceApp, selector: str) -> list[dict[str, str]]:
    t = table(app, selector)
    columns = [str(c.label) for c in t.columns.values()]
    return [dict(zip(columns, (str(getattr(v, "plain", v)) for v in t.get_row_at(i)))) for i in range(t.row_count)]


async def test_collectives_screen_straggler_ranks_and_call_sites(tp2_db: Path) -> None:
    app = K25TraceApp(tp2_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await settle(pilot)
        # the overview's decode bars say how much of the GPU span lies between steps
        bars = text_of(app, "#breakdown")
        assert bars.count("between (") == 3, bars
        await pilot.press("c")
        await settle(pilot)
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
        t.move_cursor(row=next(i for i, r in enumerate(all_rows) if r["batch_size"] == "8" and r["category"] == "allreduce"))
        await pilot.press("enter")
        await settle(pilot)
        sites = rows_of(app, "#comm-sites")
        assert len(sites) == 123
        waits = [float(s["wait_us"].replace(",", "")) for s in sites]
        assert waits == sorted(waits, reverse=True)
        spun = next(s for s in sites if s["site"] == "9")
        assert spun["late_rank"] == "0" and float(spun["max_wait_us"].replace(",", "")) > 250
        assert "batch 8 allreduce" in text_of(app, "#sites-title")
