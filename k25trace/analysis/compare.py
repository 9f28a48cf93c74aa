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
- layers (:mod:`.compare_layers`): per segment of the steps' layer split (pre, 0..L−1, post), the median wall,
  paired by index only when both sides have the same layer count;
- collectives, when both sides have several ranks: transfer and wait per step, the wait at the step's first
  collective and at later ones;
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

This module holds the entry point (:func:`compare`), its result (:class:`Comparison`) and the helpers every view of
it shares; the sides are in :mod:`.compare_sides`, the table builders in :mod:`.compare_tables` and
:mod:`.compare_layers`, the tests in
:mod:`k25trace.stats`, the terminal view in :mod:`k25trace.render.compare`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from k25trace.analysis.compare_layers import STANDS_OUT, layer_table, segment_order
from k25trace.analysis.compare_sides import (
    SELECTION_KEYS,
    Selection,
    Side,
    device_notes,
    extract_side,
    macro_table,
    resolve_run,
    runs,
    sides_table,
)
from k25trace.analysis.compare_tables import (
    CHANGED,
    NEGLIGIBLE,
    PSEUDO_CATEGORIES,
    UNTESTED,
    WITHIN_NOISE,
    category_table,
    comm_table,
    kernel_table,
    step_table,
    symmetric_base,
    verdict,
)
from k25trace.errors import K25Error
from k25trace.stats import Welch, betainc, holm, t_quantile, t_two_sided_p, welch
from k25trace.vocab import COMPARE_MATCHES, COMPARE_TABLES, PHASES

__all__ = [
    "CHANGED",
    "MATCHES",
    "NEGLIGIBLE",
    "PHASES",
    "PSEUDO_CATEGORIES",
    "SECTIONS",
    "SELECTION_KEYS",
    "STANDS_OUT",
    "TITLES",
    "UNTESTED",
    "WITHIN_NOISE",
    "Comparison",
    "Selection",
    "Side",
    "Welch",
    "betainc",
    "compare",
    "display_frame",
    "format_p",
    "holm",
    "resolve_run",
    "runs",
    "segment_order",
    "symmetric_base",
    "t_quantile",
    "t_two_sided_p",
    "top_kernels",
    "verdict",
    "welch",
]

NOTE_STARTS = {"layer": "layers", "comm": "collectives across ranks", "macro": "capture"}
"""How the notes about a table begin (:meth:`Comparison.notes_on`)."""
MATCHES = COMPARE_MATCHES
"""How the steps of the two sides are paired (vocab's; ``--match``)."""
SECTIONS = COMPARE_TABLES
"""The tables of a comparison (vocab's; ``--by``)."""


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
    layers: pl.DataFrame = field(default_factory=pl.DataFrame)
    """Per step group and segment (pre, each layer, post) of the layer split: :mod:`.compare_layers`."""

    TEST = "Welch's t-test on per-step values, two-sided, Holm-adjusted per table"

    def section(self, name: str) -> pl.DataFrame:
        frames = {
            "category": self.categories,
            "kernel": self.kernels,
            "step": self.steps,
            "layer": self.layers,
            "comm": self.comm,
            "macro": self.macro,
        }
        if name not in frames:
            raise K25Error(f"unknown section {name!r}; one of {', '.join(SECTIONS)}")
        return frames[name]

    def notes_on(self, name: str) -> list[str]:
        """The notes about one table (why the layer, collective or capture-level table has no rows)."""
        starts = NOTE_STARTS.get(name)
        return [n for n in self.notes if starts and n.startswith(starts)]

    def changes(self, section: str | None = None) -> list[str]:
        """One line per changed row (categories, kernels, the step wall, layers that stand out, collectives); empty =
        no change. ``section``: that table's lines only (``layer``: every changed layer)."""
        if section is not None:
            return self._changed_layers(every=True) if section == "layer" else self._changed(section)
        return [line for name in ("category", "kernel", "step", "layer", "comm") for line in self._changed(name)]

    def _changed(self, name: str) -> list[str]:
        """The change lines of one table (the layer table: the layers that stand out)."""
        if name == "layer":
            return self._changed_layers(every=False)
        if name == "category":
            return [
                f"{row['group']}: {row['category']} {row['verdict']} "
                f"({_signed(row['delta_ms'])} ms/step, {_pct(row['delta_pct'])})"
                for row in self.categories.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True)
            ]
        if name == "kernel":
            lines = []
            for row in self.kernels.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True):
                kernel = row["name_a"] if row["name_a"] is not None else row["name_b"]
                tested = row["delta_ms"] is not None and row["verdict"] in ("slower", "faster")
                lines.append(
                    f"{row['group']}: kernel {_clip(kernel, 80)} {row['verdict']}"
                    + (f" ({_signed(row['delta_ms'])} ms/step)" if tested else "")
                )
            return lines
        if name == "step":  # a step group on one side only was not compared (said in the notes): not a change
            return [
                f"{row['group']}: step {row['metric']} {row['verdict']} "
                f"({_signed(row['delta_ms'])} ms, {_pct(row['delta_pct'])})"
                for row in self.steps.filter(pl.col("verdict").is_in(["slower", "faster"])).iter_rows(named=True)
            ]
        if name == "comm":
            return [
                f"{row['group']}: {row['category']} {row['metric']} {row['verdict']} "
                f"({_signed(row['delta_ms'])} ms/step)"
                for row in self.comm.filter(pl.col("verdict").is_in(CHANGED)).iter_rows(named=True)
            ]
        return []

    def _changed_layers(self, *, every: bool) -> list[str]:
        """The layers that stand out of their group (``every``: each changed layer row, largest |delta| first)."""
        if self.layers.is_empty():
            return []
        rows = self.layers.filter(pl.col("verdict").is_in(CHANGED) if every else pl.col("flag") == STANDS_OUT)
        if every:
            rows = rows.sort(pl.col("delta_ms").abs(), descending=True, maintain_order=True)
        return [
            f"{row['group']}: {'layer ' if row['segment'].isdigit() else ''}{row['segment']} {row['verdict']}"
            f"{', stands out' if row['flag'] == STANDS_OUT else ''} "
            f"({_signed(row['delta_ms'])} ms median, {_pct(row['delta_pct'])})"
            for row in rows.iter_rows(named=True)
        ]

    @property
    def verdict(self) -> str:
        """'no change', how many rows changed, or 'nothing compared' (no step group on both sides)."""
        n = len(self.changes())
        if n == 0 and self.groups == 0:
            return "nothing compared"
        return "no change" if n == 0 else f"{n} change{'s' if n != 1 else ''}"

    def summary(self) -> str:
        """One line: the verdict and the test it rests on."""
        return (
            f"{self.verdict} (matched by {self.match}; {self.TEST}; changed = adjusted p < {self.alpha:g}, "
            f"|delta| ≥ {self.min_change_pct:g} % of the smaller side's value and ≥ {self.min_step_pct:g} % of "
            f"the shorter side's step: swapping A and B mirrors every verdict; delta_pct is relative to A)"
        )

    def as_dict(self) -> dict[str, Any]:
        """Every table as a list of rows, with the verdict, the test and the notes (``--format json``)."""
        return {
            "verdict": self.verdict,
            "test": self.TEST,
            "alpha": self.alpha,
            "min_change_pct": self.min_change_pct,
            "min_step_pct": self.min_step_pct,
            "match": self.match,
            "groups": self.groups,
            "changes": self.changes(),
            "notes": self.notes,
            "sides": self.sides.to_dicts(),
            "categories": self.categories.to_dicts(),
            "kernels": self.kernels.to_dicts(),
            "steps": self.steps.to_dicts(),
            "layers": self.layers.to_dicts(),
            "comm": self.comm.to_dicts(),
            "macro": self.macro.to_dicts(),
        }


def _signed(x: float | None) -> str:
    return "—" if x is None else f"{x:+.4f}"


def _pct(x: float | None) -> str:
    return "new" if x is None else f"{x:+.1f} %"


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------------------------- core


def compare(
    a: Side,
    b: Side,
    *,
    phase: str = "decode",
    match: str = "auto",
    alpha: float = 0.05,
    min_change_pct: float = 5.0,
    min_step_pct: float = 0.5,
) -> Comparison:
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
    da, db = extract_side(a, phase), extract_side(b, phase)
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
        notes.append(
            f"no step group is on both sides (phase {phase}, matched by {match}): nothing compared"
            + ("; --match side compares each side's steps as one group" if match != "side" else "")
        )
    notes.extend(device_notes(da, db))
    kw = {"alpha": alpha, "min_change_pct": min_change_pct, "min_step_pct": min_step_pct}
    categories = category_table(da, db, matched, **kw)
    kernels = kernel_table(da, db, matched, **kw)
    steps = step_table(da, db, matched, groups_a, groups_b, **kw)
    comm, comm_note = comm_table(da, db, matched, **kw)
    if comm_note:
        notes.append(comm_note)
    layers, layer_notes = layer_table(da, db, matched, **kw)
    notes.extend(layer_notes)
    macro, macro_notes = macro_table(da, db)
    notes.extend(macro_notes)
    return Comparison(
        match=match,
        alpha=alpha,
        min_change_pct=min_change_pct,
        min_step_pct=min_step_pct,
        sides=sides_table(da, db),
        categories=categories,
        kernels=kernels,
        steps=steps,
        layers=layers,
        comm=comm,
        macro=macro,
        notes=notes,
        groups=len(matched),
    )


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
            pl.when(pl.col("batch_size").is_null())
            .then(pl.lit("bs=?"))
            .otherwise(pl.lit("bs=") + pl.col("batch_size").cast(pl.String))
            .alias("group"),
            pl.col("batch_size").fill_null(-1).cast(pl.Int64).alias("group_order"),
        )
    if match == "level":
        conc = {r["level"]: r["concurrency"] for r in side_runs.iter_rows(named=True) if r["level"] is not None}
        return obs.with_columns(
            pl.col("level").fill_null("(no level)").alias("group"),
            pl.col("level")
            .map_elements(lambda lv: conc.get(lv) or 0, return_dtype=pl.Int64)
            .fill_null(-1)
            .alias("group_order"),
        )
    return obs.with_columns(pl.lit("all").alias("group"), pl.lit(0, dtype=pl.Int64).alias("group_order"))


def _group_keys(obs: pl.DataFrame) -> dict[tuple[str, str], int]:
    """(phase, group) → steps, in (phase, group order) order."""
    counts = (
        obs.group_by(["phase", "group"])
        .agg(pl.len().alias("n"), pl.col("group_order").first())
        .sort(["phase", "group_order", "group"])
    )
    return {(r["phase"], r["group"]): int(r["n"]) for r in counts.iter_rows(named=True)}


# ------------------------------------------------------------------------------ shared by every view

TITLES = {
    "sides": "Sides",
    "category": "Per category: exclusive ms/step (only that category running; with overlap and idle they add up "
    "to the step), B against A",
    "kernel": "Per kernel: matched by exact name, else by family (template arguments, tile shapes, NCCL algorithm "
    "aside), else only in A / only in B",
    "step": "Steps: wall time per step (p50/p90/p99 over every rank's steps; mean and busy tested)",
    "layer": "Per layer: median wall ms per step of each segment (report --by layer), paired by index; the test "
    "on the means",
    "comm": "Collectives across ranks: transfer and wait per step (report --by comm); the wait at the step's 1st "
    "collective and at later ones (their causes: report --by comm on each side)",
    "macro": "Capture levels: client-side figures (aggregates: no test)",
}
"""Each table's title (the terminal, Markdown, the TUI and the page use them)."""


def top_kernels(frame: pl.DataFrame, top: int | None) -> tuple[pl.DataFrame, int]:
    """Every changed kernel row, plus the ``top`` largest others (by |delta|, then time) per group; and how many
    rows were left out. ``top`` None or 0: every row."""
    if not top or frame.is_empty():
        return frame, 0
    ranked = frame.with_row_index("_row").with_columns(
        pl.col("verdict").is_in(CHANGED).alias("_changed"),
        pl.col("_row").rank("ordinal").over(["phase", "group", pl.col("verdict").is_in(CHANGED)]).alias("_rank"),
    )
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
