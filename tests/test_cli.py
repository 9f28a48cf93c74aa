"""The k25trace command line, run as users run it (the installed console script when present)."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
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


def test_loaded_lines_fit_a_terminal_and_stay_whole_in_a_pipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a 120-column terminal each `loaded` line of a vLLM file in a deep folder fits one line (the folder cut to
    "…/", then the name), its figures whole; into a pipe the line keeps the full path, for grep."""
    from click.testing import CliRunner

    from k25trace.cli import cli, err

    folder = tmp_path / "a" / "deep" / "folder" / "of" / "one" / "vllm_profile_campaign_2026-12-07"
    folder.mkdir(parents=True)
    name = "dp0_pp0_tp0_dcp0_ep0_rank0.1767189318814205831.pt.trace.json.gz"
    shutil.copy(HTA_RANK0, folder / name)
    expected = json.loads(gzip.decompress(HTA_RANK0.read_bytes()))["traceEvents"]
    gpu = sum(e.get("ph") == "X" and e.get("cat") in {"kernel", "gpu_memcpy", "gpu_memset"} for e in expected)

    screen = io.StringIO()
    for attribute, value in (("_file", screen), ("_force_terminal", True), ("_width", 120)):  # the shared console
        monkeypatch.setattr(err, attribute, value)  # as a terminal (modules that import it keep it: patched, kept)
    ran = CliRunner().invoke(cli, ["load", str(folder), "--db", str(tmp_path / "t.duckdb")])
    assert ran.exit_code == 0, ran.output
    shown = re.split(r"[\r\n]", re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", screen.getvalue()))  # progress redraws
    loaded = [line for line in shown if line.startswith("loaded ")]
    assert len(loaded) == 1 and len(loaded[0]) <= 120, loaded
    assert (
        loaded[0].startswith("loaded …/dp0_pp0_tp0_dcp0_ep0_rank0.17671893") and f"{gpu:,} GPU activities" in loaded[0]
    )

    piped = k25("load", str(folder), "--db", str(tmp_path / "p.duckdb"))
    assert any(line.startswith(f"loaded {folder / name}: rank 0, ") for line in piped.stderr.splitlines())


def test_a_database_named_as_a_trace(dbfile: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A .duckdb file among the trace paths is named as a database at once, not read as JSON (the loader read
    256 MB of it before), and the traces beside it still load; `tui FILE.duckdb` opens that database."""
    db = tmp_path / "x.duckdb"
    result = k25("load", str(dbfile), str(HTA_RANK0), "--db", str(db))
    assert result.returncode == 1
    assert f"error: {dbfile}: a DuckDB database, not a trace file; name a database with --db" in result.stderr
    assert "1 loaded" in result.stderr

    from click.testing import CliRunner

    import k25trace.tui.app
    from k25trace.cli import cli

    opened: list[Path] = []
    monkeypatch.setattr(k25trace.tui.app, "run_tui", opened.append)
    ran = CliRunner().invoke(cli, ["tui", str(dbfile)])
    assert ran.exit_code == 0, ran.output
    assert opened == [dbfile]
    ran = CliRunner().invoke(cli, ["tui", str(dbfile), str(HTA_RANK0)])
    assert ran.exit_code == 1 and "a DuckDB database among the trace paths" in ran.output
    assert opened == [dbfile]


def test_load_again_is_a_no_op(dbfile: Path) -> None:
    result = k25("load", str(B200), "--db", str(dbfile))
    assert result.returncode == 0 and "already loaded" in result.stderr


def test_sql_formats(dbfile: Path) -> None:
    query = "select rank, world_size from traces where file_name = 'eager_trace.json.gz'"
    assert k25("sql", "--db", str(dbfile), query, "--format", "csv").stdout == "rank,world_size\n0,8\n"
    assert json.loads(k25("sql", "--db", str(dbfile), query, "--format", "json").stdout) == [
        {"rank": 0, "world_size": 8}
    ]
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
    result = k25(
        "sql",
        "--db",
        str(dbfile),
        "--query",
        "report_kernels",
        "-p",
        "phase=all",
        "-p",
        "rank=null",
        "-p",
        "trace_id=null",
        "-p",
        "top=3",
        "--format",
        "csv",
    )
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 3 and rows[0]["short_name"]
    missing = k25("sql", "--db", str(dbfile), "--query", "report_kernels", "-p", "top=3")
    assert missing.returncode == 1 and "missing parameter" in missing.stderr


def sql_rows(dbfile: Path, query: str) -> list[dict]:
    """Rows of ad-hoc SQL over the base tables (the independent side of the report tests), parsed from JSON."""
    out = k25("sql", "--db", str(dbfile), query, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def report_json(dbfile: Path, *args: str) -> list[dict]:
    out = k25("report", "--db", str(dbfile), *args, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_report_default_and_views(dbfile: Path) -> None:
    """The default view: the one decode batch size of the four traces (the MI300X graph step, batch 32), each
    category's exclusive ms per step as step_categories holds it, shares adding up to the step."""
    result = k25("report", "--db", str(dbfile), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert list(rows[0]) == [
        "run_id",
        "level",
        "batch_size",
        "category",
        "steps",
        "ranks",
        "step_ms",
        "median_step_ms",
        "idle_pct",
        "ms_per_step",
        "pct_of_step",
        "kernel_ms_per_step",
        "calls_per_step",
        "us_per_call",
    ]
    assert {r["batch_size"] for r in rows} == {"32"} and {(r["steps"], r["ranks"]) for r in rows} == {("1", "1")}
    (step,) = sql_rows(
        dbfile,
        "select trace_id, step_index, wall_ns, idle_ns, overlap_ns from steps where phase = 'decode' and not is_empty",
    )
    busy = {
        r["category"]: r
        for r in sql_rows(
            dbfile,
            f"select category, busy_ns, kernel_ns, kernel_count from step_categories "
            f"where trace_id = {step['trace_id']} and step_index = {step['step_index']}",
        )
    }
    by_category = {r["category"]: r for r in rows}
    assert set(by_category) == {*busy, "other", "overlap", "idle"}
    for category, r in busy.items():
        assert float(by_category[category]["ms_per_step"]) == round(r["busy_ns"] / 1e6, 4), category
        assert float(by_category[category]["calls_per_step"]) == r["kernel_count"], category
    assert float(by_category["idle"]["ms_per_step"]) == round(step["idle_ns"] / 1e6, 4)
    assert float(by_category["overlap"]["ms_per_step"]) == round(step["overlap_ns"] / 1e6, 4)
    assert float(rows[0]["step_ms"]) == round(step["wall_ns"] / 1e6, 4)
    assert sum(float(r["pct_of_step"]) for r in rows) == pytest.approx(100, abs=0.01 * len(rows))
    table = k25("report", "--db", str(dbfile), "--format", "table")
    assert f"batch size 32: mean step {round(step['wall_ns'] / 1e6, 4):.3f} ms" in table.stdout
    assert "\n1 engine step on 1 rank\n" in table.stdout  # the title's second line
    assert "ms/step" in table.stdout


def test_report_views_against_the_step_tables(dbfile: Path) -> None:
    """--by category, step, rank and kernel over every phase, each checked against ad-hoc SQL on steps,
    step_categories and gpu_events: exact columns, row counts and the numbers (the golden files pin the rest)."""
    steps = sql_rows(
        dbfile, "select trace_id, rank, step_index, wall_ns, busy_ns, idle_ns, overlap_ns, is_empty from steps"
    )
    shown = [s for s in steps if not s["is_empty"]]
    n = len(shown)
    assert n == 225  # 1 B200 prefill step, 1 MI300X decode step, 117 + 106 inferred steps of the two HTA ranks

    category = report_json(dbfile, "--by", "category", "--phase", "all")
    assert list(category[0]) == [
        "category",
        "steps",
        "ms_per_step",
        "pct_of_step",
        "kernel_ms_per_step",
        "calls_per_step",
        "us_per_call",
    ]
    assert {r["steps"] for r in category} == {n}
    sums = {
        r["category"]: r
        for r in sql_rows(
            dbfile,
            "select c.category, sum(c.busy_ns) as busy_ns, sum(c.kernel_ns) as kernel_ns, "
            "sum(c.kernel_count) as calls from step_categories as c join steps as s using (trace_id, step_index) "
            "where not s.is_empty group by all",
        )
    }
    by_category = {r["category"]: r for r in category}
    # 'other' is always listed (report_category.sql: so missing rules show), as a zero row when no kernel of
    # these steps is 'other' -- since 039c3fe the last ones (quantize casts, embedding) have rules of their own
    assert set(by_category) == {*sums, "overlap", "idle", "other"}
    if "other" not in sums:
        assert sql_rows(dbfile, "select count(*) as n from gpu_events where category = 'other'") == [{"n": 0}]
        assert [by_category["other"][k] for k in ("ms_per_step", "kernel_ms_per_step", "calls_per_step")] == [0, 0, 0]
    for name, r in sums.items():
        assert by_category[name]["ms_per_step"] == round(int(r["busy_ns"]) / n / 1e6, 4), name
        assert by_category[name]["kernel_ms_per_step"] == round(int(r["kernel_ns"]) / n / 1e6, 4), name
        assert by_category[name]["calls_per_step"] == round(int(r["calls"]) / n, 2), name
    assert by_category["idle"]["ms_per_step"] == round(sum(s["idle_ns"] for s in shown) / n / 1e6, 4)
    assert by_category["overlap"]["ms_per_step"] == round(sum(s["overlap_ns"] for s in shown) / n / 1e6, 4)
    assert sum(r["pct_of_step"] for r in category) == pytest.approx(100, abs=0.01 * len(category))

    step_rows = report_json(dbfile, "--by", "step", "--phase", "all")
    assert list(step_rows[0]) == [
        "trace_id",
        "rank",
        "step_index",
        "phase",
        "batch_size",
        "ctx_tokens",
        "gen_tokens",
        "is_empty",
        "is_inferred",
        "graph_launches",
        "kernel_count",
        "wall_ms",
        "busy_ms",
        "idle_ms",
        "busy_pct",
        "allreduce_pct",
        "top_categories",
        "marker",
    ]
    assert [(r["trace_id"], r["step_index"]) for r in step_rows] == sorted(
        (s["trace_id"], s["step_index"]) for s in steps
    )
    truth = {(s["trace_id"], s["step_index"]): s for s in steps}
    for r in step_rows:
        s = truth[(r["trace_id"], r["step_index"])]
        assert (r["wall_ms"], r["busy_ms"], r["idle_ms"]) == (
            round(s["wall_ns"] / 1e6, 4),
            round(s["busy_ns"] / 1e6, 4),
            round(s["idle_ns"] / 1e6, 4),
        )

    rank_rows = report_json(dbfile, "--by", "rank", "--phase", "all")
    assert list(rank_rows[0]) == [
        "run_id",
        "rank",
        "category",
        "steps",
        "step_ms",
        "ms_per_step",
        "pct_of_step",
        "kernel_ms_per_step",
        "calls_per_step",
    ]
    per_rank: dict[tuple, list[dict]] = {}
    for r in rank_rows:
        per_rank.setdefault((r["run_id"], r["rank"]), []).append(r)
    assert sorted(rows[0]["steps"] for rows in per_rank.values()) == [1, 1, 106, 117]  # one trace per (run, rank)
    for rows in per_rank.values():
        assert sum(r["pct_of_step"] for r in rows) == pytest.approx(100, abs=0.01 * len(rows))

    kernels = report_json(dbfile, "--by", "kernel", "--phase", "all")
    assert list(kernels[0]) == [
        "category",
        "short_name",
        "calls_per_step",
        "ms_per_step",
        "pct_of_step",
        "mean_us",
        "min_us",
        "max_us",
    ]
    assert len(kernels) == 20 and [r["ms_per_step"] for r in kernels] == sorted(
        (r["ms_per_step"] for r in kernels), reverse=True
    )
    (top,) = sql_rows(
        dbfile,
        "select k.category, k.short_name, count(*) as calls, sum(k.dur_ns) as ns, "
        "min(k.dur_ns) as lo, max(k.dur_ns) as hi "
        "from kernels as k join steps as s using (trace_id, step_index) "
        "where not s.is_empty group by all order by ns desc limit 1",
    )
    assert (
        kernels[0]["category"],
        kernels[0]["short_name"],
        kernels[0]["calls_per_step"],
        kernels[0]["ms_per_step"],
    ) == (top["category"], top["short_name"], round(top["calls"] / n, 2), round(int(top["ns"]) / n / 1e6, 4))
    assert (kernels[0]["min_us"], kernels[0]["max_us"]) == (round(top["lo"] / 1e3, 2), round(top["hi"] / 1e3, 2))


def test_report_on_missing_db(tmp_path: Path) -> None:
    result = k25("report", "--db", str(tmp_path / "nope.duckdb"))
    assert result.returncode == 1 and "no such database" in result.stderr


def test_classify_with_user_rules(dbfile: Path, tmp_path: Path) -> None:
    db = tmp_path / "c.duckdb"
    shutil.copy(dbfile, db)
    rules = tmp_path / "rules.csv"
    rules.write_text(
        "category,kind,name_pattern,collective_pattern,note\nmy_multimem,kernel,multimem_all_reduce,,mine\n"
    )
    result = k25("classify", "--db", str(db), "--rules", str(rules))
    assert result.returncode == 0, result.stderr
    cats = k25(
        "sql",
        "--db",
        str(db),
        "select distinct category from kernels where name like '%multimem_all_reduce%'",
        "--format",
        "csv",
    )
    assert cats.stdout.splitlines() == ["category", "my_multimem"]
    steps = k25(
        "sql",
        "--db",
        str(db),
        "select count(*) n from step_categories where category = 'my_multimem'",
        "--format",
        "csv",
    )
    assert steps.stdout.splitlines()[1] != "0"
    show = k25("classify", "--db", str(db), "--show", "--format", "csv")
    assert "user:rules.csv" in show.stdout


def test_demo_runs_on_bundled_samples(tmp_path: Path) -> None:
    """`demo` loads every bundled sample and prints the traces, one table per decode run and batch size titled with
    the run's label and the group's step count, ranks, mean and median step and idle share, and every step."""
    from k25trace.cli import sample_paths

    path = tmp_path / "demo.duckdb"
    result = k25("demo", "--db", str(path))
    assert result.returncode == 0, result.stderr
    samples = len(sample_paths())
    assert result.stderr.rstrip().endswith(f"{samples} loaded, 0 already there, 0 failed")
    traces_part, steps_part = result.stdout.split("All steps")
    row_start = re.compile(r"^│\s+\d+ │", re.MULTILINE)  # a table row's first line (long cells fold onto more lines)
    assert len(row_start.findall(traces_part)) == samples
    assert len(row_start.findall(steps_part)) == sql_rows(path, "select count(*) as n from steps")[0]["n"]
    text = " ".join(result.stdout.split())  # titles wrap at the table's width
    groups = sql_rows(
        path,
        """
        select run_labels.run_label as label, steps.batch_size, count(*) as steps, count(distinct steps.rank) as ranks,
            avg(steps.wall_ns) as mean_ns, median(steps.wall_ns) as median_ns,
            sum(steps.idle_ns) * 100.0 / sum(steps.wall_ns) as idle_pct
        from steps join trace_runs using (trace_id) join run_labels using (run_id)
        where steps.phase = 'decode' and not steps.is_empty
        group by all order by all""",
    )
    assert len(groups) == 5  # the Kimi TP2 pair at batch 1, 64 and 256; the SGLang and vLLM MI300X steps at 32
    for g in groups:
        assert f"{g['label']}, batch size {g['batch_size']}: " in text, g
        title = (
            "mean step "
            f"{round(g['mean_ns'] / 1e6, 4):.3f} ms (median {round(g['median_ns'] / 1e6, 4):.3f}), "
            f"idle {round(g['idle_pct'], 2):.1f} %"
        )
        assert title in text, title


def test_run_labels_are_the_database_s(tmp_path: Path) -> None:
    """Run labels are trace_runs columns (the run_labels view projects them; nothing parses them out of run ids),
    sessions included (two sessions of two ranks in one folder)."""
    import shutil

    from k25trace import pipeline
    from k25trace.analysis import report

    both = tmp_path / "both"
    both.mkdir()
    fixture = ROOT / "tests" / "data" / "h200x2-decode-loop"
    for f in [*(fixture / "graph").iterdir(), *(fixture / "eager").iterdir()]:
        shutil.copy(f, both / f.name)
    con = pipeline.connect(tmp_path / "labels.duckdb")
    pipeline.load_paths(con, [both, *sorted((ROOT / "k25trace" / "samples").rglob("*.json.gz"))])
    labels = report.run_labels(con)
    assert labels == dict(con.execute("select distinct run_id, run_label from trace_runs").fetchall())
    sessions = con.execute("select distinct run_id, session from trace_runs where run_id like '%/both#%'").fetchall()
    assert sorted(session for _, session in sessions) == [1, 2]
    assert (
        con.execute(
            "select count(*) from trace_runs where session is not null and run_id not like '%/both#%'"
        ).fetchone()[0]
        == 0
    )
    # each session is named by what tells it apart: graph when its raw files call cudaGraphLaunch, else eager
    # (4351636); which session that is, is read here from the raw JSON of its files
    files = con.execute(
        "select distinct trace_runs.session, traces.path from trace_runs join traces using (trace_id) "
        "where run_id like '%/both#%'"
    ).fetchall()
    graph: dict[int, set[bool]] = {}
    for session, path in files:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            events = json.load(fh)["traceEvents"]
        uses_graphs = any(e.get("name") == "cudaGraphLaunch" for e in events)
        assert uses_graphs == ((fixture / "graph" / Path(path).name).exists())  # the graph folder's files
        graph.setdefault(session, set()).add(uses_graphs)
    assert sorted(graph) == [1, 2] and all(len(kinds) == 1 for kinds in graph.values())  # one kind per session
    expected = {f"both (TP2#s{session} {'graph' if kinds == {True} else 'eager'})" for session, kinds in graph.items()}
    assert {labels[r] for r in labels if "/both#" in r} == expected
    assert {graph[1].pop(), graph[2].pop()} == {True, False}
    assert "kimi-k25-synthetic-tp2 (TP2)" in labels.values()
    warnings = report.run_warnings(con)
    assert len(warnings) == 2 and all(w.startswith("both (TP2): 2 files claim rank ") for w in warnings)
    con.close()


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
    code = (
        "import sys, k25trace.cli, k25trace.ingest, k25trace.analysis.report, k25trace.steps, k25trace.crossrank, "
        "k25trace.analysis.browse, k25trace.classify; print('textual' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_one_param_parser_for_both_front_ends() -> None:
    """`sql -p` and the TUI's parameter line read name=value alike (k25trace.db.parse_param): NULL spelled
    null/none, numbers as numbers, anything else as text, commas and an empty value included."""
    from k25trace.analysis.browse import parse_params
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
        "phase": "decode",
        "rank": None,
        "top": 3,
        "levels": "c1,c64",
    }


def _project_imports(path: Path) -> set[str]:
    """The k25trace modules a file imports, function-level imports included (``from k25trace import x`` counts as
    ``k25trace.x``)."""
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("k25trace.")}


def test_import_direction_of_the_cli_and_report_layer() -> None:
    """No cycles in the CLI/report layer, function-level imports included: the vocabulary, db, the query files and
    the machine's CPUs import only the errors (db also the query files and the CPUs); report imports neither the
    speed-of-light views (sol builds on report) nor the floor feature nor any front end; no module of the package
    imports the `bench` feature (the command bench_cli, the analysis floor and floor_bench) but the feature itself:
    the CLI names it in its lazy command table."""
    pkg = ROOT / "k25trace"
    assert _project_imports(pkg / "vocab.py") <= {"k25trace.errors", "k25trace.errors.K25Error"}
    for module, allowed in (
        ("db.py", {"k25trace.errors", "k25trace.query_files", "k25trace.machine"}),
        ("query_files.py", set()),
        ("machine.py", set()),
    ):
        imported = {m.rsplit(".", 1)[0] if m.count(".") > 1 else m for m in _project_imports(pkg / module)}
        assert imported <= {"k25trace.errors", *allowed}, module
    above_report = (
        "k25trace.analysis.sol",
        "k25trace.analysis.floor",
        "k25trace.analysis.browse",
        "k25trace.cli",
        "k25trace.share_cli",
        "k25trace.bench_cli",
        "k25trace.options",
        "k25trace.render.html",
        "k25trace.analysis.compare",
        "k25trace.render.export",
        "k25trace.render.perfetto",
        "k25trace.tui",
    )
    assert not [m for m in _project_imports(pkg / "analysis" / "report.py") if m.startswith(above_report)]
    bench = ("k25trace.bench_cli", "k25trace.analysis.floor")  # floor_bench too (the prefix)
    feature = {pkg / "bench_cli.py", pkg / "analysis" / "floor.py", pkg / "analysis" / "floor_bench.py"}
    assert all(p.exists() for p in feature)
    importers = [
        str(p.relative_to(ROOT))
        for p in pkg.rglob("*.py")
        if p not in feature and any(m.startswith(bench) for m in _project_imports(p))
    ]
    assert importers == []
    assert '"k25trace.bench_cli"' in (pkg / "cli.py").read_text(encoding="utf-8")  # the lazy command table


def test_compare_choices_are_the_vocabulary() -> None:
    """`compare --match/--by` and `html --match` offer vocab's words; compare.py still spells its own copy (its owner
    is to import them from k25trace.vocab), so the two must not drift meanwhile."""
    from k25trace import vocab
    from k25trace.analysis import compare

    assert compare.MATCHES == vocab.COMPARE_MATCHES and compare.SECTIONS == vocab.COMPARE_TABLES
    assert compare.PHASES == vocab.PHASES


GAPS = ROOT / "tests" / "data" / "h200-gaps"


def _read_exact(path: Path) -> dict:
    from decimal import Decimal

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def _write_exact(trace: dict, path: Path) -> None:
    """Back with its numbers as they were (Decimal text, not floats)."""
    text = json.dumps(trace, default=lambda d: f"@@{d}@@")
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(re.sub(r'"@@([-0-9.Ee+]+)@@"', r"\1", text))


def test_load_names_sessions_that_share_a_rank(tmp_path: Path) -> None:
    """The real H200 eager and graph traces in one folder both claim rank 0: `load` says so when it loads them,
    each file with its session's label (graph: its raw JSON calls cudaGraphLaunch), and once more loads nothing.
    The warnings come from plain rows: the load never imports polars (~0.1 s of its wall time)."""
    both = tmp_path / "both"
    both.mkdir()
    kinds = {}
    for folder in ("eager", "graph"):
        for f in (GAPS / folder).glob("*.pt.trace.json.gz"):
            shutil.copy(f, both / f.name)
            kinds[f.name] = (
                "graph" if any(e.get("name") == "cudaGraphLaunch" for e in _read_exact(f)["traceEvents"]) else "eager"
            )
    assert sorted(kinds.values()) == ["eager", "graph"]
    result = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "k25trace",
            "load",
            "-q",
            str(both),
            "--db",
            str(tmp_path / "x.duckdb"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    imported = {
        line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")
    }
    assert "duckdb" in imported and "polars" not in imported
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("warning: both: 2 files claim rank 0 (")
    labels = dict(re.findall(r"([^\s(,]+\.pt\.trace\.json\.gz) -> both \(TP1#(s\d \w+)\)", warnings[0]))
    assert sorted(labels) == sorted(kinds)
    assert {label.split()[1] for label in labels.values()} == {"eager", "graph"}
    assert {name: label.split()[1] for name, label in labels.items()} == kinds
    assert sorted(label.split()[0] for label in labels.values()) == ["s1", "s2"]
    again = k25("load", "-q", str(both), "--db", str(tmp_path / "x.duckdb"))
    assert again.returncode == 0 and "warning:" not in again.stderr  # nothing loaded, nothing new to say


def test_load_warns_of_activities_timestamped_far_outside_the_trace(tmp_path: Path) -> None:
    """Two kernels of the real H200 graph trace moved 56.8 days later (as in test_steps): `load` names the file
    and says 2 were kept out of its steps; the unmodified copy loads without the warning (the control)."""
    from decimal import Decimal

    source = next((GAPS / "graph").glob("*.pt.trace.json.gz"))
    trace = _read_exact(source)
    kernels = sorted((e for e in trace["traceEvents"] if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    for moved in (kernels[len(kernels) // 3], kernels[2 * len(kernels) // 3]):
        moved["ts"] = moved["ts"] + Decimal(56.8 * 86400 * 1e6)
    far = tmp_path / "far [red]x"  # a folder name with markup: printed literally
    far.mkdir()
    path = far / source.name
    _write_exact(trace, path)
    result = k25("load", "-q", str(path), "--db", str(tmp_path / "far.duckdb"))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"warning: {path}: 2 GPU activities timestamped far outside the trace (more than 1 s past its CPU span and "
        "the GPU work after it) were kept out of its steps"
    ]
    control = k25("load", "-q", str(source), "--db", str(tmp_path / "plain.duckdb"))
    assert control.returncode == 0 and control.stderr == "", control.stderr
