"""One file as a sequence of decoded chunks, in this process (small files; the workers use the same steps)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import pyarrow as pa

from k25trace.ingest import limits
from k25trace.ingest.columns import _Columns
from k25trace.ingest.events import _decode_chunk, _GuessedCut
from k25trace.ingest.stream import _Reader, _Splitter


def _decode_and_build(path: str, chunk: Any, keep_python: bool, where: tuple[int, int, list[int]] | None = None,
                      ) -> tuple[dict[str, pa.Table], int, Counter[str], Counter[str], Counter[str]]:
    """One chunk of events -> staging tables (event ids local to the chunk). Nothing returned refers to ``chunk``."""
    events = _decode_chunk(Path(path), chunk, keep_python, where)
    cols = _Columns(keep_python)
    tables = cols.build(events, 0)
    count = len(events)
    del events  # raw JSON fields (Input Dims) point into the chunk's buffer until here
    return tables, count, cols.skipped, cols.unknown, cols.problems


def _decoded(splitter: _Splitter, chunk: bytearray, keep_python: bool) -> Iterator[tuple]:
    """Decode a chunk of the splitter in this process; a guessed cut that fails is re-cut exactly."""
    path = str(splitter.path)
    try:
        item = ("chunk", *_decode_and_build(path, chunk, keep_python, splitter.where()))
    except _GuessedCut:
        exact = splitter.resplit(chunk)
        if exact is None:
            return
        item = ("chunk", *_decode_and_build(path, exact, keep_python, splitter.where()))
    splitter.events += item[2]
    yield item


def _chunks(path: Path, keep_python: bool, progress: Callable[[int], None]) -> Iterator[tuple]:
    """Stream a file: ("chunk", tables, n, skipped, unknown, problems) per chunk, then ("end", metadata text,
    sha256 of the bytes read, bytes read)."""
    splitter = _Splitter(path)
    reader = _Reader(path)
    try:
        while True:
            block = reader.read(limits.BLOCK_SIZE)
            reader.report(progress)
            if not block:
                break
            chunk = splitter.feed(block)
            if chunk:
                yield from _decoded(splitter, chunk, keep_python)
        tail, meta_text = splitter.finish()
        if tail is not None:
            yield from _decoded(splitter, tail, keep_python)
        yield ("end", meta_text, reader.sha256, reader.count)
    finally:
        reader.close()


