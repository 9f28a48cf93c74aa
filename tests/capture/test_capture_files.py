"""Trace-file completeness checks: streaming, never the whole file in memory."""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc

from fakevllm import trace_bytes, write_partial_gz, write_trace
from k25trace.capture.files import check_trace_file, copy_with_hash, new_files, rank_from_name, sha256_file, snapshot


def summary(path) -> tuple:
    """(ok, problem, rank, world_size, frontend) of check_trace_file."""
    c = check_trace_file(path)
    return c.ok, c.problem, c.rank, c.world_size, c.frontend


def test_complete_worker_trace_gives_rank_and_world(tmp_path):
    p = tmp_path / "dp0_pp0_tp3_dcp0_ep3_rank3.123.pt.trace.json.gz"
    write_trace(p, 5, 8)  # in-trace rank wins over the name
    ok, problem, rank, world, frontend = summary(p)
    assert (ok, problem, rank, world, frontend) == (True, None, 5, 8, False)
    assert check_trace_file(p).metadata["vllm_version"] == "0.32.0"


def test_frontend_trace(tmp_path):
    p = tmp_path / "host_12.async_llm.99.pt.trace.json.gz"
    write_trace(p, None, None, frontend=True)
    assert summary(p) == (True, None, None, None, True)


def test_gz_still_being_written_is_incomplete_but_head_is_read(tmp_path):
    p = tmp_path / "rank1.5.pt.trace.json.gz"
    finish = write_partial_gz(p, 1, 2)
    ok, problem, rank, world, frontend = summary(p)
    assert not ok and "end-of-stream" in problem
    assert (rank, world) == (1, 2)
    finish()
    assert summary(p)[0] is True


def test_truncated_and_corrupt_gz(tmp_path):
    good = tmp_path / "rank0.1.pt.trace.json.gz"
    write_trace(good, 0, 1, n_events=500)
    data = good.read_bytes()
    cut = tmp_path / "rank0.2.pt.trace.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    assert summary(cut)[0] is False
    crc = tmp_path / "rank0.3.pt.trace.json.gz"
    bad = bytearray(data)
    bad[-6] ^= 0xFF  # inside the CRC32 trailer
    crc.write_bytes(bytes(bad))
    ok, problem, *_ = summary(crc)
    assert not ok and "gzip" in problem
    notgz = tmp_path / "rank0.4.pt.trace.json.gz"
    notgz.write_bytes(b"{}")
    assert summary(notgz)[0] is False


def test_complete_gzip_of_unclosed_json_is_incomplete(tmp_path):
    p = tmp_path / "rank0.1.pt.trace.json.gz"
    raw = trace_bytes(0, 1)
    with gzip.open(p, "wb") as f:
        f.write(raw[:-40])
    ok, problem, rank, *_ = summary(p)
    assert not ok and "does not close" in problem
    assert rank == 0


def test_plain_json_and_tmp(tmp_path):
    raw = trace_bytes(2, 4)
    p = tmp_path / "rank2.1.pt.trace.json"
    p.write_bytes(raw + b"\n")
    assert summary(p) == (True, None, 2, 4, False)
    cut = tmp_path / "rank2.2.pt.trace.json"
    cut.write_bytes(raw[:-10])
    assert summary(cut)[0] is False
    tmp = tmp_path / "rank2.3.pt.trace.json.tmp"
    tmp.write_bytes(raw)
    ok, problem, *_ = summary(tmp)
    assert not ok and ".tmp" in problem
    empty = tmp_path / "rank2.4.pt.trace.json.gz"
    empty.write_bytes(b"")
    assert summary(empty)[0] is False


def test_distributed_info_after_trace_events_and_multimember_gzip(tmp_path):
    doc = {"traceEvents": [{"ph": "X", "name": "x", "ts": 1}], "distributedInfo": {"rank": 6, "world_size": 7}}
    raw = json.dumps(doc).encode()
    p = tmp_path / "noname.1.pt.trace.json.gz"
    p.write_bytes(gzip.compress(raw[:10]) + gzip.compress(raw[10:]))
    assert summary(p) == (True, None, 6, 7, False)


def test_rank_from_name_variants():
    assert rank_from_name("dp0_pp0_tp3_dcp0_ep3_rank3.1764.pt.trace.json.gz") == 3
    assert rank_from_name("pfx_dp0_pp0_tp7_dcp0_ep7_rank7.1.pt.trace.json.gz") == 7
    assert rank_from_name("1764400000000000000-rank-5.1.pt.trace.json.gz") == 5
    assert rank_from_name("myhost_1234.1.pt.trace.json.gz") is None


def test_big_file_is_streamed_not_loaded(tmp_path):
    """~48 MB of JSON inside the gzip; the check must stay far below that in Python memory."""
    p = tmp_path / "rank0.1.pt.trace.json.gz"
    ev = b'{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":1,"tid":1,"ts":123456,"dur":7},\n'
    with gzip.open(p, "wb", compresslevel=1) as f:
        f.write(b'{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":8},"traceEvents":[\n')
        block = ev * 20000
        for _ in range(30):
            f.write(block)
        f.write(b'{"ph":"X","name":"end","ts":1}],"baseTimeNanoseconds":1}\n')
    raw_size = 30 * len(ev) * 20000
    assert raw_size > 45e6
    tracemalloc.start()
    try:
        result = summary(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result == (True, None, 0, 8, False)
    assert peak < 8e6, f"peak {peak / 1e6:.1f} MB"


def test_snapshot_new_files_and_copy(tmp_path):
    d = tmp_path / "t"
    d.mkdir()
    (d / "old.pt.trace.json.gz").write_bytes(b"x")
    before = snapshot(d)
    (d / "p_new.pt.trace.json.gz").write_bytes(b"yy")
    (d / "other.pt.trace.json.gz").write_bytes(b"zz")
    now = snapshot(d)
    assert new_files(before, now) == ["other.pt.trace.json.gz", "p_new.pt.trace.json.gz"]
    assert new_files(before, now, prefix="p_") == ["p_new.pt.trace.json.gz"]
    size, sha = copy_with_hash(d / "p_new.pt.trace.json.gz", tmp_path / "copy.gz")
    assert size == 2 and sha == sha256_file(tmp_path / "copy.gz")
    assert not os.path.exists(tmp_path / "copy.gz.part")
