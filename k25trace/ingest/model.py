"""What the loader takes and returns: :class:`LoadOptions`, :class:`TraceFile`, :class:`FileResult`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from k25trace.ingest import limits

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
    workers: int = field(default_factory=lambda: max(1, min(4, _cpus())))  # decode processes for big files
    parallel_min_bytes: int = limits.PARALLEL_MIN_BYTES  # files at least this large on disk go to the worker processes


@dataclass
class TraceFile:
    path: Path
    capture_dir: Path | None = None
    level: str | None = None
    concurrency: int | None = None


def _cpus() -> int:
    """The CPUs this process may run on (``taskset``, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1
