#!/usr/bin/env bash
# Issue 33's scaling curve (1, 8, 64 ranks on 2, 4, 16 CPUs) on the device machine, this tree alone, in calls of
# at most 10 minutes each (the machine stays warm between calls made within its idle time: the input is reused).
# Run from the repository root:  bash benchmarks/device_scaling.sh OUTDIR "CPUSET:RANKS ..."
#   e.g. "0-15:8 0-15:64 0-3:8" then "0-1:8 0-1:64 0-3:64"; RANKS 8 runs one rank 3 times, all 8 twice and the
#   zlib and isal baselines; RANKS 64 loads the 64 ranks once. Carry .whl (duckdb, orjson, msgspec, isal wheels for
#   the device's Python 3.12): polars does not fit the transfer, so loads go through cli.run_load and the report
#   timings are left out (bench_load --no-polars). The input: 8 ranks (~24 s there), or 64 when a point asks for
#   them (~190 s; its first 8 are the 8-rank points' input).
# RUNS_ALL=N: loads of the 8 ranks per point (default 2).
# COMPARE=DIR (or a .tgz of it: git archive REV k25trace capture queries hatch_build.py): the 8-rank points also
# load that revision, interleaved, and compare its tables (bench_load --compare-tree).
set -uo pipefail
OUT=${1:?output directory}
POINTS=${2:?points: CPUSET:RANKS ...}
mkdir -p "$OUT"
source benchmarks/device_setup.sh  # the carried wheels installed, the scanner built
COMPARE=${COMPARE:-}
if [ -n "$COMPARE" ] && [ "${COMPARE%.tgz}" != "$COMPARE" ]; then
  mkdir -p /tmp/old && tar -xzf "$COMPARE" -C /tmp/old --strip-components=1 && COMPARE=/tmp/old
fi
IN=/tmp/k25trace-bench/real-dense-64x80mb
IN8=/tmp/k25trace-bench/real-dense-8of64
if [ ! -d "$IN8" ]; then
  {
    date -u +%FT%TZ; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g | head -2
    python3 -c 'import sys, duckdb, pyarrow; print(sys.version.split()[0], "duckdb", duckdb.__version__, "pyarrow", pyarrow.__version__)'
  } > "$OUT/provenance.txt" 2>&1
  t0=$(date +%s)
  case " $POINTS " in
    *:64\ *)  # 64 ranks asked for: make them (~190 s there), and link the first 8
      python3 benchmarks/realstructure.py "$IN" --mix dense --gz-mb 80 --ranks 64 > /dev/null 2>>"$OUT/progress.txt"
      mkdir -p "$IN8"
      for f in $(ls "$IN" | grep -E '^rank[0-7]\.' ); do ln -s "$IN/$f" "$IN8/$f"; done ;;
    *)  # 8 ranks only, ~24 s there: the events of the 64-rank input's first 8 (whose headers say world size 64)
      python3 benchmarks/realstructure.py "$IN8" --mix dense --gz-mb 80 --ranks 8 > /dev/null 2>>"$OUT/progress.txt" ;;
  esac
  echo "input: $(ls "$IN8" | wc -l) files of 8 ranks, in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/provenance.txt"
fi
if [[ " $POINTS " == *:64\ * && ! -d "$IN" ]]; then
  echo "64 ranks asked for after a call that made 8 only: run them in a fresh call, first" >&2
  exit 1
fi
for point in $POINTS; do
  cpus=${point%%:*}
  ranks=${point##*:}
  echo "== taskset -c $cpus, $ranks ranks ($(date -u +%T))" | tee -a "$OUT/bench.txt"
  if [ "$ranks" = 64 ]; then
    args=(--input "$IN" --runs 1 --runs-all 1 --skip-baselines)
  else
    args=(--input "$IN8" --runs 3 --runs-all "${RUNS_ALL:-2}" --baselines zlib,isal ${COMPARE:+--compare-tree "$COMPARE"})
  fi
  taskset -c "$cpus" python3 benchmarks/bench_load.py "${args[@]}" --no-polars --skip-stages \
    2>>"$OUT/progress.txt" | tee -a "$OUT/bench.txt"
done
date -u +%T
