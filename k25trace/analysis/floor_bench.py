"""The all-reduce bench itself: ``world_size`` processes (torch.multiprocessing, spawn), one per GPU (NCCL) or
CPU process (gloo), each timing every size in every mode; the parent watches them and combines their times
(:func:`k25trace.analysis.floor.combine`). ``--profile DIR`` also writes a torch.profiler trace of a few bursts per
size (``allreduce_bench_rank{r}.<ns>.pt.trace.json.gz``) that ``k25trace load`` reads.

Prints nothing: rank 0's per-size progress line travels to the parent on the result queue and is handed to
``on_progress``. torch is imported only inside the functions (the module imports without it).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import sys
from typing import Any, Callable

from k25trace.analysis.floor import DTYPE_CANON, combine
from k25trace.errors import K25Error
from k25trace.stats import quantile

# ------------------------------------------------------------------------------------------------ the workers


def _measure_rank(rank: int, world: int, cfg: dict[str, Any], progress: Callable[[str], None]) -> dict[str, Any]:
    """One rank: every size, every mode; returns raw per-repetition times (µs; bursts: whole-burst µs)."""
    import torch

    rig = _Rig(rank, world, cfg, progress)
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
    return {
        "rank": rank,
        "device_name": device_name,
        "torch_version": torch.__version__,
        "results": results,
        "profile_files": files,
    }


class _Rig:
    """One rank's process group, device and clocks."""

    def __init__(self, rank: int, world: int, cfg: dict[str, Any], progress: Callable[[str], None]) -> None:
        import torch
        import torch.distributed as dist

        self.rank, self.torch, self.dist, self.progress = rank, torch, dist, progress
        self.cuda = cfg["backend"] == "nccl"
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
        if self.cuda:
            torch.cuda.set_device(rank)
            self.device = torch.device("cuda", rank)
        else:
            self.device = torch.device("cpu")
            torch.set_num_threads(1)
        kwargs: dict[str, Any] = {"device_id": self.device} if self.cuda else {}
        dist.init_process_group(
            cfg["backend"], init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank, world_size=world, **kwargs
        )
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
        rig.progress(
            f"{size:,} B x {count}: single median {quantile(res['single'], 0.5):.1f} µs, eager burst "
            f"{quantile(res['eager'], 0.5) / 1e3:.3f} ms"
            + (f", graph burst {quantile(res['graph'], 0.5) / 1e3:.3f} ms" if "graph" in res else "")
        )
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
        out[f"{mode}_kernel"] = [
            float(e["dur"])
            for e in events
            if e.get("cat") == "kernel"
            and "AllReduce" in str(e.get("name", ""))
            and isinstance(e.get("dur"), (int, float))
        ]
    return out


def _worker(rank: int, world: int, cfg: dict[str, Any], queue: Any) -> None:
    code = 0

    def progress(message: str) -> None:
        queue.put({"rank": rank, "progress": message})

    try:
        queue.put(_measure_rank(rank, world, cfg, progress))
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


def run_allreduce_bench(
    sizes: list[dict[str, Any]],
    *,
    backend: str,
    world_size: int,
    dtype: str = "bfloat16",
    iters: int = 200,
    warmup: int = 20,
    bursts: int = 20,
    graph: bool = True,
    profile: str | None = None,
    timeout_s: float = 600.0,
    bench_run: str | None = None,
    die_rank: int | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Start ``world_size`` processes, measure every size, return the result rows (one per size and mode);
    ``on_progress`` gets a line per size as rank 0 finishes it.

    The processes are watched while they run: a rank that dies (killed by the out-of-memory killer, a crash)
    or reports an error stops the bench within about a second, with an error naming the rank and how it ended;
    the other ranks (blocked in an all-reduce with it) are killed. ``die_rank`` (tests only) makes that rank
    kill itself with SIGKILL once the process group has formed."""
    import torch.multiprocessing as mp

    dtype = DTYPE_CANON.get(dtype, dtype)
    measured_at = _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None, microsecond=0)
    bench_run = bench_run or f"{backend}-ws{world_size}-{measured_at:%Y%m%dT%H%M%S}-{os.getpid()}"
    cfg = {
        "backend": backend,
        "dtype": dtype,
        "iters": iters,
        "warmup": warmup,
        "bursts": bursts,
        "graph": graph,
        "profile": profile,
        "port": _free_port(),
        "die_rank": die_rank,
        "sizes": [{"size_bytes": s["size_bytes"], "count": s["count"]} for s in sizes],
    }
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world_size, cfg, q), daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    ok = False
    try:
        outs = _collect(procs, q, timeout_s, on_progress)
        ok = True
    finally:
        for p in procs:
            if not ok and p.is_alive():
                p.kill()  # blocked in a collective with a dead rank: they would never return
            p.join(timeout=15 if ok else 5)
            if p.is_alive():
                p.kill()
    outs.sort(key=lambda o: o["rank"])
    return combine(
        outs, sizes, backend=backend, world_size=world_size, dtype=dtype, bench_run=bench_run, measured_at=measured_at
    )


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


def _collect(
    procs: list[Any], q: Any, timeout_s: float, on_progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every rank's result from the queue, polling the processes between reads: a K25Error naming the rank as soon
    as one dies before giving its result or reports an error, or when ``timeout_s`` passes. Progress lines on the
    queue go to ``on_progress``."""
    import queue as _queue
    import time

    deadline = time.monotonic() + timeout_s
    outs: dict[int, dict[str, Any]] = {}
    failed_at: float | None = None
    while len(outs) < len(procs):
        try:
            out = q.get(timeout=0.25)
        except _queue.Empty:
            pass
        else:
            if "progress" in out:
                if on_progress is not None:
                    on_progress(out["progress"])
            else:
                outs[out["rank"]] = out
            continue
        now = time.monotonic()
        dead = [r for r, p in enumerate(procs) if r not in outs and p.exitcode is not None]
        errors = [o for o in outs.values() if "error" in o]
        if (dead or errors) and failed_at is None:
            failed_at = now  # a moment for the other ranks' errors or exits to arrive: the first cause is named
        if failed_at is not None and (now - failed_at > 1.0 or len(outs) + len(dead) == len(procs)):
            killed = [r for r in dead if (procs[r].exitcode or 0) < 0]
            parts = [f"rank {r} {_ended(procs[r].exitcode)} before giving its result" for r in killed or dead]
            parts += [f"rank {o['rank']}: {o['error']}" for o in sorted(errors, key=lambda o: o["rank"]) if not killed]
            raise K25Error("the bench stopped: " + "; ".join(parts))
        if now > deadline:
            waiting = [str(r) for r in range(len(procs)) if r not in outs]
            raise K25Error(
                f"the bench processes gave no result within {timeout_s:g} s (--timeout; rank(s) "
                f"{', '.join(waiting)} still running)"
            )
    if any("error" in o for o in outs.values()):
        raise K25Error(
            "; ".join(
                f"rank {o['rank']}: {o['error']}"
                for o in sorted(outs.values(), key=lambda o: o["rank"])
                if "error" in o
            )
        )
    return list(outs.values())
