"""Synthetic TP-N Kimi-K2.5 vLLM torch-profiler (Kineto) traces with injected, recorded ground truth.

``generate(out_dir, ...)`` writes one trace file per rank, named like vLLM 0.17+ does
(``dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}.{time_ns}.pt.trace.json[.gz]``), plus ``truth.json`` beside them, and returns
the same truth as a dict. ``command`` is a click command (``k25trace synth``) wrapping it.

Modules, in pipeline order: :mod:`~k25trace.synth.kernels` (kernel names, categories, launch geometry: data),
:mod:`~k25trace.synth.config` (``Config``: every option, checked; ``Delay``), :mod:`~k25trace.synth.program`
(what one step launches), :mod:`~k25trace.synth.simulate` (the true timeline), :mod:`~k25trace.synth.events`
(Kineto JSON text), :mod:`~k25trace.synth.writer` (one rank's file), :mod:`~k25trace.synth.truth` (truth.json),
:mod:`~k25trace.synth.driver` (``generate``), :mod:`~k25trace.synth.cli` (``command``).
:mod:`~k25trace.synth.decode_loop` is the other generator: real GPU traces of a Kimi-shaped decode loop
(torch, N GPUs; ``python3 -m k25trace.synth.decode_loop``), imported only when run.

What the files contain (per rank r of N; all ranks run the same step sequence):

* Kineto layout: top-level keys schemaVersion, deviceProperties (N x H200), cupti_version, cuda_runtime_version,
  cuda_driver_version, distributedInfo {backend, rank, world_size, pg_count, pg_config, nccl_version},
  vllm_version, vllm_version_tuple, record_shapes, with_stack, trace_id, displayTimeUnit, baseTimeNanoseconds,
  traceEvents, traceName; pretty-printed exactly as ``json.dumps(obj, indent=4)`` (the layout of the real
  vLLM trace in shared/traces: one key per line, 4-space indentation). ``ts``/``dur`` are float microseconds
  relative to ``baseTimeNanoseconds`` and always a whole number of ns (<= 3 decimals, shortest form, e.g.
  ``1.6`` for 1600 ns), so ``base + round(ts * 1000)`` is exact.
* Engine steps on the worker thread: ``user_annotation`` ``execute_context_0(0)_generation_B(B)`` (decode),
  ``execute_context_n(T)_generation_0(0)`` (prefill, optional, before each batch-size group) and
  ``execute_context_0(0)_generation_0(0)`` (empty/dummy, no GPU work, optional, after each group).
  A ``gpu_user_annotation`` copy per step on the main stream spans the GPU work launched inside it.
* Decode step: cudaMemcpyAsync x4 -> ``Memcpy HtoD (Pinned -> Device)``; eager ``get_mla_metadata_kernel``;
  ONE ``cudaGraphLaunch`` whose correlation id is carried by every kernel/memset of the FULL graph (embedding,
  1 all-reduce, per layer: norms, fused q_a/kv_a GEMM, rotary, KV write, FlashMLA split-kv + combine, o_proj,
  all-reduce, fused_add_rms_norm, then dense MLP (first ``first_k_dense`` layers) or MoE: router GEMM,
  grouped top-k, memset, moe_align_block_size, Marlin w13, act_and_mul, Marlin w2, moe_sum, shared expert on
  an aux stream (fork/join), add, all-reduce; final norm); eager lm_head GEMM + NCCL AllGather (logits), then
  the annotation closes; then ``sample_tokens`` kernels launched with cudaLaunchKernel AFTER the annotation end
  and a ``Memcpy DtoH (Device -> Pinned)`` on a second stream.
* Prefill step: H2D copies, ``prepare_varlen_num_blocks_kernel``, then ``layers + 1`` piecewise
  ``cudaGraphLaunch`` with eager attention (KV write, kv_b GEMM, FA3 varlen) between them, then lm_head,
  AllGather, sampling as for decode.
* Collectives: simulated on one global (true) timeline. The k-th collective of a step starts on rank r when r
  reaches it (arrival a_r) and ends on every rank at max(a) + transfer; dur_r = transfer + wait_r with
  wait_r = max(a) - a_r. An injected delay D for rank r on a collective stretches r's preceding kernel on the
  same stream by D, so r arrives D later and the others wait about D longer.
* Clocks: rank r records every instant t (true ns) as t + offset_r; its ``baseTimeNanoseconds`` is on its own
  clock too, so ``base_r + ts*1000 = t + offset_r``.
* Padding (``target_gz_mb``): ``python_function`` call trees (and CPU-only ``cpu_op`` leaves) inside each
  step's CPU time, added until the compressed file reaches the target (adaptive, typically within a few %).

truth.json (also the return value of ``generate``), all times integer ns::

    {
      "format": "k25trace-synth-truth/1",
      "params": {... every generate() argument ...},
      "categories": [allreduce, comm_other, marlin_gemm, gemm, attention, norm, rotary, activation,
                     moe_routing, sampling, memcpy, memset, elementwise],
      "kernel_categories": {full GPU activity name: category, ...},
      "ranks": [{"rank", "file", "base_time_ns", "clock_offset_ns", "pid", "tid", "device",
                 "streams": {"main", "aux", "d2h"}, "events", "bytes", "gz_bytes"}],
      "steps": [{"index", "name", "phase": decode|prefill|empty, "batch_size", "requests", "tokens",
                 "ctx_reqs", "ctx_tokens", "gen_reqs", "gen_tokens", "graph": FULL|PIECEWISE|null,
                 "graph_launches", "n_collectives"}],
      "per_rank_steps": [[{  # [rank][step]
            "gpu_start_ns", "gpu_end_ns",      # recorded absolute (base + ts*1000) min start / max end of the
                                               # step's GPU activities (kernels, memcpy, memset); null if none
            "kernel_count",                     # cat == "kernel" only
            "categories": {category: {"ns": summed dur, "count": n}},  # every category, zeros included
            "busy_ns",                          # union of the step's GPU activity intervals
            "annotation_start_ns", "annotation_end_ns"}]],  # recorded absolute, CPU user_annotation
      "collectives": [{"step", "k" (ordinal among the step's collectives), "category" (allreduce|comm_other),
                       "k_cat" (ordinal within category in the step), "name", "transfer_ns",
                       "wait_ns": [per rank], "late_rank", "end_true_ns" (offset-free common end),
                       "delay_ns": [per rank injected delay]}],
      "delays": [{"rank", "delay_ns", "steps": null|[...], "ordinals": null|[...], "every": null|K}]
    }

Step membership is by launch: a GPU activity belongs to the step whose annotation started last at or before the
CPU ``ts`` of the runtime call with the same correlation (sampling kernels launch after the annotation closes).
"""

from __future__ import annotations

from k25trace.synth.cli import command, parse_delay, parse_renames, parse_scales
from k25trace.synth.config import BASE_EPOCH_NS, Config, Delay, SynthError, as_delay
from k25trace.synth.driver import generate, write_traces
from k25trace.synth.kernels import *  # noqa: F403 - the kernel names and categories (synth.K_ACT, synth.CATEGORIES)
from k25trace.synth.kernels import __all__ as _kernel_names
from k25trace.synth.program import Program, build_program, step_plan
from k25trace.synth.simulate import StepSim, simulate

__all__ = [
    "BASE_EPOCH_NS",
    "Config",
    "Delay",
    "Program",
    "StepSim",
    "SynthError",
    "as_delay",
    "build_program",
    "command",
    "generate",
    "parse_delay",
    "parse_renames",
    "parse_scales",
    "simulate",
    "step_plan",
    "write_traces",
    *_kernel_names,
]
