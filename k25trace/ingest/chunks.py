"""One file as a sequence of decoded chunks, in this process (small files; the workers use the same steps)."""

from __future__ import annotations

import gc
import mmap
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
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
    path: Path,
    keep_python: bool,
    progress: Callable[[int], None],
    threaded_read: bool = False,
    decode_threads: int = 1,
) -> Iterator[Chunk | End]:
    """Stream a file in this process: a :class:`Chunk` per chunk, then its :class:`End`; with ``threaded_read``,
    decompressed ahead in a thread (:func:`k25trace.ingest.stream._threaded_gzip`); with ``decode_threads`` above
    1, its chunks decoded by that many threads at once (:func:`_chunks_in_threads`)."""
    if decode_threads > 1:
        yield from _chunks_in_threads(path, keep_python, progress, threaded_read, decode_threads)
        return
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


# a chunk being decoded by a thread: its future, ring buffer, size, the text after its cut and the chunk's offset
_InFlight = tuple[Future, int, int, bytes, int]


def _chunks_in_threads(
    path: Path, keep_python: bool, progress: Callable[[int], None], threaded_read: bool, threads: int
) -> Iterator[Chunk | End]:
    """:func:`_chunks` with the chunks cut by guess decoded by ``threads`` threads of this process at once (the
    compiled scanner, numpy and Arrow let the GIL go while they work), each in a buffer of its own, the results in
    file order. As in the workers' ring (:meth:`k25trace.ingest.workers._Workers.feed`), a cut that did not hold
    drops the chunks cut after it and the text is cut exactly from its start, in this thread; so is any text that
    does not fit a buffer. The cyclic garbage collector is paused for the whole file (see
    :func:`_decode_and_build`: threads cannot pause it chunk by chunk)."""
    splitter = _Splitter(path)
    reader = _Reader(path, threaded_read)
    buffers: list[mmap.mmap] = []  # anonymous memory, made when first needed (threads + 1: one is being cut)
    in_flight: deque[_InFlight] = deque()
    pool = ThreadPoolExecutor(threads, thread_name_prefix="k25trace-decode")
    collecting = gc.isenabled()
    gc.disable()
    sent = 0
    try:
        while True:
            if not splitter.fits_buffer():
                while in_flight:  # in file order: a re-cut here may change what fits
                    yield from _oldest(in_flight, buffers, splitter, keep_python)
                if splitter.fits_buffer():
                    continue
                if not (yield from _one_block(reader, splitter, keep_python, progress)):
                    break
                continue
            if len(in_flight) > threads:
                yield from _oldest(in_flight, buffers, splitter, keep_python)
                continue
            index = sent % (threads + 1)
            if index == len(buffers):
                buffers.append(mmap.mmap(-1, limits.RING_BUFFER_BYTES))
            size = splitter.cut_in(reader, buffers[index])
            reader.report(progress)
            if size == 0:
                break
            if size is None:  # no complete event yet: all of it is pending
                continue
            future = pool.submit(_decode_in_buffer, str(path), buffers[index], size, keep_python)
            in_flight.append((future, index, size, splitter.gap, splitter.chunk_offset))
            sent += 1
        while in_flight:
            yield from _oldest(in_flight, buffers, splitter, keep_python)
        tail, meta_text = splitter.finish()
        if tail is not None:
            yield from _decoded(splitter, tail, keep_python)
        yield End(meta_text, reader.sha256, reader.count)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # no thread reads a buffer once they are closed
        if collecting:
            gc.enable()
        reader.close()
        for buf in buffers:
            buf.close()


def _decode_in_buffer(path: str, buf: mmap.mmap, size: int, keep_python: bool) -> Chunk:
    """:func:`_decode_and_build` of the chunk ``buf[:size]`` (in a decode thread); no view of ``buf`` outlives it."""
    with memoryview(buf) as view, view[:size] as chunk:
        return _decode_and_build(path, chunk, keep_python)


def _oldest(
    in_flight: deque[_InFlight], buffers: list[mmap.mmap], splitter: _Splitter, keep_python: bool
) -> Iterator[Chunk]:
    """The oldest chunk in flight, decoded. If its cut (a guess) did not hold, the chunks cut after it were cut on
    a wrong carry: wait for their threads, drop their results, rebuild the text from the failed chunk's start and
    let the splitter cut it exactly here (as :meth:`k25trace.ingest.workers._Workers._take_oldest` does)."""
    future, index, size, gap, offset = in_flight.popleft()
    try:
        item = future.result()
    except _GuessedCut:
        for later, *_ in in_flight:
            later.exception()  # waits: its buffer is read until its thread is done with it
        cut = [(buffers[index][:size], gap)] + [(buffers[i][:s], g) for _, i, s, g, _ in in_flight]
        in_flight.clear()
        chunk = splitter.recut(cut, offset)
        if chunk is not None:
            yield from _decoded(splitter, chunk, keep_python)
        return
    splitter.events += item.events
    yield item
