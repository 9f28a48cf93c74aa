"""A decode worker's chunk tables handed to the parent through a file in /dev/shm instead of its result pipe.

The worker writes a chunk's tables as Arrow IPC streams into one file of its own (:class:`ResultWriter`) and puts
a small :class:`~k25trace.ingest.messages.SharedChunk` on its queue; the parent maps the file, pre-faulted, unlinks
it at once and reads the tables from the mapping without a copy (:func:`taken`). Through the pipe the same ~170 MB
of a real rank were pickled, written in 1 MiB pieces, read back and unpickled, each read giving up the GIL: one real
rank's receive took the parent 0.44-0.47 s of CPU, against 0.15-0.17 s this way (2 cores, measured).

Nothing is lost and nothing stays: a chunk goes through the pipe when /dev/shm would keep less than
``limits.SHARED_RESULT_RESERVE_BYTES`` free (a container's 64 MB /dev/shm: always), and a worker that cannot write
a file (full, a file-size limit) sends that chunk and every later one through the pipe. The parent unlinks every
file it takes, also one it drops, and :func:`remove_files` removes the files of a load's results never taken (a
stopped load); files of a load whose process died are removed by the next load
(:func:`k25trace.ingest.workers._remove_stale_segments`: the names start with the parent's pid).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

from k25trace.errors import K25Error
from k25trace.ingest import limits
from k25trace.ingest.messages import Chunk, Message, SharedChunk

SHM_DIR = Path("/dev/shm")


def shm_free_bytes() -> int:
    """The bytes /dev/shm can still take (0 where it cannot be asked)."""
    try:
        st = os.statvfs(SHM_DIR)
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def results_prefix(shm_prefix: str, token: str) -> str | None:
    """The name start of a load's result files (``<shm_prefix><pid>_<token>_r``), or None where results go
    through the pipes: ``limits.SHARED_RESULTS`` is 0, or there is no writable /dev/shm (not Linux)."""
    if not limits.SHARED_RESULTS or not SHM_DIR.is_dir() or not os.access(SHM_DIR, os.W_OK):
        return None
    return f"{shm_prefix}{os.getpid()}_{token}_r"


class ResultWriter:
    """A decode worker's side: :meth:`shared` turns a chunk into a :class:`SharedChunk` once its tables are in a
    file of /dev/shm; anything else, and every chunk after a write that failed, goes through the pipe as it is."""

    def __init__(self, prefix: str | None, worker: int) -> None:
        self.prefix = f"{prefix}{worker}_" if prefix else None
        self.count = 0

    def shared(self, item: Message) -> Message:
        """``item``, or its tables written to a file of their own and the message that names it."""
        if self.prefix is None or not isinstance(item, Chunk) or not item.tables:
            return item
        tables = item.tables
        size = sum(table.nbytes for table in tables.values())
        if size < limits.SHARED_RESULT_MIN_BYTES:
            return item
        if shm_free_bytes() < size + limits.SHARED_RESULT_RESERVE_BYTES:  # left for the ring and for others
            return item  # this chunk through the pipe; the next may find room again
        import pyarrow as pa

        self.count += 1
        path = str(SHM_DIR / f"{self.prefix}{self.count}")
        spans: list[tuple[str, int, int]] = []
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))  # this user's alone
            with pa.OSFile(path, "wb") as out:
                for key, table in tables.items():
                    start = out.tell()
                    with pa.ipc.new_stream(out, table.schema) as writer:
                        writer.write_table(table)
                    spans.append((key, start, out.tell() - start))
        except (OSError, pa.ArrowException):  # full (a small /dev/shm), a file-size limit: the pipe, from now on
            self.prefix = None
            try:
                os.unlink(path)
            except OSError:
                pass
            return item
        return SharedChunk(path, tuple(spans), item.events, item.skipped, item.unknown, item.problems)


def taken(item: Message, worker: int) -> Message:
    """The parent's side: a :class:`SharedChunk` as the :class:`Chunk` it stands for (its tables read from the
    mapped file, no copy; the file unlinked); any other message as it is."""
    if not isinstance(item, SharedChunk):
        return item
    import pyarrow as pa

    try:
        fd = os.open(item.path, os.O_RDONLY)
        try:  # pre-faulted: the pages count in this process's RSS at once, as the unpickled tables did
            mapped = mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
        finally:
            os.close(fd)
    except (OSError, ValueError) as exc:
        problem = f"decode worker {worker}: its chunk's tables could not be read from {item.path}: {exc}"
        raise K25Error(problem) from None
    finally:
        dropped(item)
    buffer = pa.py_buffer(mapped)  # the tables keep the mapping; it is unmapped when the last of them goes
    tables = {key: pa.ipc.open_stream(buffer.slice(start, size)).read_all() for key, start, size in item.spans}
    return Chunk(tables, item.events, item.skipped, item.unknown, item.problems)


def dropped(item: Any) -> None:
    """Unlink the file of a :class:`SharedChunk` (one the parent drops, or has mapped)."""
    if isinstance(item, SharedChunk):
        try:
            os.unlink(item.path)
        except OSError:
            pass


def remove_files(prefix: str | None) -> None:
    """Remove the result files of a load whose workers have ended (results never taken: a stopped load)."""
    if prefix is None:
        return
    try:
        names = [p for p in SHM_DIR.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return
    for path in names:
        try:
            path.unlink()
        except OSError:
            pass
