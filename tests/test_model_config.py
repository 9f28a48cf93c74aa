"""Model configs (k25trace/models.py): every field checked against what it means, refused naming the field, by
`load --model-config` (which then stores nothing and leaves the database as it was) and by `report --by sol`
alike; a config that disagrees with the trace is said so (issue 29.4); the plan's label is what its bytes used.

The layer and all-reduce counts the checks must find are read from the raw JSON here, independently of k25trace.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import DATA
from k25trace import models
from k25trace.cli import cli
from k25trace.errors import K25Error

MODELS = DATA / "models"
LOOP = json.loads((MODELS / "decode-loop-8l" / "config.json").read_text())
X2_EAGER = DATA / "h200x2-decode-loop" / "eager"
GAPS_EAGER = DATA / "h200-gaps" / "eager"

BAD = [  # (what is changed, the field the error must name, words of the error)
    ({"hidden_size": 10**30}, "hidden_size", "must be from 1 to 131,072"),
    ({"num_hidden_layers": 10**12}, "num_hidden_layers", "must be from 1 to 1,024"),
    ({"hidden_size": True}, "hidden_size true", "must be a whole number"),
    ({"hidden_size": 7168.0}, "hidden_size 7168.0", "must be a whole number"),
    ({"num_attention_heads": 64, "hidden_size": 32, "head_dim": 128}, "num_attention_heads 64", "from 1 to 32"),
    ({"num_key_value_heads": 48}, "num_key_value_heads 48", "must divide num_attention_heads"),
    ({"num_experts_per_tok": 500}, "num_experts_per_tok 500", "at most the number of experts"),
    ({"torch_dtype": "int4"}, 'torch_dtype "int4"', "is not a model dtype"),
    ({"quantization_config": "fp8"}, 'quantization_config "fp8"', "must be an object"),
    (
        {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": "x"}},
        'group_size "x"',
        "must be a whole number",
    ),
    (
        {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 0]}},
        "weight_block_size",
        "two whole numbers",
    ),
    ({"vocab_size": -5}, "vocab_size -5", "must be from 1"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings", "true or false"),
]
QWEN_MOE = {
    "model_type": "qwen2_moe",
    "hidden_size": 2048,
    "num_hidden_layers": 24,
    "vocab_size": 151936,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 60,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 1408,
    "intermediate_size": 5632,
    "torch_dtype": "bfloat16",
}


def _write(tmp_path: Path, name: str, cfg: dict) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module")
def x2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "x2.duckdb"
    assert CliRunner().invoke(cli, ["load", str(X2_EAGER), "--db", str(path), "-q"]).exit_code == 0
    return path


@pytest.fixture(scope="module")
def gaps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cfg") / "gaps.duckdb"
    assert CliRunner().invoke(cli, ["load", str(GAPS_EAGER), "--db", str(path), "-q"]).exit_code == 0
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize(("change", "field", "words"), BAD, ids=[b[1] for b in BAD])
def test_a_bad_config_is_refused_by_load_and_by_sol(
    tmp_path: Path, x2: Path, change: dict, field: str, words: str
) -> None:
    cfg = _write(tmp_path, "config.json", {**LOOP, **change})
    runner = CliRunner()
    before = _sha(x2)
    for args in (
        ["load", str(X2_EAGER), "--db", str(x2), "-q", "--model-config", str(cfg)],
        ["report", "--db", str(x2), "--by", "sol", "--model-config", str(cfg), "--format", "csv"],
    ):
        result = runner.invoke(cli, args)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 1 and result.stdout == "", (args[0], result.output)
        assert len(lines) == 1 and lines[0].startswith(f"error: {cfg}: ") and field in lines[0] and words in lines[0]
        assert "Traceback" not in result.output
    assert _sha(x2) == before  # nothing stored, nothing changed
    # the library refuses it too
    with pytest.raises(K25Error, match=re.escape(field)):
        models.parse_config({**LOOP, **change})


def test_mlp_only_layers_must_be_a_list_of_layer_indices() -> None:
    assert len(models.parse_config({**QWEN_MOE, "mlp_only_layers": [0, 23]}).moe_layers) == 22
    for bad in (3, [24], [True], ["1"]):
        with pytest.raises(K25Error, match="mlp_only_layers .*must be a list of layer indices from 0 to 23"):
            models.parse_config({**QWEN_MOE, "mlp_only_layers": bad})


def test_a_latin1_config_is_named_with_its_byte(tmp_path: Path) -> None:
    path = tmp_path / "latin.json"
    path.write_bytes(json.dumps({**LOOP, "model_type": "caf_"}).encode().replace(b"caf_", b"caf\xe9"))
    result = CliRunner().invoke(
        cli, ["load", str(X2_EAGER), "--db", str(tmp_path / "n.duckdb"), "-q", "--model-config", str(path)]
    )
    offset = path.read_bytes().index(b"\xe9")
    assert result.exit_code == 1 and not (tmp_path / "n.duckdb").exists()
    assert result.stderr.strip() == (
        f"error: {path}: the model config is not UTF-8 text: byte 0xe9 at offset {offset} (line 1); save it as UTF-8"
    )


def test_a_model_type_with_markup_is_printed_literally(tmp_path: Path, gaps: Path) -> None:
    cfg = _write(tmp_path, "markup.json", {**LOOP, "model_type": "[bold red]kimi[/]"})
    result = CliRunner().invoke(
        cli,
        ["report", "--db", str(gaps), "--by", "sol", "--model-config", str(cfg), "--format", "table"],
        terminal_width=400,
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.count("[bold red]kimi[/]") == 3  # the step row of each batch size


def _raw_per_step(folder: Path, name: str, cat: str = "cpu_op") -> list[int]:
    """Per decode-step marker of the first file: the events of ``cat`` named ``name`` that start inside it."""
    with gzip.open(sorted(folder.glob("*.json.gz"))[0], "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    marks = [
        e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_context_")
    ]
    hits = [e["ts"] for e in events if e.get("cat") == cat and e.get("name") == name]
    return [sum(m["ts"] <= t < m["ts"] + m["dur"] for t in hits) for m in marks]


def _sol(db: Path, cfg: Path) -> tuple[int, list[str], list[dict]]:
    result = CliRunner().invoke(
        cli,
        ["report", "--db", str(db), "--by", "sol", "--model-config", str(cfg), "--context", "1024", "--format", "json"],
    )
    return (
        result.exit_code,
        [x for x in result.stderr.splitlines() if x.startswith("warning:")],
        json.loads(result.stdout),
    )


def test_a_config_with_other_layers_than_the_trace_is_said_so(tmp_path: Path, x2: Path, gaps: Path) -> None:
    """The 26.4 ms step against a 50.3 ms "floor": the config had 61 layers, the trace 8."""
    allreduces = _raw_per_step(X2_EAGER, "c10d::allreduce_")
    experts = _raw_per_step(GAPS_EAGER, "aten::_grouped_mm")
    assert set(allreduces) == {17} and set(experts) == {16}  # 8 layers: 2 per layer (+1: the embedding's)
    layers = 17 // 2
    wrong = _write(tmp_path, "61.json", {**LOOP, "num_hidden_layers": 61})
    code, warnings, rows = _sol(x2, wrong)
    assert code == 0
    assert any(
        f"runs 17 all-reduces per step (2 per layer, +1 for the embedding: {layers} layers), the config "
        "num_hidden_layers 61 needs 122 or 123" in w
        for w in warnings
    ), warnings
    assert any(
        "16 expert GEMMs per step (2 per MoE layer: 8 layers), the config has 61 MoE layers" in w for w in warnings
    )
    below = [r for r in rows if r["ratio"] is not None and r["ratio"] < 1]
    assert below and all("RATIO BELOW 1: the model config does not match the trace" in r["floor_basis"] for r in below)
    assert all("CONFIG DOES NOT MATCH THE TRACE" in r["floor_basis"] for r in rows if r["part"] == "step")
    # one GPU, no all-reduce: the expert and router GEMMs say it
    code, warnings, rows = _sol(gaps, wrong)
    assert (
        code == 0
        and any("router GEMM ([tokens, 7168] x [7168, 384]) runs 8 times per step" in w for w in warnings)
        and any("16 expert GEMMs per step" in w for w in warnings)
    )
    # hidden size: all-reduce messages (In msg nelems / batch) and the GEMMs' K
    code, warnings, _ = _sol(x2, MODELS / "llama-3.1-8b" / "config.json")
    assert any(
        "all-reduce messages are 14,336 B at batch 1 (14,336 B per token: hidden 7,168 in 16 bits), the "
        "config hidden_size is 4,096" in w
        for w in warnings
    ), warnings
    assert any("the most frequent K of its GEMMs is 7,168" in w for w in warnings)


def test_the_matching_config_gives_no_warning_and_no_ratio_below_one(x2: Path, gaps: Path) -> None:
    for db in (x2, gaps):
        code, warnings, rows = _sol(db, MODELS / "decode-loop-8l" / "config.json")
        assert code == 0 and warnings == []
        assert all(r["ratio"] is None or r["ratio"] >= 1 for r in rows), db


def test_the_plan_label_is_what_the_bytes_used() -> None:
    """Kimi-K2-Thinking: compressed-tensors W4A16 with an ignore list keeping attention, shared experts, dense MLP
    and lm_head in BF16: the label names only the experts' INT4, and the attention bytes are BF16 bytes."""
    kimi = models.load_config(MODELS / "kimi-k2-thinking" / "config.json")
    bound = models.step_bound(kimi, models.parse_quant(None, kimi), tp=8, batch=1, context=None)
    assert bound.plan == "experts=w4a16-g32; KV cache 2 B/elem (config: compressed-tensors)"
    H, heads, qr, kvr, rope, nope, vd = 7168, 64, 1536, 512, 64, 128, 128
    bf16_attention = (
        61
        * 2
        * (H * qr + H * (kvr + rope) + (qr * heads * (nope + rope) + kvr * heads * (nope + vd) + heads * vd * H) / 8)
    )
    assert bound.part("attention").bytes == pytest.approx(bf16_attention)
    # an explicit --quant over everything: the label says so, and so do the bytes
    every = models.step_bound(kimi, models.parse_quant("all=fp8", kimi), tp=8, batch=1, context=None)
    assert every.plan.startswith("attention=fp8, dense=fp8, shared=fp8, experts=fp8, lm_head=fp8;")
    assert every.part("attention").bytes < bf16_attention / 1.9


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("experts=w4a16-g99999999999999999999", "the group size must be from 1 to 65,536"),
        ("experts=fp8-block0", "the block sides must be from 1 to 65,536"),
    ],
)
def test_quant_values_are_bounded(spec: str, words: str) -> None:
    cfg = models.parse_config(LOOP)
    with pytest.raises(K25Error, match=re.escape(f"--quant {spec!r}: ") + ".*" + re.escape(words)):
        models.parse_quant(spec, cfg)


@pytest.mark.parametrize("context", [str(10**15), str(10**30), "-1"])
def test_context_is_bounded(gaps: Path, context: str) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "report",
            "--db",
            str(gaps),
            "--by",
            "sol",
            "--model-config",
            str(MODELS / "decode-loop-8l" / "config.json"),
            "--context",
            context,
        ],
    )
    assert result.exit_code == 2 and "--context" in result.output and "16777216" in result.output
