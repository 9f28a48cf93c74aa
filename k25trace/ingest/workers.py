"""Decode worker processes: big files are decoded in parallel (one file's chunks handed out through a shared-memory
ring, or whole files), chunk tables handed back in order through files of /dev/shm (or the result pipes); the
parent is the single DuckDB writer. On 4 CPUs or more a thread of the parent
takes the next file's tables off its worker's queue while the parent stores the file before (:class:`_Receiver`).

Importing this module is cheap (no numpy, pyarrow, msgspec or DuckDB: the decode modules are imported where they
are used), so a load can start its decode processes first and let them boot while it imports the rest
(:func:`start_workers`; ~0.5 s of a real rank's load on 2 cores, measured)."""

from __future__ import annotations

import importlib.abc
import os
import signal
import sys
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from k25trace.errors import K25Error, TraceError
from k25trace.ingest import limits
from k25trace.ingest.discover import discover, file_size
from k25trace.ingest.messages import Attached, Chunk, End, Failed, Message, Progress, Resplit
from k25trace.ingest.model import LoadOptions
from k25trace.ingest.shared_results import (
    SHM_DIR,
    ResultWriter,
    dropped,
    remove_files,
    results_prefix,
    shm_free_bytes,
    taken,
)
from k25trace.machine import cpus

if TYPE_CHECKING:
    from k25trace.ingest.stream import _Splitter


def _die_with_parent(pdeathsig: bool) -> None:
    """Make this decode process end when the load that started it ends, however it ends (kill -9 included):
    Linux's parent-death signal when the parent's main thread started us, and in any case a thread that waits
    for the end of the pipe multiprocessing keeps open to the parent (EOF when the parent is gone)."""
    if pdeathsig and sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    import multiprocessing
    import threading
    from multiprocessing.connection import wait

    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        wait([parent.sentinel])
        os._exit(70)

    threading.Thread(target=watch, name="k25trace-parent-watch", daemon=True).start()


class _NoPandas(importlib.abc.MetaPathFinder):
    """pyarrow imports pandas (when installed) on its first ``pa.array()`` only to ask whether the input is a
    pandas object: ~0.3-0.5 s of CPU per process, for nothing; a decode worker never holds one. In a worker the
    import fails (pyarrow then goes on without pandas)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        if fullname.partition(".")[0] == "pandas":
            raise ModuleNotFoundError(f"pandas is not used in a decode worker ({fullname})", name=fullname)
        return None


def pyarrow_skips_pandas() -> None:
    """For a process k25trace runs itself (the command line): pyarrow asks once whether pandas is installed, on its
    first Arrow array, and imports pandas to answer (0.5-1.4 s of CPU measured on the load's critical path, for a
    load that never holds a pandas object). Here it asks while pandas cannot be imported, and remembers "no".

    pandas still works afterwards: what needs it (``to_pandas``, ``from_pandas``) imports it then. What changes is
    that ``pa.array`` no longer recognises a pandas object as one (a categorical Series would convert as plain
    values): fine where no caller passes one, which is why this is not done in the library (:func:`load_paths`
    may run in a user's notebook) and nothing is done once pandas is imported."""
    if "pandas" in sys.modules:
        return
    blocker = _NoPandas()
    sys.meta_path.insert(0, blocker)
    try:
        import pyarrow as pa

        pa.array([0])  # the probe: pyarrow's pandas shim tries the import once and keeps the answer
    finally:
        sys.meta_path.remove(blocker)


def one_blas_thread() -> None:
    """For a process k25trace runs itself, before numpy is imported: numpy's OpenBLAS starts a thread per CPU that
    spins for work on start. k25trace does no linear algebra. On 2 cores those threads took ~0.1 s of CPU per
    process (``import numpy`` and a second's sleep: 0.21 against 0.10 s of user CPU, measured); a real rank's load
    keeps its wall time within this machine's noise. Nothing changes where numpy is imported or the variable set."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def lean_allocation() -> None:
    """Make Arrow allocate through the C library in this process, not through mimalloc, which keeps much of what
    it freed. Eight real ranks through one decode worker (2 cores): the worker's peak RSS 0.43-0.44 GB against
    0.48 GB, at the same speed (measured; the C library's pages of its own for every block of 128 KiB or more took
    it to 0.35-0.37 GB but cost 5-10 % of the load's time, the page faults of every new block)."""
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def _worker_main(
    index: int, tasks: Any, results: Any, pdeathsig: bool = False, shared_prefix: str | None = None
) -> None:
    """A decode process. Tasks: ``(task_id, path, keep_python, threaded_read, decode_threads)`` streams a whole
    file (decompress, cut, decode; with ``threaded_read``, decompressed in a thread meanwhile; ``decode_threads``
    chunks decoded at once, in threads);
    ``("attach", task_id, names)`` maps the parent's shared-memory ring (the parent unlinks the names once every
    worker answered, so nothing is left in /dev/shm whatever happens next); ``("detach",)`` unmaps it;
    ``("chunk", task_id, path, index, size, keep_python)`` decodes one chunk the parent put in ring buffer
    ``index``. Every message it puts
    (:mod:`k25trace.ingest.messages`) is paired with the task id; a failure is reported as :class:`Failed`, a guessed
    cut that does not hold as :class:`Resplit`, and the worker goes on. With ``shared_prefix``, a chunk's tables go
    through a file of /dev/shm named by it (:mod:`k25trace.ingest.shared_results`), not through the pipe."""
    one_blas_thread()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle (it ends the workers)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since the start; a pending one is dropped
    _die_with_parent(pdeathsig)
    sys.meta_path.insert(0, _NoPandas())
    from k25trace.ingest.chunks import _chunks, _decode_and_build
    from k25trace.ingest.events import _GuessedCut

    lean_allocation()

    shared = ResultWriter(shared_prefix, index).shared
    ring: list[Any] = []
    while True:
        task = tasks.get()
        if task is None:
            for shm in ring:
                shm.close()
            return
        if task[0] == "attach":
            from multiprocessing import shared_memory

            for shm in ring:
                shm.close()
            ring = [shared_memory.SharedMemory(name=name) for name in task[2]]
            results.put((task[1], Attached()))
            continue
        if task[0] == "detach":  # the ring is no longer used (several files: the others stream whole)
            for shm in ring:
                shm.close()
            ring = []
            continue
        if task[0] == "chunk":  # one chunk the parent decompressed into a shared-memory buffer
            _, task_id, chunk_path, buffer_index, size, keep_python = task
            try:
                view = ring[buffer_index].buf[:size]
                try:
                    item = _decode_and_build(chunk_path, view, keep_python)
                finally:
                    view.release()
                results.put((task_id, shared(item)))
            except _GuessedCut:
                results.put((task_id, Resplit()))
            except TraceError as exc:
                results.put((task_id, Failed(exc.path, exc.problem)))
            except Exception as exc:  # noqa: BLE001 - reported to the parent as this file's failure
                results.put((task_id, Failed(chunk_path, f"{type(exc).__name__}: {exc}")))
            continue
        task_id, path, keep_python, threaded_read, decode_threads = task

        def progress(n: int, task_id: Any = task_id) -> None:  # this task's id, bound now (B023)
            results.put((task_id, Progress(n)))

        try:
            for message in _chunks(Path(path), keep_python, progress, threaded_read, decode_threads):
                results.put((task_id, shared(message)))
        except TraceError as exc:
            results.put((task_id, Failed(exc.path, exc.problem)))
        except Exception as exc:  # noqa: BLE001 - reported to the parent as this file's failure
            results.put((task_id, Failed(path, f"{type(exc).__name__}: {exc}")))


def start_workers(paths: list[Path], options: LoadOptions | None = None) -> "_Workers | None":
    """The decode processes a load of ``paths`` will use, started now (None when it has no file big enough for
    them): a caller that has not imported the rest of the loader yet (the command line) lets them boot meanwhile,
    and hands them to :func:`~k25trace.ingest.loader.load_paths`, which closes them."""
    options = options or LoadOptions()
    if options.workers <= 1:
        return None
    files, _, _ = discover(paths, include_frontend=options.include_frontend)
    big = sum(file_size(tf.path) >= options.parallel_min_bytes for tf in files)
    if not big:
        return None
    return _Workers(decode_workers(options, big))


def _unless_failed(item: Message) -> Message:
    """A worker's message, or the TraceError its Failed message stands for (the file's problem, named)."""
    if isinstance(item, Failed):
        raise TraceError(item.path, item.problem)
    return item


class _Receiver:
    """One prefetched file's messages, taken off its worker's queue by a thread of this process (its chunk tables
    unpickled there) and handed to :meth:`take` in order; the thread ends at the file's End or Failed message."""

    def __init__(self, workers: "_Workers", worker: int, task_id: int) -> None:
        import queue
        import threading

        self.worker, self.task_id = worker, task_id
        self.items: queue.SimpleQueue[Message | BaseException] = queue.SimpleQueue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._receive, args=(workers,), name=f"k25trace-receive-{task_id}", daemon=True
        )
        self.thread.start()

    def _receive(self, workers: "_Workers") -> None:
        try:
            while not self.stopping.is_set():
                item = workers._poll(self.worker, self.task_id, 0.1)
                if item is not None:
                    self.items.put(item)
                    if isinstance(item, (End, Failed)):
                        return
        except BaseException as exc:  # a dead worker: raised where the file is taken
            self.items.put(exc)

    def done(self) -> bool:
        """Whether the thread has ended (the file's last message taken off the queue, a dead worker, or stopped)."""
        return not self.thread.is_alive()

    def take(self) -> Message:
        """The file's next message, as :meth:`_Workers._take` gives it (a Failed one raises TraceError)."""
        import queue

        while True:
            try:
                item = self.items.get(timeout=1.0)
                break
            except queue.Empty:
                if self.done() and self.items.empty():
                    raise K25Error(f"decode worker {self.worker}: its messages stopped before the file's end") from None
        if isinstance(item, BaseException):
            raise item
        return _unless_failed(item)

    def stop(self) -> None:
        """End the thread (within its 0.1 s poll); what it received is dropped."""
        self.stopping.set()
        self.thread.join()


def decode_workers(options: LoadOptions, big_files: int) -> int:
    """The decode processes of a load with ``big_files`` big files: one per file (each streams whole files), and at
    least 4 (one file's chunks are shared out among them), never more than ``options.workers``. One real rank on 16
    CPUs took 5.3 s with 8 and 5.5 s with 4, but 2.0 GB against 1.2 GB (measured): more would only cost memory.

    Several big files are decoded whole, each by one worker, while this process stores the files before them: it
    is the critical path (a store takes about as long as a decode), so such a load starts at most
    ``limits.FILES_AHEAD_WORKERS`` (3) and leaves ``options.reserved_cpus`` CPUs (1) to this process. Eight real
    ranks took as long with 3 workers as with 8 on 16 CPUs, and with one as with two on 2 cores; each worker more
    held ~0.45 GB of decoded files waiting (measured). ``reserved_cpus=0``: as many as ``options.workers``."""
    count = min(options.workers, max(4, big_files))
    if big_files >= 2 and options.reserved_cpus:
        ahead = limits.FILES_AHEAD_WORKERS + options.store_threads - 1  # one more per file stored at once
        count = min(count, ahead, max(1, cpus() - options.reserved_cpus * options.store_threads))
    return count


def _start_ignoring_sigint(procs: list[Any]) -> None:
    """Start the decode processes with SIGINT blocked from their first instruction: Ctrl-C at a terminal signals the
    whole process group, and a worker still importing (before :func:`_worker_main` ignores it, which also drops one
    pending) would print a KeyboardInterrupt traceback. The mask is this thread's, inherited through fork and exec;
    a SIGINT meanwhile still reaches this process (another thread takes it, or it waits for the unblock)."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        for proc in procs:
            proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


SHM_PREFIX = "k25trace_"


def _remove_stale_segments() -> None:
    """Unlink ring segments and result files in /dev/shm left by a load that died before it unlinked them (its pid
    is gone)."""
    shm_dir = Path("/dev/shm")
    try:
        names = [p.name for p in shm_dir.iterdir() if p.name.startswith(SHM_PREFIX)]
    except OSError:
        return
    for name in names:
        try:
            pid = int(name[len(SHM_PREFIX) :].split("_", 1)[0])
        except ValueError:
            continue
        try:
            os.kill(pid, 0)
            continue  # alive (or another user's)
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(shm_dir / name)
        except OSError:
            pass


def _widen_pipe(results: Any) -> None:
    """Give a result queue's pipe ``limits.RESULT_PIPE_BYTES`` (Linux; 64 KiB by default) from
    ``limits.RECEIVE_AHEAD_MIN_CPUS`` CPUs, where threads of the parent receive files while others store them: a
    file's tables (~170 MB for a real rank) cross it in fewer reads, each of which gives up the GIL and may wait to
    take it back. On 2 CPUs the parent reads the queues from one thread, and it did not help."""
    if not limits.RESULT_PIPE_BYTES or cpus() < limits.RECEIVE_AHEAD_MIN_CPUS:
        return
    try:
        import fcntl

        fcntl.fcntl(results._reader.fileno(), fcntl.F_SETPIPE_SZ, limits.RESULT_PIPE_BYTES)  # Linux's alone
    except (ImportError, AttributeError, OSError, ValueError):  # not Linux, or above /proc/sys/fs/pipe-max-size
        pass


class _Workers:
    """Decode processes. Several big files: each worker streams whole files (round robin), ahead of the parent,
    which takes them in order and writes them to DuckDB (the single writer). One big file: the parent
    decompresses it into shared memory and the workers decode the chunks in turn (:meth:`feed`).

    Nothing outlives the load: the workers end with the parent (:func:`_die_with_parent`) and the ring's names
    are unlinked as soon as every worker has mapped it (the memory goes when the last process unmaps it)."""

    def __init__(self, count: int) -> None:
        import multiprocessing
        import threading

        ctx = multiprocessing.get_context("spawn")
        pdeathsig = threading.current_thread() is threading.main_thread()
        self.count = count
        self.tasks = [ctx.Queue() for _ in range(count)]
        # bounded (limits.RESULTS_IN_FLIGHT): a worker streaming whole files ahead of the parent waits when that
        # many of its messages are unread, about one real 80 MB rank (2 messages per 8 MB chunk): it can have its
        # next file ready when the parent comes to it, not every later file. 8 real ranks on the 16-CPU device:
        # unbounded 16.4-17.5 s, 256: 17.5 s, 128: 25-27 s (the parent waited on workers held back).
        self.results = [ctx.Queue(maxsize=limits.RESULTS_IN_FLIGHT) for _ in range(count)]
        for results in self.results:
            _widen_pipe(results)
        _remove_stale_segments()
        self.shared_prefix = results_prefix(SHM_PREFIX, os.urandom(4).hex())  # chunk tables through /dev/shm
        self.procs = [
            ctx.Process(
                target=_worker_main,
                args=(i, self.tasks[i], self.results[i], pdeathsig, self.shared_prefix),
                daemon=True,
            )
            for i in range(count)
        ]
        _start_ignoring_sigint(self.procs)
        self.next_task = 0
        self.planned: dict[str, tuple[int, int]] = {}  # path -> (task id, worker) of a whole-file prefetch
        self.ahead: deque[str] = deque()  # the prefetched files in load order, for receive_ahead
        # whole-file tasks not given to their worker yet (limits.FILES_AHEAD_PER_WORKER), per worker, in load order
        self.held: list[deque[tuple[Any, ...]]] = [deque() for _ in range(count)]
        self.given: dict[str, int] = {}  # path -> worker, of the whole files given to a worker and not run yet
        self.files_ahead = 0  # whole files a worker may hold not run yet (prefetch's files_ahead; 0: no bound)
        self.order: dict[str, int] = {}  # path -> its place in load order, of the prefetched files
        self.received: dict[str, _Receiver] = {}  # path -> its messages taken off the queue ahead (receive_ahead)
        self.receiving: list[_Receiver] = []  # every receiver whose thread may still read its worker's queue
        self.ring: list[Any] = []  # shared-memory chunk buffers for feed()
        self._attaching: tuple[int, list[Any], set[int]] | None = None  # (task id, segments, workers that mapped them)
        self.ring_failed = False

    def release_ring(self) -> None:
        """Unmap the shared-memory ring here and in every worker (tasks are taken in order: after the chunks sent
        before), once no file will go through it again."""
        if not self.ring:
            return
        for worker in range(self.count):
            self.tasks[worker].put(("detach",))
        self._unmap_ring()

    def _unmap_ring(self) -> None:
        """Unmap the ring here (the names were unlinked when the workers mapped them)."""
        for shm in self.ring:
            try:
                shm.close()
            except BufferError:  # a view of it still held by an unfinished generator: freed with it
                pass
        self.ring = []

    def prefetch(
        self,
        paths: list[Path],
        keep_python: bool,
        threaded_read: bool = False,
        decode_threads: int = 1,
        files_ahead: int = 0,
    ) -> None:
        """Start streaming these files, one whole file per worker in turn (``threaded_read``: each decompressed in
        a thread of its worker while the worker decodes; ``decode_threads``: that many of its chunks decoded at
        once, in threads of the worker; ``files_ahead``: a worker is given its next file only when it holds fewer
        files not read yet, 0: all at once)."""
        self.files_ahead = files_ahead
        for n, path in enumerate(paths):
            worker = n % self.count
            task_id = self._task_id()
            self.planned[str(path)] = (task_id, worker)
            self.order[str(path)] = len(self.order)
            self.ahead.append(str(path))
            self.held[worker].append((task_id, str(path), keep_python, threaded_read, decode_threads))
        for worker in range(self.count):
            self._give(worker)

    def _give(self, worker: int) -> None:
        """Give the worker its next whole files, as many as :meth:`prefetch`'s ``files_ahead`` lets it hold not run
        yet (0: all of them at once): a worker far ahead of the stores only holds decoded files in memory."""
        ahead = self.files_ahead
        held = self.held[worker]
        while held and (not ahead or sum(w == worker for w in self.given.values()) < ahead):
            task = held.popleft()
            self.given[task[1]] = worker
            self.tasks[worker].put(task)

    def _ran(self, path: Path) -> None:
        """This file is run: it and the given files before it in load order (never run: skipped) leave their
        workers' places free for their next files. Files before it not given yet never will be: files are run in
        load order, so a skipped one is dropped, and the next file of its worker is given in its place."""
        place = self.order.get(str(path))
        if place is None:
            return
        freed = {w for p, w in self.given.items() if self.order.get(p, -1) <= place}
        self.given = {p: w for p, w in self.given.items() if self.order.get(p, -1) > place}
        for worker, held in enumerate(self.held):
            while held and self.order.get(held[0][1], -1) < place:
                self.planned.pop(held.popleft()[1], None)
                freed.add(worker)
        for worker in sorted(freed):
            self._give(worker)

    def streams(self, path: Path) -> bool:
        """Whether this file was given to :meth:`prefetch` and not taken yet (:meth:`run` streams it)."""
        return str(path) in self.planned or str(path) in self.received

    def receive_ahead(self, files: int) -> None:
        """Keep the next ``files`` prefetched files' messages being taken off their workers' queues, each in a thread
        of this process, while this process reads or stores the files before: their chunk tables are unpickled by
        the time they are read (``limits.RECEIVE_AHEAD_MIN_CPUS``, ``limits.RECEIVE_AHEAD_FILES``). Each waits here
        whole; a file received and never run (skipped, unreadable) is dropped when a file after it is run. A file
        whose worker is still read for an earlier file waits (one reader per queue), and so do the files after it."""
        self.receiving = [r for r in self.receiving if not r.done()]
        while len(self.received) < files and self.ahead:
            path = self.ahead[0]
            if path not in self.planned:
                self.ahead.popleft()
                continue
            task_id, worker = self.planned[path]
            if any(r.worker == worker for r in self.receiving):
                return
            self.ahead.popleft()
            del self.planned[path]
            self.received[path] = receiver = _Receiver(self, worker, task_id)
            self.receiving.append(receiver)

    def _task_id(self) -> int:
        self.next_task += 1
        return self.next_task

    def _get(self, worker: int, task_id: int) -> Message:
        while True:
            item = self._poll(worker, task_id, 1.0)
            if item is not None:
                return item

    def _poll(self, worker: int, task_id: int, timeout: float) -> Message | None:
        """The worker's next item of this task, or None when none came within ``timeout`` seconds (0: none
        waiting). Items of an earlier task that failed on another worker are dropped; a dead worker raises."""
        import queue

        while True:
            try:
                got_id, item = (
                    self.results[worker].get(timeout=timeout) if timeout else self.results[worker].get_nowait()
                )
            except queue.Empty:
                if not self.procs[worker].is_alive():
                    raise K25Error(f"decode worker {worker} died (exit code {self.procs[worker].exitcode})") from None
                return None
            if got_id == task_id:
                return taken(item, worker)
            dropped(item)

    def ring_ok(self) -> bool:
        """Whether the shared-memory ring of :meth:`feed` exists or can be made. Not under a file-size limit
        smaller than a buffer (``ulimit -f``: /dev/shm files count too), nor when /dev/shm refuses: the caller
        then decodes in its own process."""
        if self.ring:
            return True
        if self.ring_failed:
            return False
        try:
            import resource

            limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
            if limit != resource.RLIM_INFINITY and limit < limits.RING_BUFFER_BYTES:
                self.ring_failed = True
                return False
        except (ImportError, OSError, ValueError):
            pass
        try:
            self._ring_start()
        except OSError:
            self.ring_failed = True
            return False
        return True

    def _ring_buffers(self) -> list[Any]:
        """The shared-memory ring, mapped by every worker, its names already unlinked (waits for the workers)."""
        self._ring_start()
        self._ring_attached(wait=True)
        return self.ring

    def _ring_start(self) -> None:
        """Make the ring's segments and ask every worker to map them; :meth:`_ring_attached` says when all have.
        Meanwhile (workers still importing, ~1 s of a 2-core machine) the caller can decode in its own process."""
        if self.ring or self._attaching is not None:
            return
        from multiprocessing import shared_memory

        _remove_stale_segments()
        needed = (2 * self.count + 2) * limits.RING_BUFFER_BYTES
        free = shm_free_bytes()
        if SHM_DIR.is_dir() and free < needed:  # its pages come as they are written: short of room, a SIGBUS then
            raise OSError(f"/dev/shm has {free >> 20} MiB free, the ring needs {needed >> 20} MiB")
        token = os.urandom(4).hex()
        ring: list[Any] = []
        try:
            for i in range(2 * self.count + 2):
                ring.append(
                    shared_memory.SharedMemory(
                        name=f"{SHM_PREFIX}{os.getpid()}_{token}_{i}", create=True, size=limits.RING_BUFFER_BYTES
                    )
                )
        except BaseException:
            self._drop_segments(ring)
            raise
        task_id = self._task_id()
        for worker in range(self.count):
            self.tasks[worker].put(("attach", task_id, [shm.name for shm in ring]))
        self._attaching = (task_id, ring, set())

    def _ring_attached(self, wait: bool = False) -> bool:
        """Whether every worker has mapped the ring (then its names are unlinked); ``wait``: until they have."""
        if self.ring:
            return True
        if self._attaching is None:
            return False
        task_id, ring, answered = self._attaching
        try:
            for worker in range(self.count):
                if (
                    worker not in answered
                    and (self._get(worker, task_id) if wait else self._poll(worker, task_id, 0)) is not None
                ):
                    answered.add(worker)
        except BaseException:  # a worker died (or an interrupt): nobody will use these segments
            self._drop_segments(ring)
            self._attaching = None
            raise
        if len(answered) < self.count:
            return False
        for shm in ring:  # mapped here and in every worker: the names can go now
            shm.unlink()
        self.ring = ring
        self._attaching = None
        return True

    @staticmethod
    def _drop_segments(ring: list[Any]) -> None:
        for shm in ring:
            try:
                shm.unlink()
            except OSError:
                pass
            try:
                shm.close()
            except BufferError:
                pass

    def feed(self, path: Path, keep_python: bool, progress: Callable[[int], None]) -> Iterator[Message]:
        """One big file: this process decompresses it once, straight into the shared-memory buffers of a small
        ring (``[`` + the carried-over partial event + a block; the comma after the last complete event becomes
        ``]``), and the workers decode the buffers in turn; results come back in file order. The metadata, a cut
        that did not hold (re-cut exactly here, see :class:`_Splitter`) and events too large for a buffer are
        handled in this process, and so are the first blocks while the workers are still starting (they import
        numpy and pyarrow: ~1 s of a 2-core machine; ``limits.WARM_START``)."""
        from k25trace.ingest.chunks import _decoded, _one_block
        from k25trace.ingest.stream import _Reader, _Splitter

        task_id = self._task_id()
        self._ring_start()
        ring: list[Any] = [] if limits.WARM_START else self._ring_buffers()
        in_flight: deque[tuple[int, int, int, bytes, int]] = deque()  # (worker, buffer, size, gap, offset), file order
        sent = 0
        reader = _Reader(path)
        splitter = _Splitter(path)
        spath = str(path)
        try:
            while True:
                if not ring and self._ring_attached():
                    ring = self.ring  # until then (workers still starting) blocks are decoded here
                if not ring or not splitter.fits_buffer():
                    while in_flight:  # keep the file order (a re-cut here may change what fits)
                        yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
                    if ring and splitter.fits_buffer():
                        continue
                    if not (yield from _one_block(reader, splitter, keep_python, progress)):
                        break
                    continue
                if len(in_flight) == len(ring):
                    yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
                    continue
                index = sent % len(ring)
                size = splitter.cut_in(reader, ring[index].buf)
                reader.report(progress)
                if size == 0:
                    break
                if size is None:  # no complete event yet: all of it is pending
                    continue
                worker = sent % self.count
                self.tasks[worker].put(("chunk", task_id, spath, index, size, keep_python))
                in_flight.append((worker, index, size, splitter.gap, splitter.chunk_offset))
                sent += 1
            while in_flight:
                yield from self._take_oldest(in_flight, ring, splitter, task_id, keep_python)
            tail, meta_text = splitter.finish()
            if tail is not None:
                yield from _decoded(splitter, tail, keep_python)
            yield End(meta_text, reader.sha256, reader.count)
        except TraceError:
            raise  # workers carry on; leftovers of this task are dropped by task id
        except BaseException:
            self.close()
            raise
        finally:
            reader.close()

    def _take_oldest(
        self, in_flight: deque, ring: list[Any], splitter: _Splitter, task_id: int, keep_python: bool
    ) -> Iterator[Message]:
        """The result of the oldest chunk in flight. If its cut (a guess) did not hold, the chunks sent after it
        were cut on a wrong carry: wait for them (their buffers are read until their workers answer), drop their
        results, rebuild the text from the failed chunk's start and let the splitter cut it exactly here."""
        from k25trace.ingest.chunks import _decoded

        worker, index, size, gap, offset = in_flight.popleft()
        item = self._take(worker, task_id)
        if not isinstance(item, Resplit):
            if isinstance(item, Chunk):
                splitter.events += item.events
            yield item
            return
        for w, *_ in in_flight:
            self._get(w, task_id)  # its buffer is read until its worker answers
        cut = [(ring[index].buf[:size], gap)] + [(ring[i].buf[:s], g) for _, i, s, g, _ in in_flight]
        in_flight.clear()
        chunk = splitter.recut(cut, offset)
        del cut  # no view of the ring outlives this
        if chunk is not None:
            yield from _decoded(splitter, chunk, keep_python)

    def _take(self, worker: int, task_id: int) -> Message:
        return _unless_failed(self._get(worker, task_id))

    def run(self, path: Path, keep_python: bool) -> Iterator[Message]:
        """The items of a file given to :meth:`prefetch`, as its worker streams them."""
        self._drop_received(before=self.order.get(str(path)))  # files skipped: not to take this file's items
        self._ran(path)
        receiver = self.received.pop(str(path), None)
        task_id, worker = self.planned.pop(str(path)) if receiver is None else (receiver.task_id, receiver.worker)
        try:
            while True:
                item = self._take(worker, task_id) if receiver is None else receiver.take()
                yield item
                if isinstance(item, End):
                    return
        except TraceError:
            raise  # the worker carries on with its next file
        except BaseException:
            self.close()
            raise

    def _drop_received(self, before: int | None = None) -> None:
        """Stop the threads receiving files ahead and drop what they took (files never run: skipped); with
        ``before``, only those of the files before that place in load order."""
        for path in list(self.received):
            if before is None or self.order.get(path, -1) < before:
                self.received.pop(path).stop()

    def close(self) -> None:
        self._drop_received()  # the threads read the queues closed below
        self.ahead.clear()
        self.held = [deque() for _ in self.held]
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():  # a worker stuck past SIGTERM (it never should be)
                proc.kill()
                proc.join(timeout=5)
        self.procs = []
        for q in [*self.tasks, *self.results]:
            # the workers are gone: a task still buffered in a queue's feeder thread will never be read, and joining
            # that thread at exit (multiprocessing's Queue._finalize_join) could wait forever on a full pipe
            q.cancel_join_thread()
            q.close()
        self.tasks, self.results = [], []
        remove_files(self.shared_prefix)  # results the workers wrote and nobody took (a stopped load)
        if self._attaching is not None:  # workers never all mapped it: the names are still there
            self._drop_segments(self._attaching[1])
            self._attaching = None
        self._unmap_ring()
