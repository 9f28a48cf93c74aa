"""Step programs: what one engine step launches (CPU runtime calls) and runs (GPU ops), before any timing.

A :class:`Program` is the same for every rank and every step of one (phase, requests, tokens): the launches in
CPU order, each with the ops it puts on the GPU, and base durations from a simple H200 roofline (TP8 shards).
:func:`step_plan` gives the sequence of steps a run executes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from k25trace.synth.config import Config
from k25trace.synth.kernels import (
    DENSE_INTER,
    HIDDEN,
    K_ACT,
    K_ADD,
    K_ALIGN,
    K_ARGMAX,
    K_CACHE,
    K_CUSTOM_AR1,
    K_CUSTOM_AR2,
    K_DENSE_DOWN,
    K_DENSE_GU,
    K_EMB,
    K_EXPONENTIAL,
    K_FA3,
    K_FMLA,
    K_FMLA_COMBINE,
    K_FUSED_A,
    K_FUSED_ADD_RMS,
    K_KVB,
    K_LMHEAD,
    K_MARLIN_W2,
    K_MARLIN_W13,
    K_MLA_META,
    K_MOESUM,
    K_NCCL_AG,
    K_NCCL_AR,
    K_OPROJ,
    K_PREP_VARLEN,
    K_QA_NVJET,
    K_QB,
    K_RMS,
    K_ROTARY,
    K_ROUTER,
    K_SH_DOWN,
    K_SH_GU,
    K_SOFTMAX,
    K_TOPK,
    K_TOPK_SAMPLE,
    K_UK,
    K_UV,
    KERNEL_CATEGORY,
    M_D2H,
    M_H2D,
    M_SET,
    MOE_INTER,
    N_EXPERTS,
    TOPK,
    VOCAB,
)

MAIN, AUX, D2H = 0, 1, 2  # stream slots
STREAM_IDS = (7, 13, 52)


@dataclass
class Op:
    name: str
    kind: str  # kernel | memcpy | memset
    stream: int  # slot
    launch: int  # index into Program.launches
    dur_ns: int  # base duration (for collectives: transfer time)
    coll: str | None = None  # allreduce | comm_other
    deps: tuple[int, ...] = ()
    nbytes: int = 0
    coll_args: tuple | None = None  # (collective name, in nelems, out nelems, dtype)


@dataclass
class Launch:
    name: str  # cudaGraphLaunch / cudaLaunchKernel / cudaMemcpyAsync / cudaLaunchKernelExC / ...
    cbid: int
    cpu_ns: int  # duration of the runtime call
    gap_before_ns: int  # CPU (python) time before the call
    cpu_op: str | None  # enclosing cpu_op name (eager) or None
    after_annotation: bool = False
    ops: list[int] = field(default_factory=list)


@dataclass
class Program:
    phase: str
    name: str
    launches: list[Launch]
    ops: list[Op]
    ann_tail_ns: int  # CPU time from last in-annotation launch to annotation end
    pre_ns: int  # CPU time from annotation start to first launch (input prep)


def _us(x: float) -> int:
    return max(1000, int(x * 1000))


class _Builder:
    def __init__(self, cfg: Config, phase: str, n_tok: int, n_req: int):
        self.cfg, self.phase, self.n, self.req = cfg, phase, n_tok, n_req
        self.launches: list[Launch] = []
        self.ops: list[Op] = []
        self.cur: int = -1
        self.last_main = -1
        self.scale = dict(cfg.category_scale or {})

    def launch(
        self, name: str, cbid: int, cpu_us: float, gap_us: float, cpu_op: str | None = None, after: bool = False
    ) -> int:
        self.launches.append(Launch(name, cbid, _us(cpu_us), int(gap_us * 1000), cpu_op, after))
        self.cur = len(self.launches) - 1
        return self.cur

    def op(
        self,
        name: str,
        dur_ns: float,
        *,
        stream: int = MAIN,
        kind: str = "kernel",
        coll: str | None = None,
        deps: tuple[int, ...] = (),
        nbytes: int = 0,
        coll_args: tuple | None = None,
    ) -> int:
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
    def gemm_ns(self, k: int, n_out: int, fixed_us: float = 3.0) -> int:
        w = k * n_out * 2
        flops = 2.0 * self.n * k * n_out
        return int(fixed_us * 1000 + max(w / 3300.0, flops / 650e3))  # 650 TFLOP/s -> flops/ns

    def small_ns(self, base_us: float, per_tok_ns: float) -> int:
        return int(base_us * 1000 + per_tok_ns * self.n)

    def allreduce(self) -> int:
        cfg, nbytes = self.cfg, self.n * HIDDEN * 2
        if cfg.allreduce == "custom":
            name = K_CUSTOM_AR1 if nbytes < 512 * 1024 else K_CUSTOM_AR2
            t = 6000 + nbytes / 40.0
            return self.op(name, t, coll="allreduce")
        t = cfg.ar_latency_us * 1000 + 2.0 * (cfg.ranks - 1) / cfg.ranks * nbytes / cfg.ar_bus_gbps
        return self.op(
            K_NCCL_AR, t, coll="allreduce", coll_args=("allreduce", self.n * HIDDEN, self.n * HIDDEN, "BFloat16")
        )

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
        self.op(K_SH_GU, self.gemm_ns(HIDDEN, 2 * MOE_INTER // 8), stream=AUX, deps=(router,))
        self.op(K_ACT, self.small_ns(1.6, 0.5), stream=AUX)
        shared_out = self.op(K_SH_DOWN, self.gemm_ns(MOE_INTER // 8, HIDDEN), stream=AUX)
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
        self.op(K_ADD, self.small_ns(1.6, 0.6), deps=(shared_out,))  # join: the shared expert's output is added in
        self.allreduce()

    def logits_and_sample(self, rows: int) -> None:
        self.launch("cudaLaunchKernel", 211, 6.0, 60.0, "aten::mm")
        self.op(K_LMHEAD, int(4000 + (VOCAB // 8) * HIDDEN * 2 / 3300.0 + rows * 60))
        self.launch("cudaLaunchKernelExC", 430, 9.0, 35.0, None)
        per = rows * (VOCAB // 8)
        t = self.cfg.ar_latency_us * 1000 * 0.8 + (self.cfg.ranks - 1) / self.cfg.ranks * per * 2 * self.cfg.ranks / (
            self.cfg.ar_bus_gbps
        )
        self.op(K_NCCL_AG, t, coll="comm_other", coll_args=("_allgather_base", per, per * self.cfg.ranks, "BFloat16"))
        # sample_tokens(): after the execute_model annotation has closed
        first = True
        for name, opname, base, per_row in (
            (K_SOFTMAX, "aten::_softmax", 5.0, 45.0),
            (K_TOPK_SAMPLE, "aten::topk", 7.0, 40.0),
            (K_EXPONENTIAL, "aten::exponential_", 3.5, 20.0),
            (K_ARGMAX, "aten::argmax", 4.0, 25.0),
        ):
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
    """The program of one step: ``phase`` decode (one FULL graph), prefill (piecewise graphs) or empty."""
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


def step_plan(cfg: Config) -> list[tuple[str, int, int]]:
    """(phase, requests, tokens) per step."""
    plan: list[tuple[str, int, int]] = []
    per_group = (cfg.steps_per_batch,) if isinstance(cfg.steps_per_batch, int) else cfg.steps_per_batch
    for gi, bs in enumerate(cfg.batch_sizes):
        n_steps = per_group[gi] if gi < len(per_group) else per_group[-1]
        if cfg.prefill:
            plan.append(("prefill", bs, max(bs, min(bs * cfg.prompt_len, cfg.max_prefill_tokens))))
        plan.extend(("decode", bs, bs) for _ in range(n_steps))
        plan.extend(("empty", 0, 0) for _ in range(cfg.empty_steps))
    return plan
