"""What a level reached and whether it is complete (its decode batch, its tokens, its files), and the run's summary
table: the checks the runner makes on a level's manifest entry."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from rich.console import Console
from rich.table import Table

from k25trace.capture import files as trace_files
from k25trace.capture.client import StartOutcomeUnknown, StopResult
from k25trace.capture.manifest import MANIFEST, LevelStats, Manifest, ManifestLevel
from k25trace.capture.options import CaptureOptions


def unknown_start_message(
    opts: CaptureOptions, level: ManifestLevel, e: StartOutcomeUnknown, stop: StopResult | None
) -> str:
    """The error of a level whose /start_profile went unanswered: what its one stop found, what to do now."""
    name = level.name
    kept = sum(1 for f in level.files if f.valid)
    head = (
        f"{name}: /start_profile got no answer ({e.status} after {e.seconds:,.1f}s), so its outcome is "
        f"unknown; one /stop_profile was sent"
    )
    if stop is not None and stop.status == "200":
        files = (
            f"{kept} trace file(s) of the window were salvaged into {name}/ (no load ran in it)"
            if kept
            else "no trace file appeared, so the start had not taken effect"
        )
        return (
            f"{head} and answered 200: the server is not profiling; {files}. If the server is just slow "
            f"to start its profiler, raise --start-timeout (now {opts.start_timeout_s:g}s)."
        )
    got = f"answered {stop.status}" if stop is not None else "could not be sent"
    return (
        f"{head} and {got}.\n"
        f"WARNING: the server at {opts.url} MAY STILL BE PROFILING (its traces grow, its engine "
        "slows down). Check it; once it answers again, send one POST /stop_profile by hand "
        f"(curl -X POST {opts.url}/stop_profile) and look for trace files in {opts.trace_dir}."
    )


def check_batch(opts: CaptureOptions, level: ManifestLevel, requests: int | None, say: Callable[[str], None]) -> None:
    """Record the decode batch the engine reached (traces' step markers, /metrics), warn when it fell
    short of the level's concurrency: such a level measures a smaller batch than its name says."""
    conc = level.concurrency or 0
    workers = [f for f in level.files if f.valid and not f.frontend and f.decode_batch_sizes is not None]
    level.decode_batch_sizes_seen = None
    level.decode_batch_sizes_rank = None
    level.max_decode_batch_seen = None
    if workers:
        first = min(workers, key=lambda f: (f.rank if f.rank is not None else 1 << 30, f.path))
        level.decode_batch_sizes_seen = first.decode_batch_sizes
        level.decode_batch_sizes_rank = first.rank
        # data-parallel engines batch apart: add up each DP group's largest batch (TP ranks share theirs)
        groups: dict[int, int] = {}
        for f in workers:
            dp = trace_files.dp_from_name(f.path.rsplit("/", 1)[-1]) or 0
            top = max(f.decode_batch_sizes or {}, default=0)
            groups[dp] = max(groups.get(dp, 0), top)
        level.max_decode_batch_seen = sum(groups.values())
    by_markers = level.max_decode_batch_seen
    by_metrics = level.max_running_requests
    seen = by_markers if by_markers is not None else by_metrics
    level.reached_concurrency = None if seen is None else seen >= conc
    if level.profiled and level.files and not workers:
        level.warnings.append(
            "no engine-step markers in the worker traces: the decode batch reached is "
            "known only from /metrics" + ("" if by_metrics is not None else " (unavailable)")
        )
    if seen is None or seen >= conc:
        return
    hist = level.decode_batch_sizes_seen
    parts = []
    if by_markers is not None:
        shown = ", ".join(f"{n} at batch {b}" for b, n in sorted((hist or {}).items()))
        parts.append(f"decode steps in rank {level.decode_batch_sizes_rank}'s trace: {shown or 'none'}")
    if by_metrics is not None:
        parts.append(f"at most {by_metrics} request(s) running on /metrics ({level.running_requests_samples} samples)")
    o = opts
    more = f"more requests per level (--requests, now {requests})" if requests else "a longer --duration"
    msg = (
        f"{level.name}: the engine never ran a decode batch of {conc} ({'; '.join(parts)}): this level "
        f"measures batch {seen}, not {conc}. Make the requests overlap: longer outputs (--max-tokens, now "
        f"{o.max_tokens}, with --ignore-eos), {more}; and check the server's --max-num-seqs."
    )
    level.warnings.append(msg)
    say(f"[yellow]{msg}[/]")


def check_output(level: ManifestLevel, say: Callable[[str], None]) -> None:
    """Say so when the level's requests produced nothing: such a level is not complete."""
    st = level.stats
    if st is None or not st.requests or st.completed or st.aborted:
        return
    zero = sum(1 for e in st.first_errors if e.startswith("no tokens generated"))
    why = "; ".join(st.first_errors) or "no request completed"
    if zero:
        msg = f"{level.name}: none of the {st.requests} request(s) produced a token ({why}): the level is not complete"
    else:
        msg = f"{level.name}: none of the {st.requests} request(s) succeeded ({why}): the level is not complete"
    level.warnings.append(msg)
    say(f"[red]{msg}[/]")


def level_ok(level: ManifestLevel) -> bool:
    """Done, with tokens, and (profiled) every rank's file there and valid."""
    st = level.stats or LevelStats()
    if level.status != "done" or not st.completed or not st.output_tokens:
        return False
    if level.profiled:
        return not level.missing_ranks and all(f.valid for f in level.files) and bool(level.files)
    return True


def batch_cell(lv: ManifestLevel) -> str:
    """The summary's batch column: the largest decode batch seen, ! when below the level's concurrency."""
    b = lv.max_decode_batch_seen
    if b is None:
        b = lv.max_running_requests
    if b is None:
        return "-"
    return f"{b}!" if b < (lv.concurrency or 0) else str(b)


def print_summary(m: Manifest, capture_dir: Path, out: Console) -> None:
    """The run's table of levels, and what to run next, on ``out``."""
    t = Table(title=f"capture {m.name} ({m.status})")
    for col in (
        "level",
        "reqs",
        "err",
        "conc",
        "batch",
        "tok/s",
        "ttft p50",
        "tpot p50",
        "itl p99",
        "stop",
        "stop s",
        "files",
        "missing",
    ):
        t.add_column(col, justify="right" if col not in ("level", "stop") else "left")

    def f(x: float | None, fmt: str = "{:,.1f}") -> str:
        return "-" if x is None else fmt.format(x)

    for lv in m.levels:
        st = lv.stats or LevelStats()
        nfiles = sum(1 for x in lv.files if x.valid)
        t.add_row(
            lv.name,
            f(st.requests, "{}"),
            f(st.errors, "{}"),
            f(st.max_in_flight, "{}"),
            batch_cell(lv),
            f(st.output_tok_s),
            f(st.ttft_ms.p50),
            f(st.tpot_ms.p50, "{:,.2f}"),
            f(st.itl_ms.p99),
            lv.stop_status or "-",
            f(lv.stop_seconds),
            f"{nfiles}/{len(lv.files)}" if lv.profiled else "-",
            ",".join(map(str, lv.missing_ranks)) or "-",
        )
    out.print(t)
    out.print(
        "latencies in ms; conc = most requests in flight; batch = largest decode batch the engine "
        "ran (step markers, else /metrics running; ! = below the level's concurrency); "
        "files = valid/copied",
        highlight=False,
    )
    outp = str(capture_dir)
    if any(lv.profiled and lv.files for lv in m.levels):
        out.print(f"next: k25trace load {outp} --db {outp.rstrip('/')}.duckdb", highlight=False, soft_wrap=True)
    else:
        out.print(f"manifest: {os.path.join(outp, MANIFEST)}", highlight=False, soft_wrap=True)
