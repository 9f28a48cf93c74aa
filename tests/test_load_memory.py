"""A load's memory does not grow with its files: DuckDB's cache of the blocks each file wrote is dropped after the
file (k25trace.db.release_cached_blocks), and the database's memory limit is left as it was."""

from __future__ import annotations

from pathlib import Path

import duckdb

from k25trace import db, pipeline

DATA = Path(__file__).parent / "data"
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
