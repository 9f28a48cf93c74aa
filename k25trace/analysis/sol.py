"""Speed of light: each decode step against a model-aware lower bound (``report --by sol``, with
:mod:`k25trace.models`), and the entry points of the speed-of-light views.

The views are computed in pieces: device peaks in :mod:`.peaks`, per-op FLOPs and bytes from recorded shapes in
:mod:`.op_costs`, each op against the peaks (``report --by roofline``) in :mod:`.roofline`; their public names are
importable from here too. Printing them is :mod:`k25trace.render.sol`'s.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis.op_costs import OP_MODELS, OpContext, OpCost, Unmodelled, gemm_kn, op_cost, parse_dims
from k25trace.analysis.peaks import COMPUTE_PEAK, Peaks, load_peaks, match_peaks, read_peaks, run_devices
from k25trace.analysis.roofline import ROOFLINE_COLUMNS, carry_graph_kernels, roofline
from k25trace.db import query_frame, run_query
from k25trace.errors import K25Error

__all__ = [
    "COMPUTE_PEAK",
    "OP_MODELS",
    "ROOFLINE_COLUMNS",
    "SOL_COLUMNS",
    "SOL_PARTS",
    "OpContext",
    "OpCost",
    "Peaks",
    "Unmodelled",
    "carry_graph_kernels",
    "config_checks",
    "load_peaks",
    "match_peaks",
    "op_cost",
    "read_peaks",
    "roofline",
    "run_devices",
    "step_sol",
]

#: the observed categories each part of the bound is set against
SOL_PARTS = (
    ("weights", ("gemm", "marlin_gemm", "quant_gemm"), "GEMM kernels vs every weight byte this rank must read"),
    ("kv_cache", ("attention",), "attention kernels vs the KV cache read at --context"),
    ("allreduce", ("allreduce",), "all-reduce kernels vs the measured all-reduce floor (k25trace bench allreduce)"),
    (
        "other",
        (
            "norm",
            "rotary",
            "activation",
            "moe_routing",
            "sampling",
            "elementwise",
            "memcpy",
            "memset",
            "comm_other",
            "all2all",
            "quantize",
            "embedding",
            "other",
            "overlap",
        ),
        "everything else: not modelled (activations, all-to-all transfers, quantize casts and embedding lookups are "
        "left out)",
    ),
    ("idle", ("idle",), "GPU idle inside the step"),
)
SOL_COLUMNS = (
    "run_id",
    "batch_size",
    "tp",
    "part",
    "observed_ms",
    "exclusive_ms",
    "floor_ms",
    "ratio",
    "floor_gb",
    "floor_basis",
    "categories",
    "device",
    "steps",
)


def step_sol(
    con: duckdb.DuckDBPyConnection,
    *,
    model_config: Path | None,
    quant: str | None = None,
    context: int | None = None,
    phase: str = "decode",
    rank: int | None = None,
    trace_id: int | None = None,
    peaks_file: Path | None = None,
    notes: list[str] | None = None,
) -> pl.DataFrame:
    """``report --by sol``: per run and batch size, the observed ms per step of each part (GEMM kernels, attention,
    all-reduce, the rest, idle, the whole step) next to its floor from the model (:mod:`k25trace.models`) and the
    device's peaks, and the ratio observed / floor.

    The config is checked against what the trace shows (:func:`config_checks`); each disagreement is appended to
    ``notes`` and to the ``floor_basis`` of the run's step row, and every ratio below 1 says why it can be."""
    from k25trace import models
    from k25trace.analysis.report import allreduce_floor, breakdown

    cfg = models.load_config(model_config) if model_config is not None else models.stored_config(con)
    if cfg is None:
        raise K25Error(
            "report --by sol needs the model: --model-config config.json (the Hugging Face config of the "
            "model that was traced; or keep it with `k25trace load … --model-config`), and --context N "
            "for the KV cache"
        )
    plan = models.parse_quant(quant, cfg)
    peaks = load_peaks(peaks_file)
    devices = run_devices(con, peaks)
    world = {
        r["run_id"]: (r["world_size"] or 1, r["device_name"])
        for r in query_frame(con, "sol_devices").iter_rows(named=True)
    }
    frame = breakdown(con, by="batch", phase=phase, rank=rank, trace_id=trace_id)
    floors = {(r["run_id"], r["batch_size"]): r for r in allreduce_floor(con, phase).iter_rows(named=True)}
    run_query(con, "sol_steps")  # the macros of sol_op_calls (temporary, idempotent)
    ops = query_frame(con, "sol_op_calls", {"phase": phase, "rank": rank, "trace_id": trace_id})
    checks = config_checks(cfg, floors, ops, {run: tp for run, (tp, _) in world.items()})
    for run_id, problems in checks.items():
        for problem in problems:
            if notes is not None:
                notes.append(f"{run_id}: the model config does not match the trace: {problem}")
    rows: list[dict[str, Any]] = []
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        tp, device_name = world.get(run_id, (1, None))
        dev = devices.get((run_id, device_name))
        base = {
            "run_id": run_id,
            "batch_size": batch,
            "tp": tp,
            "device": dev.device if dev else None,
            "steps": first["steps"],
        }
        if batch is None:
            rows.append(
                {
                    **base,
                    "part": "step",
                    "observed_ms": first["step_ms"],
                    "floor_basis": "no batch size (inferred steps): no bound",
                }
            )
            continue
        bound = models.step_bound(cfg, plan, tp=tp, batch=int(batch), context=context)
        ar_ms, ar_basis = _allreduce_floor_ms(floors.get((run_id, batch)), tp, dev)
        by_cat = {r["category"]: r for r in group.iter_rows(named=True)}
        part_rows = _part_rows(base, by_cat, bound, dev, ar_ms, ar_basis)
        step = _step_row(base, first["step_ms"], bound, dev, ar_ms)
        step["floor_basis"] += f"; model {cfg.name}: {cfg.layers} layers, hidden {cfg.hidden}"
        if checks.get(run_id):
            step["floor_basis"] += "; CONFIG DOES NOT MATCH THE TRACE: " + "; ".join(checks[run_id])
        for row in (*part_rows, step):
            row["mismatch"] = "; ".join(checks.get(run_id, []))
        rows += [*part_rows, step]
    return _sol_frame(rows)


_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear")
_EXPERT_GEMM_OPS = ("aten::_grouped_mm", "_moe_C::moe_wna16_marlin_gemm")


def config_checks(
    cfg: Any, floors: dict[tuple[str, Any], dict[str, Any]], ops: pl.DataFrame, tp: dict[str, int]
) -> dict[str, list[str]]:
    """Per run: where the model config disagrees with what the trace shows, in words naming the config field and
    the trace's evidence (empty when nothing could be checked or everything agrees). Checked, per batch size:

    * all-reduces per step (TP > 1): a TP decoder runs 2 per layer (attention and MLP outputs), plus 1 for the
      vocab-parallel embedding: 2·num_hidden_layers or that + 1;
    * the all-reduce message (where recorded): batch × hidden_size elements of 2 or 4 bytes;
    * the recorded GEMM shapes (eager, ``record_shapes``): the most frequent K of the 2-D GEMMs is the hidden size
      (q/kv/qkv, gate/up, router and lm_head all read the hidden state), the router GEMM [T, hidden] × [hidden,
      experts] runs once per MoE layer, the expert GEMMs (``_grouped_mm``, Marlin MoE) twice per MoE layer.
    """
    out: dict[str, list[str]] = defaultdict(list)

    def say(run: str, problem: str) -> None:
        if problem not in out[run]:
            out[run].append(problem)

    L, H, moe_layers = cfg.layers, cfg.hidden, len(cfg.moe_layers)
    for (run, batch), r in sorted(floors.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        count = r.get("allreduce_per_step")
        if tp.get(run, 1) > 1 and count and batch is not None:
            n = round(count)
            if n not in (2 * L, 2 * L + 1):
                say(
                    run,
                    f"the trace runs {count:g} all-reduces per step (2 per layer, +1 for the "
                    f"embedding: {n // 2} layers), the config num_hidden_layers {L} needs {2 * L} or {2 * L + 1}",
                )
            size = r.get("msg_bytes")
            if size and batch and size % batch == 0 and size // batch not in (2 * H, 4 * H):
                per = size // batch
                say(
                    run,
                    f"its all-reduce messages are {size:,} B at batch {batch} ({per:,} B per token: hidden "
                    f"{per // 2:,} in 16 bits), the config hidden_size is {H:,}",
                )
    if ops.is_empty():
        return dict(out)
    for (run, batch), group in ops.group_by(["run_id", "batch_size"], maintain_order=True):
        steps = group["steps"][0] or 0
        if batch is None or not steps:
            continue
        ks: Counter[int] = Counter()
        router = expert = 0.0
        for r in group.iter_rows(named=True):
            per_step = r["calls"] / steps
            if r["op"] in _EXPERT_GEMM_OPS:
                expert += per_step
                continue
            kn = gemm_kn(r["op"], parse_dims(r["input_dims"])) if r["op"] in _GEMM_OPS else None
            if kn is None:
                continue
            ks[kn[0]] += per_step
            if cfg.experts and kn == (H, cfg.experts):
                router += per_step
        if ks:
            k_mode, _ = ks.most_common(1)[0]
            if k_mode != H:
                say(
                    run,
                    f"the most frequent K of its GEMMs is {k_mode:,} (the hidden size every projection reads), "
                    f"the config hidden_size is {H:,}",
                )
        if router and round(router) != moe_layers:
            say(
                run,
                f"its router GEMM ([tokens, {H}] x [{H}, {cfg.experts}]) runs {router:g} times per step (once "
                f"per MoE layer), the config has {moe_layers} MoE layers (num_hidden_layers {L})",
            )
        if expert and round(expert) != 2 * moe_layers:
            say(
                run,
                f"it runs {expert:g} expert GEMMs per step (2 per MoE layer: {round(expert) // 2} layers), the "
                f"config has {moe_layers} MoE layers (num_hidden_layers {L}"
                + (", no experts)" if not cfg.experts else ")"),
            )
    return dict(out)


def _allreduce_floor_ms(ar: dict[str, Any] | None, tp: int, dev: Peaks | None) -> tuple[float | None, str]:
    """The all-reduce floor of one step (ms) and how it was found: the bench's kernel (else wall) time when
    ``k25trace bench allreduce`` measured it, else the bus-bandwidth term alone from the device's link peak."""
    ar_ms, ar_basis = None, "not measured: run `k25trace bench allreduce --db` (report --by floor)"
    if tp > 1 and ar:
        ar_ms = ar["floor_kernel_ms"] if ar["floor_kernel_ms"] is not None else ar["floor_ms"]
        if ar_ms is not None:
            ar_basis = f"bench {ar['floor_mode']} burst, {ar['floor_basis']} time x {ar['allreduce_per_step']} per step"
        elif ar["msg_bytes"] and ar["allreduce_per_step"] and dev and (link := dev.peak("interconnect_gbps")):
            # no bench: the bus-bandwidth term alone (2(n-1)/n of each message over each link direction)
            ar_ms = ar["allreduce_per_step"] * ar["msg_bytes"] * 2 * (tp - 1) / tp / (link * 1e9) * 1e3
            ar_basis = (
                f"bandwidth only: {ar['allreduce_per_step']:g} x {ar['msg_bytes']:,} B x 2(n-1)/n at "
                f"{link:g} GB/s per direction ({dev.interconnect}); latency not counted — `k25trace bench "
                "allreduce` measures the real floor"
            )
    return ar_ms, ar_basis


def _device_peaks(dev: Peaks | None, compute: str) -> tuple[float | None, float | None]:
    """The device's HBM GB/s and its TFLOP/s for the GEMMs' compute type (None: unknown device)."""
    if not dev:
        return None, None
    return dev.peak("hbm_gbps"), dev.peak(COMPUTE_PEAK.get(compute, "bf16_tflops"))


def _floor_ms(nbytes: float, flops: float, hbm: float | None, peak: float | None) -> float | None:
    """The time (ms) to read ``nbytes`` at the HBM peak, or to do ``flops`` at the compute peak if that is longer."""
    if not hbm:
        return None
    t = nbytes / (hbm * 1e9)
    if peak:
        t = max(t, flops / (peak * 1e12))
    return t * 1e3


def _part_rows(
    base: dict[str, Any],
    by_cat: dict[str, dict[str, Any]],
    bound: Any,
    dev: Peaks | None,
    ar_ms: float | None,
    ar_basis: str,
) -> list[dict[str, Any]]:
    """One row per part of SOL_PARTS: its observed and exclusive ms per step and its floor."""
    hbm, peak = _device_peaks(dev, bound.compute)
    tp = base["tp"]
    kv = bound.part("kv_cache")
    weights_b = bound.weight_bytes
    weights_f = bound.total_flops - (kv.flops if kv else 0.0)
    rows = []
    for part, cats, _ in SOL_PARTS:
        observed = sum((by_cat[c]["kernel_ms_per_step"] or 0.0) for c in cats if c in by_cat and c != "idle")
        exclusive = sum((by_cat[c]["ms_per_step"] or 0.0) for c in cats if c in by_cat)
        row = {
            **base,
            "part": part,
            "categories": ",".join(c for c in cats if c in by_cat) or None,
            "observed_ms": observed if part != "idle" else exclusive,
            "exclusive_ms": exclusive,
        }
        if part == "weights":
            row.update(
                floor_ms=_floor_ms(weights_b, weights_f, hbm, peak),
                floor_gb=weights_b / 1e9,
                floor_basis=_weights_basis(bound),
            )
        elif part == "kv_cache":
            if kv is None:
                row["floor_basis"] = "give --context N (tokens per request) to bound the KV-cache read"
            else:
                row.update(
                    floor_ms=_floor_ms(kv.bytes, kv.flops, hbm, peak), floor_gb=kv.bytes / 1e9, floor_basis=kv.detail
                )
        elif part == "allreduce":
            if tp == 1:
                row["floor_basis"] = "TP 1: no all-reduce"
            else:
                row.update(floor_ms=ar_ms, floor_basis=ar_basis)
        elif part == "idle":
            row.update(floor_ms=0.0, floor_basis="a step at its bound keeps the GPU busy")
        else:
            row["floor_basis"] = (
                "not modelled: activations, routing, all-to-all, quantize, embedding and elementwise work are left out"
            )
        rows.append(row)
    return rows


def _step_row(
    base: dict[str, Any], step_ms: float, bound: Any, dev: Peaks | None, ar_ms: float | None
) -> dict[str, Any]:
    """The whole step: observed wall time against the bound of every byte and FLOP plus the all-reduce floor."""
    hbm, peak = _device_peaks(dev, bound.compute)
    hbm_floor = _floor_ms(bound.total_bytes, bound.total_flops, hbm, peak)
    step_floor = None if hbm_floor is None else hbm_floor + (ar_ms or 0.0)
    missing = [
        w
        for w, gone in (
            ("the KV cache (--context)", bound.part("kv_cache") is None),
            ("the all-reduce (not measured)", base["tp"] > 1 and ar_ms is None),
        )
        if gone
    ]
    return {
        **base,
        "part": "step",
        "categories": "all",
        "observed_ms": step_ms,
        "exclusive_ms": step_ms,
        "floor_ms": step_floor,
        "floor_gb": bound.total_bytes / 1e9,
        "floor_basis": (
            f"max(bytes / {hbm:g} GB/s, FLOPs / {peak:g} TFLOP/s {bound.compute})"
            if hbm and peak
            else "no device peaks: give --peaks FILE"
        )
        + (" + all-reduce floor" if ar_ms else "")
        + (f"; without {' and '.join(missing)}" if missing else "")
        + f"; {bound.plan}",
    }


def _sol_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows as the ``report --by sol`` frame (SOL_COLUMNS), with observed / floor where both are known."""
    for row in rows:
        if row.get("floor_ms") and row.get("observed_ms"):
            row["ratio"] = row["observed_ms"] / row["floor_ms"]
            if row["ratio"] < 1:
                row["floor_basis"] = (row.get("floor_basis") or "") + "; RATIO BELOW 1: " + _below_one(row)
        elif row.get("floor_ms") and row["part"] == "kv_cache":
            row["floor_basis"] += (
                "; no attention kernels in these steps (attention done by GEMM kernels is counted "
                "under weights: see report --by roofline)"
            )
    schema = {
        c: (
            pl.Utf8
            if c in ("run_id", "part", "floor_basis", "categories", "device")
            else pl.Int64
            if c in ("batch_size", "tp", "steps")
            else pl.Float64
        )
        for c in SOL_COLUMNS
    }
    out = pl.DataFrame([{c: r.get(c) for c in SOL_COLUMNS} for r in rows], schema=schema, orient="row")
    return out.with_columns(pl.col(c).round_sig_figs(6) for c, t in schema.items() if t == pl.Float64)


def _below_one(row: dict[str, Any]) -> str:
    """Why an observed time below its floor can be: the floor is a lower bound only for the traced model."""
    if row.get("mismatch"):
        return "the model config does not match the trace (above), so this floor is not the traced model's"
    why = {
        "weights": "the GEMM kernels read less than the bound counts: a router that favours some experts hits fewer "
        "than the uniform expectation, or weights are read by kernels of other categories, or the "
        "config/--quant is not the traced model's",
        "kv_cache": "the attention kernels read less than --context tokens per request: the requests' KV caches "
        "are shorter than --context",
        "allreduce": "the all-reduce kernels took less than the bench's kernel time per op: the bench ran other "
        "sizes, ranks or links than the trace",
    }.get(row["part"], "the config, --quant, --context or the device peaks are not the traced run's")
    return why


def _weights_basis(bound: Any) -> str:
    names = {
        "attention": "attention",
        "dense_mlp": "dense MLP",
        "shared_experts": "shared experts",
        "routed_experts": "routed experts",
        "router": "router",
        "lm_head": "lm_head+norms",
        "embedding": "embedding rows",
    }
    pieces = [f"{names[p.name]} {p.bytes / 1e9:.3f} GB" for p in bound.parts if p.name in names]
    return "; ".join(pieces) + (f"; {bound.experts_hit:.1f} experts hit per layer" if bound.experts_hit else "")
