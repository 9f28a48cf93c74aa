"""What the loader takes and returns: :class:`LoadOptions`, :class:`TraceFile`, :class:`FileResult`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from k25trace.ingest import limits
from k25trace.machine import cpus  # the CPUs this process may use, as DuckDB's threads count them

# ---------------------------------------------------------------------------------------------------------------
# Results


@dataclass
class FileResult:
    path: str
    status: str  # 'loaded' | 'skipped' | 'failed'
    message: str = ""
    trace_id: int | None = None
    rank: int | None = None
    events: int = 0
    gpu_events: int = 0
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)


@dataclass
class LoadOptions:
    keep_python: bool = False
    include_frontend: bool = False
    workers: int = field(default_factory=lambda: _default_workers())  # decode processes for big files
    parallel_min_bytes: int = limits.PARALLEL_MIN_BYTES  # files at least this large on disk go to the worker processes
    # CPUs that a load of several big files leaves to this process, which stores one file while the workers decode
    # the next ones (:func:`k25trace.ingest.workers.decode_workers`); 0: as many workers as ``workers`` allows
    reserved_cpus: int = 1
    # take the next big file's chunks off its worker's queue in a thread while this one is stored (on 4 CPUs or more)
    receive_ahead: bool = field(default_factory=lambda: _default_receive_ahead())
    # big files stored at once, each in a transaction of its own (1: one after another)
    store_threads: int = field(default_factory=lambda: _default_store_threads())
    # big files whose chunks threads take off their workers' queues at once, ahead of their reads (receive_ahead);
    # left out: as many as are stored at once where the machine stores everything at once (files_at_once), else 1
    receive_ahead_files: int = -1
    # the first of several big files shared out among the decode workers: read sooner, the others start after it;
    # left out: no where the machine stores everything at once, else limits.SHARE_FIRST_FILE
    share_first_file: bool | None = None
    # a decode worker streaming a whole file decompresses it in a thread while it decodes (on 4 CPUs or more)
    threaded_read: bool = field(default_factory=lambda: cpus() >= limits.THREADED_READ_MIN_CPUS)
    # threads of a decode worker streaming a whole file that decode its chunks at once (limits.DECODE_THREADS)
    decode_threads: int = field(default_factory=lambda: _default_decode_threads())
    # whole files a decode worker holds that are not read yet, at most (0: no bound); left out:
    # limits.FILES_AHEAD_PER_WORKER where the machine stores everything at once (files_at_once), else 0
    files_ahead_per_worker: int = -1

    def __post_init__(self) -> None:
        """Works out the settings left out from ``store_threads``: everything at once only where as many files are
        stored at once as the machine allows (a caller's ``store_threads=1`` gets the defaults of a small one)."""
        all_at_once = files_at_once()
        all_at_once = all_at_once if all_at_once > 1 and self.store_threads == all_at_once else 0
        if self.receive_ahead_files < 0:
            self.receive_ahead_files = all_at_once or limits.RECEIVE_AHEAD_FILES
        if self.share_first_file is None:
            self.share_first_file = not all_at_once and bool(limits.SHARE_FIRST_FILE)
        if self.files_ahead_per_worker < 0:
            self.files_ahead_per_worker = limits.FILES_AHEAD_PER_WORKER if all_at_once else 0


@dataclass
class TraceFile:
    path: Path
    capture_dir: Path | None = None
    level: str | None = None
    concurrency: int | None = None


def _default_workers() -> int:
    """The most decode processes a load may start: one per CPU, at most 8 (eight real ranks on 16 CPUs: 12.4 s
    with 8, 15.5 s with 4, measured), or ``K25TRACE_DECODE_WORKERS`` where it is set (benchmarks). A load starts
    fewer for fewer big files (:func:`k25trace.ingest.workers.decode_workers`)."""
    try:
        return max(1, int(os.environ["K25TRACE_DECODE_WORKERS"]))
    except (KeyError, ValueError):
        return max(1, min(8, cpus()))


def _default_decode_threads() -> int:
    """Threads per decode worker streaming a whole file (:attr:`LoadOptions.decode_threads`):
    ``limits.DECODE_THREADS`` from ``limits.DECODE_THREADS_MIN_CPUS`` CPUs where the machine stores everything at
    once (:func:`files_at_once`: it has the memory), else 1. Faster workers fill their queues sooner: 64 ranks on
    16 CPUs held 9.2 GB with two threads against 7.5 GB with one (55.2 s against 59.1 s)."""
    if cpus() < limits.DECODE_THREADS_MIN_CPUS or not files_at_once():
        return 1
    return max(1, limits.DECODE_THREADS)


def _default_receive_ahead() -> bool:
    """Whether a load of several big files receives the next one ahead (:attr:`LoadOptions.receive_ahead`): with
    ``limits.RECEIVE_AHEAD_MIN_CPUS`` CPUs or more, or as ``K25TRACE_RECEIVE_AHEAD`` (1 or 0) says (benchmarks)."""
    setting = os.environ.get("K25TRACE_RECEIVE_AHEAD", "")
    if setting in ("0", "1"):
        return setting == "1"
    return cpus() >= limits.RECEIVE_AHEAD_MIN_CPUS


def _default_store_threads() -> int:
    """How many big files a load stores at once (:attr:`LoadOptions.store_threads`): ``limits.STORE_THREADS`` with
    ``limits.STORE_THREADS_MIN_CPUS`` CPUs or more, else 1; or ``K25TRACE_STORE_THREADS`` where it is set."""
    try:
        return max(1, int(os.environ["K25TRACE_STORE_THREADS"]))
    except (KeyError, ValueError):
        return files_at_once() or (limits.STORE_THREADS if cpus() >= limits.STORE_THREADS_MIN_CPUS else 1)


def files_at_once() -> int:
    """How many big files a load decodes, receives and stores at once on a machine of many CPUs
    (``limits.ALL_AT_ONCE_MIN_CPUS``) and enough memory (``limits.ALL_AT_ONCE_MIN_GB``): at most
    ``limits.ALL_AT_ONCE_FILES``, one per two CPUs; 0 elsewhere, or where ``K25TRACE_STORE_THREADS`` says how many
    files to store at once (the loader's other defaults hold)."""
    if "K25TRACE_STORE_THREADS" in os.environ:
        return 0
    if cpus() < limits.ALL_AT_ONCE_MIN_CPUS or memory_bytes() < limits.ALL_AT_ONCE_MIN_GB << 30:
        return 0
    return min(limits.ALL_AT_ONCE_FILES, cpus() // 2)


# a container's memory limit: cgroup v2, then v1 ("max", or a huge number, where there is none)
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def memory_bytes() -> int:
    """The memory this process may use: the machine's, or its container's limit (cgroup v2 or v1) where lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not on Linux
        return 0
    for name in CGROUP_MEMORY_LIMITS:
        try:
            limit = Path(name).read_text().strip()
        except OSError:
            continue
        return min(total, int(limit)) if limit.isdigit() else total
    return total
