#!/usr/bin/env bash
# Where an 8-rank load's wall time goes on the device machine: profile_load.py --timeline (RUNS loads), then the
# parent sampled by py-spy (only the samples holding the GIL), as collapsed stacks; with OLD (a folder of another
# revision's k25trace, or a .tgz of it), each timeline of this tree is followed by one of OLD, and bench_load.py
# compares the two (1 and 8 ranks, interleaved, tables compared) with zlib on the same file.
# Run from the repository root, carrying .whl (duckdb, orjson, msgspec, isal, py-spy):
#   bash benchmarks/device_timeline.sh OUTDIR [OLD]
set -uo pipefail
OUT=${1:?output directory}
OLD=${2:-}
mkdir -p "$OUT"
# the carried wheels installed, the scanner built (LOCAL=1: this machine's packages and py-spy, to try the script)
[ -n "${LOCAL:-}" ] || source benchmarks/device_setup.sh
if [ -n "$OLD" ] && [ "${OLD%.tgz}" != "$OLD" ]; then
  mkdir -p /tmp/old && tar -xzf "$OLD" -C /tmp/old --strip-components=1 && OLD=/tmp/old
fi
if [ -n "$OLD" ]; then  # its scanner, else it is timed on its slow path
  python3 -c 'import sys; from pathlib import Path; sys.path.insert(0, "benchmarks"); import bench_load as b
b.build_scanner(Path(sys.argv[1]))' "$OLD" || exit 1
fi
SPY=py-spy
if [ -z "${LOCAL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/spy --find-links .whl py-spy
  SPY=/tmp/spy/bin/py-spy
fi
{ date -u +%FT%TZ; nproc; lscpu | grep -E 'Model name|^CPU\(s\)'; free -g | head -2; } > "$OUT/provenance.txt" 2>&1
IN8=${IN8:-/tmp/k25trace-bench/real-dense-8x80mb}  # made here unless it exists
t0=$(date +%s)
[ -d "$IN8" ] ||
  python3 benchmarks/realstructure.py "$IN8" --mix dense --gz-mb 80 --ranks 8 > /dev/null 2>>"$OUT/progress.txt"
echo "input: 8 ranks in $(( $(date +%s) - t0 )) s" | tee -a "$OUT/provenance.txt"
for run in $(seq "${RUNS:-2}"); do
  for tree in new ${OLD:+old}; do
    rm -f /tmp/timeline.duckdb
    path=$PWD; [ "$tree" = old ] && path=$OLD
    PYTHONPATH=$path${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/profile_load.py /tmp/timeline.duckdb "$IN8" \
      --timeline > "$OUT/timeline-$tree-$run.txt" 2>>"$OUT/progress.txt"
    echo "$tree: $(head -2 "$OUT/timeline-$tree-$run.txt" | tr '\n' ' ')"
  done
done
rm -f /tmp/spy.duckdb
"$SPY" record -r 200 -f raw --threads --gil -o "$OUT/spy_gil.txt" -- \
  python3 -m k25trace load "$IN8" --db /tmp/spy.duckdb -q 2>>"$OUT/progress.txt" | tail -1
if [ -n "$OLD" ]; then
  python3 benchmarks/bench_load.py --input "$IN8" --compare-tree "$OLD" --runs "${RUNS_BENCH:-3}" \
    --runs-all "${RUNS_BENCH:-3}" --no-polars --skip-stages --baselines zlib 2>>"$OUT/progress.txt" \
    | tee "$OUT/bench.txt"
fi
date -u +%T
