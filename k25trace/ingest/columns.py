"""Columns: one chunk's decoded events -> one Arrow table per staging table, with exact integer ns times."""

from __future__ import annotations

import math
from collections import Counter
from itertools import compress
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from k25trace.ingest.events import _EMPTY_ARGS, _KEEP_TYPE, _SKIP_TYPE_SET, ANNOTATION_CATS, GPU_CATS, KNOWN_SKIPPED, LAUNCH_CATS, Event, _dumps, _num

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
        if events and type(events[0]).__module__ == _EVENTS_MODULE and type(events[0]) is not Event:
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


