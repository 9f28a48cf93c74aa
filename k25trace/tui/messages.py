"""The TUI's messages: where to go (screens → app) and what a query returned (worker → its screen).

Navigation messages bubble from the screen that posts them to the app, which owns the screen stack; no screen
imports the app or calls it. Result messages carry one kind of data each, so a handler is chosen by type (a
misspelt name is an import error, not a result silently dropped); they do not bubble.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from textual.message import Message

if TYPE_CHECKING:
    # polars and the analysis modules load after the overview is painted (it is read without them:
    # k25trace.analysis.overview), the compare screen's with that screen; the types are named in strings below
    import polars as pl  # noqa: F401

    from k25trace import db  # noqa: F401
    from k25trace.analysis import browse, compare, findings, overview  # noqa: F401

T = TypeVar("T")

# ------------------------------------------------------------------------------------------------- navigation


@dataclass
class OpenSteps(Message):
    """Show the steps of trace ``trace_id`` (one rank); ``steps``: already read by the screen that asks (read ahead
    of the user), shown at once instead of fetched."""

    trace_id: int
    steps: browse.TraceSteps | None = field(default=None, compare=False)


@dataclass
class OpenStep(Message):
    """Show step ``step_index`` of trace ``trace_id``; ``detail``: already read (ahead of the user), shown at once."""

    trace_id: int
    step_index: int
    detail: browse.StepDetail | None = field(default=None, compare=False)


@dataclass
class OpenKernel(Message):
    """Show one GPU activity: trace, event id and start (``start_ns`` lets the query skip the rest of the trace)."""

    trace_id: int
    event_id: int
    start_ns: int


# ---------------------------------------------------------------------------------------------------- results


@dataclass
class Loaded(Message, Generic[T], bubble=False):
    """A worker's query finished: ``result`` for ``request`` (what was asked, for screens that ask for several
    things of one kind, e.g. ``(trace_id, step_index)``), after ``elapsed_ms`` in the worker.

    Subclasses name the kind of data; a screen handles the kinds it asked for with ``@on(Kind)``.
    """

    result: T
    request: Hashable = None
    elapsed_ms: float = 0.0

    def __init_subclass__(cls, bubble: bool | None = False, **kwargs: Any) -> None:
        super().__init_subclass__(bubble=bubble, **kwargs)  # results are for the screen that asked, not its app


@dataclass
class FetchFailed(Message, bubble=False):
    """A worker's query for a ``kind`` of result failed or was interrupted; ``error`` is a one-line reason."""

    kind: type[Loaded[Any]]
    error: str
    request: Hashable = None


class OverviewLoaded(Loaded["overview.Overview"]):
    """The overview's traces, capture levels and step counts."""


class BreakdownLoaded(Loaded["tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, dict[str, str]]"]):
    """The overview's slower part: the decode breakdown, the collectives split and the idle split."""


class FindingsLoaded(Loaded["findings.Findings"]):
    """The overview's findings panel: the ranked findings per run and batch size (:mod:`k25trace.analysis.findings`)."""


class Prefetched(Loaded[T]):
    """Data read ahead of the user, for a screen they are likely to open next: kept by the screen that asked, handed
    to the next one in its navigation message. A prefetch that fails is not shown (the open itself reports it)."""


class TraceStepsPrefetched(Prefetched["browse.TraceSteps"]):
    """The steps of the trace under the overview's cursor; ``request`` is its trace id."""


class StepPrefetched(Prefetched["browse.StepDetail | None"]):
    """The step under the steps screen's cursor; ``request`` is ``(trace_id, step_index)``."""


class StepsLoaded(Loaded["browse.TraceSteps"]):
    """The steps of one trace, with its rank and the next rank of its run."""


class StepLoaded(Loaded["browse.StepDetail | None"]):
    """One step (None: the trace has no such step); ``request`` is ``(trace_id, step_index)``."""


class StepsPrefetched(Loaded["list[tuple[tuple[int, int], browse.StepDetail | None, Any]]"]):
    """Steps read ahead of the user (the neighbours of the step on screen), keyed ``(trace_id, step_index)``, each
    with its tables drawn (a ``k25trace.tui.screens.step.DrawnStep``, None for a step that does not exist)."""


class KernelPageLoaded(Loaded["pl.DataFrame"]):
    """The next page of a step's kernels; ``request`` is ``(trace_id, step_index, offset)``."""


class KernelLoaded(Loaded["browse.KernelDetail | None"]):
    """One GPU activity with its variation over steps (None: no such activity)."""


class KernelRanksLoaded(Loaded["pl.DataFrame"]):
    """A kernel's calls and times on every rank of the run."""


class SearchLoaded(Loaded["pl.DataFrame"]):
    """Kernel names matching the search text."""


class FirstRunLoaded(Loaded["dict[str, Any] | None"]):
    """Where a kernel picked in the search results first ran (None: never)."""


class SchemaLoaded(Loaded["pl.DataFrame"]):
    """Tables and views with their columns, for the SQL screen's tree."""


class SqlLoaded(Loaded["db.SqlResult"]):
    """The rows of the user's SQL."""


class CollectivesLoaded(Loaded["browse.Collectives"]):
    """The collectives screen's tables."""


class CallSitesLoaded(Loaded["tuple[tuple[str, int | None, str], pl.DataFrame]"]):
    """The call sites of one (run label, batch size, category)."""


class RunsLoaded(Loaded["pl.DataFrame"]):
    """The runs a comparison can pick from."""


class ComparisonLoaded(Loaded["compare.Comparison"]):
    """Two runs compared."""
