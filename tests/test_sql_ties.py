"""Ties in the SQL's picks: the late rank of a collective where two ranks started it at the same nanosecond is the
rule's (docs/methods.md: the one that started last; ties: the shortest duration, then the lowest rank), and the
report views are byte-identical whatever order the events have in the files.

The traces are synthetic (3 ranks, no clock offsets, so aligned time is trace time). Every third all-reduce is
edited in the JSON so that ranks 1 and 2 start it at the same nanosecond, after rank 0, with its end kept: a
tie between them. The truth is computed here from the edited JSON alone.
"""

from __future__ import annotations

import csv
import io
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from k25trace import db, pipeline
from k25trace.cli import cli
from k25trace.synth import generate

RANKS = 3
TIED = (1, 2)  # the ranks that start every third all-reduce at the same ns
TIE_EVERY = 3
VIEWS = ("comm", "comm-site", "comm-bw", "rank-comm", "timeline")


def _collective_kernels(events: list[dict], categories: dict[str, str], category: str = "allreduce") -> list[dict]:
    """The collective kernels of one category in one rank's trace, in time order."""
    found = [e for e in events if e.get("cat") == "kernel" and categories.get(e.get("name", "")) == category]
    return sorted(found, key=lambda e: e["ts"])


def _abs_ns(base: int, ts_us: float) -> int:
    return base + round(ts_us * 1000)


def _tie_ranks(folder: Path, truth: dict) -> None:
    """Make ranks 1 and 2 start every third all-reduce together, 500 ns after the latest original start, same end."""
    files = {r["rank"]: folder / r["file"] for r in truth["ranks"]}
    docs = {rank: json.loads(path.read_text(encoding="utf-8")) for rank, path in files.items()}
    kernels = {rank: _collective_kernels(doc["traceEvents"], truth["kernel_categories"]) for rank, doc in docs.items()}
    for i in range(0, len(kernels[0]), TIE_EVERY):
        start = max(_abs_ns(docs[r]["baseTimeNanoseconds"], kernels[r][i]["ts"]) for r in range(RANKS)) + 500
        for rank in TIED:
            event, base = kernels[rank][i], docs[rank]["baseTimeNanoseconds"]
            end = _abs_ns(base, event["ts"]) + round(event["dur"] * 1000)
            assert end - start > 0
            event["ts"], event["dur"] = (start - base) / 1000, (end - start) / 1000
    for rank, path in files.items():
        path.write_text(json.dumps(docs[rank]), encoding="utf-8")


def _late_truth(folder: Path, truth: dict, category: str = "allreduce") -> list[tuple[int, int, bool]]:
    """Per collective of the category in time order, from the JSON: (batch size, the rule's late rank, whether any
    rank waited)."""
    starts: dict[int, list[tuple[int, int]]] = {}
    for r in truth["ranks"]:
        doc = json.loads((folder / r["file"]).read_text(encoding="utf-8"))
        base = doc["baseTimeNanoseconds"]
        starts[r["rank"]] = [
            (_abs_ns(base, e["ts"]), round(e["dur"] * 1000))
            for e in _collective_kernels(doc["traceEvents"], truth["kernel_categories"], category)
        ]
    batch_of = {s["index"]: s["batch_size"] for s in truth["steps"]}
    steps = [c["step"] for c in truth["collectives"] if c["category"] == category]
    assert all(len(v) == len(steps) for v in starts.values())
    out = []
    for i, step in enumerate(steps):
        arrivals = {rank: starts[rank][i] for rank in range(RANKS)}
        ends = {s + d for s, d in arrivals.values()}
        assert len(ends) == 1  # paired collectives end together: the clock offsets are 0
        latest = max(s for s, _ in arrivals.values())
        shortest = min(d for s, d in arrivals.values() if s == latest)
        late = min(rank for rank, (s, d) in arrivals.items() if s == latest and d == shortest)
        waited = len({d for _, d in arrivals.values()}) > 1
        out.append((batch_of[step], late, waited))
    return out


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("ties")
    folder = root / "a" / "traces"
    truth = generate(
        folder,
        ranks=RANKS,
        batch_sizes=(1, 8),
        steps_per_batch=3,
        layers=2,
        first_k_dense=1,
        prefill=False,
        empty_steps=0,
        clock_offsets_us=[0.0] * RANKS,
        gzip=False,
        seed=5,
    )
    (folder / "truth.json").unlink()
    _tie_ranks(folder, truth)
    path = root / "a.duckdb"
    con = pipeline.connect(path)
    results, _ = pipeline.load_paths(con, sorted(folder.glob("*.json")))
    assert all(r.status == "loaded" for r in results)
    con.close()
    return root, truth, path


def test_the_fixture_has_ties_between_ranks(tied) -> None:
    root, truth, _ = tied
    late = _late_truth(root / "a" / "traces", truth)
    tied_late = [rank for i, (_, rank, _) in enumerate(late) if i % TIE_EVERY == 0]
    assert tied_late and set(tied_late) == {min(TIED)}  # the tie goes to the lowest of the tied ranks
    assert {rank for _, rank, _ in late} >= {0, 1, 2}  # the other collectives are late on every rank


def test_late_rank_of_each_tied_collective_is_the_rules(tied) -> None:
    root, truth, path = tied
    late = _late_truth(root / "a" / "traces", truth)
    con = db.connect(path, read_only=True)
    try:
        causes = db.query_frame(con, "findings_comm_causes", {"phase": "decode", "batch_size": None, "run_id": None})
        is_late = con.execute(
            "select rank from collectives where category = 'allreduce' and is_late order by pair_step, ordinal"
        ).fetchall()
    finally:
        con.close()
    assert [r for (r,) in is_late] == [rank for _, rank, _ in late]
    expected = Counter((batch, rank) for batch, rank, waited in late if waited)
    got = {
        (row["batch_size"], row["late_rank"]): row["collectives_waited"]
        for row in causes.filter(causes["category"] == "allreduce").iter_rows(named=True)
    }
    assert got == dict(expected)


def _report_csv(path: Path, view: str, root: Path) -> str:
    result = CliRunner().invoke(cli, ["report", "--db", str(path), "--by", view, "--format", "csv"])
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout.replace(str(root), "<root>")


def test_last_rank_counts_the_rules_late_ranks(tied) -> None:
    root, truth, path = tied
    late = _late_truth(root / "a" / "traces", truth)
    rows = list(csv.DictReader(io.StringIO(_report_csv(path, "comm", root / "a"))))
    allreduce = {int(r["batch_size"]): r for r in rows if r["category"] == "allreduce"}
    assert sorted(allreduce) == [1, 8]
    for batch, row in allreduce.items():
        counts = Counter(rank for b, rank, _ in late if b == batch)
        last = min(counts, key=lambda rank: (-counts[rank], rank))  # most often last; ties: the lowest rank
        assert int(row["last_rank"]) == last
        assert float(row["last_pct"]) == pytest.approx(100 * counts[last] / sum(counts.values()), abs=0.05)


def _shuffled_copy(source: Path, target: Path, seed: int) -> None:
    target.mkdir(parents=True)
    for path in sorted(source.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        random.Random(seed).shuffle(doc["traceEvents"])
        (target / path.name).write_text(json.dumps(doc), encoding="utf-8")


def test_reports_do_not_depend_on_the_event_order_in_the_files(tied) -> None:
    root, _, path = tied
    source = root / "a" / "traces"
    for seed, name in ((1, "b"), (2, "c")):
        _shuffled_copy(source, root / name / "traces", seed)
        first = next(iter(sorted((root / name / "traces").glob("*.json"))))
        assert (
            json.loads(first.read_text(encoding="utf-8"))["traceEvents"]
            != json.loads((source / first.name).read_text(encoding="utf-8"))["traceEvents"]
        )
    files = {name: sorted((root / name / "traces").glob("*.json")) for name in ("b", "c")}
    files["c"].reverse()  # and the files in the other order: the trace ids differ, so only views without them
    for name, paths in files.items():
        con = pipeline.connect(root / f"{name}.duckdb")
        results, _ = pipeline.load_paths(con, paths)
        assert all(r.status == "loaded" for r in results)
        con.close()
    for view in VIEWS:
        expected = _report_csv(path, view, root / "a")
        assert expected.count("\n") > 1, view
        assert _report_csv(root / "b.duckdb", view, root / "b") == expected, view
        if view != "timeline":  # timeline rows carry the trace id, which follows the file order
            assert _report_csv(root / "c.duckdb", view, root / "c") == expected, view


BARRIER_RANK = 2  # its all-gathers are launched inside a c10d::barrier (work of no step) and start last


def _no_markers_and_a_stepless_late_rank(source: Path, target: Path, truth: dict) -> None:
    """Copy the traces without their step markers (steps inferred: collectives pair over the whole trace); on
    BARRIER_RANK, start each all-gather 500 ns after the others (same end) and launch it inside a barrier."""
    target.mkdir(parents=True)
    docs = {r["rank"]: json.loads((source / r["file"]).read_text(encoding="utf-8")) for r in truth["ranks"]}
    gathers = {
        rank: _collective_kernels(doc["traceEvents"], truth["kernel_categories"], "comm_other")
        for rank, doc in docs.items()
    }
    doc, base = docs[BARRIER_RANK], docs[BARRIER_RANK]["baseTimeNanoseconds"]
    launches = {e["args"]["correlation"]: e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime"}
    barriers = []
    for i, event in enumerate(gathers[BARRIER_RANK]):
        start = max(_abs_ns(docs[r]["baseTimeNanoseconds"], gathers[r][i]["ts"]) for r in docs) + 500
        end = _abs_ns(base, event["ts"]) + round(event["dur"] * 1000)
        event["ts"], event["dur"] = (start - base) / 1000, (end - start) / 1000
        launch = launches[event["args"]["correlation"]]
        barriers.append(
            {"ph": "X", "cat": "cpu_op", "name": "c10d::barrier", "pid": launch["pid"], "tid": launch["tid"],
             "ts": launch["ts"] - 1, "dur": launch["dur"] + 2, "args": {}}
        )  # fmt: skip
    doc["traceEvents"].extend(barriers)
    for r in truth["ranks"]:
        events = docs[r["rank"]]["traceEvents"]
        docs[r["rank"]]["traceEvents"] = [
            e
            for e in events
            if not (e.get("cat") in ("user_annotation", "gpu_user_annotation") and e["name"].startswith("execute_"))
        ]
        (target / r["file"]).write_text(json.dumps(docs[r["rank"]]), encoding="utf-8")


def test_a_late_rank_whose_row_is_in_no_step_is_still_the_late_rank(tied) -> None:
    """Whole-trace pairing: the late rank's all-gathers belong to no step, so the selected rows of those
    collectives are the other ranks' only; the late rank is still named (the old arg_max over is_late named one of
    the ranks that waited, and no straggler: the wait it caused sat on its own rows)."""
    root, truth, _ = tied
    folder = root / "stepless" / "traces"
    _no_markers_and_a_stepless_late_rank(root / "a" / "traces", folder, truth)
    late = _late_truth(folder, truth, "comm_other")
    assert {rank for _, rank, _ in late} == {BARRIER_RANK}
    path = root / "stepless.duckdb"
    con = pipeline.connect(path)
    try:
        results, _ = pipeline.load_paths(con, sorted(folder.glob("*.json")))
        assert all(r.status == "loaded" for r in results)
        pairing = con.execute(
            "select min(pair_step), max(pair_step), count(*) filter (where step_index is null), count(*) "
            "from collectives where category = 'comm_other' and rank = ?",
            [BARRIER_RANK],
        ).fetchone()
        causes = db.query_frame(con, "findings_comm_causes", {"phase": "all", "batch_size": None, "run_id": None})
    finally:
        con.close()
    assert pairing == (-1, -1, len(late), len(late))  # paired over the whole trace, in no step
    gather = causes.filter(causes["category"] == "comm_other")
    assert gather["late_rank"].to_list() == [BARRIER_RANK]
    assert gather["collectives_waited"].to_list() == [len(late)]
    result = CliRunner().invoke(cli, ["report", "--db", str(path), "--by", "comm", "--phase", "all", "--format", "csv"])
    assert result.exit_code == 0, (result.output, result.exception)
    rows = [r for r in csv.DictReader(io.StringIO(result.stdout)) if r["category"] == "comm_other"]
    assert [
        (r["pairing"], r["last_rank"], r["last_pct"], r["straggler_rank"], r["straggler_wait_pct"]) for r in rows
    ] == [("whole trace (no step markers)", str(BARRIER_RANK), "100.0", str(BARRIER_RANK), "100.0")]


def test_the_device_of_a_trace_split_evenly_over_two_gpus_is_the_lower(tied) -> None:
    """sol_devices: a trace whose GPU activities ran half on its own device 2, half on device 0 (a tie) gets
    device 0, whatever order its events have."""
    root, truth, _ = tied
    devices = {}
    for name, seed in (("split", None), ("split_shuffled", 3)):
        folder = root / name / "traces"
        folder.mkdir(parents=True)
        for r in truth["ranks"]:
            doc = json.loads((root / "a" / "traces" / r["file"]).read_text(encoding="utf-8"))
            gpu = [e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
            if r["rank"] == 2:
                assert {e["pid"] for e in gpu} == {2} and len(gpu) % 2 == 0
                for event in gpu[::2]:
                    event["pid"] = event["args"]["device"] = 0
                assert Counter(e["pid"] for e in gpu) == {0: len(gpu) // 2, 2: len(gpu) // 2}
            if seed is not None:
                random.Random(seed).shuffle(doc["traceEvents"])
            (folder / r["file"]).write_text(json.dumps(doc), encoding="utf-8")
        con = pipeline.connect(root / f"{name}.duckdb")
        try:
            results, _ = pipeline.load_paths(con, sorted(folder.glob("*.json")))
            assert all(r.status == "loaded" for r in results)
            frame = db.query_frame(con, "sol_devices", {})
        finally:
            con.close()
        devices[name] = dict(zip(frame["rank"].to_list(), frame["device"].to_list(), strict=True))
    assert devices["split"] == devices["split_shuffled"] == {0: 0, 1: 1, 2: 0}
