"""The k25trace command line, run as users run it (the installed console script when present)."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import B200, HTA_RANK0, HTA_RANK1, MI300X_FULL

ROOT = Path(__file__).resolve().parent.parent


def k25(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("k25trace")
    cmd = [exe] if exe else [sys.executable, "-m", "k25trace"]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*cmd, *args], capture_output=True, text=True, input=stdin, cwd=cwd, env=env, timeout=300)


@pytest.fixture(scope="module")
def dbfile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "run.duckdb"
    result = k25("load", str(B200), str(MI300X_FULL), str(HTA_RANK0), str(HTA_RANK1), "--db", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # data only on stdout; progress and per-file lines on stderr
    assert "4 loaded" in result.stderr
    return path


def test_load_bad_file_exit_code_and_good_files_loaded(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(B200.read_bytes()[:5000])
    db = tmp_path / "x.duckdb"
    result = k25("load", str(bad), str(HTA_RANK0), "--db", str(db))
    assert result.returncode == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1 and str(bad) in error_lines[0] and "truncated gzip" in error_lines[0]
    out = k25("sql", "--db", str(db), "select count(*) as n from traces", "--format", "csv")
    assert out.stdout.splitlines() == ["n", "1"]


def test_load_again_is_a_no_op(dbfile: Path) -> None:
    result = k25("load", str(B200), "--db", str(dbfile))
    assert result.returncode == 0 and "already loaded" in result.stderr


def test_sql_formats(dbfile: Path) -> None:
    query = "select rank, world_size from traces where file_name = 'eager_trace.json.gz'"
    assert k25("sql", "--db", str(dbfile), query, "--format", "csv").stdout == "rank,world_size\n0,8\n"
    assert json.loads(k25("sql", "--db", str(dbfile), query, "--format", "json").stdout) == [{"rank": 0, "world_size": 8}]
    md = k25("sql", "--db", str(dbfile), query, "--format", "markdown").stdout
    assert md.splitlines()[0] == "| rank | world_size |" and md.splitlines()[2] == "| 0 | 8 |"
    stdin = k25("sql", "--db", str(dbfile), "-", "--format", "csv", stdin=query)
    assert stdin.stdout == "rank,world_size\n0,8\n"
    qfile = dbfile.parent / "q.sql"
    qfile.write_text(query)
    assert k25("sql", "--db", str(dbfile), "-f", str(qfile), "--format", "csv").stdout == "rank,world_size\n0,8\n"


def test_sql_bad_query_gives_duckdb_message(dbfile: Path) -> None:
    result = k25("sql", "--db", str(dbfile), "select nope from traces")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("error: SQL error:") and "nope" in result.stderr


def test_sql_named_query_with_params(dbfile: Path) -> None:
    listed = k25("sql", "--db", str(dbfile), "--list", "--format", "csv").stdout
    assert "report_kernels" in listed and "$top" in listed
    result = k25("sql", "--db", str(dbfile), "--query", "report_kernels", "-p", "phase=all", "-p", "rank=null",
                 "-p", "trace_id=null", "-p", "top=3", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 3 and rows[0]["short_name"]
    missing = k25("sql", "--db", str(dbfile), "--query", "report_kernels", "-p", "top=3")
    assert missing.returncode == 1 and "missing parameter" in missing.stderr


def test_report_default_and_views(dbfile: Path) -> None:
    result = k25("report", "--db", str(dbfile), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert rows and {r["batch_size"] for r in rows} == {"32"}
    assert {"idle", "overlap", "other"} <= {r["category"] for r in rows}
    table = k25("report", "--db", str(dbfile), "--format", "table")
    assert "batch size 32" in table.stdout and "ms/step" in table.stdout
    for view in ("category", "step", "rank", "kernel"):
        out = k25("report", "--db", str(dbfile), "--by", view, "--phase", "all", "--format", "json")
        assert out.returncode == 0 and json.loads(out.stdout), view


def test_report_on_missing_db(tmp_path: Path) -> None:
    result = k25("report", "--db", str(tmp_path / "nope.duckdb"))
    assert result.returncode == 1 and "no such database" in result.stderr


def test_classify_with_user_rules(dbfile: Path, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    shutil.copy(dbfile, db)
    rules = tmp_path / "rules.csv"
    rules.write_text('category,kind,name_pattern,collective_pattern,note\nmy_multimem,kernel,multimem_all_reduce,,mine\n')
    result = k25("classify", "--db", str(db), "--rules", str(rules))
    assert result.returncode == 0, result.stderr
    cats = k25("sql", "--db", str(db), "select distinct category from kernels where name like '%multimem_all_reduce%'", "--format", "csv")
    assert cats.stdout.splitlines() == ["category", "my_multimem"]
    steps = k25("sql", "--db", str(db), "select count(*) n from step_categories where category = 'my_multimem'", "--format", "csv")
    assert steps.stdout.splitlines()[1] != "0"
    show = k25("classify", "--db", str(db), "--show", "--format", "csv")
    assert "user:rules.csv" in show.stdout


def test_demo_runs_on_bundled_samples() -> None:
    result = k25("demo")
    assert result.returncode == 0, result.stderr
    assert "batch size 32" in result.stdout and "All steps" in result.stdout


def test_help_mentions_every_command_in_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    out = k25("--help").stdout
    commands = [line.split()[0] for line in out.split("Commands:")[1].splitlines() if line.strip()]
    assert {"load", "sql", "report", "demo", "tui", "classify", "steps"} <= set(commands)
    for command in commands:
        assert f"k25trace {command}" in readme, command
        assert k25(command, "--help").returncode == 0


def test_installed_package_carries_its_sql_and_samples() -> None:
    """Under CI the suite runs against the installed wheel, which must find its SQL files and samples."""
    import k25trace
    from k25trace import db
    from k25trace.cli import sample_paths

    installed = "site-packages" in k25trace.__file__
    if os.environ.get("CI") and not (ROOT / "k25trace" / "__init__.py").samefile(k25trace.__file__):
        assert installed, f"CI must test the installed wheel, imported {k25trace.__file__}"
    assert (db.queries_dir() / "schema.sql").is_file()
    assert (db.queries_dir() / "kernel_rules.csv").is_file()
    assert len(sample_paths()) >= 4
    if installed:
        assert Path(k25trace.__file__).parent in db.queries_dir().parents


def test_core_does_not_import_textual() -> None:
    """The headless core (and the CLI start-up) never pull in the TUI toolkit."""
    code = ("import sys, k25trace.cli, k25trace.ingest, k25trace.report, k25trace.steps, k25trace.crossrank, "
            "k25trace.browse, k25trace.classify; print('textual' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_one_param_parser_for_both_front_ends() -> None:
    """`sql -p` and the TUI's parameter line read name=value alike (k25trace.db.parse_param): NULL spelled
    null/none, numbers as numbers, anything else as text, commas and an empty value included."""
    from k25trace.browse import parse_params
    from k25trace.db import parse_param
    from k25trace.errors import K25Error

    assert parse_param("rank=null") == ("rank", None) and parse_param("$rank=None") == ("rank", None)
    assert parse_param("top=10") == ("top", 10) and parse_param("alpha=0.5") == ("alpha", 0.5)
    assert parse_param("levels=c1,c64") == ("levels", "c1,c64")
    assert parse_param("pattern=") == ("pattern", "")
    assert parse_param("expr=a=b") == ("expr", "a=b")
    for bad in ("rank", "=3"):
        with pytest.raises(K25Error, match="expected name=value"):
            parse_param(bad)
    assert parse_params(" phase=decode  rank=null top=3 levels=c1,c64 ") == {
        "phase": "decode", "rank": None, "top": 3, "levels": "c1,c64"}
