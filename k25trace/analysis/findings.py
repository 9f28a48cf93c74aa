"""Findings: per run and batch size, a short ranked list of what costs the step time and the most each fix could
bring, computed only from measured numbers (issue 31, item 1). Analysis only: it takes a connection and returns
typed records; the CLI, the TUI and the HTML page render them.

Each :class:`Finding` is one plain sentence with its figure, the evidence (the ``k25trace report`` command and
the named query that show it), the most it could save (ms per step and % of the mean step wall time), a trust note
and the raw numbers. The savings, each "the most this one fix could bring":

* ``collective_wait`` — time ranks spend inside a collective waiting for a late rank (``report --by comm``'s
  ``wait_ms_per_step``: each paired collective's duration minus the shortest across ranks, mean over ranks, per
  engine step); saving "without the wait" = that wait. Which rank made the others wait and why (its host
  launched late, a sync, longer GPU work — in which kernel categories —, waited on the device, at the run's first
  collective, unexplained) is ``queries/findings_comm_causes.sql``, the same split as ``--by comm``'s
  ``wait_*_ms_per_step`` per late rank.
* ``collective_transfer`` — the rest of the collective's time (the data transfer) against the measured floor
  (``k25trace bench allreduce``: ``report --by floor``'s kernel floor, else its wall floor), saving "at the floor"
  = transfer − floor; without a floor, against a bandwidth-only bound (bus bytes ÷ the device's datasheet link
  bandwidth per direction, ``queries/device_peaks.csv``; latency not counted, so the saving is an upper limit no
  real transfer reaches for small messages), labelled as such; else no bound and no saving.
* ``collective_unpaired`` — collective time in a run of which fewer ranks were loaded than its world size: wait and
  transfer cannot be told apart (no saving).
* ``idle_host``, ``idle_sync``, ``idle_device``, ``idle_unknown`` — GPU idle inside steps by cause
  (``report --by idle``); saving = that idle.
* ``cuda_graphs`` — eager steps (no CUDA-graph launch in the step: ``steps.graph_launches = 0``): the in-step
  launch overhead idle of those steps (from each launch call's start to its GPU start, while the GPU was idle),
  the part CUDA graphs would remove that is measured as such. The host-bound idle of the same steps, which graphs
  may also hide, is named in the sentence and not counted. ``idle_launch`` — the launch overhead of the other
  (CUDA-graph) steps, not attributed to graphs.
* ``between_steps`` — time from one step's last GPU activity to the next step's first (outside the step walls).
* ``kernels_sol`` — per top kernel category, the kernel time of its ops with recorded shapes above their hardware
  minimum (``report --by roofline``'s ``sol_us``: max(bytes ÷ HBM peak, FLOPs ÷ compute peak) at the datasheet
  peaks); ``kernels_no_bound`` when no op of a top category has shapes (no saving, never a guess).
* ``largest_category`` — the category with the most exclusive time and how far it is from its bound (no saving).

Savings overlap (a wait on one rank is often the late rank's host-bound idle; a GEMM's time above its minimum and
the idle around it are one step): each is the most that one fix alone could bring; they are never added up.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis import report, sol
from k25trace.db import query_frame
from k25trace.vocab import ALL, check_phase

__all__ = ["KINDS", "OVERLAP", "Finding", "FindingGroup", "Findings", "as_dict", "findings", "findings_frame"]

KINDS = {
    "collective_wait": "time in a collective waiting for a late rank; saving: without the wait",
    "collective_transfer": "a collective's data transfer against its floor; saving: at the floor",
    "collective_unpaired": "collective time of a run with ranks missing: wait and transfer cannot be told apart",
    "cuda_graphs": "eager steps: the launch overhead idle CUDA graphs would remove",
    "idle_host": "GPU idle waiting for the host to launch work",
    "idle_launch": "GPU idle from a launch call to its GPU start in CUDA-graph steps",
    "idle_sync": "GPU idle after the host waited for the GPU",
    "idle_device": "GPU idle with its work already launched",
    "idle_unknown": "GPU idle of no known cause",
    "between_steps": "time between one step's last GPU work and the next step's first",
    "kernels_sol": "kernel time above the hardware minimum of the ops with recorded shapes",
    "kernels_no_bound": "a large kernel category none of whose ops has a hardware minimum (no shapes or no cost "
                        "model): no bound, never a guess",
    "largest_category": "the category with the most exclusive time, and how far it is from its bound",
}
"""Every kind of finding, with what it measures."""

OVERLAP = ("Savings overlap: each is the most that one fix alone could bring (a rank's wait is often another "
           "rank's idle; a kernel's time above its minimum and the idle around it share the step), so they are "
           "not added up.")

COMM_CATEGORIES = ("allreduce", "all2all", "comm_other")
_COMM_NAMES = {"allreduce": "All-reduce", "all2all": "All-to-all (expert parallelism)",
               "comm_other": "Other collectives"}
_PSEUDO = ("idle", "overlap")
_TOP_CATEGORIES = 3  # kernel categories checked against the hardware minimum
_NEAR = 1.25  # "near its bound": within 25 % above it


@dataclass(frozen=True)
class Finding:
    """One finding: what it is, its sentence, where to see it, the most it could save and how far to trust it."""

    kind: str  # one of KINDS
    sentence: str  # one plain sentence (or two) with its figures and units
    evidence: str  # the k25trace command that shows it
    query: str  # the named query (queries/<name>.sql) or function behind it
    saving_ms: float | None  # the most it could save, ms per step (None: no saving computed)
    saving_pct: float | None  # the same as % of the mean step wall time
    saving_label: str  # what the saving assumes ("without the wait", "at the floor", …)
    trust: str  # what the figures rest on when that is less than exact ('' when nothing to say)
    figures: Mapping[str, Any] = field(default_factory=dict)  # the raw numbers

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "figures": dict(self.figures)}


@dataclass(frozen=True)
class FindingGroup:
    """The findings of one run and batch size, ranked by saving (findings without a saving last)."""

    run_id: str
    run_label: str
    batch_size: int | None
    engine_steps: int  # distinct engine steps
    rank_steps: int  # one per rank per engine step
    ranks: int
    world_size: int | None
    step_ms: float  # mean wall time of the rank-steps
    heading: str
    findings: tuple[Finding, ...]
    left_out: int  # findings whose saving was below min_pct of the step
    notes: tuple[str, ...]  # what the whole group's figures rest on

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "findings"}
        out["notes"] = list(self.notes)
        out["findings"] = [f.as_dict() for f in self.findings]
        return out


@dataclass(frozen=True)
class Findings:
    """All groups of one phase selection, with the notes that apply to all of them."""

    phase: str
    groups: tuple[FindingGroup, ...]
    notes: tuple[str, ...]
    overlap: str = OVERLAP

    def as_dict(self) -> dict[str, Any]:
        return {"phase": self.phase, "notes": list(self.notes), "overlap": self.overlap,
                "groups": [g.as_dict() for g in self.groups]}


# ---------------------------------------------------------------------------------------------------- wording


def _ms(x: float) -> str:
    """ms with 3 decimals; a positive value below 0.001 as '< 0.001'."""
    if 0 < x < 0.0005:
        return "< 0.001"
    return f"{x:,.3f}"


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{round(x, 2):.1f} %"  # rounded as saving_pct is, so the two read alike


def _num(x: Any) -> float:
    """A number of a frame cell (None as 0), with -0.0 as 0.0."""
    return float(x or 0) + 0.0


def _ratio(x: float) -> str:
    return f"{x:.2f}×" if x < 10 else f"{x:.0f}×"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


class _Context:
    """Everything one call reads, keyed per (run_id, batch_size)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, phase: str, db: str, peaks_file: Path | None) -> None:
        self.phase = phase
        self.phase_option = "" if phase == "decode" else f" --phase {phase}"
        self.db = shlex.quote(db)
        self.labels = report.run_labels(con)
        self.groups = query_frame(con, "findings_groups", {"phase": phase})
        self.batch = _by_group(report.breakdown(con, by="batch", phase=phase))
        self.idle = {k: v[0] for k, v in _by_group(report.breakdown(con, by="idle", phase=phase)).items()}
        self.comm = _by_group(report.breakdown(con, by="comm", phase=phase))
        self.causes = _by_group(query_frame(con, "findings_comm_causes", {"phase": phase}))
        self.floor = {k: v[0] for k, v in _by_group(report.breakdown(con, by="floor", phase=phase)).items()}
        self.bandwidth = _by_group(report.breakdown(con, by="comm-bw", phase=phase))
        self.roofline = _by_group(sol.roofline(con, phase=phase, peaks_file=peaks_file).to_dicts())
        devices = sol.run_devices(con, sol.load_peaks(peaks_file))
        self.devices: dict[str, sol.Peaks | None] = {}
        for (run_id, _), peaks in devices.items():
            if self.devices.get(run_id) is None:
                self.devices[run_id] = peaks

    def command(self, view: str) -> str:
        return f"k25trace report --db {self.db} --by {view}{self.phase_option}"


def _by_group(frame: pl.DataFrame | list[dict[str, Any]]) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    rows = frame.to_dicts() if isinstance(frame, pl.DataFrame) else frame
    out: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["run_id"], r["batch_size"]), []).append(r)
    return out


def _finding(kind: str, sentence: str, evidence: str, query: str, saving: float | None, step_ms: float,
             label: str, trust: str = "", **figures: Any) -> Finding:
    pct = None if saving is None or not step_ms else round(100.0 * saving / step_ms, 2)
    return Finding(kind=kind, sentence=sentence, evidence=evidence, query=query,
                   saving_ms=None if saving is None else round(saving, 4), saving_pct=pct,
                   saving_label=label, trust=trust, figures=figures)


# --------------------------------------------------------------------------------------------------- collectives


_BUS_FACTOR_HALF = ("all_gather", "allgather", "reduce_scatter", "all_to_all", "alltoall", "_allgather_base",
                    "_reduce_scatter_base")


def _bus_factor(collective: str | None, n: int) -> float:
    """nccl-tests' bus-bandwidth factor, as report_comm_bandwidth.sql applies it."""
    if collective in ("allreduce", "all_reduce"):
        return 2.0 * (n - 1) / n
    if collective in _BUS_FACTOR_HALF:
        return (n - 1) / n
    return 1.0


_ONE_NAME = {"all_gather": "All-gather", "allgather": "All-gather", "_allgather_base": "All-gather",
             "reduce_scatter": "Reduce-scatter", "_reduce_scatter_base": "Reduce-scatter", "broadcast": "Broadcast",
             "send": "Send/receive", "recv": "Send/receive"}


def _comm_name(category: str, bandwidth: list[dict[str, Any]]) -> str:
    if category != "comm_other":
        return _COMM_NAMES.get(category, category)
    names = sorted({r["collective"] for r in bandwidth if r["category"] == category and r["collective"]})
    if len(names) == 1 and names[0] in _ONE_NAME:
        return _ONE_NAME[names[0]]
    return f"Other collectives ({', '.join(names)})" if names else "Other collectives"


_CAUSE_WORDS = (("host_ms_per_step", "its host launched late"), ("sync_ms_per_step", "it waited on a host sync"),
                ("gpu_work_ms_per_step", "longer GPU work"), ("device_ms_per_step", "it waited on its own device"),
                ("unexplained_ms_per_step", "unexplained"))


def _categories(listed: str) -> str:
    """'gemm, other' as 'gemm and unclassified' (the category 'other' is kernels no rule matched)."""
    names = ["unclassified" if c == "other" else c for c in listed.split(", ") if c]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _why(cause: dict[str, Any]) -> str:
    """A late rank's share of the wait in words: 'its host launched late (4.367 ms/step), longer GPU work in gemm
    (0.111)'; the part at the run's first collective said apart."""
    total = _num(cause["wait_ms_per_step"])
    parts = []
    for column, words in _CAUSE_WORDS:
        value = _num(cause[column])
        if value <= 0 or value < 0.01 * total:
            continue
        if column == "gpu_work_ms_per_step" and cause["longer_work"]:
            words = f"longer GPU work in {_categories(cause['longer_work'])} kernels"
        parts.append((value, f"{words} ({_ms(value)} ms/step)"))
    text = ", ".join(p for _, p in sorted(parts, key=lambda p: -p[0]))
    first = _num(cause["first_ms_per_step"])
    if first > 0 and first >= 0.01 * total:
        text += ("; " if text else "") + (f"{_ms(first)} ms/step at the run's first collective, which has nothing "
                                           "before it to say why")
    return text or "no cause recorded"


def _wait_finding(ctx: _Context, key: tuple[str, int | None], row: dict[str, Any], step_ms: float,
                  name: str) -> Finding:
    wait, transfer, total = _num(row["wait_ms_per_step"]), _num(row["transfer_ms_per_step"]), _num(row["ms_per_step"])
    causes = [c for c in ctx.causes.get(key, [])
              if c["category"] == row["category"] and _num(c["wait_ms_per_step"]) > 0]
    causes.sort(key=lambda c: (-_num(c["wait_ms_per_step"]), c["late_rank"]))
    ranks = int(row["ranks"])
    sentence = (f"{name}: {_ms(total)} ms/step ({_pct(100 * total / step_ms if step_ms else None)} of the step), of "
                f"which {_ms(transfer)} ms moves data and {_ms(wait)} ms waits for a rank that started late (mean over "
                f"the {ranks} ranks).")
    for cause in causes[:2]:
        share = 100.0 * _num(cause["wait_ms_per_step"]) / wait if wait else 0.0
        sentence += (f" Rank {cause['late_rank']} caused {_ms(_num(cause['wait_ms_per_step']))} ms/step of it "
                     f"({share:.0f} %): {_why(cause)}.")
    if len(causes) > 2:
        rest = sum(_num(c["wait_ms_per_step"]) for c in causes[2:])
        sentence += f" {len(causes) - 2} other ranks caused {_ms(rest)} ms/step."
    trust = []
    if row["alignment"] == "poor":
        trust.append(f"the ranks' clocks align poorly (paired collectives end {row['residual_p90_us']} µs apart at "
                     "p90): the wait is approximate")
    elif row["alignment"] == "unpaired":
        trust.append("some collectives could not be paired across ranks")
    if row["pairing"] != "per step":
        trust.append("no step markers: collectives were paired over the whole trace, the steps inferred")
    first = sum(_num(c["first_ms_per_step"]) for c in causes)
    if first > 0:
        trust.append(f"{_ms(first)} ms/step of the wait is at the run's first collective, whose cause is unknown "
                     "(ranks whose profilers started apart would look like this); the saving counts it")
    figures = {k: row[k] for k in ("calls_per_step", "ms_per_step", "transfer_ms_per_step", "wait_ms_per_step",
                                   "wait_pct", "wait_host_ms_per_step", "wait_sync_ms_per_step",
                                   "wait_gpu_work_ms_per_step", "wait_device_ms_per_step", "wait_other_ms_per_step",
                                   "why_late", "straggler_rank", "straggler_wait_pct", "last_rank", "last_pct",
                                   "skew_p50_us", "skew_max_us", "alignment", "residual_p90_us", "steps", "ranks")}
    figures["category"] = row["category"]
    figures["late_ranks"] = [{k: (c[k] + 0.0 if isinstance(c[k], float) else c[k]) for k in c
                              if k not in ("run_id", "batch_size", "category")} for c in causes]
    return _finding("collective_wait", sentence, f"{ctx.command('comm')}; {ctx.command('comm-site')}",
                    "report_comm, findings_comm_causes", wait, step_ms, "without the wait", "; ".join(trust),
                    **figures)


def _transfer_finding(ctx: _Context, key: tuple[str, int | None], row: dict[str, Any], step_ms: float,
                      name: str) -> Finding | None:
    category, transfer = row["category"], _num(row["transfer_ms_per_step"])
    calls, steps = _num(row["calls_per_step"]), int(row["steps"])
    floor = ctx.floor.get(key) if category == "allreduce" else None
    if floor is not None and (floor["floor_kernel_ms"] is not None or floor["floor_ms"] is not None):
        kernel = floor["floor_kernel_ms"] is not None
        floor_ms = _num(floor["floor_kernel_ms"] if kernel else floor["floor_ms"])
        saving = max(transfer - floor_ms, 0.0)
        basis = ("NCCL kernel time alone" if kernel else "burst wall time per all-reduce, an upper bound of the "
                 "kernel floor")
        size = f" of {floor['msg_bytes']:,} B" if floor["msg_bytes"] else ""
        sentence = (f"{name}: its data transfer takes {_ms(transfer)} ms/step; the measured floor for "
                    f"{floor['allreduce_per_step']:g} all-reduces{size} on {floor['world_size']} ranks is "
                    f"{_ms(floor_ms)} ms/step (`k25trace bench allreduce`, {floor['floor_mode']} burst, {basis}): "
                    + (f"{_ms(saving)} ms/step above it." if saving > 0 else "the transfer is at the floor."))
        notes = []
        if not kernel:
            notes.append("wall floor: the kernel floor is lower, so the saving is at least this")
        if floor["allreduce_per_step"] is not None and abs(_num(floor["allreduce_per_step"]) - calls) > 1e-6:
            notes.append(f"{floor['allreduce_per_step']:g} all-reduce kernels per step, {calls:g} of them paired "
                         "across ranks")
        return _finding("collective_transfer", sentence, f"{ctx.command('floor')}; {ctx.command('comm-bw')}",
                        "report_allreduce_floor", saving, step_ms, "at the measured floor", "; ".join(notes),
                        category=category, transfer_ms_per_step=transfer, floor_ms_per_step=floor_ms,
                        floor_basis=floor["floor_basis"], floor_mode=floor["floor_mode"],
                        allreduce_per_step=floor["allreduce_per_step"], msg_bytes=floor["msg_bytes"])
    sizes = [r for r in ctx.bandwidth.get(key, []) if r["category"] == category]
    dev = ctx.devices.get(key[0])
    link = dev.peak("interconnect_gbps") if dev else None
    evidence = f"{ctx.command('comm-bw')}; {ctx.command('floor')}"
    if not sizes or any(r["size_bytes"] is None for r in sizes) or not link or not steps:
        why = ("the message sizes are not recorded (CUDA-graph replays record none)"
               if not sizes or any(r["size_bytes"] is None for r in sizes)
               else "the device has no link bandwidth in queries/device_peaks.csv (give --peaks FILE)")
        sentence = (f"{name}: its data transfer takes {_ms(transfer)} ms/step; no bound: {why}, and no "
                    "`k25trace bench allreduce` floor is stored.")
        return _finding("collective_transfer", sentence, evidence, "report_comm_bandwidth", None, step_ms,
                        "no bound", "", category=category, transfer_ms_per_step=transfer,
                        transfer_pct=round(100 * transfer / step_ms, 2) if step_ms else 0.0)
    bus_bytes = sum(r["calls"] * r["size_bytes"] * _bus_factor(r["collective"], int(r["ranks"])) for r in sizes)
    bound = bus_bytes / steps / (link * 1e9) * 1e3
    assert dev is not None
    sentence = (f"{name}: its data transfer takes {_ms(transfer)} ms/step; no floor was measured (`k25trace bench "
                f"allreduce`). A bandwidth-only bound: its {bus_bytes / steps / 1e6:,.3f} MB of bus traffic per step "
                f"at the {dev.device}'s datasheet link bandwidth ({link:g} GB/s per direction; {dev.interconnect}) "
                f"takes {_ms(bound)} ms, with each collective's latency left out, so no transfer reaches it.")
    trust = ("bandwidth-only bound: no saving is ranked on it, as it leaves out latency (which dominates small "
             "messages); measure the floor with k25trace bench allreduce --db, then report --by floor")
    return _finding("collective_transfer", sentence, evidence, "report_comm_bandwidth", None, step_ms,
                    "no measured floor (bandwidth-only bound in the figures)", trust, category=category,
                    transfer_ms_per_step=transfer, transfer_pct=round(100 * transfer / step_ms, 2) if step_ms else 0.0,
                    bound_ms_per_step=bound, above_bound_ms_per_step=max(transfer - bound, 0.0),
                    link_gbps=link, bus_bytes_per_step=bus_bytes / steps, device=dev.device)


def _unpaired_finding(ctx: _Context, group: dict[str, Any], row: dict[str, Any], step_ms: float) -> Finding:
    name = _COMM_NAMES.get(row["category"], row["category"])
    ms = _num(row["kernel_ms_per_step"])
    loaded = int(group["ranks_loaded"] or 1)
    sentence = (f"{name}: {_ms(ms)} ms/step ({_pct(row['pct_of_step'])} of the step), but only {loaded} of the run's "
                f"{group['world_size']} ranks {'was' if loaded == 1 else 'were'} loaded, so its time waiting for other "
                "ranks cannot be told from its data transfer: load every rank's trace to split it.")
    return _finding("collective_unpaired", sentence, ctx.command("batch"), "report_breakdown", None, step_ms,
                    "no saving computed", "", category=row["category"], kernel_ms_per_step=ms,
                    ranks_loaded=group["ranks_loaded"], world_size=group["world_size"])


# ---------------------------------------------------------------------------------------------------------- idle


def _idle_findings(ctx: _Context, group: dict[str, Any], idle: dict[str, Any], step_ms: float) -> list[Finding]:
    out = []
    evidence = f"{ctx.command('idle')}; {ctx.command('timeline')}"
    eager, rank_steps = int(group["eager_steps"]), int(group["rank_steps"])
    figures = {k: idle[k] for k in ("wall_ms", "busy_ms", "idle_ms", "host_ms", "sync_ms", "launch_overhead_ms",
                                    "device_ms", "unknown_ms", "idle_pct")}
    texts = {
        "idle_host": ("host_ms", "waiting for the host to launch work (host-bound: the launch came after the GPU "
                      "had gone idle)", "without host-bound idle"),
        "idle_sync": ("sync_ms", "after the host waited for the GPU (a synchronize or a blocking copy)",
                      "without idle after host syncs"),
        "idle_device": ("device_ms", "although its next work was already launched (a dependency, another stream, "
                        "an event)", "without device-bound idle"),
        "idle_unknown": ("unknown_ms", "for no known cause (no launch found for the work that ended the gap)",
                         "without that idle"),
    }
    for kind, (column, why, label) in texts.items():
        ms = _num(idle[column])
        if ms <= 0:
            continue
        sentence = f"The GPU sits idle {_ms(ms)} ms/step ({_pct(100 * ms / step_ms)} of the step) {why}."
        out.append(_finding(kind, sentence, evidence, "report_idle", ms, step_ms, label, "", **figures))
    eager_launch, graph_launch = _num(group["eager_launch_ms"]), _num(group["graph_launch_ms"])
    if eager and eager_launch > 0:
        which = (("This step runs" if rank_steps == 1 else "These steps run") + " without CUDA graphs"
                 if eager == rank_steps else
                 f"{eager} of the {rank_steps} rank-steps run without CUDA graphs")
        sentence = (f"{which}: their launch overhead (from each launch call's start to its kernel's start, while the "
                    f"GPU waits) is {_ms(eager_launch)} ms/step ({_pct(100 * eager_launch / step_ms)} of the step), "
                    "the part CUDA graphs would remove that is measured as such. Their host-bound idle "
                    f"({_ms(_num(group['eager_host_ms']))} ms/step) may shrink too; it is not counted here.")
        caveats = [t for t in (
            "" if eager == rank_steps else "measured on the eager rank-steps, per rank-step of the whole group",
            "" if ctx.phase == "decode" else "not only decode steps: whether the engine can run them as CUDA graphs "
            "depends on it (vLLM captures decode batch sizes)") if t]
        out.append(_finding("cuda_graphs", sentence, evidence, "findings_groups, report_idle", eager_launch, step_ms,
                            "with CUDA graphs (launch overhead only)", "; ".join(caveats), eager_steps=eager,
                            rank_steps=rank_steps, eager_launch_ms=eager_launch,
                            eager_host_ms=_num(group["eager_host_ms"])))
    if graph_launch > 0:
        sentence = (f"Launch overhead in the CUDA-graph steps (from a launch call's start to its GPU start, while the "
                    f"GPU waits) is {_ms(graph_launch)} ms/step ({_pct(100 * graph_launch / step_ms)} of the step).")
        out.append(_finding("idle_launch", sentence, evidence, "findings_groups, report_idle", graph_launch, step_ms,
                            "without that launch overhead", "", graph_launch_ms=graph_launch,
                            graph_steps=rank_steps - eager))
    between = _num(idle["between_ms"])
    if between > 0:
        parts = [(f"host-bound {_ms(_num(idle['between_host_ms']))}", _num(idle["between_host_ms"])),
                 (f"after a sync {_ms(_num(idle['between_sync_ms']))}", _num(idle["between_sync_ms"])),
                 (f"launch overhead {_ms(_num(idle['between_launch_ms']))}", _num(idle["between_launch_ms"])),
                 (f"device-bound {_ms(_num(idle['between_device_ms']))}", _num(idle["between_device_ms"])),
                 (f"GPU work of no step {_ms(_num(idle['between_busy_ms']))}", _num(idle["between_busy_ms"]))]
        split = ", ".join(text for text, v in sorted(parts, key=lambda p: -p[1]) if v > 0)
        sentence = (f"Between steps, {_ms(between)} ms pass per step from one step's last GPU work to the next "
                    f"step's first ({_pct(100 * between / step_ms)} of the step time, outside it)"
                    + (f": {split} ms." if split else "."))
        out.append(_finding("between_steps", sentence, evidence, "report_idle", between, step_ms,
                            "without the time between steps", "",
                            **{k: idle[k] for k in ("between_ms", "between_host_ms", "between_sync_ms",
                                                    "between_launch_ms", "between_device_ms", "between_busy_ms",
                                                    "between_pct_of_span")}))
    return out


# ------------------------------------------------------------------------------------------------ speed of light


@dataclass
class _Bound:
    category: str
    kernel_ms: float  # all kernels of the category (report_breakdown)
    modelled_ms: float  # its ops with a cost model and a minimum
    minimum_ms: float  # their hardware minimum
    above_ms: float  # sum over those ops of max(time - minimum, 0)
    unmodelled_reason: str
    notes: list[str]
    device: str | None


_GRAPH_NO_SHAPES = "CUDA-graph replay: no eager"


def _no_bound_reason(rows: list[dict[str, Any]]) -> str:
    """Why the ops without a minimum have none, in words, from the roofline note of the largest."""
    if not rows:
        return "no recorded op with shapes launched them (profile with record_shapes=True)"
    note, op = rows[0]["note"] or "", rows[0]["op"]
    if note.startswith(_GRAPH_NO_SHAPES):
        return ("CUDA-graph replays record no shapes, and no eager step of the same batch size ran the same kernels "
                "(load an eager capture beside the graph one)")
    if note.startswith("shapes not recorded"):
        return "no shapes were recorded (profile with record_shapes=True)"
    if not note or note == "no cost model for this op":
        return f"k25trace has no cost model for its ops (the largest: {op})"
    return f"the largest, {op}: {note}"


def _bounds(rows: list[dict[str, Any]], categories: Sequence[tuple[str, float]]) -> dict[str, _Bound]:
    out = {}
    for category, kernel_ms in categories:
        # an op whose kernels fall in several categories ('moe_routing,quant_gemm') counts for its first
        mine = [r for r in rows if category in (r["category"] or "").split(",")]
        modelled = [r for r in mine if r["sol_us"] is not None and r["ms_per_step"]
                    and r["category"].split(",")[0] == category]
        others = sorted((r for r in mine if r not in modelled), key=lambda r: -(r["ms_per_step"] or 0))
        notes = []
        below = [r for r in modelled if r["ms_per_step"] < r["sol_us"] * r["calls_per_step"] / 1e3]
        if below:
            assumed = sorted({r["note"].split(";")[0] for r in below if r["note"]})
            notes.append(f"{_plural(len(below), 'op shape')} ({', '.join(sorted({r['op'] for r in below}))}) took "
                         "less than its computed minimum, which is then no bound"
                         + (f" (it assumes: {'; '.join(assumed)})" if assumed else "") + "; counted as 0 above it")
        if any("spread uniformly" in (r["note"] or "") for r in modelled if r not in below):
            notes.append("the expert GEMMs' minimum reads the experts that tokens spread evenly would hit (a router "
                         "that favours some experts reads fewer weights)")
        if any(r["dtype_source"] == "run" for r in modelled):
            notes.append("some element types were taken from the run's kernel names")
        out[category] = _Bound(
            category=category, kernel_ms=kernel_ms, modelled_ms=sum(r["ms_per_step"] for r in modelled),
            minimum_ms=sum(r["sol_us"] * r["calls_per_step"] / 1e3 for r in modelled),
            above_ms=sum(max(r["ms_per_step"] - r["sol_us"] * r["calls_per_step"] / 1e3, 0.0) for r in modelled),
            unmodelled_reason=_no_bound_reason(others), notes=notes,
            device=next((r["device"] for r in mine if r["device"]), None))
    return out


def _sol_findings(ctx: _Context, key: tuple[str, int | None], batch: list[dict[str, Any]], step_ms: float,
                  overlap_ms: float, min_pct: float) -> tuple[list[Finding], dict[str, _Bound]]:
    compute = sorted(((r["category"], _num(r["kernel_ms_per_step"])) for r in batch
                      if r["category"] not in (*_PSEUDO, *COMM_CATEGORIES) and _num(r["ms_per_step"]) > 0),
                     key=lambda c: -c[1])[:_TOP_CATEGORIES]
    bounds = _bounds(ctx.roofline.get(key, []), compute)
    out = []
    unbounded: list[_Bound] = []
    evidence = ctx.command("roofline")
    for category, b in bounds.items():
        if 100.0 * b.kernel_ms / step_ms < min_pct:
            continue
        if b.modelled_ms <= 0:
            unbounded.append(b)
            continue
        above = b.above_ms
        covered = 100.0 * b.modelled_ms / b.kernel_ms if b.kernel_ms else 0.0
        device = f"the {b.device}'s" if b.device else "the device's"
        sentence = (f"{category} kernels take {_ms(b.kernel_ms)} ms/step; those with recorded shapes "
                    f"({_ms(b.modelled_ms)} ms/step, {covered:.0f} % of them) need at least {_ms(b.minimum_ms)} "
                    f"ms/step at {device} datasheet peaks (memory bandwidth and compute): they run {_ms(above)} "
                    "ms/step above their minimum.")
        trust = []
        if covered < 99.5:
            trust.append(f"the other {_ms(b.kernel_ms - b.modelled_ms)} ms/step of {category} kernels has no minimum: "
                         f"{b.unmodelled_reason}")
        trust += b.notes
        if overlap_ms > 0:
            trust.append(f"kernel time, not step time: {_ms(overlap_ms)} ms/step of the step runs several categories "
                         "at once, so the step would gain less")
        out.append(_finding("kernels_sol", sentence, evidence, "sol.roofline", above, step_ms,
                            "at the hardware minimum (ops with shapes)", "; ".join(trust), category=category,
                            kernel_ms_per_step=b.kernel_ms, modelled_ms_per_step=b.modelled_ms,
                            minimum_ms_per_step=b.minimum_ms, device=b.device))
    if unbounded:
        reasons = sorted({b.unmodelled_reason for b in unbounded})
        if len(unbounded) == 1:
            b = unbounded[0]
            what = (f"the {b.category} kernels ({_ms(b.kernel_ms)} ms/step, {_pct(100 * b.kernel_ms / step_ms)} of "
                    "the step)")
        else:
            what = "these kernels (" + ", ".join(f"{b.category} {_ms(b.kernel_ms)} ms/step" for b in unbounded) + ")"
        sentence = f"No hardware minimum is known for {what}: " + "; ".join(reasons) + "."
        out.append(_finding("kernels_no_bound", sentence, evidence, "sol.roofline", None, step_ms, "no bound", "",
                            categories={b.category: b.kernel_ms for b in unbounded}, reasons=reasons))
    return out, bounds


def _largest_finding(ctx: _Context, batch: list[dict[str, Any]], step_ms: float, bounds: dict[str, _Bound],
                     comm: dict[str, dict[str, Any]], transfers: dict[str, Finding]) -> Finding | None:
    real = [r for r in batch if r["category"] not in _PSEUDO and _num(r["ms_per_step"]) > 0]
    if not real:
        return None
    top = max(real, key=lambda r: (_num(r["ms_per_step"]), r["category"]))
    category, ms = top["category"], _num(top["ms_per_step"])
    head = (f"The largest category is {category}: {_ms(ms)} ms/step of exclusive GPU time "
            f"({_pct(top['pct_of_step'])} of the step)")
    figures: dict[str, Any] = {"category": category, "ms_per_step": ms, "pct_of_step": top["pct_of_step"],
                               "kernel_ms_per_step": top["kernel_ms_per_step"]}
    evidence, trust = ctx.command("batch"), ""
    if category in COMM_CATEGORIES:
        row, transfer = comm.get(category), transfers.get(category)
        figures_t = transfer.figures if transfer is not None else {}
        if row is None:
            tail = ": wait and transfer cannot be told apart with the ranks loaded."
        else:
            wait, moving = _num(row["wait_ms_per_step"]), _num(row["transfer_ms_per_step"])
            tail = f", of which {_ms(wait)} ms/step is waiting for late ranks and {_ms(moving)} ms/step moving data"
            if "floor_ms_per_step" in figures_t and figures_t["floor_ms_per_step"]:
                floor = figures_t["floor_ms_per_step"]
                tail += (f"; the data transfer takes {_ratio(moving / floor)} the measured floor "
                         f"({_ms(floor)} ms/step)" + (": near it." if moving <= _NEAR * floor else ": far from it."))
                figures["floor_ms_per_step"] = floor
            elif "bound_ms_per_step" in figures_t and figures_t["bound_ms_per_step"]:
                bound = figures_t["bound_ms_per_step"]
                tail += (f"; the data transfer takes {_ratio(moving / bound)} a bandwidth-only bound "
                         f"({_ms(bound)} ms/step), which leaves out latency and is no reachable floor.")
                figures["bound_ms_per_step"] = bound
            else:
                tail += "; no bound is known for the transfer."
        evidence = f"{ctx.command('comm')}; {ctx.command('floor')}"
    elif category in bounds and bounds[category].modelled_ms > 0 and bounds[category].minimum_ms > 0:
        b = bounds[category]
        ratio = b.modelled_ms / b.minimum_ms
        tail = (f"; its ops with recorded shapes take {_ratio(ratio)} their hardware minimum"
                + (": near it." if ratio <= _NEAR else ": far from it.")
                + ("" if b.modelled_ms >= 0.995 * b.kernel_ms else
                   f" ({_ms(b.modelled_ms)} of its {_ms(b.kernel_ms)} kernel ms/step have shapes.)"))
        figures.update(modelled_ms_per_step=b.modelled_ms, minimum_ms_per_step=b.minimum_ms)
        evidence = f"{evidence}; {ctx.command('roofline')}"
        trust = "; ".join(b.notes)
    elif category in bounds:
        tail = f"; no hardware minimum is known for it: {bounds[category].unmodelled_reason}."
    else:
        tail = "; no bound is known for it."
    return _finding("largest_category", head + tail, evidence, "report_breakdown", None, step_ms, "no saving computed",
                    trust, **figures)


# ----------------------------------------------------------------------------------------------------- the list


def _rank(items: list[Finding], min_pct: float) -> tuple[list[Finding], int]:
    """Savings largest first, then the findings without a saving (in KINDS order); those with a saving below
    ``min_pct`` of the step (or none at all) left out and counted."""
    def large(f: Finding) -> bool:
        if f.saving_ms is not None:
            return (f.saving_pct or 0) >= min_pct
        if f.kind == "collective_transfer":  # no bound: worth a line only when the transfer itself is large
            return f.figures.get("transfer_pct", 0) >= min_pct
        return True

    kept = [f for f in items if large(f)]
    order = list(KINDS)
    kept.sort(key=lambda f: (f.saving_ms is None, -(f.saving_ms or 0), order.index(f.kind)))
    return kept, len(items) - len(kept)


def _heading(label: str, batch: int | None, group: dict[str, Any]) -> str:
    steps, ranks = int(group["engine_steps"]), int(group["ranks"])
    size = f"batch size {batch}" if batch is not None else "no batch size"
    on = (f"{_plural(steps, 'engine step')} × {ranks} ranks ({_plural(int(group['rank_steps']), 'rank-step')})"
          if ranks > 1 else _plural(steps, "step"))
    mean = "step" if int(group["rank_steps"]) == 1 else "mean step"
    return f"{label}, {size}: {on}, {mean} {_ms(_num(group['step_ms']))} ms"


def _group(ctx: _Context, group: dict[str, Any], min_pct: float) -> FindingGroup:
    key = (group["run_id"], group["batch_size"])
    step_ms = _num(group["step_ms"])
    batch = ctx.batch.get(key, [])
    comm = {r["category"]: r for r in ctx.comm.get(key, [])}
    items: list[Finding] = []
    transfers: dict[str, Finding] = {}
    bandwidth = ctx.bandwidth.get(key, [])
    for category in COMM_CATEGORIES:
        row = comm.get(category)
        if row is None:
            continue
        name = _comm_name(category, bandwidth)
        if _num(row["wait_ms_per_step"]) > 0:
            items.append(_wait_finding(ctx, key, row, step_ms, name))
        transfer = _transfer_finding(ctx, key, row, step_ms, name)
        if transfer is not None:
            transfers[category] = transfer
            items.append(transfer)
    unpaired = (group["world_size"] or 1) > (group["ranks_loaded"] or 1)
    for r in batch:
        if (r["category"] in COMM_CATEGORIES and r["category"] not in comm and unpaired
                and _num(r["pct_of_step"]) >= min_pct):
            items.append(_unpaired_finding(ctx, group, r, step_ms))
    idle = ctx.idle.get(key)
    if idle is not None:
        items += _idle_findings(ctx, group, idle, step_ms)
    overlap = next((_num(r["ms_per_step"]) for r in batch if r["category"] == "overlap"), 0.0)
    sol_items, bounds = _sol_findings(ctx, key, batch, step_ms, overlap, min_pct)
    items += sol_items
    largest = _largest_finding(ctx, batch, step_ms, bounds, comm, transfers)
    if largest is not None:
        items.append(largest)
    kept, left_out = _rank(items, min_pct)
    notes = []
    if group["inferred_steps"]:
        notes.append(f"{group['inferred_steps']} of the {group['rank_steps']} rank-steps were inferred from GPU idle "
                     "gaps (no step markers): no batch size, and where one step ends is a guess from gap lengths.")
    if int(group["engine_steps"]) < 3:
        notes.append(f"from {_plural(int(group['engine_steps']), 'engine step')} only: one slow step weighs heavily.")
    label = ctx.labels.get(group["run_id"], str(group["run_id"]))
    return FindingGroup(run_id=group["run_id"], run_label=label, batch_size=group["batch_size"],
                        engine_steps=int(group["engine_steps"]), rank_steps=int(group["rank_steps"]),
                        ranks=int(group["ranks"]), world_size=group["world_size"], step_ms=step_ms,
                        heading=_heading(label, group["batch_size"], group), findings=tuple(kept),
                        left_out=left_out, notes=tuple(notes))


def findings(con: duckdb.DuckDBPyConnection, *, phase: str | None = None, db: str | Path = "FILE",
             peaks_file: Path | None = None, min_pct: float = 1.0) -> Findings:
    """Per run and batch size, the ranked findings of the steps of ``phase``.

    ``phase`` None: decode steps; when the database has none, every phase (a note says so), and the steps
    inferred from idle gaps when no trace has step markers (:func:`.report.resolve_phase`). ``db`` is the
    database path written into the evidence commands; ``peaks_file`` as ``report --by roofline --peaks``.
    Findings with a saving below ``min_pct`` % of the step are left out (counted in ``left_out``)."""
    notes = []
    if phase is None:
        phase, note = report.resolve_phase(con, None)
        if note:
            notes.append(note)
        if phase == "decode" and query_frame(con, "findings_groups", {"phase": "decode"}).is_empty():
            steps = query_frame(con, "report_steps", {"phase": ALL, "rank": None, "trace_id": None})
            if not steps.is_empty():
                phase = ALL
                counts = steps.group_by("phase").len().sort("phase")
                listed = ", ".join(f"{p} {_plural(n, 'rank-step')}" for p, n in counts.iter_rows())
                notes.append(f"no decode steps (present: {listed}): the findings are over the steps of every phase "
                             "(`--phase all` in the commands).")
    ctx = _Context(con, check_phase(phase), str(db), peaks_file)
    groups = tuple(_group(ctx, g, min_pct) for g in ctx.groups.iter_rows(named=True))
    return Findings(phase=phase, groups=groups, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------------- as data

FRAME_SCHEMA = {"run_id": pl.Utf8, "run_label": pl.Utf8, "batch_size": pl.Int64, "position": pl.Int64,
                "kind": pl.Utf8, "sentence": pl.Utf8, "saving_ms": pl.Float64, "saving_pct": pl.Float64,
                "saving_label": pl.Utf8, "evidence": pl.Utf8, "query": pl.Utf8, "trust": pl.Utf8,
                "figures": pl.Utf8}


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def findings_frame(result: Findings) -> pl.DataFrame:
    """One row per finding (``report --by findings --format csv``): its group, position in the ranking, kind,
    sentence, saving, evidence, trust note, and the raw numbers as a JSON object."""
    rows = [{"run_id": g.run_id, "run_label": g.run_label, "batch_size": g.batch_size, "position": i + 1,
             "kind": f.kind, "sentence": f.sentence, "saving_ms": f.saving_ms, "saving_pct": f.saving_pct,
             "saving_label": f.saving_label, "evidence": f.evidence, "query": f.query, "trust": f.trust,
             "figures": json.dumps(_json_safe(dict(f.figures)), sort_keys=True)}
            for g in result.groups for i, f in enumerate(g.findings)]
    return pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row") if rows else pl.DataFrame(schema=FRAME_SCHEMA)


def as_dict(result: Findings) -> dict[str, Any]:
    """The whole result as JSON-ready data (``report --by findings --format json``)."""
    return _json_safe(result.as_dict())
