"""`k25trace bench allreduce` end to end with gloo on 2 CPU processes, and the floor report against ground truth.

A small synthetic TP-2 Kimi trace (k25trace.synth) gives the all-reduce pattern (count per decode step, message
size from the collective args) and the observed time; its all-reduces are made slow (200 ms each) so that the
CPU gloo floor sits below them and efficiency is a fraction. Every expected number is computed here from the
generator's truth and the bench rows, not by the SQL under test.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("torch")

from k25trace import db, pipeline
from k25trace.analysis import floor as bench  # noqa: E402
from k25trace.analysis import floor_bench, report  # noqa: E402
from k25trace.errors import K25Error  # noqa: E402
from k25trace.synth import generate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DELAYED_RANK, DELAY_US = 1, 300.0


@pytest.fixture(scope="module")
def benched(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("bench")
    truth = generate(
        out / "traces",
        ranks=2,
        batch_sizes=(1, 64, 256),
        steps_per_batch=2,
        layers=4,
        first_k_dense=1,
        prefill=True,
        empty_steps=1,
        ar_latency_us=200000.0,
        delays=[(DELAYED_RANK, DELAY_US)],
        clock_offsets_us=[0.0, 250.0],
        seed=5,
    )
    path = out / "run.duckdb"
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, [out / "traces"])
    assert [r.status for r in results] == ["loaded", "loaded"], [r.message for r in results]
    con.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "k25trace",
            "bench",
            "allreduce",
            "--db",
            str(path),
            "--backend",
            "gloo",
            "--world-size",
            "2",
            "--iters",
            "15",
            "--warmup",
            "3",
            "--bursts",
            "3",
            "--format",
            "csv",
            "--timeout",
            "120",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    con = db.connect(path)
    yield truth, con, proc
    con.close()


def _decode_allreduce_counts(truth) -> dict[int, int]:
    """Batch size -> all-reduces per decode step, from the generator's collectives."""
    per_step: dict[int, int] = defaultdict(int)
    for c in truth["collectives"]:
        if c["category"] == "allreduce":
            per_step[c["step"]] += 1
    counts: dict[int, set[int]] = defaultdict(set)
    for s in truth["steps"]:
        if s["phase"] == "decode":
            counts[s["batch_size"]].add(per_step[s["index"]])
    assert all(len(v) == 1 for v in counts.values())
    return {b: v.pop() for b, v in counts.items()}


def _trace_sizes(con) -> dict[int, int]:
    """Batch size -> the most common all-reduce message size (bytes) the loader stored for its decode steps."""
    rows = con.execute(
        "select steps.batch_size, gpu_events.msg_in_nelems, gpu_events.msg_dtype, count(*) from gpu_events "
        "join steps using (trace_id, step_index) where steps.phase = 'decode' and gpu_events.category = 'allreduce' "
        "group by all"
    ).fetchall()
    best: dict[int, tuple[int, int]] = {}
    for batch, nelems, dtype, n in rows:
        assert dtype == "BFloat16"
        if batch not in best or n > best[batch][1]:
            best[batch] = (nelems * 2, n)
    return {b: v[0] for b, v in best.items()}


def test_gloo_bench_writes_sane_rows(benched) -> None:
    truth, con, proc = benched
    counts = _decode_allreduce_counts(truth)
    sizes = _trace_sizes(con)
    assert sorted(sizes) == sorted(counts)
    specs = {(sizes[b], counts[b]) for b in counts}  # one measurement per distinct (size, count)
    rows = con.execute(
        "select backend, world_size, device_name, dtype, size_bytes, batch_size, size_source, mode, count, reps, "
        "median_us, p90_us, burst_ms, algbw_gbps, busbw_gbps, bench_run, measured_at from allreduce_bench "
        "order by size_bytes, mode"
    ).fetchall()
    assert len(rows) == len(specs) * 2  # (single, eager) per size; no CUDA graph on gloo
    assert len({r[15] for r in rows}) == 1 and all(r[16] is not None for r in rows)
    by = {(r[4], r[7]): r for r in rows}
    for size, count in specs:
        for mode in ("single", "eager"):
            (backend, ws, device, dtype, _s, batch, source, _m, n, reps, med, p90, burst, algbw, busbw, _r, _t) = by[
                (size, mode)
            ]
            assert (backend, ws, device, dtype, source) == ("gloo", 2, "cpu", "bfloat16", "trace")
            assert sizes[batch] == size  # labelled with a batch size whose messages have this size
            assert n == (1 if mode == "single" else count)
            assert reps == (15 if mode == "single" else 3)
            assert 0 < med <= p90 < 10e6  # positive, and under 10 s per all-reduce
            assert algbw == pytest.approx(size / (med * 1e-6) / 1e9, rel=1e-9)
            assert busbw == pytest.approx(algbw * 2 * (2 - 1) / 2, rel=1e-9)
            if mode == "single":
                assert burst is None
            else:
                assert burst == pytest.approx(med * count / 1e3, rel=1e-9)
    assert "median_us" in proc.stdout.splitlines()[0]  # the results table (CSV) on stdout
    assert len(proc.stdout.strip().splitlines()) == 1 + len(rows)
    assert "rows written" in proc.stderr
    assert "single median" in proc.stderr  # rank 0's progress per size, passed to the parent on the result queue


def test_floor_report_against_truth(benched) -> None:
    truth, con, _ = benched
    counts = _decode_allreduce_counts(truth)
    sizes = _trace_sizes(con)
    eager = {
        size: us
        for size, us in con.execute("select size_bytes, median_us from allreduce_bench where mode = 'eager'").fetchall()
    }
    frame = report.allreduce_floor(con, "decode")
    assert frame["batch_size"].to_list() == sorted(counts)
    decode = {s["index"]: s for s in truth["steps"] if s["phase"] == "decode"}
    waits: dict[tuple[int, int], int] = defaultdict(int)  # (rank, step) -> summed all-reduce wait
    for c in truth["collectives"]:
        if c["category"] == "allreduce":
            for rank, w in enumerate(c["wait_ns"]):
                waits[(rank, c["step"])] += w
    for row in frame.iter_rows(named=True):
        batch = row["batch_size"]
        steps = [i for i, s in decode.items() if s["batch_size"] == batch]
        ar_ns = [truth["per_rank_steps"][r][i]["categories"]["allreduce"]["ns"] for r in range(2) for i in steps]
        observed_ms = sum(ar_ns) / len(ar_ns) / 1e6
        wait_ms = sum(waits[(r, i)] for r in range(2) for i in steps) / len(ar_ns) / 1e6
        floor_ms = eager[sizes[batch]] * counts[batch] / 1e3
        assert row["steps"] == len(ar_ns) and row["ranks"] == 2
        assert row["allreduce_per_step"] == counts[batch]
        assert row["msg_bytes"] == sizes[batch]
        assert row["observed_ms"] == pytest.approx(observed_ms, abs=1e-4)
        assert row["wait_ms"] == pytest.approx(wait_ms, rel=0.05, abs=2e-3)
        assert wait_ms > DELAY_US / 1e3  # the injected straggler shows as wait
        assert row["transfer_ms"] == pytest.approx(row["observed_ms"] - row["wait_ms"], abs=2e-4)
        assert (row["floor_mode"], row["floor_backend"], row["floor_bytes"]) == ("eager", "gloo", sizes[batch])
        assert row["floor_ms"] == pytest.approx(floor_ms, abs=1e-4)
        assert row["efficiency"] == pytest.approx(floor_ms / observed_ms, rel=1e-3, abs=1e-4)
        assert 0 < row["efficiency"] < 1
        assert row["efficiency"] <= row["transfer_efficiency"]


def test_floor_report_on_read_only_db_without_bench(tmp_path: Path) -> None:
    truth = generate(
        tmp_path / "traces",
        ranks=2,
        batch_sizes=(1,),
        steps_per_batch=2,
        layers=2,
        prefill=False,
        empty_steps=0,
        seed=1,
    )
    path = tmp_path / "plain.duckdb"
    con = db.connect(path)
    pipeline.load_paths(con, [tmp_path / "traces"])
    con.close()
    con = db.connect(path, read_only=True)
    frame = report.allreduce_floor(con, "decode")
    con.close()
    assert frame["batch_size"].to_list() == [1]
    assert frame["floor_ms"].to_list() == [None] and frame["efficiency"].to_list() == [None]
    assert frame["observed_ms"][0] > 0 and len(truth["steps"]) == 2


def test_parse_size() -> None:
    assert bench.parse_size("14336") == 14336
    assert bench.parse_size("14K") == 14 * 1024
    assert bench.parse_size("1.5MiB") == 3 * 512 * 1024
    for bad in ("0", "1.5", "lots", "nanK"):
        with pytest.raises(K25Error, match="not a positive whole number of bytes"):
            bench.parse_size(bad)


H200_BENCH = ROOT / "tests" / "data" / "h200x2-decode-loop" / "allreduce_bench_kimi.json"


def test_bench_import_adds_a_run_once_and_names_bad_files(tmp_path: Path) -> None:
    """`bench import`: rows measured on the H200s go into a database; again adds nothing; a bad file changes nothing."""
    from click.testing import CliRunner

    from k25trace.cli import cli

    path = tmp_path / "floor.duckdb"
    bad = tmp_path / "bad.json"
    bad.write_text('{"something": []}')
    runner = CliRunner()
    result = runner.invoke(cli, ["bench", "import", str(H200_BENCH), str(bad), "--db", str(path)])
    assert result.exit_code != 0 and "bad.json" in result.output and "allreduce_bench" in result.output
    assert (
        not path.exists()
        or db.connect(path)
        .execute("select count(*) from duckdb_tables() where table_name = 'allreduce_bench'")
        .fetchone()[0]
        == 0
    )
    for expected_note in ("added", "already in"):
        result = runner.invoke(cli, ["bench", "import", str(H200_BENCH), "--db", str(path)])
        assert result.exit_code == 0, result.output
        assert expected_note in result.output
    con = db.connect(path, read_only=True)
    rows = con.execute(
        "select batch_size, mode, median_us, kernel_median_us from allreduce_bench order by batch_size, mode"
    ).fetchall()
    con.close()
    import json

    saved = json.loads(H200_BENCH.read_text())["allreduce_bench"]
    assert len(rows) == len(saved) == 9
    expected = sorted((r["batch_size"], r["mode"], r["median_us"], r["kernel_median_us"]) for r in saved)
    assert rows == expected
    assert all((k is None) == (m == "single") for _, m, _, k in rows)  # kernel time for bursts only


def test_a_rank_that_dies_stops_the_bench_at_once() -> None:
    """Rank 1 killed by SIGKILL (as the out-of-memory killer does) once the process group formed: rank 0 is left
    blocked in an all-reduce with it. The bench must stop promptly naming rank 1, not wait for its timeout."""
    import time

    start = time.monotonic()
    with pytest.raises(K25Error) as info:
        floor_bench.run_allreduce_bench(
            [{"size_bytes": 4096, "count": 4}],
            backend="gloo",
            world_size=2,
            iters=3,
            warmup=1,
            bursts=2,
            timeout_s=600,
            die_rank=1,
        )
    took = time.monotonic() - start
    assert str(info.value) == (
        "the bench stopped: rank 1 was killed by SIGKILL (the out-of-memory killer sends it) before giving its result"
    )
    assert took < 120  # generous: process start-up on a loaded machine; the timeout was 600 s


def test_a_failed_bench_leaves_the_database_byte_for_byte(tmp_path: Path) -> None:
    """`bench allreduce --db` on a database with no all-reduces (the SGLang sample) fails, and the file is as it
    was (it used to be opened for writing, and changed, before the pattern was read)."""
    import hashlib

    from click.testing import CliRunner

    from helpers import SGLANG
    from k25trace.cli import cli

    path = tmp_path / "sglang.duckdb"
    con = db.connect(path)
    results, _ = pipeline.load_paths(con, [SGLANG])
    assert [r.status for r in results] == ["loaded"]
    con.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    result = CliRunner().invoke(
        cli, ["bench", "allreduce", "--db", str(path), "--backend", "gloo", "--world-size", "2"]
    )
    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: {path}: no decode steps with all-reduces; give --sizes and --count"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_a_missing_db_is_refused_before_the_bench_even_with_sizes(tmp_path: Path) -> None:
    """`bench allreduce --db missing.duckdb --sizes …` ran the bench (the --db unread) and exited 0; now it is one
    error line naming the path, before anything starts, and no file is made."""
    from click.testing import CliRunner

    from k25trace.cli import cli

    path = tmp_path / "missing.duckdb"
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "allreduce",
            "--db",
            str(path),
            "--sizes",
            "1024",
            "--count",
            "1",
            "--backend",
            "gloo",
            "--world-size",
            "1",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--bursts",
            "1",
            "--no-graph",
            "--timeout",
            "60",
        ],
    )
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: no such database"), result.stderr
    assert not path.exists()


def test_sizes_with_a_db_store_the_rows_in_it(tmp_path: Path) -> None:
    """The positive control: --sizes with a --db that exists benches the given size and adds its rows there."""
    from click.testing import CliRunner

    from k25trace.cli import cli

    generate(
        tmp_path / "traces",
        ranks=1,
        batch_sizes=(1,),
        steps_per_batch=1,
        layers=1,
        prefill=False,
        empty_steps=0,
        seed=2,
    )
    path = tmp_path / "run.duckdb"
    con = pipeline.connect(path)
    pipeline.load_paths(con, [tmp_path / "traces"])
    con.close()
    result = CliRunner().invoke(
        cli,
        [
            "bench",
            "allreduce",
            "--db",
            str(path),
            "--sizes",
            "1024",
            "--count",
            "2",
            "--backend",
            "gloo",
            "--world-size",
            "1",
            "--iters",
            "1",
            "--warmup",
            "0",
            "--bursts",
            "1",
            "--no-graph",
            "--timeout",
            "120",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.output
    con = db.connect(path, read_only=True)
    rows = con.execute("select size_bytes, mode, count from allreduce_bench order by mode").fetchall()
    con.close()
    assert rows == [(1024, "eager", 2), (1024, "single", 1)]
