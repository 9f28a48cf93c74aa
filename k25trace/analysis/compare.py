"""Compare: what changed between two sides (two databases, or two runs / capture levels / traces / batch sizes of
one), and whether each change is more than the step-to-step noise.

Each side is a connection plus a :class:`Selection`. Per side the named queries ``queries/compare_*.sql`` give
one row per step (and per step and category, kernel, collective category); a step of a multi-rank run is averaged
over its ranks, so **one observation = one engine step** (run, step index). Steps are grouped by phase and batch
size (``match="batch"``), by phase and capture level (``"level"``), or each side's selection is one group
(``"side"``: level c1 against level c64, batch 1 against batch 64), and the groups present on both sides are
compared:

- per category: exclusive ms/step A and B, delta, delta %;
- per kernel: matched by exact name, else by name family (:func:`k25trace.names.kernel_family`: template
  arguments, tile shapes and NCCL's algorithm may differ across builds), else only in A / only in B; calls per
  step, µs per call, ms per step;
- steps: wall p50/p90/p99 (over the steps of every rank) and the mean wall and busy time;
- collectives, when both sides have several ranks: transfer and wait (launch / gpu) per step;
- capture levels, when both sides come from ``k25trace capture``: TTFT, TPOT, ITL, tok/s (aggregates only: no test).

**The test**: Welch's two-sample t-test (unequal variances) on the per-step values of A against those of B,
two-sided; the p-values of one table are Holm-adjusted (the table is one family of tests, so a noise-only pair
has at most ``alpha`` chance of any false "changed" row). A row is *within noise* when the adjusted p ≥ ``alpha``;
*negligible* when the delta is real but smaller than ``min_change_pct`` % of the row's value or ``min_step_pct`` %
of the step time (run-to-run differences the step-to-step noise cannot show, such as another GPU's clock, are of
that order); else *slower* or *faster* (B against A). Both bases are the smaller side's (the row's smaller value,
the group's shorter mean step wall), so the test is symmetric: ``compare B A`` gives the same rows with the
delta's sign, the A/B columns and only-in-A/B swapped and every verdict mirrored. ``delta_pct`` alone stays
relative to A. ``ci95_ms`` is the half-width of the delta's 95 % Welch confidence interval (not adjusted).
Fewer than two steps on a side: *untested*.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import duckdb
import numpy as np
import polars as pl

from k25trace.db import query_frame, run_query
from k25trace.errors import K25Error
from k25trace.names import kernel_family, template_args
from k25trace.vocab import COMPARE_MATCHES, COMPARE_TABLES, PHASES

MATCHES = COMPARE_MATCHES
"""How the steps of the two sides are paired (vocab's; ``--match``)."""
SECTIONS = COMPARE_TABLES
"""The tables of a comparison (vocab's; ``--by``)."""
SELECTION_KEYS = ("run", "level", "trace", "rank", "batch")
CHANGED = ("slower", "faster", "only in A", "only in B")
PSEUDO_CATEGORIES = ("overlap", "idle")

WITHIN_NOISE = "within noise"
NEGLIGIBLE = "negligible"
UNTESTED = "untested (<2 steps)"


# ------------------------------------------------------------------------------------------------ statistics


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 3e-16
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with ``df`` degrees of freedom."""
    if math.isinf(t):
        return 0.0
    return min(1.0, betainc(df / 2.0, 0.5, df / (df + t * t)))


def t_quantile(p_two_sided: float, df: float) -> float:
    """The t such that P(|T| ≥ t) = ``p_two_sided`` (bisection; for confidence intervals)."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > p_two_sided:
        hi *= 2.0
        if hi > 1e12:
            return math.inf
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > p_two_sided:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * hi:
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Welch:
    """Welch's t-test of mean(b) − mean(a): ``p`` two-sided (None with fewer than 2 values on a side),
    ``ci95`` the half-width of the 95 % confidence interval of the difference, ``df`` the Welch–Satterthwaite
    degrees of freedom."""

    delta: float
    p: float | None
    ci95: float | None
    df: float | None


def welch(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> Welch:
    """Welch's unequal-variance t-test of B against A (two-sided)."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    delta = float(b.mean() - a.mean()) if a.size and b.size else math.nan
    if a.size < 2 or b.size < 2:
        return Welch(delta, None, None, None)
    sa, sb = float(a.var(ddof=1)) / a.size, float(b.var(ddof=1)) / b.size
    se2 = sa + sb
    scale = max(abs(float(a.mean())), abs(float(b.mean())), 1e-300)
    if se2 <= (1e-12 * scale) ** 2:  # no variation on either side: the difference is exact
        same = abs(delta) <= 1e-12 * scale
        return Welch(0.0 if same else delta, 1.0 if same else 0.0, 0.0, None)
    df = se2 * se2 / ((sa * sa / (a.size - 1) if sa else 0.0) + (sb * sb / (b.size - 1) if sb else 0.0))
    se = math.sqrt(se2)
    return Welch(delta, t_two_sided_p(delta / se, df), t_quantile(0.05, df) * se, df)


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm–Bonferroni adjusted p-values (None stays None); the family is the non-None values."""
    indexed = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
    m = len(indexed)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(indexed):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdict(p_adjusted: float | None, delta: float, base: float | None, step: float | None = None, *,
            alpha: float, min_change_pct: float, min_step_pct: float = 0.0) -> str:
    """within noise / negligible / slower / faster (B against A), or untested without a p-value.

    ``base`` is the row's value, ``step`` the mean step wall time (same unit): a delta smaller than
    ``min_change_pct`` % of the one or ``min_step_pct`` % of the other is negligible. :func:`compare` passes the
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


# ------------------------------------------------------------------------------------------------- sides


@dataclass(frozen=True)
class Selection:
    """What a side holds inside its database; None = everything. ``run`` is a run id, its label or a unique part
    of an id (resolved against ``compare_runs``)."""

    run: str | None = None
    level: str | None = None
    traces: tuple[int, ...] | None = None
    rank: int | None = None
    batch: int | None = None

    @classmethod
    def parse(cls, items: Iterable[str]) -> "Selection":
        """``["level=c1", "batch=1"]``, ``["run=graph"]``, ``["trace=3,4"]`` → a Selection."""
        values: dict[str, Any] = {}
        for item in items:
            for part in _split_items(item):
                key, sep, value = part.partition("=")
                key, value = key.strip().lower(), value.strip()
                if not sep or not value:
                    raise K25Error(f"side selection {part!r}: expected KEY=VALUE with KEY one of "
                                   f"{', '.join(SELECTION_KEYS)}")
                if key not in SELECTION_KEYS:
                    raise K25Error(f"side selection {part!r}: unknown key {key!r}; one of {', '.join(SELECTION_KEYS)}")
                if key in values:
                    raise K25Error(f"side selection: {key}= given twice")
                try:
                    if key == "trace":
                        values["traces"] = tuple(int(v) for v in value.replace("+", ",").split(",") if v.strip())
                    elif key in ("rank", "batch"):
                        values[key] = int(value)
                    else:
                        values[key] = value
                except ValueError:
                    raise K25Error(f"side selection {part!r}: {key} must be a whole number") from None
        return cls(**values)

    def describe(self) -> str:
        parts = []
        if self.run is not None:
            parts.append(f"run={self.run}")
        if self.level is not None:
            parts.append(f"level={self.level}")
        if self.traces is not None:
            parts.append("trace=" + ",".join(str(t) for t in self.traces))
        if self.rank is not None:
            parts.append(f"rank={self.rank}")
        if self.batch is not None:
            parts.append(f"batch={self.batch}")
        return " ".join(parts) or "all"


def _split_items(item: str) -> list[str]:
    """``"level=c1,batch=1"`` → two items; a comma inside ``trace=3,4`` stays with its key."""
    out: list[str] = []
    for piece in item.split(","):
        if "=" in piece or not out:
            out.append(piece)
        else:
            out[-1] += "," + piece
    return [p for p in (o.strip() for o in out) if p]


@dataclass
class Side:
    """One side of a comparison: a connection (its database), where it came from, and what it selects."""

    name: str
    con: duckdb.DuckDBPyConnection
    source: str
    selection: Selection = field(default_factory=Selection)


def runs(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The runs of a database a side can pick (``compare_runs``), with their ``label`` (``trace_runs.run_label``)."""
    return query_frame(con, "compare_runs")


def resolve_run(frame: pl.DataFrame, wanted: str) -> str:
    """A run id from an id, a label or a unique part of an id; a clear error naming the runs otherwise."""
    ids = frame["run_id"].to_list()
    labels = frame["label"].to_list()
    if wanted in ids:
        return wanted
    by_label = [i for i, label in zip(ids, labels, strict=True) if label == wanted]
    if len(by_label) == 1:
        return by_label[0]
    partial = [i for i in ids if wanted in i]
    if len(partial) == 1:
        return partial[0]
    known = "; ".join(f"{label} = {i}" for i, label in zip(ids, labels, strict=True)) or "none (no traces loaded)"
    if len(by_label) > 1 or len(partial) > 1:
        raise K25Error(f"run={wanted!r} matches {max(len(by_label), len(partial))} runs; give more of the id. "
                       f"Runs: {known}")
    raise K25Error(f"no run matches run={wanted!r}. Runs: {known}")


@dataclass
class _Data:
    """One side's extracted rows."""

    side: Side
    runs: pl.DataFrame
    rank_steps: pl.DataFrame   # one row per (trace, step)
    obs: pl.DataFrame          # one row per (run_id, step_index): the observation
    categories: pl.DataFrame   # per (run_id, step_index, category): sums over ranks
    kernels: pl.DataFrame      # per (run_id, step_index, name_id, category)
    names: pl.DataFrame        # name_id → name, short_name, kind
    comm: pl.DataFrame         # per (run_id, step_index, category)
    levels: pl.DataFrame       # capture_levels of the side


def _extract(side: Side, phase: str) -> _Data:
    sel = side.selection
    all_runs = runs(side.con)
    run_id = resolve_run(all_runs, sel.run) if sel.run is not None else None
    if sel.level is not None:
        levels = {lv for lv in all_runs["level"].to_list() if lv is not None}
        if sel.level not in levels:
            raise K25Error(f"side {side.name} ({side.source}): no capture level {sel.level!r}; "
                           f"levels: {', '.join(sorted(levels)) or 'none (traces not from k25trace capture)'}")
    if sel.traces is not None:
        known = {t for ids in all_runs["trace_ids"].to_list() for t in ids}
        missing = sorted(set(sel.traces) - known)
        if missing:
            raise K25Error(f"side {side.name} ({side.source}): no trace {', '.join(map(str, missing))}; "
                           f"trace ids: {', '.join(map(str, sorted(known))) or 'none'}")
    params = {"phase": phase, "run_id": run_id, "level": sel.level,
              "trace_ids": list(sel.traces) if sel.traces is not None else None, "rank": sel.rank,
              "batch_size": sel.batch}
    run_query(side.con, "compare_select", params)  # the side's steps, once, for the compare_* queries below
    try:
        return _read_side(side, sel, phase, params, all_runs)
    finally:
        run_query(side.con, "compare_select_drop")


def _read_side(side: Side, sel: Selection, phase: str, params: dict[str, Any], all_runs: pl.DataFrame) -> "_Data":
    """The per-side frames, from the steps ``compare_select`` put in ``_compare_selection``."""
    rank_steps = query_frame(side.con, "compare_steps")
    if rank_steps.is_empty():
        what = f"{phase} steps" if phase != "all" else "steps"
        raise K25Error(f"side {side.name} ({side.source}, {sel.describe()}) has no {what} with GPU activity"
                       + (" (--phase all compares every step, inferred ones too)" if phase != "all" else ""))
    obs = (rank_steps.group_by(["run_id", "step_index"], maintain_order=True)
           .agg(pl.col("phase").first(), pl.col("batch_size").first(), pl.col("level").first(),
                pl.col("rank").n_unique().alias("ranks"),
                *(pl.col(c).cast(pl.Float64).mean() for c in ("wall_ns", "busy_ns", "idle_ns", "overlap_ns"))))
    selected_runs = all_runs.filter(pl.col("run_id").is_in(obs["run_id"].unique().to_list()))
    level_params = {k: params[k] for k in ("run_id", "level", "trace_ids")}
    return _Data(
        side=side, runs=selected_runs, rank_steps=rank_steps, obs=obs,
        categories=query_frame(side.con, "compare_categories"),
        kernels=query_frame(side.con, "compare_kernels"),
        names=query_frame(side.con, "compare_kernel_names"),
        comm=query_frame(side.con, "compare_comm_steps") if sel.rank is None else pl.DataFrame(),
        levels=query_frame(side.con, "compare_levels", level_params),
    )


# ----------------------------------------------------------------------------------------------- result


@dataclass
class Comparison:
    """What :func:`compare` found; each table is a polars DataFrame (see the module doc for the columns)."""

    match: str
    alpha: float
    min_change_pct: float
    min_step_pct: float
    sides: pl.DataFrame
    categories: pl.DataFrame
    kernels: pl.DataFrame
    steps: pl.DataFrame
    comm: pl.DataFrame
    macro: pl.DataFrame
    notes: list[str]
    groups: int = 0
    """Step groups compared (present on both sides)."""

    TEST = "Welch's t-test on per-step values, two-sided, Holm-adjusted per table"

    def section(self, name: str) -> pl.DataFrame:
        frames = {"category": self.categories, "kernel": self.kernels, "step": self.steps, "comm": self.comm,
                  "macro": self.macro}
        if name not in frames:
            raise K25Error(f"unknown section {name!r}; one of {', '.join(SECTIONS)}")
        return frames[name]

    def changes(self) -> list[str]:
        """One line per changed row (categories, kernels, the step wall, collectives); empty = no change."""
        lines = []
        for row in self.categories.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True):
            lines.append(f"{row['group']}: {row['category']} {row['verdict']} "
                         f"({_signed(row['delta_ms'])} ms/step, {_pct(row['delta_pct'])})")
        for row in self.kernels.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True):
            name = row["name_a"] if row["name_a"] is not None else row["name_b"]
            lines.append(f"{row['group']}: kernel {_clip(name, 80)} {row['verdict']}"
                         + (f" ({_signed(row['delta_ms'])} ms/step)" if row["delta_ms"] is not None
                            and row["verdict"] in ("slower", "faster") else ""))
        # a step group on one side only was not compared (said in the notes): not a change
        for row in self.steps.filter(pl.col("verdict").is_in(["slower", "faster"])).iter_rows(named=True):
            lines.append(f"{row['group']}: step {row['metric']} {row['verdict']} "
                         f"({_signed(row['delta_ms'])} ms, {_pct(row['delta_pct'])})")
        for row in self.comm.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True):
            lines.append(f"{row['group']}: {row['category']} {row['metric']} {row['verdict']} "
                         f"({_signed(row['delta_ms'])} ms/step)")
        return lines

    @property
    def verdict(self) -> str:
        """'no change', how many rows changed, or 'nothing compared' (no step group on both sides)."""
        n = len(self.changes())
        if n == 0 and self.groups == 0:
            return "nothing compared"
        return "no change" if n == 0 else f"{n} change{'s' if n != 1 else ''}"

    def summary(self) -> str:
        """One line: the verdict and the test it rests on."""
        return (f"{self.verdict} (matched by {self.match}; {self.TEST}; changed = adjusted p < {self.alpha:g}, "
                f"|delta| ≥ {self.min_change_pct:g} % of the smaller side's value and ≥ {self.min_step_pct:g} % of "
                f"the shorter side's step: swapping A and B mirrors every verdict; delta_pct is relative to A)")

    def as_dict(self) -> dict[str, Any]:
        """Every table as a list of rows, with the verdict, the test and the notes (``--format json``)."""
        return {
            "verdict": self.verdict, "test": self.TEST, "alpha": self.alpha, "min_change_pct": self.min_change_pct,
            "min_step_pct": self.min_step_pct,
            "match": self.match, "groups": self.groups, "changes": self.changes(), "notes": self.notes,
            "sides": self.sides.to_dicts(), "categories": self.categories.to_dicts(),
            "kernels": self.kernels.to_dicts(),
            "steps": self.steps.to_dicts(), "comm": self.comm.to_dicts(), "macro": self.macro.to_dicts(),
        }


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.4f}"


def _pct(x: float | None) -> str:
    return "new" if x is None else f"{x:+.1f} %"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------------------------- core


def compare(a: Side, b: Side, *, phase: str = "decode", match: str = "auto", alpha: float = 0.05,
            min_change_pct: float = 5.0, min_step_pct: float = 0.5) -> Comparison:
    """Compare side ``a`` with side ``b`` (see the module doc)."""
    if phase not in PHASES:
        raise K25Error(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
    if match not in MATCHES:
        raise K25Error(f"unknown match {match!r}; one of {', '.join(MATCHES)}")
    if not 0 < alpha < 1:
        raise K25Error(f"alpha must be between 0 and 1, not {alpha}")
    for value in (min_change_pct, min_step_pct):
        if not (value >= 0 and math.isfinite(value)):
            raise K25Error(f"a minimum change must be a percentage ≥ 0, not {value}")
    da, db = _extract(a, phase), _extract(b, phase)
    notes: list[str] = []
    match = _resolve_match(match, a.selection, b.selection)
    for d in (da, db):
        d.obs = _with_groups(d.obs, match, d.runs)
    if match == "side":
        side_label = f"A {_side_name(a)} ↔ B {_side_name(b)}"
        for d in (da, db):
            d.obs = d.obs.with_columns(pl.lit(side_label).alias("group"))
    if a.con is b.con and a.selection == b.selection:
        notes.append("A and B select the same steps: every delta is 0")
    groups_a = _group_keys(da.obs)
    groups_b = _group_keys(db.obs)
    matched = [g for g in groups_a if g in groups_b]
    for g in groups_a:
        if g not in groups_b:
            notes.append(f"{g[0]} {g[1]}: only in A ({groups_a[g]} steps), not compared")
    for g in groups_b:
        if g not in groups_a:
            notes.append(f"{g[0]} {g[1]}: only in B ({groups_b[g]} steps), not compared")
    if not matched:
        notes.append(f"no step group is on both sides (phase {phase}, matched by {match}): nothing compared"
                     + ("; --match side compares each side's steps as one group" if match != "side" else ""))
    notes.extend(_device_notes(da, db))
    kw = {"alpha": alpha, "min_change_pct": min_change_pct, "min_step_pct": min_step_pct}
    categories = _categories(da, db, matched, **kw)
    kernels = _kernels(da, db, matched, **kw)
    steps = _steps(da, db, matched, groups_a, groups_b, **kw)
    comm, comm_note = _comm(da, db, matched, **kw)
    if comm_note:
        notes.append(comm_note)
    macro, macro_notes = _macro(da, db)
    notes.extend(macro_notes)
    return Comparison(match=match, alpha=alpha, min_change_pct=min_change_pct, min_step_pct=min_step_pct,
                      sides=_sides(da, db),
                      categories=categories, kernels=kernels, steps=steps, comm=comm, macro=macro, notes=notes,
                      groups=len(matched))


def _resolve_match(match: str, a: Selection, b: Selection) -> str:
    if match != "auto":
        return match
    if a.batch is not None and b.batch is not None and a.batch != b.batch:
        return "side"
    if a.level is not None and b.level is not None and a.level != b.level:
        return "side"
    return "batch"


def _side_name(side: Side) -> str:
    sel = side.selection.describe()
    return sel if sel != "all" else side.source


def _with_groups(obs: pl.DataFrame, match: str, side_runs: pl.DataFrame) -> pl.DataFrame:
    """Add ``group`` (the label matched across sides) and ``group_order`` (for sorting) to the observations."""
    if match == "batch":
        return obs.with_columns(
            pl.when(pl.col("batch_size").is_null()).then(pl.lit("bs=?"))
            .otherwise(pl.lit("bs=") + pl.col("batch_size").cast(pl.String)).alias("group"),
            pl.col("batch_size").fill_null(-1).cast(pl.Int64).alias("group_order"))
    if match == "level":
        conc = {r["level"]: r["concurrency"] for r in side_runs.iter_rows(named=True) if r["level"] is not None}
        return obs.with_columns(
            pl.col("level").fill_null("(no level)").alias("group"),
            pl.col("level").map_elements(lambda lv: conc.get(lv) or 0, return_dtype=pl.Int64)
            .fill_null(-1).alias("group_order"))
    return obs.with_columns(pl.lit("all").alias("group"), pl.lit(0, dtype=pl.Int64).alias("group_order"))


def _group_keys(obs: pl.DataFrame) -> dict[tuple[str, str], int]:
    """(phase, group) → steps, in (phase, group order) order."""
    counts = (obs.group_by(["phase", "group"]).agg(pl.len().alias("n"), pl.col("group_order").first())
              .sort(["phase", "group_order", "group"]))
    return {(r["phase"], r["group"]): int(r["n"]) for r in counts.iter_rows(named=True)}


def _obs_of(d: _Data, group: tuple[str, str]) -> pl.DataFrame:
    """The observations of one group, numbered 0…n−1 (``i``) in step order."""
    return (d.obs.filter((pl.col("phase") == group[0]) & (pl.col("group") == group[1]))
            .sort(["run_id", "step_index"]).with_row_index("i"))


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
    return {"ms_a": ma, "ms_b": mb, "delta_ms": mb - ma,
            "delta_pct": (mb - ma) * 100.0 / ma if ma else (0.0 if mb == ma else None),
            "ci95_ms": test.ci95, "p_raw": test.p}


def _finish(rows: list[dict[str, Any]], columns: list[str], *, alpha: float, min_change_pct: float,
            min_step_pct: float, schema: dict[str, Any]) -> pl.DataFrame:
    """Holm-adjust the table's p-values, give each row its verdict, round, and build the frame."""
    adjusted = holm([r.get("p_raw") for r in rows])
    for row, p in zip(rows, adjusted, strict=True):
        row["p_value"] = p
        if row.get("verdict") is None:
            row["verdict"] = verdict(p, row["delta_ms"] or 0.0, symmetric_base(row["ms_a"], row["ms_b"]),
                                     symmetric_base(row.get("step_ms_a"), row.get("step_ms_b")), alpha=alpha,
                                     min_change_pct=min_change_pct, min_step_pct=min_step_pct)
        for k in ("ms_a", "ms_b", "delta_ms", "ci95_ms"):
            if row.get(k) is not None:
                row[k] = round(row[k], 4)
        if row.get("delta_pct") is not None:
            row["delta_pct"] = round(row["delta_pct"], 2)
        if row.get("p_value") is not None:
            row["p_value"] = float(f"{row['p_value']:.3g}")
    return pl.DataFrame([{c: r.get(c) for c in columns} for r in rows], schema={c: schema[c] for c in columns})


_NUM = pl.Float64
_SCHEMA: dict[str, Any] = {
    "phase": pl.String, "group": pl.String, "category": pl.String, "metric": pl.String, "match": pl.String,
    "name_a": pl.String, "name_b": pl.String, "family": pl.String, "steps_a": pl.Int64, "steps_b": pl.Int64,
    "ranks_a": pl.Int64, "ranks_b": pl.Int64, "calls_a": _NUM, "calls_b": _NUM, "us_per_call_a": _NUM,
    "us_per_call_b": _NUM, "ms_a": _NUM, "ms_b": _NUM, "delta_ms": _NUM, "delta_pct": _NUM, "ci95_ms": _NUM,
    "p_value": _NUM, "verdict": pl.String, "level_a": pl.String, "level_b": pl.String, "unit": pl.String,
    "a": _NUM, "b": _NUM, "delta": _NUM, "better": pl.String,
}
CATEGORY_COLUMNS = ["phase", "group", "category", "steps_a", "steps_b", "ms_a", "ms_b", "delta_ms", "delta_pct",
                    "ci95_ms", "p_value", "verdict"]
KERNEL_COLUMNS = ["phase", "group", "match", "category", "name_a", "name_b", "calls_a", "calls_b", "us_per_call_a",
                  "us_per_call_b", "ms_a", "ms_b", "delta_ms", "delta_pct", "p_value", "verdict", "family"]
STEP_COLUMNS = ["phase", "group", "metric", "steps_a", "steps_b", "ranks_a", "ranks_b", "ms_a", "ms_b", "delta_ms",
                "delta_pct", "ci95_ms", "p_value", "verdict"]
COMM_COLUMNS = ["phase", "group", "category", "metric", "ranks_a", "ranks_b", "calls_a", "calls_b", "ms_a", "ms_b",
                "delta_ms", "delta_pct", "ci95_ms", "p_value", "verdict"]
MACRO_COLUMNS = ["level_a", "level_b", "metric", "unit", "a", "b", "delta", "delta_pct", "better"]


def _categories(da: _Data, db: _Data, matched: list[tuple[str, str]], **kw: Any) -> pl.DataFrame:
    rows = []
    for group in matched:
        oa, ob = _obs_of(da, group), _obs_of(db, group)
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
            group_rows.append({"phase": group[0], "group": group[1], "category": cat, "steps_a": oa.height,
                               "steps_b": ob.height, "step_ms_a": _step_ms(oa), "step_ms_b": _step_ms(ob),
                               **_row_stats(xa, xb)})
        group_rows.sort(key=lambda r: (r["category"] in PSEUDO_CATEGORIES, -max(r["ms_a"], r["ms_b"]), r["category"]))
        rows.extend(group_rows)
    return _finish(rows, CATEGORY_COLUMNS, schema=_SCHEMA, **kw)


def _name_table(d: _Data) -> dict[int, dict[str, Any]]:
    return {r["name_id"]: r for r in d.names.iter_rows(named=True)}


def _kernels(da: _Data, db: _Data, matched: list[tuple[str, str]], **kw: Any) -> pl.DataFrame:
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
        oa, ob = _obs_of(da, group), _obs_of(db, group)
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
            entries.append(("family", [full_a[f] for f in sorted(rest_a) if rest_a[f] == fam],
                            [full_b[f] for f in sorted(rest_b) if rest_b[f] == fam]))
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
                "phase": group[0], "group": group[1], "match": how, "step_ms_a": _step_ms(oa),
                "step_ms_b": _step_ms(ob),
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
    return _finish(rows, KERNEL_COLUMNS, schema=_SCHEMA, **kw)


def _categories_of(kernels: pl.DataFrame, obs: pl.DataFrame) -> dict[int, str]:
    """name_id → its category in these steps (the one with the most time when a name has several)."""
    if kernels.is_empty():
        return {}
    per = (kernels.join(obs.select("run_id", "step_index"), on=["run_id", "step_index"], how="semi")
           .group_by(["name_id", "category"]).agg(pl.col("kernel_ns").sum())
           .sort(["name_id", "kernel_ns", "category"], descending=[False, True, False])
           .unique("name_id", keep="first"))
    return dict(zip(per["name_id"].to_list(), per["category"].to_list(), strict=True))


def _join_categories(cats: list[str | None]) -> str:
    seen: list[str] = []
    for c in cats:
        if c is not None and c not in seen:
            seen.append(c)
    return " → ".join(seen) if seen else "other"


def _steps(da: _Data, db: _Data, matched: list[tuple[str, str]], groups_a: dict, groups_b: dict,
           **kw: Any) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    for group in list(groups_a) + [g for g in groups_b if g not in groups_a]:
        in_a, in_b = group in groups_a, group in groups_b
        oa = _obs_of(da, group) if in_a else None
        ob = _obs_of(db, group) if in_b else None
        base = {"phase": group[0], "group": group[1], "steps_a": oa.height if oa is not None else None,
                "steps_b": ob.height if ob is not None else None,
                "ranks_a": _rank_count(oa) if oa is not None else None,
                "ranks_b": _rank_count(ob) if ob is not None else None,
                "step_ms_a": _step_ms(oa) if oa is not None else None,
                "step_ms_b": _step_ms(ob) if ob is not None else None}
        if not (in_a and in_b):
            o = oa if in_a else ob
            assert o is not None
            mean = _mean_float(o["wall_ns"]) / 1e6
            rows.append({**base, "metric": "wall mean", "ms_a": mean if in_a else None, "ms_b": mean if in_b else None,
                         "delta_ms": None, "verdict": "only in A" if in_a else "only in B"})
            continue
        assert oa is not None and ob is not None
        wa, wb = _rank_walls(da, oa), _rank_walls(db, ob)
        for q in (50, 90, 99):
            va, vb = float(np.percentile(wa, q)) / 1e6, float(np.percentile(wb, q)) / 1e6
            rows.append({**base, "metric": f"wall p{q}", "ms_a": va, "ms_b": vb, "delta_ms": vb - va,
                         "delta_pct": (vb - va) * 100 / va if va else None, "verdict": "—"})
        for metric, column in (("wall mean", "wall_ns"), ("busy mean", "busy_ns")):
            rows.append({**base, "metric": metric,
                         **_row_stats(oa[column].to_numpy().astype(float), ob[column].to_numpy().astype(float))})
    return _finish(rows, STEP_COLUMNS, schema=_SCHEMA, **kw)


def _max_int(values: pl.Series) -> int:
    """The largest value of an integer column as an int (0 when empty)."""
    return int(cast(int, values.max()) or 0)


def _mean_float(values: pl.Series) -> float:
    """The mean of a numeric column as a float (0.0 when empty)."""
    return float(cast(float, values.mean()) or 0.0)


def _step_ms(obs: pl.DataFrame) -> float:
    """A group's mean step wall time in ms (the base of ``min_step_pct``)."""
    return _mean_float(obs["wall_ns"]) / 1e6


def _rank_count(obs: pl.DataFrame) -> int:
    return _max_int(obs["ranks"])


def _rank_walls(d: _Data, obs: pl.DataFrame) -> np.ndarray:
    """The wall time of every (rank, step) of a group: the percentiles are over these, as in `report`."""
    return (d.rank_steps.join(obs.select("run_id", "step_index"), on=["run_id", "step_index"], how="semi")
            ["wall_ns"].to_numpy().astype(float))


COMM_METRICS = (("transfer", "transfer_ns"), ("wait", "wait_ns"), ("launch wait", "launch_wait_ns"),
                ("gpu wait", "gpu_wait_ns"))


def _comm(da: _Data, db: _Data, matched: list[tuple[str, str]], **kw: Any) -> tuple[pl.DataFrame, str | None]:
    empty = pl.DataFrame(schema={c: _SCHEMA[c] for c in COMM_COLUMNS})
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
        oa, ob = _obs_of(da, group), _obs_of(db, group)
        ca = da.comm.join(oa.select("run_id", "step_index", "i"), on=["run_id", "step_index"], how="inner")
        cb = db.comm.join(ob.select("run_id", "step_index", "i"), on=["run_id", "step_index"], how="inner")
        for category in sorted(set(ca["category"].to_list()) | set(cb["category"].to_list())):
            pa = ca.filter(pl.col("category") == category).sort("i")
            pb = cb.filter(pl.col("category") == category).sort("i")
            base = {"phase": group[0], "group": group[1], "category": category, "step_ms_a": _step_ms(oa),
                    "step_ms_b": _step_ms(ob),
                    "ranks_a": _max_int(pa["ranks"]) if pa.height else None,
                    "ranks_b": _max_int(pb["ranks"]) if pb.height else None,
                    "calls_a": round(_mean_float(pa["calls"]), 2) if pa.height else None,
                    "calls_b": round(_mean_float(pb["calls"]), 2) if pb.height else None}
            for metric, column in COMM_METRICS:
                xa = pa[column].cast(pl.Float64).to_numpy() if pa.height else np.zeros(0)
                xb = pb[column].cast(pl.Float64).to_numpy() if pb.height else np.zeros(0)
                if not pa.height or not pb.height:
                    value = float((xa if pa.height else xb).mean()) / 1e6
                    rows.append({**base, "metric": metric, "ms_a": value if pa.height else None,
                                 "ms_b": value if pb.height else None, "delta_ms": None,
                                 "verdict": "only in A" if pa.height else "only in B"})
                    continue
                rows.append({**base, "metric": metric, **_row_stats(xa, xb)})
    return _finish(rows, COMM_COLUMNS, schema=_SCHEMA, **kw), None


MACRO_METRICS = (
    ("output tok/s", "output_tok_s", "tok/s", "higher"),
    ("TTFT p50", "ttft_p50_ms", "ms", "lower"), ("TTFT p90", "ttft_p90_ms", "ms", "lower"),
    ("TTFT p99", "ttft_p99_ms", "ms", "lower"),
    ("TPOT p50", "tpot_p50_ms", "ms", "lower"), ("TPOT p90", "tpot_p90_ms", "ms", "lower"),
    ("TPOT p99", "tpot_p99_ms", "ms", "lower"),
    ("ITL p50", "itl_p50_ms", "ms", "lower"), ("ITL p90", "itl_p90_ms", "ms", "lower"),
    ("ITL p99", "itl_p99_ms", "ms", "lower"),
    ("requests", "requests", "", None), ("errors", "errors", "", "lower"),
)


def _macro(da: _Data, db: _Data) -> tuple[pl.DataFrame, list[str]]:
    empty = pl.DataFrame(schema={c: _SCHEMA[c] for c in MACRO_COLUMNS})
    la, lb = da.levels, db.levels
    if la.is_empty() and lb.is_empty():
        return empty, []
    if la.is_empty() or lb.is_empty():
        only = "A" if lb.is_empty() else "B"
        return empty, [f"capture figures (TTFT, TPOT, tok/s): only {only} comes from `k25trace capture`; not compared"]
    pairs: list[tuple[dict, dict]] = []
    notes = []
    rows_a, rows_b = la.to_dicts(), lb.to_dicts()
    if len(rows_a) == 1 and len(rows_b) == 1:
        pairs.append((rows_a[0], rows_b[0]))
    else:
        by_b = {r["level"]: r for r in rows_b}
        for r in rows_a:
            if r["level"] in by_b:
                pairs.append((r, by_b[r["level"]]))
        unpaired = [f"A {r['level']}" for r in rows_a if r["level"] not in by_b] + \
                   [f"B {r['level']}" for r in rows_b if r["level"] not in {x["level"] for x in rows_a}]
        if unpaired:
            notes.append(f"capture levels without a same-named level on the other side: {', '.join(unpaired)}")
    rows = []
    for ra, rb in pairs:
        for metric, column, unit, good in MACRO_METRICS:
            va, vb = ra.get(column), rb.get(column)
            va = None if va is None else float(va)
            vb = None if vb is None else float(vb)
            delta = None if va is None or vb is None else vb - va
            better = None
            if delta is not None and good is not None:
                better = "same" if delta == 0 else ("B" if (delta > 0) == (good == "higher") else "A")
            rows.append({"level_a": ra["level"], "level_b": rb["level"], "metric": metric, "unit": unit,
                         "a": None if va is None else round(va, 3), "b": None if vb is None else round(vb, 3),
                         "delta": None if delta is None else round(delta, 3),
                         "delta_pct": round(delta * 100 / va, 2) if delta is not None and va else None,
                         "better": better})
    notes.append("capture figures are per-level aggregates (percentiles over requests), not per-request values: "
                 "shown with their delta, no test")
    return pl.DataFrame(rows, schema={c: _SCHEMA[c] for c in MACRO_COLUMNS}), notes


def _sides(da: _Data, db: _Data) -> pl.DataFrame:
    rows = []
    for d in (da, db):
        r = d.runs
        batches = sorted({b for b in d.obs["batch_size"].to_list() if b is not None})
        rows.append({
            "side": d.side.name, "source": d.side.source, "selection": d.side.selection.describe(),
            "runs": ", ".join(r["label"].to_list()),
            "levels": ", ".join(sorted({lv for lv in d.obs["level"].to_list() if lv is not None})) or None,
            "ranks": _max_int(d.obs["ranks"]),
            "devices": ", ".join(sorted({x for v in r["devices"].to_list() if v for x in v.split(", ")})) or None,
            "vllm": ", ".join(sorted({x for v in r["vllm_versions"].to_list() if v for x in v.split(", ")})) or None,
            "steps": d.obs.height,
            "batch_sizes": ", ".join(str(b) for b in batches) or None,
        })
    return pl.DataFrame(rows)


def _device_notes(da: _Data, db: _Data) -> list[str]:
    def values(d: _Data, column: str) -> set[str]:
        return {x for v in d.runs[column].to_list() if v for x in v.split(", ")}

    notes = []
    for column, what in (("devices", "GPUs"), ("vllm_versions", "vLLM versions")):
        va, vb = values(da, column), values(db, column)
        if va and vb and va != vb:
            notes.append(f"the sides differ in {what} (A: {', '.join(sorted(va))}; B: {', '.join(sorted(vb))}): "
                         "kernels of other builds match by family or not at all; see each row's match column")
    return notes


# ---------------------------------------------------------------------------------------------- printing

TITLES = {
    "sides": "Sides",
    "category": "Per category: exclusive ms/step (only that category running; with overlap and idle they add up "
                "to the step), B against A",
    "kernel": "Per kernel: matched by exact name, else by family (template arguments, tile shapes, NCCL algorithm "
              "aside), else only in A / only in B",
    "step": "Steps: wall time per step (p50/p90/p99 over every rank's steps; mean and busy tested)",
    "comm": "Collectives across ranks: transfer and wait per step (report --by comm)",
    "macro": "Capture levels: client-side figures (aggregates: no test)",
}


RIGHT = ("p_value",)  # text columns that hold numbers (right-aligned)


def top_kernels(frame: pl.DataFrame, top: int | None) -> tuple[pl.DataFrame, int]:
    """Every changed kernel row, plus the ``top`` largest others (by |delta|, then time) per group; and how many
    rows were left out. ``top`` None or 0: every row."""
    if not top or frame.is_empty():
        return frame, 0
    ranked = frame.with_row_index("_row").with_columns(
        pl.col("verdict").is_in(CHANGED).alias("_changed"),
        pl.col("_row").rank("ordinal").over(["phase", "group", pl.col("verdict").is_in(CHANGED)]).alias("_rank"))
    kept = ranked.filter(pl.col("_changed") | (pl.col("_rank") <= top)).sort("_row").drop("_row", "_changed", "_rank")
    return kept, frame.height - kept.height


def display_frame(frame: pl.DataFrame, section: str) -> pl.DataFrame:
    """Columns for table and Markdown output: no single-valued phase, no family (the match column says how)."""
    drop = [c for c in ("family",) if c in frame.columns and section == "kernel"]
    if "phase" in frame.columns and frame["phase"].n_unique() <= 1:
        drop.append("phase")
    frame = frame.drop(drop)
    if "p_value" in frame.columns:  # 4 decimals would print tiny p-values as 0
        frame = frame.with_columns(pl.col("p_value").map_elements(format_p, return_dtype=pl.String))
    return frame


def format_p(p: float | None) -> str | None:
    """A p-value as text: three decimals, or two significant digits below 0.001."""
    if p is None:
        return None
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def write(comparison: Comparison, fmt: str, *, by: str = "all", top: int | None = 30, out: Any = None) -> None:
    """Print a comparison: one section (``by``), or every non-empty section with the verdict (``all``; not CSV)."""
    import sys

    from rich.console import Console
    from rich.text import Text

    from k25trace.render import output

    out = out or sys.stdout
    if by != "all":
        frame = comparison.section(by)
        if by == "kernel" and fmt in ("table", "markdown"):
            frame, _ = top_kernels(frame, top)
        output.write(display_frame(frame, by) if fmt in ("table", "markdown") else frame, fmt, out, title=TITLES[by],
                     right=RIGHT)
        return
    if fmt == "csv":
        raise K25Error("CSV holds one table: choose --by category, kernel, step, comm or macro (or --format json)")
    if fmt == "json":
        output.write_json(comparison.as_dict(), out)
        return
    sections: list[tuple[str, pl.DataFrame, str]] = [("sides", comparison.sides, "")]
    for name in SECTIONS:
        frame = comparison.section(name)
        if frame.is_empty():
            continue
        note = ""
        if name == "kernel":
            frame, hidden = top_kernels(frame, top)
            if hidden:
                note = f"{hidden} more kernel rows within noise or negligible (--top 0 shows every row)"
        sections.append((name, display_frame(frame, name), note))
    if fmt == "markdown":
        lines = [f"**Verdict: {comparison.summary()}**", ""]
        lines += [f"- {change}" for change in comparison.changes()]
        for name, frame, note in sections:
            lines += ["", f"### {TITLES[name]}", "", output.markdown(frame, right=RIGHT)]
            if note:
                lines += ["", f"*{note}*"]
        out.write("\n".join(lines) + "\n")
        return
    console = Console(file=out, width=None if out.isatty() else 200)
    for name, frame, note in sections:
        console.print(output.rich_table(frame, title=TITLES[name], caption=note or None, right=RIGHT))
    console.print(Text("Verdict: " + comparison.summary(), style="bold"))
    for change in comparison.changes():
        console.print(Text("  " + change))
