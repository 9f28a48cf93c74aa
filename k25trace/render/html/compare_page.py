"""The comparison page (``k25trace html --vs`` / ``--a --b``): a :class:`.compare.Comparison` drawn in the report
page's shell."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from k25trace.analysis.compare_layers import LAYER_COLUMNS
from k25trace.analysis.compare_tables import KERNEL_COLUMNS
from k25trace.analysis.page_data import groups
from k25trace.render.html import markup
from k25trace.render.html.markup import (
    CATEGORY_ORDER,
    VERDICT_COLORS,
    Svg,
    attr,
    bar_frame,
    esc,
    figure,
    legend,
    nice_ticks,
    num,
    shorten,
    table,
)
from k25trace.render.html.page import shell

if TYPE_CHECKING:
    from k25trace.analysis.compare import Comparison

COMPARE_COMMAND = "k25trace compare … [--by category|kernel|step|layer|comm|macro]"
"""The command line the comparison page's footer names for the same numbers."""


def render_comparison(comparison: Comparison, title: str | None = None) -> str:
    """A :class:`.compare.Comparison` as a page: the verdict, the sides, per step group the time by category
    of A beside B and what changed (delta per category with its 95 % interval, coloured by verdict), the step
    time, the change per layer, the collectives, the kernels that changed and the capture figures."""
    title = title or "k25trace comparison"
    sides = comparison.sides
    changes = comparison.changes()
    verdict = (
        f'<section id="verdict"><h2>Verdict: {esc(comparison.verdict)}</h2><p class="muted">'
        f"{esc(comparison.summary())}</p>"
        + ("<ul>" + "".join(f"<li>{esc(c)}</li>" for c in changes[:15]) + "</ul>" if changes else "")
        + (f'<p class="muted">… and {len(changes) - 15} more (the tables below)</p>' if len(changes) > 15 else "")
        + table(
            [(c, "l") for c in sides.columns], [[esc("—" if v is None else v) for v in r] for r in sides.iter_rows()]
        )
        + "</section>"
    )
    sections = [
        verdict,
        _compare_categories(comparison),
        _compare_table(
            "steps",
            "Step time",
            "Wall time percentiles over the steps of every rank, and the mean wall and busy time "
            "per step (a step of several ranks averaged over them for the test).",
            comparison.steps,
            [
                "group",
                "metric",
                "steps_a",
                "steps_b",
                "ms_a",
                "ms_b",
                "delta_ms",
                "delta_pct",
                "ci95_ms",
                "p_value",
                "verdict",
            ],
        ),
        _compare_layers(comparison),
        _compare_table(
            "comm",
            "Collectives across ranks",
            "Transfer and wait per step, A against B (report --by comm on each side); the wait also by where: at "
            "the step's first collective (wait at 1st) and at later ones (wait at later). Where a wait comes from (a "
            "host that launched late, a sync, longer GPU work) is in report --by comm and the findings of each side.",
            comparison.comm,
            ["group", "category", "metric", "ms_a", "ms_b", "delta_ms", "delta_pct", "ci95_ms", "p_value", "verdict"],
        ),
        _compare_kernels(comparison),
        _compare_table(
            "macro",
            "Capture levels",
            "What the clients measured (aggregates: no test).",
            comparison.macro,
            list(comparison.macro.columns),
        ),
    ]
    nav = [
        ("verdict", "Verdict"),
        ("categories", "By category"),
        ("steps", "Step time"),
        ("layers", "Layers"),
        ("comm", "Collectives"),
        ("kernels", "Kernels"),
        ("macro", "Capture levels"),
    ]
    subtitle = " vs ".join(
        f"{r['side']}: {r['runs'] or r['source']} [{r['selection']}]" for r in sides.iter_rows(named=True)
    )
    return shell(title, subtitle, list(comparison.notes), sections, nav, COMPARE_COMMAND)


def _compare_categories(comparison: Comparison) -> str:
    frame = comparison.categories
    if frame.is_empty():
        return (
            '<section id="categories"><h2>By category</h2><p class="empty">No step group on both sides.</p></section>'
        )
    parts = ['<section id="categories"><h2>By category</h2>']
    for (phase, group), rows in groups(frame, ["phase", "group"]):
        by_cat = {r["category"]: r for r in rows.iter_rows(named=True)}
        order = [c for c in CATEGORY_ORDER if c in by_cat] + sorted(
            c for c in by_cat if c not in CATEGORY_ORDER and c not in ("overlap", "idle")
        )
        order += [c for c in ("overlap", "idle") if c in by_cat]
        totals = {side: sum((by_cat[c][f"ms_{side}"] or 0.0) for c in order) for side in ("a", "b")}
        parts.append(
            figure(
                f"{group} ({phase}): A {num(totals['a'])} ms → B {num(totals['b'])} ms per step",
                f"{esc(by_cat[order[0]]['steps_a'])} engine steps in A, "
                f"{esc(by_cat[order[0]]['steps_b'])} in B. Top: each "
                "side's step by category. Bottom: the change per category, largest first; bright bars "
                "changed (Welch's t-test, Holm-adjusted), faint ones are within noise or negligible.",
                _sides_chart(group, by_cat, order, totals) + _delta_chart(group, by_cat, order),
            )
        )
    seen = [c for c in CATEGORY_ORDER + ["overlap", "idle"] if c in set(frame["category"].to_list())]
    parts.append(legend([(markup.css_class(c), c) for c in seen]))
    parts.append("</section>")
    return "".join(parts)


def _sides_chart(group: str, by_cat: dict[str, dict[str, Any]], order: list[str], totals: dict[str, float]) -> str:
    """A's and B's step of one group, stacked by category."""
    frame = bar_frame(
        f"Milliseconds per step by category, A and B, {group}",
        "bars compare",
        vmax=max(totals.values()) or 1.0,
        rows_height=2 * 32,
        label_w=60,
        note_w=200,
    )
    svg, x0, x1, scale = frame.svg, frame.x0, frame.x1, frame.scale
    frame.axis("ms per step (exclusive by category, overlap and idle: the step's wall time)")
    for i, side in enumerate(("a", "b")):
        y = frame.top + i * 32
        svg.text(x0 - 8, y + 15, side.upper(), "end", "label")
        x: float = x0
        for c in order:
            ms = by_cat[c][f"ms_{side}"] or 0.0
            svg.add(
                f'<rect class="seg {markup.css_class(c)}" x="{x:.2f}" y="{y}" width="{ms * scale:.2f}" '
                f'height="22" data-group="{esc(group)}" data-side="{side.upper()}" data-category="{esc(c)}" '
                f'data-ms="{attr(by_cat[c][f"ms_{side}"])}"><title>{esc(c)}: {num(ms)} ms/step ({side.upper()})'
                "</title></rect>"
            )
            x += ms * scale
        svg.text(x1 + 10, y + 15, f"{num(totals[side])} ms/step", "start", "note")
    return svg.render()


def _delta_chart(group: str, by_cat: dict[str, dict[str, Any]], order: list[str], width: int = 1100) -> str:
    """What changed in one group: the delta per category, largest first, its 95 % interval, coloured by verdict."""
    x0, x1 = 60, width - 200  # the columns of the sides' chart above it
    ranked = sorted(order, key=lambda c: -abs(by_cat[c]["delta_ms"] or 0.0))
    row_h, gap = 16, 5
    dmax = max([abs(by_cat[c]["delta_ms"] or 0) + (by_cat[c]["ci95_ms"] or 0) for c in ranked] + [1e-6])
    dticks = nice_ticks(dmax, 3)
    lim = dticks[-1]
    half = (x1 - x0 - 110) / 2
    zero = x0 + 110 + half
    dsvg = Svg(width, len(ranked) * (row_h + gap) + 46, f"Change per category, B − A, {group}", "bars delta")
    for t in [-v for v in reversed(dticks[1:])] + dticks:
        x = zero + t / lim * half
        dsvg.add(f'<line class="gridline" x1="{x:.1f}" x2="{x:.1f}" y1="4" y2="{len(ranked) * (row_h + gap) + 4}"/>')
        dsvg.text(x, len(ranked) * (row_h + gap) + 18, f"{t:+g}" if t else "0", "middle", "tick")
    dsvg.text(zero, len(ranked) * (row_h + gap) + 34, "B − A, ms per step (whiskers: 95 % interval)", "middle", "unit")
    for i, c in enumerate(ranked):
        r = by_cat[c]
        y = 6 + i * (row_h + gap)
        d = r["delta_ms"] or 0.0
        w = d / lim * half
        changed = r["verdict"] in ("slower", "faster", "only in A", "only in B")
        pct = "new" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f} %"
        dsvg.text(x0 + 100, y + 12, c, "end", "label")
        dsvg.add(
            f'<rect class="{markup.css_class(c)}" x="{min(zero, zero + w):.2f}" y="{y}" width="{abs(w):.2f}" '
            f'height="{row_h}" opacity="{1 if changed else 0.35}" data-group="{esc(group)}" '
            f'data-category="{esc(c)}" data-delta="{attr(r["delta_ms"])}" data-verdict="{esc(r["verdict"])}">'
            f"<title>{esc(c)}: {num(r['ms_a'])} → {num(r['ms_b'])} ms/step ({d:+.4f} ms, {esc(pct)}), "
            f"{esc(r['verdict'])}</title></rect>"
        )
        if r["ci95_ms"]:
            lo = zero + (d - r["ci95_ms"]) / lim * half
            hi = zero + (d + r["ci95_ms"]) / lim * half
            dsvg.add(
                f'<line class="whisker" x1="{max(lo, x0 + 104):.1f}" x2="{min(hi, x1):.1f}" '
                f'y1="{y + row_h / 2}" y2="{y + row_h / 2}"/>'
            )
        weight = ' font-weight="600"' if changed else ""
        dsvg.add(
            f'<text x="{x1 + 10}" y="{y + 12}" style="fill:{VERDICT_COLORS.get(r["verdict"], "#57606a")}"{weight}>'
            f"{esc(r['verdict'])} ({esc(pct)})</text>"
        )
    dsvg.add(f'<line class="axisline" x1="{zero:.1f}" x2="{zero:.1f}" y1="2" y2="{len(ranked) * (row_h + gap) + 6}"/>')
    return dsvg.render()


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "—"
    if column == "p_value":
        return esc(f"{value:.3f}" if value >= 0.001 else f"{value:.1e}")
    if column == "verdict":
        color = VERDICT_COLORS.get(value)
        return (
            f'<b style="color:{color}">{esc(value)}</b>'
            if value in VERDICT_COLORS and value not in ("within noise", "negligible")
            else esc(value)
        )
    if column == "delta_pct":
        return esc(f"{value:+.1f} %")
    if column == "delta_ms":
        return esc(f"{value:+.4f}")
    if column == "category":
        return f'<span class="sw {markup.css_class(value)}"></span> {esc(value)}'
    if isinstance(value, float):
        return esc(f"{value:,.4f}".rstrip("0").rstrip("."))
    return esc(shorten(str(value), 90))


def _compare_table(anchor: str, title: str, caption: str, frame: pl.DataFrame, columns: list[str]) -> str:
    if frame.is_empty():
        return ""
    columns = [c for c in columns if c in frame.columns]
    rows = [[_cell(r[c], c) for c in columns] for r in frame.iter_rows(named=True)]
    aligns = [
        (
            c,
            "l"
            if c in ("group", "metric", "category", "verdict", "name_a", "name_b", "match", "level", "segment", "kind")
            else "r",
        )
        for c in columns
    ]
    return (
        f'<section id="{anchor}"><h2>{esc(title)}</h2><p class="muted">{esc(caption)}</p>'
        + table(aligns, rows, "numbers")
        + "</section>"
    )


def _compare_kernels(comparison: Comparison, top: int = 12) -> str:
    frame = comparison.kernels
    if frame.is_empty():
        return ""
    from k25trace.analysis.compare import top_kernels

    kept, hidden = top_kernels(frame, top)
    return _compare_table(
        "kernels",
        "Kernels",
        "Matched by exact name, else by name family, else only in A / only "
        f"in B; every changed kernel and the {top} largest others per group"
        + (f" ({hidden} more rows within noise or negligible: k25trace compare --by kernel)." if hidden else "."),
        kept,
        [c for c in KERNEL_COLUMNS if c not in ("phase", "family")],
    )


LAYER_ROWS = 12
"""Changed segment rows per group in the page's layer table (the chart shows every segment)."""
PAGE_LAYER_COLUMNS = [c for c in LAYER_COLUMNS if c != "phase"]
"""The layer table's columns on the page (one phase per page)."""


def _compare_layers(comparison: Comparison) -> str:
    """Per step group, the change of each segment's median wall (pre, layers, post), and the rows that changed;
    or why the layers were not compared."""
    from k25trace.analysis.compare import CHANGED, STANDS_OUT

    frame = comparison.layers
    why = comparison.notes_on("layer")
    if frame.is_empty():
        if not why:
            return ""
        return (
            '<section id="layers"><h2>Layers</h2><p class="empty">Not compared in '
            + esc("; ".join(n.removeprefix("layers of ").replace(": not compared: ", ": ", 1) for n in why))
            + "</p></section>"
        )
    parts = [
        '<section id="layers"><h2>Layers</h2><p class="muted">The median wall time per step of each segment of the '
        "layer split (report --by layer on each side), B − A; the test is Welch's on the means, Holm-adjusted over "
        "every segment. A layer <b>stands out</b> when it changed, has its group's largest change and at least twice "
        "the median layer's.</p>"
    ]
    if why:
        parts.append(f'<p class="muted">{esc("; ".join(why))}</p>')
    for (phase, group), rows in groups(frame, ["phase", "group"]):
        out = rows.filter(pl.col("flag") == STANDS_OUT)["segment"].to_list()
        changed = rows.filter(pl.col("verdict").is_in(CHANGED)).height
        parts.append(
            figure(
                f"{group} ({phase}): {rows['segment'].str.contains(r'^[0-9]+$').sum()} layers, {changed} "
                f"segment{'' if changed == 1 else 's'} changed"
                + (f", layer {', '.join(out)} stands out" if out else ""),
                "One bar per segment in order (pre, layers, post): B − A in ms per step; bright bars changed, faint "
                "ones are within noise or negligible; a bar that stands out is outlined.",
                _layer_chart(group, list(rows.iter_rows(named=True)), CHANGED, STANDS_OUT),
            )
        )
    changed_rows = frame.with_row_index("_row").filter(pl.col("verdict").is_in(CHANGED))
    shown = (
        changed_rows.sort([(pl.col("flag") == STANDS_OUT).fill_null(False), pl.col("delta_ms").abs()], descending=True)
        .group_by(["phase", "group"], maintain_order=True)
        .head(LAYER_ROWS)
        .sort("_row")
        .drop("_row")
    )
    if not shown.is_empty():
        parts.append(
            _compare_table(
                "layer-rows",
                "Layers that changed",
                f"The {LAYER_ROWS} largest changes per group, those that stand out first: {shown.height} of "
                f"{changed_rows.height} changed segment rows ({frame.height} in all: k25trace compare --by layer "
                "--all).",
                shown,
                PAGE_LAYER_COLUMNS,
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _layer_chart(
    group: str, rows: list[dict[str, Any]], changed: tuple[str, ...], stands_out: str, width: int = 1100
) -> str:
    """The delta of each segment's median wall as a bar up (slower) or down (faster) from zero."""
    x0, x1, top, half = 70, width - 20, 14, 70
    step = (x1 - x0) / max(len(rows), 1)
    dmax = max([abs(r["delta_ms"] or 0.0) for r in rows] + [1e-6])
    ticks = nice_ticks(dmax, 2)
    lim = ticks[-1]
    zero = top + half
    svg = Svg(width, 2 * half + top + 40, f"Change per segment, B − A, {group}", "bars delta")
    for t in [-v for v in reversed(ticks[1:])] + ticks:
        y = zero - t / lim * half
        svg.add(f'<line class="gridline" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}"/>')
        svg.text(x0 - 6, y + 4, f"{t:+g}" if t else "0", "end", "tick")
    every = max(1, round(len(rows) / 32))  # a label per segment up to ~32 of them, else every k-th layer
    layers = sum(1 for r in rows if r["segment"].isdigit())
    for i, r in enumerate(rows):
        d = r["delta_ms"] or 0.0
        h = abs(d) / lim * half
        x = x0 + i * step
        bright = r["verdict"] in changed
        color = VERDICT_COLORS.get(r["verdict"], "#57606a") if bright else "#8c959f"
        outline = ' stroke="#111" stroke-width="2"' if r["flag"] == stands_out else ""
        pct = "new" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f} %"
        svg.add(
            f'<rect x="{x + step * 0.15:.2f}" y="{zero - h if d > 0 else zero:.2f}" width="{step * 0.7:.2f}" '
            f'height="{h:.2f}" style="fill:{color}" opacity="{1 if bright else 0.45}"{outline} '
            f'data-group="{esc(group)}" data-segment="{esc(r["segment"])}" data-delta="{attr(r["delta_ms"])}" '
            f'data-verdict="{esc(r["verdict"])}"><title>{esc(r["segment"])} ({esc(r["kind"])}): {num(r["ms_a"])} → '
            f"{num(r['ms_b'])} ms ({d:+.4f} ms, {esc(pct)}), {esc(r['verdict'])}</title></rect>"
        )
        label = r["segment"]
        k = int(label) if label.isdigit() else -1  # layers 0 and L-1 sit beside pre and post: labelled when wide
        if k < 0 or r["flag"] == stands_out or (k % every == 0 and (step >= 28 or 0 < k < layers - 1)):
            svg.text(x + step / 2, zero + half + 16, label, "middle", "tick")
    svg.add(f'<line class="axisline" x1="{x0}" x2="{x1}" y1="{zero}" y2="{zero}"/>')
    svg.text(x0 - 6, zero + half + 32, "B − A, ms per step (median wall of the segment)", "start", "unit")
    return svg.render()
