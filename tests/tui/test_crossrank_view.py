"""The overview shows the cross-rank split (transfer vs wait, straggler) for a multi-rank run."""

from __future__ import annotations

from pathlib import Path

import pytest

from textual.pilot import Pilot
from textual.widgets import DataTable

from k25trace.tui.app import K25TraceApp

pytestmark = pytest.mark.asyncio
SIZE = (150, 48)


async def settle(pilot: Pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def table(app: K25TraceApp, selector: str) -> DataTable:
    return app.screen.query_one(selector, DataTable)
REPO = Path(__file__).resolve().parents[2]
KIMI = REPO / "k25trace" / "samples" / "kimi-k25-synthetic-tp2"


@pytest.fixture(scope="module")
def kimi_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from k25trace.cli import run_load

    path = tmp_path_factory.mktemp("tui-kimi") / "kimi.duckdb"
    con, failed = run_load(path, [KIMI], quiet=True)
    con.close()
    assert failed == 0
    return path


async def test_overview_collectives_table_names_the_straggler(kimi_db: Path) -> None:
    app = K25TraceApp(kimi_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await settle(pilot)
        comm = table(app, "#comm")
        assert comm.display and comm.row_count == 6  # 3 batch sizes x (allreduce, comm_other)
        columns = [str(c.label) for c in comm.columns.values()]
        rows = [[str(getattr(v, "plain", v)) for v in comm.get_row_at(i)] for i in range(comm.row_count)]
        allreduce = [dict(zip(columns, r)) for r in rows if r[columns.index("category")] == "allreduce"]
        assert len(allreduce) == 3
        # the sample's rank 1 is made late before every 9th collective
        assert {r["straggler_rank"] for r in allreduce} == {"1"}
        assert all(float(r["wait_ms_per_step"]) > 0 for r in allreduce)
