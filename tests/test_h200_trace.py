"""A real H200 trace of capture/decode_loop.py (world size 1, 4 layers, CUDA-graph decode at batch 1/8/64).

Every expectation is read here from the trace JSON with the standard library (markers, graph launches, which
GPU activity each marker's launches made), independently of the loader and the step SQL.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from k25trace import db, pipeline
from k25trace.analysis import report

FIXTURE = Path(__file__).parent / "data" / "h200-decode-loop"
TRACE = next(FIXTURE.glob("dp0_pp0_tp0_dcp0_ep0_rank0.*.pt.trace.json.gz"))
MARKER = re.compile(r"^execute_context_0\(0\)_generation_(\d+)\((\d+)\)$")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    con = db.connect(tmp_path_factory.mktemp("h200") / "h200.duckdb")
    results, _ = pipeline.load_paths(con, [FIXTURE])
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    yield con
    con.close()


@pytest.fixture(scope="module")
def expected():
    """Markers in time order with their batch size, graph launches and GPU activities (by launch)."""
    with gzip.open(TRACE, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    markers = sorted(
        (e for e in events if e.get("cat") == "user_annotation" and MARKER.match(e["name"])), key=lambda e: e["ts"]
    )
    starts = [m["ts"] for m in markers]
    launch_ts = {
        e["args"]["correlation"]: e["ts"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    activities: Counter[int] = Counter()
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts = launch_ts.get(e["args"].get("correlation"))
            if ts is not None and (i := bisect.bisect_right(starts, ts) - 1) >= 0:
                activities[i] += 1
    graphs: Counter[int] = Counter()
    for e in events:
        if e.get("cat") == "cuda_runtime" and e["name"] == "cudaGraphLaunch":
            for i, m in enumerate(markers):
                if m["ts"] <= e["ts"] <= m["ts"] + m["dur"]:
                    graphs[i] += 1
    steps = []
    for i, m in enumerate(markers):
        reqs, tokens = map(int, MARKER.match(m["name"]).groups())
        steps.append({"batch": reqs, "tokens": tokens, "graphs": graphs[i], "activities": activities[i]})
    return trace, steps


def test_independent_reading_is_what_the_loop_ran(expected) -> None:
    trace, steps = expected
    assert trace["distributedInfo"]["world_size"] == 1
    assert trace["deviceProperties"][0]["name"] == "NVIDIA H200"
    assert [s["batch"] for s in steps] == [1] * 8 + [8] * 8 + [64] * 8
    assert all(s["graphs"] == 1 for s in steps)


def test_steps_match_the_json(loaded, expected) -> None:
    _, steps = expected
    rows = loaded.execute(
        "select step_index, phase, batch_size, gen_reqs, gen_tokens, graph_launches, kernel_count, is_empty, "
        "is_inferred, source from steps order by step_index"
    ).fetchall()
    assert len(rows) == len(steps)
    for row, exp in zip(rows, steps, strict=True):
        index, phase, batch, gen_reqs, gen_tokens, graphs, activities, empty, inferred, source = row
        assert (phase, empty, inferred, source) == ("decode", False, False, "vllm")
        assert (batch, gen_reqs, gen_tokens) == (exp["batch"], exp["batch"], exp["tokens"])
        assert graphs == exp["graphs"] == 1
        assert activities == exp["activities"], index
    counts = dict(loaded.execute("select batch_size, count(*) from steps group by all").fetchall())
    assert counts == {1: 8, 8: 8, 64: 8}


def test_trace_metadata(loaded) -> None:
    assert loaded.execute("select rank, world_size, device_name from traces").fetchall() == [(0, 1, "NVIDIA H200")]


def test_categories_are_sensible(loaded) -> None:
    frame = report.breakdown(loaded, by="batch", phase="decode")
    per_batch: dict[int, dict[str, float]] = defaultdict(dict)
    for row in frame.iter_rows(named=True):
        per_batch[row["batch_size"]][row["category"]] = row["pct_of_step"]
    assert sorted(per_batch) == [1, 8, 64]
    for batch, pct in per_batch.items():
        assert "allreduce" not in pct  # world size 1: vLLM (and the loop) skip the all-reduce
        assert pct["gemm"] > 50  # dense + grouped expert GEMMs dominate
        assert pct["other"] < 1, (batch, pct)
        assert pct["norm"] > 0 and pct["memcpy"] > 0
    # nothing is left in 'other': the MoE path's small copy kernel (3 per layer) is a memcpy (039c3fe)
    other = loaded.execute(
        "select distinct short_name from kernels where category = 'other' and step_index is not null"
    ).fetchall()
    assert other == []
    copy = loaded.execute("select distinct category from kernels where short_name = 'memcpy32_post'").fetchall()
    assert copy == [("memcpy",)]


def test_floor_report_runs_without_collectives(loaded) -> None:
    frame = report.allreduce_floor(loaded, "decode")
    assert frame["batch_size"].to_list() == [1, 8, 64]
    assert frame["observed_ms"].to_list() == [0.0, 0.0, 0.0]
    assert frame["efficiency"].to_list() == [None, None, None]
