"""Tests of the synthetic Kimi-K2.5 TP-N trace generator (k25trace/synth/) against its own ground truth.

Everything is re-derived from the written JSON, independently of the generator's internals: steps by the
launch rule (correlation -> runtime call -> latest step annotation started at or before it), categories by a
small regex classifier written here (the substrings that identify each kernel family in vLLM traces, first
match wins; independent of queries/kernel_rules.csv).
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
import subprocess
import sys
from bisect import bisect_right
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from k25trace.errors import K25Error
from k25trace.synth import Config, SynthError, command, generate, parse_delay, write_traces

OFFSETS_US = [0.0, 1500.0, -2300.0, 700.0]
DELAY_RANK, DELAY_US, DELAY_STEP = 2, 150.0, 3
RANKS = 4
LAYERS = 4

# independent classifier: first match wins; all-reduce before other NCCL kernels, specific kernel families before
# the generic gemm (nvjet/xmma/gemm) and at::native patterns
_RULES = [
    ("allreduce", r"ncclDevKernel_AllReduce|cross_device_reduce_[12]stage"),
    ("comm_other", r"ncclDevKernel_"),
    ("marlin_gemm", r"marlin_moe_wna16::Marlin<|marlin::Marlin<"),
    ("attention", r"flash_fwd_splitkv_mla|flash_fwd_mla_combine|get_mla_metadata_kernel|flash::|concat_and_cache"),
    ("moe_routing", r"vllm::moe::"),
    ("norm", r"rms_norm"),
    ("rotary", r"rotary"),
    ("activation", r"act_and_mul_kernel"),
    ("sampling", r"cunn_SoftMaxForward|gatherTopK|distribution_elementwise_grid_stride_kernel|ArgMaxOps"),
    ("gemm", r"nvjet|xmma|gemm"),
    ("elementwise", r"at::native::"),
]


def classify(ev: dict) -> str:
    if ev["cat"] == "gpu_memcpy":
        return "memcpy"
    if ev["cat"] == "gpu_memset":
        return "memset"
    for cat, pat in _RULES:
        if re.search(pat, ev["name"]):
            return cat
    return "other"


def ns(x: float) -> int:
    return round(x * 1000)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth")
    truth = generate(
        out,
        ranks=RANKS,
        batch_sizes=(1, 32),
        steps_per_batch=3,
        layers=LAYERS,
        prefill=True,
        empty_steps=1,
        delays=[(DELAY_RANK, DELAY_US, [DELAY_STEP])],
        clock_offsets_us=OFFSETS_US,
        seed=3,
    )
    docs = []
    texts = []
    for ri in truth["ranks"]:
        raw = gzip.decompress((out / ri["file"]).read_bytes())
        texts.append(raw.decode())
        docs.append(orjson.loads(raw))
    return out, truth, docs, texts


def _by_step(doc: dict, n_steps: int):
    """Assign GPU activities to steps by launch; returns (steps annotations, per-step GPU events, runtime map)."""
    ev = doc["traceEvents"]
    anns = sorted(
        (e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")), key=lambda e: e["ts"]
    )
    assert len(anns) == n_steps
    starts = [a["ts"] for a in anns]
    rt = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    per_step = [[] for _ in anns]
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            launch = rt[e["args"]["correlation"]]
            i = bisect_right(starts, launch["ts"]) - 1
            assert i >= 0
            per_step[i].append(e)
    return anns, per_step, rt


def test_files_layout_and_metadata(synth):
    out, truth, docs, texts = synth
    assert sorted(p.name for p in out.iterdir()) == sorted([ri["file"] for ri in truth["ranks"]] + ["truth.json"])
    for r, (ri, doc, text) in enumerate(zip(truth["ranks"], docs, texts, strict=True)):
        assert re.fullmatch(rf"dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}\.\d{{19}}\.pt\.trace\.json\.gz", ri["file"])
        # byte-identical to a 4-space pretty print (the layout of the real vLLM trace): one key per line
        assert text == json.dumps(json.loads(text), indent=4)
        keys = list(doc)
        assert keys[:2] == ["schemaVersion", "deviceProperties"] and keys[-2:] == ["traceEvents", "traceName"]
        assert keys.index("distributedInfo") < keys.index("vllm_version") < keys.index("traceEvents")
        assert doc["baseTimeNanoseconds"] == ri["base_time_ns"]
        di = doc["distributedInfo"]
        assert (di["backend"], di["rank"], di["world_size"]) == ("nccl", r, RANKS)
        assert {"pg_count", "nccl_version"} <= set(di)
        assert len(doc["deviceProperties"]) == RANKS
        kinds = {(e["ph"], e.get("cat")) for e in doc["traceEvents"]}
        for k in [
            ("X", "kernel"),
            ("X", "cuda_runtime"),
            ("X", "user_annotation"),
            ("X", "gpu_user_annotation"),
            ("X", "cpu_op"),
            ("X", "python_function"),
            ("X", "gpu_memcpy"),
            ("X", "gpu_memset"),
            ("s", "ac2g"),
            ("f", "ac2g"),
        ]:
            assert k in kinds, k
        kern = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
        assert kern["pid"] == r and kern["tid"] == kern["args"]["stream"]
        assert {
            "External id",
            "queued",
            "device",
            "context",
            "stream",
            "correlation",
            "registers per thread",
            "shared memory",
            "blocks per SM",
            "warps per SM",
            "grid",
            "block",
            "est. achieved occupancy %",
        } <= set(kern["args"])
        ar = next(e for e in doc["traceEvents"] if e.get("name", "").startswith("ncclDevKernel_AllReduce"))
        assert ar["args"]["Group size"] == RANKS and ar["args"]["Collective name"] == "allreduce"
        assert ar["args"]["Process Group Ranks"] == str(list(range(RANKS)))
        assert ar["args"]["In msg nelems"] == ar["args"]["Out msg nelems"]
        # ts/dur are whole ns
        for e in doc["traceEvents"][:5000]:
            if "ts" in e:
                assert abs(e["ts"] * 1000 - ns(e["ts"])) < 1e-3


def test_step_sequence_and_graph_correlation(synth):
    _, truth, docs, _ = synth
    steps = truth["steps"]
    names = [s["name"] for s in steps]
    assert names[0] == "execute_context_1(512)_generation_0(0)"
    assert names.count("execute_context_0(0)_generation_32(32)") == 3
    assert names.count("execute_context_0(0)_generation_0(0)") == 2
    for doc in docs:
        anns, per_step, rt = _by_step(doc, len(steps))
        assert [a["name"] for a in anns] == names  # same step sequence on every rank
        for st, gpu, ann in zip(steps, per_step, anns, strict=True):
            launches = [
                e
                for e in doc["traceEvents"]
                if e.get("cat") == "cuda_runtime"
                and e["name"] == "cudaGraphLaunch"
                and ann["ts"] <= e["ts"] <= ann["ts"] + ann["dur"]
            ]
            if st["phase"] == "empty":
                assert not gpu and not launches
                continue
            if st["phase"] == "decode":
                assert len(launches) == 1
                corr = launches[0]["args"]["correlation"]
                graph_k = [e for e in gpu if e["args"]["correlation"] == corr]
                # 1 + 2 per layer all-reduces, all inside the one graph; hundreds of kernels for 4 layers
                assert len(graph_k) > 20 * LAYERS
                assert sum("AllReduce" in e["name"] for e in graph_k) == 1 + 2 * LAYERS
                # nothing else (no cpu_op, no other runtime call) carries the graph's correlation
                assert (
                    sum(
                        e.get("args", {}).get("correlation") == corr
                        for e in doc["traceEvents"]
                        if e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy")
                    )
                    == 1
                )
                eager = [e for e in gpu if e["args"]["correlation"] != corr]
                assert {rt[e["args"]["correlation"]]["name"] for e in eager} <= {
                    "cudaLaunchKernel",
                    "cudaMemcpyAsync",
                    "cudaLaunchKernelExC",
                }
            else:
                assert st["graph"] == "PIECEWISE" and len(launches) == LAYERS + 1 == st["graph_launches"]


def test_sampling_launched_after_annotation(synth):
    _, truth, docs, _ = synth
    for doc in docs:
        anns, per_step, rt = _by_step(doc, len(truth["steps"]))
        for i, (ann, gpu) in enumerate(zip(anns, per_step, strict=True)):
            samp = [e for e in gpu if classify(e) == "sampling"]
            if truth["steps"][i]["phase"] == "empty":
                continue
            assert len(samp) == 4
            for e in samp:
                launch = rt[e["args"]["correlation"]]
                assert launch["name"] == "cudaLaunchKernel"
                assert launch["ts"] > ann["ts"] + ann["dur"]
                if i + 1 < len(anns):
                    assert launch["ts"] + launch["dur"] < anns[i + 1]["ts"]
            d2h = [e for e in gpu if e["name"].startswith("Memcpy DtoH")]
            assert len(d2h) == 1 and d2h[0]["tid"] != samp[0]["tid"]


def test_truth_matches_written_events(synth):
    _, truth, docs, _ = synth
    assert set(truth["kernel_categories"].values()) <= set(truth["categories"])
    for r, doc in enumerate(docs):
        base = doc["baseTimeNanoseconds"]
        anns, per_step, _ = _by_step(doc, len(truth["steps"]))
        for i, gpu in enumerate(per_step):
            t = truth["per_rank_steps"][r][i]
            cats = {c: {"ns": 0, "count": 0} for c in truth["categories"]}
            ivs = []
            for e in gpu:
                c = classify(e)
                assert c == truth["kernel_categories"][e["name"]], e["name"]
                cats[c]["ns"] += ns(e["dur"])
                cats[c]["count"] += 1
                ivs.append((base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"])))
            assert cats == t["categories"]
            assert sum(e["cat"] == "kernel" for e in gpu) == t["kernel_count"]
            assert base + ns(anns[i]["ts"]) == t["annotation_start_ns"]
            if not ivs:
                assert t["gpu_start_ns"] is None and t["busy_ns"] == 0
                continue
            assert min(s for s, _ in ivs) == t["gpu_start_ns"]
            assert max(e for _, e in ivs) == t["gpu_end_ns"]
            ivs.sort()
            busy, (cs, ce) = 0, ivs[0]
            for s, e in ivs[1:]:
                if s > ce:
                    busy, cs, ce = busy + ce - cs, s, e
                else:
                    ce = max(ce, e)
            busy += ce - cs
            assert busy == t["busy_ns"]
            assert busy < sum(v["ns"] for v in cats.values())  # aux-stream shared expert overlaps


def _collectives(doc: dict, n_steps: int) -> list[list[dict]]:
    _, per_step, _ = _by_step(doc, n_steps)
    return [
        sorted((e for e in gpu if e["name"].startswith("ncclDevKernel_")), key=lambda e: e["ts"]) for gpu in per_step
    ]


def test_collectives_end_together_in_offset_free_time(synth):
    _, truth, docs, _ = synth
    n = len(truth["steps"])
    per_rank = [_collectives(doc, n) for doc in docs]
    offs = [ri["clock_offset_ns"] for ri in truth["ranks"]]
    assert offs == [round(o * 1000) for o in OFFSETS_US]
    tc = iter(truth["collectives"])
    n_checked = 0
    for i in range(n):
        counts = {len(per_rank[r][i]) for r in range(RANKS)}
        assert len(counts) == 1
        for k in range(counts.pop()):
            evs = [per_rank[r][i][k] for r in range(RANKS)]
            assert len({e["name"] for e in evs}) == 1
            abs_end = [docs[r]["baseTimeNanoseconds"] + ns(e["ts"]) + ns(e["dur"]) for r, e in enumerate(evs)]
            true_end = [abs_end[r] - offs[r] for r in range(RANKS)]
            assert len(set(true_end)) == 1
            # recorded absolute ends differ exactly by the clock offsets
            assert [a - abs_end[0] for a in abs_end] == [o - offs[0] for o in offs]
            t = next(tc)
            assert (t["step"], t["k"]) == (i, k) and t["end_true_ns"] == true_end[0]
            starts = [docs[r]["baseTimeNanoseconds"] + ns(e["ts"]) - offs[r] for r, e in enumerate(evs)]
            assert t["wait_ns"] == [max(starts) - s for s in starts]
            assert all(ns(e["dur"]) == t["transfer_ns"] + t["wait_ns"][r] for r, e in enumerate(evs))
            n_checked += 1
    assert n_checked == len(truth["collectives"]) > 0


def test_injected_delay_shows_as_waits(synth):
    _, truth, _, _ = synth
    d = DELAY_US * 1000
    assert truth["delays"] == [
        {"rank": DELAY_RANK, "delay_ns": d, "steps": [DELAY_STEP], "ordinals": None, "every": None}
    ]
    in_step = [c for c in truth["collectives"] if c["step"] == DELAY_STEP]
    other = [c for c in truth["collectives"] if c["step"] in (DELAY_STEP - 1, DELAY_STEP + 1)]
    assert len(in_step) == 1 + 2 * LAYERS + 1
    for c in in_step:
        assert c["late_rank"] == DELAY_RANK and c["wait_ns"][DELAY_RANK] == 0
        assert c["delay_ns"][DELAY_RANK] == d
        for r in range(RANKS):
            # after the first all-reduce the ranks are in lockstep, so natural skew is kernel jitter only; the
            # first one (k=0) and the eager logits all-gather also carry CPU launch skew (tens of µs)
            if r != DELAY_RANK and c["category"] == "allreduce" and c["k"] > 0:
                assert 0.8 * d < c["wait_ns"][r] < 1.3 * d
    waits_in = [c["wait_ns"][r] for c in in_step for r in range(RANKS) if r != DELAY_RANK]
    waits_out = [c["wait_ns"][r] for c in other for r in range(RANKS) if r != DELAY_RANK]
    assert abs(statistics.median(waits_in) - statistics.median(waits_out) - d) < 0.15 * d
    assert all(c["delay_ns"] == [0] * RANKS for c in other)


def test_padding_reaches_target_size(tmp_path):
    truth = generate(tmp_path, ranks=2, batch_sizes=(1, 16), steps_per_batch=3, layers=3, target_gz_mb=2.0, seed=5)
    for ri in truth["ranks"]:
        size = (tmp_path / ri["file"]).stat().st_size
        assert abs(size - 2_000_000) < 0.10 * 2_000_000, size
        doc = orjson.loads(gzip.decompress((tmp_path / ri["file"]).read_bytes()))
        cats = [e.get("cat") for e in doc["traceEvents"]]
        assert cats.count("python_function") / len(cats) > 0.5
        assert len(cats) == ri["events"]
    # padding does not change the GPU truth
    plain = generate(tmp_path / "plain", ranks=2, batch_sizes=(1, 16), steps_per_batch=3, layers=3, seed=5)
    assert plain["per_rank_steps"] == truth["per_rank_steps"]
    assert plain["collectives"] == truth["collectives"]


def test_uncompressed_custom_allreduce_and_every_kth_delay(tmp_path):
    truth = generate(
        tmp_path,
        ranks=2,
        batch_sizes=(4,),
        steps_per_batch=2,
        layers=2,
        prefill=False,
        empty_steps=0,
        gzip=False,
        allreduce="custom",
        delays=[(1, 80.0, None, None, 2)],
        seed=9,
    )
    files = [tmp_path / ri["file"] for ri in truth["ranks"]]
    assert all(f.name.endswith(".pt.trace.json") for f in files)
    doc = orjson.loads(files[0].read_bytes())
    assert any("cross_device_reduce_1stage" in e.get("name", "") for e in doc["traceEvents"])
    for c in truth["collectives"]:
        if c["k"] == 0:  # first collective of a step also carries CPU launch skew
            continue
        assert (c["late_rank"] == 1 and c["wait_ns"][0] > 60_000) == (c["k"] % 2 == 0), c


def test_cli_and_delay_parser(tmp_path):
    d = parse_delay("3:250:2,5-7:%4")
    assert (d.rank, d.delay_us, sorted(d.steps), d.every) == (3, 250.0, [2, 5, 6, 7], 4)
    assert parse_delay("1:10").steps is None
    res = CliRunner().invoke(
        command,
        [
            "--out",
            str(tmp_path),
            "--ranks",
            "2",
            "--batch-sizes",
            "2",
            "--steps",
            "2",
            "--layers",
            "2",
            "--no-prefill",
            "--delay",
            "1:50:1",
            "--clock-offset-us",
            "0,-400",
            "--seed",
            "4",
        ],
    )
    assert res.exit_code == 0, res.output
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert [ri["clock_offset_ns"] for ri in truth["ranks"]] == [0, -400_000]
    assert len(list(tmp_path.glob("*.pt.trace.json.gz"))) == 2
    assert all(c["late_rank"] == 1 for c in truth["collectives"] if c["step"] == 1)
    bad = CliRunner().invoke(command, ["--out", str(tmp_path), "--delay", "x"])
    assert bad.exit_code != 0


def test_deterministic(tmp_path):
    kw = dict(ranks=2, batch_sizes=(2,), steps_per_batch=2, layers=2, seed=11)
    a = generate(tmp_path / "a", **kw)
    b = generate(tmp_path / "b", **kw)
    assert a["per_rank_steps"] == b["per_rank_steps"] and a["collectives"] == b["collectives"]
    fa = sorted(Path(tmp_path / "a").glob("*.gz"))[0]
    fb = sorted(Path(tmp_path / "b").glob("*.gz"))[0]
    assert gzip.decompress(fa.read_bytes()) == gzip.decompress(fb.read_bytes())


def test_config_once_and_errors(tmp_path):
    """generate(**keywords) is write_traces(Config(**keywords)); bad options are K25Errors naming the option."""
    kw = dict(ranks=2, batch_sizes=(2,), steps_per_batch=1, layers=1, prefill=False, empty_steps=0, seed=2)
    a = generate(tmp_path / "a", **kw)
    b = write_traces(tmp_path / "b", Config(**kw))
    assert a["params"] == b["params"] and a["per_rank_steps"] == b["per_rank_steps"]
    assert list(a["params"])[:3] == ["ranks", "batch_sizes", "steps_per_batch"] and "workers" not in a["params"]
    for bad, what in (
        ({"allreduce": "ring"}, "allreduce"),
        ({"clock_offsets_us": [0.0]}, "clock_offsets_us"),
        ({"delays": [(5, 10.0)]}, "delay rank"),
        ({"category_scale": {"attn": 2.0}}, "category_scale"),
        ({"kernel_rename": {"nope": "x"}}, "kernel_rename"),
    ):
        with pytest.raises(SynthError, match=what) as info:
            generate(tmp_path / "bad", **{**kw, **bad})
        assert isinstance(info.value, K25Error)
    with pytest.raises(TypeError):
        generate(tmp_path / "bad", no_such_option=1)
    assert not (tmp_path / "bad").exists()
    res = CliRunner().invoke(command, ["--out", str(tmp_path / "cli"), "--scale", "attn=2"])
    assert res.exit_code != 0


def test_decode_loop_imports_torch_only_when_run():
    code = "import sys, k25trace.synth.decode_loop as d; assert 'torch' not in sys.modules; print(d.command.name)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "decode-loop", r.stderr


def test_decode_loop_smoke_on_cpu(tmp_path):
    """The GPU workload generator end to end on the CPU (gloo, eager, a tiny model): one trace, the step markers,
    the injections it reports."""
    pytest.importorskip("torch")
    tiny = [
        "--device",
        "cpu",
        "--world-size",
        "1",
        "--hidden",
        "128",
        "--heads",
        "4",
        "--q-lora-rank",
        "32",
        "--kv-lora-rank",
        "32",
        "--rope-dim",
        "16",
        "--nope-dim",
        "16",
        "--v-dim",
        "16",
        "--experts",
        "4",
        "--top-k",
        "2",
        "--moe-intermediate",
        "32",
        "--vocab",
        "256",
        "--context",
        "16",
        "--layers",
        "2",
        "--batch-sizes",
        "1,2",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--delay-rank",
        "0",
        "--delay-ms",
        "0.1",
        "--delay-every",
        "2",
        "--inject-gaps",
        "--master-port",
        "29561",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "k25trace.synth.decode_loop", "--out", str(tmp_path), *tiny],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (summary,) = json.loads(r.stdout)
    assert (summary["rank"], summary["world_size"], summary["mode"]) == (0, 1, "eager")
    assert summary["cpu_delayed_steps"] == [0, 2, 4] and summary["host_sleep_steps"] == [1, 4]
    assert summary["blocking_copy_steps"] == [2, 5]
    (trace,) = tmp_path.glob("dp0_pp0_tp0_dcp0_ep0_rank0.*.pt.trace.json.gz")
    assert summary["files"] == [trace.name]
    doc = orjson.loads(gzip.decompress(trace.read_bytes()))
    markers = [
        e["name"]
        for e in doc["traceEvents"]
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_context_0(0)_generation_")
    ]
    assert markers == ["execute_context_0(0)_generation_1(1)"] * 3 + ["execute_context_0(0)_generation_2(2)"] * 3
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "k25trace.synth.decode_loop",
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--world-size",
            "1",
            "--delay-rank",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "--delay-rank 3 is not a rank of 1" in bad.stderr
