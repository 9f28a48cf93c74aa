"""Ingest: torch.profiler (Kineto) Chrome traces -> the DuckDB tables of the public schema.

The only module that reads trace JSON. Invariants:

* Streaming. A trace is decompressed block by block (isal) and its ``traceEvents`` array is cut at event
  boundaries into chunks of a few MB; each chunk is decoded by msgspec into slim typed structs (unknown keys
  are skipped in C), turned into columns and appended to DuckDB staging tables. Memory is bounded by the chunk
  size, never by the file size, and no Python object outlives its chunk.
* Exact cuts. The fast cut is a guess (the last ``}, {``); a chunk that decodes proves it, one that does not is
  cut again exactly (:class:`_Scan`), so valid JSON always loads and an error names its event and byte.
* Exact times. ``start_ns = baseTimeNanoseconds + ts * 1000`` in integer arithmetic: integer ``ts`` (old
  traces carry absolute µs) multiply exactly; float ``ts`` (µs with at most ns resolution, relative to the
  base) round exactly while ``ts < 2**53 / 1000`` µs (104 days); ``dur_ns`` likewise. A ts or dur that is no
  time (NaN, Infinity, beyond 64-bit ns with the base) skips its event, counted and reported; nothing wraps.
* All or nothing per file. A file is staged, then moved into the final tables, classified and split into
  steps inside one transaction; any problem rolls the whole file back and is reported as one line naming the
  file. Other files of the same call are unaffected. Trace files are opened read-only.
* Idempotent. A file whose content hash (sha256) is already in ``traces`` is skipped; the hash stored is of
  the bytes actually read.
* Nothing outlives a load: decode workers end with their parent, shared memory is unlinked once mapped.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import hashlib
import io
import json
import math
import os
import re
import signal
import sys
import zlib
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from itertools import compress
from typing import Any, Callable, ClassVar, Iterable, Iterator, Union

import duckdb
import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from k25trace import __version__
from k25trace.db import run_query
from k25trace.errors import K25Error, TraceError
from k25trace.names import short_name

try:  # isal: ~4x faster gzip decompression than zlib
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, zlib is the fallback
    import gzip as _gzip  # type: ignore[no-redef]

BLOCK_SIZE = 16 << 20  # decompressed bytes per read
PARALLEL_MIN_BYTES = 16 << 20  # files at least this large (on disk) are decoded by worker processes
STAGE_BATCH_ROWS = 150_000  # buffered rows written to the staging tables at once
RING_BUFFER_BYTES = 32 << 20  # shared-memory buffer per chunk in flight (a chunk is one block plus a remainder)
MAX_PREFIX = 256 << 20  # metadata before traceEvents larger than this is not a Kineto trace

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "Kernel": "kernel", "Memcpy": "memcpy", "Memset": "memset"}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation"}
KNOWN_SKIPPED = {
    "ac2g", "fwdbwd", "Trace", "overhead", "cpu_instant_event", "python_function", "Python", "cuda_profiler_range",
    "gpu_mem", "cpu_mem", "memory", "Memory", "mtia_ccp_events", "privateuse1_runtime", "privateuse1_driver",
    "cuda_sync", "Sync", "Activity Buffer Request", "Overhead",
}

_TRACE_EVENTS_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")  # a guess at an event boundary (see _Splitter)
# exact structure (see _Scan): skip everything but brackets and quotes, and whole strings (escapes included), then
# take the next bracket (group 1), or the quote of a string that does not end in the text so far
_SCAN_RE = re.compile(rb'(?:[^"\[\]{}]++|"(?:[^"\\]++|\\.)*+")*+(?:([\[\]{}])|")', re.DOTALL)
_COMMA_RE = re.compile(rb"[ \t\r\n]*,")
MAX_PENDING = 256 << 20  # text without the end of an event beyond this is not a Kineto trace
FAST_MISSES = 3  # guessed cuts that failed before a file is cut exactly to its end


# ---------------------------------------------------------------------------------------------------------------
# Event structs: only the fields we keep; msgspec skips everything else without building objects.


class Args(msgspec.Struct, omit_defaults=True):
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    stream: int | None = None
    device: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: float | None = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: float | None = msgspec.field(name="warps per SM", default=None)
    occupancy: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: Any = None  # some traces write it as a string
    cbid: int | None = None
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))  # raw JSON text, b"" if absent


class Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None  # ints stay ints: old traces carry absolute µs beyond float64's exact range
    dur: int | float | None = None
    args: Args | None = None


_EMPTY_ARGS = Args()
_DECODER = msgspec.json.Decoder(list[Event])


# Fast path: a tagged union on "cat". Categories we don't store decode into empty structs, so their keys are
# skipped in C without building strings (python_function events are 50-90 % of a default vLLM trace). A chunk
# with a category outside this list (or an event without "cat") falls back to the generic Event decoder.


class _Tagged(msgspec.Struct, tag_field="cat"):
    pass


class _LaunchArgs(msgspec.Struct):
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    cbid: int | None = None


class _OpArgs(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))


class _Timed(_Tagged):
    ph: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None
    dur: int | float | None = None


class _Gpu(_Timed):
    args: Args | None = None


class _Launch(_Timed):
    args: _LaunchArgs | None = None


class _Op(_Timed):
    args: _OpArgs | None = None


def _tagged(base: type, cat: str) -> type:
    return msgspec.defstruct(f"_T_{cat}", [], bases=(base,), tag=cat, namespace={"cat": cat, "__annotations__": {"cat": ClassVar[str]}})


_GPU_TYPES = [_tagged(_Gpu, c) for c in ("kernel", "gpu_memcpy", "gpu_memset")]
_LAUNCH_TYPES = [_tagged(_Launch, c) for c in ("cuda_runtime", "cuda_driver")]
_OP_TYPES = [_tagged(_Op, "cpu_op")]
_ANN_TYPES = [_tagged(_Launch, c) for c in ("user_annotation", "gpu_user_annotation")]
_SKIP_CATS = ("ac2g", "fwdbwd", "Trace", "overhead", "cpu_instant_event", "cuda_sync", "gpu_mem", "cpu_mem")
_SKIP_TYPES = [_tagged(_Tagged, c) for c in _SKIP_CATS]
_PY_TYPES = (_tagged(_Tagged, "python_function"), _tagged(_Timed, "python_function"))  # dropped / kept
_SKIP_TYPE_SET = frozenset(_SKIP_TYPES) | {_PY_TYPES[0]}
_KEEP_TYPE = {t: t not in _SKIP_TYPE_SET for t in _GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + list(_PY_TYPES)}.__getitem__
_FAST_DECODER = msgspec.json.Decoder(
    list[Union[tuple(_GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + [_PY_TYPES[0]])]]  # type: ignore[misc]
)
_FAST_DECODER_PY = msgspec.json.Decoder(
    list[Union[tuple(_GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + [_PY_TYPES[1]])]]  # type: ignore[misc]
)


# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class FileResult:
    path: str
    status: str  # 'loaded' | 'skipped' | 'failed'
    message: str = ""
    trace_id: int | None = None
    rank: int | None = None
    events: int = 0
    gpu_events: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


@dataclass
class LoadOptions:
    keep_python: bool = False
    include_frontend: bool = False
    workers: int = field(default_factory=lambda: max(1, min(4, os.cpu_count() or 1)))  # decode processes for big files
    parallel_min_bytes: int = PARALLEL_MIN_BYTES  # files at least this large on disk go to the worker processes


@dataclass
class TraceFile:
    path: Path
    capture_dir: Path | None = None
    level: str | None = None
    concurrency: int | None = None


# ---------------------------------------------------------------------------------------------------------------
# Finding files


def _is_trace_name(name: str) -> bool:
    return name.endswith((".pt.trace.json", ".pt.trace.json.gz"))


def is_frontend_name(name: str) -> bool:
    return ".async_llm." in name


def discover(paths: list[Path], *, include_frontend: bool = False) -> tuple[list[TraceFile], list[str], list[str]]:
    """Expand PATH arguments into trace files. Returns (files, notes, errors).

    Directories are searched recursively for ``*.pt.trace.json[.gz]``; other ``*.json[.gz]`` files only when named.
    Front-end (``*.async_llm.*``) traces are skipped unless ``include_frontend``; graph-capture traces in
    ``capture_traces/`` folders are skipped unless named. A ``k25trace capture`` directory (``manifest.json``)
    attaches its level and concurrency to each file.
    """
    files: list[TraceFile] = []
    notes: list[str] = []
    errors: list[str] = []
    seen: set[Path] = set()

    def add(tf: TraceFile) -> None:
        real = tf.path.resolve()
        if real not in seen:
            seen.add(real)
            files.append(tf)

    for arg in paths:
        if not arg.exists():
            errors.append(f"{arg}: no such file or directory")
            continue
        if arg.is_file():
            add(TraceFile(arg, *_capture_info_for(arg, notes)[:3]))
            continue
        found = _walk_traces(arg, errors)
        skipped_frontend = [p for p in found if is_frontend_name(p.name)]
        skipped_capture = [p for p in found if "capture_traces" in p.relative_to(arg).parts]
        if skipped_frontend and not include_frontend:
            notes.append(f"{arg}: skipped {len(skipped_frontend)} front-end (*.async_llm.*) trace(s); --include-frontend loads them")
        if skipped_capture:
            notes.append(f"{arg}: skipped {len(skipped_capture)} graph-capture trace(s) in capture_traces/; name them to load")
        kept = [p for p in found if p not in skipped_capture and (include_frontend or p not in skipped_frontend)]
        if not kept:
            errors.append(f"{arg}: no *.pt.trace.json[.gz] files found")
        for p in kept:
            info = _capture_info_for(p, notes)
            if info[3] is False:
                notes.append(f"{p}: skipped: the capture manifest marks it invalid ({info[4]})")
                continue
            add(TraceFile(p, *info[:3]))
    return files, notes, errors


def _walk_traces(root: Path, errors: list[str]) -> list[Path]:
    """Trace files under a directory, recursively (symlinked folders are not followed); a folder that cannot be
    read is an error (its traces would be missing without a word)."""
    found: list[Path] = []

    def unreadable(exc: OSError) -> None:
        errors.append(f"{exc.filename}: cannot read directory: {exc.strerror}; trace files in it are not loaded")

    for folder, _dirs, names in os.walk(root, onerror=unreadable):
        for name in names:
            if _is_trace_name(name):
                path = Path(folder) / name
                if path.is_file():
                    found.append(path)
    return sorted(found)


def _capture_info_for(path: Path, notes: list[str] | None = None) -> tuple[Path | None, str | None, int | None, bool | None, str | None]:
    """If ``path`` lies in a ``k25trace capture`` directory: (capture dir, level, concurrency, valid, problem).

    A damaged manifest is read as far as it is sound (``capture.manifest.check_manifest``); what is wrong
    goes into ``notes`` once; when nothing in it can be used, its traces load as plain files."""
    from k25trace.capture.manifest import check_manifest

    for parent in list(path.resolve().parents)[:3]:
        if not (parent / "manifest.json").is_file():
            continue
        m = check_manifest(parent)
        if m is None:  # another tool's manifest.json
            continue
        if m.problems and notes is not None:
            note = (f"{m.path}: damaged capture manifest: {m.summary()}; "
                    + ("its traces load as plain files (no level, no request statistics)" if not m.usable
                       else "the damaged entries are ignored"))
            if note not in notes:
                notes.append(note)
        if not m.usable:
            return None, None, None, None, None
        level, entry = m.lookup(path.resolve().relative_to(parent).as_posix())
        if level is None:
            return parent, None, None, None, None
        entry = entry or {}
        return parent, level["name"], level["concurrency"], entry.get("valid"), entry.get("problem")
    return None, None, None, None, None


# ---------------------------------------------------------------------------------------------------------------
# Streaming reader


class _HashingFile(io.RawIOBase):
    """The trace file as it is read: every byte handed to the decompressor also goes into a sha256, so the hash
    stored for a trace is the hash of exactly what was decoded (a file still growing while it is read cannot be
    stored under the hash of an earlier, shorter version)."""

    def __init__(self, path: Path) -> None:
        self.fh = open(path, "rb", buffering=0)
        self.sha = hashlib.sha256()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.fh.readinto(b)
        if n:
            with memoryview(b) as view:
                self.sha.update(view[:n])
            self.count += n
        return n or 0

    def close(self) -> None:
        self.fh.close()
        super().close()


class _Reader:
    """Decompresses a trace, translating gzip failures into one-line TraceErrors naming the file, and hashes the
    bytes it reads (:attr:`sha256`, :attr:`count`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.raw = _HashingFile(path)
        self.reported = 0  # compressed bytes already passed to a progress callback (:meth:`report`)
        try:
            magic = os.pread(self.raw.fh.fileno(), 2, 0)
            if magic == b"\x1f\x8b":
                self.fh: Any = _gzip.open(self.raw, "rb")
            elif path.name.endswith(".gz"):
                raise TraceError(str(path), "named .gz but is not gzip data")
            else:
                self.fh = self.raw
        except BaseException:
            self.raw.close()
            raise

    def _call(self, method: Callable[[Any], Any], arg: Any) -> Any:
        try:
            return method(arg)
        except EOFError as exc:
            raise TraceError(str(self.path), "truncated gzip: the compressed stream ends before its end marker "
                             "(the writer may still be running, or was killed)") from exc
        except (OSError, zlib.error) as exc:
            raise TraceError(str(self.path), f"corrupt gzip data: {exc}") from exc

    def read(self, size: int) -> bytes:
        return self._call(self.fh.read, size)

    def readinto(self, view: memoryview) -> int:
        """Decompress into the caller's buffer (no intermediate copy)."""
        return self._call(self.fh.readinto, view)

    def position(self) -> int:
        """Compressed bytes read so far (for progress)."""
        return self.raw.count

    def report(self, progress: Callable[[int], Any]) -> None:
        """Tell ``progress`` how many compressed bytes were read since the last report (nothing when none)."""
        pos = self.raw.count
        if pos > self.reported:
            progress(pos - self.reported)
            self.reported = pos

    @property
    def sha256(self) -> str:
        return self.raw.sha.hexdigest()

    @property
    def count(self) -> int:
        return self.raw.count

    def close(self) -> None:
        self.fh.close()
        self.raw.close()


class _Scan:
    """The exact structure of traceEvents text, from a real event boundary on, resumable as text is appended:
    strings (with escapes) and brackets, no recursion (any depth), where the top-level elements start and end, and
    where the array closes. Regex jumps from bracket to bracket, so it is slower than the guess in
    :meth:`_Splitter.feed` but never fooled by a ``}, {`` inside a string, a nested list or the metadata after the
    array."""

    __slots__ = ("pos", "depth", "starts", "ends", "array_end", "bad")

    def __init__(self, pos: int) -> None:
        self.pos = pos  # where to go on: the start of a string not closed yet, or the end of the text scanned
        self.depth = 1  # 1 = between the elements of traceEvents
        self.starts: list[int] = []  # positions of the top-level objects (and arrays)
        self.ends: list[int] = []  # positions just after them
        self.array_end: int | None = None  # position of the "]" that closes traceEvents
        self.bad: int | None = None  # position of a bracket that closes more than was opened

    def run(self, text: Any) -> None:
        if self.array_end is not None or self.bad is not None:
            return
        match = _SCAN_RE.match
        pos, depth = self.pos, self.depth
        starts, ends = self.starts, self.ends
        while True:
            m = match(text, pos)
            if m is None:  # no bracket and no open string up to the end
                pos = len(text)
                break
            b = m.group(1)
            if b is None:  # a string that does not end in the text so far: resume at its start
                pos = m.end() - 1
                break
            pos = m.end()
            if b == b"{" or b == b"[":
                depth += 1
                if depth == 2:
                    starts.append(pos - 1)
            else:
                depth -= 1
                if depth == 1:
                    ends.append(pos)
                elif depth == 0:
                    if b == b"]":
                        self.array_end = pos - 1
                    else:
                        self.bad = pos - 1
                    break
        self.pos, self.depth = pos, depth


class _Splitter:
    """Cuts the decompressed text into (metadata text, chunks of complete event objects).

    A chunk is returned as one bytearray ``[ev, ev, …]`` ready for the decoder. The fast cut is a guess: the last
    ``}, {`` in the buffer (the block is copied once into the chunk, the text after the cut is carried over). A
    chunk that then fails to decode goes back to :meth:`resplit`, which cuts the same text exactly (:class:`_Scan`)
    and stays exact for the rest of the file once guesses have failed :data:`FAST_MISSES` times. A decodable
    chunk proves its cut: it starts at a real boundary and holds only whole top-level values, so it ends at one.

    Positions: ``buf[0]`` is the ``[``; ``buf[1]`` is byte :attr:`offset` of the decompressed file; a chunk's
    :attr:`chunk_offset` likewise; :attr:`events` counts the elements of traceEvents before the pending text (the
    caller adds each decoded chunk's count) for messages that name the event.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prefix = bytearray()
        self.in_array = False
        self.ended = False  # the closing "]" of traceEvents was found; what follows is metadata (``after``)
        self.after = bytearray()
        self.buf = bytearray(b"[")
        self.offset = 0
        self.gap = b""  # what the last fast cut dropped between its chunk and the carry (", " and white space)
        self.exact: _Scan | None = None  # exact mode: the scan of ``buf`` so far
        self.misses = 0
        self.events = 0
        self.chunk_offset = 0
        self.chunk_starts: list[int] | None = None  # event starts of the last chunk (None: a guessed cut)

    @property
    def fast(self) -> bool:
        """Inside traceEvents and cutting by guess (the parallel path may take over the cutting)."""
        return self.in_array and not self.ended and self.exact is None

    def where(self) -> tuple[int, int, list[int]] | None:
        """(events before, byte offset, event starts) of the last chunk if it was cut exactly, else None."""
        return None if self.chunk_starts is None else (self.events, self.chunk_offset, self.chunk_starts)

    def feed(self, block: bytes | bytearray) -> bytearray | None:
        """Add a block; return ``[`` + complete events + ``]`` as a bytearray, or None."""
        if not self.in_array:
            self.prefix += block
            m = _TRACE_EVENTS_RE.search(self.prefix)
            if m is None:
                if len(self.prefix) > MAX_PREFIX:
                    raise TraceError(str(self.path), "no traceEvents array in the first 256 MB: not a Kineto trace")
                return None
            self.buf += self.prefix[m.end():]
            self.offset = m.end()
            del self.prefix[m.end() - 1:]  # keep up to the key and colon
            self.in_array = True
        elif self.ended:
            self.after += block
            return None
        else:
            self.buf += block
        if self.exact is not None:
            return self._exact_cut()
        # last event boundary in the buffer: search the tail first (fast path)
        buf = self.buf
        start = max(1, len(buf) - (1 << 20))
        last = None
        while last is None:
            for last in _BOUNDARY_RE.finditer(buf, start):
                pass
            if last is None:
                if start == 1:
                    return None
                start = max(1, start - (8 << 20))
        self.chunk_offset, self.chunk_starts = self.offset, None
        self.gap = bytes(buf[last.start() + 1 : last.end() - 1])
        self.offset += last.end() - 2
        self.buf = bytearray(b"[") + buf[last.end() - 1:]
        del buf[last.start() + 1:]
        buf += b"]"
        return buf

    def resplit(self, failed: bytearray) -> bytearray | None:
        """The chunk just returned did not decode: its cut was a guess that may not hold. Go back to where it
        began and cut exactly; returns the exactly cut chunk, or None when no event ends in the text yet."""
        text = bytearray(failed[:-1])
        text += self.gap
        text += memoryview(self.buf)[1:]
        return self.restart(text, self.chunk_offset)

    def restart(self, text: bytearray, offset: int) -> bytearray | None:
        """Cut ``text`` (``[`` + text from a real event boundary at byte ``offset``) exactly, from scratch."""
        self.misses += 1
        self.buf, self.offset, self.gap = text, offset, b""
        self.exact = _Scan(1)
        return self._exact_cut()

    def _exact_cut(self, final: bool = False) -> bytearray | None:
        scan = self.exact
        assert scan is not None
        buf = self.buf
        scan.run(buf)
        if scan.bad is not None:
            raise TraceError(str(self.path), f"invalid JSON in traceEvents {self.at(scan.bad, scan.starts)}: "
                             "a closing bracket without an opening one")
        if scan.array_end is not None:
            end = scan.array_end
            chunk = bytearray(memoryview(buf)[:end])
            chunk += b"]"
            self.after = bytearray(memoryview(buf)[end + 1:])
            self.ended = True
            self.chunk_offset, self.chunk_starts = self.offset, scan.starts
            self.buf, self.exact = bytearray(b"["), None
            return chunk
        m = None
        for end in reversed(scan.ends):
            m = _COMMA_RE.match(buf, end)
            if m is not None:
                break
        if m is None:
            if final:
                return None
            if len(buf) > MAX_PENDING:
                raise TraceError(str(self.path), f"invalid JSON in traceEvents {self.at(1, scan.starts)}: no end of "
                                 f"an event in {MAX_PENDING >> 20} MB (an unclosed string or bracket?)")
            return None
        chunk = bytearray(memoryview(buf)[:end])
        chunk += b"]"
        self.chunk_offset = self.offset
        self.chunk_starts = scan.starts[: bisect.bisect_left(scan.starts, end)]
        self.offset += m.end() - 1
        self.buf = bytearray(b"[") + memoryview(buf)[m.end():]
        self.exact = _Scan(1) if self.misses >= FAST_MISSES else None
        return chunk

    def at(self, pos: int, starts: list[int], offset: int | None = None) -> str:
        """'at event N (byte B of the decompressed JSON)' for position ``pos`` of a buffer whose event starts are
        ``starts``."""
        index = max(0, bisect.bisect_right(starts, pos) - 1)
        return f"at event {self.events + index:,} (byte {(self.offset if offset is None else offset) + pos - 1:,} of the decompressed JSON)"

    def finish(self) -> tuple[bytearray | None, bytes]:
        """At end of input: the last events (a chunk, cut exactly, or None) and the metadata text."""
        if not self.in_array:
            text = bytes(self.prefix).strip()
            if not text:
                raise TraceError(str(self.path), "empty file")
            try:
                obj = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise TraceError(str(self.path), f"invalid JSON: {exc}") from exc
            if not isinstance(obj, dict):
                raise TraceError(str(self.path), f"top-level JSON is a {type(obj).__name__}, not an object with traceEvents")
            raise TraceError(str(self.path), "no traceEvents array: not a Kineto/Chrome trace")
        chunk = None
        if not self.ended:
            if self.exact is None:
                self.exact = _Scan(1)
            scan = self.exact
            scan.run(self.buf)
            if scan.array_end is None and scan.bad is None:
                raise self._unfinished(scan)
            chunk = self._exact_cut(final=True)
        return chunk, bytes(self.prefix) + b"null" + bytes(self.after)

    def _unfinished(self, scan: _Scan) -> TraceError:
        """The input ended inside traceEvents: truncated, or invalid JSON that never closes."""
        rest_from = scan.ends[-1] if scan.ends else 1
        tail = bytes(self.buf[rest_from:])
        stripped = tail.lstrip(b" \t\r\n,")
        try:
            msgspec.json.decode(b"[" + stripped)
        except msgspec.DecodeError as exc:
            if "truncated" not in str(exc):
                pos = rest_from + len(tail) - len(stripped) + max(0, (_byte_of(exc) or 1) - 1)
                where = self.at(pos, scan.starts)
                return TraceError(str(self.path), f"invalid JSON in traceEvents {where}: {_reason(exc)}")
        except (msgspec.ValidationError, RecursionError):
            pass
        return TraceError(str(self.path), f"truncated JSON: the file ends inside traceEvents "
                          f"{self.at(len(self.buf), scan.starts)} (the writer may still be running, or was killed)")


class _GuessedCut(Exception):
    """A chunk cut at a guessed event boundary did not decode: cut it again, exactly."""


_BYTE_RE = re.compile(r"\s*\(byte (\d+)\)")
_MAX_DEPTH = 1024  # orjson's limit; msgspec stops at Python's recursion limit (~1,000 minus the stack in use)


def _byte_of(exc: BaseException) -> int | None:
    m = _BYTE_RE.search(str(exc))
    return int(m.group(1)) if m else None


def _reason(exc: BaseException) -> str:
    return _BYTE_RE.sub("", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _decode_chunk(path: Path, data: bytes | bytearray | memoryview, keep_python: bool = False,
                  where: tuple[int, int, list[int]] | None = None) -> list[Any]:
    """Decode ``[event, …]`` (as the splitter returns it). ``where`` is (events before, byte offset, event
    starts) for an exactly cut chunk, None for a guessed cut (any failure then raises :class:`_GuessedCut`)."""
    try:
        return (_FAST_DECODER_PY if keep_python else _FAST_DECODER).decode(data)
    except msgspec.ValidationError:
        pass  # a category outside the tagged union, or an event without one: generic structs
    except (msgspec.DecodeError, RecursionError) as exc:
        return _decode_odd(path, data, where, exc)
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        pass  # a field of an unexpected type somewhere in this chunk: take the slow, forgiving path
    except (msgspec.DecodeError, RecursionError) as exc:
        return _decode_odd(path, data, where, exc)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _decode_odd(path, data, where, exc)
    return [_loose_event(e) for e in raw]


def _decode_odd(path: Path, data: Any, where: tuple[int, int, list[int]] | None, exc: BaseException) -> list[Any]:
    """A chunk msgspec cannot decode: a wrong guessed cut, nesting deeper than msgspec's recursion limit (orjson
    goes to 1,024), NaN/Infinity (not JSON, but Python writes them; the stdlib reads them and the events are then
    skipped for their times), or invalid JSON, reported with the event and byte where it goes wrong."""
    if where is None:
        raise _GuessedCut() from exc
    raw: Any = None
    deep = isinstance(exc, RecursionError)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc2:
        deep = deep or "depth" in str(exc2) or "recursion" in str(exc2)
        try:
            raw = json.loads(bytes(data))
        except (ValueError, RecursionError):
            pass
        if raw is None:
            events_before, offset, starts = where
            if deep:
                pos = _char_to_byte(data, exc2.pos)
                raise TraceError(str(path), f"an event nested deeper than {_MAX_DEPTH:,} levels "
                                 f"{_at(events_before, offset, starts, pos)}: not loaded") from None
            pos = _byte_of(exc) if not isinstance(exc, RecursionError) else None
            if pos is None:
                pos = _char_to_byte(data, exc2.pos)
            reason = _reason(exc) if isinstance(exc, msgspec.DecodeError) else str(exc2).split(":")[0]
            raise TraceError(str(path), f"invalid JSON in traceEvents {_at(events_before, offset, starts, pos)}: "
                             f"{reason}") from None
    if not isinstance(raw, list):
        raise TraceError(str(path), "invalid JSON in traceEvents")
    return [_loose_event(e) for e in raw]


def _char_to_byte(data: Any, pos: int) -> int:
    """Byte position of character ``pos`` of UTF-8 ``data``."""
    return len(bytes(data).decode("utf-8", "replace")[:pos].encode("utf-8"))


def _at(events_before: int, offset: int, starts: list[int], pos: int) -> str:
    index = max(0, bisect.bisect_right(starts, pos) - 1)
    return f"at event {events_before + index:,} (byte {offset + pos - 1:,} of the decompressed JSON)"


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _num(v: Any, typ: type) -> Any:
    if v is None or isinstance(v, bool):
        return None
    try:
        if isinstance(v, str):
            v = float(v) if typ is int else typ(v)
        if typ is int:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            v = int(v)
            return v if _INT64[0] <= v <= _INT64[1] else None
        if isinstance(v, (int, float)):
            return typ(v)
    except (ValueError, OverflowError):
        return None
    return None


def _time(v: Any) -> int | float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return int(v) if v.lstrip("-").isdigit() else float(v)
        except ValueError:
            return None
    return None


_NS_LIMIT_US = 9.2e15  # |µs| below this: the ns fit in int64 (2**63 ns = 9.22e15 µs)


def _as_float(v: Any) -> float:
    if v is None:
        return 0.0
    try:
        return float(v)
    except OverflowError:  # an integer beyond float range
        return math.inf


def _ns(values: list[int | float | None]) -> tuple[pa.Array, np.ndarray | None]:
    """µs -> integer ns, exactly, vectorised; returns (ns, mask of values that are no time) — the second is None
    when every value is a time.

    A float µs value with ns resolution is split into its integer µs (exact in float64) and its fraction (exact by
    Sterbenz); the fraction's representation error stays below 0.25 ns while ts < 2**43 µs (101 days), so
    rounding ``fraction * 1000`` recovers the written ns exactly. Integer µs (old absolute-time traces, up to
    2**53) convert to float64 exactly and have no fraction. NaN, ±Infinity and values whose ns do not fit in a
    64-bit integer (1e16 µs, 1e300, 2**70) are no time: they come back masked, as 0, never wrapped.
    """
    try:
        arr = np.fromiter(values, dtype=np.float64, count=len(values))
        mask = None
    except (TypeError, OverflowError):  # None among the values, or an integer beyond float range
        mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
        arr = np.fromiter(map(_as_float, values), dtype=np.float64, count=len(values))
        if not mask.any():
            mask = None
    bad = ~(np.abs(arr) < _NS_LIMIT_US)
    if bad.any():
        arr[bad] = 0.0
    else:
        bad = None
    whole = np.floor(arr)
    ns = whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000.0).astype(np.int64)
    return pa.array(ns, pa.int64(), mask=mask), bad


def _dumps(v: Any) -> str | None:
    """JSON text of a decoded value; None if it cannot be written (orjson stops at 255 levels and 64-bit ints)."""
    try:
        return orjson.dumps(v).decode()
    except TypeError:
        try:
            return json.dumps(v, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return None


def _loose_event(raw: Any) -> Event:
    """Build an Event from a dict of arbitrary types (fields of the wrong type become NULL)."""
    if not isinstance(raw, dict):
        return Event()
    a = raw.get("args")
    args = None
    if isinstance(a, dict):
        dims = _dumps(a["Input Dims"]) if "Input Dims" in a else None
        args = Args(
            correlation=_num(a.get("correlation"), int),
            external_id=_num(a.get("External id"), int),
            stream=_num(a.get("stream"), int),
            device=_num(a.get("device"), int),
            grid=a.get("grid") if isinstance(a.get("grid"), list) else None,
            block=a.get("block") if isinstance(a.get("block"), list) else None,
            registers=_num(a.get("registers per thread"), int),
            shared_memory=_num(a.get("shared memory"), int),
            blocks_per_sm=_num(a.get("blocks per SM"), float),
            warps_per_sm=_num(a.get("warps per SM"), float),
            occupancy=_num(a.get("est. achieved occupancy %"), float),
            bytes=_num(a.get("bytes"), int),
            cbid=_num(a.get("cbid"), int),
            collective_name=a.get("Collective name"),
            in_nelems=a.get("In msg nelems"),
            out_nelems=a.get("Out msg nelems"),
            group_size=a.get("Group size"),
            dtype=a.get("dtype"),
            pg_name=a.get("Process Group Name"),
            pg_ranks=a.get("Process Group Ranks"),
            input_dims=msgspec.Raw(dims.encode()) if dims is not None else msgspec.Raw(b""),
        )
    pid, tid = raw.get("pid"), raw.get("tid")
    return Event(
        ph=raw.get("ph") if isinstance(raw.get("ph"), str) else None,
        cat=raw.get("cat") if isinstance(raw.get("cat"), str) else None,
        name=raw.get("name") if isinstance(raw.get("name"), str) else None,
        pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None,
        tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None,
        ts=_time(raw.get("ts")),
        dur=_time(raw.get("dur")),
        args=args,
    )


# ---------------------------------------------------------------------------------------------------------------
# Columns


def _int_or_none(v: Any) -> int | None:
    """A 64-bit integer, or None (NaN, Infinity, beyond 64 bits, not a number)."""
    if v is None:
        return None
    if type(v) is int:  # the common case, per GPU event: no call
        return v if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF else None
    return _num(v, int)


def _str_or_none(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    return _dumps(v)


def _pid(v: int | str | None) -> int | None:
    if type(v) is int:
        return v if -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF else None
    if isinstance(v, str):
        digits = "".join(ch for ch in v if ch.isdigit())
        return int(digits) if digits and len(digits) < 19 else None
    return None


def _dims(prefix: str, values: list[list[int] | None]) -> dict[str, pa.Array]:
    """``{prefix_x, prefix_y, prefix_z}`` columns from [x, y, z] lists (vectorised; a short list -> NULLs)."""
    try:
        lists = pa.array(values, pa.list_(pa.int32()))
        if pc.any(pc.less(pc.list_value_length(lists), 3)).as_py():
            raise ValueError("short list")
        return {f"{prefix}_{axis}": pc.list_element(lists, i) for i, axis in enumerate("xyz")}
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, OverflowError):
        return {f"{prefix}_{axis}": pa.array([_dim(v, i) for v in values], pa.int32()) for i, axis in enumerate("xyz")}


def _dim(values: list[int] | None, i: int) -> int | None:
    if values and len(values) > i:
        v = values[i]
        return v if isinstance(v, int) else None
    return None


def _times(events: list[Any], gpu: bool = False) -> tuple[pa.Array, pa.Array, np.ndarray | None]:
    """(ts_ns, dur_ns, mask of rows whose ts or dur is no time, or None). A GPU activity without dur lasts 0."""
    ts, bad_ts = _ns([e.ts for e in events])
    dur, bad_dur = _ns([e.dur if e.dur is not None else 0 for e in events] if gpu else [e.dur for e in events])
    bad = bad_ts if bad_dur is None else bad_dur if bad_ts is None else bad_ts | bad_dur
    return ts, dur, bad


class _Columns:
    """Accumulates one chunk's events as columns per table."""

    def __init__(self, keep_python: bool) -> None:
        self.keep_python = keep_python
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.problems: Counter[str] = Counter()  # 'bad_time:<table>', 'negative_dur:<table>', 'gpu_no_ts', 'gpu_not_X'

    def build(self, events: list[Event], first_event_id: int) -> dict[str, pa.Table]:
        """Columns per staging table; GPU rows carry their ``name`` (the parent maps names to ids)."""
        gpu, gpu_ids = [], []
        launch, launch_ids = [], []
        ann, ann_ids = [], []
        ops, op_ids = [], []
        py, py_ids = [], []
        skipped = self.skipped
        keep_python = self.keep_python
        indexed: Iterable[tuple[int, Any]] = enumerate(events)
        if events and type(events[0]).__module__ == __name__ and type(events[0]) is not Event:
            # tagged structs: count and drop the skipped categories at C speed before the per-event loop
            for typ, n in Counter(map(type, events)).items():
                if typ in _SKIP_TYPE_SET:
                    skipped[typ.cat] += n
            keep_mask = list(map(_KEEP_TYPE, map(type, events)))  # C-level loop
            indexed = zip(compress(range(len(events)), keep_mask), compress(events, keep_mask))
        for i, e in indexed:
            cat = e.cat
            if cat is None or (cat in KNOWN_SKIPPED and not (cat == "python_function" and keep_python)):
                skipped[cat or "(no category)"] += 1
                continue
            if e.ts is None or e.ph not in ("X", None):
                skipped[cat] += 1
                if cat in GPU_CATS:
                    self.problems["gpu_no_ts" if e.ts is None else "gpu_not_X"] += 1
                continue
            if cat in GPU_CATS:
                gpu.append(e)
                gpu_ids.append(first_event_id + i)
            elif cat in LAUNCH_CATS:
                launch.append(e)
                launch_ids.append(first_event_id + i)
            elif cat == "cpu_op":
                ops.append(e)
                op_ids.append(first_event_id + i)
            elif cat in ANNOTATION_CATS:
                ann.append(e)
                ann_ids.append(first_event_id + i)
            elif cat == "python_function" and keep_python:
                py.append(e)
                py_ids.append(first_event_id + i)
            else:
                skipped[cat] += 1
                if cat not in KNOWN_SKIPPED:
                    self.unknown[cat] += 1
        out: dict[str, pa.Table] = {}
        if gpu:
            out["gpu"] = self._gpu_table(gpu, gpu_ids)
        if launch:
            args = [e.args or _EMPTY_ARGS for e in launch]
            ts, dur, bad = _times(launch)
            out["launch"] = self._checked("launch", bad, {
                "event_id": pa.array(launch_ids, pa.int64()),
                "api": pa.array(["cuda_driver" if e.cat in ("cuda_driver", "Driver") else "cuda_runtime" for e in launch], pa.string()),
                "name": pa.array([e.name or "" for e in launch], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in launch], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in launch], pa.int64()),
                "ts_ns": ts,
                "dur_ns": dur,
                "correlation": pa.array([a.correlation for a in args], pa.int64()),
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
                "cbid": pa.array([a.cbid for a in args], pa.int32()),
            })
        if ann:
            args = [e.args or _EMPTY_ARGS for e in ann]
            ts, dur, bad = _times(ann)
            out["ann"] = self._checked("ann", bad, {
                "event_id": pa.array(ann_ids, pa.int64()),
                "kind": pa.array([e.cat for e in ann], pa.string()),
                "name": pa.array([e.name or "" for e in ann], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in ann], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in ann], pa.int64()),
                "ts_ns": ts,
                "dur_ns": dur,
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
            })
        if ops:
            args = [e.args or _EMPTY_ARGS for e in ops]
            ts, dur, bad = _times(ops)
            out["ops"] = self._checked("ops", bad, {
                "event_id": pa.array(op_ids, pa.int64()),
                "name": pa.array([e.name or "" for e in ops], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in ops], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in ops], pa.int64()),
                "ts_ns": ts,
                "dur_ns": dur,
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
                "input_dims": pa.array([bytes(a.input_dims).decode("utf-8", "replace") if len(a.input_dims) else None for a in args], pa.string()),
            })
        if py:
            ts, dur, bad = _times(py)
            out["py"] = self._checked("py", bad, {
                "event_id": pa.array(py_ids, pa.int64()),
                "name": pa.array([e.name or "" for e in py], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in py], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in py], pa.int64()),
                "ts_ns": ts,
                "dur_ns": dur,
            })
        return out

    def _checked(self, key: str, bad: np.ndarray | None, columns: dict[str, Any]) -> pa.Table:
        """The table, without the rows whose ts or dur is no time (``bad``) or whose duration is negative;
        counted in :attr:`problems`."""
        table = pa.table(columns)
        lowest = pc.min(table.column("dur_ns")).as_py()
        negative = None
        if lowest is not None and lowest < 0:
            negative = pc.fill_null(pc.less(table.column("dur_ns"), 0), False).to_numpy(zero_copy_only=False)
            if bad is not None:
                negative &= ~bad
        if bad is None and negative is None:
            return table
        keep = np.ones(table.num_rows, dtype=bool)
        if bad is not None:
            keep &= ~bad
            self.problems[f"bad_time:{key}"] += int(bad.sum())
        if negative is not None:
            keep &= ~negative
            self.problems[f"negative_dur:{key}"] += int(negative.sum())
        return table.filter(pa.array(keep))

    def _gpu_table(self, gpu: list[Event], ids: list[int]) -> pa.Table:
        args = [e.args or _EMPTY_ARGS for e in gpu]
        grids = [a.grid for a in args]
        blocks = [a.block for a in args]
        has_coll = any(a.collective_name is not None or a.in_nelems is not None for a in args)
        n = len(gpu)
        nulls_i = pa.nulls(n, pa.int64())
        nulls_s = pa.nulls(n, pa.string())
        ts, dur, bad = _times(gpu, gpu=True)
        return self._checked("gpu", bad, {
            "event_id": pa.array(ids, pa.int64()),
            "kind": pa.array([GPU_CATS[e.cat] for e in gpu], pa.string()),  # type: ignore[index]
            "name": pa.array([e.name or "" for e in gpu], pa.string()),
            "device": pa.array([a.device if a.device is not None else _pid(e.pid) for a, e in zip(args, gpu)], pa.int32()),
            "stream": pa.array([a.stream if a.stream is not None else _pid(e.tid) for a, e in zip(args, gpu)], pa.int64()),
            "ts_ns": ts,
            "dur_ns": dur,
            "correlation": pa.array([a.correlation for a in args], pa.int64()),
            "external_id": pa.array([a.external_id for a in args], pa.int64()),
            **_dims("grid", grids),
            **_dims("block", blocks),
            "registers": pa.array([a.registers for a in args], pa.int32()),
            "shared_mem_bytes": pa.array([a.shared_memory for a in args], pa.int32()),
            "blocks_per_sm": pa.array([a.blocks_per_sm for a in args], pa.float64()),
            "warps_per_sm": pa.array([a.warps_per_sm for a in args], pa.float64()),
            "occupancy_pct": pa.array([a.occupancy for a in args], pa.float64()),
            "bytes": pa.array([_int_or_none(a.bytes) for a in args], pa.int64()),
            "collective_name": pa.array([_str_or_none(a.collective_name) for a in args], pa.string()) if has_coll else nulls_s,
            "msg_in_nelems": pa.array([_int_or_none(a.in_nelems) for a in args], pa.int64()) if has_coll else nulls_i,
            "msg_out_nelems": pa.array([_int_or_none(a.out_nelems) for a in args], pa.int64()) if has_coll else nulls_i,
            "msg_dtype": pa.array([_str_or_none(a.dtype) for a in args], pa.string()) if has_coll else nulls_s,
            "group_size": pa.array([_int_or_none(a.group_size) for a in args], pa.int32()) if has_coll else pa.nulls(n, pa.int32()),
            "pg_name": pa.array([_str_or_none(a.pg_name) for a in args], pa.string()) if has_coll else nulls_s,
            "pg_ranks": pa.array([_str_or_none(a.pg_ranks) for a in args], pa.string()) if has_coll else nulls_s,
        })


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
            block = reader.read(BLOCK_SIZE)
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


def _die_with_parent(pdeathsig: bool) -> None:
    """Make this decode process end when the load that started it ends, however it ends (kill -9 included):
    Linux's parent-death signal when the parent's main thread started us, and in any case a thread that waits
    for the end of the pipe multiprocessing keeps open to the parent (EOF when the parent is gone)."""
    if pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(70)

    threading.Thread(target=watch, name="k25trace-parent-watch", daemon=True).start()


def _worker_main(index: int, tasks: Any, results: Any, pdeathsig: bool = False) -> None:
    """A decode process. Tasks: ``(task_id, path, keep_python)`` streams a whole file (decompress, cut, decode);
    ``("attach", task_id, names)`` maps the parent's shared-memory ring (the parent unlinks the names once every
    worker answered, so nothing is left in /dev/shm whatever happens next); ``("chunk", task_id, path, index,
    size, keep_python)`` decodes one chunk the parent put in ring buffer ``index``. Every item it puts is tagged
    with the task id; a failure is reported as ("error", path, problem), a guessed cut that does not hold as
    ("resplit",), and the worker goes on."""
    _die_with_parent(pdeathsig)
    ring: list[Any] = []
    while True:
        task = tasks.get()
        if task is None:
            for shm in ring:
                shm.close()
            return
        if task[0] == "attach":
            from multiprocessing import shared_memory

            for shm in ring:
                shm.close()
            ring = [shared_memory.SharedMemory(name=name) for name in task[2]]
            results.put((task[1], ("attached",)))
            continue
        if task[0] == "chunk":  # one chunk the parent decompressed into a shared-memory buffer
            _, task_id, chunk_path, buffer_index, size, keep_python = task
            try:
                view = ring[buffer_index].buf[:size]
                try:
                    item = ("chunk", *_decode_and_build(chunk_path, view, keep_python))
                finally:
                    view.release()
                results.put((task_id, item))
            except _GuessedCut:
                results.put((task_id, ("resplit",)))
            except TraceError as exc:
                results.put((task_id, ("error", exc.path, exc.problem)))
            except Exception as exc:  # noqa: BLE001 - reported to the parent as this file's failure
                results.put((task_id, ("error", chunk_path, f"{type(exc).__name__}: {exc}")))
            continue
        task_id, path, keep_python = task

        def progress(n: int) -> None:
            results.put((task_id, ("progress", n)))

        try:
            for item in _chunks(Path(path), keep_python, progress):
                results.put((task_id, item))
        except TraceError as exc:
            results.put((task_id, ("error", exc.path, exc.problem)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent as this file's failure
            results.put((task_id, ("error", path, f"{type(exc).__name__}: {exc}")))


SHM_PREFIX = "k25trace_"


def _remove_stale_segments() -> None:
    """Unlink ring segments in /dev/shm left by a load that died before it unlinked them (its pid is gone)."""
    shm_dir = Path("/dev/shm")
    try:
        names = [p.name for p in shm_dir.iterdir() if p.name.startswith(SHM_PREFIX)]
    except OSError:
        return
    for name in names:
        try:
            pid = int(name[len(SHM_PREFIX):].split("_", 1)[0])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or another user's)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(shm_dir / name)
        except OSError:
            pass


class _Workers:
    """Decode processes. Several big files: each worker streams whole files (round robin), ahead of the parent,
    which takes them in order and writes them to DuckDB (the single writer). One big file: the parent
    decompresses it into shared memory and the workers decode the chunks in turn (:meth:`feed`).

    Nothing outlives the load: the workers end with the parent (:func:`_die_with_parent`) and the ring's names
    are unlinked as soon as every worker has mapped it (the memory goes when the last process unmaps it)."""

    def __init__(self, count: int) -> None:
        import multiprocessing
        import threading

        ctx = multiprocessing.get_context("spawn")
        pdeathsig = threading.current_thread() is threading.main_thread()
        self.count = count
        self.tasks = [ctx.Queue() for _ in range(count)]
        self.results = [ctx.Queue() for _ in range(count)]
        self.procs = [ctx.Process(target=_worker_main, args=(i, self.tasks[i], self.results[i], pdeathsig), daemon=True)
                      for i in range(count)]
        for proc in self.procs:
            proc.start()
        self.next_task = 0
        self.planned: dict[str, tuple[int, int]] = {}  # path -> (task id, worker) of a whole-file prefetch
        self.ring: list[Any] = []  # shared-memory chunk buffers for feed()
        self.ring_failed = False

    def prefetch(self, paths: list[Path], keep_python: bool) -> None:
        """Start streaming these files, one whole file per worker in turn."""
        for n, path in enumerate(paths):
            worker = n % self.count
            task_id = self._task_id()
            self.planned[str(path)] = (task_id, worker)
            self.tasks[worker].put((task_id, str(path), keep_python))

    def _task_id(self) -> int:
        self.next_task += 1
        return self.next_task

    def _get(self, worker: int, task_id: int) -> tuple:
        import queue

        while True:
            try:
                got_id, item = self.results[worker].get(timeout=1.0)
            except queue.Empty:
                if not self.procs[worker].is_alive():
                    raise K25Error(f"decode worker {worker} died (exit code {self.procs[worker].exitcode})") from None
                continue
            if got_id == task_id:
                return item
            # a stale item of an earlier task that failed on another worker: drop it

    def ring_ok(self) -> bool:
        """Whether the shared-memory ring of :meth:`feed` exists or can be made. Not under a file-size limit
        smaller than a buffer (``ulimit -f``: /dev/shm files count too), nor when /dev/shm refuses: the caller
        then decodes in its own process."""
        if self.ring:
            return True
        if self.ring_failed:
            return False
        try:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            if limit != resource.RLIM_INFINITY and limit < RING_BUFFER_BYTES:
                self.ring_failed = True
                return False
        except (ImportError, OSError, ValueError):
            pass
        try:
            self._ring_buffers()
        except OSError:
            self.ring_failed = True
            return False
        return True

    def _ring_buffers(self) -> list[Any]:
        """The shared-memory ring, mapped by every worker, its names already unlinked."""
        if self.ring:
            return self.ring
        from multiprocessing import shared_memory

        _remove_stale_segments()
        token = os.urandom(4).hex()
        ring: list[Any] = []
        done = False
        try:
            for i in range(2 * self.count + 2):
                ring.append(shared_memory.SharedMemory(name=f"{SHM_PREFIX}{os.getpid()}_{token}_{i}", create=True,
                                                       size=RING_BUFFER_BYTES))
            task_id = self._task_id()
            names = [shm.name for shm in ring]
            for worker in range(self.count):
                self.tasks[worker].put(("attach", task_id, names))
            for worker in range(self.count):
                self._get(worker, task_id)
            done = True
        finally:
            for shm in ring:  # mapped here and in every worker (or failed): the names can go now
                shm.unlink()
                if not done:
                    shm.close()
        self.ring = ring
        return ring

    def feed(self, path: Path, keep_python: bool, progress: Callable[[int], None]) -> Iterator[tuple]:
        """One big file: this process decompresses it once, straight into the shared-memory buffers of a small
        ring (``[`` + the carried-over partial event + a block; the comma after the last complete event becomes
        ``]``), and the workers decode the buffers in turn; results come back in file order. The metadata, a cut
        that did not hold (re-cut exactly here, see :class:`_Splitter`) and events too large for a buffer are
        handled in this process."""
        task_id = self._task_id()
        ring = self._ring_buffers()
        in_flight: deque[tuple[int, int, int, bytes, int]] = deque()  # (worker, buffer, size, gap, offset), file order
        sent = 0
        reader = _Reader(path)
        splitter = _Splitter(path)
        spath = str(path)
        try:
            while True:
                if not splitter.fast or len(splitter.buf) + 1 + BLOCK_SIZE > RING_BUFFER_BYTES:
                    while in_flight:  # keep the file order
                        yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
                    if splitter.fast and len(splitter.buf) + 1 + BLOCK_SIZE <= RING_BUFFER_BYTES:
                        continue
                    block = reader.read(BLOCK_SIZE)
                    reader.report(progress)
                    if not block:
                        break
                    chunk = splitter.feed(block)
                    if chunk:
                        yield from _decoded(splitter, chunk, keep_python)
                    continue
                if len(in_flight) == len(ring):
                    yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
                    continue
                index = sent % len(ring)
                buf = ring[index].buf
                carry = splitter.buf  # "[" + the text after the last cut
                start = len(carry)
                buf[:start] = carry
                n = reader.readinto(buf[start : start + BLOCK_SIZE])
                reader.report(progress)
                if not n:
                    break
                total = start + n
                last = None
                search_from = max(1, total - (1 << 20))
                while last is None:
                    for last in _BOUNDARY_RE.finditer(buf, search_from, total):
                        pass
                    if last is None and search_from == 1:
                        break
                    search_from = max(1, search_from - (8 << 20))
                if last is None:  # no complete event yet: carry everything over
                    splitter.buf = bytearray(buf[:total])
                    continue
                gap = bytes(buf[last.start() + 1 : last.end() - 1])
                offset = splitter.offset
                splitter.offset += last.end() - 2
                splitter.buf = bytearray(b"[") + buf[last.end() - 1 : total]
                buf[last.start() + 1] = 0x5D  # ]
                worker = sent % self.count
                self.tasks[worker].put(("chunk", task_id, spath, index, last.start() + 2, keep_python))
                in_flight.append((worker, index, last.start() + 2, gap, offset))
                sent += 1
            while in_flight:
                yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
            tail, meta_text = splitter.finish()
            if tail is not None:
                yield from _decoded(splitter, tail, keep_python)
            yield ("end", meta_text, reader.sha256, reader.count)
        except TraceError:
            raise  # workers carry on; leftovers of this task are dropped by task id
        except BaseException:
            self.close()
            raise
        finally:
            reader.close()

    def _take_oldest(self, in_flight: deque, ring: list[Any], splitter: _Splitter, task_id: int,
                     keep_python: bool) -> Iterator[tuple]:
        """The result of the oldest chunk in flight. If its cut (a guess) did not hold, the chunks sent after it
        were cut on a wrong carry: wait for them (their buffers are read until their workers answer), drop their
        results, rebuild the text from the failed chunk's start and let the splitter cut it exactly here."""
        worker, index, size, gap, offset = in_flight.popleft()
        item = self._take(worker, task_id)
        if item[0] != "resplit":
            splitter.events += item[2]
            yield item
            return
        text = bytearray(ring[index].buf[: size - 1])
        text += gap
        for w, i, s, g, _ in in_flight:
            self._get(w, task_id)
            text += ring[i].buf[1 : s - 1]
            text += g
        in_flight.clear()
        text += memoryview(splitter.buf)[1:]
        chunk = splitter.restart(text, offset)
        if chunk is not None:
            yield from _decoded(splitter, chunk, keep_python)

    def _take(self, worker: int, task_id: int) -> tuple:
        item = self._get(worker, task_id)
        if item[0] == "error":
            raise TraceError(item[1], item[2])
        return item

    def run(self, path: Path, keep_python: bool) -> Iterator[tuple]:
        """The items of a file given to :meth:`prefetch`, as its worker streams them."""
        task_id, worker = self.planned.pop(str(path))
        try:
            while True:
                item = self._take(worker, task_id)
                yield item
                if item[0] == "end":
                    return
        except TraceError:
            raise  # the worker carries on with its next file
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)
        self.procs = []
        for shm in self.ring:  # the names were unlinked when the workers mapped them
            try:
                shm.close()
            except BufferError:  # a view of it still held by an unfinished generator: freed with it
                pass
        self.ring = []


# ---------------------------------------------------------------------------------------------------------------
# Loading one file

_STAGE_DDL = {
    "gpu": "create temp table _stage_gpu (event_id bigint, kind varchar, name_id integer, device integer, stream bigint, "
    "ts_ns bigint, dur_ns bigint, correlation bigint, external_id bigint, grid_x integer, grid_y integer, grid_z integer, "
    "block_x integer, block_y integer, block_z integer, registers integer, shared_mem_bytes integer, "
    "blocks_per_sm double, warps_per_sm double, occupancy_pct double, bytes bigint, collective_name varchar, "
    "msg_in_nelems bigint, msg_out_nelems bigint, msg_dtype varchar, group_size integer, pg_name varchar, pg_ranks varchar)",
    "launch": "create temp table _stage_launch (event_id bigint, api varchar, name varchar, pid bigint, tid bigint, "
    "ts_ns bigint, dur_ns bigint, correlation bigint, external_id bigint, cbid integer)",
    "ann": "create temp table _stage_ann (event_id bigint, kind varchar, name varchar, pid bigint, tid bigint, "
    "ts_ns bigint, dur_ns bigint, external_id bigint)",
    "ops": "create temp table _stage_ops (event_id bigint, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint, "
    "external_id bigint, input_dims varchar)",
    "py": "create temp table _stage_py (event_id bigint, name varchar, pid bigint, tid bigint, ts_ns bigint, dur_ns bigint)",
}

_NS = "ts_ns"
_DUR = "coalesce(dur_ns, 0)"

# Exact duplicates: every stored column but event_id equal. The probe (a few columns) is cheap and almost always
# finds nothing; only then are whole rows compared. python_function rows are left alone: their ids (Python id,
# parent id) are not stored, so two real zero-length calls in the same µs would look alike.
_DUP_PROBE = {
    "gpu": "ts_ns, dur_ns, device, stream, correlation",
    "launch": "ts_ns, dur_ns, tid, correlation",
    "ann": "ts_ns, dur_ns, tid, external_id, name",
    "ops": "ts_ns, dur_ns, tid, external_id",
}
_TABLE_WORDS = {"gpu": ("GPU activity", "GPU activities"), "launch": ("launch", "launches"),
                "ann": ("annotation", "annotations"), "ops": ("CPU op", "CPU ops"), "py": ("python function", "python functions")}
LONG_GPU_NS = 3_600 * 10**9  # a GPU activity longer than an hour is reported


class Loader:
    """Loads trace files into one database connection, one transaction per file."""

    def __init__(self, con: duckdb.DuckDBPyConnection, options: LoadOptions | None = None,
                 progress: Callable[[int], None] | None = None,
                 after_file: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None) -> None:
        self.con = con
        self.options = options or LoadOptions()
        self._executor: _Workers | None = None
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._pending: dict[str, list[pa.Table]] = {}
        self._pending_rows = 0
        self.progress = progress or (lambda n: None)
        self.names: dict[str, int] = dict(con.execute("select name, name_id from kernel_names").fetchall())
        self.next_name_id = con.execute("select coalesce(max(name_id), 0) from kernel_names").fetchall()[0][0] + 1
        self.after_file = after_file  # the later stages (k25trace.pipeline), inside the file's transaction

    def _known(self, sha: str) -> tuple[int, str] | None:
        rows = self.con.execute("select trace_id, path from traces where sha256 = ?", [sha]).fetchall()
        return rows[0] if rows else None

    def _hash(self, path: Path) -> str:
        """The file's sha256, computed once per (path, size, mtime) in this load."""
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._hashes:
            self._hashes[key] = _sha256(path)
        return self._hashes[key]

    def already_loaded(self, path: Path) -> bool:
        try:
            return self._known(self._hash(path)) is not None
        except (OSError, duckdb.Error):
            return False

    def load(self, tf: TraceFile) -> FileResult:
        path = tf.path
        shown = _shown(path)
        started = _dt.datetime.now()
        result = FileResult(shown, "failed")
        try:
            with open(path, "rb"):
                pass
            sha = self._hash(path)
        except OSError as exc:
            result.message = f"{shown}: cannot read: {exc.strerror}"
            return result
        try:
            row = self._known(sha)
        except duckdb.Error as exc:
            result.message = f"{shown}: {_db_problem(exc)}"
            return result
        if row:
            result.status = "skipped"
            result.trace_id = row[0]
            result.message = f"{shown}: already loaded as trace {row[0]} ({row[1]})"
            return result
        new_names: dict[str, int] = {}
        next_id = [self.next_name_id]

        def name_id(name: str) -> int:
            got = self.names.get(name)
            if got is None:
                got = new_names.get(name)
                if got is None:
                    got = next_id[0]
                    next_id[0] += 1
                    new_names[name] = got
            return got

        con = self.con
        committing = False
        try:
            con.execute("begin transaction")
        except duckdb.Error as exc:
            result.message = f"{shown}: not loaded: {_db_problem(exc)}"
            return result
        try:
            for ddl in _STAGE_DDL.values():
                con.execute(ddl)
            meta, counts, cols, read_sha, read_bytes = self._stream(path, name_id)
            if read_sha != sha:  # the file changed between the hash and the read (still being written?)
                row = self._known(read_sha)
                if row:
                    con.execute("rollback")
                    result.status = "skipped"
                    result.trace_id = row[0]
                    result.message = f"{shown}: already loaded as trace {row[0]} ({row[1]}) (it changed while it was read)"
                    return result
            trace_id, warnings = self._commit_file(tf, path, read_sha, read_bytes, meta, counts, cols, new_names)
            if read_sha != sha:
                warnings.append(f"{shown}: the file changed while it was read (still being written?); stored what was "
                                f"read ({read_bytes:,} bytes, sha256 {read_sha[:12]}…)")
            committing = True
            con.execute("commit")
        except BaseException as exc:
            self._pending, self._pending_rows = {}, 0
            self._rollback()
            if isinstance(exc, TraceError):
                result.message = f"{_shown(exc.path)}: {exc.problem}"
                return result
            if isinstance(exc, K25Error):
                result.message = f"{shown}: {exc}"
                return result
            if isinstance(exc, duckdb.Error):
                what = "not stored: the commit failed" if committing else "not loaded"
                result.message = f"{shown}: {what}: {_db_problem(exc)} (nothing of this file is in the database)"
                return result
            if isinstance(exc, RecursionError):
                result.message = f"{shown}: nested too deep to load (RecursionError)"
                return result
            if isinstance(exc, OSError):
                result.message = f"{shown}: cannot read: {exc.strerror or exc}"
                return result
            if isinstance(exc, (MemoryError, UnicodeError, ValueError, OverflowError)):
                result.message = f"{shown}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                return result
            raise
        finally:
            for table in ("_stage_gpu", "_stage_launch", "_stage_ann", "_stage_ops", "_stage_py"):
                try:
                    con.execute(f"drop table if exists {table}")
                except duckdb.Error:
                    pass
        self.names.update(new_names)
        self.next_name_id = next_id[0]
        result.status = "loaded"
        result.trace_id = trace_id
        result.warnings = warnings
        try:
            info = con.execute("select rank, event_count, gpu_event_count from traces where trace_id = ?", [trace_id]).fetchall()[0]
            result.rank, result.events, result.gpu_events = info[0], info[1], info[2]  # type: ignore[index]
        except (duckdb.Error, IndexError):
            pass
        result.seconds = (_dt.datetime.now() - started).total_seconds()
        return result

    def _rollback(self) -> None:
        """Roll back the file's transaction; after a failed commit DuckDB has already ended it."""
        try:
            self.con.execute("rollback")
        except duckdb.Error:
            pass

    def _stream(self, path: Path, name_id: Callable[[str], int]) -> tuple[dict[str, Any], int, _Columns, str, int]:
        """Read, decode and stage one file's events; returns (top-level metadata, event count, counters, sha256 of
        the bytes read, bytes read)."""
        cols = _Columns(self.options.keep_python)
        workers = self._workers() if file_size(path) >= self.options.parallel_min_bytes else None
        if workers is not None and str(path) in workers.planned:
            chunks = workers.run(path, self.options.keep_python)
        elif workers is not None and workers.ring_ok():
            chunks = workers.feed(path, self.options.keep_python, self.progress)
        else:
            chunks = _chunks(path, self.options.keep_python, self.progress)
        total = 0
        end: tuple = ()
        for item in chunks:
            if item[0] == "chunk":
                _, tables, n, skipped, unknown, problems = item
                cols.skipped.update(skipped)
                cols.unknown.update(unknown)
                cols.problems.update(problems)
                self._append(tables, total, name_id)
                total += n
            elif item[0] == "progress":
                self.progress(item[1])
            else:  # "end"
                end = item
        self._flush()
        _, meta_text, sha, read_bytes = end
        try:
            meta = orjson.loads(meta_text)
        except orjson.JSONDecodeError as exc:
            raise TraceError(str(path), f"invalid JSON outside traceEvents: {exc}") from exc
        if not isinstance(meta, dict):
            raise TraceError(str(path), "top-level JSON is not an object")
        return meta, total, cols, sha, read_bytes

    def prefetch(self, files: list[TraceFile]) -> None:
        """With several big files, start decoding them in the worker processes ahead of loading."""
        big = [tf.path for tf in files if file_size(tf.path) >= self.options.parallel_min_bytes]
        if len(big) < 2:
            return
        workers = self._workers()
        if workers is not None:
            workers.prefetch(big, self.options.keep_python)

    def _workers(self) -> "_Workers | None":
        if self.options.workers <= 1:
            return None
        if self._executor is None or not self._executor.procs:
            self._executor = _Workers(self.options.workers)
        return self._executor

    def close(self) -> None:
        if self._executor is not None:
            self._executor.close()
            self._executor = None

    def _append(self, tables: dict[str, pa.Table], first_event_id: int, name_id: Callable[[str], int]) -> None:
        for key, table in tables.items():
            if first_event_id:
                table = table.set_column(0, "event_id", pc.add(table.column("event_id"), first_event_id))
            if key == "gpu":
                names = table.column("name").combine_chunks().dictionary_encode()
                ids = pa.array([name_id(v) for v in names.dictionary.to_pylist()], pa.int32())
                table = table.drop_columns(["name"]).append_column("name_id", pc.take(ids, names.indices))
            self._pending.setdefault(key, []).append(table)
            self._pending_rows += table.num_rows
        if self._pending_rows >= STAGE_BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        """Write the buffered chunk tables to the staging tables, one insert per table (per-call cost adds up)."""
        for key, tables in self._pending.items():
            self.con.register("_chunk", pa.concat_tables(tables, promote_options="permissive"))
            try:
                self.con.execute(f"insert into _stage_{key} by name select * from _chunk")
            finally:
                self.con.unregister("_chunk")
        self._pending = {}
        self._pending_rows = 0

    def _clean_staged(self, base: int, problems: Counter[str]) -> None:
        """Before the move into the final tables: drop rows whose absolute times would not fit in 64 bits (the
        decoder already dropped what is no time on its own), and exact duplicate events."""
        con = self.con
        lo, hi = _INT64
        for key in _STAGE_DDL:
            table = f"_stage_{key}"
            first, last = con.execute(f"select min(ts_ns), max(ts_ns::hugeint + coalesce(dur_ns, 0)) from {table}").fetchall()[0]
            if first is not None and (base + first < lo or base + last > hi):
                out_of_range = f"not ($base::hugeint + ts_ns between {lo} and {hi} and $base::hugeint + ts_ns + coalesce(dur_ns, 0) <= {hi})"
                n = con.execute(f"select count(*) from {table} where {out_of_range}", {"base": base}).fetchall()[0][0]
                con.execute(f"delete from {table} where {out_of_range}", {"base": base})
                problems[f"bad_time:{key}"] += n
            probe = _DUP_PROBE.get(key)
            if probe is None:
                continue
            dup_keys = con.execute(f"select count(*) from (select 1 from {table} group by {probe} having count(*) > 1)").fetchall()[0][0]
            if not dup_keys:
                continue
            columns = [r[0] for r in con.execute(f"select name from pragma_table_info('{table}') where name != 'event_id'").fetchall()]
            n = con.execute(
                f"select count(*) - count(distinct ({', '.join(columns)})) from {table}").fetchall()[0][0]
            if n:
                con.execute(
                    f"delete from {table} where event_id in (select event_id from (select event_id, row_number() over "
                    f"(partition by {', '.join(columns)} order by event_id) as copy from {table}) where copy > 1)")
                problems[f"duplicate:{key}"] += n

    def _commit_file(self, tf: TraceFile, path: Path, sha: str, read_bytes: int, meta: dict[str, Any], counts: int,
                     cols: _Columns, new_names: dict[str, int]) -> tuple[int, list[str]]:
        con = self.con
        warnings: list[str] = []
        shown = _shown(path)
        if shown != str(path):
            warnings.append(f"{shown}: the file name is not valid UTF-8; path and file_name are stored with U+FFFD (�) "
                            "in place of the bytes that are not")
        dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        rank, world, rank_source = _rank_of(dist, path.name)
        raw_base = meta.get("baseTimeNanoseconds")
        base = _int_or_none(raw_base)
        if raw_base is not None and (base is None or not 0 <= base < (1 << 62)):
            raise TraceError(str(path), f"baseTimeNanoseconds is {str(raw_base)[:40]}: not a time in ns")
        base = base or 0
        devices = meta.get("deviceProperties") if isinstance(meta.get("deviceProperties"), list) else None
        problems = cols.problems
        self._clean_staged(base, problems)
        gpu_n = con.execute("select count(*) from _stage_gpu").fetchall()[0][0]  # type: ignore[index]
        device_name = None
        if devices:
            used_rows = con.execute("select device from _stage_gpu group by device order by count(*) desc limit 1").fetchall()
            used = used_rows[0] if used_rows else None
            dev_index = used[0] if used and used[0] is not None else rank
            match = [d for d in devices if isinstance(d, dict) and d.get("id") == dev_index]
            device_name = (match[0] if match else devices[0] if isinstance(devices[0], dict) else {}).get("name") or None
            if device_name is not None and not isinstance(device_name, str):
                device_name = _dumps(device_name)
        frontend = is_frontend_name(path.name)
        warnings += _problem_warnings(shown, problems, gpu_n, frontend)
        if cols.unknown:
            unknown = ", ".join(f"{k} ({v})" for k, v in cols.unknown.most_common())
            warnings.append(f"{shown}: skipped events of unknown categories: {unknown}")
        long_n, longest = con.execute(f"select count(*), max(dur_ns) from _stage_gpu where dur_ns > {LONG_GPU_NS}").fetchall()[0]
        if long_n:
            warnings.append(f"{shown}: {long_n:,} GPU activit{'y' if long_n == 1 else 'ies'} longer than an hour (the "
                            f"longest {_span(longest)}): kept; such times usually mean a broken trace")
        skipped = dict(cols.skipped)
        for label, prefix in (("(bad time)", "bad_time:"), ("(negative duration)", "negative_dur:"), ("(duplicate)", "duplicate:")):
            n = sum(v for k, v in problems.items() if k.startswith(prefix))
            if n:
                skipped[label] = n
        trace_id = con.execute("select nextval('trace_id_seq')").fetchall()[0][0]  # type: ignore[index]
        if new_names:
            con.executemany("insert into kernel_names values (?, ?, ?)", [(i, n, short_name(n)) for n, i in new_names.items()])
        params = {"trace_id": trace_id, "rank": rank, "base": base}
        con.execute(
            f"insert into gpu_events select $trace_id, $rank, event_id, kind, name_id, device, stream, "
            f"$base + {_NS} as start_ns, {_DUR} as dur_ns_, $base + {_NS} + {_DUR} as end_ns, correlation, external_id, "
            "grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_mem_bytes, blocks_per_sm, warps_per_sm, "
            "occupancy_pct, bytes, collective_name, msg_in_nelems, msg_out_nelems, msg_dtype, group_size, pg_name, pg_ranks, "
            "null, null from _stage_gpu order by start_ns, event_id", params)
        con.execute(
            f"insert into launches select $trace_id, $rank, event_id, api, name, pid, tid, $base + {_NS} as start_ns, "
            f"{_DUR}, $base + {_NS} + {_DUR}, correlation, external_id, cbid from _stage_launch order by start_ns, event_id", params)
        con.execute(
            f"insert into annotations select $trace_id, $rank, event_id, kind, name, pid, tid, $base + {_NS} as start_ns, "
            f"{_DUR}, $base + {_NS} + {_DUR}, external_id from _stage_ann order by start_ns, event_id", params)
        con.execute(
            f"insert into cpu_ops select $trace_id, $rank, event_id, name, pid, tid, $base + {_NS} as start_ns, "
            f"{_DUR}, $base + {_NS} + {_DUR}, external_id, input_dims from _stage_ops order by start_ns, event_id", params)
        con.execute(
            f"insert into python_functions select $trace_id, $rank, event_id, name, pid, tid, $base + {_NS} as start_ns, "
            f"{_DUR}, $base + {_NS} + {_DUR} from _stage_py order by start_ns, event_id", params)
        span = con.execute(
            "select min(s), max(e) from ("
            "select min(start_ns) s, max(end_ns) e from gpu_events where trace_id = $t union all "
            "select min(start_ns), max(end_ns) from launches where trace_id = $t union all "
            "select min(start_ns), max(end_ns) from annotations where trace_id = $t union all "
            "select min(start_ns), max(end_ns) from cpu_ops where trace_id = $t)", {"t": trace_id}).fetchall()[0]
        known_keys = {"traceEvents", "distributedInfo", "deviceProperties", "baseTimeNanoseconds"}
        metadata = {k: v for k, v in meta.items() if k not in known_keys}
        vllm_version = meta.get("vllm_version")
        if isinstance(vllm_version, (list, dict)):
            vllm_version = _dumps(vllm_version)
        metadata_text = _dumps(metadata)
        if metadata_text is None:
            kept = {k: v for k, v in metadata.items() if _dumps(v) is not None}
            dropped = sorted(set(metadata) - set(kept))
            warnings.append(f"{shown}: metadata not stored (nested too deep to write as JSON): {', '.join(dropped)[:200]}")
            metadata_text = _dumps(kept) or "{}"
        con.execute(
            "insert into traces (trace_id, path, file_name, file_size, sha256, rank, world_size, base_time_ns, device_name, "
            "device_count, vllm_version, is_frontend, capture_dir, level, concurrency, event_count, gpu_event_count, "
            "first_ns, last_ns, distributed_info, device_properties, metadata, skipped, loaded_at, loader_version, "
            "rank_source) values (" + ", ".join(["?"] * 26) + ")",
            [
                trace_id, _shown(path.resolve()), _shown(Path(path.name)), read_bytes, sha, rank, world, base, device_name,
                len(devices) if devices else None, str(vllm_version) if vllm_version is not None else None, frontend,
                _shown(tf.capture_dir) if tf.capture_dir else None, tf.level, tf.concurrency, counts, gpu_n,
                span[0] if span else None, span[1] if span else None,  # type: ignore[index]
                _dumps(dist) if dist else None,
                _dumps(devices) if devices else None,
                metadata_text,
                orjson.dumps(skipped).decode(),
                _dt.datetime.now(), __version__, rank_source,
            ],
        )
        if tf.capture_dir is not None:
            _record_capture(con, tf.capture_dir)
        if self.after_file is not None:
            self.after_file(con, trace_id)
        return trace_id, warnings


def _span(ns: int) -> str:
    seconds = ns / 1e9
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    return f"{seconds / 3_600:.1f} h"


def _problem_warnings(shown: str, problems: Counter[str], gpu_n: int, frontend: bool) -> list[str]:
    """One line per kind of event the loader did not store, with counts per table."""
    out = []

    def per_table(prefix: str) -> tuple[int, str]:
        parts = {k[len(prefix):]: v for k, v in problems.items() if k.startswith(prefix) and v}
        text = ", ".join(f"{v:,} {_TABLE_WORDS.get(k, (k, k))[v != 1]}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
        return sum(parts.values()), text

    n, text = per_table("bad_time:")
    if n:
        out.append(f"{shown}: skipped {n:,} event(s) whose ts or dur is no time (NaN, Infinity, or beyond 64-bit ns, "
                   f"e.g. 1e16 µs): {text}")
    n, text = per_table("negative_dur:")
    if n:
        out.append(f"{shown}: skipped {n:,} event(s) with a negative duration: {text}")
    n, text = per_table("duplicate:")
    if n:
        out.append(f"{shown}: dropped {n:,} exact duplicate event(s) (every stored field equal to an earlier event's; "
                   f"the first is kept): {text}")
    no_ts = problems.get("gpu_no_ts", 0)
    not_x = problems.get("gpu_not_X", 0)
    bad_gpu = problems.get("bad_time:gpu", 0) + problems.get("negative_dur:gpu", 0)
    if gpu_n == 0:
        reasons = []
        if no_ts:
            reasons.append(f"its {no_ts:,} kernel/memcpy/memset event(s) have no ts")
        if not_x:
            reasons.append(f"{not_x:,} are not complete ('X') events")
        if bad_gpu:
            reasons.append(f"{bad_gpu:,} have no usable time (above)")
        if reasons:
            out.append(f"{shown}: no GPU events stored: {'; '.join(reasons)}; loaded its CPU events")
        else:
            out.append(f"{shown}: no GPU events in the file (CPU-only trace{', front end' if frontend else ''}); "
                       "loaded its CPU events")
    elif no_ts or not_x:
        what = " and ".join(x for x in (f"{no_ts:,} without ts" if no_ts else "", f"{not_x:,} not 'X'" if not_x else "") if x)
        out.append(f"{shown}: skipped GPU events {what}")
    return out


_RANK_NAME_RE = re.compile(r"(?:^|[^A-Za-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def _rank_of(dist: dict[str, Any] | None, file_name: str) -> tuple[int, int | None, str]:
    """(rank, world size, where the rank came from): distributedInfo; else vLLM's file name
    (``dp0_pp0_tp1_dcp0_ep1_rank1.<ns>.pt.trace.json.gz``, older ``…rank1…``), world size unknown; else rank 0 of 1
    (a single-process trace)."""
    world = _int_or_none(dist.get("world_size")) if dist else None
    rank = _int_or_none(dist.get("rank")) if dist else None
    if rank is not None and 0 <= rank < (1 << 31):
        return rank, world, "distributedInfo"
    found = _RANK_NAME_RE.findall(file_name)
    if found and int(found[-1]) < (1 << 31):
        return int(found[-1]), world, "file_name"
    return 0, world if world is not None else 1, "default"


def _shown(path: Path | str) -> str:
    """The path as text that any database or terminal takes: bytes of a file name that are not UTF-8 become
    U+FFFD (the file itself is opened by its real name)."""
    text = str(path)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return os.fsencode(text).decode("utf-8", "replace")


def _db_problem(exc: BaseException) -> str:
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"database error: {first}"


def _record_capture(con: duckdb.DuckDBPyConnection, capture_dir: Path) -> None:
    """The capture's manifest (as far as it is sound: ``capture.manifest.check_manifest``) and its levels' request
    statistics, inserted by column name."""
    from k25trace.capture.manifest import LEVEL_COLUMNS, check_manifest, level_rows

    m = check_manifest(capture_dir)
    if m is None or not m.usable:  # changed since discovery
        raise TraceError(str(capture_dir / "manifest.json"),
                         "the capture manifest is gone or unusable: " + (m.summary() if m else "missing"))
    key = _shown(capture_dir.resolve())
    con.execute("insert or replace into captures (capture_dir, manifest) values (?, ?)", [key, m.json_text()])
    columns = ("capture_dir",) + LEVEL_COLUMNS
    for row in level_rows(m):
        con.execute(f"insert or replace into capture_levels ({', '.join(columns)}) "
                    f"values ({', '.join('?' for _ in columns)})", [key] + [row[c] for c in LEVEL_COLUMNS])


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(8 << 20)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def load_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    options: LoadOptions | None = None,
    *,
    on_result: Callable[[FileResult], None] | None = None,
    progress_factory: Callable[[list[TraceFile]], Any] | None = None,
    after_file: Callable[[duckdb.DuckDBPyConnection, int], None] | None = None,
) -> tuple[list[FileResult], list[str]]:
    """Load every trace under ``paths`` into the event tables; returns (per-file results, notes). Never raises
    for a bad file. ``after_file(con, trace_id)`` runs inside each file's transaction (the pipeline's later
    stages: a failure there rolls the file back like a bad event would).

    Past a file-size limit (``ulimit -f``; CPython ignores SIGXFSZ) a write to the database fails and the file's
    transaction reports it; the shared-memory ring is not used under a limit smaller than its buffers."""
    options = options or LoadOptions()
    files, notes, errors = discover(paths, include_frontend=options.include_frontend)
    notes = [_shown(n) for n in notes]
    results = [FileResult(_shown(e.split(":", 1)[0]), "failed", _shown(e)) for e in errors]
    for r in results:
        if on_result:
            on_result(r)
    progress_ctx = progress_factory(files) if progress_factory else None
    advance: Callable[[int], None] = (lambda n: None)
    start_file: Callable[[TraceFile], None] = (lambda tf: None)
    if progress_ctx is not None:
        advance, start_file = progress_ctx.advance, progress_ctx.start_file
    loader = Loader(con, options, progress=lambda n: advance(n), after_file=after_file)
    try:
        if any(file_size(tf.path) >= options.parallel_min_bytes for tf in files):
            loader._workers()  # start the processes now: their imports overlap the hashing below
        loader.prefetch([tf for tf in files if not loader.already_loaded(tf.path)])
        for tf in files:
            start_file(tf)
            result = loader.load(tf)
            results.append(result)
            if on_result:
                on_result(result)
    finally:
        loader.close()
    if progress_ctx is not None:
        progress_ctx.close()
    return results, notes


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
