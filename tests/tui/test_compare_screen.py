"""The Compare screen (`d` from the overview): pick two runs, see what changed and whether it is beyond the noise.

The database holds three synthetic runs of one workload (k25trace.synth): the base, the same run again with other
noise, and attention made 20 % slower."""

from __future__ import annotations

from pathlib import Path

import pytest

from k25trace import synth
from k25trace.tui.app import K25TraceApp
from k25trace.tui.screens.compare import CompareScreen
from k25trace.tui.screens.help import HelpScreen
from k25trace.tui.screens.overview import OverviewScreen

from .conftest import SIZE, load_database, rows_of, table, text_of, wait_for_workers

pytestmark = pytest.mark.asyncio

SYNTH = dict(ranks=2, batch_sizes=(1, 64), steps_per_batch=12, layers=4, prefill=False, empty_steps=0, seed=11)


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("compare-tui")
    folders = []
    for name, extra in (
        ("base", {}),
        ("again", {"noise_seed": 1}),
        ("slow", {"noise_seed": 2, "category_scale": {"attention": 1.2}}),
    ):
        synth.generate(root / name, **SYNTH, **extra)
        folders.append(root / name)
    return load_database(root / "runs.duckdb", folders, files=6)


async def pick(pilot, run: str, key: str) -> None:  # type: ignore[no-untyped-def]
    runs = rows_of(pilot.app, "#compare-runs")
    table(pilot.app, "#compare-runs").move_cursor(row=[r["run"] for r in runs].index(run))
    await pilot.press(key)
    await wait_for_workers(pilot)


async def test_compare_screen_finds_the_slower_category_and_calls_noise_no_change(runs_db: Path) -> None:
    app = K25TraceApp(runs_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        assert isinstance(app.screen, OverviewScreen)
        await pilot.press("d")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, CompareScreen)
        assert [r["run"] for r in rows_of(app, "#compare-runs")] == ["again (TP2)", "base (TP2)", "slow (TP2)"]
        assert "Pick side A" in text_of(app, "#status")
        assert not table(app, "#compare-category").display  # nothing to show before two runs are picked

        await pick(pilot, "base (TP2)", "a")
        assert "pick side B" in text_of(app, "#status")
        await pick(pilot, "slow (TP2)", "b")
        assert [(r["side"], r["run"]) for r in rows_of(app, "#compare-runs") if r["side"]] == [
            ("A", "base (TP2)"),
            ("B", "slow (TP2)"),
        ]
        verdict = text_of(app, "#compare-verdict")
        assert "Verdict: " in verdict and "bs=1: attention slower" in verdict and "bs=64: attention slower" in verdict
        changed = [
            (r["group"], r["category"])
            for r in rows_of(app, "#compare-category")
            if r["verdict"] in ("slower", "faster")
        ]
        assert changed == [("bs=1", "attention"), ("bs=64", "attention")]
        assert table(app, "#compare-kernel").display and table(app, "#compare-step").display
        assert table(app, "#compare-comm").display  # two ranks on both sides: transfer and wait compared
        assert not table(app, "#compare-macro").display  # not from `k25trace capture`

        # the same workload run again: no change
        await pick(pilot, "again (TP2)", "b")
        assert "Verdict: no change" in text_of(app, "#compare-verdict")
        assert {r["verdict"] for r in rows_of(app, "#compare-category")} == {"within noise"}

        # swap: B is now the base; m cycles how steps are matched
        await pilot.press("s")
        await wait_for_workers(pilot)
        assert [(r["side"], r["run"]) for r in rows_of(app, "#compare-runs") if r["side"]] == [
            ("A", "again (TP2)"),
            ("B", "base (TP2)"),
        ]
        await pilot.press("m")  # auto -> batch
        await wait_for_workers(pilot)
        await pilot.press("m")  # batch -> level: these runs have no level, so all their steps are one group
        await wait_for_workers(pilot)
        assert "matched by level" in text_of(app, "#status")
        assert {r["group"] for r in rows_of(app, "#compare-category")} == {"(no level)"}

        await pilot.press("question_mark")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, HelpScreen) and "Compare" in text_of(app, "#help-text")
