"""Run a command and measure its wall time and the peak memory of its whole process tree (workers included): the
RSS of its processes and its files in /dev/shm that no process maps yet (a decode worker's chunk tables not taken
by the parent yet, k25trace.ingest.shared_results)."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            child = int(stat.parent.name)
            out.append(child)
            out.extend(_children(child))
    return out


_FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem")


def _memory_kb(pid: int) -> dict[str, int]:
    """A process's resident memory in KiB, from one read of its status: ``VmRSS`` and its parts ``RssAnon``,
    ``RssFile``, ``RssShmem`` (0 for a process gone)."""
    found = dict.fromkeys(_FIELDS, 0)
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            field, _, rest = line.partition(":")
            if field in found:
                found[field] = int(rest.split()[0])
    except OSError:
        pass
    return found


def _parts_mb(parent: dict[str, int], workers_kb: int, shm_kb: int) -> str:
    """Where the tree's memory is, in one sample: the parent's anonymous, file and shared pages, its children's,
    the files in /dev/shm that no process maps yet."""
    return (
        f"parent anon {parent['RssAnon'] / 1024:.0f} file {parent['RssFile'] / 1024:.0f} "
        f"shmem {parent['RssShmem'] / 1024:.0f}, workers {workers_kb / 1024:.0f}, /dev/shm {shm_kb / 1024:.0f} MB"
    )


def _shm_kb(pid: int) -> int:
    """The memory of the load ``pid``'s files in /dev/shm (k25trace's names start with ``k25trace_<pid>_``)."""
    total = 0
    try:
        paths = [p for p in Path("/dev/shm").iterdir() if p.name.startswith(f"k25trace_{pid}_")]
    except OSError:
        return 0
    for path in paths:
        try:
            total += path.stat().st_blocks * 512
        except OSError:  # taken (unlinked) meanwhile: in the parent's RSS now
            pass
    return total // 1024


@dataclass
class Measured:
    wall_s: float
    peak_mb: float  # peak RSS of the whole process tree and its files in /dev/shm (sampled every ``interval``)
    cpu_s: float  # user + system CPU of the process and every descendant it waited for (decode workers included)
    stderr_tail: str
    peak_parts: str = ""  # where the memory was at the peak (_parts_mb)


def run(
    cmd: list[str],
    *,
    env: dict[str, str] | None = None,
    interval: float = 0.05,
    cwd: Path | None = None,
) -> Measured:
    """Run ``cmd`` to completion; its wall time, peak RSS of its process tree and CPU time. ``cwd``: where it runs
    (``python -m`` puts the working directory first on sys.path: run a given checkout's code from elsewhere)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, cwd=cwd
    )
    peak = 0
    peak_parts = ""
    # MEASURE_MEMORY_LOG=FILE: the tree's memory and its parts, once a second, appended to FILE
    trace = open(os.environ["MEASURE_MEMORY_LOG"], "a") if os.environ.get("MEASURE_MEMORY_LOG") else None
    tick = 0
    kids: list[int] = []
    while proc.poll() is None:
        if tick % 10 == 0:
            kids = _children(proc.pid)
        shm = _shm_kb(proc.pid)
        parent = _memory_kb(proc.pid)
        workers = sum(_memory_kb(k)["VmRSS"] for k in kids)
        now = parent["VmRSS"] + workers + shm
        parts = _parts_mb(parent, workers, shm)
        if now > peak:
            peak, peak_parts = now, parts
        if trace is not None and tick % round(1 / interval) == 0:
            print(f"{time.perf_counter() - start:7.1f} s {now / 1024:7.0f} MB  {parts}", file=trace, flush=True)
        tick += 1
        time.sleep(interval)
    wall = time.perf_counter() - start
    if trace is not None:
        trace.close()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err[-2000:]}")
    return Measured(wall, peak / 1024, cpu, err[-500:], peak_parts)
