"""Size limits and tuning of the loader (module attributes, read at call time, so tests can lower them)."""

from __future__ import annotations

import os

BLOCK_SIZE = 8 << 20  # decompressed bytes per read
PARALLEL_MIN_BYTES = 16 << 20  # files at least this large (on disk) are decoded by worker processes
RING_BUFFER_BYTES = 16 << 20  # shared-memory buffer per chunk in flight (a chunk is one block plus a remainder)
MAX_PREFIX = 256 << 20  # metadata before traceEvents larger than this is not a Kineto trace
MAX_PENDING = 256 << 20  # text without the end of an event beyond this is not a Kineto trace
WARM_START = True  # a big file's first blocks are decoded in the parent while the decode workers start
# messages (a chunk's tables, or progress) a decode worker may have unread before it waits: a real rank is ~106
# chunks and its progress messages, so a worker streaming whole files stays under one file ahead of the parent (8
# real ranks on 2 cores: peak RSS 0.94-0.95 GB at 160, 1.01-1.02 GB at 256, in the same time, measured)
RESULTS_IN_FLIGHT = 160
FAST_MISSES = 3  # guessed cuts that failed before a file is cut exactly to its end
# decode workers for a load of several big files: the parent stores a file in about the time a worker decodes one,
# so more workers only hold decoded files waiting (8 real ranks on the 16-CPU device, with the scanner: 25.1 and
# 23.5 s with 8 workers and 2.8 GB, 21.4 and 22.5 s with 5 and 2.2 GB, 25.2 and 21.9 s with 3 and 1.7 GB, measured)
FILES_AHEAD_WORKERS = 3
# CPUs from which a load of several big files takes the next file's chunks off its worker's queue in a thread while
# it stores the file before (:meth:`k25trace.ingest.workers._Workers.receive_ahead`). 8 real ranks on the 16-CPU
# device: 18.8-19.4 s against 20.1-21.9 s; taskset 4 CPUs 21.1 s against 26.1 s; 2 CPUs 34.6 s against 32.3 s,
# and on this project's 2 cores 1.07 GB against 0.89 GB peak (measured, 2026-12-05)
RECEIVE_AHEAD_MIN_CPUS = 4
# CPUs from which a load of several big files stores up to STORE_THREADS of them at once, each in a transaction of
# its own (:class:`k25trace.ingest.stores.StoreThreads`). 8 real ranks on the 16-CPU device (2026-12-05, 2 runs
# each): 18.4 s one after another, 11.3 s two at once (2.6 GB), 11.2 s three (2.9 GB), 10.3 s four (3.3 GB); on 4
# CPUs 23.6 s against 18.9 s two at once (1.85 against 2.15 GB). On this project's 2 cores two at once is 1.21x
# faster since chunks cross /dev/shm (35.8 against 43.3 s, 3 runs each, 2026-12-07) but peaks at 1.21 against 0.91
# GB, past the 1 GB that eight ranks keep to on a small machine: hence not below 4 CPUs
STORE_THREADS_MIN_CPUS = 4
STORE_THREADS = 2
# prefetched files whose messages threads of the parent take off their workers' queues at once, ahead of their
# reads (:meth:`k25trace.ingest.workers._Workers.receive_ahead`), where files are received ahead at all
RECEIVE_AHEAD_FILES = 1
# a load of several big files shares the first one's chunks out among its decode workers (the shared-memory ring),
# which reads it sooner; 0: every file is decoded whole by one worker from the start
SHARE_FIRST_FILE = 1
# a machine of many CPUs and enough memory decodes, receives and stores up to ALL_AT_ONCE_FILES big files at once,
# each decoded whole from the start by a worker of its own, none shared out (model.files_at_once). 8 real ranks on
# the 16-CPU device (2026-12-07): 10.24 s against 13.89 s for 2 stores at once (3 runs each), 5.0 GB against 2.7 GB;
# 64 ranks 65.8 s against 81.4 s, 7.8 GB against 3.1 GB (one load each): hence 32 GiB of memory at least
ALL_AT_ONCE_MIN_CPUS = 12
ALL_AT_ONCE_FILES = 8
ALL_AT_ONCE_MIN_GB = 32  # memory of the machine (or of its container), in GiB
# CPUs from which a decode worker streaming a whole file decompresses it in a thread of its own while it decodes
# (isal's igzip_threaded). One real rank's stream in one process on 2 idle cores: 2.84 s against 3.37 s (3 runs
# each), with 0.1-0.5 s more CPU for the copies between the threads; 8 real ranks on the 16-CPU device: 12.83 s
# against 13.89 s (3 runs each); on this project's 2 cores 44.4 s against 43.3 s (the CPUs are all busy already)
THREADED_READ_MIN_CPUS = 4
# the blocks that thread hands over (at most BLOCK_SIZE; 0: BLOCK_SIZE). isal's reader keeps 8 blocks of compressed
# input and 2 decompressed blocks queued: 64 + 16 MB with 8 MB blocks. One real rank streamed in one process with
# that thread, here (2 cores, 5 runs each, interleaved): 2 MB blocks 217 MB peak RSS and 3.8 s, against 297 MB and
# 3.9 s with 8 MB; with two decode threads 239 MB and 3.3 s against 356 MB and 3.5 s (2026-12-07). 64 real ranks on
# a 16-CPU device host: the eight workers 2.73 GB at the peak against 3.26 GB, in the same time (one load each)
THREADED_READ_BLOCK = 2 << 20
# from DECODE_THREADS_MIN_CPUS CPUs, where everything is stored at once (model.files_at_once: memory enough),
# a decode worker streaming a whole file decodes DECODE_THREADS of its chunks at once, in threads (chunks.py,
# _chunks_in_threads): the compiled scanner, numpy and Arrow let the GIL go meanwhile. 64 real ranks there: 55.2 s
# and 9.2 GB against 59.1 s and 7.5 GB with 1 thread (one load each: the workers fill their queues sooner). 8 real
# ranks on a 16-CPU device host (2026-12-07, bench_stores.py, 3 runs each, interleaved): 7.71 s with 2 threads,
# 8.32 s with 1, 7.93 s with 3 (0.5 GB more); on its 4 CPUs (taskset) 19.80 s with 2 against 19.72 s with 1 (2 runs
# each; 0.4 GB more): hence not below 12 CPUs. One rank streamed on this project's 2 cores: 2.24-2.29 s against
# 3.06-3.29 s with 1 thread (CPU 4.0 s against 3.7-4.0 s)
DECODE_THREADS_MIN_CPUS = 12
DECODE_THREADS = 2
# the pipe of each decode worker's result queue from RECEIVE_AHEAD_MIN_CPUS CPUs (0: the system's, 64 KiB on Linux;
# at most /proc/sys/fs/pipe-max-size, 1 MiB by default). 8 real ranks on the 16-CPU device, everything at once
# (2026-12-07): 8.31 s against 9.55 s with 64 KiB on one host (3 runs each), 7.53 s against 7.67 s on another (5
# runs each); on its 4 CPUs 14.92 s against 14.79 s; on this project's 2 cores 45.1 s against 43.5 s (6 runs each:
# within its noise), hence not below 4 CPUs
RESULT_PIPE_BYTES = 1 << 20
# a decode worker hands a chunk's tables of at least SHARED_RESULT_MIN_BYTES to the parent through a file of /dev/shm,
# mapped there without a copy, not through its result pipe (k25trace.ingest.shared_results); 0: the pipe always.
# One real rank's receive: 0.15-0.17 s of the parent's CPU against 0.44-0.47 s through the pipe (2 cores); 8 real
# ranks on the 16-CPU device 5.35 s against 6.61 s, 3.9 against 5.0 GB; on its 4 CPUs 13.7 against 14.1 s (measured)
SHARED_RESULTS = 1
SHARED_RESULT_MIN_BYTES = 64 << 10
# what a chunk's file leaves free in /dev/shm at least, else the chunk goes through the pipe: room for the parent's
# shared-memory ring (2 * workers + 2 buffers of RING_BUFFER_BYTES) and for other programs
SHARED_RESULT_RESERVE_BYTES = 512 << 20
# where everything is stored at once (model.files_at_once), the whole files a decode worker is given that are not
# read yet, at most: its next file is given when its file before is read. A worker given every file decodes on while
# its queue has room (RESULTS_IN_FLIGHT), and the files it decodes ahead of the stores wait in memory. 64 real ranks
# on a 16-CPU device host (2026-12-07, one load each): 67.2 s and 6.99 GB peak with 1, against 69.3 s and 9.26 GB
# with every file given at once (the tables the same); 8 ranks are one file a worker, unchanged
FILES_AHEAD_PER_WORKER = 1
STORES_PER_RELEASE = 8  # files stored at once between two drops of DuckDB's cached blocks (db.release_cached_blocks)


def _from_environment() -> None:
    """For benchmarks: ``K25TRACE_LIMIT_<NAME>=<integer>`` sets the limit ``NAME`` above for this process (and its
    decode workers, which inherit the environment)."""
    for key, value in os.environ.items():
        name = key.removeprefix("K25TRACE_LIMIT_")
        if name != key and isinstance(globals().get(name), int):
            try:
                globals()[name] = int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r}: not an integer") from None


_from_environment()
