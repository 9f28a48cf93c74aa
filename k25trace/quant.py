"""How a checkpoint's weights are stored (``quantization_config`` or ``--quant``): per-matrix :class:`Scheme`, and the
:class:`QuantPlan` of a model's parts, for the decode-step bound of :mod:`k25trace.models`."""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass
from typing import Any

from k25trace.errors import K25Error
from k25trace.model_config import ModelConfig
from k25trace.model_config import shown as _shown


@dataclass(frozen=True)
class Scheme:
    """How one weight matrix is stored: bits per weight, per-group scales (and zero points) along K, or fp8 blocks."""

    name: str
    bits: int
    group: int | None = None  # group size along K for the scales; None: no group scales
    scale_bytes: int = 2
    zero_point: bool = False
    block: tuple[int, int] | None = None  # fp8 block scales (fp32) per (K-block, N-block)
    channel_scale: bool = False  # one fp32 scale per output channel
    compute: str = "bf16"  # the tensor peak its GEMMs can run at (W4A16 dequantizes to 16 bit)

    def matrix_bytes(self, k: int, n: int) -> float:
        """Bytes of a K x N weight matrix, scales and zero points included."""
        total = k * n * self.bits / 8
        if self.group:
            groups = math.ceil(k / self.group) * n
            total += groups * self.scale_bytes + (groups * self.bits / 8 if self.zero_point else 0)
        if self.block:
            total += math.ceil(k / self.block[0]) * math.ceil(n / self.block[1]) * 4
        if self.channel_scale:
            total += n * 4
        return total


MAX_GROUP = 1 << 16
"""The largest quantization group (and fp8 block side) taken: real checkpoints use 16 to 256."""


def _whole(digits: str) -> int:
    """Decimal digits as an int (more than 12 digits: a value above every limit, without converting it)."""
    return int(digits) if len(digits) <= 12 else 10**12


def scheme(spec: str) -> Scheme:
    """A scheme name: bf16, fp16, fp32, fp8 (per-channel scales), fp8-block128 (128x128 blocks), wNa16-gG (e.g.
    w4a16-g32; -zp adds zero points; g0 = per channel), mxfp4, nvfp4."""
    s = spec.strip().lower()
    if s in ("bf16", "bfloat16"):
        return Scheme("bf16", 16, compute="bf16")
    if s in ("fp16", "float16", "half"):
        return Scheme("fp16", 16, compute="fp16")
    if s in ("fp32", "float32"):
        return Scheme("fp32", 32, compute="fp32")
    if s in ("fp8", "fp8-channel", "w8a8-fp8"):
        return Scheme("fp8", 8, channel_scale=True, compute="fp8")
    m = re.fullmatch(r"fp8-block(\d+)(?:x(\d+))?", s)
    if m:
        a, b = _whole(m.group(1)), _whole(m.group(2) or m.group(1))
        if not (1 <= a <= MAX_GROUP and 1 <= b <= MAX_GROUP):
            raise K25Error(f"quantization scheme {spec!r}: the block sides must be from 1 to {MAX_GROUP:,}")
        return Scheme(s, 8, block=(a, b), compute="fp8")
    m = re.fullmatch(r"w(4|8)a16-g(\d+)(-zp)?", s)
    if m:
        group = _whole(m.group(2)) or None
        if group is not None and group > MAX_GROUP:
            raise K25Error(
                f"quantization scheme {spec!r}: the group size must be from 1 to {MAX_GROUP:,} "
                "(g0: one scale per output channel)"
            )
        return Scheme(
            s, int(m.group(1)), group=group, channel_scale=group is None, zero_point=bool(m.group(3)), compute="bf16"
        )
    if s == "mxfp4":
        return Scheme(s, 4, group=32, scale_bytes=1, compute="fp8")
    if s == "nvfp4":
        return Scheme(s, 4, group=16, scale_bytes=1, compute="fp4")
    raise K25Error(
        f"unknown quantization scheme {spec!r}: one of bf16, fp16, fp32, fp8, fp8-block128, "
        "w4a16-g32 (wNa16-gG, -zp for zero points, g0 per channel), mxfp4, nvfp4"
    )


PARTS = ("attention", "dense", "shared", "experts", "router", "lm_head")
ALIASES = {
    "linear": ("attention", "dense", "shared", "experts"),
    "all": ("attention", "dense", "shared", "experts", "lm_head"),
}
KV_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}


@dataclass(frozen=True)
class QuantPlan:
    """The scheme of each weight matrix (by module) and the KV-cache element size."""

    base: Scheme
    per_part: dict[str, Scheme]
    kv_bytes: int
    ignored: tuple[str, ...] = ()  # module names/patterns left in the base dtype
    source: str = ""

    def for_module(self, part: str, module: str) -> Scheme:
        chosen = self.per_part.get(part)
        if chosen is None or any(_module_matches(pattern, module) for pattern in self.ignored):
            return self.base
        return chosen


def _module_matches(pattern: str, module: str) -> bool:
    """compressed-tensors / HF ignore semantics: ``re:`` regex, glob with ``*``, else the module or a parent."""
    if pattern.startswith("re:"):
        return re.match(pattern[3:], module) is not None
    if "*" in pattern:
        return fnmatch.fnmatchcase(module, pattern) or fnmatch.fnmatchcase(module, pattern + ".*")
    return module == pattern or module.startswith(pattern + ".") or f".{pattern}." in f".{module}."


class QuantNotModelled(K25Error):
    """A well-formed quantization_config whose scheme the bound does not model (``--quant`` then says it)."""


def _quant_int(q: dict[str, Any], where: str, key: str, default: int, allowed: tuple[int, ...] | None = None) -> int:
    """A whole-number field of a quantization_config (``where`` names its place), checked."""
    value = q.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise K25Error(f"quantization_config {where}{key} {_shown(value)}: must be a whole number")
    if allowed is not None and value not in allowed:
        raise K25Error(f"quantization_config {where}{key} {_shown(value)}: one of {', '.join(map(str, allowed))}")
    if not -1 <= value <= MAX_GROUP:
        raise K25Error(f"quantization_config {where}{key} {_shown(value)}: must be from -1 to {MAX_GROUP:,}")
    return value


def _quant_list(q: dict[str, Any], key: str) -> tuple[str, ...]:
    """A list-of-names field of a quantization_config (``ignore``, ``modules_to_not_convert``), checked."""
    value = q.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise K25Error(f"quantization_config {key} {_shown(value)}: must be a list of module names")
    for x in value:
        if x.startswith("re:"):
            try:
                re.compile(x[3:])
            except re.error as exc:
                raise K25Error(f"quantization_config {key} {_shown(x)}: not a regular expression: {exc}") from None
    return tuple(value)


def _block(value: Any, where: str) -> Scheme:
    if value is None:
        return scheme("fp8")
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_GROUP for v in value)
    ):
        raise K25Error(
            f"quantization_config {where} {_shown(value)}: must be two whole numbers [K, N] from 1 to {MAX_GROUP:,}"
        )
    return scheme(f"fp8-block{value[0]}x{value[1]}")


def plan_from_config(cfg: ModelConfig) -> QuantPlan:
    """The quantization the checkpoint declares (its ``quantization_config``); none: everything in its dtype.
    Every field read is checked (a K25Error names it)."""
    base = scheme(cfg.dtype)
    q = cfg.quantization or {}
    if not q:
        return QuantPlan(base, {}, KV_BYTES.get(cfg.dtype, 2), source="config: unquantized")
    if not isinstance(q.get("quant_method", ""), str):
        raise K25Error(f"quantization_config quant_method {_shown(q.get('quant_method'))}: must be a string")
    method = str(q.get("quant_method") or "").lower()
    linear = ALIASES["linear"]
    if method == "compressed-tensors":
        groups_value = q.get("config_groups") or {}
        if not isinstance(groups_value, dict):
            raise K25Error(f"quantization_config config_groups {_shown(groups_value)}: must be an object")
        groups = [g for g in groups_value.values() if isinstance(g, dict)]
        if not groups:
            raise QuantNotModelled("compressed-tensors quantization_config without config_groups: give --quant")
        w = groups[0].get("weights") or {}
        if not isinstance(w, dict):
            raise K25Error(f"quantization_config config_groups weights {_shown(w)}: must be an object")
        acts = groups[0].get("input_activations")
        bits = _quant_int(w, "config_groups weights ", "num_bits", 0, (4, 8, 16))
        fmt = str(q.get("format") or "")
        if "nvfp4" in fmt:
            chosen = scheme("nvfp4")
        elif w.get("type") == "float" and bits == 8:
            chosen = _block(w.get("block_structure"), "config_groups weights block_structure")
        elif bits in (4, 8) and not acts:
            group = (
                _quant_int(w, "config_groups weights ", "group_size", 0) if w.get("strategy", "group") == "group" else 0
            )
            chosen = scheme(f"w{bits}a16-g{max(group, 0)}" + ("" if w.get("symmetric", True) else "-zp"))
        else:
            raise QuantNotModelled(
                f"compressed-tensors scheme {_shown(w)} with activations {_shown(acts)} is not modelled: give --quant"
            )
        return QuantPlan(
            base,
            {p: chosen for p in linear},
            KV_BYTES.get(cfg.dtype, 2),
            ignored=_quant_list(q, "ignore"),
            source="config: compressed-tensors",
        )
    if method == "fp8":
        chosen = _block(q.get("weight_block_size"), "weight_block_size")
        ignored = _quant_list(q, "modules_to_not_convert") or _quant_list(q, "ignored_layers")
        return QuantPlan(
            base, {p: chosen for p in linear}, KV_BYTES.get(cfg.dtype, 2), ignored=ignored, source="config: fp8"
        )
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = _quant_int(q, "", "bits", 0, (4, 8)) or _quant_int(q, "", "w_bit", 4, (4, 8))
        group = _quant_int(q, "", "group_size", 0) or _quant_int(q, "", "q_group_size", 128)
        zero = bool(q.get("zero_point")) if method.startswith("awq") else not q.get("sym", True)
        chosen = scheme(f"w{bits}a16-g{max(group, 0)}" + ("-zp" if zero else ""))
        return QuantPlan(
            base,
            {p: chosen for p in linear},
            KV_BYTES.get(cfg.dtype, 2),
            ignored=_quant_list(q, "modules_to_not_convert"),
            source=f"config: {method}",
        )
    if method == "mxfp4":
        return QuantPlan(
            base,
            {"experts": scheme("mxfp4")},
            KV_BYTES.get(cfg.dtype, 2),
            ignored=_quant_list(q, "modules_to_not_convert"),
            source="config: mxfp4",
        )
    raise QuantNotModelled(f"quantization method {method!r} in the model config is not modelled: give --quant")


def parse_quant(spec: str | None, cfg: ModelConfig) -> QuantPlan:
    """``--quant``: comma-separated ``[part=]scheme`` over the config's plan. Parts: attention, dense, shared,
    experts, router, lm_head, linear (= attention, dense, shared, experts), all (+ lm_head), kv (KV-cache dtype:
    bf16, fp16, fp8, fp32). A bare scheme means linear. ``--quant experts=w4a16-g32`` is Kimi-K2-Thinking's INT4:
    routed experts in 4 bits, everything else in the config's dtype."""
    try:
        plan = plan_from_config(cfg)
    except QuantNotModelled:
        if not spec:
            raise
        plan = QuantPlan(scheme(cfg.dtype), {}, KV_BYTES.get(cfg.dtype, 2), source="config's scheme not modelled")
    if not spec:
        return plan
    per_part = dict(plan.per_part)
    kv = plan.kv_bytes
    ignored = plan.ignored
    for item in (x.strip() for x in spec.split(",")):
        if not item:
            continue
        part, _, value = item.rpartition("=")
        part = part.strip().lower() or "linear"
        if part == "kv":
            if value.strip().lower() not in KV_BYTES:
                raise K25Error(f"--quant kv={value}: one of {', '.join(sorted(KV_BYTES))}")
            kv = KV_BYTES[value.strip().lower()]
            continue
        targets = ALIASES.get(part, (part,))
        if any(t not in PARTS for t in targets):
            raise K25Error(f"--quant {item!r}: unknown part {part!r}; parts: {', '.join(PARTS)}, linear, all, kv")
        try:
            chosen = scheme(value)
        except K25Error as exc:
            raise K25Error(f"--quant {item!r}: {exc}") from None
        for t in targets:
            per_part[t] = chosen
        ignored = ()  # the user's parts are taken as given
    return QuantPlan(plan.base, per_part, kv, ignored=ignored, source=f"--quant {spec}")


# ------------------------------------------------------------------------------------------------- the bound
