"""A project-made Kimi-K2.5-shaped TP trace (k25trace.synth): steps and breakdown against its own ground truth.

The generator records, independently of k25trace's SQL, what every step holds: per-category summed kernel time
and counts, the union of activity intervals, first/last activity. The loaded database must agree exactly.
"""

from __future__ import annotations

import pytest

from k25trace import db, pipeline
from k25trace.analysis import report
from k25trace.synth import generate


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("kimi")
    truth = generate(
        out / "traces",
        ranks=2,
        batch_sizes=(1, 8, 64),
        steps_per_batch=3,
        layers=6,
        first_k_dense=1,
        prefill=True,
        empty_steps=1,
        seed=7,
    )
    con = db.connect(out / "kimi.duckdb")
    results, _ = pipeline.load_paths(con, [out / "traces"])
    assert [r.status for r in results] == ["loaded", "loaded"], [r.message for r in results]
    yield truth, con
    con.close()


def _trace_of_rank(con, rank: int) -> int:
    return con.execute("select trace_id from traces where rank = ?", [rank]).fetchall()[0][0]


def test_steps_match_markers(kimi) -> None:
    truth, con = kimi
    for rank in range(2):
        rows = con.execute(
            "select step_index, phase, batch_size, ctx_tokens, gen_tokens, graph_launches, is_empty from steps "
            "where trace_id = ? order by step_index",
            [_trace_of_rank(con, rank)],
        ).fetchall()
        assert len(rows) == len(truth["steps"])
        for row, step in zip(rows, truth["steps"], strict=True):
            index, phase, batch, ctx_tokens, gen_tokens, launches, empty = row
            assert index == step["index"]
            assert phase == step["phase"]
            assert empty == (step["phase"] == "empty")
            if step["phase"] != "empty":
                assert batch == step["ctx_reqs"] + step["gen_reqs"]
                assert (ctx_tokens, gen_tokens) == (step["ctx_tokens"], step["gen_tokens"])
                assert launches == step["graph_launches"]


def test_per_step_category_time_matches_truth(kimi) -> None:
    truth, con = kimi
    for rank in range(2):
        trace_id = _trace_of_rank(con, rank)
        got = {}
        for step_index, category, kernel_ns, count in con.execute(
            "select step_index, category, kernel_ns, kernel_count from step_categories where trace_id = ?", [trace_id]
        ).fetchall():
            got[(step_index, category)] = (kernel_ns, count)
        expected = {}
        for step_index, step in enumerate(truth["per_rank_steps"][rank]):
            for category, value in step["categories"].items():
                if value["count"]:
                    expected[(step_index, category)] = (value["ns"], value["count"])
        assert got == expected


def test_per_step_wall_busy_and_kernel_count_match_truth(kimi) -> None:
    truth, con = kimi
    for rank in range(2):
        rows = con.execute(
            "select step_index, gpu_start_ns, gpu_end_ns, busy_ns, kernel_count, wall_ns, idle_ns from steps "
            "where trace_id = ? order by step_index",
            [_trace_of_rank(con, rank)],
        ).fetchall()
        kernels_only = dict(
            con.execute(
                "select step_index, count(*) from gpu_events where trace_id = ? and kind = 'kernel' group by all",
                [_trace_of_rank(con, rank)],
            ).fetchall()
        )
        for row, step in zip(rows, truth["per_rank_steps"][rank], strict=True):
            index, start, end, busy, _, wall, idle = row
            assert (start, end) == (step["gpu_start_ns"], step["gpu_end_ns"])
            if start is not None:
                assert busy == step["busy_ns"] and wall == end - start and idle == wall - busy
            assert kernels_only.get(index, 0) == step["kernel_count"]


def test_sampling_kernels_after_the_marker_land_in_their_step(kimi) -> None:
    truth, con = kimi
    trace_id = _trace_of_rank(con, 0)
    late = con.execute(
        """
        select g.step_index, s.step_index as marker_step
        from gpu_events g
        join launches l using (trace_id, correlation)
        join steps s on s.trace_id = g.trace_id and l.start_ns > s.marker_end_ns
            and l.start_ns < coalesce((select min(n.marker_start_ns) from steps n
                                       where n.trace_id = s.trace_id and n.marker_start_ns > s.marker_start_ns), 9e18)
        where g.trace_id = ? and g.category = 'sampling'
    """,
        [trace_id],
    ).fetchall()
    assert late, "the generator launches sampling after the annotation closes"
    assert all(step == marker_step for step, marker_step in late)


def test_decode_breakdown_per_batch_size(kimi) -> None:
    truth, con = kimi
    frame = report.breakdown(con, by="batch", phase="decode")
    assert sorted(set(frame["batch_size"].to_list())) == [1, 8, 64]
    for (_run_id, batch), group in frame.group_by(["run_id", "batch_size"]):
        by_cat = {row["category"]: row for row in group.iter_rows(named=True)}
        assert by_cat["other"]["ms_per_step"] == 0  # every generated kernel name is classified
        # summed kernel ms per step for allreduce, from the truth, over both ranks' decode steps of this batch size
        decode = [i for i, s in enumerate(truth["steps"]) if s["phase"] == "decode" and s["gen_reqs"] == batch]
        ns = [truth["per_rank_steps"][r][i]["categories"]["allreduce"]["ns"] for r in range(2) for i in decode]
        assert by_cat["allreduce"]["kernel_ms_per_step"] == pytest.approx(sum(ns) / len(ns) / 1e6, abs=1e-4)
        assert by_cat["marlin_gemm"]["calls_per_step"] > 0
        assert abs(sum(group["pct_of_step"].to_list()) - 100) < 0.2
