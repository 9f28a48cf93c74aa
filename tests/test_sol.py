"""Speed of light (k25trace/analysis/sol.py, k25trace/models.py): device peaks, per-op FLOPs/bytes from recorded shapes
checked against a hand computation from the raw JSON's Input Dims, CUDA-graph carry-over, and the decode-step
bound checked against an independent calculation from DeepSeek-V3-shaped configs."""

from __future__ import annotations

import gzip
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from helpers import B200, DATA, MI300X_FULL, MI300X_PIECEWISE
from k25trace import db, models, pipeline
from k25trace.analysis import floor as bench
from k25trace.analysis import sol
from k25trace.cli import cli
from k25trace.errors import K25Error

GAPS_EAGER = DATA / "h200-gaps" / "eager"
GAPS_GRAPH = DATA / "h200-gaps" / "graph"
X2 = DATA / "h200x2-decode-loop"
MODELS = DATA / "models"
H200_HBM, H200_BF16 = 4800.0, 989.4  # queries/device_peaks.csv, H200 SXM row


def _load(path: Path, *paths: Path) -> db.duckdb.DuckDBPyConnection:
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, list(paths))
    assert all(r.status == "loaded" for r in results), [r.message for r in results]
    return con


@pytest.fixture(scope="module")
def gaps(tmp_path_factory: pytest.TempPathFactory):
    """One H200, eager, record_shapes, plus the same loop replayed from CUDA graphs (one database)."""
    con = _load(tmp_path_factory.mktemp("sol") / "gaps.duckdb", GAPS_EAGER, GAPS_GRAPH)
    yield con
    con.close()


@pytest.fixture(scope="module")
def x2_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two H200s (TP2), eager with shapes, and the measured all-reduce floor (a closed database file)."""
    path = tmp_path_factory.mktemp("sol") / "x2.duckdb"
    con = _load(path, X2 / "eager")
    bench.write_rows(con, bench.read_rows(X2 / "allreduce_bench_kimi.json"))
    con.close()
    return path


@pytest.fixture(scope="module")
def x2(x2_path: Path):
    con = db.connect(x2_path, read_only=True)
    yield con
    con.close()


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory):
    con = _load(tmp_path_factory.mktemp("sol") / "vllm.duckdb", B200, MI300X_PIECEWISE, MI300X_FULL)
    yield con
    con.close()


def _raw(path: Path) -> dict:
    files = sorted(path.glob("*.json.gz")) if path.is_dir() else [path]
    with gzip.open(files[0], "rt", encoding="utf-8") as fh:
        return json.load(fh)


def raw_ops(path: Path) -> dict[tuple[str, str], dict]:
    """From the raw JSON alone: per (op name, Input Dims) the Input type, the calls that launched kernels (by the
    kernels' External id) and their summed kernel time in µs."""
    events = _raw(path)["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    per_call: dict[int, float] = defaultdict(float)
    for e in events:
        if e.get("cat") == "kernel" and "External id" in e.get("args", {}):
            per_call[e["args"]["External id"]] += e["dur"]
    out: dict[tuple[str, str], dict] = {}
    for ext, us in per_call.items():
        op = ops[ext]
        key = (op["name"], json.dumps(op["args"]["Input Dims"], separators=(",", ":")))
        entry = out.setdefault(
            key, {"types": op["args"].get("Input type"), "calls": 0, "us": 0.0, "dims": op["args"]["Input Dims"]}
        )
        entry["calls"] += 1
        entry["us"] += us
    return out


ELEM = {"c10::BFloat16": 2, "c10::Half": 2, "float": 4}
DTYPE = {"c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32"}


def hand_cost(name: str, dims: list, types: list) -> tuple[float | None, float]:
    """FLOPs and bytes of one call, written out by hand per op (independent of sol.py's models)."""
    e = ELEM[types[0]]
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * k * n, e * (m * k + k * n + m * n)
    if name == "aten::bmm":
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return 2 * b * m * k * n, e * b * (m * k + k * n + m * n)
    if name == "aten::addmm":
        (n_bias,), (m, k), (_, n) = dims[0], dims[1], dims[2]
        return 2 * m * k * n + 2 * m * n, e * (m * k + k * n + m * n + n_bias)
    if name == "aten::_grouped_mm":
        (t, k), (g, _, n) = dims[0], dims[1]
        groups_hit = g * (1 - (1 - 1 / g) ** t)  # distinct groups t uniform rows land in, in expectation
        return 2 * t * k * n, e * (t * k + t * n) + e * k * n * groups_hit + 4 * g  # + the int32 offsets
    if name == "aten::_fused_rms_norm":
        (rows, h), (w,) = dims[0], dims[2]
        return None, e * (2 * rows * h + w)
    if name == "aten::_softmax":
        return None, e * 2 * math.prod(dims[0])
    if name == "_C::fused_add_rms_norm":
        (rows, h), _, (w,) = dims[0], dims[1], dims[2]
        return None, e * (4 * rows * h + w)
    if name == "_C::rms_norm":
        _, (rows, h), (w,) = dims[0], dims[1], dims[2]
        return None, e * (2 * rows * h + w)
    raise AssertionError(name)


def _check_ops_against_raw(frame: pl.DataFrame, raw: dict, ops: set[str]) -> int:
    rows = (
        frame.filter(pl.col("source") == "eager")
        .group_by(["op", "input_dims"])
        .agg(
            pl.col("calls").sum(),
            (pl.col("us_per_call") * pl.col("calls")).sum().alias("us"),
            pl.col("gflop_per_call").first(),
            pl.col("mb_per_call").first(),
            pl.col("dtype").first(),
            pl.col("bound").first(),
        )
    )
    checked = 0
    for r in rows.iter_rows(named=True):
        if r["op"] not in ops:
            continue
        truth = raw[(r["op"], r["input_dims"])]
        flops, nbytes = hand_cost(r["op"], truth["dims"], truth["types"])
        assert r["dtype"] == DTYPE[truth["types"][0]], r
        assert r["calls"] == truth["calls"], r
        assert r["us"] == pytest.approx(truth["us"], rel=1e-5), r
        assert r["mb_per_call"] == pytest.approx(nbytes / 1e6, rel=1e-5), r
        if flops is None:
            assert r["gflop_per_call"] is None and r["bound"] == "memory"
        else:
            assert r["gflop_per_call"] == pytest.approx(flops / 1e9, rel=1e-5), r
        checked += 1
    return checked


# ----------------------------------------------------------------------------------------------- device peaks


def test_builtin_peaks_file_is_complete_and_sourced() -> None:
    rows = sol.load_peaks()
    names = {r.device for r in rows}
    assert {
        "H100 SXM",
        "H100 PCIe",
        "H200 SXM",
        "B200",
        "RTX PRO 6000 Blackwell",
        "A100 SXM 80GB",
        "MI300X",
        "L40S",
    } <= names
    for r in rows:
        assert r.source and r.peak("hbm_gbps") and r.peak("bf16_tflops") and r.peak("interconnect_gbps"), r.device
        assert r.origin == "builtin"
        if r.peak("fp8_tflops"):  # dense FP8 is twice dense BF16 on every listed part
            assert r.peak("fp8_tflops") == pytest.approx(2 * r.peak("bf16_tflops"), rel=0.02), r.device


@pytest.mark.parametrize(
    ("name", "props", "device"),
    [
        ("NVIDIA H200", {}, "H200 SXM"),
        ("NVIDIA H200 NVL", {}, "H200 NVL"),
        ("NVIDIA H100 80GB HBM3", {}, "H100 SXM"),
        ("NVIDIA H100 PCIe", {}, "H100 PCIe"),
        ("NVIDIA B200", {}, "B200"),
        ("NVIDIA GB200", {}, "GB200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", {}, "RTX PRO 6000 Blackwell"),
        ("NVIDIA A100-SXM4-80GB", {}, "A100 SXM 80GB"),
        ("NVIDIA L40S", {}, "L40S"),
        ("AMD Instinct MI300X", {}, "MI300X"),
        ("", {"computeMajor": 9, "computeMinor": 4, "numSms": 304, "totalGlobalMem": 206141652992}, "MI300X"),
        ("", {"computeMajor": 9, "computeMinor": 4, "numSms": 304, "totalGlobalMem": 274877906944}, "MI325X"),
        ("NVIDIA GH200 480GB", {}, None),  # not an H200: unmatched rather than wrong
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", {}, None),
        ("", {"computeMajor": 9, "computeMinor": 4, "numSms": 80, "totalGlobalMem": 206141652992}, None),
    ],
)
def test_peaks_match_name_and_properties(name: str, props: dict, device: str | None) -> None:
    got = sol.match_peaks(sol.load_peaks(), name, props)
    assert (got.device if got else None) == device


def test_traces_match_their_device(gaps, vllm) -> None:
    peaks = sol.load_peaks()
    matched = {**sol.run_devices(gaps, peaks), **sol.run_devices(vllm, peaks)}
    by_run = {
        run.rsplit("/", 1)[-1]: (p.device if p else None, p.peak("hbm_gbps") if p else None)
        for (run, _), p in matched.items()
    }
    assert by_run["eager#ws1"] == ("H200 SXM", H200_HBM) and by_run["graph#ws1"] == ("H200 SXM", H200_HBM)
    assert by_run["vllm-b200-tp8-rank0-eager#ws8"] == ("B200", 7700.0)
    # vLLM's ROCm trace names no device: matched by gfx942, 304 CUs and 192 GiB
    assert by_run["vllm-mi300x-decode-fullgraph#ws1"] == ("MI300X", 5300.0)


def test_user_peaks_come_first_and_bad_files_are_named(tmp_path: Path, gaps) -> None:
    mine = tmp_path / "peaks.csv"
    mine.write_text(
        "# my clocks\ndevice,name_pattern,bf16_tflops,hbm_gbps,source\nmy H200,H200,900,4000,measured by me\n",
        encoding="utf-8",
    )
    frame = sol.roofline(gaps, peaks_file=mine)
    row = frame.filter((pl.col("op") == "aten::mm") & (pl.col("source") == "eager")).row(0, named=True)
    assert row["device"] == "my H200"
    assert row["pct_peak_hbm"] == pytest.approx(100 * row["gbps"] / 4000, abs=1e-3)
    for text, message in [
        ("device,name_pattern\nx,(\n", "bad name_pattern"),
        ("device,name_pattern,hbm_gbps\nx,H200,fast\n", "not a number"),
        ("device,colour\nx,red\n", "unknown peaks column"),
        ("device,hbm_gbps\nx,100\n", "at least one of"),
    ]:
        mine.write_text(text, encoding="utf-8")
        with pytest.raises(K25Error, match=message):
            sol.load_peaks(mine)


# ------------------------------------------------------------------------------- per-op FLOPs and bytes (real)


def test_h200_eager_ops_match_a_hand_computation_from_the_raw_json(gaps) -> None:
    frame = sol.roofline(gaps, phase="decode", top=None)
    eager = frame.filter(pl.col("run_id").str.contains("h200-gaps/eager"))
    raw = raw_ops(GAPS_EAGER)
    ops = {"aten::mm", "aten::bmm", "aten::_grouped_mm", "aten::_fused_rms_norm", "aten::_softmax"}
    assert _check_ops_against_raw(eager, raw, ops) == sum(1 for name, _ in raw if name in ops)
    # every GEMM of the fixture is modelled, on the H200's peaks, and memory-bound at decode batch sizes
    gemms = eager.filter(pl.col("category") == "gemm")
    assert gemms["bound"].unique().to_list() == ["memory"]
    for r in gemms.iter_rows(named=True):
        assert r["pct_peak_hbm"] == pytest.approx(100 * r["gbps"] / H200_HBM, rel=1e-3)
        assert r["ridge"] == pytest.approx(H200_BF16 * 1000 / H200_HBM, rel=1e-3)
        assert 0 < r["pct_of_sol"] <= 100  # no call beat the hardware
    # the lm_head GEMV streams 2.35 GB: the one place the loop gets near the HBM peak
    lm = gemms.filter(pl.col("shape") == "M=1 K=7168 N=163840").row(0, named=True)
    assert 85 < lm["pct_peak_hbm"] <= 100


def test_ops_without_a_model_are_listed_with_their_name_never_guessed(gaps, vllm) -> None:
    frame = sol.roofline(gaps, top=None)
    topk = frame.filter((pl.col("op") == "aten::topk") & (pl.col("source") == "eager"))
    assert not topk.is_empty()
    assert topk["bound"].unique().to_list() == ["unmodelled"]
    assert topk["note"].unique().to_list() == ["no cost model for this op"]
    assert topk["gflop_per_call"].is_null().all() and topk["mb_per_call"].is_null().all()
    assert topk["dtype"].is_null().all()
    b200 = sol.roofline(vllm, phase="all", top=None)
    notes = {r["op"]: r["note"] for r in b200.iter_rows(named=True) if r["bound"] == "unmodelled"}
    assert "module parameters" in notes["vllm::moe_forward"]
    assert "sequence lengths are tensor values" in notes["vllm::unified_attention_with_output"]
    assert "head_size is a value" in notes["_C::rotary_embedding"]


def test_vllm_ops_on_the_b200_trace_match_the_raw_json(vllm) -> None:
    frame = sol.roofline(vllm, phase="all", top=None).filter(pl.col("run_id").str.contains("b200"))
    raw = raw_ops(B200)
    ops = {"aten::addmm", "aten::mm", "_C::fused_add_rms_norm", "_C::rms_norm"}
    assert _check_ops_against_raw(frame, raw, ops) == sum(1 for name, _ in raw if name in ops)
    assert frame.filter(pl.col("op").is_in(list(ops)))["device"].unique().to_list() == ["B200"]
    # KV-cache write: the cache is FP8 on this trace (the kernel's cache type is unsigned char)
    cache = frame.filter(pl.col("op") == "_C_cache_ops::reshape_and_cache_flash").row(0, named=True)
    (key, value, *_rest) = json.loads(cache["input_dims"])
    slots = json.loads(cache["input_dims"])[4]
    n = math.prod(key)
    assert cache["mb_per_call"] == pytest.approx((2 * n * 2 + 2 * n * 1 + slots[0] * 8) / 1e6, rel=1e-5)


def test_the_ops_of_a_two_rank_run_add_up_both_ranks_raw_json(x2) -> None:
    """op_calls is built per trace; sol_op_calls adds the ranks of a run up: per (op, Input Dims) the calls and
    kernel time of the TP2 eager run are rank 0's plus rank 1's, each read from its raw JSON."""
    frame = sol.roofline(x2, phase="all", top=None)
    both: dict[tuple[str, str], dict] = {}
    files = sorted((X2 / "eager").glob("*.json.gz"))
    assert len(files) == 2
    for path in files:
        for key, entry in raw_ops(path).items():
            total = both.setdefault(key, {**entry, "calls": 0, "us": 0.0})
            total["calls"] += entry["calls"]
            total["us"] += entry["us"]
    ops = {"aten::mm", "aten::bmm", "aten::_fused_rms_norm"}
    expected = sum(1 for name, _ in both if name in ops)
    assert expected >= 3
    assert _check_ops_against_raw(frame, both, ops) == expected
    stored = x2.execute("select count(distinct trace_id), sum(calls) from op_calls").fetchone()
    assert stored[0] == 2 and stored[1] > 0


def test_kv_cache_write_with_a_bf16_cache_on_the_mi300x_trace(vllm) -> None:
    frame = sol.roofline(vllm, phase="all", top=None).filter(pl.col("run_id").str.contains("piecewise"))
    # the lm_head GEMM: hipBLASLt's Cijk_…_BBS_ kernel name gives BF16, as the raw Input type says
    assert _check_ops_against_raw(frame, raw_ops(MI300X_PIECEWISE), {"aten::mm"}) == 1
    cache = frame.filter(pl.col("op") == "_C_cache_ops::reshape_and_cache_flash").row(0, named=True)
    raw = raw_ops(MI300X_PIECEWISE)
    dims = raw[("_C_cache_ops::reshape_and_cache_flash", cache["input_dims"])]["dims"]
    n = math.prod(dims[0])
    assert dims[0] == [8192, 8, 64]
    assert cache["mb_per_call"] == pytest.approx((2 * n * (2 + 2) + dims[4][0] * 8) / 1e6, rel=1e-5)
    assert cache["device"] == "MI300X"


# ---------------------------------------------------------------------- vLLM quantized GEMMs (schema-shaped)


def _synthetic_trace(path: Path, ops: list[tuple[str, list, str]]) -> Path:
    """A minimal Kineto trace: one decode step (vLLM's marker) with the given (op, Input Dims, kernel name) calls,
    each op launching its kernel on an H200. The dims follow vLLM's op schemas (csrc/torch_bindings.cpp)."""
    events: list[dict] = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "execute_context_0(0)_generation_4(4)",
            "pid": 1,
            "tid": 1,
            "ts": 100.0,
            "dur": 1000.0,
            "args": {"External id": 1},
        }
    ]
    ts = 110.0
    for i, (name, dims, kernel) in enumerate(ops):
        ext, corr = 10 + i, 100 + i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 20.0,
                "args": {"External id": ext, "Input Dims": dims},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": ts + 5,
                "dur": 5.0,
                "args": {"External id": ext, "correlation": corr, "cbid": 211},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": ts + 12,
                "dur": 40.0,
                "args": {
                    "External id": ext,
                    "correlation": corr,
                    "device": 0,
                    "stream": 7,
                    "grid": [132, 1, 1],
                    "block": [256, 1, 1],
                },
            },
        ]
        ts += 100
    trace = {
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H200",
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
                "totalGlobalMem": 150109880320,
            }
        ],
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
        "traceEvents": events,
    }
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


MARLIN = (
    "void marlin::Marlin<__nv_bfloat16, 1125899906843648l, 1125899906909960l, 128, 1, 4, 8, false, 4, 2, "
    "false>(int4 const*, int4 const*, int4*, int4*, int4 const*)"
)
MARLIN_MOE = (
    "void marlin_moe_wna16::Marlin<__nv_bfloat16, 1125899906843648l, 1125899906909960l, 256, 1, 8, 4, false, "
    "4, 8, false>(int4 const*, int4 const*, int4*)"
)
FP8_GEMM = (
    "void cutlass::device_kernel<vllm::cutlass_3x_gemm_sm90<cutlass::float_e4m3_t, cutlass::bfloat16_t, "
    "vllm::c3x::ScaledEpilogue>::GemmKernel>(vllm::cutlass_3x_gemm_sm90<cutlass::float_e4m3_t>::Params)"
)


def test_marlin_and_fp8_gemms_from_vllm_op_schemas(tmp_path: Path) -> None:
    # gptq_marlin_gemm(a, c?, b_q_weight, b_bias?, b_scales, global_scale?, b_zeros?, g_idx?, perm?, workspace,
    #                  b_q_type, size_m, size_n, size_k, is_k_full, use_atomic_add, use_fp32_reduce, is_zp_float)
    M, K, N, G = 4, 7168, 2048, 32
    dense = [[M, K], [], [K // 16, N * 16 * 4 // 32], [], [K // G, N], [], [], [], [], [512]] + [[]] * 8
    # moe_wna16_marlin_gemm: ..., workspace, sorted_token_ids, expert_ids, num_tokens_past_padded, topk_weights, ...
    E, TOPK, N13 = 384, 8, 4096
    moe = [
        [M, K],
        [],
        [E, K // 16, N13 * 2],
        [],
        [E, K // G, N13],
        [],
        [],
        [],
        [],
        [],
        [512],
        [1472],
        [92],
        [1],
        [M, TOPK],
    ] + [[]] * 13
    # cutlass_scaled_mm(out, a, b, a_scales, b_scales, bias?)
    fp8 = [[M, N], [M, K], [K, N], [M, 1], [1, N], []]
    trace = _synthetic_trace(
        tmp_path / "marlin.pt.trace.json",
        [
            ("_C::gptq_marlin_gemm", dense, MARLIN),
            ("_moe_C::moe_wna16_marlin_gemm", moe, MARLIN_MOE),
            ("_C::cutlass_scaled_mm", fp8, FP8_GEMM),
            ("vllm::unified_mla_attention_with_output", [[M, 16, 576]], "void flash_fwd_splitkv_mla_kernel<>()"),
        ],
    )
    con = _load(tmp_path / "m.duckdb", trace)
    frame = sol.roofline(con, top=None)
    rows = {r["op"]: r for r in frame.iter_rows(named=True)}
    assert {r["category"] for r in rows.values()} >= {"marlin_gemm", "gemm", "attention"}

    r = rows["_C::gptq_marlin_gemm"]
    assert (r["shape"], r["dtype"]) == (f"M={M} K={K} N={N} W4A16 g{G}", "bf16")
    weights = (K // 16) * (N * 2) * 4 + (K // G) * N * 2  # packed int32 + bf16 group scales: 0.5625 B/weight
    assert weights == K * N * 0.5625
    assert r["gflop_per_call"] == pytest.approx(2 * M * K * N / 1e9, rel=1e-5)
    assert r["mb_per_call"] == pytest.approx((2 * M * K + weights + 2 * M * N) / 1e6, rel=1e-5)
    assert r["us_per_call"] == pytest.approx(40.0, rel=1e-5)
    assert r["pct_peak_hbm"] == pytest.approx(
        100 * (2 * M * K + weights + 2 * M * N) / 40e-6 / 1e9 / H200_HBM, rel=1e-4
    )

    r = rows["_moe_C::moe_wna16_marlin_gemm"]
    hit = E * (1 - (1 - TOPK / E) ** M)
    per_expert = (K // 16) * (N13 * 2) * 4 + (K // G) * N13 * 2
    assert r["gflop_per_call"] == pytest.approx(2 * M * TOPK * K * N13 / 1e9, rel=1e-5)
    assert r["mb_per_call"] == pytest.approx((2 * M * K + 2 * M * TOPK * N13 + hit * per_expert) / 1e6, rel=1e-5)

    r = rows["_C::cutlass_scaled_mm"]
    assert r["dtype"] == "fp8" and r["bound"] == "memory"
    assert r["gflop_per_call"] == pytest.approx(2 * M * K * N / 1e9, rel=1e-5)
    assert r["mb_per_call"] == pytest.approx((M * K + K * N + 2 * M * N + 4 * (M + N)) / 1e6, rel=1e-5)
    assert r["pct_peak_flops"] == pytest.approx(100 * 2 * M * K * N / 40e-6 / 1e12 / 1978.9, rel=1e-4)

    assert rows["vllm::unified_mla_attention_with_output"]["bound"] == "unmodelled"
    con.close()


# ----------------------------------------------------------------------------------------- CUDA-graph replays


def test_graph_kernels_carry_shapes_only_where_unambiguous(gaps) -> None:
    frame = sol.roofline(gaps, top=None)
    graph = frame.filter(pl.col("source") == "graph")
    eager = frame.filter((pl.col("source") == "eager") & pl.col("run_id").str.contains("eager"))
    carried = graph.filter(pl.col("note").str.contains("carried"))
    assert set(carried["op"].unique()) >= {"aten::mm", "aten::bmm"}
    for r in carried.filter(pl.col("op").is_in(["aten::mm", "aten::bmm"])).iter_rows(named=True):
        twin = eager.filter(
            (pl.col("op") == r["op"])
            & (pl.col("input_dims") == r["input_dims"])
            & (pl.col("batch_size") == r["batch_size"])
        )
        assert not twin.is_empty(), r
        # the graph replays the same calls per step as the eager loop
        assert r["calls_per_step"] == pytest.approx(twin["calls_per_step"].sum()), r
        assert r["mb_per_call"] == twin["mb_per_call"][0]
    # the grouped GEMM's CUTLASS kernel runs with one grid for both expert GEMMs: ambiguous, so not carried
    grouped = graph.filter(pl.col("op").str.contains("enable_3x_kernel_for_sm9x"))
    assert not grouped.is_empty()
    assert grouped["bound"].unique().to_list() == ["unmodelled"]
    assert grouped["note"].str.contains("ambiguous").all()
    assert not graph.filter(pl.col("op") == "aten::_grouped_mm").filter(pl.col("bound") != "unmodelled").height
    # nothing lost: the graph rows account for every graph-replayed kernel nanosecond of the selected steps
    total = gaps.execute("""
        select sum(g.dur_ns) from gpu_events g join launches l on l.trace_id = g.trace_id
            and l.correlation = g.correlation join steps s on s.trace_id = g.trace_id and s.step_index = g.step_index
        where l.name = 'cudaGraphLaunch' and g.kind = 'kernel' and s.phase = 'decode' and not s.is_empty
        """).fetchone()[0]
    assert (graph["us_per_call"] * graph["calls"]).sum() * 1e3 == pytest.approx(total, rel=1e-5)


def _raw_graph_kernels(path: Path) -> dict[tuple, list[int]]:
    """From the raw JSON alone: per (kernel name, grid, block) the kernels whose launch (by correlation id) is a
    cudaGraphLaunch / hipGraphLaunch, and their summed durations in ns."""
    events = _raw(path)["traceEvents"]
    launch = {
        e["args"]["correlation"]: e["name"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    out: dict[tuple, list[int]] = {}
    for e in events:
        if e.get("cat") != "kernel" or "graphlaunch" not in launch.get(e["args"].get("correlation"), "").lower():
            continue
        a = e["args"]
        key = (e["name"], *(a.get("grid") or [None] * 3), *(a.get("block") or [None] * 3))
        entry = out.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += round(e["dur"] * 1000)
    return out


@pytest.mark.parametrize("which", ["h200-graph", "mi300x-fullgraph"])
def test_graph_kernels_hold_every_graph_replayed_kernel_of_the_raw_json(gaps, vllm, which: str) -> None:
    """graph_kernels (built at load) per kernel name, grid and block = the raw JSON's kernels launched by a
    cudaGraphLaunch / hipGraphLaunch, counted and summed here (every one of them lies in a step on these traces)."""
    con, path = (gaps, GAPS_GRAPH) if which == "h200-graph" else (vllm, MI300X_FULL)
    want = _raw_graph_kernels(path)
    assert sum(n for n, _ in want.values()) > 100
    file = (sorted(path.glob("*.json.gz"))[0] if path.is_dir() else path).resolve()
    rows = con.execute(
        """
        select kernel_names.name, grid_x, grid_y, grid_z, block_x, block_y, block_z,
            sum(kernels)::bigint, sum(kernel_ns)::bigint
        from graph_kernels join kernel_names using (name_id) join traces using (trace_id)
        where traces.path = ?
        group by all""",
        [str(file)],
    ).fetchall()
    assert {r[:7]: [r[7], r[8]] for r in rows} == want


def test_graph_rows_sum_the_per_step_rows(gaps) -> None:
    """The one-pass sum the roofline uses equals the per-step carried rows summed here, group by group: fed the
    per-step rows (sol_graph_kernels) and fed the groups of alike steps (sol_graph_step_groups, what it reads)."""
    from k25trace.analysis import roofline as rl
    from k25trace.db import query_frame, run_query

    params = {"phase": "decode", "rank": None, "trace_id": None}
    run_query(gaps, "sol_steps")
    eager = query_frame(gaps, "sol_op_calls", params)
    graph = query_frame(gaps, "sol_graph_kernels", params)
    assert graph.height > 100 and graph.select("trace_id", "step_index").n_unique() > 10
    per_step = rl.carry_graph_kernels(graph, eager)
    assert any(r.op is not None for r in per_step) and any(r.op is None for r in per_step)
    want: dict[tuple, list] = {}
    for r in per_step:
        key = (r.run_id, r.phase, r.batch_size, r.op, r.input_dims, r.kernel_set, r.kernel_names, r.reason)
        have = want.setdefault(key, [0, 0, 0, r.categories, r.note])
        have[0] += r.calls
        have[1] += r.kernels
        have[2] += r.kernel_ns
    groups = query_frame(gaps, "sol_graph_step_groups", params)
    assert groups["steps"].sum() == graph.height and groups.height < graph.height / 2  # alike steps taken together
    for frame in (graph, groups):
        got = rl.graph_rows(frame, eager, {})
        assert len(got) == len(want)
        for r in got:
            key = (r.run_id, r.phase, r.batch_size, r.op, r.input_dims, r.kernel_set, r.kernel_names, r.reason)
            assert [r.calls, r.kernels, r.kernel_ns, r.categories, r.note] == want[key], key


def test_graph_kernels_without_grid_or_block_stay_one_row_per_kernel_name(vllm) -> None:
    """ROCm graph kernels carry no grid or block: each kernel name keeps its own row, none is lumped with another."""
    events = _raw(MI300X_FULL)["traceEvents"]
    (launch,) = [e for e in events if e.get("name") == "hipGraphLaunch"]
    per_name: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for e in events:
        if e.get("cat") == "kernel" and e["args"].get("correlation") == launch["args"]["correlation"]:
            assert "grid" not in e["args"] and "block" not in e["args"]
            per_name[e["name"]][0] += 1
            per_name[e["name"]][1] += e["dur"]
    assert len(per_name) == 20 and sum(n for n, _ in per_name.values()) == 421
    frame = sol.roofline(vllm, top=None, phase="all")
    graph = frame.filter((pl.col("source") == "graph") & pl.col("run_id").str.contains("fullgraph"))
    # one row per kernel name as the report shows it (was: all 421 kernels in one row named after whichever kernel
    # came first); the two Cijk and the two Rmsnorm variants share a shown name and so a row
    assert graph["op"].n_unique() == graph.height == 18
    want: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for raw_name, (calls, us) in per_name.items():
        # the row whose shown name's identifiers all appear in the raw name, the longest such name
        shown = [op for op in graph["op"] if all(t in raw_name for t in re.findall(r"\w+", op))]
        best = max(shown, key=len)
        want[best][0] += calls
        want[best][1] += us
    assert set(graph["op"]) == set(want)
    for r in graph.iter_rows(named=True):
        calls, us = want[r["op"]]
        assert r["calls"] == calls, r["op"]
        assert r["us_per_call"] == pytest.approx(us / calls, abs=5e-4), r["op"]  # shown to the ns
    assert graph["note"].str.contains("records no grid or block").all()
    matmul = graph.filter(pl.col("op").str.contains("_matmul_ogs_"))
    assert matmul.height == 2 and set(matmul["category"]) == {"quant_gemm"}


def test_carry_rule_refuses_a_kernel_seen_with_two_shapes() -> None:
    def eager(op: str, dims: str, kernel_set: str) -> dict:
        return {
            "run_id": "e",
            "phase": "decode",
            "batch_size": 4,
            "world_size": 1,
            "device_name": "G",
            "op": op,
            "input_dims": dims,
            "kernel_set": kernel_set,
            "kernel_names": ["k"],
            "categories": ["gemm"],
        }

    def graph(sig: str, n: int) -> dict:
        return {
            "run_id": "g",
            "phase": "decode",
            "batch_size": 4,
            "world_size": 1,
            "device_name": "G",
            "trace_id": 2,
            "step_index": 0,
            "sig": sig,
            "kernels": n,
            "kernel_ns": 1000 * n,
            "category": "gemm",
            "short_name": sig,
        }

    e = pl.DataFrame(
        [
            eager("aten::mm", "[[4,8],[8,16]]", "1:1x1x1:1x1x1"),
            eager("aten::mm", "[[4,8],[8,32]]", "1:1x1x1:1x1x1"),  # same kernel and grid, other shape
            eager("aten::mm", "[[4,8],[8,64]]", "2:1x1x1:1x1x1 3:1x1x1:1x1x1"),
        ]
    )  # split-K + reduce
    g = pl.DataFrame(
        [graph("1:1x1x1:1x1x1", 2), graph("2:1x1x1:1x1x1", 3), graph("3:1x1x1:1x1x1", 3), graph("9:1x1x1:1x1x1", 1)]
    )
    rows = {r.kernel_set: r for r in sol.carry_graph_kernels(g, e)}
    assert rows["1:1x1x1:1x1x1"].op is None and "2 different op shapes" in rows["1:1x1x1:1x1x1"].reason
    both = rows["2:1x1x1:1x1x1 3:1x1x1:1x1x1"]
    assert (both.op, both.input_dims, both.calls, both.kernel_ns) == ("aten::mm", "[[4,8],[8,64]]", 3, 6000)
    assert rows["9:1x1x1:1x1x1"].op is None and "no eager decode step" in rows["9:1x1x1:1x1x1"].reason
    # counts that are not the same multiple of the eager kernel set: not carried
    g2 = pl.DataFrame([graph("2:1x1x1:1x1x1", 3), graph("3:1x1x1:1x1x1", 2)])
    assert all(r.op is None for r in sol.carry_graph_kernels(g2, e))


# ------------------------------------------------------------------------------------------- the step bound


def _mat_fp8_block(k: int, n: int) -> float:
    return k * n + math.ceil(k / 128) * math.ceil(n / 128) * 4


def test_deepseek_v3_step_bound_against_an_independent_calculation() -> None:
    cfg = models.load_config(MODELS / "deepseek-v3" / "config.json")
    plan = models.parse_quant(None, cfg)  # the config's own fp8 128x128 block quantization
    tp, b, ctx = 8, 32, 4096
    bound = models.step_bound(cfg, plan, tp=tp, batch=b, context=ctx)

    # written out for DeepSeek-V3: 61 layers, 3 dense, 58 MoE; hidden 7168; MLA with 128 heads
    H, heads, qr, kvr, rope, nope, vd = 7168, 128, 1536, 512, 64, 128, 128
    attention = 61 * (
        _mat_fp8_block(H, qr)
        + _mat_fp8_block(H, kvr + rope)  # replicated q_a, kv_a
        + (
            _mat_fp8_block(qr, heads * (nope + rope))
            + _mat_fp8_block(kvr, heads * (nope + vd))
            + _mat_fp8_block(heads * vd, H)
        )
        / tp
    )
    dense = 3 * (2 * _mat_fp8_block(H, 18432) + _mat_fp8_block(18432, H)) / tp
    shared = 58 * (2 * _mat_fp8_block(H, 2048) + _mat_fp8_block(2048, H)) / tp
    expert = 2 * _mat_fp8_block(H, 2048) + _mat_fp8_block(2048, H)
    hit = 256 * (1 - (248 / 256) ** b)
    routed = 58 * hit * expert / tp
    router = 58 * (H * 256 * 2 + 256 * 4)
    lm_head = 129280 * H * 2 / tp + (61 * (2 * H + qr + kvr) + H) * 2
    kv = 61 * b * ctx * (kvr + rope) * 2
    got = {p.name: p.bytes for p in bound.parts}
    assert got["attention"] == pytest.approx(attention)
    assert got["dense_mlp"] == pytest.approx(dense)
    assert got["shared_experts"] == pytest.approx(shared)
    assert got["routed_experts"] == pytest.approx(routed)
    assert got["router"] == pytest.approx(router)
    assert got["lm_head"] == pytest.approx(lm_head)
    assert got["kv_cache"] == pytest.approx(kv)
    assert bound.experts_hit == pytest.approx(hit)
    total = attention + dense + shared + routed + router + lm_head + kv + b * H * 2 / tp
    assert bound.total_bytes == pytest.approx(total)
    assert bound.compute == "fp8"
    # at batch 1 exactly top-k = 8 experts are hit per layer
    one = models.step_bound(cfg, plan, tp=tp, batch=1, context=ctx)
    assert one.experts_hit == pytest.approx(8.0)


def test_kimi_int4_experts_from_compressed_tensors_and_from_quant() -> None:
    kimi = models.load_config(MODELS / "kimi-k2-thinking" / "config.json")
    plan = models.parse_quant(None, kimi)
    assert plan.for_module("experts", "model.layers.5.mlp.experts.0.gate_proj").name == "w4a16-g32"
    for part, module in (
        ("attention", "model.layers.5.self_attn.q_b_proj"),
        ("shared", "model.layers.5.mlp.shared_experts.up_proj"),
        ("dense", "model.layers.0.mlp.down_proj"),
        ("lm_head", "lm_head"),
    ):
        assert plan.for_module(part, module).name == "bf16", part
    bound = models.step_bound(kimi, plan, tp=8, batch=8, context=None)
    hidden, moe_inter = 7168, 2048  # hidden size, routed experts' intermediate size
    hit = 384 * (1 - (376 / 384) ** 8)
    # 4-bit weights + a bf16 scale per 32: 0.5625 B/weight
    per_expert = 3 * (hidden * moe_inter * 4 / 8 + (hidden * moe_inter / 32) * 2)
    assert per_expert == pytest.approx(3 * hidden * moe_inter * 0.5625)
    assert bound.part("routed_experts").bytes == pytest.approx(60 * hit * per_expert / 8)
    assert bound.part("dense_mlp").bytes == pytest.approx(1 * 3 * hidden * 18432 * 2 / 8)
    assert bound.part("kv_cache") is None
    # the same experts on an unquantized config, asked for with --quant
    loop = models.load_config(MODELS / "decode-loop-8l" / "config.json")
    q = models.step_bound(loop, models.parse_quant("experts=w4a16-g32,kv=fp8", loop), tp=8, batch=8, context=100)
    assert q.part("routed_experts").bytes == pytest.approx(8 * hit * per_expert / 8)
    assert q.part("kv_cache").bytes == pytest.approx(8 * 8 * 100 * 576 * 1)
    assert (
        q.part("attention").bytes
        == models.step_bound(loop, models.parse_quant(None, loop), tp=8, batch=8, context=None).part("attention").bytes
    )


def test_dense_gqa_bound_replicates_kv_heads_beyond_tp() -> None:
    cfg = models.load_config(MODELS / "llama-3.1-8b" / "config.json")
    plan = models.parse_quant(None, cfg)
    for tp, kv_heads_per_rank in ((2, 4), (16, 1)):
        bound = models.step_bound(cfg, plan, tp=tp, batch=4, context=1000)
        H, hd = 4096, 128
        attention = 32 * 2 * (H * 32 * hd / tp + 2 * H * hd * kv_heads_per_rank + 32 * hd * H / tp)
        assert bound.part("attention").bytes == pytest.approx(attention)
        assert bound.part("dense_mlp").bytes == pytest.approx(32 * 3 * H * 14336 * 2 / tp)
        assert bound.part("kv_cache").bytes == pytest.approx(32 * 4 * 1000 * 2 * hd * kv_heads_per_rank * 2)
        assert bound.part("routed_experts") is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [("experts=w3a16-g32", "unknown quantization scheme"), ("heads=bf16", "unknown part"), ("kv=int4", "kv=int4")],
)
def test_bad_quant_specs(spec: str, message: str) -> None:
    cfg = models.load_config(MODELS / "decode-loop-8l" / "config.json")
    with pytest.raises(K25Error, match=message):
        models.parse_quant(spec, cfg)


def test_sol_report_on_the_tp2_eager_traces(x2) -> None:
    from k25trace.analysis.report import allreduce_floor, breakdown

    frame = sol.step_sol(x2, model_config=MODELS / "decode-loop-8l" / "config.json", context=1024)
    cfg = models.load_config(MODELS / "decode-loop-8l" / "config.json")
    batch = breakdown(x2, by="batch")
    floor = allreduce_floor(x2)
    assert sorted(frame["batch_size"].unique().to_list()) == [1, 8, 64]
    for b in (1, 8, 64):
        rows = {r["part"]: r for r in frame.filter(pl.col("batch_size") == b).iter_rows(named=True)}
        bound = models.step_bound(cfg, models.parse_quant(None, cfg), tp=2, batch=b, context=1024)
        cats = {r["category"]: r for r in batch.filter(pl.col("batch_size") == b).iter_rows(named=True)}
        w = rows["weights"]
        assert w["tp"] == 2 and w["device"] == "H200 SXM"
        assert w["observed_ms"] == pytest.approx(cats["gemm"]["kernel_ms_per_step"], abs=1e-3)
        assert w["floor_gb"] == pytest.approx(bound.weight_bytes / 1e9, rel=1e-5)
        assert w["floor_ms"] == pytest.approx(bound.weight_bytes / (H200_HBM * 1e9) * 1e3, rel=1e-5)
        assert w["ratio"] == pytest.approx(w["observed_ms"] / w["floor_ms"], rel=1e-3)
        ar = floor.filter(pl.col("batch_size") == b).row(0, named=True)
        assert rows["allreduce"]["floor_ms"] == pytest.approx(ar["floor_kernel_ms"], rel=1e-5)
        assert rows["allreduce"]["observed_ms"] == pytest.approx(cats["allreduce"]["kernel_ms_per_step"], abs=1e-3)
        step = rows["step"]
        assert step["floor_ms"] == pytest.approx(
            bound.total_bytes / (H200_HBM * 1e9) * 1e3 + ar["floor_kernel_ms"], abs=1e-3
        )
        assert step["observed_ms"] == pytest.approx(cats["gemm"]["step_ms"], abs=1e-3)
        assert step["ratio"] > 1  # no step beat its bound
        assert rows["kv_cache"]["ratio"] is None  # the loop's attention runs in bmm GEMMs, not attention kernels


def test_without_a_bench_the_allreduce_floor_is_the_link_bandwidth_term(tmp_path: Path) -> None:
    con = _load(tmp_path / "nobench.duckdb", X2 / "eager")
    frame = sol.step_sol(con, model_config=MODELS / "decode-loop-8l" / "config.json")
    for b in (1, 8, 64):
        row = frame.filter((pl.col("batch_size") == b) & (pl.col("part") == "allreduce")).row(0, named=True)
        # 17 all-reduces of hidden 7168 x batch x bf16; TP2 moves 2(n-1)/n = 1 message per link direction
        assert row["floor_ms"] == pytest.approx(17 * 7168 * b * 2 * 1 / 450e9 * 1e3, rel=1e-5)
        assert row["floor_basis"].startswith("bandwidth only") and "latency not counted" in row["floor_basis"]
    con.close()


def test_sol_needs_a_model_config(x2) -> None:
    with pytest.raises(K25Error, match="--model-config"):
        sol.step_sol(x2, model_config=None)


def test_cli_roofline_and_sol(x2_path: Path, x2) -> None:
    path = x2_path
    runner = CliRunner()
    out = runner.invoke(cli, ["report", "--db", str(path), "--by", "roofline", "--format", "csv", "--top", "3"])
    assert out.exit_code == 0, out.output
    frame = pl.read_csv(out.stdout.encode())
    assert frame.columns == list(sol.ROOFLINE_COLUMNS)
    assert frame.group_by(["run_id", "batch_size"]).len()["len"].max() <= 3
    out = runner.invoke(
        cli,
        [
            "report",
            "--db",
            str(path),
            "--by",
            "sol",
            "--format",
            "json",
            "--model-config",
            str(MODELS / "decode-loop-8l" / "config.json"),
            "--context",
            "1024",
            "--quant",
            "kv=fp8",
        ],
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert {r["part"] for r in rows} == {"weights", "kv_cache", "allreduce", "other", "idle", "step"}
    out = runner.invoke(cli, ["report", "--db", str(path), "--by", "sol"])
    assert out.exit_code == 1 and "--model-config" in out.output


def test_sol_queries_have_headers() -> None:
    for name in ("sol_op_calls", "sol_graph_kernels", "sol_devices", "sol_step_counts"):
        query = db.get_query(name)
        assert query.summary and query.reads and query.grain, name
        assert set(query.header) >= {"name", "reads", "params", "grain"}, name


def test_load_keeps_the_model_config_for_report_sol(tmp_path: Path) -> None:
    """`load --model-config` keeps the config in the database; `report --by sol` then needs no --model-config and
    prints the same rows; a config the bound cannot read is refused before anything is loaded."""
    from click.testing import CliRunner

    from k25trace.cli import cli

    root = Path(__file__).parent / "data"
    cfg = root / "models" / "decode-loop-8l" / "config.json"
    traces = root / "h200x2-decode-loop" / "eager"
    bad = tmp_path / "bad.json"
    bad.write_text('{"hidden_size": "x"}')
    runner = CliRunner()
    path = tmp_path / "m.duckdb"
    refused = runner.invoke(cli, ["load", str(traces), "--db", str(path), "-q", "--model-config", str(bad)])
    assert refused.exit_code != 0 and "bad.json" in refused.output and not path.exists()
    assert runner.invoke(cli, ["load", str(traces), "--db", str(path), "-q", "--model-config", str(cfg)]).exit_code == 0
    kept = runner.invoke(cli, ["report", "--db", str(path), "--by", "sol", "--context", "1024", "--format", "json"])
    given = runner.invoke(
        cli,
        [
            "report",
            "--db",
            str(path),
            "--by",
            "sol",
            "--context",
            "1024",
            "--format",
            "json",
            "--model-config",
            str(cfg),
        ],
    )
    assert kept.exit_code == 0 and given.exit_code == 0, kept.output
    rows = lambda out: [line for line in out.splitlines() if line.startswith("[") or line.startswith("{")]  # noqa: E731
    assert rows(kept.output) and rows(kept.output) == rows(given.output)
