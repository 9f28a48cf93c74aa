"""Messages that worker threads post to screens: a query's result, or why it failed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class Fetched(Message):
    """A worker finished ``request`` (a name the screen chose) with ``result``."""

    request: str
    result: Any
    elapsed_ms: float


@dataclass
class FetchFailed(Message):
    """A worker's query for ``request`` failed or was cancelled; ``error`` is a one-line reason."""

    request: str
    error: str
