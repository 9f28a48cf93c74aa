"""Layer segmentation (k25trace.layers, queries/layers_*.sql) against the raw JSON of real GPU traces.

The truth is read here from the trace files with json + Decimal alone: each step's GPU activities (kernels,
memcpys, memsets) are those whose launching runtime call (args.correlation) starts in the step's window (from its
``execute_…`` marker to the next marker; the last one to its end plus its length, at least 5 ms), in GPU start
order; their names, exact ns starts and ends, and the positions of the all-reduces. What a layer launches is the
decode loop's (k25trace/synth/decode_loop.py docstring): RMSNorm (one ``vectorized_layer_norm_kernel``), attention,
o_proj, [its all-reduce], the residual add, RMSNorm, MoE (router, top-8, experts, shared expert), [the second
all-reduce], the residual add; the embedding (and its all-reduce) before the first layer; the final norm, lm_head,
(all-gather,) argmax and the next tokens' copy after the last.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from k25trace import db, layers, pipeline

DATA = Path(__file__).parent / "data"
TP2 = DATA / "h200x2-decode-loop"
GAPS = DATA / "h200-gaps"
LAYERS = DATA / "h200-layers"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
MARKER = re.compile(r"^execute_")
NORM = "vectorized_layer_norm_kernel"
ADD = "CUDAFunctor_add"
AR = "AllReduce"


def _ns(v) -> int:
    return int((Decimal(v) * 1000).to_integral_value())


def raw_steps(path: Path) -> list[dict]:
    """Per step (marker order): the activities in GPU order as (start_ns, end_ns, event index, name)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh, parse_float=Decimal)
    base = int(trace.get("baseTimeNanoseconds", 0))
    events = trace["traceEvents"]
    launch = {}
    markers = []
    for e in events:
        cat = e.get("cat")
        if cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            c = e["args"]["correlation"]
            launch[c] = min(launch.get(c, 1 << 62), base + _ns(e["ts"]))
        elif cat == "user_annotation" and MARKER.match(e.get("name", "")):
            markers.append((base + _ns(e["ts"]), base + _ns(e["ts"]) + _ns(e["dur"])))
    markers.sort()
    windows = []
    for i, (s, end) in enumerate(markers):
        windows.append((s, markers[i + 1][0] if i + 1 < len(markers) else end + max(end - s, 5_000_000)))
    steps: list[list] = [[] for _ in markers]
    for idx, e in enumerate(events):
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or "ts" not in e:
            continue
        t = launch.get(e.get("args", {}).get("correlation"))
        for k, (s, end) in enumerate(windows):
            if t is not None and s <= t < end:
                start = base + _ns(e["ts"])
                steps[k].append((start, start + _ns(e["dur"]), idx, e["name"]))
                break
    return [{"acts": sorted(acts)} for acts in steps]


def _load(tmp: Path, *paths: Path) -> object:
    con = db.connect(tmp / "t.duckdb")
    results, _ = pipeline.load_paths(con, list(paths))
    assert all(r.status == "loaded" for r in results), [r.message for r in results]
    return con


def _segments(con, trace_id: int) -> dict[int, list[dict]]:
    rows = con.execute(
        "select * from step_layers where trace_id = ? order by step_index, segment_index", [trace_id]
    ).fetchall()
    cols = [d[0] for d in con.description]
    out: dict[int, list[dict]] = {}
    for r in rows:
        d = dict(zip(cols, r, strict=True))
        out.setdefault(d["step_index"], []).append(d)
    return out


def _trace_ids(con) -> dict[str, int]:
    return {path: tid for tid, path in con.execute("select trace_id, path from traces").fetchall()}


def check_exact(con, trace_id: int, raw: list[dict]) -> None:
    """Every activity in exactly one segment; segments tile the step to the ns; sums equal the step's."""
    segs = _segments(con, trace_id)
    assert sorted(segs) == list(range(len(raw)))
    for k, step in enumerate(raw):
        acts, rows = step["acts"], segs[k]
        assert [r["segment_index"] for r in rows] == list(range(len(rows)))
        pos = 0
        for r in rows:  # contiguous runs covering every activity once, in order
            assert r["first_pos"] == pos
            if r["kernel_count"]:
                assert r["first_event_id"] == acts[pos][2]
                assert r["start_ns"] == (acts[0][0] if r["segment_index"] == 0 else acts[pos][0])
                assert r["kernel_ns"] == sum(a[1] - a[0] for a in acts[pos : pos + r["kernel_count"]])
            pos += r["kernel_count"]
        assert pos == len(acts)
        assert rows[0]["start_ns"] == acts[0][0] and rows[-1]["end_ns"] == max(a[1] for a in acts)
        assert all(a["end_ns"] == b["start_ns"] for a, b in zip(rows, rows[1:], strict=False))
        assert sum(r["wall_ns"] for r in rows) == max(a[1] for a in acts) - acts[0][0]
    # busy, idle, overlap and each category's exclusive time add up to the step's exactly
    bad = con.execute(
        """
        with l as (select step_index, sum(wall_ns) w, sum(busy_ns) b, sum(idle_ns) i, sum(overlap_ns) o,
                          sum(kernel_count) k, sum(kernel_ns) kn from step_layers where trace_id = $t group by all)
        select count(*) from l join steps s on s.trace_id = $t and s.step_index = l.step_index
        where l.w != s.wall_ns or l.b != s.busy_ns or l.i != s.idle_ns or l.o != s.overlap_ns
            or l.k != s.kernel_count or l.kn != s.kernel_ns""",
        {"t": trace_id},
    ).fetchone()[0]
    assert bad == 0
    bad = con.execute(
        """
        with c as (select step_index, category, sum(busy_ns) b, sum(kernel_ns) kn, sum(kernel_count) k
                   from step_layer_categories where trace_id = $t group by all)
        select count(*) from c full join (select * from step_categories where trace_id = $t) s
            using (step_index, category)
        where c.b is distinct from s.busy_ns or c.kn is distinct from s.kernel_ns or c.k is distinct from s.kernel_count
        """,
        {"t": trace_id},
    ).fetchone()[0]
    assert bad == 0


def check_structure(
    con, trace_id: int, raw: list[dict], n_layers: int, tp: bool, copies: frozenset[int] = frozenset()
) -> None:
    """The decode loop's layers: each starts with its RMSNorm right after the previous layer's residual add (TP:
    right after that layer's second all-reduce and its add); layer k holds all-reduces 1 + 2k and 2 + 2k of the
    step, the pre the embedding's (0). ``copies``: steps with the injected blocking copy before layer
    n_layers // 2 (a copy kernel and a DtoH copy launched between two layers: they end the layer before)."""
    for k, rows in _segments(con, trace_id).items():
        acts = raw[k]["acts"]
        names = [a[3] for a in acts]
        assert [r["evidence"] for r in rows] == ["sequence"] * len(rows)
        assert [r["label"] for r in rows] == ["pre", *map(str, range(n_layers)), "post"]
        ar = [i for i, n in enumerate(names) if AR in n]
        assert len(ar) == (2 * n_layers + 1 if tp else 0)
        for r in rows[1:-1]:
            s, e = r["first_pos"], r["first_pos"] + r["kernel_count"]
            if k in copies and r["layer"] == n_layers // 2 - 1:
                assert names[e - 1].startswith("Memcpy DtoH") and ADD in names[e - 3]
            else:
                assert NORM in names[s] and ADD in names[e - 1]
            assert r["kind"] == "moe" and any("gatherTopK" in n for n in names[s:e])
            if tp:
                layer = r["layer"]
                assert [i for i in ar if s <= i < e] == [ar[1 + 2 * layer], ar[2 + 2 * layer]]
                assert AR in names[e - 2] and r["collectives"] == 2
        pre, post = rows[0], rows[-1]
        last = names[pre["kernel_count"] - 1]  # the embedding's all-reduce (TP), else its gather/index kernel
        assert names[0].startswith("Memcpy HtoD") and (AR in last if tp else ("index" in last or "gather" in last))
        assert [i for i in ar if i < pre["kernel_count"]] == ([ar[0]] if tp else [])
        assert NORM in names[post["first_pos"]] and names[-1].startswith("Memcpy DtoH")
        assert any("ArgMax" in n for n in names[post["first_pos"] :])


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    con = _load(tmp_path_factory.mktemp("layers_tp2"), TP2 / "eager", TP2 / "graph")
    yield con
    con.close()


@pytest.mark.parametrize(("mode", "n_layers"), [("eager", 8), ("graph", 61)])
def test_tp2_layers_at_the_collectives(tp2, mode: str, n_layers: int) -> None:
    ids = _trace_ids(tp2)
    files = sorted((TP2 / mode).glob("*.pt.trace.json.gz"))
    assert len(files) == 2
    for f in files:
        raw = raw_steps(f)
        assert len(raw) == (9 if mode == "eager" else 18)
        tid = ids[str(f.resolve())]
        check_exact(tp2, tid, raw)
        check_structure(tp2, tid, raw, n_layers, tp=True)


def test_tp2_spin_kernel_stays_in_its_layer(tp2) -> None:
    """Rank 0 of the graph run spins before all-reduce call site 9 (layer 4's attention all-reduce) on steps 1, 4,
    7, …: that layer holds the one extra kernel; the other layers keep the usual count."""
    runs = json.loads((TP2 / "decode_loop_graph.json").read_text())
    spun = set(runs[0]["gpu_delayed_steps"])
    layer = (runs[0]["gpu_delay_site"] - 1) // 2
    f = sorted((TP2 / "graph").glob("*.pt.trace.json.gz"))[0]
    for k, rows in _segments(tp2, _trace_ids(tp2)[str(f.resolve())]).items():
        counts = [r["kernel_count"] for r in rows[1:-1]]
        usual = max(set(counts), key=counts.count)
        assert [i for i, c in enumerate(counts) if c != usual] == ([layer] if k in spun else [])
        if k in spun:
            assert counts[layer] == usual + 1


def test_tp2_late_rank_per_layer(tp2) -> None:
    """layer_lateness maps every late collective to one segment: the counts per rank add up to collective_causes."""
    frame = layers.layer_lateness(tp2, phase="all")
    total = tp2.execute("select count(*) from collective_causes").fetchone()[0]
    assert frame["late_collectives"].sum() == total > 0
    assert set(frame["segment"].to_list()) <= {"pre", "post", *map(str, range(61))}


@pytest.fixture(scope="module")
def gaps(tmp_path_factory):
    con = _load(tmp_path_factory.mktemp("layers_gaps"), GAPS / "eager", GAPS / "graph")
    yield con
    con.close()


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_world_size_1_periodic_sequence(gaps, mode: str) -> None:
    """One H200, no collectives: the layers come from the repeating kernel sequence alone."""
    (f,) = sorted((GAPS / mode).glob("*.pt.trace.json.gz"))
    raw = raw_steps(f)
    tid = _trace_ids(gaps)[str(f.resolve())]
    check_exact(gaps, tid, raw)
    summary = json.loads((GAPS / f"decode_loop_gaps_{mode}.json").read_text())[0]
    check_structure(gaps, tid, raw, 8, tp=False, copies=frozenset(summary.get("blocking_copy_steps", [])))


# ------------------------------------------------------------------------------ h200-layers: eager truth, graph twin

TRUTH = LAYERS / "truth.json"
SETS = {"marlin": ("eager", "graph"), "bf16": ("bf16-eager", "bf16-graph")}
RENAMES = {"memcpy32_post": "Memcpy DtoD (Device -> Device)", "Memset (Unknown)": "Memset (Device)"}


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    if not TRUTH.exists():
        pytest.skip("tests/data/h200-layers is not there")
    dirs = [LAYERS / d for pair in SETS.values() for d in pair]
    con = _load(tmp_path_factory.mktemp("layers_twins"), *dirs)
    yield con
    con.close()


@pytest.mark.parametrize("kit", sorted(SETS))
def test_graph_twin_matches_eager_annotations_kernel_for_kernel(twins, kit: str) -> None:
    truth = json.loads(TRUTH.read_text())
    ids = _trace_ids(twins)
    eager_dir, graph_dir = SETS[kit]
    (ef,), (gf,) = (sorted((LAYERS / d).glob("*.pt.trace.json.gz")) for d in (eager_dir, graph_dir))
    eager, graph = raw_steps(ef), raw_steps(gf)
    e_segs, g_segs = _segments(twins, ids[str(ef.resolve())]), _segments(twins, ids[str(gf.resolve())])
    check_exact(twins, ids[str(ef.resolve())], eager)
    check_exact(twins, ids[str(gf.resolve())], graph)
    kinds = truth["layer_kinds"]
    batches = json.loads((LAYERS / truth["sets"][kit]["summary"]["graph"]).read_text())[0]["steps"]
    assert batches == 6
    for segs, raw, evidence in ((e_segs, eager, "annotation"), (g_segs, graph, "sequence")):
        for k, rows in segs.items():
            batch = str(
                twins.execute(
                    "select batch_size from steps where trace_id = ? and step_index = ?", [rows[0]["trace_id"], k]
                ).fetchone()[0]
            )
            want = truth["sets"][kit]["batches"][batch]["segments"]
            # truth: the step's activities up to argmax; k25trace's step also holds the next tokens' DtoH copy
            assert len(raw[k]["acts"]) == truth["sets"][kit]["batches"][batch]["activities"] + 1
            assert raw[k]["acts"][-1][3].startswith("Memcpy DtoH")
            got = [(r["label"], r["first_pos"], r["first_pos"] + r["kernel_count"]) for r in rows]
            names = [("pre" if n == "pre" else "post" if n == "post" else n.rsplit(".", 1)[1]) for n, _, _ in want]
            assert got[:-1] == [(n, s, e) for n, (_, s, e) in zip(names, want, strict=True)][:-1]
            assert got[-1] == ("post", want[-1][1], want[-1][2] + 1)
            assert [r["evidence"] for r in rows] == [evidence] * len(rows)
            assert [r["kind"] for r in rows[1:-1]] == kinds
    # kernel for kernel: the graph's sequence is the eager one's (the bf16 graph renames two node kinds)
    for k in range(len(graph)):
        e = k % 4 + (k // 6) * 4  # eager: 4 steps per batch size, graph 6: compare with a step of the same batch
        g_names = [RENAMES.get(a[3], a[3]) for a in graph[k]["acts"]]
        assert g_names == [a[3] for a in eager[e]["acts"]]


@pytest.mark.parametrize("kit", sorted(SETS))
def test_odd_layer_is_the_one_flagged(twins, kit: str) -> None:
    truth = json.loads(TRUTH.read_text())
    frame = layers.layer_breakdown(twins, phase="decode")
    for run in SETS[kit]:  # each folder is a run, labelled by its name
        part = frame.filter(frame["run"] == run)
        assert set(part["batch_size"].to_list()) == {1, 8, 64}
        flagged = part.filter(part["flag"] == "slow")
        assert sorted(set(flagged["segment"].to_list())) == [str(truth["odd_layer"])], (run, flagged)
        moe = part.filter(part["kind"] == "moe")
        for batch in (1, 8, 64):
            b = moe.filter(moe["batch_size"] == batch)
            assert b.sort("kernel_ms")["segment"].to_list()[-1] == str(truth["odd_layer"])
        assert part.filter(part["segment"] == "0")["kind"].to_list() == ["dense"] * 3


def test_sequence_inference_agrees_with_the_annotations(twins, tmp_path) -> None:
    """The eager traces' layers inferred from their kernel sequence alone (layer annotations removed) are the
    annotated ones, activity for activity."""
    ids = _trace_ids(twins)
    for kit, (eager_dir, _) in SETS.items():
        (ef,) = sorted((LAYERS / eager_dir).glob("*.pt.trace.json.gz"))
        tid = ids[str(ef.resolve())]
        before = _segments(twins, tid)
        twins.execute("begin")
        try:
            twins.execute("delete from annotations where trace_id = ? and name like 'model.layers.%'", [tid])
            layers.build_layers(twins, tid)
            after = _segments(twins, tid)
        finally:
            twins.execute("rollback")
        assert {r["evidence"] for rows in after.values() for r in rows} == {"sequence"}, kit
        strip = lambda segs: {
            k: [
                (
                    r["label"],
                    r["kind"],
                    r["first_pos"],
                    r["kernel_count"],
                    r["start_ns"],  # noqa: E731
                    r["end_ns"],
                )
                for r in rows
            ]
            for k, rows in segs.items()
        }
        assert strip(after) == strip(before), kit


# ------------------------------------------------------------------------------------------ the shared vLLM traces

SAMPLES = Path(__file__).resolve().parents[1] / "k25trace" / "samples"
MI300X = {
    "fullgraph": SAMPLES / "vllm-mi300x-decode-fullgraph" / "graph_execution.json.gz",
    "piecewise": SAMPLES / "vllm-mi300x-prefilldecode-piecewise" / "graph_execution.json.gz",
}
CAPTURE = SHARED / "vllm-mi300x-decode-fullgraph" / "capture_traces"
# The public Hugging Face configs (config.json of openai/gpt-oss-20b and openai/gpt-oss-120b): gpt-oss-20b 24 layers,
# gpt-oss-120b 36, both hidden 2880, 64 query heads and 8 KV heads of 64, vocabulary 201088, MXFP4 experts (32 and
# 128, top-4), layer_types sliding_attention and full_attention in turn, every layer MoE.
GPT_OSS = {
    "gpt-oss-20b": {"num_hidden_layers": 24, "num_local_experts": 32},
    "gpt-oss-120b": {"num_hidden_layers": 36, "num_local_experts": 128},
}
GPT_OSS_SHARED = {
    "hidden_size": 2880,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 201088,
    "num_experts_per_tok": 4,
    "model_type": "gpt_oss",
}
RMS = "Rmsnorm2dFwd"


def linear_shapes(path: Path) -> dict[tuple[int, ...], int]:
    """How many ``aten::linear`` CPU ops of a trace have each weight shape (their second input's dims)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh)["traceEvents"]
    out: dict[tuple[int, ...], int] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::linear":
            dims = e.get("args", {}).get("Input Dims") or []
            if len(dims) > 1:
                out[tuple(dims[1])] = out.get(tuple(dims[1]), 0) + 1
    return out


def gpt_oss_weights(model: str) -> dict[tuple[int, ...], int]:
    """Per layer of the model (TP=1): the qkv, o_proj and router weights of the public config, one each."""
    layers_n, experts = GPT_OSS[model]["num_hidden_layers"], GPT_OSS[model]["num_local_experts"]
    c = GPT_OSS_SHARED
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    return {
        (q + 2 * kv, c["hidden_size"]): layers_n,
        (c["hidden_size"], q): layers_n,
        (experts, c["hidden_size"]): layers_n,
    }


def test_mi300x_traces_are_gpt_oss_20b() -> None:
    """The MI300X samples do not name their model; their shapes do: the full-graph step's capture trace runs 24
    layers of gpt-oss-20b's qkv (5120 x 2880), o_proj and 32-expert router, and the piecewise step's lm_head is
    2880 x 201088 (gpt-oss's vocabulary) after 2880-wide MXFP4 experts."""
    if CAPTURE.exists():
        (capture,) = sorted(CAPTURE.glob("*.pt.trace.json.gz"))
        shapes = linear_shapes(capture)
        want = gpt_oss_weights("gpt-oss-20b")
        assert {k: shapes.get(k) for k in want} == want
    shapes = linear_shapes(MI300X["piecewise"])
    assert shapes.get((GPT_OSS_SHARED["vocab_size"], GPT_OSS_SHARED["hidden_size"])) == 1


def check_gpt_oss_layers(con, trace_id: int, raw: list[dict], n_layers: int) -> None:
    """vLLM's gpt-oss layers: each starts with its RMSNorm and ends with the MoE's finalize (scatter) kernel, with
    one attention kernel (the 2d one for sliding-window layers, the 3d one and its reduce for full attention) and one
    top-k; the pre holds the embedding, the post the final norm and lm_head."""
    for k, rows in _segments(con, trace_id).items():
        names = [a[3] for a in raw[k]["acts"]]
        assert [r["evidence"] for r in rows] == ["sequence"] * len(rows)
        assert [r["label"] for r in rows] == ["pre", *map(str, range(n_layers)), "post"]
        assert {r["layers"] for r in rows} == {n_layers}
        attention = []
        for r in rows[1:-1]:
            layer = names[r["first_pos"] : r["first_pos"] + r["kernel_count"]]
            assert RMS in layer[0] and layer[-1].startswith("_finalize_matmul_scatter"), r["label"]
            attn = [n for n in layer if n.startswith("kernel_unified_attention")]
            assert len(attn) == 1 and sum(n == "_topk_forward" for n in layer) == 1
            assert ("reduce_segments" in layer) == attn[0].endswith("_3d")
            attention.append(attn[0])
            assert r["kind"] == "moe"
        pre, post = rows[0], rows[-1]
        assert not any("attention" in n or "topk" in n for n in names[: pre["kernel_count"]])
        tail = names[post["first_pos"] :]
        assert RMS in tail[0] and not any("topk" in n or "attention" in n for n in tail) and len(tail) == 4
        assert len(attention) == n_layers


@pytest.fixture(scope="module")
def mi300x(tmp_path_factory):
    con = _load(tmp_path_factory.mktemp("layers_mi300x"), *MI300X.values())
    yield con
    con.close()


@pytest.mark.parametrize("sample", sorted(MI300X))
def test_mi300x_samples_have_gpt_oss_20b_layer_count(mi300x, sample: str) -> None:
    """gpt-oss-20b has 24 layers (its public config): both MI300X samples segment into 24, not 12 double layers;
    in the full-graph decode step the attention kernel follows the config's layer_types (2d for sliding-window
    layers, 3d + reduce_segments for full attention), in the 8,192-token mixed step it is the 2d one throughout.
    Layer 0 is one kernel short (its ``_to_copy`` is fused into the embedding's Triton kernel)."""
    path = MI300X[sample]
    raw = raw_steps(path)
    tid = _trace_ids(mi300x)[str(path.resolve())]
    check_exact(mi300x, tid, raw)
    n_layers = GPT_OSS["gpt-oss-20b"]["num_hidden_layers"]
    check_gpt_oss_layers(mi300x, tid, raw, n_layers)
    (rows,) = _segments(mi300x, tid).values()
    names = [a[3] for a in raw[0]["acts"]]
    kinds = [
        next(
            n
            for n in names[r["first_pos"] : r["first_pos"] + r["kernel_count"]]
            if n.startswith("kernel_unified_attention")
        )[-2:]
        for r in rows[1:-1]
    ]
    if sample == "fullgraph":
        assert kinds == ["2d", "3d"] * (n_layers // 2)  # layer_types: sliding_attention, full_attention, …
    else:
        assert kinds == ["2d"] * n_layers
    assert "_to_copy" not in " ".join(names[rows[1]["first_pos"] : rows[2]["first_pos"]])
    assert all(
        sum("_to_copy" in n for n in names[r["first_pos"] : r["first_pos"] + r["kernel_count"]]) == 1
        for r in rows[2:-1]
    )


def test_mi300x_with_the_model_config(mi300x) -> None:
    """With gpt-oss-20b's config kept (``load --model-config``), the same 24 layers, all MoE from the config."""
    path = MI300X["fullgraph"]
    tid = _trace_ids(mi300x)[str(path.resolve())]
    before = _segments(mi300x, tid)
    config = {**GPT_OSS_SHARED, **GPT_OSS["gpt-oss-20b"]}
    mi300x.execute("begin")
    try:
        mi300x.execute("insert or replace into meta (key, value) values ('model_config', ?)", [json.dumps(config)])
        assert layers.config_layers(mi300x) == {"layers": 24, "dense_layers": 0, "moe_every": 1}
        layers.build_layers(mi300x, tid)
        after = _segments(mi300x, tid)
    finally:
        mi300x.execute("rollback")
    strip = lambda segs: {
        k: [(r["label"], r["kind"], r["first_pos"], r["kernel_count"]) for r in rows]  # noqa: E731
        for k, rows in segs.items()
    }
    assert strip(after) == strip(before)


def test_shared_vllm_traces(tmp_path) -> None:
    """The real traces in ../shared/traces whose model is publicly known, segmented to its layer count.

    * vllm-b200-tp8-rank0-eager: one prefill step of gpt-oss-120b (its weights: 36 layers of 2880-wide qkv at
      TP=8 and a 128-expert router; the public config: 36 layers): 36 layers inferred from the period (no layer
      annotations), each with its two all-reduces (73 = 1 + 2 x 36).
    * sglang-mi300x-decode (Qwen3-8B, named by the file; its public config has 36 layers): 36 layers.
    * vllm-mi300x-decode-fullgraph: gpt-oss-20b, 24 layers (test_mi300x_samples_have_gpt_oss_20b_layer_count).
    """
    paths = {
        "b200": SHARED / "vllm-b200-tp8-rank0-eager" / "eager_trace.json.gz",
        "sglang": SHARED / "sglang-mi300x-decode" / "sglang_Qwen3-8B_decode.json.gz",
        "mi300x": SHARED / "vllm-mi300x-decode-fullgraph" / "graph_execution.json.gz",
    }
    if not all(p.exists() for p in paths.values()):
        pytest.skip("../shared/traces is not there")
    tp = 8
    shapes = linear_shapes(paths["b200"])
    hidden, heads = GPT_OSS_SHARED["hidden_size"], GPT_OSS_SHARED["head_dim"]
    qkv = (GPT_OSS_SHARED["num_attention_heads"] + 2 * GPT_OSS_SHARED["num_key_value_heads"]) * heads // tp
    n_b200 = GPT_OSS["gpt-oss-120b"]["num_hidden_layers"]
    assert shapes.get((qkv, hidden)) == shapes.get((GPT_OSS["gpt-oss-120b"]["num_local_experts"], hidden)) == n_b200
    con = _load(tmp_path, *paths.values())
    ids = _trace_ids(con)
    segs = {k: _segments(con, ids[str(p.resolve())]) for k, p in paths.items()}
    (b200,) = segs["b200"].values()
    assert {r["evidence"] for r in b200} == {"sequence"} and b200[0]["layers"] == n_b200
    assert [r["collectives"] for r in b200[1:-1]] == [2] * n_b200 and b200[0]["collectives"] == 1
    (sgl,) = segs["sglang"].values()
    assert sgl[0]["layers"] == 36
    (mi,) = segs["mi300x"].values()
    assert mi[0]["layers"] == GPT_OSS["gpt-oss-20b"]["num_hidden_layers"]
    for k, p in paths.items():
        check_exact(con, ids[str(p.resolve())], raw_steps(p)) if k != "sglang" else None


def test_kimi_synthetic_sample_has_61_layers(tmp_path) -> None:
    """The bundled Kimi-K2.5-shaped pair (synth --layers 61: Kimi-K2.5's num_hidden_layers, first_k_dense_replace
    1): every step with GPU work is 61 layers, the first dense, the others MoE, from the kernels alone."""
    files = sorted((SAMPLES / "kimi-k25-synthetic-tp2").glob("*.pt.trace.json.gz"))
    con = _load(tmp_path, *files)
    for f in files:
        for rows in _segments(con, _trace_ids(con)[str(f.resolve())]).values():
            if rows[0]["evidence"] == "none":
                assert rows[0]["reason"] == "no GPU work"
                continue
            assert rows[0]["layers"] == 61
            assert [r["kind"] for r in rows[1:-1]] == ["dense"] + ["moe"] * 60
    con.close()
