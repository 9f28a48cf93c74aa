"""Schema version 5 (collective_causes, steps.far_activities, trace_runs.session_label, step_layers,
step_layer_categories, the all2all/quantize/embedding rules): a database that the previous release (fcdb562, schema
version 4) wrote is refused read-only with the command that upgrades it, and upgraded by the first write
connection to what a fresh load of the same files gives, row for row.

Schema version 6 (the step filters' macros take a batch size and a run): a version-5 database (0e8cc2b) is upgraded
by re-running the schema, every stored row kept as it was, and its macros then take the new filters.

Schema version 7 (op_calls): the upgrade from 4 builds it with the rest; from 5, every stored row is kept and
op_calls is built, row for row what a fresh load gives.

Schema version 8 (graph_kernels, step_idle): likewise; from 7 (95048a7, the last revision of version 7, with a
CUDA-graph trace loaded beside the pair), every stored row is kept and only those two are built.

The version-4 and version-5 databases are made by those revisions' own code (``git archive fcdb562`` / ``0e8cc2b``,
run in a subprocess with PYTHONPATH pointing at it), from the real eager TP2 pair of two H200s."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from k25trace import db, pipeline
from k25trace.cli import cli
from k25trace.errors import K25Error

REPO = Path(__file__).resolve().parents[1]
EAGER = REPO / "tests" / "data" / "h200x2-decode-loop" / "eager"
GRAPH = REPO / "tests" / "data" / "h200-gaps" / "graph"
OLD = "fcdb562"
USER_RULES = "category,kind,name_pattern,collective_pattern,note\nmy_gemm,kernel,nvjet,,the cuBLAS GEMMs\n"

# what a fresh load fills that version 4 did not have (and the tables they depend on), compared row for row
TABLES = [
    "kernel_rules",
    "kernel_classes",
    "steps",
    "step_categories",
    "gpu_gaps",
    "trace_runs",
    "collectives",
    "comm_alignment",
    "collective_causes",
    "step_layers",
    "step_layer_categories",
    "op_calls",
    "step_idle",
]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _old_revision(tmp_path_factory: pytest.TempPathFactory, rev: str) -> Path:
    """A previous revision's source tree (git archive: no worktree, nothing changed in the repository)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed to check out a previous revision")
    base = tmp_path_factory.mktemp("rev-" + rev)
    archive = base / "src.tar"
    with archive.open("wb") as fh:
        subprocess.run(["git", "-C", str(REPO), "archive", rev], stdout=fh, check=True, timeout=60)
    src = base / "src"
    with tarfile.open(archive) as tar:
        tar.extractall(src, filter="tar")
    return src


@pytest.fixture(scope="module")
def old_code(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous revision's source tree (git archive: no worktree, nothing changed in the repository)."""
    return _old_revision(tmp_path_factory, OLD)


def old_k25(old_code: Path, script: str, schema: int = 4) -> None:
    """Run ``script`` with a previous revision's k25trace (checked: it is that code, of schema version ``schema``)."""
    env = {**os.environ, "PYTHONPATH": str(old_code)}
    check = (
        f"import k25trace, k25trace.db as d; assert k25trace.__file__.startswith({str(old_code)!r}), "
        f"k25trace.__file__; assert d.SCHEMA_VERSION == {schema}, d.SCHEMA_VERSION\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", check + script], env=env, cwd=old_code, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def databases(old_code: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """v4 and fresh databases of the eager pair: plain, and classified with a user's rules file first."""
    base = tmp_path_factory.mktemp("upgrade")
    rules = base / "user_rules.csv"
    rules.write_text(USER_RULES)
    paths = {name: base / f"{name}.duckdb" for name in ("v4", "v4_rules", "fresh", "fresh_rules")}
    old_k25(
        old_code,
        f"""
from pathlib import Path
from k25trace import classify, pipeline
for name, user in (('v4', None), ('v4_rules', Path({str(rules)!r}))):
    con = pipeline.connect({str(base)!r} + '/' + name + '.duckdb')
    results, _ = pipeline.load_paths(con, [Path({str(EAGER)!r})])
    assert [r.status for r in results] == ['loaded', 'loaded'], results
    if user is not None:
        pipeline.reclassify(con, user)
        pipeline.rebuild(con)
    con.close()
""",
    )
    for name, user in (("fresh", None), ("fresh_rules", rules)):
        con = pipeline.connect(paths[name])
        results, _ = pipeline.load_paths(con, [EAGER])
        assert [r.status for r in results] == ["loaded", "loaded"]
        if user is not None:
            pipeline.reclassify(con, user)
            pipeline.rebuild(con)
        con.close()
    return paths


def version(path: Path) -> str:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("select value from meta where key = 'schema_version'").fetchone()[0]
    finally:
        con.close()


def rows(path: Path, table: str) -> list[tuple]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(f"select * from {table} order by all").fetchall()
    finally:
        con.close()


def report_comm(path: Path) -> str:
    result = CliRunner().invoke(cli, ["report", "--by", "comm", "--db", str(path)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_old_database_is_version_4_without_the_new_tables(databases: dict[str, Path]) -> None:
    v4 = databases["v4"]
    assert version(v4) == "4" and db.SCHEMA_VERSION == 8 and version(databases["fresh"]) == "8"
    con = duckdb.connect(str(v4), read_only=True)
    tables = {name for (name,) in con.execute("select table_name from duckdb_tables()").fetchall()}
    columns = {(t, c) for t, c in con.execute("select table_name, column_name from duckdb_columns()").fetchall()}
    con.close()
    assert not {"collective_causes", "step_layers", "step_layer_categories", "op_calls", "step_idle"} & tables
    assert ("steps", "far_activities") not in columns and ("trace_runs", "session_label") not in columns
    assert {"traces", "gpu_events", "steps", "trace_runs", "collectives"} <= tables


def test_a_read_only_open_of_a_version_4_database_says_how_to_upgrade_and_changes_nothing(
    databases: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "v4.duckdb"
    shutil.copy(databases["v4"], path)
    before = digest(path)
    with pytest.raises(
        K25Error,
        match=r"schema version 4 is older than this k25trace's \(8\): run `k25trace steps "
        r"--db .*v4.duckdb` once to upgrade it",
    ):
        pipeline.connect(path, read_only=True)
    for command in (
        ["report", "--by", "comm"],
        ["html", "-o", str(tmp_path / "page.html")],
        ["export", "parquet", str(tmp_path / "pq")],
    ):
        argv = (
            [command[0], "--db", str(path), *command[1:]] if command[0] != "export" else [*command, "--db", str(path)]
        )
        result = CliRunner().invoke(cli, argv)
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert result.exit_code == 1 and len(errors) == 1, (command, result.output)
        assert "schema version 4 is older" in errors[0] and f"k25trace steps --db {path}" in errors[0]
        assert "Traceback" not in result.output
    assert digest(path) == before
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "pq").exists()


@pytest.mark.parametrize("kind", ["", "_rules"])
def test_the_upgrade_gives_what_a_fresh_load_gives(databases: dict[str, Path], tmp_path: Path, kind: str) -> None:
    path = tmp_path / "v4.duckdb"
    shutil.copy(databases["v4" + kind], path)
    fresh = databases["fresh" + kind]
    result = CliRunner().invoke(cli, ["steps", "--db", str(path)])  # the command the error names
    assert result.exit_code == 0, result.output
    assert "upgrading the database from schema version 4 to 8" in result.stderr
    assert version(path) == "8"
    assert report_comm(path) == report_comm(fresh)
    for table in TABLES:
        got, want = rows(path, table), rows(fresh, table)
        assert got == want, table
        assert got, table  # every table compared holds rows
    con = duckdb.connect(str(path), read_only=True)
    labels = con.execute("select distinct session_label from trace_runs").fetchall()
    far = con.execute("select count(*), count(far_activities) from steps").fetchone()
    con.close()
    assert labels == [(None,)] and far[0] == far[1] > 0  # the new columns are there and filled as a load fills them
    if kind:
        categories = {r[1] for r in rows(path, "kernel_rules")}
        user = [r for r in rows(path, "kernel_rules") if r[6] != "builtin"]
        assert [(r[0], r[1], r[3]) for r in user] == [(1, "my_gemm", "nvjet")]
        assert {"all2all", "quantize", "embedding"} <= categories  # this k25trace's built-in rules, after the user's
        # the layer segments follow the new categories (`k25trace classify`/`steps` rebuilt the steps and not them)
        assert "my_gemm" in {r[4] for r in rows(fresh, "step_layer_categories")}


def test_the_upgrade_path_still_rebuilds_with_no_extra_write(databases: dict[str, Path], tmp_path: Path) -> None:
    """After the upgrade, opening the database again (for writing or not) writes nothing."""
    path = tmp_path / "v4.duckdb"
    shutil.copy(databases["v4"], path)
    pipeline.connect(path).close()
    upgraded = digest(path)
    pipeline.connect(path).close()
    db.connect(path).close()
    pipeline.connect(path, read_only=True).close()
    assert digest(path) == upgraded


OLD5 = "0e8cc2b"  # the last revision of schema version 5


@pytest.fixture(scope="module")
def v5_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The eager pair loaded by the version-5 revision's own code."""
    src = _old_revision(tmp_path_factory, OLD5)
    path = src.parent / "v5.duckdb"
    old_k25(
        src,
        f"""
from pathlib import Path
from k25trace import pipeline
con = pipeline.connect({str(path)!r})
results, _ = pipeline.load_paths(con, [Path({str(EAGER)!r})])
assert [r.status for r in results] == ['loaded', 'loaded'], results
con.close()
""",
        schema=5,
    )
    return path


def every_table(path: Path) -> dict[str, list[tuple]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        names = [n for (n,) in con.execute("select table_name from duckdb_tables() where not temporary").fetchall()]
    finally:
        con.close()
    return {name: rows(path, name) for name in sorted(names) if name != "meta"}


def test_the_upgrade_from_version_5_keeps_every_stored_row(
    v5_database: Path, databases: dict[str, Path], tmp_path: Path
) -> None:
    path = tmp_path / "v5.duckdb"
    shutil.copy(v5_database, path)
    assert version(path) == "5"
    before = every_table(path)
    with pytest.raises(K25Error, match=r"schema version 5 is older than this k25trace's \(8\)"):
        pipeline.connect(path, read_only=True)
    result = CliRunner().invoke(cli, ["report", "--db", str(path), "--format", "csv"])
    assert result.exit_code == 1 and "k25trace steps --db" in result.stderr
    pipeline.connect(path).close()  # the first write connection upgrades
    assert version(path) == "8"
    after = every_table(path)
    new = ["op_calls", "graph_kernels", "step_idle"]
    assert sorted(after) == sorted([*before, *new]) and all(before[t] == after[t] for t in before), [
        t for t in before if before[t] != after[t]
    ]
    for table in new:
        assert after[table] == rows(databases["fresh"], table), table
    assert after["op_calls"] and after["step_idle"]
    assert sum(map(len, before.values())) > 1000  # the tables compared hold the pair's events
    result = CliRunner().invoke(cli, ["report", "--db", str(path), "--by", "comm", "--batch", "8", "--format", "csv"])
    assert result.exit_code == 0, result.output
    assert {line.split(",")[2] for line in result.stdout.splitlines()[1:]} == {"8"}


OLD7 = "95048a7"  # the last revision of schema version 7


@pytest.fixture(scope="module")
def v7_and_fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The eager pair and a CUDA-graph trace, loaded by the version-7 revision's own code and by this one."""
    src = _old_revision(tmp_path_factory, OLD7)
    base = tmp_path_factory.mktemp("v7")
    old, fresh = base / "v7.duckdb", base / "fresh.duckdb"
    script = f"""
from pathlib import Path
from k25trace import pipeline
con = pipeline.connect({str(old)!r})
results, _ = pipeline.load_paths(con, [Path({str(EAGER)!r}), Path({str(GRAPH)!r})])
assert [r.status for r in results] == ['loaded'] * 3, results
con.close()
"""
    old_k25(src, script, schema=7)
    con = pipeline.connect(fresh)
    results, _ = pipeline.load_paths(con, [EAGER, GRAPH])
    assert [r.status for r in results] == ["loaded"] * 3
    con.close()
    return old, fresh


def test_the_upgrade_from_version_7_keeps_every_stored_row_and_builds_the_step_sums(
    v7_and_fresh: tuple[Path, Path], tmp_path: Path
) -> None:
    old, fresh = v7_and_fresh
    path = tmp_path / "v7.duckdb"
    shutil.copy(old, path)
    assert version(path) == "7"
    before = every_table(path)
    pipeline.connect(path).close()  # the first write connection upgrades
    assert version(path) == "8"
    after = every_table(path)
    new = ["graph_kernels", "step_idle"]
    assert sorted(after) == sorted([*before, *new]) and all(before[t] == after[t] for t in before), [
        t for t in before if before[t] != after[t]
    ]
    for table in new:
        assert after[table] and after[table] == rows(fresh, table), table
    # the views that read them give what a fresh load gives
    for view in ("idle", "timeline", "roofline", "findings"):
        argv = ["report", "--by", view, "--phase", "all", "--format", "csv"]
        got = CliRunner().invoke(cli, [*argv, "--db", str(path)])
        want = CliRunner().invoke(cli, [*argv, "--db", str(fresh)])
        assert got.exit_code == want.exit_code == 0, got.output
        assert got.stdout.replace(str(path), "DB") == want.stdout.replace(str(fresh), "DB"), view
