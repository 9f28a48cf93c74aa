"""``k25trace export perfetto`` and ``k25trace export parquet`` on real traces (two H200s, TP2).

The Perfetto excerpt is checked against the database with SQL written here (not the exporter's query): its GPU
slices are exactly the chosen steps' activities on the chosen ranks, each at (start_ns − its rank's clock offset −
t0) to the nanosecond, with its category; collectives carry their wait and a nested wait slice; one process per
rank; every track nests (what ui.perfetto.dev's and chrome://tracing's JSON importers need). Parquet: every table
round-trips to the same rows through DuckDB, polars and pyarrow (pandas' engine)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as pads
import pytest
from click.testing import CliRunner

from k25trace import db
from k25trace.cli import cli
from k25trace.render import export
from share_fixtures import graph_database, tp2_database


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tp2_database(tmp_path_factory)


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return graph_database(tmp_path_factory)


def run_export(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["export", *args])
    return result.exit_code, result.stdout, result.stderr


def load_trace(path: Path) -> dict:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)  # exact: ts and dur are µs with 3 decimals


def ns(value: Decimal | int) -> int:
    exact = Decimal(value) * 1000
    assert exact == exact.to_integral_value(), value
    return int(exact)


def expected_activities(db_path: Path, run_like: str, steps: list[int], ranks: list[int] | None) -> dict:
    """(rank, event_id) → (aligned start ns, dur ns, category, stream), straight from gpu_events and rank_offsets."""
    con = duckdb.connect(str(db_path), read_only=True)
    rows = con.execute(
        "select g.rank, g.event_id, g.start_ns - coalesce(o.offset_ns, 0), g.dur_ns, coalesce(g.category, 'other'), "
        "g.stream from gpu_events g join trace_runs r using (trace_id) left join rank_offsets o using (trace_id) "
        "where r.run_id like ? and list_contains(?, g.step_index)",
        [run_like, steps],
    ).fetchall()
    con.close()
    return {(r[0], r[1]): r[2:] for r in rows if ranks is None or r[0] in ranks}


def gpu_slices(trace: dict) -> dict:
    return {
        (e["pid"], e["args"]["event_id"]): e
        for e in trace["traceEvents"]
        if e["ph"] == "X" and not e["cat"].startswith("k25trace.")
    }


# ------------------------------------------------------------------------------------------------ perfetto


def test_perfetto_default_is_one_median_step_per_batch_size_on_every_rank(graph: Path, tmp_path: Path) -> None:
    out = tmp_path / "steps.json"
    code, _, err = run_export("perfetto", "--db", str(graph), "-o", str(out))
    assert code == 0, err
    trace = load_trace(out)
    other = trace["otherData"]
    assert other["steps"] == [2, 9, 14] and other["ranks"] == [0, 1]  # the HTML page's timeline steps
    assert "wrote" in err and "step(s) 2,9,14" in err and "rank 1 +34 ns" in err

    expected = expected_activities(graph, "%graph#ws2", other["steps"], None)
    slices = gpu_slices(trace)
    assert set(slices) == set(expected) and len(slices) > 30_000  # exactly the steps' activities, no more
    t0 = other["t0_ns"]
    offsets = {int(r): v for r, v in other["clock_offsets_ns"].items()}
    assert offsets[0] == 0 and offsets[1] != 0
    for key, e in slices.items():
        start, dur, category, stream = expected[key]
        assert ns(e["ts"]) + t0 == start and ns(e["dur"]) == dur  # shifted by the rank's offset, to the ns
        assert e["cat"] == e["args"]["category"] == category
        assert e["cname"] == export.CATEGORY_CNAME[category]
        assert e["tid"] % export._Lanes.OVERFLOW_TID == stream
    # t0 is the earliest exported start: a GPU activity or a host step marker on the aligned clock
    con = duckdb.connect(str(graph), read_only=True)
    marker_start = con.execute(
        "select min(s.marker_start_ns - o.offset_ns) from steps s join rank_offsets o using (trace_id) "
        "where o.run_id like '%graph#ws2' and s.step_index in (2, 9, 14)"
    ).fetchone()[0]
    con.close()
    assert t0 == min(min(v[0] for v in expected.values()), marker_start)

    # one process per rank, named, with a step marker track and a GPU window per step
    names = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"
    }
    assert names == {0: "rank 0 · NVIDIA H200", 1: "rank 1 · NVIDIA H200"}
    steps = Counter((e["pid"], e["args"]["step"]) for e in trace["traceEvents"] if e.get("cat") == "k25trace.step")
    assert steps == {(r, s): 2 for r in (0, 1) for s in (2, 9, 14)}
    assert export.check_chrome_trace(json.loads(out.read_bytes())) == []


def test_perfetto_collectives_carry_their_wait(graph: Path, tmp_path: Path) -> None:
    out = tmp_path / "bs8.json.gz"
    code, _, err = run_export("perfetto", "--db", str(graph), "--batch", "8", "--steps", "10,11", "-o", str(out))
    assert code == 0, err
    assert out.read_bytes()[:2] == b"\x1f\x8b"  # gzipped, as the name asks
    trace = load_trace(out)
    con = duckdb.connect(str(graph), read_only=True)
    rows = con.execute(
        "select c.rank, c.event_id, c.wait_ns, c.transfer_ns, c.dur_ns, c.ordinal, c.is_late, "
        "max(case when c.is_late then c.rank end) over (partition by c.step_index, c.category, c.ordinal) "
        "from collectives c where c.run_id like '%graph#ws2' and c.step_index in (10, 11)"
    ).fetchall()
    con.close()
    slices = gpu_slices(trace)
    waits = {(e["pid"], e["args"]["event_id"]): e for e in trace["traceEvents"] if e.get("cat") == "k25trace.wait"}
    assert len(rows) == 2 * 2 * 124
    for rank, event_id, wait, transfer, dur, ordinal, late, late_rank in rows:
        e = slices[(rank, event_id)]
        info = e["args"]["collective"]
        assert ns(info["wait_us"]) == wait and ns(info["transfer_us"]) == transfer
        assert info["call_site"] == ordinal and info["this_rank_late"] == late and info["late_rank"] == late_rank
        if 0 < wait < dur:  # the wait is a slice nested at the start of the collective, on the same track
            w = waits.pop((rank, event_id))
            assert (w["tid"], w["ts"], ns(w["dur"])) == (e["tid"], e["ts"], wait)
            assert w["name"] == f"wait for rank {late_rank}"
    assert not waits  # and no other wait slice
    assert export.check_chrome_trace(json.loads(gzip.decompress(out.read_bytes()))) == []


def test_perfetto_selection(tp2: Path, tmp_path: Path) -> None:
    out = tmp_path / "one.json"
    # two runs in the database: --run is needed, and the error lists them
    code, _, err = run_export("perfetto", "--db", str(tp2), "-o", str(out))
    assert code == 1 and "2 runs with steps" in err and "graph (TP2)" in err and "eager (TP2)" in err
    code, _, err = run_export(
        "perfetto", "--db", str(tp2), "--run", "eager (TP2)", "--steps", "3-4", "--rank", "1", "-o", str(out)
    )
    assert code == 0, err
    trace = load_trace(out)
    assert trace["otherData"]["steps"] == [3, 4] and trace["otherData"]["ranks"] == [1]
    assert set(gpu_slices(trace)) == set(expected_activities(tp2, "%eager#ws2", [3, 4], [1]))
    assert {e["pid"] for e in trace["traceEvents"]} == {1}
    # --batch alone: that batch size's representative step; a step of another batch size is refused
    code, _, err = run_export("perfetto", "--db", str(tp2), "--run", "graph", "--batch", "64", "-o", str(out))
    assert code == 0, err
    assert load_trace(out)["otherData"]["steps"] == [14]
    code, _, err = run_export(
        "perfetto", "--db", str(tp2), "--run", "graph", "--batch", "8", "--steps", "2", "-o", str(out)
    )
    assert code == 1 and "no step of batch size 8 with index 2" in err and "6-11" in err
    code, _, err = run_export(
        "perfetto", "--db", str(tp2), "--run", "graph", "--steps", "2", "--rank", "5", "-o", str(out)
    )
    assert code == 1 and "no rank 5" in err
    code, _, err = run_export("perfetto", "--db", str(tp2), "--run", "nope", "-o", str(out))
    assert code == 1 and "matches no run" in err
    code, _, err = run_export("perfetto", "--db", str(tp2), "--run", "graph", "--steps", "x", "-o", str(out))
    assert code == 1 and "'x' is not a number" in err
    code, stdout, err = run_export(
        "perfetto", "--db", str(tp2), "--run", "graph", "--steps", "all", "--rank", "0", "-o", "-"
    )
    assert code == 0, err
    assert json.loads(stdout)["otherData"]["steps"] == list(range(18))


def test_every_category_has_a_colour_of_its_own() -> None:
    """Each category the built-in rules give (read from queries/kernel_rules.csv with the csv module), plus
    `other` and `overlap`, has a reserved colour name no other category, the wait or the step marker uses
    (all2all, quantize and embedding were grey: they had none)."""
    import csv

    rules = Path(__file__).resolve().parents[1] / "queries" / "kernel_rules.csv"
    lines = [line for line in rules.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    categories = {row["category"] for row in csv.DictReader(lines)} | {"other", "overlap"}
    assert {"all2all", "quantize", "embedding", "allreduce", "marlin_gemm"} <= categories
    colours = {c: export.CATEGORY_CNAME.get(c) for c in categories}
    assert None not in colours.values(), sorted(c for c, v in colours.items() if v is None)
    assert len(set(colours.values())) == len(categories)
    assert set(colours.values()) <= set(export.CNAME_RGB) - {export.WAIT_CNAME, export.STEP_CNAME}


def test_the_validity_check_finds_what_breaks_a_json_trace() -> None:
    good = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "rank 0"}},
            {"ph": "X", "name": "a", "cat": "gemm", "pid": 0, "tid": 7, "ts": 0, "dur": 10},
            {"ph": "X", "name": "b", "cat": "gemm", "pid": 0, "tid": 7, "ts": 2, "dur": 3},  # nested in a
            {"ph": "X", "name": "c", "cat": "gemm", "pid": 0, "tid": 7, "ts": 10, "dur": 1},
        ]
    }  # after a
    assert export.check_chrome_trace(good) == []
    overlapping = json.loads(json.dumps(good))
    overlapping["traceEvents"][3].update(ts=9, dur=2)  # 9..11 crosses the end of a (0..10)
    assert any("without nesting" in p for p in export.check_chrome_trace(overlapping))
    for bad in (
        {"ph": "X", "name": "d", "pid": "0", "tid": 7, "ts": 0, "dur": 1},
        {"ph": "X", "name": "d", "pid": 0, "tid": 7, "ts": -1, "dur": 1},
        {"ph": "X", "name": "", "pid": 0, "tid": 8, "ts": 0, "dur": 1},
        {"ph": "X", "name": "d", "pid": 0, "tid": 9, "ts": 0, "dur": 1, "cname": "purple"},
        {"ph": "B", "name": "d", "pid": 0, "tid": 7, "ts": 0},
    ):
        assert export.check_chrome_trace({"traceEvents": good["traceEvents"] + [bad]}), bad
    assert export.check_chrome_trace({"events": []}) == ["no traceEvents list"]


def test_overlapping_activities_of_one_stream_go_to_their_own_track() -> None:
    lanes = export._Lanes()
    assert [lanes.place(0, 7, s, e) for s, e in ((0, 10), (10, 12), (11, 20), (12, 13), (15, 16))] == [
        7,
        7,
        1_000_007,
        7,
        7,
    ]
    assert lanes.overflow == 1 and lanes.place(1, 7, 0, 5) == 7


# ------------------------------------------------------------------------------------------------ parquet


@pytest.fixture(scope="module")
def exported(tp2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("parquet") / "out"
    code, _, err = run_export("parquet", str(out), "--db", str(tp2))
    assert code == 0, err
    assert "wrote 19 tables" in err or "tables (" in err
    return out


def test_parquet_layout(exported: Path, tp2: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["runs"] == {"eager_TP2": manifest["runs"]["eager_TP2"], "graph_TP2": manifest["runs"]["graph_TP2"]}
    assert manifest["runs"]["graph_TP2"].endswith("graph#ws2")
    for table in export.PARTITIONED_TABLES:
        assert manifest["tables"][table]["partitioned_by"] == ["run", "rank"]
    parts = sorted(
        str(p.relative_to(exported / "gpu_events").parent) for p in (exported / "gpu_events").rglob("*.parquet")
    )
    assert parts == ["run=eager_TP2/rank=0", "run=eager_TP2/rank=1", "run=graph_TP2/rank=0", "run=graph_TP2/rank=1"]
    assert (exported / "traces.parquet").is_file() and (exported / "kernel_names.parquet").is_file()
    assert not list(exported.glob(".k25trace-export-*"))  # the temporary folder is gone
    # exporting again over it is refused (nothing touched) unless --overwrite
    before = (exported / "manifest.json").read_text()
    code, _, err = run_export("parquet", str(exported), "--db", str(tp2))
    assert code == 1 and "already holds" in err and "--overwrite" in err
    assert (exported / "manifest.json").read_text() == before


def _duckdb_rows(con: duckdb.DuckDBPyConnection, sql: str, columns: list[str]) -> Counter:
    projected = ", ".join(f'cast("{c}" as varchar)' for c in columns)
    return Counter(con.execute(f"select {projected} from ({sql})").fetchall())


def test_parquet_round_trips_every_table(exported: Path, tp2: Path) -> None:
    source = duckdb.connect(str(tp2), read_only=True)
    reader = duckdb.connect()
    manifest = json.loads((exported / "manifest.json").read_text())
    run_of_trace = dict(source.execute("select trace_id, run_id from trace_runs").fetchall())
    keys = {v: k for k, v in manifest["runs"].items()}
    checked = 0
    for table, info in manifest["tables"].items():
        columns = [r[0] for r in source.execute(f'describe "{table}"').fetchall()]
        original = _duckdb_rows(source, f'select * from "{table}"', columns)
        assert info["rows"] == sum(original.values())
        path = exported / info["path"]
        if info["partitioned_by"]:
            glob = str(path / "**" / "*.parquet")
            back = _duckdb_rows(reader, f"select * from read_parquet('{glob}', hive_partitioning=true)", columns)
            if info["rows"]:
                # each row sits in the partition of its own run and rank
                placed = reader.execute(
                    f"select distinct trace_id, run, rank from read_parquet('{glob}', hive_partitioning=true)"
                ).fetchall()
                ranks = dict(source.execute("select trace_id, rank from traces").fetchall())
                assert all(run == keys[run_of_trace[t]] and rank == ranks[t] for t, run, rank in placed)
            frame = pl.read_parquet(str(path) + "/", hive_partitioning=True)
            arrow = pads.dataset(str(path), format="parquet", partitioning="hive").to_table()
        else:
            back = _duckdb_rows(reader, f"select * from read_parquet('{path}')", columns)
            frame = pl.read_parquet(path)
            arrow = pads.dataset(str(path), format="parquet").to_table()
        assert back == original, table  # the same rows, value for value, as DuckDB reads them back
        assert frame.height == arrow.num_rows == info["rows"], table
        assert set(columns) <= set(frame.columns) and set(columns) <= set(arrow.column_names), table
        checked += 1
    tables = {
        r[0]
        for r in source.execute(
            "select table_name from duckdb_tables() where database_name = current_database() and not temporary"
        ).fetchall()
    }
    assert checked == len(manifest["tables"]) and set(manifest["tables"]) == tables  # every table, nothing else
    # polars' and pyarrow's values agree with the database too, e.g. the GPU time per run, rank and category
    want = Counter(
        {
            (run_of_trace[t], r, c): ms
            for t, r, c, ms in source.execute(
                "select trace_id, rank, category, sum(dur_ns) from gpu_events group by all"
            ).fetchall()
        }
    )
    got = (
        pl.read_parquet(str(exported / "gpu_events") + "/", hive_partitioning=True)
        .group_by(["run", "rank", "category"])
        .agg(pl.col("dur_ns").sum())
    )
    assert (
        Counter(
            {(manifest["runs"][r["run"]], r["rank"], r["category"]): r["dur_ns"] for r in got.iter_rows(named=True)}
        )
        == want
    )
    source.close()


def test_parquet_reads_in_pandas(exported: Path) -> None:
    pd = pytest.importorskip("pandas", reason="pandas is not a dependency; pyarrow (its engine) is tested above")
    frame = pd.read_parquet(exported / "steps")
    assert len(frame) == json.loads((exported / "manifest.json").read_text())["tables"]["steps"]["rows"]


def test_parquet_overwrite_and_an_empty_table(tp2: Path, tmp_path: Path) -> None:
    out = tmp_path / "again"
    assert run_export("parquet", str(out), "--db", str(tp2))[0] == 0
    code, _, err = run_export("parquet", str(out), "--db", str(tp2), "--overwrite")
    assert code == 0, err
    # python_functions holds nothing without load --keep-python: still a readable, empty table with its columns
    empty = (
        duckdb.connect()
        .execute(f"select count(*) from read_parquet('{out}/python_functions/**/*.parquet', hive_partitioning=true)")
        .fetchone()
    )
    assert empty == (0,)
    assert "event_id" in pl.read_parquet(str(out / "python_functions") + "/").columns
    con = db.connect(tp2, read_only=True)
    assert export.run_keys(con).filter(pl.col("run") == "graph_TP2").height == 2
    con.close()
