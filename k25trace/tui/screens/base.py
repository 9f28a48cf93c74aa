"""The base of every data screen: one way to run a browse call in a thread worker and get a message back."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.markup import escape
from textual.screen import Screen
from textual.worker import get_current_worker

from k25trace.errors import K25Error
from k25trace.tui.messages import Fetched, FetchFailed

if TYPE_CHECKING:
    import duckdb

    from k25trace.tui.app import K25TraceApp


class BrowseScreen(Screen[None]):
    """A screen whose data comes from :mod:`k25trace.browse` through :meth:`fetch`."""

    @property
    def browse_app(self) -> "K25TraceApp":
        """The app, typed (it owns the read-only connection and the cursors in use)."""
        return self.app  # type: ignore[return-value]

    @work(thread=True, exclusive=True, exit_on_error=False, group="fetch", description="browse query")
    def fetch(self, request: str, call: Callable[["duckdb.DuckDBPyConnection"], Any]) -> None:
        """Run ``call(cursor)`` off the UI thread on a cursor of its own; post :class:`Fetched` or :class:`FetchFailed`.

        ``exclusive`` marks an older fetch of this screen cancelled, so a stale result (the step the user has
        already moved past) is dropped here instead of landing on screen.
        """
        self._run_fetch(request, call)

    @work(thread=True, exclusive=True, exit_on_error=False, group="side", description="browse query (secondary)")
    def fetch_side(self, request: str, call: Callable[["duckdb.DuckDBPyConnection"], Any]) -> None:
        """Like :meth:`fetch`, in a second group: slower parts that paint after the main ones."""
        self._run_fetch(request, call)

    def _run_fetch(self, request: str, call: Callable[["duckdb.DuckDBPyConnection"], Any]) -> None:
        """The body of both fetch groups (runs in the worker thread)."""
        worker = get_current_worker()
        started = time.perf_counter()
        try:
            with self.browse_app.query_cursor() as cursor:
                result = call(cursor)
        except K25Error as exc:
            if not worker.is_cancelled:
                self.post_message(FetchFailed(request, str(exc)))
            return
        if not worker.is_cancelled:
            self.post_message(Fetched(request, result, (time.perf_counter() - started) * 1000))

    @on(FetchFailed)
    def show_failure(self, message: FetchFailed) -> None:
        """A failed or interrupted query: say so in the status line, never a traceback."""
        self.set_status(f"[b]query failed[/b]: {escape(message.error)}", error=True)

    def set_status(self, markup: str, *, error: bool = False) -> None:
        """Put a line in the screen's ``#status`` label (screens without one ignore it)."""
        from textual.widgets import Label

        for label in self.query("#status").results(Label):
            label.update(markup)
            label.set_class(error, "-error")
