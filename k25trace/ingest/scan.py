"""The compiled chunk scanner: one chunk of a Kineto trace straight into the staging tables, no Python object per
event (issue 17). ``_scan.c`` is compiled when k25trace is installed (``hatch_build.py``); it is a fast path only:
a chunk it does not read exactly as msgspec would (see the C file's header: escapes, non-ASCII text, exponents,
string pids, an unknown category, ...) comes back as None and is decoded by msgspec, as it is when the library
is missing (a machine where it could not be compiled) or ``K25TRACE_NO_SCANNER`` is set. The tables it returns
equal the msgspec path's, column for column (tests/test_scan.py checks every chunk of the real traces)."""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from k25trace.ingest.columns import (
    _API_OF_CAT,
    _COLLECTIVE_FIELDS,
    _ROUTES,
    TABLE_ORDER,
    _Columns,
    _ns,
    _table_of_type,
)
from k25trace.ingest.events import _FAST_DECODER, GPU_CATS

LIBRARY = Path(__file__).with_name("_scan.so")
DISABLE_ENV = "K25TRACE_NO_SCANNER"  # set (to anything but "" or "0"): every chunk goes to msgspec
INTERFACE = 2  # k25_scan_version() of the library this module calls (a stale build is not used: pip install again)

# the C side's layout (_scan.c)
_KIND = {None: 0, "gpu": 1, "launch": 2, "ops": 3, "ann": 4}
_I_EVENT, _I_PID, _I_TID, _I_EXT, _I_CORR, _I_CBID, _I_NAME_END, _I_DIMS_END, _NI = range(9)
_N_DUR, _N_PID, _N_TID, _N_EXT, _N_CORR, _N_CBID, _N_NAME, _NN = range(8)
_NAME_BUFFER = {"launch": 0, "ops": 1, "ann": 2}
# GPU rows: int64 columns, float64 columns, null flags
_G_EVENT, _G_DEVICE, _G_STREAM, _G_CORR, _G_EXT, _G_GRID = range(6)
_G_BLOCK = _G_GRID + 3
_G_REG, _G_SHM, _G_BYTES, _G_NAME_END, _NGI = range(_G_BLOCK + 3, _G_BLOCK + 8)
_GF_TS, _GF_DUR, _GF_BPSM, _GF_WPSM, _GF_OCC, _NGF = range(6)
(
    _GN_DEVICE,
    _GN_STREAM,
    _GN_CORR,
    _GN_EXT,
    _GN_GRID,
    _GN_BLOCK,
    _GN_REG,
    _GN_SHM,
    _GN_BPSM,
    _GN_WPSM,
    _GN_OCC,
    _GN_BYTES,
    _NGN,
) = range(13)

_P, _I64 = ctypes.c_void_p, ctypes.c_int64
_ARGTYPES: list[Any] = [
    _P,
    _I64,
    _P,
    _P,
    _I64,
    _P,
    _P,
    _I64,
    _P,
    _P,
    _P,
    _P,
    _P,
    _I64,
    _P,
    _P,
    _P,
    _P,
    _P,
    _P,
    _P,
    _P,
    _P,
]


class _Categories:
    """The tagged union's categories as the scanner sees them: their names back to back, the end of each, and
    each one's table kind; the launch ``api`` and annotation ``kind`` column values per category code."""

    def __init__(self) -> None:
        routes = _ROUTES[False]
        table_of = _table_of_type(False)
        cats: list[str] = [t.cat for t in routes.types]  # type: ignore[attr-defined]  # a tagged struct's tag
        self.text = "".join(cats).encode()
        self.ends = np.cumsum([len(c.encode()) for c in cats], dtype=np.int64)
        self.kind = np.array([_KIND[table_of[t]] for t in routes.types], dtype=np.int8)
        self.count = len(cats)
        self.names = cats

    # Arrow arrays made on first use, not at import: pyarrow imports pandas (when installed) on its first
    # pa.array() of a list, and a decode worker imports this module before it blocks that (workers._NoPandas):
    # built at import, they cost each worker ~0.5 s of CPU (measured).
    @functools.cached_property
    def api(self) -> pa.Array:
        return pa.array([_API_OF_CAT.get(c) for c in self.names], pa.string())

    @functools.cached_property
    def cat(self) -> pa.Array:
        return pa.array(self.names, pa.string())

    @functools.cached_property
    def gpu_kind(self) -> pa.Array:
        return pa.array([GPU_CATS.get(c) for c in self.names], pa.string())


_CATS = _Categories()
_library: ctypes.CDLL | None | bool = False  # False: not tried yet in this process


def library() -> ctypes.CDLL | None:
    """The compiled scanner, loaded once per process; None when it is not installed, cannot be loaded, was built
    from another version of ``_scan.c`` (an editable install not rebuilt), or ``K25TRACE_NO_SCANNER`` is set."""
    global _library
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return None
    if _library is False:
        try:
            lib = ctypes.CDLL(str(LIBRARY))
            lib.k25_scan_version.restype = _I64
            lib.k25_scan.restype = _I64
            lib.k25_scan.argtypes = _ARGTYPES
            _library = lib if lib.k25_scan_version() == INTERFACE else None
        except (OSError, AttributeError):  # missing, not loadable, or too old to say its version
            _library = None
    return _library if isinstance(_library, ctypes.CDLL) else None


def scanner_note() -> list[str]:
    """What a load of big files says when the scanner is not there (nothing when it is, or when the user turned it
    off with ``K25TRACE_NO_SCANNER``)."""
    if library() is not None or os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return []
    return [
        f"the compiled chunk scanner is not installed ({LIBRARY.name} missing, not loadable or from another "
        "version; reinstalling k25trace builds it, see README): every chunk is decoded by msgspec — the same "
        "tables, 1.1-1.3x slower on real traces (measured)"
    ]


class Scanned:
    """The scanner's output buffers for chunks of up to ``n`` bytes (``read`` fills them). A process keeps one
    set and uses it again for every chunk (:func:`_buffers`): fresh buffers per chunk would leave a little more of
    the heap touched each time (measured: +175 MB of peak RSS over a real 80 MB rank's three processes)."""

    def __init__(self, n: int) -> None:
        self.capacity = n
        self.cap_events = n // 8 + 16  # an event with a category is at least {"cat":"x"} and a separator
        self.cap_rows = n // 16 + 16  # a kept event is at least {"cat":"cpu_op","ts":0}
        # np.empty: pages are mapped when written, so what a chunk does not use costs no memory
        self.codes = np.empty(self.cap_events, dtype=np.int8)
        self.gpu = np.empty(n + 16, dtype=np.uint8)
        self.ints = np.empty((self.cap_rows, _NI), dtype=np.int64)
        self.floats = np.empty((self.cap_rows, 2), dtype=np.float64)
        self.nulls = np.empty((self.cap_rows, _NN), dtype=np.uint8)
        self.kinds = np.empty(self.cap_rows, dtype=np.int8)
        self.names = [np.empty(n + 1, dtype=np.uint8) for _ in range(3)]
        self.dims = np.empty(n + 1, dtype=np.uint8)
        self.gints = np.empty((self.cap_rows, _NGI), dtype=np.int64)
        self.gfloats = np.empty((self.cap_rows, _NGF), dtype=np.float64)
        self.gnulls = np.empty((self.cap_rows, _NGN), dtype=np.uint8)
        self.gnames = np.empty(n + 1, dtype=np.uint8)
        self.out = np.zeros(12, dtype=np.int64)

    def read(self, lib: ctypes.CDLL, data: np.ndarray) -> int:
        """Run the scanner on ``data`` (uint8); the number of events, or -1 (``out[8]``: the C line that refused)."""
        a = _address
        return int(
            lib.k25_scan(
                a(data),
                len(data),
                _CATS.text,
                a(_CATS.ends),
                _CATS.count,
                a(_CATS.kind),
                a(self.codes),
                self.cap_events,
                a(self.gpu),
                a(self.ints),
                a(self.floats),
                a(self.nulls),
                a(self.kinds),
                self.cap_rows,
                a(self.names[0]),
                a(self.names[1]),
                a(self.names[2]),
                a(self.dims),
                a(self.gints),
                a(self.gfloats),
                a(self.gnulls),
                a(self.gnames),
                a(self.out),
            )
        )


def _address(array: np.ndarray) -> int:
    return int(array.ctypes.data)


_KEPT_BUFFERS = 32 << 20  # a larger chunk (an event larger than the ring buffers) gets buffers of its own
_local = threading.local()


def _buffers(n: int) -> Scanned:
    """This thread's output buffers, for a chunk of ``n`` bytes."""
    if n > _KEPT_BUFFERS:
        return Scanned(n)
    kept: Scanned | None = getattr(_local, "buffers", None)
    if kept is None or kept.capacity < n:
        kept = _local.buffers = Scanned(max(n, 1 << 20))
    return kept


def scan_chunk(chunk: Any, columns: _Columns) -> tuple[dict[str, pa.Table], int] | None:
    """The staging tables of one chunk (event ids local to the chunk) and its event count, read by the compiled
    scanner, with the dropped categories and problems counted in ``columns`` (as :meth:`_Columns.build` does);
    None (and nothing counted) when the scanner is not available or does not read this chunk exactly."""
    lib = library()
    if lib is None or columns.keep_python:
        return None
    data = np.frombuffer(chunk, dtype=np.uint8)
    scanned = _buffers(len(data))
    try:
        events = scanned.read(lib, data)
    finally:  # everything read is in the scanner's buffers now: no export of the caller's buffer outlives this
        del data  # line, even on an error (the caller may be about to release its view of a shared-memory ring)
    if events < 0:
        return None
    out = scanned.out.tolist()
    n_gpu, n_rows, gpu_bytes = out[1], out[2], out[3]
    codes = scanned.codes[:events].copy()
    gpu_events: list[Any] = []
    if n_gpu:
        try:  # the GPU activities the scanner copied out (collective metadata, odd values): msgspec, as in the chunk
            gpu_events = _FAST_DECODER.decode(scanned.gpu[:gpu_bytes].data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return None
        if len(gpu_events) != n_gpu:
            return None
    # nothing below can refuse the chunk: counting starts here
    tables: dict[str, pa.Table] = {}
    for number in columns.count_dropped(codes):
        key = TABLE_ORDER[number - 1]
        if key == "gpu":
            tables[key] = _gpu_table(scanned, codes, out, gpu_events, columns)
        else:
            tables[key] = _cpu_table(key, scanned, codes, n_rows, out, columns)
    return tables, events


def _int_column(values: np.ndarray, null: np.ndarray, typ: pa.DataType) -> pa.Array:
    """An integer column from int64 values (0 under a null); beyond an int32 column's range: NULL, as msgspec's
    path makes it."""
    mask = null if null.any() else None
    try:
        return pa.array(values, typ, mask=mask)
    except pa.ArrowInvalid:  # beyond int32
        fits = (values >= -(1 << 31)) & (values < (1 << 31))
        none = ~fits if mask is None else mask | ~fits
        return pa.array(np.where(fits, values, 0), typ, mask=none)


def _texts(data: np.ndarray, ends: np.ndarray, present: np.ndarray | None = None) -> pa.Array:
    """A string column from texts back to back in ``data`` (ASCII: the scanner checked) and their ends; rows
    where ``present`` is False are NULL."""
    offsets = np.zeros(len(ends) + 1, dtype=np.int64)
    offsets[1:] = ends
    validity = None
    nulls = 0
    if present is not None and not present.all():
        validity = pa.py_buffer(np.packbits(present, bitorder="little"))
        nulls = int(len(present) - present.sum())
    text = pa.py_buffer(data[: int(offsets[-1])].tobytes())  # a copy: the buffers serve the next chunk
    return pa.Array.from_buffers(
        pa.large_string(), len(ends), [validity, pa.py_buffer(offsets), text], null_count=nulls
    ).cast(pa.string())


def _cpu_table(
    key: str, scanned: Scanned, codes: np.ndarray, n_rows: int, out: list[int], columns: _Columns
) -> pa.Table:
    """One CPU-side staging table (launch, ann, ops) from the scanner's rows of its kind."""
    rows = np.flatnonzero(scanned.kinds[:n_rows] == _KIND[key])
    ints = scanned.ints[rows]
    nulls = scanned.nulls[rows].astype(bool)
    events = ints[:, _I_EVENT]
    buffer = _NAME_BUFFER[key]
    ts, bad_ts = _ns(np.ascontiguousarray(scanned.floats[rows, 0]), None)
    dur_null = np.ascontiguousarray(nulls[:, _N_DUR])
    dur, bad_dur = _ns(np.ascontiguousarray(scanned.floats[rows, 1]), dur_null if dur_null.any() else None)
    bad = bad_ts if bad_dur is None else bad_dur if bad_ts is None else bad_ts | bad_dur
    cols: dict[str, Any] = {
        "event_id": pa.array(events, pa.int64()),
        "name": _texts(scanned.names[buffer][: out[4 + buffer]], ints[:, _I_NAME_END]),  # no name: ""
        "pid": _int_column(ints[:, _I_PID], nulls[:, _N_PID], pa.int64()),
        "tid": _int_column(ints[:, _I_TID], nulls[:, _N_TID], pa.int64()),
        "ts_ns": ts,
        "dur_ns": dur,
    }
    external = _int_column(ints[:, _I_EXT], nulls[:, _N_EXT], pa.int64())
    if key == "launch":
        cols["api"] = _CATS.api.take(pa.array(codes[events], pa.int8()))
        cols["correlation"] = _int_column(ints[:, _I_CORR], nulls[:, _N_CORR], pa.int64())
        cols["external_id"] = external
        cols["cbid"] = _int_column(ints[:, _I_CBID], nulls[:, _N_CBID], pa.int32())
    elif key == "ann":
        cols["kind"] = _CATS.cat.take(pa.array(codes[events], pa.int8()))
        cols["external_id"] = external
    else:
        ends = ints[:, _I_DIMS_END]
        starts = np.concatenate(([0], ends[:-1]))
        cols["external_id"] = external
        cols["input_dims"] = _texts(scanned.dims[: out[7]], ends, ends > starts)  # absent: NULL
    return columns._checked(key, bad, cols)


def _gpu_table(scanned: Scanned, codes: np.ndarray, out: list[int], copied: list[Any], columns: _Columns) -> pa.Table:
    """The GPU staging table: the scanner's GPU rows, and the activities it copied out (decoded by msgspec,
    ``copied``) built as the msgspec path builds them, put back in event order."""
    n = out[10]
    table = _gpu_rows(scanned, codes, n, out[11], columns) if n else None
    if not copied:
        assert table is not None  # a chunk with GPU activities has rows or copied ones
        return table
    gpu_ids = np.flatnonzero(_CATS.kind[codes] == _KIND["gpu"])
    copied_ids = np.setdiff1d(gpu_ids, scanned.gints[:n, _G_EVENT], assume_unique=True) if n else gpu_ids
    rest = columns._gpu_table(copied, pa.array(copied_ids, pa.int64()))
    if table is None:
        return rest
    both = pa.concat_tables([table, rest])
    return both.take(np.argsort(both.column("event_id").to_numpy(), kind="stable"))


def _gpu_rows(scanned: Scanned, codes: np.ndarray, n: int, name_bytes: int, columns: _Columns) -> pa.Table:
    """The GPU activities the scanner read, as the msgspec path's ``_Columns._gpu_table`` builds them (same
    columns, types, NULLs and dropped rows)."""
    ints = scanned.gints[:n]
    floats = scanned.gfloats[:n]
    nulls = scanned.gnulls[:n].astype(bool)
    events = ints[:, _G_EVENT]
    ts, bad_ts = _ns(np.ascontiguousarray(floats[:, _GF_TS]), None)
    dur, bad_dur = _ns(np.ascontiguousarray(floats[:, _GF_DUR]), None)  # no dur: 0 (the scanner wrote it)
    bad = bad_ts if bad_dur is None else bad_dur if bad_ts is None else bad_ts | bad_dur

    def ints_of(column: int, null: int, typ: pa.DataType) -> pa.Array:
        return _int_column(np.ascontiguousarray(ints[:, column]), np.ascontiguousarray(nulls[:, null]), typ)

    def floats_of(column: int, null: int) -> pa.Array:
        mask = np.ascontiguousarray(nulls[:, null])
        return pa.array(np.ascontiguousarray(floats[:, column]), pa.float64(), mask=mask if mask.any() else None)

    cols: dict[str, Any] = {
        "event_id": pa.array(events, pa.int64()),
        "kind": _CATS.gpu_kind.take(pa.array(codes[events], pa.int8())),
        "name": _texts(scanned.gnames[:name_bytes], ints[:, _G_NAME_END]),  # no name: ""
        "device": ints_of(_G_DEVICE, _GN_DEVICE, pa.int32()),
        "stream": ints_of(_G_STREAM, _GN_STREAM, pa.int64()),
        "ts_ns": ts,
        "dur_ns": dur,
        "correlation": ints_of(_G_CORR, _GN_CORR, pa.int64()),
        "external_id": ints_of(_G_EXT, _GN_EXT, pa.int64()),
        **{f"grid_{axis}": ints_of(_G_GRID + i, _GN_GRID, pa.int32()) for i, axis in enumerate("xyz")},
        **{f"block_{axis}": ints_of(_G_BLOCK + i, _GN_BLOCK, pa.int32()) for i, axis in enumerate("xyz")},
        "registers": ints_of(_G_REG, _GN_REG, pa.int32()),
        "shared_mem_bytes": ints_of(_G_SHM, _GN_SHM, pa.int32()),
        "blocks_per_sm": floats_of(_GF_BPSM, _GN_BPSM),
        "warps_per_sm": floats_of(_GF_WPSM, _GN_WPSM),
        "occupancy_pct": floats_of(_GF_OCC, _GN_OCC),
        "bytes": ints_of(_G_BYTES, _GN_BYTES, pa.int64()),
        **{column: pa.nulls(n, typ) for column, _, typ in _COLLECTIVE_FIELDS},
    }
    return columns._checked("gpu", bad, cols)
