"""Findings about collectives: the wait for a late rank and why it was late, the data transfer against the measured
floor (or a bandwidth-only bound, labelled as such), and collective time of a run with ranks missing."""

from __future__ import annotations

from typing import Any

from k25trace.analysis import sol
from k25trace.analysis.findings_base import (
    _COMM_NAMES,
    Finding,
    _Context,
    _finding,
    _ms,
    _num,
    _pct,
)

_BUS_FACTOR_HALF = (
    "all_gather",
    "allgather",
    "reduce_scatter",
    "all_to_all",
    "alltoall",
    "_allgather_base",
    "_reduce_scatter_base",
)


def _bus_factor(collective: str | None, n: int) -> float:
    """nccl-tests' bus-bandwidth factor, as report_comm_bandwidth.sql applies it."""
    if collective in ("allreduce", "all_reduce"):
        return 2.0 * (n - 1) / n
    if collective in _BUS_FACTOR_HALF:
        return (n - 1) / n
    return 1.0


_ONE_NAME = {
    "all_gather": "All-gather",
    "allgather": "All-gather",
    "_allgather_base": "All-gather",
    "reduce_scatter": "Reduce-scatter",
    "_reduce_scatter_base": "Reduce-scatter",
    "broadcast": "Broadcast",
    "send": "Send/receive",
    "recv": "Send/receive",
}


def comm_name(category: str, bandwidth: list[dict[str, Any]]) -> str:
    if category != "comm_other":
        return _COMM_NAMES.get(category, category)
    names = sorted({r["collective"] for r in bandwidth if r["category"] == category and r["collective"]})
    if len(names) == 1 and names[0] in _ONE_NAME:
        return _ONE_NAME[names[0]]
    return f"Other collectives ({', '.join(names)})" if names else "Other collectives"


_CAUSE_WORDS = (
    ("host_ms_per_step", "its host launched late"),
    ("sync_ms_per_step", "it waited on a host sync"),
    ("gpu_work_ms_per_step", "longer GPU work"),
    ("device_ms_per_step", "it waited on its own device"),
    ("unexplained_ms_per_step", "unexplained"),
)


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
        text += ("; " if text else "") + (
            f"{_ms(first)} ms/step at the run's first collective, which has nothing before it to say why"
        )
    return text or "no cause recorded"


_WAIT_FIGURES = (
    "calls_per_step",
    "ms_per_step",
    "transfer_ms_per_step",
    "wait_ms_per_step",
    "wait_pct",
    "wait_host_ms_per_step",
    "wait_sync_ms_per_step",
    "wait_gpu_work_ms_per_step",
    "wait_device_ms_per_step",
    "wait_other_ms_per_step",
    "why_late",
    "straggler_rank",
    "straggler_wait_pct",
    "last_rank",
    "last_pct",
    "skew_p50_us",
    "skew_max_us",
    "alignment",
    "residual_p90_us",
    "steps",
    "ranks",
)
"""The report_comm columns the collective_wait finding carries as figures."""


def wait_finding(ctx: _Context, key: tuple[str, int | None], row: dict[str, Any], step_ms: float, name: str) -> Finding:
    """The wait of one collective category for late ranks, with the two ranks that caused most of it and why."""
    wait = _num(row["wait_ms_per_step"])
    causes = [
        c for c in ctx.causes.get(key, []) if c["category"] == row["category"] and _num(c["wait_ms_per_step"]) > 0
    ]
    causes.sort(key=lambda c: (-_num(c["wait_ms_per_step"]), c["late_rank"]))
    figures = {k: row[k] for k in _WAIT_FIGURES}
    figures["category"] = row["category"]
    figures["late_ranks"] = [
        {
            k: (c[k] + 0.0 if isinstance(c[k], float) else c[k])
            for k in c
            if k not in ("run_id", "batch_size", "category")
        }
        for c in causes
    ]
    return _finding(
        "collective_wait",
        _wait_sentence(row, causes, step_ms, name),
        f"{ctx.command('comm')}; {ctx.command('comm-site')}",
        "report_comm, findings_comm_causes",
        wait,
        step_ms,
        "without the wait",
        "; ".join(_wait_trust(row, causes)),
        **figures,
    )


def _wait_sentence(row: dict[str, Any], causes: list[dict[str, Any]], step_ms: float, name: str) -> str:
    wait, transfer, total = _num(row["wait_ms_per_step"]), _num(row["transfer_ms_per_step"]), _num(row["ms_per_step"])
    sentence = (
        f"{name}: {_ms(total)} ms/step ({_pct(100 * total / step_ms if step_ms else None)} of the step), of "
        f"which {_ms(transfer)} ms moves data and {_ms(wait)} ms waits for a rank that started late (mean over "
        f"the {int(row['ranks'])} ranks)."
    )
    for cause in causes[:2]:
        share = 100.0 * _num(cause["wait_ms_per_step"]) / wait if wait else 0.0
        sentence += (
            f" Rank {cause['late_rank']} caused {_ms(_num(cause['wait_ms_per_step']))} ms/step of it "
            f"({share:.0f} %): {_why(cause)}."
        )
    if len(causes) > 2:
        rest = sum(_num(c["wait_ms_per_step"]) for c in causes[2:])
        sentence += f" {len(causes) - 2} other ranks caused {_ms(rest)} ms/step."
    return sentence


def _wait_trust(row: dict[str, Any], causes: list[dict[str, Any]]) -> list[str]:
    """How far the wait can be trusted: the clock alignment, the pairing, the part at the first collective."""
    trust = []
    if row["alignment"] == "poor":
        trust.append(
            f"the ranks' clocks align poorly (paired collectives end {row['residual_p90_us']} µs apart at "
            "p90): the wait is approximate"
        )
    elif row["alignment"] == "unpaired":
        trust.append("some collectives could not be paired across ranks")
    if row["pairing"] != "per step":
        trust.append("no step markers: collectives were paired over the whole trace, the steps inferred")
    first = sum(_num(c["first_ms_per_step"]) for c in causes)
    if first > 0:
        trust.append(
            f"{_ms(first)} ms/step of the wait is at the run's first collective, whose cause is unknown "
            "(ranks whose profilers started apart would look like this); the saving counts it"
        )
    return trust


def transfer_finding(
    ctx: _Context, key: tuple[str, int | None], row: dict[str, Any], step_ms: float, name: str
) -> Finding | None:
    """The data transfer of one collective category against the measured all-reduce floor, else against a
    bandwidth-only bound (no saving ranked on it), else why there is no bound."""
    floor = ctx.floor.get(key) if row["category"] == "allreduce" else None
    if floor is not None and (floor["floor_kernel_ms"] is not None or floor["floor_ms"] is not None):
        return _floor_transfer_finding(ctx, row, floor, step_ms, name)
    sizes = [r for r in ctx.bandwidth.get(key, []) if r["category"] == row["category"]]
    dev = ctx.devices.get(key[0])
    link = dev.peak("interconnect_gbps") if dev else None
    evidence = f"{ctx.command('comm-bw')}; {ctx.command('floor')}"
    if not sizes or any(r["size_bytes"] is None for r in sizes) or not link or not int(row["steps"]):
        why = (
            "the message sizes are not recorded (CUDA-graph replays record none)"
            if not sizes or any(r["size_bytes"] is None for r in sizes)
            else "the device has no link bandwidth in queries/device_peaks.csv (give --peaks FILE)"
        )
        return _unbound_transfer_finding(row, why, evidence, step_ms, name)
    assert dev is not None
    return _bandwidth_transfer_finding(row, sizes, dev, link, evidence, step_ms, name)


def _floor_transfer_finding(
    ctx: _Context, row: dict[str, Any], floor: dict[str, Any], step_ms: float, name: str
) -> Finding:
    """The all-reduce transfer against the floor `k25trace bench allreduce` measured (kernel time, else wall)."""
    category, transfer = row["category"], _num(row["transfer_ms_per_step"])
    calls = _num(row["calls_per_step"])
    kernel = floor["floor_kernel_ms"] is not None
    floor_ms = _num(floor["floor_kernel_ms"] if kernel else floor["floor_ms"])
    saving = max(transfer - floor_ms, 0.0)
    basis = "NCCL kernel time alone" if kernel else "burst wall time per all-reduce, an upper bound of the kernel floor"
    size = f" of {floor['msg_bytes']:,} B" if floor["msg_bytes"] else ""
    sentence = (
        f"{name}: its data transfer takes {_ms(transfer)} ms/step; the measured floor for "
        f"{floor['allreduce_per_step']:g} all-reduces{size} on {floor['world_size']} ranks is "
        f"{_ms(floor_ms)} ms/step (`k25trace bench allreduce`, {floor['floor_mode']} burst, {basis}): "
        + (f"{_ms(saving)} ms/step above it." if saving > 0 else "the transfer is at the floor.")
    )
    notes = []
    if not kernel:
        notes.append("wall floor: the kernel floor is lower, so the saving is at least this")
    if floor["allreduce_per_step"] is not None and abs(_num(floor["allreduce_per_step"]) - calls) > 1e-6:
        notes.append(
            f"{floor['allreduce_per_step']:g} all-reduce kernels per step, {calls:g} of them paired across ranks"
        )
    return _finding(
        "collective_transfer",
        sentence,
        f"{ctx.command('floor')}; {ctx.command('comm-bw')}",
        "report_allreduce_floor",
        saving,
        step_ms,
        "at the measured floor",
        "; ".join(notes),
        category=category,
        transfer_ms_per_step=transfer,
        floor_ms_per_step=floor_ms,
        floor_basis=floor["floor_basis"],
        floor_mode=floor["floor_mode"],
        allreduce_per_step=floor["allreduce_per_step"],
        msg_bytes=floor["msg_bytes"],
    )


def _unbound_transfer_finding(row: dict[str, Any], why: str, evidence: str, step_ms: float, name: str) -> Finding:
    """A transfer with neither a measured floor nor a bandwidth bound, and why there is none."""
    transfer = _num(row["transfer_ms_per_step"])
    sentence = (
        f"{name}: its data transfer takes {_ms(transfer)} ms/step; no bound: {why}, and no "
        "`k25trace bench allreduce` floor is stored."
    )
    return _finding(
        "collective_transfer",
        sentence,
        evidence,
        "report_comm_bandwidth",
        None,
        step_ms,
        "no bound",
        "",
        category=row["category"],
        transfer_ms_per_step=transfer,
        transfer_pct=round(100 * transfer / step_ms, 2) if step_ms else 0.0,
    )


def _bandwidth_transfer_finding(
    row: dict[str, Any],
    sizes: list[dict[str, Any]],
    dev: sol.Peaks,
    link: float,
    evidence: str,
    step_ms: float,
    name: str,
) -> Finding:
    """A transfer against its bus traffic at the datasheet link bandwidth: a bound that leaves latency out."""
    transfer, steps = _num(row["transfer_ms_per_step"]), int(row["steps"])
    bus_bytes = sum(r["calls"] * r["size_bytes"] * _bus_factor(r["collective"], int(r["ranks"])) for r in sizes)
    bound = bus_bytes / steps / (link * 1e9) * 1e3
    sentence = (
        f"{name}: its data transfer takes {_ms(transfer)} ms/step; no floor was measured (`k25trace bench "
        f"allreduce`). A bandwidth-only bound: its {bus_bytes / steps / 1e6:,.3f} MB of bus traffic per step "
        f"at the {dev.device}'s datasheet link bandwidth ({link:g} GB/s per direction; {dev.interconnect}) "
        f"takes {_ms(bound)} ms, with each collective's latency left out, so no transfer reaches it."
    )
    trust = (
        "bandwidth-only bound: no saving is ranked on it, as it leaves out latency (which dominates small "
        "messages); measure the floor with k25trace bench allreduce --db, then report --by floor"
    )
    return _finding(
        "collective_transfer",
        sentence,
        evidence,
        "report_comm_bandwidth",
        None,
        step_ms,
        "no measured floor (bandwidth-only bound in the figures)",
        trust,
        category=row["category"],
        transfer_ms_per_step=transfer,
        transfer_pct=round(100 * transfer / step_ms, 2) if step_ms else 0.0,
        bound_ms_per_step=bound,
        above_bound_ms_per_step=max(transfer - bound, 0.0),
        link_gbps=link,
        bus_bytes_per_step=bus_bytes / steps,
        device=dev.device,
    )


def unpaired_finding(ctx: _Context, group: dict[str, Any], row: dict[str, Any], step_ms: float) -> Finding:
    name = _COMM_NAMES.get(row["category"], row["category"])
    ms = _num(row["kernel_ms_per_step"])
    loaded = int(group["ranks_loaded"] or 1)
    sentence = (
        f"{name}: {_ms(ms)} ms/step ({_pct(row['pct_of_step'])} of the step), but only {loaded} of the run's "
        f"{group['world_size']} ranks {'was' if loaded == 1 else 'were'} loaded, so its time waiting for other "
        "ranks cannot be told from its data transfer: load every rank's trace to split it."
    )
    return _finding(
        "collective_unpaired",
        sentence,
        ctx.command("batch"),
        "report_breakdown",
        None,
        step_ms,
        "no saving computed",
        "",
        category=row["category"],
        kernel_ms_per_step=ms,
        ranks_loaded=group["ranks_loaded"],
        world_size=group["world_size"],
    )
