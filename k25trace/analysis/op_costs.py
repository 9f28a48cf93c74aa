"""What one call of an op must do, from its recorded shapes: the FLOPs and the bytes it must move to and from device
memory (:func:`op_cost`, one model per op in :data:`OP_MODELS`: aten GEMMs and grouped GEMMs, SDPA at decode, norms,
softmax, vLLM Marlin and CUTLASS FP8 GEMMs, KV-cache writes). An op without a model, or whose shapes do not say what
it does, raises :class:`Unmodelled` with the reason, never a guess.

Element types: ``cpu_ops`` stores ``Input Dims`` but not ``Input type``, so an op's dtype is read from its kernels'
names (``c10::BFloat16``, ``__nv_bfloat16``, ``cutlass::bfloat16_t``, cuBLAS ``nvjet_…tst_`` and hipBLASLt
``Cijk_…_BBS_`` = BF16, …:
``dtype_source = kernel``); when no kernel of the op names one, the dtype most kernels of the run name is used
(``dtype_source = run``). Byte counts depend only on the element size.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# ------------------------------------------------------------------------------------------------- element types

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1}
_NVJET = re.compile(r"nvjet_(?:sm\d+_)?([a-z]{3})_")
_NVJET_TYPES = {"tst": "bf16", "hsh": "fp16", "sss": "fp32"}  # A/compute/output letters; 'tst' seen on H200 and B200
_TENSILE = re.compile(r"^Cijk_[A-Za-z]+_[A-Za-z]+_([BHS])[BHS]S?_")  # hipBLASLt: 'BBS' (bf16) seen on MI300X
_TENSILE_TYPES = {"B": "bf16", "H": "fp16", "S": "fp32"}
_TOKENS = (
    ("bf16", re.compile(r"c10::BFloat16|__nv_bfloat16|__hip_bfloat16|bfloat16_t|BF16BF16|Bfloat16|_bf16")),
    ("fp16", re.compile(r"c10::Half|__half\b|half_t|\bhalf\b|F16F16|_fp16|_f16_")),
    ("fp32", re.compile(r"sgemm|f32f32_f32|^void[^(]*<float[,>]|softmax_warp_forward<float")),
)
_FP8 = re.compile(r"float_e4m3|float_e5m2|__nv_fp8|Float8_e4m3|Float8_e5m2|E4m3|e4m3|fp8", re.IGNORECASE)
_INT8 = re.compile(r"\bint8_t\b|\bs8\b|_i8i8|int8", re.IGNORECASE)


def name_dtype(name: str) -> str | None:
    """The 16/32-bit element type a kernel name states (BF16, FP16, FP32), or None."""
    m = _NVJET.search(name)
    if m and m.group(1) in _NVJET_TYPES:
        return _NVJET_TYPES[m.group(1)]
    m = _TENSILE.search(name)
    if m:
        return _TENSILE_TYPES[m.group(1)]
    for dtype, pattern in _TOKENS:
        if pattern.search(name):
            return dtype
    return None


def kernels_dtype(names: Sequence[str]) -> str | None:
    """The element type the kernels of one op state (the first kernel that states one)."""
    for name in names:
        dtype = name_dtype(name)
        if dtype:
            return dtype
    return None


def cache_elem_bytes(names: Sequence[str]) -> int | None:
    """Bytes per KV-cache element from vLLM's cache-write kernels: their second template argument is the cache type
    (``reshape_and_cache_flash_kernel<__nv_bfloat16, unsigned char, …>``: an FP8 cache stored as bytes)."""
    for name in names:
        m = re.search(r"(?:reshape_and_cache(?:_flash)?|concat_and_cache_mla)_kernel<([^,<>]+),\s*([^,<>]+),", name)
        if m:
            cache = m.group(2).strip()
            if cache in ("unsigned char", "uint8_t", "c10::Float8_e4m3fn", "__nv_fp8_e4m3"):
                return 1
            dtype = name_dtype(cache) or ("fp32" if cache == "float" else None)
            return DTYPE_BYTES.get(dtype) if dtype else None
    return None


# ---------------------------------------------------------------------------------------------------- op models


@dataclass(frozen=True)
class OpCost:
    """What one call of an op must do: FLOPs (None: not a compute op), bytes it must move to/from device memory,
    the peak it runs at (``compute``: a key of COMPUTE_PEAK, '' for memory-only ops), a readable shape, a note."""

    flops: float | None
    bytes: float
    compute: str
    shape: str
    note: str = ""


@dataclass(frozen=True)
class OpContext:
    """What an op model may use besides the shapes: the dtype (and where it came from), the kernels' names."""

    dtype: str | None
    dtype_source: str
    kernel_names: tuple[str, ...] = ()


class Unmodelled(Exception):
    """An op that cannot be costed from what the trace recorded; the message says why."""


Dims = list[Any]


def _tensor(d: Any) -> list[int] | None:
    return d if isinstance(d, list) and all(isinstance(x, int) for x in d) and d else None


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _need(dims: Dims, *idx: int) -> list[list[int]]:
    out = []
    for i in idx:
        t = _tensor(dims[i]) if i < len(dims) else None
        if t is None:
            raise Unmodelled(f"input {i} is not a tensor shape in the recorded Input Dims")
        out.append(t)
    return out


def _elem(ctx: OpContext) -> int:
    if ctx.dtype not in DTYPE_BYTES:
        raise Unmodelled("the element type is unknown (no kernel of the op or of the run names one)")
    return DTYPE_BYTES[ctx.dtype]


def _mm_cost(
    m: int,
    k: int,
    n: int,
    e: int,
    *,
    batch: int = 1,
    extra_bytes: float = 0.0,
    extra_flops: float = 0.0,
    ctx: OpContext,
    label: str = "",
) -> OpCost:
    flops = 2.0 * batch * m * k * n + extra_flops
    nbytes = float(batch * (m * k + k * n + m * n) * e) + extra_bytes
    shape = (f"B={batch} " if batch != 1 else "") + f"M={m} K={k} N={n}" + (f" {label}" if label else "")
    return OpCost(flops, nbytes, ctx.dtype or "", shape)


def model_mm(dims: Dims, ctx: OpContext) -> OpCost:
    a, b = _need(dims, 0, 1)
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise Unmodelled(f"mm shapes {a} x {b} are not [M,K] x [K,N]")
    return _mm_cost(a[0], a[1], b[1], _elem(ctx), ctx=ctx)


def model_addmm(dims: Dims, ctx: OpContext) -> OpCost:
    bias, a, b = _need(dims, 0, 1, 2)
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise Unmodelled(f"addmm shapes {a} x {b} are not [M,K] x [K,N]")
    e = _elem(ctx)
    return _mm_cost(
        a[0], a[1], b[1], e, extra_bytes=_numel(bias) * e, extra_flops=2.0 * a[0] * b[1], ctx=ctx, label="+bias"
    )


def model_bmm(dims: Dims, ctx: OpContext) -> OpCost:
    a, b = _need(dims, 0, 1)
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise Unmodelled(f"bmm shapes {a} x {b} are not [B,M,K] x [B,K,N]")
    return _mm_cost(a[1], a[2], b[2], _elem(ctx), batch=a[0], ctx=ctx)


def model_baddbmm(dims: Dims, ctx: OpContext) -> OpCost:
    c, a, b = _need(dims, 0, 1, 2)
    if len(a) != 3 or len(b) != 3 or a[0] != b[0] or a[2] != b[1]:
        raise Unmodelled(f"baddbmm shapes {a} x {b} are not [B,M,K] x [B,K,N]")
    e = _elem(ctx)
    return _mm_cost(
        a[1],
        a[2],
        b[2],
        e,
        batch=a[0],
        extra_bytes=_numel(c) * e,
        extra_flops=2.0 * a[0] * a[1] * b[2],
        ctx=ctx,
        label="+input",
    )


def model_matmul(dims: Dims, ctx: OpContext) -> OpCost:
    a, b = _need(dims, 0, 1)
    e = _elem(ctx)
    if len(a) == 1 or len(b) == 1:
        k = a[-1]
        if (b[0] if len(b) == 1 else b[-2]) != k:
            raise Unmodelled(f"matmul shapes {a} x {b} do not contract")
        m = _numel(a[:-1]) if len(a) > 1 else 1
        n = b[-1] if len(b) > 1 else 1
        batch = _numel(b[:-2]) if len(b) > 2 else 1
        flops = 2.0 * batch * m * k * n
        return OpCost(
            flops,
            float((_numel(a) + _numel(b) + batch * m * n) * e),
            ctx.dtype or "",
            f"M={m} K={k} N={n}" + (f" B={batch}" if batch > 1 else ""),
        )
    if a[-1] != b[-2]:
        raise Unmodelled(f"matmul shapes {a} x {b} do not contract")
    m, k, n = a[-2], a[-1], b[-1]
    if len(b) == 2:  # folded: [..., M, K] x [K, N]
        rows = _numel(a[:-1])
        return _mm_cost(rows, k, n, e, ctx=ctx)
    batch_shape = []
    # both have 2+ dims here, padded with 1s to the longer one's batch rank: the lengths match
    for x, y in zip(
        reversed([1] * (len(b) - len(a)) + a[:-2]), reversed([1] * (len(a) - len(b)) + b[:-2]), strict=True
    ):
        if x != y and 1 not in (x, y):
            raise Unmodelled(f"matmul batch dimensions of {a} x {b} do not broadcast")
        batch_shape.append(max(x, y))
    batch = _numel(batch_shape) if batch_shape else 1
    flops = 2.0 * batch * m * k * n
    return OpCost(
        flops, float((_numel(a) + _numel(b) + batch * m * n) * e), ctx.dtype or "", f"B={batch} M={m} K={k} N={n}"
    )


def model_linear(dims: Dims, ctx: OpContext) -> OpCost:
    x, w = _need(dims, 0, 1)
    bias = _tensor(dims[2]) if len(dims) > 2 else None
    if len(w) != 2 or x[-1] != w[1]:
        raise Unmodelled(f"linear shapes {x}, weight {w} are not [..., K], [N, K]")
    e = _elem(ctx)
    m = _numel(x[:-1])
    extra = (_numel(bias) * e, 2.0 * m * w[0]) if bias else (0, 0.0)
    return _mm_cost(
        m, w[1], w[0], e, extra_bytes=extra[0], extra_flops=extra[1], ctx=ctx, label="+bias" if bias else ""
    )


def expected_distinct(groups: int, draws: int, per_draw: int = 1) -> float:
    """Expected distinct groups hit when ``draws`` independent draws each pick ``per_draw`` distinct groups of
    ``groups`` uniformly: G·(1 − (1 − k/G)^draws). Routing that favours some experts hits fewer."""
    if groups <= 0 or draws <= 0:
        return 0.0
    return groups * (1.0 - (1.0 - min(per_draw, groups) / groups) ** draws)


def model_grouped_mm(dims: Dims, ctx: OpContext) -> OpCost:
    a, b = _need(dims, 0, 1)
    e = _elem(ctx)
    if len(a) == 2 and len(b) == 3 and a[1] == b[1]:  # MoE: rows of a routed to groups (experts) by offs
        t, k = a
        g, _, n = b
        hit = expected_distinct(g, t)
        flops = 2.0 * t * k * n
        nbytes = (t * k + t * n) * e + hit * k * n * e + g * 4
        return OpCost(
            flops,
            nbytes,
            ctx.dtype or "",
            f"T={t} K={k} N={n} G={g}",
            f"weights of {hit:.1f} of {g} groups: expected when the {t} rows spread uniformly (range "
            f"1-{min(g, t)}); FLOPs assume every row is in a group (offs[-1] = T)",
        )
    if len(a) == 3 and len(b) == 3 and a[0] == b[0] and a[2] == b[1]:
        return _mm_cost(a[1], a[2], b[2], e, batch=a[0], ctx=ctx)
    raise Unmodelled(f"_grouped_mm layout {a} x {b} (only 2d x 3d and 3d x 3d are modelled)")


def model_sdpa(dims: Dims, ctx: OpContext) -> OpCost:
    q, k, v = _need(dims, 0, 1, 2)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise Unmodelled(f"SDPA shapes {q}, {k}, {v} are not [B, H, L, D]")
    b, h, lq, d = q
    lk, dv = k[2], v[3]
    if lq != 1:
        raise Unmodelled(
            "query length > 1: whether the mask is causal is a value (Concrete Inputs), not a recorded "
            "shape, so the work is not known"
        )
    e = _elem(ctx)
    flops = 2.0 * b * h * lq * lk * (d + dv)
    nbytes = float((_numel(q) + _numel(k) + _numel(v) + b * h * lq * dv) * e)
    return OpCost(
        flops,
        nbytes,
        ctx.dtype or "",
        f"B={b} H={h} Hkv={k[1]} Lq={lq} Lk={lk} D={d}",
        "decode (one query): every key is read once",
    )


def model_norm(dims: Dims, ctx: OpContext) -> OpCost:
    (x,) = _need(dims, 0)
    h = x[-1]
    params = sum(_numel(t) for t in (_tensor(d) for d in dims[1:]) if t)
    e = _elem(ctx)
    return OpCost(
        None, float((2 * _numel(x) + params) * e), "", f"N={_numel(x[:-1])} H={h}", "reads x and the weights, writes y"
    )


def model_softmax(dims: Dims, ctx: OpContext) -> OpCost:
    (x,) = _need(dims, 0)
    e = _elem(ctx)
    return OpCost(None, float(2 * _numel(x) * e), "", "x".join(map(str, x)), "reads x, writes y")


def model_vllm_rms_norm(dims: Dims, ctx: OpContext) -> OpCost:
    out, x, w = _need(dims, 0, 1, 2)
    e = _elem(ctx)
    return OpCost(
        None,
        float((2 * _numel(x) + _numel(w)) * e),
        "",
        f"N={_numel(x[:-1])} H={x[-1]}",
        "reads x and the weights, writes out",
    )


def model_vllm_fused_add_rms_norm(dims: Dims, ctx: OpContext) -> OpCost:
    x, res, w = _need(dims, 0, 1, 2)
    e = _elem(ctx)
    return OpCost(
        None,
        float((4 * _numel(x) + _numel(w)) * e),
        "",
        f"N={_numel(x[:-1])} H={x[-1]}",
        "reads x and the residual, writes both in place",
    )


def _cache_bytes(ctx: OpContext) -> int:
    cache = cache_elem_bytes(ctx.kernel_names)
    if cache is None:
        raise Unmodelled("the KV-cache element type is not in the kernel name")
    return cache


def model_reshape_and_cache(dims: Dims, ctx: OpContext) -> OpCost:
    key, value = _need(dims, 0, 1)
    slots = _tensor(dims[4]) if len(dims) > 4 else None
    e, c = _elem(ctx), _cache_bytes(ctx)
    n = key[0]
    nbytes = float((_numel(key) + _numel(value)) * (e + c) + (_numel(slots) * 8 if slots else 0))
    return OpCost(
        None,
        nbytes,
        "",
        f"N={n} Hkv={key[1] if len(key) > 2 else '?'} D={key[-1]} cache={c} B/elem",
        "reads K and V, writes them into the cache",
    )


def model_concat_and_cache_mla(dims: Dims, ctx: OpContext) -> OpCost:
    kv_c, k_pe = _need(dims, 0, 1)
    slots = _tensor(dims[3]) if len(dims) > 3 else None
    e, c = _elem(ctx), _cache_bytes(ctx)
    width = kv_c[-1] + k_pe[-1]
    nbytes = float((_numel(kv_c) + _numel(k_pe)) * e + kv_c[0] * width * c + (_numel(slots) * 8 if slots else 0))
    return OpCost(
        None,
        nbytes,
        "",
        f"N={kv_c[0]} latent={kv_c[-1]}+{k_pe[-1]} cache={c} B/elem",
        "reads the latent and rope key, writes the cache",
    )


def _marlin_scales(dims: Dims, start: int, k: int, qw: list[int], experts: bool) -> tuple[list[int], int, int, int]:
    """Find b_scales after b_q_weight: [K/g, N] (dense) or [E, K/g, N] (MoE) with N consistent with the packed
    weight ([K/16, N*16*bits/32] int32): returns (scales, N, bits, group)."""
    for d in dims[start:]:
        s = _tensor(d)
        if not s or len(s) != (3 if experts else 2):
            continue
        groups, n = s[-2], s[-1]
        if n <= 0 or groups <= 0 or k % groups:
            continue
        bits = qw[-1] * 32 / (16 * n)
        if bits in (4.0, 8.0) and qw[-2] * 16 == k:
            return s, n, int(bits), k // groups
    raise Unmodelled("no scales tensor [K/group, N] consistent with the packed weights in the recorded Input Dims")


def model_marlin_gemm(dims: Dims, ctx: OpContext) -> OpCost:
    a, qw = _need(dims, 0, 2)
    if len(a) != 2 or len(qw) != 2:
        raise Unmodelled(f"gptq_marlin_gemm shapes a={a}, b_q_weight={qw} are not 2-D")
    m, k = a
    scales, n, bits, group = _marlin_scales(dims, 3, k, qw, experts=False)
    e = _elem(ctx)
    nbytes = float(m * k * e + _numel(qw) * 4 + _numel(scales) * e + m * n * e)
    return OpCost(
        2.0 * m * k * n,
        nbytes,
        ctx.dtype or "",
        f"M={m} K={k} N={n} W{bits}A16 g{group}",
        "weights: packed int32 plus 16-bit group scales, as recorded",
    )


def model_marlin_moe(dims: Dims, ctx: OpContext) -> OpCost:
    a, qw = _need(dims, 0, 2)
    if len(a) != 2 or len(qw) != 3:
        raise Unmodelled(f"moe_wna16_marlin_gemm shapes a={a}, b_q_weight={qw} are not [M,K], [E, K/16, *]")
    k = a[1]
    experts = qw[0]
    scales, n, bits, group = _marlin_scales(dims, 3, k, qw, experts=True)
    topk = next((t for t in (_tensor(d) for d in reversed(dims)) if t and len(t) == 2), None)
    if topk is None:
        raise Unmodelled("no topk_weights [tokens, top_k] in the recorded Input Dims")
    tokens, per_token = topk
    rows = tokens * per_token
    hit = expected_distinct(experts, tokens, per_token)
    e = _elem(ctx)
    per_expert = _numel(qw[1:]) * 4 + _numel(scales[1:]) * e
    nbytes = float(_numel(a) * e + rows * n * e + hit * per_expert)
    return OpCost(
        2.0 * rows * k * n,
        nbytes,
        ctx.dtype or "",
        f"tokens={tokens} top_k={per_token} K={k} N={n} E={experts} W{bits}A16 g{group}",
        f"weights of {hit:.1f} of {experts} experts: expected when {tokens} tokens pick {per_token} experts uniformly",
    )


def model_scaled_mm(dims: Dims, ctx: OpContext, *, out_first: bool) -> OpCost:
    if out_first:
        out, a, b = _need(dims, 0, 1, 2)
    else:
        a, b = _need(dims, 0, 1)
        out = [a[0], b[-1]]
    if len(a) != 2 or len(b) != 2 or a[1] != b[0]:
        raise Unmodelled(f"scaled_mm shapes {a} x {b} are not [M,K] x [K,N]")
    m, k = a
    n = b[1]
    names = " ".join(ctx.kernel_names)
    compute = "int8" if _INT8.search(names) and not _FP8.search(names) else "fp8" if _FP8.search(names) else ""
    scales = sum(_numel(t) for t in (_tensor(d) for d in dims[(3 if out_first else 2) :]) if t) * 4
    nbytes = float(m * k + k * n + _numel(out) * 2 + scales)
    note = "8-bit inputs; output counted as 16-bit" + ("" if compute else "; FP8 or INT8 not stated by the kernel")
    return OpCost(2.0 * m * k * n, nbytes, compute, f"M={m} K={k} N={n}", note)


OpModel = Callable[[Dims, OpContext], OpCost]
OP_MODELS: dict[str, OpModel] = {
    "aten::mm": model_mm,
    "aten::addmm": model_addmm,
    "aten::bmm": model_bmm,
    "aten::baddbmm": model_baddbmm,
    "aten::matmul": model_matmul,
    "aten::linear": model_linear,
    "aten::_grouped_mm": model_grouped_mm,
    "aten::scaled_dot_product_attention": model_sdpa,
    "aten::_scaled_dot_product_flash_attention": model_sdpa,
    "aten::_scaled_dot_product_efficient_attention": model_sdpa,
    "aten::_scaled_dot_product_cudnn_attention": model_sdpa,
    "aten::rms_norm": model_norm,
    "aten::_fused_rms_norm": model_norm,
    "aten::layer_norm": model_norm,
    "aten::native_layer_norm": model_norm,
    "aten::softmax": model_softmax,
    "aten::_softmax": model_softmax,
    "aten::_log_softmax": model_softmax,
    "_C::rms_norm": model_vllm_rms_norm,
    "_C::fused_add_rms_norm": model_vllm_fused_add_rms_norm,
    "_C_cache_ops::reshape_and_cache_flash": model_reshape_and_cache,
    "_C_cache_ops::reshape_and_cache": model_reshape_and_cache,
    "_C_cache_ops::concat_and_cache_mla": model_concat_and_cache_mla,
    "_C::gptq_marlin_gemm": model_marlin_gemm,
    "_moe_C::moe_wna16_marlin_gemm": model_marlin_moe,
    "_C::cutlass_scaled_mm": lambda d, c: model_scaled_mm(d, c, out_first=True),
    "aten::_scaled_mm": lambda d, c: model_scaled_mm(d, c, out_first=False),
}

#: ops whose recorded inputs cannot give their cost, and why (checked by prefix after an exact-name miss)
UNMODELLED_REASONS: tuple[tuple[str, str], ...] = (
    (
        "vllm::unified_attention",
        "attention over a paged KV cache: the sequence lengths are tensor values, not "
        "shapes, so the KV read is unknown (report --by sol models it from --context)",
    ),
    (
        "vllm::unified_mla_attention",
        "MLA over a paged KV cache: the sequence lengths are tensor values, not shapes "
        "(report --by sol models the KV read from --context)",
    ),
    ("_flashmla_C::", "FlashMLA: the sequence lengths are tensor values, not shapes"),
    ("_vllm_fa", "varlen FlashAttention: cu_seqlens are tensor values, not shapes"),
    ("vllm_flash_attn", "varlen FlashAttention: cu_seqlens are tensor values, not shapes"),
    (
        "vllm::moe_forward",
        "the expert weights are module parameters, not inputs of the op: their shapes are not "
        "recorded (report --by sol models the experts from --model-config)",
    ),
    (
        "vllm::inplace_fused_experts",
        "fused_experts: the weight element type (BF16, FP8 or packed int) is a flag "
        "value, not a shape, and the Triton kernel name does not state it",
    ),
    (
        "vllm::outplace_fused_experts",
        "fused_experts: the weight element type (BF16, FP8 or packed int) is a flag "
        "value, not a shape, and the Triton kernel name does not state it",
    ),
    ("_C::rotary_embedding", "head_size is a value, not a shape: the bytes rotated are not known"),
    ("symm_mem::", "a collective: compared with the all-reduce floor in report --by floor / --by sol"),
    ("c10d::", "a collective: compared with the all-reduce floor in report --by floor / --by sol"),
    ("record_param_comms", "a collective: compared with the all-reduce floor in report --by floor / --by sol"),
)


def unmodelled_reason(op: str) -> str:
    for prefix, reason in UNMODELLED_REASONS:
        if op.startswith(prefix):
            return reason
    return "no cost model for this op"


def parse_dims(text: str | None) -> Dims | None:
    if not text:
        return None
    try:
        dims = json.loads(text)
    except ValueError:
        return None
    return dims if isinstance(dims, list) else None


def op_cost(op: str, dims: Dims, ctx: OpContext) -> OpCost:
    """The cost of one call of ``op`` with these recorded input dims; raises :class:`Unmodelled` with the reason."""
    model = OP_MODELS.get(op)
    if model is None:
        raise Unmodelled(unmodelled_reason(op))
    try:
        return model(dims, ctx)
    except (IndexError, TypeError, ZeroDivisionError) as exc:
        raise Unmodelled(f"unexpected Input Dims for {op}: {exc}") from None


def gemm_kn(op: str, dims: Dims | None) -> tuple[int, int] | None:
    """(K, N) of a recorded 2-D GEMM call (mm / addmm: [M, K] x [K, N]; linear: x [..., K], weight [N, K])."""
    if not dims:
        return None
    try:
        if op == "aten::mm":
            a, b = _need(dims, 0, 1)
        elif op == "aten::addmm":
            a, b = _need(dims, 1, 2)
        else:
            a, w = _need(dims, 0, 1)
            return (a[-1], w[0]) if len(w) == 2 and a[-1] == w[1] else None
    except Unmodelled:
        return None
    return (a[1], b[1]) if len(a) == 2 and len(b) == 2 and a[1] == b[0] else None
