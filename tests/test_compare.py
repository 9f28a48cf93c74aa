"""`k25trace compare`: the statistics against scipy, kernel families, and comparisons with a known answer:
synthetic pairs with one injected change (one category 20 % slower, one kernel replaced by another) or none (the
same workload run again), and real H200 pairs (eager against CUDA graph, batch 1 against batch 64, two TP2 runs,
two capture levels)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from k25trace import db, pipeline, synth
from k25trace.analysis import report
from k25trace.analysis.compare import CHANGED, Selection, Side, compare, top_kernels, verdict
from k25trace.errors import K25Error
from k25trace.names import kernel_family, template_args
from k25trace.stats import holm, t_quantile, t_two_sided_p, welch

DATA = Path(__file__).parent / "data"
GAPS = DATA / "h200-gaps"
TP2 = DATA / "h200x2-decode-loop"

# the synthetic pairs: two ranks, batch 1 and 64, 20 decode steps each, 8 layers
SYNTH = dict(ranks=2, batch_sizes=(1, 64), steps_per_batch=20, layers=8, prefill=False, empty_steps=0, seed=1)
NEW_ACT = "void vllm::silu_and_mul_kernel<c10::BFloat16>(c10::BFloat16*, c10::BFloat16 const*, int)"
NEW_RMS = synth.K_FUSED_ADD_RMS.replace("c10::BFloat16, 8>", "c10::BFloat16, 16>")


def load(path: Path, *sources: Path) -> Path:
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, list(sources))
    assert results and all(r.status == "loaded" for r in results), [(r.path, r.message) for r in results]
    con.close()
    return path


def side(name: str, path: Path, **selection: object) -> Side:
    return Side(name, db.connect(path, read_only=True), str(path), Selection(**selection))  # type: ignore[arg-type]


def changed(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("verdict").is_in(CHANGED))


# ----------------------------------------------------------------------------------------------- statistics


def test_welch_against_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for na, nb, shift, sb in [
        (20, 20, 0.0, 1.0),
        (6, 6, 2.0, 3.0),
        (3, 9, 0.5, 0.2),
        (2, 2, 1.0, 1.0),
        (40, 7, -0.3, 5.0),
    ]:
        a = rng.normal(10.0, 1.0, na)
        b = rng.normal(10.0 + shift, sb, nb)
        ours = welch(a, b)
        ref = stats.ttest_ind(b, a, equal_var=False)
        assert ours.p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-14)
        assert ours.delta == pytest.approx(b.mean() - a.mean())
        se = math.sqrt(a.var(ddof=1) / na + b.var(ddof=1) / nb)
        assert ours.ci95 == pytest.approx(stats.t.ppf(0.975, ours.df) * se, rel=1e-8)
    # the t distribution's tails, far out
    for t, df in [(0.5, 3.0), (4.0, 1.5), (12.0, 30.0), (40.0, 8.0)]:
        assert t_two_sided_p(t, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-8)
    # its quantiles (the confidence intervals' t), from one degree of freedom to a 64-rank run's thousands of steps
    for p in (0.05, 0.01, 0.5):
        for df in (1.0, 1.5, 2.0, 3.7, 8.0, 29.3, 100.0, 1e3, 7295.2, 1e5):
            assert t_quantile(p, df) == pytest.approx(stats.t.isf(p / 2, df), rel=1e-9), (p, df)


def test_welch_by_hand_and_degenerate_cases() -> None:
    # a = 1..5 (mean 3, var 2.5), b = 3..7 (mean 5, var 2.5): se = 1, t = 2, df = 8; tables: P(|T8| > 2) = 0.0805,
    # t(0.975, 8) = 2.306
    w = welch([1, 2, 3, 4, 5], [3, 4, 5, 6, 7])
    assert w.delta == 2.0 and w.df == pytest.approx(8.0) and w.p == pytest.approx(0.08052, abs=1e-5)
    assert w.ci95 == pytest.approx(2.306, abs=1e-3)
    assert welch([5.0, 5.0, 5.0], [5.0, 5.0]).p == 1.0  # no variation, same value: nothing changed
    assert welch([5.0, 5.0, 5.0], [6.0, 6.0]).p == 0.0  # no variation, other value: an exact change
    assert welch([1.0], [2.0, 3.0]).p is None  # one step: no test


def test_holm_and_verdict() -> None:
    adjusted = holm([0.01, 0.04, None, 0.03, 0.5])
    assert adjusted[2] is None
    assert adjusted[0] == pytest.approx(0.04) and adjusted[3] == pytest.approx(0.09)
    assert adjusted[1] == pytest.approx(0.09) and adjusted[4] == pytest.approx(0.5)
    kw = dict(alpha=0.05, min_change_pct=5.0, min_step_pct=0.5)
    assert verdict(0.2, 3.0, 10.0, 100.0, **kw) == "within noise"
    assert verdict(0.001, 0.4, 10.0, 100.0, **kw) == "negligible"  # 4 % of the row's value
    assert verdict(0.001, 0.4, 1.0, 100.0, **kw) == "negligible"  # 40 %, but 0.4 % of the step
    assert verdict(0.001, 0.6, 1.0, 100.0, **kw) == "slower"
    assert verdict(0.001, -0.6, 1.0, 100.0, **kw) == "faster"
    assert verdict(None, 5.0, 1.0, 100.0, **kw).startswith("untested")


def test_kernel_families() -> None:
    # tile shapes, NCCL algorithm/protocol and Inductor indices vary across builds and batch sizes
    assert (
        kernel_family("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_NNT")
        == kernel_family("nvjet_sm90_tst_128x64_64x8_2x1_v_bz_splitK_NNT")
        == "nvjet_sm90_tst_#_#_#_v_bz_splitK_NNT"
    )
    assert (
        kernel_family("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)")
        == kernel_family("ncclDevKernel_AllReduce_Sum_bf16_TREE_LL128(ncclDevKernelArgsStorage<4096ul>)")
        == "ncclDevKernel_AllReduce_Sum_bf16"
    )
    assert kernel_family("triton_poi_fused_mul_silu_slice_0") == kernel_family("triton_poi_fused_mul_silu_slice_7")
    assert kernel_family(synth.K_FUSED_ADD_RMS) == kernel_family(NEW_RMS) == "vllm::fused_add_rms_norm_kernel"
    assert kernel_family(synth.K_OPROJ).count("#") == 2 and "tilesize#_warpgroupsize#" in kernel_family(synth.K_OPROJ)
    # different operations stay apart
    assert kernel_family(synth.K_ACT) != kernel_family(NEW_ACT)
    assert kernel_family(synth.K_RMS) != kernel_family(synth.K_FUSED_ADD_RMS)
    assert kernel_family("nvjet_sm90_tst_64x8_64x16_2x1_v_bz_NNT") != kernel_family(
        "nvjet_sm90_tst_64x8_64x16_2x1_h_bz_NNT"
    )
    assert kernel_family("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert template_args(synth.K_MARLIN_W13) != template_args(synth.K_MARLIN_W2)
    assert template_args(synth.K_FUSED_ADD_RMS) == "<c10::BFloat16, 8>" and template_args("memcpy32_post") is None


def test_selection_parsing() -> None:
    assert Selection.parse(["level=c1", "batch=1"]) == Selection(level="c1", batch=1)
    assert Selection.parse(["level=c1,batch=1"]) == Selection(level="c1", batch=1)
    assert Selection.parse(["trace=3,4", "rank=0"]) == Selection(traces=(3, 4), rank=0)
    assert Selection.parse(["run=graph (TP2)"]).run == "graph (TP2)"
    assert Selection.parse([]) == Selection()
    for bad, message in [
        (["lvl=c1"], "unknown key"),
        (["batch=x"], "whole number"),
        (["level"], "KEY=VALUE"),
        (["level=c1", "level=c2"], "twice"),
    ]:
        with pytest.raises(K25Error, match=message):
            Selection.parse(bad)


# ------------------------------------------------------------------------------------------ synthetic pairs


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Databases of four synthetic runs of one workload: the base, and three others with other run-to-run noise
    (noise_seed): attention 20 % slower, the activation kernel replaced by another (and the fused-add RMSNorm
    built with other template arguments), and nothing else changed."""
    root = tmp_path_factory.mktemp("compare-synth")
    runs = {
        "base": {},
        "slow": {"noise_seed": 2, "category_scale": {"attention": 1.2}},
        "rename": {"noise_seed": 3, "kernel_rename": {synth.K_ACT: NEW_ACT, synth.K_FUSED_ADD_RMS: NEW_RMS}},
        "noise": {"noise_seed": 4},
    }
    out: dict[str, Path] = {}
    for name, extra in runs.items():
        synth.generate(root / name, **SYNTH, **extra)
        out[name] = root / name
        out[name + ".db"] = load(root / f"{name}.duckdb", root / name)
    return out


def truth_kernel_ms(folder: Path, category: str) -> dict[int, float]:
    """From truth.json: per decode batch size, the mean over steps and ranks of a category's summed kernel time."""
    truth = json.loads((folder / "truth.json").read_text())
    per_batch: dict[int, list[float]] = {}
    for i, step in enumerate(truth["steps"]):
        if step["phase"] == "decode":
            ns = [ranks[i]["categories"][category]["ns"] for ranks in truth["per_rank_steps"]]
            per_batch.setdefault(step["batch_size"], []).append(sum(ns) / len(ns) / 1e6)
    return {b: sum(v) / len(v) for b, v in per_batch.items()}


def test_noise_only_pair_is_no_change(pairs: dict[str, Path]) -> None:
    result = compare(side("A", pairs["base.db"]), side("B", pairs["noise.db"]))
    assert result.verdict == "no change" and result.changes() == []
    assert result.groups == 2 and result.summary().startswith("no change")
    assert set(result.categories["verdict"]) == {"within noise"}
    assert set(result.kernels["match"]) == {"exact"}  # the same kernels, matched by name
    assert set(result.kernels["verdict"]) == {"within noise"}
    # not because of the thresholds: with none, the Holm-adjusted test alone finds nothing
    bare = compare(side("A", pairs["base.db"]), side("B", pairs["noise.db"]), min_change_pct=0, min_step_pct=0)
    assert bare.verdict == "no change"
    assert bare.categories["p_value"].min() > 0.05
    # and the noise is real: the per-step values differ, only not beyond their step-to-step variation
    assert (result.categories.filter(pl.col("category") == "allreduce")["delta_ms"] != 0).all()


def test_one_category_twenty_percent_slower_is_found_and_nothing_else(pairs: dict[str, Path]) -> None:
    result = compare(side("A", pairs["base.db"]), side("B", pairs["slow.db"]))
    found = changed(result.categories)
    assert sorted(zip(found["group"], found["category"], found["verdict"], strict=True)) == [
        ("bs=1", "attention", "slower"),
        ("bs=64", "attention", "slower"),
    ]
    assert found["delta_pct"].to_list() == pytest.approx([20.0, 20.0], abs=1.5)
    # the measured delta is the generator's own (attention runs alone: exclusive = kernel time), and its 95 %
    # confidence interval holds the injected 20 %
    for row in found.iter_rows(named=True):
        batch = int(row["group"].removeprefix("bs="))
        truth_a = truth_kernel_ms(pairs["base"], "attention")[batch]
        truth_b = truth_kernel_ms(pairs["slow"], "attention")[batch]
        assert row["ms_a"] == pytest.approx(truth_a, abs=1e-4) and row["ms_b"] == pytest.approx(truth_b, abs=1e-4)
        assert abs(row["delta_ms"] - 0.2 * row["ms_a"]) <= row["ci95_ms"]
    # kernels: every changed one is an attention kernel; without the step floor, exactly the attention kernels
    truth = json.loads((pairs["base"] / "truth.json").read_text())["kernel_categories"]
    attention = {synth_short(n) for n, c in truth.items() if c == "attention"} - {
        synth_short(synth.K_FA3),
        synth_short(synth.K_PREP_VARLEN),
    }
    assert set(changed(result.kernels)["name_a"]) <= attention
    assert "sm90::flash_fwd_splitkv_mla_kernel" in set(changed(result.kernels)["name_a"])
    bare = compare(side("A", pairs["base.db"]), side("B", pairs["slow.db"]), min_step_pct=0)
    for group in ("bs=1", "bs=64"):
        rows = changed(bare.kernels).filter(pl.col("group") == group)
        assert set(rows["name_a"]) == attention and set(rows["verdict"]) == {"slower"}
        assert rows["delta_pct"].to_list() == pytest.approx([20.0] * len(rows), abs=2.0)
    # the steps are longer by what attention added: the category deltas add up to the wall delta
    for group in ("bs=1", "bs=64"):
        cats = result.categories.filter(pl.col("group") == group)
        wall = result.steps.filter((pl.col("group") == group) & (pl.col("metric") == "wall mean")).row(0, named=True)
        assert cats["ms_a"].sum() == pytest.approx(wall["ms_a"], abs=2e-3)
        assert cats["delta_ms"].sum() == pytest.approx(wall["delta_ms"], abs=2e-3)
        assert wall["delta_ms"] > 0


def synth_short(name: str) -> str:
    from k25trace.names import short_name

    return short_name(name)


def test_one_kernel_replaced_by_another(pairs: dict[str, Path]) -> None:
    result = compare(side("A", pairs["base.db"]), side("B", pairs["rename.db"]))
    assert changed(result.categories).is_empty()  # same durations, same categories
    found = changed(result.kernels)
    assert sorted(
        zip(
            found["group"],
            found["match"],
            found["name_a"].fill_null("—"),
            found["name_b"].fill_null("—"),
            found["category"],
            strict=True,
        )
    ) == [
        ("bs=1", "only-A", "vllm::act_and_mul_kernel", "—", "activation"),
        ("bs=1", "only-B", "—", "vllm::silu_and_mul_kernel", "activation"),
        ("bs=64", "only-A", "vllm::act_and_mul_kernel", "—", "activation"),
        ("bs=64", "only-B", "—", "vllm::silu_and_mul_kernel", "activation"),
    ]
    assert len(result.changes()) == 4
    # the replacement runs as often and as long as the kernel it replaced
    for group in ("bs=1", "bs=64"):
        old = found.filter((pl.col("group") == group) & (pl.col("match") == "only-A")).row(0, named=True)
        new = found.filter((pl.col("group") == group) & (pl.col("match") == "only-B")).row(0, named=True)
        # the dense first layer once, then the shared expert's and the experts' activation in every MoE layer
        assert old["calls_a"] == new["calls_b"] == 1 + 2 * (SYNTH["layers"] - 1)
        assert new["ms_b"] == pytest.approx(old["ms_a"], rel=0.05)
    # other template arguments of the same kernel: matched by family, both names shown, within noise
    family = result.kernels.filter(pl.col("match") == "family")
    assert family.height == 2
    for row in family.iter_rows(named=True):
        assert row["name_a"] == "vllm::fused_add_rms_norm_kernel <c10::BFloat16, 8>"
        assert row["name_b"] == "vllm::fused_add_rms_norm_kernel <c10::BFloat16, 16>"
        assert row["verdict"] == "within noise" and row["calls_a"] == row["calls_b"]
    assert set(result.kernels.filter(~pl.col("match").is_in(["family", "only-A", "only-B"]))["match"]) == {"exact"}


def test_cli_two_trace_directories_loaded_on_the_fly(pairs: dict[str, Path]) -> None:
    result = k25("compare", str(pairs["base"]), str(pairs["slow"]), "--format", "json")
    assert result.returncode == 0, result.stderr
    assert "loading side A" in result.stderr and "loading side B" in result.stderr
    data = json.loads(result.stdout)
    assert data["verdict"] == "4 changes" and data["groups"] == 2
    assert data["test"].startswith("Welch's t-test")
    slower = [(r["group"], r["category"]) for r in data["categories"] if r["verdict"] == "slower"]
    assert slower == [("bs=1", "attention"), ("bs=64", "attention")]
    # the same numbers as from the databases
    direct = compare(side("A", pairs["base.db"]), side("B", pairs["slow.db"]))
    assert [r["ms_b"] for r in data["categories"]] == direct.categories["ms_b"].to_list()
    csv_out = run_cli("compare", str(pairs["base.db"]), str(pairs["noise.db"]), "--format", "csv")
    assert csv_out.returncode == 0 and csv_out.stdout.splitlines()[0].startswith("phase,group,category,steps_a")
    assert "verdict: no change" in csv_out.stderr


# ------------------------------------------------------------------------------------------------ real pairs


@pytest.fixture(scope="module")
def gaps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare-gaps")
    return {"eager": load(root / "eager.duckdb", GAPS / "eager"), "graph": load(root / "graph.duckdb", GAPS / "graph")}


def test_h200_eager_against_cuda_graph(gaps: dict[str, Path]) -> None:
    """One H200, 8 layers, batch 1/8/64, 6 steps each: eager launches against one CUDA-graph replay per step."""
    result = compare(side("A", gaps["eager"]), side("B", gaps["graph"]))
    assert result.groups == 3 and list(result.steps["group"].unique(maintain_order=True)) == ["bs=1", "bs=8", "bs=64"]
    cats = result.categories
    # the graph removes the launch gaps: idle and the step time fall at batch 1 and 8 (GPU-bound at 64: noise)
    for group in ("bs=1", "bs=8"):
        idle = cats.filter((pl.col("group") == group) & (pl.col("category") == "idle")).row(0, named=True)
        assert idle["verdict"] == "faster" and idle["delta_pct"] < -85
        wall = result.steps.filter((pl.col("group") == group) & (pl.col("metric") == "wall mean")).row(0, named=True)
        assert wall["verdict"] == "faster"
    # the GEMMs are the same kernels either way: no change beyond 5 %
    gemm = cats.filter(pl.col("category") == "gemm")
    assert set(gemm["verdict"]) <= {"within noise", "negligible"} and (gemm["delta_pct"].abs() < 5).all()
    # A's numbers are report's numbers
    eager = report.breakdown(db.connect(gaps["eager"], read_only=True), by="batch", phase="decode")
    for row in cats.filter(pl.col("group") == "bs=1").iter_rows(named=True):
        ref = eager.filter((pl.col("batch_size") == 1) & (pl.col("category") == row["category"]))
        assert row["ms_a"] == pytest.approx(ref["ms_per_step"][0], abs=1e-4), row["category"]
    p50 = result.steps.filter((pl.col("group") == "bs=1") & (pl.col("metric") == "wall p50"))["ms_a"][0]
    assert p50 == pytest.approx(eager.filter(pl.col("batch_size") == 1)["median_step_ms"][0], abs=1e-4)
    # kernels: the eager run's 24 device-to-device copies per step are not in the graph run, which runs 24
    # memcpy32_post kernels instead; the blocking copy the eager run injected (a slice to pageable host memory,
    # every third step) exists only there
    found = changed(result.kernels)
    for group in ("bs=1", "bs=8", "bs=64"):
        rows = found.filter(pl.col("group") == group)
        assert sorted(
            zip(rows["match"], rows["name_a"].fill_null("—"), rows["name_b"].fill_null("—"), strict=True)
        ) == [
            ("only-A", "Memcpy DtoD (Device -> Device)", "—"),
            ("only-A", "Memcpy DtoH (Device -> Pageable)", "—"),
            ("only-B", "—", "memcpy32_post"),
        ]
        copy = rows.filter(pl.col("name_a") == "Memcpy DtoH (Device -> Pageable)").row(0, named=True)
        assert copy["calls_a"] == pytest.approx(1 / 3, abs=0.01)
    assert result.comm.is_empty() and any("needs several ranks" in n for n in result.notes)
    assert result.macro.is_empty()


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both real TP2 runs (CUDA graph, 61 layers; eager, 8 layers) in one database: two runs."""
    return load(tmp_path_factory.mktemp("compare-tp2") / "tp2.duckdb", TP2 / "graph", TP2 / "eager")


def test_batch_1_against_batch_64_within_one_run(tp2: Path) -> None:
    result = compare(side("A", tp2, run="graph", batch=1), side("B", tp2, run="graph", batch=64))
    assert result.match == "side" and result.groups == 1
    assert result.sides["batch_sizes"].to_list() == ["1", "64"] and result.sides["ranks"].to_list() == [2, 2]
    gemm = result.categories.filter(pl.col("category") == "gemm").row(0, named=True)
    assert gemm["verdict"] == "slower" and gemm["ms_b"] > 10 * gemm["ms_a"]
    # cuBLAS picks other tiles at batch 64: those GEMMs match by family, each side listing its own tile names
    con = db.connect(tp2, read_only=True)
    names = dict(
        con.execute(
            "select s.batch_size, list(distinct k.short_name) from kernels k join steps s using (trace_id, step_index) "
            "join trace_runs r using (trace_id) where r.run_id like '%graph%' and s.phase = 'decode' group by 1"
        ).fetchall()
    )
    family = result.kernels.filter(pl.col("match") == "family")
    assert not family.is_empty()
    for row in family.iter_rows(named=True):
        a, b = row["name_a"].split(" | "), row["name_b"].split(" | ")
        assert not set(a) & set(b)  # other names (a shared short name is shown with its template arguments)
        short_a, short_b = {n.split(" <")[0] for n in a}, {n.split(" <")[0] for n in b}
        assert short_a <= set(names[1]) and short_b <= set(names[64])
        assert {kernel_family(n) for n in short_a | short_b} == {row["family"]}
    nvjet = family.filter(pl.col("family") == "nvjet_sm90_tst_#_#_#_v_bz_NNT").row(0, named=True)
    assert "nvjet_sm90_tst_128x8_64x12_2x1_v_bz_NNT" in nvjet["name_a"]
    assert "nvjet_sm90_tst_256x32_64x5_2x1_v_bz_NNT" in nvjet["name_b"]
    # both sides have two ranks: the collectives' transfer and wait per step are compared
    ar = result.comm.filter(pl.col("category") == "allreduce")
    assert ar["metric"].to_list() == ["transfer", "wait", "wait at 1st", "wait at later"]
    assert set(ar["calls_a"]) == set(ar["calls_b"]) == {123.0}
    transfer = ar.filter(pl.col("metric") == "transfer").row(0, named=True)
    assert transfer["verdict"] == "slower" and transfer["ms_b"] > transfer["ms_a"]  # 896 KiB against 14 KiB
    # the batch-1 wait at the first collective is one profiler start skew (142 ms on the first step): not beyond noise
    assert ar.filter(pl.col("metric") == "wait at 1st")["verdict"][0] == "within noise"


def test_two_runs_in_one_database_graph_against_eager(tp2: Path) -> None:
    result = compare(side("A", tp2, run="graph"), side("B", tp2, run="eager (TP2)"))
    assert result.match == "batch" and result.groups == 3
    ar = result.comm.filter((pl.col("category") == "allreduce") & (pl.col("metric") == "transfer"))
    assert set(ar["calls_a"]) == {123.0} and set(ar["calls_b"]) == {17.0}  # 61 layers × 2 + 1 against 8 × 2 + 1
    assert (ar["delta_ms"] < 0).all()
    with pytest.raises(K25Error, match="matches 2 runs"):
        compare(side("A", tp2, run="h200x2-decode-loop"), side("B", tp2, run="eager"))
    with pytest.raises(K25Error, match="no run matches run='nope'.*graph \\(TP2\\)"):
        compare(side("A", tp2, run="nope"), side("B", tp2, run="eager"))
    # nothing on both sides is not "no change"
    none = compare(side("A", tp2, run="graph", batch=1), side("B", tp2, run="graph", batch=64), match="batch")
    assert none.groups == 0 and none.verdict == "nothing compared"
    assert any("no step group is on both sides" in n for n in none.notes)


MIRROR = {"slower": "faster", "faster": "slower", "only in A": "only in B", "only in B": "only in A"}
SWAP = {"only-A": "only-B", "only-B": "only-A"}


def mirrored(frame: pl.DataFrame, groups: dict[str, str]) -> pl.DataFrame:
    """A B-against-A table turned into the A-against-B one it must equal: the _a and _b columns swapped, the
    delta's sign flipped, slower/faster and only-in-A/B exchanged; delta_pct (relative to A) left out."""
    renames = {c: c[:-2] + ("_b" if c.endswith("_a") else "_a") for c in frame.columns if c[-2:] in ("_a", "_b")}
    out = frame.rename(renames).with_columns(
        -pl.col("delta_ms"),
        pl.col("verdict").replace(MIRROR),
        pl.col("group").replace(groups),
        *([pl.col("match").replace(SWAP)] if "match" in frame.columns else []),
    )
    return out.select(frame.columns)


def same_rows(a: pl.DataFrame, b: pl.DataFrame) -> None:
    keep = [c for c in a.columns if c != "delta_pct"]
    a, b = a.select(keep), b.select(keep)
    assert a.height == b.height
    assert a.sort(keep, nulls_last=True).to_dicts() == b.sort(keep, nulls_last=True).to_dicts()


@pytest.mark.parametrize("pair", ["graph-eager", "batch1-batch64"])
def test_swapping_the_sides_mirrors_every_row(tp2: Path, gaps: dict[str, Path], pair: str) -> None:
    """compare A B and compare B A: the same rows, opposite deltas, mirrored verdicts, the same number of changes.
    The real pairs are ones where the old rule (thresholds on A's value and A's step alone) was asymmetric: the
    2×H200 eager run against the CUDA-graph run (106 changes one way, 53 the other: the eager step is ~5× the
    graph step, so 0.5 % of it hid kernel deltas the other way round) and batch 1 against batch 64 of the
    single-H200 CUDA-graph run (26 against 19)."""
    if pair == "graph-eager":
        a, b = side("A", tp2, run="eager (TP2)"), side("B", tp2, run="graph")
        ra, rb = side("A", tp2, run="graph"), side("B", tp2, run="eager (TP2)")
        groups: dict[str, str] = {}
    else:
        a, b = side("A", gaps["graph"], batch=1), side("B", gaps["graph"], batch=64)
        ra, rb = side("A", gaps["graph"], batch=64), side("B", gaps["graph"], batch=1)
        groups = {"A batch=64 ↔ B batch=1": "A batch=1 ↔ B batch=64"}
    ab, ba = compare(a, b), compare(ra, rb)
    assert ab.groups == ba.groups >= 1
    assert len(ab.changes()) == len(ba.changes()) > 0
    for name in ("category", "kernel", "step", "comm"):
        same_rows(ab.section(name), mirrored(ba.section(name), groups))

    # the rule is exercised: some significant rows are below 0.5 % of one side's step and above it for the other,
    # or below 5 % of one side's value and not of the other's (read from the rows, not from compare's verdicts)
    def base_matters(frame: pl.DataFrame, step_a: dict[str, float], step_b: dict[str, float]) -> int:
        n = 0
        for r in frame.filter(pl.col("p_value") < 0.05).iter_rows(named=True):
            if r["ms_a"] is None or r["ms_b"] is None or r["delta_ms"] == 0:
                continue
            d = abs(r["delta_ms"])
            by_a = d < 0.05 * r["ms_a"] or d < 0.005 * step_a[r["group"]]
            by_b = d < 0.05 * r["ms_b"] or d < 0.005 * step_b[r["group"]]
            n += by_a != by_b
        return n

    walls = ab.steps.filter(pl.col("metric") == "wall mean")
    step_a = dict(zip(walls["group"], walls["ms_a"], strict=True))
    step_b = dict(zip(walls["group"], walls["ms_b"], strict=True))
    assert base_matters(ab.kernels, step_a, step_b) + base_matters(ab.categories, step_a, step_b) > 0


def capture_dir(root: Path, name: str, stats: dict[str, dict]) -> Path:
    """A `k25trace capture` directory built from the real single-H200 traces: level c1 holds the eager run, c64
    the CUDA-graph run, with the given request statistics per level."""
    cap = root / name
    levels = []
    for level, source in (("c1", GAPS / "eager"), ("c64", GAPS / "graph")):
        (cap / level).mkdir(parents=True)
        trace = next(source.glob("*.pt.trace.json.gz"))
        shutil.copy(trace, cap / level / trace.name)
        levels.append(
            {
                "name": level,
                "concurrency": int(level[1:]),
                "dir": level,
                "stats": stats[level],
                "files": [{"path": f"{level}/{trace.name}", "valid": True, "problem": None}],
            }
        )
    (cap / "manifest.json").write_text(json.dumps({"k25trace_capture": 1, "levels": levels}))
    return cap


def level_stats(tok_s: float, ttft: float, tpot: float) -> dict:
    return {
        "requests": 64,
        "errors": 0,
        "output_tokens": 8192,
        "duration_s": 8192 / tok_s,
        "output_tok_s": tok_s,
        "ttft_ms": {"p50": ttft, "p90": ttft * 1.5, "p99": ttft * 2},
        "tpot_ms": {"p50": tpot, "p90": tpot + 1, "p99": tpot + 2},
        "itl_ms": {"p50": tpot, "p90": tpot + 1, "p99": tpot + 3},
    }


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare-capture")
    before = capture_dir(root, "before", {"c1": level_stats(40.0, 30.0, 25.0), "c64": level_stats(900.0, 80.0, 60.0)})
    after = capture_dir(root, "after", {"c1": level_stats(50.0, 28.0, 20.0), "c64": level_stats(1000.0, 90.0, 55.0)})
    return {"before": load(root / "before.duckdb", before), "after": load(root / "after.duckdb", after)}


def test_two_levels_of_one_capture(captures: dict[str, Path]) -> None:
    result = compare(side("A", captures["before"], level="c1"), side("B", captures["before"], level="c64"))
    assert result.match == "side" and result.groups == 1
    assert result.categories["steps_a"][0] == result.categories["steps_b"][0] == 18  # 1/8/64 × 6 steps each
    idle = result.categories.filter(pl.col("category") == "idle").row(0, named=True)
    assert idle["verdict"] == "faster"  # c64 holds the CUDA-graph run
    macro = {r["metric"]: r for r in result.macro.iter_rows(named=True)}
    assert (macro["output tok/s"]["a"], macro["output tok/s"]["b"], macro["output tok/s"]["better"]) == (
        40.0,
        900.0,
        "B",
    )
    assert (macro["TTFT p50"]["a"], macro["TTFT p50"]["b"], macro["TTFT p50"]["better"]) == (30.0, 80.0, "A")
    assert macro["TPOT p99"]["delta"] == pytest.approx(35.0) and macro["TTFT p90"]["delta_pct"] == pytest.approx(166.67)
    assert any("aggregates" in n and "no test" in n for n in result.notes)
    with pytest.raises(K25Error, match="no capture level 'c8'.*c1, c64"):
        compare(side("A", captures["before"], level="c8"), side("B", captures["before"], level="c64"))


def test_two_captures_matched_by_level(captures: dict[str, Path]) -> None:
    result = compare(side("A", captures["before"]), side("B", captures["after"]), match="level")
    assert result.groups == 2 and set(result.categories["group"]) == {"c1", "c64"}
    # the same trace files on both sides: every delta is exactly 0
    assert result.verdict == "no change" and (result.categories["delta_ms"] == 0).all()
    macro = result.macro
    assert macro.height == 2 * 12 and set(zip(macro["level_a"], macro["level_b"], strict=True)) == {
        ("c1", "c1"),
        ("c64", "c64"),
    }
    tok = macro.filter((pl.col("metric") == "output tok/s") & (pl.col("level_a") == "c64")).row(0, named=True)
    assert (tok["a"], tok["b"], tok["delta"], tok["better"]) == (900.0, 1000.0, 100.0, "B")


def test_capture_figures_need_both_sides_from_capture(captures: dict[str, Path], gaps: dict[str, Path]) -> None:
    result = compare(side("A", captures["before"], level="c1"), side("B", gaps["eager"]))
    assert result.macro.is_empty()
    assert any("only A comes from `k25trace capture`" in n for n in result.notes)
    # the same eager trace on both sides (loaded as capture level c1 and as a plain directory): nothing changed
    assert result.verdict == "no change" and (result.categories["delta_ms"] == 0).all()


# ---------------------------------------------------------------------------------------------------- CLI


def k25(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("k25trace")
    cmd = [exe] if exe else [sys.executable, "-m", "k25trace"]
    return subprocess.run(
        [*cmd, *args], capture_output=True, text=True, timeout=600, env={**os.environ, "COLUMNS": "200"}
    )


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (quicker than :func:`k25` for many calls): exit status, stdout, stderr."""
    from click.testing import CliRunner

    from k25trace.cli import cli

    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return subprocess.CompletedProcess(args, result.exit_code, result.stdout, result.stderr)


def test_cli_formats_and_errors(captures: dict[str, Path], gaps: dict[str, Path]) -> None:
    base = ["compare", "--db", str(captures["before"]), "--a", "level=c1", "--b", "level=c64"]
    md = run_cli(*base, "--format", "markdown")
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("**Verdict: ") and "### Capture levels" in md.stdout and "| output tok/s |" in md.stdout
    assert "A: " in md.stderr and "[level=c1]" in md.stderr  # the sides are described on stderr
    table = run_cli(*base, "--format", "table", "--by", "macro")
    assert table.returncode == 0 and "TTFT p50" in table.stdout and table.stdout.startswith("Verdict: ")  # first
    kernels = json.loads(run_cli(*base, "--format", "json", "--by", "kernel").stdout)
    assert {r["match"] for r in kernels} >= {"exact", "only-A", "only-B"}
    bad = run_cli(*base, "--format", "csv", "--by", "all")
    assert bad.returncode == 1 and "CSV holds one table" in bad.stderr and bad.stdout == ""
    bad = run_cli("compare", "--db", str(captures["before"]), "--a", "level=c9", "--b", "level=c64")
    assert bad.returncode == 1 and "no capture level 'c9'" in bad.stderr
    assert run_cli("compare").returncode == 1
    three = run_cli("compare", "--db", str(gaps["eager"]), str(gaps["graph"]), str(gaps["eager"]))
    assert three.returncode == 1 and "two sides at most" in three.stderr
    # --db A plus one path B
    mixed = run_cli("compare", "--db", str(gaps["eager"]), str(gaps["graph"]), "--by", "step", "--format", "csv")
    assert mixed.returncode == 0 and "wall mean" in mixed.stdout
    assert re.search(r"verdict: \d+ changes", mixed.stderr)


def test_top_kernels_keeps_every_change() -> None:
    frame = pl.DataFrame(
        {
            "phase": ["decode"] * 5,
            "group": ["bs=1"] * 5,
            "verdict": ["within noise", "slower", "within noise", "only in B", "negligible"],
            "delta_ms": [0.5, 0.1, 0.4, 0.01, 0.3],
        }
    )
    kept, hidden = top_kernels(frame, 1)
    assert kept["verdict"].to_list() == ["within noise", "slower", "only in B"] and hidden == 2
    kept, hidden = top_kernels(frame, 0)
    assert kept is frame and hidden == 0


def test_synth_change_options(tmp_path: Path) -> None:
    """The generator's options for known changes: off by default (the files stay byte for byte the same), checked."""
    import gzip

    from k25trace.synth import parse_renames, parse_scales

    tiny = dict(ranks=1, batch_sizes=(2,), steps_per_batch=2, layers=2, prefill=False, empty_steps=0, seed=5)
    plain = synth.generate(tmp_path / "plain", **tiny)
    again = synth.generate(tmp_path / "again", **tiny, category_scale={}, kernel_rename={}, noise_seed=None)
    assert (tmp_path / "plain" / plain["ranks"][0]["file"]).read_bytes() == (
        tmp_path / "again" / again["ranks"][0]["file"]
    ).read_bytes()
    assert "noise_seed" not in plain["params"]
    other = synth.generate(tmp_path / "other", **tiny, noise_seed=1, kernel_rename={synth.K_ACT: NEW_ACT})
    for key in ("base_time_ns", "clock_offset_ns", "pid"):  # the same GPUs and clocks: another run
        assert other["ranks"][0][key] == plain["ranks"][0][key]
    assert other["per_rank_steps"] != plain["per_rank_steps"]
    assert other["params"]["noise_seed"] == 1 and other["kernel_categories"][NEW_ACT] == "activation"
    text = gzip.decompress((tmp_path / "other" / other["ranks"][0]["file"]).read_bytes()).decode()
    assert json.dumps(NEW_ACT) in text and json.dumps(synth.K_ACT) not in text
    for bad in (
        {"category_scale": {"attn": 1.2}},
        {"category_scale": {"attention": 0}},
        {"kernel_rename": {"no such kernel": "x"}},
        {"kernel_rename": {synth.K_ACT: synth.K_RMS}},
    ):
        with pytest.raises(ValueError):
            synth.generate(tmp_path / "bad", **tiny, **bad)
    assert parse_scales(["attention=1.2"]) == {"attention": 1.2}
    assert parse_renames(["act_and_mul_kernel=new"]) == {synth.K_ACT: "new"}
    import click

    with pytest.raises(click.BadParameter, match="exactly one"):
        parse_renames(["rms_norm=new"])  # in two of the generator's names
