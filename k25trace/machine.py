"""What of the machine this process may use (no heavy imports: the decode workers start with it)."""

from __future__ import annotations

import os


def cpus() -> int:
    """The CPUs this process may run on (``taskset``, a container's cpuset), not the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1
