"""One rank's trace file: the Kineto header, every simulated step, padding to a target size, the footer."""

from __future__ import annotations

import random
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from k25trace.synth.config import Config
from k25trace.synth.events import RankMeta, TraceWriter
from k25trace.synth.program import build_program, step_plan
from k25trace.synth.simulate import simulate

_PHASE_WEIGHT = {"empty": 0.1, "decode": 1.0, "prefill": 3.0}  # share of the padding per step, by phase


def kineto_header(cfg: Config, rank: int, base_ns: int) -> dict[str, Any]:
    """The top-level keys before ``traceEvents``, as vLLM's torch profiler writes them on N x H200."""
    dev = {
        "id": 0,
        "name": "NVIDIA H200",
        "totalGlobalMem": 150754820096,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    }
    all_ranks = list(range(cfg.ranks))
    pgs = [
        {
            "pg_name": "0",
            "pg_desc": "default_pg",
            "backend_config": "cuda:nccl",
            "pg_size": cfg.ranks,
            "ranks": all_ranks,
        },
        {
            "pg_name": "1",
            "pg_desc": "undefined",
            "backend_config": "cuda:nccl",
            "pg_size": cfg.ranks,
            "ranks": all_ranks,
        },
        {
            "pg_name": "2",
            "pg_desc": "undefined",
            "backend_config": "cpu:gloo,cuda:gloo",
            "pg_size": cfg.ranks,
            "ranks": all_ranks,
        },
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [dict(dev, id=i) for i in range(cfg.ranks)],
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": cfg.ranks,
            "pg_count": len(pgs),
            "pg_config": pgs,
            "nccl_version": "2.27.3",
        },
        "vllm_version": "0.28.1",
        "vllm_version_tuple": [0, 28, 1],
        "record_shapes": 1,
        "with_stack": 1,
        "trace_id": "%032X" % random.Random(f"tid-{cfg.seed}-{rank}").getrandbits(128),
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": base_ns,
    }


def _gz_len(cfg: Config, data: bytes) -> int:
    if not cfg.gzip:
        return len(data)
    from isal import isal_zlib

    c = isal_zlib.compressobj(cfg.compresslevel, isal_zlib.DEFLATED, 31)
    return len(c.compress(data)) + len(c.flush())


def _calibrate(cfg: Config, meta: RankMeta, tmp: Path) -> tuple[float, float]:
    """(gz bytes per padding event, gz bytes per core event), measured on rendered samples."""
    w = TraceWriter(replace(cfg, gzip=False), meta.rank, tmp, replace(meta))
    try:
        out: list[str] = []
        w.padding(20000, cfg.base_epoch_ns, cfg.base_epoch_ns + 20_000_000, 1, out, random.Random(1))
        g_pad = _gz_len(cfg, (",\n".join(out)).encode()) / len(out)
        g_core = 3.0 * g_pad
        for st in simulate(cfg):
            if st.prog.ops:
                w.step(st, 0, random.Random(2))
                break
    finally:
        w.raw.close()
    if w.n_events:
        g_core = _gz_len(cfg, tmp.read_bytes()) / w.n_events
    tmp.unlink()
    return g_pad, g_core


def count_core_events(cfg: Config) -> list[int]:
    """Events per step without padding (annotation, frames, runtime calls, cpu_ops, GPU activities, flows)."""
    counts = []
    for phase, req, tok in step_plan(cfg):
        prog = build_program(cfg, phase, req, tok)
        n_ops = len(prog.ops)
        n_l = len(prog.launches)
        n_flow_s = sum(1 for ln in prog.launches if ln.ops)
        n_cpuop = sum(1 for ln in prog.launches if ln.cpu_op)
        counts.append(3 + n_l + n_cpuop + n_ops * 2 + n_flow_s + (3 if n_ops else 0))
    return counts


def write_rank(
    cfg: Config, meta: RankMeta, out_dir: Path, plan: list[str], core_events_per_step: list[int], progress: bool
) -> dict[str, Any]:
    """Write rank ``meta.rank``'s file into ``out_dir``; ``plan`` is each step's phase. With ``target_gz_mb`` each
    step gets padding in proportion to its phase weight, so that the file ends near the target size."""
    t_start = time.perf_counter()
    rank = meta.rank
    suffix = ".pt.trace.json.gz" if cfg.gzip else ".pt.trace.json"
    fname = f"dp0_pp0_tp{rank}_dcp0_ep{rank}_rank{rank}.{meta.export_ns}{suffix}"
    path = out_dir / fname
    n_steps = len(plan)
    target = int(cfg.target_gz_mb * 1e6) if cfg.target_gz_mb else 0
    g_pad = g_core = 0.0
    if target:
        g_pad, g_core = _calibrate(cfg, meta, out_dir / f".synth-calib-{rank}.tmp")
    w = TraceWriter(cfg, rank, path, meta)
    w.header(kineto_header(cfg, rank, meta.base_ns))
    prng = random.Random(f"pad-{cfg.seed}-{rank}")
    weights = [_PHASE_WEIGHT[p] for p in plan]
    core_left = sum(core_events_per_step)
    for st in simulate(cfg):
        n_pad = 0
        i = st.index
        if target:
            budget = target - w.tell_gz() - core_left * g_core - 100
            wsum = sum(weights[i:])
            if budget > 0 and wsum > 0:
                n_pad = int(budget * weights[i] / wsum / g_pad)
        w.step(st, n_pad, prng)
        core_left -= core_events_per_step[i]
        if progress and i % 10 == 0:
            print(f"synth: rank {rank} step {i}/{n_steps} {w.bytes / 1e6:.0f} MB", file=sys.stderr, flush=True)
    w.footer(f"/tmp/synth_rank{rank}.json")
    size = path.stat().st_size
    return {
        "rank": rank,
        "file": fname,
        "events": w.n_events,
        "bytes": w.bytes,
        "gz_bytes": size if cfg.gzip else None,
        "seconds": round(time.perf_counter() - t_start, 3),
    }
