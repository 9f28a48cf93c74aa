"""The manifest shape the loader relies on (issue text), checked key by key."""

import hashlib
from pathlib import Path

TOP = {
    "k25trace_capture",
    "k25trace_version",
    "name",
    "server_url",
    "vllm_version",
    "model",
    "server_args",
    "started_at",
    "finished_at",
    "complete",
    "levels",
}
LEVEL = {
    "name",
    "concurrency",
    "dir",
    "profiled",
    "started_at",
    "stopped_at",
    "start_status",
    "stop_status",
    "stop_seconds",
    "stats",
    "files",
    "missing_ranks",
    "decode_batch_sizes_seen",
    "decode_batch_sizes_rank",
    "max_decode_batch_seen",
    "max_running_requests",
    "running_requests_samples",
    "reached_concurrency",
}
STATS = {
    "requests",
    "errors",
    "output_tokens",
    "input_tokens",
    "duration_s",
    "output_tok_s",
    "request_throughput",
    "max_in_flight",
    "ttft_ms",
    "tpot_ms",
    "itl_ms",
    "e2e_ms",
}
DIST = {"mean", "p50", "p90", "p99"}
FILE = {
    "path",
    "rank",
    "world_size",
    "frontend",
    "size",
    "sha256",
    "valid",
    "problem",
    "step_markers",
    "decode_batch_sizes",
}


def check_shape(m: dict, capture_dir: Path) -> None:
    assert m["k25trace_capture"] == 1
    assert TOP <= set(m), TOP - set(m)
    assert isinstance(m["complete"], bool)
    for lv in m["levels"]:
        assert LEVEL <= set(lv), LEVEL - set(lv)
        assert lv["name"] == f"c{lv['concurrency']}" == lv["dir"]
        if lv["stats"] is not None:
            assert STATS <= set(lv["stats"]), STATS - set(lv["stats"])
            for k in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
                assert DIST <= set(lv["stats"][k])
        assert isinstance(lv["missing_ranks"], list)
        seen = lv["decode_batch_sizes_seen"]
        assert seen is None or (
            all(k.isdigit() and int(k) >= 1 and n >= 1 for k, n in seen.items())
            and lv["max_decode_batch_seen"] >= max(map(int, seen), default=0)
        )
        for f in lv["files"]:
            assert FILE <= set(f), FILE - set(f)
            p = capture_dir / f["path"]
            assert f["path"].startswith(lv["dir"] + "/")
            assert p.is_file(), p
            assert p.stat().st_size == f["size"]
            assert hashlib.sha256(p.read_bytes()).hexdigest() == f["sha256"]
