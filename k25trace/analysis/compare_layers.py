"""The per-layer table of a comparison (``compare --by layer``): per matched step group, one row per segment of the
steps' layer split (``step_layers``: pre, layers 0..L−1, post) present on both sides.

One observation = one engine step: the segment's wall time averaged over the step's ranks
(``queries/compare_layers.sql``). ``ms_a`` and ``ms_b`` are the medians over the steps and ``delta_ms`` /
``delta_pct`` their difference; the test is Welch's on the means of the same observations, Holm-adjusted over the
table's rows, its verdict as in every table (:func:`k25trace.analysis.compare_tables.verdict`). ``flag`` is
``stands out`` on a changed layer whose |delta| is the largest of its group and at least twice the median |delta|
of the group's layers: one layer that moved, not all of them.

Layers are paired by index only when both sides of a group have the same layer count; otherwise the group gets no
rows and a note says why (two models, or a side whose steps were not segmented)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from k25trace.analysis.compare_sides import SideData
from k25trace.analysis.compare_tables import CHANGED, SCHEMA, finish_rows, obs_of, step_ms
from k25trace.stats import welch

STANDS_OUT = "stands out"
FLAG_RATIO = 2.0
"""A changed layer stands out when its |delta| is its group's largest and this many times the median layer's."""

LAYER_COLUMNS = [
    "phase",
    "group",
    "segment",
    "kind",
    "steps_a",
    "steps_b",
    "ms_a",
    "ms_b",
    "delta_ms",
    "delta_pct",
    "ci95_ms",
    "p_value",
    "verdict",
    "flag",
]


def segment_order(label: str) -> tuple[int, int]:
    """pre, 0, 1, …, L−1, post (then anything else): the order segment labels sort in."""
    if label == "pre":
        return (0, 0)
    if label.isdigit():
        return (1, int(label))
    return (2, 0) if label == "post" else (3, 0)


def _segments(d: SideData, obs: pl.DataFrame) -> pl.DataFrame:
    """The group's rows of ``compare_layers`` (its steps only), numbered by observation (``i``)."""
    if d.layers.is_empty():
        return d.layers
    return d.layers.join(obs.select("run_id", "step_index", "i"), on=["run_id", "step_index"], how="inner")


def _layer_count(segs: pl.DataFrame) -> int | None:
    """The most common layer count of the group's segmented steps (None: no step segmented)."""
    counted = segs.filter(pl.col("evidence") != "none")
    if counted.is_empty():
        return None
    per_step = counted.group_by("i").agg(pl.col("layer").max() + 1)
    return int(per_step["layer"].mode().sort()[0])


def _unsegmented_why(segs: pl.DataFrame, steps: int) -> str:
    """Why a side has no segmented step in a group: the most common reason."""
    reasons = segs.filter(pl.col("evidence") == "none")["reason"].drop_nulls()
    if segs.is_empty():
        return f"none of its {steps} steps has a layer split"
    top = reasons.mode().sort()[0] if reasons.len() else "unknown"
    return f"none of its {steps} steps is split into layers ({top})"


def _unpaired(segs_a: pl.DataFrame, segs_b: pl.DataFrame, oa: int, ob: int) -> str | None:
    """Why a group's layers cannot be paired (no layer split on a side, or other layer counts); None: they can."""
    la, lb = _layer_count(segs_a), _layer_count(segs_b)
    if la is None or lb is None:
        return "; ".join(
            f"{name} {_unsegmented_why(segs, n)}"
            for name, segs, n, count in (("A", segs_a, oa, la), ("B", segs_b, ob, lb))
            if count is None
        )
    if la != lb:
        return (
            f"A has {la} layers per step, B {lb} (another model or another layer split: layers are paired by "
            "index only when the counts agree)"
        )
    return None


def _where(group: tuple[str, str]) -> str:
    return group[1] if group[0] in ("decode", "all") else f"{group[0]} {group[1]}"


def _per_label(segs: pl.DataFrame, n: int) -> dict[str, tuple[np.ndarray, str]]:
    """Per segment label: its per-step wall (ns, NaN where a step lacks it) and its most common kind."""
    out: dict[str, tuple[np.ndarray, str]] = {}
    grouped = segs.filter(pl.col("evidence") != "none").group_by("label").agg("i", "wall_ns", "kind")
    for row in grouped.iter_rows(named=True):
        arr = np.full(n, np.nan)
        arr[np.asarray(row["i"], dtype=np.int64)] = np.asarray(row["wall_ns"], dtype=float)
        kinds = pl.Series(row["kind"], dtype=pl.String)
        out[row["label"]] = (arr, str(kinds.mode().sort()[0]))
    return out


def _row(xa: np.ndarray, xb: np.ndarray) -> dict[str, Any]:
    """Medians (ms) and their delta; the Welch test of the means (what the verdict rests on)."""
    xa, xb = xa[~np.isnan(xa)] / 1e6, xb[~np.isnan(xb)] / 1e6
    test = welch(xa, xb)
    ma, mb = float(np.median(xa)), float(np.median(xb))
    return {
        "steps_a": int(xa.size),
        "steps_b": int(xb.size),
        "ms_a": ma,
        "ms_b": mb,
        "delta_ms": mb - ma,
        "delta_pct": (mb - ma) * 100.0 / ma if ma else (0.0 if mb == ma else None),
        "ci95_ms": test.ci95,
        "p_raw": test.p,
        # the verdict's delta and base: the means tested (finish_rows)
        "test_delta": float(xb.mean() - xa.mean()),
        "test_a": float(xa.mean()),
        "test_b": float(xb.mean()),
    }


def _flag(rows: list[dict[str, Any]]) -> None:
    """Mark the changed layer of a group that stands out (see the module doc)."""
    layers = [r for r in rows if r["segment"].isdigit()]
    if not layers:
        return
    sizes = [abs(r["delta_ms"]) for r in layers]
    typical = float(np.median(sizes))
    top = max(layers, key=lambda r: abs(r["delta_ms"]))
    if top["verdict"] in CHANGED and abs(top["delta_ms"]) > 0 and abs(top["delta_ms"]) >= FLAG_RATIO * typical:
        top["flag"] = STANDS_OUT


def layer_table(
    da: SideData, db: SideData, matched: list[tuple[str, str]], **kw: Any
) -> tuple[pl.DataFrame, list[str]]:
    """The per-segment rows of every matched group whose layer counts agree, and the notes on the others."""
    rows: list[dict[str, Any]] = []
    unpaired: dict[str, list[str]] = {}  # why → the groups it holds for (one note each)
    spans: list[tuple[int, int]] = []  # each group's rows, for the flag after the verdicts
    for group in matched:
        oa, ob = obs_of(da, group), obs_of(db, group)
        segs_a, segs_b = _segments(da, oa), _segments(db, ob)
        why = _unpaired(segs_a, segs_b, oa.height, ob.height)
        if why:
            unpaired.setdefault(why, []).append(_where(group))
            continue
        per_a, per_b = _per_label(segs_a, oa.height), _per_label(segs_b, ob.height)
        start = len(rows)
        for label in sorted(set(per_a) & set(per_b), key=segment_order):
            (xa, kind_a), (xb, kind_b) = per_a[label], per_b[label]
            rows.append(
                {
                    "phase": group[0],
                    "group": group[1],
                    "segment": label,
                    "kind": kind_a if kind_a == kind_b else f"{kind_a} → {kind_b}",
                    "step_ms_a": step_ms(oa),
                    "step_ms_b": step_ms(ob),
                    "flag": None,
                    **_row(xa, xb),
                }
            )
        spans.append((start, len(rows)))
    frame = finish_rows(
        rows, LAYER_COLUMNS, schema={**SCHEMA, "segment": pl.String, "kind": pl.String, "flag": pl.String}, **kw
    )
    flagged = frame.to_dicts()
    for start, end in spans:
        _flag(flagged[start:end])
    if flagged:
        frame = frame.with_columns(pl.Series("flag", [r["flag"] for r in flagged], dtype=pl.String))
    return frame, [f"layers of {', '.join(groups)}: not compared: {why}" for why, groups in unpaired.items()]
