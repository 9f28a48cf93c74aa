"""Issue 11, item 16: a DuckDB file that is not k25trace's, or from a newer k25trace, is never modified; an older
k25trace database is upgraded whole."""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from k25trace import db, pipeline
from k25trace.analysis import report
from k25trace.cli import cli
from k25trace.errors import K25Error

TRACE = next((Path(__file__).parent / "data" / "h200-gaps" / "graph").glob("*.gz"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    """Someone's own DuckDB file with a `traces` table of its own."""
    path = tmp_path / "theirs.duckdb"
    con = duckdb.connect(str(path))
    con.execute("create table traces (id integer, note varchar)")
    con.execute("insert into traces values (1, 'mine')")
    con.close()
    return path


@pytest.mark.parametrize("command", [["load", str(TRACE)], ["classify"], ["steps"], ["report"], ["sql", "select 1"]])
def test_a_foreign_duckdb_file_is_refused_untouched(foreign: Path, command: list[str]) -> None:
    before = digest(foreign)
    result = CliRunner().invoke(cli, [command[0], "--db", str(foreign), *command[1:]])
    assert result.exit_code != 0
    assert "not a k25trace database" in result.output and "theirs.duckdb" in result.output
    assert "Traceback" not in result.output
    assert digest(foreign) == before


def test_a_newer_schema_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "new.duckdb"
    db.connect(path).close()
    con = duckdb.connect(str(path))
    con.execute("update meta set value = '99' where key = 'schema_version'")
    con.close()
    before = digest(path)
    for read_only in (False, True):
        with pytest.raises(K25Error, match="newer k25trace .schema version 99"):
            db.connect(path, read_only=read_only)
    assert digest(path) == before


def test_an_older_database_is_upgraded_and_reports_work(tmp_path: Path) -> None:
    """A version-1 file (before gpu_gaps, comm_alignment, trace_runs sessions): upgraded on the first write."""
    path = tmp_path / "old.duckdb"
    con = db.connect(path)
    pipeline.load_paths(con, [TRACE])
    expected = report.breakdown(con, by="idle").to_dicts()
    con.execute("drop table gpu_gaps")
    con.execute("drop table comm_alignment")
    con.execute("create or replace table trace_runs as select trace_id, rank, world_size, 'x' as run_id from traces")
    con.execute("update meta set value = '1' where key = 'schema_version'")
    con.close()
    with pytest.raises(K25Error, match="older than this k25trace.*k25trace steps --db"):
        db.connect(path, read_only=True)
    with pytest.raises(K25Error, match="k25trace steps"):
        db.connect(path)  # the storage layer alone refuses it ...
    con = pipeline.connect(path)  # ... the pipeline's write connection upgrades
    assert con.execute("select value from meta where key = 'schema_version'").fetchone()[0] == str(db.SCHEMA_VERSION)
    assert report.breakdown(con, by="idle").to_dicts() == expected
    con.close()
    db.connect(path, read_only=True).close()


def test_a_version_3_database_gets_the_run_label_columns(tmp_path: Path) -> None:
    """Version 3 had no label columns in trace_runs (the run_labels view parsed the session out of run_id): its
    first write connection adds and fills them; until then a read-only one is refused."""
    path = tmp_path / "v3.duckdb"
    con = db.connect(path)
    pipeline.load_paths(con, [TRACE])
    expected = con.execute("select run_id, run_name, session, group_label, run_label from trace_runs").fetchall()
    assert expected and all(row[4] for row in expected)
    for column in ("session", "run_name", "group_label", "run_label"):
        con.execute(f"alter table trace_runs drop column {column}")
    con.execute("create or replace view run_labels as select distinct run_id, run_id as run_label from trace_runs")
    con.execute("update meta set value = '3' where key = 'schema_version'")
    con.close()
    with pytest.raises(K25Error, match="schema version 3 is older"):
        db.connect(path, read_only=True)
    con = pipeline.connect(path)
    labels = con.execute("select run_id, run_name, session, group_label, run_label from trace_runs").fetchall()
    assert labels == expected
    assert report.run_labels(con) == {row[0]: row[4] for row in expected}
    con.close()


# ------------------------------------------------------------------------------------ issue 34, items 3 and 4b


def k25(*args: str | bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "k25trace", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def one_error(stderr: str, *names: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr and "bad_cast" not in stderr, stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


def not_databases(base: Path) -> list[Path]:
    """Files of the kinds DuckDB opens as an empty in-memory database, or refuses: CSV, JSON, a real gzipped
    trace, a real Parquet file (written by pyarrow), an empty file, random bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    base.mkdir(parents=True, exist_ok=True)
    (base / "run.csv").write_text("a,b\n1,2\n")
    (base / "run.json").write_text('{"traceEvents": []}\n')
    shutil.copy(TRACE, base / "run.json.gz")
    pq.write_table(pa.table({"a": [1, 2]}), base / "run.parquet")
    (base / "empty.duckdb").write_bytes(b"")
    (base / "noise.duckdb").write_bytes(random.Random(34).randbytes(4096))
    return sorted(base.iterdir())


def test_load_onto_a_csv_file_is_refused_untouched(tmp_path: Path) -> None:
    """The exact input of the issue: `load TRACE --db run.csv` said "1 loaded", exit 0, and stored nothing."""
    path = tmp_path / "run.csv"
    path.write_text("a,b\n1,2\n")
    before = digest(path)
    result = k25("load", str(TRACE), "--db", str(path))
    assert result.returncode == 1
    one_error(result.stderr, "run.csv", "not a DuckDB database file")
    assert digest(path) == before


COMMANDS = [
    ["load", str(TRACE)],
    ["report"],
    ["sql", "select 1"],
    ["classify"],
    ["steps"],
    ["html", "-o", "OUT"],
    ["export", "perfetto", "-o", "OUT"],
    ["export", "parquet", "OUT"],
]
"""(`compare` takes a trace file as a side and loads it: its paths are not --db files.)"""


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:2]) if c[0] == "export" else c[0])
def test_every_command_refuses_a_db_that_is_not_a_duckdb_file(tmp_path: Path, command: list[str]) -> None:
    files = not_databases(tmp_path / "files")
    sums = {p: digest(p) for p in files}
    for path in files:
        out = tmp_path / "out" / path.name
        args = [str(out) if a == "OUT" else a for a in command] + ["--db", str(path)]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert path.name in result.stderr and (
            "not a DuckDB database" in result.stderr or "empty file" in result.stderr
        ), result.stderr
        assert not out.exists()
    assert {p: digest(p) for p in files} == sums


@pytest.mark.parametrize(
    "command",
    [["load", str(TRACE)], ["report"], ["html", "-o", "x.html"], ["export", "perfetto", "-o", "x.json"]],
    ids=["load", "report", "html", "perfetto"],
)
def test_a_db_path_that_is_not_utf8_is_one_error(tmp_path: Path, command: list[str]) -> None:
    """The exact input of the issue: a byte 0xff in the --db name crashed with `RuntimeError: std::bad_cast`."""
    name = b"run\xff.duckdb"
    args: list[str | bytes] = [*command, "--db", name]
    result = k25(*args, cwd=tmp_path)
    assert result.returncode == 1
    one_error(result.stderr, "run\\xff.duckdb", "not valid UTF-8")
    assert os.listdir(os.fsencode(tmp_path)) == []


# ------------------------------------------------------------------------------------ issue 28, item 7

READS = {
    "report": ["report", "--format", "csv"],
    "report kernel": ["report", "--by", "kernel", "--format", "csv"],
    "report idle": ["report", "--by", "idle", "--format", "csv"],
    "report step": ["report", "--by", "step", "--format", "csv"],
    "compare": ["compare", "--a", "batch=1", "--b", "batch=64", "--by", "category", "--format", "csv"],
    "compare kernel": ["compare", "--a", "batch=1", "--b", "batch=64", "--by", "kernel", "--format", "csv"],
    "html": ["html", "-o", "OUT/page.html"],
    "perfetto": ["export", "perfetto", "-o", "OUT/steps.json"],
    "parquet": ["export", "parquet", "OUT/pq"],
}
DAMAGE = 64 * 1024


def what_it_wrote(name: str, stdout: str, out: Path) -> object:
    """The command's output with what differs from run to run taken out (the clock, the folder of the database)."""
    if name == "html":
        return re.sub(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", "", (out / "page.html").read_text())
    if name == "perfetto":
        trace = json.loads((out / "steps.json").read_bytes())
        trace["otherData"].pop("exported_at")
        return trace
    if name == "parquet":
        con = duckdb.connect()
        manifest = json.loads((out / "pq" / "manifest.json").read_text())
        rows = {}
        for table, entry in sorted(manifest["tables"].items()):
            where = out / "pq" / entry["path"]
            glob = str(where / "**" / "*.parquet") if entry["partitioned_by"] else str(where)
            rows[table] = sorted(
                map(
                    repr,
                    con.execute(
                        "select * from read_parquet(?, hive_partitioning = true, union_by_name = true)", [glob]
                    ).fetchall(),
                )
            )
        con.close()
        return rows, manifest["tables"], manifest["files"]
    return stdout


def run_read(name: str, path: Path, out: Path) -> tuple[int, str, object]:
    out.mkdir(parents=True, exist_ok=True)
    args = [a.replace("OUT", str(out)) for a in READS[name]] + ["--db", str(path)]
    result = CliRunner().invoke(cli, args)
    assert result.exception is None or isinstance(result.exception, SystemExit), (name, result.exception)
    return result.exit_code, result.stderr, what_it_wrote(name, result.stdout, out) if result.exit_code == 0 else None


@pytest.fixture(scope="module")
def undamaged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A real single-H200 trace loaded into a database, and what every read command makes of it."""
    base = tmp_path_factory.mktemp("undamaged")
    path = base / "run.duckdb"
    trace = next((Path(__file__).parent / "data" / "h200-decode-loop").glob("*.pt.trace.json.gz"))
    con = db.connect(path)
    pipeline.load_paths(con, [trace])
    con.close()
    outputs = {}
    for name in READS:
        code, stderr, output = run_read(name, path, base / "out" / name.replace(" ", "-"))
        assert code == 0, (name, stderr)
        outputs[name] = output
    return path, outputs


def test_a_damaged_database_gives_the_same_numbers_or_one_error(
    undamaged: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """64 KiB of random bytes (a fixed seed each) written over the database at five places, 1, 2, 3, 6 and 7
    eighths of the way in (where, in this database, damage hits blocks some commands read and others not, or free
    blocks). DuckDB keeps a checksum per block and checks it on every block it reads, so for every read command (report,
    compare, html, export perfetto, export parquet) each damaged copy gives exactly the undamaged copy's output
    (the command never read the damaged blocks) or one `error:` line saying the file is damaged, exit 1, nothing
    written, the copy left as it was. Both happen: the check can fail either way."""
    path, expected = undamaged
    size = path.stat().st_size
    same = refused = 0
    for k in (1, 2, 3, 6, 7):
        copy = tmp_path / f"copy{k}" / "run.duckdb"  # the same name as the undamaged one: pages show the name
        copy.parent.mkdir()
        data = bytearray(path.read_bytes())
        at = size * k // 8
        data[at : at + DAMAGE] = random.Random(k).randbytes(DAMAGE)
        copy.write_bytes(bytes(data))
        before = digest(copy)
        for name in READS:
            out = tmp_path / f"out{k}" / name.replace(" ", "-")
            code, stderr, output = run_read(name, copy, out)
            if code == 0:
                assert output == expected[name], (k, name)
                same += 1
            else:
                errors = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
                assert code == 1 and len(errors) == 1 and "database file is damaged" in errors[0], (k, name, stderr)
                assert [p for p in out.rglob("*") if p.is_file()] == [], (k, name)
                refused += 1
        assert digest(copy) == before
    assert same and refused, (same, refused)


def test_export_parquet_of_a_damaged_database_is_one_error_line(
    undamaged: tuple[Path, dict[str, object]], tmp_path: Path
) -> None:
    """The exact report of the issue: a corrupt block gave `export parquet` a traceback; as a real process now one
    line naming the database, exit 1, and no partial export (its temporary folder removed)."""
    path, _ = undamaged
    copy = tmp_path / "damaged.duckdb"
    data = bytearray(path.read_bytes())
    at = len(data) // 8  # 1/8 of the way in: a block the export reads (the sweep above shows which ones)
    data[at : at + DAMAGE] = random.Random(1).randbytes(DAMAGE)
    copy.write_bytes(bytes(data))
    out = tmp_path / "pq"
    result = k25("export", "parquet", str(out), "--db", str(copy))
    assert result.returncode == 1
    one_error(result.stderr, "damaged.duckdb", "database file is damaged")
    assert list(out.iterdir()) == []


# ------------------------------------------------------------------------------ a failed load writes nothing

HOSTILE = Path(__file__).parent / "data" / "hostile-ingest"


@pytest.fixture(scope="module")
def loaded_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("failed-load") / "run.duckdb"
    con = pipeline.connect(path)
    results, _ = pipeline.load_paths(con, [TRACE])
    con.close()
    assert [r.status for r in results] == ["loaded"]
    return path


@pytest.mark.parametrize(
    "bad", ["missing-path", "invalid-at-event-3.pt.trace.json", "deep-args-3000.pt.trace.json", "both"]
)
def test_a_load_whose_files_all_fail_leaves_the_database_byte_for_byte(
    loaded_db: Path, tmp_path: Path, bad: str
) -> None:
    """The write-mode open re-ran the schema script on every open (one transaction that rewrote the file's blocks):
    now an open writes nothing to a database that has every table at the current version."""
    path = tmp_path / "run.duckdb"
    shutil.copy(loaded_db, path)
    before = digest(path)
    files = (
        [str(HOSTILE / name) for name in ("invalid-at-event-3.pt.trace.json", "deep-args-3000.pt.trace.json")]
        if bad == "both"
        else [str(tmp_path / "missing" if bad == "missing-path" else HOSTILE / bad)]
    )
    result = CliRunner().invoke(cli, ["load", *files, "--db", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert f"0 loaded, 0 already there, {len(files)} failed" in result.stderr
    assert digest(path) == before
    assert not path.with_name(path.name + ".wal").exists()


def test_an_open_for_writing_writes_only_what_is_missing(loaded_db: Path, tmp_path: Path) -> None:
    """A current database: no write at all (bytes unchanged). One that lacks a table or a column of the schema
    (dropped, or from a k25trace that added it without a new version): it is made and nothing else changes."""
    path = tmp_path / "run.duckdb"
    shutil.copy(loaded_db, path)
    before = digest(path)
    db.connect(path).close()
    pipeline.connect(path).close()
    assert digest(path) == before
    con = duckdb.connect(str(path))
    expected = con.execute("select count(*) from steps").fetchone()
    con.execute("drop table step_layer_categories")
    con.close()
    reader = duckdb.connect(str(path), read_only=True)
    assert db.missing_tables(reader) == ["step_layer_categories"]
    reader.close()
    con = db.connect(path)
    assert db.missing_tables(con) == [] and con.execute("select count(*) from steps").fetchone() == expected
    con.execute("alter table steps drop column far_activities")  # a column (here: of a database made before it)
    con.close()
    reader = duckdb.connect(str(path), read_only=True)
    assert db.missing_tables(reader) == ["steps"]
    reader.close()
    con = db.connect(path)
    assert db.missing_tables(con) == [] and con.execute("select count(*) from steps").fetchone() == expected
    con.close()


# ------------------------------------------------- html / export open through pipeline.connect (stale run tables)

EAGER = Path(__file__).parent / "data" / "h200x2-decode-loop" / "eager"


@pytest.fixture(scope="module")
def stale_and_fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``stale``: rank 0 of the real eager TP2 pair loaded, then a load of rank 1 killed (os._exit, as kill -9)
    right after rank 1's file committed, before the cross-rank tables were rebuilt (meta.crossrank_stale set,
    trace_runs without rank 1). ``fresh``: the same two files loaded in one go."""
    base = tmp_path_factory.mktemp("stale")
    rank0, rank1 = sorted(EAGER.glob("*.pt.trace.json.gz"))
    stale, fresh = base / "a" / "run.duckdb", base / "b" / "run.duckdb"
    stale.parent.mkdir()
    fresh.parent.mkdir()
    con = pipeline.connect(fresh)
    assert [r.status for r in pipeline.load_paths(con, [rank0, rank1])[0]] == ["loaded", "loaded"]
    con.close()
    con = pipeline.connect(stale)
    assert [r.status for r in pipeline.load_paths(con, [rank0])[0]] == ["loaded"]
    con.close()
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import os
from pathlib import Path
from k25trace import pipeline
pipeline.build_runs = lambda con: os._exit(9)
con = pipeline.connect({str(stale)!r})
pipeline.load_paths(con, [Path({str(rank1)!r})])
""",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == 9, killed.stderr
    con = duckdb.connect(str(stale), read_only=True)
    assert con.execute("select value from meta where key = 'crossrank_stale'").fetchone() == ("true",)
    assert con.execute("select count(*) from traces").fetchone() == (2,)
    assert con.execute("select count(*) from trace_runs").fetchone() == (1,)  # rank 1 is in no run yet
    con.close()
    return stale, fresh


@pytest.mark.parametrize("command", ["html", "perfetto", "parquet"])
def test_html_and_export_rebuild_run_tables_a_killed_load_left_stale(
    stale_and_fresh: tuple[Path, Path], tmp_path: Path, command: str
) -> None:
    """html and export open the database through pipeline.connect (read-only), which rebuilds the cross-rank tables
    first: their output is the output of the database loaded in one go (db.connect alone gave one rank)."""
    outputs = {}
    for side, source in zip(("stale", "fresh"), stale_and_fresh, strict=True):
        path = tmp_path / side / "run.duckdb"
        path.parent.mkdir()
        shutil.copy(source, path)
        if source.with_name(source.name + ".wal").exists():  # the killed load's commit is in the write-ahead log
            shutil.copy(source.with_name(source.name + ".wal"), path.with_name(path.name + ".wal"))
        out = tmp_path / side / "out"
        argv = {
            "html": ["html", "--db", str(path), "-o", str(out)],
            "perfetto": ["export", "perfetto", "--db", str(path), "-o", str(out)],
            "parquet": ["export", "parquet", str(out), "--db", str(path)],
        }[command]
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 0, result.output
        if command == "parquet":
            tables = {}
            for t in ("trace_runs", "collectives", "collective_causes", "rank_offsets"):
                one = out / f"{t}.parquet"
                pattern = one if one.exists() else f"{out}/{t}/**/*.parquet"
                tables[t] = sorted(
                    duckdb.sql(f"select * from read_parquet('{pattern}', hive_partitioning = true)").fetchall()
                )
                assert tables[t], t
            outputs[side] = tables
        else:
            text = out.read_text(encoding="utf-8")
            text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", "", text)  # the page's generation time
            # the Perfetto trace's exported_at (to the second: the two exports may straddle one)
            outputs[side] = re.sub(r'"exported_at": ?"[^"]*"', '"exported_at": ""', text)
    assert outputs["stale"] == outputs["fresh"]
    if command == "perfetto":
        assert '"ranks":[0,1]' in outputs["fresh"].replace(" ", "")
