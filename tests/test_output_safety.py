"""Issue 28, items 1 and 2 (outputs), issue 34, item 5 (SIGTERM during `export parquet`): what `html`, `export
perfetto` and `export parquet` write never harms the user's files.

Every case runs the real command on a database loaded from a real trace (``tests/data/h200-decode-loop``) and
checks the file system afterwards with ``os.lstat`` and sha256 (not with k25trace): an output that is an input (the
database, by name, through a symbolic or hard link; a trace it holds; the other database of ``--vs``) is refused and
the input stays byte-identical; ``--overwrite`` removes only what an earlier export wrote; a FIFO and ``/dev/null``
stay what they are and get the bytes; a symbolic link is written through; a missing or unwritable folder is one
``error:`` line; SIGTERM and Ctrl-C in the middle of ``export parquet`` leave nothing behind."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from k25trace import db
from k25trace.cli import cli
from k25trace.errors import K25Error
from k25trace.render import export

TRACE = next((Path(__file__).parent / "data" / "h200-decode-loop").glob("*.pt.trace.json.gz"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def k25(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "k25trace", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def one_error(stderr: str, *names: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    for name in names:
        assert name in errors[0], (name, errors[0])
    return errors[0]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the database, the trace file it holds: a copy in the test's folder)."""
    base = tmp_path_factory.mktemp("outputs")
    trace = base / TRACE.name
    shutil.copy(TRACE, trace)
    path = base / "run.duckdb"
    result = CliRunner().invoke(cli, ["load", str(trace), "--db", str(path), "-q"])
    assert result.exit_code == 0, result.output
    return path, trace


# ------------------------------------------------------------------------------------ outputs that are inputs


@pytest.mark.parametrize("command", [["html"], ["export", "perfetto"]])
def test_output_onto_the_database_is_refused(loaded: tuple[Path, Path], command: list[str]) -> None:
    """The exact input of the issue: `-o run.duckdb` (then through a symlink, a hard link, another spelling)."""
    path, _ = loaded
    before = digest(path)
    base = path.parent
    (base / "link.duckdb").unlink(missing_ok=True)
    (base / "hard.duckdb").unlink(missing_ok=True)
    (base / "link.duckdb").symlink_to(path.name)
    os.link(path, base / "hard.duckdb")
    try:
        result = k25(*command, "--db", "run.duckdb", "-o", "run.duckdb", cwd=base)
        assert result.returncode == 1
        one_error(result.stderr, "run.duckdb", "the database")
        for spelling in ("./run.duckdb", "link.duckdb", "hard.duckdb", str(path)):
            r = CliRunner().invoke(cli, [*command, "--db", str(path), "-o", str(base / spelling)])
            assert r.exit_code == 1, (spelling, r.output)
            assert "an input of this command" in r.stderr, r.stderr
        assert digest(path) == before
        assert (base / "link.duckdb").is_symlink()
    finally:
        (base / "link.duckdb").unlink()
        (base / "hard.duckdb").unlink()


@pytest.mark.parametrize("command", [["html"], ["export", "perfetto"]])
def test_output_onto_a_trace_in_the_database_is_refused(loaded: tuple[Path, Path], command: list[str]) -> None:
    path, trace = loaded
    before = digest(trace)
    result = k25(*command, "--db", str(path), "-o", str(trace))
    assert result.returncode == 1
    one_error(result.stderr, trace.name, "trace file")
    assert digest(trace) == before


def test_html_vs_output_onto_either_side_is_refused(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    path, trace = loaded
    other = tmp_path / "other.duckdb"
    shutil.copy(path, other)
    sums = {p: digest(p) for p in (path, other, trace)}
    for out in (other, path, trace):
        result = CliRunner().invoke(cli, ["html", "--db", str(path), "--vs", str(other), "-o", str(out)])
        assert result.exit_code == 1 and "an input of this command" in result.stderr, result.output
    assert {p: digest(p) for p in sums} == sums


def test_export_parquet_never_writes_over_the_database(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    """A database named like an exported table, inside the export folder: refused, untouched."""
    path, _ = loaded
    inside = tmp_path / "meta.parquet"
    shutil.copy(path, inside)
    before = digest(inside)
    result = CliRunner().invoke(cli, ["export", "parquet", str(tmp_path), "--db", str(inside), "--overwrite"])
    assert result.exit_code == 1 and "an input of this command" in result.stderr, result.output
    assert digest(inside) == before


# ------------------------------------------------------------------------------------ --overwrite


def test_overwrite_never_deletes_a_users_folder_named_like_a_table(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    """The exact input of the issue: DIR/steps/my_analysis.py, then `export parquet DIR --overwrite`."""
    path, _ = loaded
    out = tmp_path / "out"
    (out / "steps").mkdir(parents=True)
    mine = out / "steps" / "my_analysis.py"
    mine.write_text("print('mine')\n")
    result = k25("export", "parquet", str(out), "--db", str(path), "--overwrite")
    assert result.returncode == 1
    one_error(result.stderr, "steps", "not from a k25trace export")
    assert mine.read_text() == "print('mine')\n"
    assert sorted(p.name for p in out.iterdir()) == ["steps"]  # nothing else written, no temporary folder left


def test_overwrite_replaces_only_what_the_earlier_export_wrote(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = loaded
    out = tmp_path / "out"
    runner = CliRunner()
    assert runner.invoke(cli, ["export", "parquet", str(out), "--db", str(path)]).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    on_disk = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert sorted(manifest["files"]) == on_disk  # the manifest lists every file the export wrote
    # a clean earlier export is replaced
    assert runner.invoke(cli, ["export", "parquet", str(out), "--db", str(path), "--overwrite"]).exit_code == 0
    # a file of the user's inside a table folder: refused, kept
    note = out / "gpu_events" / "notes.txt"
    note.write_text("mine")
    result = runner.invoke(cli, ["export", "parquet", str(out), "--db", str(path), "--overwrite"])
    assert result.exit_code == 1 and "gpu_events/notes.txt" in result.stderr, result.output
    assert note.read_text() == "mine"
    note.unlink()
    # a table folder that is a symbolic link to the user's folder: refused, the folder kept
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("mine")
    shutil.rmtree(out / "steps")
    (out / "steps").symlink_to(elsewhere)
    result = runner.invoke(cli, ["export", "parquet", str(out), "--db", str(path), "--overwrite"])
    assert result.exit_code == 1 and "symbolic link" in result.stderr, result.output
    assert (elsewhere / "data.txt").read_text() == "mine" and (out / "steps").is_symlink()
    # a manifest.json that is not k25trace's does not vouch for anything
    (out / "steps").unlink()
    (out / "manifest.json").write_text('{"generator": "someone else", "tables": {"steps": {"path": "steps/"}}}')
    result = runner.invoke(cli, ["export", "parquet", str(out), "--db", str(path), "--overwrite"])
    assert result.exit_code == 1 and "not from a k25trace export" in result.stderr, result.output


# ------------------------------------------------------------------------------------ special files


def test_a_fifo_is_streamed_to_not_replaced(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = loaded
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    result = k25("html", "--db", str(path), "-o", str(fifo))
    reader.join(30)
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert got and got[0].startswith(b"<!DOCTYPE html>") and got[0].endswith(b"</html>")
    assert [p.name for p in tmp_path.iterdir()] == ["page.fifo"]


def test_dev_null_stays_a_device(loaded: tuple[Path, Path]) -> None:
    path, _ = loaded
    before = os.lstat("/dev/null")
    for command in (["html"], ["export", "perfetto"]):
        result = k25(*command, "--db", str(path), "-o", "/dev/null")
        assert result.returncode == 0, result.stderr
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and (after.st_rdev, after.st_ino) == (before.st_rdev, before.st_ino)


def test_a_symlink_is_written_through(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    path, _ = loaded
    target = tmp_path / "real" / "page.html"
    target.parent.mkdir()
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "page.html"
    link.symlink_to(target)
    dangling = tmp_path / "new.json"
    dangling.symlink_to(tmp_path / "real" / "new.json")
    assert CliRunner().invoke(cli, ["html", "--db", str(path), "-o", str(link)]).exit_code == 0
    assert CliRunner().invoke(cli, ["export", "perfetto", "--db", str(path), "-o", str(dangling)]).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_bytes().startswith(b"<!DOCTYPE html>")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the file's permissions kept
    assert dangling.is_symlink() and json.loads((tmp_path / "real" / "new.json").read_bytes())["traceEvents"]
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["new.json", "page.html"]  # no temporaries


# ------------------------------------------------------------------------------------ folders that cannot be used


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder this process cannot write into: a read-only one (not as root, who may write anyway), else /sys."""
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    return Path("/sys")


@pytest.mark.parametrize("command", [["html", "-o"], ["export", "perfetto", "-o"], ["export", "parquet"]])
def test_a_missing_or_unwritable_folder_is_one_error(
    loaded: tuple[Path, Path], tmp_path: Path, command: list[str]
) -> None:
    path, _ = loaded
    outputs = [unwritable_folder(tmp_path) / "k25-out"]
    if command[-1] == "-o":  # export parquet creates a missing folder (and its parents)
        outputs.append(tmp_path / "missing" / "k25-out")
    for out in outputs:
        args = [*command, str(out), "--db", str(path)]
        result = k25(*args)
        assert result.returncode == 1, result.stderr
        one_error(result.stderr, str(out.parent) if command[-1] == "-o" else str(out))
        assert not out.exists()


# ------------------------------------------------------------------------------------ interrupted export

HOOK = """
import os, signal, sys, threading
from k25trace.render import export
calls = []
sig, where = getattr(signal, sys.argv[1]), sys.argv[2]
original = export._count
def count(con, table):
    calls.append(table)
    if len(calls) == 4:  # a few tables written into the temporary folder, then the signal
        if where == "python":  # between two DuckDB calls
            os.kill(os.getpid(), sig)
        else:  # in the middle of a DuckDB query of a few seconds (should DuckDB not stop it, at its end)
            threading.Timer(0.2, os.kill, (os.getpid(), sig)).start()
            con.execute("select sum(a.range * b.range) from range(40000) a, range(40000) b").fetchall()
    return original(con, table)
export._count = count
sys.argv = ["k25trace"] + sys.argv[3:]
from k25trace.cli import main
main()
"""


@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
@pytest.mark.parametrize("where", ["python", "duckdb"])
def test_a_signal_during_export_parquet_leaves_nothing(
    loaded: tuple[Path, Path], tmp_path: Path, sig: str, code: int, where: str
) -> None:
    """A real signal to the real command in the middle of its export (after four tables were written into its
    temporary folder; between two DuckDB calls, or inside one, which DuckDB turns into its own 'Query
    interrupted'): exit 143 (SIGTERM) or 130 (Ctrl-C), one line, and the folder as empty as before."""
    path, _ = loaded
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = subprocess.run(
        [sys.executable, "-c", HOOK, sig, where, "export", "parquet", str(out), "--db", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == code, result.stderr
    one_error(result.stderr)
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


def test_a_failing_export_removes_its_temporary_folder(
    loaded: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = loaded
    calls = []

    def failing(con: object, table: str) -> int:
        calls.append(table)
        if len(calls) == 3:
            raise K25Error("disk trouble")
        return 1

    monkeypatch.setattr(export, "_count", failing)
    con = db.connect(path, read_only=True)
    try:
        with pytest.raises(K25Error, match="disk trouble"):
            export.export_parquet(con, tmp_path)
    finally:
        con.close()
    assert list(tmp_path.iterdir()) == []
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the handler was only there for the export


def test_a_killed_exports_temporary_folder_is_removed_by_the_next(loaded: tuple[Path, Path], tmp_path: Path) -> None:
    """kill -9 leaves a temporary folder no code can remove; the next export into the folder removes it (its process
    is gone), and leaves a folder of a live process alone."""
    path, _ = loaded
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".k25trace-export-{int(dead.stdout)}-abc"
    (stale / "gpu_events").mkdir(parents=True)
    live = tmp_path / f".k25trace-export-{os.getppid()}-abc"
    live.mkdir()
    assert CliRunner().invoke(cli, ["export", "parquet", str(tmp_path), "--db", str(path)]).exit_code == 0
    assert not stale.exists() and live.exists()
