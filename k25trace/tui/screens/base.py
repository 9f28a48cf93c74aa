"""The base of every data screen: one way to run a query in a thread worker and get a typed message back.

Screens know nothing of the app class: they get cursors from whatever provides :class:`CursorSource` (the app
does), and they move between screens by posting the navigation messages of :mod:`k25trace.tui.messages`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from textual import on
from textual.css.query import NoMatches
from textual.markup import escape
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Label
from textual.worker import Worker, get_current_worker

from k25trace.errors import K25Error
from k25trace.tui.messages import FetchFailed, Loaded, Prefetched

if TYPE_CHECKING:
    import duckdb

T = TypeVar("T")

PREFETCH_AFTER_S = 0.15
"""How long the cursor rests on a row before the screen it opens is read ahead (scrolling reads nothing)."""

PREFETCH_KEEP = 16
"""Screens read ahead that a screen keeps (the most recent)."""


@runtime_checkable
class CursorSource(Protocol):
    """What screens need from their app: a DuckDB cursor of its own per worker, registered so that it can be
    interrupted (``ctrl+g``) and closed when the worker is done."""

    def query_cursor(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]: ...


class BrowseScreen(Screen[None]):
    """A screen whose data comes from :mod:`k25trace.analysis.browse` through :meth:`fetch`."""

    _prefetch_timer: Timer | None = None
    """The pending read-ahead of :meth:`prefetch_on_rest` (one per screen: the row under the cursor)."""

    @property
    def cursors(self) -> CursorSource:
        """Where this screen's workers take their cursors: the app (checked structurally, never imported)."""
        app = self.app
        if not isinstance(app, CursorSource):
            raise TypeError(f"{type(app).__name__} does not provide query_cursor()")
        return app

    def fetch(
        self,
        kind: type[Loaded[T]],
        call: Callable[[duckdb.DuckDBPyConnection], T],
        *,
        request: Hashable = None,
        group: str = "fetch",
        explain: Callable[[BaseException], str] | None = None,
    ) -> Worker[None]:
        """Run ``call(cursor)`` off the UI thread on a cursor of its own; post ``kind(result)`` or :class:`FetchFailed`
        to this screen.

        Fetches of one ``group`` are exclusive: a newer one marks the older cancelled, so a stale result (the step
        the user has already moved past) is dropped instead of landing on screen. ``explain`` turns errors other
        than :class:`~k25trace.errors.K25Error` into the failure's text (by default they reach the app's worker-error
        notification).
        """
        source = self.cursors
        return self.run_worker(
            lambda: self._run_fetch(source, kind, call, request, explain),
            thread=True,
            exclusive=True,
            exit_on_error=False,
            group=group,
            description=f"{kind.__name__} query",
        )

    def fetch_side(
        self, kind: type[Loaded[T]], call: Callable[[duckdb.DuckDBPyConnection], T], *, request: Hashable = None
    ) -> Worker[None]:
        """Like :meth:`fetch`, in a second group: slower parts that paint after the main ones."""
        return self.fetch(kind, call, request=request, group="side")

    def _run_fetch(
        self,
        source: CursorSource,
        kind: type[Loaded[T]],
        call: Callable[[duckdb.DuckDBPyConnection], T],
        request: Hashable,
        explain: Callable[[BaseException], str] | None,
    ) -> None:
        """The body of every fetch (runs in the worker thread)."""
        worker = get_current_worker()
        started = time.perf_counter()
        try:
            with source.query_cursor() as cursor:
                result = call(cursor)
        except K25Error as exc:
            failure = str(exc)
        except BaseException as exc:  # noqa: BLE001 — only when the caller can explain it (polars panics are BaseExceptions)
            if explain is None or isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            failure = explain(exc)
        else:
            if not worker.is_cancelled:
                self.post_message(kind(result, request, (time.perf_counter() - started) * 1000))
            return
        if not worker.is_cancelled:
            self.post_message(FetchFailed(kind, failure, request))

    def prefetch_on_rest(
        self,
        cache: dict[Any, Any],
        kind: type[Prefetched[T]],
        call: Callable[[duckdb.DuckDBPyConnection], T],
        request: Hashable,
    ) -> None:
        """Once the cursor has rested :data:`PREFETCH_AFTER_S` on the row of ``request``, read it ahead unless
        ``cache`` has it; a newer call drops the pending one. The worker has a group of its own (a newer prefetch
        drops an older one's result); any error becomes a :class:`FetchFailed` that :meth:`show_failure` leaves
        unsaid. The screen keeps the result with :meth:`keep_prefetched`."""
        self.stop_prefetch()

        def start() -> None:
            if request not in cache:
                self.fetch(kind, call, request=request, group="prefetch", explain=str)

        self._prefetch_timer = self.set_timer(PREFETCH_AFTER_S, start)

    def stop_prefetch(self) -> None:
        """Drop the pending read-ahead of :meth:`prefetch_on_rest` (the cursor left the row, or is on none)."""
        if self._prefetch_timer is not None:
            self._prefetch_timer.stop()

    @staticmethod
    def keep_prefetched(cache: dict[Any, Any], request: Hashable, result: Any) -> None:
        """Keep ``result`` in ``cache``, the :data:`PREFETCH_KEEP` most recent only."""
        cache[request] = result
        while len(cache) > PREFETCH_KEEP:
            del cache[next(iter(cache))]

    @on(FetchFailed)
    def show_failure(self, message: FetchFailed) -> None:
        """A failed or interrupted query: say so in the status line, never a traceback (a prefetch: nothing)."""
        if issubclass(message.kind, Prefetched):
            return
        self.set_status(f"[b]query failed[/b]: {escape(message.error)}", error=True)

    def set_status(self, markup: str, *, error: bool = False) -> None:
        """Put a line in the screen's ``#status`` label (screens without one ignore it)."""
        try:  # query_one stops at the label (a query walked the whole screen: a step move's tenth)
            label = self.query_one("#status", Label)
        except NoMatches:
            return
        label.update(markup)
        label.set_class(error, "-error")
