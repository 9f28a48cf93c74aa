"""A Hugging Face ``config.json``'s decoder dimensions (:class:`ModelConfig`), each field checked against what it means.

:mod:`k25trace.models` reads config files with it (and checks their quantization_config) for ``report --by sol``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from k25trace.errors import K25Error


@dataclass(frozen=True)
class ModelConfig:
    """The dimensions of a decoder that the bound needs (from a Hugging Face config.json)."""

    name: str
    hidden: int
    layers: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the dense MLP's
    dtype: str = "bf16"
    # MLA (DeepSeek-V2/V3, Kimi-K2): None for GQA models
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_dim: int = 0
    qk_rope_dim: int = 0
    v_head_dim: int = 0
    # MoE
    experts: int = 0
    top_k: int = 0
    moe_intermediate: int = 0
    shared_intermediate: int = 0  # all shared experts together (DeepSeek: n_shared_experts x moe_intermediate)
    moe_layers: tuple[int, ...] = ()
    tie_embeddings: bool = False
    quantization: dict[str, Any] = field(default_factory=dict)
    module_prefix: str = "model."

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def dense_layers(self) -> int:
        return self.layers - len(self.moe_layers)


_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32"}

#: The ranges a config value must lie in (inclusive): what the field means, with headroom over every public model
#: (hidden sizes up to 16,384, 126 layers, vocabularies up to 262,144, 384 routed experts, head dims up to 256).
#: A value outside is refused with the field's name: it is a typo, or not the traced model.
LIMITS: dict[str, tuple[int, int]] = {
    "hidden_size": (1, 1 << 17),
    "num_hidden_layers": (1, 1024),
    "vocab_size": (1, 1 << 23),
    "num_attention_heads": (1, 4096),
    "num_key_value_heads": (1, 4096),
    "head_dim": (1, 4096),
    "intermediate_size": (0, 1 << 20),
    "moe_intermediate_size": (0, 1 << 20),
    "shared_expert_intermediate_size": (0, 1 << 20),
    "n_routed_experts": (0, 1 << 16),
    "num_experts": (0, 1 << 16),
    "num_local_experts": (0, 1 << 16),
    "num_experts_per_tok": (0, 1 << 16),
    "moe_topk": (0, 1 << 16),
    "top_k": (0, 1 << 16),
    "n_shared_experts": (0, 1024),
    "q_lora_rank": (1, 1 << 17),
    "kv_lora_rank": (1, 1 << 17),
    "qk_nope_head_dim": (0, 4096),
    "qk_rope_head_dim": (0, 4096),
    "v_head_dim": (0, 4096),
    "first_k_dense_replace": (0, 1024),
    "moe_layer_freq": (1, 1024),
    "decoder_sparse_step": (1, 1024),
}


def shown(value: Any) -> str:
    """A config value as the message quotes it (JSON, at most 60 characters)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


class _Fields:
    """Typed, range-checked reads of a config's fields; every refusal names the field and what it must be."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg, self.source = cfg, source

    def fail(self, key: str, problem: str) -> K25Error:
        return K25Error(f"{self.source}: {key} {shown(self.cfg.get(key))}: {problem}")

    def whole(self, key: str, default: int | None = None, *, low: int | None = None, high: int | None = None) -> int:
        """The field as an int in its range (:data:`LIMITS`, or ``low``/``high``); ``default`` when absent or
        null; an error when absent without a default, or of another type (``true`` is not a number)."""
        value = self.cfg.get(key)
        if value is None:
            if default is None:
                raise K25Error(f"{self.source}: the model config lacks {key}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, "must be a whole number")
        lo, hi = LIMITS.get(key, (0, 1 << 20))
        lo, hi = lo if low is None else low, hi if high is None else high
        if not lo <= value <= hi:
            raise self.fail(key, f"must be from {lo:,} to {hi:,}")
        return value

    def first(self, *keys: str) -> tuple[str, int] | None:
        """The first of ``keys`` present (not null), checked, with its name."""
        for key in keys:
            if self.cfg.get(key) is not None:
                return key, self.whole(key)
        return None


def _text_config(raw: dict[str, Any], source: str) -> tuple[dict[str, Any], str]:
    """The decoder's fields (a multimodal config's ``text_config``, with the checkpoint's quantization and dtype
    where it lacks them) and the prefix of its modules' names."""
    if "hidden_size" in raw or raw.get("text_config") is None:
        return raw, "model."
    if not isinstance(raw["text_config"], dict):
        raise K25Error(f"{source}: text_config {shown(raw['text_config'])}: must be an object")
    cfg = {**raw["text_config"]}
    for key in ("quantization_config", "torch_dtype", "dtype"):
        if cfg.get(key) is None and raw.get(key) is not None:
            cfg[key] = raw[key]
    return cfg, "language_model.model."


def _shape(f: _Fields) -> dict[str, Any]:
    """The :class:`ModelConfig` fields of the decoder's sizes: hidden size, layers, vocabulary, heads (at most the
    hidden size), KV heads (dividing the heads) and the head dimension."""
    hidden, layers, vocab = f.whole("hidden_size"), f.whole("num_hidden_layers"), f.whole("vocab_size")
    heads = f.whole("num_attention_heads", high=min(LIMITS["num_attention_heads"][1], hidden))
    kv_heads = f.whole("num_key_value_heads", heads, high=heads)
    if heads % kv_heads:
        raise f.fail("num_key_value_heads", f"must divide num_attention_heads ({heads})")
    head_dim = f.whole("head_dim", max(hidden // heads, 1))
    return {
        "hidden": hidden,
        "layers": layers,
        "vocab": vocab,
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
    }


def _dtype(f: _Fields) -> str:
    """The weights' dtype (``torch_dtype``, else ``dtype``; bf16 when neither is given) as a short name."""
    dtype_key = "torch_dtype" if f.cfg.get("torch_dtype") is not None else "dtype"
    dtype_value = f.cfg.get(dtype_key) or "bfloat16"
    if not isinstance(dtype_value, str) or dtype_value.lower().replace("torch.", "") not in _DTYPES:
        raise f.fail(dtype_key, f"is not a model dtype: one of {', '.join(_DTYPES)}")
    return _DTYPES[dtype_value.lower().replace("torch.", "")]


def _experts(f: _Fields, layers: int) -> dict[str, Any]:
    """The :class:`ModelConfig` fields of the MLPs: the routed experts, top-k (at most the experts), the dense and
    MoE intermediate sizes and which layers are MoE layers (all 0 or empty for a dense model but the dense one)."""
    expert_key = f.first("n_routed_experts", "num_experts", "num_local_experts")
    experts = expert_key[1] if expert_key else 0
    topk_key = f.first("num_experts_per_tok", "moe_topk", *(("top_k",) if experts else ()))
    top_k = topk_key[1] if topk_key else 0
    if experts and topk_key and top_k > experts:
        raise f.fail(
            topk_key[0], f"must be at most the number of experts ({expert_key[0] if expert_key else ''} {experts})"
        )
    intermediate = f.whole("intermediate_size", 0)
    moe_inter = f.whole("moe_intermediate_size", 0) or (intermediate if f.cfg.get("num_local_experts") else 0)
    if experts and not (top_k and moe_inter):
        raise K25Error(
            f"{f.source}: a MoE config ({experts} experts) needs num_experts_per_tok and moe_intermediate_size"
        )
    moe_layers, shared = _moe_layers(f, layers, experts, moe_inter)
    return {
        "experts": experts,
        "top_k": top_k if experts else 0,
        "intermediate": intermediate,
        "moe_intermediate": moe_inter if experts else 0,
        "shared_intermediate": shared,
        "moe_layers": moe_layers,
    }


def _moe_layers(f: _Fields, layers: int, experts: int, moe_inter: int) -> tuple[tuple[int, ...], int]:
    """(the MoE layers' indices, the shared experts' intermediate size): DeepSeek's first_k_dense_replace and
    moe_layer_freq, or Qwen's decoder_sparse_step and mlp_only_layers."""
    cfg = f.cfg
    if experts and ("first_k_dense_replace" in cfg or "n_routed_experts" in cfg):
        first_dense = f.whole("first_k_dense_replace", 0, high=layers)
        freq = f.whole("moe_layer_freq", 1)
        moe_layers = tuple(i for i in range(layers) if i >= first_dense and i % freq == 0)
        return moe_layers, f.whole("n_shared_experts", 0) * moe_inter
    if experts:
        step = f.whole("decoder_sparse_step", 1)
        only = cfg.get("mlp_only_layers")
        if only is None:
            only = []
        if not isinstance(only, list) or any(
            isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers for i in only
        ):
            raise f.fail("mlp_only_layers", f"must be a list of layer indices from 0 to {layers - 1}")
        moe_layers = tuple(i for i in range(layers) if i not in set(only) and (i + 1) % step == 0)
        return moe_layers, f.whole("shared_expert_intermediate_size", 0)
    return (), 0


def _checkpoint_fields(f: _Fields) -> tuple[dict[str, Any], bool, str]:
    """(quantization_config, tie_word_embeddings, the model's name: model_type, else its first architecture)."""
    cfg = f.cfg
    quantization = cfg.get("quantization_config")
    if quantization is not None and not isinstance(quantization, dict):
        raise f.fail("quantization_config", "must be an object (the checkpoint's quantization_config), or null")
    tie = cfg.get("tie_word_embeddings", False)
    if tie is not None and not isinstance(tie, bool):
        raise f.fail("tie_word_embeddings", "must be true or false")
    name = cfg.get("model_type")
    if name is None:
        arch = cfg.get("architectures")
        name = arch[0] if isinstance(arch, list) and arch else "?"
    return quantization or {}, bool(tie), str(name)


def parse_dimensions(raw: dict[str, Any], *, source: str = "config") -> ModelConfig:
    """The model dimensions of a config object, each field checked against what it means (the sections above);
    :func:`k25trace.models.parse_config` checks its quantization_config too."""
    cfg, prefix = _text_config(raw, source)
    f = _Fields(cfg, source)
    shape = _shape(f)
    dtype = _dtype(f)
    moe = _experts(f, shape["layers"])
    mla = cfg.get("kv_lora_rank") is not None
    q_lora = f.whole("q_lora_rank", 0, low=0) if mla else 0
    quantization, tie, name = _checkpoint_fields(f)
    return ModelConfig(
        name=name,
        **shape,
        **moe,
        dtype=dtype,
        q_lora_rank=q_lora or None,
        kv_lora_rank=f.whole("kv_lora_rank") if mla else None,
        qk_nope_dim=f.whole("qk_nope_head_dim", 0) if mla else 0,
        qk_rope_dim=f.whole("qk_rope_head_dim", 0) if mla else 0,
        v_head_dim=f.whole("v_head_dim", 0) if mla else 0,
        tie_embeddings=tie,
        quantization=quantization,
        module_prefix=prefix,
    )
