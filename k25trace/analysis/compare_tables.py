"""The tested tables of a comparison, one builder per table (categories, kernels, steps, collectives): per-step
values of both sides, Welch-tested (:func:`k25trace.stats.welch`), Holm-adjusted per table
(:func:`k25trace.stats.holm`), each row given its :func:`verdict`; see :mod:`k25trace.analysis.compare`. The layer
table is in :mod:`.compare_layers`; the sides, their devices and capture levels in :mod:`.compare_sides`."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import polars as pl

from k25trace.analysis.compare_sides import SideData
from k25trace.names import kernel_family, template_args
from k25trace.stats import holm, welch

PSEUDO_CATEGORIES = ("overlap", "idle")

CHANGED = ("slower", "faster", "only in A", "only in B")
"""The verdicts that count as a change."""

WITHIN_NOISE = "within noise"
NEGLIGIBLE = "negligible"
UNTESTED = "untested (<2 steps)"


def verdict(
    p_adjusted: float | None,
    delta: float,
    base: float | None,
    step: float | None = None,
    *,
    alpha: float,
    min_change_pct: float,
    min_step_pct: float = 0.0,
) -> str:
    """within noise / negligible / slower / faster (B against A), or untested without a p-value.

    ``base`` is the row's value, ``step`` the mean step wall time (same unit): a delta smaller than
    ``min_change_pct`` % of the one or ``min_step_pct`` % of the other is negligible. ``compare`` passes the
    smaller of A's and B's value and the shorter of the two sides' mean step (:func:`symmetric_base`), so that
    swapping the sides mirrors every verdict."""
    if p_adjusted is None:
        return UNTESTED
    if p_adjusted >= alpha or delta == 0:
        return WITHIN_NOISE
    if base and abs(delta) < min_change_pct / 100.0 * abs(base):
        return NEGLIGIBLE
    if step and abs(delta) < min_step_pct / 100.0 * abs(step):
        return NEGLIGIBLE
    return "slower" if delta > 0 else "faster"


def symmetric_base(a: float | None, b: float | None) -> float | None:
    """The base of a relative threshold: the smaller of the two sides' values (the same either way round; a
    value missing on one side counts as 0). A delta below ``min_change_pct`` % of the smaller value is a ratio
    larger/smaller below 1 + ``min_change_pct``/100, whichever side is larger; ``compare A B`` and ``compare B A``
    test each row against the same base and differ only in the sign of the delta. The smaller side, not the
    mean: a 0.6 ms slower transfer is 1.3 % of a 44 ms step and should not vanish in 0.5 % of a 160 ms mean."""
    if a is None and b is None:
        return None
    return min(abs(a or 0.0), abs(b or 0.0))


def obs_of(d: SideData, group: tuple[str, str]) -> pl.DataFrame:
    """The observations of one group, numbered 0…n−1 (``i``) in step order."""
    return (
        d.obs.filter((pl.col("phase") == group[0]) & (pl.col("group") == group[1]))
        .sort(["run_id", "step_index"])
        .with_row_index("i")
    )


def _series(values: pl.DataFrame, obs: pl.DataFrame, key: str, value: str) -> dict[Any, np.ndarray]:
    """Per key, the per-observation values of ``value`` (0 where a step has none), divided by the step's ranks."""
    n = obs.height
    if values.is_empty() or n == 0:
        return {}
    joined = values.join(obs.select("run_id", "step_index", "i", "ranks"), on=["run_id", "step_index"], how="inner")
    if joined.is_empty():
        return {}
    expr = pl.col(value).cast(pl.Float64) / pl.col("ranks")
    grouped = joined.with_columns(expr.alias("_v")).group_by(key).agg(pl.col("i"), pl.col("_v"))
    out: dict[Any, np.ndarray] = {}
    for row in grouped.iter_rows(named=True):
        arr = np.zeros(n)
        np.add.at(arr, np.asarray(row["i"], dtype=np.int64), np.asarray(row["_v"], dtype=float))
        out[row[key]] = arr
    return out


def _row_stats(xa: np.ndarray, xb: np.ndarray, scale: float = 1e6) -> dict[str, Any]:
    """Means (ms), delta, delta % and the Welch test of one row (values in ns, reported in ms)."""
    test = welch(xa / scale, xb / scale)
    ma, mb = float(xa.mean()) / scale, float(xb.mean()) / scale
    return {
        "ms_a": ma,
        "ms_b": mb,
        "delta_ms": mb - ma,
        "delta_pct": (mb - ma) * 100.0 / ma if ma else (0.0 if mb == ma else None),
        "ci95_ms": test.ci95,
        "p_raw": test.p,
    }


def finish_rows(
    rows: list[dict[str, Any]],
    columns: list[str],
    *,
    alpha: float,
    min_change_pct: float,
    min_step_pct: float,
    schema: dict[str, Any],
) -> pl.DataFrame:
    """Holm-adjust the table's p-values, give each row its verdict, round, and build the frame. A row whose shown
    values are not the tested means (the layer table's medians) carries the means as ``test_delta``, ``test_a``,
    ``test_b``: the verdict rests on those."""
    adjusted = holm([r.get("p_raw") for r in rows])
    for row, p in zip(rows, adjusted, strict=True):
        row["p_value"] = p
        if row.get("verdict") is None:
            tested = "test_delta" in row
            row["verdict"] = verdict(
                p,
                (row["test_delta"] if tested else row["delta_ms"]) or 0.0,
                symmetric_base(row["test_a"], row["test_b"]) if tested else symmetric_base(row["ms_a"], row["ms_b"]),
                symmetric_base(row.get("step_ms_a"), row.get("step_ms_b")),
                alpha=alpha,
                min_change_pct=min_change_pct,
                min_step_pct=min_step_pct,
            )
        for k in ("ms_a", "ms_b", "delta_ms", "ci95_ms"):
            if row.get(k) is not None:
                row[k] = round(row[k], 4)
        if row.get("delta_pct") is not None:
            row["delta_pct"] = round(row["delta_pct"], 2)
        if row.get("p_value") is not None:
            row["p_value"] = float(f"{row['p_value']:.3g}")
    return pl.DataFrame([{c: r.get(c) for c in columns} for r in rows], schema={c: schema[c] for c in columns})


_NUM = pl.Float64
SCHEMA: dict[str, Any] = {
    "phase": pl.String,
    "group": pl.String,
    "category": pl.String,
    "metric": pl.String,
    "match": pl.String,
    "name_a": pl.String,
    "name_b": pl.String,
    "family": pl.String,
    "steps_a": pl.Int64,
    "steps_b": pl.Int64,
    "ranks_a": pl.Int64,
    "ranks_b": pl.Int64,
    "calls_a": _NUM,
    "calls_b": _NUM,
    "us_per_call_a": _NUM,
    "us_per_call_b": _NUM,
    "ms_a": _NUM,
    "ms_b": _NUM,
    "delta_ms": _NUM,
    "delta_pct": _NUM,
    "ci95_ms": _NUM,
    "p_value": _NUM,
    "verdict": pl.String,
}
CATEGORY_COLUMNS = [
    "phase",
    "group",
    "category",
    "steps_a",
    "steps_b",
    "ms_a",
    "ms_b",
    "delta_ms",
    "delta_pct",
    "ci95_ms",
    "p_value",
    "verdict",
]
KERNEL_COLUMNS = [
    "phase",
    "group",
    "match",
    "category",
    "name_a",
    "name_b",
    "calls_a",
    "calls_b",
    "us_per_call_a",
    "us_per_call_b",
    "ms_a",
    "ms_b",
    "delta_ms",
    "delta_pct",
    "p_value",
    "verdict",
    "family",
]
STEP_COLUMNS = [
    "phase",
    "group",
    "metric",
    "steps_a",
    "steps_b",
    "ranks_a",
    "ranks_b",
    "ms_a",
    "ms_b",
    "delta_ms",
    "delta_pct",
    "ci95_ms",
    "p_value",
    "verdict",
]
COMM_COLUMNS = [
    "phase",
    "group",
    "category",
    "metric",
    "ranks_a",
    "ranks_b",
    "calls_a",
    "calls_b",
    "ms_a",
    "ms_b",
    "delta_ms",
    "delta_pct",
    "ci95_ms",
    "p_value",
    "verdict",
]


def category_table(da: SideData, db: SideData, matched: list[tuple[str, str]], **kw: Any) -> pl.DataFrame:
    """Exclusive ms/step per category (with overlap and idle) of every matched group."""
    rows = []
    for group in matched:
        oa, ob = obs_of(da, group), obs_of(db, group)
        sa = _series(da.categories, oa, "category", "busy_ns")
        sb = _series(db.categories, ob, "category", "busy_ns")
        for pseudo in PSEUDO_CATEGORIES:  # already per-rank means in obs
            sa[pseudo] = oa[f"{pseudo}_ns"].to_numpy().astype(float)
            sb[pseudo] = ob[f"{pseudo}_ns"].to_numpy().astype(float)
        cats = sorted(set(sa) | set(sb) | {"other"}, key=lambda c: (c in PSEUDO_CATEGORIES, c))
        zeros_a, zeros_b = np.zeros(oa.height), np.zeros(ob.height)
        group_rows = []
        for cat in cats:
            xa, xb = sa.get(cat, zeros_a), sb.get(cat, zeros_b)
            group_rows.append(
                {
                    "phase": group[0],
                    "group": group[1],
                    "category": cat,
                    "steps_a": oa.height,
                    "steps_b": ob.height,
                    "step_ms_a": step_ms(oa),
                    "step_ms_b": step_ms(ob),
                    **_row_stats(xa, xb),
                }
            )
        group_rows.sort(key=lambda r: (r["category"] in PSEUDO_CATEGORIES, -max(r["ms_a"], r["ms_b"]), r["category"]))
        rows.extend(group_rows)
    return finish_rows(rows, CATEGORY_COLUMNS, schema=SCHEMA, **kw)


def _name_table(d: SideData) -> dict[int, dict[str, Any]]:
    """name_id → its row of ``compare_kernel_names``."""
    return {r["name_id"]: r for r in d.names.iter_rows(named=True)}


def kernel_table(da: SideData, db: SideData, matched: list[tuple[str, str]], **kw: Any) -> pl.DataFrame:
    """Kernels matched by exact name, else by family, else only in A / only in B, per matched group."""
    names_a, names_b = _name_table(da), _name_table(db)
    # short names shared by several full names (either side) are shown with their template arguments
    by_short: dict[str, set[str]] = {}
    for table in (names_a, names_b):
        for r in table.values():
            by_short.setdefault(r["short_name"], set()).add(r["name"])

    def shown(full: str, short: str) -> str:
        if len(by_short.get(short, ())) > 1 and (args := template_args(full, 60)):
            return f"{short} {args}"
        return short

    rows = []
    for group in matched:
        oa, ob = obs_of(da, group), obs_of(db, group)
        ns_a = _series(da.kernels, oa, "name_id", "kernel_ns")
        ns_b = _series(db.kernels, ob, "name_id", "kernel_ns")
        calls_a = _series(da.kernels, oa, "name_id", "calls")
        calls_b = _series(db.kernels, ob, "name_id", "calls")
        cat_a = _categories_of(da.kernels, oa)
        cat_b = _categories_of(db.kernels, ob)
        full_a = {names_a[i]["name"]: i for i in ns_a}
        full_b = {names_b[i]["name"]: i for i in ns_b}
        entries: list[tuple[str, list[int], list[int]]] = []
        for full in sorted(set(full_a) & set(full_b)):
            entries.append(("exact", [full_a[full]], [full_b[full]]))
        rest_a = {f: kernel_family(f) for f in full_a if f not in full_b}
        rest_b = {f: kernel_family(f) for f in full_b if f not in full_a}
        for fam in sorted(set(rest_a.values()) & set(rest_b.values())):
            entries.append(
                (
                    "family",
                    [full_a[f] for f in sorted(rest_a) if rest_a[f] == fam],
                    [full_b[f] for f in sorted(rest_b) if rest_b[f] == fam],
                )
            )
        families_b = set(rest_b.values())
        families_a = set(rest_a.values())
        entries.extend(("only-A", [full_a[f]], []) for f in sorted(rest_a) if rest_a[f] not in families_b)
        entries.extend(("only-B", [], [full_b[f]]) for f in sorted(rest_b) if rest_b[f] not in families_a)
        zeros_a, zeros_b = np.zeros(oa.height), np.zeros(ob.height)
        group_rows = []
        for how, ids_a, ids_b in entries:
            xa = sum((ns_a[i] for i in ids_a), zeros_a)
            xb = sum((ns_b[i] for i in ids_b), zeros_b)
            ca = sum((calls_a[i] for i in ids_a), zeros_a)
            cb = sum((calls_b[i] for i in ids_b), zeros_b)
            row: dict[str, Any] = {
                "phase": group[0],
                "group": group[1],
                "match": how,
                "step_ms_a": step_ms(oa),
                "step_ms_b": step_ms(ob),
                "category": _join_categories([cat_a.get(i) for i in ids_a] + [cat_b.get(i) for i in ids_b]),
                "name_a": " | ".join(shown(names_a[i]["name"], names_a[i]["short_name"]) for i in ids_a) or None,
                "name_b": " | ".join(shown(names_b[i]["name"], names_b[i]["short_name"]) for i in ids_b) or None,
                "family": kernel_family(names_a[ids_a[0]]["name"] if ids_a else names_b[ids_b[0]]["name"]),
                "calls_a": round(float(ca.mean()), 2) if ids_a else None,
                "calls_b": round(float(cb.mean()), 2) if ids_b else None,
                "us_per_call_a": round(float(xa.sum() / ca.sum()) / 1e3, 3) if ids_a and ca.sum() else None,
                "us_per_call_b": round(float(xb.sum() / cb.sum()) / 1e3, 3) if ids_b and cb.sum() else None,
                **_row_stats(xa, xb),
            }
            if how == "only-A":
                row.update(verdict="only in A", p_raw=None, ci95_ms=None, ms_b=None, delta_pct=None)
            elif how == "only-B":
                row.update(verdict="only in B", p_raw=None, ci95_ms=None, ms_a=None, delta_pct=None)
            group_rows.append(row)
        group_rows.sort(key=lambda r: (-abs(r["delta_ms"]), r["family"]))
        rows.extend(group_rows)
    return finish_rows(rows, KERNEL_COLUMNS, schema=SCHEMA, **kw)


def _categories_of(kernels: pl.DataFrame, obs: pl.DataFrame) -> dict[int, str]:
    """name_id → its category in these steps (the one with the most time when a name has several)."""
    if kernels.is_empty():
        return {}
    per = (
        kernels.join(obs.select("run_id", "step_index"), on=["run_id", "step_index"], how="semi")
        .group_by(["name_id", "category"])
        .agg(pl.col("kernel_ns").sum())
        .sort(["name_id", "kernel_ns", "category"], descending=[False, True, False])
        .unique("name_id", keep="first")
    )
    return dict(zip(per["name_id"].to_list(), per["category"].to_list(), strict=True))


def _join_categories(cats: list[str | None]) -> str:
    """The distinct categories of a matched row, in order (``other`` for none)."""
    seen: list[str] = []
    for c in cats:
        if c is not None and c not in seen:
            seen.append(c)
    return " → ".join(seen) if seen else "other"


def step_table(
    da: SideData, db: SideData, matched: list[tuple[str, str]], groups_a: dict, groups_b: dict, **kw: Any
) -> pl.DataFrame:
    """Wall percentiles and the tested wall and busy means of every group (one-sided groups too)."""
    rows: list[dict[str, Any]] = []
    for group in list(groups_a) + [g for g in groups_b if g not in groups_a]:
        in_a, in_b = group in groups_a, group in groups_b
        oa = obs_of(da, group) if in_a else None
        ob = obs_of(db, group) if in_b else None
        base = {
            "phase": group[0],
            "group": group[1],
            "steps_a": oa.height if oa is not None else None,
            "steps_b": ob.height if ob is not None else None,
            "ranks_a": _rank_count(oa) if oa is not None else None,
            "ranks_b": _rank_count(ob) if ob is not None else None,
            "step_ms_a": step_ms(oa) if oa is not None else None,
            "step_ms_b": step_ms(ob) if ob is not None else None,
        }
        if not (in_a and in_b):
            o = oa if in_a else ob
            assert o is not None
            mean = _mean_float(o["wall_ns"]) / 1e6
            rows.append(
                {
                    **base,
                    "metric": "wall mean",
                    "ms_a": mean if in_a else None,
                    "ms_b": mean if in_b else None,
                    "delta_ms": None,
                    "verdict": "only in A" if in_a else "only in B",
                }
            )
            continue
        assert oa is not None and ob is not None
        wa, wb = _rank_walls(da, oa), _rank_walls(db, ob)
        for q in (50, 90, 99):
            va, vb = float(np.percentile(wa, q)) / 1e6, float(np.percentile(wb, q)) / 1e6
            rows.append(
                {
                    **base,
                    "metric": f"wall p{q}",
                    "ms_a": va,
                    "ms_b": vb,
                    "delta_ms": vb - va,
                    "delta_pct": (vb - va) * 100 / va if va else None,
                    "verdict": "—",
                }
            )
        for metric, column in (("wall mean", "wall_ns"), ("busy mean", "busy_ns")):
            rows.append(
                {
                    **base,
                    "metric": metric,
                    **_row_stats(oa[column].to_numpy().astype(float), ob[column].to_numpy().astype(float)),
                }
            )
    return finish_rows(rows, STEP_COLUMNS, schema=SCHEMA, **kw)


def _max_int(values: pl.Series) -> int:
    """The largest value of an integer column as an int (0 when empty)."""
    return int(cast(int, values.max()) or 0)


def _mean_float(values: pl.Series) -> float:
    """The mean of a numeric column as a float (0.0 when empty)."""
    return float(cast(float, values.mean()) or 0.0)


def step_ms(obs: pl.DataFrame) -> float:
    """A group's mean step wall time in ms (the base of ``min_step_pct``)."""
    return _mean_float(obs["wall_ns"]) / 1e6


def _rank_count(obs: pl.DataFrame) -> int:
    """The most ranks a step of the group has."""
    return _max_int(obs["ranks"])


def _rank_walls(d: SideData, obs: pl.DataFrame) -> np.ndarray:
    """The wall time of every (rank, step) of a group: the percentiles are over these, as in `report`."""
    return (
        d.rank_steps.join(obs.select("run_id", "step_index"), on=["run_id", "step_index"], how="semi")["wall_ns"]
        .to_numpy()
        .astype(float)
    )


COMM_METRICS = (
    ("transfer", "transfer_ns"),
    ("wait", "wait_ns"),
    ("wait at 1st", "launch_wait_ns"),  # at the step's first collective (by position, not by cause)
    ("wait at later", "gpu_wait_ns"),  # at its later collectives (by position: host lateness counts here too)
)


def comm_table(
    da: SideData, db: SideData, matched: list[tuple[str, str]], **kw: Any
) -> tuple[pl.DataFrame, str | None]:
    """Collectives across ranks per category and metric, or no rows and the note that says why."""
    empty = pl.DataFrame(schema={c: SCHEMA[c] for c in COMM_COLUMNS})
    ranks_a = _max_int(da.obs["ranks"])
    ranks_b = _max_int(db.obs["ranks"])
    if da.side.selection.rank is not None or db.side.selection.rank is not None:
        return empty, "collectives across ranks: not compared (a side selects one rank)"
    if ranks_a < 2 or ranks_b < 2:
        few = [f"{n} has {r} rank" for n, r in (("A", ranks_a), ("B", ranks_b)) if r < 2]
        return empty, f"collectives across ranks: not compared ({', '.join(few)}; needs several ranks on both sides)"
    if da.comm.is_empty() or db.comm.is_empty():
        none = [n for n, d in (("A", da), ("B", db)) if d.comm.is_empty()]
        return empty, f"collectives across ranks: none paired per step in {' and '.join(none)}"
    rows = []
    for group in matched:
        oa, ob = obs_of(da, group), obs_of(db, group)
        ca = da.comm.join(oa.select("run_id", "step_index", "i"), on=["run_id", "step_index"], how="inner")
        cb = db.comm.join(ob.select("run_id", "step_index", "i"), on=["run_id", "step_index"], how="inner")
        for category in sorted(set(ca["category"].to_list()) | set(cb["category"].to_list())):
            pa = ca.filter(pl.col("category") == category).sort("i")
            pb = cb.filter(pl.col("category") == category).sort("i")
            base = {
                "phase": group[0],
                "group": group[1],
                "category": category,
                "step_ms_a": step_ms(oa),
                "step_ms_b": step_ms(ob),
                "ranks_a": _max_int(pa["ranks"]) if pa.height else None,
                "ranks_b": _max_int(pb["ranks"]) if pb.height else None,
                "calls_a": round(_mean_float(pa["calls"]), 2) if pa.height else None,
                "calls_b": round(_mean_float(pb["calls"]), 2) if pb.height else None,
            }
            for metric, column in COMM_METRICS:
                xa = pa[column].cast(pl.Float64).to_numpy() if pa.height else np.zeros(0)
                xb = pb[column].cast(pl.Float64).to_numpy() if pb.height else np.zeros(0)
                if not pa.height or not pb.height:
                    value = float((xa if pa.height else xb).mean()) / 1e6
                    rows.append(
                        {
                            **base,
                            "metric": metric,
                            "ms_a": value if pa.height else None,
                            "ms_b": value if pb.height else None,
                            "delta_ms": None,
                            "verdict": "only in A" if pa.height else "only in B",
                        }
                    )
                    continue
                rows.append({**base, "metric": metric, **_row_stats(xa, xb)})
    return finish_rows(rows, COMM_COLUMNS, schema=SCHEMA, **kw), None
