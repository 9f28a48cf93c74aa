"""Ingest: torch.profiler (Kineto) Chrome traces -> the DuckDB tables of the public schema.

The only module that reads trace JSON. Invariants:

* Streaming. A trace is decompressed block by block (isal) and its ``traceEvents`` array is cut at event
  boundaries into chunks of a few MB; each chunk is read into Arrow columns by the compiled scanner (``scan``,
  ``_scan.c``), or, when it cannot read a chunk exactly as msgspec would, decoded by msgspec into slim typed
  structs (unknown keys are skipped in C) and turned into columns. Memory is bounded by the chunks in flight and
  one file's kept columns, never by the JSON size, and no Python object outlives its chunk.
* Exact cuts. The fast cut is a guess (the last ``}, {``); a chunk that decodes proves it, one that does not is
  cut again exactly (:class:`_Scan`), so valid JSON always loads and an error names its event and byte.
* Exact times. ``start_ns = baseTimeNanoseconds + ts * 1000`` in integer arithmetic: integer ``ts`` (old
  traces carry absolute µs) multiply exactly; float ``ts`` (µs with at most ns resolution, relative to the
  base) round exactly while ``ts < 2**53 / 1000`` µs (104 days); ``dur_ns`` likewise. A ts or dur that is no
  time (NaN, Infinity, beyond 64-bit ns with the base) skips its event, counted and reported; nothing wraps.
* All or nothing per file. A file is staged, then moved into the final tables, classified and split into
  steps inside one transaction; any problem rolls the whole file back and is reported as one line naming the
  file. Other files of the same call are unaffected. Trace files are opened read-only.
* Idempotent. A file whose content hash (sha256) is already in ``traces`` is skipped; the hash stored is of
  the bytes actually read.
* Nothing outlives a load: decode workers end with their parent, shared memory is unlinked once mapped (a chunk's
  result file in /dev/shm as soon as the parent maps it; files never taken when the workers close).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from k25trace.ingest.discover import discover, file_size, is_frontend_name  # discover: the function, not the module
from k25trace.ingest.model import FileResult, LoadOptions, TraceFile

if TYPE_CHECKING:
    from k25trace.ingest.loader import Loader, db_problem, load_paths
    from k25trace.ingest.workers import one_blas_thread, pyarrow_skips_pandas, start_workers

# The package's modules, in pipeline order:
#   limits (tunables), model (LoadOptions, TraceFile, FileResult), discover (finding files), stream (reading and
#   cutting), events (structs and decoding), columns (events -> Arrow tables), scan (the compiled scanner: a chunk
#   straight into Arrow tables), messages (what decode steps hand back), chunks (one file in this process),
#   shared_results (a worker's chunk tables through /dev/shm), workers (decode processes), loader (DuckDB; the only
#   module that imports it).
# The loader's and the workers' names load lazily (PEP 562): a decode worker process imports the decode modules,
# not DuckDB; importing this package (or start_workers) imports neither numpy nor pyarrow.
_PUBLIC = {
    "Loader": "loader",
    "db_problem": "loader",
    "load_paths": "loader",
    "one_blas_thread": "workers",
    "pyarrow_skips_pandas": "workers",
    "start_workers": "workers",
}
__all__ = [
    "FileResult",
    "LoadOptions",
    "Loader",
    "TraceFile",
    "db_problem",
    "discover",
    "file_size",
    "is_frontend_name",
    "load_paths",
    "one_blas_thread",
    "pyarrow_skips_pandas",
    "start_workers",
]


_MODULES = (
    "limits",
    "model",
    "stream",
    "events",
    "columns",
    "messages",
    "chunks",
    "shared_results",
    "workers",
    "loader",
)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"k25trace.ingest.{name}")
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'k25trace.ingest' has no attribute {name!r}")
    return getattr(importlib.import_module(f"k25trace.ingest.{module}"), name)
