"""Where one load's time goes: a load in this process with every named query and the load's stages timed.

    python3 benchmarks/profile_load.py DB FILE_OR_DIR...          # the figures on stdout
    python3 benchmarks/profile_load.py DB FILE --json             # one JSON object (bench_load reads it)
    python3 benchmarks/profile_load.py DB DIR --timeline          # and when each file was read, received, stored

Stages (wall seconds in the parent, ``@`` before the name): ``stream`` (waiting for and receiving the decoded
chunks), ``commit_file`` (the file's DuckDB work: clean, move into the final tables, then ``after_file``),
``steps`` (classification, steps and gaps), ``layers`` (layer segmentation: issue 32's share), ``build_runs``
(the cross-rank tables, once). Queries are timed by name (``k25trace.db.run_query``). Run in the folder of the
checkout to measure, or with PYTHONPATH naming it.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import time
from pathlib import Path
from typing import Any, Callable

TIMES: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()
SPANS: list[tuple[str, str, str, float, float]] = []  # (stage, file, thread, start, end), for --timeline
T0 = time.perf_counter()


def _spanned(stage: str, fn: Callable[..., Any], file_of: Callable[..., str]) -> Callable[..., Any]:
    import threading

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            name = threading.current_thread().name.removeprefix("k25trace-")
            SPANS.append((stage, file_of(*args), name, start - T0, time.perf_counter() - T0))

    return wrapper


def _timed(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[key] += time.perf_counter() - start
            CALLS[key] += 1

    return wrapper


def _instrument() -> None:
    import k25trace.db as kdb
    from k25trace import classify, crossrank, layers, pipeline, steps
    from k25trace.ingest import loader

    original = kdb.run_query

    def run_query(con: Any, name: str, params: Any = None) -> Any:
        return _timed(name, original)(con, name, params)

    for module in (kdb, loader, steps, layers, pipeline, classify, crossrank):
        if hasattr(module, "run_query"):
            module.run_query = run_query  # type: ignore[attr-defined]
    loader.Loader._stream = _timed("@stream", loader.Loader._stream)  # type: ignore[method-assign]
    loader.Loader._commit_file = _timed("@commit_file", loader.Loader._commit_file)  # type: ignore[method-assign]
    pipeline.steps.build_steps = _timed("@steps", pipeline.steps.build_steps)
    pipeline.layers.build_layers = _timed("@layers", pipeline.layers.build_layers)
    pipeline.build_runs = _timed("@build_runs", pipeline.build_runs)
    from k25trace.ingest import stores, workers

    loader.Loader.read = _spanned("read", loader.Loader.read, lambda _s, tf, *_: tf.path.name)  # type: ignore
    loader.Loader.load = _spanned("load", loader.Loader.load, lambda _s, tf, *_: tf.path.name)  # type: ignore
    loader.Loader.store = _spanned("store", loader.Loader.store, lambda _s, r, *_: r.tf.path.name)  # type: ignore
    loader.Loader._stream = _spanned("stream", loader.Loader._stream, lambda _s, p, *_: p.name)  # type: ignore
    loader.Loader.shared_rows = _spanned(  # type: ignore[method-assign]
        "shared", loader.Loader.shared_rows, lambda _s, _c, tf, *_: tf.path.name
    )
    stores.Staging.clean = _spanned("clean", stores.Staging.clean, lambda _s, *_: "")  # type: ignore[method-assign]
    workers._Receiver._receive = _spanned(  # type: ignore[method-assign]
        "receive", workers._Receiver._receive, lambda r, *_: f"task {r.task_id}"
    )
    pipeline.build_runs = _spanned("runs", pipeline.build_runs, lambda *_: "cross-rank build")
    crossrank.build = _spanned("runs", crossrank.build, lambda *_: "its transaction")
    kdb.memory_bounded = _bounded_spans(kdb.memory_bounded)
    release = _spanned("release", kdb.release_cached_blocks, lambda *_: "cached blocks dropped")
    for module in (kdb, loader, stores):  # the stores drop DuckDB's cached blocks every few files
        module.release_cached_blocks = release  # type: ignore[attr-defined]


def _bounded_spans(bounded: Callable[..., Any]) -> Callable[..., Any]:
    """``db.memory_bounded`` with its start (the limit set: DuckDB evicts down to it) and end as spans."""
    import contextlib

    @contextlib.contextmanager
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        context = bounded(*args, **kwargs)
        _spanned("runs", context.__enter__, lambda *_: "memory limit set")()
        try:
            yield
        finally:
            _spanned("runs", context.__exit__, lambda *_: "memory limit reset")(None, None, None)

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("db", type=Path, help="the DuckDB file to load into (a new file: a load profiles no skip)")
    parser.add_argument("traces", type=Path, nargs="+", help="trace files or folders of them")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout (bench_load reads it)")
    parser.add_argument("--timeline", action="store_true", help="each file's read, receive and store, in time")
    args = parser.parse_args()
    if args.db.exists():
        parser.error(f"{args.db}: exists; name a new database file (a profiled load must load every file)")
    _instrument()
    from k25trace import pipeline
    from k25trace.ingest import LoadOptions

    global T0
    start = T0 = time.perf_counter()
    con = pipeline.connect(args.db)
    results, _notes = pipeline.load_paths(con, args.traces, LoadOptions())
    total = time.perf_counter() - start
    con.close()
    bad = [r.message for r in results if r.status == "failed"]
    if bad:
        raise SystemExit("\n".join(bad))
    if args.json:
        print(json.dumps({"total": total, "times": dict(TIMES), "calls": dict(CALLS)}))
        return
    print(f"load: {total:.2f} s wall in this process ({len(results)} files)")
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    print(
        f"  CPU: this process {own.ru_utime + own.ru_stime:.2f} s (its DuckDB threads included), "
        f"decode workers {children.ru_utime + children.ru_stime:.2f} s"
    )
    for key, seconds in sorted(TIMES.items(), key=lambda kv: -kv[1])[:25]:
        print(f"  {key:28s} {seconds:7.2f} s {100 * seconds / total:5.1f} %  x{CALLS[key]}")
    if args.timeline:
        print("timeline (s from the start; receive: a thread taking a file off its worker's queue, by task id)")
        for stage, file, thread, t0, t1 in sorted(SPANS, key=lambda span: span[3]):
            print(f"  {t0:6.2f} {t1:6.2f} {t1 - t0:5.2f}  {stage:8s} {thread:14s} {file}")


if __name__ == "__main__":  # the decode workers are spawned: they import this module, and must not run it
    main()
