"""Files stored at once: a load of several rank files with each ``K25TRACE_STORE_THREADS`` setting, interleaved.

    python3 benchmarks/bench_stores.py DIR --threads 1,3,4+RECEIVE_AHEAD_FILES=4 --runs 2 [--no-polars] [--no-warm]

Loads every rank file of DIR ``--runs`` times per setting (run by run, interleaved, after one uncounted load each
unless ``--no-warm``),
a setting's ``+NAME=VALUE`` terms set loader limits too (``K25TRACE_LIMIT_NAME``, :mod:`k25trace.ingest.limits`);
prints each setting's median wall time, CPU and peak RSS of the process tree with its ratio to the first setting,
and checks that every table of each setting's database holds the first setting's rows (``bench_load.compare_tables``:
load times left out). Progress on stderr, figures on stdout.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import bench_load  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("input", type=Path, help="a directory of rank files")
    parser.add_argument("--threads", default="1,3", help="K25TRACE_STORE_THREADS settings, the baseline first")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--no-polars", action="store_true", help="load through cli.run_load (bench_load --no-polars)")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every load (e.g. a worker count)")
    parser.add_argument("--no-warm", action="store_true", help="no uncounted load first (64 ranks: minutes each)")
    args = parser.parse_args()
    bench_load.NO_POLARS = args.no_polars
    paths = sorted(p for p in args.input.iterdir() if p.is_file() and not p.name.startswith("."))
    settings = [s.strip() for s in args.threads.split(",")]
    env = dict(item.split("=", 1) for item in args.env)
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp_name:
        tmp = Path(tmp_name)
        env |= bench_load.bytecode_env(tmp)
        versions = {f"threads={s}": setting_env(s) for s in settings}
        measured, kept = bench_load.measure_load(
            paths, args.runs, tmp, env=env, versions=versions, warm=not args.no_warm
        )
        base = statistics.median(m.wall_s for m in measured[f"threads={settings[0]}"])
        print(f"{len(paths)} files of {args.input}, {args.runs} runs each, interleaved; {' '.join(args.env)}")
        print("| setting | wall (median) | runs | CPU | peak RSS | baseline / this | tables |")
        print("|---|---|---|---|---|---|---|")
        for version, runs in measured.items():
            wall = statistics.median(m.wall_s for m in runs)
            cpu = statistics.median(m.cpu_s for m in runs)
            peak = max(m.peak_mb for m in runs)
            same = (
                "baseline"
                if version == f"threads={settings[0]}"
                else bench_load.compare_tables(kept[version], kept[f"threads={settings[0]}"], "baseline")
            )
            walls = ", ".join(f"{m.wall_s:.1f}" for m in runs)
            ratio = base / wall
            print(f"| {version} | {wall:.2f} s | {walls} | {cpu:.1f} s | {peak / 1024:.2f} GB | {ratio:.2f} | {same} |")


def setting_env(setting: str) -> dict[str, str]:
    """The environment of a setting: ``THREADS[+NAME=VALUE...]`` (store threads, then loader limits); THREADS
    ``default`` leaves the store threads to the loader (everything at once from 12 CPUs: model.files_at_once)."""
    threads, *limits = setting.split("+")
    env = {} if threads == "default" else {"K25TRACE_STORE_THREADS": threads}
    for term in limits:
        name, _, value = term.partition("=")
        env[f"K25TRACE_LIMIT_{name}"] = value
    return env


if __name__ == "__main__":
    main()
