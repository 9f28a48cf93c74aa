"""Synthetic TP-N Kimi-K2.5 vLLM torch-profiler (Kineto) traces with injected, recorded ground truth.

``generate(out_dir, ...)`` writes one trace file per rank, named like vLLM 0.17+ does
(``dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}.{time_ns}.pt.trace.json[.gz]``), plus ``truth.json`` beside them, and returns
the same truth as a dict. ``command`` is a click command (``synth``) wrapping it.

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

import json
import math
import os
import random
import re
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

import click

CATEGORIES = ("allreduce", "comm_other", "marlin_gemm", "gemm", "attention", "norm", "rotary", "activation",
              "moe_routing", "sampling", "memcpy", "memset", "elementwise")

BASE_EPOCH_NS = 1767189312_000_000_000  # true time of the first step (an arbitrary 2026 wall time)
HIDDEN = 7168
VOCAB = 163840
N_EXPERTS = 384
TOPK = 8
MOE_INTER = 2048
DENSE_INTER = 18432
GiB = 1 << 30

# ----------------------------------------------------------------------------------------------- kernel names
K_EMB = ("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
         "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, "
         "unsigned int>, at::cuda::detail::TensorInfo<long, unsigned int>, int, int, unsigned int, unsigned int, long)")
K_NCCL_AR = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_CUSTOM_AR1 = ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                "vllm::Signal*, __nv_bfloat16*, int, int)")
K_CUSTOM_AR2 = ("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, "
                "vllm::Signal*, __nv_bfloat16*, int, int)")
K_NCCL_AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
K_RMS = ("void vllm::rms_norm_kernel<c10::BFloat16, 8, 4>(c10::BFloat16*, c10::BFloat16 const*, long, "
         "c10::BFloat16 const*, float, int, int)")
K_FUSED_ADD_RMS = ("std::enable_if<(8>0)&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                   "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, c10::BFloat16*, "
                   "c10::BFloat16 const*, float, int, int)")
K_FUSED_A = ("void fused_a_gemm_kernel<__nv_bfloat16, 128, 16, 2112, 7168>(__nv_bfloat16*, __nv_bfloat16 const*, "
             "__nv_bfloat16 const*, int)")
K_QA_NVJET = "nvjet_tst_128x64_64x6_2x1_v_bz_TNT"
K_QB = "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"
K_UK = "nvjet_tst_64x32_64x16_2x1_v_bz_TNN"
K_UV = "nvjet_tst_64x32_64x16_2x1_v_bz_NNN"
K_OPROJ = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_"
           "kernel__5x_cublas")
K_ROTARY = ("void vllm::rotary_embedding_kernel<c10::BFloat16, false>(long const*, c10::BFloat16*, c10::BFloat16*, "
            "c10::BFloat16 const*, int, long, long, long, int, int, int)")
K_CACHE = ("void vllm::concat_and_cache_mla_kernel<__nv_bfloat16, __nv_bfloat16, (vllm::Fp8KVCacheDataType)0>("
           "__nv_bfloat16 const*, __nv_bfloat16 const*, __nv_bfloat16*, long const*, int, int, int, int, int, int, "
           "float const*)")
K_FMLA = ("void sm90::flash_fwd_splitkv_mla_kernel<sm90::Traits<cutlass::bfloat16_t>, false>(DecodingParams, "
          "sm90::TmaParams<cute::tuple<int, int, int> >)")
K_FMLA_COMBINE = "void flash_fwd_mla_combine_kernel<cutlass::bfloat16_t, 512, 8, 128, 256>(DecodingParams)"
K_MLA_META = "get_mla_metadata_kernel(Mla_metadata_params)"
K_ROUTER = "nvjet_tss_64x8_64x16_4x1_v_bz_splitK_TNT"
K_TOPK = ("void vllm::moe::grouped_topk_fused_kernel<float, __nv_bfloat16>(float*, int*, float const*, "
          "float const*, int, int, int, int, int, bool, double)")
K_ALIGN = ("void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, "
           "unsigned long, int*)")
_MARLIN_ARGS = ("(int4 const*, int4 const*, int4*, int4*, int4 const*, int4 const*, int4 const*, int const*, "
                "int const*, int const*, int const*, float const*, int, bool, bool, int, int, int, int, int, bool, "
                "bool, int, int*, bool, bool)")
K_MARLIN_W13 = ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 256, 1, 8, 8, false, 4, 8, true, "
                "8, false>" + _MARLIN_ARGS)
K_MARLIN_W2 = ("void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 256, 1, 8, 4, false, 4, 8, true, "
               "8, false>" + _MARLIN_ARGS)
K_ACT = ("void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>("
         "c10::BFloat16 const&)), true>(c10::BFloat16*, c10::BFloat16 const*, int)")
K_MOESUM = "void vllm::moe::moe_sum_kernel<c10::BFloat16, 8>(c10::BFloat16*, c10::BFloat16 const*, int)"
K_SH_GU = "nvjet_tst_64x8_64x16_4x1_v_bz_TNN"
K_SH_DOWN = "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNN"
K_DENSE_GU = "nvjet_tst_128x16_64x8_2x1_v_bz_TNN"
K_DENSE_DOWN = "nvjet_tst_128x16_64x8_1x1_v_bz_splitK_TNN"
K_ADD = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)")
K_LMHEAD = "nvjet_tst_256x128_64x4_2x1_v_bz_TNT"
K_KVB = "nvjet_tst_256x128_64x4_1x2_h_bz_TNN"
K_FA3 = ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90"
         "<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cute::tuple<cute::C<128>, cute::C<112>, cute::C<192> >, "
         "128, cutlass::bfloat16_t, float, cutlass::arch::Sm90, true, false, false, true, false, false, true, true, "
         "false, true, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, "
         "cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, "
         "256, true, true, false, false>, flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, "
         "true> > > >(flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, "
         "cute::C<1> >, cute::tuple<cute::C<128>, cute::C<112>, cute::C<192> >, 128, cutlass::bfloat16_t, float, "
         "cutlass::arch::Sm90, true, false, false, true, false, false, true, true, false, true, false, false>, "
         "flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, "
         "cute::C<1>, cute::C<1> >, cutlass::bfloat16_t, cutlass::arch::Sm90, 256, true, true, false, false>, "
         "flash::VarlenDynamicPersistentTileScheduler<128, 256, 128, false, true, true> >::Params)")
K_PREP_VARLEN = ("void flash::prepare_varlen_num_blocks_kernel<1, true>(int, int, int, int const*, int const*, "
                 "int const*, int const*, int const*, int const*, int, int, int, int, int, cutlass::FastDivmod, "
                 "cutlass::FastDivmod, int*, int*, int*, bool)")
K_SOFTMAX = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
             "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, int)")
K_TOPK_SAMPLE = ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(at::cuda::detail::TensorInfo<float, "
                 "unsigned int>, unsigned int, unsigned int, bool, unsigned int, unsigned int, "
                 "at::cuda::detail::TensorInfo<float, unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, "
                 "unsigned int>, unsigned int, float*)")
K_EXPONENTIAL = ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
                 "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
                 "const::{lambda(curandStatePhilox4_32_10*)#2}>(long, at::PhiloxCudaState, "
                 "at::native::templates::cuda::exponential_kernel<at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, "
                 "double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
                 "const::{lambda(curandStatePhilox4_32_10*)#2})")
K_ARGMAX = ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, "
            "unsigned int, long, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4>)")
M_H2D = "Memcpy HtoD (Pinned -> Device)"
M_D2H = "Memcpy DtoH (Device -> Pinned)"
M_SET = "Memset (Device)"

KERNEL_CATEGORY = {
    K_EMB: "elementwise", K_NCCL_AR: "allreduce", K_CUSTOM_AR1: "allreduce", K_CUSTOM_AR2: "allreduce",
    K_NCCL_AG: "comm_other", K_RMS: "norm", K_FUSED_ADD_RMS: "norm", K_FUSED_A: "gemm", K_QA_NVJET: "gemm",
    K_QB: "gemm", K_UK: "gemm", K_UV: "gemm", K_OPROJ: "gemm", K_ROTARY: "rotary", K_CACHE: "attention",
    K_FMLA: "attention", K_FMLA_COMBINE: "attention", K_MLA_META: "attention", K_ROUTER: "gemm",
    K_TOPK: "moe_routing", K_ALIGN: "moe_routing", K_MARLIN_W13: "marlin_gemm", K_MARLIN_W2: "marlin_gemm",
    K_ACT: "activation", K_MOESUM: "moe_routing", K_SH_GU: "gemm", K_SH_DOWN: "gemm", K_DENSE_GU: "gemm",
    K_DENSE_DOWN: "gemm", K_ADD: "elementwise", K_LMHEAD: "gemm", K_KVB: "gemm", K_FA3: "attention",
    K_PREP_VARLEN: "attention", K_SOFTMAX: "sampling", K_TOPK_SAMPLE: "sampling", K_EXPONENTIAL: "sampling",
    K_ARGMAX: "sampling", M_H2D: "memcpy", M_D2H: "memcpy", M_SET: "memset",
}

# launch geometry per kernel: grid, block, registers, shared memory
_GEOM = {
    K_EMB: ((64, 1, 1), (128, 1, 1), 32, 0), K_NCCL_AR: ((16, 1, 1), (640, 1, 1), 96, 103808),
    K_CUSTOM_AR1: ((36, 1, 1), (512, 1, 1), 40, 0), K_CUSTOM_AR2: ((132, 1, 1), (512, 1, 1), 40, 0),
    K_NCCL_AG: ((11, 1, 1), (512, 1, 1), 96, 103808), K_RMS: ((1, 1, 1), (1024, 1, 1), 28, 0),
    K_FUSED_ADD_RMS: ((1, 1, 1), (1024, 1, 1), 32, 0), K_FUSED_A: ((132, 1, 1), (128, 1, 1), 168, 81920),
    K_QA_NVJET: ((33, 1, 1), (384, 1, 1), 168, 215040), K_QB: ((24, 1, 4), (128, 1, 1), 168, 164864),
    K_UK: ((8, 1, 8), (128, 1, 1), 154, 147456), K_UV: ((8, 1, 8), (128, 1, 1), 154, 147456),
    K_OPROJ: ((112, 1, 2), (128, 1, 1), 168, 99328), K_ROTARY: ((1, 1, 1), (512, 1, 1), 30, 0),
    K_CACHE: ((1, 1, 1), (576, 1, 1), 24, 0), K_FMLA: ((1, 8, 66), (256, 1, 1), 168, 230400),
    K_FMLA_COMBINE: ((1, 1, 8), (128, 1, 1), 72, 4096), K_MLA_META: ((1, 1, 1), (32, 1, 1), 40, 0),
    K_ROUTER: ((48, 1, 2), (128, 1, 1), 168, 164864), K_TOPK: ((1, 1, 1), (256, 1, 1), 64, 8192),
    K_ALIGN: ((2, 1, 1), (1024, 1, 1), 32, 3104), K_MARLIN_W13: ((132, 1, 1), (256, 1, 1), 167, 197632),
    K_MARLIN_W2: ((132, 1, 1), (256, 1, 1), 167, 197632), K_ACT: ((8, 1, 1), (256, 1, 1), 20, 0),
    K_MOESUM: ((1, 1, 1), (1024, 1, 1), 26, 0), K_SH_GU: ((8, 1, 4), (128, 1, 1), 168, 164864),
    K_SH_DOWN: ((56, 1, 2), (128, 1, 1), 168, 164864), K_DENSE_GU: ((36, 1, 1), (256, 1, 1), 168, 215040),
    K_DENSE_DOWN: ((56, 1, 2), (256, 1, 1), 168, 215040), K_ADD: ((7, 1, 1), (128, 1, 1), 24, 0),
    K_LMHEAD: ((80, 1, 1), (384, 1, 1), 168, 215040), K_KVB: ((128, 1, 1), (384, 1, 1), 168, 215040),
    K_FA3: ((132, 1, 1), (384, 1, 1), 128, 215040), K_PREP_VARLEN: ((1, 1, 1), (1024, 1, 1), 32, 0),
    K_SOFTMAX: ((1, 1, 1), (1024, 1, 1), 38, 0), K_TOPK_SAMPLE: ((1, 1, 1), (1024, 1, 1), 40, 0),
    K_EXPONENTIAL: ((132, 1, 1), (256, 1, 1), 30, 0), K_ARGMAX: ((1, 1, 1), (512, 1, 1), 32, 0),
}
_SMS = 132

# ------------------------------------------------------------------------------------------- configuration


@dataclass
class Delay:
    """Make ``rank`` arrive ``delay_us`` late at selected collectives (all if steps/ordinals/every are None)."""

    rank: int
    delay_us: float
    steps: frozenset[int] | None = None      # step indices (truth "index"), None = every step with collectives
    ordinals: frozenset[int] | None = None   # collective ordinals k within the step
    every: int | None = None                 # every K-th collective (k % K == 0)

    def applies(self, step: int, k: int) -> bool:
        if self.steps is not None and step not in self.steps:
            return False
        if self.ordinals is not None and k not in self.ordinals:
            return False
        if self.every is not None and k % self.every != 0:
            return False
        return True

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "delay_ns": int(round(self.delay_us * 1000)),
                "steps": sorted(self.steps) if self.steps is not None else None,
                "ordinals": sorted(self.ordinals) if self.ordinals is not None else None, "every": self.every}


def _as_delay(d: Any) -> Delay:
    if isinstance(d, Delay):
        return d
    if isinstance(d, dict):
        steps = d.get("steps")
        ords = d.get("ordinals")
        return Delay(int(d["rank"]), float(d["delay_us"]), frozenset(steps) if steps is not None else None,
                     frozenset(ords) if ords is not None else None, d.get("every"))
    d = tuple(d)
    steps = frozenset(d[2]) if len(d) > 2 and d[2] is not None else None
    ords = frozenset(d[3]) if len(d) > 3 and d[3] is not None else None
    every = int(d[4]) if len(d) > 4 and d[4] is not None else None
    return Delay(int(d[0]), float(d[1]), steps, ords, every)


@dataclass
class Config:
    ranks: int = 8
    batch_sizes: tuple[int, ...] = (1, 64, 256)
    steps_per_batch: tuple[int, ...] = (20, 20, 20)
    layers: int = 61
    first_k_dense: int = 1
    prefill: bool = True
    prompt_len: int = 512
    max_prefill_tokens: int = 8192
    empty_steps: int = 1
    context_len: int = 1024
    allreduce: str = "nccl"          # nccl | custom
    ar_bus_gbps: float = 20.0
    ar_latency_us: float = 24.0
    delays: tuple[Delay, ...] = ()
    clock_offsets_ns: tuple[int, ...] = ()
    jitter: float = 0.03
    seed: int = 0
    target_gz_mb: float | None = None
    gzip: bool = True
    compresslevel: int = 1
    workers: int = 1
    base_epoch_ns: int = BASE_EPOCH_NS
    category_scale: tuple[tuple[str, float], ...] = ()   # (category, factor): durations of its ops × factor
    kernel_rename: tuple[tuple[str, str], ...] = ()      # (name, new name): the same op written under another name
    noise_seed: int | None = None                        # None: the run-to-run noise follows ``seed``


# ---------------------------------------------------------------------------------------- step programs
MAIN, AUX, D2H = 0, 1, 2          # stream slots
STREAM_IDS = (7, 13, 52)


@dataclass
class Op:
    name: str
    kind: str            # kernel | memcpy | memset
    stream: int          # slot
    launch: int          # index into Program.launches
    dur_ns: int          # base duration (for collectives: transfer time)
    coll: str | None = None   # allreduce | comm_other
    deps: tuple[int, ...] = ()
    nbytes: int = 0
    coll_args: tuple | None = None   # (collective name, in nelems, out nelems, dtype)


@dataclass
class Launch:
    name: str            # cudaGraphLaunch / cudaLaunchKernel / cudaMemcpyAsync / cudaLaunchKernelExC / ...
    cbid: int
    cpu_ns: int          # duration of the runtime call
    gap_before_ns: int   # CPU (python) time before the call
    cpu_op: str | None   # enclosing cpu_op name (eager) or None
    after_annotation: bool = False
    ops: list[int] = field(default_factory=list)


@dataclass
class Program:
    phase: str
    name: str
    launches: list[Launch]
    ops: list[Op]
    ann_tail_ns: int     # CPU time from last in-annotation launch to annotation end
    pre_ns: int          # CPU time from annotation start to first launch (input prep)


def _us(x: float) -> int:
    return max(1000, int(x * 1000))


class _Builder:
    def __init__(self, cfg: Config, phase: str, n_tok: int, n_req: int):
        self.cfg, self.phase, self.n, self.req = cfg, phase, n_tok, n_req
        self.launches: list[Launch] = []
        self.ops: list[Op] = []
        self.cur: int = -1
        self.last_main = -1
        self.scale = dict(cfg.category_scale)

    def launch(self, name: str, cbid: int, cpu_us: float, gap_us: float, cpu_op: str | None = None,
               after: bool = False) -> int:
        self.launches.append(Launch(name, cbid, _us(cpu_us), int(gap_us * 1000), cpu_op, after))
        self.cur = len(self.launches) - 1
        return self.cur

    def op(self, name: str, dur_ns: int, *, stream: int = MAIN, kind: str = "kernel", coll: str | None = None,
           deps: tuple[int, ...] = (), nbytes: int = 0, coll_args: tuple | None = None) -> int:
        dur = max(700, int(dur_ns))
        factor = self.scale.get(KERNEL_CATEGORY[name], 1.0)
        if factor != 1.0:
            dur = max(700, int(round(dur * factor)))
        self.ops.append(Op(name, kind, stream, self.cur, dur, coll, deps, nbytes, coll_args))
        idx = len(self.ops) - 1
        self.launches[self.cur].ops.append(idx)
        if stream == MAIN:
            self.last_main = idx
        return idx

    # --- durations (ns) for n tokens on one H200, TP8 shards
    @staticmethod
    def mem_ns(nbytes: float, gbps: float = 3300.0, fixed_us: float = 2.0) -> int:
        return int(fixed_us * 1000 + nbytes / gbps)

    def gemm_ns(self, k: int, n_out: int, fixed_us: float = 3.0) -> int:
        w = k * n_out * 2
        flops = 2.0 * self.n * k * n_out
        return int(fixed_us * 1000 + max(w / 3300.0, flops / 650e3))   # 650 TFLOP/s -> flops/ns

    def small_ns(self, base_us: float, per_tok_ns: float) -> int:
        return int(base_us * 1000 + per_tok_ns * self.n)

    def allreduce(self) -> int:
        cfg, nbytes = self.cfg, self.n * HIDDEN * 2
        if cfg.allreduce == "custom":
            name = K_CUSTOM_AR1 if nbytes < 512 * 1024 else K_CUSTOM_AR2
            t = 6000 + nbytes / 40.0
            return self.op(name, t, coll="allreduce")
        t = cfg.ar_latency_us * 1000 + 2.0 * (cfg.ranks - 1) / cfg.ranks * nbytes / cfg.ar_bus_gbps
        return self.op(K_NCCL_AR, t, coll="allreduce",
                       coll_args=("allreduce", self.n * HIDDEN, self.n * HIDDEN, "BFloat16"))

    # --- model pieces
    def embedding(self) -> None:
        self.op(K_EMB, self.small_ns(2.5, 1.0))
        self.allreduce()

    def attn_pre(self, layer: int) -> None:
        self.op(K_RMS if layer == 0 else K_FUSED_ADD_RMS, self.small_ns(2.2, 1.5))
        if self.n <= 16:
            self.op(K_FUSED_A, self.gemm_ns(HIDDEN, 2112, 2.0))
        else:
            self.op(K_QA_NVJET, self.gemm_ns(HIDDEN, 2112))
        self.op(K_RMS, self.small_ns(1.8, 0.6))
        self.op(K_RMS, self.small_ns(1.8, 0.4))
        self.op(K_QB, self.gemm_ns(1536, 8 * 192))
        self.op(K_ROTARY, self.small_ns(2.0, 0.8))

    def attn_decode(self) -> None:
        cfg = self.cfg
        self.op(K_UK, self.gemm_ns(128, 512 * 8, 2.5))
        self.op(K_CACHE, self.small_ns(1.8, 0.5))
        kv_bytes = self.req * cfg.context_len * 576 * 2
        self.op(K_FMLA, int(6000 + kv_bytes / 2800.0 + self.n * 8))
        self.op(K_FMLA_COMBINE, self.small_ns(2.5, 3.0))
        self.op(K_UV, self.gemm_ns(512, 128 * 8, 2.5))

    def attn_prefill_eager(self) -> None:
        n = self.n
        self.launch("cudaLaunchKernel", 211, 5.5, 12.0, "_C_cache_ops::concat_and_cache_mla")
        self.op(K_CACHE, self.small_ns(2.0, 0.5))
        self.launch("cudaLaunchKernel", 211, 6.0, 20.0, "aten::mm")
        self.op(K_KVB, self.gemm_ns(512, 8 * 256))
        self.launch("cudaLaunchKernelExC", 430, 7.0, 25.0, "_vllm_fa3_C::fwd")
        ctx = max(1, n // max(1, self.req))
        flops = 4.0 * 8 * n * ctx / 2 * 192
        self.op(K_FA3, int(8000 + flops / 400e3))

    def attn_post(self) -> None:
        self.op(K_OPROJ, self.gemm_ns(8 * 128, HIDDEN))
        self.allreduce()
        self.op(K_FUSED_ADD_RMS, self.small_ns(2.2, 1.5))

    def mlp(self, layer: int) -> None:
        n = self.n
        if layer < self.cfg.first_k_dense:
            self.op(K_DENSE_GU, self.gemm_ns(HIDDEN, 2 * DENSE_INTER // 8))
            self.op(K_ACT, self.small_ns(1.8, 1.0))
            self.op(K_DENSE_DOWN, self.gemm_ns(DENSE_INTER // 8, HIDDEN))
            self.allreduce()
            return
        router = self.op(K_ROUTER, self.gemm_ns(HIDDEN, N_EXPERTS, 2.5))
        # shared expert on the aux stream (forked after the router GEMM)
        sh1 = self.op(K_SH_GU, self.gemm_ns(HIDDEN, 2 * MOE_INTER // 8), stream=AUX, deps=(router,))
        self.op(K_ACT, self.small_ns(1.6, 0.5), stream=AUX)
        sh3 = self.op(K_SH_DOWN, self.gemm_ns(MOE_INTER // 8, HIDDEN), stream=AUX)
        del sh1
        self.op(K_TOPK, self.small_ns(4.0, 6.0))
        self.op(M_SET, 1200 + n * 2, kind="memset", nbytes=4 * (N_EXPERTS + 1))
        self.op(K_ALIGN, self.small_ns(4.5, 4.0))
        active = N_EXPERTS * (1.0 - (1.0 - TOPK / N_EXPERTS) ** max(1, n))
        pairs = n * TOPK
        w13 = active * HIDDEN * 2 * (MOE_INTER // 8) * 0.5
        w2 = active * (MOE_INTER // 8) * HIDDEN * 0.5
        f13 = 2.0 * pairs * HIDDEN * 2 * (MOE_INTER // 8)
        f2 = 2.0 * pairs * (MOE_INTER // 8) * HIDDEN
        self.op(K_MARLIN_W13, int(5000 + max(w13 / 3000.0, f13 / 450e3) + 0.6 * w13 / 3000.0 * min(1.0, pairs / 4096)))
        self.op(K_ACT, self.small_ns(2.0, 8 * 0.35))
        self.op(K_MARLIN_W2, int(4500 + max(w2 / 3000.0, f2 / 450e3) + 0.6 * w2 / 3000.0 * min(1.0, pairs / 4096)))
        self.op(K_MOESUM, self.small_ns(2.2, 1.2))
        self.op(K_ADD, self.small_ns(1.6, 0.6), deps=(sh3,))
        self.allreduce()

    def logits_and_sample(self, rows: int) -> None:
        self.launch("cudaLaunchKernel", 211, 6.0, 60.0, "aten::mm")
        self.op(K_LMHEAD, int(4000 + (VOCAB // 8) * HIDDEN * 2 / 3300.0 + rows * 60))
        self.launch("cudaLaunchKernelExC", 430, 9.0, 35.0, None)
        per = rows * (VOCAB // 8)
        t = self.cfg.ar_latency_us * 1000 * 0.8 + (self.cfg.ranks - 1) / self.cfg.ranks * per * 2 * self.cfg.ranks / (
            self.cfg.ar_bus_gbps)
        self.op(K_NCCL_AG, t, coll="comm_other", coll_args=("_allgather_base", per, per * self.cfg.ranks, "BFloat16"))
        # sample_tokens(): after the execute_model annotation has closed
        first = True
        for name, opname, base, per_row in ((K_SOFTMAX, "aten::_softmax", 5.0, 45.0),
                                            (K_TOPK_SAMPLE, "aten::topk", 7.0, 40.0),
                                            (K_EXPONENTIAL, "aten::exponential_", 3.5, 20.0),
                                            (K_ARGMAX, "aten::argmax", 4.0, 25.0)):
            self.launch("cudaLaunchKernel", 211, 5.0, 140.0 if first else 18.0, opname, after=True)
            first = False
            self.op(name, self.small_ns(base, 0) + rows * per_row)
        last = self.last_main
        self.launch("cudaEventRecord", 135, 2.0, 4.0, None, after=True)
        self.launch("cudaStreamWaitEvent", 147, 1.5, 2.0, None, after=True)
        self.launch("cudaMemcpyAsync", 41, 7.0, 6.0, "aten::copy_", after=True)
        self.op(M_D2H, 1400 + rows * 8, stream=D2H, kind="memcpy", deps=(last,), nbytes=rows * 8)

    def h2d(self, rows: int, req: int) -> None:
        for nb, gap in ((rows * 4, 90.0), (rows * 8, 14.0), (rows * 8, 12.0), (req * 4 * 64, 15.0)):
            self.launch("cudaMemcpyAsync", 41, 6.5, gap, "aten::copy_")
            self.op(M_H2D, 1100 + nb // 20, kind="memcpy", nbytes=max(4, nb))


def build_program(cfg: Config, phase: str, n_req: int, n_tok: int) -> Program:
    if phase == "empty":
        return Program("empty", "execute_context_0(0)_generation_0(0)", [], [], 40_000, 60_000)
    b = _Builder(cfg, phase, n_tok, n_req)
    if phase == "decode":
        name = f"execute_context_0(0)_generation_{n_req}({n_tok})"
        b.h2d(n_tok, n_req)
        b.launch("cudaLaunchKernel", 211, 5.0, 25.0, "aten::empty")
        b.op(K_MLA_META, b.small_ns(3.0, 2.0))
        b.launch("cudaGraphLaunch", 311, 14.0 + cfg.layers * 0.05, 30.0, None)
        b.embedding()
        for layer in range(cfg.layers):
            b.attn_pre(layer)
            b.attn_decode()
            b.attn_post()
            b.mlp(layer)
        b.op(K_FUSED_ADD_RMS, b.small_ns(2.2, 1.5))
        b.logits_and_sample(n_req)
        return Program(phase, name, b.launches, b.ops, 45_000, 260_000 + n_req * 900)
    # prefill: piecewise graphs split at attention
    name = f"execute_context_{n_req}({n_tok})_generation_0(0)"
    b.h2d(n_tok, n_req)
    b.launch("cudaLaunchKernel", 211, 5.0, 25.0, "aten::empty")
    b.op(K_PREP_VARLEN, b.small_ns(3.0, 0.01))
    b.launch("cudaGraphLaunch", 311, 9.0, 30.0, None)
    b.embedding()
    b.attn_pre(0)
    for layer in range(cfg.layers):
        b.attn_prefill_eager()
        b.launch("cudaGraphLaunch", 311, 9.0, 18.0, None)
        b.attn_post()
        b.mlp(layer)
        if layer + 1 < cfg.layers:
            b.attn_pre(layer + 1)
        else:
            b.op(K_FUSED_ADD_RMS, b.small_ns(2.2, 1.5))
    b.logits_and_sample(n_req)
    return Program(phase, name, b.launches, b.ops, 50_000, 900_000 + n_tok * 60)


# ------------------------------------------------------------------------------------------- simulation


@dataclass
class StepSim:
    index: int
    prog: Program
    ann_start: list[int]        # per rank, true ns
    ann_end: list[int]
    launch_ts: list[list[int]]  # [rank][launch]
    start: list[list[int]]      # [rank][op]
    dur: list[list[int]]
    cpu_end: list[int]          # per rank, true ns (after the last launch of the step)


def _step_plan(cfg: Config) -> list[tuple[str, int, int]]:
    """(phase, requests, tokens) per step."""
    plan: list[tuple[str, int, int]] = []
    for gi, bs in enumerate(cfg.batch_sizes):
        n_steps = cfg.steps_per_batch[gi] if gi < len(cfg.steps_per_batch) else cfg.steps_per_batch[-1]
        if cfg.prefill:
            plan.append(("prefill", bs, max(bs, min(bs * cfg.prompt_len, cfg.max_prefill_tokens))))
        plan.extend(("decode", bs, bs) for _ in range(n_steps))
        plan.extend(("empty", 0, 0) for _ in range(cfg.empty_steps))
    return plan


def simulate(cfg: Config) -> Iterable[StepSim]:
    """Yield the simulated steps in order (a generator: one step in memory at a time)."""
    R = cfg.ranks
    rng = random.Random(f"synth-{cfg.seed}")
    rank_rngs = [random.Random(f"synth-{cfg.seed}-rank{r}") for r in range(R)]
    speed = [1.0 + rng.uniform(-0.01, 0.01) for _ in range(R)]   # persistent per-GPU speed difference
    if cfg.noise_seed is not None:  # the same GPUs (speeds), another run: only the jitter and timing draws differ
        rng = random.Random(f"synth-{cfg.seed}-noise{cfg.noise_seed}")
        rank_rngs = [random.Random(f"synth-{cfg.seed}-noise{cfg.noise_seed}-rank{r}") for r in range(R)]
    delays = [(_as_delay(d)) for d in cfg.delays]
    cache: dict[tuple[str, int, int], Program] = {}
    stream_free = [[0, 0, 0] for _ in range(R)]
    t_sched = cfg.base_epoch_ns
    prev_d2h_end = cfg.base_epoch_ns
    jit = cfg.jitter
    for si, (phase, req, tok) in enumerate(_step_plan(cfg)):
        key = (phase, req, tok)
        prog = cache.get(key)
        if prog is None:
            prog = cache[key] = build_program(cfg, phase, req, tok)
        n_l, n_o = len(prog.launches), len(prog.ops)
        ann_start, ann_end, cpu_end = [0] * R, [0] * R, [0] * R
        launch_ts = [[0] * n_l for _ in range(R)]
        for r in range(R):
            rr = rank_rngs[r]
            t = t_sched + int(rr.uniform(5_000, 60_000))
            ann_start[r] = t
            t += int(prog.pre_ns * rr.uniform(0.9, 1.15))
            ann_closed = False
            for li, ln in enumerate(prog.launches):
                if ln.after_annotation and not ann_closed:
                    t += int(prog.ann_tail_ns * rr.uniform(0.9, 1.2))
                    ann_end[r] = t
                    ann_closed = True
                t += int(ln.gap_before_ns * rr.uniform(0.85, 1.3))
                launch_ts[r][li] = t
                t += int(ln.cpu_ns * rr.uniform(0.9, 1.25))
            if not ann_closed:
                t += int(prog.ann_tail_ns * rr.uniform(0.9, 1.2))
                ann_end[r] = t
            cpu_end[r] = t + int(rr.uniform(20_000, 40_000))
        start = [[0] * n_o for _ in range(R)]
        dur = [[0] * n_o for _ in range(R)]
        k = 0
        for j, op in enumerate(prog.ops):
            ln = prog.launches[op.launch]
            graph = ln.name == "cudaGraphLaunch"
            arrivals = [0] * R
            for r in range(R):
                rr = rank_rngs[r]
                sf = stream_free[r]
                ready = launch_ts[r][op.launch] + (4_000 if graph else 2_500)
                s = max(ready, sf[op.stream] + int(rr.uniform(600, 1_500)))
                for d in op.deps:
                    s = max(s, start[r][d] + dur[r][d] + 900)
                arrivals[r] = s
                if op.coll is None:
                    dd = int(op.dur_ns * speed[r] * (1.0 + rr.gauss(0.0, jit)))
                    dur[r][j] = max(600, dd)
                    start[r][j] = s
                    sf[op.stream] = s + dur[r][j]
            if op.coll is not None:
                for r in range(R):
                    for dl in delays:
                        if dl.rank == r and dl.applies(si, k):
                            dns = int(round(dl.delay_us * 1000))
                            prev = _prev_on_stream(prog, j, r, start)
                            if prev is not None:
                                dur[r][prev] += dns
                            arrivals[r] += dns
                transfer = max(1000, int(op.dur_ns * (1.0 + rng.gauss(0.0, jit / 2))))
                end = max(arrivals) + transfer
                for r in range(R):
                    start[r][j] = arrivals[r]
                    dur[r][j] = end - arrivals[r]
                    stream_free[r][op.stream] = end
                k += 1
        step = StepSim(si, prog, ann_start, ann_end, launch_ts, start, dur, cpu_end)
        yield step
        # next step: scheduler broadcast after every rank returned, async depth 1 (wait for step i-1's D2H)
        d2h_end = prev_d2h_end
        if n_o:
            d2h_end = max(start[r][-1] + dur[r][-1] for r in range(R))
        t_sched = max(max(cpu_end), prev_d2h_end) + int(rng.uniform(80_000, 200_000))
        prev_d2h_end = d2h_end


def _prev_on_stream(prog: Program, j: int, r: int, start: list[list[int]]) -> int | None:
    st = prog.ops[j].stream
    for i in range(j - 1, -1, -1):
        if prog.ops[i].stream == st:
            return i
    return None


# ------------------------------------------------------------------------------------------- writing
_IND = "        "


def _f(ns: int) -> str:
    return repr(ns / 1000)


def _list_lines(vals: Sequence[int], ind: str) -> str:
    return "[\n" + ",\n".join(f"{ind}    {v}" for v in vals) + f"\n{ind}]"


class _Templates:
    """Pre-rendered static parts of GPU events, per (name, device, stream)."""

    def __init__(self, device: int, ranks: int, rename: dict[str, str] | None = None):
        self.device = device
        self.ranks = ranks
        self.rename = rename or {}
        self.ranks_str = json.dumps("[" + ", ".join(str(i) for i in range(ranks)) + "]")
        self.cache: dict[tuple[str, int], tuple[str, str]] = {}

    def gpu(self, op: Op, stream_id: int) -> tuple[str, str]:
        key = (op.name, stream_id, op.coll_args)  # collective args (message sizes) differ per call site and batch
        t = self.cache.get(key)
        if t is not None:
            return t
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[op.kind]
        head = (f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "{cat}",\n{_IND}    "name": {json.dumps(self.rename.get(op.name, op.name))},\n'
                f'{_IND}    "pid": {self.device},\n{_IND}    "tid": {stream_id},\n{_IND}    "ts": ')
        a = _IND + "        "
        if op.kind == "kernel":
            grid, block, regs, smem = _GEOM[op.name]
            blocks = grid[0] * grid[1] * grid[2]
            threads = block[0] * block[1] * block[2]
            bps = round(blocks / _SMS, 6)
            wps = round(blocks * threads / 32 / _SMS, 6)
            occ = min(100, int(100 * min(64.0, wps) / 64)) if blocks >= _SMS else 0
            tail = (f',\n{a}"registers per thread": {regs},\n{a}"shared memory": {smem},\n'
                    f'{a}"blocks per SM": {bps!r},\n{a}"warps per SM": {wps!r},\n'
                    f'{a}"grid": {_list_lines(grid, a)},\n{a}"block": {_list_lines(block, a)},\n'
                    f'{a}"est. achieved occupancy %": {occ}')
            if op.coll_args is not None:
                cname, inn, outn, dtype = op.coll_args
                tail += (f',\n{a}"Collective name": "{cname}",\n{a}"In msg nelems": {inn},\n'
                         f'{a}"Out msg nelems": {outn},\n{a}"Group size": {self.ranks},\n{a}"dtype": "{dtype}",\n'
                         f'{a}"In split size": "[]",\n{a}"Out split size": "[]",\n{a}"Process Group Name": "1",\n'
                         f'{a}"Process Group Description": "undefined",\n{a}"Process Group Ranks": {self.ranks_str}')
            tail += f"\n{_IND}    }}\n{_IND}}}"
        else:
            tail = None  # memcpy/memset: bytes and bandwidth vary, rendered per event
        mid = (f',\n{a}"queued": 0,\n{a}"device": {self.device},\n{a}"context": 1,\n{a}"stream": {stream_id},\n'
               f'{a}"correlation": ') if op.kind == "kernel" else (
            f',\n{a}"device": {self.device},\n{a}"context": 1,\n{a}"stream": {stream_id},\n{a}"correlation": ')
        t = (head, mid, tail)
        self.cache[key] = t
        return t


_PY_FRAMES = (
    "vllm/v1/worker/gpu_model_runner.py(2211): _prepare_inputs",
    "vllm/v1/worker/gpu_input_batch.py(812): refresh_metadata",
    "vllm/v1/worker/block_table.py(113): commit_block_table",
    "vllm/v1/attention/backends/mla/common.py(640): build",
    "vllm/v1/attention/backends/mla/flashmla.py(131): _build_decode",
    "vllm/v1/worker/gpu_model_runner.py(1402): _calc_spec_decode_metadata",
    "vllm/v1/core/sched/output.py(88): num_scheduled_tokens",
    "vllm/forward_context.py(238): set_forward_context",
    "contextlib.py(137): __enter__",
    "contextlib.py(146): __exit__",
    "torch/utils/_contextlib.py(117): decorate_context",
    "torch/cuda/graphs.py(119): replay",
    "vllm/compilation/cuda_graph.py(171): __call__",
    "vllm/v1/sample/sampler.py(64): forward",
    "vllm/v1/sample/ops/topk_topp_sampler.py(101): forward_native",
    "numpy/core/fromnumeric.py(2313): sum",
    "<built-in method copy_ of Tensor object at 0x7f5ac1a3c5e0>",
    "<built-in function isinstance>",
    "<built-in method to of Tensor object at 0x7f5ac1a3d2b0>",
    "<built-in method item of Tensor object at 0x7f5ac1a3c6d0>",
    "<built-in function len>",
    "torch/_ops.py(1158): __call__",
    "vllm/utils/__init__.py(1297): cdiv",
    "vllm/v1/worker/gpu_model_runner.py(982): _update_states",
    "vllm/v1/spec_decode/utils.py(31): is_spec_decode_unsupported",
    "dataclasses.py(1303): replace",
    "typing.py(2187): cast",
)
_CPU_OPS = (
    ("aten::empty", "[[64], [], [], [], [], []]"),
    ("aten::slice", "[[512], [], [], [], []]"),
    ("aten::as_strided", "[[512], [], [], []]"),
    ("aten::view", "[[256, 7168], []]"),
    ("aten::fill_", "[[385], []]"),
    ("aten::index_select", "[[163840, 7168], [], [256]]"),
)


_PY_HEADS: dict[int, list[str]] = {}


def _py_heads(pid: int) -> list[str]:
    heads = [f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "python_function",\n{_IND}    "name": '
             f'{json.dumps(name)},\n{_IND}    "pid": {pid},\n{_IND}    "tid": {pid},\n{_IND}    "ts": '
             for name in _PY_FRAMES]
    _PY_HEADS[pid] = heads
    return heads


_DIMS_CACHE: dict[tuple[str, str], str] = {}


class _Writer:
    def __init__(self, cfg: Config, rank: int, path: Path, meta: dict[str, Any]):
        self.cfg, self.rank, self.path = cfg, rank, path
        self.offset = meta["offset_ns"]
        self.base = meta["base_ns"]
        self.pid = meta["pid"]
        self.tpl = _Templates(rank, cfg.ranks, dict(cfg.kernel_rename))
        self.ext = 100
        self.corr = 1000
        self.py_id = 1_000_000
        self.ev_idx = 0
        self.n_events = 0
        self.raw = open(path, "wb")
        if cfg.gzip:
            from isal import igzip
            self.out = igzip.IGzipFile(fileobj=self.raw, mode="wb", compresslevel=cfg.compresslevel)
        else:
            self.out = self.raw
        self.bytes = 0
        self.first = True

    def rel(self, true_ns: int) -> str:
        return repr((true_ns + self.offset - self.base) / 1000)

    def emit(self, chunks: list[str]) -> None:
        if not chunks:
            return
        s = ",\n".join(chunks)
        if not self.first:
            s = ",\n" + s
        self.first = False
        b = s.encode()
        self.bytes += len(b)
        self.out.write(b)
        self.n_events += len(chunks)

    def tell_gz(self) -> int:
        return self.raw.tell() if self.cfg.gzip else self.bytes

    def header(self, header_obj: dict[str, Any]) -> None:
        txt = json.dumps(header_obj, indent=4)
        assert txt.endswith("\n}")
        s = txt[:-2] + ',\n    "traceEvents": [\n'
        b = s.encode()
        self.bytes += len(b)
        self.out.write(b)

    def footer(self, trace_name: str) -> None:
        b = ("\n    ],\n    \"traceName\": " + json.dumps(trace_name) + "\n}").encode()
        self.bytes += len(b)
        self.out.write(b)
        if self.out is not self.raw:
            self.out.close()
        self.raw.close()

    # --- event renderers
    def x_cpu(self, cat: str, name: str, ts_true: int, dur: int, args: str) -> str:
        return (f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "{cat}",\n{_IND}    "name": {json.dumps(name)},\n'
                f'{_IND}    "pid": {self.pid},\n{_IND}    "tid": {self.pid},\n{_IND}    "ts": {self.rel(ts_true)},\n'
                f'{_IND}    "dur": {_f(dur)},\n{_IND}    "args": {{\n{args}\n{_IND}    }}\n{_IND}}}')

    def py(self, name: str, ts: int, dur: int, parent: int) -> tuple[str, int]:
        self.py_id += 1
        self.ev_idx += 1
        a = _IND + "        "
        return (f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "python_function",\n{_IND}    "name": '
                f'{json.dumps(name)},\n{_IND}    "pid": {self.pid},\n{_IND}    "tid": {self.pid},\n'
                f'{_IND}    "ts": {self.rel(ts)},\n{_IND}    "dur": {_f(dur)},\n{_IND}    "args": {{\n'
                f'{a}"Python parent id": {parent},\n{a}"Python id": {self.py_id},\n{a}"Ev Idx": {self.ev_idx}\n'
                f'{_IND}    }}\n{_IND}}}'), self.py_id

    def cpu_op(self, name: str, ts: int, dur: int, ext: int, dims: str | None = None) -> str:
        self.ev_idx += 1
        a = _IND + "        "
        args = f'{a}"External id": {ext},\n{a}"Record function id": 0'
        if dims is not None:
            args += f',\n{a}"Input Dims": {_dims_pretty(dims, a)}'
        args += f',\n{a}"Ev Idx": {self.ev_idx}'
        return self.x_cpu("cpu_op", name, ts, dur, args)

    def flow(self, ph: str, corr: int, pid: int, tid: int, ts: int) -> str:
        tail = f',\n{_IND}    "bp": "e"' if ph == "f" else ""
        return (f'{_IND}{{\n{_IND}    "ph": "{ph}",\n{_IND}    "id": {corr},\n{_IND}    "pid": {pid},\n'
                f'{_IND}    "tid": {tid},\n{_IND}    "ts": {self.rel(ts)},\n{_IND}    "cat": "ac2g",\n'
                f'{_IND}    "name": "ac2g"{tail}\n{_IND}}}')

    def padding(self, n: int, t0: int, t1: int, parent: int, out: list[str], rng: random.Random) -> None:
        """n python_function/cpu_op events as nested call chains (depth 5) inside [t0, t1]."""
        if n <= 0 or t1 - t0 < 2:
            return
        n_chains = max(1, n // 5)
        width = (t1 - t0) // n_chains
        made = 0
        heads = _PY_HEADS[self.pid] if self.pid in _PY_HEADS else _py_heads(self.pid)
        nf = len(heads)
        base = self.offset - self.base
        a_ = _IND + "        "
        mid1 = f',\n{_IND}    "dur": '
        mid2 = f',\n{_IND}    "args": {{\n{a_}"Python parent id": '
        mid3 = f',\n{a_}"Python id": '
        mid4 = f',\n{a_}"Ev Idx": '
        end = f'\n{_IND}    }}\n{_IND}}}'
        py_id, ev_idx = self.py_id, self.ev_idx
        append = out.append
        rnd = rng.random
        for c in range(n_chains):
            depth = 5 if c < n_chains - 1 else n - made
            a = t0 + c * width
            b = a + max(1, width - 1)
            p = parent
            salt = int(rnd() * 1_000_003)
            op_leaf = salt % 4 == 0
            for d in range(depth):
                if b - a < 2:
                    b = a + 1
                if d == depth - 1 and op_leaf:
                    self.py_id, self.ev_idx = py_id, ev_idx
                    name, dims = _CPU_OPS[salt % len(_CPU_OPS)]
                    self.ext += 1
                    append(self.cpu_op(name, a, b - a, self.ext, dims))
                    py_id, ev_idx = self.py_id, self.ev_idx
                else:
                    py_id += 1
                    ev_idx += 1
                    append(f"{heads[(salt + d * 7) % nf]}{(a + base) / 1000!r}{mid1}{(b - a) / 1000!r}{mid2}{p}"
                           f"{mid3}{py_id}{mid4}{ev_idx}{end}")
                    p = py_id
                made += 1
                shrink = (b - a) // 6
                a, b = a + (shrink >> 1), b - shrink
            if made >= n:
                break
        self.py_id, self.ev_idx = py_id, ev_idx

    def step(self, st: StepSim, n_pad: int, rng: random.Random) -> None:
        r, prog = self.rank, st.prog
        a0, a1 = st.ann_start[r], st.ann_end[r]
        cpu: list[str] = []
        self.ext += 1
        ann_ext = self.ext
        self.ev_idx += 1
        a = _IND + "        "
        cpu.append(self.x_cpu("user_annotation", prog.name, a0, a1 - a0,
                              f'{a}"External id": {ann_ext},\n{a}"Record function id": 0,\n{a}"Ev Idx": {self.ev_idx}'))
        end_all = st.cpu_end[r]
        s, wid = self.py("vllm/v1/worker/gpu_worker.py(601): execute_model", a0 + 1000, a1 - a0 - 1500, 2)
        cpu.append(s)
        s, mid = self.py("vllm/v1/worker/gpu_model_runner.py(2540): execute_model", a0 + 2500, a1 - a0 - 4000, wid)
        cpu.append(s)
        launches = prog.launches
        t_after = None
        if any(ln.after_annotation for ln in launches):
            t_after = min(st.launch_ts[r][i] for i, ln in enumerate(launches) if ln.after_annotation) - 60_000
            t_after = max(t_after, a1 + 1000)
            s, sid = self.py("vllm/v1/worker/gpu_worker.py(622): sample_tokens", t_after, end_all - t_after - 5000, 2)
            cpu.append(s)
            s, sid2 = self.py("vllm/v1/worker/gpu_model_runner.py(2905): sample_tokens", t_after + 1200,
                              end_all - t_after - 8000, sid)
            cpu.append(s)
        # padding: spread over the CPU gaps between launches inside the annotation and in sample_tokens
        gaps: list[tuple[int, int, int]] = []
        prev = a0 + 4000
        for i, ln in enumerate(launches):
            lt = st.launch_ts[r][i]
            parent = mid if not ln.after_annotation else sid2
            if ln.after_annotation and t_after is not None and prev < t_after + 1500:
                prev = t_after + 1500
            if lt - 2000 > prev:
                gaps.append((prev, lt - 2000, parent))
            prev = lt + (launches[i].cpu_ns * 2) + 2000
        if not launches:
            gaps.append((a0 + 4000, a1 - 3000, mid))
        total_gap = sum(g[1] - g[0] for g in gaps) or 1
        left = n_pad
        for gi, (g0, g1, parent) in enumerate(gaps):
            share = left if gi == len(gaps) - 1 else int(n_pad * (g1 - g0) / total_gap)
            share = min(share, left)
            self.padding(share, g0, g1, parent, cpu, rng)
            left -= share
        # runtime calls (+ eager cpu_ops) and GPU activities
        rt: list[str] = []
        gpu: list[str] = []
        flows: list[str] = []
        ann_gpu0 = ann_gpu1 = None
        for i, ln in enumerate(launches):
            lt = st.launch_ts[r][i]
            self.corr += 1
            corr = self.corr
            if ln.cpu_op is not None:
                self.ext += 1
                ext = self.ext
                cpu.append(self.cpu_op(ln.cpu_op, lt - 1500, ln.cpu_ns + 3000, ext))
            else:
                ext = ann_ext if not ln.after_annotation else 0
            rt_args = f'{a}"External id": {ext},\n{a}"cbid": {ln.cbid},\n{a}"correlation": {corr}'
            rt.append(self.x_cpu("cuda_runtime", ln.name, lt, ln.cpu_ns, rt_args))
            if not ln.ops:
                continue
            flows.append(self.flow("s", corr, self.pid, self.pid, lt))
            for j in ln.ops:
                op = prog.ops[j]
                sid_ = STREAM_IDS[op.stream]
                head, midt, tail = self.tpl.gpu(op, sid_)
                s0, d = st.start[r][j], st.dur[r][j]
                if not ln.after_annotation:
                    ann_gpu0 = s0 if ann_gpu0 is None else min(ann_gpu0, s0)
                    ann_gpu1 = s0 + d if ann_gpu1 is None else max(ann_gpu1, s0 + d)
                if tail is None:
                    bw = op.nbytes / d if d else 0.0
                    tail = (f',\n{a}"bytes": {op.nbytes},\n{a}"memory bandwidth (GB/s)": {bw!r}\n'
                            f'{_IND}    }}\n{_IND}}}')
                gpu.append(f'{head}{self.rel(s0)},\n{_IND}    "dur": {_f(d)},\n{_IND}    "args": {{\n'
                           f'{a}"External id": {ext}{midt}{corr}{tail}')
                flows.append(self.flow("f", corr, self.rank, sid_, s0))
        if ann_gpu0 is not None:
            gpu.append(f'{_IND}{{\n{_IND}    "ph": "X",\n{_IND}    "cat": "gpu_user_annotation",\n'
                       f'{_IND}    "name": {json.dumps(prog.name)},\n{_IND}    "pid": {self.rank},\n'
                       f'{_IND}    "tid": {STREAM_IDS[MAIN]},\n{_IND}    "ts": {self.rel(ann_gpu0)},\n'
                       f'{_IND}    "dur": {_f(ann_gpu1 - ann_gpu0)},\n{_IND}    "args": {{\n'
                       f'{a}"External id": {ann_ext}\n{_IND}    }}\n{_IND}}}')
        self.emit(cpu)
        self.emit(rt)
        self.emit(gpu)
        self.emit(flows)


def _dims_pretty(dims: str, ind: str) -> str:
    key = (dims, ind)
    r = _DIMS_CACHE.get(key)
    if r is None:
        r = _DIMS_CACHE[key] = json.dumps(json.loads(dims), indent=4).replace("\n", "\n" + ind)
    return r


# ------------------------------------------------------------------------------------------- driver


def _rank_meta(cfg: Config, rng: random.Random) -> list[dict[str, Any]]:
    metas = []
    for r in range(cfg.ranks):
        off = cfg.clock_offsets_ns[r] if r < len(cfg.clock_offsets_ns) else 0
        load_age = int(rng.uniform(95, 140) * 1e9) + r * 37_000_000 + rng.randrange(1_000_000)
        metas.append({"rank": r, "offset_ns": off, "base_ns": cfg.base_epoch_ns + off - load_age,
                      "pid": 48211 + 97 * r, "export_ns": 0})
    return metas


def _header(cfg: Config, rank: int, base_ns: int) -> dict[str, Any]:
    dev = {"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, "computeMinor": 0,
           "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
           "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
           "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
    all_ranks = list(range(cfg.ranks))
    pgs = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": cfg.ranks,
            "ranks": all_ranks},
           {"pg_name": "1", "pg_desc": "undefined", "backend_config": "cuda:nccl", "pg_size": cfg.ranks,
            "ranks": all_ranks},
           {"pg_name": "2", "pg_desc": "undefined", "backend_config": "cpu:gloo,cuda:gloo", "pg_size": cfg.ranks,
            "ranks": all_ranks}]
    return {
        "schemaVersion": 1,
        "deviceProperties": [dict(dev, id=i) for i in range(cfg.ranks)],
        "cupti_version": 24,
        "cuda_runtime_version": 12080,
        "cuda_driver_version": 12080,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": cfg.ranks, "pg_count": len(pgs),
                            "pg_config": pgs, "nccl_version": "2.27.3"},
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


def _calibrate(cfg: Config, meta: dict[str, Any], tmp: Path) -> tuple[float, float]:
    """(gz bytes per padding event, gz bytes per core event), measured on rendered samples."""
    w = _Writer(replace(cfg, gzip=False), meta["rank"], tmp, dict(meta))
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


_PHASE_WEIGHT = {"empty": 0.1, "decode": 1.0, "prefill": 3.0}


def _write_rank(cfg: Config, rank: int, meta: dict[str, Any], out_dir: Path, plan: list[str],
                core_events_per_step: list[int], progress: bool) -> dict[str, Any]:
    t_start = time.perf_counter()
    suffix = ".pt.trace.json.gz" if cfg.gzip else ".pt.trace.json"
    fname = f"dp0_pp0_tp{rank}_dcp0_ep{rank}_rank{rank}.{meta['export_ns']}{suffix}"
    path = out_dir / fname
    n_steps = len(plan)
    target = int(cfg.target_gz_mb * 1e6) if cfg.target_gz_mb else 0
    g_pad = g_core = 0.0
    if target:
        g_pad, g_core = _calibrate(cfg, meta, out_dir / f".synth-calib-{rank}.tmp")
    w = _Writer(cfg, rank, path, meta)
    w.header(_header(cfg, rank, meta["base_ns"]))
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
    return {"rank": rank, "file": fname, "events": w.n_events, "bytes": w.bytes,
            "gz_bytes": size if cfg.gzip else None, "seconds": round(time.perf_counter() - t_start, 3)}


def _count_core_events(cfg: Config) -> list[int]:
    counts = []
    for phase, req, tok in _step_plan(cfg):
        prog = build_program(cfg, phase, req, tok)
        n_ops = len(prog.ops)
        n_l = len(prog.launches)
        n_flow_s = sum(1 for ln in prog.launches if ln.ops)
        n_cpuop = sum(1 for ln in prog.launches if ln.cpu_op)
        counts.append(3 + n_l + n_cpuop + n_ops * 2 + n_flow_s + (3 if n_ops else 0))
    return counts


def _truth_from_sim(cfg: Config, metas: list[dict[str, Any]]) -> tuple[list, list, list]:
    R = cfg.ranks
    steps, per_rank, colls = [], [[] for _ in range(R)], []
    for st in simulate(cfg):
        prog = st.prog
        graph_launches = sum(1 for ln in prog.launches if ln.name == "cudaGraphLaunch")
        phase = prog.phase
        req = tok = 0
        if phase != "empty":
            m = re.match(r"execute_context_(\d+)\((\d+)\)_generation_(\d+)\((\d+)\)", prog.name)
            assert m
            cr, ct, gr, gt = map(int, m.groups())
        else:
            cr = ct = gr = gt = 0
        req, tok = cr + gr, ct + gt
        steps.append({"index": st.index, "name": prog.name, "phase": phase,
                      "batch_size": gr if phase == "decode" else cr, "requests": req, "tokens": tok,
                      "ctx_reqs": cr, "ctx_tokens": ct, "gen_reqs": gr, "gen_tokens": gt,
                      "graph": None if not graph_launches else ("FULL" if graph_launches == 1 else "PIECEWISE"),
                      "graph_launches": graph_launches,
                      "n_collectives": sum(1 for o in prog.ops if o.coll)})
        for r in range(R):
            off = metas[r]["offset_ns"]
            cats = {c: {"ns": 0, "count": 0} for c in CATEGORIES}
            ivs = []
            kcount = 0
            for j, op in enumerate(prog.ops):
                s, d = st.start[r][j], st.dur[r][j]
                c = cats[KERNEL_CATEGORY[op.name]]
                c["ns"] += d
                c["count"] += 1
                kcount += op.kind == "kernel"
                ivs.append((s, s + d))
            busy = 0
            g0 = g1 = None
            if ivs:
                ivs.sort()
                cs, ce = ivs[0]
                g0 = cs
                g1 = max(e for _, e in ivs)
                for s, e in ivs[1:]:
                    if s > ce:
                        busy += ce - cs
                        cs, ce = s, e
                    elif e > ce:
                        ce = e
                busy += ce - cs
            per_rank[r].append({"gpu_start_ns": None if g0 is None else g0 + off,
                                "gpu_end_ns": None if g1 is None else g1 + off,
                                "kernel_count": kcount, "categories": cats, "busy_ns": busy,
                                "annotation_start_ns": st.ann_start[r] + off,
                                "annotation_end_ns": st.ann_end[r] + off})
        k = 0
        kc = {"allreduce": 0, "comm_other": 0}
        delays = [_as_delay(d) for d in cfg.delays]
        for j, op in enumerate(prog.ops):
            if not op.coll:
                continue
            ends = {st.start[r][j] + st.dur[r][j] for r in range(R)}
            assert len(ends) == 1
            end = ends.pop()
            arr = [st.start[r][j] for r in range(R)]
            late = max(range(R), key=lambda r: arr[r])
            waits = [max(arr) - arr[r] for r in range(R)]
            dl = [0] * R
            for d in delays:
                if d.applies(st.index, k):
                    dl[d.rank] += int(round(d.delay_us * 1000))
            colls.append({"step": st.index, "k": k, "category": op.coll, "k_cat": kc[op.coll], "name": op.name,
                          "transfer_ns": end - max(arr), "wait_ns": waits, "late_rank": late,
                          "end_true_ns": end, "delay_ns": dl})
            kc[op.coll] += 1
            k += 1
    return steps, per_rank, colls


def _worker(args: tuple) -> dict[str, Any]:
    cfg, rank, meta, out_dir, plan, core, progress = args
    return _write_rank(cfg, rank, meta, Path(out_dir), plan, core, progress)


def generate(out_dir: str | os.PathLike[str], *, ranks: int = 8, batch_sizes: Sequence[int] = (1, 64, 256),
             steps_per_batch: int | Sequence[int] = 20, layers: int = 61, first_k_dense: int = 1,
             prefill: bool = True, prompt_len: int = 512, max_prefill_tokens: int = 8192, empty_steps: int = 1,
             context_len: int = 1024, allreduce: str = "nccl", ar_bus_gbps: float = 20.0,
             ar_latency_us: float = 24.0, delays: Iterable[Any] = (),
             clock_offsets_us: float | Sequence[float] | None = None, max_clock_offset_us: float = 2000.0,
             jitter: float = 0.03, target_gz_mb: float | None = None, gzip: bool = True, compresslevel: int = 1,
             workers: int = 1, seed: int = 0, progress: bool = False,
             category_scale: dict[str, float] | None = None, kernel_rename: dict[str, str] | None = None,
             noise_seed: int | None = None) -> dict[str, Any]:
    """Write ``ranks`` synthetic trace files + truth.json into ``out_dir``; return the truth dict.

    ``delays``: items ``Delay``, dicts ``{rank, delay_us, steps?, ordinals?, every?}`` or tuples
    ``(rank, delay_us[, steps[, ordinals[, every]]])``. ``clock_offsets_us``: per-rank list (µs), or None for
    random offsets in ±``max_clock_offset_us`` (rank 0 always 0). ``workers`` > 1 writes ranks in parallel
    processes. ``target_gz_mb`` pads every rank file to about that many MB (10^6 bytes) compressed (or
    uncompressed when ``gzip=False``).

    For comparisons with a known change: ``category_scale`` ``{category: factor}`` makes every op of a category
    take ``factor`` × its time (``{"attention": 1.2}``: attention 20 % slower); ``kernel_rename`` ``{name: new}``
    writes an op under another name (same duration and category: one kernel replaced by another); ``noise_seed``
    keeps ``seed``'s GPUs (per-rank speed, clock offsets, base times) and draws other jitter and timings: the same
    workload run again. All default to the unchanged generator.
    """
    if allreduce not in ("nccl", "custom"):
        raise ValueError("allreduce must be 'nccl' or 'custom'")
    if isinstance(steps_per_batch, int):
        steps_per_batch = [steps_per_batch] * len(batch_sizes)
    rng = random.Random(f"meta-{seed}")
    if clock_offsets_us is None:
        offs = [0] + [int(rng.uniform(-max_clock_offset_us, max_clock_offset_us) * 1000) for _ in range(ranks - 1)]
    elif isinstance(clock_offsets_us, (int, float)):
        offs = [int(float(clock_offsets_us) * 1000 * i / max(1, ranks - 1)) for i in range(ranks)]
    else:
        offs = [int(round(float(x) * 1000)) for x in clock_offsets_us]
        if len(offs) != ranks:
            raise ValueError(f"clock_offsets_us has {len(offs)} values for {ranks} ranks")
    dl = tuple(_as_delay(d) for d in delays)
    for d in dl:
        if not 0 <= d.rank < ranks:
            raise ValueError(f"delay rank {d.rank} out of range")
    scales = dict(category_scale or {})
    for cat, factor in scales.items():
        if cat not in CATEGORIES:
            raise ValueError(f"category_scale: unknown category {cat!r}; one of {', '.join(CATEGORIES)}")
        if not (math.isfinite(factor) and factor > 0):
            raise ValueError(f"category_scale: factor for {cat} must be a positive number, not {factor}")
    renames = dict(kernel_rename or {})
    for old, new in renames.items():
        if old not in KERNEL_CATEGORY:
            raise ValueError(f"kernel_rename: {old[:80]!r} is not a kernel the generator writes")
        if not new or new in KERNEL_CATEGORY or list(renames.values()).count(new) > 1:
            raise ValueError(f"kernel_rename: the new name {new[:80]!r} must be non-empty and new")
    cfg = Config(ranks=ranks, batch_sizes=tuple(batch_sizes), steps_per_batch=tuple(steps_per_batch), layers=layers,
                 first_k_dense=first_k_dense, prefill=prefill, prompt_len=prompt_len,
                 max_prefill_tokens=max_prefill_tokens, empty_steps=empty_steps, context_len=context_len,
                 allreduce=allreduce, ar_bus_gbps=ar_bus_gbps, ar_latency_us=ar_latency_us, delays=dl,
                 clock_offsets_ns=tuple(offs), jitter=jitter, seed=seed, target_gz_mb=target_gz_mb, gzip=gzip,
                 compresslevel=compresslevel, workers=workers, category_scale=tuple(sorted(scales.items())),
                 kernel_rename=tuple(sorted(renames.items())), noise_seed=noise_seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metas = _rank_meta(cfg, rng)
    t0 = time.perf_counter()
    steps, per_rank, colls = _truth_from_sim(cfg, metas)
    sim_s = time.perf_counter() - t0
    last_true = max(p["annotation_end_ns"] - metas[r]["offset_ns"] for r in range(ranks) for p in per_rank[r][-1:])
    for m in metas:   # file name time = export time on the rank's clock, after the last step
        m["export_ns"] = last_true + m["offset_ns"] + 2_000_000_000 + int(rng.uniform(0, 3e9))
    core = _count_core_events(cfg)
    plan = [s["phase"] for s in steps]
    jobs = [(cfg, r, metas[r], str(out), plan, core, progress) for r in range(ranks)]
    t1 = time.perf_counter()
    if workers > 1:
        import multiprocessing as mp
        with mp.get_context("spawn").Pool(min(workers, ranks)) as pool:
            results = pool.map(_worker, jobs)
    else:
        results = [_worker(j) for j in jobs]
    write_s = time.perf_counter() - t1
    rank_info = []
    for r, res in enumerate(results):
        m = metas[r]
        rank_info.append({"rank": r, "file": res["file"], "base_time_ns": m["base_ns"], "clock_offset_ns": m["offset_ns"],
                          "pid": m["pid"], "tid": m["pid"], "device": r,
                          "streams": {"main": STREAM_IDS[MAIN], "aux": STREAM_IDS[AUX], "d2h": STREAM_IDS[D2H]},
                          "events": res["events"], "bytes": res["bytes"], "gz_bytes": res["gz_bytes"],
                          "write_seconds": res["seconds"]})
    params = {"ranks": ranks, "batch_sizes": list(batch_sizes), "steps_per_batch": list(steps_per_batch),
              "layers": layers, "first_k_dense": first_k_dense, "prefill": prefill, "prompt_len": prompt_len,
              "max_prefill_tokens": max_prefill_tokens, "empty_steps": empty_steps, "context_len": context_len,
              "allreduce": allreduce, "ar_bus_gbps": ar_bus_gbps, "ar_latency_us": ar_latency_us,
              "clock_offsets_us": [o / 1000 for o in offs], "jitter": jitter, "target_gz_mb": target_gz_mb,
              "gzip": gzip, "compresslevel": compresslevel, "seed": seed}
    if scales or renames or noise_seed is not None:  # recorded only when used: default truth.json unchanged
        params.update(category_scale=scales, kernel_rename=renames, noise_seed=noise_seed)
    kernel_categories = dict(KERNEL_CATEGORY)
    for old, new in renames.items():
        kernel_categories[new] = kernel_categories.pop(old)
    truth = {"format": "k25trace-synth-truth/1", "params": params, "categories": list(CATEGORIES),
             "kernel_categories": kernel_categories, "ranks": rank_info, "steps": steps,
             "per_rank_steps": per_rank, "collectives": colls, "delays": [d.as_dict() for d in dl],
             "timing": {"simulate_seconds": round(sim_s, 3), "write_seconds": round(write_s, 3)}}
    (out / "truth.json").write_text(json.dumps(truth, indent=1))
    return truth


# ------------------------------------------------------------------------------------------- CLI


def _parse_int_set(spec: str) -> frozenset[int] | None:
    if spec in ("", "all", "*"):
        return None
    vals: set[int] = set()
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            vals.update(range(int(a), int(b) + 1))
        else:
            vals.add(int(part))
    return frozenset(vals)


def parse_delay(spec: str) -> Delay:
    """``RANK:US[:STEPS[:ORDINALS]]``; STEPS/ORDINALS: ``all``, ``3,5-7``; ORDINALS ``%K`` = every K-th."""
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise click.BadParameter(f"delay {spec!r}: expected RANK:US[:STEPS[:ORDINALS]]")
    try:
        steps = _parse_int_set(parts[2]) if len(parts) > 2 else None
        ordinals, every = None, None
        if len(parts) > 3:
            if parts[3].startswith("%"):
                every = int(parts[3][1:])
            else:
                ordinals = _parse_int_set(parts[3])
        return Delay(int(parts[0]), float(parts[1]), steps, ordinals, every)
    except ValueError as exc:
        raise click.BadParameter(f"delay {spec!r}: {exc}") from exc


def parse_scales(specs: Iterable[str]) -> dict[str, float]:
    """``["attention=1.2"]`` → ``{"attention": 1.2}``."""
    out: dict[str, float] = {}
    for spec in specs:
        cat, sep, factor = spec.partition("=")
        try:
            if not sep:
                raise ValueError("expected CATEGORY=FACTOR")
            out[cat.strip()] = float(factor)
        except ValueError as exc:
            raise click.BadParameter(f"scale {spec!r}: {exc}") from exc
    return out


def parse_renames(specs: Iterable[str]) -> dict[str, str]:
    """``["act_and_mul_kernel=void vllm::silu_and_mul_kernel<…>(…)"]`` → ``{full old name: new name}``; OLD is a
    part of exactly one of the generator's kernel names."""
    out: dict[str, str] = {}
    for spec in specs:
        old, sep, new = spec.partition("=")
        hits = [name for name in KERNEL_CATEGORY if old and old in name]
        if not sep or not new:
            raise click.BadParameter(f"rename {spec!r}: expected OLD=NEW")
        if len(hits) != 1:
            raise click.BadParameter(f"rename {spec!r}: {old!r} is in {len(hits)} of the generator's kernel names; "
                                     "give a part of exactly one")
        out[hits[0]] = new
    return out


@click.command("synth")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Output directory (trace files + truth.json).")
@click.option("--ranks", default=8, show_default=True, type=int)
@click.option("--batch-sizes", default="1,64,256", show_default=True, help="Comma list of decode batch sizes.")
@click.option("--steps", "steps", default="20", show_default=True,
              help="Decode steps per batch size (one number or a comma list).")
@click.option("--layers", default=61, show_default=True, type=int)
@click.option("--first-k-dense", default=1, show_default=True, type=int)
@click.option("--prefill/--no-prefill", default=True, show_default=True,
              help="A piecewise prefill step before each batch-size group.")
@click.option("--empty-steps", default=1, show_default=True, type=int,
              help="execute_context_0(0)_generation_0(0) steps after each group.")
@click.option("--context-len", default=1024, show_default=True, type=int)
@click.option("--allreduce", type=click.Choice(["nccl", "custom"]), default="nccl", show_default=True)
@click.option("--delay", "delays", multiple=True, help="RANK:US[:STEPS[:ORDINALS|%K]] (repeatable).")
@click.option("--clock-offset-us", default=None,
              help="Max random per-rank clock offset (one number) or a comma list of per-rank offsets (µs).")
@click.option("--target-gz-mb", type=float, default=None, help="Pad each rank file to about this size (MB).")
@click.option("--gzip/--no-gzip", default=True, show_default=True)
@click.option("--workers", default=1, show_default=True, type=int, help="Processes writing rank files.")
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--scale", "scales", multiple=True, metavar="CATEGORY=FACTOR",
              help="Every op of a category takes FACTOR x its time (attention=1.2: 20 % slower; repeatable).")
@click.option("--rename", "renames", multiple=True, metavar="OLD=NEW",
              help="Write the kernel whose name contains OLD (one of the generator's) as NEW (repeatable).")
@click.option("--noise-seed", type=int, default=None,
              help="Same GPUs and clocks as --seed, other jitter and timings (the same workload run again).")
def command(out_dir: Path, ranks: int, batch_sizes: str, steps: str, layers: int, first_k_dense: int,
            prefill: bool, empty_steps: int, context_len: int, allreduce: str, delays: tuple[str, ...],
            clock_offset_us: str | None, target_gz_mb: float | None, gzip: bool, workers: int, seed: int,
            scales: tuple[str, ...], renames: tuple[str, ...], noise_seed: int | None) -> None:
    """Generate synthetic Kimi-K2.5 TP-N vLLM traces with ground truth (truth.json)."""
    bs = [int(x) for x in batch_sizes.split(",") if x]
    st = [int(x) for x in steps.split(",") if x]
    offs: Any = None
    max_off = 2000.0
    if clock_offset_us is not None:
        vals = [float(x) for x in clock_offset_us.split(",") if x]
        if len(vals) == 1:
            max_off = vals[0]
        else:
            offs = vals
    t0 = time.perf_counter()
    truth = generate(out_dir, ranks=ranks, batch_sizes=bs, steps_per_batch=st if len(st) > 1 else st[0],
                     layers=layers, first_k_dense=first_k_dense, prefill=prefill, empty_steps=empty_steps,
                     context_len=context_len, allreduce=allreduce, delays=[parse_delay(d) for d in delays],
                     clock_offsets_us=offs, max_clock_offset_us=max_off, target_gz_mb=target_gz_mb, gzip=gzip,
                     workers=workers, seed=seed, progress=True, category_scale=parse_scales(scales),
                     kernel_rename=parse_renames(renames), noise_seed=noise_seed)
    for ri in truth["ranks"]:
        size = ri["gz_bytes"] if ri["gz_bytes"] is not None else ri["bytes"]
        click.echo(f"{ri['file']}\t{size / 1e6:.1f} MB\t{ri['events']} events", err=True)
    click.echo(f"synth: {len(truth['steps'])} steps, {len(truth['collectives'])} collectives, "
               f"{time.perf_counter() - t0:.1f} s -> {out_dir / 'truth.json'}", err=True)


if __name__ == "__main__":  # pragma: no cover
    command()
