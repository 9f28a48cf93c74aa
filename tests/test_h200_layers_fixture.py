"""The per-layer truth fixtures of issue 32 (tests/data/h200-layers, see PROVENANCE.md), checked as data.

One Kimi-shaped decode program (16 layers: layer 0 dense, 1-15 MoE, layer 5 routing to twice the experts) recorded
on one H200 twice per set: eager with ``record_function`` ranges ``pre`` / ``model.layers.{i}`` / ``post`` (the
truth) and as one CUDA graph per step (no annotation inside: what the segmentation must infer from). Two sets:
``marlin`` (the routed experts and the dense MLP as real Marlin W4A16 kernels, fp16) and ``bf16`` (the same
program with bf16 GEMMs and ``torch._grouped_mm`` routed experts).

Only json/gzip/re/statistics here, nothing of k25trace: a step's GPU activities are the kernels, memcpys and
memsets whose launching runtime call (same ``correlation``) starts inside the step marker's CPU range, in GPU start
order; in the eager trace an activity belongs to the annotation whose CPU range holds its launch. ``truth.json``
holds, per set and batch size, the segments as [start, end) indices into that sequence (``pre`` from 0, so the
token ids' HtoD copy launched before the ``pre`` annotation counts to ``pre``), which the tests below recompute.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import statistics
from functools import cache
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "data" / "h200-layers"
MARKER = re.compile(r"^execute_context_0\(0\)_generation_(\d+)\((\d+)\)$")
LAYER = re.compile(r"^model\.layers\.(\d+)$")
MARLIN = re.compile(r"marlin::Marlin<")  # ../shared/reference/vllm-profiling.md: Marlin dense W4A16
LAYERS, DENSE, ODD, BATCHES = 16, 0, 5, (1, 8, 64)
SETS = {"marlin": ("eager", "graph"), "bf16": ("bf16-eager", "bf16-graph")}
STEPS = {"eager": 4, "graph": 6}  # profiled steps per batch size
# what CUDA-graph replay renames (bf16 set only; the marlin set's graphs hold no memcpy/memset node):
# a DtoD copy node runs as a kernel "memcpy32_post", a memset node can be reported as "Memset (Unknown)"
GRAPH_RENAMES = {
    "Memcpy DtoD (Device -> Device)": {"memcpy32_post"},
    "Memset (Device)": {"Memset (Device)", "Memset (Unknown)"},
}
SEGMENTS = ["pre", *(f"model.layers.{i}" for i in range(LAYERS)), "post"]


@cache
def _trace(folder: str) -> dict:
    """Steps of one trace: [(batch, [GPU activity], [annotation label per activity] )] and the annotation order."""
    (path,) = sorted((FIXTURE / folder).glob("*.pt.trace.json.gz"))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    launch = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    gpu = sorted(
        (e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"),
        key=lambda e: e["ts"],
    )
    ann = sorted((e for e in events if e.get("cat") == "user_annotation"), key=lambda e: e["ts"])
    markers = [e for e in ann if MARKER.match(e["name"])]
    regions = [e for e in ann if e["name"] in ("pre", "post") or LAYER.match(e["name"])]
    starts = [e["ts"] for e in regions]
    steps = []
    for m in markers:
        lo, hi = m["ts"], m["ts"] + m["dur"]
        acts = [g for g in gpu if lo <= launch.get(g["args"].get("correlation"), -1) <= hi]
        labels = []
        for g in acts:
            t = launch[g["args"]["correlation"]]
            i = bisect.bisect_right(starts, t) - 1
            r = regions[i] if i >= 0 else None
            labels.append(r["name"] if r is not None and r["ts"] <= t <= r["ts"] + r["dur"] else None)
        names = [e["name"] for e in regions if lo <= e["ts"] and e["ts"] + e["dur"] <= hi]
        steps.append(
            {
                "batch": int(MARKER.match(m["name"]).group(1)),
                "acts": acts,
                "labels": labels,
                "regions": names,
                "launchers": {g["args"]["correlation"] for g in acts},
            }
        )
    return {"steps": steps, "events": events}


def _segments(step: dict) -> list[list]:
    """[name, start, end) per segment of one eager step: each annotation's activities, pre from 0 to layer 0."""
    labels = step["labels"]
    first = {}
    last = {}
    for i, lab in enumerate(labels):
        if lab is not None:
            first.setdefault(lab, i)
            last[lab] = i
    out = []
    for j, name in enumerate(SEGMENTS):
        start = 0 if name == "pre" else first[name]
        end = len(labels) if name == "post" else first[SEGMENTS[j + 1]]
        out.append([name, start, end])
    return out


@cache
def _truth() -> dict:
    return json.loads((FIXTURE / "truth.json").read_text())


def _us(acts: list) -> float:
    return sum(a["dur"] for a in acts)


@pytest.mark.parametrize("name", SETS)
def test_eager_steps_hold_every_layer_once_in_order(name):
    steps = _trace(SETS[name][0])["steps"]
    assert [s["batch"] for s in steps] == [b for b in BATCHES for _ in range(STEPS["eager"])]
    for s in steps:
        assert s["regions"] == SEGMENTS  # pre, model.layers.0 .. 15, post: exactly once each, in order
        assert sum(1 for r in s["regions"] if LAYER.match(r)) == LAYERS


@pytest.mark.parametrize("name", SETS)
def test_eager_layers_own_contiguous_non_empty_kernel_runs(name):
    for s in _trace(SETS[name][0])["steps"]:
        labels = s["labels"]
        # only the token ids' HtoD copy (launched in the step marker before "pre") has no annotation
        unlabelled = [a["name"] for a, lab in zip(s["acts"], labels, strict=True) if lab is None]
        assert unlabelled == ["Memcpy HtoD (Pinned -> Device)"]
        assert labels[0] is None
        order = [lab for i, lab in enumerate(labels[1:]) if lab != labels[i]]  # the labels' runs, in GPU order
        assert order == SEGMENTS  # every region's kernels are one contiguous run, none empty, in layer order
        for seg, start, end in _segments(s):
            kernels = [a for a in s["acts"][start:end] if a["cat"] == "kernel"]
            assert kernels, seg


@pytest.mark.parametrize("name", SETS)
def test_truth_json_matches_the_eager_trace(name):
    truth = _truth()
    assert truth["layers"] == LAYERS and truth["dense_layers"] == [DENSE] and truth["odd_layer"] == ODD
    summary = json.loads((FIXTURE / truth["sets"][name]["summary"]["eager"]).read_text())[0]
    assert summary["layer_kinds"] == truth["layer_kinds"] == ["dense"] + ["moe"] * (LAYERS - 1)
    assert summary["top_k_per_layer"] == truth["top_k_per_layer"]
    assert summary["top_k_per_layer"][ODD] == 2 * summary["top_k_per_layer"][ODD + 1] == 16
    assert summary["marlin"] is (name == "marlin") and summary["layer_annotations"] is True
    for s in _trace(SETS[name][0])["steps"]:
        want = truth["sets"][name]["batches"][str(s["batch"])]
        assert len(s["acts"]) == want["activities"]
        assert _segments(s) == want["segments"]


@pytest.mark.parametrize("name", SETS)
def test_odd_layer_does_clearly_more_kernel_time_than_the_median_moe_layer(name):
    for folder, mode in zip(SETS[name], ("eager", "graph"), strict=True):
        truth = _truth()["sets"][name]["batches"]
        for s in _trace(folder)["steps"]:
            segs = {n: s["acts"][a:b] for n, a, b in truth[str(s["batch"])]["segments"]}
            t = [_us(segs[f"model.layers.{i}"]) for i in range(LAYERS)]
            others = [t[i] for i in range(1, LAYERS) if i != ODD]
            assert t[ODD] > 1.15 * statistics.median(others) and t[ODD] > 1.1 * max(others), (mode, s["batch"], t)
            if name == "marlin":  # the same k experts for every token: the MoE layers' times barely spread
                assert t[ODD] - max(others) > 5 * (max(others) - min(others)), (mode, s["batch"], t)
                # the expert GEMMs themselves: twice the experts' int4 weights
                m = [
                    sum(a["dur"] for a in segs[f"model.layers.{i}"] if MARLIN.search(a["name"])) for i in range(LAYERS)
                ]
                assert m[ODD] > 1.6 * statistics.median(m[i] for i in range(1, LAYERS) if i != ODD), (mode, m)


@pytest.mark.parametrize("name", SETS)
def test_dense_layer_has_another_kernel_family(name):
    for s in _trace(SETS[name][0])["steps"]:
        segs = {n: s["acts"][a:b] for n, a, b in _segments(s)}
        routing = re.compile(r"topk|TopK|sigmoid")
        dense = [a["name"] for a in segs["model.layers.0"]]
        assert not any(routing.search(n) for n in dense)  # no router, no top-k, no experts
        for i in range(1, LAYERS):
            moe = [a["name"] for a in segs[f"model.layers.{i}"]]
            assert any("gatherTopK" in n for n in moe) and any("sigmoid" in n for n in moe), i
            assert len(moe) > len(dense)
        moe1 = [a["name"] for a in segs["model.layers.1"]]
        assert all([a["name"] for a in segs[f"model.layers.{i}"]] == moe1 for i in range(1, LAYERS) if i != ODD)


@pytest.mark.parametrize("name", SETS)
def test_graph_steps_replay_the_eager_kernel_sequence(name):
    eager, graph = (_trace(f)["steps"] for f in SETS[name])
    assert [s["batch"] for s in graph] == [b for b in BATCHES for _ in range(STEPS["graph"])]
    events = _trace(SETS[name][1])["events"]
    graph_launches = {
        e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch"
    }
    assert not any(
        e.get("cat") == "user_annotation" and (LAYER.match(e["name"]) or e["name"] in ("pre", "post")) for e in events
    )
    for b in BATCHES:
        want = [a["name"] for a in next(s for s in eager if s["batch"] == b)["acts"]]
        assert all([a["name"] for a in s["acts"]] == want for s in eager if s["batch"] == b)
        for s in (s for s in graph if s["batch"] == b):
            got = [a["name"] for a in s["acts"]]
            assert len(got) == len(want)
            if name == "marlin":
                assert got == want  # kernel for kernel, names unchanged
            else:
                diff = [(w, g) for w, g in zip(want, got, strict=True) if w != g]
                assert diff and all(g in GRAPH_RENAMES.get(w, ()) for w, g in diff), set(diff)
            # ONE cudaGraphLaunch per step: activities 1 .. k-1 (after the HtoD copy), which hold pre, every layer
            # and the start of post (the final norm); post's lm_head and argmax follow, launched eagerly
            idx = [i for i, a in enumerate(s["acts"]) if a["args"]["correlation"] in graph_launches]
            assert len({s["acts"][i]["args"]["correlation"] for i in idx}) == 1
            post = _truth()["sets"][name]["batches"][str(b)]["segments"][-1]
            assert idx == list(range(1, idx[-1] + 1)) and post[1] <= idx[-1] < post[2] - 1


def test_graph_kernels_carry_no_graph_node_ids():
    # Kineto of torch 2.11 / CUPTI 13.0 gives graph kernels no "graph id" / "graph node id" args: the only link to
    # the step is the correlation of the step's cudaGraphLaunch
    for name in SETS:
        acts = [a for s in _trace(SETS[name][1])["steps"] for a in s["acts"]]
        assert acts and not any(k in a["args"] for a in acts for k in ("graph id", "graph node id", "graphId"))


def test_marlin_kernels_are_in_every_expert_and_dense_mlp():
    for folder in SETS["marlin"]:
        names = {a["name"] for s in _trace(folder)["steps"] for a in s["acts"]}
        args = "(int4 const*, int4 const*, int4*, int4 const*, int, int, int, int*)"
        # m <= 16: thread_m_blocks 1, 128 x 128 tiles; m = 64: 4 m-blocks, 64 x 256 tiles; group size 128 (8 blocks)
        assert {n for n in names if MARLIN.search(n)} == {
            f"void marlin::Marlin<256, 1, 8, 8, 4, 8>{args}",
            f"void marlin::Marlin<256, 4, 16, 4, 4, 8>{args}",
        }
    for s in _trace(SETS["marlin"][0])["steps"]:
        for seg, a, b in _segments(s):
            n = sum(1 for x in s["acts"][a:b] if MARLIN.search(x["name"]))
            assert n == (2 if LAYER.match(seg) else 0), seg  # w13 and w2 (gate_up and down in the dense layer)
    for s in _trace(SETS["bf16"][0])["steps"]:
        assert not any(MARLIN.search(a["name"]) for a in s["acts"])
