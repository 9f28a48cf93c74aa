"""The project's own error types: every user-facing failure is one of these, with a one-line message."""


class K25Error(Exception):
    """Base class: the message is printed as ``error: <message>`` and the command exits non-zero."""


class TraceError(K25Error):
    """A trace file could not be loaded; the message names the file and the problem."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


class QueryError(K25Error):
    """A SQL query failed; carries the query name (or 'ad-hoc') and DuckDB's message."""

    def __init__(self, query: str, message: str) -> None:
        super().__init__(f"query {query}: {message}")
        self.query = query
        self.message = message


class Stopped(KeyboardInterrupt):
    """SIGTERM during a load, raised where Ctrl-C's KeyboardInterrupt would be, so that a terminated load ends the
    same clean way (file rolled back, cross-rank tables rebuilt, workers gone). ``signum``: the signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by signal {signum}")
        self.signum = signum


# How libraries report an interrupt in their own errors: DuckDB's "Query interrupted" (a signal handler raised while
# a query ran) and "INTERRUPT Error"; the name of a KeyboardInterrupt raised in Python code DuckDB called back into
# (an Arrow object counted or scanned: "... failed: KeyboardInterrupt" or "... failed: Stopped: stopped by signal 15").
_INTERRUPT_TEXTS = (
    "Query interrupted",
    "INTERRUPT Error",
    "KeyboardInterrupt",
    f"{Stopped.__name__}: stopped by signal",
)
_INTERRUPT_TYPES = ("InterruptException", "ArrowCancelled")  # duckdb's, pyarrow's (by name: no import here)


def is_interrupt(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or while handling, is Ctrl-C or a stop (SIGTERM) as
    Python or a library reports it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt) or type(exc).__name__ in _INTERRUPT_TYPES:
            return True
        if isinstance(exc, Exception) and any(t in str(exc) for t in _INTERRUPT_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
