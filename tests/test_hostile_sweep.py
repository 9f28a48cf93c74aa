"""The hostile sweep of issue 28, kept in the suite: every command x every output kind x every bad value.

Commands: load, report (--by every view), sql, compare, html, export perfetto, export parquet, classify, steps, and
`bench allreduce` (option validation only: no bench runs). Bad values: a missing file, a directory given as a file,
a non-UTF-8 path, a FIFO, a symlink, a file that is not a database, an output in a missing or read-only directory,
an output that is the database or a trace it holds, numbers that are no count (0, -1, nan, 1e30, 10**30, words),
filters that match nothing. Each case checks: the exit status (1 for an error, 2 for a usage error), no traceback,
the error line names the path or option, and the database is byte for byte as it was when the command should not
write. A small real database (the bundled Kimi-K2.5 TP2 ranks) is built once; each case gets its own copy.

Most cases run the command in this process (click's runner: a traceback is an exception that escaped the command);
those that may block (FIFOs) or start processes (bench) run it as a subprocess under a timeout.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from click.testing import CliRunner

from helpers import SAMPLES
from k25trace.cli import cli
from k25trace.vocab import VIEWS

ROOT = Path(__file__).resolve().parent.parent
TP2 = sorted((SAMPLES / "kimi-k25-synthetic-tp2").glob("*.pt.trace.json.gz"))
NUMBERS = ["0", "-1", "nan", "1e30", str(10**30), "abc"]
MODEL = Path(__file__).parent / "data" / "models" / "kimi-k2-thinking" / "config.json"


@dataclass
class Case:
    """One command line. ``args(w)`` builds it in the case's folder ``w`` (holding ``run.duckdb``, its copy, and
    ``trace0/1.pt.trace.json.gz``, the traces it holds). ``codes``: the exit statuses allowed; ``names``: what the
    output must mention when the status is not 0; ``writes``: the command may change the database."""

    args: Callable[[Path], list[str]]
    codes: tuple[int, ...] = (1, 2)
    names: Callable[[Path], list[str]] = lambda w: []
    writes: bool = False
    subprocess: bool = False
    setup: Callable[[Path], None] | None = None
    check: Callable[[Path], None] | None = None
    fifo_reader: str | None = None  # a FIFO in the case's folder that a reader drains while the command runs


CASES: dict[str, Case] = {}


def case(name: str, **kw: object) -> None:
    assert name not in CASES, name
    CASES[name] = Case(**kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- the --db input

DB_COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "report": lambda db: ["report", "--db", db],
    "sql": lambda db: ["sql", "--db", db, "select count(*) from traces"],
    "compare": lambda db: ["compare", db, db],
    "html": lambda db: ["html", "--db", db, "-o", "-"],
    "export-perfetto": lambda db: ["export", "perfetto", "--db", db, "-o", "-"],
    "export-parquet": lambda db: ["export", "parquet", "out-dir", "--db", db],
    "classify": lambda db: ["classify", "--db", db],
    "steps": lambda db: ["steps", "--db", db],
    "bench": lambda db: ["bench", "allreduce", "--db", db, *_small_bench()],
}


def _small_bench(but: str = "") -> list[str]:
    """A bench as short as it gets (one rank, one size, one iteration): where a bad value is let through by
    mistake, the case fails (exit 0) in seconds instead of running a real bench."""
    small = {
        "--backend": "gloo",
        "--world-size": "1",
        "--sizes": "1024",
        "--count": "1",
        "--iters": "1",
        "--warmup": "0",
        "--bursts": "1",
        "--timeout": "10",
    }
    if but in ("--batch-sizes", "--hidden"):  # read only without --sizes (and without --db)
        del small["--sizes"]
    return [x for k, v in small.items() if k != but for x in (k, v)] + ["--no-graph"]


def _fifo(w: Path, name: str = "fifo") -> None:
    os.mkfifo(w / name)


def _not_a_db(w: Path) -> None:
    (w / "data.csv").write_text("a,b\n1,2\n")


def _nonutf8(w: Path) -> Path:
    return Path(os.fsdecode(bytes(w) + b"/r\xffn.duckdb"))


for command, build in DB_COMMANDS.items():
    sub = False
    case(
        f"{command}/db-missing",
        args=lambda w, b=build: b(str(w / "missing.duckdb")),
        names=lambda w: ["missing.duckdb"],
        subprocess=sub,
        check=lambda w: _assert(not (w / "missing.duckdb").exists(), "a missing --db was created"),
    )
    case(
        f"{command}/db-is-a-directory",
        args=lambda w, b=build: b(str(w / "empty")),
        names=lambda w: ["empty"],
        setup=lambda w: (w / "empty").mkdir(),
        subprocess=sub,
    )
    case(
        f"{command}/db-is-a-fifo",
        args=lambda w, b=build: b(str(w / "fifo")),
        names=lambda w: ["fifo"],
        setup=_fifo,
        subprocess=True,
        check=lambda w: _assert(stat.S_ISFIFO(os.lstat(w / "fifo").st_mode), "the FIFO was replaced"),
    )
    case(
        f"{command}/db-not-a-database",
        args=lambda w, b=build: b(str(w / "data.csv")),
        names=lambda w: ["data.csv"],
        setup=_not_a_db,
        subprocess=sub,
        check=lambda w: _assert((w / "data.csv").read_text() == "a,b\n1,2\n", "the CSV given as --db was changed"),
    )
    case(
        f"{command}/db-non-utf8-missing",
        args=lambda w, b=build: b(str(_nonutf8(w))),
        names=lambda w: ["r"],
        subprocess=sub,
    )
    if command != "bench":
        case(
            f"{command}/db-symlink",
            args=lambda w, b=build: b(str(w / "link.duckdb")),
            codes=(0,),
            writes=command in ("classify", "steps"),
            setup=lambda w: (w / "link.duckdb").symlink_to(w / "run.duckdb"),
            check=lambda w: _assert((w / "link.duckdb").is_symlink(), "the --db symlink was replaced"),
        )
        case(
            f"{command}/db-non-utf8-copy",
            args=lambda w, b=build: b(str(_nonutf8(w))),
            codes=(0, 1),
            names=lambda w: ["r"],
            writes=True,
            setup=lambda w: shutil.copy(w / "run.duckdb", _nonutf8(w)),
        )

case(
    "load/db-not-a-database",
    args=lambda w: ["load", str(w / "trace0.pt.trace.json.gz"), "--db", str(w / "data.csv")],
    names=lambda w: ["data.csv"],
    setup=_not_a_db,
    check=lambda w: _assert((w / "data.csv").read_text() == "a,b\n1,2\n", "the CSV given as --db was changed"),
)
case(
    "load/db-non-utf8",
    args=lambda w: ["load", str(w / "trace0.pt.trace.json.gz"), "--db", str(_nonutf8(w))],
    codes=(0, 1),
    names=lambda w: ["r"],
    writes=True,
)
case(
    "load/db-is-a-directory",
    args=lambda w: ["load", str(w / "trace0.pt.trace.json.gz"), "--db", str(w)],
    names=lambda w: [w.name],
)
case(
    "load/db-is-a-fifo",
    args=lambda w: ["load", str(w / "trace0.pt.trace.json.gz"), "--db", str(w / "fifo")],
    names=lambda w: ["fifo"],
    setup=_fifo,
    subprocess=True,
    check=lambda w: _assert(stat.S_ISFIFO(os.lstat(w / "fifo").st_mode), "the FIFO was replaced"),
)
case(
    "load/trace-missing",
    args=lambda w: ["load", str(w / "gone.pt.trace.json"), "--db", str(w / "run.duckdb")],
    codes=(1,),
    names=lambda w: ["gone.pt.trace.json"],
)
case(
    "load/trace-is-a-fifo",
    args=lambda w: ["load", str(w / "t.pt.trace.json"), "--db", str(w / "run.duckdb")],
    codes=(1,),
    names=lambda w: ["t.pt.trace.json"],
    setup=lambda w: _fifo(w, "t.pt.trace.json"),
    subprocess=True,
    writes=True,
)
case(
    "load/trace-non-utf8-missing",
    args=lambda w: ["load", os.fsdecode(bytes(w) + b"/t\xff.pt.trace.json"), "--db", str(w / "run.duckdb")],
    codes=(1,),
    names=lambda w: ["t"],
    writes=True,
)
case(
    "load/model-config-missing",
    args=lambda w: [
        "load",
        str(w / "trace0.pt.trace.json.gz"),
        "--db",
        str(w / "run.duckdb"),
        "--model-config",
        str(w / "nope.json"),
    ],
    names=lambda w: ["nope.json"],
)

# ------------------------------------------------------------------------------------------------- outputs

OUTPUT_COMMANDS: dict[str, Callable[[Path, str], list[str]]] = {
    "html": lambda w, out: ["html", "--db", str(w / "run.duckdb"), "-o", out],
    "export-perfetto": lambda w, out: ["export", "perfetto", "--db", str(w / "run.duckdb"), "-o", out],
    "export-parquet": lambda w, out: ["export", "parquet", out, "--db", str(w / "run.duckdb")],
}


def _user_folder(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "my_analysis.py").write_text("x")


def _read_only_dir(w: Path) -> None:
    (w / "ro").mkdir()
    (w / "ro").chmod(0o555)


HELD: dict[str, Path] = {}  # the trace files the sweep's database holds (set by the ``database`` fixture)


def _trace_unchanged(w: Path) -> None:
    held = HELD["trace0"]
    same = _sha(held) == _sha(TP2[0])
    if not same:
        shutil.copy(TP2[0], held)  # put it back for the other cases
    _assert(same, "a trace the database holds was overwritten")


for command, build_out in OUTPUT_COMMANDS.items():
    parquet = command == "export-parquet"
    target = "" if parquet else ".out"
    case(
        f"{command}/out-missing-dir",
        args=lambda w, b=build_out, t=target: b(w, str(w / "no" / "such" / f"x{t}")),
        codes=(0, 1) if parquet else (1,),
        names=lambda w: ["no/such"],
    )  # a folder output may be made
    if os.geteuid() != 0:  # root writes into a read-only folder anyway
        case(
            f"{command}/out-read-only-dir",
            args=lambda w, b=build_out, t=target: b(w, str(w / "ro" / f"x{t}")),
            codes=(1,),
            names=lambda w: ["ro"],
            setup=_read_only_dir,
        )
    case(
        f"{command}/out-is-the-db",
        args=lambda w, b=build_out: b(w, str(w / "run.duckdb")),
        codes=(1, 2),
        names=lambda w: ["run.duckdb"],
    )
    case(
        f"{command}/out-is-a-trace-it-holds",
        args=lambda w, b=build_out: b(w, str(HELD["trace0"])),
        codes=(1, 2),
        names=lambda w: ["trace0.pt.trace.json.gz"],
        check=_trace_unchanged,
    )
    if not parquet:
        case(
            f"{command}/out-is-a-directory",
            args=lambda w, b=build_out: b(w, str(w)),
            codes=(1, 2),
            names=lambda w: [w.name],
        )
        case(
            f"{command}/out-fifo",
            args=lambda w, b=build_out: b(w, str(w / "fifo")),
            codes=(0, 1),
            subprocess=True,
            names=lambda w: ["fifo"],
            setup=_fifo,
            fifo_reader="fifo",
            check=lambda w: _assert(stat.S_ISFIFO(os.lstat(w / "fifo").st_mode), "the FIFO was replaced by a file"),
        )
        case(
            f"{command}/out-symlink",
            args=lambda w, b=build_out: b(w, str(w / "link.out")),
            codes=(0, 1),
            names=lambda w: ["link.out"],
            setup=lambda w: (w / "link.out").symlink_to(w / "real.out"),
            check=lambda w: _assert(
                (w / "link.out").is_symlink(), "the symlink was replaced instead of written through"
            ),
        )
        case(
            f"{command}/out-non-utf8",
            args=lambda w, b=build_out: b(w, os.fsdecode(bytes(w) + b"/o\xff.out")),
            codes=(0, 1),
            names=lambda w: ["o"],
        )
case(
    "export-parquet/overwrite-keeps-user-files",
    args=lambda w: ["export", "parquet", str(w / "pq"), "--db", str(w / "run.duckdb"), "--overwrite"],
    codes=(0, 1),
    names=lambda w: ["pq"],
    setup=lambda w: _user_folder(w / "pq" / "steps"),
    check=lambda w: _assert((w / "pq" / "steps" / "my_analysis.py").is_file(), "--overwrite deleted a user's file"),
)
case(
    "compare/out-vs-is-a-dir",
    args=lambda w: ["html", "--db", str(w / "run.duckdb"), "--vs", str(w), "-o", "-"],
    names=lambda w: [w.name],
)

# ------------------------------------------------------------------------------------------------- numbers


def _db(w: Path) -> str:
    return str(w / "run.duckdb")


# (command prefix, option, the values that must be refused; the others must at least not crash)
NUMERIC: list[tuple[str, Callable[[Path], list[str]], str, set[str]]] = [
    ("report", lambda w: ["report", "--db", _db(w), "--by", "kernel"], "--top", {"0", "-1", "nan", "1e30", "abc"}),
    ("report-sol", lambda w: ["report", "--db", _db(w), "--by", "sol"], "--context", set(NUMBERS)),
    ("report", lambda w: ["report", "--db", _db(w)], "--rank", set(NUMBERS) - {"0"}),
    ("report", lambda w: ["report", "--db", _db(w)], "--trace", set(NUMBERS)),
    ("compare", lambda w: ["compare", _db(w), _db(w)], "--top", {"-1", "nan", "1e30", "abc"}),
    ("compare", lambda w: ["compare", _db(w), _db(w)], "--alpha", set(NUMBERS)),
    ("compare", lambda w: ["compare", _db(w), _db(w)], "--min-change", {"-1", "nan", "abc"}),
    ("compare", lambda w: ["compare", _db(w), _db(w)], "--min-step", {"-1", "nan", "abc"}),
    ("html", lambda w: ["html", "--db", _db(w), "-o", "-"], "--top", {"0", "-1", "nan", "1e30", "abc"}),
    ("export-perfetto", lambda w: ["export", "perfetto", "--db", _db(w), "-o", "-"], "--batch", set(NUMBERS)),
    ("export-perfetto", lambda w: ["export", "perfetto", "--db", _db(w), "-o", "-"], "--steps", set(NUMBERS) - {"0"}),
    ("export-perfetto", lambda w: ["export", "perfetto", "--db", _db(w), "-o", "-"], "--rank", set(NUMBERS) - {"0"}),
    ("steps", lambda w: ["steps", "--db", _db(w)], "--gap-us", set(NUMBERS) - {"0"}),
]
BENCH = ["--count", "--hidden", "--iters", "--bursts", "--world-size", "--timeout", "--sizes", "--batch-sizes"]

for prefix, build_cmd, option, bad_values in NUMERIC:
    for value in NUMBERS:
        bad = value in bad_values
        writes = prefix == "steps" and not bad
        case(
            f"{prefix}{option}={value if len(value) < 8 else '10**30'}",
            args=lambda w, b=build_cmd, o=option, v=value: [*b(w), o, v],
            codes=(1, 2) if bad else (0, 1, 2),
            names=lambda w, o=option, v=value: [f"{o}|{v}"],
            writes=writes,
        )
for option in BENCH:
    for value in [*NUMBERS, "-7168"]:
        if option == "--timeout" and value in ("1e30", str(10**30)):
            continue  # a long timeout is a timeout (it never waits that long for a bad option)
        case(
            f"bench{option}={value if len(value) < 8 else '10**30'}",
            args=lambda w, o=option, v=value: [
                "bench",
                "allreduce",
                *([] if o in ("--batch-sizes", "--hidden") else ["--db", _db(w)]),
                *_small_bench(o),
                o,
                v,
            ],
            names=lambda w, o=option, v=value: [f"{o}|{v}"],
        )

# ------------------------------------------------------------------------------------------- filters on views

for view in VIEWS:
    for flag, value in (("--rank", "99"), ("--trace", "999"), ("--phase", "prefill")):
        if flag == "--phase" and view in ("floor",):
            continue
        model = ["--model-config", str(MODEL)] if view == "sol" else []
        case(
            f"report-{view}{flag}={value}",
            args=lambda w, v=view, f=flag, x=value, m=model: ["report", "--db", _db(w), "--by", v, *m, f, x],
            codes=(1, 2) if flag != "--phase" else (0, 1, 2),
            names=lambda w, f=flag, x=value: [f"{f}|{x}"],
        )
case(
    "sql/file-missing", args=lambda w: ["sql", "--db", _db(w), "-f", str(w / "nope.sql")], names=lambda w: ["nope.sql"]
)
case(
    "sql/file-non-utf8",
    args=lambda w: ["sql", "--db", _db(w), "-f", str(w / "latin1.sql")],
    codes=(1,),
    names=lambda w: ["latin1.sql"],
    setup=lambda w: (w / "latin1.sql").write_bytes(b"select '\xe9'"),
)
case(
    "sql/writes-refused",
    args=lambda w: ["sql", "--db", _db(w), "delete from traces"],
    codes=(1,),
    names=lambda w: ["read-only"],
)
case(
    "classify/rules-missing",
    args=lambda w: ["classify", "--db", _db(w), "--rules", str(w / "r.csv")],
    names=lambda w: ["r.csv"],
)
case(
    "classify/rules-bad",
    args=lambda w: ["classify", "--db", _db(w), "--rules", str(w / "r.csv")],
    codes=(1,),
    names=lambda w: ["r.csv"],
    setup=lambda w: (w / "r.csv").write_text("category,kind\nx\n"),
)
case(
    "export-perfetto/run-unknown",
    args=lambda w: ["export", "perfetto", "--db", _db(w), "-o", "-", "--run", "zz"],
    names=lambda w: ["zz"],
)
case("compare/side-missing", args=lambda w: ["compare", _db(w), str(w / "nope.duckdb")], names=lambda w: ["nope"])


# ------------------------------------------------------------------------------------------------- running


def _assert(ok: bool, message: str) -> None:
    assert ok, message


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real database: the bundled Kimi-K2.5 TP2 ranks, loaded from copies (so that `-o TRACE` cases can be
    checked on a file of ours)."""
    folder = tmp_path_factory.mktemp("sweep-db")
    for i, trace in enumerate(TP2):
        shutil.copy(trace, folder / f"trace{i}.pt.trace.json.gz")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "k25trace",
            "load",
            "-q",
            str(folder / "trace0.pt.trace.json.gz"),
            str(folder / "trace1.pt.trace.json.gz"),
            "--db",
            str(folder / "run.duckdb"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    HELD["trace0"] = folder / "trace0.pt.trace.json.gz"
    return folder


def _drain(path: Path, stop: threading.Event) -> None:
    """Read a FIFO until its writers are gone (or the case ends), as a consumer at the other end would."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return
    try:
        while not stop.is_set():
            try:
                if not os.read(fd, 1 << 16):
                    stop.wait(0.05)
            except BlockingIOError:
                stop.wait(0.05)
    finally:
        os.close(fd)


def _run(c: Case, w: Path) -> tuple[int, str]:
    args = c.args(w)
    if c.subprocess:
        stop = threading.Event()
        reader = threading.Thread(target=_drain, args=(w / c.fifo_reader, stop)) if c.fifo_reader else None
        if reader:
            reader.start()
        try:
            out = subprocess.run(
                [sys.executable, "-m", "k25trace", *args],
                capture_output=True,
                cwd=w,
                timeout=90,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"{args}: still running after 90 s (blocked?)")
        finally:
            stop.set()
            if reader:
                reader.join()
        return out.returncode, (out.stdout + out.stderr).decode("utf-8", "replace")
    cwd = os.getcwd()
    os.chdir(w)
    try:
        result = CliRunner().invoke(cli, args, catch_exceptions=True)
    finally:
        os.chdir(cwd)
    text = result.output if result.stderr_bytes is None else result.stdout + result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        text += "Traceback (most recent call last):\n" + "".join(traceback.format_exception(result.exception))
    return result.exit_code, text


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name: str, database: Path, tmp_path: Path) -> None:
    c = CASES[name]
    w = tmp_path / "w"
    w.mkdir()
    for f in database.iterdir():
        shutil.copy(f, w / f.name)
    before = _sha(w / "run.duckdb")
    if c.setup:
        c.setup(w)
    try:
        code, text = _run(c, w)
    finally:
        for sub in w.iterdir():
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
    assert "Traceback" not in text, text[-3000:]
    assert code in c.codes, f"exit {code}, expected {c.codes}: {text[-1500:]}"
    if code:
        error_lines = [
            line
            for line in text.splitlines()
            if line.startswith(("error:", "Error:", "interrupted:")) or "Error: " in line
        ]
        assert error_lines, f"no error line: {text[-1500:]}"
        shown = "\n".join(text.splitlines())
        for word in c.names(w):  # "A|B": either (an option by its name, or the value it was given)
            spellings = {
                x
                for alt in word.split("|")
                for x in (
                    alt,
                    alt.lstrip("-"),
                    alt.lstrip("-").replace("-", " "),
                    os.fsencode(alt).decode("utf-8", "replace"),
                )
            }
            assert any(x and x in shown for x in spellings), f"the error does not name {word!r}: {text[-1500:]}"
    if not c.writes:
        assert _sha(w / "run.duckdb") == before, "the database changed"
    if c.check:
        c.check(w)


def test_the_sweep_has_its_cases() -> None:
    """The sweep covers every command and every view (a case table that lost a command would pass in silence)."""
    commands = {name.split("/")[0].split("-")[0].split("=")[0].rstrip("-") for name in CASES}
    for command in ("load", "report", "sql", "compare", "html", "export", "classify", "steps", "bench"):
        assert any(c.startswith(command) for c in commands), command
    for view in VIEWS:
        assert any(name.startswith(f"report-{view}--") for name in CASES), view
    assert len(CASES) >= 200
