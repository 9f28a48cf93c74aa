"""Benchmark the TUI: first paint of the overview, next/previous step latency, opening a kernel.

    python3 benchmarks/bench_tui.py [--runs 5] [--moves 20] [--steps 20]   # synthetic Kimi-K2.5 TP8, built once
    python3 benchmarks/bench_tui.py --db PATH                               # a database of your own (e.g. bigger)

Without ``--db`` the database is built (once, cached under the temporary directory, keyed by ``--steps``) from
the synthetic generator, ``k25trace synth --ranks 8``: a Kimi-K2.5-shaped TP8 run of 8 ranks, three decode batch
sizes (1, 64, 256), each with a prefill step, ``--steps`` decode steps and an empty step; about 1,650 GPU
activities per decode step and rank. ``--db PATH`` measures that database instead (it is built there from the
generator when the file does not exist).

``--opens`` measures what a new user meets instead: each run is a new process (``python -m``-like: the imports
count), timed from the moment it was spawned. First paint = the overview painted with its data; findings = the
findings panel filled. Then, each ``--rest`` seconds after the screen before is painted (a reader's
glance; 0: at once; never waiting for the app to be idle: the overview's findings may still be computing), Enter on
the first trace (its steps), Enter on the first step, Enter on its first kernel, Escape twice and ``c`` (the
collectives): each from the key press to the screen painted with its data. The overview and the steps screen read
ahead the screen under their cursor once it rests there 0.15 s (``PREFETCH_AFTER_S``): a rest shorter than that
measures the fetch.

``--compare-rev REV`` also measures k25trace at that git revision (a worktree, as ``bench_load.py --compare-rev``
makes) on the same database in the same run: every run of either version is then its own process, the two
alternating, and the figures of both are printed with their ratio.

Each run starts the real app headless (Textual's ``run_test``), opens a decode step of the first trace and then
presses ``n`` ``--moves`` times and ``p`` as often. The latency of a move is from the key press to the step screen
painted with that step's data: the app is not instrumented; a Textual *message hook* (:class:`PaintClock`, here)
sees each typed result message as it reaches its screen and stamps the time after the refresh that follows it.
The next key is pressed once the step is painted and the app is idle again (a reader looks at a step before
moving on); ``--back-to-back`` presses it as soon as the step is painted. Figures: median and p90 over all moves
of all runs, each run's median, and the median of the runs' medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

STEP_TARGET_P90_MS = 16.0  # issue 33
FIRST_PAINT_TARGET_S = 0.5  # issue 33 (from the spawn: --opens)


def build_synthetic_db(path: Path, *, ranks: int, steps: int) -> None:
    """Generate a Kimi-K2.5 TP-``ranks`` run with ``k25trace synth`` and load it into ``path``."""
    from k25trace import pipeline

    with tempfile.TemporaryDirectory(prefix="k25trace-bench-tui-") as tmp:
        traces = Path(tmp) / "traces"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "k25trace",
                "synth",
                "--out",
                str(traces),
                "--ranks",
                str(ranks),
                "--steps",
                str(steps),
                "--workers",
                "2",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        con = pipeline.connect(path)
        try:
            results, _ = pipeline.load_paths(con, [traces])
        finally:
            con.close()
    failed = [r for r in results if r.status != "loaded"]
    if failed:
        path.unlink(missing_ok=True)
        raise SystemExit(f"loading the synthetic traces failed: {failed}")


@dataclass
class PaintClock:
    """When each screen was painted with its data, seen from outside the app.

    :meth:`hook` is Textual's ``message_hook`` (``App.run_test(message_hook=...)``): it is called for every
    message as it reaches its receiver, just before the handler runs. For a typed result message it schedules a
    callback after the next refresh, the one that draws what the handler put in the widgets, and the callback
    records ``(what, key, time)``: ``key`` is the (trace_id, step_index) of a step, else None.
    """

    app: Any = None
    paints: list[tuple[str, Any, float, float]] = field(default_factory=list)
    """(what, key, wall time, CPU time of the UI thread) per paint."""

    def hook(self, message: Any) -> None:
        from k25trace.tui import messages

        what: str | None = None
        key: Any = None
        if isinstance(message, messages.StepLoaded):
            what = "step"
            if message.result is not None:
                key = (message.result.header["trace_id"], message.result.header["step_index"])
        elif isinstance(message, messages.OverviewLoaded):
            what = "overview"
        elif isinstance(message, messages.KernelLoaded):
            what = "kernel"
        if what is not None and self.app is not None:
            self.app.call_after_refresh(
                lambda: self.paints.append((what, key, time.perf_counter(), time.thread_time()))
            )

    async def wait_for(
        self, pilot: Any, what: str, key: Any = None, *, after: int = 0, timeout: float = 60.0
    ) -> tuple[float, float]:
        """The wall and UI-thread CPU times of the first paint of ``what`` (with ``key``, when given) among the paints
        from index ``after``."""
        deadline = time.perf_counter() + timeout
        while True:
            for w, k, t, cpu in self.paints[after:]:
                if w == what and (key is None or k == key):
                    return t, cpu
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{what} {key} was not painted within {timeout} s")
            await asyncio.sleep(0.001)


async def wait_idle(app: Any) -> None:
    """Every worker finished (neighbour prefetches included) and its messages handled."""
    from textual.worker import WorkerState

    while True:
        await app.workers.wait_for_complete()
        await asyncio.sleep(0.01)
        if not any(w.state in (WorkerState.PENDING, WorkerState.RUNNING) for w in app.workers):
            return


def pick_start(db_path: Path, moves: int) -> tuple[int, int, list[int]]:
    """The first trace, a decode step to start from and the step indexes that ``moves`` presses of n visit."""
    import duckdb

    con = duckdb.connect(str(db_path), read_only=True)
    try:
        (trace_id,) = con.execute("select min(trace_id) from steps").fetchone()
        indexes = [
            i
            for (i,) in con.execute(
                "select step_index from steps where trace_id = ? order by step_index", [trace_id]
            ).fetchall()
        ]
        decode = [
            i
            for (i,) in con.execute(
                "select step_index from steps where trace_id = ? and phase = 'decode' order by step_index", [trace_id]
            ).fetchall()
        ]
    finally:
        con.close()
    if len(indexes) < moves + 1:
        raise SystemExit(f"trace {trace_id} has {len(indexes)} steps; --moves {moves} needs {moves + 1}")
    start = decode[0] if decode else indexes[0]
    position = min(indexes.index(start), len(indexes) - 1 - moves)
    return trace_id, indexes[position], indexes[position : position + moves + 1]


@dataclass
class RunResult:
    first_paint_s: float
    next_ms: list[float]
    prev_ms: list[float]
    cpu_ms: list[float]
    """CPU time of the UI thread from each key press to its step painted (both directions)."""
    kernel_ms: float


async def measure(db_path: Path, moves: int, *, back_to_back: bool) -> RunResult:
    """One run of the app: the first paint, ``moves`` × n then ``moves`` × p, then Enter on a kernel."""
    from k25trace.tui.app import K25TraceApp
    from k25trace.tui.messages import OpenStep

    trace_id, start, path = pick_start(db_path, moves)
    clock = PaintClock()
    started = time.perf_counter()
    app = K25TraceApp(db_path)
    clock.app = app
    async with app.run_test(size=(150, 48), message_hook=clock.hook) as pilot:
        first_paint = (await clock.wait_for(pilot, "overview"))[0] - started
        await wait_idle(app)  # the decode breakdown, still computing after the first paint
        app.post_message(OpenStep(trace_id, start))
        await clock.wait_for(pilot, "step", (trace_id, start))
        await wait_idle(app)

        cpu_ms: list[float] = []

        async def move(key: str, target: int) -> float:
            if not back_to_back:
                await wait_idle(app)
            after = len(clock.paints)
            pressed, cpu = time.perf_counter(), time.thread_time()
            await pilot.press(key)
            painted, painted_cpu = await clock.wait_for(pilot, "step", (trace_id, target), after=after)
            cpu_ms.append((painted_cpu - cpu) * 1000)
            return (painted - pressed) * 1000

        next_ms = [await move("n", target) for target in path[1:]]
        prev_ms = [await move("p", target) for target in reversed(path[:-1])]
        await wait_idle(app)
        after = len(clock.paints)
        pressed = time.perf_counter()
        await pilot.press("enter")  # the first kernel of the step
        kernel_ms = ((await clock.wait_for(pilot, "kernel", after=after))[0] - pressed) * 1000
    return RunResult(first_paint, next_ms, prev_ms, cpu_ms, kernel_ms)


OPENS = ("overview", "findings", "steps", "step", "kernel", "collectives")
"""What --opens times: the first two from the process's spawn, the others from their key press."""


async def measure_opens(db_path: Path, spawned: float, rest: float = 0.5) -> dict[str, float]:
    """One new user's session (this process was spawned at wall time ``spawned``; ``rest`` seconds between a paint
    and the next key): seconds per :data:`OPENS`."""
    from k25trace.tui.app import K25TraceApp

    painted: list[tuple[str, float]] = []
    app = K25TraceApp(db_path)

    def hook(message: Any) -> None:
        name = type(message).__name__
        if name.endswith("Loaded"):
            app.call_after_refresh(lambda: painted.append((name, time.time())))

    async def seen(name: str, after: int = 0, timeout: float = 300.0) -> float:
        deadline = time.time() + timeout
        while time.time() < deadline:
            for n, t in painted[after:]:
                if n == name:
                    return t
            await asyncio.sleep(0.001)
        raise TimeoutError(f"{name} was not painted within {timeout} s")

    async def press(pilot: Any, key: str, name: str) -> float:
        await asyncio.sleep(rest)
        after, pressed = len(painted), time.time()
        await pilot.press(key)
        return await seen(name, after) - pressed

    out: dict[str, float] = {}
    async with app.run_test(size=(120, 40), message_hook=hook) as pilot:
        out["overview"] = await seen("OverviewLoaded") - spawned
        out["steps"] = await press(pilot, "enter", "StepsLoaded")
        out["step"] = await press(pilot, "enter", "StepLoaded")
        out["kernel"] = await press(pilot, "enter", "KernelLoaded")
        await pilot.press("escape", "escape")
        out["collectives"] = await press(pilot, "c", "CollectivesLoaded")
        out["findings"] = await seen("FindingsLoaded") - spawned
    return out


def run_opens(tree: Path, db_path: Path, rest: float = 0.5) -> dict[str, float]:
    """One --opens run in a new process with the k25trace of ``tree``."""
    return run_child(tree, db_path, ["--rest", str(rest), "--one-opens"], {"K25TRACE_BENCH_SPAWNED": repr(time.time())})


def print_opens(runs: list[dict[str, float]], label: str, rest: float) -> None:
    print(f"{label}a new user's first opens, median of {len(runs)} runs (min–max), {rest} s between screens:")
    for what in OPENS:
        values = [r[what] for r in runs]
        since = "from spawn" if what in ("overview", "findings") else "from the key"
        print(f"  {what:<12} {statistics.median(values):7.3f} s  ({min(values):.3f}–{max(values):.3f})  {since}")


def opens_main(args: argparse.Namespace, db_path: Path) -> None:
    """--opens: each run a new process; with --compare-rev the two versions alternate."""
    old_tree = None
    if args.compare_rev:
        sys.path.insert(0, str(HERE))
        from bench_load import worktree

        old_tree = worktree(args.compare_rev, args.work)
    runs: list[dict[str, float]] = []
    old_runs: list[dict[str, float]] = []
    for i in range(args.runs):
        order = [REPO] if old_tree is None else ([REPO, old_tree] if i % 2 == 0 else [old_tree, REPO])
        for tree in order:
            got = run_opens(tree, db_path, args.rest)
            (runs if tree == REPO else old_runs).append(got)
            who = "this tree" if tree == REPO else args.compare_rev
            print(f"  run {i + 1} ({who}): " + ", ".join(f"{k} {got[k]:.3f} s" for k in OPENS), flush=True)
    print_opens(runs, "", args.rest)
    if old_runs:
        print_opens(old_runs, f"k25trace {args.compare_rev}, interleaved: ", args.rest)


def p90(values: list[float]) -> float:
    """The 90th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, -(-len(ordered) * 9 // 10) - 1)]


def describe(db_path: Path) -> str:
    import duckdb

    con = duckdb.connect(str(db_path), read_only=True)
    try:
        events, traces, steps, per_step = con.execute(
            "select (select count(*) from gpu_events), (select count(*) from traces), (select count(*) from steps), "
            "(select max(kernel_count) from steps)"
        ).fetchone()
    finally:
        con.close()
    return (
        f"database {db_path}: {traces} ranks, {events:,} GPU activities, {steps:,} steps "
        f"(up to {per_step:,} activities per step), {db_path.stat().st_size / 1e6:.0f} MB"
    )


def run_child(tree: Path, db_path: Path, options: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this script in a new process with the k25trace of ``tree`` (``options`` end with the flag that takes the
    tree); its last stdout line's JSON fields, checked to come from that tree."""
    command = [sys.executable, str(Path(__file__).resolve()), "--db", str(db_path), *options, str(tree)]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env={**os.environ, **(env or {})}).stdout
    fields = json.loads(out.splitlines()[-1])
    if Path(fields.pop("k25trace")).resolve() != (tree / "k25trace").resolve():
        raise SystemExit(f"the run meant for {tree} imported another k25trace")
    return fields


def run_in_process(tree: Path, db_path: Path, moves: int, *, back_to_back: bool) -> RunResult:
    """One run in a new process with the k25trace of ``tree`` (this script's own measuring code)."""
    flags = ["--back-to-back"] if back_to_back else []
    return RunResult(**run_child(tree, db_path, ["--moves", str(moves), *flags, "--one-run"]))


def print_figures(runs: list[RunResult], label: str, back_to_back: bool) -> None:
    first = [r.first_paint_s for r in runs]
    nexts = [m for r in runs for m in r.next_ms]
    prevs = [m for r in runs for m in r.prev_ms]
    both = nexts + prevs
    run_medians = [statistics.median(r.next_ms + r.prev_ms) for r in runs]
    run_p90s = [p90(r.next_ms + r.prev_ms) for r in runs]
    mode = "back to back" if back_to_back else "paced: idle between keys"
    print(
        f"{label}first paint (overview), median of {len(first)} runs: {statistics.median(first):.3f} s "
        f"(min {min(first):.3f}, max {max(first):.3f})   target < {FIRST_PAINT_TARGET_S:.1f} s"
    )
    print(f"{label}step moves ({mode}), key → step painted with its data, {len(both)} moves over {len(runs)} runs:")
    for what, values in (("next (n)", nexts), ("previous (p)", prevs), ("both", both)):
        print(
            f"  {what:<13} median {statistics.median(values):6.1f} ms   p90 {p90(values):6.1f} ms   "
            f"max {max(values):6.1f} ms"
        )
    print(
        f"  per run: medians {', '.join(f'{m:.1f}' for m in run_medians)} ms; p90s "
        f"{', '.join(f'{m:.1f}' for m in run_p90s)} ms; median of the runs' p90s {statistics.median(run_p90s):.1f} ms"
        f"   target p90 ≤ {STEP_TARGET_P90_MS:.0f} ms"
    )
    cpus = [m for r in runs for m in r.cpu_ms]
    print(
        f"  UI-thread CPU per move: median {statistics.median(cpus):.1f} ms, p90 {p90(cpus):.1f} ms "
        f"(the latency on an idle machine; the rest of the wall time is waiting for a core)"
    )
    kernels = [r.kernel_ms for r in runs]
    print(
        f"{label}open kernel (enter → details painted), median of {len(kernels)} runs: "
        f"{statistics.median(kernels):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        type=Path,
        default=None,
        help="database to measure (built from the generator when missing); default: the synthetic "
        "TP8 database cached in the temporary directory",
    )
    parser.add_argument("--ranks", type=int, default=8, help="ranks of the synthetic run")
    parser.add_argument("--steps", type=int, default=20, help="decode steps per batch size of the synthetic run")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--moves", type=int, default=20, help="presses of n, then as many of p, per run")
    parser.add_argument("--back-to-back", action="store_true", help="press the next key as soon as the step is painted")
    parser.add_argument(
        "--compare-rev",
        metavar="REV",
        help="also measure k25trace at this git revision, runs interleaved (a worktree in --work)",
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "k25trace-bench")
    parser.add_argument("--opens", action="store_true", help="a new user's first opens, each run a new process")
    parser.add_argument("--rest", type=float, default=0.5, help="--opens: seconds between a paint and the next key")
    parser.add_argument("--one-run", type=Path, metavar="TREE", help=argparse.SUPPRESS)
    parser.add_argument("--one-opens", type=Path, metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_opens:  # a run of --opens: the k25trace of TREE, timed from the spawn its parent wrote down
        spawned = float(os.environ["K25TRACE_BENCH_SPAWNED"])
        sys.path.insert(0, str(args.one_opens))
        import k25trace

        opened = asyncio.run(measure_opens(args.db, spawned, args.rest))
        print(json.dumps({**opened, "k25trace": str(Path(k25trace.__file__).parent)}))
        return
    if args.one_run:  # a run of --compare-rev: the k25trace of TREE, one run, its figures as a JSON line
        sys.path.insert(0, str(args.one_run))
        import k25trace

        result = asyncio.run(measure(args.db, args.moves, back_to_back=args.back_to_back))
        print(json.dumps({**result.__dict__, "k25trace": str(Path(k25trace.__file__).parent)}))
        return
    db_path = args.db or Path(tempfile.gettempdir()) / f"k25trace-bench-tui-synth-tp{args.ranks}-s{args.steps}.duckdb"
    if not db_path.exists():
        started = time.perf_counter()
        build_synthetic_db(db_path, ranks=args.ranks, steps=args.steps)
        print(f"built {db_path} in {time.perf_counter() - started:.1f} s", flush=True)
    else:
        from k25trace import pipeline

        pipeline.connect(db_path).close()  # brings a database an older k25trace wrote to the current schema
    print(describe(db_path), flush=True)
    if args.opens:
        opens_main(args, db_path)
        return
    old_tree = None
    if args.compare_rev:
        sys.path.insert(0, str(HERE))
        from bench_load import worktree

        old_tree = worktree(args.compare_rev, args.work)
    runs, old_runs = [], []
    for i in range(args.runs):
        if old_tree is None:
            result = asyncio.run(measure(db_path, args.moves, back_to_back=args.back_to_back))
        else:
            order = [REPO, old_tree] if i % 2 == 0 else [old_tree, REPO]  # neither always goes first
            got = {tree: run_in_process(tree, db_path, args.moves, back_to_back=args.back_to_back) for tree in order}
            result, old = got[REPO], got[old_tree]
            old_runs.append(old)
        runs.append(result)
        moves = result.next_ms + result.prev_ms
        print(
            f"  run {i + 1}: first paint {result.first_paint_s:.3f} s; step move median "
            f"{statistics.median(moves):.1f} ms, p90 {p90(moves):.1f} ms (UI-thread CPU median "
            f"{statistics.median(result.cpu_ms):.1f} ms); kernel {result.kernel_ms:.1f} ms"
            + (
                f"   | {args.compare_rev}: median {statistics.median(old.next_ms + old.prev_ms):.1f} ms, p90 "
                f"{p90(old.next_ms + old.prev_ms):.1f} ms"
                if old_tree is not None
                else ""
            ),
            flush=True,
        )
    print_figures(runs, "", args.back_to_back)
    if old_runs:
        print()
        print_figures(old_runs, f"k25trace {args.compare_rev}, interleaved: ", args.back_to_back)
        new_moves = [m for r in runs for m in r.next_ms + r.prev_ms]
        old_moves = [m for r in old_runs for m in r.next_ms + r.prev_ms]
        new_cpu = [m for r in runs for m in r.cpu_ms]
        old_cpu = [m for r in old_runs for m in r.cpu_ms]
        print(
            f"ratio {args.compare_rev} / this tree: step move median "
            f"{statistics.median(old_moves) / statistics.median(new_moves):.2f}, "
            f"p90 {p90(old_moves) / p90(new_moves):.2f}, "
            f"UI-thread CPU median "
            f"{statistics.median(old_cpu) / statistics.median(new_cpu):.2f}"
        )


if __name__ == "__main__":
    main()
