"""Engine steps, kernel classes and the breakdown on the real traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ALL_REAL, B200, HTA_RANK0, MI300X_FULL, MI300X_PIECEWISE, SGLANG, read_exact
from k25trace import db, pipeline
from k25trace.analysis import report


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    connection = db.connect(tmp_path_factory.mktemp("steps") / "steps.duckdb")
    results, _ = pipeline.load_paths(connection, ALL_REAL)
    assert all(r.status == "loaded" for r in results)
    yield connection
    connection.close()


def _tid(con, path: Path) -> int:
    return con.execute("select trace_id from traces where path = ?", [str(path.resolve())]).fetchall()[0][0]


def _steps(con, path: Path) -> list[dict]:
    frame = db.fetch_frame(con.execute("select * from steps where trace_id = ? order by step_index", [_tid(con, path)]))
    return frame.to_dicts()


def test_b200_prefill_step_with_odd_token_field(con) -> None:
    (step,) = _steps(con, B200)
    assert step["marker"] == "execute_context_1(888_788544)_generation_0(0)"
    assert (step["phase"], step["ctx_reqs"], step["ctx_tokens"], step["gen_reqs"], step["batch_size"]) == (
        "prefill",
        1,
        888,
        0,
        1,
    )
    assert step["source"] == "vllm" and not step["is_inferred"]
    cats = dict(
        con.execute(
            "select category, count(*) from kernels "
            "where trace_id = ? and short_name like '%multimem_all_reduce_kernel%' group by all",
            [_tid(con, B200)],
        ).fetchall()
    )
    assert cats == {"allreduce": 73}
    gather = con.execute(
        "select category from gpu_events where trace_id = ? and collective_name ilike '%gather%'", [_tid(con, B200)]
    ).fetchall()
    assert gather and {g[0] for g in gather} == {"comm_other"}


def test_b200_every_gpu_activity_lands_in_the_step(con) -> None:
    tid = _tid(con, B200)
    unassigned = con.execute(
        "select count(*) from gpu_events where trace_id = ? and step_index is null", [tid]
    ).fetchall()[0][0]
    total = con.execute("select count(*) from gpu_events where trace_id = ?", [tid]).fetchall()[0][0]
    # kernels launched before the first marker opened are outside any step
    launched_before = con.execute(
        "select count(*) from gpu_events g join launches l using (trace_id, correlation) "
        "where g.trace_id = ? and l.start_ns < (select min(marker_start_ns) from steps where trace_id = ?)",
        [tid, tid],
    ).fetchall()[0][0]
    assert unassigned == launched_before
    assert total - unassigned == _steps(con, B200)[0]["kernel_count"]


def test_mi300x_full_graph_decode_step(con) -> None:
    (step,) = _steps(con, MI300X_FULL)
    assert (step["phase"], step["batch_size"], step["gen_tokens"], step["graph_launches"]) == ("decode", 32, 32, 1)
    trace = read_exact(MI300X_FULL)
    kernels = sum(1 for e in trace["traceEvents"] if e.get("cat") == "kernel")
    assert kernels == 425
    in_step = con.execute(
        "select count(*) from gpu_events where trace_id = ? and kind = 'kernel' and step_index = 0",
        [_tid(con, MI300X_FULL)],
    ).fetchall()[0][0]
    assert in_step == 425


def test_mi300x_piecewise_mixed_step(con) -> None:
    (step,) = _steps(con, MI300X_PIECEWISE)
    assert (step["phase"], step["ctx_reqs"], step["ctx_tokens"], step["gen_reqs"], step["gen_tokens"]) == (
        "mixed",
        9,
        8155,
        37,
        37,
    )
    assert step["total_tokens"] == 8192
    assert step["graph_launches"] == 25


def test_sglang_decode_step(con) -> None:
    (step,) = _steps(con, SGLANG)
    assert (step["phase"], step["batch_size"]) == ("decode", 32)
    assert (
        step["kernel_count"]
        == con.execute("select count(*) from gpu_events where trace_id = ?", [_tid(con, SGLANG)]).fetchall()[0][0]
    )


def test_traces_without_markers_get_inferred_steps(con) -> None:
    steps = _steps(con, HTA_RANK0)
    assert len(steps) > 1 and all(
        s["is_inferred"] and s["phase"] == "unknown" and s["source"] == "inferred" for s in steps
    )


def test_time_adds_up_exactly_for_every_step(con) -> None:
    """Exclusive category time + overlap + idle = wall, to the nanosecond, on every real step."""
    bad = con.execute("""
        select s.trace_id, s.step_index, s.wall_ns, s.busy_ns, s.idle_ns, s.overlap_ns, sum(c.busy_ns) exclusive
        from steps s left join step_categories c using (trace_id, step_index)
        group by all
        having coalesce(sum(c.busy_ns), 0) + s.overlap_ns + s.idle_ns != s.wall_ns
            or s.busy_ns != coalesce(sum(c.busy_ns), 0) + s.overlap_ns
    """).fetchall()
    assert bad == []
    assert con.execute("select count(*) from steps where kernel_count > 0").fetchall()[0][0] >= 10


def test_busy_is_the_union_of_intervals(con) -> None:
    """busy_ns checked against an independent Python interval union for every step."""
    rows = con.execute(
        "select trace_id, step_index, start_ns, end_ns from gpu_events where step_index is not null "
        "order by trace_id, step_index, start_ns"
    ).fetchall()
    union: dict[tuple[int, int], int] = {}
    current: dict[tuple[int, int], list[int]] = {}
    for trace_id, step, start, end in rows:
        key = (trace_id, step)
        cur = current.get(key)
        if cur is None or start > cur[1]:
            if cur is not None:
                union[key] = union.get(key, 0) + cur[1] - cur[0]
            current[key] = [start, end]
        else:
            cur[1] = max(cur[1], end)
    for key, cur in current.items():
        union[key] = union.get(key, 0) + cur[1] - cur[0]
    got = {
        (r[0], r[1]): r[2]
        for r in con.execute("select trace_id, step_index, busy_ns from steps where kernel_count > 0").fetchall()
    }
    assert got == union


def test_category_sums_match_events(con) -> None:
    bad = con.execute("""
        select c.trace_id, c.step_index, c.category
        from step_categories c
        join (select trace_id, step_index, coalesce(category, 'other') category, sum(dur_ns) ns, count(*) n
              from gpu_events where step_index is not null group by all) g using (trace_id, step_index, category)
        where c.kernel_ns != g.ns or c.kernel_count != g.n
    """).fetchall()
    assert bad == []


def test_report_views(con) -> None:
    frame = report.breakdown(con, by="batch", phase="decode")
    assert set(frame["batch_size"].to_list()) == {32}
    for (_run_id, _batch), group in frame.group_by(["run_id", "batch_size"]):
        assert abs(sum(group["pct_of_step"].to_list()) - 100) < 0.2
        assert {"idle", "overlap", "other"} <= set(group["category"].to_list())
    cats = report.breakdown(con, by="category", phase="all")
    assert {"other", "idle", "overlap"} <= set(cats["category"].to_list())
    assert abs(sum(cats["pct_of_step"].to_list()) - 100) < 0.2
    kernels = report.breakdown(con, by="kernel", phase="all", top=5)
    assert kernels.height == 5 and (
        kernels["ms_per_step"].to_list() == sorted(kernels["ms_per_step"].to_list(), reverse=True)
    )
    steps = report.breakdown(con, by="step", phase="all")
    assert steps.height == con.execute("select count(*) from steps").fetchall()[0][0]
    ranks = report.breakdown(con, by="rank", phase="all")
    assert set(ranks["rank"].to_list()) == {0, 1}


@pytest.mark.parametrize(
    "marker, expected",
    [
        ("execute_context_0(0)_generation_4(12)", ("decode", 0, None, 4, 12, 4, True)),
        ("execute_context_0(0)_generation_64(64)", ("decode", 0, 0, 64, 64, 64, False)),
        ("execute_context_2(1024)_generation_30(30)", ("mixed", 2, 1024, 30, 30, 32, False)),
        ("execute_context_1(888_788544)_generation_0(0)", ("prefill", 1, 888, 0, 0, 1, False)),
        (
            "execute_40_context_1(sq8sk8sqsq64sqsk64)_generation_32(sq32sk900sqsq32sqsk900)",
            ("mixed", 1, 8, 32, 32, 33, False),
        ),
        ("execute_new_0_cached_16", ("decode", 0, None, 16, None, 16, None)),
        ("execute_new_3_cached_0", ("prefill", 3, None, 0, None, 3, None)),
        ("execute_new_1_cached_7", ("mixed", 1, None, 7, None, 8, None)),
        ("execute_context_0(0)_generation_0(0)", ("empty", 0, 0, 0, 0, 0, False)),
        ("step[DECODE bs=48]", ("decode", 0, None, 48, None, 48, None)),
        ("step[EXTEND bs=3]", ("prefill", 3, None, 0, None, 3, None)),
    ],
)
def test_marker_forms(tmp_path: Path, marker: str, expected: tuple) -> None:
    import gzip
    import json

    trace = {
        "distributedInfo": {"rank": 0, "world_size": 1},
        "baseTimeNanoseconds": 0,
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": marker, "pid": 1, "tid": 1, "ts": 100, "dur": 50},
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 110,
                "dur": 5,
                "args": {"correlation": 9},
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": "void vllm::rms_norm_kernel<c10::BFloat16>(float)",
                "pid": 0,
                "tid": 7,
                "ts": 120,
                "dur": 3,
                "args": {"correlation": 9, "stream": 7, "device": 0},
            },
        ],
    }
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    con = db.connect(tmp_path / "m.duckdb")
    pipeline.load_paths(con, [path])
    row = con.execute(
        "select phase, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, batch_size, is_spec_decode, "
        "kernel_count, is_empty from steps"
    ).fetchall()
    assert len(row) == 1
    phase, ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, batch, spec, kernels, empty = row[0]
    exp_phase, exp_cr, exp_ct, exp_gr, exp_gt, exp_b, exp_spec = expected
    assert (phase, ctx_reqs, gen_reqs, batch) == (exp_phase, exp_cr, exp_gr, exp_b)
    if exp_ct is not None:
        assert ctx_tokens == exp_ct
    if exp_gt is not None:
        assert gen_tokens == exp_gt
    assert spec == exp_spec
    assert kernels == 1 and empty == (phase == "empty")


H200X2_EAGER = Path(__file__).parent / "data" / "h200x2-decode-loop" / "eager"
H200_GRAPH = next((Path(__file__).parent / "data" / "h200-gaps" / "graph").glob("*.pt.trace.json.gz"))


def _read(path: Path) -> dict:
    import gzip
    import json
    from decimal import Decimal

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def _write(trace: dict, path: Path) -> None:
    """Write a trace read by _read back with its numbers exactly as they were (Decimal text, not floats)."""
    import gzip
    import json
    import re

    text = json.dumps(trace, default=lambda d: f"@@{d}@@")
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(re.sub(r'"@@([-0-9.Ee+]+)@@"', r"\1", text))


def _with_barrier(trace: dict) -> dict:
    """The real trace with a c10d::barrier after its last step marker, as a process-group barrier at the end of a
    profiled run leaves it: the barrier CPU op on the marker's thread, its cudaLaunchKernel inside it, and an NCCL
    all-reduce kernel (a copy of the trace's own last one) on the GPU, 300 µs after the last marker ended."""
    import copy
    from decimal import Decimal

    events = trace["traceEvents"]
    marker = max(
        (e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")),
        key=lambda e: e["ts"],
    )
    kernel = max((e for e in events if e.get("cat") == "kernel" and "AllReduce" in e["name"]), key=lambda e: e["ts"])
    corr = max(e["args"].get("correlation", 0) for e in events if isinstance(e.get("args"), dict)) + 1
    t = marker["ts"] + marker["dur"] + Decimal(300)
    events.append(
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "c10d::barrier",
            "pid": marker["pid"],
            "tid": marker["tid"],
            "ts": t,
            "dur": Decimal(200),
            "args": {},
        }
    )
    events.append(
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": marker["pid"],
            "tid": marker["tid"],
            "ts": t + 20,
            "dur": Decimal(5),
            "args": {"correlation": corr},
        }
    )
    barrier_kernel = copy.deepcopy(kernel)
    barrier_kernel.update(ts=t + 40, dur=Decimal(15))
    barrier_kernel["args"]["correlation"] = corr
    events.append(barrier_kernel)
    return trace


def test_a_barrier_after_the_last_step_marker_belongs_to_no_step(tmp_path: Path) -> None:
    """Issue 29.3 on the real eager TP2 pair with a c10d::barrier after the last marker: the all-reduces per step,
    counted here from the raw JSON (a kernel belongs to the marker its launch call follows, unless the call is
    inside a barrier op), are 17 in every step; k25trace puts the barrier's kernel in no step, so the last step's
    wall, its all-reduce count and the call sites are those of the other steps."""
    folder = tmp_path / "eager"
    folder.mkdir()
    truth = {}
    for src in sorted(H200X2_EAGER.glob("*.pt.trace.json.gz")):
        trace = _with_barrier(_read(src))
        _write(trace, folder / src.name)
        events = trace["traceEvents"]
        markers = sorted(
            e["ts"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")
        )
        barriers = [(e["ts"], e["ts"] + e["dur"], e["tid"]) for e in events if e.get("name") == "c10d::barrier"]
        calls = {
            e["args"]["correlation"]: (e["ts"], e["tid"])
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
        }
        per_step = [0] * len(markers)
        for e in events:
            if e.get("cat") == "kernel" and "AllReduce" in e["name"]:
                ts, tid = calls[e["args"]["correlation"]]
                if any(a <= ts <= b and tid == t for a, b, t in barriers):
                    continue
                per_step[max(i for i, m in enumerate(markers) if m <= ts)] += 1
        truth[src.name] = per_step
        assert per_step == [17] * len(markers)
    c = db.connect(tmp_path / "b.duckdb")
    results, _ = pipeline.load_paths(c, [folder])
    assert [r.status for r in results] == ["loaded"] * 2
    for name, per_step in truth.items():
        got = [
            n
            for (n,) in c.execute(
                "select count(e.step_index) from steps s join traces t using (trace_id) left join gpu_events e "
                "on e.trace_id = s.trace_id and e.step_index = s.step_index and e.category = 'allreduce' "
                "where t.file_name = ? group by s.step_index order by s.step_index",
                [name],
            ).fetchall()
        ]
        assert got == per_step
        # the barrier's kernel exists, in no step
        assert (
            c.execute(
                "select count(*) from gpu_events join traces using (trace_id) where file_name = ? "
                "and category = 'allreduce' and step_index is null",
                [name],
            ).fetchone()[0]
            == 1
        )
    comm = report.breakdown(c, by="comm").filter(report.pl.col("category") == "allreduce")
    assert comm["calls_per_step"].to_list() == [17.0] * comm.height
    sites = report.breakdown(c, by="comm-site").filter(report.pl.col("category") == "allreduce")
    assert sorted(set(sites["site"].to_list())) == list(range(17))
    c.close()


def test_a_kernel_timestamped_far_outside_its_trace_stays_out_of_the_steps(tmp_path: Path) -> None:
    """Issue 34.5: one kernel of the real H200 graph trace moved 56.8 days later. It is kept out of its step
    (steps.far_activities = 1 there); every step's wall is the raw JSON's: first to last GPU activity launched
    from the step's marker to the next, the moved kernel left out."""
    from decimal import Decimal

    trace = _read(H200_GRAPH)
    events = trace["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    moved = kernels[len(kernels) // 2]
    moved["ts"] = moved["ts"] + Decimal(56.8 * 86400 * 1e6)
    path = tmp_path / H200_GRAPH.name
    _write(trace, path)
    base = int(trace.get("baseTimeNanoseconds", 0))
    markers = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and e["name"].startswith("execute_")
    )
    calls = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            calls.setdefault(e["args"]["correlation"], e["ts"])
    walls: dict[int, list] = {}
    moved_step = None
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts = calls.get(e["args"].get("correlation"))
            starts = [i for i, (m, _) in enumerate(markers) if m <= ts]
            if not starts:
                continue
            i = starts[-1]
            if e is moved:
                moved_step = i
                continue
            w = walls.setdefault(i, [e["ts"], e["ts"] + e["dur"]])
            w[0], w[1] = min(w[0], e["ts"]), max(w[1], e["ts"] + e["dur"])
    c = db.connect(tmp_path / "far.duckdb")
    results, _ = pipeline.load_paths(c, [path])
    assert [r.status for r in results] == ["loaded"]
    rows = c.execute("select step_index, wall_ns, far_activities from steps order by step_index").fetchall()
    assert [s for s, _, _ in rows] == sorted(walls)
    for step, wall, far in rows:
        a, b = walls[step]
        assert wall == int((b - a) * 1000), step
        assert far == (1 if step == moved_step else 0)
    assert max(w for _, w, _ in rows) < 1_000_000_000
    # the moved kernel is the trace's last activity, in no step (its start is compared to the µs: see the report
    # of issue 29 for the ns)
    start, step = c.execute("select start_ns, step_index from gpu_events order by start_ns desc limit 1").fetchone()
    assert abs(start - (base + int(moved["ts"] * 1000))) < 1000 and step is None
    c.close()
