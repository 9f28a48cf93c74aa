"""A load's memory does not grow with its files: DuckDB's cache of the blocks each file wrote is dropped after the
file (k25trace.db.release_cached_blocks), and the database's memory limit is left as it was."""

from __future__ import annotations

from pathlib import Path

import duckdb

from k25trace import db, pipeline

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).parent.parent
EAGER_PAIR = DATA / "h200x2-decode-loop" / "eager"


def cached_table_bytes(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute("select memory_usage_bytes from duckdb_memory() where tag = 'BASE_TABLE'").fetchone()[0]


def test_the_blocks_written_are_dropped_and_the_default_limit_stays(tmp_path: Path) -> None:
    con = duckdb.connect(str(tmp_path / "blocks.duckdb"))
    default = db.memory_limit(con)
    assert db.has_default_memory_limit(con)
    con.execute("create table t as select hash(range) as i, hash(range + 1) as j from range(6000000)")
    con.execute("checkpoint")
    before = cached_table_bytes(con)
    assert before > 64 << 20  # the table's blocks, cached as DuckDB wrote them
    db.release_cached_blocks(con)
    assert cached_table_bytes(con) <= 32 << 20 < before
    assert db.memory_limit(con) == default
    assert con.execute("select count(*), count(distinct i) from t").fetchone() == (6_000_000, 6_000_000)
    con.close()


def test_a_load_drops_the_cache_under_the_default_limit_and_keeps_ones_own(tmp_path: Path) -> None:
    con = pipeline.connect(tmp_path / "pair.duckdb")
    default = db.memory_limit(con)
    results, _ = pipeline.load_paths(con, [EAGER_PAIR])
    assert [r.status for r in results] == ["loaded", "loaded"]
    assert db.memory_limit(con) == default
    con.close()
    con = pipeline.connect(tmp_path / "again.duckdb")
    con.execute("set memory_limit = '5GB'")
    own = db.memory_limit(con)
    assert not db.has_default_memory_limit(con)
    results, _ = pipeline.load_paths(con, [EAGER_PAIR])
    assert [r.status for r in results] == ["loaded", "loaded"]
    assert db.memory_limit(con) == own == "4.6 GiB"
    con.close()


def test_the_cross_rank_build_runs_in_bounded_memory(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The cross-rank build runs under db.CROSS_RANK_MEMORY in a file database with the default limit (its ASOF
    joins grow with every GPU activity of a run), and the default comes back; an in-memory database (it would
    spill into the working folder) and a limit of one's own keep theirs."""
    from k25trace import crossrank

    seen: list[str | None] = []
    build = crossrank.build

    def watched(con: duckdb.DuckDBPyConnection) -> None:
        seen.append(db.memory_limit(con))
        build(con)

    monkeypatch.setattr(crossrank, "build", watched)
    con = pipeline.connect(tmp_path / "pair.duckdb")
    default = db.memory_limit(con)
    pipeline.load_paths(con, [EAGER_PAIR])
    assert seen == ["953.6 MiB"] and db.memory_limit(con) == default
    assert con.execute("select count(*) from collectives").fetchone()[0] > 0
    con.close()
    memory = pipeline.connect(None)
    pipeline.load_paths(memory, [EAGER_PAIR])
    assert seen[1] == default == db.memory_limit(memory)
    own = pipeline.connect(tmp_path / "own.duckdb")
    own.execute("set memory_limit = '5GB'")
    pipeline.load_paths(own, [EAGER_PAIR])
    assert seen[2] == "4.6 GiB" == db.memory_limit(own)


def test_work_past_the_bound_spills_and_gives_the_same_rows(tmp_path: Path) -> None:
    """A sort and a join over more rows than the bound holds spill to FILE.duckdb.tmp and give the rows they give
    unbounded; the default limit comes back."""
    con = duckdb.connect(str(tmp_path / "spill.duckdb"))
    con.execute("create table t as select range as i, hash(range) % 1000003 as k from range(4000000)")
    query = (
        "select count(*), sum(hash(a.i, b.i)), min(a.k), max(b.i) "
        "from (select * from t order by k, i) a join t b on a.i = b.k"
    )
    unbounded = con.execute(query).fetchone()
    with db.memory_bounded(con, "64MB"):
        assert db.memory_limit(con) == "61.0 MiB"
        assert con.execute(query).fetchone() == unbounded
    assert db.has_default_memory_limit(con)
    con.close()


def test_a_cross_rank_build_out_of_the_bound_runs_again_without_it(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Not every operator spills: a build that runs out of the bound is rolled back and run again without it, and
    stores what a build without the bound stores."""
    con = pipeline.connect(tmp_path / "pair.duckdb")
    pipeline.load_paths(con, [EAGER_PAIR])
    query = "select * from collectives order by all"
    expected = con.execute(query).fetchall()
    causes = con.execute("select * from collective_causes order by all").fetchall()
    out_of_memory: list[str] = []
    bounded = db.memory_bounded

    def watched(con: duckdb.DuckDBPyConnection, limit: str | None = None):  # type: ignore[no-untyped-def]
        with bounded(con, limit):
            try:
                yield
            except Exception as exc:
                out_of_memory.append(type(exc.__cause__).__name__)
                raise

    import contextlib

    monkeypatch.setattr(db, "memory_bounded", contextlib.contextmanager(watched))
    for limit in ("16MB", "20MB", "24MB", "32MB"):
        monkeypatch.setattr(db, "CROSS_RANK_MEMORY", limit)
        pipeline.build_runs(con)
        assert con.execute(query).fetchall() == expected
        assert con.execute("select * from collective_causes order by all").fetchall() == causes
        assert db.has_default_memory_limit(con)
    assert "OutOfMemoryException" in out_of_memory


def test_a_decode_worker_allocates_arrow_memory_through_the_c_library() -> None:
    """lean_allocation (called first thing in each decode worker) puts Arrow on the C library's allocator: mimalloc
    kept what a worker freed (8 real ranks: the worker's peak 0.48 GB against 0.43 GB); in a process of its own, as a
    worker is."""
    import subprocess
    import sys

    code = (
        "import pyarrow as pa\n"
        "before = pa.default_memory_pool().backend_name\n"
        "from k25trace.ingest.workers import lean_allocation\n"
        "lean_allocation()\n"
        "print(before, pa.default_memory_pool().backend_name)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    before, after = out.stdout.split()
    assert after == "system" and before != "system"
