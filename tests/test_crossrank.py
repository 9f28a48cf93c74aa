"""Cross-rank truth: injected stragglers and clock offsets must be recovered from the traces alone."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from helpers import HTA_RANK0, HTA_RANK1
from k25trace import db, pipeline
from k25trace.analysis import report
from k25trace.synth import generate

OFFSETS_US = [0.0, 412.25, -1333.5, 87.125]
DELAYED_RANK = 2
DELAY_US = 300.0
DELAYED_STEPS = {1, 2}  # the first decode steps (step 0 is the prefill)


@pytest.fixture(scope="module")
def tp4(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("tp4")
    truth = generate(
        out / "traces",
        ranks=4,
        batch_sizes=(1, 64),
        steps_per_batch=3,
        layers=4,
        first_k_dense=1,
        prefill=True,
        empty_steps=0,
        clock_offsets_us=OFFSETS_US,
        delays=[(DELAYED_RANK, DELAY_US, sorted(DELAYED_STEPS))],
        seed=3,
    )
    con = db.connect(out / "tp4.duckdb")
    results, _ = pipeline.load_paths(con, [out / "traces"])
    assert all(r.status == "loaded" for r in results)
    yield truth, con
    con.close()


def test_clock_offsets_are_recovered(tp4) -> None:
    truth, con = tp4
    got = dict(con.execute("select rank, offset_ns from rank_offsets").fetchall())
    expected = {r["rank"]: r["clock_offset_ns"] - truth["ranks"][0]["clock_offset_ns"] for r in truth["ranks"]}
    assert got.keys() == expected.keys()
    for rank, offset in expected.items():
        assert abs(got[rank] - offset) <= 1000, (rank, got[rank], offset)  # within 1 µs
    residual = con.execute("select max(abs(end_residual_ns)) from collectives").fetchall()[0][0]
    assert residual <= 1000


def test_every_collective_pairs_with_its_truth_and_waits_match(tp4) -> None:
    truth, con = tp4
    rows = con.execute(
        "select step_index, category, ordinal, rank, wait_ns, transfer_ns, is_late from collectives"
    ).fetchall()
    ours = {(s, c, k, r): (w, t, late) for s, c, k, r, w, t, late in rows}
    assert len(ours) == len(truth["collectives"]) * 4
    for coll in truth["collectives"]:
        for rank in range(4):
            wait, transfer, late = ours[(coll["step"], coll["category"], coll["k_cat"], rank)]
            expected = coll["wait_ns"][rank]
            assert abs(wait - expected) <= max(0.05 * expected, 1000), (coll, rank, wait)
            assert abs(transfer - coll["transfer_ns"]) <= max(0.05 * coll["transfer_ns"], 1000)


def test_injected_delay_is_found(tp4) -> None:
    truth, con = tp4
    delayed = [c for c in truth["collectives"] if c["step"] in DELAYED_STEPS and c["category"] == "allreduce"]
    assert delayed
    for coll in delayed:
        late = con.execute(
            "select rank from collectives where step_index = ? and category = ? and ordinal = ? and is_late",
            [coll["step"], coll["category"], coll["k_cat"]],
        ).fetchall()
        assert late == [(DELAYED_RANK,)] == [(coll["late_rank"],)]
    # the others wait about D on each delayed collective, the delayed rank about nothing
    waits = dict(
        con.execute(
            "select rank, avg(wait_ns) from collectives where category = 'allreduce' and step_index in (1, 2) "
            "group by rank"
        ).fetchall()
    )
    for rank, wait in waits.items():
        if rank == DELAYED_RANK:
            assert wait < 0.05 * DELAY_US * 1000
        else:
            assert wait == pytest.approx(DELAY_US * 1000, rel=0.05)
    comm = report.breakdown(con, by="comm", phase="decode")
    row = comm.filter((comm["batch_size"] == 1) & (comm["category"] == "allreduce")).row(0, named=True)
    assert row["straggler_rank"] == DELAYED_RANK
    expected_wait_ms = (
        sum(
            sum(c["wait_ns"]) / 4
            for c in truth["collectives"]
            if c["category"] == "allreduce"
            and truth["steps"][c["step"]]["gen_reqs"] == 1
            and truth["steps"][c["step"]]["phase"] == "decode"
        )
        / 3
        / 1e6
    )
    assert row["wait_ms_per_step"] == pytest.approx(expected_wait_ms, rel=0.05)
    ranks = report.breakdown(con, by="rank-comm", phase="decode")
    slowest = ranks.filter(ranks["category"] == "allreduce").sort("wait_ms_per_step").row(0, named=True)
    assert slowest["rank"] == DELAYED_RANK


def test_real_two_rank_pair(tmp_path: Path) -> None:
    """The HTA two-rank training pair: no step markers, so collectives pair over the whole trace."""
    con = db.connect(tmp_path / "pair.duckdb")
    pipeline.load_paths(con, [HTA_RANK0, HTA_RANK1])
    runs = con.execute("select count(distinct run_id), count(*) from trace_runs").fetchall()[0]
    assert runs == (1, 2)
    offsets = dict(con.execute("select rank, paired_collectives from rank_offsets").fetchall())
    assert offsets == {0: 10, 1: 10}  # the 10 SendRecv kernels of each rank pair up
    pairs = con.execute(
        "select count(distinct ordinal), count(*), bool_and(wait_ns >= 0), sum(is_late::int) from collectives"
    ).fetchall()[0]
    assert pairs == (10, 20, True, 10)


# ------------------------------------------------------------------------------------------------ who makes others wait

LAUNCH_RANK, MID_RANK, OFTEN_RANK = 1, 2, 3


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory):
    """Four kinds of lateness at once: launch skew (rank 1, 200 µs at every decode step's first collective), GPU-side
    lateness mid-step (rank 2, 150 µs at collective 5 of some steps), both on one rank (rank 2 also 400 µs at the
    first collective of one step) and little but often (rank 3, 2 µs at every collective)."""
    out = tmp_path_factory.mktemp("mixed")
    truth = generate(
        out / "traces",
        ranks=4,
        batch_sizes=(1, 8),
        steps_per_batch=4,
        layers=4,
        first_k_dense=1,
        prefill=False,
        empty_steps=0,
        clock_offsets_us=[0.0, 97.5, -310.25, 42.0],
        delays=[
            (LAUNCH_RANK, 200.0, None, [0]),
            (MID_RANK, 150.0, [1, 2, 5, 6], [5]),
            (MID_RANK, 400.0, [3], [0]),
            (OFTEN_RANK, 2.0),
        ],
        seed=11,
    )
    con = db.connect(out / "mixed.duckdb")
    results, _ = pipeline.load_paths(con, [out / "traces"])
    assert all(r.status == "loaded" for r in results)
    yield truth, con
    con.close()


def _truth_by_batch(truth: dict) -> dict[int, dict]:
    """From the generator's collectives (independent of the SQL): launch/gpu wait, wait caused, last arrivals."""
    batch_of = {s["index"]: s["batch_size"] for s in truth["steps"] if s["phase"] == "decode"}
    out: dict[int, dict] = {}
    for c in truth["collectives"]:
        if c["category"] != "allreduce" or c["step"] not in batch_of:
            continue
        b = out.setdefault(
            batch_of[c["step"]], {"launch": 0.0, "gpu": 0.0, "caused": [0] * 4, "last": [0] * 4, "steps": set()}
        )
        b["steps"].add(c["step"])
        mean_wait = sum(c["wait_ns"]) / 4
        b["launch" if c["k"] == 0 else "gpu"] += mean_wait
        b["caused"][c["late_rank"]] += sum(c["wait_ns"])
        b["last"][c["late_rank"]] += 1
    return out


def test_straggler_is_who_causes_the_wait_not_who_is_last_most(mixed) -> None:
    truth, con = mixed
    comm = report.breakdown(con, by="comm", phase="decode").filter(pl.col("category") == "allreduce")
    expected = _truth_by_batch(truth)
    assert sorted(comm["batch_size"].to_list()) == sorted(expected)
    for row in comm.iter_rows(named=True):
        t = expected[row["batch_size"]]
        n = len(t["steps"])
        straggler = max(range(4), key=lambda r: t["caused"][r])
        last = max(range(4), key=lambda r: t["last"][r])
        assert straggler != last == OFTEN_RANK  # the point of the change: the 2 µs rank is last most often
        assert row["straggler_rank"] == straggler
        assert row["last_rank"] == last
        assert row["last_pct"] == pytest.approx(100 * t["last"][last] / sum(t["last"]), abs=0.1)
        assert row["straggler_wait_ms_per_step"] == pytest.approx(t["caused"][straggler] / n / 1e6, rel=0.05)
        assert row["straggler_wait_pct"] == pytest.approx(100 * t["caused"][straggler] / sum(t["caused"]), abs=1.0)
        # launch skew vs GPU-side lateness
        assert row["launch_wait_ms_per_step"] == pytest.approx(t["launch"] / n / 1e6, rel=0.05)
        assert row["gpu_wait_ms_per_step"] == pytest.approx(t["gpu"] / n / 1e6, rel=0.05)
        assert row["alignment"] == "good"


def test_wait_caused_and_suffered_per_rank(mixed) -> None:
    truth, con = mixed
    expected = _truth_by_batch(truth)
    steps = sum(len(t["steps"]) for t in expected.values())
    caused = [sum(t["caused"][r] for t in expected.values()) for r in range(4)]
    ranks = report.breakdown(con, by="rank-comm", phase="decode").filter(pl.col("category") == "allreduce")
    for row in ranks.iter_rows(named=True):
        assert row["caused_wait_ms_per_step"] == pytest.approx(caused[row["rank"]] / steps / 1e6, rel=0.05, abs=1e-4)
    top = ranks.sort("caused_wait_ms_per_step", descending=True).row(0, named=True)
    assert top["rank"] == max(range(4), key=lambda r: caused[r])
    assert top["caused_wait_pct"] == pytest.approx(100 * max(caused) / sum(caused), abs=1.0)


def test_call_site_of_the_mid_step_delay(mixed) -> None:
    truth, con = mixed
    sites = report.breakdown(con, by="comm-site", phase="decode").filter(pl.col("category") == "allreduce")
    batch_of = {s["index"]: s["batch_size"] for s in truth["steps"] if s["phase"] == "decode"}
    for batch in (1, 8):
        rows = {r["site"]: r for r in sites.filter(pl.col("batch_size") == batch).iter_rows(named=True)}
        colls = [c for c in truth["collectives"] if c["category"] == "allreduce" and batch_of.get(c["step"]) == batch]
        for site, row in rows.items():
            at = [c for c in colls if c["k_cat"] == site]
            assert row["steps"] == len(at)
            assert row["wait_us"] == pytest.approx(
                sum(sum(c["wait_ns"]) / 4 for c in at) / len(at) / 1e3, rel=0.05, abs=0.05
            )
        mid = next(c["k_cat"] for c in colls if c["k"] == 5)
        assert rows[mid]["late_rank"] == MID_RANK and rows[mid]["wait_kind"] == "gpu"
        assert rows[0]["wait_kind"] == "launch" and rows[0]["late_rank"] in (LAUNCH_RANK, MID_RANK)


def test_alignment_warning_on_the_real_pair_with_inconsistent_clocks(tmp_path: Path) -> None:
    """The HTA pair's clocks cannot be aligned (paired ends tens of ms apart): say so, with the figure."""
    con = db.connect(tmp_path / "pair.duckdb")
    pipeline.load_paths(con, [HTA_RANK0, HTA_RANK1])
    (row,) = con.execute("select alignment, residual_p90_us, unpaired_events from comm_alignment").fetchall()
    assert row[0] == "poor" and row[1] > 10_000 and row[2] == 0
    warnings = report.alignment_warnings(con)
    assert len(warnings) == 1 and "approximate" in warnings[0] and f"{row[1]:,.1f} µs" in warnings[0]
    comm = report.breakdown(con, by="comm", phase="all")
    assert comm.height == 1 and comm["pairing"].to_list() == ["whole trace (no step markers)"]
    assert comm["alignment"].to_list() == ["poor"]
    phase, note = report.resolve_phase(con, None)
    assert phase == "all" and "no step markers in 2 trace(s)" in note


def test_two_files_claiming_one_rank_are_kept_apart(tmp_path: Path) -> None:
    """Two profiling sessions of the same two ranks in one directory (issue 11, item 8): not merged into one rank,
    each session paired on its own with the figures it has alone, and a warning naming the files."""
    import shutil

    fixture = Path(__file__).parent / "data" / "h200x2-decode-loop"
    both = tmp_path / "both"
    both.mkdir()
    for f in [*(fixture / "graph").iterdir(), *(fixture / "eager").iterdir()]:
        shutil.copy(f, both / f.name)
    con = db.connect(tmp_path / "both.duckdb")
    pipeline.load_paths(con, [both])
    alone = db.connect(tmp_path / "alone.duckdb")
    pipeline.load_paths(alone, [fixture / "graph", fixture / "eager"])
    runs = con.execute(
        "select run_id, count(*), count(distinct rank) from trace_runs group by all order by 1"
    ).fetchall()
    assert [(r.rsplit("#", 1)[1], n, ranks) for r, n, ranks in runs] == [("s1", 2, 2), ("s2", 2, 2)]
    warnings = report.run_warnings(con)
    assert len(warnings) == 2 and all("2 files claim rank" in w for w in warnings)
    assert report.run_warnings(alone) == []

    def figures(c, by: str) -> list[tuple]:
        frame = report.breakdown(c, by=by, phase="decode")
        return sorted(tuple(v for k, v in row.items() if k != "run_id") for row in frame.iter_rows(named=True))

    # session 1 is the CUDA-graph run (written first), session 2 the eager one: same figures as loaded apart
    assert figures(con, "comm") == figures(alone, "comm")
    assert figures(con, "rank") == figures(alone, "rank")
    ranks = report.breakdown(con, by="rank", phase="decode")
    assert ranks.select(["run_id", "rank"]).unique().height == 4
