"""A model-aware lower bound for one decode step, from a Hugging Face ``config.json`` (``report --by sol``).

What one tensor-parallel rank must at least read from device memory in one decode step of B tokens:

* **weights**: every layer's attention projections (MLA: the replicated fused q_a/kv_a projection, q_b, kv_b, o;
  GQA: q, k, v, o), the dense MLP of dense layers, the shared experts, the router, the final norm and lm_head —
  each sharded over the TP ranks as vLLM shards them (column/row parallel: 1/TP each; MLA's q_a/kv_a projection
  and the router are replicated; KV heads fewer than TP are replicated) — and the **routed experts hit**: B tokens
  each choosing k of E experts hit E·(1 − (1 − k/E)^B) distinct experts per layer in expectation when the router
  spreads tokens uniformly (skewed routing hits fewer); a rank reads its 1/TP share of them (the same under TP
  sharding of every expert and under expert parallelism with E/TP experts per rank);
* **KV cache**: B requests × the context length × per layer (MLA: the latent kv_lora_rank + rope dims, replicated
  on every rank; GQA: K and V of the rank's KV heads);
* bytes per weight follow the quantization: the checkpoint's ``quantization_config`` (compressed-tensors with its
  ``ignore`` list, fp8 block, GPTQ/AWQ, MXFP4) or ``--quant`` (e.g. ``experts=w4a16-g32``: 4-bit weights plus a
  16-bit scale per group of 32 = 0.5625 bytes per weight), scales and zero points included.

HBM floor = bytes / the device's memory bandwidth; compute floor = FLOPs (2 per weight per token, plus attention
over the context) / the tensor peak of the scheme's compute type; the step floor is the larger of the two plus the
measured all-reduce floor (``k25trace bench allreduce``) where there is one. Activations, routing metadata and
the write of the new KV entry are left out: the bound is lower than any real step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k25trace.errors import K25Error
from k25trace.model_config import LIMITS, ModelConfig, parse_dimensions
from k25trace.quant import KV_BYTES, PARTS, QuantNotModelled, QuantPlan, Scheme, parse_quant, plan_from_config, scheme

# the model's config and its quantization, importable from here as before the split
__all__ = [
    "KV_BYTES",
    "LIMITS",
    "PARTS",
    "ModelConfig",
    "Part",
    "QuantNotModelled",
    "QuantPlan",
    "Scheme",
    "StepBound",
    "load_config",
    "parse_config",
    "parse_quant",
    "plan_from_config",
    "read_config",
    "scheme",
    "step_bound",
    "store_config",
    "stored_config",
]

# ---------------------------------------------------------------------------------------------------- the config


def load_config(path: Path) -> ModelConfig:
    """Read and check a Hugging Face ``config.json`` (DeepSeek-V3 / Kimi-K2 MLA MoE, Qwen/Mixtral MoE,
    Llama/Qwen/Mistral dense; a multimodal config's ``text_config`` is used): :func:`parse_config`."""
    return parse_config(read_config(path), source=str(path))


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object of a config file (UTF-8), or a K25Error naming the file and what is wrong."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise K25Error(f"{path}: cannot read the model config: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise K25Error(
            f"{path}: the model config is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
            f"{exc.start} (line {line}); save it as UTF-8"
        ) from exc
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise K25Error(f"{path}: the model config is not JSON: {exc}") from exc
    except RecursionError:
        raise K25Error(f"{path}: the model config is not JSON k25trace can read: nested too deeply") from None
    if not isinstance(raw, dict):
        raise K25Error(f"{path}: the model config is not a JSON object")
    return raw


def store_config(con: Any, path: Path) -> None:
    """Check a model config (:func:`load_config`) and keep it in the database (``meta``: ``model_config``,
    ``model_config_source``), replacing one stored before; ``report --by sol`` uses it when no --model-config is
    given. Nothing is stored when the config is refused."""
    from k25trace.db import run_query, transaction

    raw = read_config(path)
    parse_config(raw, source=str(path))
    with transaction(con):
        run_query(con, "meta_set", {"key": "model_config", "value": json.dumps(raw, ensure_ascii=False)})
        run_query(con, "meta_set", {"key": "model_config_source", "value": str(Path(path).resolve())})


def stored_config(con: Any) -> ModelConfig | None:
    """The model config kept by ``k25trace load --model-config``, or None."""
    from k25trace.db import query_frame

    rows = {
        r["key"]: r["value"] for r in query_frame(con, "meta_get", {"prefix": "model_config"}).iter_rows(named=True)
    }
    if "model_config" not in rows:
        return None
    source = f"{rows.get('model_config_source', 'the database')} (kept by k25trace load)"
    try:
        raw = json.loads(rows["model_config"])
    except (ValueError, RecursionError) as exc:
        raise K25Error(f"the model config kept in the database is not JSON ({exc}); load it again") from exc
    if not isinstance(raw, dict):
        raise K25Error(f"{source}: not a JSON object; load it again")
    return parse_config(raw, source=source)


def parse_config(raw: dict[str, Any], *, source: str = "config") -> ModelConfig:
    """The model dimensions of a config object, each field checked against what it means: a whole number (not a
    bool) in its range (:data:`LIMITS`), heads that divide the hidden size's budget (heads <= hidden, KV heads
    dividing heads), top-k <= experts, a known ``torch_dtype``, ``mlp_only_layers`` a list of layer indices, a
    ``quantization_config`` that is an object. One parser for ``load --model-config`` and ``report --by sol``."""
    parsed = parse_dimensions(raw, source=source)
    try:
        plan_from_config(parsed)  # the quantization_config's fields are checked here too (one parser)
    except QuantNotModelled:
        pass  # well-formed, only not modelled: --quant can say what the weights are
    except K25Error as exc:
        raise K25Error(f"{source}: {exc}") from None
    return parsed


# ------------------------------------------------------------------------------------------- the step bound


@dataclass(frozen=True)
class Part:
    """One piece of the step bound: bytes this rank reads, FLOPs it does, and how they were counted."""

    name: str
    bytes: float
    flops: float
    detail: str


@dataclass(frozen=True)
class StepBound:
    tp: int
    batch: int
    context: int | None
    parts: tuple[Part, ...]
    compute: str  # the compute type of the GEMMs (peak column key)
    experts_hit: float  # per layer, all ranks together (expected)
    plan: str

    def part(self, name: str) -> Part | None:
        return next((p for p in self.parts if p.name == name), None)

    @property
    def weight_bytes(self) -> float:
        return sum(p.bytes for p in self.parts if p.name != "kv_cache")

    @property
    def total_bytes(self) -> float:
        return sum(p.bytes for p in self.parts)

    @property
    def total_flops(self) -> float:
        return sum(p.flops for p in self.parts)


def step_bound(cfg: ModelConfig, quant: QuantPlan, *, tp: int, batch: int, context: int | None) -> StepBound:
    """Bytes and FLOPs of one decode step of ``batch`` tokens on one of ``tp`` ranks (see the module doc)."""
    if tp < 1 or batch < 1:
        raise K25Error(f"the bound needs TP >= 1 and a batch size >= 1 (got TP {tp}, batch {batch})")
    if context is not None and context < 0:
        raise K25Error(f"--context {context}: give a number of tokens >= 0")
    H, L, B = cfg.hidden, cfg.layers, batch
    act = _act_bytes(cfg)
    plan = _Used(quant)  # records the scheme of every matrix counted: the label is theirs
    probe = cfg.moe_layers[-1] if cfg.moe_layers else max(L - 1, 0)
    attention, norm_elems = _attention_part(cfg, plan, tp=tp, batch=B, probe=probe)
    parts = [attention]
    if cfg.dense_layers and cfg.intermediate:
        parts.append(_dense_part(cfg, plan, tp=tp, batch=B))
    moe, hit = _moe_parts(cfg, plan, tp=tp, batch=B, probe=probe)
    parts += moe
    # lm_head (vocab-parallel) and the embedding rows the batch reads
    norms = L * (2 * H + norm_elems) * act + H * act
    lm = plan.for_module("lm_head", "lm_head").matrix_bytes(H, cfg.vocab) / tp
    parts.append(
        Part("lm_head", lm + norms, 2.0 * B * H * cfg.vocab / tp, f"vocab {cfg.vocab} 1/{tp}; plus all norms' weights")
    )
    parts.append(Part("embedding", B * H * act / tp, 0.0, f"{B} rows of {H}"))
    if context is not None:
        parts.append(_kv_part(cfg, plan, tp=tp, batch=B, context=context))
    compute = plan.compute("routed_experts" if moe else "attention")
    return StepBound(
        tp=tp, batch=B, context=context, parts=tuple(parts), compute=compute, experts_hit=hit, plan=plan.describe()
    )


class _Used:
    """A :class:`QuantPlan` that records which scheme each part's matrices were counted in, so that the label the
    bound prints is what its bytes used (a compressed-tensors ``ignore`` list keeps attention in BF16: the label
    then says so, not the config group's scheme)."""

    def __init__(self, plan: QuantPlan) -> None:
        self.plan, self.kv_bytes = plan, plan.kv_bytes
        self.used: dict[str, dict[str, Scheme]] = {}

    def for_module(self, part: str, module: str) -> Scheme:
        chosen = self.plan.for_module(part, module)
        self.used.setdefault(part, {})[chosen.name] = chosen
        return chosen

    def compute(self, part: str) -> str:
        """The compute type of the part's GEMMs (one scheme), else the base's."""
        schemes = list(self.used.get("experts" if part == "routed_experts" else part, {}).values())
        return schemes[0].compute if len(schemes) == 1 else self.plan.base.compute

    def describe(self) -> str:
        base = self.plan.base.name
        parts = ", ".join(
            f"{p}={'/'.join(sorted(names))}" for p in PARTS if (names := self.used.get(p)) and set(names) != {base}
        )
        return f"{parts or 'all ' + base}; KV cache {self.kv_bytes} B/elem ({self.plan.source})"


def _act_bytes(cfg: ModelConfig) -> int:
    """Bytes per element of activations and of the unquantised small weights (norms, router, embedding)."""
    return 2 if cfg.dtype in ("bf16", "fp16") else 4


def _mat(plan: "_Used", part: str, module: str, k: int, n: int, share: float, tokens: float) -> tuple[float, float]:
    """Bytes and FLOPs of one k x n weight matrix, ``share`` of it on this rank, applied to ``tokens`` tokens."""
    s = plan.for_module(part, module)
    return s.matrix_bytes(k, n) * share, 2.0 * tokens * k * n * share


def _attention_part(cfg: ModelConfig, plan: "_Used", *, tp: int, batch: int, probe: int) -> tuple[Part, int]:
    """The attention projections of every layer (MLA or GQA), and the elements of the extra norms MLA has."""
    H, L, B, pre = cfg.hidden, cfg.layers, batch, cfg.module_prefix
    att_b = att_f = 0.0
    m = f"{pre}layers.{probe}.self_attn."
    if cfg.is_mla:
        kvl, rope, nope, vdim, h = cfg.kv_lora_rank or 0, cfg.qk_rope_dim, cfg.qk_nope_dim, cfg.v_head_dim, cfg.heads
        items = []
        if cfg.q_lora_rank:
            items += [("q_a_proj", H, cfg.q_lora_rank, 1.0), ("q_b_proj", cfg.q_lora_rank, h * (nope + rope), 1 / tp)]
        else:
            items += [("q_proj", H, h * (nope + rope), 1 / tp)]
        items += [
            ("kv_a_proj_with_mqa", H, kvl + rope, 1.0),
            ("kv_b_proj", kvl, h * (nope + vdim), 1 / tp),
            ("o_proj", h * vdim, H, 1 / tp),
        ]
        for name, k, n, share in items:
            b, f = _mat(plan, "attention", m + name, k, n, share, B)
            att_b, att_f = att_b + b, att_f + f
        norm_elems = (cfg.q_lora_rank or 0) + kvl
        detail = (
            f"MLA: q_a/kv_a replicated, q_b/kv_b/o 1/{tp} ({cfg.heads // tp if tp <= cfg.heads else '<1'} of "
            f"{cfg.heads} heads per rank)"
        )
    else:
        hd, kvh = cfg.head_dim, cfg.kv_heads
        kv_share = (max(kvh, tp) / tp) / kvh  # KV heads fewer than TP are replicated
        for name, k, n, share in (
            ("q_proj", H, cfg.heads * hd, 1 / tp),
            ("k_proj", H, kvh * hd, kv_share),
            ("v_proj", H, kvh * hd, kv_share),
            ("o_proj", cfg.heads * hd, H, 1 / tp),
        ):
            b, f = _mat(plan, "attention", m + name, k, n, share, B)
            att_b, att_f = att_b + b, att_f + f
        norm_elems = 0
        detail = f"GQA: q/o 1/{tp}, k/v {max(kvh, tp) / tp:g} of {kvh} KV heads per rank"
    return Part("attention", att_b * L, att_f * L, f"{L} layers; {detail}"), norm_elems


def _dense_part(cfg: ModelConfig, plan: "_Used", *, tp: int, batch: int) -> Part:
    """The MLP of the dense (non-MoE) layers, column/row parallel."""
    H, dense_layers = cfg.hidden, cfg.dense_layers
    m = f"{cfg.module_prefix}layers.0.mlp."
    b = f = 0.0
    for name, k, n in (
        ("gate_proj", H, cfg.intermediate),
        ("up_proj", H, cfg.intermediate),
        ("down_proj", cfg.intermediate, H),
    ):
        bb, ff = _mat(plan, "dense", m + name, k, n, 1 / tp, batch)
        b, f = b + bb, f + ff
    return Part(
        "dense_mlp",
        b * dense_layers,
        f * dense_layers,
        f"{dense_layers} dense layers, intermediate {cfg.intermediate} 1/{tp}",
    )


def _moe_parts(cfg: ModelConfig, plan: "_Used", *, tp: int, batch: int, probe: int) -> tuple[list[Part], float]:
    """The MoE layers: shared experts, the routed experts the batch is expected to hit (uniform routing) and the
    router; with the experts hit per layer. Nothing for a model without MoE layers."""
    moe_layers = len(cfg.moe_layers)
    if not moe_layers:
        return [], 0.0
    H, B, pre = cfg.hidden, batch, cfg.module_prefix
    E, k, inter = cfg.experts, cfg.top_k, cfg.moe_intermediate
    parts: list[Part] = []
    if cfg.shared_intermediate:
        m = f"{pre}layers.{probe}.mlp.shared_experts."
        b = f = 0.0
        for name, kk, n in (
            ("gate_proj", H, cfg.shared_intermediate),
            ("up_proj", H, cfg.shared_intermediate),
            ("down_proj", cfg.shared_intermediate, H),
        ):
            bb, ff = _mat(plan, "shared", m + name, kk, n, 1 / tp, B)
            b, f = b + bb, f + ff
        parts.append(
            Part(
                "shared_experts",
                b * moe_layers,
                f * moe_layers,
                f"{moe_layers} MoE layers, shared intermediate {cfg.shared_intermediate} 1/{tp}",
            )
        )
    hit = E * (1.0 - (1.0 - min(k, E) / E) ** B)
    m = f"{pre}layers.{probe}.mlp.experts.0."
    per_expert = sum(
        plan.for_module("experts", m + name).matrix_bytes(kk, n)
        for name, kk, n in (("gate_proj", H, inter), ("up_proj", H, inter), ("down_proj", inter, H))
    )
    exp_b = per_expert * hit / tp * moe_layers
    exp_f = 2.0 * B * k * 3 * H * inter / tp * moe_layers
    parts.append(
        Part(
            "routed_experts",
            exp_b,
            exp_f,
            f"{hit:.1f} of {E} experts hit per layer (expected, {B} tokens x top-{k}, uniform routing), "
            f"1/{tp} per rank, {moe_layers} MoE layers, "
            f"{plan.for_module('experts', m + 'gate_proj').name}",
        )
    )
    router = H * E * _act_bytes(cfg) + E * 4  # replicated; e_score_correction_bias in fp32
    parts.append(Part("router", router * moe_layers, 2.0 * B * H * E * moe_layers, f"{E} experts, replicated"))
    return parts, hit


def _kv_part(cfg: ModelConfig, plan: "_Used", *, tp: int, batch: int, context: int) -> Part:
    """The KV cache the batch reads at ``context`` tokens per request (MLA: the latent, replicated per rank)."""
    L, B, kvb = cfg.layers, batch, plan.kv_bytes
    if cfg.is_mla:
        width = (cfg.kv_lora_rank or 0) + cfg.qk_rope_dim
        kv_bytes = float(L * B * context * width * kvb)
        heads_r = cfg.heads / tp
        flops = L * B * heads_r * context * 2.0 * (width + (cfg.kv_lora_rank or 0))
        detail = f"MLA latent {width} x {context} tokens x {B} requests x {L} layers, replicated per rank"
    else:
        kvh_r = max(cfg.kv_heads, tp) / tp
        kv_bytes = L * B * context * 2 * cfg.head_dim * kvh_r * kvb
        flops = L * B * (cfg.heads / tp) * context * 4.0 * cfg.head_dim
        detail = f"K and V of {kvh_r:g} KV heads x {cfg.head_dim} x {context} tokens x {B} requests x {L} layers"
    return Part("kv_cache", kv_bytes, flops, detail + f", {kvb} B/elem")
