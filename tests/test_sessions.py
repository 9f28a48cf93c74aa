"""Sessions that share a rank (issue 29, item 6): files of one folder that claim the same rank are kept apart as
sessions #s1, #s2 (by first event), and each session is labelled by what tells it apart: 'graph' or 'eager' (the
trace has cudaGraphLaunch calls or none), else the part of the file name the files do not share. The truth is read
from the raw JSON of each file by the test's own code."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from k25trace import db, pipeline
from k25trace.analysis import report

DATA = Path(__file__).parent / "data"
GAPS = DATA / "h200-gaps"
TP2 = DATA / "h200x2-decode-loop"
LOOP = DATA / "h200-decode-loop"


def raw(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def uses_graphs(path: Path) -> bool:
    """The raw trace has a CUDA graph launch among its runtime calls."""
    return any(e.get("cat") == "cuda_runtime" and e.get("name") == "cudaGraphLaunch" for e in raw(path)["traceEvents"])


def first_kernel_ns(path: Path) -> int:
    """The absolute time of the file's first kernel (the sessions are numbered by first event)."""
    doc = raw(path)
    base = int(doc.get("baseTimeNanoseconds", 0))
    return base + min(round(float(e["ts"]) * 1000) for e in doc["traceEvents"] if e.get("cat") == "kernel")


def one_folder(tmp: Path, *files: Path) -> Path:
    folder = tmp / "both"
    folder.mkdir()
    for f in files:
        shutil.copy(f, folder / f.name)
    return folder


def load_in_order(path: Path, files: list[Path]) -> db.duckdb.DuckDBPyConnection:
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, files)
    assert [r.status for r in results] == ["loaded"] * len(files), [(r.path, r.message) for r in results]
    return con


def test_eager_and_graph_sessions_of_one_rank_are_labelled(tmp_path: Path) -> None:
    """The real single-H200 eager and CUDA-graph traces in one folder, loaded graph first (the reverse of their
    first events, as in the issue): each session says which it is, in trace_runs, the run label and the warning."""
    (eager,) = (GAPS / "eager").glob("*.pt.trace.json.gz")
    (graph,) = (GAPS / "graph").glob("*.pt.trace.json.gz")
    folder = one_folder(tmp_path, eager, graph)
    files = [folder / graph.name, folder / eager.name]  # load order: graph, then eager
    truth = {f.name: "graph" if uses_graphs(f) else "eager" for f in files}
    assert truth == {graph.name: "graph", eager.name: "eager"}
    order = sorted(files, key=first_kernel_ns)  # session k = the k-th file by first event
    assert [f.name for f in order] == [eager.name, graph.name]  # not the load order
    con = load_in_order(tmp_path / "both.duckdb", files)
    rows = con.execute(
        "select file_name, session, session_label, run_label, group_label from trace_runs order by trace_id"
    ).fetchall()
    assert [r[0] for r in rows] == [graph.name, eager.name]
    for name, session, label, run_label, group_label in rows:
        k = [f.name for f in order].index(name) + 1
        assert (session, label) == (k, truth[name])
        assert run_label == f"both (TP1#s{k} {truth[name]})" and group_label == "both"
    views = con.execute("select session, session_label, run_label from run_labels order by session").fetchall()
    assert views == [(1, "eager", "both (TP1#s1 eager)"), (2, "graph", "both (TP1#s2 graph)")]
    warnings = report.run_warnings(con)
    assert warnings == [
        f"both: 2 files claim rank 0 ({eager.name} -> both (TP1#s1 eager), {graph.name} -> both (TP1#s2 graph)); "
        "kept apart as sessions (the k-th file of each rank, by first event, is session k)"
    ]
    # a side of compare can pick a session by its label
    from k25trace.analysis.compare import resolve_run, runs

    assert resolve_run(runs(con), "both (TP1#s2 graph)").endswith("#s2")
    con.close()


def test_sessions_of_the_same_mode_are_told_apart_by_the_file_name(tmp_path: Path) -> None:
    """Two real CUDA-graph traces of rank 0 (two H200 decode loops): graph/eager cannot tell them apart, the part of
    the file name they do not share can (vLLM's timestamp between 'rank0.' and '.pt.trace.json.gz')."""
    (first,) = LOOP.glob("*.pt.trace.json.gz")
    (second,) = (GAPS / "graph").glob("*.pt.trace.json.gz")
    assert uses_graphs(first) and uses_graphs(second)
    folder = one_folder(tmp_path, first, second)
    files = [folder / first.name, folder / second.name]
    # the distinguishing part, by hand: the dot-separated field the two names do not share
    fields = [f.name.split(".") for f in files]
    differ = [i for i in range(len(fields[0])) if fields[0][i] != fields[1][i]]
    assert len(differ) == 1
    part = {f.name: f.name.split(".")[differ[0]] for f in files}
    order = sorted(files, key=first_kernel_ns)
    con = load_in_order(tmp_path / "two.duckdb", files)
    got = {
        name: (session, label, run_label)
        for name, session, label, run_label in con.execute(
            "select file_name, session, session_label, run_label from trace_runs"
        ).fetchall()
    }
    for k, f in enumerate(order, start=1):
        assert got[f.name] == (k, part[f.name], f"both (TP1#s{k} {part[f.name]})")
    con.close()


@pytest.mark.parametrize("reverse", [False, True])
def test_two_rank_sessions_carry_one_label_per_session(tmp_path: Path, reverse: bool) -> None:
    """The real 2×H200 eager and CUDA-graph pairs (two ranks each) in one folder: both ranks of a session get the
    session's label, whichever order the files are loaded in."""
    sources = sorted([*(TP2 / "graph").glob("*.pt.trace.json.gz"), *(TP2 / "eager").glob("*.pt.trace.json.gz")])
    folder = one_folder(tmp_path, *sources)
    files = sorted(folder.iterdir(), reverse=reverse)
    mode = {f.name: "graph" if uses_graphs(f) else "eager" for f in files}
    assert sorted(mode.values()) == ["eager", "eager", "graph", "graph"]
    con = load_in_order(tmp_path / "tp2.duckdb", files)
    rows = con.execute("select file_name, rank, session, session_label, run_label from trace_runs").fetchall()
    by_session: dict[int, set[str]] = {}
    for name, _rank, session, label, run_label in rows:
        assert label == mode[name] and run_label == f"both (TP2#s{session} {label})"
        by_session.setdefault(session, set()).add(label)
    assert sorted(by_session) == [1, 2] and all(len(v) == 1 for v in by_session.values())
    assert {next(iter(v)) for v in by_session.values()} == {"graph", "eager"}
    con.close()
