# Sourced by the device_*.sh benchmarks, from the repository root: the carried wheels (.whl: duckdb, orjson,
# msgspec, isal) installed under /tmp/site, and the compiled scanner built. The scanner is gitignored, so it does
# not travel; without it every load there took the slow path (the scaling curve of 2026-12-04 was measured so).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  --find-links .whl duckdb orjson msgspec isal || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -c 'import sys; from pathlib import Path; sys.path.insert(0, "benchmarks"); import bench_load as b
b.build_scanner(Path("."))' || exit 1
test -f k25trace/ingest/_scan.so || { echo "the scanner did not build"; exit 1; }
