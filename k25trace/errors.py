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
