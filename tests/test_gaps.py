"""Why the GPU is idle: every gap classified, the classes add up to the idle exactly, the timeline adds up to the
GPU span, and the gaps made on purpose on an H200 (tests/data/h200-gaps: a host sleep mid-step, a blocking .cpu()
copy mid-step, a host sleep before a CUDA-graph replay) land in the right class. Truth comes from the raw JSON,
read here with the standard library and Decimal, by code that shares nothing with k25trace's SQL.
"""

from __future__ import annotations

import bisect
import gzip
import json
import statistics
from decimal import Decimal
from pathlib import Path

import pytest

import helpers
from k25trace import db, pipeline
from k25trace.analysis import report

DATA = Path(__file__).parent / "data"
GAPS = DATA / "h200-gaps"
EAGER = next((GAPS / "eager").glob("*.pt.trace.json.gz"))
GRAPH = next((GAPS / "graph").glob("*.pt.trace.json.gz"))
SGLANG = helpers.SGLANG
B200 = helpers.B200
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def _ns(v) -> int:
    return int(Decimal(v) * 1000)


def _raw(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    gpu = sorted(
        (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]), e["args"].get("correlation"))
        for e in events
        if e.get("cat") in GPU_CATS and "ts" in e
    )
    runtime = {}
    syncs = []
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "ts" in e:
            runtime.setdefault(e["args"].get("correlation"), _ns(e["ts"]))
            if e["name"] in SYNCS:
                syncs.append((_ns(e["ts"]) + _ns(e["dur"]), e["tid"]))
    annotations = {}
    for e in events:
        if e.get("cat") == "user_annotation" and e["name"].startswith("injected_"):
            annotations.setdefault(e["name"], []).append((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])))
    return {"gpu": gpu, "runtime": runtime, "syncs": sorted(syncs), "annotations": annotations}


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory):
    c = db.connect(tmp_path_factory.mktemp("gaps") / "gaps.duckdb")
    results, _ = pipeline.load_paths(c, [EAGER, GRAPH, SGLANG, B200])
    assert [r.status for r in results] == ["loaded"] * 4, [r.message for r in results]
    yield c
    c.close()


def _trace_id(con, path: Path) -> int:
    return con.execute("select trace_id from traces where file_name = ?", [path.name]).fetchone()[0]


@pytest.mark.parametrize("path", [EAGER, GRAPH, SGLANG, B200], ids=["h200-eager", "h200-graph", "sglang", "b200"])
def test_gaps_add_up_to_the_idle_and_the_span_exactly(con, path: Path) -> None:
    tid = _trace_id(con, path)
    per_step = con.execute(
        """
        select s.step_index, s.idle_ns, coalesce(sum(g.dur_ns), 0),
               coalesce(sum(g.host_ns + g.sync_ns + g.launch_ns + g.device_ns + g.unknown_ns), 0), count(g.dur_ns)
        from steps s left join gpu_gaps g on g.trace_id = s.trace_id and g.step_index = s.step_index
            and not g.between_steps
        where s.trace_id = ? and s.gpu_start_ns is not null group by all order by 1""",
        [tid],
    ).fetchall()
    assert per_step
    for step, idle, gaps, parts, _count in per_step:
        assert gaps == idle == parts, (step, idle, gaps, parts)
    assert con.execute("select count(*) from gpu_gaps where trace_id = ? and dur_ns <= 0", [tid]).fetchone()[0] == 0
    # the whole timeline: first step start .. last step end = walls + between-step gaps + GPU work of no step
    span, walls, between, unassigned = con.execute(
        """
        select max(gpu_end_ns) - min(gpu_start_ns), sum(wall_ns),
            (select coalesce(sum(dur_ns), 0) from gpu_gaps where trace_id = $t and between_steps),
            (select coalesce(sum(e.dur_ns), 0) from gpu_events e where e.trace_id = $t and e.step_index is null
                and e.start_ns >= (select min(gpu_start_ns) from steps where trace_id = $t)
                and e.end_ns <= (select max(gpu_end_ns) from steps where trace_id = $t))
        from steps where trace_id = $t and gpu_start_ns is not null""",
        {"t": tid},
    ).fetchone()
    # (unassigned GPU work between steps can overlap itself; on these traces it does not)
    assert span == walls + between + unassigned


def _expected_gaps(con, path: Path) -> dict[tuple[int, int], tuple]:
    """Idle gaps of the union of all GPU activity from the first step's start to the last step's end, on the
    absolute clock, each with (cause, host_ns, sync_ns, launch_ns), computed from the raw JSON alone."""
    raw = _raw(path)
    tid = _trace_id(con, path)
    first, last = con.execute(
        "select min(gpu_start_ns), max(gpu_end_ns) from steps where trace_id = ?", [tid]
    ).fetchone()
    base = con.execute("select base_time_ns from traces where trace_id = ?", [tid]).fetchone()[0]
    blocking = _blocking_calls(path)
    sync_ends = [t for t, _ in raw["syncs"]]
    expected = {}
    prev_end = None
    for start, end, corr in raw["gpu"]:
        if prev_end is not None and start > prev_end:
            g0, g1 = prev_end, start
            if first <= g0 + base and g1 + base <= last:
                launch = raw["runtime"].get(corr)
                if launch is None:
                    parts = ("unknown", 0, 0, 0)
                elif launch <= g0:
                    parts = ("device", 0, 0, 0)
                elif _blocking_ends(blocking, g0, g1):  # the GPU sat behind a blocking call: all of it is sync
                    parts = ("sync", 0, g1 - g0, 0)
                else:
                    cut = min(launch, g1)
                    i = bisect.bisect_right(sync_ends, launch) - 1
                    returned = sync_ends[i] if i >= 0 and sync_ends[i] >= g0 else None
                    if returned is None:
                        parts = ("host", cut - g0, 0, g1 - cut)
                    else:
                        sync, host = returned - g0, cut - returned
                        parts = ("sync" if sync >= host else "host", host, sync, g1 - cut)
                expected[(g0 + base, g1 + base)] = parts
        prev_end = end if prev_end is None else max(prev_end, end)
    return expected


@pytest.mark.parametrize("path", [EAGER, GRAPH], ids=["eager", "graph"])
def test_every_gap_matches_an_independent_reading(con, path: Path) -> None:
    """Idle gaps of the union of all GPU activity, their cause and their parts in ns, computed here from the raw
    JSON: a gap after a host sync is sync up to the moment the sync returned (its CPU event's end), host-bound from
    then to the launch call, launch overhead from the call to the GPU start."""
    tid = _trace_id(con, path)
    expected = _expected_gaps(con, path)
    # k25trace's in-step gaps are per step's own activities; here the steps hold all the GPU work, so they are
    # the same gaps as the whole trace's
    got = {
        (s, e): (c, h, y, la)
        for s, e, c, h, y, la in con.execute(
            "select start_ns, end_ns, cause, host_ns, sync_ns, launch_ns from gpu_gaps where trace_id = ?", [tid]
        ).fetchall()
    }
    assert got == expected
    # the sync-split gaps exist on these traces (the host sync returned inside the gap, then the host was late)
    split = [p for p in expected.values() if p[1] > 0 and p[2] > 0]
    assert split and any(p[0] == "host" for p in split)


@pytest.mark.parametrize("path", [EAGER, GRAPH], ids=["eager", "graph"])
def test_step_idle_adds_up_the_independent_gaps_per_step(con, path: Path) -> None:
    """step_idle (built at load) per step = the raw JSON's gaps (read here) added up by cause: a gap inside a step's
    GPU window is the step's; one between two windows is counted before the step that follows."""
    tid = _trace_id(con, path)
    windows = con.execute(
        "select step_index, gpu_start_ns, gpu_end_ns from steps where trace_id = ? and gpu_start_ns is not null "
        "order by gpu_start_ns",
        [tid],
    ).fetchall()
    starts = [w[1] for w in windows]
    want: dict[int, dict] = {}
    for (g0, g1), (cause, host, sync, launch) in _expected_gaps(con, path).items():
        k = bisect.bisect_right(starts, g0) - 1
        inside = k >= 0 and g1 <= windows[k][2]
        step = windows[k][0] if inside else windows[bisect.bisect_left(starts, g1)][0]
        row = want.setdefault(step, {"in": [], "between": []})
        parts = {
            "dur": g1 - g0,
            "host": host,
            "sync": sync,
            "launch": launch,
            "device": g1 - g0 if cause == "device" else 0,
            "unknown": g1 - g0 if cause == "unknown" else 0,
            "cause": cause,
        }
        row["in" if inside else "between"].append(parts)
    expected = {}
    for step, row in want.items():
        gaps, between = row["in"], row["between"]
        launches = [g["launch"] for g in gaps if g["cause"] in ("host", "sync")]
        expected[step] = (
            len(gaps),
            *(sum(g[k] for g in gaps) for k in ("host", "sync", "launch", "device", "unknown")),
            max((g["dur"] for g in gaps), default=None),
            statistics.median(launches) if launches else None,
            max(launches, default=None),
            len(between),
            *(sum(g[k] for g in between) for k in ("dur", "host", "sync", "launch", "device", "unknown")),
        )
    got = {
        r[0]: tuple(r[1:])
        for r in con.execute(
            """
            select step_index, gaps, host_ns, sync_ns, launch_ns, device_ns, unknown_ns, longest_gap_ns,
                launch_p50_ns, launch_max_ns, between_gaps, between_idle_ns, between_host_ns, between_sync_ns,
                between_launch_ns, between_device_ns, between_unknown_ns
            from step_idle where trace_id = ?""",
            [tid],
        ).fetchall()
    }
    assert len(got) > 10 and any(v[10] for v in got.values()) and any(v[1] for v in got.values())
    assert got == expected


BLOCKING = SYNCS + (
    "cudaMemcpy2D",
    "cuStreamSynchronize",
    "cuCtxSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH_v2",
    "cuMemcpyHtoD_v2",
    "hipStreamSynchronize",
    "hipDeviceSynchronize",
    "hipEventSynchronize",
    "hipMemcpy",
    "hipMemcpyWithStream",
)


def _blocking_ends(calls: list[tuple[int, int]], start: int, end: int) -> list[int]:
    """Ends of the calls that cover at least half of the gap [start, end): every call tried against the gap."""
    return [e for s, e in calls if 2 * (min(e, end) - max(s, start)) >= end - start]


def _check_blocking_rule(con, trace_id: int, calls: list[tuple[int, int]]) -> dict[tuple[int, int], tuple]:
    gaps = con.execute(
        "select start_ns, end_ns, cause, sync_end_ns, launch_start_ns from gpu_gaps where trace_id = ?", [trace_id]
    ).fetchall()
    for start, end, cause, sync_end, launch_start in gaps:
        ends = _blocking_ends(calls, start, end)
        if ends:
            assert sync_end == max(ends), (start, end)
            if launch_start is None or launch_start > start:
                assert cause == "sync", (start, end)
        elif cause == "sync":  # then only a sync that returned inside the gap before the launch explains it
            assert launch_start > start and sync_end >= start, (start, end)
    return {(start, end): (cause, sync_end) for start, end, cause, sync_end, _ in gaps}


def _blocking_calls(path: Path, *, absolute: bool = False) -> list[tuple[int, int]]:
    """Every blocking call's (start, end) in ns from the raw JSON: relative to the file's base, or absolute."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh, parse_float=Decimal)
    events = trace["traceEvents"]
    base = int(trace.get("baseTimeNanoseconds", 0)) if absolute else 0
    return [
        (_ns(e["ts"]) + base, _ns(e["ts"]) + _ns(e["dur"]) + base)
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and e.get("name") in BLOCKING and "ts" in e
    ]


@pytest.mark.parametrize("path", [EAGER, GRAPH, SGLANG, B200], ids=["h200-eager", "h200-graph", "sglang", "b200"])
def test_the_blocking_call_rule_matches_every_call_against_every_gap(con, path: Path) -> None:
    """A gap at least half covered by one blocking call (any thread) waited behind it: brute force over every
    (call, gap) pair from the raw JSON, against the SQL, which looks only at the call that can cover the gap's
    midpoint on each thread (nested calls, cudaMemcpy around cuMemcpyDtoH_v2, merged)."""
    _check_blocking_rule(con, _trace_id(con, path), _blocking_calls(path, absolute=True))


def test_the_blocking_call_rule_on_nested_and_overlapping_calls(tmp_path: Path) -> None:
    """Blocking calls that the real traces do not have: one nested in another (only the outer covers half of
    the gap), two threads covering the same gap (the later end wins), calls that cover less than half."""
    kernel_at = [0, 100, 200, 300, 400]  # 10 µs kernels: gaps [10, 100], [110, 200], [210, 300], [310, 400]
    events = []
    for i, t in enumerate(kernel_at):
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i}",
                "pid": 0,
                "tid": 7,
                "ts": t,
                "dur": 10,
                "args": {"device": 0, "stream": 7, "correlation": i + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": t - 5,
                "dur": 2,
                "args": {"correlation": i + 1},
            }
        )
    blocking = [  # (thread, category, name, start µs, end µs)
        (2, "cuda_runtime", "cudaMemcpy", 20, 80),  # gap 1: covers 60 of 90
        (2, "cuda_driver", "cuMemcpyDtoH_v2", 30, 50),  # nested in it, alone 20 of 90
        (2, "cuda_runtime", "cudaStreamSynchronize", 150, 250),  # gap 2: 50 of 90; gap 3: 40 of 90
        (2, "cuda_runtime", "cudaEventSynchronize", 215, 250),  # nested, gap 3: 35 of 90
        (2, "cuda_runtime", "cudaDeviceSynchronize", 300, 370),  # gap 4: 60 of 90
        (3, "cuda_runtime", "cudaMemcpy", 320, 390),  # gap 4 on another thread: 70 of 90, ends later
    ]
    for tid, cat, name, t0, t1 in blocking:
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": t0, "dur": t1 - t0, "args": {}})
    path = tmp_path / "blocking.pt.trace.json"
    path.write_text(json.dumps({"traceEvents": events}))
    c = db.connect(tmp_path / "blocking.duckdb")
    results, _ = pipeline.load_paths(c, [path])
    assert [r.status for r in results] == ["loaded"], [r.message for r in results]
    (trace_id,) = c.execute("select trace_id from traces").fetchone()
    found = _check_blocking_rule(c, trace_id, [(t0 * 1000, t1 * 1000) for _, _, _, t0, t1 in blocking])
    us = {
        (s // 1000, e // 1000): (cause, None if end is None else end // 1000) for (s, e), (cause, end) in found.items()
    }
    assert us[(10, 100)] == ("sync", 80)
    assert us[(110, 200)] == ("sync", 250)
    assert us[(210, 300)][0] == "host"
    assert us[(310, 400)] == ("sync", 390)
    c.close()


def test_the_injected_host_sleep_is_host_bound_and_the_blocking_copy_splits_at_the_sync_return(con) -> None:
    raw = _raw(EAGER)
    tid = _trace_id(con, EAGER)
    base = con.execute("select base_time_ns from traces where trace_id = ?", [tid]).fetchone()[0]
    runs = json.loads((GAPS / "decode_loop_gaps_eager.json").read_text())[0]
    sleeps, copies = raw["annotations"]["injected_host_sleep"], raw["annotations"]["injected_blocking_copy"]
    assert len(sleeps) == len(runs["host_sleep_steps"]) and len(copies) == len(runs["blocking_copy_steps"])

    def gap_at(t_ns: int):
        return con.execute(
            "select cause, host_ns, sync_ns, launch_ns, dur_ns, start_ns, end_ns from gpu_gaps "
            "where trace_id = ? and start_ns <= ? and ? < end_ns",
            [tid, t_ns, t_ns],
        ).fetchone()

    def gpu_busy_at(t: int) -> bool:  # raw JSON: some GPU activity covers instant t
        return any(a <= t < b for a, b, _ in raw["gpu"])

    found = 0
    for _s0, s1 in sleeps:
        if gpu_busy_at(s1):  # the GPU still had queued work when the sleep ended (GPU-bound steps): no gap there
            assert gap_at(s1 + base) is None
            continue
        # the GPU ran dry during the sleep: the gap holding its end is the host's
        cause, host, _, launch, dur, g0, g1 = gap_at(s1 + base)
        assert cause == "host"
        assert host >= s1 + base - g0 and host >= 300_000  # a 500 µs sleep, partly covered by queued work
        assert host + launch == dur
        found += 1
    assert found >= 2  # the batch-1 steps are host-bound: their sleeps show (at 8 and 64 queued work hides them)
    for c0, c1 in copies:  # the gap after the D2H copy: the host waited in cudaStreamSynchronize, then relaunched
        ((sync_end, _),) = [(t, tid_) for t, tid_ in raw["syncs"] if c0 <= t <= c1]
        assert not gpu_busy_at(sync_end)  # a sync returns when the GPU has drained: it is idle then, always
        cause, host, sync, launch, dur, g0, g1 = gap_at(sync_end + base)
        # split where the sync returned: before it the host waited (sync), after it the host was free and late
        # (host-bound), then the launch call itself
        nxt = min((a, corr) for a, _, corr in raw["gpu"] if a >= g1 - base)
        call = raw["runtime"][nxt[1]]
        assert sync == sync_end + base - g0 > 0
        assert host == call - sync_end and launch == g1 - base - call and host + sync + launch == dur
        assert cause == ("sync" if sync >= host else "host")
    # clean steps hold no sync gap; the report's per-step rows say the same
    timeline = report.breakdown(con, by="timeline", phase="decode", trace_id=tid)
    by_step = {r["step_index"]: r for r in timeline.iter_rows(named=True)}
    for n in range(18):
        row = by_step[n]
        if n in runs["blocking_copy_steps"]:
            assert row["sync_ms"] > 0
        else:
            assert row["sync_ms"] == 0


def test_a_host_sleep_before_a_graph_replay_is_host_bound(con) -> None:
    tid = _trace_id(con, GRAPH)
    runs = json.loads((GAPS / "decode_loop_gaps_graph.json").read_text())[0]
    delayed = set(runs["cpu_delayed_steps"])
    assert delayed
    rows = report.breakdown(con, by="timeline", phase="decode", trace_id=tid).iter_rows(named=True)
    for row in rows:
        if row["step_index"] in delayed:
            assert row["host_ms"] >= 0.45, row
        else:
            assert row["host_ms"] < 0.1, row
        # the cudaGraphLaunch call itself: the GPU waits for it in every step (launch overhead)
        assert row["launch_ms"] > 0.3
        assert row["flag"] is None


def test_the_sglang_blocking_copy_step_is_flagged(con) -> None:
    tid = _trace_id(con, SGLANG)
    (row,) = report.breakdown(con, by="timeline", phase="all", trace_id=tid).iter_rows(named=True)
    assert row["wall_ms"] > 470 and row["sync_ms"] > 460
    assert row["flag"].startswith("one sync gap is 98 %")
    idle = report.breakdown(con, by="idle", phase="all").filter(report.pl.col("run_id").str.contains("sglang"))
    assert idle["sync_ms"].to_list() == [row["sync_ms"]]


def test_idle_view_adds_up_per_batch(con) -> None:
    frame = report.breakdown(con, by="idle", phase="decode")
    assert not frame.is_empty()
    for r in frame.iter_rows(named=True):
        parts = r["host_ms"] + r["sync_ms"] + r["launch_overhead_ms"] + r["device_ms"] + r["unknown_ms"]
        assert parts == pytest.approx(r["idle_ms"], abs=5e-4)
        assert r["busy_ms"] + r["idle_ms"] == pytest.approx(r["wall_ms"], abs=5e-4)


@pytest.mark.asyncio
async def test_the_tui_step_screen_flags_the_blocking_copy_step(tmp_path: Path) -> None:
    from k25trace.tui.app import K25TraceApp
    from k25trace.tui.messages import OpenStep
    from k25trace.tui.screens.step import StepScreen
    from k25trace.tui.widgets import LineTable

    path = tmp_path / "sg.duckdb"
    c = db.connect(path)
    pipeline.load_paths(c, [SGLANG])
    tid = c.execute("select trace_id from traces").fetchone()[0]
    c.close()
    app = K25TraceApp(path)
    async with app.run_test(size=(150, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        app.post_message(OpenStep(tid, 0))  # what the steps screen posts on enter
        for _ in range(2):
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        assert isinstance(app.screen, StepScreen)
        status = str(app.screen.query_one("#status").render())
        assert "suspicious: one sync gap is 98 % of the step" in status
        categories = app.screen.query_one("#categories", LineTable)
        names = [categories.line(i).plain for i in range(categories.row_count)]
        assert any(n.split("  ")[0].strip() == "idle: after sync" for n in names), names  # one line per row
