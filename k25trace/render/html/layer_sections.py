"""The page's per-layer section: for each run and batch size, the step's segments (pre, each transformer layer,
post) as columns of median ms stacked by category (``report --by layer`` with ``html_layer_categories``), dense and
MoE layers marked, slow layers and outlier steps flagged, and for multi-rank runs the rank that arrives late at
each layer's collectives (``report --by layer-late``)."""

from __future__ import annotations

from dataclasses import dataclass

from k25trace.analysis import page_data
from k25trace.analysis.page_data import LayerChart, LayerSegment, ReportData
from k25trace.render.html import markup
from k25trace.render.html.markup import (
    CATEGORY_ORDER,
    RUN_COLORS,
    Svg,
    attr,
    batch_label,
    esc,
    figure,
    legend,
    legend_order,
    nice_ticks,
    num,
    plural,
    table,
    tick_label,
)

WIDTH, LEFT, RIGHT, TOP, PLOT_H = 1100, 56, 16, 26, 190
"""The chart's geometry: its width, the y axis's room, the right margin, the room above the columns (markers), the
columns' height."""
KIND_LABELS = {"dense": "dense", "moe": "MoE", "other": "neither dense nor MoE"}
METHODS = "docs/methods.md, Layers"


def section_layers(data: ReportData) -> str:
    """The per-layer section (``id="layers"``): what the charts show and their legend, then one figure per run
    and batch size, or one line saying why there is none."""
    head = '<section id="layers"><h2>Time per layer</h2>'
    charts = page_data.layer_charts(data, CATEGORY_ORDER)
    whole = "".join(
        f'<p class="muted" data-unsegmented="{attr(run_id)}" data-batch="{attr(batch)}">'
        f"{esc(data.run_name(run_id))}, {esc(batch_label(batch))}: no step segmented into layers — "
        f"{esc(_reasons(reasons))} ({METHODS}).</p>"
        for run_id, batch, _, reasons in page_data.unsegmented(data)
    )
    if not charts:
        why = whole or f'<p class="empty">No {esc(data.phase)} steps with GPU activity.</p>'
        return f"{head}{why}</section>"
    parts = [head, INTRO]
    if data.filters.per_rank and not data.layer_late.is_empty():
        parts.append(
            '<p class="note">The late ranks are across all ranks of each run (a rank is late only against the '
            "others); the columns are of the rank or trace chosen.</p>"
        )
    seen = sorted({cat for chart in charts for seg in chart.segments for cat, _ in seg.parts})
    parts.append(legend([(markup.css_class(c), c) for c in legend_order(seen)]) + MARKS)
    parts += [_figure(data, chart) for chart in charts]
    parts.append(whole + "</section>")
    return "".join(parts)


MARKS = (
    '<ul class="legend">'
    + "".join(
        f'<li><span class="sw {cls}"></span>{label}</li>'
        for cls, label in (
            ("kind-dense", "dense layer"),
            ("kind-moe", "MoE layer"),
            ("flag", "slow layer"),
            ("ostep", "outlier steps"),
        )
    )
    + "</ul>"
)
"""The legend of the marks that are no category (pointing at them highlights nothing)."""

INTRO = (
    '<p class="muted">Each column is a segment of the step: <b>pre</b>, the transformer layers, <b>post</b>. It '
    "stacks the median over the rank-steps of each category's exclusive time in the segment, then of its overlap "
    "and idle: about the segment's median wall time (a pre or post far taller than the layers is cut at the top, "
    "its total beside it). The <b>kind</b> strip marks dense and MoE layers. A red "
    "triangle flags a layer whose median GPU work is ≥ 10 % over the median layer of its kind; an orange diamond "
    "one with outlier steps (its wall ≥ 25 % over its median). For runs of several ranks, the <b>late</b> strip "
    "and the table under it name the rank latest at each segment's collectives. Hover a column for its numbers "
    "(<code>report --by layer</code>, <code>--by layer-late</code>; how layers are found: "
    f"{METHODS}).</p>"
)


def _reasons(reasons: list[tuple[str, int]]) -> str:
    return "; ".join(f"{reason} ({plural(n, 'rank-step')})" for reason, n in reasons)


def _figure(data: ReportData, chart: LayerChart) -> str:
    """One run and batch size: the answer first (the slowest layers against the median layer), then the chart,
    then for multi-rank runs the table of who arrives late."""
    late = page_data.late_ranks(chart)
    caption = f"<b>{esc(_verdict(chart))}</b> Medians over {esc(_steps_text(chart))}."
    body = _chart(data, chart, bool(late)) + (_late_table(chart, late) if late else "")
    return figure(f"Time per layer — {data.run_name(chart.run_id)}, {batch_label(chart.batch_size)}", caption, body)


def _steps_text(chart: LayerChart) -> str:
    """How many rank-steps the medians are over and what found the layers: '6 rank-steps (sequence)'."""
    counts = sorted({s.steps for s in chart.segments})
    evidence = sorted({e for s in chart.segments for e in s.evidence.split(",")})
    steps = plural(counts[-1], "rank-step") if len(counts) == 1 else f"{counts[0]}–{counts[-1]} rank-steps"
    return f"{steps}, layers found by {' and '.join(evidence)}"


def _verdict(chart: LayerChart) -> str:
    """The one sentence above the chart: the slowest layers against the median layer, the flagged ones, the
    outlier steps."""
    slowest, median = chart.slowest(3), chart.median_layer_ms
    if not slowest or not median:
        return f"{plural(len(chart.layers), 'layer')}, none with GPU work."
    first, rest = slowest[0], slowest[1:]
    text = (
        f"Layer {first.label} is the slowest: {num(first.busy_ms)} ms of GPU work per step, "
        f"{first.busy_ms / median:.2f}× the median layer ({num(median)} ms)"
    )
    if rest:
        text += f"; then layer{'s' if len(rest) > 1 else ''} " + " and ".join(
            f"{s.label} ({s.busy_ms / median:.2f}×)" for s in rest
        )
    slow = [s.label for s in chart.layers if s.flag]
    text += ". " + (
        f"Flagged slow against their kind: {_labels(slow)}." if slow else "No layer is ≥ 10 % over its kind's median."
    )
    steps: dict[int, int] = {}
    for s in chart.layers:
        for step in s.outlier_list:
            steps[step] = steps.get(step, 0) + 1
    if steps:
        listed = sorted(steps.items(), key=lambda kv: (-kv[1], kv[0]))[:4]
        text += " Outlier steps: " + ", ".join(f"step {k} in {plural(n, 'layer')}" for k, n in listed) + "."
    return text


def _labels(labels: list[str], most: int = 12) -> str:
    return ", ".join(labels[:most]) + (f" and {len(labels) - most} more" if len(labels) > most else "")


@dataclass
class _Frame:
    """Where a chart's columns go: column ``i`` spans ``x0 + i·pitch`` … ``+ pitch``, its bar ``bar_w`` wide, up
    from ``bottom`` at ``scale`` px per ms."""

    x0: float
    pitch: float
    bar_w: float
    bottom: int
    scale: float

    def bar_left(self, i: int) -> int:
        return round(self.x0 + i * self.pitch + (self.pitch - self.bar_w) / 2)


def _chart(data: ReportData, chart: LayerChart, with_late: bool) -> str:
    """The columns: one path per category over all columns (small), one hover target per column carrying its
    numbers, the markers, the layer numbers, the kind strip and (multi-rank) the late-rank strip."""
    n, x1 = len(chart.segments), WIDTH - RIGHT
    pitch = (x1 - LEFT) / n
    ticks = nice_ticks(_scale_top(chart))
    frame = _Frame(LEFT, pitch, min(pitch * 0.8, 40.0), TOP + PLOT_H, PLOT_H / ticks[-1])
    strips = frame.bottom + 18
    svg = Svg(
        WIDTH, strips + (30 if with_late else 18) + 22, f"Time per layer, {data.run_name(chart.run_id)}", "layers"
    )
    for t in ticks:
        y = frame.bottom - t * frame.scale
        svg.add(f'<line class="gridline" x1="{LEFT}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}"/>')
        svg.text(LEFT - 6, y + 4, tick_label(t, ticks), "end", "tick")
    middle = TOP + PLOT_H / 2
    svg.text(14, middle, "ms per step", "middle", "unit", f' transform="rotate(-90 14 {middle:.1f})"')
    _stacks(svg, chart, frame)
    svg.add(f'<g class="axis"><line x1="{LEFT}" x2="{x1}" y1="{frame.bottom}" y2="{frame.bottom}"/></g>')
    _x_labels(svg, chart, frame, frame.bottom + 12)
    _strips(svg, chart, frame, strips, with_late)
    return svg.render()


def _scale_top(chart: LayerChart) -> float:
    """The ms the y axis reaches: the tallest stack, or the tallest layer's + 10 % when pre or post is more than
    2.5 times that (their columns are then cut at the top and labelled: the layers stay readable)."""
    totals = [sum(ms for _, ms in s.parts) for s in chart.segments]
    layers = [t for t, s in zip(totals, chart.segments, strict=True) if s.layer is not None]
    tallest = max(layers, default=0.0)
    return tallest * 1.1 if tallest and max(totals) > 2.5 * tallest else max(totals)


def _stacks(svg: Svg, chart: LayerChart, frame: _Frame) -> None:
    """The stacked columns in whole pixels from the running sum (so the stack stays exact), one path per
    category; the flags and outlier diamonds, one path each; then the columns' hover targets."""
    paths: dict[str, list[str]] = {}
    last: dict[str, tuple[int, int]] = {}  # each category path's last piece: the next one moves from it
    flags: list[str] = []
    odd: list[str] = []
    cut: list[str] = []  # a white gap across each column cut at the top
    width = max(1, round(frame.bar_w))
    for i, seg in enumerate(chart.segments):
        left, acc = frame.bar_left(i), 0.0
        for cat, ms in seg.parts:  # cut at the plot's top (a pre or post far taller than the layers)
            lo = max(frame.bottom - round(acc * frame.scale), TOP)
            hi = max(frame.bottom - round((acc + ms) * frame.scale), TOP)
            acc += ms
            pieces = paths.setdefault(cat, [])
            if lo > hi:
                px, py = last.get(cat, (0, 0))
                pieces.append(f"{'m' if cat in last else 'M'}{left - px} {hi - py}h{width}v{lo - hi}h-{width}z")
                last[cat] = (left, hi)
        cx = left + width / 2
        if frame.bottom - acc * frame.scale < TOP:
            cut.append(f"M{left} {TOP + 4}h{width}")
            first = i == 0
            svg.text(
                left + width + 3 if first else left - 3,
                TOP + 9,
                f"{num(acc)} ms ↑",
                "start" if first else "end",
                "note",
            )
        if seg.flag:
            flags.append(f"M{_c(cx - 4)} {round(frame.bottom - acc * frame.scale) - 9}h8l-4 7z")
        if seg.outlier_list:
            odd.append(f"M{_c(cx)} {TOP - 20}l3.5 4l-3.5 4l-3.5 -4z")
    for cat in legend_order(list(paths)):
        if paths[cat]:
            svg.add(f'<path class="{markup.css_class(cat)}" d="{"".join(paths[cat])}"/>')
    for cls, pieces in (("flag", flags), ("ostep", odd), ("cut", cut)):
        if pieces:
            svg.add(f'<path class="{cls}" d="{"".join(pieces)}"/>')
    svg.add(
        f'<g class="segs" data-run="{attr(chart.run_id)}" data-batch="{attr(chart.batch_size)}" '
        f'data-median-layer-ms="{attr(chart.median_layer_ms)}" data-scale="{frame.scale!r}" '
        f'data-bottom="{frame.bottom}">'
        + "".join(_column(seg, frame.x0 + i * frame.pitch, frame.pitch) for i, seg in enumerate(chart.segments))
        + "</g>"
    )


def _column(seg: LayerSegment, x: float, pitch: float) -> str:
    """One segment's hover target over its whole column: its medians in data-* attributes, every number in its
    title (the late ranks too); attributes that would be empty are left out (the page stays small with 61
    layers)."""
    w = round(x + pitch) - round(x)
    extra = f' data-flag="{esc(seg.flag)}"' if seg.flag else ""
    if seg.outlier_list:
        extra += f' data-outlier-steps="{",".join(map(str, seg.outlier_list))}"'
    return (
        f'<path class="hit" d="M{round(x)} {TOP - 20}h{w}v{PLOT_H + 20}h-{w}z" '
        f'data-segment="{esc(seg.label)}" data-kind="{esc(seg.kind)}" data-wall-ms="{attr(seg.wall_ms)}" '
        f'data-busy-ms="{attr(seg.busy_ms)}"{extra}><title>{esc(_title(seg))}</title></path>'
    )


def _c(value: float) -> str:
    """A coordinate to a tenth of a pixel: 412.5, 412."""
    return f"{value:.1f}".removesuffix(".0")


def _title(seg: LayerSegment) -> str:
    """A column's tooltip: what it is, its medians in ms to 0.1 µs (each category's on a line), its flags and
    who was late there (the rank-steps and the evidence are the figure's caption's)."""
    what = "layer " + seg.label + f" · {KIND_LABELS.get(seg.kind, seg.kind)}" if seg.layer is not None else seg.label
    lines = [what + (" · slow" if seg.flag else ""), f"wall {seg.wall_ms:.4f} ms, GPU work {seg.busy_ms:.4f}"]
    if seg.vs_median_layer is not None:
        lines[-1] += f" ({seg.vs_median_layer:.3f}× median layer"
        lines[-1] += f", {seg.vs_kind:.3f}× median {seg.kind} layer)" if seg.flag and seg.vs_kind else ")"
    lines += [f"{cat} {ms:.4f}" for cat, ms in seg.parts]
    if seg.outlier_list:
        more = "+" if seg.outlier_steps > 10 else ""
        lines.append(f"outlier steps: {', '.join(map(str, seg.outlier_list))}{more} ({seg.outlier_steps} rank-steps)")
    if seg.late:
        lines.append(
            "late: "
            + "; ".join(
                f"rank {r['late_rank']} {r['late_collectives']}× {r['lateness_ms']:.4f} ms ({r['cause']})"
                for r in seg.late[:3]
            )
        )
    return "\n".join(lines)


def _x_labels(svg: Svg, chart: LayerChart, frame: _Frame, y: float) -> None:
    """pre, the layer numbers (every k-th when the columns are narrow; slow layers always, in red) and post; on
    narrow columns pre ends at its column's right edge and post starts at its left one, clear of layers 0 and L−1."""
    every = next(k for k in (1, 2, 5, 10, 20, 50, 100) if frame.pitch * k >= 14)
    narrow = frame.pitch < 30
    labels = []
    for i, seg in enumerate(chart.segments):
        x = frame.x0 + (i + 0.5) * frame.pitch
        cls = "slow" if seg.flag else ""
        if seg.layer is None and narrow:
            first = seg.label == "pre"
            x += (frame.pitch / 2 - 1) * (1 if first else -1)
            cls = "pre" if first else "post"
        if seg.layer is None or seg.flag or seg.layer % every == 0:
            named = f' class="{cls}"' if cls else ""
            labels.append(f'<text x="{round(x)}"{named}>{esc(seg.label)}</text>')
    svg.add(f'<g class="lt" transform="translate(0 {_c(y)})">{"".join(labels)}</g>')


def _strips(svg: Svg, chart: LayerChart, frame: _Frame, y: int, with_late: bool) -> None:
    """The kind strip (dense / MoE) and, for multi-rank runs, the strip of the rank latest at the collectives:
    one path per kind and per rank."""
    svg.text(frame.x0 - 6, y + 6, "kind", "end", "tick")
    cells: dict[str, list[str]] = {}
    w = max(1, round(frame.pitch - 1))
    for i, s in enumerate(chart.segments):
        left = round(frame.x0 + i * frame.pitch + 0.5)
        if s.layer is not None:
            cells.setdefault(f'class="kind-{esc(s.kind)}"', []).append(f"M{left} {y}h{w}v6h-{w}z")
        if with_late and s.late:
            colour = RUN_COLORS[int(s.late[0]["late_rank"]) % len(RUN_COLORS)]
            cells.setdefault(f'fill="{colour}"', []).append(f"M{left} {y + 12}h{w}v8h-{w}z")
    for paint, pieces in cells.items():
        svg.add(f'<path {paint} d="{"".join(pieces)}"/>')
    if with_late:
        svg.text(frame.x0 - 6, y + 19, "late", "end", "tick")
    svg.text(
        (frame.x0 + WIDTH - RIGHT) / 2,
        y + (40 if with_late else 28),
        "segment of the step: pre, layer 0 … L−1, post"
        + (" · late: the rank latest at the segment's collectives" if with_late else ""),
        "middle",
        "unit",
    )


def _late_table(chart: LayerChart, late: list[page_data.LateRank]) -> str:
    """Per rank, the segments where it arrived latest at the collectives, how often, by how much and why."""
    rows = [
        [
            f'<span class="sw" style="background:{RUN_COLORS[r.rank % len(RUN_COLORS)]}"></span> '
            f'<b data-late-rank="{r.rank}" data-run="{attr(chart.run_id)}" data-batch="{attr(chart.batch_size)}">'
            f"rank {r.rank}</b>",
            esc(_labels(_ranges(r.segments), 16)),
            esc(r.collectives),
            num(r.lateness_ms),
            esc(r.cause or "—"),
        ]
        for r in late
    ]
    return (
        '<p class="muted">Which rank arrives late at each segment\'s collectives (the rank with the most summed '
        "lateness there, over the selected steps):</p>"
        + table(
            [
                ("late rank", "l"),
                ("segments", "l"),
                ("late collectives", "r"),
                ("summed lateness ms", "r"),
                ("most common cause", "l"),
            ],
            rows,
            "numbers",
        )
    )


def _ranges(labels: list[str]) -> list[str]:
    """Segment labels with consecutive layers joined: pre, 0–7, 9, post."""
    out: list[str] = []
    run: list[int] = []

    def close() -> None:
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
            run.clear()

    for label in labels:
        if label.isdigit() and (not run or int(label) == run[-1] + 1):
            run.append(int(label))
            continue
        close()
        if label.isdigit():
            run.append(int(label))
        else:
            out.append(label)
    close()
    return out
