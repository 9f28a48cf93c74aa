"""Issue 11, item 16: a DuckDB file that is not k25trace's, or from a newer k25trace, is never modified; an older
k25trace database is upgraded whole."""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from k25trace import db, pipeline, report
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
