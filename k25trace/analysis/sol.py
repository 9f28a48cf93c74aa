"""Speed of light: each op against the GPU's peaks (``report --by roofline``), each decode step against a model-aware
lower bound (``report --by sol``, with :mod:`k25trace.models`).

* **Device peaks** are data: ``queries/device_peaks.csv`` (documented in its header), matched per trace from the
  device name and its ``deviceProperties`` entry; a ``--peaks FILE`` with the same columns is tried first.
* **Per-op efficiency** where shapes are known: an eagerly launched kernel carries the External id of the innermost
  CPU op that launched it, and that op's ``Input Dims`` (``record_shapes``) give the problem. For each op with a
  cost model (:data:`OP_MODELS`: aten GEMMs and grouped GEMMs, SDPA at decode, norms, softmax, vLLM Marlin and
  CUTLASS FP8 GEMMs, KV-cache writes) the FLOPs and the bytes it must move, its achieved TFLOP/s and GB/s, the
  share of the device's peaks, its arithmetic intensity against the ridge point (compute- or memory-bound), and
  its roofline time (the least time the hardware allows) against the time it took. An op without a model, or
  whose shapes do not say what it does, is listed as unmodelled with the reason, never guessed.
* **CUDA-graph replays** have no CPU ops. Their shapes are carried over from eager steps of the same device, world
  size, phase and batch size only when unambiguous (:func:`carry_graph_kernels`); the rest is listed unmodelled.

Element types: ``cpu_ops`` stores ``Input Dims`` but not ``Input type``, so an op's dtype is read from its kernels'
names (``c10::BFloat16``, ``__nv_bfloat16``, ``cutlass::bfloat16_t``, cuBLAS ``nvjet_…tst_`` and hipBLASLt
``Cijk_…_BBS_`` = BF16, …:
``dtype_source = kernel``); when no kernel of the op names one, the dtype most kernels of the run name is used
(``dtype_source = run``). Byte counts depend only on the element size.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.db import queries_dir, query_frame, run_query
from k25trace.errors import K25Error

# --------------------------------------------------------------------------------------------------- device peaks

PEAK_COLUMNS = ("device", "name_pattern", "compute", "sms", "memory_gb", "bf16_tflops", "fp8_tflops", "int8_tops",
                "fp4_tflops", "tf32_tflops", "fp32_tflops", "hbm_gbps", "interconnect_gbps", "interconnect", "source")
NUMERIC_PEAKS = ("bf16_tflops", "fp8_tflops", "int8_tops", "fp4_tflops", "tf32_tflops", "fp32_tflops", "hbm_gbps",
                 "interconnect_gbps")
#: which peak column a compute dtype runs at (W4A16/W8A16 dequantize to 16 bit: bf16)
COMPUTE_PEAK = {"bf16": "bf16_tflops", "fp16": "bf16_tflops", "fp8": "fp8_tflops", "int8": "int8_tops",
                "fp4": "fp4_tflops", "tf32": "tf32_tflops", "fp32": "fp32_tflops"}


@dataclass(frozen=True)
class Peaks:
    """One row of a peaks file: how to recognise the device, and its dense datasheet peaks."""

    device: str
    name_pattern: str | None
    compute: str | None
    sms: int | None
    memory_gb: float | None
    values: dict[str, float | None]
    interconnect: str
    source: str
    origin: str  # 'builtin' or 'user:<file>'

    def peak(self, column: str) -> float | None:
        return self.values.get(column)

    def matches(self, name: str | None, props: dict[str, Any] | None) -> bool:
        props = props or {}
        if self.name_pattern and not re.search(self.name_pattern, name or props.get("name") or "", re.IGNORECASE):
            return False
        if self.compute:
            have = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
            if have != self.compute:
                return False
        if self.sms is not None and props.get("numSms") != self.sms:
            return False
        if self.memory_gb is not None:
            mem = props.get("totalGlobalMem")
            if not isinstance(mem, (int, float)) or abs(mem / 1e9 - self.memory_gb) > 0.1 * self.memory_gb:
                return False
        return bool(self.name_pattern or self.compute or self.sms is not None or self.memory_gb is not None)


def builtin_peaks_path() -> Path:
    return queries_dir() / "device_peaks.csv"


def read_peaks(path: Path, *, origin: str | None = None) -> list[Peaks]:
    """Parse a peaks CSV (``#`` lines are comments); errors name the file and line."""
    origin = origin or f"user:{path}"
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise K25Error(f"{path}: cannot read the peaks file: {getattr(exc, 'strerror', None) or exc}") from exc
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    if reader.fieldnames is None or "device" not in reader.fieldnames:
        raise K25Error(f"{path}: a peaks file needs a header line with the columns {','.join(PEAK_COLUMNS)}")
    unknown = [c for c in reader.fieldnames if c not in PEAK_COLUMNS]
    if unknown:
        raise K25Error(f"{path}: unknown peaks column(s) {unknown}; expected {','.join(PEAK_COLUMNS)}")
    out = []
    for line_no, row in enumerate(reader, start=2):
        where = f"{path}: row {line_no - 1} ({row.get('device') or '?'})"
        if row.get(None):  # type: ignore[call-overload, unused-ignore]
            raise K25Error(f"{where}: more fields than columns")

        def num(col: str, row: dict[Any, Any] = row, where: str = where) -> float | None:  # this row's, bound now
            value = (row.get(col) or "").strip()
            if not value:
                return None
            try:
                number = float(value)
            except ValueError:
                raise K25Error(f"{where}: {col} {value!r} is not a number") from None
            if not math.isfinite(number) or number <= 0:
                raise K25Error(f"{where}: {col} {value!r} must be a positive number")
            return number

        pattern = (row.get("name_pattern") or "").strip() or None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise K25Error(f"{where}: bad name_pattern {pattern!r}: {exc}") from None
        compute = (row.get("compute") or "").strip() or None
        if compute and not re.fullmatch(r"\d+\.\d+", compute):
            raise K25Error(f"{where}: compute {compute!r} must read major.minor (e.g. 9.0)")
        sms = num("sms")
        peaks = Peaks(
            device=(row.get("device") or "").strip(), name_pattern=pattern, compute=compute,
            sms=int(sms) if sms is not None else None, memory_gb=num("memory_gb"),
            values={c: num(c) for c in NUMERIC_PEAKS}, interconnect=(row.get("interconnect") or "").strip(),
            source=(row.get("source") or "").strip(), origin=origin,
        )
        if not peaks.device:
            raise K25Error(f"{where}: the device column is empty")
        if not (pattern or compute or sms is not None or peaks.memory_gb is not None):
            raise K25Error(f"{where}: give at least one of name_pattern, compute, sms, memory_gb")
        out.append(peaks)
    return out


def load_peaks(user_file: Path | None = None) -> list[Peaks]:
    """The peaks rows in matching order: the user's file (if any), then the built-in ``queries/device_peaks.csv``."""
    rows = read_peaks(user_file) if user_file is not None else []
    return rows + read_peaks(builtin_peaks_path(), origin="builtin")


def match_peaks(rows: Sequence[Peaks], name: str | None, props: dict[str, Any] | None) -> Peaks | None:
    """The first row that matches the device, or None."""
    for row in rows:
        if row.matches(name, props):
            return row
    return None


def device_props(device_properties: str | None, device: int | None) -> dict[str, Any] | None:
    """The ``deviceProperties`` entry of the device a trace's kernels ran on (else the first entry)."""
    if not device_properties:
        return None
    try:
        entries = json.loads(device_properties)
    except ValueError:
        return None
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        return None
    for entry in entries:
        if isinstance(entry, dict) and device is not None and entry.get("id") == device:
            return entry
    return entries[0] if isinstance(entries[0], dict) else None


def run_devices(con: duckdb.DuckDBPyConnection, peaks: Sequence[Peaks]) -> dict[tuple[str, str | None], Peaks | None]:
    """Per (run_id, device_name): the matched peaks row (None when no row matches)."""
    out: dict[tuple[str, str | None], Peaks | None] = {}
    for r in query_frame(con, "sol_devices").iter_rows(named=True):
        key = (r["run_id"], r["device_name"])
        if out.get(key) is None:
            out[key] = match_peaks(peaks, r["device_name"], device_props(r["device_properties"], r["device"]))
    return out


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


def _mm_cost(m: int, k: int, n: int, e: int, *, batch: int = 1, extra_bytes: float = 0.0, extra_flops: float = 0.0,
             ctx: OpContext, label: str = "") -> OpCost:
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
    return _mm_cost(a[0], a[1], b[1], e, extra_bytes=_numel(bias) * e, extra_flops=2.0 * a[0] * b[1], ctx=ctx,
                    label="+bias")


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
    return _mm_cost(a[1], a[2], b[2], e, batch=a[0], extra_bytes=_numel(c) * e,
                    extra_flops=2.0 * a[0] * a[1] * b[2], ctx=ctx, label="+input")


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
        return OpCost(flops, float((_numel(a) + _numel(b) + batch * m * n) * e), ctx.dtype or "",
                      f"M={m} K={k} N={n}" + (f" B={batch}" if batch > 1 else ""))
    if a[-1] != b[-2]:
        raise Unmodelled(f"matmul shapes {a} x {b} do not contract")
    m, k, n = a[-2], a[-1], b[-1]
    if len(b) == 2:  # folded: [..., M, K] x [K, N]
        rows = _numel(a[:-1])
        return _mm_cost(rows, k, n, e, ctx=ctx)
    batch_shape = []
    # both have 2+ dims here, padded with 1s to the longer one's batch rank: the lengths match
    for x, y in zip(reversed([1] * (len(b) - len(a)) + a[:-2]), reversed([1] * (len(a) - len(b)) + b[:-2]),
                    strict=True):
        if x != y and 1 not in (x, y):
            raise Unmodelled(f"matmul batch dimensions of {a} x {b} do not broadcast")
        batch_shape.append(max(x, y))
    batch = _numel(batch_shape) if batch_shape else 1
    flops = 2.0 * batch * m * k * n
    return OpCost(flops, float((_numel(a) + _numel(b) + batch * m * n) * e), ctx.dtype or "",
                  f"B={batch} M={m} K={k} N={n}")


def model_linear(dims: Dims, ctx: OpContext) -> OpCost:
    x, w = _need(dims, 0, 1)
    bias = _tensor(dims[2]) if len(dims) > 2 else None
    if len(w) != 2 or x[-1] != w[1]:
        raise Unmodelled(f"linear shapes {x}, weight {w} are not [..., K], [N, K]")
    e = _elem(ctx)
    m = _numel(x[:-1])
    extra = (_numel(bias) * e, 2.0 * m * w[0]) if bias else (0, 0.0)
    return _mm_cost(m, w[1], w[0], e, extra_bytes=extra[0], extra_flops=extra[1], ctx=ctx,
                    label="+bias" if bias else "")


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
        return OpCost(flops, nbytes, ctx.dtype or "", f"T={t} K={k} N={n} G={g}",
                      f"weights of {hit:.1f} of {g} groups: expected when the {t} rows spread uniformly (range "
                      f"1-{min(g, t)}); FLOPs assume every row is in a group (offs[-1] = T)")
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
        raise Unmodelled("query length > 1: whether the mask is causal is a value (Concrete Inputs), not a recorded "
                         "shape, so the work is not known")
    e = _elem(ctx)
    flops = 2.0 * b * h * lq * lk * (d + dv)
    nbytes = float((_numel(q) + _numel(k) + _numel(v) + b * h * lq * dv) * e)
    return OpCost(flops, nbytes, ctx.dtype or "", f"B={b} H={h} Hkv={k[1]} Lq={lq} Lk={lk} D={d}",
                  "decode (one query): every key is read once")


def model_norm(dims: Dims, ctx: OpContext) -> OpCost:
    x, = _need(dims, 0)
    h = x[-1]
    params = sum(_numel(t) for t in (_tensor(d) for d in dims[1:]) if t)
    e = _elem(ctx)
    return OpCost(None, float((2 * _numel(x) + params) * e), "", f"N={_numel(x[:-1])} H={h}",
                  "reads x and the weights, writes y")


def model_softmax(dims: Dims, ctx: OpContext) -> OpCost:
    x, = _need(dims, 0)
    e = _elem(ctx)
    return OpCost(None, float(2 * _numel(x) * e), "", "x".join(map(str, x)), "reads x, writes y")


def model_vllm_rms_norm(dims: Dims, ctx: OpContext) -> OpCost:
    out, x, w = _need(dims, 0, 1, 2)
    e = _elem(ctx)
    return OpCost(None, float((2 * _numel(x) + _numel(w)) * e), "", f"N={_numel(x[:-1])} H={x[-1]}",
                  "reads x and the weights, writes out")


def model_vllm_fused_add_rms_norm(dims: Dims, ctx: OpContext) -> OpCost:
    x, res, w = _need(dims, 0, 1, 2)
    e = _elem(ctx)
    return OpCost(None, float((4 * _numel(x) + _numel(w)) * e), "", f"N={_numel(x[:-1])} H={x[-1]}",
                  "reads x and the residual, writes both in place")


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
    return OpCost(None, nbytes, "", f"N={n} Hkv={key[1] if len(key) > 2 else '?'} D={key[-1]} cache={c} B/elem",
                  "reads K and V, writes them into the cache")


def model_concat_and_cache_mla(dims: Dims, ctx: OpContext) -> OpCost:
    kv_c, k_pe = _need(dims, 0, 1)
    slots = _tensor(dims[3]) if len(dims) > 3 else None
    e, c = _elem(ctx), _cache_bytes(ctx)
    width = kv_c[-1] + k_pe[-1]
    nbytes = float((_numel(kv_c) + _numel(k_pe)) * e + kv_c[0] * width * c + (_numel(slots) * 8 if slots else 0))
    return OpCost(None, nbytes, "", f"N={kv_c[0]} latent={kv_c[-1]}+{k_pe[-1]} cache={c} B/elem",
                  "reads the latent and rope key, writes the cache")


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
    return OpCost(2.0 * m * k * n, nbytes, ctx.dtype or "", f"M={m} K={k} N={n} W{bits}A16 g{group}",
                  "weights: packed int32 plus 16-bit group scales, as recorded")


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
    return OpCost(2.0 * rows * k * n, nbytes, ctx.dtype or "",
                  f"tokens={tokens} top_k={per_token} K={k} N={n} E={experts} W{bits}A16 g{group}",
                  f"weights of {hit:.1f} of {experts} experts: expected when {tokens} tokens pick {per_token} "
                  "experts uniformly")


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
    scales = sum(_numel(t) for t in (_tensor(d) for d in dims[(3 if out_first else 2):]) if t) * 4
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
    ("vllm::unified_attention", "attention over a paged KV cache: the sequence lengths are tensor values, not "
     "shapes, so the KV read is unknown (report --by sol models it from --context)"),
    ("vllm::unified_mla_attention", "MLA over a paged KV cache: the sequence lengths are tensor values, not shapes "
     "(report --by sol models the KV read from --context)"),
    ("_flashmla_C::", "FlashMLA: the sequence lengths are tensor values, not shapes"),
    ("_vllm_fa", "varlen FlashAttention: cu_seqlens are tensor values, not shapes"),
    ("vllm_flash_attn", "varlen FlashAttention: cu_seqlens are tensor values, not shapes"),
    ("vllm::moe_forward", "the expert weights are module parameters, not inputs of the op: their shapes are not "
     "recorded (report --by sol models the experts from --model-config)"),
    ("vllm::inplace_fused_experts", "fused_experts: the weight element type (BF16, FP8 or packed int) is a flag "
     "value, not a shape, and the Triton kernel name does not state it"),
    ("vllm::outplace_fused_experts", "fused_experts: the weight element type (BF16, FP8 or packed int) is a flag "
     "value, not a shape, and the Triton kernel name does not state it"),
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


# ------------------------------------------------------------------------------------------------ the roofline


@dataclass
class _Row:
    """One (run, batch, source, op, shapes, kernel set) group of calls."""

    run_id: str
    phase: str
    batch_size: int | None
    world_size: int | None
    device_name: str | None
    steps: int
    source: str  # eager | graph
    op: str | None
    input_dims: str | None
    kernel_set: str
    calls: float
    kernels: int
    kernel_ns: int
    categories: list[str]
    kernel_names: tuple[str, ...]
    note: str = ""
    cost: OpCost | None = None
    dtype: str | None = None
    dtype_source: str = ""
    reason: str = ""


def _compact_dims(text: str | None) -> str | None:
    dims = parse_dims(text)
    return json.dumps(dims, separators=(",", ":")) if dims is not None else text


def _run_dtypes(frame: pl.DataFrame) -> dict[str, str]:
    """Per run: the 16-bit element type most of its kernel names state (the fallback dtype of an op)."""
    votes: dict[str, Counter[str]] = defaultdict(Counter)
    for r in frame.iter_rows(named=True):
        for name in r["kernel_names"] or []:
            dtype = name_dtype(name)
            if dtype in ("bf16", "fp16"):
                votes[r["run_id"]][dtype] += 1
    return {run: c.most_common(1)[0][0] for run, c in votes.items() if c}


def _cost_row(row: _Row, run_dtype: dict[str, str]) -> None:
    if row.op is None:
        row.reason = "no CPU op recorded for these kernels (launched outside an op, or the op was not profiled)"
        return
    dims = parse_dims(row.input_dims)
    if dims is None:
        row.reason = "shapes not recorded (profile with record_shapes=True)"
        return
    dtype = kernels_dtype(row.kernel_names)
    source = "kernel"
    if dtype is None and row.run_id in run_dtype:
        dtype, source = run_dtype[row.run_id], "run"
    try:
        row.cost = op_cost(row.op, dims, OpContext(dtype, source, row.kernel_names))
    except Unmodelled as exc:
        row.reason = str(exc)
        return
    row.dtype = row.cost.compute or dtype  # the type it computes in (FP8 for a scaled GEMM), else its elements'
    row.dtype_source = source if row.dtype else ""


def eager_rows(frame: pl.DataFrame) -> list[_Row]:
    rows = []
    for r in frame.iter_rows(named=True):
        rows.append(_Row(
            run_id=r["run_id"], phase=r["phase"], batch_size=r["batch_size"], world_size=r["world_size"],
            device_name=r["device_name"], steps=r["steps"], source="eager", op=r["op"],
            input_dims=_compact_dims(r["input_dims"]), kernel_set=r["kernel_set"], calls=r["calls"],
            kernels=r["kernels"], kernel_ns=r["kernel_ns"], categories=list(r["categories"] or []),
            kernel_names=tuple(r["kernel_names"] or ()),
        ))
    return _merge(rows)


def _merge(rows: list[_Row]) -> list[_Row]:
    """Rows equal after normalising the dims text (pretty-printed vs compact JSON) become one."""
    merged: dict[tuple, _Row] = {}
    for row in rows:
        key = (row.run_id, row.phase, row.batch_size, row.device_name, row.source, row.op, row.input_dims,
               row.kernel_set)
        have = merged.get(key)
        if have is None:
            merged[key] = row
        else:
            have.calls += row.calls
            have.kernels += row.kernels
            have.kernel_ns += row.kernel_ns
            have.categories = sorted(set(have.categories) | set(row.categories))
    return list(merged.values())


def carry_graph_kernels(graph: pl.DataFrame, eager: pl.DataFrame) -> list[_Row]:
    """Rows for CUDA-graph replayed kernels: shapes carried over from eager calls where unambiguous, else unmodelled.

    A graph step (trace, step) is matched with the eager calls of the same device, world size, phase and batch
    size (any run of the database). An eager op shape (op, input dims) with kernel set S is carried into the graph
    step when (1) every kernel signature (name, grid, block) of S belongs, across all those eager calls, to that op
    shape and kernel set only, (2) every signature of S occurs in the graph step, and (3) their counts there are the
    same multiple of their counts in S (that multiple is the number of calls). All other graph kernels are listed
    unmodelled with the reason.
    """
    owners: dict[tuple, set[tuple]] = defaultdict(set)  # (device, world, phase, batch, sig) -> {(op, dims, set)}
    shapes: dict[tuple, dict[str, Any]] = {}
    for r in eager.iter_rows(named=True):
        if r["op"] is None or r["batch_size"] is None:
            continue
        ident = (r["op"], _compact_dims(r["input_dims"]), r["kernel_set"])
        ctx_key = (r["device_name"], r["world_size"], r["phase"], r["batch_size"])
        for sig in r["kernel_set"].split(" "):
            owners[ctx_key + (sig,)].add(ident)
        info = shapes.setdefault((*ctx_key, *ident), {"names": set(), "categories": set()})
        info["names"].update(r["kernel_names"] or [])
        info["categories"].update(r["categories"] or [])

    out: list[_Row] = []
    for (run_id, _trace_id, _step), group in _group_steps(graph):
        first = group[0]
        ctx_key = (first["device_name"], first["world_size"], first["phase"], first["batch_size"])
        by_sig = {g["sig"]: g for g in group}
        used: set[str] = set()
        candidates = {next(iter(owners[ctx_key + (sig,)])) for sig in by_sig
                      if len(owners.get((*ctx_key, sig), ())) == 1}
        for op, dims, kernel_set in sorted(candidates, key=str):
            need = Counter(kernel_set.split(" "))
            if any(owners.get((*ctx_key, sig)) != {(op, dims, kernel_set)} or sig not in by_sig for sig in need):
                continue
            ratios = {by_sig[sig]["kernels"] / n for sig, n in need.items()}
            if len(ratios) != 1 or not float(next(iter(ratios))).is_integer() or any(sig in used for sig in need):
                continue
            calls = int(next(iter(ratios)))
            used.update(need)
            info = shapes[ctx_key + (op, dims, kernel_set)]
            out.append(_Row(
                run_id=run_id, phase=first["phase"], batch_size=first["batch_size"], world_size=first["world_size"],
                device_name=first["device_name"], steps=0, source="graph", op=op, input_dims=dims,
                kernel_set=kernel_set, calls=calls, kernels=sum(by_sig[s]["kernels"] for s in need),
                kernel_ns=sum(by_sig[s]["kernel_ns"] for s in need), categories=sorted(info["categories"]),
                kernel_names=tuple(sorted(info["names"])),
                note="shapes carried from eager calls with the same kernels (name, grid, block)",
            ))
        for sig, g in by_sig.items():
            if sig in used:
                continue
            owned = owners.get((*ctx_key, sig), set())
            if not owned:
                why = (f"CUDA-graph replay: no eager {first['phase']} step of batch {first['batch_size']} on this "
                       "device ran this kernel with the same grid and block, so its shapes are unknown")
            elif len(owned) > 1:
                why = (f"CUDA-graph replay: in eager steps the same kernel (name, grid, block) ran for {len(owned)} "
                       "different op shapes, so the match is ambiguous")
            else:
                why = ("CUDA-graph replay: the eager op launched other kernels too, and their counts in the graph do "
                       "not match, so the match is ambiguous")
            out.append(_Row(
                run_id=run_id, phase=first["phase"], batch_size=first["batch_size"], world_size=first["world_size"],
                device_name=first["device_name"], steps=0, source="graph", op=None, input_dims=None,
                kernel_set=sig, calls=g["kernels"], kernels=g["kernels"], kernel_ns=g["kernel_ns"],
                categories=[g["category"]], kernel_names=(g["short_name"],), reason=why,
            ))
    return out


def _group_steps(graph: pl.DataFrame) -> list[tuple[tuple[str, int, int], list[dict[str, Any]]]]:
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = defaultdict(list)
    for r in graph.iter_rows(named=True):
        groups[(r["run_id"], r["trace_id"], r["step_index"])].append(r)
    return list(groups.items())


def _graph_merge(rows: list[_Row], steps: dict[tuple, int]) -> list[_Row]:
    """Per-step graph rows summed per (run, phase, batch, op, dims, kernel set / signature)."""
    merged: dict[tuple, _Row] = {}
    for row in rows:
        key = (row.run_id, row.phase, row.batch_size, row.op, row.input_dims, row.kernel_set, row.reason)
        have = merged.get(key)
        if have is None:
            row.steps = steps.get((row.run_id, row.phase, row.batch_size), 0)
            merged[key] = row
        else:
            have.calls += row.calls
            have.kernels += row.kernels
            have.kernel_ns += row.kernel_ns
    return list(merged.values())


ROOFLINE_COLUMNS = (
    "run_id", "batch_size", "source", "op", "shape", "dtype", "calls_per_step", "us_per_call", "ms_per_step",
    "gflop_per_call", "mb_per_call", "tflops", "gbps", "pct_peak_flops", "pct_peak_hbm", "intensity", "ridge",
    "bound", "sol_us", "pct_of_sol", "category", "device", "dtype_source", "kernels_per_call", "calls", "steps",
    "input_dims", "note",
)


def _metrics(row: _Row, peaks: Peaks | None) -> dict[str, Any]:
    us = row.kernel_ns / row.calls / 1e3 if row.calls else None
    out: dict[str, Any] = {
        "run_id": row.run_id, "batch_size": row.batch_size, "source": row.source,
        "op": row.op if row.op is not None else f"({', '.join(row.kernel_names)[:120]})",
        "shape": None, "dtype": row.dtype, "calls_per_step": row.calls / row.steps if row.steps else None,
        "us_per_call": us, "ms_per_step": row.kernel_ns / 1e6 / row.steps if row.steps else None,
        "category": ",".join(row.categories), "device": peaks.device if peaks else None,
        "dtype_source": row.dtype_source or None, "kernels_per_call": row.kernels / row.calls if row.calls else None,
        "calls": int(row.calls), "steps": row.steps, "input_dims": row.input_dims, "note": row.reason or row.note,
    }
    cost = row.cost
    if cost is None or not row.kernel_ns:
        out["bound"] = "unmodelled" if cost is None else None
        return out
    note = "; ".join(x for x in (cost.note, row.note, f"dtype from the {row.dtype_source}'s kernel names"
                                 if row.dtype_source == "run" else "") if x)
    out.update(shape=cost.shape, note=note, mb_per_call=cost.bytes / 1e6,
               gbps=cost.bytes * row.calls / row.kernel_ns,
               gflop_per_call=cost.flops / 1e9 if cost.flops is not None else None,
               tflops=cost.flops * row.calls / row.kernel_ns / 1e3 if cost.flops is not None else None,
               intensity=cost.flops / cost.bytes if cost.flops is not None and cost.bytes else None)
    hbm = peaks.peak("hbm_gbps") if peaks else None
    flops_peak = peaks.peak(COMPUTE_PEAK[cost.compute]) if peaks and cost.compute in COMPUTE_PEAK else None
    if hbm:
        out["pct_peak_hbm"] = 100.0 * out["gbps"] / hbm
    if flops_peak and out["tflops"] is not None:
        out["pct_peak_flops"] = 100.0 * out["tflops"] / flops_peak
    if hbm and flops_peak:
        out["ridge"] = flops_peak * 1e3 / hbm
    if cost.flops is None:
        out["bound"] = "memory"
    elif out.get("ridge") is not None and out["intensity"] is not None:
        out["bound"] = "compute" if out["intensity"] >= out["ridge"] else "memory"
    times = [cost.bytes / (hbm * 1e3)] if hbm else []
    if cost.flops is not None:
        times.append(cost.flops / (flops_peak * 1e6) if flops_peak else math.nan)
    if times and not any(math.isnan(t) for t in times):
        out["sol_us"] = max(times)
        out["pct_of_sol"] = 100.0 * out["sol_us"] / us if us else None
    return out


def roofline(con: duckdb.DuckDBPyConnection, *, phase: str = "decode", rank: int | None = None,
             trace_id: int | None = None, top: int | None = None, peaks_file: Path | None = None) -> pl.DataFrame:
    """``report --by roofline``: per run, batch size and op shape, achieved TFLOP/s and GB/s against the device's
    peaks (eager calls, and CUDA-graph kernels whose shapes carry over unambiguously); unmodelled ops listed with
    the reason. Sorted by time per step within each (run, batch size); ``top`` keeps that many rows per group."""
    peaks = load_peaks(peaks_file)
    devices = run_devices(con, peaks)
    params = {"phase": phase, "rank": rank, "trace_id": trace_id}
    run_query(con, "sol_steps")  # the macros the sol_* queries below share (temporary, idempotent)
    eager = query_frame(con, "sol_op_calls", params)
    graph = query_frame(con, "sol_graph_kernels", params)
    rows = eager_rows(eager)
    if not graph.is_empty():
        source = eager if rank is None and trace_id is None else query_frame(
            con, "sol_op_calls", {"phase": phase, "rank": None, "trace_id": None})
        steps = query_frame(con, "sol_step_counts", params)
        counts = {(r["run_id"], r["phase"], r["batch_size"]): r["steps"] for r in steps.iter_rows(named=True)}
        rows += _graph_merge(carry_graph_kernels(graph, source), counts)
    run_dtype = _run_dtypes(eager)
    for row in rows:
        if row.cost is None and not row.reason:
            _cost_row(row, run_dtype)
    records = [_metrics(row, devices.get((row.run_id, row.device_name))) for row in rows]
    frame = pl.DataFrame(records, schema=_roofline_schema(), orient="row") if records else pl.DataFrame(
        schema=_roofline_schema())
    frame = frame.sort(["run_id", "batch_size", "ms_per_step"], descending=[False, False, True], nulls_last=True)
    if top:
        frame = frame.filter(pl.int_range(pl.len()).over(["run_id", "batch_size"]) < top)
    return frame.with_columns(pl.col(c).round_sig_figs(6) for c, t in _roofline_schema().items() if t == pl.Float64)


def _roofline_schema() -> dict[str, Any]:
    floats = {"calls_per_step", "us_per_call", "ms_per_step", "gflop_per_call", "mb_per_call", "tflops", "gbps",
              "pct_peak_flops", "pct_peak_hbm", "intensity", "ridge", "sol_us", "pct_of_sol", "kernels_per_call"}
    return {c: (pl.Float64 if c in floats else pl.Int64 if c in ("batch_size", "calls", "steps") else pl.Utf8)
            for c in ROOFLINE_COLUMNS}


# ------------------------------------------------------------------------------------------ the step bound (sol)

#: the observed categories each part of the bound is set against
SOL_PARTS = (
    ("weights", ("gemm", "marlin_gemm", "quant_gemm"), "GEMM kernels vs every weight byte this rank must read"),
    ("kv_cache", ("attention",), "attention kernels vs the KV cache read at --context"),
    ("allreduce", ("allreduce",), "all-reduce kernels vs the measured all-reduce floor (k25trace bench allreduce)"),
    ("other", ("norm", "rotary", "activation", "moe_routing", "sampling", "elementwise", "memcpy", "memset",
               "comm_other", "all2all", "quantize", "embedding", "other", "overlap"),
     "everything else: not modelled (activations, all-to-all transfers, quantize casts and embedding lookups are "
     "left out)"),
    ("idle", ("idle",), "GPU idle inside the step"),
)
SOL_COLUMNS = ("run_id", "batch_size", "tp", "part", "observed_ms", "exclusive_ms", "floor_ms", "ratio", "floor_gb",
               "floor_basis", "categories", "device", "steps")


def step_sol(con: duckdb.DuckDBPyConnection, *, model_config: Path | None, quant: str | None = None,
             context: int | None = None, phase: str = "decode", rank: int | None = None, trace_id: int | None = None,
             peaks_file: Path | None = None, notes: list[str] | None = None) -> pl.DataFrame:
    """``report --by sol``: per run and batch size, the observed ms per step of each part (GEMM kernels, attention,
    all-reduce, the rest, idle, the whole step) next to its floor from the model (:mod:`k25trace.models`) and the
    device's peaks, and the ratio observed / floor.

    The config is checked against what the trace shows (:func:`config_checks`); each disagreement is appended to
    ``notes`` and to the ``floor_basis`` of the run's step row, and every ratio below 1 says why it can be."""
    from k25trace import models
    from k25trace.analysis.report import allreduce_floor, breakdown

    cfg = models.load_config(model_config) if model_config is not None else models.stored_config(con)
    if cfg is None:
        raise K25Error("report --by sol needs the model: --model-config config.json (the Hugging Face config of the "
                       "model that was traced; or keep it with `k25trace load … --model-config`), and --context N "
                       "for the KV cache")
    plan = models.parse_quant(quant, cfg)
    peaks = load_peaks(peaks_file)
    devices = run_devices(con, peaks)
    world = {r["run_id"]: (r["world_size"] or 1, r["device_name"])
             for r in query_frame(con, "sol_devices").iter_rows(named=True)}
    frame = breakdown(con, by="batch", phase=phase, rank=rank, trace_id=trace_id)
    floors = {(r["run_id"], r["batch_size"]): r for r in allreduce_floor(con, phase).iter_rows(named=True)}
    run_query(con, "sol_steps")  # the macros of sol_op_calls (temporary, idempotent)
    ops = query_frame(con, "sol_op_calls", {"phase": phase, "rank": rank, "trace_id": trace_id})
    checks = config_checks(cfg, floors, ops, {run: tp for run, (tp, _) in world.items()})
    for run_id, problems in checks.items():
        for problem in problems:
            if notes is not None:
                notes.append(f"{run_id}: the model config does not match the trace: {problem}")
    rows: list[dict[str, Any]] = []
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        tp, device_name = world.get(run_id, (1, None))
        dev = devices.get((run_id, device_name))
        base = {"run_id": run_id, "batch_size": batch, "tp": tp, "device": dev.device if dev else None,
                "steps": first["steps"]}
        if batch is None:
            rows.append({**base, "part": "step", "observed_ms": first["step_ms"],
                         "floor_basis": "no batch size (inferred steps): no bound"})
            continue
        bound = models.step_bound(cfg, plan, tp=tp, batch=int(batch), context=context)
        ar_ms, ar_basis = _allreduce_floor_ms(floors.get((run_id, batch)), tp, dev)
        by_cat = {r["category"]: r for r in group.iter_rows(named=True)}
        part_rows = _part_rows(base, by_cat, bound, dev, ar_ms, ar_basis)
        step = _step_row(base, first["step_ms"], bound, dev, ar_ms)
        step["floor_basis"] += f"; model {cfg.name}: {cfg.layers} layers, hidden {cfg.hidden}"
        if checks.get(run_id):
            step["floor_basis"] += "; CONFIG DOES NOT MATCH THE TRACE: " + "; ".join(checks[run_id])
        for row in (*part_rows, step):
            row["mismatch"] = "; ".join(checks.get(run_id, []))
        rows += [*part_rows, step]
    return _sol_frame(rows)


_GEMM_OPS = ("aten::mm", "aten::addmm", "aten::linear")
_EXPERT_GEMM_OPS = ("aten::_grouped_mm", "_moe_C::moe_wna16_marlin_gemm")


def _gemm_kn(op: str, dims: Dims | None) -> tuple[int, int] | None:
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


def config_checks(cfg: Any, floors: dict[tuple[str, Any], dict[str, Any]], ops: pl.DataFrame,
                  tp: dict[str, int]) -> dict[str, list[str]]:
    """Per run: where the model config disagrees with what the trace shows, in words naming the config field and
    the trace's evidence (empty when nothing could be checked or everything agrees). Checked, per batch size:

    * all-reduces per step (TP > 1): a TP decoder runs 2 per layer (attention and MLP outputs), plus 1 for the
      vocab-parallel embedding: 2·num_hidden_layers or that + 1;
    * the all-reduce message (where recorded): batch × hidden_size elements of 2 or 4 bytes;
    * the recorded GEMM shapes (eager, ``record_shapes``): the most frequent K of the 2-D GEMMs is the hidden size
      (q/kv/qkv, gate/up, router and lm_head all read the hidden state), the router GEMM [T, hidden] × [hidden,
      experts] runs once per MoE layer, the expert GEMMs (``_grouped_mm``, Marlin MoE) twice per MoE layer.
    """
    out: dict[str, list[str]] = defaultdict(list)

    def say(run: str, problem: str) -> None:
        if problem not in out[run]:
            out[run].append(problem)

    L, H, moe_layers = cfg.layers, cfg.hidden, len(cfg.moe_layers)
    for (run, batch), r in sorted(floors.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        count = r.get("allreduce_per_step")
        if tp.get(run, 1) > 1 and count and batch is not None:
            n = round(count)
            if n not in (2 * L, 2 * L + 1):
                say(run, f"the trace runs {count:g} all-reduces per step (2 per layer, +1 for the "
                         f"embedding: {n // 2} layers), the config num_hidden_layers {L} needs {2 * L} or {2 * L + 1}")
            size = r.get("msg_bytes")
            if size and batch and size % batch == 0 and size // batch not in (2 * H, 4 * H):
                per = size // batch
                say(run, f"its all-reduce messages are {size:,} B at batch {batch} ({per:,} B per token: hidden "
                         f"{per // 2:,} in 16 bits), the config hidden_size is {H:,}")
    if ops.is_empty():
        return dict(out)
    for (run, batch), group in ops.group_by(["run_id", "batch_size"], maintain_order=True):
        steps = group["steps"][0] or 0
        if batch is None or not steps:
            continue
        ks: Counter[int] = Counter()
        router = expert = 0.0
        for r in group.iter_rows(named=True):
            per_step = r["calls"] / steps
            if r["op"] in _EXPERT_GEMM_OPS:
                expert += per_step
                continue
            kn = _gemm_kn(r["op"], parse_dims(r["input_dims"])) if r["op"] in _GEMM_OPS else None
            if kn is None:
                continue
            ks[kn[0]] += per_step
            if cfg.experts and kn == (H, cfg.experts):
                router += per_step
        if ks:
            k_mode, _ = ks.most_common(1)[0]
            if k_mode != H:
                say(run, f"the most frequent K of its GEMMs is {k_mode:,} (the hidden size every projection reads), "
                         f"the config hidden_size is {H:,}")
        if router and round(router) != moe_layers:
            say(run, f"its router GEMM ([tokens, {H}] x [{H}, {cfg.experts}]) runs {router:g} times per step (once "
                     f"per MoE layer), the config has {moe_layers} MoE layers (num_hidden_layers {L})")
        if expert and round(expert) != 2 * moe_layers:
            say(run, f"it runs {expert:g} expert GEMMs per step (2 per MoE layer: {round(expert) // 2} layers), the "
                     f"config has {moe_layers} MoE layers (num_hidden_layers {L}"
                     + (", no experts)" if not cfg.experts else ")"))
    return dict(out)


def _allreduce_floor_ms(ar: dict[str, Any] | None, tp: int, dev: Peaks | None) -> tuple[float | None, str]:
    """The all-reduce floor of one step (ms) and how it was found: the bench's kernel (else wall) time when
    ``k25trace bench allreduce`` measured it, else the bus-bandwidth term alone from the device's link peak."""
    ar_ms, ar_basis = None, "not measured: run `k25trace bench allreduce --db` (report --by floor)"
    if tp > 1 and ar:
        ar_ms = ar["floor_kernel_ms"] if ar["floor_kernel_ms"] is not None else ar["floor_ms"]
        if ar_ms is not None:
            ar_basis = (f"bench {ar['floor_mode']} burst, {ar['floor_basis']} time x {ar['allreduce_per_step']} "
                        "per step")
        elif ar["msg_bytes"] and ar["allreduce_per_step"] and dev and (link := dev.peak("interconnect_gbps")):
            # no bench: the bus-bandwidth term alone (2(n-1)/n of each message over each link direction)
            ar_ms = ar["allreduce_per_step"] * ar["msg_bytes"] * 2 * (tp - 1) / tp / (link * 1e9) * 1e3
            ar_basis = (f"bandwidth only: {ar['allreduce_per_step']:g} x {ar['msg_bytes']:,} B x 2(n-1)/n at "
                        f"{link:g} GB/s per direction ({dev.interconnect}); latency not counted — `k25trace bench "
                        "allreduce` measures the real floor")
    return ar_ms, ar_basis


def _device_peaks(dev: Peaks | None, compute: str) -> tuple[float | None, float | None]:
    """The device's HBM GB/s and its TFLOP/s for the GEMMs' compute type (None: unknown device)."""
    if not dev:
        return None, None
    return dev.peak("hbm_gbps"), dev.peak(COMPUTE_PEAK.get(compute, "bf16_tflops"))


def _floor_ms(nbytes: float, flops: float, hbm: float | None, peak: float | None) -> float | None:
    """The time (ms) to read ``nbytes`` at the HBM peak, or to do ``flops`` at the compute peak if that is longer."""
    if not hbm:
        return None
    t = nbytes / (hbm * 1e9)
    if peak:
        t = max(t, flops / (peak * 1e12))
    return t * 1e3


def _part_rows(base: dict[str, Any], by_cat: dict[str, dict[str, Any]], bound: Any, dev: Peaks | None,
               ar_ms: float | None, ar_basis: str) -> list[dict[str, Any]]:
    """One row per part of SOL_PARTS: its observed and exclusive ms per step and its floor."""
    hbm, peak = _device_peaks(dev, bound.compute)
    tp = base["tp"]
    kv = bound.part("kv_cache")
    weights_b = bound.weight_bytes
    weights_f = bound.total_flops - (kv.flops if kv else 0.0)
    rows = []
    for part, cats, _ in SOL_PARTS:
        observed = sum((by_cat[c]["kernel_ms_per_step"] or 0.0) for c in cats if c in by_cat and c != "idle")
        exclusive = sum((by_cat[c]["ms_per_step"] or 0.0) for c in cats if c in by_cat)
        row = {**base, "part": part, "categories": ",".join(c for c in cats if c in by_cat) or None,
               "observed_ms": observed if part != "idle" else exclusive, "exclusive_ms": exclusive}
        if part == "weights":
            row.update(floor_ms=_floor_ms(weights_b, weights_f, hbm, peak), floor_gb=weights_b / 1e9,
                       floor_basis=_weights_basis(bound))
        elif part == "kv_cache":
            if kv is None:
                row["floor_basis"] = "give --context N (tokens per request) to bound the KV-cache read"
            else:
                row.update(floor_ms=_floor_ms(kv.bytes, kv.flops, hbm, peak), floor_gb=kv.bytes / 1e9,
                           floor_basis=kv.detail)
        elif part == "allreduce":
            if tp == 1:
                row["floor_basis"] = "TP 1: no all-reduce"
            else:
                row.update(floor_ms=ar_ms, floor_basis=ar_basis)
        elif part == "idle":
            row.update(floor_ms=0.0, floor_basis="a step at its bound keeps the GPU busy")
        else:
            row["floor_basis"] = ("not modelled: activations, routing, all-to-all, quantize, embedding and "
                                  "elementwise work are left out")
        rows.append(row)
    return rows


def _step_row(base: dict[str, Any], step_ms: float, bound: Any, dev: Peaks | None,
              ar_ms: float | None) -> dict[str, Any]:
    """The whole step: observed wall time against the bound of every byte and FLOP plus the all-reduce floor."""
    hbm, peak = _device_peaks(dev, bound.compute)
    hbm_floor = _floor_ms(bound.total_bytes, bound.total_flops, hbm, peak)
    step_floor = None if hbm_floor is None else hbm_floor + (ar_ms or 0.0)
    missing = [w for w, gone in (("the KV cache (--context)", bound.part("kv_cache") is None),
                                 ("the all-reduce (not measured)", base["tp"] > 1 and ar_ms is None)) if gone]
    return {**base, "part": "step", "categories": "all", "observed_ms": step_ms,
            "exclusive_ms": step_ms, "floor_ms": step_floor, "floor_gb": bound.total_bytes / 1e9,
            "floor_basis": (f"max(bytes / {hbm:g} GB/s, FLOPs / {peak:g} TFLOP/s {bound.compute})"
                            if hbm and peak else "no device peaks: give --peaks FILE")
            + (" + all-reduce floor" if ar_ms else "")
            + (f"; without {' and '.join(missing)}" if missing else "") + f"; {bound.plan}"}


def _sol_frame(rows: list[dict[str, Any]]) -> pl.DataFrame:
    """The rows as the ``report --by sol`` frame (SOL_COLUMNS), with observed / floor where both are known."""
    for row in rows:
        if row.get("floor_ms") and row.get("observed_ms"):
            row["ratio"] = row["observed_ms"] / row["floor_ms"]
            if row["ratio"] < 1:
                row["floor_basis"] = (row.get("floor_basis") or "") + "; RATIO BELOW 1: " + _below_one(row)
        elif row.get("floor_ms") and row["part"] == "kv_cache":
            row["floor_basis"] += ("; no attention kernels in these steps (attention done by GEMM kernels is counted "
                                   "under weights: see report --by roofline)")
    schema = {c: (pl.Utf8 if c in ("run_id", "part", "floor_basis", "categories", "device") else pl.Int64 if c in (
        "batch_size", "tp", "steps") else pl.Float64) for c in SOL_COLUMNS}
    out = pl.DataFrame([{c: r.get(c) for c in SOL_COLUMNS} for r in rows], schema=schema, orient="row")
    return out.with_columns(pl.col(c).round_sig_figs(6) for c, t in schema.items() if t == pl.Float64)


def _below_one(row: dict[str, Any]) -> str:
    """Why an observed time below its floor can be: the floor is a lower bound only for the traced model."""
    if row.get("mismatch"):
        return "the model config does not match the trace (above), so this floor is not the traced model's"
    why = {
        "weights": "the GEMM kernels read less than the bound counts: a router that favours some experts hits fewer "
                   "than the uniform expectation, or weights are read by kernels of other categories, or the "
                   "config/--quant is not the traced model's",
        "kv_cache": "the attention kernels read less than --context tokens per request: the requests' KV caches "
                    "are shorter than --context",
        "allreduce": "the all-reduce kernels took less than the bench's kernel time per op: the bench ran other "
                     "sizes, ranks or links than the trace",
    }.get(row["part"], "the config, --quant, --context or the device peaks are not the traced run's")
    return why


def _weights_basis(bound: Any) -> str:
    names = {"attention": "attention", "dense_mlp": "dense MLP", "shared_experts": "shared experts",
             "routed_experts": "routed experts", "router": "router", "lm_head": "lm_head+norms",
             "embedding": "embedding rows"}
    pieces = [f"{names[p.name]} {p.bytes / 1e9:.3f} GB" for p in bound.parts if p.name in names]
    return "; ".join(pieces) + (f"; {bound.experts_hit:.1f} experts hit per layer" if bound.experts_hit else "")


# ------------------------------------------------------------------------------------------ terminal tables

_ROOFLINE_TABLE = {"source": "src", "op": "op", "shape": "shape", "dtype": "dtype", "calls_per_step": "calls/step",
                   "us_per_call": "µs/call", "ms_per_step": "ms/step", "tflops": "TFLOP/s", "gbps": "GB/s",
                   "pct_peak_flops": "% peak FLOP", "pct_peak_hbm": "% peak HBM", "bound": "bound",
                   "pct_of_sol": "% of SOL", "note": "note"}
_SOL_TABLE = {"part": "part", "observed_ms": "observed ms/step", "floor_ms": "floor ms/step", "ratio": "observed/floor",
              "floor_gb": "floor GB", "floor_basis": "floor basis"}


def print_tables(frame: pl.DataFrame, by: str, console: Any = None, labels: dict[str, str] | None = None) -> None:
    """``report --by roofline`` / ``--by sol`` on a terminal: one table per (run, batch size) with the columns that
    matter (CSV/JSON carry all of them), titled by the run's label from ``labels``
    (:func:`k25trace.analysis.report.run_labels`)."""
    import sys

    from rich.console import Console

    from k25trace.render.output import rich_table

    labels = labels or {}  # a run without a label is titled by its id

    console = console or Console(width=None if sys.stdout.isatty() else 200)
    columns = _ROOFLINE_TABLE if by == "roofline" else _SOL_TABLE
    if by == "roofline":  # the whole note is in CSV/JSON; a table keeps its start
        frame = frame.with_columns(pl.when(pl.col("note").str.len_chars() > 60)
                                   .then(pl.col("note").str.slice(0, 59) + "…").otherwise(pl.col("note")).alias("note"))
    for (run_id, batch), group in frame.group_by(["run_id", "batch_size"], maintain_order=True):
        first = group.row(0, named=True)
        label = labels.get(str(run_id), str(run_id))
        if by == "roofline":
            known = group.filter(pl.col("bound") != "unmodelled")["ms_per_step"].sum()
            total = group["ms_per_step"].sum()
            device = first["device"] or "device unmatched: give --peaks FILE"
            title = (f"{label}, batch size {batch if batch is not None else '?'}: ops with a cost "
                     f"model take {known:.3f} of the {total:.3f} kernel ms/step listed ({device})")
        else:
            title = (f"{label}, batch size {batch if batch is not None else '?'}, TP {first['tp']}: "
                     f"{first['steps']} steps on {first['device'] or 'an unmatched device (give --peaks FILE)'}")
        body = group.select(list(columns)).rename(columns)
        console.print(rich_table(body, title=title))
