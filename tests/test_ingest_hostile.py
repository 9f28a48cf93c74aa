"""k25trace load against hostile and unlucky input (issue 11, items 3, 6, 7, 9, 10, 11, 12, 18, 19).

Every test loads the exact input that broke the loader (tests/data/hostile-ingest/, see its README.md) and checks
what is stored, what is said, and that the other files of the same call still load.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import selectors
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

from helpers import B200, HTA_NCCL, HTA_RANK0, HTA_RANK1, SGLANG, expected_ns
from k25trace import db, ingest, pipeline
from k25trace.ingest import scan

DATA = Path(__file__).parent / "data" / "hostile-ingest"
ROOT = Path(__file__).resolve().parent.parent
SERIAL = ingest.LoadOptions(workers=1)
# the shared-memory ring path, even for tiny files; two workers for several files too, on any machine
PARALLEL = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)


@pytest.fixture(autouse=True)
def _ring_from_the_first_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """Here the one-file parallel path uses the ring for every block: no block decoded in the parent while the
    workers start (that warm start is tested in test_ingest.py), or a tiny file would never reach the ring."""
    monkeypatch.setattr(ingest.limits, "WARM_START", False)


def _connect(tmp_path: Path, name: str = "x.duckdb") -> duckdb.DuckDBPyConnection:
    return db.connect(tmp_path / name)


def _stored(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    return {
        "gpu": con.execute(
            "select g.event_id, n.name, g.start_ns, g.dur_ns from gpu_events g join kernel_names n "
            "using (name_id) order by 1"
        ).fetchall(),
        "launches": con.execute("select event_id, name, start_ns, dur_ns from launches order by 1").fetchall(),
        "annotations": con.execute("select event_id, name, start_ns, dur_ns from annotations order by 1").fetchall(),
        "cpu_ops": con.execute("select event_id, name, start_ns, dur_ns from cpu_ops order by 1").fetchall(),
    }


def _expected(trace: dict) -> dict[str, list[tuple]]:
    """What the loader must store, read independently (stdlib json, Decimal arithmetic)."""
    base = int(trace.get("baseTimeNanoseconds", 0))
    tables = {
        "kernel": "gpu",
        "gpu_memcpy": "gpu",
        "gpu_memset": "gpu",
        "cuda_runtime": "launches",
        "cuda_driver": "launches",
        "user_annotation": "annotations",
        "gpu_user_annotation": "annotations",
        "cpu_op": "cpu_ops",
    }
    out: dict[str, list[tuple]] = {t: [] for t in ("gpu", "launches", "annotations", "cpu_ops")}
    for i, e in enumerate(trace["traceEvents"]):
        table = tables.get(e.get("cat"))
        if table and e.get("ph") == "X" and "ts" in e:
            out[table].append((i, e["name"], base + expected_ns(trace, e["ts"]), expected_ns(trace, e.get("dur", 0))))
    return out


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"), parse_float=Decimal)


# ------------------------------------------------------------------------------------------ 10: event boundaries


@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
@pytest.mark.parametrize("name", ["string-with-boundary", "nested-list", "metadata-after-events"])
def test_valid_json_with_a_false_boundary_loads_exactly(tmp_path: Path, name: str, options: ingest.LoadOptions) -> None:
    """`}, {` inside a string, inside a nested list, or in metadata after traceEvents is no event boundary."""
    path = DATA / f"{name}.pt.trace.json"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0], options)
    assert [r.status for r in results] == ["loaded", "loaded"], [r.message for r in results]
    trace = _read(path)
    tid = results[0].trace_id
    assert _stored_of(con, tid) == _expected(trace)
    row = con.execute(
        "select rank, world_size, device_name, device_count, event_count from traces where trace_id = ?", [tid]
    ).fetchall()[0]
    assert row[4] == len(trace["traceEvents"])
    if name == "metadata-after-events":  # the metadata after the events is read, not taken for events
        assert row[:4] == (1, 2, "GPU one", 2)


@pytest.mark.parametrize("scanner", ["scanner", "msgspec"])
@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
def test_only_the_top_level_trace_events_key_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: ingest.LoadOptions, scanner: str
) -> None:
    """Issue 34, 4a: `{"meta": {"traceEvents": []}, "traceEvents": [...]}` loaded as 0 events ("CPU-only trace"):
    the first `"traceEvents": [` anywhere was taken for the array. The compiled scanner and msgspec read the same."""
    if scanner == "msgspec":
        monkeypatch.setenv(scan.DISABLE_ENV, "1")
    path = DATA / "traceEvents-key-nested-first.pt.trace.json"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path], options)
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    assert not [w for w in results[0].warnings if "CPU-only" in w or "no GPU events" in w], results[0].warnings
    trace = _read(path)
    assert _stored_of(con, results[0].trace_id) == _expected(trace)
    assert len(_expected(trace)["gpu"]) == 1
    ((event_count, metadata),) = con.execute("select event_count, metadata from traces").fetchall()
    assert event_count == 3
    assert json.loads(metadata)["meta"] == {"traceEvents": []}  # the nested key is metadata, as written


@pytest.mark.parametrize(
    "text, problem",
    [
        ('{"meta": {"traceEvents": [{"ph": "X"}]}, "other": 1}', "no traceEvents array: not a Kineto/Chrome trace"),
        ('[{"traceEvents": []}]', "top-level JSON is a list, not an object with traceEvents"),
        ('{"note": "\\"traceEvents\\": [", "x": 1}', "no traceEvents array: not a Kineto/Chrome trace"),
        ('{"traceEvents": {"ph": "X"}}', "the top-level traceEvents is not an array: not a Kineto trace"),
    ],
    ids=["only-nested", "top-level-list", "in-a-string", "not-an-array"],
)
def test_a_trace_events_key_that_is_not_the_top_level_array_is_an_error(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(text)
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0], SERIAL)
    assert [r.status for r in results] == ["failed", "loaded"]
    assert results[0].message == f"{path}: {problem}"


@pytest.mark.parametrize("cut", [1, 7, 13, 19, 40])
def test_the_top_level_key_is_found_across_block_boundaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cut: int
) -> None:
    """The prefix is read block by block: a key, its colon or a nested key cut between two blocks."""
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", cut)
    path = DATA / "traceEvents-key-nested-first.pt.trace.json"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path], SERIAL)
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    assert _stored_of(con, results[0].trace_id) == _expected(_read(path))


def _stored_of(con: duckdb.DuckDBPyConnection, trace_id: int) -> dict[str, list[tuple]]:
    return {
        "gpu": con.execute(
            "select g.event_id, n.name, g.start_ns, g.dur_ns from gpu_events g join kernel_names n "
            "using (name_id) where trace_id = ? order by 1",
            [trace_id],
        ).fetchall(),
        "launches": con.execute(
            "select event_id, name, start_ns, dur_ns from launches where trace_id = ? order by 1", [trace_id]
        ).fetchall(),
        "annotations": con.execute(
            "select event_id, name, start_ns, dur_ns from annotations where trace_id = ? order by 1", [trace_id]
        ).fetchall(),
        "cpu_ops": con.execute(
            "select event_id, name, start_ns, dur_ns from cpu_ops where trace_id = ? order by 1", [trace_id]
        ).fetchall(),
    }


@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
def test_invalid_json_names_the_real_event_and_byte(tmp_path: Path, options: ingest.LoadOptions) -> None:
    path = DATA / "invalid-at-event-3.pt.trace.json"
    assert path.read_bytes()[410:412] == b",,"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [HTA_RANK0, path, HTA_RANK1], options)
    assert [r.status for r in results] == ["loaded", "failed", "loaded"]
    assert results[1].message == (
        f"{path}: invalid JSON in traceEvents at event 3 (byte 411 of the decompressed "
        "JSON): JSON is malformed: object keys must be strings"
    )


@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
def test_truncated_json_names_the_event_it_ends_in(tmp_path: Path, options: ingest.LoadOptions) -> None:
    text = (DATA / "invalid-at-event-3.pt.trace.json").read_bytes().replace(b",,", b",")
    cut = text.index(b'"name": "d"') + 5
    path = tmp_path / "cut.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text[:cut]))
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0], options)
    assert [r.status for r in results] == ["failed", "loaded"]
    assert results[0].message == (
        f"{path}: truncated JSON: the file ends inside traceEvents at event 3 (byte {cut:,} "
        "of the decompressed JSON) (the writer may still be running, or was killed)"
    )


def _tricky_trace(n: int, seed: int) -> dict:
    """Valid Kineto-like JSON full of false boundaries: names with `}, {`, `]`, escaped quotes and non-ASCII,
    args with lists of objects, metadata with `}, {` after traceEvents."""
    rng = random.Random(seed)
    names = ["plain", 'x}, {"cat": "kernel", "ts": 1', "list]]}, {[", 'quote\\"}, {\\"', "uni✓}, {矩阵", "end}"]
    cats = ["kernel", "gpu_memcpy", "cpu_op", "cuda_runtime", "user_annotation", "python_function", "ac2g"]
    events = []
    for i in range(n):
        cat = rng.choice(cats)
        e: dict = {
            "ph": "X",
            "cat": cat,
            "name": f"{rng.choice(names)}#{i}",
            "pid": 1,
            "tid": rng.choice([1, 7]),
            "ts": 1000 + i * 3 + rng.choice([0, 0.001, 0.5, 0.999]),
            "dur": rng.choice([0, 1, 2.25, 0.001]),
        }
        args: dict = {"correlation": i, "External id": i}
        if rng.random() < 0.4:
            args["Concrete Inputs"] = [{"a": [1, {"b": "}, {"}]}, {"c": "]}, {"}, [{"d": {}}, {}]]
        if rng.random() < 0.2:
            args["deep"] = json.loads("[" * 40 + "{}, {}" + "]" * 40)
        e["args"] = args
        events.append(e)
    return {
        "schemaVersion": 1,
        "baseTimeNanoseconds": 1700000000000000000,
        "traceEvents": events,
        "distributedInfo": {"rank": 0, "world_size": 1},
        "deviceProperties": [{"id": 0, "name": "A}, {B"}, {"id": 1, "name": "C"}],
        "traceName": "t}, {",
    }


@pytest.mark.parametrize("block", [64, 257, 4096])
@pytest.mark.parametrize("mode", ["serial", "parallel", "parallel-always-guessing"])
def test_tricky_trace_at_any_block_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, mode: str) -> None:
    """Blocks of a few bytes put chunk ends everywhere, so every false boundary gets its turn as the guessed cut:
    what is stored is exactly what the JSON holds, on the in-process and the shared-memory path (re-cut with
    chunks in flight when guessing never stops)."""
    trace = _tricky_trace(300, seed=block)
    path = tmp_path / "tricky.pt.trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump(trace, fh, indent=1 if block % 2 else None, ensure_ascii=block == 64)
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", block)
    if mode == "parallel-always-guessing":
        monkeypatch.setattr(ingest.limits, "FAST_MISSES", 10**9)
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path], SERIAL if mode == "serial" else PARALLEL)
    assert result.status == "loaded", result.message
    assert _stored(con) == _expected(json.loads(json.dumps(trace), parse_float=Decimal))
    assert con.execute("select device_count, event_count from traces").fetchall() == [(2, 300)]


@pytest.mark.parametrize("block", [64, 257, 4096])
@pytest.mark.parametrize("threads", [2, 3])
def test_tricky_files_decoded_whole_by_threads_of_their_workers_load_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int, threads: int
) -> None:
    """Files streamed whole by their workers, each with ``threads`` chunks decoded at once in threads of its own
    (``decode_threads``), guessing every cut: a cut that did not hold drops the chunks cut after it, in flight, and
    the text is cut exactly again; every table holds exactly what the JSON holds, read here, for both files."""
    paths = []
    for seed in (block, block + 1):
        trace = _tricky_trace(300, seed=seed)
        path = tmp_path / f"tricky{seed}.pt.trace.json.gz"
        with gzip.open(path, "wt", encoding="utf-8") as fh:
            json.dump(trace, fh, indent=1 if block % 2 else None, ensure_ascii=block == 64)
        paths.append(path)
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", block)
    monkeypatch.setattr(ingest.limits, "FAST_MISSES", 10**9)
    options = ingest.LoadOptions(
        workers=2, parallel_min_bytes=1, reserved_cpus=0, share_first_file=False, decode_threads=threads
    )
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, paths, options)
    assert [r.status for r in results] == ["loaded", "loaded"], [r.message for r in results]
    for path, result in zip(paths, results, strict=True):
        truth = _expected(json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal))
        assert _stored_of(con, result.trace_id) == truth


def test_an_event_larger_than_a_ring_buffer_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared-memory path used to fail a file with an event larger than its buffers; it is decoded in-process."""
    monkeypatch.setattr(ingest.limits, "RING_BUFFER_BYTES", 8192)
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", 1024)
    trace = _tricky_trace(50, seed=1)
    trace["traceEvents"][20]["name"] = "k" * 50_000
    path = tmp_path / "big-event.pt.trace.json"
    path.write_text(json.dumps(trace))
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path], PARALLEL)
    assert result.status == "loaded", result.message
    assert _stored(con) == _expected(json.loads(path.read_text(), parse_float=Decimal))


# ------------------------------------------------------------------------------------------ 11: deep nesting


@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
def test_args_nested_1000_deep_load_and_deeper_fail_alone(tmp_path: Path, options: ingest.LoadOptions) -> None:
    deep1000, deep3000 = DATA / "deep-args-1000.pt.trace.json", DATA / "deep-args-3000.pt.trace.json"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [deep1000, deep3000, HTA_RANK0], options)
    assert [r.status for r in results] == ["loaded", "failed", "loaded"], [r.message for r in results]
    assert results[1].message.startswith(f"{deep3000}: an event nested deeper than 1,024 levels at event 1 (byte ")
    assert results[1].message.endswith("of the decompressed JSON): not loaded")
    ops = con.execute("select name, start_ns, dur_ns from cpu_ops where trace_id = ?", [results[0].trace_id]).fetchall()
    assert ops == [("aten::deep", 1700000000000010000, 5000)]


@pytest.mark.parametrize("depth", [600, 1010, 1100])
def test_deep_metadata_is_stored_or_reported(tmp_path: Path, depth: int) -> None:
    """orjson writes 254 levels, reads 1,024; the stdlib writes ~990: deeper metadata is left out with a warning,
    beyond what can be read the file fails alone; before, any of them crashed the load."""
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}], '
        f'"deepMeta": {"[" * depth + "]" * depth}, "traceName": "x"}}'
    )
    path = tmp_path / "deepmeta.pt.trace.json"
    path.write_text(text)
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0])
    assert [r.status for r in results] == ["failed" if depth > 1024 else "loaded", "loaded"], results[0].message
    metadata = con.execute("select metadata from traces where file_name = ?", [path.name]).fetchall()
    if depth == 600:
        assert json.loads(metadata[0][0])["traceName"] == "x" and "deepMeta" in json.loads(metadata[0][0])
        assert not [w for w in results[0].warnings if "metadata not stored" in w]
    elif depth == 1010:
        assert [w for w in results[0].warnings if "metadata not stored" in w] == [
            f"{path}: metadata not stored (nested too deep to write as JSON): deepMeta"
        ]
        assert json.loads(metadata[0][0]) == {"traceName": "x"}
    else:
        assert results[0].message.startswith(f"{path}: invalid JSON outside traceEvents: ")


# ------------------------------------------------------------------------------------------ 6: times that are no time


@pytest.mark.parametrize("options", [SERIAL, PARALLEL], ids=["serial", "parallel"])
@pytest.mark.parametrize(
    "name, bad, text",
    [
        ("bad-times", 10, "8 GPU activities, 2 CPU ops"),
        ("huge-times-json", 4, "4 GPU activities"),
    ],
)
def test_nan_infinity_and_huge_times_are_skipped_never_wrapped(
    tmp_path: Path, name: str, bad: int, text: str, options: ingest.LoadOptions
) -> None:
    path = DATA / f"{name}.pt.trace.json"
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0], options)
    assert [r.status for r in results] == ["loaded", "loaded"], [r.message for r in results]
    warning = [w for w in results[0].warnings if "no time" in w]
    assert warning == [
        f"{path}: skipped {bad} event(s) whose ts or dur is no time (NaN, Infinity, or beyond 64-bit "
        f"ns, e.g. 1e16 µs): {text}"
    ]
    tid = results[0].trace_id
    assert con.execute(
        "select n.name, start_ns, dur_ns, end_ns from gpu_events join kernel_names n using (name_id) "
        "where trace_id = ?",
        [tid],
    ).fetchall() == [("good", 1700000000000010500, 2250, 1700000000000012750)]
    assert con.execute("select name, start_ns, dur_ns from cpu_ops where trace_id = ?", [tid]).fetchall() == [
        ("good_op", 1700000000000009000, 5000)
    ]
    assert json.loads(con.execute("select skipped from traces where trace_id = ?", [tid]).fetchall()[0][0]) == {
        "(bad time)": bad
    }
    for table in ("gpu_events", "launches", "annotations", "cpu_ops", "steps"):  # nothing absurd anywhere
        column = "wall_ns" if table == "steps" else "dur_ns"
        assert con.execute(f"select count(*) from {table} where {column} < 0 or {column} > 10e9").fetchall() == [(0,)]


def test_a_base_time_that_is_no_time_rejects_the_file(tmp_path: Path) -> None:
    path = tmp_path / "base.pt.trace.json"
    path.write_text(
        '{"baseTimeNanoseconds": 1e300, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", '
        '"pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'
    )
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, HTA_RANK0])
    assert [r.status for r in results] == ["failed", "loaded"]
    assert results[0].message == f"{path}: baseTimeNanoseconds is 1e+300: not a time in ns"


# ------------------------------------------------------------------------------------------ 19: silent acceptance


def test_negative_durations_long_kernels_and_duplicates_are_reported(tmp_path: Path) -> None:
    path = DATA / "negative-long-duplicate.pt.trace.json"
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path])
    assert result.status == "loaded"
    assert result.warnings == [
        f"{path}: skipped 2 event(s) with a negative duration: 1 GPU activity, 1 CPU op",
        f"{path}: dropped 2 exact duplicate event(s) (every stored field equal to an earlier event's; the first is "
        "kept): 1 GPU activity, 1 launch",
        f"{path}: 1 GPU activity longer than an hour (the longest 11.6 days): kept; such times usually mean a "
        "broken trace",
    ]
    assert con.execute(
        "select n.name, event_id, dur_ns from gpu_events join kernel_names n using (name_id) order by event_id"
    ).fetchall() == [("gemm_kernel", 2, 2250), ("eleven_day_kernel", 8, 10**15)]
    assert con.execute("select event_id from launches order by 1").fetchall() == [(1,), (5,), (7,)]
    assert con.execute("select count(*) from cpu_ops").fetchall() == [(0,)]
    assert json.loads(con.execute("select skipped from traces").fetchall()[0][0]) == {
        "(negative duration)": 2,
        "(duplicate)": 2,
    }
    # the step holds one gemm call, not two
    assert con.execute("select count(*) from gpu_events where step_index = 0 and dur_ns = 2250").fetchall() == [(1,)]


def _collective_trace() -> dict:
    """Kernels whose collective args are complete, partial (only a process group), loosely typed (numbers as
    strings, a list where a string is expected) or out of range, among many kernels without any, plus kernels and
    runtime calls that another phase or a missing ts keeps out of the tables."""
    events: list[dict] = []
    for i in range(400):
        e: dict = {
            "ph": "X",
            "cat": "kernel",
            "name": f"k{i % 7}",
            "pid": 0,
            "tid": 7,
            "ts": 1000 + i,
            "dur": 0.5,
            "args": {"correlation": i, "device": 0, "stream": 7},
        }
        if i == 5:
            e["args"].update(
                {
                    "Collective name": "allreduce",
                    "In msg nelems": 1024,
                    "Out msg nelems": "1024",
                    "Group size": 8,
                    "dtype": "BFloat16",
                    "Process Group Name": "0",
                    "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
                }
            )
        elif i == 300:
            e["args"].update({"Process Group Name": "tp"})
        elif i == 350:
            e["args"].update(
                {"Collective name": ["all", "gather"], "Group size": 1 << 40, "In msg nelems": True, "dtype": 3}
            )
        elif i == 360:
            e["ph"] = "i"
        elif i == 370:
            del e["ts"]
        events.append(e)
    events.append({"ph": "B", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 5})
    return {"schemaVersion": 1, "traceEvents": events}


@pytest.mark.parametrize("block", [256, 1 << 20])
def test_collective_args_are_read_row_by_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """A kernel's collective columns are its own args, whatever else is in its chunk (a chunk with no complete
    collective used to drop a lone process group name); loose values are read or NULL, never fatal; events that
    are no timed complete event are skipped and counted whichever decoder takes their chunk."""
    monkeypatch.setattr(ingest.limits, "BLOCK_SIZE", block)
    path = tmp_path / "collectives.pt.trace.json"
    path.write_text(json.dumps(_collective_trace(), indent=1))
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path], SERIAL)
    assert result.status == "loaded", result.message
    rows = con.execute(
        "select event_id, collective_name, msg_in_nelems, msg_out_nelems, msg_dtype, group_size, pg_name, pg_ranks "
        "from gpu_events where collective_name is not null or msg_in_nelems is not null or msg_out_nelems is not null "
        "or msg_dtype is not null or group_size is not null or pg_name is not null or pg_ranks is not null "
        "order by event_id"
    ).fetchall()
    assert rows == [
        (5, "allreduce", 1024, 1024, "BFloat16", 8, "0", "[0, 1, 2, 3, 4, 5, 6, 7]"),
        (300, None, None, None, None, None, "tp", None),
        (350, '["all","gather"]', None, None, "3", None, None, None),
    ]
    assert con.execute("select count(*) from gpu_events").fetchall() == [(398,)]
    skipped = json.loads(con.execute("select skipped from traces").fetchall()[0][0])
    assert skipped == {"kernel": 2, "cuda_runtime": 1}


def test_kernels_without_ts_are_not_called_a_cpu_only_trace(tmp_path: Path) -> None:
    path = DATA / "kernels-without-ts.pt.trace.json"
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path])
    assert result.status == "loaded"
    assert result.warnings == [
        f"{path}: no GPU events stored: its 3 kernel/memcpy/memset event(s) have no ts; loaded its CPU events"
    ]
    assert not any("CPU-only" in w for w in result.warnings)


def test_real_traces_have_no_duplicates_dropped(tmp_path: Path) -> None:
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [B200, HTA_NCCL, SGLANG])
    assert [r.status for r in results] == ["loaded"] * 3
    assert not any("duplicate" in w for r in results for w in r.warnings)


def _drop_dac_caps() -> str:
    """Python source that makes root subject to file permissions (drops CAP_DAC_OVERRIDE/READ_SEARCH)."""
    return textwrap.dedent("""
        import ctypes, os
        if os.geteuid() == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            class Header(ctypes.Structure):
                _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
            class Data(ctypes.Structure):
                _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                            ("inheritable", ctypes.c_uint32)]
            header, data = Header(0x20080522, 0), (Data * 2)()
            assert libc.capget(ctypes.byref(header), data) == 0
            for d in data[:1]:
                d.effective &= ~0b110; d.permitted &= ~0b110; d.inheritable &= ~0b110
            assert libc.capset(ctypes.byref(header), data) == 0, ctypes.get_errno()
    """)


def test_an_unreadable_subdirectory_is_an_error(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "ok").mkdir(parents=True)
    (run / "secret").mkdir()
    shutil.copy(HTA_RANK0, run / "ok" / "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz")
    shutil.copy(HTA_RANK1, run / "secret" / "dp0_pp0_tp1_dcp0_ep1_rank1.2.pt.trace.json.gz")
    os.chmod(run / "secret", 0)
    script = _drop_dac_caps() + textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from k25trace import db, ingest, pipeline
        try:
            Path({str(run / "secret")!r}).iterdir().__next__()
            print("STILL READABLE"); sys.exit(0)
        except PermissionError:
            pass
        con = db.connect(Path({str(tmp_path / "x.duckdb")!r}))
        results, _ = pipeline.load_paths(con, [Path({str(run)!r})])
        for r in results:
            print(r.status, r.message)
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    finally:
        os.chmod(run / "secret", 0o755)
    assert out.returncode == 0, out.stderr
    if "STILL READABLE" in out.stdout:
        pytest.skip("cannot make a directory unreadable here (capabilities cannot be dropped)")
    lines = out.stdout.splitlines()
    assert lines[0] == (
        f"failed {run / 'secret'}: cannot read directory: Permission denied; trace files in it are not loaded"
    )
    assert lines[1] == "loaded "
    assert len(lines) == 2


def test_a_symlinked_subdirectory_is_followed_once(tmp_path: Path) -> None:
    """Issue 34, 4c: a symlinked folder next to real trace files was skipped in silence (exit 0). It is followed;
    a link back up (a loop) and a second link to the same folder are searched once, with a note."""
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    (elsewhere / "deeper").mkdir(parents=True)
    shutil.copy(HTA_RANK0, run / "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz")
    shutil.copy(HTA_RANK1, elsewhere / "deeper" / "dp0_pp0_tp1_dcp0_ep1_rank1.2.pt.trace.json.gz")
    (run / "linked").symlink_to(elsewhere)
    (run / "again").symlink_to(elsewhere / "deeper")  # the same folder through a second link
    (elsewhere / "deeper" / "loop").symlink_to(run)  # back up: a symlink loop
    out = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", str(run), "--db", str(tmp_path / "x.duckdb")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "2 loaded, 0 already there, 0 failed" in out.stderr
    con = _connect(tmp_path)
    assert con.execute("select path, rank from traces order by rank").fetchall() == [
        (str(run / "dp0_pp0_tp0_dcp0_ep0_rank0.1.pt.trace.json.gz"), 0),
        (str(elsewhere / "deeper" / "dp0_pp0_tp1_dcp0_ep1_rank1.2.pt.trace.json.gz"), 1),
    ]
    files, notes, errors = ingest.discover([run])
    assert len(files) == 2 and not errors
    why = "already searched (a symlink loop or a second link to it)"
    assert sorted(notes) == [
        f"{run / 'again' / 'loop'}: skipped: the same folder as {run}, {why}",
        f"{run / 'linked' / 'deeper'}: skipped: the same folder as {run / 'again'}, {why}",
    ]


# ------------------------------------------------------------------------------------------ 3: rank of one process


def test_rank_from_distributed_info_file_name_or_default(tmp_path: Path) -> None:
    src = DATA / "no-distributed-info.json"
    vllm = tmp_path / "dp0_pp0_tp3_dcp0_ep3_rank3.1764412345678901234.pt.trace.json"
    older = tmp_path / "worker_rank-2.1764412345678901299.pt.trace.json"
    single = tmp_path / "single.pt.trace.json"
    for path in (vllm, older, single):
        text = src.read_text().replace('"gemm_kernel"', f'"gemm_{path.name[:6]}"')  # distinct contents
        path.write_text(text)
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [vllm, older, single, HTA_RANK1])
    assert [r.status for r in results] == ["loaded"] * 4
    rows = con.execute("select file_name, rank, world_size, rank_source from traces order by trace_id").fetchall()
    assert rows == [
        (vllm.name, 3, None, "file_name"),
        (older.name, 2, None, "file_name"),
        (single.name, 0, 1, "default"),
        (HTA_RANK1.name, 1, 128, "distributedInfo"),
    ]
    assert [r.rank for r in results] == [3, 2, 0, 1]
    # every table carries the rank: joins on rank find the single-process trace
    assert con.execute(
        "select count(*) from gpu_events g join steps s using (trace_id, rank, step_index) where g.trace_id = ?",
        [results[2].trace_id],
    ).fetchall() == [(1,)]


def test_an_older_database_gets_the_rank_source_column(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    con = db.connect(path)
    con.execute("alter table traces drop column rank_source")
    con.close()
    con = db.connect(path)
    (result,), _ = pipeline.load_paths(con, [DATA / "no-distributed-info.json"])
    assert result.status == "loaded", result.message
    assert con.execute("select rank, world_size, rank_source from traces").fetchall() == [(0, 1, "default")]


# ------------------------------------------------------------------------------------------ 18: non-UTF-8 file name


def test_a_file_name_that_is_not_utf8_loads(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    odd = Path(os.fsdecode(os.fsencode(str(folder)) + b"/trace-\xff\xfe.pt.trace.json"))
    shutil.copy(DATA / "no-distributed-info.json", odd)
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [folder])
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    shown = str(folder) + "/trace-\ufffd\ufffd.pt.trace.json"
    assert results[0].path == shown
    assert results[0].warnings == [
        f"{shown}: the file name is not valid UTF-8; path and file_name are stored with "
        "U+FFFD (�) in place of the bytes that are not"
    ]
    assert con.execute("select path, file_name from traces").fetchall() == [
        (str(folder.resolve()) + "/trace-\ufffd\ufffd.pt.trace.json", "trace-\ufffd\ufffd.pt.trace.json")
    ]
    # and through the command line: messages print, exit 0
    out = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", os.fsencode(str(odd)), "--db", str(tmp_path / "cli.duckdb")],
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert b"Traceback" not in out.stderr and b"not valid UTF-8" in out.stderr


# ------------------------------------------------------------------------------------------ 7: a file still growing


TINY_TRACE = (
    b'{"traceEvents": [{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2,"args":{"correlation":1}}]}'
)


def _hash_spy(monkeypatch: pytest.MonkeyPatch, then: Any = None) -> list[Path]:
    """The files the loader hashes before reading them (``then(path)`` runs after each hash)."""
    real = ingest.loader._sha256
    hashed: list[Path] = []

    def spy(p: Path) -> str:
        hashed.append(p)
        digest = real(p)
        if then is not None:
            then(p)
        return digest

    monkeypatch.setattr(ingest.loader, "_sha256", spy)
    return hashed


def test_the_stored_hash_is_of_the_bytes_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiler is still writing when the load starts: the hash is taken of the first part, then the writer
    finishes before the read. Stored must be the hash of what was read, so loading the finished file again is a
    no-op, not a second copy of the same trace. (A file is hashed before its read when a stored trace has its size:
    a trace of the first part's size is loaded first.)"""
    import hashlib

    whole = (DATA / "no-distributed-info.json").read_bytes()
    half = len(whole) // 2
    path = tmp_path / "growing.pt.trace.json"
    path.write_bytes(whole[:half])
    same_size = tmp_path / "other.pt.trace.json"  # another trace, of the first part's size (spaces after the JSON)
    same_size.write_bytes(TINY_TRACE.ljust(half, b" "))

    def writer_finishes(p: Path) -> None:
        if p == path and len(path.read_bytes()) < len(whole):
            with open(path, "ab") as fh:
                fh.write(whole[half:])

    hashed = _hash_spy(monkeypatch, writer_finishes)
    con = _connect(tmp_path)
    (other,), _ = pipeline.load_paths(con, [same_size])
    assert other.status == "loaded", other.message
    loader = ingest.Loader(con)
    first = loader.load(ingest.TraceFile(path))  # hash (of the first part), then read (the whole file)
    loader.close()
    assert hashed == [path]
    assert first.status == "loaded", first.message
    assert any("changed while it was read" in w for w in first.warnings)
    assert con.execute("select sha256, file_size from traces where trace_id = ?", [first.trace_id]).fetchall() == [
        (hashlib.sha256(whole).hexdigest(), len(whole))
    ]
    (again,), _ = pipeline.load_paths(con, [path])
    assert again.status == "skipped", again.message
    assert con.execute("select count(*) from traces").fetchall() == [(2,)]


def test_a_file_no_stored_trace_has_the_size_of_is_read_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file can be loaded already only if a stored trace has its size; any other file is not hashed before its
    read: its sha256 is taken of the bytes the read decodes. Its copy, loaded next, is hashed first and skipped."""
    import hashlib

    src = (DATA / "no-distributed-info.json").read_bytes()
    path, copy = tmp_path / "a.pt.trace.json", tmp_path / "b.pt.trace.json"
    path.write_bytes(src)
    copy.write_bytes(src)
    hashed = _hash_spy(monkeypatch)
    con = _connect(tmp_path)
    results, _ = pipeline.load_paths(con, [path, copy])
    assert [r.status for r in results] == ["loaded", "skipped"], [r.message for r in results]
    assert hashed == [copy]  # the first file: never hashed apart from its read
    assert results[1].message.endswith(f"already loaded as trace {results[0].trace_id} ({path.resolve()})")
    assert con.execute("select sha256, file_size from traces").fetchall() == [
        (hashlib.sha256(src).hexdigest(), len(src))
    ]


def test_a_file_read_while_half_written_is_not_stored(tmp_path: Path) -> None:
    whole = gzip.compress((DATA / "no-distributed-info.json").read_bytes())
    path = tmp_path / "half.pt.trace.json.gz"
    path.write_bytes(whole[: len(whole) // 2])
    con = _connect(tmp_path)
    (result,), _ = pipeline.load_paths(con, [path])
    assert result.status == "failed" and "truncated gzip" in result.message
    path.write_bytes(whole)
    (result,), _ = pipeline.load_paths(con, [path])
    assert result.status == "loaded"
    assert con.execute("select count(*) from traces").fetchall() == [(1,)]


# ------------------------------------------------------------------------------------------ 9: killing a load

KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path

    def main():
        from k25trace import db, ingest, pipeline

        class Pause:  # the first progress report: decode workers running (and the ring mapped, for one file)
            def start_file(self, tf):
                pass
            def advance(self, n):
                print("READY", flush=True)
                time.sleep(600)
            def close(self):
                pass

        ingest.limits.WARM_START = False  # the first report comes once the workers have mapped the ring
        con = db.connect(Path(sys.argv[1]))
        options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)
        pipeline.load_paths(con, [Path(p) for p in sys.argv[2:]], options, progress_factory=lambda files: Pause())

    if __name__ == "__main__":
        main()
""")


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _shm_mapped(pid: int) -> set[str]:
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {line.split("/dev/shm/", 1)[1].split(" (deleted)")[0] for line in maps.splitlines() if "/dev/shm/" in line}


def _ring_buffer(name: str, prefix: str) -> bool:
    """A ring buffer's name (``<prefix><pid>_<token>_<i>``), not a result file's (``..._r<worker>_<n>``, mapped by
    the parent while the tables read from it live)."""
    return name.startswith(prefix) and name.rsplit("_", 1)[-1].isdigit() and "_r" not in name[len(prefix) :]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_ring_of_the_first_file_is_unmapped_once_it_is_read(tmp_path: Path) -> None:
    """Several big files: the first goes through the shared-memory ring, then every process unmaps it (the others
    stream whole). The workers take the other files in turn (one or two workers: the second and fourth file, and
    the third), each after the unmap. When the third file is stored, every worker has streamed a file of its own,
    so taken the unmap before it, and they are still up for the fourth: no process of the load maps a ring
    buffer."""
    from k25trace.ingest.workers import SHM_PREFIX

    mapped: list[set[str]] = []
    workers: list[int] = []

    def check(result: ingest.FileResult) -> None:
        pids = [os.getpid(), *_children(os.getpid())]
        workers.append(len(pids) - 1)
        mapped.append({name for pid in pids for name in _shm_mapped(pid) if _ring_buffer(name, SHM_PREFIX)})

    con = _connect(tmp_path)
    options = ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0)
    results, _ = pipeline.load_paths(con, [B200, HTA_NCCL, HTA_RANK0, HTA_RANK1], options, on_result=check)
    assert [r.status for r in results] == ["loaded"] * 4, [r.message for r in results]
    assert workers[2] >= 2 and mapped[2] == set(), (workers, mapped)  # the workers (and the tracker) are still up


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
@pytest.mark.parametrize("files", ["one-file-ring", "several-files-prefetched"])
def test_killing_a_load_leaves_no_process_and_no_shared_memory(tmp_path: Path, sig: signal.Signals, files: str) -> None:
    traces = [B200] if files == "one-file-ring" else [B200, HTA_NCCL]
    script = tmp_path / "load.py"
    script.write_text(KILL_SCRIPT)
    dbfile = tmp_path / "x.duckdb"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(dbfile), *map(str, traces)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
        assert sel.select(timeout=240), "the load never reported progress"
        assert proc.stdout.readline() == b"READY\n"  # type: ignore[union-attr]
        children = _children(proc.pid)
        workers = [c for c in children if b"multiprocessing.spawn" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(workers) == 2, children
        segments = set().union(*(_shm_mapped(pid) for pid in [proc.pid, *workers]))
        if files == "one-file-ring":
            assert len([s for s in segments if not s.startswith("sem.")]) == 6, segments  # 2 * workers + 2 buffers
        proc.send_signal(sig)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [c for c in children if _alive(c)], "decode workers or the resource tracker outlived the load"
        assert not [s for s in segments if (Path("/dev/shm") / s).exists()], "shared memory left in /dev/shm"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con = db.connect(dbfile)
    assert con.execute("select count(*) from traces").fetchall() == [(0,)]  # no half-loaded trace
    assert con.execute("select count(*) from gpu_events").fetchall() == [(0,)]
    results, _ = pipeline.load_paths(con, traces, PARALLEL)
    assert [r.status for r in results] == ["loaded"] * len(traces)


def test_workers_end_with_a_parent_that_is_killed_while_they_decode(tmp_path: Path) -> None:
    """No progress callback in the way: kill -9 while the workers are decoding a file's chunks."""
    big = tmp_path / "big.pt.trace.json"
    trace = _tricky_trace(20000, seed=3)
    big.write_text(json.dumps(trace))
    script = tmp_path / "load.py"
    script.write_text(
        textwrap.dedent("""
        import sys
        from pathlib import Path
        def main():
            from k25trace import db, ingest, pipeline
            ingest.limits.BLOCK_SIZE = 1 << 16
            ingest.limits.WARM_START = False
            con = db.connect(Path(sys.argv[1]))
            while True:
                con.execute("delete from traces")
                pipeline.load_paths(con, [Path(sys.argv[2])], ingest.LoadOptions(workers=2, parallel_min_bytes=1))
                print("LOADED", flush=True)
        if __name__ == "__main__":
            main()
    """)
    )
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "x.duckdb"), str(big)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert proc.stdout.readline() == b"LOADED\n", proc.stderr.read()  # type: ignore[union-attr]
        deadline = time.monotonic() + 60
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = [
                c for c in _children(proc.pid) if b"multiprocessing.spawn" in Path(f"/proc/{c}/cmdline").read_bytes()
            ]
        assert len(workers) == 2
        proc.kill()
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# ------------------------------------------------------------------------------------------ 12: disk full, ulimit -f

FSIZE_SCRIPT = textwrap.dedent("""
    import resource, sys
    from pathlib import Path

    def main():
        limit = int(sys.argv[1])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        from k25trace import db, ingest, pipeline

        con = db.connect(Path(sys.argv[2]))
        results, _ = pipeline.load_paths(con, [Path(p) for p in sys.argv[3:]],
                                       ingest.LoadOptions(workers=2, parallel_min_bytes=1, reserved_cpus=0))
        for r in results:
            print(r.status, r.message, flush=True)

    if __name__ == "__main__":
        main()
""")


def _run_fsize(tmp_path: Path, limit: int, dbfile: Path, files: list[Path]) -> subprocess.CompletedProcess:
    script = tmp_path / "fsize.py"
    script.write_text(FSIZE_SCRIPT)
    return subprocess.run(
        [sys.executable, str(script), str(limit), str(dbfile), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )


def test_a_file_size_limit_below_the_ring_buffers_does_not_break_big_loads(tmp_path: Path) -> None:
    """`ulimit -f` under 32 MiB: the 32 MiB shared-memory buffers of a big load cannot be made (they count as
    files); the load decodes in-process instead."""
    dbfile = tmp_path / "x.duckdb"
    out = _run_fsize(tmp_path, 16 << 20, dbfile, [B200])  # one big file: the shared-memory ring path
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert out.stdout.splitlines() == ["loaded "]


def test_a_database_write_past_the_file_size_limit_fails_cleanly(tmp_path: Path) -> None:
    dbfile = tmp_path / "x.duckdb"
    out = _run_fsize(tmp_path, 1_500_000, dbfile, [B200, SGLANG])
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"failed {B200}: not stored: the commit failed: database error:")
    assert "File too large" in lines[0] and lines[0].endswith("(nothing of this file is in the database)")
    assert lines[1] == "loaded "  # the next file is still tried
    con = db.connect(dbfile)  # opens; holds SGLANG whole and nothing of B200
    assert con.execute("select file_name, gpu_event_count from traces").fetchall() == [(SGLANG.name, 558)]
    assert con.execute("select count(*) from gpu_events").fetchall() == [(558,)]
    results, _ = pipeline.load_paths(con, [B200, SGLANG])
    assert [r.status for r in results] == ["loaded", "skipped"]


@pytest.fixture()
def small_tmpfs(tmp_path: Path):
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("needs root to mount a small tmpfs")
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_at_commit_is_one_clean_error_and_the_rest_still_loads(tmp_path: Path, small_tmpfs: Path) -> None:
    dbfile = small_tmpfs / "x.duckdb"
    files = [B200, HTA_RANK0, HTA_NCCL, SGLANG]
    out = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", *map(str, files), "--db", str(dbfile)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "cannot rollback" not in out.stderr, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors and all(
        "No space left on device" in e and "nothing of this file is in the database" in e for e in errors
    )
    assert f"{len(files) - len(errors)} loaded" in out.stderr
    copy = tmp_path / "copy.duckdb"  # the database opens, elsewhere, with no half-loaded trace
    shutil.copy(dbfile, copy)
    if dbfile.with_name("x.duckdb.wal").exists():
        shutil.copy(dbfile.with_name("x.duckdb.wal"), tmp_path / "copy.duckdb.wal")
    con = db.connect(copy)
    rows = con.execute("select trace_id, gpu_event_count from traces").fetchall()
    assert len(rows) == len(files) - len(errors)
    for trace_id, gpu_n in rows:
        assert con.execute("select count(*) from gpu_events where trace_id = ?", [trace_id]).fetchall() == [(gpu_n,)]
    results, _ = pipeline.load_paths(con, files)
    assert sorted(r.status for r in results) == sorted(["loaded"] * len(errors) + ["skipped"] * len(rows))
