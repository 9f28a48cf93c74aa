"""Findings: per run and batch size, a short ranked list of what costs the step time and the most each fix could
bring, computed only from measured numbers (issue 31, item 1). Analysis only: it takes a connection and returns
typed records; the CLI, the TUI and the HTML page render them (:mod:`k25trace.render.findings`). This module is the
entry point; the records and the wording are :mod:`.findings_base`'s, the builders :mod:`.findings_comm`'s
(collectives) and :mod:`.findings_idle_sol`'s (idle, speed of light, the largest category).

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
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis import report
from k25trace.analysis.findings_base import (
    COMM_CATEGORIES,
    KINDS,
    OVERLAP,
    Finding,
    FindingGroup,
    Findings,
    _Context,
    _ms,
    _num,
    _plural,
)
from k25trace.analysis.findings_comm import comm_name, transfer_finding, unpaired_finding, wait_finding
from k25trace.analysis.findings_idle_sol import idle_findings, largest_finding, sol_findings
from k25trace.db import query_frame
from k25trace.vocab import ALL, check_phase

__all__ = ["KINDS", "OVERLAP", "Finding", "FindingGroup", "Findings", "as_dict", "findings", "findings_frame"]

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
    on = report.steps_seen(int(group["engine_steps"]), int(group["rank_steps"]), int(group["ranks"]))
    size = f"batch size {batch}" if batch is not None else "no batch size"
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
        name = comm_name(category, bandwidth)
        if _num(row["wait_ms_per_step"]) > 0:
            items.append(wait_finding(ctx, key, row, step_ms, name))
        transfer = transfer_finding(ctx, key, row, step_ms, name)
        if transfer is not None:
            transfers[category] = transfer
            items.append(transfer)
    unpaired = (group["world_size"] or 1) > (group["ranks_loaded"] or 1)
    for r in batch:
        if (
            r["category"] in COMM_CATEGORIES
            and r["category"] not in comm
            and unpaired
            and _num(r["pct_of_step"]) >= min_pct
        ):
            items.append(unpaired_finding(ctx, group, r, step_ms))
    idle = ctx.idle.get(key)
    if idle is not None:
        items += idle_findings(ctx, group, idle, step_ms)
    overlap = next((_num(r["ms_per_step"]) for r in batch if r["category"] == "overlap"), 0.0)
    sol_items, bounds = sol_findings(ctx, key, batch, step_ms, overlap, min_pct)
    items += sol_items
    largest = largest_finding(ctx, batch, step_ms, bounds, comm, transfers)
    if largest is not None:
        items.append(largest)
    kept, left_out = _rank(items, min_pct)
    notes = []
    if group["inferred_steps"]:
        notes.append(
            f"{group['inferred_steps']} of the {group['rank_steps']} rank-steps were inferred from GPU idle "
            "gaps (no step markers): no batch size, and where one step ends is a guess from gap lengths."
        )
    if int(group["engine_steps"]) < 3:
        notes.append(f"from {_plural(int(group['engine_steps']), 'engine step')} only: one slow step weighs heavily.")
    label = ctx.labels.get(group["run_id"], str(group["run_id"]))
    return FindingGroup(
        run_id=group["run_id"],
        run_label=label,
        batch_size=group["batch_size"],
        engine_steps=int(group["engine_steps"]),
        rank_steps=int(group["rank_steps"]),
        ranks=int(group["ranks"]),
        world_size=group["world_size"],
        step_ms=step_ms,
        heading=_heading(label, group["batch_size"], group),
        findings=tuple(kept),
        left_out=left_out,
        notes=tuple(notes),
    )


def findings(
    con: duckdb.DuckDBPyConnection,
    *,
    phase: str | None = None,
    db: str | Path = "FILE",
    peaks_file: Path | None = None,
    min_pct: float = 1.0,
) -> Findings:
    """Per run and batch size, the ranked findings of the steps of ``phase``.

    ``phase`` None: decode steps; when the database has none, every phase (a note says so), and the steps
    inferred from idle gaps when no trace has step markers (:func:`.report.resolve_phase`). ``db`` is the
    database path written into the evidence commands; ``peaks_file`` as ``report --by roofline --peaks``.
    Findings with a saving below ``min_pct`` % of the step are left out (counted in ``left_out``). The roofline
    part is read through a cursor of ``con``'s own in a thread: it sees committed rows only, so call this outside
    an open transaction of ``con``."""
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
                notes.append(
                    f"no decode steps (present: {listed}): the findings are over the steps of every phase "
                    "(`--phase all` in the commands)."
                )
    ctx = _Context(con, check_phase(phase), str(db), peaks_file)
    groups = tuple(_group(ctx, g, min_pct) for g in ctx.groups.iter_rows(named=True))
    return Findings(phase=phase, groups=groups, notes=tuple(notes))


# ---------------------------------------------------------------------------------------------------- as data

FRAME_SCHEMA = {
    "run_id": pl.Utf8,
    "run_label": pl.Utf8,
    "batch_size": pl.Int64,
    "position": pl.Int64,
    "kind": pl.Utf8,
    "sentence": pl.Utf8,
    "saving_ms": pl.Float64,
    "saving_pct": pl.Float64,
    "saving_label": pl.Utf8,
    "evidence": pl.Utf8,
    "query": pl.Utf8,
    "trust": pl.Utf8,
    "figures": pl.Utf8,
}


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
    rows = [
        {
            "run_id": g.run_id,
            "run_label": g.run_label,
            "batch_size": g.batch_size,
            "position": i + 1,
            "kind": f.kind,
            "sentence": f.sentence,
            "saving_ms": f.saving_ms,
            "saving_pct": f.saving_pct,
            "saving_label": f.saving_label,
            "evidence": f.evidence,
            "query": f.query,
            "trust": f.trust,
            "figures": json.dumps(_json_safe(dict(f.figures)), sort_keys=True),
        }
        for g in result.groups
        for i, f in enumerate(g.findings)
    ]
    return pl.DataFrame(rows, schema=FRAME_SCHEMA, orient="row") if rows else pl.DataFrame(schema=FRAME_SCHEMA)


def as_dict(result: Findings) -> dict[str, Any]:
    """The whole result as JSON-ready data (``report --by findings --format json``)."""
    return _json_safe(result.as_dict())
