"""``k25trace bench``: measure floors on the local machine. ``bench allreduce``: the all-reduce floor.

For exactly the message sizes of a loaded trace (or given ones), on all local GPUs (torch.distributed + NCCL, one
process per GPU, started here) or on CPUs (``--backend gloo --world-size N``), measure per size:

* ``single``: one all-reduce at a time (ranks aligned by a tiny all-reduce before each), median and p90 over
  ``--iters`` repetitions after ``--warmup``; per repetition the slowest rank's time counts.
* ``eager``: a burst of ``count`` back-to-back all-reduces (one decode step's worth), ``--bursts`` times.
* ``graph`` (CUDA only): the same burst captured once in a CUDA graph and replayed.

Bus bandwidth = algbw x 2(n-1)/n, algbw = bytes / per-op time. Results go to stdout (a table) and, with ``--db``,
into the table ``allreduce_bench`` (``queries/schema.sql``), which ``report --by floor``
(:func:`k25trace.analysis.report.allreduce_floor`) joins with the observed all-reduce time of the decode steps.
``--profile DIR`` also writes a torch.profiler trace of a few bursts per size
(``allreduce_bench_rank{r}.<ns>.pt.trace.json.gz``) that ``k25trace load`` reads.

The library functions raise :class:`~k25trace.errors.K25Error`; the click commands at the end are thin. Nothing
of the core imports this module (the CLI's lazy command table does). The database side (DuckDB, polars) and torch
are imported inside the functions that need them: ``bench allreduce --save-json`` runs on GPU machines that have
torch and click and no DuckDB.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import socket
import sys
from pathlib import Path
from typing import Any

import click

from k25trace.errors import K25Error
from k25trace.stats import quantile
from k25trace.vocab import FORMATS, PHASES

DTYPE_BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "half": 2, "float32": 4, "fp32": 4, "float": 4}
DTYPE_CANON = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}


def _log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


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
        raise K25Error(f"{text!r} is more than {MAX_MESSAGE:,} bytes (1 GiB): the largest message benched (a decode "
                       "step's all-reduces are KiB to MiB)")
    return int(value)


def parse_batch_sizes(text: str) -> list[int]:
    """``--batch-sizes``: comma-separated whole numbers from 1 to :data:`MAX_BATCH`."""
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if not item.isdigit() or not 1 <= int(item) <= MAX_BATCH:
            raise K25Error(f"--batch-sizes {text!r}: {item!r} is not a batch size (a whole number from 1 to "
                           f"{MAX_BATCH:,})")
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
        raise K25Error(f"bench allreduce needs PyTorch (torch.distributed), which is not installed here "
                       f"({exc}): pip install torch (see https://pytorch.org for a CUDA build)") from None
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
        out.append({"batch_size": int(r["batch_size"]), "count": int(r["allreduce_per_step"]), "size_bytes": size,
                    "size_source": source, "world_size": r["world_size"]})
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


def bench_specs(con: Any, *, sizes: str | None, count: int | None, batch_sizes: str, hidden: int, dtype: str,
                phase: str, world_size: int, source: str = "the database") -> list[dict[str, Any]]:
    """What to measure: the given ``sizes`` (comma-separated, K/M/G suffixes) x ``count``; else the all-reduce
    pattern of ``con``'s ``phase`` steps (each distinct size and count once); else hidden x batch x dtype for each
    of ``batch_sizes``. Without ``count``, 122 all-reduces per burst (the database's count when it has one)."""
    if sizes:
        try:
            given = [{"size_bytes": parse_size(s), "count": count or 122, "size_source": "given"}
                     for s in sizes.split(",") if s.strip()]
        except K25Error as exc:
            raise K25Error(f"--sizes {exc}") from None
        if not given:
            raise K25Error(f"--sizes {sizes!r}: give at least one size")
        return given
    if con is None:
        specs = [{"size_bytes": hidden * b * DTYPE_BYTES[dtype], "count": count or 122, "batch_size": b,
                  "size_source": "hidden"} for b in parse_batch_sizes(batch_sizes)]
        for s in specs:
            if s["size_bytes"] > MAX_MESSAGE:
                raise K25Error(f"--hidden {hidden} x batch {s['batch_size']} x {dtype} is {s['size_bytes']:,} bytes, "
                               f"more than the {MAX_MESSAGE:,} (1 GiB) benched at most")
        return specs
    specs = pattern_from_db(con, phase=phase, hidden=hidden, dtype=dtype)
    if not specs:
        raise K25Error(f"{source}: no {phase} steps with all-reduces; give --sizes and --count")
    for s in specs:
        if count:
            s["count"] = count
        if s.get("world_size") and s["world_size"] != world_size:
            _log(f"note: the trace ran on {s['world_size']} ranks, this bench on {world_size}")
    seen: set[tuple[int, int]] = set()
    return [s for s in specs
            if (s["size_bytes"], s["count"]) not in seen and not seen.add((s["size_bytes"], s["count"]))]


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
        raise K25Error(f"--sizes: {len(specs)} size(s) totalling {need:,} bytes need {total / 2**30:.2f} GiB "
                       f"({'per GPU' if backend == 'nccl' else f'{world_size} processes x 3 buffers'}), more than "
                       f"{where}: bench fewer or smaller sizes")


# ------------------------------------------------------------------------------------------------ the workers


def _measure_rank(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """One rank: every size, every mode; returns raw per-repetition times (µs; bursts: whole-burst µs)."""
    import torch

    rig = _Rig(rank, world, cfg)
    if cfg.get("die_rank") == rank:  # tests only: die as the out-of-memory killer kills, the group formed
        import signal

        os.kill(os.getpid(), signal.SIGKILL)
    results = []
    graphs: dict[int, Any] = {}
    tensors: dict[int, Any] = {}
    for spec in cfg["sizes"]:
        res, tensors[spec["size_bytes"]], graph = _measure_size(rig, spec, cfg)
        if graph is not None:
            graphs[spec["size_bytes"]] = graph
        results.append(res)
    files = _profile_bursts(rig, cfg, tensors, graphs) if cfg.get("profile") else []
    if rig.cuda:
        torch.cuda.synchronize()
    device_name = torch.cuda.get_device_name(rig.device) if rig.cuda else "cpu"
    # no barrier or destroy_process_group here: with NCCL collectives captured in CUDA graphs, tearing the group
    # down hung on 2 H200s (torch 2.11, NCCL 2.28); the worker hands its result over and exits (see _worker)
    return {"rank": rank, "device_name": device_name, "torch_version": torch.__version__, "results": results,
            "profile_files": files}


class _Rig:
    """One rank's process group, device and clocks."""

    def __init__(self, rank: int, world: int, cfg: dict[str, Any]) -> None:
        import torch
        import torch.distributed as dist

        self.rank, self.torch, self.dist = rank, torch, dist
        self.cuda = cfg["backend"] == "nccl"
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        if self.cuda:
            torch.cuda.set_device(rank)
            self.device = torch.device("cuda", rank)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(1)
        kwargs = {"device_id": self.device} if self.cuda else {}
        dist.init_process_group(cfg["backend"], init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                                world_size=world, **kwargs)
        self.dtype = getattr(torch, cfg["dtype"])
        self.esize = torch.empty(0, dtype=self.dtype).element_size()
        self.tiny = torch.zeros(1, device=self.device)

    def align(self) -> None:
        self.dist.all_reduce(self.tiny)
        if not self.cuda:
            self.dist.barrier()

    def timed(self, fn: Any) -> float:
        """µs of fn() on this rank (CUDA events on the current stream, else the wall clock)."""
        import time

        self.align()
        if self.cuda:
            cuda = self.torch.cuda
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6


def _measure_size(rig: _Rig, spec: dict[str, Any], cfg: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """One message size: single ops, eager bursts, CUDA-graph bursts (NCCL) and the kernel times alone; returns
    (the result row, the tensor, the captured graph or None)."""
    torch, dist = rig.torch, rig.dist
    size, count = spec["size_bytes"], spec["count"]
    x = torch.zeros(max(1, size // rig.esize), dtype=rig.dtype, device=rig.device)
    res: dict[str, Any] = {"size_bytes": size, "count": count}

    def one() -> None:
        dist.all_reduce(x)

    def burst() -> None:
        for _ in range(count):
            dist.all_reduce(x)

    for _ in range(cfg["warmup"]):
        one()
    res["single"] = [rig.timed(one) for _ in range(cfg["iters"])]
    burst()
    res["eager"] = [rig.timed(burst) for _ in range(cfg["bursts"])]
    graph = None
    if rig.cuda and cfg["graph"]:
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            burst()
        graph.replay()
        torch.cuda.synchronize()
        res["graph"] = [rig.timed(graph.replay) for _ in range(cfg["bursts"])]
    if rig.cuda:
        res.update(_kernel_times(torch, burst, graph, rig.align))
    if rig.rank == 0:
        _log(f"{size:,} B x {count}: single median {quantile(res['single'], 0.5):.1f} µs, eager burst "
             f"{quantile(res['eager'], 0.5) / 1e3:.3f} ms"
             + (f", graph burst {quantile(res['graph'], 0.5) / 1e3:.3f} ms" if "graph" in res else ""))
    return res, x, graph


def _profile_bursts(rig: _Rig, cfg: dict[str, Any], tensors: dict[int, Any], graphs: dict[int, Any]) -> list[str]:
    """Two eager bursts and two graph replays per size under torch.profiler (``--profile DIR``); the files written."""
    from torch.profiler import ProfilerActivity, profile, record_function, tensorboard_trace_handler

    torch, dist, rank = rig.torch, rig.dist, rig.rank
    os.makedirs(cfg["profile"], exist_ok=True)
    handler = tensorboard_trace_handler(cfg["profile"], worker_name=f"allreduce_bench_rank{rank}", use_gzip=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if rig.cuda else [])
    with profile(activities=activities, on_trace_ready=handler):
        for spec in cfg["sizes"]:
            size, count = spec["size_bytes"], spec["count"]
            x = tensors[size]
            for _ in range(2):
                rig.align()
                with record_function(f"allreduce_burst_eager_{size}B_x{count}"):
                    for _ in range(count):
                        dist.all_reduce(x)
                if size in graphs:
                    rig.align()
                    with record_function(f"allreduce_burst_graph_{size}B_x{count}"):
                        graphs[size].replay()
            if rig.cuda:
                torch.cuda.synchronize()
    return sorted(f for f in os.listdir(cfg["profile"]) if f.startswith(f"allreduce_bench_rank{rank}."))


def _kernel_times(torch: Any, burst: Any, graph: Any, align: Any) -> dict[str, list[float]]:
    """NCCL kernel durations (µs) of one eager burst and one graph replay, read from a torch.profiler trace.

    The burst's wall time per op includes what lies between the kernels (launches, graph-node overhead); the
    kernel time alone is what a trace's all-reduce kernels are compared with (``report --by floor``).
    """
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    out: dict[str, list[float]] = {}
    for mode, fn in (("eager", burst), ("graph", graph.replay if graph is not None else None)):
        if fn is None:
            continue
        align()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "burst.json")
            prof.export_chrome_trace(path)
            with open(path) as fh:
                events = json.load(fh).get("traceEvents", [])
        out[f"{mode}_kernel"] = [float(e["dur"]) for e in events
                                 if e.get("cat") == "kernel" and "AllReduce" in str(e.get("name", ""))
                                 and isinstance(e.get("dur"), (int, float))]
    return out


def _worker(rank: int, world: int, cfg: dict[str, Any], queue: Any) -> None:
    code = 0
    try:
        queue.put(_measure_rank(rank, world, cfg))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent, in one line (no traceback)
        queue.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    finish_worker(queue, code)


def finish_worker(queue: Any, code: int) -> None:
    """Flush the result queue, then leave at once: no process-group teardown (it can hang after graph capture)."""
    queue.close()
    queue.join_thread()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_allreduce_bench(sizes: list[dict[str, Any]], *, backend: str, world_size: int, dtype: str = "bfloat16",
                        iters: int = 200, warmup: int = 20, bursts: int = 20, graph: bool = True,
                        profile: str | None = None, timeout_s: float = 600.0,
                        bench_run: str | None = None, die_rank: int | None = None) -> list[dict[str, Any]]:
    """Start ``world_size`` processes, measure every size, return the result rows (one per size and mode).

    The processes are watched while they run: a rank that dies (killed by the out-of-memory killer, a crash)
    or reports an error stops the bench within about a second, with an error naming the rank and how it ended;
    the other ranks (blocked in an all-reduce with it) are killed. ``die_rank`` (tests only) makes that rank
    kill itself with SIGKILL once the process group has formed."""
    import torch.multiprocessing as mp

    dtype = DTYPE_CANON.get(dtype, dtype)
    measured_at = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None, microsecond=0)
    bench_run = bench_run or f"{backend}-ws{world_size}-{measured_at:%Y%m%dT%H%M%S}-{os.getpid()}"
    cfg = {"backend": backend, "dtype": dtype, "iters": iters, "warmup": warmup, "bursts": bursts, "graph": graph,
           "profile": profile, "port": _free_port(), "die_rank": die_rank,
           "sizes": [{"size_bytes": s["size_bytes"], "count": s["count"]} for s in sizes]}
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world_size, cfg, q), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    ok = False
    try:
        outs = _collect(procs, q, timeout_s)
        ok = True
    finally:
        for p in procs:
            if not ok and p.is_alive():
                p.kill()  # blocked in a collective with a dead rank: they would never return
            p.join(timeout=15 if ok else 5)
            if p.is_alive():
                p.kill()
    outs.sort(key=lambda o: o["rank"])
    return combine(outs, sizes, backend=backend, world_size=world_size, dtype=dtype, bench_run=bench_run,
                   measured_at=measured_at)


def _ended(code: int | None) -> str:
    """How a worker process ended, in words."""
    if code is None:
        return "is still running"
    if code < 0:
        import signal

        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (the out-of-memory killer sends it)" if name == "SIGKILL" else ""
        return f"was killed by {name}{hint}"
    return f"exited with status {code}"


def _collect(procs: list[Any], q: Any, timeout_s: float) -> list[dict[str, Any]]:
    """Every rank's result from the queue, polling the processes between reads: a K25Error naming the rank as soon
    as one dies before giving its result or reports an error, or when ``timeout_s`` passes."""
    import queue as _queue
    import time

    deadline = time.monotonic() + timeout_s
    outs: dict[int, dict[str, Any]] = {}
    failed_at: float | None = None
    while len(outs) < len(procs):
        try:
            out = q.get(timeout=0.25)
            outs[out["rank"]] = out
            continue
        except _queue.Empty:
            pass
        now = time.monotonic()
        dead = [r for r, p in enumerate(procs) if r not in outs and p.exitcode is not None]
        errors = [o for o in outs.values() if "error" in o]
        if (dead or errors) and failed_at is None:
            failed_at = now  # a moment for the other ranks' errors or exits to arrive: the first cause is named
        if failed_at is not None and (now - failed_at > 1.0 or len(outs) + len(dead) == len(procs)):
            killed = [r for r in dead if (procs[r].exitcode or 0) < 0]
            parts = [f"rank {r} {_ended(procs[r].exitcode)} before giving its result" for r in killed or dead]
            parts += [f"rank {o['rank']}: {o['error']}" for o in sorted(errors, key=lambda o: o["rank"])
                      if not killed]
            raise K25Error("the bench stopped: " + "; ".join(parts))
        if now > deadline:
            waiting = [str(r) for r in range(len(procs)) if r not in outs]
            raise K25Error(f"the bench processes gave no result within {timeout_s:g} s (--timeout; rank(s) "
                           f"{', '.join(waiting)} still running)")
    if any("error" in o for o in outs.values()):
        raise K25Error("; ".join(f"rank {o['rank']}: {o['error']}" for o in sorted(outs.values(),
                                                                                    key=lambda o: o["rank"])
                                 if "error" in o))
    return list(outs.values())


def combine(outs: list[dict[str, Any]], sizes: list[dict[str, Any]], *, backend: str, world_size: int, dtype: str,
            bench_run: str, measured_at: Any) -> list[dict[str, Any]]:
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
            rows.append({
                "bench_run": bench_run, "measured_at": measured_at, "backend": backend, "world_size": world_size,
                "device_name": outs[0]["device_name"], "torch_version": outs[0]["torch_version"], "dtype": dtype,
                "size_bytes": spec["size_bytes"], "batch_size": spec.get("batch_size"),
                "size_source": spec.get("size_source", "given"), "mode": mode, "count": n, "reps": len(reps),
                "median_us": med, "p90_us": p90,
                "burst_ms": None if mode == "single" else quantile(reps, 0.5) / 1e3,
                "algbw_gbps": algbw, "busbw_gbps": None if algbw is None else algbw * factor,
                "kernel_median_us": quantile(kern, 0.5) if kern else None,
                "kernel_p90_us": quantile(kern, 0.9) if kern else None,
            })
    return rows


# ------------------------------------------------------------------------------------------------ database


COLUMNS = ("bench_run", "measured_at", "backend", "world_size", "device_name", "torch_version", "dtype",
           "size_bytes", "batch_size", "size_source", "mode", "count", "reps", "median_us", "p90_us", "burst_ms",
           "algbw_gbps", "busbw_gbps", "kernel_median_us", "kernel_p90_us")
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
    required = {"bench_run", "measured_at", "backend", "world_size", "dtype", "size_bytes", "mode", "count", "reps",
                "median_us", "p90_us"}
    out = []
    for i, r in enumerate(rows):
        missing = sorted(required - set(r)) if isinstance(r, dict) else sorted(required)
        if missing:
            raise K25Error(f"{path}: row {i} lacks {', '.join(missing)}")
        row = {c: r.get(c) for c in COLUMNS}
        row["measured_at"] = _dt.datetime.fromisoformat(str(r["measured_at"]))
        out.append(row)
    return out


# ------------------------------------------------------------------------------------------------ the command


command = click.Group("bench", help="Measure floors on this machine (all-reduce) and store them in a database.")

DISPLAY = ("backend", "world_size", "batch_size", "size_bytes", "mode", "count", "median_us", "p90_us", "burst_ms",
           "busbw_gbps", "kernel_median_us")


def _emit(rows: list[dict[str, Any]], fmt: str | None) -> None:
    shown = [{k: r[k] for k in DISPLAY} for r in rows]
    try:  # deferred: a GPU machine with torch only prints JSON lines (see the module doc)
        import polars as pl

        from k25trace.render import output
    except ImportError:
        for r in shown:
            print(json.dumps(r, default=str))
        return
    frame = pl.DataFrame(shown, schema_overrides={"batch_size": pl.Int64, "burst_ms": pl.Float64,
                                                  "busbw_gbps": pl.Float64, "kernel_median_us": pl.Float64})
    frame = frame.with_columns(pl.col(c).round(3) for c in ("median_us", "p90_us", "burst_ms", "busbw_gbps",
                                                            "kernel_median_us"))
    output.write(frame, fmt or output.default_format(), title="All-reduce floor")


def _timeout_option(ctx: click.Context, param: click.Parameter, value: float) -> float:
    if not math.isfinite(value) or not 0 < value <= MAX_TIMEOUT_S:
        raise click.BadParameter(f"{value} is not a usable timeout: give seconds above 0, at most "
                                 f"{MAX_TIMEOUT_S:g} (a week)", ctx, param)
    return value


@command.command("allreduce")
@click.option("--db", "db_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Read the per-step all-reduce pattern from this database (unless --sizes) and store the results "
              "in it; it must exist (`k25trace load` makes one).")
@click.option("--sizes", default=None, help="Message sizes in bytes, comma-separated (K/M/G suffixes: KiB, MiB, GiB); "
              "instead of the database's pattern.")
@click.option("--count", type=click.IntRange(1, MAX_COUNT), default=None,
              help="All-reduces per burst (default: the database's per-step count, else 122).")
@click.option("--batch-sizes", default="1,8,64", show_default=True,
              help="Without --db or --sizes: sizes = hidden x batch x dtype for these.")
@click.option("--hidden", type=click.IntRange(1, MAX_HIDDEN), default=7168, show_default=True,
              help="Hidden size when the trace has no message sizes.")
@click.option("--dtype", type=click.Choice(sorted(DTYPE_BYTES)), default="bf16", show_default=True,
              help="Element type of the all-reduced tensors (the trace's activations: bf16 for most models).")
@click.option("--phase", type=click.Choice(PHASES), default="decode", show_default=True,
              help="Steps whose pattern is read from --db.")
@click.option("--backend", type=click.Choice(["auto", "nccl", "gloo"]), default="auto", show_default=True,
              help="nccl on GPUs (auto when CUDA is there), gloo on CPUs.")
@click.option("--world-size", type=click.IntRange(min=1), default=None,
              help="Processes (default: all local GPUs; gloo: 2).")
@click.option("--iters", type=click.IntRange(1, MAX_ITERS), default=200, show_default=True,
              help=f"Single all-reduces timed per size (1 to {MAX_ITERS:,}).")
@click.option("--warmup", type=click.IntRange(0, MAX_WARMUP), default=20, show_default=True,
              help=f"Untimed all-reduces per size before the timed ones (0 to {MAX_WARMUP:,}).")
@click.option("--bursts", type=click.IntRange(1, MAX_BURSTS), default=20, show_default=True,
              help=f"Bursts timed per size and mode (1 to {MAX_BURSTS:,}).")
@click.option("--no-graph", is_flag=True, help="Skip the CUDA-graph burst.")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False), default=None,
              help="Also write a torch.profiler trace of a few bursts per size here.")
@click.option("--run-name", default=None, help="Name of this bench run (default: backend-ws-time-pid).")
@click.option("--timeout", "timeout_s", type=float, default=600.0, show_default=True, callback=_timeout_option,
              help="Seconds to wait for the ranks' results, above 0 and at most a week (a rank that dies stops the "
              "bench at once).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="Output format of the result rows (default: table on a terminal, csv otherwise).")
@click.option("--save-json", "save_json", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write every result row (all allreduce_bench columns) to this JSON file, for "
              "`k25trace bench import` on a machine with the database (the GPU machine may have no DuckDB).")
def allreduce(db_path: Path | None, sizes: str | None, count: int | None, batch_sizes: str, hidden: int, dtype: str,
              phase: str, backend: str, world_size: int | None, iters: int, warmup: int, bursts: int, no_graph: bool,
              profile_dir: str | None, run_name: str | None, timeout_s: float, fmt: str | None,
              save_json: Path | None) -> None:
    """Measure the all-reduce floor for a trace's message sizes: single ops, eager bursts, CUDA-graph bursts.

    \b
    Examples:
      k25trace bench allreduce --db run.duckdb                 # sizes/counts of run.duckdb's decode steps
      k25trace bench allreduce --sizes 14K,112K,896K --count 122
      k25trace bench allreduce --backend gloo --world-size 2 --db run.duckdb --iters 50
      k25trace sql --db run.duckdb --query report_allreduce_floor -p phase=decode
    """
    if sizes is None and db_path is None:
        parse_batch_sizes(batch_sizes)  # checked before torch starts
    elif sizes is not None:
        bench_specs(None, sizes=sizes, count=count, batch_sizes=batch_sizes, hidden=hidden, dtype=dtype,
                    phase=phase, world_size=1)
    con = None
    if db_path is not None:
        from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

        # read-only: a bench that fails (no all-reduces in the database, a dead rank) leaves the file as it was;
        # the rows are written only once measured. Opened with --sizes too: a --db that is missing or not a
        # k25trace database is refused before the bench starts, not after it
        con = pipeline.connect(db_path, read_only=True)
        if sizes is not None:
            con.close()
            con = None
    try:
        backend, world_size = resolve_backend(backend, world_size)
        specs = bench_specs(con, sizes=sizes, count=count, batch_sizes=batch_sizes, hidden=hidden, dtype=dtype,
                            phase=phase, world_size=world_size, source=str(db_path))
        if con is not None:
            con.close()
            con = None
        check_memory(specs, backend=backend, world_size=world_size)
        if world_size == 1:
            _log("note: with one rank an all-reduce moves nothing (NCCL skips it; a captured graph stays empty): "
                 "this is a smoke run of the code path, not a floor")
        _log(f"{backend}, {world_size} process(es), {len(specs)} size(s): "
             + ", ".join(f"{s['size_bytes']:,} B x {s['count']}" for s in specs))
        rows = run_allreduce_bench(specs, backend=backend, world_size=world_size, dtype=dtype, iters=iters,
                                   warmup=warmup, bursts=bursts, graph=not no_graph, profile=profile_dir,
                                   timeout_s=timeout_s, bench_run=run_name)
        if save_json is not None:
            save_rows(save_json, rows)
            _log(f"{len(rows)} rows written to {save_json}")
        if db_path is not None:
            from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

            con = pipeline.connect(db_path)
            write_rows(con, rows)
            _log(f"{len(rows)} rows written to {db_path} (table allreduce_bench, bench_run {rows[0]['bench_run']})")
    finally:
        if con is not None:
            con.close()
    if profile_dir:
        _log(f"profiler traces in {profile_dir} (k25trace load {profile_dir} --db ...)")
    _emit(rows, fmt)


@command.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--db", "db_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Database to add the rows to (table allreduce_bench).")
def import_rows(files: tuple[Path, ...], db_path: Path) -> None:
    """Add the rows of `bench allreduce --save-json` files (measured on another machine) to a database.

    A bench run already in the database is skipped (same bench_run name), so importing twice adds nothing.
    """
    from k25trace import pipeline  # deferred: DuckDB only where a database is used (see the module doc)

    batches = [(f, read_rows(f)) for f in files]  # every file checked before anything is written
    con = pipeline.connect(db_path)
    try:
        for f, rows in batches:
            run = rows[0]["bench_run"]
            if has_bench_run(con, run):
                _log(f"{f}: bench run {run} is already in {db_path}; skipped")
                continue
            write_rows(con, rows)
            _log(f"{f}: {len(rows)} rows of bench run {run} added to {db_path}")
    finally:
        con.close()
