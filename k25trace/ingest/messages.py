"""What the decode steps hand back, in file order: typed messages instead of tagged tuples.

A file's stream is any number of :class:`Chunk` and :class:`Progress`, then one :class:`End`. Between worker
processes and the parent, :class:`Failed` reports a file's failure (raised as :class:`~k25trace.errors.TraceError`
in the parent), :class:`Resplit` a guessed cut that did not hold, :class:`Attached` a mapped shared-memory ring,
:class:`SharedChunk` a chunk whose tables are in a file of /dev/shm (the parent makes it a :class:`Chunk` again).
They are NamedTuples: they pickle compactly through the result pipes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple, Union


class Chunk(NamedTuple):
    """One chunk's staging tables (event ids local to the chunk) and its counters."""

    tables: dict[str, Any]  # staging table key -> pyarrow.Table
    events: int
    skipped: Counter[str]
    unknown: Counter[str]
    problems: Counter[str]


class SharedChunk(NamedTuple):
    """A :class:`Chunk` whose tables a decode worker wrote to a file of /dev/shm, as Arrow IPC streams: each table's
    key, start and size in the file (:mod:`k25trace.ingest.shared_results`)."""

    path: str
    spans: tuple[tuple[str, int, int], ...]
    events: int
    skipped: Counter[str]
    unknown: Counter[str]
    problems: Counter[str]


class Progress(NamedTuple):
    """Compressed bytes read since the last report (a worker streaming a whole file)."""

    read: int


class End(NamedTuple):
    """The file's metadata (its JSON outside ``traceEvents``), the sha256 of the bytes read and their number."""

    meta_text: bytes
    sha256: str
    read_bytes: int


class Failed(NamedTuple):
    path: str
    problem: str


class Resplit(NamedTuple):
    """A chunk whose guessed cut did not hold: the parent cuts it again exactly."""


class Attached(NamedTuple):
    """A worker mapped the parent's shared-memory ring."""


Message = Union[Chunk, SharedChunk, Progress, End, Failed, Resplit, Attached]
