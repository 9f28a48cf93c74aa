"""A TP-sharded, Kimi-K2.5-shaped decode loop on N GPUs, profiled per rank the way vLLM profiles its workers.

Real GPU traces without vLLM: one process per GPU (started by this command), each holding its 1/N share of a
Kimi-shaped model and replaying a CUDA graph per batch size inside vLLM's step marker::

    python3 -m k25trace.synth.decode_loop --out /tmp/decode_trace            # all local GPUs, 4 layers
    python3 -m k25trace.synth.decode_loop --out /tmp/d --world-size 2 --layers 8 --delay-rank 1 --delay-ms 0.5
    k25trace load /tmp/decode_trace --db run.duckdb && k25trace report --db run.duckdb

(Formerly ``python3 capture/decode_loop.py``, with the same flags: the PROVENANCE files under tests/data record
runs under that name.)

Per rank r of N (``--hidden 7168``, ``--heads 64``, ``--experts 384``, top-8):

* per layer: RMSNorm; MLA-like attention with ``heads/N`` heads (fused q_a/kv_a projection, q_a/kv_a norms,
  q_b projection, rotary on the rope part, absorbed W_UK/W_UV, a latent KV cache of ``--context`` tokens written
  at the current position, softmax attention over it), o_proj (row-parallel) then an all-reduce; RMSNorm; MoE:
  router GEMM + top-8 (sigmoid scores, renormalised), the ``experts/N`` local experts as two grouped GEMMs
  (``torch._grouped_mm``; tokens routed elsewhere get weight 0 on this rank, the all-reduce sums the ranks'
  shares) plus a TP-sharded shared expert, then the second all-reduce. With N = 1 the all-reduces are skipped,
  as vLLM skips them at TP=1.
* the routed experts' weights are one pool shared by all layers (a Kimi layer's experts are ~34 GB in bf16;
  what a decode step reads per layer — the selected experts — is the same).
* a decode step, per batch size B in ``--batch-sizes`` (default 1, 8, 64): inside
  ``record_function("execute_context_0(0)_generation_B(B)")``: the token ids are copied host -> device, ONE
  CUDA-graph replay (embedding, all layers, final norm), then eagerly the lm_head GEMM (vocab/N; all-gather of the
  logits when N > 1), argmax and a device -> host copy of the next tokens.
* ``--delay-rank R --delay-ms X``: rank R sleeps X ms on the CPU before the graph replay of every
  ``--delay-every``-th step (inside the marker), so the other ranks wait for it at the first all-reduce (launch
  skew: a slow host thread).
* ``--gpu-delay-rank R --gpu-delay-us X --gpu-delay-site K``: on every ``--gpu-delay-every``-th step, rank R runs
  a spin kernel of about X µs (``torch.cuda._sleep``) on the GPU just before the K-th all-reduce of the forward
  (call site K: 0 = the embedding's, 1 + 2l = layer l's attention, 2 + 2l = layer l's MoE), so the other ranks
  wait for it at that call site only (GPU-side lateness: an imbalanced GPU). With CUDA graphs every rank captures
  a second graph per batch size with the same collectives (only rank R's holds the spin kernel) and replays it
  on those steps.
* ``--inject-gaps`` (eager only): on profiled steps n with n % 3 == 1 the host sleeps ``--host-gap-us`` before
  layer ``--gap-layer`` (a host-bound GPU gap mid-step: the GPU drains its queue and waits for the next launch);
  on steps with n % 3 == 2 it copies a value to the host there (``.cpu()``: a blocking D2H copy, the host waits
  for the GPU, then the GPU waits for the host's next launch); steps with n % 3 == 0 are clean.
* ``--eager``: no CUDA graph: the forward's kernels are launched one by one (as vLLM's ``--enforce-eager``);
  ``--record-shapes`` records the ops' input shapes (for efficiency analysis).
* ``--layer-annotations`` (eager): the forward's regions as ``record_function`` ranges, named as vLLM's modules
  would be: ``pre`` (the embedding, and its all-reduce when N > 1), ``model.layers.{i}`` per layer (its norms,
  attention, MLP/MoE and their all-reduces; the residual adds), ``post`` (final norm, lm_head, logits all-gather,
  argmax) — the per-layer truth. With CUDA graphs the captured forward carries no annotation into the replays.
* ``--dense-layers K`` (Kimi's ``first_k_dense_replace``): layers 0..K-1 are dense: a TP-sharded SwiGLU MLP of
  ``--dense-intermediate`` (18432) instead of the MoE (no router, no experts, no shared expert); one all-reduce.
* ``--odd-layer I --odd-factor F``: MoE layer I routes each token to ``top_k * F`` experts (top-16 for F = 2):
  F times the routed experts' work in that layer alone (a known odd layer for per-layer analysis).
* ``--marlin`` (with ``--dtype float16``): the routed experts and the dense layers' MLP run as real Marlin W4A16
  GEMMs (the standalone IST-DASLab/marlin FP16xINT4 kernel, group size 128, built from its source in
  ``--marlin-src`` with torch's cpp_extension at the start of the run and checked against a dequantized matmul;
  its source is not part of k25trace). The build wraps the kernel in ``namespace marlin``, as vLLM's copy of it
  is, so the kernels are named ``void marlin::Marlin<256, M, N, K, 4, 8>(int4 const*, …)``. Marlin is a dense
  GEMM, so a MoE layer's routed experts are TP-sharded the way vLLM shards experts without expert parallelism
  (each expert's intermediate split over the ranks) and its k experts are one Marlin GEMM over their
  concatenated w13 (N = k x 2 x intermediate / world) and one over their w2 (K = k x intermediate / world): every
  token of the batch uses the layer's same k experts, scaled per token by its real router weights (the router
  GEMM, sigmoid and top-k still run), so each layer reads k experts' int4 weights, as a batch-1 decode does.
  The attention projections, shared expert and lm_head stay fp16 cuBLAS GEMMs (as Kimi-K2.5 INT4 keeps them
  unquantized).
* profiling as vLLM does it: ``torch.profiler.profile(activities=[CPU, CUDA], on_trace_ready=
  tensorboard_trace_handler(out, worker_name="dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}", use_gzip=True))`` — files
  ``dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}.<ns>.pt.trace.json.gz``. Warm-up steps and graph capture are not profiled.

Needs torch (and NCCL for N > 1), imported only when the command runs: the rest of k25trace never needs it.
Progress on stderr; a JSON summary per rank on stdout (a list, one object per rank).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import click

from k25trace.synth.decode_model import Model
from k25trace.synth.decode_options import DecodeLoopOptions, log
from k25trace.synth.marlin_gemm import MarlinGemms as _Marlin
from k25trace.synth.marlin_gemm import load_marlin

# importable from here: benchmarks/device_layers.sh builds and checks Marlin through load_marlin and _Marlin
__all__ = ["DecodeLoopOptions", "Model", "_Marlin", "command", "load_marlin", "run", "run_rank"]


# ------------------------------------------------------------------------------------------------- one rank


def _init_rank(rank: int, world: int, a: DecodeLoopOptions) -> tuple[Any, Any, bool]:
    """Bind the rank to its GPU (or the CPU) and join the process group; returns (device, dtype, cuda)."""
    import torch
    import torch.distributed as dist

    cuda = a.device == "cuda"
    if cuda:
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    dist.init_process_group(
        "nccl" if cuda else "gloo",
        init_method=f"tcp://127.0.0.1:{a.master_port}",
        rank=rank,
        world_size=world,
        device_id=device if cuda else None,
    )
    torch.manual_seed(a.seed)
    return device, getattr(torch, a.dtype), cuda


def _batch_state(
    model: Model,
    a: DecodeLoopOptions,
    batch: int,
    device: Any,
    dtype: Any,
    cuda: bool,
    gpu_delay: bool,
    spin_cycles: int,
) -> dict[str, Any]:
    """One batch size's inputs and latent KV caches, and (CUDA, not --eager) its captured graph(s)."""
    import torch

    st: dict[str, Any] = {
        "ids": torch.zeros(batch, dtype=torch.long, device=device),
        "pos": torch.zeros(batch, dtype=torch.long, device=device),
        "ids_host": torch.randint(0, a.vocab, (batch,), dtype=torch.long).pin_memory()
        if cuda
        else torch.randint(0, a.vocab, (batch,), dtype=torch.long),
        "caches": [
            torch.randn(batch, a.context, a.kv_lora_rank + a.rope_dim, dtype=dtype, device=device) * 0.1
            for _ in range(a.layers)
        ],
    }
    st["pos"].fill_(a.context - 1)
    if cuda and not a.eager:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                model.forward(st["ids"], st["pos"], st["caches"])
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            st["out"] = model.forward(st["ids"], st["pos"], st["caches"])
        st["graph"] = graph
        if gpu_delay:  # every rank captures it (same collectives); only the delayed rank's spins
            graph_d = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph_d):
                st["out_delayed"] = model.forward(st["ids"], st["pos"], st["caches"], spin_cycles)
            st["graph_delayed"] = graph_d
    return st


class _Stepper:
    """Runs decode steps and records which profiled steps got which injection (CPU delay, GPU spin, gap)."""

    def __init__(
        self,
        a: DecodeLoopOptions,
        rank: int,
        model: Model,
        state: dict[int, dict[str, Any]],
        gpu_delay: bool,
        spin_cycles: int,
    ) -> None:
        self.a, self.rank, self.model, self.state = a, rank, model, state
        self.gpu_delay, self.spin_cycles = gpu_delay, spin_cycles
        self.step_no = 0  # profiled steps so far
        self.delayed: list[int] = []
        self.gpu_delayed: list[int] = []
        self.injected: dict[str, list[int]] = {}

    def _spins(self, n: int, profiled: bool) -> bool:
        every = max(1, self.a.gpu_delay_every)
        return self.gpu_delay and profiled and n % every == self.a.gpu_delay_offset % every

    def step(self, batch: int, profiled: bool) -> None:
        from torch.profiler import record_function

        a, rank, model, st = self.a, self.rank, self.model, self.state[batch]
        n = self.step_no
        spin = self._spins(n, profiled)
        with record_function(f"execute_context_0(0)_generation_{batch}({batch})"):
            st["ids"].copy_(st["ids_host"], non_blocking=True)
            if profiled and a.delay_rank == rank and a.delay_ms > 0 and n % max(1, a.delay_every) == 0:
                time.sleep(a.delay_ms / 1000.0)
                self.delayed.append(n)
            if spin and rank == a.gpu_delay_rank:
                self.gpu_delayed.append(n)
            model.gap = None
            if a.inject_gaps and profiled and "graph" not in st:
                model.gap = {1: "sleep", 2: "copy"}.get(n % 3)
                if model.gap:
                    self.injected.setdefault(model.gap, []).append(n)
            if "graph" in st:
                graph, out = (st["graph_delayed"], st["out_delayed"]) if spin else (st["graph"], st["out"])
                graph.replay()
                nxt = model.logits_and_sample(out)
            else:  # the same kernels as the replay and logits_and_sample, in the same order
                nxt = model.forward(
                    st["ids"],
                    st["pos"],
                    st["caches"],
                    self.spin_cycles if spin else 0,
                    annotate=a.layer_annotations,
                    sample=True,
                )
        st["ids_host"].copy_(nxt, non_blocking=True)  # next tokens back to the host (D2H), as the sampler does
        if profiled:
            self.step_no += 1


def _profiled_steps(
    a: DecodeLoopOptions, rank: int, stepper: _Stepper, batch_sizes: list[int], cuda: bool
) -> dict[int, list[float]]:
    """``--steps`` decode steps per batch size under the torch profiler, as vLLM profiles a worker; returns the
    wall time of each step (ms) per batch size."""
    import torch
    from torch.profiler import ProfilerActivity, profile, tensorboard_trace_handler

    os.makedirs(a.out, exist_ok=True)
    handler = tensorboard_trace_handler(a.out, worker_name=f"dp0_pp0_tp{rank}_dcp0_ep{rank}_rank{rank}", use_gzip=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    step_ms: dict[int, list[float]] = {}
    with profile(activities=activities, record_shapes=a.record_shapes, with_stack=False, on_trace_ready=handler):
        for batch in batch_sizes:
            for _ in range(a.steps):
                t = time.perf_counter()
                stepper.step(batch, True)
                if cuda:
                    torch.cuda.synchronize()
                step_ms.setdefault(batch, []).append((time.perf_counter() - t) * 1e3)
    return step_ms


def run_rank(rank: int, world: int, a: DecodeLoopOptions) -> dict[str, Any]:
    """One rank's whole run: model, graphs, warm-up, the profiled steps; returns its JSON summary."""
    import torch
    import torch.distributed as dist

    device, dtype, cuda = _init_rank(rank, world, a)
    t0 = time.perf_counter()
    model = Model(a, rank, world, device, dtype)
    if cuda:
        torch.cuda.synchronize()
    log(
        rank,
        f"model ready in {time.perf_counter() - t0:.1f} s: {a.layers} layers, {model.h} heads, "
        f"{model.E} local experts, grouped_mm={model.grouped}, dense layers {a.dense_layers}, "
        f"odd layer {a.odd_layer}, marlin={model.marlin is not None}",
    )
    batch_sizes = a.batch_size_list()
    gpu_delay = cuda and world > 1 and a.gpu_delay_rank is not None and a.gpu_delay_us > 0
    # torch.cuda._sleep spins clock64() cycles: about 1.98 GHz on an H100/H200 under load
    spin_cycles = int(a.gpu_delay_us * 1980) if gpu_delay and rank == a.gpu_delay_rank else 0
    state = {b: _batch_state(model, a, b, device, dtype, cuda, gpu_delay, spin_cycles) for b in batch_sizes}
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    log(rank, f"graphs captured for batch sizes {batch_sizes}")
    stepper = _Stepper(a, rank, model, state, gpu_delay, spin_cycles)
    for batch in batch_sizes:
        for _ in range(a.warmup):
            stepper.step(batch, False)
    if cuda:
        torch.cuda.synchronize()
    dist.barrier()
    step_ms = _profiled_steps(a, rank, stepper, batch_sizes, cuda)
    if cuda:
        torch.cuda.synchronize()
    # no barrier/destroy_process_group: with NCCL inside CUDA graphs the teardown hung on 2 H200s; the worker
    # hands its result over and exits (see _worker)
    files = sorted(f for f in os.listdir(a.out) if f.startswith(f"dp0_pp0_tp{rank}_"))
    return _summary(a, rank, world, device, cuda, model, stepper, step_ms, files)


def _summary(
    a: DecodeLoopOptions,
    rank: int,
    world: int,
    device: Any,
    cuda: bool,
    model: Model,
    stepper: _Stepper,
    step_ms: dict[int, list[float]],
    files: list[str],
) -> dict[str, Any]:
    import torch

    nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda else None
    delayed, gpu_delayed, injected = stepper.delayed, stepper.gpu_delayed, stepper.injected
    return {
        "rank": rank,
        "world_size": world,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "grouped_mm": model.grouped,
        "layers": a.layers,
        "steps": a.steps,
        "mode": "graph" if cuda and not a.eager else "eager",
        "allreduce_sites_per_step": 2 * a.layers + 1 if world > 1 else 0,
        "cpu_delayed_steps": delayed,
        "cpu_delay_ms": a.delay_ms if delayed else 0.0,
        "gpu_delayed_steps": gpu_delayed,
        "gpu_delay_site": a.gpu_delay_site if gpu_delayed else None,
        "gpu_delay_cycles": stepper.spin_cycles if gpu_delayed else 0,
        "host_sleep_steps": injected.get("sleep", []),
        "blocking_copy_steps": injected.get("copy", []),
        "host_gap_us": a.host_gap_us if injected else None,
        "median_step_ms": {b: sorted(v)[len(v) // 2] for b, v in step_ms.items()},
        "layer_annotations": bool(a.layer_annotations and not (cuda and not a.eager)),
        "layer_kinds": model.kinds,
        "dense_layers": a.dense_layers,
        "dense_intermediate": a.dense_intermediate,
        "odd_layer": a.odd_layer,
        "odd_factor": a.odd_factor if a.odd_layer is not None else None,
        "top_k_per_layer": model.top_ks,
        "dtype": a.dtype,
        "marlin": model.marlin is not None,
        "marlin_check_rel_err": model.marlin.check_rel_err if model.marlin else None,
        "marlin_group_size": model.marlin.groupsize if model.marlin else None,
        "marlin_weights_kn": sorted(set(model.marlin.shapes)) if model.marlin else None,
        "files": files,
    }


def _worker(rank: int, world: int, a: DecodeLoopOptions, queue: Any) -> None:
    code = 0
    try:
        queue.put(run_rank(rank, world, a))
    except BaseException as exc:  # noqa: BLE001 - reported by the parent
        import traceback

        traceback.print_exc()
        queue.put({"rank": rank, "error": f"{type(exc).__name__}: {exc}"})
        code = 1
    queue.close()
    queue.join_thread()
    sys.stderr.flush()
    os._exit(code)  # no process-group teardown (it can hang after NCCL graph capture)


# ------------------------------------------------------------------------------------------------ all ranks


def _world_size(a: DecodeLoopOptions) -> int:
    if a.world_size > 0:
        return a.world_size
    if a.device != "cuda":
        return 1
    import torch

    world = torch.cuda.device_count()
    if world == 0:
        raise click.UsageError("no CUDA device; use --device cpu for a smoke run")
    return world


def _check(a: DecodeLoopOptions, world: int) -> None:
    for flag, r in (("--delay-rank", a.delay_rank), ("--gpu-delay-rank", a.gpu_delay_rank)):
        if r is not None and not 0 <= r < world:
            raise click.UsageError(f"{flag} {r} is not a rank of {world}")
    if not 0 <= a.dense_layers <= a.layers:
        raise click.UsageError(f"--dense-layers {a.dense_layers}: the model has {a.layers} layers")
    if a.odd_layer is not None:
        if not a.dense_layers <= a.odd_layer < a.layers:
            raise click.UsageError(f"--odd-layer {a.odd_layer} is not a MoE layer ({a.dense_layers}..{a.layers - 1})")
        if not 1 <= a.odd_factor or a.top_k * a.odd_factor > a.experts:
            raise click.UsageError(f"--odd-factor {a.odd_factor}: top-{a.top_k * a.odd_factor} of {a.experts} experts")
    if a.dense_intermediate % world:
        raise click.UsageError("--dense-intermediate must divide by the world size")
    if a.marlin and (a.device != "cuda" or a.dtype != "float16"):
        raise click.UsageError("--marlin needs --device cuda and --dtype float16 (Marlin is an FP16 x INT4 kernel)")
    if a.gpu_delay_rank is not None and not 0 <= a.gpu_delay_site <= 2 * a.layers:
        raise click.UsageError(f"--gpu-delay-site {a.gpu_delay_site}: the forward has call sites 0..{2 * a.layers}")


def run(a: DecodeLoopOptions) -> tuple[list[dict[str, Any]], int]:
    """Start one process per rank and wait for them; returns (the per-rank summaries by rank, exit status)."""
    world = _world_size(a)
    _check(a, world)
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, a, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
            p.join()
    results.sort(key=lambda r: r["rank"])
    failed = any("error" in r for r in results) or any(p.exitcode for p in procs)
    return results, 1 if failed else 0


@click.command("decode-loop", context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.option("--out", required=True, help="Directory for the per-rank trace files.")
@click.option("--world-size", type=int, default=0, show_default=True, help="Processes/GPUs (0: all local GPUs).")
@click.option("--layers", type=int, default=4, show_default=True)
@click.option("--batch-sizes", default="1,8,64", show_default=True, help="Comma list of decode batch sizes.")
@click.option("--steps", type=int, default=8, show_default=True, help="Profiled decode steps per batch size.")
@click.option("--warmup", type=int, default=3, show_default=True, help="Unprofiled steps per batch size first.")
@click.option("--hidden", type=int, default=7168, show_default=True)
@click.option("--heads", type=int, default=64, show_default=True)
@click.option("--q-lora-rank", type=int, default=1536, show_default=True)
@click.option("--kv-lora-rank", type=int, default=512, show_default=True)
@click.option("--rope-dim", type=int, default=64, show_default=True)
@click.option("--nope-dim", type=int, default=128, show_default=True)
@click.option("--v-dim", type=int, default=128, show_default=True)
@click.option("--experts", type=int, default=384, show_default=True)
@click.option("--top-k", type=int, default=8, show_default=True)
@click.option("--moe-intermediate", type=int, default=2048, show_default=True)
@click.option("--vocab", type=int, default=163840, show_default=True)
@click.option("--context", type=int, default=1024, show_default=True, help="Tokens in each request's latent KV cache.")
@click.option("--delay-rank", type=int, default=None, help="Rank that sleeps on the CPU before the graph replay.")
@click.option("--delay-ms", type=float, default=0.0, show_default=True)
@click.option(
    "--delay-every", type=int, default=4, show_default=True, help="Delay every K-th profiled step (1 = every step)."
)
@click.option("--gpu-delay-rank", type=int, default=None, help="Rank that runs a spin kernel before one all-reduce.")
@click.option(
    "--gpu-delay-us", type=float, default=0.0, show_default=True, help="Spin-kernel length in µs (at ~1.98 GHz)."
)
@click.option(
    "--gpu-delay-site",
    type=int,
    default=1,
    show_default=True,
    help="The all-reduce call site the spin kernel precedes.",
)
@click.option(
    "--gpu-delay-every", type=int, default=2, show_default=True, help="GPU delay on every K-th profiled step."
)
@click.option(
    "--gpu-delay-offset", type=int, default=1, show_default=True, help="First GPU-delayed profiled step (mod K)."
)
@click.option("--eager", is_flag=True, help="No CUDA graph: launch every kernel eagerly.")
@click.option("--inject-gaps", is_flag=True, help="Eager: a host sleep / a blocking copy mid-step.")
@click.option("--host-gap-us", type=float, default=500.0, show_default=True)
@click.option("--gap-layer", type=int, default=None, help="Layer before which the gap is made [default: half].")
@click.option("--record-shapes", is_flag=True, help="Profile with record_shapes=True.")
@click.option(
    "--layer-annotations",
    is_flag=True,
    help="Eager: record_function ranges pre, model.layers.{i}, post (the per-layer truth).",
)
@click.option(
    "--dense-layers",
    type=int,
    default=0,
    show_default=True,
    help="Layers 0..K-1 are a dense MLP, not MoE (Kimi: first_k_dense_replace = 1).",
)
@click.option("--dense-intermediate", type=int, default=18432, show_default=True)
@click.option("--odd-layer", type=int, default=None, help="A MoE layer that routes to top_k x --odd-factor experts.")
@click.option("--odd-factor", type=int, default=2, show_default=True)
@click.option(
    "--marlin",
    is_flag=True,
    help="Routed experts and dense MLPs as Marlin W4A16 GEMMs (needs --dtype float16, nvcc, the source).",
)
@click.option(
    "--marlin-src",
    default=".marlin",
    show_default=True,
    help="The exported github:IST-DASLab/marlin tree (marlin/marlin_cuda*.c*); not part of k25trace.",
)
@click.option("--marlin-build", default=None, help="Build directory for the extension [default: a temp dir].")
@click.option("--device", default="cuda", show_default=True, help="cuda, or cpu (a smoke run: no graphs).")
@click.option("--dtype", default="bfloat16", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--master-port", type=int, default=29533, show_default=True)
def command(**options: Any) -> None:
    """A TP-sharded, Kimi-K2.5-shaped decode loop on N GPUs, profiled per rank the way vLLM profiles its workers.

    Writes OUT/dp0_pp0_tp<r>_dcp0_ep<r>_rank<r>.<ns>.pt.trace.json.gz per rank; prints a JSON summary per
    rank on stdout (which steps got which injected delay, median step ms). Needs torch.

    \b
    Example:
        python3 -m k25trace.synth.decode_loop --out /tmp/d --world-size 2 --layers 8 --delay-rank 1 --delay-ms 0.5
        k25trace load /tmp/d --db run.duckdb && k25trace report --db run.duckdb
    """
    results, status = run(DecodeLoopOptions(**options))
    print(json.dumps(results, indent=2))
    if status:
        raise SystemExit(status)


if __name__ == "__main__":
    command(prog_name="python3 -m k25trace.synth.decode_loop")
