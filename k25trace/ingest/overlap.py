"""The load's loop over its files, two at a time: while one file is stored (its DuckDB transaction, in a thread),
the next one is read and decoded (in this thread and the decode workers). DuckDB releases the GIL while it runs,
so the two overlap on a machine with spare cores.

The database sees the same thing as a load of one file after another: one writer (the store thread), files
stored in order, each in its own transaction, name and trace ids given in that order (a file's new kernel names
get their ids when it is stored, not when it is read). A file is read outside any transaction; whether it is
already loaded is asked again when it is stored (the file stored just before may have the same content).

Ctrl-C (or SIGTERM, through :class:`k25trace.pipeline.Stopped`) while a file is stored interrupts that store
(rolled back, as before); while the next file is read, the store under way is let finish (a second Ctrl-C
interrupts it), then the interrupt goes on. Either way no store is left running when this returns or raises."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

from k25trace.ingest.model import FileResult, TraceFile

if TYPE_CHECKING:
    from k25trace.ingest.loader import Loader


def read_and_store(
    loader: Loader,
    files: list[TraceFile],
    start_file: Callable[[TraceFile], None],
    deliver: Callable[[FileResult], None],
) -> None:
    """Load ``files`` in order through ``loader``; each file's result to ``deliver``, in file order (a file's
    result comes once the next one is read)."""
    reader = loader.con.cursor()  # asks "already loaded?" while the store thread writes through loader.con
    pool = ThreadPoolExecutor(1, thread_name_prefix="k25trace-store")
    pending: Future[FileResult] | None = None
    try:
        for tf in files:
            start_file(tf)
            got = loader.read(tf, reader)
            if pending is not None:
                done, pending = pending, None
                deliver(_wait(loader, done, interrupt_now=True))
            if isinstance(got, FileResult):
                deliver(got)
            else:
                pending = pool.submit(loader.store, got)
                del got  # the store thread holds the file's tables; they go with it
        if pending is not None:
            done, pending = pending, None
            deliver(_wait(loader, done, interrupt_now=True))
    except BaseException:
        if pending is not None:  # interrupted while reading the next file: the store under way finishes
            _settle(loader, pending)
        raise
    finally:
        pool.shutdown(wait=True)
        reader.close()


def _wait(loader: Loader, future: Future[FileResult], *, interrupt_now: bool) -> FileResult:
    """The store's result; an interrupt while waiting interrupts the store (it rolls back), waits for it to end,
    and goes on."""
    try:
        return future.result()
    except BaseException:
        if interrupt_now and not future.done():
            loader.con.interrupt()
            _settle(loader, future)
        raise


def _settle(loader: Loader, future: Future[FileResult]) -> None:
    """Wait for a store to end, whatever it ends with (its own error is not this one's); a second interrupt while
    waiting interrupts it."""
    while True:
        try:
            future.exception()
            return
        except BaseException:
            loader.con.interrupt()
