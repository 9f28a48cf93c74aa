"""Ingest: torch.profiler (Kineto) Chrome traces -> the DuckDB tables of the public schema.

The only module that reads trace JSON. Invariants:

* Streaming. A trace is decompressed block by block (isal) and its ``traceEvents`` array is cut at event
  boundaries into chunks of a few MB; each chunk is decoded by msgspec into slim typed structs (unknown keys
  are skipped in C), turned into columns and appended to DuckDB staging tables. Memory is bounded by the chunk
  size, never by the file size, and no Python object outlives its chunk.
* Exact times. ``start_ns = baseTimeNanoseconds + ts * 1000`` in integer arithmetic: integer ``ts`` (old
  traces carry absolute µs) multiply exactly; float ``ts`` (µs with at most ns resolution, relative to the
  base) round exactly while ``ts < 2**53 / 1000`` µs (104 days); ``dur_ns`` likewise.
* All or nothing per file. A file is staged, then moved into the final tables, classified and split into
  steps inside one transaction; any problem rolls the whole file back and is reported as one line naming the
  file. Other files of the same call are unaffected. Trace files are opened read-only.
* Idempotent. A file whose content hash (sha256) is already in ``traces`` is skipped.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
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
_BOUNDARY_RE = re.compile(rb"\}\s*,\s*\{")


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
    analyze: bool = True  # classify + steps inside the file's transaction
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
            add(TraceFile(arg, *_capture_info_for(arg)[:3]))
            continue
        found = sorted(p for p in arg.rglob("*") if p.is_file() and _is_trace_name(p.name))
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
            info = _capture_info_for(p)
            if info[3] is False:
                notes.append(f"{p}: skipped: the capture manifest marks it invalid ({info[4]})")
                continue
            add(TraceFile(p, *info[:3]))
    return files, notes, errors


def _capture_info_for(path: Path) -> tuple[Path | None, str | None, int | None, bool | None, str | None]:
    """If ``path`` lies in a ``k25trace capture`` directory: (capture dir, level, concurrency, valid, problem)."""
    for parent in list(path.resolve().parents)[:3]:
        manifest = parent / "manifest.json"
        if manifest.is_file():
            try:
                data = orjson.loads(manifest.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                return None, None, None, None, None
            if not isinstance(data, dict) or "k25trace_capture" not in data:
                continue
            rel = path.resolve().relative_to(parent).as_posix()
            for level in data.get("levels") or []:
                level_dir = str(level.get("dir") or level.get("name") or "")
                if level_dir and (rel.startswith(level_dir + "/")):
                    entry = next((f for f in level.get("files") or [] if f.get("path") == rel), {})
                    return parent, level.get("name"), level.get("concurrency"), entry.get("valid"), entry.get("problem")
            return parent, None, None, None, None
    return None, None, None, None, None


# ---------------------------------------------------------------------------------------------------------------
# Streaming reader


def _open_stream(path: Path):
    with open(path, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return _gzip.open(path, "rb")
    if path.name.endswith(".gz"):
        raise TraceError(str(path), "named .gz but is not gzip data")
    return open(path, "rb")


class _Reader:
    """Decompresses a trace, translating gzip failures into one-line TraceErrors naming the file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fh = _open_stream(path)
        self.raw = getattr(self.fh, "fileobj", None) or getattr(self.fh, "_fp", None)

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
        try:
            return self.raw.tell() if self.raw is not None else 0
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        self.fh.close()


def _read_blocks(path: Path) -> Iterator[tuple[bytes, int]]:
    """Yield (decompressed block, compressed bytes read so far)."""
    reader = _Reader(path)
    try:
        while block := reader.read(BLOCK_SIZE):
            yield block, reader.position()
    finally:
        reader.close()


class _Splitter:
    """Cuts the decompressed text into (metadata text, chunks of complete event objects).

    A chunk is returned as one bytearray ``[ev, ev, …]`` ready for the decoder: the block is copied once into it,
    the boundary comma after its last complete event becomes the closing bracket, and the rest is carried over.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.prefix = bytearray()
        self.in_array = False
        self.buf = bytearray(b"[")

    def feed(self, block: bytes) -> bytearray | None:
        """Add a block; return ``[`` + complete events + ``]`` as a bytearray, or None."""
        if not self.in_array:
            self.prefix += block
            m = _TRACE_EVENTS_RE.search(self.prefix)
            if m is None:
                if len(self.prefix) > MAX_PREFIX:
                    raise TraceError(str(self.path), "no traceEvents array in the first 256 MB: not a Kineto trace")
                return None
            self.buf += self.prefix[m.end():]
            del self.prefix[m.end() - 1:]  # keep up to the key and colon
            self.in_array = True
        else:
            self.buf += block
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
        self.buf = bytearray(b"[") + buf[last.end() - 1:]
        del buf[last.start() + 1:]
        buf += b"]"
        return buf

    @property
    def rest(self) -> bytes:
        return bytes(self.buf[1:])

    def finish(self) -> tuple[list[Any], bytes]:
        """At end of input: the remaining events (decoded) and the metadata text."""
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
        try:
            text = self.rest.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TraceError(str(self.path), f"invalid UTF-8 near the end of traceEvents: {exc.reason}") from exc
        decoder = json.JSONDecoder()
        events: list[Any] = []
        i = 0
        n = len(text)
        while True:
            while i < n and text[i] in " \t\r\n,":
                i += 1
            if i >= n:
                raise TraceError(str(self.path), "truncated JSON: the file ends inside traceEvents")
            if text[i] == "]":
                i += 1
                break
            try:
                obj, i = decoder.raw_decode(text, i)
            except json.JSONDecodeError as exc:
                if exc.pos >= len(text.rstrip()):
                    raise TraceError(str(self.path), "truncated JSON: the file ends inside traceEvents "
                                     "(the writer may still be running, or was killed)") from exc
                raise TraceError(str(self.path), f"invalid JSON in traceEvents: {exc.msg}") from exc
            events.append(obj)
        meta_text = bytes(self.prefix) + b"null" + text[i:].encode("utf-8")
        return events, meta_text


def _decode_chunk(path: Path, data: bytes | bytearray, offset_hint: int, keep_python: bool = False) -> list[Any]:
    """Decode ``[event, …]`` (as the splitter returns it)."""
    try:
        return (_FAST_DECODER_PY if keep_python else _FAST_DECODER).decode(data)
    except msgspec.ValidationError:
        pass  # a category outside the tagged union, or an event without one: generic structs
    except msgspec.DecodeError as exc:
        raise TraceError(str(path), f"invalid JSON in traceEvents (near event {offset_hint}): {exc}") from exc
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        # a field of an unexpected type somewhere in this chunk: take the slow, forgiving path
        try:
            raw = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceError(str(path), f"invalid JSON in traceEvents (near event {offset_hint}): {exc}") from exc
        return [_loose_event(e) for e in raw]
    except msgspec.DecodeError as exc:
        raise TraceError(str(path), f"invalid JSON in traceEvents (near event {offset_hint}): {exc}") from exc


def _num(v: Any, typ: type) -> Any:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return typ(v)
    if isinstance(v, str):
        try:
            return typ(float(v)) if typ is int else typ(v)
        except ValueError:
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


def _ns(values: list[int | float | None]) -> pa.Array:
    """µs -> integer ns, exactly, vectorised.

    A float µs value with ns resolution is split into its integer µs (exact in float64) and its fraction (exact by
    Sterbenz); the fraction's representation error stays below 0.25 ns while ts < 2**43 µs (101 days), so
    rounding ``fraction * 1000`` recovers the written ns exactly. Integer µs (old absolute-time traces, up to
    2**53) convert to float64 exactly and have no fraction.
    """
    try:
        arr = np.fromiter(values, dtype=np.float64, count=len(values))
        mask = None
    except TypeError:  # None among the values
        mask = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
        arr = np.fromiter((0.0 if v is None else v for v in values), dtype=np.float64, count=len(values))
    whole = np.floor(arr)
    ns = whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000.0).astype(np.int64)
    return pa.array(ns, pa.int64(), mask=mask)


def _loose_event(raw: Any) -> Event:
    """Build an Event from a dict of arbitrary types (fields of the wrong type become NULL)."""
    if not isinstance(raw, dict):
        return Event()
    a = raw.get("args")
    args = None
    if isinstance(a, dict):
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
            input_dims=msgspec.Raw(orjson.dumps(a["Input Dims"])) if "Input Dims" in a else msgspec.Raw(b""),
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
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v)
    if isinstance(v, str):
        try:
            return int(float(v))
        except ValueError:
            return None
    return None


def _str_or_none(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v
    return orjson.dumps(v).decode()


def _pid(v: int | str | None) -> int | None:
    if isinstance(v, int):
        return v
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


class _Columns:
    """Accumulates one chunk's events as columns per table."""

    def __init__(self, keep_python: bool) -> None:
        self.keep_python = keep_python
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()

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
            out["launch"] = pa.table({
                "event_id": pa.array(launch_ids, pa.int64()),
                "api": pa.array(["cuda_driver" if e.cat in ("cuda_driver", "Driver") else "cuda_runtime" for e in launch], pa.string()),
                "name": pa.array([e.name or "" for e in launch], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in launch], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in launch], pa.int64()),
                "ts_ns": _ns([e.ts for e in launch]),
                "dur_ns": _ns([e.dur for e in launch]),
                "correlation": pa.array([a.correlation for a in args], pa.int64()),
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
                "cbid": pa.array([a.cbid for a in args], pa.int32()),
            })
        if ann:
            args = [e.args or _EMPTY_ARGS for e in ann]
            out["ann"] = pa.table({
                "event_id": pa.array(ann_ids, pa.int64()),
                "kind": pa.array([e.cat for e in ann], pa.string()),
                "name": pa.array([e.name or "" for e in ann], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in ann], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in ann], pa.int64()),
                "ts_ns": _ns([e.ts for e in ann]),
                "dur_ns": _ns([e.dur for e in ann]),
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
            })
        if ops:
            args = [e.args or _EMPTY_ARGS for e in ops]
            out["ops"] = pa.table({
                "event_id": pa.array(op_ids, pa.int64()),
                "name": pa.array([e.name or "" for e in ops], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in ops], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in ops], pa.int64()),
                "ts_ns": _ns([e.ts for e in ops]),
                "dur_ns": _ns([e.dur for e in ops]),
                "external_id": pa.array([a.external_id for a in args], pa.int64()),
                "input_dims": pa.array([bytes(a.input_dims).decode("utf-8", "replace") if len(a.input_dims) else None for a in args], pa.string()),
            })
        if py:
            out["py"] = pa.table({
                "event_id": pa.array(py_ids, pa.int64()),
                "name": pa.array([e.name or "" for e in py], pa.string()),
                "pid": pa.array([_pid(e.pid) for e in py], pa.int64()),
                "tid": pa.array([_pid(e.tid) for e in py], pa.int64()),
                "ts_ns": _ns([e.ts for e in py]),
                "dur_ns": _ns([e.dur for e in py]),
            })
        return out

    @staticmethod
    def _gpu_table(gpu: list[Event], ids: list[int]) -> pa.Table:
        args = [e.args or _EMPTY_ARGS for e in gpu]
        grids = [a.grid for a in args]
        blocks = [a.block for a in args]
        has_coll = any(a.collective_name is not None or a.in_nelems is not None for a in args)
        n = len(gpu)
        nulls_i = pa.nulls(n, pa.int64())
        nulls_s = pa.nulls(n, pa.string())
        return pa.table({
            "event_id": pa.array(ids, pa.int64()),
            "kind": pa.array([GPU_CATS[e.cat] for e in gpu], pa.string()),  # type: ignore[index]
            "name": pa.array([e.name or "" for e in gpu], pa.string()),
            "device": pa.array([a.device if a.device is not None else _pid(e.pid) for a, e in zip(args, gpu)], pa.int32()),
            "stream": pa.array([a.stream if a.stream is not None else _pid(e.tid) for a, e in zip(args, gpu)], pa.int64()),
            "ts_ns": _ns([e.ts for e in gpu]),
            "dur_ns": _ns([e.dur if e.dur is not None else 0 for e in gpu]),
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


def _decode_and_build(path: str, chunk: Any, keep_python: bool) -> tuple[dict[str, pa.Table], int, Counter[str], Counter[str]]:
    """One chunk of events -> staging tables (event ids local to the chunk). Nothing returned refers to ``chunk``."""
    events = _decode_chunk(Path(path), chunk, 0, keep_python)
    cols = _Columns(keep_python)
    tables = cols.build(events, 0)
    count = len(events)
    del events  # raw JSON fields (Input Dims) point into the chunk's buffer until here
    return tables, count, cols.skipped, cols.unknown


def _chunks(path: Path, keep_python: bool, progress: Callable[[int], None]) -> Iterator[tuple]:
    """Stream a file: ("chunk", tables, n, skipped, unknown) per chunk, then ("end", tail events, metadata)."""
    splitter = _Splitter(path)
    last_pos = 0
    for block, pos in _read_blocks(path):
        if pos > last_pos:
            progress(pos - last_pos)
            last_pos = pos
        chunk = splitter.feed(block)
        if not chunk:
            continue
        yield ("chunk", *_decode_and_build(str(path), chunk, keep_python))
    tail_events, meta_text = splitter.finish()
    size = file_size(path)
    if size > last_pos:
        progress(size - last_pos)
    yield ("end", tail_events, meta_text)


def _worker_main(index: int, tasks: Any, results: Any) -> None:
    """A decode process. Tasks: ``(task_id, path, keep_python)`` streams a whole file (decompress, cut, decode);
    ``("chunk", task_id, path, shm_name, size, keep_python)`` decodes one chunk the parent put in shared memory.
    Every item it puts is tagged with the task id; a failure is reported as ("error", path, problem) and the
    worker goes on."""
    attached: dict[str, Any] = {}
    while True:
        task = tasks.get()
        if task is None:
            for shm in attached.values():
                shm.close()
            return
        if task[0] == "chunk":  # one chunk the parent decompressed into a shared-memory buffer
            _, task_id, chunk_path, shm_name, size, keep_python = task
            try:
                if shm_name not in attached:
                    from multiprocessing import shared_memory

                    attached[shm_name] = shared_memory.SharedMemory(name=shm_name)
                view = attached[shm_name].buf[:size]
                try:
                    item = ("chunk", *_decode_and_build(chunk_path, view, keep_python))
                finally:
                    view.release()
                results.put((task_id, item))
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


class _Workers:
    """Decode processes. Several big files: each worker streams whole files (round robin), ahead of the parent,
    which takes them in order and writes them to DuckDB (the single writer). One big file: the parent
    decompresses it into shared memory and the workers decode the chunks in turn (:meth:`feed`)."""

    def __init__(self, count: int) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.count = count
        self.tasks = [ctx.Queue() for _ in range(count)]
        self.results = [ctx.Queue() for _ in range(count)]
        self.procs = [ctx.Process(target=_worker_main, args=(i, self.tasks[i], self.results[i]), daemon=True)
                      for i in range(count)]
        for proc in self.procs:
            proc.start()
        self.next_task = 0
        self.planned: dict[str, tuple[int, int]] = {}  # path -> (task id, worker) of a whole-file prefetch
        self.ring: list[Any] = []  # shared-memory chunk buffers for feed()

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

    def feed(self, path: Path, keep_python: bool, progress: Callable[[int], None]) -> Iterator[tuple]:
        """One big file: this process decompresses it once, straight into the shared-memory buffers of a small
        ring (``[`` + the carried-over partial event + a block; the comma after the last complete event becomes
        ``]``), and the workers decode the buffers in turn; results come back in file order."""
        from multiprocessing import shared_memory

        task_id = self._task_id()
        if not self.ring:
            self.ring = [shared_memory.SharedMemory(create=True, size=RING_BUFFER_BYTES) for _ in range(2 * self.count + 2)]
        in_flight: deque[int] = deque()  # worker of each buffer sent, in file order
        sent = 0
        reader = _Reader(path)
        splitter = _Splitter(path)
        last_pos = 0
        try:
            while not splitter.in_array:  # the metadata before traceEvents, through the splitter
                block = bytearray(BLOCK_SIZE)
                n = reader.readinto(memoryview(block))
                if not n:
                    break
                del block[n:]
                first = splitter.feed(bytes(block))
                if first:
                    yield ("chunk", *_decode_and_build(str(path), first, keep_python))
            carry = splitter.rest if splitter.in_array else b""
            while splitter.in_array:
                if len(in_flight) == len(self.ring):
                    yield self._take(in_flight.popleft(), task_id)
                shm = self.ring[sent % len(self.ring)]
                buf = shm.buf
                if len(carry) + 2 + BLOCK_SIZE > len(buf):
                    raise TraceError(str(path), "an event larger than 16 MB: not a Kineto trace")
                buf[0] = 0x5B  # [
                buf[1 : 1 + len(carry)] = carry
                start = 1 + len(carry)
                n = reader.readinto(buf[start : start + BLOCK_SIZE])
                pos = reader.position()
                if pos > last_pos:
                    progress(pos - last_pos)
                    last_pos = pos
                total = start + n
                if not n:
                    splitter.buf = bytearray(b"[") + carry
                    break
                last = None
                search_from = max(1, total - (1 << 20))
                while last is None:
                    for last in _BOUNDARY_RE.finditer(buf, search_from, total):
                        pass
                    if last is None and search_from == 1:
                        break
                    search_from = max(1, search_from - (8 << 20))
                if last is None:  # no complete event yet: carry everything over
                    carry = bytes(buf[1:total])
                    continue
                carry = bytes(buf[last.end() - 1 : total])
                buf[last.start() + 1] = 0x5D  # ]
                self.tasks[sent % self.count].put(("chunk", task_id, str(path), shm.name, last.start() + 2, keep_python))
                in_flight.append(sent % self.count)
                sent += 1
            tail_events, meta_text = splitter.finish()
            while in_flight:
                yield self._take(in_flight.popleft(), task_id)
            size = file_size(path)
            if size > last_pos:
                progress(size - last_pos)
            yield ("end", tail_events, meta_text)
        except TraceError:
            raise  # workers carry on; leftovers of this task are dropped by task id
        except BaseException:
            self.close()
            raise
        finally:
            reader.close()

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
        for shm in self.ring:
            shm.close()
            shm.unlink()
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


class Loader:
    """Loads trace files into one database connection, one transaction per file."""

    def __init__(self, con: duckdb.DuckDBPyConnection, options: LoadOptions | None = None,
                 progress: Callable[[int], None] | None = None) -> None:
        self.con = con
        self.options = options or LoadOptions()
        self._executor: _Workers | None = None
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._pending: dict[str, list[pa.Table]] = {}
        self._pending_rows = 0
        self.progress = progress or (lambda n: None)
        self.names: dict[str, int] = dict(con.execute("select name, name_id from kernel_names").fetchall())
        self.next_name_id = con.execute("select coalesce(max(name_id), 0) from kernel_names").fetchall()[0][0] + 1
        if self.options.analyze:
            from k25trace.classify import install_rules, load_rules

            if not con.execute("select count(*) from kernel_rules").fetchall()[0][0]:  # type: ignore[index]
                install_rules(con, load_rules())

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
        except OSError:
            return False

    def load(self, tf: TraceFile) -> FileResult:
        path = tf.path
        started = _dt.datetime.now()
        result = FileResult(str(path), "failed")
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            result.message = f"{path}: cannot read: {exc.strerror}"
            return result
        sha = self._hash(path)
        row = self._known(sha)
        if row:
            result.status = "skipped"
            result.trace_id = row[0]
            result.message = f"{path}: already loaded as trace {row[0]} ({row[1]})"
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
        con.execute("begin transaction")
        try:
            for ddl in _STAGE_DDL.values():
                con.execute(ddl)
            meta, counts, cols = self._stream(path, name_id)
            trace_id, warnings = self._commit_file(tf, path, sha, meta, counts, cols, new_names)
            con.execute("commit")
        except BaseException as exc:
            self._pending, self._pending_rows = {}, 0
            con.execute("rollback")
            if isinstance(exc, TraceError):
                result.message = str(exc)
                return result
            if isinstance(exc, K25Error):
                result.message = f"{path}: {exc}"
                return result
            if isinstance(exc, (duckdb.Error, MemoryError, UnicodeError, ValueError, OverflowError)):
                result.message = f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                return result
            raise
        finally:
            for table in ("_stage_gpu", "_stage_launch", "_stage_ann", "_stage_ops", "_stage_py"):
                try:
                    con.execute(f"drop table if exists {table}")
                except duckdb.Error:
                    pass
        con.execute("select 1").fetchall()  # leave no unfinished result on the connection
        self.names.update(new_names)
        self.next_name_id = next_id[0]
        info = con.execute("select rank, event_count, gpu_event_count from traces where trace_id = ?", [trace_id]).fetchall()[0]
        result.status = "loaded"
        result.trace_id = trace_id
        result.rank, result.events, result.gpu_events = info[0], info[1], info[2]  # type: ignore[index]
        result.warnings = warnings
        result.seconds = (_dt.datetime.now() - started).total_seconds()
        return result

    def _stream(self, path: Path, name_id: Callable[[str], int]) -> tuple[dict[str, Any], int, _Columns]:
        """Read, decode and stage one file's events; returns (top-level metadata, event count, counters)."""
        cols = _Columns(self.options.keep_python)
        workers = self._workers() if file_size(path) >= self.options.parallel_min_bytes else None
        if workers is None:
            chunks = _chunks(path, self.options.keep_python, self.progress)
        elif str(path) in workers.planned:
            chunks = workers.run(path, self.options.keep_python)
        else:
            chunks = workers.feed(path, self.options.keep_python, self.progress)
        total = 0
        meta_text = b""
        tail_events: list[Any] = []
        for item in chunks:
            if item[0] == "chunk":
                _, tables, n, skipped, unknown = item
                cols.skipped.update(skipped)
                cols.unknown.update(unknown)
                self._append(tables, total, name_id)
                total += n
            elif item[0] == "progress":
                self.progress(item[1])
            else:  # "end"
                _, tail_events, meta_text = item
        if tail_events:
            events = [_loose_event(e) for e in tail_events]
            self._append(cols.build(events, 0), total, name_id)
            total += len(events)
        self._flush()
        try:
            meta = orjson.loads(meta_text)
        except orjson.JSONDecodeError as exc:
            raise TraceError(str(path), f"invalid JSON outside traceEvents: {exc}") from exc
        if not isinstance(meta, dict):
            raise TraceError(str(path), "top-level JSON is not an object")
        return meta, total, cols

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

    def _commit_file(self, tf: TraceFile, path: Path, sha: str, meta: dict[str, Any], counts: int, cols: _Columns,
                     new_names: dict[str, int]) -> tuple[int, list[str]]:
        con = self.con
        warnings: list[str] = []
        dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else None
        rank = _int_or_none(dist.get("rank")) if dist else None
        world = _int_or_none(dist.get("world_size")) if dist else None
        base = _int_or_none(meta.get("baseTimeNanoseconds")) or 0
        devices = meta.get("deviceProperties") if isinstance(meta.get("deviceProperties"), list) else None
        gpu_n = con.execute("select count(*) from _stage_gpu").fetchall()[0][0]  # type: ignore[index]
        device_name = None
        if devices:
            used_rows = con.execute("select device from _stage_gpu group by device order by count(*) desc limit 1").fetchall()
            used = used_rows[0] if used_rows else None
            dev_index = used[0] if used and used[0] is not None else (rank if rank is not None else 0)
            match = [d for d in devices if isinstance(d, dict) and d.get("id") == dev_index]
            device_name = (match[0] if match else devices[0] if isinstance(devices[0], dict) else {}).get("name") or None
        frontend = is_frontend_name(path.name)
        if gpu_n == 0:
            warnings.append(f"{path}: no GPU events (CPU-only trace{', front end' if frontend else ''}); loaded its CPU events")
        if cols.unknown:
            unknown = ", ".join(f"{k} ({v})" for k, v in cols.unknown.most_common())
            warnings.append(f"{path}: skipped events of unknown categories: {unknown}")
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
            vllm_version = orjson.dumps(vllm_version).decode()
        con.execute(
            "insert into traces values (" + ", ".join(["?"] * 25) + ")",
            [
                trace_id, str(path.resolve()), path.name, path.stat().st_size, sha, rank, world, base, device_name,
                len(devices) if devices else None, str(vllm_version) if vllm_version is not None else None, frontend,
                str(tf.capture_dir) if tf.capture_dir else None, tf.level, tf.concurrency, counts, gpu_n,
                span[0] if span else None, span[1] if span else None,  # type: ignore[index]
                orjson.dumps(dist).decode() if dist else None,
                orjson.dumps(devices).decode() if devices else None,
                orjson.dumps(metadata).decode(),
                orjson.dumps(dict(cols.skipped)).decode(),
                _dt.datetime.now(), __version__,
            ],
        )
        if tf.capture_dir is not None:
            _record_capture(con, tf.capture_dir)
        if self.options.analyze:
            from k25trace.steps import analyze_trace

            analyze_trace(con, trace_id)
        return trace_id, warnings


def _record_capture(con: duckdb.DuckDBPyConnection, capture_dir: Path) -> None:
    manifest_path = capture_dir / "manifest.json"
    try:
        manifest = orjson.loads(manifest_path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise TraceError(str(manifest_path), f"unreadable capture manifest: {exc}") from exc
    key = str(capture_dir.resolve())
    con.execute("insert or replace into captures values (?, ?)", [key, orjson.dumps(manifest).decode()])
    for level in manifest.get("levels") or []:
        stats = level.get("stats") or {}

        def pct(metric: str, p: str) -> float | None:
            value = (stats.get(metric) or {}).get(p)
            return float(value) if isinstance(value, (int, float)) else None

        con.execute(
            "insert or replace into capture_levels values (" + ", ".join(["?"] * 17) + ")",
            [key, level.get("name"), level.get("concurrency"), stats.get("requests"), stats.get("errors"),
             stats.get("output_tokens"), stats.get("duration_s"), stats.get("output_tok_s"),
             pct("ttft_ms", "p50"), pct("ttft_ms", "p90"), pct("ttft_ms", "p99"),
             pct("tpot_ms", "p50"), pct("tpot_ms", "p90"), pct("tpot_ms", "p99"),
             pct("itl_ms", "p50"), pct("itl_ms", "p90"), pct("itl_ms", "p99")],
        )


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
) -> tuple[list[FileResult], list[str]]:
    """Load every trace under ``paths``; returns (per-file results, notes). Never raises for a bad file."""
    options = options or LoadOptions()
    files, notes, errors = discover(paths, include_frontend=options.include_frontend)
    results = [FileResult(e.split(":", 1)[0], "failed", e) for e in errors]
    for r in results:
        if on_result:
            on_result(r)
    progress_ctx = progress_factory(files) if progress_factory else None
    advance: Callable[[int], None] = (lambda n: None)
    start_file: Callable[[TraceFile], None] = (lambda tf: None)
    if progress_ctx is not None:
        advance, start_file = progress_ctx.advance, progress_ctx.start_file
    loader = Loader(con, options, progress=lambda n: advance(n))
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
    if options.analyze and any(r.status == "loaded" for r in results):
        from k25trace import crossrank

        crossrank.build(con)
    return results, notes


def file_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
