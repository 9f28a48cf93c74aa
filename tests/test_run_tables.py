"""The cross-rank run tables after a stopped load (issue 34, item 2).

A multi-file load stopped after some files committed left trace_runs / collectives empty (they were rebuilt once,
after all files): reports called each rank its own run, `--by comm` and `export perfetto` found no steps, and
loading again did not repair it. Now each file's commit marks them stale, a stopped load (Ctrl-C, SIGTERM)
rebuilds them for what committed, and after kill -9 the next command that opens the database rebuilds them.
The truth is a clean load of exactly the files that committed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from k25trace import pipeline

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Four synthetic Kimi-K2.5 TP4 rank files (real collectives across the ranks)."""
    out = tmp_path_factory.mktemp("tp4")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "k25trace",
            "synth",
            "--out",
            str(out),
            "--ranks",
            "4",
            "--steps",
            "3",
            "--layers",
            "16",
            "--batch-sizes",
            "1,64",
            "--no-gzip",
        ],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    return sorted(out.glob("*.pt.trace.json"))


def _k25(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "k25trace", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def _stop_after(files: list[Path], dbfile: Path, sig: signal.Signals, loaded: int = 1) -> int:
    """`k25trace load FILES` stopped by ``sig`` (to its process group) once it says ``loaded`` files are loaded."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "k25trace", "load", *map(str, files), "--db", str(dbfile)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        seen = 0
        for line in proc.stderr:  # type: ignore[union-attr]
            seen += line.startswith(b"loaded ")
            if seen == loaded:
                os.killpg(proc.pid, sig)
                break
        else:
            pytest.fail("the load never reported a file loaded")
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _committed(dbfile: Path) -> list[Path]:
    con = duckdb.connect(str(dbfile), read_only=True)
    try:
        return [Path(p) for (p,) in con.execute("select path from traces order by trace_id").fetchall()]
    finally:
        con.close()


def _raw(dbfile: Path, sql: str) -> list[tuple]:
    """Read the database as it is (plain DuckDB: nothing rebuilt on the way)."""
    con = duckdb.connect(str(dbfile), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


RUNS_SQL = "select trace_id, rank, world_size, run_id, run_label from trace_runs order by trace_id"


def _clean(tmp_path: Path, files: list[Path]) -> Path:
    clean = tmp_path / "clean.duckdb"
    out = _k25("load", "-q", *map(str, files), "--db", str(clean))
    assert out.returncode == 0, out.stderr
    return clean


def _comm(dbfile: Path) -> str:
    out = _k25("report", "--db", str(dbfile), "--by", "comm", "--format", "csv")
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


def test_kill_9_after_two_files_then_a_report_rebuilds_the_run_tables(tmp_path: Path, ranks: list[Path]) -> None:
    dbfile = tmp_path / "run.duckdb"
    assert _stop_after(ranks, dbfile, signal.SIGKILL, loaded=2) == -signal.SIGKILL
    committed = _committed(dbfile)
    assert 2 <= len(committed) < len(ranks)
    assert _raw(dbfile, "select value from meta where key = 'crossrank_stale'") == [("true",)]  # nothing rebuilt yet
    clean = _clean(tmp_path, committed)
    expected = _comm(clean)
    assert len(expected.splitlines()) > 1  # two ranks of one run: collectives paired
    assert _comm(dbfile) == expected  # the report's open rebuilt them (a short write connection)
    assert _raw(dbfile, RUNS_SQL) == _raw(clean, RUNS_SQL)
    assert _raw(dbfile, "select value from meta where key = 'crossrank_stale'") == [("false",)]


def test_kill_9_then_loading_again_gives_the_runs_of_a_clean_load(tmp_path: Path, ranks: list[Path]) -> None:
    dbfile = tmp_path / "run.duckdb"
    _stop_after(ranks, dbfile, signal.SIGKILL)
    out = _k25("load", "-q", *map(str, ranks), "--db", str(dbfile))
    assert out.returncode == 0, out.stderr
    clean = _clean(tmp_path, ranks)
    assert _raw(dbfile, RUNS_SQL) == _raw(clean, RUNS_SQL)
    assert _raw(dbfile, "select count(*) from collectives") == _raw(clean, "select count(*) from collectives")
    assert _comm(dbfile) == _comm(clean)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_load_rebuilds_the_run_tables_of_what_committed(
    tmp_path: Path, ranks: list[Path], sig: signal.Signals
) -> None:
    dbfile = tmp_path / "run.duckdb"
    assert _stop_after(ranks, dbfile, sig, loaded=2) == 128 + sig  # 130 Ctrl-C, 143 SIGTERM
    committed = _committed(dbfile)
    assert committed
    clean = _clean(tmp_path, committed)
    # as the stopped load left them, before any other command opened the database
    assert _raw(dbfile, "select value from meta where key = 'crossrank_stale'") == [("false",)]
    assert _raw(dbfile, RUNS_SQL) == _raw(clean, RUNS_SQL)
    assert _raw(dbfile, "select count(*) from collectives") == _raw(clean, "select count(*) from collectives")


def test_a_read_only_database_with_stale_run_tables_is_a_clear_error(tmp_path: Path, ranks: list[Path]) -> None:
    dbfile = tmp_path / "run.duckdb"
    con = pipeline.connect(dbfile)
    pipeline.load_paths(con, ranks[:2])
    con.execute("insert or replace into meta values ('crossrank_stale', 'true')")  # as kill -9 leaves it
    con.close()
    dbfile.chmod(0o444)
    try:
        if os.access(dbfile, os.W_OK):  # root writes anyway: the rebuild then simply happens
            pipeline.connect(dbfile, read_only=True).close()
            assert _raw(dbfile, "select value from meta where key = 'crossrank_stale'") == [("false",)]
            return
        before = dbfile.read_bytes()
        with pytest.raises(pipeline.K25Error, match="cross-rank run tables are out of date .* k25trace steps"):
            pipeline.connect(dbfile, read_only=True)
        assert dbfile.read_bytes() == before
    finally:
        dbfile.chmod(0o644)


def test_sigterm_during_a_duckdb_query_stops_the_load_with_its_signal() -> None:
    """DuckDB reports a query stopped by the SIGTERM handler's exception as its own ``Query interrupted``: the load
    still ends as a stop by signal 15 (exit 143), not as Ctrl-C (130). CI saw 130 once (stop 48)."""
    import threading

    con = duckdb.connect()
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        with pytest.raises(pipeline.Stopped) as stopped:
            with pipeline._sigterm_raises():
                timer.start()
                con.execute("select count(*) from range(100000000000) t(a) where a % 7 = 3").fetchall()
    finally:
        timer.cancel()
        con.close()
    assert stopped.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler is taken back


@pytest.mark.parametrize(
    ("raised", "stop"),
    [(KeyboardInterrupt(), True), (pipeline.Stopped(signal.SIGTERM), True), (ValueError("bad"), False)],
    ids=["ctrl-c", "sigterm", "a-bug"],
)
def test_a_stop_inside_duckdbs_call_into_python_is_an_interrupt(raised: BaseException, stop: bool) -> None:
    """A signal's exception raised in Python code DuckDB calls (the loader's Arrow tables are counted and scanned
    so) comes out as DuckDB's InvalidInputException naming it. CI saw a SIGTERM so reported as the file's failure,
    and the load went on with the next file."""
    from k25trace.errors import K25Error, is_interrupt

    def udf(_x: int) -> int:
        raise raised

    con = duckdb.connect()
    con.create_function("udf", udf, ["BIGINT"], "BIGINT")
    with pytest.raises(duckdb.Error) as caught:
        con.execute("select udf(1)").fetchall()
    con.close()
    assert is_interrupt(caught.value) is stop
    assert is_interrupt(K25Error(f"query ingest_commit: {caught.value}")) is stop  # as run_query wraps it
    assert not is_interrupt(K25Error("/tmp/interrupted/rank0.json: not a trace"))  # a path is no interrupt
