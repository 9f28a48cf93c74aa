"""``report --by roofline``: each op against the GPU's peaks (:mod:`.peaks`).

* **Per-op efficiency** where shapes are known: an eagerly launched kernel carries the External id of the innermost
  CPU op that launched it, and that op's ``Input Dims`` (``record_shapes``) give the problem. For each op with a
  cost model (:mod:`.op_costs`) the FLOPs and the bytes it must move, its achieved TFLOP/s and GB/s, the share of
  the device's peaks, its arithmetic intensity against the ridge point (compute- or memory-bound), and its roofline
  time (the least time the hardware allows) against the time it took. An op without a model, or whose shapes do
  not say what it does, is listed as unmodelled with the reason, never guessed.
* **CUDA-graph replays** have no CPU ops. Their shapes are carried over from eager steps of the same device, world
  size, phase and batch size only when unambiguous (:func:`carry_graph_kernels`); the rest is listed unmodelled.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis.op_costs import OpContext, OpCost, Unmodelled, kernels_dtype, name_dtype, op_cost, parse_dims
from k25trace.analysis.peaks import COMPUTE_PEAK, Peaks, load_peaks, run_devices
from k25trace.db import query_frame, run_query


@dataclass
class _Row:
    """One (run, batch, source, op, shapes, kernel set) group of calls."""

    run_id: str
    phase: str
    batch_size: int | None
    world_size: int | None
    device_name: str | None
    steps: int
    source: str  # eager | graph
    op: str | None
    input_dims: str | None
    kernel_set: str
    calls: float
    kernels: int
    kernel_ns: int
    categories: list[str]
    kernel_names: tuple[str, ...]
    note: str = ""
    cost: OpCost | None = None
    dtype: str | None = None
    dtype_source: str = ""
    reason: str = ""


def _compact_dims(text: str | None) -> str | None:
    dims = parse_dims(text)
    return json.dumps(dims, separators=(",", ":")) if dims is not None else text


def _run_dtypes(frame: pl.DataFrame) -> dict[str, str]:
    """Per run: the 16-bit element type most of its kernel names state (the fallback dtype of an op)."""
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for r in frame.iter_rows(named=True):
        for name in r["kernel_names"] or []:
            dtype = name_dtype(name)
            if dtype in ("bf16", "fp16"):
                votes[r["run_id"]][dtype] += 1
    return {run: c.most_common(1)[0][0] for run, c in votes.items() if c}


def _cost_row(row: _Row, run_dtype: dict[str, str]) -> None:
    if row.op is None:
        row.reason = "no CPU op recorded for these kernels (launched outside an op, or the op was not profiled)"
        return
    dims = parse_dims(row.input_dims)
    if dims is None:
        row.reason = "shapes not recorded (profile with record_shapes=True)"
        return
    dtype = kernels_dtype(row.kernel_names)
    source = "kernel"
    if dtype is None and row.run_id in run_dtype:
        dtype, source = run_dtype[row.run_id], "run"
    try:
        row.cost = op_cost(row.op, dims, OpContext(dtype, source, row.kernel_names))
    except Unmodelled as exc:
        row.reason = str(exc)
        return
    row.dtype = row.cost.compute or dtype  # the type it computes in (FP8 for a scaled GEMM), else its elements'
    row.dtype_source = source if row.dtype else ""


def eager_rows(frame: pl.DataFrame) -> list[_Row]:
    rows = []
    for r in frame.iter_rows(named=True):
        rows.append(
            _Row(
                run_id=r["run_id"],
                phase=r["phase"],
                batch_size=r["batch_size"],
                world_size=r["world_size"],
                device_name=r["device_name"],
                steps=r["steps"],
                source="eager",
                op=r["op"],
                input_dims=_compact_dims(r["input_dims"]),
                kernel_set=r["kernel_set"],
                calls=r["calls"],
                kernels=r["kernels"],
                kernel_ns=r["kernel_ns"],
                categories=list(r["categories"] or []),
                kernel_names=tuple(r["kernel_names"] or ()),
            )
        )
    return _merge(rows)


def _merge(rows: list[_Row]) -> list[_Row]:
    """Rows equal after normalising the dims text (pretty-printed vs compact JSON) become one."""
    merged: dict[tuple, _Row] = {}
    for row in rows:
        key = (
            row.run_id,
            row.phase,
            row.batch_size,
            row.device_name,
            row.source,
            row.op,
            row.input_dims,
            row.kernel_set,
        )
        have = merged.get(key)
        if have is None:
            merged[key] = row
        else:
            have.calls += row.calls
            have.kernels += row.kernels
            have.kernel_ns += row.kernel_ns
            have.categories = sorted(set(have.categories) | set(row.categories))
    return list(merged.values())


def carry_graph_kernels(graph: pl.DataFrame, eager: pl.DataFrame) -> list[_Row]:
    """Rows for CUDA-graph replayed kernels, one set per graph step: shapes carried over from eager calls where
    unambiguous, else unmodelled.

    A graph step (trace, step) is matched with the eager calls of the same device, world size, phase and batch
    size (any run of the database). An eager op shape (op, input dims) with kernel set S is carried into the graph
    step when (1) every kernel signature (name, grid, block) of S belongs, across all those eager calls, to that op
    shape and kernel set only, (2) every signature of S occurs in the graph step, and (3) their counts there are the
    same multiple of their counts in S (that multiple is the number of calls). All other graph kernels are listed
    unmodelled with the reason.
    """
    out: list[_Row] = []

    def emit(first: dict[str, Any], row: _GraphPart) -> None:
        out.append(_graph_row(first, row))

    _walk_graph_steps(graph, eager, emit)
    return out


def graph_rows(graph: pl.DataFrame, eager: pl.DataFrame, steps: dict[tuple, int]) -> list[_Row]:
    """:func:`carry_graph_kernels`' rows summed per (run, phase, batch, op, dims, kernel set / signature, kernel
    names, reason), in one pass: no row per graph step is made (64 ranks have ~8,000 graph steps). ``graph`` is
    per step or per group of alike steps (queries/sol_graph_step_groups.sql). A sum takes its other fields from
    the first row of its group; ``steps``: steps per (run, phase, batch)."""
    merged: dict[tuple, _Row] = {}

    def emit(first: dict[str, Any], part: _GraphPart) -> None:
        key = (first["run_id"], first["phase"], first["batch_size"], *part[:5])
        have = merged.get(key)
        if have is None:
            row = merged[key] = _graph_row(first, part)
            row.steps = steps.get((row.run_id, row.phase, row.batch_size), 0)
        else:
            have.calls += part[5]
            have.kernels += part[6]
            have.kernel_ns += part[7]

    _walk_graph_steps(graph, eager, emit)
    return list(merged.values())


_GraphPart = tuple[str | None, str | None, str | None, tuple[str, ...], str, int, int, int, list[str], str]
"""One row of a graph step: op, input dims, kernel set (the signature when unmodelled), kernel names, reason (''
when modelled), calls, kernels, kernel ns, categories, note."""

_STEP_COLUMNS = ("run_id", "trace_id", "step_index", "phase", "batch_size", "world_size", "device_name")
"""The columns of queries/sol_graph_kernels.sql and sol_graph_step_groups.sql that name a graph step (a group's
first) and its context."""

_KERNEL_COLUMNS = ("sig", "kernels", "kernel_ns", "category", "short_name")
"""Its columns per kernel signature (a tuple in this order: :data:`_SIG` ... :data:`_SHORT`)."""

_SIG, _KERNELS, _NS, _CATEGORY, _SHORT = range(5)

_CARRIED_NOTE = "shapes carried from eager calls with the same kernels (name, grid, block)"


def _walk_graph_steps(
    graph: pl.DataFrame, eager: pl.DataFrame, emit: Callable[[dict[str, Any], _GraphPart], None]
) -> None:
    """Call ``emit(first, part)`` for each row :func:`carry_graph_kernels` makes, in its order (``first``: the
    step's context, :data:`_STEP_COLUMNS`). A step's decisions depend only on its context and its signatures'
    counts, so they are worked out once per distinct (context, counts). ``graph`` holds one step per
    (trace_id, step_index) (queries/sol_graph_kernels.sql), or with a ``steps`` column, groups of that many steps
    whose signatures ran the same number of times each (queries/sol_graph_step_groups.sql): one group's rows are
    its steps' rows summed, and its calls are one step's times ``steps``."""
    owners, shapes = _eager_owners(eager)
    if graph.is_empty():
        return
    steps = zip(*(graph.get_column(c).to_list() for c in _STEP_COLUMNS), strict=True)
    kernels = zip(*(graph.get_column(c).to_list() for c in _KERNEL_COLUMNS), strict=True)
    sizes = graph.get_column("steps").to_list() if "steps" in graph.columns else [1] * graph.height
    groups: dict[tuple, list[tuple]] = {}
    group_steps: dict[tuple, int] = {}
    for step, kernel, size in zip(steps, kernels, sizes, strict=True):
        groups.setdefault(step, []).append(kernel)
        group_steps[step] = size
    plans: dict[tuple, tuple[list[tuple[str, str | None, str, int, list[str]]], set[str]]] = {}
    reasons: dict[tuple, str] = {}
    for step, group in groups.items():
        first = dict(zip(_STEP_COLUMNS, step, strict=True))
        size = group_steps[step]
        ctx_key = (first["device_name"], first["world_size"], first["phase"], first["batch_size"])
        by_sig = {g[_SIG]: g for g in group if g[_SIG] is not None}
        counts = {sig: g[_KERNELS] // size for sig, g in by_sig.items()}  # one step's
        plan_key = (ctx_key, tuple(counts.items()))
        plan = plans.get(plan_key)
        if plan is None:
            plan = plans[plan_key] = _carry_plan(ctx_key, counts, owners)
        carried, used = plan
        for op, dims, kernel_set, calls, need in carried:
            info = shapes[ctx_key + (op, dims, kernel_set)]
            emit(
                first,
                (
                    op,
                    dims,
                    kernel_set,
                    tuple(sorted(info["names"])),
                    "",
                    calls * size,
                    sum(by_sig[s][_KERNELS] for s in need),
                    sum(by_sig[s][_NS] for s in need),
                    sorted(info["categories"]),
                    _CARRIED_NOTE,
                ),
            )
        unmodelled = [g for sig, g in by_sig.items() if sig not in used]
        unmodelled += [g for g in group if g[_SIG] is None]  # one per kernel name
        for g in unmodelled:
            why = reasons.get((ctx_key, g[_SIG]))
            if why is None:
                owned = set() if g[_SIG] is None else owners.get((*ctx_key, g[_SIG]), set())
                why = reasons[(ctx_key, g[_SIG])] = _uncarried_reason(first, g[_SIG], owned)
            emit(
                first,
                (None, None, g[_SIG], (g[_SHORT],), why, g[_KERNELS], g[_KERNELS], g[_NS], [g[_CATEGORY]], ""),
            )


def _eager_owners(eager: pl.DataFrame) -> tuple[dict[tuple, set[tuple]], dict[tuple, dict[str, Any]]]:
    """Which eager op shapes (op, dims, kernel set) each kernel signature belongs to, per (device, world, phase,
    batch, signature); and per (device, world, phase, batch, op, dims, kernel set) the kernel names and categories."""
    owners: dict[tuple, set[tuple]] = defaultdict(set)
    shapes: dict[tuple, dict[str, Any]] = {}
    for r in eager.iter_rows(named=True):
        if r["op"] is None or r["batch_size"] is None:
            continue
        ident = (r["op"], _compact_dims(r["input_dims"]), r["kernel_set"])
        ctx_key = (r["device_name"], r["world_size"], r["phase"], r["batch_size"])
        for sig in r["kernel_set"].split(" "):
            owners[ctx_key + (sig,)].add(ident)
        info = shapes.setdefault((*ctx_key, *ident), {"names": set(), "categories": set()})
        info["names"].update(r["kernel_names"] or [])
        info["categories"].update(r["categories"] or [])
    return owners, shapes


def _carry_plan(
    ctx_key: tuple, counts: dict[str, int], owners: dict[tuple, set[tuple]]
) -> tuple[list[tuple[str, str | None, str, int, list[str]]], set[str]]:
    """Which eager op shapes are carried into a graph step of context ``ctx_key`` (device, world size, phase, batch)
    whose kernel signatures ran ``counts`` times (see :func:`carry_graph_kernels`): (op, dims, kernel set, calls,
    the signatures it takes) each, and the signatures they use."""
    out: list[tuple[str, str | None, str, int, list[str]]] = []
    used: set[str] = set()
    candidates = {next(iter(owners[ctx_key + (sig,)])) for sig in counts if len(owners.get((*ctx_key, sig), ())) == 1}
    for op, dims, kernel_set in sorted(candidates, key=str):
        need = Counter(kernel_set.split(" "))
        if any(owners.get((*ctx_key, sig)) != {(op, dims, kernel_set)} or sig not in counts for sig in need):
            continue
        ratios = {counts[sig] / n for sig, n in need.items()}
        if len(ratios) != 1 or not float(next(iter(ratios))).is_integer() or any(sig in used for sig in need):
            continue
        used.update(need)
        out.append((op, dims, kernel_set, int(next(iter(ratios))), list(need)))
    return out, used


def _uncarried_reason(first: dict[str, Any], sig: str | None, owned: set[tuple]) -> str:
    """Why no eager op shape could be carried into a graph step's kernel signature (``owned``: the eager op shapes
    that signature belongs to)."""
    if sig is None:
        why = (
            "CUDA-graph replay: the trace records no grid or block for this kernel, so it cannot be matched with "
            "the kernels of eager steps, and its shapes are unknown"
        )
    elif not owned:
        why = (
            f"CUDA-graph replay: no eager {first['phase']} step of batch {first['batch_size']} on this "
            "device ran this kernel with the same grid and block, so its shapes are unknown"
        )
    elif len(owned) > 1:
        why = (
            f"CUDA-graph replay: in eager steps the same kernel (name, grid, block) ran for {len(owned)} "
            "different op shapes, so the match is ambiguous"
        )
    else:
        why = (
            "CUDA-graph replay: the eager op launched other kernels too, and their counts in the graph do "
            "not match, so the match is ambiguous"
        )
    return why


def _graph_row(first: dict[str, Any], part: _GraphPart) -> _Row:
    """A row of CUDA-graph replayed kernels of the graph step ``first`` (its context)."""
    op, dims, kernel_set, names, reason, calls, kernels, kernel_ns, categories, note = part
    return _Row(
        run_id=first["run_id"],
        phase=first["phase"],
        batch_size=first["batch_size"],
        world_size=first["world_size"],
        device_name=first["device_name"],
        steps=0,
        source="graph",
        op=op,
        input_dims=dims,
        kernel_set=kernel_set,  # type: ignore[arg-type]
        calls=calls,
        kernels=kernels,
        kernel_ns=kernel_ns,
        categories=categories,
        kernel_names=names,
        note=note,
        reason=reason,
    )


ROOFLINE_COLUMNS = (
    "run_id",
    "batch_size",
    "source",
    "op",
    "shape",
    "dtype",
    "calls_per_step",
    "us_per_call",
    "ms_per_step",
    "gflop_per_call",
    "mb_per_call",
    "tflops",
    "gbps",
    "pct_peak_flops",
    "pct_peak_hbm",
    "intensity",
    "ridge",
    "bound",
    "sol_us",
    "pct_of_sol",
    "category",
    "device",
    "dtype_source",
    "kernels_per_call",
    "calls",
    "steps",
    "input_dims",
    "note",
)


def _metrics(row: _Row, peaks: Peaks | None) -> dict[str, Any]:
    us = row.kernel_ns / row.calls / 1e3 if row.calls else None
    out: dict[str, Any] = {
        "run_id": row.run_id,
        "batch_size": row.batch_size,
        "source": row.source,
        "op": row.op if row.op is not None else f"({', '.join(row.kernel_names)[:120]})",
        "shape": None,
        "dtype": row.dtype,
        "calls_per_step": row.calls / row.steps if row.steps else None,
        "us_per_call": us,
        "ms_per_step": row.kernel_ns / 1e6 / row.steps if row.steps else None,
        "category": ",".join(row.categories),
        "device": peaks.device if peaks else None,
        "dtype_source": row.dtype_source or None,
        "kernels_per_call": row.kernels / row.calls if row.calls else None,
        "calls": int(row.calls),
        "steps": row.steps,
        "input_dims": row.input_dims,
        "note": row.reason or row.note,
    }
    cost = row.cost
    if cost is None or not row.kernel_ns:
        out["bound"] = "unmodelled" if cost is None else None
        return out
    note = "; ".join(
        x
        for x in (
            cost.note,
            row.note,
            f"dtype from the {row.dtype_source}'s kernel names" if row.dtype_source == "run" else "",
        )
        if x
    )
    out.update(
        shape=cost.shape,
        note=note,
        mb_per_call=cost.bytes / 1e6,
        gbps=cost.bytes * row.calls / row.kernel_ns,
        gflop_per_call=cost.flops / 1e9 if cost.flops is not None else None,
        tflops=cost.flops * row.calls / row.kernel_ns / 1e3 if cost.flops is not None else None,
        intensity=cost.flops / cost.bytes if cost.flops is not None and cost.bytes else None,
    )
    hbm = peaks.peak("hbm_gbps") if peaks else None
    flops_peak = peaks.peak(COMPUTE_PEAK[cost.compute]) if peaks and cost.compute in COMPUTE_PEAK else None
    if hbm:
        out["pct_peak_hbm"] = 100.0 * out["gbps"] / hbm
    if flops_peak and out["tflops"] is not None:
        out["pct_peak_flops"] = 100.0 * out["tflops"] / flops_peak
    if hbm and flops_peak:
        out["ridge"] = flops_peak * 1e3 / hbm
    if cost.flops is None:
        out["bound"] = "memory"
    elif out.get("ridge") is not None and out["intensity"] is not None:
        out["bound"] = "compute" if out["intensity"] >= out["ridge"] else "memory"
    times = [cost.bytes / (hbm * 1e3)] if hbm else []
    if cost.flops is not None:
        times.append(cost.flops / (flops_peak * 1e6) if flops_peak else math.nan)
    if times and not any(math.isnan(t) for t in times):
        out["sol_us"] = max(times)
        out["pct_of_sol"] = 100.0 * out["sol_us"] / us if us else None
    return out


def roofline(
    con: duckdb.DuckDBPyConnection,
    *,
    phase: str = "decode",
    rank: int | None = None,
    trace_id: int | None = None,
    top: int | None = None,
    peaks_file: Path | None = None,
) -> pl.DataFrame:
    """``report --by roofline``: per run, batch size and op shape, achieved TFLOP/s and GB/s against the device's
    peaks (eager calls, and CUDA-graph kernels whose shapes carry over unambiguously); unmodelled ops listed with
    the reason. Sorted by time per step within each (run, batch size); ``top`` keeps that many rows per group."""
    peaks = load_peaks(peaks_file)
    devices = run_devices(con, peaks)
    params = {"phase": phase, "rank": rank, "trace_id": trace_id}
    run_query(con, "sol_steps")  # the macros the sol_* queries below share (temporary, idempotent)
    eager = query_frame(con, "sol_op_calls", params)
    graph = query_frame(con, "sol_graph_step_groups", params)  # the graph steps, alike ones taken together
    rows = eager_rows(eager)
    if not graph.is_empty():
        source = (
            eager
            if rank is None and trace_id is None
            else query_frame(con, "sol_op_calls", {"phase": phase, "rank": None, "trace_id": None})
        )
        steps = query_frame(con, "sol_step_counts", params)
        counts = {(r["run_id"], r["phase"], r["batch_size"]): r["steps"] for r in steps.iter_rows(named=True)}
        rows += graph_rows(graph, source, counts)
    run_dtype = _run_dtypes(eager)
    for row in rows:
        if row.cost is None and not row.reason:
            _cost_row(row, run_dtype)
    records = [_metrics(row, devices.get((row.run_id, row.device_name))) for row in rows]
    frame = (
        pl.DataFrame(records, schema=_roofline_schema(), orient="row")
        if records
        else pl.DataFrame(schema=_roofline_schema())
    )
    frame = frame.sort(["run_id", "batch_size", "ms_per_step"], descending=[False, False, True], nulls_last=True)
    if top:
        frame = frame.filter(pl.int_range(pl.len()).over(["run_id", "batch_size"]) < top)
    return frame.with_columns(pl.col(c).round_sig_figs(6) for c, t in _roofline_schema().items() if t == pl.Float64)


def _roofline_schema() -> dict[str, Any]:
    floats = {
        "calls_per_step",
        "us_per_call",
        "ms_per_step",
        "gflop_per_call",
        "mb_per_call",
        "tflops",
        "gbps",
        "pct_peak_flops",
        "pct_peak_hbm",
        "intensity",
        "ridge",
        "sol_us",
        "pct_of_sol",
        "kernels_per_call",
    }
    return {
        c: (pl.Float64 if c in floats else pl.Int64 if c in ("batch_size", "calls", "steps") else pl.Utf8)
        for c in ROOFLINE_COLUMNS
    }
