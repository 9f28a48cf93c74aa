"""Ctrl-C during `k25trace load` (issue 28, item 6).

Interrupting a load of a big file printed a KeyboardInterrupt traceback (the decode workers', the terminal sends
SIGINT to the whole process group) and exited 1 ("Aborted!") instead of 130; one run hung at exit in the
multiprocessing queue's finalizer. Here the real command loads real traces (the B200 rank tiled in time past the
16 MB at which the decode workers take a file), its stderr a terminal (a pty: the progress display is on), and
SIGINT goes to the process group or to the parent alone at points the output shows (never after a sleep): the
progress display started (workers booting), a file being read, a file committed. Each time: exit 130 within
seconds, one `interrupted:` line and no traceback, no process of the load left, no shared memory, the database
opens with whole files only (and their cross-rank runs), and the same load run again finishes the job.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from helpers import B200

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc, uses a pty")

ROOT = Path(__file__).resolve().parent.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COPIES = 3  # 3 copies of the B200 rank: 20.4 MB of JSON per file, over PARALLEL_MIN_BYTES (the worker path)


@pytest.fixture(scope="module")
def big_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Three big rank files: the real B200 trace repeated back to back in time, ranks 0-2 of 3."""
    out = tmp_path_factory.mktemp("big")
    trace = json.loads(gzip.open(B200).read())
    events = trace["traceEvents"]
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(times) - min(times) + 1000
    tiled = [
        dict(e, ts=e["ts"] + c * span) if isinstance(e.get("ts"), (int, float)) else e
        for c in range(COPIES)
        for e in events
    ]
    paths = []
    for rank in range(3):
        path = out / f"rank{rank}.pt.trace.json"
        path.write_text(
            json.dumps(
                {
                    **trace,
                    "traceEvents": tiled,
                    "distributedInfo": {**trace.get("distributedInfo", {}), "rank": rank, "world_size": 3},
                }
            )
        )
        assert path.stat().st_size >= 16 << 20
        paths.append(path)
    return paths


def _gpu_activities(path: Path) -> int:
    """GPU activities of a trace file, counted here from the JSON (kernels, memcpys, memsets with a time)."""
    events = json.loads(path.read_bytes())["traceEvents"]
    return sum(
        e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X" and "ts" in e for e in events
    )


def _session(sid: int) -> list[int]:
    """Live processes of a session (the load, its decode workers, multiprocessing's resource tracker)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            out.append(int(stat.parent.name))
    return out


def _segments(pid: int) -> list[str]:
    return [p.name for p in Path("/dev/shm").glob(f"k25trace_{pid}_*")]


def _interrupt(files: list[Path], dbfile: Path, when: str, target: str, receive: str) -> tuple[int, str, float]:
    """Run `k25trace load FILES --db DBFILE` with stderr on a pty; send SIGINT once the output shows ``when``
    (``started``: the progress display; ``reading``: bytes of the first file read; ``committed``: the first file
    loaded) to the process group or the parent; ``receive``: ``K25TRACE_RECEIVE_AHEAD`` ("": by the CPUs), and
    ``K25TRACE_STORE_THREADS`` after a comma. Returns (exit status, output, seconds from the signal to the exit)."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "k25trace", "load", *map(str, files), "--db", str(dbfile)],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        start_new_session=True,
        env={
            **os.environ,
            "COLUMNS": "200",
            "TERM": "xterm",
            "K25TRACE_RECEIVE_AHEAD": receive.split(",")[0],
            "K25TRACE_STORE_THREADS": (receive.split(",") + [""])[1],
        },
    )
    os.close(slave)
    pattern = {
        "started": r"loading \d+ file",
        "reading": r"\[1/\d\] .*?\b[1-9][0-9.]*/[0-9.]+ MB",
        "committed": r"loaded \S*rank0",
    }[when]
    output, sent_at = b"", None
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(master, 1 << 16)
            except OSError:  # EIO: every writer of the pty is gone
                break
            if not data:
                break
            output += data
            if sent_at is None and re.search(pattern, ANSI.sub("", output.decode("utf-8", "replace"))):
                sent_at = time.monotonic()
                if target == "group":
                    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
                else:
                    proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=60)
        took = time.monotonic() - (sent_at or time.monotonic())
    finally:
        os.close(master)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert sent_at is not None, f"the load never showed {when!r}: {output[-2000:]!r}"
    left = time.monotonic() + 15
    while _session(proc.pid) and time.monotonic() < left:
        time.sleep(0.05)
    assert not _session(proc.pid), "a process of the load outlived it (decode worker or resource tracker)"
    assert not _segments(proc.pid), "shared memory left in /dev/shm"
    raw = output.decode("utf-8", "replace")
    assert raw.rfind("\x1b[?25h") >= raw.rfind("\x1b[?25l"), "the cursor the progress display hid is not shown again"
    text = ANSI.sub("", raw).replace("\r\n", "\n").replace("\r", "\n")
    return rc, text, took


@pytest.mark.parametrize("target", ["group", "parent"])
@pytest.mark.parametrize(
    ("nfiles", "when", "receive"),
    [
        (1, "started", ""),
        (1, "reading", ""),
        (3, "reading", "0"),
        (3, "committed", "0"),
        (3, "committed", "1"),
        (3, "reading", "0,3"),
        (3, "committed", "1,3"),
    ],
    ids=[
        "ring-started",
        "ring-reading",
        "prefetch-reading",
        "prefetch-committed",
        "received-ahead-committed",
        "stored-at-once-reading",
        "stored-at-once-committed",
    ],
)
def test_ctrl_c_during_a_big_load(
    tmp_path: Path, big_ranks: list[Path], nfiles: int, when: str, receive: str, target: str
) -> None:
    """``receive``: K25TRACE_RECEIVE_AHEAD, then K25TRACE_STORE_THREADS after a comma (files stored at once)."""
    files = big_ranks[:nfiles]
    dbfile = tmp_path / "run.duckdb"
    rc, output, took = _interrupt(files, dbfile, when, target, receive)
    assert rc == 130, output[-3000:]
    assert took < 20, f"{took:.1f} s from Ctrl-C to the exit"
    assert "Traceback" not in output and "KeyboardInterrupt" not in output and "Aborted" not in output, output
    assert len(re.findall(r"^interrupted: ", output, re.MULTILINE)) == 1, output
    assert not re.search(r"^error: ", output, re.MULTILINE), output
    loaded = re.findall(r"^loaded (\S+): ", output, re.MULTILINE)
    con = duckdb.connect(str(dbfile), read_only=True)
    try:
        traces = con.execute("select file_name, event_count from traces order by trace_id").fetchall()
        assert [name for name, _ in traces] == [Path(p).name for p in loaded], output  # whole files: what it said
        per_trace = con.execute("select trace_id, count(*) from gpu_events group by all order by 1").fetchall()
        assert [n for _, n in per_trace] == [_gpu_activities(files[0])] * len(traces)  # whole files: every kernel
        assert con.execute("select count(*) from trace_runs").fetchall() == [(len(traces),)]  # runs of what committed
        stale = con.execute("select value from meta where key = 'crossrank_stale'").fetchall()
        assert stale in ([], [("false",)])
    finally:
        con.close()
    if when == "committed":
        assert len(traces) >= 1
    again = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", "-q", *map(str, files), "--db", str(dbfile)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert again.returncode == 0 and "Traceback" not in again.stderr, again.stderr
    con = duckdb.connect(str(dbfile), read_only=True)
    try:
        assert con.execute("select count(*) from traces").fetchall() == [(nfiles,)]
        assert con.execute("select count(distinct run_id), count(*) from trace_runs").fetchall() == [(1, nfiles)]
    finally:
        con.close()
