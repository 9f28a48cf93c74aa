"""The compiled chunk scanner (k25trace/ingest/_scan.c, issue 17) reads a chunk exactly as the msgspec path does,
or refuses it (then msgspec decodes it): every chunk of the real traces, hand-made edge cases, and thousands of
mutated chunks (a chunk the scanner accepts must be one msgspec accepts, with the same tables and counters)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import pytest

from helpers import ALL_REAL, B200, DATA, HTA_NCCL, SGLANG
from k25trace import db, ingest, pipeline
from k25trace.ingest import limits, scan
from k25trace.ingest.columns import _Columns
from k25trace.ingest.events import _FAST_DECODER, _decode_chunk
from k25trace.ingest.stream import _Reader, _Splitter

H200 = sorted((DATA / "h200-gaps").glob("*/*.json.gz")) + sorted((DATA / "h200x2-decode-loop").glob("eager/*.gz"))
WHERE = (0, 0, [0])


def _chunks(path: Path, block: int) -> list[bytes]:
    """The chunks the loader would cut from ``path``, read ``block`` bytes at a time."""
    splitter, reader, out = _Splitter(path), _Reader(path), []
    try:
        while block_data := reader.read(block):
            chunk = splitter.feed(block_data)
            if chunk:
                out.append(bytes(chunk))
        tail, _ = splitter.finish()
        if tail is not None:
            out.append(bytes(tail))
    finally:
        reader.close()
    return out


def _msgspec(chunk: bytes) -> tuple[dict[str, Any], int, _Columns] | None:
    """The msgspec path's answer (None: it rejects the chunk)."""
    columns = _Columns(False)
    try:
        events = _decode_chunk(Path("chunk.json"), chunk, False, WHERE)
        return columns.build(events, 0), len(events), columns
    except Exception:  # noqa: BLE001 - any failure: msgspec does not read this chunk
        return None


def _scanned(chunk: bytes) -> tuple[dict[str, Any], int, _Columns] | None:
    columns = _Columns(False)
    found = scan.scan_chunk(chunk, columns)
    if found is None:
        assert not columns.skipped and not columns.problems, "a refused chunk counted something"
        return None
    return found[0], found[1], columns


def _assert_same(chunk: bytes) -> bool:
    """The scanner's answer equals msgspec's whenever it gives one; True if it read the chunk."""
    got = _scanned(chunk)
    if got is None:
        return False
    want = _msgspec(chunk)
    assert want is not None, f"the scanner read a chunk msgspec rejects: {chunk[:200]!r}"
    (tables, count, columns), (ref_tables, ref_count, ref_columns) = got, want
    assert count == ref_count
    assert list(tables) == list(ref_tables)
    for key, table in tables.items():
        assert table.schema == ref_tables[key].schema, key
        assert table.equals(ref_tables[key]), f"{key}: {table.to_pydict()} != {ref_tables[key].to_pydict()}"
    assert list(columns.skipped.items()) == list(ref_columns.skipped.items())  # same counts, same order
    assert columns.problems == ref_columns.problems and columns.unknown == ref_columns.unknown
    return True


def test_the_scanner_is_compiled_and_loaded() -> None:
    """`pip install` compiled _scan.c (hatch_build.py); without it every load is the slower msgspec path."""
    assert scan.library() is not None, (
        f"{scan.LIBRARY} is missing, does not load or is stale (or "
        f"{scan.DISABLE_ENV} is set): the install did not compile the scanner "
        "(after changing _scan.c: pip install -e . again)"
    )


@pytest.mark.parametrize("path", ALL_REAL + H200, ids=lambda p: f"{p.parent.name}/{p.name[:24]}")
def test_every_chunk_of_the_real_traces_reads_as_msgspec_reads_it(path: Path) -> None:
    """The scanner refuses only chunks msgspec's tagged union refuses too (events without "cat": a trace's
    metadata at its end), and reads the others exactly as the msgspec path does."""
    chunks = _chunks(path, 256 << 10)
    for chunk in chunks:
        if not _assert_same(chunk):
            with pytest.raises(msgspec.ValidationError):
                _FAST_DECODER.decode(chunk)


def test_keep_python_is_left_to_msgspec() -> None:
    chunk = _chunks(B200, 256 << 10)[0]
    assert scan.scan_chunk(chunk, _Columns(True)) is None


EDGE = [  # (name, chunk, read by the scanner?)
    (
        "ints and nulls",
        b'[{"ph":"X","cat":"cpu_op","name":null,"pid":null,"tid":-3,"ts":9007199254740993,'
        b'"dur":null,"args":null},{"cat":"cpu_op","ts":-0,"dur":-0.0,"args":{"Input Dims":null}}]',
        True,
    ),
    (
        "int64 edges",
        b'[{"ph":"X","cat":"cuda_runtime","name":"c","pid":9223372036854775807,"tid":1,"ts":1.5,"dur":2,'
        b'"args":{"correlation":9223372036854775807,"External id":-9223372036854775807,'
        b'"cbid":2147483648}}]',
        True,
    ),
    (
        "flow event fields before cat",
        b'[{"ph":"f","id":1,"pid":1,"tid":2,"ts":3.5,"cat":"ac2g","name":"ac2g",'
        b'"bp":"e"},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,'
        b'"dur":1,"args":{"device":0,"stream":7,"grid":[1,2,3]}}]',
        True,
    ),
    (
        "22 decimals",
        b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":0.0000000000000000000001,'
        b'"dur":0.1234567890123456}]',
        True,
    ),
    (
        "whitespace and empty args",
        b' [ \n{ "ph" : "X" , "cat" : "user_annotation" , "ts" : 1 , "args" : { } } \n] ',
        True,
    ),
    ("empty chunk", b"[]", True),
    ("escape in a name", b'[{"ph":"X","cat":"cpu_op","name":"a\\"b","pid":1,"tid":1,"ts":1,"dur":1}]', False),
    ("non-ASCII name", '[{"ph":"X","cat":"cpu_op","name":"\u00e9","pid":1,"tid":1,"ts":1,"dur":1}]'.encode(), False),
    ("a tab", b'[{"ph":"X",\t"cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}]', False),
    ("CRLF", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"dur":1}\r\n]', False),
    ("exponent", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1e3,"dur":1}]', False),
    ("17 digits", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1234567890.1234567,"dur":1}]', False),
    ("int beyond int64", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":9223372036854775808}]', False),
    ("string pid", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":"7","tid":1,"ts":1,"dur":1}]', False),
    ("unknown category", b'[{"ph":"X","cat":"mystery","name":"a","pid":1,"tid":1,"ts":1,"dur":1}]', False),
    ("no category", b'[{"ph":"M","name":"process_name","pid":1,"args":{"name":"python"}}]', False),
    ("twice ts", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1,"ts":2,"dur":1}]', False),
    ("args before cat", b'[{"ph":"X","args":{},"cat":"cpu_op","name":"a","ts":1}]', False),
    ("phase B", b'[{"ph":"B","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1}]', False),
    ("no ts", b'[{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"dur":1}]', False),
    ("float correlation", b'[{"ph":"X","cat":"cuda_runtime","name":"a","ts":1,"args":{"correlation":1.0}}]', False),
    ("newline in a string", b'[{"ph":"X","cat":"cpu_op","name":"a\nb","pid":1,"tid":1,"ts":1,"dur":1}]', False),
    (
        "deep args",
        b'[{"ph":"X","cat":"cpu_op","name":"a","ts":1,"args":{"x":' + b"[" * 500 + b"]" * 500 + b"}}]",
        False,
    ),
    ("leading zero", b'[{"ph":"X","cat":"cpu_op","name":"a","ts":01}]', False),
    ("trailing comma", b'[{"ph":"X","cat":"cpu_op","name":"a","ts":1},]', False),
    ("not an object", b'[{"ph":"X","cat":"cpu_op","name":"a","ts":1},3]', False),
]


@pytest.mark.parametrize("name,chunk,read", EDGE, ids=[e[0] for e in EDGE])
def test_edge_cases_are_read_exactly_or_left_to_msgspec(name: str, chunk: bytes, read: bool) -> None:
    assert _assert_same(chunk) is read


def _kernel(args: str, top: str = '"pid":0,"tid":7,"ts":1.5,"dur":2') -> str:
    return '{"ph":"X","cat":"kernel","name":"k<1>",' + top + (',"args":' + args if args else "") + "}"


_FULL = (
    '{"device":0,"context":1,"stream":7,"correlation":5,"registers per thread":32,"shared memory":0,'
    '"blocks per SM":0.5,"warps per SM":4.0,"grid":[1,2,3],"block":[128,1,1],"est. achieved occupancy %":25,'
    '"External id":9,"queued":0}'
)
_NCCL = (
    '{"device":0,"stream":9,"correlation":6,"Collective name":"allreduce","In msg nelems":4096,'
    '"Out msg nelems":4096,"Group size":2,"dtype":"BFloat16","Process Group Name":"0",'
    '"Process Group Ranks":"[0, 1]"}'
)
GPU_EDGE = [  # (name, events, GPU rows the scanner reads, GPU activities it copies out for msgspec; None: refused)
    ("every field", [_kernel(_FULL)], (1, 0)),
    ("no args: device and stream from pid and tid", [_kernel("")], (1, 0)),
    ("null args", [_kernel("null")], (1, 0)),
    ("null fields", [_kernel('{"device":null,"stream":null,"grid":null,"blocks per SM":null,"bytes":null}')], (1, 0)),
    (
        "a memcpy with bytes",
        [
            '{"ph":"X","cat":"gpu_memcpy","name":"Memcpy DtoD","pid":1,"tid":2,"ts":3,"dur":1,'
            '"args":{"device":1,"stream":2,"correlation":3,"bytes":1048576,'
            '"memory bandwidth (GB/s)":1.5}}'
        ],
        (1, 0),
    ),
    (
        "integers in float fields",
        [_kernel('{"blocks per SM":8,"warps per SM":-0,"est. achieved occupancy %":100}')],
        (1, 0),
    ),
    (
        "beyond int32: NULL",
        [_kernel('{"device":4294967296,"registers per thread":-2147483649,"shared memory":2147483648}')],
        (1, 0),
    ),
    (
        "no dur, null dur, negative dur, no name",
        [
            _kernel("", '"pid":0,"tid":7,"ts":1'),
            _kernel("", '"pid":0,"tid":7,"ts":1,"dur":null'),
            _kernel("", '"pid":0,"tid":7,"ts":1,"dur":-1'),
            '{"ph":"X","cat":"gpu_memset","ts":4,"args":{}}',
        ],
        (4, 0),
    ),
    ("NCCL collective fields, between plain ones", [_kernel(_FULL), _kernel(_NCCL), _kernel(_FULL)], (2, 1)),
    ("null collective name", [_kernel('{"Collective name":null}')], (0, 1)),
    ("an integer beyond 2**53 in a float field", [_kernel('{"warps per SM":9007199254740993}')], (0, 1)),
    ("short grid", [_kernel('{"grid":[1,2]}'), _kernel('{"block":[]}'), _kernel('{"grid":[1,2,3,4]}')], (0, 3)),
    ("bytes as a string", [_kernel('{"bytes":"1024"}')], (0, 1)),
    ("a field twice", [_kernel('{"device":0,"device":1}')], (0, 1)),
    ("a float where an integer goes", [_kernel('{"stream":7.0}')], None),
    ("a string in the grid", [_kernel('{"grid":["1",2,3]}')], None),
    ("a float cbid", [_kernel('{"cbid":1.5}')], None),
    ("phase i", ['{"ph":"i","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1}'], None),
    ("no ts", [_kernel("", '"pid":0,"tid":7,"dur":1')], None),
    ("string pid", [_kernel("", '"pid":"0","tid":7,"ts":1')], None),
]


@pytest.mark.parametrize("name,events,split", GPU_EDGE, ids=[e[0] for e in GPU_EDGE])
def test_gpu_activities_are_read_exactly_or_left_to_msgspec(
    name: str, events: list[str], split: tuple[int, int] | None
) -> None:
    """GPU activities: the scanner reads the plain ones into columns and copies the others out for msgspec (put
    back in event order); the table equals the msgspec path's either way."""
    chunk = (
        "[" + ",".join(['{"ph":"X","cat":"cpu_op","name":"op","pid":0,"tid":1,"ts":1,"dur":1}', *events]) + "]"
    ).encode()
    assert _assert_same(chunk) is (split is not None)
    if split is not None:
        out = scan._buffers(len(chunk)).out
        assert (int(out[10]), int(out[1])) == split


def test_mutated_chunks_are_never_read_differently() -> None:
    """Thousands of one- and two-byte mutations of real chunks (JSON punctuation, digits, letters, quotes,
    backslashes, control and non-ASCII bytes): whatever the scanner accepts, msgspec reads identically."""
    rng = random.Random(17)
    sources = [
        _chunks(path, 16 << 10)[index][:6000]  # CPU events; kernels; NCCL kernels with collective args
        for path, index in ((B200, 1), (HTA_NCCL, 1), (SGLANG, 1), (SGLANG, 28), (H200[0], 1117), (HTA_NCCL, 494))
    ]
    assert sum(source.count(b'"cat":"kernel"') + source.count(b'"cat": "kernel"') for source in sources) > 20
    seeds = []
    for source in sources:  # whole events only: cut after the last event boundary, close the array
        cut = source.rfind(b"},")
        seeds.append(source[: cut + 1] + b"]")
    alphabet = b'{}[]":,.-+eE0123456789 \nabnlrtu\\\t\x00\x7f\xc3\xa9X'
    read = refused = 0
    for round_ in range(4000):
        chunk = bytearray(seeds[round_ % len(seeds)])
        values = [i + 1 + (chunk[i + 1] == 0x20) for i in range(len(chunk) - 2) if chunk[i] == 0x3A]  # values' starts
        for _ in range(1 + round_ % 2):
            at = rng.choice(values) if rng.random() < 0.3 else rng.randrange(1, len(chunk) - 1)
            if rng.random() < 0.8:
                chunk[at] = alphabet[rng.randrange(len(alphabet))]
            elif rng.random() < 0.5:
                del chunk[at]
            else:
                chunk.insert(at, alphabet[rng.randrange(len(alphabet))])
        if _assert_same(bytes(chunk)):
            read += 1
        else:
            refused += 1
    assert read > 100 and refused > 100  # both sides of the fast path were exercised


def _rows(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple]]:
    tables = ("gpu_events", "launches", "annotations", "cpu_ops", "steps", "gpu_gaps")
    return {t: con.execute(f"select * exclude (trace_id) from {t} order by all").fetchall() for t in tables}


@pytest.mark.parametrize("workers", [1, 2])
def test_a_load_with_the_scanner_stores_what_a_load_without_it_stores(
    tmp_path: Path, workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole loads (decode workers included: they inherit the environment) with and without the scanner."""
    monkeypatch.setattr(limits, "BLOCK_SIZE", 1 << 20)
    options = ingest.LoadOptions(workers=workers, parallel_min_bytes=1, reserved_cpus=0)
    paths = [B200, HTA_NCCL, *H200[:1]]
    with db.connect(tmp_path / "scanner.duckdb") as con:
        pipeline.load_paths(con, paths, options)
        with_scanner = _rows(con)
    monkeypatch.setenv(scan.DISABLE_ENV, "1")
    assert scan.library() is None
    with db.connect(tmp_path / "msgspec.duckdb") as con:
        pipeline.load_paths(con, paths, options)
        without = _rows(con)
    assert with_scanner == without
    assert sum(map(len, with_scanner.values())) > 100_000


def test_a_load_without_the_scanner_says_so_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that is missing (or not a library, or stale) is not used, and a load of big files notes it; the
    user's own K25TRACE_NO_SCANNER is not noted."""
    options = ingest.LoadOptions(workers=1, parallel_min_bytes=1)
    not_a_library = tmp_path / "_scan.so"
    not_a_library.write_text("not a shared library")
    for library in (tmp_path / "missing.so", not_a_library):
        monkeypatch.setattr(scan, "LIBRARY", library)
        monkeypatch.setattr(scan, "_library", False)  # not tried yet in this process
        assert scan.library() is None
    with db.connect(tmp_path / "a.duckdb") as con:
        results, notes = pipeline.load_paths(con, [SGLANG, HTA_NCCL], options)
    assert [r.status for r in results] == ["loaded", "loaded"]
    assert [n for n in notes if "scanner" in n] == [scanner_note := notes[-1]]
    assert "not installed" in scanner_note and "_scan.so" in scanner_note
    monkeypatch.setenv(scan.DISABLE_ENV, "1")
    with db.connect(tmp_path / "b.duckdb") as con:
        _, notes = pipeline.load_paths(con, [SGLANG], options)
    assert not [n for n in notes if "scanner" in n]


def test_importing_the_decode_path_does_not_import_pandas() -> None:
    """A decode worker imports the scanner before it blocks pandas (workers._NoPandas): nothing on that import path
    may make an Arrow array from a list (pyarrow would import pandas, when installed: ~0.5 s of CPU per worker)."""
    code = "import sys, k25trace.ingest.workers; print('pandas' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_a_command_line_load_does_not_import_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas (when installed) on the first Arrow array a process builds, only to ask whether it
    exists: 0.5-1.4 s on the load's critical path. The command line answers for it (a stand-in pandas package
    on the path shows whether anything imported it)."""
    fake = tmp_path / "site" / "pandas"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import sys\nsys.stderr.write('PANDAS WAS IMPORTED\\n')\n__version__ = '9.9'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *sys.path])}
    samples = [B200, SGLANG]
    done = subprocess.run(
        [sys.executable, "-m", "k25trace", "load", *map(str, samples), "--db", str(tmp_path / "t.duckdb"), "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "PANDAS WAS IMPORTED" not in done.stderr
    probe = "import pyarrow as pa; pa.array([1])"  # the stand-in is seen when nothing answers for pyarrow
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert "PANDAS WAS IMPORTED" in done.stderr


def test_pandas_still_works_after_pyarrow_was_told_it_is_not_there() -> None:
    pytest.importorskip("pandas")
    code = (
        "from k25trace.ingest import pyarrow_skips_pandas; pyarrow_skips_pandas(); import sys; "
        "print('pandas' in sys.modules); import pyarrow as pa; "
        "print(type(pa.table({'a': [1]}).to_pandas()).__name__)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "DataFrame"]


def _threads_after_numpy(setup: str, env: dict[str, str]) -> int:
    code = f"{setup}; import numpy, os; print(len(os.listdir('/proc/self/task')))"
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_process_of_ours_starts_numpy_without_a_blas_thread_pool() -> None:
    """numpy's OpenBLAS starts a thread per CPU that spins on start; the command line and the decode workers
    (which do no linear algebra) ask for one thread, and a setting the user made is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    ours = _threads_after_numpy("from k25trace.ingest import one_blas_thread; one_blas_thread()", env)
    assert ours == _threads_after_numpy("pass", {**env, "OPENBLAS_NUM_THREADS": "1"})
    if len(os.sched_getaffinity(0)) > 1:
        assert ours < _threads_after_numpy("pass", env)
    kept = "from k25trace.ingest import one_blas_thread; one_blas_thread(); print(os.environ['OPENBLAS_NUM_THREADS'])"
    done = subprocess.run(
        [sys.executable, "-c", f"import os; {kept}"],
        capture_output=True,
        text=True,
        check=True,
        env={**env, "OPENBLAS_NUM_THREADS": "3"},
    )
    assert done.stdout.strip() == "3"
