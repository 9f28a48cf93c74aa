"""The generator's entry points: :func:`generate` (keywords) and :func:`write_traces` (a :class:`Config`)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from k25trace.synth.config import Config
from k25trace.synth.events import RankMeta
from k25trace.synth.kernels import CATEGORIES
from k25trace.synth.truth import FORMAT, kernel_categories, rank_entry, simulated_truth
from k25trace.synth.writer import count_core_events, write_rank


def generate(out_dir: str | os.PathLike[str], *, progress: bool = False, **options: Any) -> dict[str, Any]:
    """Write synthetic trace files (one per rank) + truth.json into ``out_dir``; return the truth dict.

    ``options`` are the fields of :class:`~k25trace.synth.config.Config` (ranks, batch_sizes, steps_per_batch,
    delays, clock_offsets_us, target_gz_mb, seed, ...: see there); an unknown keyword is a ``TypeError``,
    a bad value a :class:`~k25trace.synth.config.SynthError`. ``progress`` prints each rank's progress on stderr.
    """
    return write_traces(out_dir, Config(**options), progress=progress)


def _rank_metas(cfg: Config, offsets_ns: list[int], rng: random.Random) -> list[RankMeta]:
    metas = []
    for r in range(cfg.ranks):
        offset = offsets_ns[r] if r < len(offsets_ns) else 0
        load_age = int(rng.uniform(95, 140) * 1e9) + r * 37_000_000 + rng.randrange(1_000_000)
        metas.append(RankMeta(r, offset, cfg.base_epoch_ns + offset - load_age, 48211 + 97 * r))
    return metas


def _write_rank_job(args: tuple) -> dict[str, Any]:  # a top-level function: picklable for the process pool
    cfg, meta, out_dir, plan, core, progress = args
    return write_rank(cfg, meta, Path(out_dir), plan, core, progress)


def write_traces(out_dir: str | os.PathLike[str], cfg: Config, *, progress: bool = False) -> dict[str, Any]:
    """:func:`generate` for a ready :class:`Config`."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(f"meta-{cfg.seed}")  # clock offsets, base and export times, in this order
    offsets_ns = cfg.clock_offsets_ns(rng)
    metas = _rank_metas(cfg, offsets_ns, rng)
    t0 = time.perf_counter()
    steps, per_rank, collectives = simulated_truth(cfg, metas)
    sim_s = time.perf_counter() - t0
    last_true = max(p["annotation_end_ns"] - metas[r].offset_ns for r in range(cfg.ranks) for p in per_rank[r][-1:])
    for m in metas:  # file name time = export time on the rank's clock, after the last step
        m.export_ns = last_true + m.offset_ns + 2_000_000_000 + int(rng.uniform(0, 3e9))
    core = count_core_events(cfg)
    plan = [s["phase"] for s in steps]
    jobs = [(cfg, metas[r], str(out), plan, core, progress) for r in range(cfg.ranks)]
    t1 = time.perf_counter()
    if cfg.workers > 1:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(min(cfg.workers, cfg.ranks)) as pool:
            written = pool.map(_write_rank_job, jobs)
    else:
        written = [_write_rank_job(j) for j in jobs]
    write_s = time.perf_counter() - t1
    ranks = [rank_entry(m, w) for m, w in zip(metas, written, strict=True)]
    truth = {
        "format": FORMAT,
        "params": cfg.params(offsets_ns),
        "categories": list(CATEGORIES),
        "kernel_categories": kernel_categories(cfg),
        "ranks": ranks,
        "steps": steps,
        "per_rank_steps": per_rank,
        "collectives": collectives,
        "delays": [d.as_dict() for d in cfg.delays],
        "timing": {"simulate_seconds": round(sim_s, 3), "write_seconds": round(write_s, 3)},
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth
