"""The parts every findings module shares (:mod:`k25trace.analysis.findings` is the entry point): the records
(:class:`Finding`, :class:`FindingGroup`, :class:`Findings`), the kinds, the wording of figures in sentences and
the :class:`Context` of one call (every frame the findings read, keyed per run and batch size)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from k25trace.analysis import report, sol
from k25trace.db import query_frame

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

OVERLAP = (
    "Savings overlap: each is the most that one fix alone could bring (a rank's wait is often another "
    "rank's idle; a kernel's time above its minimum and the idle around it share the step), so they are "
    "not added up."
)

COMM_CATEGORIES = ("allreduce", "all2all", "comm_other")
_COMM_NAMES = {
    "allreduce": "All-reduce",
    "all2all": "All-to-all (expert parallelism)",
    "comm_other": "Other collectives",
}
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
        return {
            "phase": self.phase,
            "notes": list(self.notes),
            "overlap": self.overlap,
            "groups": [g.as_dict() for g in self.groups],
        }


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
        with ThreadPoolExecutor(1) as pool:  # its Python work runs while DuckDB answers the queries below
            roofline = pool.submit(_roofline_rows, con, phase, peaks_file)
            self._read(con, phase)
            self.roofline = roofline.result()
        devices = sol.run_devices(con, sol.load_peaks(peaks_file))
        self.devices: dict[str, sol.Peaks | None] = {}
        for (run_id, _), peaks in devices.items():
            if self.devices.get(run_id) is None:
                self.devices[run_id] = peaks

    def _read(self, con: duckdb.DuckDBPyConnection, phase: str) -> None:
        """The report views the findings are drawn from."""
        self.labels = report.run_labels(con)
        self.groups = query_frame(con, "findings_groups", {"phase": phase})
        self.batch = _by_group(report.breakdown(con, by="batch", phase=phase))
        self.idle = {k: v[0] for k, v in _by_group(report.breakdown(con, by="idle", phase=phase)).items()}
        self.comm = _by_group(report.breakdown(con, by="comm", phase=phase))
        self.causes = _by_group(query_frame(con, "findings_comm_causes", {"phase": phase}))
        self.floor = {k: v[0] for k, v in _by_group(report.breakdown(con, by="floor", phase=phase)).items()}
        self.bandwidth = _by_group(report.breakdown(con, by="comm-bw", phase=phase))

    def command(self, view: str) -> str:
        return f"k25trace report --db {self.db} --by {view}{self.phase_option}"


def _roofline_rows(
    con: duckdb.DuckDBPyConnection, phase: str, peaks_file: Path | None
) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    """The roofline's rows per (run, batch size), read through a cursor of its own (it runs in a thread)."""
    cursor = con.cursor()
    try:
        return _by_group(sol.roofline(cursor, phase=phase, peaks_file=peaks_file).to_dicts())
    finally:
        cursor.close()


def _by_group(frame: pl.DataFrame | list[dict[str, Any]]) -> dict[tuple[str, int | None], list[dict[str, Any]]]:
    rows = frame.to_dicts() if isinstance(frame, pl.DataFrame) else frame
    out: dict[tuple[str, int | None], list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault((r["run_id"], r["batch_size"]), []).append(r)
    return out


def _finding(
    kind: str,
    sentence: str,
    evidence: str,
    query: str,
    saving: float | None,
    step_ms: float,
    label: str,
    trust: str = "",
    **figures: Any,
) -> Finding:
    pct = None if saving is None or not step_ms else round(100.0 * saving / step_ms, 2)
    return Finding(
        kind=kind,
        sentence=sentence,
        evidence=evidence,
        query=query,
        saving_ms=None if saving is None else round(saving, 4),
        saving_pct=pct,
        saving_label=label,
        trust=trust,
        figures=figures,
    )
