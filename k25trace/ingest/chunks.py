"""One file as a sequence of decoded chunks, in this process (small files; the workers use the same steps)."""

from __future__ import annotations

import gc
import mmap
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

from k25trace.ingest import limits
from k25trace.ingest.columns import _Columns
from k25trace.ingest.events import _decode_chunk, _GuessedCut
from k25trace.ingest.messages import Chunk, End
from k25trace.ingest.scan import scan_chunk
from k25trace.ingest.stream import _Reader, _Splitter


def _decode_and_build(
    path: str,
    chunk: Any,
    keep_python: bool,
    where: tuple[int, int, list[int]] | None = None,
) -> Chunk:
    """One chunk of events -> staging tables (event ids local to the chunk). Nothing returned refers to ``chunk``.

    The cyclic garbage collector is paused meanwhile: a chunk is ~100k small acyclic structs, and the collections
    their allocation would trigger find nothing to free (a quarter of the decode time, measured)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        cols = _Columns(keep_python)
        scanned = scan_chunk(chunk, cols)  # the compiled scanner, when it reads this chunk exactly
        if scanned is not None:
            tables, count = scanned
        else:
            events = _decode_chunk(Path(path), chunk, keep_python, where)
            tables = cols.build(events, 0)
            count = len(events)
            del events  # raw JSON fields (Input Dims) point into the chunk's buffer until here
    finally:
        if paused:
            gc.enable()
    gpu = tables.get("gpu")
    if gpu is not None and gpu.num_rows:
        tables["gpu"] = _names_encoded(gpu)
    return Chunk(tables, count, cols.skipped, cols.unknown, cols.problems)


def _names_encoded(gpu: Any) -> Any:
    """A GPU chunk table with its ``name`` column dictionary-encoded (names in order of first appearance), here in
    the decode worker: the parent then maps only each distinct name to its id (:func:`stores._with_name_ids`),
    one after another in file order, where it encoded every row itself before."""
    at = gpu.schema.get_field_index("name")
    return gpu.set_column(at, "name", gpu.column(at).dictionary_encode())


def _decoded(splitter: _Splitter, chunk: bytearray | memoryview, keep_python: bool) -> Iterator[Chunk]:
    """Decode a chunk of the splitter in this process; a guessed cut that fails is re-cut exactly."""
    path = str(splitter.path)
    try:
        item = _decode_and_build(path, chunk, keep_python, splitter.where())
    except _GuessedCut:
        exact = splitter.resplit(chunk)
        if exact is None:
            return
        item = _decode_and_build(path, exact, keep_python, splitter.where())
    splitter.events += item.events
    yield item


def _one_block(
    reader: _Reader, splitter: _Splitter, keep_python: bool, progress: Callable[[int], None]
) -> Generator[Chunk, None, bool]:
    """Read one block in this process and decode the chunk it completes, if any; False at the end of the file."""
    block = reader.read(limits.BLOCK_SIZE)
    reader.report(progress)
    if not block:
        return False
    chunk = splitter.feed(block)
    if chunk:
        yield from _decoded(splitter, chunk, keep_python)
    return True


def _reused_block(
    reader: _Reader, splitter: _Splitter, buf: mmap.mmap, keep_python: bool, progress: Callable[[int], None]
) -> Generator[Chunk, None, bool]:
    """:func:`_one_block` in a buffer used again for every block (:meth:`_Splitter.cut_in`, as the workers' ring
    does): no fresh memory per block (a block read fresh is decompressed into new memory and copied once more into
    the splitter's text; on an 80 MB real-structure trace the reused buffer saved ~12 k page faults and 0.1-0.2 s
    of system time, measured). False at the end of the file."""
    size = splitter.cut_in(reader, buf)
    reader.report(progress)
    if size == 0:
        return False
    if size is not None:
        with memoryview(buf) as view, view[:size] as chunk:
            yield from _decoded(splitter, chunk, keep_python)
    return True


def _chunks(
    path: Path, keep_python: bool, progress: Callable[[int], None], threaded_read: bool = False
) -> Iterator[Chunk | End]:
    """Stream a file in this process: a :class:`Chunk` per chunk, then its :class:`End`; with ``threaded_read``,
    decompressed ahead in a thread (:func:`k25trace.ingest.stream._threaded_gzip`)."""
    splitter = _Splitter(path)
    reader = _Reader(path, threaded_read)
    buf: mmap.mmap | None = None  # anonymous memory: a page is zero-filled when first written, not before
    try:
        while True:
            if splitter.fits_buffer():
                if buf is None:
                    buf = mmap.mmap(-1, limits.RING_BUFFER_BYTES)
                more = yield from _reused_block(reader, splitter, buf, keep_python, progress)
            else:
                more = yield from _one_block(reader, splitter, keep_python, progress)
            if not more:
                break
        tail, meta_text = splitter.finish()
        if tail is not None:
            yield from _decoded(splitter, tail, keep_python)
        yield End(meta_text, reader.sha256, reader.count)
    finally:
        reader.close()
        if buf is not None:
            buf.close()
