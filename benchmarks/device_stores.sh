#!/usr/bin/env bash
# Files stored at once on the device machine: 8 real-structure ranks loaded with each K25TRACE_STORE_THREADS
# setting, interleaved (benchmarks/bench_stores.py), per CPU set; then, with "64", the 64 ranks loaded once with
# the default settings (bench_load), or once with each setting of SETTINGS64 (bench_stores, tables compared).
# Run from the repository root, carrying .whl (duckdb, orjson, msgspec, isal):
#   bash benchmarks/device_stores.sh OUTDIR "0-15:1,2,3,4 0-3:1,2" [64]
#   SETTINGS64="2,8+RECEIVE_AHEAD_FILES=8+SHARE_FIRST_FILE=0" bash benchmarks/device_stores.sh OUTDIR "0-15:2" 64
# (a K25TRACE_STORE_THREADS setting turns off the all-at-once default of 12 CPUs and more: model.files_at_once)
set -uo pipefail
OUT=${1:?output directory}
POINTS=${2:?points: CPUSET:THREADS,THREADS ...}
mkdir -p "$OUT"
source benchmarks/device_setup.sh  # the carried wheels installed, the scanner built
{ date -u +%FT%TZ; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g | head -2; git log -1 --oneline 2>/dev/null; } \
  > "$OUT/provenance.txt" 2>&1
IN8=/tmp/k25trace-bench/real-dense-8x80mb
IN64=/tmp/k25trace-bench/real-dense-64x80mb
t0=$(date +%s)
python3 benchmarks/realstructure.py "$IN8" --mix dense --gz-mb 80 --ranks 8 > /dev/null 2>>"$OUT/progress.txt"
echo "input: 8 ranks in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/provenance.txt"
for point in $POINTS; do
  cpus=${point%%:*}
  threads=${point##*:}
  echo "== taskset -c $cpus, store threads $threads ($(date -u +%T))" | tee -a "$OUT/bench.txt"
  taskset -c "$cpus" python3 benchmarks/bench_stores.py "$IN8" --threads "$threads" --runs "${RUNS:-2}" --no-polars \
    2>>"$OUT/progress.txt" | tee -a "$OUT/bench.txt"
done
if [ "${3:-}" = 64 ]; then
  t0=$(date +%s)
  python3 benchmarks/realstructure.py "$IN64" --mix dense --gz-mb 80 --ranks 64 > /dev/null 2>>"$OUT/progress.txt"
  echo "input: 64 ranks in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/provenance.txt"
  if [ -n "${SETTINGS64:-}" ]; then
    echo "== 64 ranks, all CPUs, settings $SETTINGS64 ($(date -u +%T))" | tee -a "$OUT/bench.txt"
    python3 benchmarks/bench_stores.py "$IN64" --threads "$SETTINGS64" --runs 1 --no-warm --no-polars \
      2>>"$OUT/progress.txt" | tee -a "$OUT/bench.txt"
  else
    echo "== 64 ranks, all CPUs, default settings ($(date -u +%T))" | tee -a "$OUT/bench.txt"
    python3 benchmarks/bench_load.py --input "$IN64" --runs 1 --runs-all 1 --skip-baselines --no-polars --skip-stages \
      2>>"$OUT/progress.txt" | tee -a "$OUT/bench.txt"
  fi
fi
date -u +%T
