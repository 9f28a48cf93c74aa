"""The page's sections on whole steps: step time and throughput against batch size, the step-time distribution
per batch size, and one representative step on every rank as a Gantt chart."""

from __future__ import annotations

import math
import shlex

import polars as pl

from k25trace.analysis import page_data
from k25trace.analysis.page_data import Bar, Lane, ReportData, Timeline, groups
from k25trace.render.html import markup
from k25trace.render.html.markup import (
    CATEGORY_ORDER,
    OUTLIER_COLOR,
    RUN_COLORS,
    Svg,
    attr,
    batch_label,
    coord,
    esc,
    figure,
    legend,
    legend_order,
    nice_ticks,
    num,
    plural,
    range_ticks,
    slice_label,
    table,
    tick_label,
)

TIMELINE_WIDTH = 860
"""Pixels of a Gantt lane; the step is cut into this many slices (one per pixel)."""

_Points = list[tuple[str, str, list[tuple[int, float, str]], str]]  # (series key, colour, (batch, value, tip)s, dash)


def section_scaling(data: ReportData) -> str:
    """Decode step time and throughput against batch size, per run; TPOT and output tok/s of capture levels."""
    bars = [b for b in page_data.bars(data.batch, CATEGORY_ORDER) if b.batch is not None and b.batch > 0]
    if not bars:
        return ""
    # a capture level is a run of its own: group levels of one capture into one series (by capture dir)
    series: dict[str, list[Bar]] = {}
    for b in bars:
        series.setdefault(page_data.series_key(data.runs, b.run_id), []).append(b)
    batches = sorted({b.batch for b in bars if b.batch is not None})
    time_series, tput_series, legend_items = _scaling_series(data, series)
    kind = "Decode step" if data.phase == "decode" else f"Step ({data.phase} steps)"
    charts = (
        '<div class="row">'
        + _scaling_chart(f"{kind} time vs batch size", "ms per step", time_series, batches)
        + _scaling_chart(f"{kind} throughput vs batch size", "tokens per second", tput_series, batches)
        + "</div>"
    )
    leg = (
        '<ul class="legend">'
        + "".join(f'<li><span class="sw" style="background:{c}"></span>{esc(t)}</li>' for c, t in legend_items)
        + "</ul>"
    )
    body = figure(
        f"{kind} time and throughput vs batch size",
        "Left: GPU wall time of a decode step (mean and median over steps and ranks). Right: tokens per "
        "second if the GPU did nothing but these steps (batch size ÷ mean step time: one token per request "
        "per step) and, for capture levels, the output tok/s the clients measured. TPOT and measured tok/s "
        "come from <code>capture_levels</code> and are drawn at the level's most frequent decode batch "
        "size.",
        charts + leg,
    )
    return (
        f'<section id="scaling"><h2>{esc(kind)} time vs batch size</h2>{body}'
        f"{_scaling_levels_table(data, bars)}</section>"
    )


def _scaling_series(data: ReportData, series: dict[str, list[Bar]]) -> tuple[_Points, _Points, list[tuple[str, str]]]:
    """The points of the two scaling charts, per series (mean and median step time; GPU tok/s; and a capture
    level's TPOT p50 and measured output tok/s at its main batch size), and the legend lines."""
    levels = {r["run_id"]: r for r in data.levels.iter_rows(named=True)}
    time_series: _Points = []
    tput_series: _Points = []
    legend_items: list[tuple[str, str]] = []
    for i, (key, bars) in enumerate(series.items()):
        pts = [(b, b.batch) for b in bars if b.batch is not None]
        color = RUN_COLORS[i % len(RUN_COLORS)]
        name = _series_name(data, key)
        mean = [
            (batch, b.step_ms, f"{name}, batch {batch}: mean step {num(b.step_ms)} ms ({b.steps} steps)")
            for b, batch in pts
        ]
        median = [(batch, b.median_ms, f"{name}, batch {batch}: median step {num(b.median_ms)} ms") for b, batch in pts]
        tput = [
            (
                batch,
                round(batch * 1000.0 / b.step_ms, 1),
                f"{name}, batch {batch}: {num(batch * 1000.0 / b.step_ms, 0)} tok/s (batch ÷ mean step time)",
            )
            for b, batch in pts
            if b.step_ms
        ]
        time_series += [(f"{key}|mean", color, mean, ""), (f"{key}|median", color, median, "4 3")]
        tput_series.append((f"{key}|gpu_tok_s", color, tput, ""))
        legend_items.append((color, f"{name}: mean step (solid), median (dashed)"))
        tpot, measured = [], []
        for b, batch in pts:
            lv = levels.get(b.run_id)
            if lv is None or batch != page_data.main_batch(data, b.run_id):
                continue
            if lv["tpot_p50_ms"] is not None:
                tpot.append(
                    (
                        batch,
                        lv["tpot_p50_ms"],
                        f"{name}, level {lv['level']} (concurrency "
                        f"{lv['concurrency']}): TPOT p50 {num(lv['tpot_p50_ms'])} ms, p90 "
                        f"{num(lv['tpot_p90_ms'])} ms",
                    )
                )
            if lv["output_tok_s"] is not None:
                measured.append(
                    (
                        batch,
                        lv["output_tok_s"],
                        f"{name}, level {lv['level']}: measured {num(lv['output_tok_s'], 0)} output tok/s",
                    )
                )
        if tpot:
            time_series.append((f"{key}|tpot_p50", color, tpot, "1 3"))
            legend_items.append((color, f"{name}: TPOT p50 of the capture level (dotted)"))
        if measured:
            tput_series.append((f"{key}|measured_tok_s", color, measured, "1 3"))
            legend_items.append((color, f"{name}: measured output tok/s of the capture level (dotted)"))
    return time_series, tput_series, legend_items


def _scaling_chart(title: str, unit: str, points: _Points, batches: list[int]) -> str:
    """One scaling chart: the series' values against batch size (log scale), a line per series and a dot per
    point (its value and a tooltip in the SVG)."""
    width, height = 540, 300
    x0, x1, y0, y1 = 60, width - 20, 20, height - 60
    lo, hi = math.log2(min(batches)), math.log2(max(batches))

    def xpos(batch: float) -> float:
        return (x0 + x1) / 2 if hi == lo else x0 + (math.log2(batch) - lo) / (hi - lo) * (x1 - x0)

    vmax = max([v for _, _, pts, _ in points for _, v, _ in pts] + [0.0])
    ticks = nice_ticks(vmax * 1.05)
    scale = (y1 - y0) / ticks[-1]
    svg = Svg(width, height, title, "scaling")
    for t in ticks:
        y = y1 - t * scale
        svg.add(f'<line class="gridline" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}"/>')
        svg.text(x0 - 6, y + 4, tick_label(t, ticks), "end", "tick")
    svg.add(
        f'<g class="axis"><line x1="{x0}" x2="{x1}" y1="{y1}" y2="{y1}"/>'
        f'<line x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}"/></g>'
    )
    for b in batches:
        svg.text(xpos(b), y1 + 14, str(b), "middle", "tick")
    svg.text((x0 + x1) / 2, y1 + 32, "decode batch size (requests per step, log scale)", "middle", "unit")
    svg.text(14, (y0 + y1) / 2, unit, "middle", "unit", f' transform="rotate(-90 14 {(y0 + y1) / 2:.1f})"')
    for kind, color, pts, dash in points:
        pts = sorted(pts)
        if len(pts) > 1:
            path = " ".join(
                f"{'M' if i == 0 else 'L'}{xpos(b):.1f},{y1 - v * scale:.1f}" for i, (b, v, _) in enumerate(pts)
            )
            svg.add(
                f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.8"'
                + (f' stroke-dasharray="{dash}"' if dash else "")
                + "/>"
            )
        for b, v, tip in pts:
            svg.add(
                f'<circle class="pt" cx="{xpos(b):.1f}" cy="{y1 - v * scale:.1f}" r="4" fill="{color}" '
                f'data-series="{esc(kind)}" data-batch="{attr(b)}" data-value="{attr(v)}"><title>{esc(tip)}</title>'
                f"</circle>"
            )
    return svg.render()


def _scaling_levels_table(data: ReportData, bars: list[Bar]) -> str:
    """The capture levels: concurrency, main decode batch size and its step time, TPOT, TTFT, tok/s ("" if none)."""
    rows = []
    for r in data.levels.iter_rows(named=True):
        main = page_data.main_batch(data, r["run_id"])
        rows.append(
            [
                esc(data.run_name(r["run_id"])),
                esc(r["level"]),
                esc(r["concurrency"]),
                esc(main),
                num(page_data.step_ms_at(bars, r["run_id"], main)),
                num(r["tpot_p50_ms"]),
                num(r["tpot_p90_ms"]),
                num(r["ttft_p50_ms"]),
                num(r["output_tok_s"], 0),
                esc(r["requests"]),
                esc(r["errors"]),
            ]
        )
    return (
        ""
        if not rows
        else table(
            [
                ("run", "l"),
                ("level", "l"),
                ("concurrency", "r"),
                ("main batch", "r"),
                ("step ms", "r"),
                ("TPOT p50 ms", "r"),
                ("TPOT p90 ms", "r"),
                ("TTFT p50 ms", "r"),
                ("output tok/s", "r"),
                ("requests", "r"),
                ("errors", "r"),
            ],
            rows,
            "levels",
        )
    )


def _series_name(data: ReportData, key: str) -> str:
    if key in set(data.runs["run_id"].to_list()):
        return data.run_name(key)
    capture, _, world = key.rpartition("#ws")
    name = capture.rstrip("/").rsplit("/", 1)[-1]
    return f"{name} (TP{world})" if world not in ("None", "1", "") else name


def section_distribution(data: ReportData) -> str:
    """Per run, a box plot of the step wall time per batch size with a dot per step and rank, outliers named."""
    frame = data.step_times
    if frame.is_empty():
        return ""
    parts = ['<section id="distribution"><h2>Step-time distribution</h2>']
    for (run_id,), run_frame in groups(frame, ["run_id"]):
        panels = groups(run_frame, ["level", "batch_size"])
        pw, ph = 170, 230
        width = max(1, len(panels)) * pw + 50
        svg = Svg(width, ph + 20, f"Step wall time per batch size, {data.run_name(run_id)}", "dist")
        ranks = sorted(set(run_frame["rank"].to_list()))
        for k, ((level, batch), group) in enumerate(panels):
            _box_panel(svg, 50 + k * pw, pw, ph, run_id, level, batch, group, ranks)
        svg.text(12, ph / 2, "ms per step", "middle", "unit", f' transform="rotate(-90 12 {ph / 2:.1f})"')
        leg = (
            '<ul class="legend">'
            + "".join(
                f'<li><span class="sw dot" style="background:{RUN_COLORS[i % len(RUN_COLORS)]}"></span>'
                f"rank {esc(r)}</li>"
                for i, r in enumerate(ranks)
            )
            + f'<li><span class="sw dot" style="background:{OUTLIER_COLOR}"></span>'
            "outlier (beyond 1.5 × the interquartile range)</li></ul>"
        )
        parts.append(
            figure(
                f"Step wall time per batch size — {data.run_name(run_id)}",
                "One dot per step and rank (GPU wall time); the box spans the quartiles, the line is the "
                "median, whiskers reach the last step within 1.5 × IQR. Each panel has its own scale.",
                svg.render() + leg,
            )
        )
    parts.append("</section>")
    return "".join(parts)


def _box_panel(
    svg: Svg,
    px: int,
    pw: int,
    ph: int,
    run_id: str,
    level: str | None,
    batch: int | None,
    group: pl.DataFrame,
    ranks: list[int],
) -> None:
    """One batch size's panel of the distribution chart (its steps' rows of ``step_times``), ``pw`` px wide from
    ``px``, with its own y scale."""
    values = group["wall_ms"].to_list()
    stats = page_data.box(values)
    vmin, vmax = min(values), max(values)
    pad = (vmax - vmin) * 0.08 or max(vmax * 0.05, 0.01)
    lo, hi = max(0.0, vmin - pad), vmax + pad
    top, bottom = 24, ph - 24

    def ypos(v: float) -> float:
        return bottom - (v - lo) / (hi - lo) * (bottom - top)

    n_steps, n_ranks = group["step_index"].n_unique(), group["rank"].n_unique()
    svg.text(
        px + pw / 2 - 10,
        14,
        (
            (f"{level} " if level else "")
            + batch_label(batch)
            + f" · {plural(n_steps, 'engine step')} × {plural(n_ranks, 'rank')}"
        ),
        "middle",
        "label",
    )
    svg.add(f'<line class="axisline" x1="{px}" x2="{px}" y1="{top}" y2="{bottom}"/>')
    yticks = range_ticks(lo, hi)
    for t in yticks:
        svg.add(f'<line class="gridline" x1="{px}" x2="{px + pw - 30}" y1="{ypos(t):.1f}" y2="{ypos(t):.1f}"/>')
        svg.text(px - 4, ypos(t) + 3, tick_label(t, yticks), "end", "tick")
    q1, med, q3 = stats.q1, stats.median, stats.q3
    bx, bw = px + 20, pw - 70
    svg.add(
        f'<rect class="box" x="{bx}" y="{ypos(q3):.1f}" width="{bw}" height="{max(ypos(q1) - ypos(q3), 1):.1f}" '
        f'data-run="{attr(run_id)}" data-batch="{attr(batch)}" data-q1="{q1!r}" data-median="{med!r}" '
        f'data-q3="{q3!r}"><title>median {num(med)} ms, quartiles {num(q1)} – {num(q3)} ms</title></rect>'
    )
    svg.add(f'<line class="median" x1="{bx}" x2="{bx + bw}" y1="{ypos(med):.1f}" y2="{ypos(med):.1f}"/>')
    cx = bx + bw / 2
    svg.add(
        f'<line class="whisker" x1="{cx}" x2="{cx}" y1="{ypos(stats.whisker_hi):.1f}" y2="{ypos(q3):.1f}"/>'
        f'<line class="whisker" x1="{cx}" x2="{cx}" y1="{ypos(q1):.1f}" y2="{ypos(stats.whisker_lo):.1f}"/>'
    )
    for r in group.iter_rows(named=True):
        v = r["wall_ms"]
        outlier = stats.is_outlier(v)
        slot = ranks.index(r["rank"]) if r["rank"] in ranks else 0
        x = bx + 6 + (bw - 12) * ((slot + 0.5) / max(1, len(ranks))) + ((r["step_index"] % 5) - 2) * 1.5
        fill = OUTLIER_COLOR if outlier else RUN_COLORS[slot % len(RUN_COLORS)]
        svg.add(
            f'<circle class="step{" outlier" if outlier else ""}" cx="{x:.1f}" cy="{ypos(v):.1f}" '
            f'r="{4 if outlier else 3}" fill="{fill}" data-run="{attr(run_id)}" data-batch="{attr(batch)}" '
            f'data-rank="{attr(r["rank"])}" data-step="{attr(r["step_index"])}" data-ms="{attr(v)}">'
            f"<title>rank {esc(r['rank'])}, step {esc(r['step_index'])}: {num(v)} ms"
            + (" (outlier)" if outlier else "")
            + "</title></circle>"
        )
        if outlier:  # labelled on the side of the dot that stays inside the panel
            right = x - px < pw / 2
            svg.text(
                x + 6 if right else x - 6,
                ypos(v) + 3,
                f"{num(v)} ms (r{r['rank']} s{r['step_index']})",
                "start" if right else "end",
                "outlier",
            )


def section_timeline(data: ReportData) -> str:
    """Per run and batch size, its representative step on every rank, clocks aligned, as a Gantt chart."""
    if not data.timelines:
        return ""
    parts = ['<section id="timeline"><h2>One step on every rank</h2>']
    if data.filters.per_rank:
        parts.append(
            '<p class="note">Only the lane of the rank or trace chosen; the step is the one nearest the median of '
            "the run's steps over all its ranks.</p>"
        )
    seen: list[str] = []
    runs: dict[str, list[Timeline]] = {}
    for t in data.timelines:
        runs.setdefault(t.run_id, []).append(t)
    for run_id, timelines in runs.items():
        for t in timelines:
            parts.append(_gantt(data, run_id, t, seen))
    parts.append(legend([(markup.css_class(c), slice_label(c)) for c in legend_order(seen)]))
    parts.append("</section>")
    return "".join(parts)


def _gantt(data: ReportData, run_id: str, t: Timeline, seen: list[str]) -> str:
    """One representative step's figure (adding the categories it draws to ``seen``)."""
    label_w, note_w, lane_h, gap = 70, 170, 20, 6
    width = label_w + TIMELINE_WIDTH + note_w
    top = 8
    height = top + len(t.lanes) * (lane_h + gap) + 34
    span_ms = (t.end_ns - t.start_ns) / 1e6
    ticks = nice_ticks(span_ms)
    ticks = [x for x in ticks if x <= span_ms + 1e-9]
    scale = TIMELINE_WIDTH / span_ms if span_ms > 0 else 0.0
    title = f"Step {t.step_index} on every rank, {data.run_name(run_id)}, {batch_label(t.batch_size)}"
    svg = Svg(width, height, title, "gantt")
    for i, lane in enumerate(t.lanes):
        _gantt_lane(svg, run_id, t, lane, top + i * (lane_h + gap), (label_w, lane_h, scale), seen)
    svg.x_axis(
        label_w,
        label_w + TIMELINE_WIDTH,
        top + len(t.lanes) * (lane_h + gap),
        top - 4,
        ticks,
        scale,
        "ms from the step's first GPU activity on any rank (reference rank's clock)",
    )
    return figure(
        f"{data.run_name(run_id, t.level)} — {batch_label(t.batch_size)}: step {t.step_index} on "
        f"{len(t.lanes)} rank{'s' if len(t.lanes) != 1 else ''}",
        _gantt_caption(data, run_id, t),
        svg.render(),
    )


def _gantt_lane(
    svg: Svg, run_id: str, t: Timeline, lane: Lane, y: int, geometry: tuple[int, int, float], seen: list[str]
) -> None:
    """One rank's lane at ``y``: a path per category (or idle cause) over its pixel columns, and its note;
    ``geometry`` is (the lane's left edge, its height, px per ms)."""
    x0, lane_h, scale = geometry
    span_ms = (t.end_ns - t.start_ns) / 1e6
    px = TIMELINE_WIDTH / t.buckets
    svg.text(x0 - 8, y + lane_h / 2 + 4, f"rank {lane.rank}", "end", "label")
    by_cat: dict[str, list[tuple[int, int]]] = {}
    for a, b, cat in lane.segments:
        by_cat.setdefault(cat, []).append((a, b))
    marks = []
    for cat in legend_order(list(by_cat)):
        if cat not in seen:
            seen.append(cat)
        spans = by_cat[cat]
        columns = sum(b - a for a, b in spans)
        d = "".join(
            f"M{coord(x0 + a * px)} {y}h{coord((b - a) * px)}v{lane_h}h-{coord((b - a) * px)}z" for a, b in spans
        )
        marks.append(
            f'<path class="{markup.css_class(cat)}" d="{d}" data-category="{esc(cat)}" '
            f'data-columns="{columns}"><title>rank {esc(lane.rank)} · {esc(slice_label(cat))}: '
            f"{columns} of {t.buckets} columns (≈ {num(columns * span_ms / t.buckets)} ms)"
            "</title></path>"
        )
    start_x = x0 + (lane.start_ns - t.start_ns) / 1e6 * scale
    end_x = x0 + (lane.end_ns - t.start_ns) / 1e6 * scale
    svg.add(
        f'<g class="lane" data-run="{attr(run_id)}" data-batch="{attr(t.batch_size)}" '
        f'data-step="{attr(t.step_index)}" data-rank="{attr(lane.rank)}" '
        f'data-wall-ns="{attr(lane.wall_ns)}" '
        f'data-start-ns="{attr(lane.start_ns)}" data-end-ns="{attr(lane.end_ns)}" '
        f'data-offset-ns="{attr(lane.offset_ns)}" '
        f'data-window-start-ns="{attr(t.start_ns)}" data-window-end-ns="{attr(t.end_ns)}" '
        f'data-x-start="{start_x:.2f}" data-x-end="{end_x:.2f}" data-wait-ns="{attr(lane.wait_ns)}">'
        + "".join(marks)
        + "</g>"
    )
    note = f"{num(lane.wall_ns / 1e6)} ms"
    if lane.collectives:
        note += f" · waited {num(lane.wait_ns / 1e6)} ms"
    svg.text(x0 + TIMELINE_WIDTH + 8, y + lane_h / 2 + 4, note, "start", "note")


def _gantt_caption(data: ReportData, run_id: str, t: Timeline) -> str:
    """Why this step, how the clocks were aligned, the wait in it and the command that opens it in Perfetto."""
    aligned = [ln for ln in t.lanes if ln.aligned]
    clock = (
        "clocks aligned to rank "
        + str(min(ln.rank for ln in t.lanes))
        + "'s (offsets "
        + ", ".join(f"rank {ln.rank} {ln.offset_ns / 1e3:+,.3f} µs" for ln in t.lanes)
        + ")"
        if aligned
        else ("one rank" if len(t.lanes) == 1 else "clocks not aligned (no paired collectives)")
    )
    why = (
        f"step {t.step_index}: the one of {t.candidates} whose wall time ({num(t.wall_ms)} ms, mean over "
        f"ranks) is nearest the median ({num(t.median_wall_ms)} ms)"
    )
    if t.inferred:
        why += "; steps inferred from idle gaps, so the ranks' steps are paired by index only"
    caught = sum(ln.wait_ns for ln in t.lanes)
    return (
        f"{esc(why)}; {esc(clock)}. Each pixel column shows the category that ran longest there, or why the "
        f"GPU was idle; blank before a rank's first and after its last GPU activity of the step. "
        + (f"Collective wait in this step: {num(caught / 1e6)} ms over all ranks. " if caught else "")
        + "Open it in Perfetto: <code>k25trace export perfetto --db "
        + esc(shlex.quote(data.source) if data.source else "FILE")
        + f" --run {esc(shlex.quote(data.run_name(run_id)))} --steps {esc(t.step_index)} -o step.json</code>."
    )
