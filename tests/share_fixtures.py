"""Databases shared by the HTML report and export tests: built once per pytest session (on disk under the session's
base temp directory) from the real two-H200 TP2 traces, then only ever opened read-only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from k25trace import db, pipeline

DATA = Path(__file__).parent / "data"
TP2 = DATA / "h200x2-decode-loop"
H200_SINGLE = DATA / "h200-decode-loop"


def load_into(path: Path, inputs: list[Path]) -> None:
    """Load ``inputs`` into the database at ``path``, asserting every file loaded."""
    con = pipeline.connect(path)
    try:
        results, _notes = pipeline.load_paths(con, inputs)
        assert results and all(r.status == "loaded" for r in results), [(r.status, r.message) for r in results]
    finally:
        con.close()


def _build(path: Path, sources: list[Path]) -> Path:
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    con = db.connect(tmp)
    results, _ = pipeline.load_paths(con, sources)
    con.close()
    assert results and all(r.status == "loaded" for r in results), [r.message for r in results]
    tmp.rename(path)
    return path


def tp2_database(factory: pytest.TempPathFactory) -> Path:
    """Two runs of real TP2 traces: ``graph`` (61 layers, CUDA graphs, batch 1/8/64, 6 steps each) and ``eager``."""
    return _build(factory.getbasetemp() / "share-tp2" / "tp2.duckdb", [TP2 / "graph", TP2 / "eager"])


def graph_database(factory: pytest.TempPathFactory) -> Path:
    """Only the ``graph`` run: one run, two ranks."""
    return _build(factory.getbasetemp() / "share-graph" / "graph.duckdb", [TP2 / "graph"])


CAPTURE_STATS = {
    "requests": 16,
    "errors": 0,
    "output_tokens": 2048,
    "duration_s": 4.0,
    "output_tok_s": 512.0,
    "ttft_ms": {"p50": 40.0, "p90": 52.0, "p99": 60.0},
    "tpot_ms": {"p50": 31.5, "p90": 33.25, "p99": 35.0},
    "itl_ms": {"p50": 31.0, "p90": 33.0, "p99": 36.0},
}


def capture_database(factory: pytest.TempPathFactory) -> Path:
    """The real single-H200 decode-loop trace as level c8 of a `k25trace capture` directory with request
    statistics (TPOT, output tok/s) in its manifest."""
    base = factory.getbasetemp() / "share-capture"
    path = base / "capture.duckdb"
    if path.exists():
        return path
    cap = base / "cap"
    (cap / "c8").mkdir(parents=True, exist_ok=True)
    trace = next(H200_SINGLE.glob("*.pt.trace.json.gz"))
    shutil.copy(trace, cap / "c8" / trace.name)
    manifest = {
        "k25trace_capture": 1,
        "levels": [
            {
                "name": "c8",
                "concurrency": 8,
                "dir": "c8",
                "stats": CAPTURE_STATS,
                "files": [{"path": f"c8/{trace.name}", "valid": True, "problem": None}],
            }
        ],
    }
    (cap / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return _build(path, [cap])


def samples_database(factory: pytest.TempPathFactory) -> Path:
    """Every sample bundled with k25trace (each its own run) and HTA's two-rank send/recv trace (no step markers)."""
    samples = Path(__file__).parent.parent / "k25trace" / "samples"
    hta = DATA / "traces" / "hta-2rank-sendrecv"
    return _build(
        factory.getbasetemp() / "share-samples" / "samples.duckdb",
        sorted(samples.glob("*/*.json.gz")) + sorted(hta.glob("*.json.gz")),
    )
