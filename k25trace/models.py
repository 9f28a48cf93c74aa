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

import fnmatch
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from k25trace.errors import K25Error

# ---------------------------------------------------------------------------------------------------- the config


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


def _shown(value: Any) -> str:
    """A config value as the message quotes it (JSON, at most 60 characters)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:59] + "…"


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
        raise K25Error(f"{path}: the model config is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
                       f"{exc.start} (line {line}); save it as UTF-8") from exc
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

    rows = {r["key"]: r["value"]
            for r in query_frame(con, "meta_get", {"prefix": "model_config"}).iter_rows(named=True)}
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


class _Fields:
    """Typed, range-checked reads of a config's fields; every refusal names the field and what it must be."""

    def __init__(self, cfg: dict[str, Any], source: str) -> None:
        self.cfg, self.source = cfg, source

    def fail(self, key: str, problem: str) -> K25Error:
        return K25Error(f"{self.source}: {key} {_shown(self.cfg.get(key))}: {problem}")

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


def parse_config(raw: dict[str, Any], *, source: str = "config") -> ModelConfig:
    """The model dimensions of a config object, each field checked against what it means: a whole number (not a
    bool) in its range (:data:`LIMITS`), heads that divide the hidden size's budget (heads <= hidden, KV heads
    dividing heads), top-k <= experts, a known ``torch_dtype``, ``mlp_only_layers`` a list of layer indices, a
    ``quantization_config`` that is an object. One parser for ``load --model-config`` and ``report --by sol``."""
    prefix = "model."
    cfg = raw
    if "hidden_size" not in cfg and raw.get("text_config") is not None:
        if not isinstance(raw["text_config"], dict):
            raise K25Error(f"{source}: text_config {_shown(raw['text_config'])}: must be an object")
        cfg = {**raw["text_config"]}
        for key in ("quantization_config", "torch_dtype", "dtype"):
            if cfg.get(key) is None and raw.get(key) is not None:
                cfg[key] = raw[key]
        prefix = "language_model.model."
    f = _Fields(cfg, source)

    hidden, layers, vocab = f.whole("hidden_size"), f.whole("num_hidden_layers"), f.whole("vocab_size")
    heads = f.whole("num_attention_heads", high=min(LIMITS["num_attention_heads"][1], hidden))
    kv_heads = f.whole("num_key_value_heads", heads, high=heads)
    if heads % kv_heads:
        raise f.fail("num_key_value_heads", f"must divide num_attention_heads ({heads})")
    head_dim = f.whole("head_dim", max(hidden // heads, 1))
    dtype_key = "torch_dtype" if cfg.get("torch_dtype") is not None else "dtype"
    dtype_value = cfg.get(dtype_key) or "bfloat16"
    if not isinstance(dtype_value, str) or dtype_value.lower().replace("torch.", "") not in _DTYPES:
        raise f.fail(dtype_key, f"is not a model dtype: one of {', '.join(_DTYPES)}")
    dtype = _DTYPES[dtype_value.lower().replace("torch.", "")]
    expert_key = f.first("n_routed_experts", "num_experts", "num_local_experts")
    experts = expert_key[1] if expert_key else 0
    topk_key = f.first("num_experts_per_tok", "moe_topk", *(("top_k",) if experts else ()))
    top_k = topk_key[1] if topk_key else 0
    if experts and topk_key and top_k > experts:
        raise f.fail(topk_key[0], f"must be at most the number of experts ({expert_key[0] if expert_key else ''} "
                                  f"{experts})")
    intermediate = f.whole("intermediate_size", 0)
    moe_inter = f.whole("moe_intermediate_size", 0) or (intermediate if f.cfg.get("num_local_experts") else 0)
    if experts and not (top_k and moe_inter):
        raise K25Error(f"{source}: a MoE config ({experts} experts) needs num_experts_per_tok and "
                       "moe_intermediate_size")
    if experts and ("first_k_dense_replace" in cfg or "n_routed_experts" in cfg):
        first_dense = f.whole("first_k_dense_replace", 0, high=layers)
        freq = f.whole("moe_layer_freq", 1)
        moe_layers = tuple(i for i in range(layers) if i >= first_dense and i % freq == 0)
        shared = f.whole("n_shared_experts", 0) * moe_inter
    elif experts:
        step = f.whole("decoder_sparse_step", 1)
        only = cfg.get("mlp_only_layers")
        if only is None:
            only = []
        if not isinstance(only, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                             for i in only):
            raise f.fail("mlp_only_layers", f"must be a list of layer indices from 0 to {layers - 1}")
        moe_layers = tuple(i for i in range(layers) if i not in set(only) and (i + 1) % step == 0)
        shared = f.whole("shared_expert_intermediate_size", 0)
    else:
        moe_layers, shared = (), 0
    mla = cfg.get("kv_lora_rank") is not None
    q_lora = f.whole("q_lora_rank", 0, low=0) if mla else 0
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
    parsed = ModelConfig(
        name=str(name),
        hidden=hidden, layers=layers, vocab=vocab, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
        intermediate=intermediate, dtype=dtype,
        q_lora_rank=q_lora or None,
        kv_lora_rank=f.whole("kv_lora_rank") if mla else None,
        qk_nope_dim=f.whole("qk_nope_head_dim", 0) if mla else 0,
        qk_rope_dim=f.whole("qk_rope_head_dim", 0) if mla else 0,
        v_head_dim=f.whole("v_head_dim", 0) if mla else 0,
        experts=experts, top_k=top_k if experts else 0, moe_intermediate=moe_inter if experts else 0,
        shared_intermediate=shared, moe_layers=moe_layers,
        tie_embeddings=bool(tie),
        quantization=quantization or {}, module_prefix=prefix,
    )
    try:
        plan_from_config(parsed)  # the quantization_config's fields are checked here too (one parser)
    except QuantNotModelled:
        pass  # well-formed, only not modelled: --quant can say what the weights are
    except K25Error as exc:
        raise K25Error(f"{source}: {exc}") from None
    return parsed


# ----------------------------------------------------------------------------------------------- quantization


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
            raise K25Error(f"quantization scheme {spec!r}: the group size must be from 1 to {MAX_GROUP:,} "
                           "(g0: one scale per output channel)")
        return Scheme(s, int(m.group(1)), group=group, channel_scale=group is None, zero_point=bool(m.group(3)),
                      compute="bf16")
    if s == "mxfp4":
        return Scheme(s, 4, group=32, scale_bytes=1, compute="fp8")
    if s == "nvfp4":
        return Scheme(s, 4, group=16, scale_bytes=1, compute="fp4")
    raise K25Error(f"unknown quantization scheme {spec!r}: one of bf16, fp16, fp32, fp8, fp8-block128, "
                   "w4a16-g32 (wNa16-gG, -zp for zero points, g0 per channel), mxfp4, nvfp4")


PARTS = ("attention", "dense", "shared", "experts", "router", "lm_head")
ALIASES = {"linear": ("attention", "dense", "shared", "experts"), "all": ("attention", "dense", "shared", "experts",
                                                                          "lm_head")}
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
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_GROUP for v in value)):
        raise K25Error(f"quantization_config {where} {_shown(value)}: must be two whole numbers [K, N] from 1 to "
                       f"{MAX_GROUP:,}")
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
            group = _quant_int(w, "config_groups weights ", "group_size", 0) if w.get("strategy", "group") == \
                "group" else 0
            chosen = scheme(f"w{bits}a16-g{max(group, 0)}" + ("" if w.get("symmetric", True) else "-zp"))
        else:
            raise QuantNotModelled(f"compressed-tensors scheme {_shown(w)} with activations {_shown(acts)} is not "
                                   "modelled: give --quant")
        return QuantPlan(base, {p: chosen for p in linear}, KV_BYTES.get(cfg.dtype, 2),
                         ignored=_quant_list(q, "ignore"), source="config: compressed-tensors")
    if method == "fp8":
        chosen = _block(q.get("weight_block_size"), "weight_block_size")
        ignored = _quant_list(q, "modules_to_not_convert") or _quant_list(q, "ignored_layers")
        return QuantPlan(base, {p: chosen for p in linear}, KV_BYTES.get(cfg.dtype, 2), ignored=ignored,
                         source="config: fp8")
    if method in ("gptq", "awq", "gptq_marlin", "awq_marlin"):
        bits = _quant_int(q, "", "bits", 0, (4, 8)) or _quant_int(q, "", "w_bit", 4, (4, 8))
        group = _quant_int(q, "", "group_size", 0) or _quant_int(q, "", "q_group_size", 128)
        zero = bool(q.get("zero_point")) if method.startswith("awq") else not q.get("sym", True)
        chosen = scheme(f"w{bits}a16-g{max(group, 0)}" + ("-zp" if zero else ""))
        return QuantPlan(base, {p: chosen for p in linear}, KV_BYTES.get(cfg.dtype, 2),
                         ignored=_quant_list(q, "modules_to_not_convert"), source=f"config: {method}")
    if method == "mxfp4":
        return QuantPlan(base, {"experts": scheme("mxfp4")}, KV_BYTES.get(cfg.dtype, 2),
                         ignored=_quant_list(q, "modules_to_not_convert"), source="config: mxfp4")
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
    parts.append(Part("lm_head", lm + norms, 2.0 * B * H * cfg.vocab / tp,
                      f"vocab {cfg.vocab} 1/{tp}; plus all norms' weights"))
    parts.append(Part("embedding", B * H * act / tp, 0.0, f"{B} rows of {H}"))
    if context is not None:
        parts.append(_kv_part(cfg, plan, tp=tp, batch=B, context=context))
    compute = plan.compute("routed_experts" if moe else "attention")
    return StepBound(tp=tp, batch=B, context=context, parts=tuple(parts), compute=compute, experts_hit=hit,
                     plan=plan.describe())


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
        parts = ", ".join(f"{p}={'/'.join(sorted(names))}" for p in PARTS if (names := self.used.get(p))
                          and set(names) != {base})
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
        items += [("kv_a_proj_with_mqa", H, kvl + rope, 1.0), ("kv_b_proj", kvl, h * (nope + vdim), 1 / tp),
                  ("o_proj", h * vdim, H, 1 / tp)]
        for name, k, n, share in items:
            b, f = _mat(plan, "attention", m + name, k, n, share, B)
            att_b, att_f = att_b + b, att_f + f
        norm_elems = (cfg.q_lora_rank or 0) + kvl
        detail = (f"MLA: q_a/kv_a replicated, q_b/kv_b/o 1/{tp} ({cfg.heads // tp if tp <= cfg.heads else '<1'} of "
                  f"{cfg.heads} heads per rank)")
    else:
        hd, kvh = cfg.head_dim, cfg.kv_heads
        kv_share = (max(kvh, tp) / tp) / kvh  # KV heads fewer than TP are replicated
        for name, k, n, share in (("q_proj", H, cfg.heads * hd, 1 / tp), ("k_proj", H, kvh * hd, kv_share),
                                  ("v_proj", H, kvh * hd, kv_share), ("o_proj", cfg.heads * hd, H, 1 / tp)):
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
    for name, k, n in (("gate_proj", H, cfg.intermediate), ("up_proj", H, cfg.intermediate),
                       ("down_proj", cfg.intermediate, H)):
        bb, ff = _mat(plan, "dense", m + name, k, n, 1 / tp, batch)
        b, f = b + bb, f + ff
    return Part("dense_mlp", b * dense_layers, f * dense_layers,
                f"{dense_layers} dense layers, intermediate {cfg.intermediate} 1/{tp}")


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
        for name, kk, n in (("gate_proj", H, cfg.shared_intermediate), ("up_proj", H, cfg.shared_intermediate),
                            ("down_proj", cfg.shared_intermediate, H)):
            bb, ff = _mat(plan, "shared", m + name, kk, n, 1 / tp, B)
            b, f = b + bb, f + ff
        parts.append(Part("shared_experts", b * moe_layers, f * moe_layers,
                          f"{moe_layers} MoE layers, shared intermediate {cfg.shared_intermediate} 1/{tp}"))
    hit = E * (1.0 - (1.0 - min(k, E) / E) ** B)
    m = f"{pre}layers.{probe}.mlp.experts.0."
    per_expert = sum(plan.for_module("experts", m + name).matrix_bytes(kk, n)
                     for name, kk, n in (("gate_proj", H, inter), ("up_proj", H, inter), ("down_proj", inter, H)))
    exp_b = per_expert * hit / tp * moe_layers
    exp_f = 2.0 * B * k * 3 * H * inter / tp * moe_layers
    parts.append(Part("routed_experts", exp_b, exp_f,
                      f"{hit:.1f} of {E} experts hit per layer (expected, {B} tokens x top-{k}, uniform routing), "
                      f"1/{tp} per rank, {moe_layers} MoE layers, "
                      f"{plan.for_module('experts', m + 'gate_proj').name}"))
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
