"""``k25trace export perfetto``: a trimmed Chrome trace (JSON) of chosen steps of one run on chosen ranks.

Choosing the run (:func:`resolve_run`: id, label or part of the id) and the steps (:func:`select_steps`: indexes,
ranges, or one representative step per batch size), then :func:`perfetto_trace`: one process per rank, every
timestamp moved onto the reference rank's clock with the offsets k25trace computed (``rank_offsets``), categories
in ``cat``/args and as ``cname`` colours (the legacy trace viewer's reserved names; Perfetto colours slices by name
and ignores ``cname``), each paired collective annotated with its transfer/wait split and a nested ``wait`` slice.
Opens in ui.perfetto.dev and chrome://tracing; :func:`check_chrome_trace` checks a file as those viewers read it.

Every query is a named one (``queries/export_step_events.sql``, ``runs.sql``, ``run_steps.sql``,
``representative_steps.sql``, ``step_lanes.sql``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

import duckdb
import orjson
import polars as pl

from k25trace import __version__
from k25trace.analysis import report
from k25trace.db import query_frame
from k25trace.errors import K25Error

# ---------------------------------------------------------------------------------------------- selection


def resolve_run(con: duckdb.DuckDBPyConnection, run: str | None) -> str:
    """The run_id meant by ``run``: its exact id, its label (``graph (TP2)``), or a part of its id found in one
    run only; without ``run`` the only run with steps. A clear error listing the runs otherwise."""
    runs = query_frame(con, "runs")
    labels = report.run_labels(con)
    with_steps = runs.filter(pl.col("steps") > 0)
    listing = "; ".join(f"{labels.get(r, r)} = {r}" for r in with_steps["run_id"].to_list()) or "none"
    if run is None:
        if with_steps.height == 1:
            return with_steps["run_id"][0]
        raise K25Error(f"{with_steps.height} runs with steps in the database: choose one with --run (runs: {listing})")
    ids = runs["run_id"].to_list()
    if run in ids:
        return run
    by_label = [r for r in ids if labels.get(r) == run]
    if len(by_label) == 1:
        return by_label[0]
    parts = [r for r in ids if run in r]
    if len(parts) == 1:
        return parts[0]
    what = "several runs" if (by_label or parts) else "no run"
    raise K25Error(f"--run {run!r} matches {what} (runs: {listing})")


def _label(con: duckdb.DuckDBPyConnection, run_id: str) -> str:
    """The run's label as reports print it (``trace_runs.run_label``); the id itself for an unknown run."""
    return report.run_labels(con).get(run_id, run_id)


def parse_int_list(text: str | None, what: str) -> list[int] | None:
    """``3,4,7-9`` → [3, 4, 7, 8, 9]; None for None; ``all`` is handled by the caller."""
    if text is None:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise K25Error(f"{what}: {part!r} is not a number or a range like 3-5")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise K25Error(f"{what}: {part!r} is an empty range")
        if hi - lo > 100_000:
            raise K25Error(f"{what}: {part!r} is too long a range")
        out.extend(range(lo, hi + 1))
    if not out:
        raise K25Error(f"{what}: give at least one number")
    return sorted(set(out))


def select_steps(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: str | None, batch: int | None, phase: str = "decode"
) -> list[int]:
    """The step indexes to export. ``steps``: a list/ranges, or ``all``; ``batch``: only steps of that batch size.
    Neither: one representative step per batch size (the one nearest the median wall time, as the HTML page
    shows); ``batch`` alone: that batch size's representative step."""
    table = query_frame(con, "run_steps", {"run_id": run_id}).filter(~pl.col("is_empty"))
    if table.is_empty():
        raise K25Error(f"{_label(con, run_id)}: no steps with GPU activity")
    if batch is not None:
        table = table.filter(pl.col("batch_size") == batch)
        if table.is_empty():
            raise K25Error(f"{_label(con, run_id)}: no step of batch size {batch}")
    if steps is not None:
        known = set(table["step_index"].to_list())
        if steps.strip().lower() == "all":
            return sorted(known)
        wanted = parse_int_list(steps, "--steps") or []
        missing = [s for s in wanted if s not in known]
        if missing:
            scope = f" of batch size {batch}" if batch is not None else ""
            raise K25Error(
                f"{_label(con, run_id)}: no step{'s' if len(missing) > 1 else ''}{scope} with index "
                f"{', '.join(map(str, missing[:10]))} (steps{scope}: "
                f"{ranges_text(sorted(known))})"
            )
        return wanted
    reps = query_frame(con, "representative_steps", {"phase": "all"}).filter(pl.col("run_id") == run_id)
    if batch is not None:
        reps = reps.filter(pl.col("batch_size") == batch)
    else:  # prefer the phase's batch sizes (decode): a prefill step is seldom what one wants to point at
        phase_batches = set(table.filter(pl.col("phase") == phase)["batch_size"].to_list())
        if phase_batches:
            reps = reps.filter(pl.col("batch_size").is_in(list(phase_batches)))
    chosen = sorted(set(reps["step_index"].to_list()))
    if not chosen:
        chosen = [int(table["step_index"][0])]
    return chosen


def ranges_text(values: list[int]) -> str:
    out, i = [], 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


# ---------------------------------------------------------------------------------------------- perfetto

# The legacy trace viewer's reserved colour names (catapult's color_scheme: the only colours a Chrome JSON trace
# can ask for, by name), chosen per category as the nearest distinct hue to the TUI's colour.
CNAME_RGB = {
    "terrible": (180, 0, 0),
    "rail_idle": (238, 142, 0),
    "light_memory_dump": (0, 0, 180),
    "rail_response": (67, 135, 253),
    "detailed_memory_dump": (180, 0, 180),
    "thread_state_uninterruptible": (182, 125, 143),
    "good": (0, 125, 0),
    "yellow": (255, 255, 0),
    "background_memory_dump": (0, 180, 180),
    "cq_build_passed": (153, 238, 102),
    "thread_state_unknown": (199, 155, 125),
    "rail_animation": (244, 74, 63),
    "generic_work": (125, 125, 125),
    "grey": (221, 221, 221),
    "olive": (100, 100, 0),
    "bad": (180, 125, 0),
    "thread_state_runnable": (133, 160, 210),
    "rail_load": (13, 168, 97),
    "startup": (230, 230, 0),
    "thread_state_iowait": (255, 140, 0),
    "cq_build_abandoned": (187, 187, 187),
}
CATEGORY_CNAME = {
    "allreduce": "terrible",
    "comm_other": "thread_state_iowait",
    "marlin_gemm": "light_memory_dump",
    "quant_gemm": "rail_response",
    "gemm": "thread_state_runnable",
    "moe_routing": "detailed_memory_dump",
    "attention": "good",
    "norm": "startup",
    "rotary": "background_memory_dump",
    "activation": "cq_build_passed",
    "elementwise": "thread_state_unknown",
    "sampling": "thread_state_uninterruptible",
    "memcpy": "generic_work",
    "memset": "cq_build_abandoned",
    "other": "grey",
    "overlap": "olive",
    "all2all": "bad",
    "quantize": "rail_idle",
    "embedding": "yellow",
}
"""The colour of each category's slices: every category of the rules (``queries/kernel_rules.csv``), ``other`` and
``overlap`` a colour of its own (none the wait's or the step's); a category without one is ``grey``."""
WAIT_CNAME = "rail_animation"
STEP_CNAME = "rail_load"


def _us(ns: int) -> orjson.Fragment:
    """Integer nanoseconds as exact microseconds with 3 decimals (the JSON trace format's unit)."""
    sign = "-" if ns < 0 else ""
    ns = abs(int(ns))
    return orjson.Fragment(f"{sign}{ns // 1000}.{ns % 1000:03d}".encode())


@dataclass
class PerfettoExport:
    """What :func:`perfetto_trace` built: the trace and what it holds."""

    trace: dict[str, Any]
    run_id: str
    steps: list[int]
    ranks: list[int]
    t0_ns: int
    activities: int
    waits: int
    markers: int
    offsets_ns: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> bytes:
        return orjson.dumps(self.trace)


def perfetto_trace(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    steps: list[int],
    ranks: list[int] | None = None,
    *,
    details: bool = False,
    source: str = "",
) -> PerfettoExport:
    """The Chrome trace of ``steps`` of ``run_id`` on ``ranks`` (None: all). Timestamps: (start_ns − the rank's
    offset − t0) / 1000 µs, t0 = the earliest aligned start exported, so every rank is on the reference rank's
    clock and the numbers stay small (exact to the nanosecond). Each activity's args: category, step, batch size,
    event_id and name_id (its rows in ``gpu_events`` and ``kernel_names``), grid and block; ``details`` adds the
    full demangled name (often KBs), the raw start, correlation, registers, shared memory, occupancy, NCCL args."""
    events, lanes = _step_frames(con, run_id, steps, ranks)
    t0 = _first_start(events, lanes)
    rank_list = sorted(set(events["rank"].to_list()) | set(lanes["rank"].to_list()))
    offsets = {r["rank"]: r["offset_ns"] for r in lanes.iter_rows(named=True)}
    aligned = {r["rank"]: r["aligned"] for r in lanes.iter_rows(named=True)}
    marker_tid = _marker_tid(events)
    trace_events = _rank_tracks(
        rank_list, {r["rank"]: r["device_name"] for r in lanes.iter_rows(named=True)}, marker_tid
    )
    step_events, markers = _step_slices(lanes, t0, marker_tid)
    activity_events, activities, waits, overflow = _activity_slices(events, t0, details=details)
    trace_events += step_events + activity_events

    notes = []
    if len(rank_list) > 1 and not all(aligned.get(r) for r in rank_list):
        notes.append(
            f"{_label(con, run_id)}: no clock offsets for rank(s) "
            f"{', '.join(str(r) for r in rank_list if not aligned.get(r))} (no paired collectives): "
            "their raw clocks are used"
        )
    if overflow:
        notes.append(
            f"{overflow} GPU activities overlap another on the same stream; they are on a track "
            "of their own ('overlapping activities') so that every track nests"
        )
    trace = {
        "traceEvents": trace_events,
        "otherData": {
            "generator": f"k25trace {__version__}",
            "source": source,
            "run_id": run_id,
            "steps": steps,
            "ranks": ranks if ranks is not None else rank_list,
            "t0_ns": t0,
            "clock": "ts = (start_ns - clock_offset_ns - t0_ns) / 1000 µs: every rank on the reference (lowest) "
            "rank's clock (rank_offsets)",
            "clock_offsets_ns": {str(r): offsets.get(r, 0) for r in rank_list},
            "exported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
    }
    return PerfettoExport(
        trace=trace,
        run_id=run_id,
        steps=steps,
        ranks=rank_list,
        t0_ns=t0,
        activities=activities,
        waits=waits,
        markers=markers,
        offsets_ns={r: offsets.get(r, 0) for r in rank_list},
        notes=notes,
    )


def _step_frames(
    con: duckdb.DuckDBPyConnection, run_id: str, steps: list[int], ranks: list[int] | None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The GPU activities (``export_step_events``) and the per-rank step lanes (``step_lanes``) of the steps on the
    chosen ranks; an error when a chosen rank is not in the steps or the steps hold no GPU activity."""
    events = query_frame(con, "export_step_events", {"run_id": run_id, "steps": steps, "ranks": ranks})
    lanes = pl.concat(
        [query_frame(con, "step_lanes", {"run_id": run_id, "step_index": s}) for s in steps], how="vertical_relaxed"
    )
    if ranks is not None:
        present = set(lanes["rank"].to_list())
        absent = [r for r in ranks if r not in present]
        if absent:
            raise K25Error(
                f"{_label(con, run_id)}: no rank {', '.join(map(str, absent))} in step(s) "
                f"{ranges_text(steps)} (ranks: {', '.join(map(str, sorted(present)))})"
            )
        lanes = lanes.filter(pl.col("rank").is_in(ranks))
    if events.is_empty():
        raise K25Error(f"{_label(con, run_id)}: step(s) {ranges_text(steps)} hold no GPU activity on the chosen ranks")
    return events, lanes


def _first_start(events: pl.DataFrame, lanes: pl.DataFrame) -> int:
    """t0: the earliest aligned start of an activity or a step marker."""
    starts = [int(cast(int, events["aligned_start_ns"].min()))]
    marker_starts = lanes.filter(pl.col("marker_start_ns").is_not_null())
    if not marker_starts.is_empty():
        starts.append(int((marker_starts["marker_start_ns"] - marker_starts["offset_ns"]).min()))
    return min(starts)


def _marker_tid(events: pl.DataFrame) -> int:
    """The track of the host step markers (the GPU step windows go on the next one): below every stream track."""
    all_streams = {
        r["stream"] if r["stream"] is not None else 0
        for r in events.select(["rank", "stream"]).unique().iter_rows(named=True)
    }
    return min([0] + [s for s in all_streams]) - 2 if 0 in all_streams or 1 in all_streams else 0


def _rank_tracks(rank_list: list[int], devices: dict[int, str | None], marker_tid: int) -> list[dict[str, Any]]:
    """Per rank, the metadata events naming its process and its two step tracks."""
    window_tid = marker_tid + 1
    trace_events: list[dict[str, Any]] = []
    for rank in rank_list:
        name = f"rank {rank}" + (f" · {devices[rank]}" if devices.get(rank) else "")
        trace_events += [
            {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": name}},
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": marker_tid, "args": {"name": "step markers (host)"}},
            {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": marker_tid, "args": {"sort_index": -2}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": window_tid, "args": {"name": "step (GPU window)"}},
            {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": window_tid, "args": {"sort_index": -1}},
        ]
    return trace_events


def _step_slices(lanes: pl.DataFrame, t0: int, marker_tid: int) -> tuple[list[dict[str, Any]], int]:
    """Per rank and step, the host marker slice (when the step has a marker) and the GPU window slice; returns the
    events and how many markers there were."""
    trace_events: list[dict[str, Any]] = []
    markers = 0
    for lane in lanes.sort(["rank", "step_index"]).iter_rows(named=True):
        rank, off = lane["rank"], lane["offset_ns"]
        step_args = {
            "step": lane["step_index"],
            "batch_size": lane["batch_size"],
            "phase": lane["phase"],
            "rank": rank,
            "gpu_wall_ms": round(lane["wall_ns"] / 1e6, 6),
            "gpu_idle_ms": round(lane["idle_ns"] / 1e6, 6),
            "kernels": lane["kernel_count"],
            "collectives": lane["collectives"],
            "collective_wait_us": round(lane["wait_ns"] / 1e3, 3),
            "caused_wait_us": round(lane["caused_wait_ns"] / 1e3, 3),
            "clock_offset_ns": off,
        }
        if lane["marker_start_ns"] is not None and lane["marker_end_ns"] is not None:
            trace_events.append(
                {
                    "ph": "X",
                    "name": lane["marker"] or f"step {lane['step_index']}",
                    "cat": "k25trace.step",
                    "pid": rank,
                    "tid": marker_tid,
                    "ts": _us(lane["marker_start_ns"] - off - t0),
                    "dur": _us(lane["marker_end_ns"] - lane["marker_start_ns"]),
                    "cname": STEP_CNAME,
                    "args": step_args,
                }
            )
            markers += 1
        trace_events.append(
            {
                "ph": "X",
                "name": f"step {lane['step_index']} (batch {lane['batch_size']})",
                "cat": "k25trace.step",
                "pid": rank,
                "tid": marker_tid + 1,
                "ts": _us(lane["aligned_start_ns"] - t0),
                "dur": _us(lane["wall_ns"]),
                "cname": STEP_CNAME,
                "args": step_args,
            }
        )
    return trace_events, markers


def _activity_slices(events: pl.DataFrame, t0: int, *, details: bool) -> tuple[list[dict[str, Any]], int, int, int]:
    """One slice per GPU activity on its stream's track (an overlapping one on a track of its own, named when first
    used), and a 'wait for rank N' slice over the waiting part of a collective; returns the events, the number of
    activities and of waits, and how many activities overlapped another on their stream."""
    trace_events: list[dict[str, Any]] = []
    thread_names: set[tuple[int, int]] = set()
    activities = waits = 0
    placed = _Lanes()
    for e in events.iter_rows(named=True):
        rank, stream = e["rank"], e["stream"] if e["stream"] is not None else 0
        ts = e["aligned_start_ns"] - t0
        tid = placed.place(rank, stream, ts, ts + e["dur_ns"])
        if (rank, tid) not in thread_names:
            thread_names.add((rank, tid))
            label = f"GPU stream {stream}" + ("" if tid == stream else " (overlapping activities)")
            trace_events += [
                {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}},
                {"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": tid, "args": {"sort_index": tid}},
            ]
        trace_events.append(
            {
                "ph": "X",
                "name": e["short_name"],
                "cat": e["category"],
                "pid": rank,
                "tid": tid,
                "ts": _us(ts),
                "dur": _us(e["dur_ns"]),
                "cname": CATEGORY_CNAME.get(e["category"], "grey"),
                "args": _activity_args(e, details),
            }
        )
        activities += 1
        if e["call_site"] is not None and e["wait_ns"] and 0 < e["wait_ns"] < e["dur_ns"]:
            trace_events.append(
                {
                    "ph": "X",
                    "name": f"wait for rank {e['late_rank']}",
                    "cat": "k25trace.wait",
                    "pid": rank,
                    "tid": tid,
                    "ts": _us(ts),
                    "dur": _us(e["wait_ns"]),
                    "cname": WAIT_CNAME,
                    "args": {
                        "wait_us": round(e["wait_ns"] / 1e3, 3),
                        "wait_kind": e["wait_kind"],
                        "late_rank": e["late_rank"],
                        "call_site": e["call_site"],
                        "event_id": e["event_id"],
                        "transfer_us": round(e["transfer_ns"] / 1e3, 3),
                    },
                }
            )
            waits += 1
    return trace_events, activities, waits, placed.overflow


def _activity_args(e: dict[str, Any], details: bool) -> dict[str, Any]:
    """The args of one activity's slice: its rows in the database, grid and block, bytes, the collective's figures;
    ``details`` adds the full name, the raw start and the launch/occupancy/NCCL fields."""
    args: dict[str, Any] = {
        "category": e["category"],
        "step": e["step_index"],
        "batch_size": e["batch_size"],
        "event_id": e["event_id"],
        "name_id": e["name_id"],
    }
    if e["grid_x"] is not None:
        args["grid"] = [e["grid_x"], e["grid_y"], e["grid_z"]]
        args["block"] = [e["block_x"], e["block_y"], e["block_z"]]
    if e["bytes"] is not None:
        args["bytes"] = e["bytes"]
    if details:
        args["kernel"] = e["name"]
        args["start_ns"] = e["start_ns"]  # on the rank's own clock, as in the database
        for key in (
            "kind",
            "correlation",
            "external_id",
            "registers",
            "shared_mem_bytes",
            "occupancy_pct",
            "collective_name",
            "msg_in_nelems",
            "msg_dtype",
        ):
            if e[key] is not None:
                args[key] = e[key]
    if e["call_site"] is not None:
        args["collective"] = {
            "call_site": e["call_site"],
            "transfer_us": round(e["transfer_ns"] / 1e3, 3),
            "wait_us": round(e["wait_ns"] / 1e3, 3),
            "wait_kind": e["wait_kind"],
            "late_rank": e["late_rank"],
            "this_rank_late": e["is_late"],
            "lateness_us": round(e["lateness_ns"] / 1e3, 3),
            "caused_wait_us": round(e["caused_wait_ns"] / 1e3, 3),
            "skew_us": round(e["skew_ns"] / 1e3, 3),
        }
    return args


class _Lanes:
    """Tracks per (rank, stream): an activity goes on the stream's own track unless it partly overlaps one there
    (a JSON trace's slices on one track must nest), then on an overflow track."""

    OVERFLOW_TID = 1_000_000

    def __init__(self) -> None:
        self.ends: dict[tuple[int, int], int] = {}
        self.overflow = 0

    def place(self, rank: int, stream: int, start: int, end: int) -> int:
        k = 0
        while True:
            tid = stream + k * self.OVERFLOW_TID
            last = self.ends.get((rank, tid))
            if last is None or start >= last:  # activities come sorted by start: disjoint from what is there
                self.ends[(rank, tid)] = end
                if k:
                    self.overflow += 1
                return tid
            k += 1


def check_chrome_trace(trace: dict[str, Any]) -> list[str]:
    """Check a parsed JSON trace (``orjson.loads`` of the file) for what ui.perfetto.dev's and chrome://tracing's
    JSON importers need, checked structurally: a ``traceEvents`` list; every event a known phase with an integer pid
    and tid; complete ('X') events with a finite, non-negative ``ts`` and ``dur`` and a name; metadata ('M') events
    with their args; and, per track (pid, tid), slices that nest (no partial overlap, which both importers mis-nest
    or drop). Returns the problems found (none: valid)."""
    problems: list[str] = []
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    tracks: dict[tuple[int, int], list[tuple[float, float, int]]] = {}
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            problems.append(f"event {i}: not an object")
            continue
        ph = e.get("ph")
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            problems.append(f"event {i}: pid/tid not integers")
        if ph == "M":
            if e.get("name") not in (
                "process_name",
                "process_sort_index",
                "thread_name",
                "thread_sort_index",
            ) or not isinstance(e.get("args"), dict):
                problems.append(f"event {i}: bad metadata event")
        elif ph == "X":
            ts, dur = e.get("ts"), e.get("dur")
            if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0 or ts < 0:
                problems.append(f"event {i}: bad ts/dur {ts!r}/{dur!r}")
                continue
            if not isinstance(e.get("name"), str) or not e["name"]:
                problems.append(f"event {i}: no name")
            if "args" in e and not isinstance(e["args"], dict):
                problems.append(f"event {i}: args not an object")
            if "cname" in e and e["cname"] not in CNAME_RGB:
                problems.append(f"event {i}: cname {e['cname']!r} is not a reserved colour name")
            tracks.setdefault((e["pid"], e["tid"]), []).append((float(ts), float(ts) + float(dur), i))
        else:
            problems.append(f"event {i}: phase {ph!r} not used by k25trace exports")
    for key, slices in tracks.items():
        slices.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, float, int]] = []
        for s in slices:
            while stack and stack[-1][1] <= s[0] + 1e-9:
                stack.pop()
            if stack and s[1] > stack[-1][1] + 1e-9:
                problems.append(
                    f"track pid {key[0]} tid {key[1]}: event {s[2]} overlaps event {stack[-1][2]} without nesting"
                )
                break
            stack.append(s)
    return problems
