"""The decode batch a level really reached (issue 11 item 4): step markers in the traces, /metrics during the load."""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

import helpers
from fakevllm import trace_bytes, write_trace
from k25trace.capture.files import StepScan, _MarkerScan, check_trace_file, parse_step_marker, scan_step_markers
from k25trace.capture.level_checks import check_batch
from k25trace.capture.manifest import ManifestFile, ManifestLevel
from k25trace.capture.runner import EXIT_OK, CaptureOptions
from manifest_shape import check_shape

DATA = Path(__file__).resolve().parents[1] / "data"


# ------------------------------------------------------------------------------- capture against the fake


def test_c4_level_that_only_ran_batch_1_says_so(fake, run_cap, tmp_path):
    # The real-vLLM test's failure on a fresh machine, made deterministic: the engine runs one request at a
    # time (as a fast server with short outputs did: each request finished before the next one started),
    # so a C=4 level profiled only batch-1 decode steps while the capture reported concurrency 4.
    s = fake(world_size=2, max_running=1)
    rc, out, err, m = run_cap(s, concurrency=[4], max_tokens=4, metrics_interval_s=0.05)
    assert rc == EXIT_OK, err  # a warning, not a failure
    check_shape(m, tmp_path / "cap")
    lv = m["levels"][0]
    assert lv["stats"]["max_in_flight"] == 4  # what the client asked for ...
    assert lv["decode_batch_sizes_seen"] == {"1": 16}  # ... and what the engine ran: 4 requests x 4 tokens
    assert lv["decode_batch_sizes_rank"] == 0 and lv["max_decode_batch_seen"] == 1
    assert lv["max_running_requests"] in (0, 1) and lv["running_requests_samples"] >= 1
    assert lv["reached_concurrency"] is False
    for f in lv["files"]:
        assert f["decode_batch_sizes"] == (None if f["frontend"] else {"1": 16})
        assert f["step_markers"] == (None if f["frontend"] else 20)  # + 4 prefills
    flat = " ".join(err.split())
    assert "c4: the engine never ran a decode batch of 4" in flat and "16 at batch 1" in flat
    assert "--max-tokens, now 4" in flat and "--requests, now 4" in flat and "--max-num-seqs" in flat
    assert any("never ran a decode batch of 4" in w for w in lv["warnings"])
    row = next(line for line in out.splitlines() if line.startswith("│ c4 "))
    assert [c.strip() for c in row.split("│")][4:6] == ["4", "1!"]  # summary: conc 4, batch 1 (below)


def test_level_that_reached_its_concurrency(fake, run_cap):
    # the two requests start generating together, and only once /metrics has shown them running
    s = fake(batch_barrier=2)
    rc, out, err, m = run_cap(s, concurrency=[2], max_tokens=4, metrics_interval_s=0.05)
    assert rc == EXIT_OK, err
    lv = m["levels"][0]
    hist = {int(b): n for b, n in lv["decode_batch_sizes_seen"].items()}
    assert max(hist) == 2 and sum(hist.values()) == 8 and set(hist) <= {1, 2}
    assert lv["max_decode_batch_seen"] == 2 and lv["max_running_requests"] == 2
    assert lv["reached_concurrency"] is True
    assert "never ran a decode batch" not in err and not lv["warnings"]


def test_without_metrics_the_markers_still_count(fake, run_cap):
    s = fake(max_running=1, metrics=False)
    rc, _, err, m = run_cap(s, concurrency=[2])
    lv = m["levels"][0]
    assert rc == EXIT_OK and s.metrics_calls == 1  # one try, then no more polling
    assert lv["max_running_requests"] is None and lv["running_requests_samples"] == 0
    assert "/metrics answered 404" in lv["running_requests_note"]
    assert lv["max_decode_batch_seen"] == 1 and lv["reached_concurrency"] is False
    flat = " ".join(err.split())
    assert "never ran a decode batch of 2" in flat and "/metrics" not in flat.split("never ran")[1].split(".")[0]


def test_without_markers_metrics_decide(fake, run_cap):
    s = fake(max_running=1, step_markers=False, batch_barrier=1)
    rc, _, err, m = run_cap(s, concurrency=[2], metrics_interval_s=0.05)
    lv = m["levels"][0]
    assert rc == EXIT_OK
    assert lv["decode_batch_sizes_seen"] is None and lv["max_decode_batch_seen"] is None
    assert lv["max_running_requests"] == 1 and lv["reached_concurrency"] is False
    assert any("no engine-step markers" in w for w in lv["warnings"])
    assert "at most 1 request(s) running on /metrics" in " ".join(err.split())


def test_no_profile_level_uses_metrics(fake, run_cap):
    s = fake(batch_barrier=3)
    rc, _, err, m = run_cap(s, no_profile=True, trace_dir=None, concurrency=[3], metrics_interval_s=0.05)
    lv = m["levels"][0]
    assert rc == EXIT_OK and lv["max_running_requests"] == 3 and lv["reached_concurrency"] is True
    assert lv["decode_batch_sizes_seen"] is None and not lv["warnings"]


def _opts(tmp_path) -> CaptureOptions:
    return CaptureOptions(url="http://127.0.0.1:1", out=tmp_path, trace_dir=tmp_path, concurrency=[8])


def test_data_parallel_ranks_add_up_tensor_parallel_ranks_do_not(tmp_path):
    def f(name, rank, hist):
        return ManifestFile(f"c8/{name}", rank=rank, frontend=False, valid=True, decode_batch_sizes=hist)

    lv = ManifestLevel(
        "c8",
        8,
        profiled=True,
        files=[
            f("dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz", 0, {3: 5, 4: 9}),
            f("dp0_pp0_tp1_dcp0_ep1_rank1.1.pt.trace.json.gz", 1, {4: 9}),
            f("dp1_pp0_tp0_dcp0_ep2_rank2.1.pt.trace.json.gz", 2, {4: 9}),
            f("dp1_pp0_tp1_dcp0_ep3_rank3.1.pt.trace.json.gz", 3, {4: 9}),
        ],
    )
    check_batch(_opts(tmp_path), lv, 8, print)
    assert lv.decode_batch_sizes_seen == {3: 5, 4: 9} and lv.decode_batch_sizes_rank == 0
    assert lv.to_json()["decode_batch_sizes_seen"] == {"3": 5, "4": 9}  # JSON keys are strings
    assert lv.max_decode_batch_seen == 8 and lv.reached_concurrency is True and not lv.warnings
    tp_only = replace(lv, warnings=[], files=[replace(x, path=x.path.replace("dp1_", "dp0_")) for x in lv.files])
    check_batch(_opts(tmp_path), tp_only, 8, print)
    assert tp_only.max_decode_batch_seen == 4 and tp_only.reached_concurrency is False


# ------------------------------------------------------------------------------- the streaming marker scan


FORMS = [  # the forms of tests/test_steps.py::test_marker_forms: (marker, decode batch or None)
    ("execute_context_0(0)_generation_4(12)", 4),
    ("execute_context_0(0)_generation_64(64)", 64),
    ("execute_context_2(1024)_generation_30(30)", None),
    ("execute_context_1(888_788544)_generation_0(0)", None),
    ("execute_40_context_1(sq8sk8sqsq64sqsk64)_generation_32(sq32sk900sqsq32sqsk900)", None),
    ("execute_40_context_0(sq0sk0)_generation_32(sq32sk900sqsq32sqsk900)", 32),
    ("execute_new_0_cached_16", 16),
    ("execute_new_3_cached_0", None),
    ("execute_new_1_cached_7", None),
    ("execute_context_0(0)_generation_0(0)", None),
    ("step[DECODE bs=48]", 48),
    ("step[EXTEND bs=3]", None),
    ("step[MIXED bs=5]", None),
]


@pytest.mark.parametrize("marker,batch", FORMS)
def test_marker_forms(marker, batch):
    family, ctx, gen = parse_step_marker(marker)
    assert family == ("sglang" if marker.startswith("step[") else "vllm")
    assert (gen if ctx == 0 and gen else None) == batch
    assert parse_step_marker("execute_model") is None and parse_step_marker("step") is None


def _gz(path, doc_or_bytes):
    data = doc_or_bytes if isinstance(doc_or_bytes, bytes) else json.dumps(doc_or_bytes).encode()
    path.write_bytes(gzip.compress(data))
    return path


def test_scan_counts_cpu_markers_once_and_ignores_look_alikes(tmp_path):
    markers = (
        ["execute_context_2(64)_generation_0(0)"]
        + ["execute_context_0(0)_generation_2(2)"] * 5
        + ["execute_context_0(0)_generation_1(1)"] * 2
        + ["execute_context_0(0)_generation_0(0)"]
    )
    raw = trace_bytes(0, 1, n_events=30, markers=markers)  # each also has two GPU copies: counted once
    doc = json.loads(raw)
    doc["traceEvents"] += [
        {"ph": "X", "cat": "python_function", "name": "execute_context_0(0)_generation_9(9)", "pid": 1, "tid": 1},
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "execute_new_0_cached_9",
            "pid": 1,
            "tid": 1,
            "args": {"note": "execute_context_0(0)_generation_9(9)"},
        },
        {"ph": "X", "cat": "user_annotation", "name": "execute_model", "pid": 1, "tid": 1},
    ]
    p = _gz(tmp_path / "rank0.1.pt.trace.json.gz", doc)
    scan = scan_step_markers(p)
    assert scan == StepScan("vllm", 9, {1: 2, 2: 5}) and scan.max_decode_batch == 2
    assert check_trace_file(p).steps == scan


def test_scan_any_key_order_and_chunk_boundaries():
    events = [
        {
            "name": "execute_context_0(0)_generation_3(3)",
            "ph": "X",
            "pid": 1,
            "cat": "user_annotation",
            "args": {"External id": i},
        }
        for i in range(7)
    ]
    events += [{"args": {"x": {"y": 1}}, "name": "step[DECODE bs=5]", "cat": "user_annotation"}] * 2
    text = json.dumps({"traceEvents": events}, indent=3).encode()
    for size in (1, 2, 7, 64, len(text)):
        scan = _MarkerScan()
        for i in range(0, len(text), size):
            scan.feed(text[i : i + size])
        assert scan.result() == StepScan("vllm", 7, {3: 7}), size  # vLLM's markers over SGLang's


def test_scan_gpu_copies_alone_count_one_stream():
    ev = []
    for stream, n in ((7, 4), (13, 3)):
        ev += [
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "execute_context_0(0)_generation_8(8)",
                "pid": 0,
                "tid": stream,
            }
        ] * n
    scan = _MarkerScan()
    scan.feed(json.dumps({"traceEvents": ev}).encode())
    assert scan.result() == StepScan("gpu_annotation", 4, {8: 4})
    empty = _MarkerScan()
    empty.feed(b'{"traceEvents": []}')
    assert empty.result() == StepScan(None, 0, {}) and empty.result().max_decode_batch is None


def test_front_end_trace_is_not_scanned(tmp_path):
    p = tmp_path / "host_1.async_llm.1.pt.trace.json.gz"
    write_trace(p, None, None, frontend=True, markers=["execute_context_0(0)_generation_2(2)"])
    assert check_trace_file(p).steps is None


REAL = [
    DATA / "h200-decode-loop" / "dp0_pp0_tp0_dcp0_ep0_rank0.1795944186026241480.pt.trace.json.gz",
    helpers.MI300X_FULL,
    helpers.MI300X_PIECEWISE,
    helpers.SGLANG,
]


def test_scan_agrees_with_the_loaders_steps_table(tmp_path):
    """What capture records per file is what `k25trace load` will find: the same decode batches."""
    from k25trace import db, pipeline

    synthetic = _gz(tmp_path / "forms.json.gz", trace_bytes(0, 1, 10, markers=[m for m, _ in FORMS]))
    files = []
    for i, src in enumerate(REAL + [synthetic]):
        dst = tmp_path / f"t{i}.{src.name}"
        shutil.copy(src, dst)
        files.append(dst)
    con = db.connect(tmp_path / "x.duckdb")
    results, _ = pipeline.load_paths(con, files)
    assert [r.status for r in results] == ["loaded"] * len(files)
    for path in files:
        rows = con.execute(
            "select s.batch_size, count(*) from steps s join traces t using (trace_id) "
            "where t.file_name = ? and s.phase = 'decode' group by 1",
            [path.name],
        ).fetchall()
        n = con.execute(
            "select count(*) from steps s join traces t using (trace_id) where t.file_name = ? and not s.is_inferred",
            [path.name],
        ).fetchone()[0]
        scan = scan_step_markers(path)
        assert scan.decode_batches == dict(rows), path.name
        assert scan.steps == n, path.name
    assert scan_step_markers(files[0]).decode_batches == {1: 8, 8: 8, 64: 8}
