"""Load speed and memory at full size, against baselines measured in the same run on the same file.

    python3 benchmarks/bench_load.py                          # both inputs, 8 ranks each, 3 runs of one rank
    python3 benchmarks/bench_load.py --input real --runs 5 --runs-all 3
    python3 benchmarks/bench_load.py --input DIR --skip-baselines       # any directory of rank files
    python3 benchmarks/bench_load.py --input b200 --compare-rev HEAD~1  # before/after, tables compared

Generated inputs, each ``--ranks`` 80 MB-gz rank files (generated once into --work, then reused):

* ``synthetic``: Kimi-K2.5-shaped TP8 ranks from ``k25trace synth`` (few, large events: ~437 bytes each);
* ``real``: real vLLM traces tiled in time by ``benchmarks/realstructure.py`` (mix ``dense``: the B200 TP8 rank,
  the MI300X piecewise-graph trace, the A100 NCCL trace; ~206 bytes/event, mostly python_function, cpu_op,
  cuda_runtime and ac2g events, as real vLLM traces are);
* ``b200``: the real vLLM B200 TP8 eager rank alone, tiled (mix ``b200``: 5.2 CPU ops and 20 Python functions per
  kernel, 578 bytes/event): a real vLLM trace with many CPU ops per kernel.

``--input DIR`` takes any directory of rank files instead.

For each input it prints: one rank loaded ``--runs`` times (median, min-max) with events/s, MB/s of JSON, CPU
seconds per million events (user + system of the whole process tree) and peak RSS of the tree (decode workers
included); all ranks loaded ``--runs-all`` times; then, on the same rank file and in the same run, the baselines:
zlib and isal decompression alone (``--baseline-runs`` each, median), msgspec decoding of every event into a minimal
struct (the JSON parsing floor of any Python loader: no columns, no database), ``orjson.loads`` of the whole file
(TraceLens's loader), and DuckDB ``read_json`` + ``unnest``. Ratios are baseline time / k25trace time; the load's
own ratio to zlib (the decompression floor) is printed too. One instrumented load of the rank (``profile_load.py``)
gives each stage's share of the load, layer segmentation's among them. ``--compare-rev REV`` loads with that
revision too (a git worktree under --work), interleaved run by run, and checks that every table of its database
holds the same rows as this tree's (``except all`` both ways; load times and versions left out). Progress on stderr,
figures on stdout.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))  # this checkout's k25trace, not an installed one
import _measure  # noqa: E402

PY = sys.executable
HERE = Path(__file__).resolve().parent


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def json_bytes(path: Path) -> int:
    from isal import igzip

    n = 0
    with igzip.open(path, "rb") as fh:
        while block := fh.read(16 << 20):
            n += len(block)
    return n


# `k25trace load -q` through its own function (k25trace.cli.run_load), where polars is missing (the device machine:
# its wheel does not fit the transfer). A load asks k25trace.analysis.load_warnings for its warnings, without polars;
# revisions before it asked the report module (polars): the stub leaves their warnings out
NO_POLARS_LOAD = """
import sys, types
from pathlib import Path
stub = types.ModuleType("k25trace.analysis.report")
stub.far_activity_warnings = stub.run_warnings = lambda *args: []
sys.modules["k25trace.analysis.report"] = stub
import k25trace.analysis
k25trace.analysis.report = stub
from k25trace.cli import run_load
con, failed = run_load(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]], quiet=True)
con.close()
sys.exit(1 if failed else 0)
"""
NO_POLARS = False  # --no-polars


def load_cmd(paths: list[Path], db: Path) -> list[str]:
    if NO_POLARS:
        return [PY, "-c", NO_POLARS_LOAD, str(db), *map(str, paths)]
    return [PY, "-m", "k25trace", "load", *map(str, paths), "--db", str(db), "-q"]


def bytecode_env(work: Path) -> dict[str, str]:
    """Every measured command reads and writes its bytecode cache under ``work`` (PYTHONPYCACHEPREFIX), even where
    PYTHONDONTWRITEBYTECODE is set (it is on some CI images: then every process, decode workers included,
    compiles every module it imports, numpy and pyarrow too, ~0.5 s of CPU each). A normal install has the cache:
    this measures that, without writing into site-packages."""
    return {"PYTHONPYCACHEPREFIX": str(work / "pycache"), "PYTHONDONTWRITEBYTECODE": ""}


def warm_up(paths: list[Path], tmp: Path, env: dict[str, str], name: str) -> None:
    """One load that is not counted: it fills the bytecode cache and the page cache."""
    db = tmp / f"{name}-warmup.duckdb"
    _measure.run(load_cmd(paths, db), env=env, cwd=tmp)
    db.unlink()
    Path(str(db) + ".wal").unlink(missing_ok=True)


def measure_load(
    paths: list[Path],
    runs: int,
    tmp: Path,
    *,
    name: str = "bench",
    env: dict[str, str] | None = None,
    versions: dict[str, dict[str, str]] | None = None,
    warm: bool = True,
) -> tuple[dict[str, list[_measure.Measured]], dict[str, Path]]:
    """``runs`` loads of ``paths`` into fresh databases in ``tmp`` (the last one of each version kept), per
    version (name -> extra environment; default one, ``name``), interleaved run by run so that a machine that
    slows down or speeds up meanwhile does so for every version alike. ``warm``: one uncounted load first."""
    versions = versions or {name: {}}
    out: dict[str, list[_measure.Measured]] = {v: [] for v in versions}
    kept: dict[str, Path] = {}
    for version, extra in versions.items() if warm else ():
        warm_up(paths, tmp, {**(env or {}), **extra}, version)
    for i in range(runs):
        for version, extra in versions.items():
            db = tmp / f"{version}-{len(paths)}-{i}.duckdb"
            # run in tmp: from the checkout, `python -m k25trace` would import the checkout's code whatever PYTHONPATH
            m = _measure.run(load_cmd(paths, db), env={**(env or {}), **extra}, cwd=tmp)
            out[version].append(m)
            log(
                f"  {version} run {i + 1}: {m.wall_s:.2f} s wall, {m.cpu_s:.1f} s CPU, peak RSS {m.peak_mb:.0f} MB "
                f"({m.peak_parts})"
            )
            if i == runs - 1:
                kept[version] = db
                continue
            db.unlink()
            Path(str(db) + ".wal").unlink(missing_ok=True)
    return out, kept


BASELINES = {
    # every gzip member (a rank file of realstructure.py is two: its header, then the shared body). Each output
    # is held until the next one is made, as any reader of the text holds it: freed at once, a new output buffer
    # is fresh memory every time, and on this project's machine (a VM, where a page touched first costs ~7 us)
    # the figure doubled from page faults (3.4-3.9 s against 1.65-2.0 s, 1.6-1.9 s of system time against 0.1 s;
    # measured 2026-12-08: the figures before that day are of that slower form, "zlib, fresh outputs" below)
    "zlib decompress": """
import sys, zlib
d = zlib.decompressobj(31)
n = 0
out = b''
with open(sys.argv[1], 'rb') as fh:
    while chunk := fh.read(256 << 10):
        while chunk:
            out = d.decompress(chunk)
            n += len(out)
            chunk = d.unused_data
            if d.eof:
                d = zlib.decompressobj(31)
print(n)
""",
    # each output freed at once: the form of "zlib decompress" before 2026-12-08
    "zlib, fresh outputs": """
import sys, zlib
d = zlib.decompressobj(31)
n = 0
with open(sys.argv[1], 'rb') as fh:
    while chunk := fh.read(16 << 20):
        while chunk:
            n += len(d.decompress(chunk))
            chunk = d.unused_data
            if d.eof:
                d = zlib.decompressobj(31)
print(n)
""",
    "isal decompress": """
import sys
from isal import igzip
with igzip.open(sys.argv[1], 'rb') as fh:
    while fh.read(16 << 20):
        pass
""",
    "msgspec minimal decode": """
import sys, msgspec
from pathlib import Path
from k25trace.ingest import limits, stream
class E(msgspec.Struct):
    cat: str | None = None
dec = msgspec.json.Decoder(list[E])
path = Path(sys.argv[1])
splitter, reader = stream._Splitter(path), stream._Reader(path)
n = 0
while block := reader.read(limits.BLOCK_SIZE):
    chunk = splitter.feed(block)
    if chunk:
        n += len(dec.decode(chunk))
tail, _ = splitter.finish()
n += len(dec.decode(tail)) if tail else 0
print(n)
""",
    "orjson.loads whole file": """
import sys, orjson
from isal import igzip
with igzip.open(sys.argv[1], 'rb') as fh:
    data = orjson.loads(fh.read())
print(len(data['traceEvents']))
""",
    "DuckDB read_json+unnest": """
import sys, duckdb
con = duckdb.connect()
n = con.execute("select count(*) from (select unnest(traceEvents) from read_json(?, maximum_object_size=4000000000))",
                [sys.argv[1]]).fetchall()[0][0]
print(n)
""",
}


def report_timings(db: Path, ranks: int) -> None:
    """The cross-rank reports over all ranks: median of 5 in-process runs each, over the decode steps, or every step
    when the input has no decode step (the real-structure input's sources are prefill and mixed traces)."""
    import time

    from k25trace import db as k25db
    from k25trace.analysis import report
    from k25trace.vocab import ALL

    con = k25db.connect(db, read_only=True)
    phase = "decode" if report.breakdown(con, by="batch", phase="decode").height else ALL
    for view in ("batch", "comm", "rank-comm", "idle"):
        times = []
        for _ in range(5):
            start = time.perf_counter()
            frame = report.breakdown(con, by=view, phase=phase)
            times.append(time.perf_counter() - start)
        print(
            f"report --by {view:9s} --phase {phase} over {ranks} ranks: median "
            f"{statistics.median(times) * 1000:.0f} ms (5 runs, {frame.height} rows)"
        )
    con.close()


# columns that differ between two loads of the same files whatever the loader (when, and by which version)
VOLATILE = {"traces": ("loaded_at", "loader_version"), "allreduce_bench": ("measured_at",)}


def compare_tables(new: Path, old: Path, rev: str) -> str:
    """Whether every base table of the two databases holds the same rows (``except all`` both ways, so duplicates
    count; the columns in VOLATILE left out, and meta's schema_version); one line, or the tables that differ and
    by how many rows. Tables of one side only (a newer schema's) are named, not compared."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"attach '{new}' as a (read_only)")
    con.execute(f"attach '{old}' as b (read_only)")
    listed = {
        side: {
            t
            for (t,) in con.execute(
                "select table_name from duckdb_tables() where database_name = ? and schema_name = 'main'", [side]
            ).fetchall()
        }
        for side in ("a", "b")
    }
    tables = sorted(listed["a"] & listed["b"])
    differ = []
    for table in tables:
        cols = [d[0] for d in con.execute(f"select * from a.main.{table} limit 0").description or []]
        shown = ", ".join(f'"{c}"' for c in cols if c not in VOLATILE.get(table, ()))
        where = " where key <> 'schema_version'" if table == "meta" else ""
        try:
            extra, missing = (
                con.execute(
                    f"select count(*) from (select {shown} from {x}.main.{table}{where} except all "
                    f"select {shown} from {y}.main.{table}{where})"
                ).fetchall()[0][0]
                for x, y in (("a", "b"), ("b", "a"))
            )
        except duckdb.Error as exc:
            differ.append(f"{table} ({str(exc).splitlines()[0]})")
            continue
        if extra or missing:
            differ.append(f"{table} (+{extra:,} / -{missing:,} rows)")
    con.close()
    only = "".join(
        f"; only {who}: {', '.join(sorted(listed[side] - listed[other]))}"
        for side, other, who in (("a", "b", "in this tree"), ("b", "a", f"in {rev}"))
        if listed[side] - listed[other]
    )
    if differ:
        return f"  TABLES DIFFER from k25trace {rev}: " + "; ".join(differ) + only
    return f"  tables identical to k25trace {rev}'s: all {len(tables)} they share (except all both ways){only}"


def stage_shares(one: Path, tmp: Path, env: dict[str, str]) -> str:
    """One instrumented load of ``one`` (``profile_load.py``, in this process's checkout): the stages' shares of
    its wall time, the layer segmentation's among them (issue 32: at most 10 %)."""
    import json

    db = tmp / "profile.duckdb"
    out = subprocess.run(
        [PY, str(HERE / "profile_load.py"), str(db), str(one), "--json"],
        check=True,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            **env,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")])),
        },
        cwd=tmp,
    ).stdout
    db.unlink()
    got = json.loads(out.strip().splitlines()[-1])
    total, times = got["total"], got["times"]
    parts = ", ".join(
        f"{key[1:]} {times.get(key, 0):.2f} s ({100 * times.get(key, 0) / total:.1f} %)"
        for key in ("@stream", "@commit_file", "@steps", "@layers", "@build_runs")
    )
    top = ", ".join(f"{k} {v:.2f}" for k, v in sorted(times.items(), key=lambda kv: -kv[1]) if not k.startswith("@"))
    return f"stages of one instrumented load ({total:.2f} s): {parts}\n  queries (s): {top[:400]}"


def worktree(rev: str, work: Path) -> Path:
    """A checkout of ``rev`` (run from source with PYTHONPATH: its own code and queries, this Python's packages),
    named by its commit (``HEAD`` moves), with its compiled scanner built as its install would build it."""
    commit = subprocess.run(
        ["git", "-C", str(HERE.parent), "rev-parse", "--short=12", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    path = work / f"rev-{commit}"
    if not path.exists():
        subprocess.run(
            ["git", "-C", str(HERE.parent), "worktree", "add", "--detach", str(path), commit],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    build_scanner(path)
    return path


def build_scanner(tree: Path) -> None:
    """Compile a checkout's scanner (``k25trace/ingest/_scan.c``, where the revision has one) with that revision's
    own build hook, as ``pip install`` would; without it the old revision would be measured on its slow path.
    hatchling is only needed by pip: a stand-in base class is enough to import the hook's module."""
    import importlib.util
    import types

    source = tree / "k25trace" / "ingest" / "_scan.c"
    target = source.with_suffix(".so")
    if not source.exists() or target.exists():
        return
    stubs = {}
    for name in (
        "hatchling",
        "hatchling.builders",
        "hatchling.builders.hooks",
        "hatchling.builders.hooks.plugin",
        "hatchling.builders.hooks.plugin.interface",
    ):
        stubs[name] = sys.modules.get(name)
        sys.modules[name] = types.ModuleType(name)
    sys.modules["hatchling.builders.hooks.plugin.interface"].BuildHookInterface = object  # type: ignore[attr-defined]
    try:
        spec = importlib.util.spec_from_file_location(f"_hatch_build_{tree.name}", tree / "hatch_build.py")
        assert spec is not None and spec.loader is not None
        hook = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hook)
        log(f"building the scanner of {tree.name} ...")
        if hook.compile_scanner(source, target) is None:
            log(f"  {tree.name}: the scanner did not build: that revision is measured without it")
    finally:
        for name, module in stubs.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def ensure_input(kind: str, work: Path, ranks: int, gz_mb: float) -> Path:
    """The input ``kind`` (a directory of rank files is itself), generated into ``work`` the first time."""
    if kind not in INPUTS:
        return Path(kind)
    if kind == "synthetic":
        folder = work / f"kimi-tp{ranks}-{int(gz_mb)}mb"
        if not any(folder.glob("*.pt.trace.json.gz")):
            log(f"generating {ranks} synthetic ranks of {gz_mb} MB gz into {folder} ...")
            from k25trace.synth import generate

            generate(
                folder,
                ranks=ranks,
                target_gz_mb=gz_mb,
                workers=2,
                delays=[(3, 200.0, None, None, 7)],
                clock_offsets_us=800.0,
            )
        return folder
    mix = "b200" if kind == "b200" else "dense"
    folder = work / f"real-{mix}-{ranks}x{int(gz_mb)}mb"
    if len(list(folder.glob("*.pt.trace.json.gz"))) < ranks:
        log(f"tiling {ranks} real-structure ranks ({mix}) of {gz_mb} MB gz into {folder} ...")
        subprocess.run(
            [
                PY,
                str(HERE / "realstructure.py"),
                str(folder),
                "--mix",
                mix,
                "--gz-mb",
                str(gz_mb),
                "--ranks",
                str(ranks),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    return folder


INPUTS = ("real", "b200", "synthetic")


def all_ranks(
    label: str,
    files: list[Path],
    events: int,
    tmp: Path,
    env: dict[str, str],
    versions: dict[str, dict[str, str]],
    args: argparse.Namespace,
) -> None:
    """All ranks loaded ``--runs-all`` times (the other revision interleaved), its tables compared, the reports."""
    log(f"[{label}] all {len(files)} ranks ...")
    all_old = {"old": versions["old"]} if "old" in versions else {}  # interleaved too, run by run
    all_versions, dbs_all = measure_load(
        files,
        args.runs_all,
        tmp,
        env=env,
        warm=False,  # warm already
        versions={"bench": versions["new"], **all_old},
    )
    runs_all = all_versions["bench"]
    db_all = dbs_all["bench"]
    if "old" in dbs_all:
        print(compare_tables(db_all, dbs_all["old"], args.compare_rev))
    walls_all = [m.wall_s for m in runs_all]
    all_wall = statistics.median(walls_all)
    cpu_all = statistics.median(m.cpu_s for m in runs_all)
    print(
        f"load {len(files)} ranks: median {all_wall:.2f} s wall "
        f"({', '.join(f'{w:.2f}' for w in walls_all)}), "
        f"{cpu_all:.1f} s CPU = {cpu_all / (len(files) * events / 1e6):.2f} s per M events, "
        f"peak RSS {max(m.peak_mb for m in runs_all):.0f} MB, "
        f"{len(files) * events / all_wall / 1e6:.2f} M events/s"
    )
    if all_old:
        old_all = all_versions["old"]
        old_all_wall = statistics.median(m.wall_s for m in old_all)
        print(
            f"  k25trace {args.compare_rev}, {len(files)} ranks (interleaved): median {old_all_wall:.2f} s "
            f"wall ({', '.join(f'{m.wall_s:.2f}' for m in old_all)}), "
            f"{statistics.median(m.cpu_s for m in old_all):.1f} s CPU, peak RSS "
            f"{max(m.peak_mb for m in old_all):.0f} MB   ratio {old_all_wall / all_wall:5.2f} wall"
        )
    if not args.skip_reports:
        report_timings(db_all, len(files))


def baselines(label: str, one: Path, one_wall: float, tmp: Path, env: dict[str, str], args: argparse.Namespace) -> None:
    """The baselines on the same rank file, in the same run (``--baselines`` picks some)."""
    print(f"baselines on the same file ({one.name}), same run; ratio = baseline / k25trace 1-rank median:")
    for name, code in BASELINES.items():
        if name.startswith("DuckDB") and args.skip_duckdb:
            continue
        if args.baselines and not any(name.startswith(b.strip()) for b in args.baselines.split(",")):
            continue
        runs = 1 if name.startswith(("orjson", "DuckDB")) else max(1, args.baseline_runs)  # the slow ones: once
        log(f"[{label}] baseline {name} ({runs} runs) ...")
        try:
            ms = [_measure.run([PY, "-c", code, str(one)], env=env, cwd=tmp) for _ in range(runs)]
        except RuntimeError as exc:
            print(f"  {name[:26]:26s} failed: {str(exc)[-200:]}")
            continue
        wall = statistics.median(m.wall_s for m in ms)
        spread = f" ({min(m.wall_s for m in ms):.2f}-{max(m.wall_s for m in ms):.2f})" if runs > 1 else ""
        print(
            f"  {name[:26]:26s} {wall:7.2f} s wall{spread} {statistics.median(m.cpu_s for m in ms):7.1f} s CPU  "
            f"peak RSS {max(m.peak_mb for m in ms):6.0f} MB   ratio {wall / one_wall:5.2f}"
        )
        if name == "zlib decompress":
            print(f"  k25trace 1 rank / zlib decompression of the same file: {one_wall / wall:.2f}x (goal <= 2)")


def bench_input(label: str, traces: Path, args: argparse.Namespace) -> None:
    files = sorted(p for p in traces.iterdir() if p.name.endswith((".json.gz", ".json")) and p.is_file())
    if not files:
        raise SystemExit(f"{traces}: no rank files (*.json.gz, *.json)")
    one = files[0]
    gz_mb = one.stat().st_size / 1e6
    raw_mb = json_bytes(one) / 1e6
    print(f"\n== {label}: {traces} ({len(files)} ranks)")
    with tempfile.TemporaryDirectory(dir=args.work) as tmpdir:
        tmp = Path(tmpdir)
        log(f"[{label}] one rank: {one.name} ({gz_mb:.1f} MB gz, {raw_mb:.0f} MB JSON)")
        env = bytecode_env(args.work)
        # this checkout's code first, as for the old revision below: run in tmp, `python -m k25trace` would import
        # an installed (not editable) k25trace otherwise, whatever this checkout holds
        versions: dict[str, dict[str, str]] = {
            "new": {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))}
        }
        build_scanner(HERE.parent)  # gitignored: a copy of the tree (the device machine's) has none until built
        if args.compare_tree:
            build_scanner(args.compare_tree)
            args.compare_rev = args.compare_rev or args.compare_tree.name
        if args.compare_rev:
            tree = args.compare_tree or worktree(args.compare_rev, args.work)
            # its code first, then whatever this process finds its packages by
            versions["old"] = {"PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
            log(f"[{label}] interleaved with k25trace {args.compare_rev} (old) ...")
        by_version, dbs = measure_load([one], args.runs, tmp, env=env, versions=versions)
        runs = by_version["new"]
        db = dbs["new"]
        if "old" in dbs:
            print(compare_tables(db, dbs["old"], args.compare_rev))
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        events = con.execute("select sum(event_count) from traces").fetchall()[0][0]
        con.close()
        walls = [m.wall_s for m in runs]
        one_wall = statistics.median(walls)
        cpu = statistics.median(m.cpu_s for m in runs)
        print(
            f"load 1 rank:  median {one_wall:.2f} s wall "
            f"(min {min(walls):.2f}, max {max(walls):.2f}, {len(walls)} runs), "
            f"{cpu:.1f} s CPU = {cpu / (events / 1e6):.2f} s per M events, "
            f"peak RSS {max(m.peak_mb for m in runs):.0f} MB, "
            f"{events / one_wall / 1e6:.2f} M events/s, {raw_mb / one_wall:.0f} MB/s JSON  "
            f"({events:,} events, {raw_mb * 1e6 / events:.0f} bytes/event, {gz_mb:.1f} MB gz)"
        )
        if args.runs_all:
            all_ranks(label, files, events, tmp, env, versions, args)
        if args.compare_rev:
            old_runs = by_version["old"]
            old_wall = statistics.median(m.wall_s for m in old_runs)
            old_cpu = statistics.median(m.cpu_s for m in old_runs)
            print(
                f"  k25trace {args.compare_rev} (interleaved with the runs above): median {old_wall:.2f} s wall "
                f"({', '.join(f'{m.wall_s:.2f}' for m in old_runs)}), {old_cpu:.1f} s CPU, peak RSS "
                f"{max(m.peak_mb for m in old_runs):.0f} MB   ratio {old_wall / one_wall:5.2f} wall, "
                f"{old_cpu / cpu:5.2f} CPU"
            )
        if not args.skip_stages:
            print(stage_shares(one, tmp, env))
        if args.skip_baselines:
            return
        baselines(label, one, one_wall, tmp, env, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--input",
        default="both",
        metavar="INPUT",
        help="both (real and synthetic), real (the dense real-structure mix), b200 (the vLLM B200 eager rank tiled: "
        "a real vLLM trace with many CPU ops per kernel), synthetic, or a directory of rank files",
    )
    parser.add_argument("--traces", type=Path, help="the same as --input DIR")
    parser.add_argument(
        "--compare-tree",
        type=Path,
        metavar="DIR",
        help="like --compare-rev, with that revision's files in DIR (git archive REV k25trace queries capture "
        "hatch_build.py "
        "| tar -x -C DIR): where there is no git repository (the device machine)",
    )
    parser.add_argument(
        "--no-polars",
        action="store_true",
        help="load through k25trace.cli.run_load without the report module's after-load warnings (no polars "
        "needed); implies --skip-reports",
    )
    parser.add_argument("--skip-reports", action="store_true", help="skip the report timings (they need polars)")
    parser.add_argument("--skip-stages", action="store_true", help="skip the instrumented load (stage shares)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "k25trace-bench")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--gz-mb", type=float, default=80.0)
    parser.add_argument("--runs", type=int, default=3, help="runs of the one-rank load (median reported)")
    parser.add_argument("--runs-all", type=int, default=1, help="runs of the all-ranks load (0: skip)")
    parser.add_argument("--skip-baselines", action="store_true")
    parser.add_argument("--baseline-runs", type=int, default=3, help="runs of each fast baseline (median reported)")
    parser.add_argument(
        "--baselines", metavar="NAMES", help="only these baselines (comma-separated name starts: zlib,isal,msgspec)"
    )
    parser.add_argument("--skip-duckdb", action="store_true", help="skip the DuckDB read_json baseline (slow, 5 GB)")
    parser.add_argument(
        "--compare-rev",
        metavar="REV",
        help="also load with k25trace at this git revision "
        "(a worktree in --work; the same files, the same run, one rank and all ranks): the "
        "before/after of a change",
    )
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.no_polars:
        global NO_POLARS
        NO_POLARS = args.skip_reports = True
    if args.traces is not None:
        args.input = str(args.traces)
    if args.input not in ("both", *INPUTS) and not Path(args.input).is_dir():
        parser.error(f"--input {args.input}: neither {', '.join(('both', *INPUTS))} nor a directory")
    for kind in ("real", "synthetic") if args.input == "both" else (args.input,):
        folder = ensure_input(kind, args.work, args.ranks, args.gz_mb)
        bench_input(kind if kind in INPUTS else folder.name, folder, args)


if __name__ == "__main__":
    main()
