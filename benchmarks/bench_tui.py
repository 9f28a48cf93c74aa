"""Benchmark the TUI on a large database: first paint of the overview, and moving between steps.

Builds (once, cached at --db) a database of 8 ranks × ~4.6 M GPU activities by duplicating the bundled
decode-step sample (vllm-mi300x-decode-fullgraph: 434 activities per step) in SQL, with shifted trace ids,
ranks, times, event ids and correlations, plus matching traces, steps, step_categories and launches rows. Then
runs the real app headless (Textual's ``run_test``) several times and prints medians.

    python3 benchmarks/bench_tui.py --db /tmp/k25trace-big.duckdb [--runs 5] [--steps-per-rank 10600]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SAMPLE = REPO / "k25trace" / "samples" / "vllm-mi300x-decode-fullgraph" / "graph_execution.json.gz"


def build_big_db(path: Path, *, ranks: int, steps_per_rank: int) -> None:
    """Load the sample into a scratch database, then write ``ranks × steps_per_rank`` copies of its step."""
    from k25trace import db
    from k25trace.cli import run_load

    with tempfile.TemporaryDirectory() as tmp:
        source_path = Path(tmp) / "source.duckdb"
        source, failed = run_load(source_path, [SAMPLE], quiet=True)
        assert failed == 0
        source.close()
        con = db.connect(path)
        con.execute(f"attach '{source_path}' as src (read_only)")
        period = con.execute("select wall_ns + 1000000 from src.steps where step_index = 0").fetchone()[0]
        params = {"ranks": ranks, "steps": steps_per_rank, "period": period}
        con.execute("insert into kernel_names select * from src.kernel_names")
        con.execute("insert into kernel_rules select * from src.kernel_rules")
        con.execute("insert into kernel_classes select * from src.kernel_classes")
        con.execute("""
            insert into traces (trace_id, path, file_name, file_size, sha256, rank, world_size, base_time_ns,
                device_name, device_count, vllm_version, is_frontend, capture_dir, level, concurrency, event_count,
                gpu_event_count, first_ns, last_ns, distributed_info, device_properties, metadata, skipped, loaded_at,
                loader_version)
            select r.range + 1, '/bench/run/rank' || r.range || '.json.gz', 'rank' || r.range || '.json.gz', file_size,
                sha256 || '-' || r.range, r.range, $ranks, base_time_ns, device_name, device_count, vllm_version,
                is_frontend, null, null, null, event_count * $steps::bigint, gpu_event_count * $steps::bigint, first_ns,
                first_ns + $steps::bigint * $period, distributed_info, device_properties, metadata, skipped, loaded_at, loader_version
            from src.traces, range($ranks) as r""", params)
        con.execute("""
            insert into gpu_events (trace_id, rank, event_id, kind, name_id, device, stream, start_ns, dur_ns, end_ns,
                correlation, external_id, grid_x, grid_y, grid_z, block_x, block_y, block_z, registers,
                shared_mem_bytes, blocks_per_sm, warps_per_sm, occupancy_pct, bytes, collective_name, msg_in_nelems,
                msg_out_nelems, msg_dtype, group_size, pg_name, pg_ranks, category, step_index)
            select r.range + 1, r.range, s.range * 100000 + g.event_id, g.kind, g.name_id, g.device, g.stream,
                g.start_ns + s.range * $period + r.range * 1000, g.dur_ns, g.end_ns + s.range * $period + r.range * 1000,
                g.correlation + s.range * 1000000, g.external_id, g.grid_x, g.grid_y, g.grid_z, g.block_x, g.block_y, g.block_z,
                g.registers, g.shared_mem_bytes, g.blocks_per_sm, g.warps_per_sm, g.occupancy_pct, g.bytes,
                g.collective_name, g.msg_in_nelems, g.msg_out_nelems, g.msg_dtype, g.group_size, g.pg_name, g.pg_ranks,
                g.category, s.range
            from range($ranks) as r, range($steps) as s, (select * from src.gpu_events order by start_ns) as g
            order by r.range, s.range, g.start_ns""", params)
        con.execute("""
            insert into launches
            select r.range + 1, r.range, s.range * 100000 + l.event_id, l.api, l.name, l.pid, l.tid,
                l.start_ns + s.range * $period + r.range * 1000, l.dur_ns, l.end_ns + s.range * $period + r.range * 1000,
                l.correlation + s.range * 1000000, l.external_id, l.cbid
            from range($ranks) as r, range($steps) as s, src.launches as l
            order by r.range, s.range, l.start_ns""", params)
        con.execute("""
            insert into steps
            select r.range + 1, r.range, s.range, marker, source, is_inferred, phase, ctx_reqs, ctx_tokens, gen_reqs,
                gen_tokens, total_tokens, batch_size, is_spec_decode, is_empty,
                marker_start_ns + s.range * $period, marker_end_ns + s.range * $period, graph_launches,
                gpu_start_ns + s.range * $period + r.range * 1000, gpu_end_ns + s.range * $period + r.range * 1000,
                wall_ns, busy_ns, idle_ns, overlap_ns, kernel_count, kernel_ns
            from range($ranks) as r, range($steps) as s, src.steps""", params)
        con.execute("""
            insert into step_categories
            select r.range + 1, r.range, s.range, category, kernel_ns, busy_ns, kernel_count
            from range($ranks) as r, range($steps) as s, src.step_categories""",
            {"ranks": ranks, "steps": steps_per_rank})
        con.execute("checkpoint")
        con.close()


async def measure(db_path: Path, moves: int) -> tuple[float, list[float], float]:
    """One run: seconds to the overview's first paint, ms per step move (n), ms to open the kernel screen."""
    from k25trace.tui.app import K25TraceApp

    started = time.perf_counter()
    app = K25TraceApp(db_path)
    async with app.run_test(size=(150, 48)) as pilot:
        while "overview" not in app.paint_times:
            await pilot.pause(0.002)
        first_paint = app.paint_times["overview"] - started
        await app.workers.wait_for_complete()  # the decode breakdown, still computing after the first paint
        app.open_step(1, 5000)
        while "step" not in app.paint_times:
            await pilot.pause(0.002)
        move_ms = []
        for _ in range(moves):
            before = app.paint_times["step"]
            pressed = time.perf_counter()
            await pilot.press("n")
            while app.paint_times["step"] == before:
                await pilot.pause(0.002)
            move_ms.append((app.paint_times["step"] - pressed) * 1000)  # key → step data painted
        pressed = time.perf_counter()
        await pilot.press("enter")
        while "kernel" not in app.paint_times:
            await pilot.pause(0.002)
        kernel_ms = (app.paint_times["kernel"] - pressed) * 1000
    return first_paint, move_ms, kernel_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, default=Path("/tmp/k25trace-big.duckdb"))
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--steps-per-rank", type=int, default=10600, help="× 434 activities per step")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--moves", type=int, default=10)
    args = parser.parse_args()
    if not args.db.exists():
        started = time.perf_counter()
        build_big_db(args.db, ranks=args.ranks, steps_per_rank=args.steps_per_rank)
        print(f"built {args.db} in {time.perf_counter() - started:.1f} s", flush=True)
    import duckdb

    con = duckdb.connect(str(args.db), read_only=True)
    events, traces, steps = con.execute(
        "select (select count(*) from gpu_events), (select count(*) from traces), (select count(*) from steps)").fetchone()
    con.close()
    print(f"database: {traces} ranks, {events:,} GPU activities ({events / max(traces, 1) / 1e6:.2f} M per rank), "
          f"{steps:,} steps, {args.db.stat().st_size / 1e9:.2f} GB")
    first_paints, moves, kernels = [], [], []
    for _ in range(args.runs):
        first_paint, move_ms, kernel_ms = asyncio.run(measure(args.db, args.moves))
        first_paints.append(first_paint)
        moves.extend(move_ms)
        kernels.append(kernel_ms)
    print(f"first paint (overview), median of {args.runs}: {statistics.median(first_paints):.3f} s "
          f"(min {min(first_paints):.3f}, max {max(first_paints):.3f})   target < 2 s")
    print(f"next step (n → repainted), median of {len(moves)}: {statistics.median(moves):.1f} ms "
          f"(p90 {sorted(moves)[int(len(moves) * 0.9) - 1]:.1f}, max {max(moves):.1f})   target < 200 ms")
    print(f"open kernel (enter → details), median of {args.runs}: {statistics.median(kernels):.1f} ms")


if __name__ == "__main__":
    main()
