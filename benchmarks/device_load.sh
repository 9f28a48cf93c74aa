#!/usr/bin/env bash
# Issue 33's scaling curve on the device machine (16 CPUs, no network), one call:
#   this tree against the revision exported into .bench-old (git archive REV k25trace queries capture hatch_build.py
#   pyproject.toml | tar -x -C .bench-old), both run from source; the packages the device lacks carried as wheels
#   in .whl (duckdb, orjson, msgspec, isal; pyarrow and numpy are there); the real-structure input tiled there.
# Run from the repository root:  bash benchmarks/device_load.sh OUTDIR [CPU_SETS] [RANKS] [RUNS_ALL]
#   CPU_SETS: taskset lists, default "0-15 0-3 0-1"; RANKS default 8; RUNS_ALL (all-rank loads) default 2;
#   RUNS=n (one-rank loads, default 3), OLD=0 (this tree alone) in the environment.
#   K25TRACE_DECODE_WORKERS=n: the decode workers of every load. The transfer holds 64 MiB: drop
#   .bench-old/k25trace/samples, and carry one Python's wheels (the device's python3 is 3.12).
set -uo pipefail
OUT=${1:?output directory}
SETS=${2:-0-15 0-3 0-1}
RANKS=${3:-8}
RUNS_ALL=${4:-2}
mkdir -p "$OUT"
# .whl may hold wheels for several Pythons: pip takes the ones this Python can use
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  --find-links .whl duckdb orjson msgspec isal || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
  date -u +%FT%TZ; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g | head -2
  python3 -c 'import sys, duckdb, pyarrow; print(sys.version.split()[0], "duckdb", duckdb.__version__, "pyarrow", pyarrow.__version__)'
  python3 -c 'import sys; from pathlib import Path; sys.path.insert(0, "benchmarks"); import bench_load as b
b.build_scanner(Path(".")); b.build_scanner(Path(".bench-old"))'
  ls -l k25trace/ingest/_scan.so .bench-old/k25trace/ingest/_scan.so
} > "$OUT/provenance.txt" 2>&1
cat "$OUT/provenance.txt"
IN=/tmp/k25trace-bench/real-dense-${RANKS}x80mb
t0=$(date +%s)
python3 benchmarks/realstructure.py "$IN" --mix dense --gz-mb 80 --ranks "$RANKS" > "$OUT/input.txt" 2>/dev/null
echo "input: $(ls "$IN" | wc -l) files in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/provenance.txt"
for cpus in $SETS; do
  echo "== taskset -c $cpus" | tee -a "$OUT/bench.txt"
  OLDARG=(--compare-tree .bench-old); [ "${OLD:-1}" = 0 ] && OLDARG=()
  taskset -c "$cpus" python3 benchmarks/bench_load.py --input "$IN" --runs "${RUNS:-3}" --runs-all "$RUNS_ALL" \
    "${OLDARG[@]}" --no-polars --baselines zlib,isal 2>>"$OUT/progress.txt" | tee -a "$OUT/bench.txt"
done
date -u +%T
