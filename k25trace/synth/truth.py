"""Ground truth: what the written files must show, computed from the simulation (never from the files).

See the package docstring for the truth.json schema. Times are integer ns: ``*_true_ns`` on the offset-free
global clock, the others as each rank records them (true time + that rank's clock offset).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from k25trace.synth.config import Config, Delay, as_delay
from k25trace.synth.events import RankMeta
from k25trace.synth.kernels import CATEGORIES, KERNEL_CATEGORY
from k25trace.synth.program import AUX, D2H, MAIN, STREAM_IDS, Program
from k25trace.synth.simulate import StepSim, simulate

FORMAT = "k25trace-synth-truth/1"
_MARKER = re.compile(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)")


def simulated_truth(cfg: Config, metas: Sequence[RankMeta]) -> tuple[list, list, list]:
    """(steps, per_rank_steps, collectives) of truth.json, from one pass over the simulation."""
    steps: list[dict[str, Any]] = []
    per_rank: list[list[dict[str, Any]]] = [[] for _ in range(cfg.ranks)]
    collectives: list[dict[str, Any]] = []
    delays = tuple(as_delay(d) for d in cfg.delays)  # Delay items already (Config normalises them)
    for st in simulate(cfg):
        steps.append(_step(st.index, st.prog))
        for r in range(cfg.ranks):
            per_rank[r].append(_rank_step(st, r, metas[r].offset_ns))
        collectives.extend(_collectives(st, delays, cfg.ranks))
    return steps, per_rank, collectives


def _step(index: int, prog: Program) -> dict[str, Any]:
    graph_launches = sum(1 for ln in prog.launches if ln.name == "cudaGraphLaunch")
    phase = prog.phase
    if phase != "empty":
        m = _MARKER.match(prog.name)
        assert m
        ctx_reqs, ctx_tokens, gen_reqs, gen_tokens = map(int, m.groups())
    else:
        ctx_reqs = ctx_tokens = gen_reqs = gen_tokens = 0
    return {
        "index": index,
        "name": prog.name,
        "phase": phase,
        "batch_size": gen_reqs if phase == "decode" else ctx_reqs,
        "requests": ctx_reqs + gen_reqs,
        "tokens": ctx_tokens + gen_tokens,
        "ctx_reqs": ctx_reqs,
        "ctx_tokens": ctx_tokens,
        "gen_reqs": gen_reqs,
        "gen_tokens": gen_tokens,
        "graph": None if not graph_launches else ("FULL" if graph_launches == 1 else "PIECEWISE"),
        "graph_launches": graph_launches,
        "n_collectives": sum(1 for o in prog.ops if o.coll),
    }


def _rank_step(st: StepSim, r: int, offset_ns: int) -> dict[str, Any]:
    """One rank's view of one step: GPU span and busy time, time per category, annotation span (recorded ns)."""
    cats = {c: {"ns": 0, "count": 0} for c in CATEGORIES}
    intervals = []
    kernel_count = 0
    for j, op in enumerate(st.prog.ops):
        s, d = st.start[r][j], st.dur[r][j]
        c = cats[KERNEL_CATEGORY[op.name]]
        c["ns"] += d
        c["count"] += 1
        kernel_count += op.kind == "kernel"
        intervals.append((s, s + d))
    gpu_start = min(s for s, _ in intervals) if intervals else None
    gpu_end = max(e for _, e in intervals) if intervals else None
    return {
        "gpu_start_ns": None if gpu_start is None else gpu_start + offset_ns,
        "gpu_end_ns": None if gpu_end is None else gpu_end + offset_ns,
        "kernel_count": kernel_count,
        "categories": cats,
        "busy_ns": union_length(intervals),
        "annotation_start_ns": st.ann_start[r] + offset_ns,
        "annotation_end_ns": st.ann_end[r] + offset_ns,
    }


def union_length(intervals: list[tuple[int, int]]) -> int:
    """Total length of the union of ``[start, end)`` intervals."""
    if not intervals:
        return 0
    ivs = sorted(intervals)
    busy = 0
    cur_start, cur_end = ivs[0]
    for s, e in ivs[1:]:
        if s > cur_end:
            busy += cur_end - cur_start
            cur_start, cur_end = s, e
        elif e > cur_end:
            cur_end = e
    return busy + cur_end - cur_start


def _collectives(st: StepSim, delays: Sequence[Delay], ranks: int) -> list[dict[str, Any]]:
    """The step's collectives in launch order: arrivals, waits, the late rank, the injected delays."""
    out = []
    k = 0
    k_cat = {"allreduce": 0, "comm_other": 0}
    for j, op in enumerate(st.prog.ops):
        if not op.coll:
            continue
        ends = {st.start[r][j] + st.dur[r][j] for r in range(ranks)}
        assert len(ends) == 1
        end = ends.pop()
        arrivals = [st.start[r][j] for r in range(ranks)]
        late = max(range(ranks), key=lambda r: arrivals[r])
        injected = [0] * ranks
        for d in delays:
            if d.applies(st.index, k):
                injected[d.rank] += d.delay_ns
        out.append(
            {
                "step": st.index,
                "k": k,
                "category": op.coll,
                "k_cat": k_cat[op.coll],
                "name": op.name,
                "transfer_ns": end - max(arrivals),
                "wait_ns": [max(arrivals) - a for a in arrivals],
                "late_rank": late,
                "end_true_ns": end,
                "delay_ns": injected,
            }
        )
        k_cat[op.coll] += 1
        k += 1
    return out


def rank_entry(meta: RankMeta, written: dict[str, Any]) -> dict[str, Any]:
    """truth.json ``ranks[r]``: the rank's identity and clock, and what ``write_rank`` reported."""
    return {
        "rank": meta.rank,
        "file": written["file"],
        "base_time_ns": meta.base_ns,
        "clock_offset_ns": meta.offset_ns,
        "pid": meta.pid,
        "tid": meta.pid,
        "device": meta.rank,
        "streams": {"main": STREAM_IDS[MAIN], "aux": STREAM_IDS[AUX], "d2h": STREAM_IDS[D2H]},
        "events": written["events"],
        "bytes": written["bytes"],
        "gz_bytes": written["gz_bytes"],
        "write_seconds": written["seconds"],
    }


def kernel_categories(cfg: Config) -> dict[str, str]:
    """Every GPU activity name the files hold -> its category (renamed kernels under their new names)."""
    out = dict(KERNEL_CATEGORY)
    for old, new in (cfg.kernel_rename or {}).items():
        out[new] = out.pop(old)
    return out
