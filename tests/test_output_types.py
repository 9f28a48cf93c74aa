"""`k25trace sql` prints every DuckDB type in every format, and its hostile inputs end in messages, not tracebacks.

Issue 11: item 1 (JSON crashed on any integer `sum()`), 13 (CSV on lists/structs/blobs, every format on
intervals/unions, blank or comment-only SQL), 17 (`COPY … TO` and `EXPORT DATABASE` wrote files through the
read-only `sql`), 18 (`--gap-us nan|inf`, a non-UTF-8 `--rules` or `sql -f` file, Ctrl-C in `classify`/`steps`).
Each test runs the exact input that broke. The commands run in-process (click's runner): these are many small
runs, and the console script is the same function.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import signal
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result

from helpers import MI300X_FULL, SGLANG
from k25trace import db
from k25trace.cli import cli
from k25trace.render import output
from k25trace.vocab import FORMATS  # every format the commands offer

DATA = Path(__file__).parent / "data" / "hostile-sql"


def k25(*args: str, stdin: bytes | str | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin, catch_exceptions=True)


def assert_clean(result: Result, code: int) -> None:
    """Exit ``code`` with no Python traceback (an uncaught exception is one, whatever the exit code)."""
    crash = result.exception if not isinstance(result.exception, SystemExit) else None
    assert crash is None, f"crashed: {crash!r}\n{result.output}"
    assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def empty_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A k25trace database with the schema and no trace: the type tests need only DuckDB."""
    path = tmp_path_factory.mktemp("sql-types") / "empty.duckdb"
    db.connect(path).close()
    return path


def sql(dbfile: Path, query: str, fmt: str) -> Result:
    wide = ("--wide",) if fmt == "table" else ()  # every column, whatever the terminal's width
    return k25("sql", "--db", str(dbfile), "--format", fmt, *wide, "--", query)


# ------------------------------------------------------------------------------------------------- item 1 / 13


@pytest.mark.parametrize("fmt", FORMATS)
def test_integer_sum_decimal_prints_in_every_format(empty_db: Path, fmt: str) -> None:
    """Item 1: `sum()` of integers is a DECIMAL (HUGEINT) and `--format json` died on decimal.Decimal."""
    result = sql(empty_db, "select sum(x) as s, 1.5::decimal(38,10) as d from range(3) t(x)", fmt)
    assert_clean(result, 0)
    if fmt == "json":
        assert json.loads(result.stdout, parse_float=Decimal) == [{"s": 3, "d": Decimal("1.5000000000")}]
    elif fmt == "csv":
        assert result.stdout == "s,d\n3,1.5000000000\n"
    else:
        assert "3" in result.stdout and "1.5000000000" in result.stdout


EVERY_TYPE = """
select 170141183460469231731687303715884105727::hugeint as h,
       340282366920938463463374607431768211455::uhugeint as uh,
       [1, 2, null] as l, {'a': 1, 'b': [1]} as st, map {'k': 1} as m,
       '\\x00ab\\xFF'::blob as b,
       timestamp '2024-05-01 12:00:00' as ts, 'infinity'::timestamp as ts_inf, date '2024-05-01' as d,
       interval '1 year 2 months 3 days 04:05:06' as i,
       union_value(num := 2)::union(num int, str varchar) as u,
       'nan'::double as n, 'inf'::double as pinf, '-inf'::float as ninf, null as z,
       time with time zone '01:02:03+05' as ttz, bit '0101' as bits,
       [1.5, 'nan'::double] as ln
"""


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_type_named_in_the_issue_prints_exactly(empty_db: Path, fmt: str) -> None:
    """Item 13: CSV died on lists/structs/blobs, every format on INTERVAL and UNION; HUGEINT lost its last digit,
    UHUGEINT's maximum came out as -1, TIME WITH TIME ZONE lost its offset, BIT came out as raw bytes."""
    result = sql(empty_db, EVERY_TYPE, fmt)
    assert_clean(result, 0)
    text = result.stdout
    if fmt == "json":
        (row,) = json.loads(text)
        assert row == {
            "h": 170141183460469231731687303715884105727,
            "uh": 340282366920938463463374607431768211455,
            "l": [1, 2, None],
            "st": {"a": 1, "b": [1]},
            "m": {"k": 1},
            "b": "\\x00ab\\xFF",
            "ts": "2024-05-01 12:00:00",
            "ts_inf": "infinity",
            "d": "2024-05-01",
            "i": "1 year 2 months 3 days 04:05:06",
            "u": {"num": 2},
            "n": "NaN",
            "pinf": "Infinity",
            "ninf": "-Infinity",
            "z": None,
            "ttz": "01:02:03+05",
            "bits": "0101",
            "ln": [1.5, "NaN"],
        }
        return
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        assert len(rows) == 2
        row = dict(zip(rows[0], rows[1], strict=True))
        assert row["h"] == "170141183460469231731687303715884105727"
        assert row["uh"] == "340282366920938463463374607431768211455"
        assert row["l"] == "[1, 2, NULL]" and row["st"] == "{'a': 1, 'b': [1]}" and row["b"] == "\\x00ab\\xFF"
        assert row["i"] == "1 year 2 months 3 days 04:05:06" and row["u"] == "2" and row["ts_inf"] == "infinity"
        assert row["z"] == "" and row["n"] == "NaN" and row["ttz"] == "01:02:03+05" and row["bits"] == "0101"
        return
    if fmt == "markdown":
        lines = text.splitlines()
        assert len(lines) == 3
        row = dict(
            zip(
                [c.strip() for c in lines[0].strip("| ").split(" | ")],
                [c.strip() for c in lines[2].strip("| ").split(" | ")],
                strict=True,
            )
        )
    else:
        row = table_row(text)
    assert (
        row["uh"] == "340282366920938463463374607431768211455" and row["h"] == "170141183460469231731687303715884105727"
    )
    assert row["i"] == "1 year 2 months 3 days 04:05:06" and row["ts_inf"] == "infinity" and row["ttz"] == "01:02:03+05"
    assert row["b"] == "\\x00ab\\xFF" and row["n"] == "nan" and row["ninf"] == "-inf" and row["z"] == "—"
    assert row["l"] == "[1, 2, NULL]" and row["u"] == "2" and row["bits"] == "0101"


def table_row(text: str) -> dict[str, str]:
    """The one data row of a Rich table, each cell's folded lines joined again (numbers fold without spaces)."""
    lines = text.splitlines()
    header = [c.strip() for c in lines[1].strip("┃").split("┃")]
    body = [line.strip("│").split("│") for line in lines[3:-1]]
    cells = []
    for i in range(len(header)):
        parts = [b[i].strip() for b in body if b[i].strip()]
        cells.append("".join(parts) if all(p.isdigit() for p in parts) else " ".join(parts))
    return dict(zip(header, cells, strict=True))


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_of_duckdbs_test_types_print(empty_db: Path, fmt: str) -> None:
    """DuckDB's own catalogue of its types (min, max and NULL of each): nothing crashes, nothing is lost."""
    result = sql(empty_db, "select * from test_all_types()", fmt)
    assert_clean(result, 0)
    if fmt == "json":
        rows = json.loads(result.stdout)
        assert len(rows) == 3 and all(v is None for v in rows[2].values())
        assert rows[1]["uhugeint"] == 2**128 - 1 and rows[0]["hugeint"] == -(2**127)
        assert rows[1]["double_array"] == [42.0, "NaN", "Infinity", "-Infinity", None, -42.0]
        assert rows[1]["union"] == {"age": 5} and rows[1]["bit"] == "10101"
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(result.stdout)))
        assert len(rows) == 3 and rows[1]["uhugeint"] == str(2**128 - 1) and rows[1]["interval"] != ""


@pytest.mark.parametrize("fmt", FORMATS)
def test_markup_newlines_and_duplicate_names(empty_db: Path, fmt: str) -> None:
    """A `[/x]` in a value was Rich markup (MarkupError in a table); a newline split a Markdown row; two columns
    of one name made polars refuse the result."""
    result = sql(empty_db, "select '[/x] [bold]b' as s, 'a\nb|c' as t, 1 as a, 2 as a", fmt)
    assert_clean(result, 0)
    if fmt == "json":
        assert json.loads(result.stdout) == [{"s": "[/x] [bold]b", "t": "a\nb|c", "a": 1, "a_1": 2}]
    elif fmt == "markdown":
        assert result.stdout.splitlines()[2] == "| [/x] [bold]b | a\\nb\\|c | 1 | 2 |"
    elif fmt == "table":
        assert "[/x] [bold]b" in result.stdout and "a_1" in result.stdout


@pytest.mark.parametrize("query", ["", " \n\t", "-- only a comment", "/* a block */", ";", ";;\n-- x"])
def test_blank_or_comment_only_sql_is_a_message(empty_db: Path, query: str) -> None:
    """Item 13: blank or comment-only SQL died with AttributeError on None.description."""
    result = sql(empty_db, query, "csv")
    assert_clean(result, 1)
    assert "error:" in result.stderr and ("no SQL statement" in result.stderr or "give a query" in result.stderr)


def test_comment_only_file_and_stdin(empty_db: Path) -> None:
    result = k25("sql", "--db", str(empty_db), "-f", str(DATA / "comment_only.sql"))
    assert_clean(result, 1)
    assert "no SQL statement to run" in result.stderr
    result = k25("sql", "--db", str(empty_db), "-", stdin=(DATA / "comment_only.sql").read_bytes())
    assert_clean(result, 1)
    assert "no SQL statement to run" in result.stderr


def test_several_statements_trailing_comment_and_parameters(empty_db: Path) -> None:
    run = lambda *a: k25("sql", "--db", str(empty_db), "--format", "csv", *a)  # noqa: E731
    assert run("--", "select 1 as x; -- a note after the semicolon").stdout == "x\n1\n"
    assert run("--", "create temp table t as select 42 as v; select v + 1 as w from t;").stdout == "w\n43\n"
    assert run("select $a::int + 1 as y, $b as z", "-p", "a=1", "-p", "b=hi").stdout == "y,z\n2,hi\n"
    missing = run("select $a as y")
    assert_clean(missing, 1)
    assert "missing parameter(s): $a" in missing.stderr
    unused = run("select 1", "-p", "a=1")
    assert_clean(unused, 1)
    assert "not used by the SQL: $a" in unused.stderr


def test_output_write_handles_frames_polars_holds() -> None:
    """The reports' writer (frames, not DuckDB results): decimals, lists, structs, binary, NaN, NULL."""
    frame = pl.DataFrame(
        {
            "d": pl.Series([Decimal("3"), None], dtype=pl.Decimal(38, 0)),
            "l": [[1, 2], None],
            "s": [{"a": 1}, None],
            "b": [b"\x00a", None],
            "f": [float("nan"), float("inf")],
        }
    )
    for fmt in FORMATS:
        out = io.StringIO()
        output.write(frame, fmt, out)
        assert out.getvalue()
    out = io.StringIO()
    output.write(frame, "json", out)
    assert json.loads(out.getvalue()) == [
        {"d": 3, "l": [1, 2], "s": {"a": 1}, "b": "\\x00a", "f": "NaN"},
        {"d": None, "l": None, "s": None, "b": None, "f": "Infinity"},
    ]
    out = io.StringIO()
    output.write(frame, "csv", out)
    assert out.getvalue().splitlines()[1] == "3,\"[1, 2]\",{'a': 1},\\x00a,NaN"


# ------------------------------------------------------------------------------------------------------ item 17


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def scratch_db(tmp_path: Path) -> Path:
    path = tmp_path / "run.duckdb"
    db.connect(path).close()
    return path


def test_sql_writes_and_reads_no_file(scratch_db: Path, tmp_path: Path) -> None:
    """Item 17: `COPY … TO` and `EXPORT DATABASE` wrote files through the read-only `sql`."""
    before = digest(scratch_db)
    (tmp_path / "secret.txt").write_text("not for SQL")
    targets = {
        f"copy (select 1) to '{tmp_path / 'out.csv'}'": tmp_path / "out.csv",
        f"copy (select 1) to '{tmp_path / 'out.parquet'}' (format parquet)": tmp_path / "out.parquet",
        f"export database '{tmp_path / 'exported'}'": tmp_path / "exported",
        f"attach '{tmp_path / 'other.duckdb'}' as other": tmp_path / "other.duckdb",
    }
    for query, target in targets.items():
        result = sql(scratch_db, query, "csv")
        assert_clean(result, 1)
        assert "Permission Error" in result.stderr and "read-only" in result.stderr, result.stderr
        assert not target.exists(), query
    for query in (
        f"select * from read_text('{tmp_path / 'secret.txt'}')",
        f"select * from read_csv('{tmp_path / 'secret.txt'}')",
        "set enable_external_access = true",
        "reset enable_external_access",
        "set lock_configuration = false",
        f"set temp_directory = '{tmp_path / 'spill'}'",
        "install httpfs",
        "load httpfs",
        f"set profiling_output = '{tmp_path / 'profile.json'}'",
        "insert into meta values ('x', 'y')",
    ):
        result = sql(scratch_db, query, "csv")
        assert_clean(result, 1)
        assert "not for SQL" not in result.stdout, query
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.duckdb", "secret.txt"]
    assert digest(scratch_db) == before
    # what read-only leaves: reading the database, temporary tables, and the named queries
    assert sql(scratch_db, "create temp table t as select 7 as v; select v from t", "csv").stdout == "v\n7\n"
    named = k25(
        "sql",
        "--db",
        str(scratch_db),
        "--query",
        "report_kernels",
        "-p",
        "phase=decode",
        "-p",
        "rank=null",
        "-p",
        "trace_id=null",
        "-p",
        "top=3",
        "--format",
        "csv",
    )
    assert_clean(named, 0)


def test_forbid_external_access_is_idempotent_and_locked(scratch_db: Path, tmp_path: Path) -> None:
    con = db.connect(scratch_db, read_only=True)
    db.forbid_external_access(con)
    db.forbid_external_access(con.cursor())  # a second cursor (the TUI runs each query on one) is covered too
    cursor = con.cursor()
    with pytest.raises(Exception, match="locked"):
        cursor.execute("set enable_external_access = true")
    with pytest.raises(Exception, match="Permission"):
        cursor.execute(f"copy (select 1) to '{tmp_path / 'x.csv'}'")
    assert not (tmp_path / "x.csv").exists()
    con.close()


# ------------------------------------------------------------------------------------------------------ item 18


def test_sql_file_stdin_and_argument_not_utf8(empty_db: Path) -> None:
    """Item 18: a Latin-1 `sql -f` file died with UnicodeDecodeError."""
    result = k25("sql", "--db", str(empty_db), "-f", str(DATA / "latin1.sql"))
    assert_clean(result, 1)
    assert "latin1.sql: not UTF-8 text: byte 0xe9 at offset 6 (line 1)" in result.stderr
    result = k25("sql", "--db", str(empty_db), "-", stdin=(DATA / "latin1.sql").read_bytes())
    assert_clean(result, 1)
    assert "stdin: not UTF-8 text: byte 0xe9" in result.stderr
    # a non-UTF-8 byte in argv reaches Python as a surrogate escape
    result = k25("sql", "--db", str(empty_db), "select 'caf\udce9' as x")
    assert_clean(result, 1)
    assert "the query argument: not UTF-8 text: byte 0xe9" in result.stderr
    # a UTF-8 byte-order mark is not an error
    bom = empty_db.parent / "bom.sql"
    bom.write_bytes(b"\xef\xbb\xbfselect 2 as y\n")
    assert k25("sql", "--db", str(empty_db), "-f", str(bom), "--format", "csv").stdout == "y\n2\n"


@pytest.fixture(scope="module")
def traces_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two small real traces (two step rebuilds: an interrupt can fall between them)."""
    from k25trace import pipeline

    path = tmp_path_factory.mktemp("ctrl-c") / "two.duckdb"
    con = pipeline.connect(path)
    results, _ = pipeline.load_paths(con, [MI300X_FULL, SGLANG])
    con.close()
    assert [r.status for r in results] == ["loaded", "loaded"]
    return path


@pytest.fixture()
def two_traces(traces_db: Path, tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "two.duckdb"
    path.write_bytes(traces_db.read_bytes())
    yield path


def step_counts(path: Path) -> list[tuple[int, int]]:
    con = db.connect(path, read_only=True)
    try:
        return con.execute("select trace_id, count(*) from steps group by all order by all").fetchall()
    finally:
        con.close()


def test_rules_file_not_utf8(two_traces: Path) -> None:
    """Item 18: a Latin-1 `--rules` file died with UnicodeDecodeError."""
    before = digest(two_traces)
    result = k25("classify", "--db", str(two_traces), "--rules", str(DATA / "latin1_rules.csv"))
    assert_clean(result, 2)
    assert "latin1_rules.csv: not UTF-8 text: byte 0xe9 at offset 66 (line 2)" in result.stderr
    assert digest(two_traces) == before


@pytest.mark.parametrize("gap", ["nan", "inf", "-inf", "-1", "1e300", "NaN"])
def test_gap_us_not_a_usable_number(two_traces: Path, gap: str) -> None:
    """Item 18: `--gap-us nan` died with "cannot convert float NaN to integer" (inf: OverflowError)."""
    result = k25("steps", "--db", str(two_traces), "--gap-us", gap)
    assert_clean(result, 2)
    assert "Invalid value for '--gap-us'" in result.stderr and "not a usable gap" in result.stderr


def test_gap_us_in_range_still_works(two_traces: Path) -> None:
    for gap in ("0", "1000", "2.5"):
        assert_clean(k25("steps", "--db", str(two_traces), "--gap-us", gap), 0)


def interrupt_second_trace(monkeypatch: pytest.MonkeyPatch, how: str) -> list[int]:
    """Make the step rebuild of the second trace be interrupted: by a real SIGINT (Python raises
    KeyboardInterrupt) or as DuckDB reports a query it stopped for Ctrl-C (RuntimeError "Query interrupted")."""
    from k25trace import steps

    real = steps.build_steps
    seen: list[int] = []

    def build(con, trace_id, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(trace_id)
        if len(seen) == 2:
            con.execute("delete from steps where trace_id = ?", [trace_id])  # half-way: this must be rolled back
            if how == "signal":
                signal.raise_signal(signal.SIGINT)
            raise RuntimeError("Query interrupted")
        return real(con, trace_id, **kwargs)

    monkeypatch.setattr(steps, "build_steps", build)
    return seen


@pytest.mark.parametrize("how", ["signal", "duckdb"])
def test_ctrl_c_during_steps(two_traces: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Item 18: Ctrl-C during `steps` printed a traceback (DuckDB's "RuntimeError: Query interrupted")."""
    before = step_counts(two_traces)
    seen = interrupt_second_trace(monkeypatch, how)
    result = k25("steps", "--db", str(two_traces))
    assert_clean(result, 130)
    assert len(seen) == 2
    assert "interrupted:" in result.stderr and "none is half-built" in result.stderr
    assert step_counts(two_traces) == before  # the interrupted trace kept its steps


def test_ctrl_c_during_classify_rolls_back(two_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from k25trace import classify

    def interrupted(con, user_rules=None, *, replace=False):  # type: ignore[no-untyped-def]
        con.execute("update gpu_events set category = 'half-done'")
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(classify, "classify", interrupted)
    result = k25("classify", "--db", str(two_traces))
    assert_clean(result, 130)
    assert "nothing changed" in result.stderr
    con = db.connect(two_traces, read_only=True)
    assert con.execute("select count(*) from gpu_events where category = 'half-done'").fetchone() == (0,)
    con.close()


def test_ctrl_c_during_classify_step_rebuild(two_traces: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = step_counts(two_traces)
    interrupt_second_trace(monkeypatch, "signal")
    result = k25("classify", "--db", str(two_traces))
    assert_clean(result, 130)
    assert "re-classified" in result.stderr and "k25trace steps --db" in result.stderr
    assert step_counts(two_traces) == before


@pytest.mark.parametrize("raised", [KeyboardInterrupt(), RuntimeError("Query interrupted")])
def test_ctrl_c_during_sql(empty_db: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException) -> None:
    """Ctrl-C while `sql` runs a query ended in click's "Aborted!" (exit 1) or DuckDB's RuntimeError."""

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise raised

    monkeypatch.setattr(db, "_fetch_printable", interrupted)
    result = sql(empty_db, "select 1", "csv")
    assert_clean(result, 130)
    assert "interrupted: the query was stopped" in result.stderr and result.stdout == ""
