"""k25trace load: exact counts and timestamps against what the JSON holds, idempotence, bad input."""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import (
    ALL_REAL,
    B200,
    HTA_NCCL,
    HTA_RANK0,
    HTA_RANK1,
    MI300X_FULL,
    MI300X_PIECEWISE,
    expected_counts,
    expected_ns,
    read_exact,
)
from k25trace import db, ingest, pipeline
from k25trace.errors import K25Error


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("db") / "real.duckdb"
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, ALL_REAL)
    assert [r.status for r in results] == ["loaded"] * len(ALL_REAL), [r.message for r in results]
    yield con, {Path(r.path).resolve(): r.trace_id for r in results}
    con.close()


def _trace_id(loaded, path: Path) -> int:
    return loaded[1][path.resolve()]


@pytest.mark.parametrize("path", ALL_REAL, ids=lambda p: p.parent.name + "/" + p.name)
def test_counts_match_the_json(loaded, path: Path) -> None:
    con, _ = loaded
    trace_id = _trace_id(loaded, path)
    counts = expected_counts(read_exact(path))
    got = dict(
        con.execute("select kind, count(*) from gpu_events where trace_id = ? group by kind", [trace_id]).fetchall()
    )
    assert got.get("kernel", 0) == counts["kernel"]
    assert got.get("memcpy", 0) == counts["gpu_memcpy"]
    assert got.get("memset", 0) == counts["gpu_memset"]
    launches = con.execute("select count(*) from launches where trace_id = ?", [trace_id]).fetchall()[0][0]
    assert launches == counts["cuda_runtime"] + counts["cuda_driver"]
    ann = dict(
        con.execute("select kind, count(*) from annotations where trace_id = ? group by kind", [trace_id]).fetchall()
    )
    assert ann.get("user_annotation", 0) == counts["user_annotation"]
    assert ann.get("gpu_user_annotation", 0) == counts["gpu_user_annotation"]
    ops = con.execute("select count(*) from cpu_ops where trace_id = ?", [trace_id]).fetchall()[0][0]
    assert ops == counts["cpu_op"]
    py = con.execute("select count(*) from python_functions where trace_id = ?", [trace_id]).fetchall()[0][0]
    assert py == 0  # dropped by default
    total = con.execute("select event_count from traces where trace_id = ?", [trace_id]).fetchall()[0][0]
    assert total == len(read_exact(path)["traceEvents"])


@pytest.mark.parametrize("path", ALL_REAL, ids=lambda p: p.parent.name + "/" + p.name)
def test_timestamps_are_exact(loaded, path: Path) -> None:
    con, _ = loaded
    trace_id = _trace_id(loaded, path)
    trace = read_exact(path)
    base = int(trace.get("baseTimeNanoseconds", 0))
    expected = sorted(
        (i, base + expected_ns(trace, e["ts"]), expected_ns(trace, e.get("dur", 0)))
        for i, e in enumerate(trace["traceEvents"])
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"
    )
    got = con.execute(
        "select event_id, start_ns, dur_ns from gpu_events where trace_id = ? order by event_id", [trace_id]
    ).fetchall()
    assert got == expected
    assert (
        con.execute(
            "select count(*) from gpu_events where trace_id = ? and end_ns != start_ns + dur_ns", [trace_id]
        ).fetchall()[0][0]
        == 0
    )


def test_rank_world_size_and_metadata(loaded) -> None:
    con, _ = loaded
    rows = {
        Path(r[0]).name + ":" + Path(r[0]).parent.name: r[1:]
        for r in con.execute("select path, rank, world_size, base_time_ns, device_name, sha256 from traces").fetchall()
    }
    assert rows["eager_trace.json.gz:vllm-b200-tp8-rank0-eager"][:4] == (0, 8, 1767189312000000000, "NVIDIA B200")
    assert rows["sampled_rank-0.json.gz:hta-2rank-sendrecv"][:3] == (0, 128, 0)
    assert rows["sampled_rank-1.json.gz:hta-2rank-sendrecv"][:2] == (1, 128)
    assert rows["nccl_data.json.gz:hta-a100-nccl-metadata"][:2] == (0, 2)
    sha = hashlib.sha256(B200.read_bytes()).hexdigest()
    assert rows["eager_trace.json.gz:vllm-b200-tp8-rank0-eager"][4] == sha


def test_graph_kernels_share_the_graph_launch_correlation(loaded) -> None:
    con, _ = loaded
    trace_id = _trace_id(loaded, MI300X_FULL)
    rows = con.execute(
        "select l.name, count(*) from gpu_events g join launches l using (trace_id, correlation) "
        "where g.trace_id = ? and g.kind = 'kernel' group by l.name",
        [trace_id],
    ).fetchall()
    trace = read_exact(MI300X_FULL)
    graph = [e for e in trace["traceEvents"] if e.get("name") == "hipGraphLaunch"]
    assert len(graph) == 1
    sharing = sum(
        1
        for e in trace["traceEvents"]
        if e.get("cat") == "kernel" and e["args"]["correlation"] == graph[0]["args"]["correlation"]
    )
    assert sharing == 421  # of the 425 kernels, 4 are launched eagerly around the graph
    assert dict(rows) == {"hipGraphLaunch": sharing, "hipLaunchKernel": 3, "hipExtModuleLaunchKernel": 1}


def test_collective_args_kept(loaded) -> None:
    con, _ = loaded
    trace_id = _trace_id(loaded, HTA_NCCL)
    trace = read_exact(HTA_NCCL)
    expected = sorted(
        (
            e["args"]["Collective name"],
            int(e["args"]["In msg nelems"]),
            int(e["args"]["Group size"]),
            e["args"]["dtype"],
        )
        for e in trace["traceEvents"]
        if e.get("cat") == "kernel" and "Collective name" in e.get("args", {})
    )
    got = sorted(
        con.execute(
            "select collective_name, msg_in_nelems, group_size, msg_dtype from gpu_events "
            "where trace_id = ? and collective_name is not null",
            [trace_id],
        ).fetchall()
    )
    assert got == expected and len(got) > 0
    b200 = _trace_id(loaded, B200)
    assert (
        con.execute(
            "select count(*) from gpu_events where trace_id = ? and collective_name is not null", [b200]
        ).fetchall()[0][0]
        >= 1
    )


def test_long_names_stored_once_with_short_name(loaded) -> None:
    con, _ = loaded
    dupes = con.execute("select count(*) - count(distinct name) from kernel_names").fetchall()[0][0]
    assert dupes == 0
    long_name = con.execute("select name, short_name from kernel_names order by length(name) desc limit 1").fetchall()[
        0
    ]
    assert len(long_name[0]) > 500 and 0 < len(long_name[1]) <= 160


def test_reload_is_idempotent(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "x.duckdb")
    first, _ = pipeline.load_paths(con, [HTA_RANK0, HTA_RANK1])
    before = con.execute("select count(*) from gpu_events").fetchall()[0][0]
    copy = tmp_path / "copy.json.gz"
    shutil.copy(HTA_RANK0, copy)
    second, _ = pipeline.load_paths(con, [HTA_RANK0, HTA_RANK1, copy])
    assert [r.status for r in first] == ["loaded", "loaded"]
    assert [r.status for r in second] == ["skipped", "skipped", "skipped"]
    assert con.execute("select count(*) from gpu_events").fetchall()[0][0] == before
    assert con.execute("select count(*) from traces").fetchall()[0][0] == 2


def test_trace_files_are_only_read(tmp_path: Path) -> None:
    copy = tmp_path / "t.json.gz"
    shutil.copy(B200, copy)
    os.chmod(copy, 0o444)
    stat_before = copy.stat()
    digest = hashlib.sha256(copy.read_bytes()).hexdigest()
    con = db.connect(tmp_path / "x.duckdb")
    (result,), _ = pipeline.load_paths(con, [copy])
    assert result.status == "loaded"
    assert hashlib.sha256(copy.read_bytes()).hexdigest() == digest
    assert copy.stat().st_mtime_ns == stat_before.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".wal") == ["t.json.gz", "x.duckdb"]


def test_python_functions_kept_with_flag(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "x.duckdb")
    pipeline.load_paths(con, [B200], ingest.LoadOptions(keep_python=True))
    expected = expected_counts(read_exact(B200))["python_function"]
    assert con.execute("select count(*) from python_functions").fetchall()[0][0] == expected > 0


def test_directories_search_pt_trace_files_and_skip_frontend(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    shutil.copy(HTA_RANK0, tmp_path / "run" / "dp0_pp0_tp0_dcp0_ep0_rank0.1764412345678901234.pt.trace.json.gz")
    shutil.copy(HTA_RANK1, tmp_path / "run" / "host_123.async_llm.1764412345678901299.pt.trace.json.gz")
    shutil.copy(B200, tmp_path / "run" / "unrelated.json.gz")
    files, notes, errors = ingest.discover([tmp_path / "run"])
    assert [f.path.name for f in files] == ["dp0_pp0_tp0_dcp0_ep0_rank0.1764412345678901234.pt.trace.json.gz"]
    assert any("front-end" in n for n in notes) and not errors
    files, _, _ = ingest.discover([tmp_path / "run"], include_frontend=True)
    assert len(files) == 2


def test_a_folder_without_pt_trace_files_names_the_json_files_it_holds(tmp_path: Path) -> None:
    """HTA's own folders hold traces not named *.pt.trace.json.gz: the error says what to name, and loads nothing."""
    (tmp_path / "run" / "sub").mkdir(parents=True)
    shutil.copy(HTA_RANK0, tmp_path / "run" / "sampled_rank-0.json.gz")
    shutil.copy(HTA_RANK1, tmp_path / "run" / "sub" / "sampled_rank-1.json.gz")
    (tmp_path / "run" / "notes.txt").write_text("not a trace")
    files, _, errors = ingest.discover([tmp_path / "run"])
    assert not files
    assert errors == [
        f"{tmp_path / 'run'}: no *.pt.trace.json[.gz] files found; it holds 2 other .json[.gz] file(s) "
        "(sampled_rank-0.json.gz, sub/sampled_rank-1.json.gz): name them to load them"
    ]
    (tmp_path / "empty").mkdir()
    assert ingest.discover([tmp_path / "empty"])[2] == [f"{tmp_path / 'empty'}: no *.pt.trace.json[.gz] files found"]


# ------------------------------------------------------------------------------------------------ bad input


def _write_gz(path: Path, data: bytes) -> Path:
    with gzip.open(path, "wb") as fh:
        fh.write(data)
    return path


@pytest.fixture()
def bad_files(tmp_path: Path) -> dict[str, Path]:
    full = gzip.decompress(B200.read_bytes())
    files = {}
    truncated = tmp_path / "truncated.json.gz"
    blob = B200.read_bytes()
    truncated.write_bytes(blob[: len(blob) // 2])
    files["truncated gzip"] = truncated
    files["invalid JSON"] = _write_gz(tmp_path / "invalid.json.gz", full[: len(full) // 2] + b"]]]}")
    files["truncated JSON"] = _write_gz(tmp_path / "cut.json.gz", full[: len(full) - 200])
    (tmp_path / "empty.json").write_bytes(b"")
    files["empty file"] = tmp_path / "empty.json"
    files["no traceEvents"] = _write_gz(tmp_path / "nokey.json.gz", b'{"schemaVersion": 1, "deviceProperties": []}')
    files["not an object"] = _write_gz(tmp_path / "list.json.gz", b"[1, 2, 3]")
    files["fake gz"] = tmp_path / "fake.json.gz"
    files["fake gz"].write_bytes(b"{not gzip}")
    return files


@pytest.mark.parametrize(
    "case",
    ["truncated gzip", "invalid JSON", "truncated JSON", "empty file", "no traceEvents", "not an object", "fake gz"],
)
def test_bad_input_fails_alone_with_a_clear_message(tmp_path: Path, bad_files: dict[str, Path], case: str) -> None:
    con = db.connect(tmp_path / "x.duckdb")
    bad = bad_files[case]
    results, _ = pipeline.load_paths(con, [HTA_RANK0, bad, HTA_RANK1])
    statuses = [r.status for r in results]
    assert statuses == ["loaded", "failed", "loaded"], [r.message for r in results]
    message = results[1].message
    assert str(bad) in message and "\n" not in message
    expected_words = {
        "truncated gzip": "truncated gzip",
        "invalid JSON": "invalid JSON",
        "truncated JSON": "truncated JSON",
        "empty file": "empty file",
        "no traceEvents": "no traceEvents",
        "not an object": "not an object",
        "fake gz": "not gzip",
    }[case]
    assert expected_words in message
    # all or nothing: nothing of the bad file is in any table
    assert con.execute("select count(*) from traces").fetchall()[0][0] == 2
    for table in ("gpu_events", "launches", "annotations", "cpu_ops", "steps"):
        ids = {r[0] for r in con.execute(f"select distinct trace_id from {table}").fetchall()}
        assert ids <= {r.trace_id for r in results if r.status == "loaded"}, table


def test_no_gpu_events_unknown_categories_and_non_ascii(tmp_path: Path) -> None:
    trace = {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 3, "world_size": 8},
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::addmm — ✓ 矩阵", "pid": 1, "tid": 1, "ts": 10.5, "dur": 2.25},
            {"ph": "X", "cat": "mystery_cat", "name": "x", "pid": 1, "tid": 1, "ts": 11, "dur": 1},
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": "execute_context_0(0)_generation_4(4)",
                "pid": 1,
                "tid": 1,
                "ts": 9,
                "dur": 20,
            },
        ],
    }
    import json

    cpu_only = _write_gz(tmp_path / "cpu.json.gz", json.dumps(trace, ensure_ascii=False).encode())
    con = db.connect(tmp_path / "x.duckdb")
    (result,), _ = pipeline.load_paths(con, [cpu_only])
    assert result.status == "loaded"
    assert any("no GPU events" in w for w in result.warnings)
    assert any("mystery_cat" in w for w in result.warnings)
    assert con.execute("select name, start_ns, dur_ns from cpu_ops").fetchall() == [
        ("aten::addmm — ✓ 矩阵", 1700000000000010500, 2250)
    ]
    assert con.execute("select rank, world_size from traces").fetchall() == [(3, 8)]
    assert con.execute("select phase, batch_size, is_empty from steps").fetchall() == [("decode", 4, True)]


def test_capture_directory_levels_and_invalid_files(tmp_path: Path) -> None:
    import json

    cap = tmp_path / "cap"
    (cap / "c1").mkdir(parents=True)
    (cap / "c64").mkdir()
    good1 = cap / "c1" / "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"
    good2 = cap / "c64" / "dp0_pp0_tp0_dcp0_ep0_rank0.2.pt.trace.json.gz"
    bad = cap / "c64" / "dp0_pp0_tp1_dcp0_ep1_rank1.3.pt.trace.json.gz"
    shutil.copy(HTA_RANK0, good1)
    shutil.copy(HTA_RANK1, good2)
    bad.write_bytes(B200.read_bytes()[:1000])
    stats = {
        "requests": 64,
        "errors": 0,
        "output_tokens": 2048,
        "duration_s": 3.5,
        "output_tok_s": 585.1,
        "ttft_ms": {"p50": 30.0, "p90": 41.0, "p99": 50.0},
        "tpot_ms": {"p50": 11.0, "p90": 12.0, "p99": 13.0},
        "itl_ms": {"p50": 11.0, "p90": 12.5, "p99": 14.0},
    }
    manifest = {
        "k25trace_capture": 1,
        "levels": [
            {
                "name": "c1",
                "concurrency": 1,
                "dir": "c1",
                "stats": {**stats, "requests": 1},
                "files": [{"path": "c1/" + good1.name, "valid": True, "problem": None}],
            },
            {
                "name": "c64",
                "concurrency": 64,
                "dir": "c64",
                "stats": stats,
                "files": [
                    {"path": "c64/" + good2.name, "valid": True, "problem": None},
                    {"path": "c64/" + bad.name, "valid": False, "problem": "truncated gzip"},
                ],
            },
        ],
    }
    (cap / "manifest.json").write_text(json.dumps(manifest))
    con = db.connect(tmp_path / "x.duckdb")
    results, notes = pipeline.load_paths(con, [cap])
    assert [r.status for r in results] == ["loaded", "loaded"]
    assert any("marks it invalid" in n and bad.name in n for n in notes)
    assert con.execute("select level, concurrency from traces order by concurrency").fetchall() == [
        ("c1", 1),
        ("c64", 64),
    ]
    assert con.execute(
        "select level, requests, ttft_p90_ms, itl_p99_ms from capture_levels order by level"
    ).fetchall() == [("c1", 1, 41.0, 14.0), ("c64", 64, 41.0, 14.0)]


def test_starting_the_workers_imports_nothing_heavy() -> None:
    """The command line starts the decode processes before it imports the loader: that import must stay cheap
    (no numpy, pyarrow, msgspec or DuckDB; ~0.5 s of a 2-core machine otherwise comes before the workers start)."""
    import subprocess
    import sys

    code = (
        "import sys; from k25trace.ingest import LoadOptions, start_workers; "
        "print([m for m in ('numpy', 'pyarrow', 'msgspec', 'duckdb', 'polars') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="pipe sizes are Linux's")
def test_each_workers_result_pipe_holds_a_mebibyte(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 4 CPUs a decode worker's result queue gets a pipe of ``limits.RESULT_PIPE_BYTES`` (1 MiB, Linux's most
    without privileges): a file's tables cross it in 16 times fewer reads than through the 64 KiB default; 0, or
    fewer CPUs, leaves the system's size. Read back with F_GETPIPE_SZ, from both ends."""
    import fcntl

    from k25trace.ingest import workers as workers_module

    get_size, set_size = fcntl.F_GETPIPE_SZ, fcntl.F_SETPIPE_SZ
    read_end, write_end = os.pipe()  # this system's default size, and whether 1 MiB may be set
    try:
        default = fcntl.fcntl(read_end, get_size)
        try:
            wide = fcntl.fcntl(read_end, set_size, 1 << 20)
        except OSError:  # above /proc/sys/fs/pipe-max-size here: the loader keeps the default too
            wide = default
    finally:
        os.close(read_end)
        os.close(write_end)

    def pipe_sizes(count: int, cpus: int) -> set[int]:
        monkeypatch.setattr(workers_module, "cpus", lambda: cpus)
        workers = workers_module._Workers(count)
        try:
            return {
                fcntl.fcntl(end, get_size) for q in workers.results for end in (q._reader.fileno(), q._writer.fileno())
            }
        finally:
            workers.close()

    assert pipe_sizes(2, 4) == {wide}
    assert pipe_sizes(1, 2) == {default}
    monkeypatch.setattr(ingest.limits, "RESULT_PIPE_BYTES", 0)
    assert pipe_sizes(1, 16) == {default}


def _result_files(prefix: str | None) -> list[str]:
    assert prefix is not None
    return sorted(p.name for p in Path("/dev/shm").iterdir() if p.name.startswith(prefix))


def _worker_messages(path: Path, taken: bool = False) -> tuple[list[Any], str | None, list[str]]:
    """A decode worker process streams ``path``: its raw messages as they come off the queue (``taken``: as the
    parent turns them back, while the workers are up), its load's result-file prefix, and the result files in
    /dev/shm once the file's End came."""
    from k25trace.ingest import workers as workers_module
    from k25trace.ingest.shared_results import taken as turned_back

    workers = workers_module._Workers(1)
    try:
        workers.prefetch([path], keep_python=False)
        task_id, _ = workers.planned[str(path)]
        raw: list[Any] = []
        while not raw or not isinstance(raw[-1], (ingest.messages.End, ingest.messages.Failed)):
            got_id, item = workers.results[0].get(timeout=120)
            assert got_id == task_id
            raw.append(turned_back(item, 0) if taken else item)
        return raw, workers.shared_prefix, _result_files(workers.shared_prefix)
    finally:
        workers.close()


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_worker_chunk_tables_cross_dev_shm_equal_and_nothing_stays() -> None:
    """A decode worker writes each chunk's tables to a file of /dev/shm (Arrow IPC) and sends its name; the parent
    maps it and gets tables equal, column for column, to the same file decoded in this process. Every file is
    unlinked when taken; files never taken go when the workers close."""
    from k25trace.ingest.chunks import _chunks

    raw, prefix, waiting = _worker_messages(B200)
    shared = [m for m in raw if isinstance(m, ingest.messages.SharedChunk)]
    assert shared and not [m for m in raw if isinstance(m, ingest.messages.Chunk) and m.tables], raw
    assert prefix is not None and waiting == sorted(Path(m.path).name for m in shared)
    assert not _result_files(prefix), "files of a closed load's results stayed in /dev/shm"

    raw, prefix, waiting = _worker_messages(B200, taken=True)
    got = [m for m in raw if isinstance(m, ingest.messages.Chunk)]
    assert not waiting and not _result_files(prefix)
    here = [m for m in _chunks(B200, False, lambda n: None) if isinstance(m, ingest.messages.Chunk)]
    assert len(got) == len(here)
    for mine, theirs in zip(got, here, strict=True):
        assert mine.tables.keys() == theirs.tables.keys()
        for key, table in theirs.tables.items():
            assert mine.tables[key].schema == table.schema and mine.tables[key].equals(table), key
        assert mine[1:] == theirs[1:]  # events and counters


def test_chunk_tables_go_through_the_pipe_without_dev_shm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``limits.SHARED_RESULTS = 0``, or no /dev/shm: the worker sends its chunks through the pipe. A worker that
    cannot write a file (a full or read-only /dev/shm) sends that chunk and every later one through the pipe."""
    from k25trace.ingest import shared_results
    from k25trace.ingest.chunks import _chunks

    monkeypatch.setattr(ingest.limits, "SHARED_RESULTS", 0)
    assert shared_results.results_prefix("k25trace_", "t") is None
    monkeypatch.setattr(ingest.limits, "SHARED_RESULTS", 1)
    monkeypatch.setattr(shared_results, "SHM_DIR", tmp_path / "none")
    assert shared_results.results_prefix("k25trace_", "t") is None

    chunks = [m for m in _chunks(B200, False, lambda n: None) if isinstance(m, ingest.messages.Chunk) and m.tables]
    blocker = tmp_path / "not-a-folder"  # room to spare, but no file can be made in it (root or not)
    blocker.write_bytes(b"")
    monkeypatch.setattr(shared_results, "SHM_DIR", blocker)
    writer = shared_results.ResultWriter("k25trace_0_t_r", 0)  # as if /dev/shm had been there at the start
    assert [writer.shared(c) for c in chunks] == chunks and writer.prefix is None
    assert [p.name for p in tmp_path.iterdir()] == [blocker.name] and blocker.read_bytes() == b""
    blocker.unlink()

    monkeypatch.setattr(shared_results, "SHM_DIR", tmp_path)
    writer = shared_results.ResultWriter("k25trace_0_t_r", 0)
    first = writer.shared(chunks[0])
    assert isinstance(first, ingest.messages.SharedChunk) and Path(first.path).parent == tmp_path
    back = shared_results.taken(first, 0).tables
    assert back.keys() == chunks[0].tables.keys() and all(back[k].equals(t) for k, t in chunks[0].tables.items())
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_dev_shm_short_of_room_sends_chunks_through_the_pipe_and_keeps_no_ring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk's file must leave ``limits.SHARED_RESULT_RESERVE_BYTES`` of /dev/shm free, else that chunk goes
    through the pipe (the next one may find room); the ring is not made where /dev/shm cannot hold it whole (its
    pages come as the parent writes them: short of room, the parent would die of SIGBUS), and a load of one big
    file then decodes it in its own process, whole."""
    from k25trace.ingest import shared_results
    from k25trace.ingest import workers as workers_module
    from k25trace.ingest.chunks import _chunks

    chunk = next(m for m in _chunks(B200, False, lambda n: None) if isinstance(m, ingest.messages.Chunk) and m.tables)
    free = shared_results.shm_free_bytes()
    writer = shared_results.ResultWriter(f"k25trace_{os.getpid()}_t_r", 0)
    monkeypatch.setattr(ingest.limits, "SHARED_RESULT_RESERVE_BYTES", free)
    assert writer.shared(chunk) is chunk and writer.prefix is not None  # not for good
    monkeypatch.setattr(ingest.limits, "SHARED_RESULT_RESERVE_BYTES", 0)
    back = shared_results.taken(writer.shared(chunk), 0)
    assert isinstance(back, ingest.messages.Chunk) and back.tables.keys() == chunk.tables.keys()

    monkeypatch.setattr(workers_module, "shm_free_bytes", lambda: 3 * ingest.limits.RING_BUFFER_BYTES)
    workers = workers_module._Workers(1)  # a ring of 4 buffers
    try:
        assert not workers.ring_ok() and workers.ring == []
    finally:
        workers.close()
    con = db.connect(":memory:")
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)
    results, _ = pipeline.load_paths(con, [B200], options)
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    counts = expected_counts(read_exact(B200))  # from the JSON
    gpu = counts["kernel"] + counts["gpu_memcpy"] + counts["gpu_memset"]
    assert con.execute("select count(*) from gpu_events").fetchall() == [(gpu,)]


@pytest.mark.skipif(not Path("/dev/shm").is_dir(), reason="no /dev/shm")
def test_a_load_through_dev_shm_stores_what_the_pipe_stores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same real files loaded by decode workers whose tables cross /dev/shm, and through the pipes: every
    table of the database equal, row for row; nothing of the load left in /dev/shm."""
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)
    rows: list[dict[str, Any]] = []
    for shared in (1, 0):
        monkeypatch.setattr(ingest.limits, "SHARED_RESULTS", shared)
        con = db.connect(tmp_path / f"shared{shared}.duckdb")
        results, _ = pipeline.load_paths(con, [B200, HTA_RANK0, HTA_RANK1], options)
        assert [r.status for r in results] == ["loaded"] * 3, [r.message for r in results]
        tables = [t for (t,) in con.execute("select table_name from duckdb_tables() where not temporary").fetchall()]
        when = {"traces": " exclude (loaded_at)"}  # the load's clock time
        rows.append({t: con.execute(f'select *{when.get(t, "")} from "{t}" order by all').fetchall() for t in tables})
        con.close()
    assert rows[0] == rows[1]
    assert not [p for p in Path("/dev/shm").iterdir() if p.name.startswith(f"k25trace_{os.getpid()}_")]


def _assert_same_rows(serial: Any, parallel: Any) -> None:
    """Both databases hold the same events of each file (trace ids aside) and the same traces rows."""
    for table in ("gpu_events", "launches", "annotations", "cpu_ops"):
        q = f"select t.file_name, x.* exclude (trace_id) from {table} x join traces t using (trace_id) order by all"
        assert serial.execute(q).fetchall() == parallel.execute(q).fetchall(), table
    q = "select file_name, event_count, skipped from traces order by 1"
    assert serial.execute(q).fetchall() == parallel.execute(q).fetchall()


def test_files_received_ahead_give_the_same_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``receive_ahead`` (4 CPUs or more) a thread takes the next file's chunks off its worker's queue while
    the file before is stored; the rows are the in-process path's. One worker streams every file and may have 2
    messages unread (it waits on the thread many times); a bad file is received ahead and fails alone; a copy of a
    loaded file, received ahead and then skipped, is dropped without taking the next file's messages off the same
    queue; no thread of the load (receiving, storing, ending the workers) outlives it."""
    import threading

    from k25trace.ingest import workers as workers_module

    monkeypatch.setattr(workers_module, "cpus", lambda: 2)  # one decode worker: every file on the same queue
    monkeypatch.setattr(ingest.limits, "RESULTS_IN_FLIGHT", 2)
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1 << 20)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(B200.read_bytes()[:300_000])
    copy = tmp_path / "copy.json.gz"
    shutil.copyfile(HTA_NCCL, copy)
    files = [B200, bad, HTA_NCCL, copy, MI300X_PIECEWISE]
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    received: list[str] = []
    receive_ahead = workers_module._Workers.receive_ahead

    def recording(self: Any, files: int) -> None:
        receive_ahead(self, files)
        received.extend(p for p in self.received if p not in received)

    monkeypatch.setattr(workers_module._Workers, "receive_ahead", recording)
    parallel = db.connect(tmp_path / "parallel.duckdb")
    options = ingest.LoadOptions(
        workers=2,
        parallel_min_bytes=1,
        receive_ahead=True,
        store_threads=1,
        receive_ahead_files=1,
        share_first_file=True,  # as below 12 CPUs, whatever machine runs the test
    )
    results, _ = pipeline.load_paths(parallel, files, options)
    statuses = ["loaded", "failed", "loaded", "skipped", "loaded"]
    assert [r.status for r in results] == [r.status for r in want] == statuses, [r.message for r in results]
    assert "truncated gzip" in results[1].message
    assert received == [str(bad), str(copy)]  # after B200, after HTA (the skipped copy's is dropped, not taken)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("k25trace-")]  # receive, store, close
    _assert_same_rows(serial, parallel)


def _hostile_rank(rank: int, late_kernel: str = "kernel_past_the_end_of_time") -> dict:
    """A small rank whose GPU activities, launches, annotations and CPU ops each hold an exact duplicate, and whose
    one kernel named ``late_kernel`` (a name of its own by default) starts past what 64-bit ns can hold once the
    base time is added."""
    base = 4_000_000_000_000_000_000  # a kernel at ts 5.5e15 us (5.5e18 ns) ends up past 2^63 - 1 ns
    events: list[dict] = []
    for i in range(40):
        ts = 100 + 10 * i
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"aten::op{i % 3}",
                "pid": rank,
                "tid": 1,
                "ts": ts,
                "dur": 4,
                "args": {"External id": i},
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": rank,
                "tid": 1,
                "ts": ts + 1,
                "dur": 2,
                "args": {"correlation": i, "External id": i},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"kernel_{i % 4}",
                "pid": 0,
                "tid": 7,
                "ts": ts + 3,
                "dur": 5,
                "args": {"correlation": i, "External id": i, "device": 0, "stream": 7},
            },
        ]
    annotation = {"ph": "X", "cat": "user_annotation", "name": "execute_model", "pid": rank, "tid": 1, "ts": 90}
    events += [{**annotation, "dur": 500}, {**annotation, "dur": 500}]  # twice
    events += [dict(events[3 * 5 + k]) for k in range(3)]  # call 5's op, launch and kernel, twice
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": late_kernel,
            "pid": 0,
            "tid": 7,
            "ts": 5.5e15,
            "dur": 1,
            "args": {"correlation": 999, "device": 0, "stream": 7},
        }
    )
    return {"baseTimeNanoseconds": base, "distributedInfo": {"rank": rank, "world_size": 3}, "traceEvents": events}


@pytest.mark.parametrize("store_threads", [1, 2])
def test_files_stored_at_once_drop_the_duplicates_and_bad_times_of_a_serial_load(
    tmp_path: Path, store_threads: int
) -> None:
    """Files stored at once are cleaned as a serial load cleans them (the GPU activities where the file is read when
    a key of theirs has no class yet, as in ranks 0 and 1; else, as in rank 2, whose late kernel's name ranks 0 and
    1 classified, in the store's thread with the rest): the same rows, kernel names and classes, warnings and
    skipped counts; against the JSON, each table loses exactly its duplicate, and the GPU activities the kernel past
    2^63 ns too."""
    import json

    files = []
    for rank in range(3):
        path = tmp_path / f"rank{rank}.pt.trace.json"
        path.write_text(json.dumps(_hostile_rank(rank, "kernel_1" if rank == 2 else "kernel_past_the_end_of_time")))
        files.append(path)
    files.append(HTA_NCCL)
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    parallel = db.connect(tmp_path / "parallel.duckdb")
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, store_threads=store_threads)
    got, _ = pipeline.load_paths(parallel, files, options)
    assert [r.status for r in got] == [r.status for r in want] == ["loaded"] * 4, [r.message for r in got]
    assert [r.warnings for r in got] == [r.warnings for r in want]
    _assert_same_rows(serial, parallel)
    for q in (
        "select name from kernel_names order by 1",
        "select n.name, c.* exclude (name_id) from kernel_classes c join kernel_names n using (name_id) order by all",
    ):
        assert serial.execute(q).fetchall() == parallel.execute(q).fetchall(), q
    for file in (files[0], files[2]):
        raw = json.loads(file.read_text())["traceEvents"]
        by_cat = {c: sum(e["cat"] == c for e in raw) for c in ("kernel", "cuda_runtime", "user_annotation", "cpu_op")}
        q = f"select count(*) from {{}} join traces t using (trace_id) where t.file_name = '{file.name}'"
        assert parallel.execute(q.format("gpu_events")).fetchall()[0][0] == by_cat["kernel"] - 2
        assert parallel.execute(q.format("launches")).fetchall()[0][0] == by_cat["cuda_runtime"] - 1
        assert parallel.execute(q.format("annotations")).fetchall()[0][0] == by_cat["user_annotation"] - 1
        assert parallel.execute(q.format("cpu_ops")).fetchall()[0][0] == by_cat["cpu_op"] - 1
        skipped = json.loads(parallel.execute(q.replace("count(*)", "t.skipped").format("gpu_events")).fetchall()[0][0])
        assert skipped.get("(duplicate)") == 4, skipped


@pytest.mark.parametrize(("store_threads", "share_first_file"), [(1, 1), (2, 1), (2, 0)])
def test_several_files_received_ahead_at_once_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_threads: int, share_first_file: int
) -> None:
    """With ``receive_ahead_files`` at 2, threads take two files' chunks off their workers' queues at once,
    never two on one queue; a copy skipped and a bad file among them change nothing else: the rows are the
    in-process path's, and no thread of the load (receiving, storing, ending the workers) outlives it. When the
    first file is not shared out, the first two files are received from the start (their workers never wait on a
    full queue), the first included."""
    import threading

    from k25trace.ingest import workers as workers_module

    monkeypatch.setattr(workers_module, "cpus", lambda: 8)  # three decode workers, files dealt round robin
    monkeypatch.setattr(ingest.limits, "RESULTS_IN_FLIGHT", 2)
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1 << 20)
    copy = tmp_path / "copy.json.gz"
    shutil.copyfile(B200, copy)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(HTA_NCCL.read_bytes()[:200_000])
    files = [B200, HTA_NCCL, copy, bad, MI300X_PIECEWISE]
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    received: list[set[str]] = []  # the files received ahead after each call
    receive_ahead = workers_module._Workers.receive_ahead

    def recording(self: Any, files: int) -> None:
        receive_ahead(self, files)
        live = [r.worker for r in self.receiving if not r.done()]
        assert len(live) == len(set(live)), live  # one reader per queue
        received.append(set(self.received))

    monkeypatch.setattr(workers_module._Workers, "receive_ahead", recording)
    parallel = db.connect(tmp_path / "parallel.duckdb")
    options = ingest.LoadOptions(
        workers=3,
        parallel_min_bytes=1,
        receive_ahead=True,
        store_threads=store_threads,
        receive_ahead_files=2,
        share_first_file=bool(share_first_file),
    )
    results, _ = pipeline.load_paths(parallel, files, options)
    statuses = ["loaded", "loaded", "skipped", "failed", "loaded"]
    assert [r.status for r in results] == [r.status for r in want] == statuses, [r.message for r in results]
    assert max(len(got) for got in received) == 2
    # shared out, the first file is read from the ring, never received; else it is received from the start
    assert received[0] == ({str(HTA_NCCL), str(copy)} if share_first_file else {str(B200), str(HTA_NCCL)})
    assert not [t.name for t in threading.enumerate() if t.name.startswith("k25trace-")]  # receive, store, close
    _assert_same_rows(serial, parallel)


def test_a_file_decompressed_in_a_thread_gives_the_same_chunks_hash_and_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decompressed ahead in a thread (``threaded_read``, isal's ``igzip_threaded``), a real trace streams the same
    chunk tables, the same metadata, the sha256 and size of the file's bytes (hashlib over the file: the truth) and
    the same progress, also when the thread hands over blocks smaller than a read (``THREADED_READ_BLOCK``); a gzip
    cut short or failing its checksum, or invalid JSON before the end of the data, fails with the file named, as
    without the thread; no reading thread outlives its file."""
    import threading

    from k25trace.errors import TraceError
    from k25trace.ingest.chunks import _chunks
    from k25trace.ingest.messages import Chunk, End

    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1 << 16)  # many blocks through the thread's queue
    blob = B200.read_bytes()

    def stream(path: Path, threaded: bool, decode_threads: int = 1) -> tuple[list[Any], int]:
        read: list[int] = []

        def progress(n: int) -> None:  # the decompressing thread runs while the file is read, only then
            read.append(n)
            assert threaded == any("_decompress" in t.name for t in threading.enumerate())

        return list(_chunks(path, False, progress, threaded, decode_threads)), sum(read)

    before = threading.active_count()
    plain, plain_read = stream(B200, False)
    # the thread's blocks as large as a read, then smaller and not dividing it: a read takes several, cut anywhere
    for threaded_mode, decode_threads, thread_block in ((True, 1, 0), (True, 2, 0), (False, 3, 0), (True, 1, 5000)):
        monkeypatch.setattr(ingest.limits, "THREADED_READ_BLOCK", thread_block)
        threaded, threaded_read = stream(B200, threaded_mode, decode_threads)
        assert threading.active_count() == before
        assert plain_read == threaded_read == len(blob)
        end = threaded[-1]
        assert isinstance(end, End) and end == plain[-1]
        assert (end.sha256, end.read_bytes) == (hashlib.sha256(blob).hexdigest(), len(blob))
        chunks = [m for m in threaded if isinstance(m, Chunk)]
        assert len(chunks) == len(plain) - 1 > 3
        for mine, theirs in zip(chunks, plain[:-1], strict=True):
            assert mine.events == theirs.events and mine.tables.keys() == theirs.tables.keys()
            assert all(mine.tables[key].equals(theirs.tables[key]) for key in mine.tables)
            assert (mine.skipped, mine.unknown, mine.problems) == (theirs.skipped, theirs.unknown, theirs.problems)

    truncated = tmp_path / "truncated.json.gz"
    truncated.write_bytes(blob[: len(blob) // 2])
    corrupt = tmp_path / "corrupt.json.gz"
    corrupt.write_bytes(blob[:-8] + bytes([blob[-8] ^ 0xFF]) + blob[-7:])  # its CRC-32 wrong: found at the end
    text = gzip.decompress(blob)
    at = text.index(b'"ph": "X"', len(text) // 4)  # an unquoted value a quarter in: invalid JSON, much data after it
    invalid = _write_gz(tmp_path / "invalid.json.gz", text[:at] + b'"ph": X' + text[at + 9 :])
    cases = ((truncated, "truncated gzip"), (corrupt, "corrupt gzip data"), (invalid, "invalid JSON"))
    for bad, words in cases:  # the last fails while its thread still has blocks to decompress: it is stopped
        for threaded_mode, decode_threads in ((False, 1), (True, 1), (True, 2)):
            with pytest.raises(TraceError) as caught:
                stream(bad, threaded_mode, decode_threads)
            assert caught.value.path == str(bad) and words in caught.value.problem, caught.value.problem
    assert threading.active_count() == before


def test_several_files_decompressed_in_threads_give_the_same_rows(tmp_path: Path) -> None:
    """A load of several big files whose workers decompress each file in a thread (``threaded_read``) holds the
    in-process load's rows and sha256s; a truncated file among them fails alone, named."""
    bad = tmp_path / "truncated.json.gz"
    blob = HTA_NCCL.read_bytes()
    bad.write_bytes(blob[: len(blob) * 2 // 3])
    files = [B200, bad, HTA_NCCL, MI300X_PIECEWISE]
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    parallel = db.connect(tmp_path / "parallel.duckdb")
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, threaded_read=True)
    results, _ = pipeline.load_paths(parallel, files, options)
    assert [r.status for r in results] == [r.status for r in want] == ["loaded", "failed", "loaded", "loaded"]
    assert str(bad) in results[1].message and "truncated gzip" in results[1].message
    _assert_same_rows(serial, parallel)
    hashes = dict(parallel.execute("select file_name, sha256 from traces").fetchall())
    assert hashes == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (B200, HTA_NCCL, MI300X_PIECEWISE)}


def test_workers_started_before_the_load_are_used_and_closed(tmp_path: Path) -> None:
    """The command line starts the decode processes first (they boot while it imports DuckDB): a load handed them
    uses them, stores what an in-process load stores, and closes them; none are started for small files, and a
    load that fails before it starts closes them too."""
    import multiprocessing

    from k25trace.ingest import start_workers

    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)
    assert start_workers([B200], ingest.LoadOptions(workers=2)) is None  # below the size the workers take
    assert start_workers([B200], ingest.LoadOptions(workers=1, parallel_min_bytes=1)) is None
    assert start_workers([tmp_path / "nothing"], options) is None
    early = start_workers([B200], options)
    assert early is not None and len(early.procs) == 2
    con = db.connect(tmp_path / "early.duckdb")
    results, _ = pipeline.load_paths(con, [B200], options, workers=early)
    assert [r.status for r in results] == ["loaded"]
    assert early.procs == [] and not multiprocessing.active_children()
    serial = db.connect(tmp_path / "serial.duckdb")
    pipeline.load_paths(serial, [B200], ingest.LoadOptions(workers=1))
    query = "select event_id, name_id, start_ns, dur_ns, category, step_index from gpu_events order by event_id"
    assert con.execute(query).fetchall() == serial.execute(query).fetchall()
    closed = db.connect(tmp_path / "closed.duckdb")
    closed.close()
    early = start_workers([B200], options)
    with pytest.raises(K25Error, match="Connection already closed"):
        pipeline.load_paths(closed, [B200], options, workers=early)
    assert early is not None and early.procs == [] and not multiprocessing.active_children()


def test_several_big_files_leave_a_cpu_to_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """One big file is shared out among the workers; several big files get at most FILES_AHEAD_WORKERS and leave
    ``reserved_cpus`` CPUs to the parent, which stores one file while the workers decode the next ones (one worker
    on 2 CPUs, never fewer than one). Files stored at once (``store_threads``): one worker more per file stored at
    once, and ``reserved_cpus`` left to each store."""
    from k25trace.ingest import workers

    def on(count: int) -> None:
        monkeypatch.setattr(workers, "cpus", lambda: count)

    def options(**kwargs: Any) -> ingest.LoadOptions:
        return ingest.LoadOptions(**{"store_threads": 1, **kwargs})

    on(2)
    two = options(workers=2)
    assert workers.decode_workers(two, 1) == 2
    assert workers.decode_workers(two, 8) == 1
    assert workers.decode_workers(options(workers=2, reserved_cpus=0), 8) == 2
    on(1)
    assert workers.decode_workers(options(workers=4), 8) == 1
    on(4)
    assert workers.decode_workers(options(workers=4), 8) == 3
    assert workers.decode_workers(options(workers=4, store_threads=2), 8) == 2
    on(16)
    assert workers.decode_workers(options(workers=8), 1) == 4  # one file: its chunks, shared out
    assert workers.decode_workers(options(workers=8), 8) == 3 == ingest.limits.FILES_AHEAD_WORKERS
    assert workers.decode_workers(options(workers=8), 64) == 3
    assert workers.decode_workers(options(workers=2), 64) == 2
    assert workers.decode_workers(options(workers=8, reserved_cpus=0), 8) == 8
    assert workers.decode_workers(options(workers=8, store_threads=2), 8) == 4
    assert workers.decode_workers(options(workers=8, store_threads=2), 1) == 4


def test_many_cpus_decode_receive_and_store_files_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """From ``limits.ALL_AT_ONCE_MIN_CPUS`` CPUs and ``limits.ALL_AT_ONCE_MIN_GB`` of memory, a load of several big
    files decodes, receives and stores up to ``limits.ALL_AT_ONCE_FILES`` at once (one per two CPUs), none shared
    out: each file has a worker of its own, which decodes two chunks at once in threads and is given its next file
    once its file before is read. Fewer CPUs or less memory: the defaults of before."""
    from k25trace.ingest import model, workers

    def machine(cpus: int, gib: int) -> ingest.LoadOptions:
        for module in (model, workers):
            monkeypatch.setattr(module, "cpus", lambda: cpus)
        monkeypatch.setattr(model, "memory_bytes", lambda: gib << 30)
        return ingest.LoadOptions()

    monkeypatch.delenv("K25TRACE_STORE_THREADS", raising=False)
    monkeypatch.delenv("K25TRACE_DECODE_WORKERS", raising=False)
    many = machine(16, 64)
    settings = (many.store_threads, many.receive_ahead_files, many.share_first_file, many.receive_ahead)
    assert settings == (8, 8, False, True)
    assert many.decode_threads == ingest.limits.DECODE_THREADS == 2
    assert many.files_ahead_per_worker == ingest.limits.FILES_AHEAD_PER_WORKER == 1  # its next file once one is read
    assert workers.decode_workers(many, 8) == 8 and workers.decode_workers(many, 64) == 8
    assert workers.decode_workers(many, 1) == 4  # one file: its chunks, shared out, as before
    one = ingest.LoadOptions(store_threads=1)  # a caller's one store at a time: the rest as on a small machine
    assert (one.store_threads, one.receive_ahead_files, one.share_first_file) == (1, 1, True)
    eight = ingest.LoadOptions(store_threads=8, share_first_file=True)  # what a caller sets is kept
    assert (eight.store_threads, eight.receive_ahead_files, eight.share_first_file) == (8, 8, True)
    twelve = machine(12, 64)
    assert (twelve.store_threads, twelve.receive_ahead_files, twelve.share_first_file) == (6, 6, False)
    assert workers.decode_workers(twelve, 8) == 6 and twelve.decode_threads == 2
    for before in (machine(16, 31), machine(8, 64)):  # too little memory; too few CPUs
        assert (before.store_threads, before.receive_ahead_files, before.share_first_file) == (2, 1, True)
        assert before.decode_threads == 1  # faster workers would fill their queues sooner: more memory
        assert before.files_ahead_per_worker == 0  # a few workers, every file given at once, as before
    small = machine(2, 64)
    assert (small.store_threads, small.receive_ahead_files, small.share_first_file) == (1, 1, True)
    assert small.decode_threads == 1
    # a worker decompresses in a thread of its own from 4 CPUs: on 2 every CPU is busy already
    assert [machine(n, 64).threaded_read for n in (2, 3, 4, 16)] == [False, False, True, True]
    monkeypatch.setenv("K25TRACE_STORE_THREADS", "3")  # a setting of how many to store at once wins: no more ahead
    told = machine(16, 64)
    assert (told.store_threads, told.receive_ahead_files, told.share_first_file) == (3, 1, True)
    assert told.decode_threads == 1 and told.files_ahead_per_worker == 0


def _record_feeds_and_prefetches(
    monkeypatch: pytest.MonkeyPatch, workers_class: Any
) -> tuple[list[Path], list[list[Path]]]:
    """Record the files the workers' class shares out through the ring (``feed``) and the lists of files it is given
    to stream whole (``prefetch``, one list per call); the methods still run."""
    fed: list[Path] = []
    planned: list[list[Path]] = []
    feed, prefetch = workers_class.feed, workers_class.prefetch

    def recording_feed(self: Any, path: Path, *args: Any) -> Any:
        fed.append(path)
        return feed(self, path, *args)

    def recording_prefetch(self: Any, paths: list[Path], *args: Any) -> None:
        planned.append(list(paths))
        prefetch(self, paths, *args)

    monkeypatch.setattr(workers_class, "feed", recording_feed)
    monkeypatch.setattr(workers_class, "prefetch", recording_prefetch)
    return fed, planned


def _as_on_16_cpus_and_64_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's defaults as on a machine of 16 CPUs and 64 GiB (everything at once), whatever this one has."""
    from k25trace.ingest import model
    from k25trace.ingest import workers as workers_module

    for module in (model, workers_module):
        monkeypatch.setattr(module, "cpus", lambda: 16)
    monkeypatch.setattr(model, "memory_bytes", lambda: 64 << 30)
    monkeypatch.delenv("K25TRACE_STORE_THREADS", raising=False)


@pytest.mark.parametrize("files_ahead", [0, 1])
def test_a_load_of_all_files_at_once_gives_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files_ahead: int
) -> None:
    """With the defaults of a 16-CPU, 64 GiB machine (everything at once), every big file is given to the workers
    from the start, none through the shared-memory ring, up to 8 received ahead and 8 stored at once: a copy
    skipped and a truncated file among them change nothing else, the rows are the in-process path's, and no
    receiving or storing thread outlives the load. A worker holds one file not read yet at most
    (``limits.FILES_AHEAD_PER_WORKER``): its next file is given when that one is read (7 files on 4 workers); with
    that bound off (0) every file is given at once, as before."""
    import threading

    from k25trace.ingest import workers as workers_module

    _as_on_16_cpus_and_64_gib(monkeypatch)
    copy = tmp_path / "copy.json.gz"
    shutil.copyfile(B200, copy)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(HTA_NCCL.read_bytes()[:200_000])
    files = [B200, HTA_NCCL, copy, bad, MI300X_PIECEWISE, HTA_RANK0, HTA_RANK1]
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    fed, planned = _record_feeds_and_prefetches(monkeypatch, workers_module._Workers)
    monkeypatch.setattr(ingest.limits, "FILES_AHEAD_PER_WORKER", files_ahead)
    given_at_once: list[int] = []  # after each give: the most files one worker holds that are not read yet
    give = workers_module._Workers._give

    def recording_give(self: Any, worker: int) -> None:
        give(self, worker)
        held = [list(self.given.values()).count(w) for w in range(self.count)]
        given_at_once.append(max(held))

    monkeypatch.setattr(workers_module._Workers, "_give", recording_give)
    options = ingest.LoadOptions(workers=4, parallel_min_bytes=1)  # the rest as on a 16-CPU, 64 GiB machine
    assert (options.store_threads, options.receive_ahead_files, options.share_first_file) == (8, 8, False)
    assert options.decode_threads == 2  # each worker decodes two chunks at once, in threads
    parallel = db.connect(tmp_path / "parallel.duckdb")
    results, _ = pipeline.load_paths(parallel, files, options)
    statuses = ["loaded", "loaded", "skipped", "failed", "loaded", "loaded", "loaded"]
    assert [r.status for r in results] == [r.status for r in want] == statuses, [r.message for r in results]
    assert str(bad) in results[3].message and "truncated" in results[3].message
    assert fed == [] and planned == [files]  # all given to the workers at once, from the start
    # held back to one a worker, or two (7 files on 4 workers) when every file is given at once
    assert max(given_at_once) == (files_ahead or 2), given_at_once
    assert not [t for t in threading.enumerate() if t.name.startswith(("k25trace-receive", "k25trace-store"))]
    _assert_same_rows(serial, parallel)


def test_files_skipped_before_their_read_do_not_hold_back_the_next_files_of_their_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one file ahead per worker (the 16-CPU defaults), files given to the workers or still held back for them
    that vanish before they are read are skipped, never read: the next file of each worker is still given to it.
    Six files on two workers (0, 2, 4 and 1, 3, 5), the middle four removed once the load has given out the first
    two: the first and last load, the four fail with their names, and the load ends (a file held back behind two
    skipped ones of its worker once waited forever)."""
    import threading

    from k25trace.ingest import workers as workers_module

    _as_on_16_cpus_and_64_gib(monkeypatch)
    middle = [tmp_path / f"gone{i}.json.gz" for i in range(4)]
    for path, source in zip(middle, (HTA_NCCL, HTA_RANK0, HTA_RANK1, B200), strict=True):
        shutil.copyfile(source, path)
    files = [B200, *middle, MI300X_PIECEWISE]
    prefetch = workers_module._Workers.prefetch

    def prefetch_then_remove(self: Any, paths: list[Path], *args: Any) -> None:
        prefetch(self, paths, *args)
        assert len(self.given) == 2 and self.files_ahead == 1  # one file a worker, the rest held back
        for path in middle:
            path.unlink()

    monkeypatch.setattr(workers_module._Workers, "prefetch", prefetch_then_remove)
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1)
    assert options.files_ahead_per_worker == 1
    con = db.connect(tmp_path / "parallel.duckdb")
    done: list[Any] = []
    load = threading.Thread(target=lambda: done.append(pipeline.load_paths(con, files, options)), daemon=True)
    load.start()
    load.join(timeout=300)
    assert not load.is_alive(), "the load waits for a file no worker was given"
    results, _ = done[0]
    assert [r.status for r in results] == ["loaded", "failed", "failed", "failed", "failed", "loaded"]
    for result, path in zip(results[1:5], middle, strict=True):
        assert path.name in result.message and "cannot read" in result.message, result.message
    serial = db.connect(tmp_path / "serial.duckdb")
    pipeline.load_paths(serial, [B200, MI300X_PIECEWISE], ingest.LoadOptions(workers=1))
    _assert_same_rows(serial, con)


def test_memory_bytes_is_the_machines_or_its_containers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The memory a load may use: the machine's, or the container's cgroup limit (v2, else v1) where lower."""
    from k25trace.ingest import model

    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(model, "CGROUP_MEMORY_LIMITS", (str(v2), str(v1)))
    assert model.memory_bytes() == machine  # no cgroup file
    for text, want in (("max\n", machine), (f"{4 << 30}\n", 4 << 30), (f"{machine * 2}\n", machine)):
        v2.write_text(text)
        assert model.memory_bytes() == want, text
    v2.unlink()
    v1.write_text("9223372036854771712\n")  # v1 without a limit
    assert model.memory_bytes() == machine
    v1.write_text(f"{8 << 30}\n")
    assert model.memory_bytes() == 8 << 30
    v2.write_text("max\n")  # v2 first, where both are there
    assert model.memory_bytes() == machine


@pytest.mark.parametrize(
    "many,warm,workers,bad_first",
    [
        (False, False, 2, False),
        (False, True, 2, False),
        (True, False, 2, False),
        (True, False, 1, False),
        (True, False, 1, True),
    ],
    ids=[
        "one-file-shared",
        "one-file-warm-start",
        "many-files-prefetched",
        "many-files-one-worker",
        "many-files-the-first-bad",
    ],
)
def test_worker_processes_give_the_same_rows_and_isolate_bad_files(
    tmp_path: Path, many: bool, warm: bool, workers: int, bad_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The multi-process decode path (used for big files) stores exactly what the in-process path stores. One
    file: through the ring from the first block, or (warm start) with its first blocks decoded in this process
    while the workers start: here the workers count as started after the parent has decoded 3 blocks of 1 MiB
    (the rest go through the ring). Many files: the first through the ring, the others streamed ahead from the
    moment it is read (also when it fails, and then the others are still loaded); each worker may have only 2
    messages unread, so the workers streaming ahead wait for the parent (a bounded queue) many times, across the
    bad file's failure; two workers, or one (a 2-CPU machine leaves the other CPU to the store: one worker streams
    every file)."""
    from k25trace.ingest import loader as loader_module
    from k25trace.ingest import workers as workers_module

    monkeypatch.setattr(workers_module, "cpus", lambda: workers + 1)  # seen in this process, where decode_workers runs
    monkeypatch.setattr(ingest.limits, "WARM_START", warm)
    if many:
        monkeypatch.setattr(ingest.limits, "RESULTS_IN_FLIGHT", 2)
        monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1 << 20)
    if warm:
        monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1 << 20)
        attached = workers_module._Workers._ring_attached
        asked: list[int] = []

        def late(self: Any, wait: bool = False) -> bool:  # not attached for 3 blocks, then attached (waiting)
            asked.append(1)
            return len(asked) > 3 and attached(self, wait=True)

        monkeypatch.setattr(workers_module._Workers, "_ring_attached", late)
        chunk_tasks: list[Any] = []
        put = workers_module._Workers.feed

        def counting_feed(self: Any, *args: Any) -> Any:
            for item in put(self, *args):
                yield item
            chunk_tasks.append(len(self.ring))

        monkeypatch.setattr(workers_module._Workers, "feed", counting_feed)
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(B200.read_bytes()[:300_000])
    files = ([bad, B200, HTA_NCCL] if bad_first else [B200, bad, HTA_NCCL]) if many else [B200]
    serial = db.connect(tmp_path / "serial.duckdb")
    pipeline.load_paths(serial, files, ingest.LoadOptions(workers=1))
    parallel = db.connect(tmp_path / "parallel.duckdb")
    started: list[int] = []
    real_workers = workers_module._Workers

    class Counted(real_workers):  # type: ignore[misc,valid-type]
        def __init__(self, count: int) -> None:
            started.append(count)
            super().__init__(count)

    fed, planned = _record_feeds_and_prefetches(monkeypatch, real_workers) if many else ([], [])
    monkeypatch.setattr(workers_module, "_Workers", Counted)
    monkeypatch.setattr(loader_module, "_Workers", Counted)
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, store_threads=1, share_first_file=True)
    results, _ = pipeline.load_paths(parallel, files, options)
    assert started == [workers if many else 2]
    if many:
        where = 0 if bad_first else 1
        assert [r.status for r in results] == ["failed" if i == where else "loaded" for i in range(3)]
        assert "truncated gzip" in results[where].message and str(bad) in results[where].message
    if many:  # the first through the ring (where /dev/shm allows one), the others streamed whole
        shm = Path("/dev/shm")
        want = ([files[0]], files[1:]) if shm.is_dir() and os.access(shm, os.W_OK) else ([], files)
        assert (fed, [path for call in planned for path in call]) == want
    query = (
        "select t.file_name, g.event_id, g.kind, n.name, g.start_ns, g.dur_ns, g.correlation, g.grid_x, "
        "g.category, g.step_index "
        "from gpu_events g join kernel_names n using (name_id) join traces t using (trace_id) order by 1, 2"
    )
    assert serial.execute(query).fetchall() == parallel.execute(query).fetchall()
    for table in ("launches", "annotations", "cpu_ops"):
        q = (
            f"select t.file_name, x.event_id, x.name, x.start_ns from {table} x join traces t using (trace_id) "
            "order by 1, 2"
        )
        assert serial.execute(q).fetchall() == parallel.execute(q).fetchall(), table
    assert (
        serial.execute("select file_name, event_count, skipped from traces order by 1").fetchall()
        == parallel.execute("select file_name, event_count, skipped from traces order by 1").fetchall()
    )
    if warm:
        assert len(asked) == 4 and chunk_tasks == [6]  # 3 blocks here, then the ring (6 buffers) for the rest


def _tables(con: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of a k25trace database, rows sorted, trace ids read as file names, load times left out."""
    q = "select table_name from duckdb_tables() where schema_name = 'main'"
    names = [r[0] for r in con.execute(q).fetchall()]
    rows = {}
    for table in names:
        q = f"select column_name from duckdb_columns() where schema_name = 'main' and table_name = '{table}'"
        cols = [r[0] for r in con.execute(q).fetchall()]
        keep = ", ".join(f"x.{c}" for c in cols if c not in ("trace_id", "loaded_at"))
        if "trace_id" in cols and table != "traces":
            q = f"select t.file_name, {keep} from {table} x join traces t using (trace_id) order by all"
        else:
            q = f"select {keep} from {table} x order by all"
        rows[table] = con.execute(q).fetchall()
    return rows


def test_files_stored_at_once_give_the_same_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``store_threads`` (8 CPUs or more) big files are stored at once, each in a transaction of its own on a
    cursor of its own: every table is the one-after-another load's, row for row, ids included. A bad file fails
    alone; a copy of a file still being stored waits for it and is then skipped; no store thread outlives the
    load."""
    import threading

    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(B200.read_bytes()[:300_000])
    copy = tmp_path / "copy.json.gz"
    shutil.copyfile(HTA_NCCL, copy)
    files = [B200, bad, HTA_NCCL, copy, MI300X_PIECEWISE, HTA_RANK0, HTA_RANK1]
    serial = db.connect(tmp_path / "serial.duckdb")
    want, _ = pipeline.load_paths(serial, files, ingest.LoadOptions(workers=2, parallel_min_bytes=1, store_threads=1))
    stored_by: list[str] = []
    store = ingest.loader.Loader.store

    def recording(self: Any, read: Any, cursors: Any) -> Any:
        stored_by.append(threading.current_thread().name)
        return store(self, read, cursors)

    monkeypatch.setattr(ingest.loader.Loader, "store", recording)
    at_once = db.connect(tmp_path / "at_once.duckdb")
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, store_threads=3)
    results, _ = pipeline.load_paths(at_once, files, options)
    assert len(stored_by) == 5 and all(name.startswith("k25trace-store") for name in stored_by)
    statuses = ["loaded", "failed", "loaded", "skipped", "loaded", "loaded", "loaded"]
    assert [r.status for r in results] == [r.status for r in want] == statuses, [r.message for r in results]
    assert [r.trace_id for r in results] == [r.trace_id for r in want]
    assert [r.message for r in results] == [r.message for r in want]
    assert not [t for t in threading.enumerate() if t.name.startswith("k25trace-store")]
    got, expected = _tables(at_once), _tables(serial)
    assert got.keys() == expected.keys()
    for table in expected:
        assert got[table] == expected[table], table
    assert at_once.execute("select count(*) from gpu_events").fetchall()[0][0] > 0


def test_a_file_whose_store_fails_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file stored beside others that fails in its own transaction (here its layers) is rolled back, and the rows
    it wrote first for every file (its new kernel names and their classes) go when no other trace uses them: the
    database holds what a load of the other files alone holds (ids aside: the failed file's trace id is not given
    again)."""
    from k25trace import layers

    build_layers = layers.build_layers
    failing = {"trace": -1}

    def fail_one(con: Any, trace_id: int) -> None:
        name = con.execute("select file_name from traces where trace_id = ?", [trace_id]).fetchall()
        if name and name[0][0] == HTA_NCCL.name:
            raise K25Error("layers failed on purpose")
        build_layers(con, trace_id)

    monkeypatch.setattr(layers, "build_layers", fail_one)
    files = [B200, HTA_NCCL, MI300X_PIECEWISE]
    at_once = db.connect(tmp_path / "at_once.duckdb")
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, store_threads=3)
    results, _ = pipeline.load_paths(at_once, files, options)
    assert [r.status for r in results] == ["loaded", "failed", "loaded"], [r.message for r in results]
    assert "layers failed on purpose" in results[1].message
    others = db.connect(tmp_path / "others.duckdb")
    pipeline.load_paths(others, [B200, MI300X_PIECEWISE], ingest.LoadOptions(workers=1))
    for q in (
        "select name, short_name from kernel_names order by all",
        "select n.name, kind, collective_name, category, rule_id from kernel_classes join kernel_names n"
        " using (name_id) order by all",
        "select t.file_name, n.name, g.category, count(*) from gpu_events g join traces t using (trace_id)"
        " join kernel_names n using (name_id) group by all order by all",
        "select file_name, sha256 from traces order by all",
        "select count(*) from steps",
    ):
        assert at_once.execute(q).fetchall() == others.execute(q).fetchall(), q
    assert failing["trace"] == -1
