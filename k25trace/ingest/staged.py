"""A file's staged events between its read and its store: the chunk tables (Arrow, per staging table) and the
GPU activity names' ids (``kernel_names``), given when the file is stored."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
import pyarrow.compute as pc

from k25trace.ingest.columns import _Columns
from k25trace.ingest.model import TraceFile

NO_NAMES: dict[str, int] = {}  # the name ids of a table without rows


def _append(chunks: dict[str, list[pa.Table]], tables: dict[str, pa.Table], first_event_id: int) -> None:
    """A chunk's tables added to the file's, its event ids made the file's (the chunk's first event's index)."""
    for key, table in tables.items():
        if first_event_id:
            table = table.set_column(0, "event_id", pc.add(table.column("event_id"), first_event_id))
        chunks.setdefault(key, []).append(table)


@dataclass
class _Read:
    """One file read and decoded (:meth:`Loader.read`), not yet in the database."""

    tf: TraceFile
    shown: str
    started: _dt.datetime
    sha: str  # the hash before the read
    meta: dict[str, Any]
    counts: int
    cols: _Columns
    read_sha: str  # the hash of the bytes read
    read_bytes: int
    chunks: dict[str, list[pa.Table]]


class _NameIds:
    """GPU activity name -> kernel_names id: the database's names, plus the new ones a file brings (they become the
    loader's only when the file commits)."""

    def __init__(self, known: dict[str, int], next_id: int) -> None:
        self.known = known
        self.new: dict[str, int] = {}
        self.next_id = next_id

    def __call__(self, name: str) -> int:
        got = self.known.get(name)
        if got is None:
            got = self.new.get(name)
            if got is None:
                got = self.new[name] = self.next_id
                self.next_id += 1
        return got


def with_name_ids(table: pa.Table, name_id: Callable[[str], int]) -> pa.Table:
    """A GPU chunk table as staged: its ``name`` column swapped for ``name_id`` (the database's name ids)."""
    names = table.column("name").combine_chunks().dictionary_encode()
    ids = pa.array([name_id(v) for v in names.dictionary.to_pylist()], pa.int32())
    return table.drop_columns(["name"]).append_column("name_id", pc.take(ids, names.indices))
