"""Cross-rank truth: injected stragglers and clock offsets must be recovered from the traces alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import HTA_RANK0, HTA_RANK1
from k25trace import db, ingest, report
from k25trace.synth import generate

OFFSETS_US = [0.0, 412.25, -1333.5, 87.125]
DELAYED_RANK = 2
DELAY_US = 300.0
DELAYED_STEPS = {1, 2}  # the first decode steps (step 0 is the prefill)


@pytest.fixture(scope="module")
def tp4(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("tp4")
    truth = generate(out / "traces", ranks=4, batch_sizes=(1, 64), steps_per_batch=3, layers=4, first_k_dense=1,
                     prefill=True, empty_steps=0, clock_offsets_us=OFFSETS_US,
                     delays=[(DELAYED_RANK, DELAY_US, sorted(DELAYED_STEPS))], seed=3)
    con = db.connect(out / "tp4.duckdb")
    results, _ = ingest.load_paths(con, [out / "traces"])
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
        "select step_index, category, ordinal, rank, wait_ns, transfer_ns, is_late from collectives").fetchall()
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
        late = con.execute("select rank from collectives where step_index = ? and category = ? and ordinal = ? and is_late",
                           [coll["step"], coll["category"], coll["k_cat"]]).fetchall()
        assert late == [(DELAYED_RANK,)] == [(coll["late_rank"],)]
    # the others wait about D on each delayed collective, the delayed rank about nothing
    waits = dict(con.execute(
        "select rank, avg(wait_ns) from collectives where category = 'allreduce' and step_index in (1, 2) group by rank").fetchall())
    for rank, wait in waits.items():
        if rank == DELAYED_RANK:
            assert wait < 0.05 * DELAY_US * 1000
        else:
            assert wait == pytest.approx(DELAY_US * 1000, rel=0.05)
    comm = report.breakdown(con, by="comm", phase="decode")
    row = comm.filter((comm["batch_size"] == 1) & (comm["category"] == "allreduce")).row(0, named=True)
    assert row["straggler_rank"] == DELAYED_RANK
    expected_wait_ms = sum(sum(c["wait_ns"]) / 4 for c in truth["collectives"]
                           if c["category"] == "allreduce" and truth["steps"][c["step"]]["gen_reqs"] == 1
                           and truth["steps"][c["step"]]["phase"] == "decode") / 3 / 1e6
    assert row["wait_ms_per_step"] == pytest.approx(expected_wait_ms, rel=0.05)
    ranks = report.breakdown(con, by="rank-comm", phase="decode")
    slowest = ranks.filter(ranks["category"] == "allreduce").sort("wait_ms_per_step").row(0, named=True)
    assert slowest["rank"] == DELAYED_RANK


def test_real_two_rank_pair(tmp_path: Path) -> None:
    """The HTA two-rank training pair: no step markers, so collectives pair over the whole trace."""
    con = db.connect(tmp_path / "pair.duckdb")
    ingest.load_paths(con, [HTA_RANK0, HTA_RANK1])
    runs = con.execute("select count(distinct run_id), count(*) from trace_runs").fetchall()[0]
    assert runs == (1, 2)
    offsets = dict(con.execute("select rank, paired_collectives from rank_offsets").fetchall())
    assert offsets == {0: 10, 1: 10}  # the 10 SendRecv kernels of each rank pair up
    pairs = con.execute("select count(distinct ordinal), count(*), bool_and(wait_ns >= 0), sum(is_late::int) from collectives").fetchall()[0]
    assert pairs == (10, 20, True, 10)
