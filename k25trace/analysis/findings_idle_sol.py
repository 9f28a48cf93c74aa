"""Findings about idle time (inside steps by cause, the launch overhead CUDA graphs would remove, between steps),
kernels against their hardware minimum (speed of light), and the largest category against its bound."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from k25trace.analysis.findings_base import (
    _NEAR,
    _PSEUDO,
    _TOP_CATEGORIES,
    COMM_CATEGORIES,
    Finding,
    _Context,
    _finding,
    _ms,
    _num,
    _pct,
    _plural,
    _ratio,
)

_IDLE_FIGURES = (
    "wall_ms",
    "busy_ms",
    "idle_ms",
    "host_ms",
    "sync_ms",
    "launch_overhead_ms",
    "device_ms",
    "unknown_ms",
    "idle_pct",
)
"""The report_idle columns every idle-by-cause finding carries as figures."""

_IDLE_CAUSES = {
    "idle_host": (
        "host_ms",
        "waiting for the host to launch work (host-bound: the launch came after the GPU had gone idle)",
        "without host-bound idle",
    ),
    "idle_sync": (
        "sync_ms",
        "after the host waited for the GPU (a synchronize or a blocking copy)",
        "without idle after host syncs",
    ),
    "idle_device": (
        "device_ms",
        "although its next work was already launched (a dependency, another stream, an event)",
        "without device-bound idle",
    ),
    "idle_unknown": (
        "unknown_ms",
        "for no known cause (no launch found for the work that ended the gap)",
        "without that idle",
    ),
}
"""Per finding kind: the report_idle column, why the GPU is idle in words, and the label of what is saved."""

_BETWEEN_FIGURES = (
    "between_ms",
    "between_host_ms",
    "between_sync_ms",
    "between_launch_ms",
    "between_device_ms",
    "between_busy_ms",
    "between_pct_of_span",
)


def idle_findings(ctx: _Context, group: dict[str, Any], idle: dict[str, Any], step_ms: float) -> list[Finding]:
    """The idle findings of one group: idle inside the steps by cause, the launch overhead (eager steps: what CUDA
    graphs would remove; graph steps), and the time between steps."""
    evidence = f"{ctx.command('idle')}; {ctx.command('timeline')}"
    out = _idle_cause_findings(idle, step_ms, evidence)
    for finding in (
        _cuda_graphs_finding(ctx, group, step_ms, evidence),
        _graph_launch_finding(group, step_ms, evidence),
        _between_steps_finding(idle, step_ms, evidence),
    ):
        if finding is not None:
            out.append(finding)
    return out


def _idle_cause_findings(idle: dict[str, Any], step_ms: float, evidence: str) -> list[Finding]:
    figures = {k: idle[k] for k in _IDLE_FIGURES}
    out = []
    for kind, (column, why, label) in _IDLE_CAUSES.items():
        ms = _num(idle[column])
        if ms <= 0:
            continue
        sentence = f"The GPU sits idle {_ms(ms)} ms/step ({_pct(100 * ms / step_ms)} of the step) {why}."
        out.append(_finding(kind, sentence, evidence, "report_idle", ms, step_ms, label, "", **figures))
    return out


def _cuda_graphs_finding(ctx: _Context, group: dict[str, Any], step_ms: float, evidence: str) -> Finding | None:
    """The launch overhead of the eager rank-steps: the part CUDA graphs would remove."""
    eager, rank_steps = int(group["eager_steps"]), int(group["rank_steps"])
    eager_launch = _num(group["eager_launch_ms"])
    if not eager or eager_launch <= 0:
        return None
    which = (
        ("This step runs" if rank_steps == 1 else "These steps run") + " without CUDA graphs"
        if eager == rank_steps
        else f"{eager} of the {rank_steps} rank-steps run without CUDA graphs"
    )
    sentence = (
        f"{which}: their launch overhead (from each launch call's start to its kernel's start, the GPU "
        f"idle) is {_ms(eager_launch)} ms/step ({_pct(100 * eager_launch / step_ms)} of the step), "
        "the part CUDA graphs would remove that is measured as such. Their host-bound idle "
        f"({_ms(_num(group['eager_host_ms']))} ms/step) may shrink too; it is not counted here."
    )
    caveats = [
        t
        for t in (
            "" if eager == rank_steps else "measured on the eager rank-steps, per rank-step of the whole group",
            ""
            if ctx.phase == "decode"
            else "not only decode steps: whether the engine can run them as CUDA graphs "
            "depends on it (vLLM captures decode batch sizes)",
        )
        if t
    ]
    return _finding(
        "cuda_graphs",
        sentence,
        evidence,
        "findings_groups, report_idle",
        eager_launch,
        step_ms,
        "with CUDA graphs (launch overhead only)",
        "; ".join(caveats),
        eager_steps=eager,
        rank_steps=rank_steps,
        eager_launch_ms=eager_launch,
        eager_host_ms=_num(group["eager_host_ms"]),
    )


def _graph_launch_finding(group: dict[str, Any], step_ms: float, evidence: str) -> Finding | None:
    """The launch overhead left in the CUDA-graph rank-steps."""
    graph_launch = _num(group["graph_launch_ms"])
    if graph_launch <= 0:
        return None
    sentence = (
        f"Launch overhead in the CUDA-graph steps (from a launch call's start to its GPU start, the GPU "
        f"idle) is {_ms(graph_launch)} ms/step ({_pct(100 * graph_launch / step_ms)} of the step)."
    )
    return _finding(
        "idle_launch",
        sentence,
        evidence,
        "findings_groups, report_idle",
        graph_launch,
        step_ms,
        "without that launch overhead",
        "",
        graph_launch_ms=graph_launch,
        graph_steps=int(group["rank_steps"]) - int(group["eager_steps"]),
    )


def _between_steps_finding(idle: dict[str, Any], step_ms: float, evidence: str) -> Finding | None:
    """The time from one step's last GPU work to the next step's first, by cause."""
    between = _num(idle["between_ms"])
    if between <= 0:
        return None
    parts = [
        (f"host-bound {_ms(_num(idle['between_host_ms']))}", _num(idle["between_host_ms"])),
        (f"after a sync {_ms(_num(idle['between_sync_ms']))}", _num(idle["between_sync_ms"])),
        (f"launch overhead {_ms(_num(idle['between_launch_ms']))}", _num(idle["between_launch_ms"])),
        (f"device-bound {_ms(_num(idle['between_device_ms']))}", _num(idle["between_device_ms"])),
        (f"GPU work of no step {_ms(_num(idle['between_busy_ms']))}", _num(idle["between_busy_ms"])),
    ]
    split = ", ".join(text for text, v in sorted(parts, key=lambda p: -p[1]) if v > 0)
    sentence = (
        f"Between steps, {_ms(between)} ms pass per step from one step's last GPU work to the next "
        f"step's first ({_pct(100 * between / step_ms)} of the step time, outside it)"
        + (f": {split} ms." if split else ".")
    )
    return _finding(
        "between_steps",
        sentence,
        evidence,
        "report_idle",
        between,
        step_ms,
        "without the time between steps",
        "",
        **{k: idle[k] for k in _BETWEEN_FIGURES},
    )


# ------------------------------------------------------------------------------------------------ speed of light


@dataclass
class Bound:
    category: str
    kernel_ms: float  # all kernels of the category (report_breakdown)
    modelled_ms: float  # its ops with a cost model and a minimum
    minimum_ms: float  # their hardware minimum
    above_ms: float  # sum over those ops of max(time - minimum, 0)
    unmodelled_reason: str
    notes: list[str]
    device: str | None


_GRAPH_NO_SHAPES = "CUDA-graph replay: no eager"
_GRAPH_NO_GRID = "CUDA-graph replay: the trace records no grid or block"


def _no_bound_reason(rows: list[dict[str, Any]]) -> str:
    """Why the ops without a minimum have none, in words, from the roofline note of the largest."""
    if not rows:
        return "no recorded op with shapes launched them (profile with record_shapes=True)"
    note, op = rows[0]["note"] or "", rows[0]["op"]
    if op.startswith("(") and op.endswith(")"):  # a kernel without a CPU op: in brackets in the tables, not here
        op = op[1:-1]
    if note.startswith(_GRAPH_NO_SHAPES):
        return (
            "CUDA-graph replays record no shapes, and no eager step of the same batch size ran the same kernels "
            "(load an eager capture beside the graph one)"
        )
    if note.startswith(_GRAPH_NO_GRID):
        return (
            "CUDA-graph replays record no shapes, and the trace gives these kernels no grid or block to match them "
            f"with an eager step's kernels (the largest: {op})"
        )
    if note.startswith("shapes not recorded"):
        return "no shapes were recorded (profile with record_shapes=True)"
    if not note or note == "no cost model for this op":
        return f"k25trace has no cost model for its ops (the largest: {op})"
    return f"the largest, {op}: {note}"


def _bounds(rows: list[dict[str, Any]], categories: Sequence[tuple[str, float]]) -> dict[str, Bound]:
    out = {}
    for category, kernel_ms in categories:
        # an op whose kernels fall in several categories ('moe_routing,quant_gemm') counts for its first
        mine = [r for r in rows if category in (r["category"] or "").split(",")]
        modelled = [
            r for r in mine if r["sol_us"] is not None and r["ms_per_step"] and r["category"].split(",")[0] == category
        ]
        others = sorted((r for r in mine if r not in modelled), key=lambda r: -(r["ms_per_step"] or 0))
        notes = []
        below = [r for r in modelled if r["ms_per_step"] < r["sol_us"] * r["calls_per_step"] / 1e3]
        if below:
            assumed = sorted({r["note"].split(";")[0] for r in below if r["note"]})
            notes.append(
                f"{_plural(len(below), 'op shape')} ({', '.join(sorted({r['op'] for r in below}))}) took "
                "less than its computed minimum, which is then no bound"
                + (f" (it assumes: {'; '.join(assumed)})" if assumed else "")
                + "; counted as 0 above it"
            )
        if any("spread uniformly" in (r["note"] or "") for r in modelled if r not in below):
            notes.append(
                "the expert GEMMs' minimum reads the experts that tokens spread evenly would hit (a router "
                "that favours some experts reads fewer weights)"
            )
        if any(r["dtype_source"] == "run" for r in modelled):
            notes.append("some element types were taken from the run's kernel names")
        out[category] = Bound(
            category=category,
            kernel_ms=kernel_ms,
            modelled_ms=sum(r["ms_per_step"] for r in modelled),
            minimum_ms=sum(r["sol_us"] * r["calls_per_step"] / 1e3 for r in modelled),
            above_ms=sum(max(r["ms_per_step"] - r["sol_us"] * r["calls_per_step"] / 1e3, 0.0) for r in modelled),
            unmodelled_reason=_no_bound_reason(others),
            notes=notes,
            device=next((r["device"] for r in mine if r["device"]), None),
        )
    return out


def sol_findings(
    ctx: _Context,
    key: tuple[str, int | None],
    batch: list[dict[str, Any]],
    step_ms: float,
    overlap_ms: float,
    min_pct: float,
) -> tuple[list[Finding], dict[str, Bound]]:
    compute = sorted(
        (
            (r["category"], _num(r["kernel_ms_per_step"]))
            for r in batch
            if r["category"] not in (*_PSEUDO, *COMM_CATEGORIES) and _num(r["ms_per_step"]) > 0
        ),
        key=lambda c: -c[1],
    )[:_TOP_CATEGORIES]
    bounds = _bounds(ctx.roofline.get(key, []), compute)
    out = []
    unbounded: list[Bound] = []
    evidence = ctx.command("roofline")
    for b in bounds.values():
        if 100.0 * b.kernel_ms / step_ms < min_pct:
            continue
        if b.modelled_ms <= 0:
            unbounded.append(b)
            continue
        out.append(_sol_finding(b, step_ms, overlap_ms, evidence))
    if unbounded:
        out.append(_no_bound_finding(unbounded, step_ms, evidence))
    return out, bounds


def _sol_finding(b: Bound, step_ms: float, overlap_ms: float, evidence: str) -> Finding:
    """How far one category's kernels with recorded shapes run above their hardware minimum."""
    category, above = b.category, b.above_ms
    covered = 100.0 * b.modelled_ms / b.kernel_ms if b.kernel_ms else 0.0
    device = f"the {b.device}'s" if b.device else "the device's"
    sentence = (
        f"{category} kernels take {_ms(b.kernel_ms)} ms/step; those with recorded shapes "
        f"({_ms(b.modelled_ms)} ms/step, {covered:.0f} % of them) need at least {_ms(b.minimum_ms)} "
        f"ms/step at {device} datasheet peaks (memory bandwidth and compute): they run {_ms(above)} "
        "ms/step above their minimum."
    )
    trust = []
    if covered < 99.5:
        trust.append(
            f"the other {_ms(b.kernel_ms - b.modelled_ms)} ms/step of {category} kernels has no minimum: "
            f"{b.unmodelled_reason}"
        )
    trust += b.notes
    if overlap_ms > 0:
        trust.append(
            f"kernel time, not step time: {_ms(overlap_ms)} ms/step of the step runs several categories "
            "at once, so the step would gain less"
        )
    return _finding(
        "kernels_sol",
        sentence,
        evidence,
        "sol.roofline",
        above,
        step_ms,
        "at the hardware minimum (ops with shapes)",
        "; ".join(trust),
        category=category,
        kernel_ms_per_step=b.kernel_ms,
        modelled_ms_per_step=b.modelled_ms,
        minimum_ms_per_step=b.minimum_ms,
        device=b.device,
    )


def _no_bound_finding(unbounded: list[Bound], step_ms: float, evidence: str) -> Finding:
    """The categories with kernels but no hardware minimum, and why."""
    reasons = sorted({b.unmodelled_reason for b in unbounded})
    if len(unbounded) == 1:
        b = unbounded[0]
        what = f"the {b.category} kernels ({_ms(b.kernel_ms)} ms/step, {_pct(100 * b.kernel_ms / step_ms)} of the step)"
    else:
        what = "these kernels (" + ", ".join(f"{b.category} {_ms(b.kernel_ms)} ms/step" for b in unbounded) + ")"
    sentence = f"No hardware minimum is known for {what}: " + "; ".join(reasons) + "."
    return _finding(
        "kernels_no_bound",
        sentence,
        evidence,
        "sol.roofline",
        None,
        step_ms,
        "no bound",
        "",
        categories={b.category: b.kernel_ms for b in unbounded},
        reasons=reasons,
    )


def largest_finding(
    ctx: _Context,
    batch: list[dict[str, Any]],
    step_ms: float,
    bounds: dict[str, Bound],
    comm: dict[str, dict[str, Any]],
    transfers: dict[str, Finding],
) -> Finding | None:
    real = [r for r in batch if r["category"] not in _PSEUDO and _num(r["ms_per_step"]) > 0]
    if not real:
        return None
    top = max(real, key=lambda r: (_num(r["ms_per_step"]), r["category"]))
    category, ms = top["category"], _num(top["ms_per_step"])
    head = (
        f"The largest category is {category}: {_ms(ms)} ms/step of exclusive GPU time "
        f"({_pct(top['pct_of_step'])} of the step)"
    )
    figures: dict[str, Any] = {
        "category": category,
        "ms_per_step": ms,
        "pct_of_step": top["pct_of_step"],
        "kernel_ms_per_step": top["kernel_ms_per_step"],
    }
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
                tail += (
                    f"; the data transfer takes {_ratio(moving / floor)} the measured floor "
                    f"({_ms(floor)} ms/step)" + (": near it." if moving <= _NEAR * floor else ": far from it.")
                )
                figures["floor_ms_per_step"] = floor
            elif "bound_ms_per_step" in figures_t and figures_t["bound_ms_per_step"]:
                bound = figures_t["bound_ms_per_step"]
                tail += (
                    f"; the data transfer takes {_ratio(moving / bound)} a bandwidth-only bound "
                    f"({_ms(bound)} ms/step), which leaves out latency and is no reachable floor."
                )
                figures["bound_ms_per_step"] = bound
            else:
                tail += "; no bound is known for the transfer."
        evidence = f"{ctx.command('comm')}; {ctx.command('floor')}"
    elif category in bounds and bounds[category].modelled_ms > 0 and bounds[category].minimum_ms > 0:
        b = bounds[category]
        ratio = b.modelled_ms / b.minimum_ms
        tail = (
            f"; its ops with recorded shapes take {_ratio(ratio)} their hardware minimum"
            + (": near it." if ratio <= _NEAR else ": far from it.")
            + (
                ""
                if b.modelled_ms >= 0.995 * b.kernel_ms
                else f" ({_ms(b.modelled_ms)} of its {_ms(b.kernel_ms)} kernel ms/step have shapes.)"
            )
        )
        figures.update(modelled_ms_per_step=b.modelled_ms, minimum_ms_per_step=b.minimum_ms)
        evidence = f"{evidence}; {ctx.command('roofline')}"
        trust = "; ".join(b.notes)
    elif category in bounds:
        tail = f"; no hardware minimum is known for it: {bounds[category].unmodelled_reason}."
    else:
        tail = "; no bound is known for it."
    return _finding(
        "largest_category",
        head + tail,
        evidence,
        "report_breakdown",
        None,
        step_ms,
        "no saving computed",
        trust,
        **figures,
    )
