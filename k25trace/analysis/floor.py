"""The all-reduce floor: what to measure and what the measurements come to (``k25trace bench allreduce``).

For exactly the message sizes of a loaded trace (or given ones) the bench (:mod:`k25trace.analysis.floor_bench`:
torch.distributed + NCCL, one process per GPU, or gloo on CPUs) measures per size:

* ``single``: one all-reduce at a time (ranks aligned by a tiny all-reduce before each), median and p90 over
  ``--iters`` repetitions after ``--warmup``; per repetition the slowest rank's time counts.
* ``eager``: a burst of ``count`` back-to-back all-reduces (one decode step's worth), ``--bursts`` times.
* ``graph`` (CUDA only): the same burst captured once in a CUDA graph and replayed.

This module holds the rest: the options' parsing and bounds, the sizes to measure (:func:`bench_specs`), the memory
check, :func:`combine` (bus bandwidth = algbw x 2(n-1)/n, algbw = bytes / per-op time) and the result rows in the
table ``allreduce_bench`` (``queries/schema.sql``), which ``report --by floor``
(:func:`k25trace.analysis.report.allreduce_floor`) joins with the observed all-reduce time of the decode steps.

The functions raise :class:`~k25trace.errors.K25Error` and print nothing; the command is :mod:`k25trace.bench_cli`.
Nothing of the core imports the bench (the CLI's lazy command table does). The database side (DuckDB, polars) and
torch are imported inside the functions that need them: ``bench allreduce --save-json`` runs on GPU machines that
have torch and click and no DuckDB.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
from pathlib import Path
from typing import Any

from k25trace.errors import K25Error
from k25trace.stats import quantile

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}
DTYPE_CANON = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


MAX_MESSAGE = 1 << 30
"""The largest all-reduce message benched (1 GiB): a decode step's all-reduces carry batch x hidden activations
(Kimi-K2 at batch 64: 896 KiB); every rank also holds each size's tensor at once (and NCCL its buffers)."""
MAX_COUNT = 100_000
"""The most all-reduces per burst (a 61-layer decode step runs 123)."""
MAX_HIDDEN = 1 << 17
MAX_BATCH = 1 << 20
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_ITERS = 100_000
"""The most single all-reduces timed per size (the default 200 already gives a stable median)."""
MAX_WARMUP = 100_000
MAX_BURSTS = 10_000
"""The most bursts timed per size and mode (each burst runs --count all-reduces)."""


def parse_size(text: str) -> int:
    """'14336', '14K' (KiB), '1.5M' (MiB), '2G' -> bytes; a K25Error naming the value and the bound (1 byte to
    :data:`MAX_MESSAGE`)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = 1
    if t and t[-1] in "KMG":
        mult = {"K": 1024, "M": 1024**2, "G": 1024**3}[t[-1]]
        t = t[:-1]
    try:
        value = float(t) * mult
    except (ValueError, OverflowError):
        value = 0.0
    if not math.isfinite(value) or value <= 0 or value != int(value):
        raise K25Error(f"{text!r} is not a positive whole number of bytes")
    if value > MAX_MESSAGE:
        raise K25Error(
            f"{text!r} is more than {MAX_MESSAGE:,} bytes (1 GiB): the largest message benched (a decode "
            "step's all-reduces are KiB to MiB)"
        )
    return int(value)


def parse_batch_sizes(text: str) -> list[int]:
    """``--batch-sizes``: comma-separated whole numbers from 1 to :data:`MAX_BATCH`."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if not item.isdigit() or not 1 <= int(item) <= MAX_BATCH:
            raise K25Error(
                f"--batch-sizes {text!r}: {item!r} is not a batch size (a whole number from 1 to {MAX_BATCH:,})"
            )
        out.append(int(item))
    if not out:
        raise K25Error(f"--batch-sizes {text!r}: give at least one batch size")
    return out


def import_torch() -> Any:
    """torch, or a K25Error that says how to install it (the bench needs torch.distributed)."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as exc:
        raise K25Error(
            f"bench allreduce needs PyTorch (torch.distributed), which is not installed here "
            f"({exc}): pip install torch (see https://pytorch.org for a CUDA build)"
        ) from None
    return torch


# ------------------------------------------------------------------------------------------------ the pattern


def pattern_from_db(con: Any, *, phase: str, hidden: int, dtype: str) -> list[dict[str, Any]]:
    """Per batch size of the database's steps: the all-reduce count per step and message size (bytes)."""
    from k25trace.db import query_frame  # deferred: DuckDB only where a database is used (see the module doc)

    rows = query_frame(con, "allreduce_pattern", {"phase": phase}).to_dicts()
    out = []
    for r in rows:
        if not r["allreduce_per_step"]:
            continue
        if r["size_bytes"]:
            size, source = int(r["size_bytes"]), "trace"
        else:
            size, source = hidden * int(r["batch_size"]) * DTYPE_BYTES[dtype], "hidden"
        out.append(
            {
                "batch_size": int(r["batch_size"]),
                "count": int(r["allreduce_per_step"]),
                "size_bytes": size,
                "size_source": source,
                "world_size": r["world_size"],
            }
        )
    return out


def resolve_backend(backend: str, world_size: int | None) -> tuple[str, int]:
    """The backend and world size to measure with: ``auto`` is NCCL when CUDA is there, else gloo; the world size
    defaults to every local GPU (gloo: 2 processes)."""
    torch = import_torch()  # deferred: torch only when a bench runs (see the module doc)

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend != "nccl":
        return backend, world_size or 2
    if not torch.cuda.is_available():
        raise K25Error("--backend nccl needs CUDA GPUs; use --backend gloo --world-size N on CPUs")
    world_size = world_size or torch.cuda.device_count()
    if world_size > torch.cuda.device_count():
        raise K25Error(f"--world-size {world_size} > {torch.cuda.device_count()} local GPUs")
    return backend, world_size


def bench_specs(
    con: Any,
    *,
    sizes: str | None,
    count: int | None,
    batch_sizes: str,
    hidden: int,
    dtype: str,
    phase: str,
    world_size: int,
    source: str = "the database",
    notes: list[str] | None = None,
) -> list[dict[str, Any]]:
    """What to measure: the given ``sizes`` (comma-separated, K/M/G suffixes) x ``count``; else the all-reduce
    pattern of ``con``'s ``phase`` steps (each distinct size and count once); else hidden x batch x dtype for each
    of ``batch_sizes``. Without ``count``, 122 all-reduces per burst (the database's count when it has one).
    ``notes`` receives what the caller should say (a trace that ran on another number of ranks)."""
    if sizes:
        try:
            given = [
                {"size_bytes": parse_size(s), "count": count or 122, "size_source": "given"}
                for s in sizes.split(",")
                if s.strip()
            ]
        except K25Error as exc:
            raise K25Error(f"--sizes {exc}") from None
        if not given:
            raise K25Error(f"--sizes {sizes!r}: give at least one size")
        return given
    if con is None:
        specs: list[dict[str, Any]] = [
            {
                "size_bytes": hidden * b * DTYPE_BYTES[dtype],
                "count": count or 122,
                "batch_size": b,
                "size_source": "hidden",
            }
            for b in parse_batch_sizes(batch_sizes)
        ]
        for s in specs:
            if s["size_bytes"] > MAX_MESSAGE:
                raise K25Error(
                    f"--hidden {hidden} x batch {s['batch_size']} x {dtype} is {s['size_bytes']:,} bytes, "
                    f"more than the {MAX_MESSAGE:,} (1 GiB) benched at most"
                )
        return specs
    specs = pattern_from_db(con, phase=phase, hidden=hidden, dtype=dtype)
    if not specs:
        raise K25Error(f"{source}: no {phase} steps with all-reduces; give --sizes and --count")
    for s in specs:
        if count:
            s["count"] = count
        if s.get("world_size") and s["world_size"] != world_size:
            if notes is not None:
                notes.append(f"note: the trace ran on {s['world_size']} ranks, this bench on {world_size}")
    distinct: dict[tuple[int, int], dict[str, Any]] = {}
    for s in specs:
        distinct.setdefault((s["size_bytes"], s["count"]), s)
    return list(distinct.values())


def check_memory(specs: list[dict[str, Any]], *, backend: str, world_size: int) -> None:
    """Refuse sizes the ranks cannot hold: every rank keeps one tensor per size for the whole run (plus NCCL's or
    gloo's buffers); NCCL: their sum must fit in half the smallest GPU's memory; gloo: world size x 3 x the sum (the
    tensor and the ring's buffers) in half the machine's memory."""
    need = sum(s["size_bytes"] for s in specs)
    if backend == "nccl":
        torch = import_torch()
        have = min(torch.cuda.get_device_properties(i).total_memory for i in range(world_size))
        where, budget, total = f"half the memory of one GPU ({have / 2**30:.1f} GiB)", have // 2, need
    else:
        try:
            have = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return
        where, budget, total = f"half this machine's memory ({have / 2**30:.1f} GiB)", have // 2, need * 3 * world_size
    if total > budget:
        raise K25Error(
            f"--sizes: {len(specs)} size(s) totalling {need:,} bytes need {total / 2**30:.2f} GiB "
            f"({'per GPU' if backend == 'nccl' else f'{world_size} processes x 3 buffers'}), more than "
            f"{where}: bench fewer or smaller sizes"
        )


def combine(
    outs: list[dict[str, Any]],
    sizes: list[dict[str, Any]],
    *,
    backend: str,
    world_size: int,
    dtype: str,
    bench_run: str,
    measured_at: Any,
) -> list[dict[str, Any]]:
    """Per size and mode, per repetition the slowest rank; then median/p90 and bandwidths."""
    rows = []
    factor = 2 * (world_size - 1) / world_size
    for i, spec in enumerate(sizes):
        for mode in ("single", "eager", "graph"):
            per_rank = [o["results"][i].get(mode) for o in outs]
            if any(v is None for v in per_rank):
                continue
            reps = [max(vals) for vals in zip(*per_rank, strict=True)]  # every rank timed the same repetitions
            n = 1 if mode == "single" else spec["count"]
            med, p90 = quantile(reps, 0.5) / n, quantile(reps, 0.9) / n
            algbw = spec["size_bytes"] / (med * 1e-6) / 1e9 if med > 0 else None
            # kernel durations: per kernel position the rank that arrived last (the shortest kernel: the others'
            # include waiting for it), so the figure is the transfer alone
            per_rank_k = [o["results"][i].get(f"{mode}_kernel") for o in outs]
            # strict=False: each rank's list is what its profiler recorded, not guaranteed to be as long
            kern = [min(v) for v in zip(*per_rank_k, strict=False)] if all(per_rank_k) else []
            rows.append(
                {
                    "bench_run": bench_run,
                    "measured_at": measured_at,
                    "backend": backend,
                    "world_size": world_size,
                    "device_name": outs[0]["device_name"],
                    "torch_version": outs[0]["torch_version"],
                    "dtype": dtype,
                    "size_bytes": spec["size_bytes"],
                    "batch_size": spec.get("batch_size"),
                    "size_source": spec.get("size_source", "given"),
                    "mode": mode,
                    "count": n,
                    "reps": len(reps),
                    "median_us": med,
                    "p90_us": p90,
                    "burst_ms": None if mode == "single" else quantile(reps, 0.5) / 1e3,
                    "algbw_gbps": algbw,
                    "busbw_gbps": None if algbw is None else algbw * factor,
                    "kernel_median_us": quantile(kern, 0.5) if kern else None,
                    "kernel_p90_us": quantile(kern, 0.9) if kern else None,
                }
            )
    return rows


# ------------------------------------------------------------------------------------------------ database


COLUMNS = (
    "bench_run",
    "measured_at",
    "backend",
    "world_size",
    "device_name",
    "torch_version",
    "dtype",
    "size_bytes",
    "batch_size",
    "size_source",
    "mode",
    "count",
    "reps",
    "median_us",
    "p90_us",
    "burst_ms",
    "algbw_gbps",
    "busbw_gbps",
    "kernel_median_us",
    "kernel_p90_us",
)
"""The columns of ``allreduce_bench`` (``queries/schema.sql``) that a result row carries."""


def write_rows(con: Any, rows: list[dict[str, Any]]) -> None:
    """Add result rows to ``allreduce_bench``, by column name (``queries/floor_bench_insert.sql``), in one
    transaction."""
    from k25trace.db import run_query, transaction  # deferred: DuckDB only where a database is used

    with transaction(con):
        for row in rows:
            run_query(con, "floor_bench_insert", {c: row.get(c) for c in COLUMNS})


def has_bench_run(con: Any, bench_run: str) -> bool:
    """Whether the database already holds rows of the bench run named ``bench_run``."""
    from k25trace.db import query_frame  # deferred: DuckDB only where a database is used

    return bool(query_frame(con, "floor_bench_run_rows", {"bench_run": bench_run})["rows"][0])


def save_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write result rows as JSON ({"allreduce_bench": [...]}), atomically (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"allreduce_bench": rows}, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows saved by ``save_rows``; a clear error naming the file and what is wrong with it."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise K25Error(f"{path}: cannot read bench results: {exc}") from None
    rows = doc.get("allreduce_bench") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise K25Error(f"{path}: no 'allreduce_bench' rows (not a file of `bench allreduce --save-json`)")
    required = {
        "bench_run",
        "measured_at",
        "backend",
        "world_size",
        "dtype",
        "size_bytes",
        "mode",
        "count",
        "reps",
        "median_us",
        "p90_us",
    }
    out = []
    for i, r in enumerate(rows):
        missing = sorted(required - set(r)) if isinstance(r, dict) else sorted(required)
        if missing:
            raise K25Error(f"{path}: row {i} lacks {', '.join(missing)}")
        row = {c: r.get(c) for c in COLUMNS}
        row["measured_at"] = _dt.datetime.fromisoformat(str(r["measured_at"]))
        out.append(row)
    return out
