"""Columns: one chunk's decoded events -> one Arrow table per staging table, with exact integer ns times."""

from __future__ import annotations

import math
from collections import Counter
from operator import attrgetter, itemgetter
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from k25trace.ingest.events import (
    _EMPTY_ARGS,
    _SKIP_TYPE_SET,
    _TAGGED_KEPT,
    ANNOTATION_CATS,
    GPU_CATS,
    KNOWN_SKIPPED,
    LAUNCH_CATS,
    Event,
    _dumps,
    _num,
)

_NS_LIMIT_US = 9.2e15  # |µs| below this: the ns fit in int64 (2**63 ns = 9.22e15 µs)


def _as_float(v: Any) -> float:
    if v is None:
        return 0.0
    try:
        return float(v)
    except OverflowError:  # an integer beyond float range
        return math.inf


def _us(
    events: list[Any], get: Callable[[Any], Any], none_is_zero: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """Each event's µs value (``get``) as float64, and the mask of the events that have none (None; None if no
    event lacks one). ``none_is_zero``: a missing value is 0 instead (a GPU activity without dur lasts 0).

    One pass at C speed (``np.fromiter``) when every value is a number (msgspec typed them); numpy would read a
    None as NaN, so a NaN anywhere sends the column to the value-by-value path, which tells a None (no value) from
    a NaN (a value that is no time). An integer beyond float range is infinite there (no time as well)."""
    n = len(events)
    try:
        arr = np.fromiter(map(get, events), dtype=np.float64, count=n)
        if not np.isnan(arr).any():
            return arr, None
    except (TypeError, OverflowError, ValueError):  # an integer beyond float range
        pass
    values = list(map(get, events))
    if none_is_zero:
        values = [0 if v is None else v for v in values]
    mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
    arr = np.fromiter(map(_as_float, values), dtype=np.float64, count=n)  # None -> 0.0, beyond float range -> inf
    return arr, mask if mask.any() else None


def _ns(arr: np.ndarray, mask: np.ndarray | None) -> tuple[pa.Array, np.ndarray | None]:
    """µs (float64, from :func:`_us`) -> integer ns, exactly, vectorised; returns (ns, mask of values that are no
    time) — the second is None when every value is a time. A masked value (None) is NULL.

    A float µs value with ns resolution is split into its integer µs (exact in float64) and its fraction (exact by
    Sterbenz); the fraction's representation error stays below 0.25 ns while ts < 2**43 µs (101 days), so
    rounding ``fraction * 1000`` recovers the written ns exactly. Integer µs (old absolute-time traces, up to
    2**53) convert to float64 exactly and have no fraction. NaN, ±Infinity and values whose ns do not fit in a
    64-bit integer (1e16 µs, 1e300, 2**70) are no time: they come back masked, as 0, never wrapped.
    """
    bad: np.ndarray | None = ~(np.abs(arr) < _NS_LIMIT_US)  # a masked value is 0 in ``arr``
    if bad is not None and bad.any():
        arr = np.where(bad, 0.0, arr)
    else:
        bad = None
    whole = np.floor(arr)
    ns = whole.astype(np.int64) * 1000 + np.rint((arr - whole) * 1000.0).astype(np.int64)
    return pa.array(ns, pa.int64(), mask=mask), bad


# ---------------------------------------------------------------------------------------------------------------
# Columns

_EVENTS_MODULE = "k25trace.ingest.events"  # where the tagged structs are defined


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
    ts, bad_ts = _ns(*_us(events, _TS))
    dur, bad_dur = _ns(*_us(events, _DUR, none_is_zero=gpu))
    bad = bad_ts if bad_dur is None else bad_dur if bad_ts is None else bad_ts | bad_dur
    return ts, dur, bad


_TS, _DUR, _CAT = attrgetter("ts"), attrgetter("dur"), attrgetter("cat")
_NAME, _PID, _TID, _ARGS = attrgetter("name"), attrgetter("pid"), attrgetter("tid"), attrgetter("args")
_OK_PH = frozenset(("X", None))


def _ints(values: list[Any], typ: pa.DataType, convert: Callable[[Any], Any] = _int_or_none) -> pa.Array:
    """An integer column; values msgspec typed as int convert at C speed, anything else (a string pid, a number
    beyond 64 bits) value by value with ``convert``."""
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        out = pa.array(list(map(convert, values)), pa.int64())
        if typ == pa.int64():
            return out
        try:
            return out.cast(typ)
        except pa.ArrowInvalid:  # beyond the column's width: NULL, like any value that is no number
            return pa.array(
                [v if v is not None and -(1 << 31) <= v < (1 << 31) else None for v in out.to_pylist()], typ
            )


def _getter_ints(
    items: list[Any], get: Callable[[Any], Any], typ: pa.DataType, convert: Callable[[Any], Any] = _int_or_none
) -> pa.Array:
    """:func:`_ints` of ``get(item)`` for each item, read straight from the items when every value is an integer
    that fits (no list in between)."""
    try:
        return pa.array(map(get, items), typ, size=len(items))
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError, ValueError):
        return _ints(list(map(get, items)), typ, convert)


def _names(events: list[Any]) -> pa.Array:
    """The ``name`` column: a missing name is the empty string."""
    names = pa.array(map(_NAME, events), pa.string(), size=len(events))
    return pc.fill_null(names, "") if names.null_count else names


def _args(events: list[Any], empty: Any) -> list[Any]:
    args = list(map(_ARGS, events))
    if None in args:
        args = [empty if a is None else a for a in args]
    return args


def _arg_ints(args: list[Any], field: str, typ: pa.DataType) -> pa.Array:
    """An integer column of an args field every decoder types as ``int | None``: one pass at C speed when no value
    is missing and every value fits the column (a bool or a float never reaches here: msgspec rejects them for an
    int, the forgiving decoder makes them None); otherwise value by value (:func:`_ints`)."""
    get = attrgetter(field)
    try:
        return pa.array(np.fromiter(map(get, args), dtype=np.int64, count=len(args)), typ)
    except (TypeError, OverflowError, pa.ArrowInvalid):  # a None, a number beyond 64 bits or beyond the column
        return _ints(list(map(get, args)), typ)


def _raw_texts(raws: list[Any]) -> pa.Array:
    """A string column from raw JSON values (msgspec.Raw; empty: absent -> NULL). Invalid UTF-8 becomes U+FFFD.
    The values are joined into one buffer and cut by their lengths (no bytes object per value)."""
    n = len(raws)
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    binary = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(raws))])
    try:
        texts = binary.cast(pa.string())
    except pa.ArrowInvalid:  # invalid UTF-8 somewhere: decode value by value
        texts = pa.array([bytes(d).decode("utf-8", "replace") for d in raws], pa.string())
    absent = lengths == 0
    if not absent.any():
        return texts
    return pc.if_else(pa.array(absent), pa.scalar(None, pa.string()), texts)


_API_OF_CAT = {
    "cuda_runtime": "cuda_runtime",
    "Runtime": "cuda_runtime",
    "cuda_driver": "cuda_driver",
    "Driver": "cuda_driver",
}


def _mapped(values: list[str], mapping: dict[str, str]) -> pa.Array:
    """A string column of ``mapping[value]`` (every value is a key), mapped in Arrow."""
    keys = pa.array(list(mapping), pa.string())
    return pa.array(list(mapping.values()), pa.string()).take(pc.index_in(pa.array(values, pa.string()), keys))


# One column spec per staging table: the timed columns every table has (event_id, name, pid, tid, ts_ns, dur_ns)
# come from _timed_columns; these are the extras, each a function of (events, args).
_ColumnFn = Callable[[list[Any], list[Any]], pa.Array]
EXTRA_COLUMNS: dict[str, dict[str, _ColumnFn]] = {
    "launch": {
        "api": lambda ev, a: _mapped(list(map(_CAT, ev)), _API_OF_CAT),
        "correlation": lambda ev, a: _arg_ints(a, "correlation", pa.int64()),
        "external_id": lambda ev, a: _arg_ints(a, "external_id", pa.int64()),
        "cbid": lambda ev, a: _arg_ints(a, "cbid", pa.int32()),
    },
    "ann": {
        "kind": lambda ev, a: pa.array(list(map(_CAT, ev)), pa.string()),
        "external_id": lambda ev, a: _arg_ints(a, "external_id", pa.int64()),
    },
    "ops": {
        "external_id": lambda ev, a: _arg_ints(a, "external_id", pa.int64()),
        "input_dims": lambda ev, a: _raw_texts(list(map(attrgetter("input_dims"), a))),
    },
    "py": {},
}
TABLE_ORDER = ("gpu", "launch", "ann", "ops", "py")
_TABLE_OF_CAT = {
    **{c: "gpu" for c in GPU_CATS},
    **{c: "launch" for c in LAUNCH_CATS},
    "cpu_op": "ops",
    **{c: "ann" for c in ANNOTATION_CATS},
}


def _table_of_type(keep_python: bool) -> dict[type, str | None]:
    """Tagged struct type -> staging table (None: a dropped category)."""
    out: dict[type, str | None] = {t: None for t in _SKIP_TYPE_SET}
    for t in _TAGGED_KEPT:
        cat: str = t.cat  # type: ignore[attr-defined]  # the tag of a tagged struct type
        out[t] = _TABLE_OF_CAT[cat] if cat != "python_function" else ("py" if keep_python else None)
    return out


class _Routes:
    """Per tagged struct type: a small number (its code), and per code the staging table's number (0: dropped;
    k: TABLE_ORDER[k - 1]), so that an event's table is two array lookups."""

    def __init__(self, keep_python: bool) -> None:
        table_of = _table_of_type(keep_python)
        self.types = list(table_of)
        self.code_of = {t: i for i, t in enumerate(self.types)}
        self.table_number = np.array(
            [0 if table_of[t] is None else TABLE_ORDER.index(table_of[t]) + 1 for t in self.types], dtype=np.int8
        )


_ROUTES = {False: _Routes(False), True: _Routes(True)}


class _Columns:
    """Turns one chunk's decoded events into one Arrow table per staging table."""

    def __init__(self, keep_python: bool) -> None:
        self.keep_python = keep_python
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.problems: Counter[str] = Counter()  # 'bad_time:<table>', 'negative_dur:<table>', 'gpu_no_ts', 'gpu_not_X'

    def build(self, events: list[Any], first_event_id: int) -> dict[str, pa.Table]:
        """Columns per staging table; GPU rows carry their ``name`` (the parent maps names to ids)."""
        routed = (
            self._route_tagged(events)
            if events and type(events[0]).__module__ == _EVENTS_MODULE and type(events[0]) is not Event
            else None
        )
        if routed is None:
            routed = self._route_generic(events)
        out: dict[str, pa.Table] = {}
        for key in TABLE_ORDER:
            if key in routed:
                rows, idx = routed[key]
                out[key] = self._table(
                    key, rows, pa.array(np.asarray(idx, dtype=np.int64) + first_event_id, pa.int64())
                )
        return out

    def _table(self, key: str, rows: list[Any], ids: pa.Array) -> pa.Table:
        """One staging table's columns from its events (``ids``: their event ids)."""
        if key == "gpu":
            return self._gpu_table(rows, ids)
        args = _args(rows, _EMPTY_ARGS) if EXTRA_COLUMNS[key] else []
        ts, dur, bad = _times(rows)
        columns = {
            "event_id": ids,
            "name": _names(rows),
            "pid": _getter_ints(rows, _PID, pa.int64(), _pid),
            "tid": _getter_ints(rows, _TID, pa.int64(), _pid),
            "ts_ns": ts,
            "dur_ns": dur,
        }
        for column, make in EXTRA_COLUMNS[key].items():
            columns[column] = make(rows, args)
        return self._checked(key, bad, columns)

    def _route_tagged(self, events: list[Any]) -> dict[str, tuple[list[Any], Any]] | None:
        """Tagged structs (the fast decoder): split by type with one pass at C speed (type -> code -> table);
        dropped categories are only counted."""
        routes = _ROUTES[self.keep_python]
        try:
            codes = np.fromiter(map(routes.code_of.__getitem__, map(type, events)), dtype=np.int16, count=len(events))
        except KeyError:
            return None  # a struct of another decoder: route it event by event
        tables = routes.table_number[codes]
        routed: dict[str, tuple[list[Any], Any]] = {}
        for number in self.count_dropped(codes):
            key = TABLE_ORDER[number - 1]
            idx: Any = np.flatnonzero(tables == number)
            # every kept tagged struct is a timed complete event: the decoder validated ph and ts (events._Timed)
            rows = list(itemgetter(*idx.tolist())(events)) if len(idx) > 1 else [events[int(idx[0])]]
            routed[key] = (rows, idx)
        return routed

    def count_dropped(self, codes: np.ndarray) -> list[int]:
        """Count the dropped categories among the events' type codes (:class:`_Routes`; in the order they first
        appear, as traces.skipped lists them); returns the numbers of the staging tables present, in order."""
        routes = _ROUTES[self.keep_python]
        per_type = np.bincount(codes, minlength=len(routes.types))
        present = set()
        dropped = []
        for code in np.flatnonzero(per_type).tolist():
            number = int(routes.table_number[code])
            if number:
                present.add(number)
            else:
                dropped.append(code)
        if len(dropped) > 1:
            dropped.sort(key=lambda code: int(np.argmax(codes == code)))
        for code in dropped:
            self.skipped[routes.types[code].cat] += int(per_type[code])  # a tagged struct type's tag
        return sorted(present)

    def _untimed(self, e: Any, gpu: bool) -> bool:
        """An event without ts, or of a phase other than a complete event ("X"): counted as skipped (for a GPU
        activity also as a problem, the loader warns about those)."""
        if e.ts is not None and e.ph in _OK_PH:
            return False
        self.skipped[e.cat] += 1
        if gpu:
            self.problems["gpu_no_ts" if e.ts is None else "gpu_not_X"] += 1
        return True

    def _route_generic(self, events: list[Any]) -> dict[str, tuple[list[Any], Any]]:
        """Generic structs (the fallback decoders): route event by event on ``cat``."""
        lists: dict[str, tuple[list[Any], list[int]]] = {}
        skipped = self.skipped
        keep_python = self.keep_python
        for i, e in enumerate(events):
            cat = e.cat
            if cat is None or (cat in KNOWN_SKIPPED and not (cat == "python_function" and keep_python)):
                skipped[cat or "(no category)"] += 1
                continue
            if self._untimed(e, cat in GPU_CATS):
                continue
            key = _TABLE_OF_CAT.get(cat) or ("py" if cat == "python_function" and keep_python else None)
            if key is None:
                skipped[cat] += 1
                if cat not in KNOWN_SKIPPED:
                    self.unknown[cat] += 1
                continue
            rows, idx = lists.setdefault(key, ([], []))
            rows.append(e)
            idx.append(i)
        return {key: (rows, idx) for key, (rows, idx) in lists.items()}

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

    def _gpu_table(self, gpu: list[Any], ids: pa.Array) -> pa.Table:
        args = _args(gpu, _EMPTY_ARGS)
        devices = list(map(attrgetter("device"), args))
        streams = list(map(attrgetter("stream"), args))
        if None in devices:
            devices = [d if d is not None else _pid(e.pid) for d, e in zip(devices, gpu, strict=True)]
        if None in streams:
            streams = [s if s is not None else _pid(e.tid) for s, e in zip(streams, gpu, strict=True)]
        ts, dur, bad = _times(gpu, gpu=True)
        return self._checked(
            "gpu",
            bad,
            {
                "event_id": ids,
                "kind": _mapped(list(map(_CAT, gpu)), GPU_CATS),
                "name": _names(gpu),
                "device": _ints(devices, pa.int32()),
                "stream": _ints(streams, pa.int64()),
                "ts_ns": ts,
                "dur_ns": dur,
                "correlation": _arg_ints(args, "correlation", pa.int64()),
                "external_id": _arg_ints(args, "external_id", pa.int64()),
                **_dims("grid", list(map(attrgetter("grid"), args))),
                **_dims("block", list(map(attrgetter("block"), args))),
                "registers": _arg_ints(args, "registers", pa.int32()),
                "shared_mem_bytes": _arg_ints(args, "shared_memory", pa.int32()),
                "blocks_per_sm": pa.array(list(map(attrgetter("blocks_per_sm"), args)), pa.float64()),
                "warps_per_sm": pa.array(list(map(attrgetter("warps_per_sm"), args)), pa.float64()),
                "occupancy_pct": pa.array(list(map(attrgetter("occupancy"), args)), pa.float64()),
                "bytes": _ints(list(map(attrgetter("bytes"), args)), pa.int64()),  # some traces write it as a string
                **_collective_columns(args),
            },
        )


# A GPU activity's collective metadata (NCCL kernels): (column, args field, type); most rows have none of it.
_COLLECTIVE_FIELDS = (
    ("collective_name", "collective_name", pa.string()),
    ("msg_in_nelems", "in_nelems", pa.int64()),
    ("msg_out_nelems", "out_nelems", pa.int64()),
    ("msg_dtype", "dtype", pa.string()),
    ("group_size", "group_size", pa.int32()),
    ("pg_name", "pg_name", pa.string()),
    ("pg_ranks", "pg_ranks", pa.string()),
)
_COLLECTIVE = attrgetter(*(field for _, field, _ in _COLLECTIVE_FIELDS))
_NO_COLLECTIVE = (None,) * len(_COLLECTIVE_FIELDS)


def _collective_columns(args: list[Any]) -> dict[str, pa.Array]:
    """The collective columns, built from the rows that carry any of them (a number written as a string is read,
    anything else that is no number is NULL; a value that is not a string is stored as its JSON text) and placed
    back at their rows; NULL elsewhere."""
    n = len(args)
    values = list(map(_COLLECTIVE, args))
    rows = [i for i, v in enumerate(values) if v != _NO_COLLECTIVE]
    if not rows:
        return {column: pa.nulls(n, typ) for column, _, typ in _COLLECTIVE_FIELDS}
    at = np.zeros(n, dtype=np.int64)
    at[rows] = np.arange(len(rows))
    absent = np.ones(n, dtype=bool)
    absent[rows] = False
    positions = pa.array(at, pa.int64(), mask=absent)
    out = {}
    per_column = zip(*(values[i] for i in rows), strict=True)
    for (column, _, typ), column_values in zip(_COLLECTIVE_FIELDS, per_column, strict=True):
        if typ == pa.string():
            dense = pa.array(list(map(_str_or_none, column_values)), typ)
        else:
            dense = _ints(list(map(_int_or_none, column_values)), typ)
        out[column] = dense.take(positions)
    return out


def empty_table(key: str) -> pa.Table:
    """A staging table with no rows: the columns a chunk's table of ``key`` has (built by the same code)."""
    return _Columns(False)._table(key, [], pa.array([], pa.int64()))
