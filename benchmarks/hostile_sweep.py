"""A hostile and unlucky user's sweep over every command: bad inputs, kills mid-load, concurrent loads, a full
disk, foreign databases. Prints a markdown table of case -> outcome; exits 1 if any case ends badly.

A case ends well when the command exits with the expected kind of status, prints no Python traceback, names the
file or request it complains about, and leaves every database it touched openable with no half-loaded trace (a
re-load succeeds). Slow (a few minutes: it generates a 20 MB trace and kills loads of it), so not part of CI:

    python3 benchmarks/hostile_sweep.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = next((ROOT / "tests" / "data" / "h200-gaps" / "graph").glob("*.gz"))
K25 = [sys.executable, "-m", "k25trace.cli"]


@dataclass
class Outcome:
    case: str
    expect: str
    rc: int | None
    ok: bool
    note: str


def run(args: list[str], *, timeout: float = 300, env: dict | None = None, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        args, capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=preexec, errors="replace"
    )


def db_sound(db: Path) -> tuple[bool, str]:
    """The database opens, every trace has its events, and loading the sample into it works."""
    if not db.exists():
        return True, "no database written"
    code = (
        "import sys, duckdb; c = duckdb.connect(sys.argv[1], read_only=True); "
        "has = c.execute(\"select count(*) from duckdb_tables() where table_name = 'traces'\").fetchone()[0]; "
        "has or (print(0, 0), sys.exit(0)); "  # killed before the schema: an empty database, nothing stored
        "t = c.execute('select count(*) from traces').fetchone()[0]; "
        "bad = c.execute('select count(*) from traces where trace_id not in (select trace_id from steps) "
        "and gpu_event_count > 0').fetchone()[0]; print(t, bad)"
    )
    p = run([sys.executable, "-c", code, str(db)])
    if p.returncode != 0:
        return False, "database does not open: " + p.stderr.strip().splitlines()[-1][:120]
    traces, half = map(int, p.stdout.split())
    if half:
        return False, f"{half} trace(s) without steps (half-loaded)"
    again = run(K25 + ["load", str(SAMPLE), "--db", str(db)])
    if again.returncode != 0:
        return False, "re-load failed: " + again.stderr.strip()[-160:]
    return True, f"{traces} trace(s), re-load ok"


def judge(
    case: str, expect: str, p: subprocess.CompletedProcess, *, names: str | None = None, db: Path | None = None
) -> Outcome:
    text = p.stdout + p.stderr
    problems = []
    if "Traceback (most recent call last)" in text:
        problems.append("traceback")
    if expect == "ok" and p.returncode != 0:
        problems.append(f"exit {p.returncode}")
    if expect == "error" and p.returncode == 0:
        problems.append("exit 0 on bad input")
    if names and names not in text:
        problems.append(f"message does not name {names!r}")
    note = ""
    if db is not None:
        sound, note = db_sound(db)
        if not sound:
            problems.append(note)
    last = next((line for line in reversed(p.stderr.strip().splitlines()) if line.strip()), "")
    return Outcome(
        case, expect, p.returncode, not problems, "; ".join(problems) or (last[:110] + (f" [{note}]" if note else ""))
    )


def write_gz(path: Path, text: str | bytes) -> Path:
    data = text.encode() if isinstance(text, str) else text
    with gzip.open(path, "wb") as fh:
        fh.write(data)
    return path


def trace_json(events: list[dict], **extra) -> str:
    return json.dumps({"schemaVersion": 1, "traceEvents": events, **extra})


def kernel(ts, dur, name="k", corr=1) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"stream": 7, "correlation": corr, "device": 0},
    }


def cases(work: Path) -> list[Outcome]:
    out: list[Outcome] = []
    bad = work / "bad"
    bad.mkdir()
    good_events = [kernel(1000 + 10 * i, 5, corr=i) for i in range(20)]

    # ------------------------------------------------------------------ bad trace files, each next to a good one
    files = {
        "truncated gzip": lambda p: p.write_bytes(gzip.compress(trace_json(good_events).encode())[:200]),
        "invalid JSON": lambda p: write_gz(p, '{"traceEvents": [ {"ph": "X", oops } ]}'),
        "truncated JSON": lambda p: write_gz(p, trace_json(good_events)[:-40]),
        "empty file": lambda p: p.write_bytes(b""),
        "not an object": lambda p: write_gz(p, "[1, 2, 3]"),
        "no traceEvents": lambda p: write_gz(p, '{"schemaVersion": 1}'),
        "fake .gz (plain JSON)": lambda p: p.write_text(trace_json(good_events)),
        "NaN timestamp": lambda p: write_gz(p, trace_json(good_events).replace('"ts": 1000', '"ts": NaN', 1)),
        "huge timestamp 1e300": lambda p: write_gz(p, trace_json(good_events).replace('"ts": 1000', '"ts": 1e300', 1)),
        "args nested 1,000 deep": lambda p: write_gz(
            p,
            trace_json(good_events[:1]).replace(
                '"device": 0}', '"device": 0, "deep": ' + "[" * 1000 + "]" * 1000 + "}", 1
            ),
        ),
        "'}, {' inside a string": lambda p: write_gz(
            p, trace_json([dict(good_events[0], name="a}, {b")] + good_events[1:])
        ),
        "metadata after traceEvents (two GPUs)": lambda p: write_gz(
            p, trace_json(good_events, deviceProperties=[{"id": 0, "name": "A"}, {"id": 1, "name": "B"}])
        ),
        "duplicated events": lambda p: write_gz(p, trace_json(good_events + good_events)),
        "negative duration": lambda p: write_gz(p, trace_json([dict(good_events[0], dur=-5)] + good_events[1:])),
        "kernels without ts": lambda p: write_gz(
            p, trace_json([{k: v for k, v in e.items() if k != "ts"} for e in good_events])
        ),
    }
    for name, make in files.items():
        d = bad / name.replace(" ", "_").replace("'", "").replace(",", "").replace("{", "").replace("}", "")
        d.mkdir()
        path = d / "t.pt.trace.json.gz"
        make(path)
        shutil.copy(SAMPLE, d / SAMPLE.name)
        db = d / "x.duckdb"
        p = run(K25 + ["load", str(d), "--db", str(db)])
        o = judge(f"load: {name} (+ a good file)", "error-or-ok", p, db=db)
        if "1 loaded" not in p.stderr + p.stdout and "2 loaded" not in p.stderr + p.stdout:
            o.ok, o.note = False, "the good file beside it was not loaded; " + o.note
        out.append(o)

    # ------------------------------------------------------------------ file system trouble
    d = work / "unreadable"
    (d / "sub").mkdir(parents=True)
    shutil.copy(SAMPLE, d / "sub" / SAMPLE.name)
    os.chmod(d / "sub", 0)
    # root reads any directory: drop the capabilities that let it (util-linux setpriv), as an ordinary user has none
    drop = (
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
        if os.geteuid() == 0 and shutil.which("setpriv")
        else []
    )
    p = run(drop + K25 + ["load", str(d), "--db", str(work / "u.duckdb")])
    os.chmod(d / "sub", 0o755)
    out.append(
        judge(
            "load: unreadable subdirectory" + (" (root without read override)" if drop else ""), "error", p, names="sub"
        )
    )

    weird = work / "weird"
    weird.mkdir()
    name = os.fsdecode(b"rank0-\xff.pt.trace.json.gz")
    shutil.copy(SAMPLE, weird / name)
    out.append(
        judge(
            "load: file name with a non-UTF-8 byte",
            "ok",
            run(K25 + ["load", str(weird), "--db", str(work / "w.duckdb")]),
        )
    )

    small = work / "fsize"
    small.mkdir()
    import resource

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 * 1024 * 1024, 2 * 1024 * 1024))

    big = work / "big"
    p = run(
        [sys.executable, "-m", "k25trace.cli", "synth", "--out", str(big), "--ranks", "1", "--target-gz-mb", "20"],
        timeout=600,
    )
    big_file = next(big.glob("*.pt.trace.json.gz"))
    p = run(K25 + ["load", str(big_file), str(SAMPLE), "--db", str(small / "f.duckdb")], preexec=limit)
    o = judge("load: file-size limit 2 MiB (ulimit -f) under a 20 MB trace", "error", p)
    out.append(o)

    # ------------------------------------------------------------------ kill -9 / SIGTERM at points of a long load
    for sig in (signal.SIGKILL, signal.SIGTERM):
        for after in (0.5, 2.0, 5.0):
            db = work / f"kill-{sig.name}-{after}.duckdb"
            proc = subprocess.Popen(
                K25 + ["load", str(big_file), "--db", str(db)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=False,
            )
            time.sleep(after)
            proc.send_signal(sig)
            proc.wait(timeout=60)
            time.sleep(1.0)
            leftovers = run(["pgrep", "-f", f"k25trace.*{db.name}"]).stdout.split()
            shm = [f for f in os.listdir("/dev/shm") if "k25" in f or f.startswith("psm_")]
            sound, note = db_sound(db)
            problems = []
            if leftovers:
                problems.append(f"{len(leftovers)} process(es) left")
            if shm:
                problems.append(f"{len(shm)} shared-memory segment(s) left")
            if not sound:
                problems.append(note)
            out.append(
                Outcome(
                    f"load: {sig.name} after {after} s of a 20 MB load",
                    "clean",
                    proc.returncode,
                    not problems,
                    "; ".join(problems) or note,
                )
            )

    # ------------------------------------------------------------------ two loads into one database at once
    db = work / "concurrent.duckdb"
    a = subprocess.Popen(
        K25 + ["load", str(big_file), "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    time.sleep(0.3)
    b = run(K25 + ["load", str(SAMPLE), "--db", str(db)])
    a.communicate(timeout=600)
    o = judge("load: a second load into a database being loaded", "error-or-ok", b, db=db)
    out.append(o)

    # ------------------------------------------------------------------ databases that are not ours
    foreign = work / "foreign.duckdb"
    run(
        [
            sys.executable,
            "-c",
            f"import duckdb; c = duckdb.connect({str(foreign)!r}); c.execute('create table traces (x int)'); c.close()",
        ]
    )
    before = hashlib.sha256(foreign.read_bytes()).hexdigest()
    for cmd in (["load", str(SAMPLE)], ["steps"], ["report"], ["sql", "select 1"]):
        p = run(K25 + [cmd[0], "--db", str(foreign), *cmd[1:]])
        o = judge(f"{cmd[0]}: a foreign DuckDB file", "error", p, names="not a k25trace database")
        if hashlib.sha256(foreign.read_bytes()).hexdigest() != before:
            o.ok, o.note = False, "the foreign file was modified"
        out.append(o)

    # ------------------------------------------------------------------ sql and report on odd input
    ok_db = work / "ok.duckdb"
    run(K25 + ["load", str(SAMPLE), "--db", str(ok_db)])
    for sql, expect in (
        ("select sum(gpu_event_count) as n from traces", "ok"),
        ("", "error"),
        (" -- nothing", "error"),
        ("select 1; -- note", "ok"),
        (f"copy traces to '{work / 'x.csv'}'", "error"),
        ("export database '/tmp/k25x'", "error"),
        ("select interval 3 day, [1,2], {'a': 1}, 1e308 * 10, 'nan'::double", "ok"),
    ):
        for fmt in ("json", "csv", "table", "markdown"):
            p = run(K25 + ["sql", "--db", str(ok_db), "--format", fmt, sql])
            out.append(judge(f"sql --format {fmt}: {sql[:40]!r}", expect, p))
    empty = work / "empty.duckdb"  # k25trace's tables, no traces (a load creates none when it has no file)
    run([sys.executable, "-c", f"from k25trace import db; db.connect({str(empty)!r}).close()"])
    blank = work / "blank.duckdb"  # a DuckDB file with no tables at all (another tool made it)
    run([sys.executable, "-c", f"import duckdb; duckdb.connect({str(blank)!r}).close()"])
    for command in (["report"], ["sql", "select 1"], ["tui"]):
        out.append(
            judge(
                f"{command[0]} on an empty DuckDB file",
                "error",
                run(K25 + [command[0], "--db", str(blank), *command[1:]]),
                names="an empty DuckDB file",
            )
        )
    for by in (
        "batch",
        "step",
        "rank",
        "kernel",
        "idle",
        "timeline",
        "comm",
        "comm-site",
        "comm-bw",
        "rank-comm",
        "floor",
    ):
        out.append(
            judge(
                f"report --by {by} on a database with no traces",
                "error",  # it says there is nothing to report and how to load some (tests/test_filters_everywhere.py)
                run(K25 + ["report", "--db", str(empty), "--by", by]),
                names="no traces in the database",
            )
        )
    out.append(judge("steps --gap-us nan", "error", run(K25 + ["steps", "--db", str(ok_db), "--gap-us", "nan"])))
    out.append(
        judge(
            "report on a missing database",
            "error",
            run(K25 + ["report", "--db", str(work / "no.duckdb")]),
            names="no.duckdb",
        )
    )

    # ------------------------------------------------------------------ capture against nothing / a bad URL
    out.append(
        judge(
            "capture --url 'http://[::1'",
            "error",
            run(K25 + ["capture", "--url", "http://[::1", "--trace-dir", str(work), "--out", str(work / "c")]),
        )
    )
    out.append(
        judge(
            "capture against a closed port",
            "error",
            run(
                K25
                + [
                    "capture",
                    "--url",
                    "http://127.0.0.1:9",
                    "--trace-dir",
                    str(work / "td"),
                    "--out",
                    str(work / "c2"),
                    "--concurrency",
                    "1",
                ],
                timeout=120,
            ),
        )
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keep", type=Path, default=None, help="work in this directory and keep it")
    a = ap.parse_args()
    work = a.keep or Path(tempfile.mkdtemp(prefix="k25-hostile-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    try:
        results = cases(work)
    finally:
        if a.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print("| case | expected | exit | outcome | note |")
    print("|---|---|---:|---|---|")
    for r in results:
        print(f"| {r.case} | {r.expect} | {r.rc} | {'ok' if r.ok else '**BAD**'} | {r.note.replace('|', '/')} |")
    bad = [r for r in results if not r.ok]
    print(f"\n{len(results) - len(bad)} ok, {len(bad)} bad, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
