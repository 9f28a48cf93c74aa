"""Pilot tests: drive the real app on a small real-trace database and check what the widgets show."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner
from textual.pilot import Pilot
from textual.worker import WorkerState

from k25trace.analysis import browse
from k25trace.cli import cli
from k25trace.errors import K25Error
from k25trace.tui.app import K25TraceApp
from k25trace.tui.messages import OpenKernel, OpenStep, OpenSteps, StepLoaded, StepsLoaded
from k25trace.tui.screens import base as base_screen
from k25trace.tui.screens.help import HelpScreen
from k25trace.tui.screens.kernel import KernelScreen
from k25trace.tui.screens.overview import OverviewScreen
from k25trace.tui.screens.search import SearchScreen
from k25trace.tui.screens.sql import SqlScreen
from k25trace.tui.screens.step import StepScreen
from k25trace.tui.screens.steps import StepsScreen

from .conftest import (
    KIMI,
    SIZE,
    Posted,
    lines_of,
    load_database,
    navigate,
    table,
    text_of,
    wait_for_workers,
    wait_until,
)

pytestmark = pytest.mark.asyncio


async def open_trace(pilot: Pilot, trace_id: int) -> None:
    """From the overview, move the cursor to a trace and press Enter."""
    await wait_for_workers(pilot)
    traces = table(pilot.app, "#traces")  # type: ignore[arg-type]
    traces.move_cursor(row=traces.get_row_index(str(trace_id)))
    await pilot.press("enter")
    await wait_for_workers(pilot)


async def test_overview_lists_traces_counts_and_breakdown(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        assert isinstance(app.screen, OverviewScreen)
        assert table(app, "#traces").row_count == 6
        assert "6 traces, 2 ranks, 5 runs, 227 rank-steps" in text_of(app, "#status")
        counts = table(app, "#step-counts")
        phases = [counts.get_row_at(i)[0].plain for i in range(counts.row_count)]
        assert phases == ["decode", "mixed", "prefill", "unknown"]
        breakdown = text_of(app, "#breakdown")
        # one bar per run and batch size: the SGLang and the vLLM MI300X decode steps are separate runs
        assert "sglang-mi300x-decode bs=32" in breakdown and "vllm-mi300x-decode-full" in breakdown
        assert breakdown.count("bs=32") == 2
        assert "1 rank-steps" in breakdown and "gemm" in breakdown
        assert "none" in text_of(app, "#levels-title")


async def test_enter_on_a_trace_opens_its_steps_and_filters_work(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await open_trace(pilot, 5)
        screen = app.screen
        assert isinstance(screen, StepsScreen) and screen.trace_id == 5
        assert table(app, "#steps").row_count == 117
        assert "showing 117 of 117 steps" in text_of(app, "#status")
        await pilot.press("p")  # phase: decode — this trace has only inferred 'unknown' steps
        assert table(app, "#steps").row_count == 0
        assert "No step matches" in text_of(app, "#status")
        await pilot.press("p", "p", "p")  # prefill, mixed, unknown
        assert screen.phase == "unknown" and table(app, "#steps").row_count == 117
        await pilot.press("o")  # sort by wall time, longest first
        first_key = table(app, "#steps").coordinate_to_cell_key((0, 0)).row_key.value
        longest = screen.all_steps.sort("wall_ms", descending=True)["step_index"][0]
        assert first_key == str(longest)
        await pilot.press("r")  # the other rank of the run
        await wait_for_workers(pilot)
        assert screen.trace_id == 6 and table(app, "#steps").row_count == 106


async def test_enter_posts_navigation_messages_with_the_row_ids(trace_db: Path) -> None:
    """Screens never call the app: Enter on a trace, a step and a kernel posts OpenSteps, OpenStep and OpenKernel
    with the ids of the row under the cursor, and the app opens that screen."""
    posted = Posted(OpenSteps, OpenStep, OpenKernel)
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE, message_hook=posted) as pilot:
        await open_trace(pilot, 6)
        assert posted.messages == [OpenSteps(6)]
        steps = table(app, "#steps")
        steps.move_cursor(row=steps.get_row_index("3"))
        await pilot.press("enter")
        await wait_for_workers(pilot)
        assert posted.messages[1:] == [OpenStep(6, 3)]
        screen = app.screen
        assert isinstance(screen, StepScreen) and (screen.trace_id, screen.step_index) == (6, 3)
        kernels = lines_of(app, "#kernels")
        assert kernels.has_focus and kernels.cursor_row == 0
        await pilot.press("down")  # the kernel table has the keyboard
        assert kernels.cursor_row == 1
        event_id = kernels.key(kernels.cursor_row)
        assert event_id is not None
        await pilot.press("enter")
        await wait_for_workers(pilot)
        assert posted.messages[2:] == [OpenKernel(6, int(event_id), screen.kernel_start_ns[event_id])]
        assert isinstance(app.screen, KernelScreen) and app.screen.event_id == int(event_id)


async def test_the_trace_and_the_step_under_the_cursor_are_read_ahead(trace_db: Path) -> None:
    """Once the cursor rests on a trace, the overview reads its steps; once it rests on a step, the steps screen
    reads it. Enter then hands them to the next screen, which shows them with no query of its own (its result
    message carries no worker time): the same steps and step a fetch gives."""
    posted = Posted(OpenSteps, OpenStep, StepsLoaded, StepLoaded)
    app = K25TraceApp(trace_db)
    con = duckdb.connect(str(trace_db), read_only=True)
    async with app.run_test(size=SIZE, message_hook=posted) as pilot:
        await wait_for_workers(pilot)
        overview = app.screen
        assert isinstance(overview, OverviewScreen)
        traces = table(app, "#traces")
        traces.move_cursor(row=traces.get_row_index("6"))
        await wait_until(lambda: 6 in overview.prefetched)
        await pilot.press("enter")
        await wait_for_workers(pilot)
        screen = app.screen
        assert isinstance(screen, StepsScreen) and screen.trace_id == 6
        opened = [m for m in posted.messages if isinstance(m, OpenSteps)]
        assert opened == [OpenSteps(6)] and opened[0].steps is overview.prefetched[6]
        shown = [m for m in posted.messages if isinstance(m, StepsLoaded)]
        assert [m.elapsed_ms for m in shown] == [0.0]  # no worker: the prefetched steps
        fresh = browse.trace_steps(con, 6)
        assert screen.all_steps.equals(fresh.steps) and table(app, "#steps").row_count == fresh.steps.height == 106
        assert (screen.rank, screen.next_trace_id) == (fresh.rank, fresh.next_trace_id)
        steps = table(app, "#steps")
        steps.move_cursor(row=steps.get_row_index("3"))
        await wait_until(lambda: (6, 3) in screen.prefetched)
        await pilot.press("enter")
        await wait_for_workers(pilot)
        step = app.screen
        assert isinstance(step, StepScreen) and (step.trace_id, step.step_index) == (6, 3)
        opened_step = [m for m in posted.messages if isinstance(m, OpenStep)]
        assert opened_step == [OpenStep(6, 3)] and opened_step[0].detail is screen.prefetched[(6, 3)]
        first = next(m for m in posted.messages if isinstance(m, StepLoaded) and m.request == (6, 3))
        assert first.elapsed_ms == 0.0
        want = browse.step_detail(con, 6, 3)
        assert want is not None and step.detail is not None
        assert step.detail.header == want.header and step.detail.kernels.equals(want.kernels)
        assert step.detail.categories.equals(want.categories) and step.detail.timeline == want.timeline
    con.close()


async def test_without_a_rest_on_the_row_the_next_screen_fetches(
    trace_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: with the cursor never resting long enough, nothing is read ahead and each screen fetches."""
    monkeypatch.setattr(base_screen, "PREFETCH_AFTER_S", 3600.0)
    posted = Posted(StepsLoaded, StepLoaded)
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE, message_hook=posted) as pilot:
        await open_trace(pilot, 6)
        assert isinstance(app.screen, StepsScreen) and not app.screen.prefetched
        steps = table(app, "#steps")
        steps.move_cursor(row=steps.get_row_index("3"))
        await pilot.press("enter")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, StepScreen) and app.screen.detail is not None
        fetched = [m for m in posted.messages if isinstance(m, (StepsLoaded, StepLoaded))]
        assert fetched[:2] and all(m.elapsed_ms > 0 for m in fetched[:2])  # each from its worker


async def test_step_screen_moves_between_steps_and_ranks(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(5, 1))
        screen = app.screen
        assert isinstance(screen, StepScreen)
        assert lines_of(app, "#kernels").row_count == 92
        assert "showing 92 of 92" in text_of(app, "#kernel-count")
        assert "Step 1 of 117" in text_of(app, "#title")
        assert "comm_other" in text_of(app, "#timeline")
        categories = lines_of(app, "#categories")
        assert categories.line(0).plain.split()[0] == "comm_other"  # one cell per row: the columns laid out
        assert "1: 0.273 ms" in text_of(app, "#ranks")
        await pilot.press("n")
        await wait_for_workers(pilot)
        assert screen.step_index == 2 and "Step 2 of 117" in text_of(app, "#title")
        await pilot.press("left_square_bracket")
        await wait_for_workers(pilot)
        assert screen.step_index == 1
        await pilot.press("r")
        await wait_for_workers(pilot)
        assert screen.trace_id == 6 and "rank 1" in text_of(app, "#title")


async def test_every_step_read_is_drawn_off_the_ui_thread_and_shown_as_drawn(
    trace_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead worker draws each step's tables: those it reads, and those read already but not drawn (the
    step opened first, fetched). Moving back to the first step then paints what the worker drew, the same lines
    and keys as drawn on the screen."""
    from k25trace.tui.screens import step as step_screen

    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(5, 1))
        screen = app.screen
        assert isinstance(screen, StepScreen)
        await wait_for_workers(pilot)
        assert {(5, 1), (5, 2), (5, 3), (5, 0), (6, 1)} <= set(screen.drawn)  # the first, ahead, behind, next rank
        on_screen = [lines_of(app, "#kernels").line(i).plain for i in range(lines_of(app, "#kernels").row_count)]
        drawn = screen.drawn[(5, 1)]
        assert [line.plain for line in drawn.kernel_lines] == on_screen
        await pilot.press("n")
        await wait_for_workers(pilot)
        drawn_here: list[object] = []
        monkeypatch.setattr(step_screen, "kernel_lines", lambda page: drawn_here.append(page) or [])
        await pilot.press("p")  # back to the first step: nothing drawn on the UI thread
        await wait_for_workers(pilot)
        assert screen.step_index == 1 and drawn_here == []
        table = lines_of(app, "#kernels")
        assert [table.line(i).plain for i in range(table.row_count)] == on_screen
        assert [table.key(i) for i in range(table.row_count)] == drawn.kernel_keys


async def test_a_step_move_paints_the_step_before_the_read_ahead_starts(
    trace_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead worker starts once the step moved to is painted: started before (as the screen's own
    call_after_refresh did, ~4 ms after the key), it competed with the paint for the CPU and the GIL, and a move
    forward took 4 ms longer than a move back (measured)."""
    events: list[str] = []
    app = K25TraceApp(trace_db)
    real_display = app._display

    def display(screen: Any, renderable: Any) -> None:
        if renderable is not None and isinstance(app.screen, StepScreen):
            events.append("paint: " + text_of(app, "#title"))
        real_display(screen, renderable)

    real_read_ahead = StepScreen.read_ahead

    def read_ahead(self: StepScreen) -> None:
        events.append("read ahead")
        real_read_ahead(self)

    monkeypatch.setattr(app, "_display", display)
    monkeypatch.setattr(StepScreen, "read_ahead", read_ahead)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(5, 1))
        await wait_for_workers(pilot)  # steps 2 and 3 read ahead: step 2 is shown from memory
        events.clear()
        await pilot.press("n")
        await wait_for_workers(pilot)
    assert "read ahead" in events
    painted_before = events[: events.index("read ahead")]
    assert any("Step 2 of 117" in event for event in painted_before), events


async def test_big_step_shows_a_page_and_loads_more(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(2, 0))  # the eager prefill step: 929 GPU activities
        assert lines_of(app, "#kernels").row_count == 100
        assert "showing 100 of 929" in text_of(app, "#kernel-count")
        await pilot.press("m")
        await wait_for_workers(pilot)
        assert lines_of(app, "#kernels").row_count == 200
        for _ in range(8):
            await pilot.press("m")
            await wait_for_workers(pilot)
        assert lines_of(app, "#kernels").row_count == 929
        assert "showing 929 of 929" in text_of(app, "#kernel-count")
        offsets = [lines_of(app, "#kernels").line(i).plain.split()[0] for i in (0, 99, 100, 928)]
        values = [float(o.replace(",", "")) for o in offsets]
        assert values == sorted(values)  # the second page continues the time order


async def test_missing_step_and_first_step_edges_are_messages(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(5, 9999))
        assert "has no step 9999" in text_of(app, "#status")
        await navigate(pilot, OpenStep(5, 0))
        await pilot.press("p")  # there is no step before 0
        await wait_for_workers(pilot)
        assert app.screen.step_index == 0  # type: ignore[attr-defined]
        assert any("No previous step" in str(n.message) for n in app._notifications)


async def test_enter_on_a_kernel_opens_its_details(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenStep(5, 1))
        await pilot.press("enter")  # the first kernel of the step
        await wait_for_workers(pilot)
        assert isinstance(app.screen, KernelScreen)
        info = text_of(app, "#kernel-info")
        assert "Memcpy HtoD" in info and "cudaMemcpyAsync" in info and "launch: direct" in info
        assert table(app, "#per-rank").row_count == 2  # both ranks ran it
        assert table(app, "#per-step").row_count > 1
        await pilot.press("escape")
        assert isinstance(app.screen, StepScreen)


async def test_graph_kernel_says_cuda_graph(trace_db: Path) -> None:
    con = duckdb.connect(str(trace_db), read_only=True)
    row = con.execute(
        "select g.trace_id, g.event_id, g.start_ns from gpu_events g join launches l using (trace_id, correlation) "
        "where l.name ilike '%graphlaunch%' order by g.trace_id, g.start_ns limit 1"
    ).fetchone()
    con.close()
    if row is None:
        pytest.skip("no graph-launched kernel in the samples")
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await navigate(pilot, OpenKernel(*row))
        assert "launch: CUDA graph" in text_of(app, "#kernel-info")


async def test_search_finds_kernels_and_opens_one(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await pilot.press("slash")
        assert isinstance(app.screen, SearchScreen)
        await pilot.press(*"sendrecv", "enter")
        await wait_for_workers(pilot)
        results = table(app, "#results")
        assert results.row_count == 1
        assert "ncclKernel_SendRecv" in results.get_row_at(0)[0].plain
        await pilot.press("enter")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, KernelScreen)
        assert "ncclKernel_SendRecv" in text_of(app, "#kernel-info")


async def test_sql_panel_runs_queries_reports_errors_and_cancels(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await pilot.press("e")
        await wait_for_workers(pilot)
        assert isinstance(app.screen, SqlScreen)
        assert app.screen.query_one("#schema").root.children  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")  # the default query: time per category
        await wait_for_workers(pilot)
        assert table(app, "#results").row_count > 3
        assert "row(s)" in text_of(app, "#status")
        editor = app.screen.query_one("#editor")
        editor.text = "select * from no_such_table"  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await wait_for_workers(pilot)
        assert "query failed" in text_of(app, "#status") and "no_such_table" in text_of(app, "#status")
        editor.text = "select count(*) from range(100000) a, range(100000) b where a.range * b.range % 7 = 3"  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        (sql_worker,) = [w for w in app.workers if w.group == "sql"]
        await wait_until(lambda: sql_worker.state == WorkerState.RUNNING)
        for _ in range(20):  # a worker can be running before its query is: press again until the query stops
            await pilot.press("ctrl+g")
            try:
                await asyncio.wait_for(asyncio.shield(sql_worker.wait()), timeout=1)
                break
            except asyncio.TimeoutError:
                continue
        await wait_for_workers(pilot)
        assert sql_worker.state == WorkerState.SUCCESS and "nterrupt" in text_of(app, "#status")
        editor.text = "insert into meta values ('x', 'y')"  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await wait_for_workers(pilot)
        assert "read-only" in text_of(app, "#status")


async def test_named_query_loads_with_its_parameters(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await pilot.press("e")
        await wait_for_workers(pilot)
        names = table(app, "#named-queries")
        names.focus()
        names.move_cursor(row=names.get_row_index("report_kernels"))
        await pilot.press("enter")
        params = "phase=decode rank=null trace_id=null top=20 batch_size=null run_id=null"
        assert app.screen.query_one("#params").value == params  # type: ignore[attr-defined]
        await pilot.press("ctrl+r")
        await wait_for_workers(pilot)
        assert table(app, "#results").row_count == 20


async def test_help_lists_every_key(trace_db: Path) -> None:
    app = K25TraceApp(trace_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        help_text = text_of(app, "#help-text")
        screens = (K25TraceApp, StepsScreen, StepScreen, KernelScreen, SqlScreen, SearchScreen, OverviewScreen)
        for screen_class in screens:
            for binding in screen_class.BINDINGS:
                assert binding.description in help_text  # type: ignore[union-attr]
        await pilot.press("escape")
        assert isinstance(app.screen, OverviewScreen)


async def test_empty_database_says_so(empty_db: Path) -> None:
    app = K25TraceApp(empty_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        assert "no traces yet" in text_of(app, "#status")
        assert "no decode steps" in text_of(app, "#breakdown")
        await navigate(pilot, OpenSteps(1))
        assert "has no steps" in text_of(app, "#status")


async def test_an_empty_duckdb_file_is_said_before_the_tui_starts(tmp_path: Path) -> None:
    """A DuckDB file with no tables: `k25trace tui` says so and how to fill it, and starts no app (its first query
    would only fail on the missing tables)."""
    path = tmp_path / "plain.duckdb"
    duckdb.connect(str(path)).close()
    with pytest.raises(K25Error, match="an empty DuckDB file .no k25trace tables, no traces.: load some"):
        K25TraceApp(path)
    result = CliRunner().invoke(cli, ["tui", "--db", str(path)])
    assert result.exit_code == 1 and "k25trace load TRACE... --db" in result.output, result.output


# ------------------------------------------------------------------------------- the cross-rank split (overview)


@pytest.fixture(scope="module")
def kimi_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load_database(tmp_path_factory.mktemp("tui-kimi") / "kimi.duckdb", [KIMI], files=2)


async def test_overview_collectives_table_names_the_straggler(kimi_db: Path) -> None:
    app = K25TraceApp(kimi_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)  # the overview, then its second part
        comm = table(app, "#comm")
        assert comm.display and comm.row_count == 6  # 3 batch sizes x (allreduce, comm_other)
        columns = [str(c.label) for c in comm.columns.values()]
        rows = [[str(getattr(v, "plain", v)) for v in comm.get_row_at(i)] for i in range(comm.row_count)]
        allreduce = [dict(zip(columns, r, strict=True)) for r in rows if r[columns.index("category")] == "allreduce"]
        assert len(allreduce) == 3
        # the sample's rank 1 is made late before every 9th collective
        assert {r["straggler_rank"] for r in allreduce} == {"1"}
        assert all(float(r["wait_ms_per_step"]) > 0 for r in allreduce)


OVERVIEW_FIRST = """
import asyncio, sys
from pathlib import Path
from k25trace.tui.app import K25TraceApp

async def main():
    app = K25TraceApp(Path(sys.argv[1]))
    seen = {}

    def hook(message):
        name = type(message).__name__
        if name in ("OverviewLoaded", "FindingsLoaded") and name not in seen:
            app.call_after_refresh(lambda: seen.setdefault(name, "polars" in sys.modules))

    async with app.run_test(size=(150, 48), message_hook=hook) as pilot:
        while "FindingsLoaded" not in seen:
            await asyncio.sleep(0.01)
        traces = app.screen.query_one("#traces")
        findings = str(app.screen.query_one("#findings").text)
        await pilot.press("enter")
        while type(app.screen).__name__ != "StepsScreen":
            await asyncio.sleep(0.01)
    print(seen["OverviewLoaded"], seen["FindingsLoaded"], traces.row_count, "computing" not in findings)

asyncio.run(main())
"""


async def test_the_overview_paints_before_polars_is_imported(trace_db: Path) -> None:
    """The first screen is read without polars (~0.1-0.2 s of start-up): its traces are painted before polars is
    imported; the findings, read after that paint, bring it; the steps screen then opens from the overview (the
    other screens are imported once the overview is painted). A new process: this one has polars already."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", OVERVIEW_FIRST, str(trace_db)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["False", "True", "6", "True"], done.stdout
