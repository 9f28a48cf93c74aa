"""SVG snapshots of each screen (pytest-textual-snapshot); update only after reading the report."""

from __future__ import annotations

from pathlib import Path

from textual.pilot import Pilot
from textual.widgets import DataTable

from k25trace.tui.app import K25TraceApp
from k25trace.tui.messages import OpenStep, OpenSteps

from .conftest import SIZE, navigate, wait_until
from .conftest import wait_for_workers as settle


class TestScreens:
    def test_overview(self, snap_compare, trace_db: Path) -> None:
        """The overview: traces by run, step counts, decode breakdown bars."""
        assert snap_compare(K25TraceApp(trace_db), run_before=settle, terminal_size=SIZE)

    def test_steps(self, snap_compare, trace_db: Path) -> None:
        """The steps of rank 0 of the two-rank run, sorted by wall time."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await navigate(pilot, OpenSteps(5))
            await pilot.press("o")  # sort: wall time, longest first

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_step(self, snap_compare, trace_db: Path) -> None:
        """One step: timeline strip, kernels in time order, categories, the other rank."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await navigate(pilot, OpenStep(5, 1))

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_kernel(self, snap_compare, trace_db: Path) -> None:
        """A NCCL kernel: names, launch, grid/block, collective args, variation over steps and ranks."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await pilot.press("slash", *"sendrecv", "enter")
            await settle(pilot)
            await pilot.press("enter")  # open its first run
            await settle(pilot)

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_search(self, snap_compare, trace_db: Path) -> None:
        """Search results for a kernel-name fragment."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await pilot.press("slash", *"gemm", "enter")
            await settle(pilot)

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_sql(self, snap_compare, trace_db: Path) -> None:
        """The SQL panel after running the default query."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await pilot.press("e")
            await settle(pilot)
            await pilot.press("ctrl+r")
            await settle(pilot)
            results = pilot.app.screen.query_one("#results", DataTable)
            await wait_until(lambda: results.row_count > 0)  # the rows are shown, so their status line is set
            pilot.app.screen.set_status("(timing hidden for the snapshot)")  # type: ignore[attr-defined]

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_help(self, snap_compare, trace_db: Path) -> None:
        """The help screen lists every key."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await pilot.press("question_mark")

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)

    def test_light_theme_step(self, snap_compare, trace_db: Path) -> None:
        """Category colours on the light theme."""

        async def run_before(pilot: Pilot) -> None:
            await settle(pilot)
            await pilot.press("t")
            await navigate(pilot, OpenStep(5, 1))

        assert snap_compare(K25TraceApp(trace_db), run_before=run_before, terminal_size=SIZE)
