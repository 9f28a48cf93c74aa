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


def _rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


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
    tick = 0
    kids: list[int] = []
    while proc.poll() is None:
        if tick % 10 == 0:
            kids = _children(proc.pid)
        peak = max(peak, _rss_kb(proc.pid) + sum(_rss_kb(k) for k in kids) + _shm_kb(proc.pid))
        tick += 1
        time.sleep(interval)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = proc.stderr.read() if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}): {err[-2000:]}")
    return Measured(wall, peak / 1024, cpu, err[-500:])
