"""Load speed and memory at full size, against the baselines, measured in the same run on the same file.

    python3 benchmarks/bench_load.py                       # generate 8 x 80 MB-gz Kimi-shaped ranks, then measure
    python3 benchmarks/bench_load.py --traces DIR --runs 3 --skip-baselines

Prints, for one rank and for all ranks: wall time (median of --runs), events/s, MB/s of JSON, peak RSS of the
whole process tree (decode workers included); then the report timings over all ranks; then the baselines on the
same rank file: zlib and isal decompression floors, orjson.loads of the whole file (TraceLens's loader), DuckDB
read_json + unnest. Progress goes to stderr, figures to stdout.
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _measure  # noqa: E402

PY = sys.executable


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def json_bytes(path: Path) -> int:
    from isal import igzip

    n = 0
    with igzip.open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            n += len(block)
    return n


def load_cmd(paths: list[Path], db: Path) -> list[str]:
    return [PY, "-m", "k25trace", "load", *map(str, paths), "--db", str(db), "-q"]


def measure_load(paths: list[Path], runs: int, tmp: Path) -> tuple[list[float], list[float]]:
    walls, rss = [], []
    for i in range(runs):
        db = tmp / f"bench-{len(paths)}-{i}.duckdb"
        wall, peak, _ = _measure.run(load_cmd(paths, db))
        walls.append(wall)
        rss.append(peak)
        log(f"  run {i + 1}: {wall:.2f} s, peak RSS {peak:.0f} MB")
        if i < runs - 1:
            db.unlink()
            Path(str(db) + ".wal").unlink(missing_ok=True)
    return walls, rss


BASELINE_ORJSON = """
import gzip, sys, orjson
from isal import igzip
with igzip.open(sys.argv[1], 'rb') as fh:
    data = orjson.loads(fh.read())
print(len(data['traceEvents']))
"""

BASELINE_DUCKDB = """
import sys, duckdb
con = duckdb.connect()
n = con.execute("select count(*) from (select unnest(traceEvents) from read_json(?, maximum_object_size=4000000000))",
                [sys.argv[1]]).fetchall()[0][0]
print(n)
"""

BASELINE_ZLIB = """
import sys, zlib
d = zlib.decompressobj(31)
with open(sys.argv[1], 'rb') as fh:
    while chunk := fh.read(16 << 20):
        d.decompress(chunk)
"""

BASELINE_ISAL = """
import sys
from isal import igzip
with igzip.open(sys.argv[1], 'rb') as fh:
    while fh.read(16 << 20):
        pass
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=Path, help="directory of rank files (default: generate into --work)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "k25trace-bench")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--gz-mb", type=float, default=80.0)
    parser.add_argument("--runs", type=int, default=3, help="runs of the one-rank load (median reported)")
    parser.add_argument("--runs-all", type=int, default=1, help="runs of the all-ranks load")
    parser.add_argument("--skip-baselines", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    traces = args.traces
    if traces is None:
        traces = args.work / f"kimi-tp{args.ranks}-{int(args.gz_mb)}mb"
        if not any(traces.glob("*.pt.trace.json.gz")):
            log(f"generating {args.ranks} ranks of {args.gz_mb} MB gz into {traces} ...")
            from k25trace.synth import generate

            generate(traces, ranks=args.ranks, target_gz_mb=args.gz_mb, workers=2, delays=[(3, 200.0, None, None, 7)],
                     clock_offsets_us=800.0)
    files = sorted(traces.glob("*.pt.trace.json.gz"))
    one = files[0]
    gz_mb = one.stat().st_size / 1e6
    raw_mb = json_bytes(one) / 1e6
    with tempfile.TemporaryDirectory(dir=args.work) as tmpdir:
        tmp = Path(tmpdir)
        log(f"one rank: {one.name} ({gz_mb:.1f} MB gz, {raw_mb:.0f} MB JSON)")
        walls, rss = measure_load([one], args.runs, tmp)
        import duckdb

        con = duckdb.connect(str(tmp / f"bench-1-{args.runs - 1}.duckdb"), read_only=True)
        events = con.execute("select sum(event_count) from traces").fetchall()[0][0]
        con.close()
        one_wall = statistics.median(walls)
        print(f"k25trace load, 1 rank:  median {one_wall:.2f} s over {args.runs} runs {['%.2f' % w for w in walls]}, "
              f"peak RSS {max(rss):.0f} MB, {events / one_wall / 1e6:.2f} M events/s, {raw_mb / one_wall:.0f} MB/s JSON, "
              f"{gz_mb / one_wall:.1f} MB/s gz  ({events:,} events)")

        log(f"all {len(files)} ranks ...")
        walls_all, rss_all = measure_load(files, args.runs_all, tmp)
        all_wall = statistics.median(walls_all)
        print(f"k25trace load, {len(files)} ranks: median {all_wall:.2f} s over {args.runs_all} run(s), "
              f"peak RSS {max(rss_all):.0f} MB, {len(files) * raw_mb / all_wall:.0f} MB/s JSON")

        from k25trace import db as k25db, report

        con = k25db.connect(tmp / f"bench-{len(files)}-{args.runs_all - 1}.duckdb", read_only=True)
        for view in ("batch", "comm", "rank-comm"):
            times = []
            for _ in range(5):
                start = time.perf_counter()
                frame = report.breakdown(con, by=view, phase="decode")
                times.append(time.perf_counter() - start)
            print(f"report --by {view:9s} over {len(files)} ranks: median {statistics.median(times) * 1000:.0f} ms "
                  f"(5 runs, {frame.height} rows)")
        con.close()

        if args.skip_baselines:
            return
        print(f"baselines on the same file ({one.name}):")
        for name, code in (("zlib decompress", BASELINE_ZLIB), ("isal decompress", BASELINE_ISAL),
                           ("orjson.loads whole file", BASELINE_ORJSON), ("DuckDB read_json+unnest", BASELINE_DUCKDB)):
            log(f"baseline {name} ...")
            try:
                wall, peak, _ = _measure.run([PY, "-c", code, str(one)])
            except RuntimeError as exc:
                print(f"  {name:26s} failed: {str(exc)[-200:]}")
                continue
            print(f"  {name:26s} {wall:7.2f} s  peak RSS {peak:6.0f} MB   baseline / k25trace = {wall / one_wall:5.2f}")
        try:
            import hta  # noqa: F401

            print("  HTA installed but not measured here")
        except ImportError:
            print("  HTA (HolisticTraceAnalysis): not installed (pip install HolisticTraceAnalysis pulls pandas/plotly; not measured)")


if __name__ == "__main__":
    main()
