"""The k25trace TUI app: owns the read-only connection, the screen stack and the keys that work everywhere.

Threading rule: DuckDB runs only in thread workers (:meth:`BrowseScreen.fetch`), each on a cursor of its own
taken from :meth:`K25TraceApp.query_cursor`; workers post typed result messages and handlers on the screens
change widgets. ``ctrl+g`` interrupts every cursor in use, so a long query can be cancelled.

Dependencies point one way: the app imports the screens; screens never import the app. They take cursors through
the :class:`~k25trace.tui.screens.base.CursorSource` protocol and ask for another screen by posting
:class:`~k25trace.tui.messages.OpenSteps`, :class:`~k25trace.tui.messages.OpenStep` or
:class:`~k25trace.tui.messages.OpenKernel`, which bubble up to the handlers here.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

import duckdb
from textual import on
from textual.app import App
from textual.binding import Binding, BindingType
from textual.worker import Worker, WorkerState

from k25trace.pipeline import connect
from k25trace.tui.messages import OpenKernel, OpenStep, OpenSteps
from k25trace.tui.screens.help import HelpScreen
from k25trace.tui.screens.overview import OverviewScreen

# The other screens import polars and the analysis modules (~0.2 s): each is imported when first opened, so that
# the overview paints without them (k25trace.analysis.overview).

YOUNG_OBJECTS_PER_COLLECTION = 10_000
"""Python's cyclic garbage collector runs a young collection every 700 new objects by default; a Textual paint
allocates some ten thousand, and the survivors soon add up to a full collection of every object in the process
(≈ 150 ms, landing in the middle of a step move). While the app runs it collects every 10,000 instead."""


class K25TraceApp(App[None]):
    """Browse a k25trace database: overview → steps of a rank → one step → one kernel; search; SQL."""

    CSS_PATH = "app.tcss"
    TITLE = "k25trace"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark", "help", "Help"),
        Binding("slash", "search", "Search"),
        Binding("e", "sql", "SQL"),
        Binding("c", "collectives", "Collectives"),
        Binding("d", "compare", "Compare"),
        Binding("h", "home", "Overview"),
        Binding("ctrl+g", "cancel_queries", "Cancel query", priority=True),
        Binding("t", "toggle_theme", "Light/dark"),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, db_path: Path, *, connection: duckdb.DuckDBPyConnection | None = None) -> None:
        super().__init__()
        self.db_path = Path(db_path)
        self.con = connection or connect(self.db_path, read_only=True)
        self.sub_title = self.db_path.name
        self._cursor_lock = threading.Lock()
        self._active_cursors: set[duckdb.DuckDBPyConnection] = set()
        self._gc_thresholds = gc.get_threshold()

    def on_mount(self) -> None:
        self._gc_thresholds = gc.get_threshold()
        gc.set_threshold(YOUNG_OBJECTS_PER_COLLECTION, *self._gc_thresholds[1:])
        self.push_screen(OverviewScreen(self.db_path.name))

    @contextmanager
    def query_cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of its own for one worker; registered so that :meth:`action_cancel_queries` can interrupt it."""
        cursor = self.con.cursor()
        with self._cursor_lock:
            self._active_cursors.add(cursor)
        try:
            yield cursor
        finally:
            with self._cursor_lock:
                self._active_cursors.discard(cursor)
            cursor.close()

    def on_open_steps(self, message: OpenSteps) -> None:
        from k25trace.tui.screens.steps import StepsScreen

        self.push_screen(StepsScreen(message.trace_id, steps=message.steps))

    def on_open_step(self, message: OpenStep) -> None:
        from k25trace.tui.screens.step import StepScreen

        self.push_screen(StepScreen(message.trace_id, message.step_index, detail=message.detail))

    def on_open_kernel(self, message: OpenKernel) -> None:
        from k25trace.tui.screens.kernel import KernelScreen

        self.push_screen(KernelScreen(message.trace_id, message.event_id, message.start_ns))

    def current_trace(self) -> int | None:
        return getattr(self.screen, "trace_id", None)

    def action_help(self) -> None:
        from k25trace.tui.screens.comm import CommScreen
        from k25trace.tui.screens.compare import CompareScreen
        from k25trace.tui.screens.kernel import KernelScreen
        from k25trace.tui.screens.search import SearchScreen
        from k25trace.tui.screens.sql import SqlScreen
        from k25trace.tui.screens.step import StepScreen
        from k25trace.tui.screens.steps import StepsScreen

        sections: list[tuple[str, list[BindingType]]] = [
            ("Everywhere", list(self.BINDINGS)),
            ("Overview", list(OverviewScreen.BINDINGS)),
            ("Steps", list(StepsScreen.BINDINGS)),
            ("Step", list(StepScreen.BINDINGS)),
            ("Kernel", list(KernelScreen.BINDINGS)),
            ("Collectives", list(CommScreen.BINDINGS)),
            ("Compare", list(CompareScreen.BINDINGS)),
            ("Search", list(SearchScreen.BINDINGS)),
            ("SQL", list(SqlScreen.BINDINGS)),
            (
                "Tables",
                [
                    Binding("up,down,pageup,pagedown,home,end", "", "move the cursor"),
                    Binding("enter", "", "open the row"),
                ],
            ),
        ]
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(sections))

    def action_search(self) -> None:
        from k25trace.tui.screens.search import SearchScreen

        if not isinstance(self.screen, SearchScreen):
            self.push_screen(SearchScreen(self.current_trace()))

    def action_collectives(self) -> None:
        from k25trace.tui.screens.comm import CommScreen

        if not isinstance(self.screen, CommScreen):
            self.push_screen(CommScreen())

    def action_compare(self) -> None:
        from k25trace.tui.screens.compare import CompareScreen  # deferred: it imports the comparison and numpy

        if not isinstance(self.screen, CompareScreen):
            self.push_screen(CompareScreen(self.db_path.name))

    def action_sql(self) -> None:
        from k25trace.tui.screens.sql import SqlScreen

        if not isinstance(self.screen, SqlScreen):
            self.push_screen(SqlScreen())

    def action_home(self) -> None:
        while len(self.screen_stack) > 2:
            self.pop_screen()

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def action_cancel_queries(self) -> None:
        """Interrupt every query that is running; its screen then says it was interrupted."""
        with self._cursor_lock:
            cursors = list(self._active_cursors)
        for cursor in cursors:
            cursor.interrupt()
        self.notify(
            f"cancelled {len(cursors)} running quer{'y' if len(cursors) == 1 else 'ies'}"
            if cursors
            else "no query is running"
        )

    async def action_pop_screen(self) -> None:
        """Back; the overview is the bottom and stays."""
        if len(self.screen_stack) > 2:
            self.pop_screen()

    @on(Worker.StateChanged)
    def report_worker_error(self, event: Worker.StateChanged) -> None:
        """An unexpected error in a worker becomes a notification, never a traceback."""
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(
                f"{type(event.worker.error).__name__}: {event.worker.error}",
                title="error",
                severity="error",
                timeout=10,
            )

    def on_unmount(self) -> None:
        """Stop queries still running (quitting must not wait for them), then close the connection."""
        gc.set_threshold(*self._gc_thresholds)
        with self._cursor_lock:
            cursors = list(self._active_cursors)
        for cursor in cursors:
            cursor.interrupt()
        try:
            self.con.close()
        except duckdb.Error:
            pass  # a worker is still unwinding from its interrupted query; the process is ending anyway


def run_tui(db_path: Path) -> None:
    """Open ``db_path`` read-only and run the TUI until the user quits."""
    K25TraceApp(db_path).run()
