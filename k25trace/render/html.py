"""``k25trace html``: the report as one self-contained HTML page with charts, to share in a chat or a review.

Charts are hand-written inline SVG built here from the same frames the CLI prints (:func:`.report.breakdown`
and a few named queries): no JavaScript library, no CDN, no font or image files, so the page opens offline and
stays small (a few hundred KB for a TP2 run with three batch sizes), and a test can read every drawn number back
from the page (each mark carries its value in ``data-*`` attributes; tooltips are SVG ``<title>``). A few lines of
inline JavaScript only highlight a category across the charts when its legend entry is pointed at.

Sections: runs; where the step time goes (stacked bars per run and batch size, overlap and idle included);
decode step time and throughput vs batch size (with TPOT and tok/s from ``capture_levels`` when present);
collectives across ranks (transfer vs wait, the straggler: ``report --by comm``); why the GPU is idle
(``report --by idle``); the step-time distribution per batch size (outliers marked); one representative step per
batch size on every rank, clocks aligned (``rank_offsets``), as a Gantt chart by category; the top kernels.
Colours are the TUI's (:mod:`k25trace.tui.colors`).
"""

from __future__ import annotations

import hashlib
import html as _html
import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import duckdb
import polars as pl

from k25trace import __version__
from k25trace.analysis import report
from k25trace.db import query_frame
from k25trace.tui.colors import CATEGORY_COLORS

CATEGORY_ORDER = [c for c in CATEGORY_COLORS if c != "overlap"]
"""Categories in drawing order (the TUI's palette order); then ``overlap`` and ``idle`` close every bar."""

IDLE_COLOR = "#dcdcdc"
IDLE_CAUSE_COLORS = {  # pale tints: idle is the absence of work, drawn lighter than any category
    "host": "#f0a8a8",
    "sync": "#f6cf8e",
    "launch": "#c9b6ee",
    "device": "#a9cdee",
    "unknown": "#e3e3e3",
    "busy": "#b8b8b8",  # GPU work of no step, between steps
}
IDLE_CAUSE_LABELS = {
    "host": "host-bound", "sync": "after a host sync", "launch": "launch overhead", "device": "device-bound",
    "unknown": "unknown", "busy": "GPU work of no step",
}
WAIT_PARTS = [  # why the late rank was late: report --by comm's split of the wait (they add up to it, to rounding)
    ("wait_host_ms_per_step", "wait_host", "host launched late", "#f0a8a8"),
    ("wait_sync_ms_per_step", "wait_sync", "sync", "#f6cf8e"),
    ("wait_gpu_work_ms_per_step", "wait_gpu_work", "longer GPU work", "#8e2525"),
    ("wait_device_ms_per_step", "wait_device", "waited on the device", "#a9cdee"),
    ("wait_other_ms_per_step", "wait_other", "other (e.g. at the run's first collective)", "#cfcfcf"),
]
"""(report column, the bar's data-part, its words, its colour): host, sync and device in the idle section's
colours for the same kinds of time."""
WAIT_POSITIONS = [  # the same wait split by where it happened only (report --by comm's launch_wait / gpu_wait)
    ("launch_wait_ms_per_step", "wait at the step's first collective"),
    ("gpu_wait_ms_per_step", "wait at a later collective"),
]
RUN_COLORS = ["#1f2937", "#0f766e", "#7c3aed", "#b45309", "#be185d", "#0369a1"]
OUTLIER_COLOR = "#c0392b"
TIMELINE_WIDTH = 860
"""Pixels of a Gantt lane; the step is cut into this many slices (one per pixel)."""


# ------------------------------------------------------------------------------------------------- the data


@dataclass
class Lane:
    """One rank's part of a representative step: its aligned window and its slices, run-length encoded."""

    rank: int
    trace_id: int
    offset_ns: int
    aligned: bool
    start_ns: int  # aligned GPU start / end of this rank's step
    end_ns: int
    wall_ns: int
    idle_ns: int
    collectives: int
    wait_ns: int
    caused_wait_ns: int
    marker: str | None
    segments: list[tuple[int, int, str]] = field(default_factory=list)  # (first slice, end slice, category)


@dataclass
class Timeline:
    """One representative step of a run and batch size, on every rank (``representative_steps``)."""

    run_id: str
    level: str | None
    batch_size: int | None
    step_index: int
    candidates: int
    wall_ms: float
    median_wall_ms: float
    inferred: bool
    start_ns: int  # the aligned window: first GPU activity of any rank → last of any rank
    end_ns: int
    buckets: int
    lanes: list[Lane]


@dataclass
class ReportData:
    """Everything the page shows, fetched once from the database."""

    source: str
    phase: str
    notes: list[str]
    runs: pl.DataFrame
    batch: pl.DataFrame
    idle: pl.DataFrame
    comm: pl.DataFrame
    kernels: pl.DataFrame
    step_times: pl.DataFrame
    levels: pl.DataFrame
    timelines: list[Timeline]
    top: int
    labels: dict[str, str] = field(default_factory=dict)  # run_id -> its label (trace_runs.run_label)

    def run_name(self, run_id: str, level: str | None = None) -> str:
        """The run's label (the id itself for an unknown run), with the capture level when given."""
        name = self.labels.get(str(run_id), str(run_id))
        return f"{name}, level {level}" if level else name


def collect(con: duckdb.DuckDBPyConnection, *, source: str = "", phase: str | None = None, top: int = 20,
            buckets: int = TIMELINE_WIDTH) -> ReportData:
    """Run every query the page needs (the report views and the representative steps' timelines)."""
    phase, note = report.resolve_phase(con, phase)
    notes = ([note] if note else []) + report.run_warnings(con) + report.alignment_warnings(con)
    timelines = [step_timeline(con, row, buckets)
                 for row in query_frame(con, "representative_steps", {"phase": phase}).iter_rows(named=True)]
    return ReportData(
        source=source, phase=phase, notes=notes,
        runs=query_frame(con, "runs"),
        batch=report.breakdown(con, by="batch", phase=phase),
        idle=report.breakdown(con, by="idle", phase=phase),
        comm=report.breakdown(con, by="comm", phase=phase),
        kernels=report.breakdown(con, by="kernel", phase=phase, top=top),
        step_times=query_frame(con, "step_times", {"phase": phase}),
        levels=query_frame(con, "run_levels"),
        timelines=[t for t in timelines if t.lanes],
        top=top,
        labels=report.run_labels(con),
    )


def step_timeline(con: duckdb.DuckDBPyConnection, rep: dict[str, Any], buckets: int) -> Timeline:
    """One step on every rank of its run, cut into ``buckets`` slices of one common aligned window; each slice is
    the category that ran longest in it, or the cause of the idle time there (``browse_step_timeline``)."""
    lanes_frame = query_frame(con, "step_lanes", {"run_id": rep["run_id"], "step_index": rep["step_index"]})
    lanes_frame = lanes_frame.filter(pl.col("wall_ns") > 0)
    timeline = Timeline(
        run_id=rep["run_id"], level=rep["level"], batch_size=rep["batch_size"], step_index=rep["step_index"],
        candidates=rep["candidates"], wall_ms=rep["wall_ms"], median_wall_ms=rep["median_wall_ms"],
        inferred=bool(rep["inferred"]), start_ns=0, end_ns=0, buckets=buckets, lanes=[],
    )
    if lanes_frame.is_empty():
        return timeline
    start, end = int(lanes_frame["aligned_start_ns"].min()), int(lanes_frame["aligned_end_ns"].max())
    timeline.start_ns, timeline.end_ns = start, end
    for row in lanes_frame.iter_rows(named=True):
        lane = Lane(rank=row["rank"], trace_id=row["trace_id"], offset_ns=row["offset_ns"], aligned=row["aligned"],
                    start_ns=row["aligned_start_ns"], end_ns=row["aligned_end_ns"], wall_ns=row["wall_ns"],
                    idle_ns=row["idle_ns"], collectives=row["collectives"], wait_ns=row["wait_ns"],
                    caused_wait_ns=row["caused_wait_ns"], marker=row["marker"])
        slices = query_frame(con, "browse_step_timeline", {
            "trace_id": lane.trace_id, "step_index": rep["step_index"], "start_ns": start + lane.offset_ns,
            "end_ns": end + lane.offset_ns, "buckets": buckets})["category"].to_list()
        for i in range(len(slices)):  # slices wholly outside this rank's own step are not drawn
            s0, s1 = start + (end - start) * i // buckets, start + (end - start) * (i + 1) // buckets
            if s1 <= lane.start_ns or s0 >= lane.end_ns:
                slices[i] = None
        lane.segments = _run_lengths(slices)
        timeline.lanes.append(lane)
    return timeline


def _run_lengths(values: list[str | None]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        if values[i] is not None:
            out.append((i, j, values[i]))
        i = j
    return out


# ------------------------------------------------------------------------------------------------- helpers


def esc(value: Any) -> str:
    return _html.escape("" if value is None else str(value), quote=True)


def num(value: float | None, digits: int | None = None) -> str:
    """A number for text: ms with precision by size (1.234, 12.34, 123.4)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if digits is None:
        a = abs(value)
        digits = 3 if a < 10 else 2 if a < 100 else 1
    return f"{value:,.{digits}f}"


def attr(value: Any) -> str:
    """A value for a data-* attribute, exactly as the report's JSON has it (floats by repr)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return esc(value)


KNOWN_CLASSES = frozenset([*CATEGORY_COLORS, "idle", *(f"idle:{k}" for k in IDLE_CAUSE_COLORS)])
"""Categories and idle causes whose class name is their own name (``attention`` → ``c-attention``)."""


def css_class(category: str | None) -> str:
    """A safe CSS class token for a category or an idle cause: ``c-attention``, ``idle:host`` → ``c-idle-host``.

    Only the built-in categories keep their name; any other category (a user's rules, a database someone sent)
    gets ``c-u-<its letters and digits, at most 24>-<8 hex digits of its SHA-256>``: one token of ``[a-z0-9-]``,
    the same on every chart of every page, distinct for distinct names. The raw name never reaches a ``class``."""
    name = category or "other"
    if name in KNOWN_CLASSES:
        return "c-" + name.replace(":", "-").replace("_", "-")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"c-u-{slug + '-' if slug else ''}{digest}"


def nice_ticks(vmax: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``vmax`` (about ``n`` of them)."""
    if vmax <= 0 or not math.isfinite(vmax):
        return [0.0, 1.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    count = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def tick_label(v: float, ticks: list[float] | None = None) -> str:
    """A tick value with as many decimals as the tick step needs (280.5, 281, 281.5, not 280, 281, 282)."""
    step = abs(ticks[1] - ticks[0]) if ticks and len(ticks) > 1 else abs(v) or 1.0
    decimals = next((d for d in range(7) if abs(round(step, d) - step) < 1e-9 * max(1.0, step)), 6)
    return f"{v:,.{decimals}f}"


def batch_label(batch: int | None) -> str:
    return "bs=?" if batch is None else f"bs={batch}"


class Svg:
    """A small SVG canvas: parts are appended as markup."""

    def __init__(self, width: float, height: float, label: str, cls: str = "") -> None:
        self.width, self.height, self.label, self.cls = width, height, label, cls
        self.parts: list[str] = []

    def add(self, markup: str) -> None:
        self.parts.append(markup)

    def text(self, x: float, y: float, content: str, anchor: str = "start", cls: str = "", extra: str = "") -> None:
        c = f' class="{cls}"' if cls else ""
        a = "" if anchor == "start" else f' text-anchor="{anchor}"'
        self.add(f'<text x="{x:.1f}" y="{y:.1f}"{a}{c}{extra}>{esc(content)}</text>')

    def x_axis(self, x0: float, x1: float, y: float, top: float, ticks: list[float], scale: float, unit: str) -> None:
        """Vertical grid lines from ``top`` to ``y``, tick labels under ``y`` and the unit centred below them."""
        self.add('<g class="grid">' + "".join(
            f'<line x1="{x0 + t * scale:.1f}" x2="{x0 + t * scale:.1f}" y1="{top:.1f}" y2="{y:.1f}"/>'
            for t in ticks) + "</g>")
        self.add(f'<g class="axis"><line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}"/></g>')
        for t in ticks:
            self.text(x0 + t * scale, y + 13, tick_label(t, ticks), "middle", "tick")
        self.text((x0 + x1) / 2, y + 28, unit, "middle", "unit")

    def render(self) -> str:
        c = f' class="{self.cls}"' if self.cls else ""
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" '
                f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" role="img" aria-label="{esc(self.label)}"{c}>'
                + "".join(self.parts) + "</svg>")


def legend(items: list[tuple[str, str]]) -> str:
    """An HTML legend: (css class, label) pairs; entries of categories highlight them across the page."""
    lis = "".join(f'<li data-legend="{esc(cls)}"><span class="sw {esc(cls)}"></span>{esc(label)}</li>'
                  for cls, label in items)
    return f'<ul class="legend">{lis}</ul>'


def figure(title: str, caption: str, body: str, cls: str = "chart") -> str:
    return (f'<figure class="{cls}"><figcaption><h3>{esc(title)}</h3><p>{caption}</p></figcaption>'
            f"{body}</figure>")


def table(headers: list[tuple[str, str]], rows: list[list[str]], cls: str = "") -> str:
    """headers: (label, 'l' | 'r'); rows of ready cell markup (``<td>`` added here, aligned like the header)."""
    head = "".join(f'<th class="{a}">{esc(h)}</th>' for h, a in headers)
    body = "".join("<tr>" + "".join(f'<td class="{a}">{cell}</td>' for cell, (_, a) in zip(row, headers, strict=True))
                   + "</tr>" for row in rows)
    c = f' class="{cls}"' if cls else ""
    return f'<div class="scroll"><table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _groups(frame: pl.DataFrame, keys: list[str]) -> list[tuple[tuple[Any, ...], pl.DataFrame]]:
    if frame.is_empty():
        return []
    return [(tuple(k), g) for k, g in frame.group_by(keys, maintain_order=True)]


# ------------------------------------------------------------------------------------------------- sections


def section_runs(data: ReportData) -> str:
    rows = []
    for r in data.runs.iter_rows(named=True):
        batches = ", ".join(str(b) for b in (r["batch_sizes"] or [])) or "—"
        align = r["alignment"] or ("one rank" if r["ranks"] == 1 else "not aligned")
        if r["residual_p90_us"] is not None:
            align += f" (p90 residual {num(r['residual_p90_us'], 2)} µs)"
        rows.append([f'<span title="{esc(r["run_id"])}">{esc(data.run_name(r["run_id"], r["level"]))}</span>',
                     esc(r["ranks"]), esc(r["world_size"] if r["world_size"] is not None else "?"), esc(r["devices"]),
                     esc(r["steps"]), esc(r["decode_steps"]), esc(batches),
                     esc("inferred from idle gaps" if r["inferred"] else "markers"), esc(align)])
    return ('<section id="runs"><h2>Runs</h2><p class="muted">A run is the ranks of one capture level or one '
            'directory of rank files (<code>trace_runs</code>); hover a name for its full id.</p>'
            + table([("run", "l"), ("ranks", "r"), ("world size", "r"), ("GPU", "l"), ("steps", "r"),
                     ("decode steps", "r"), ("batch sizes", "l"), ("steps from", "l"), ("clock alignment", "l")], rows)
            + "</section>")


def _bar_rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """``report_breakdown`` rows → one dict per (run, batch): its totals and its segments in drawing order."""
    out = []
    for (run_id, batch), group in _groups(frame, ["run_id", "batch_size"]):
        first = group.row(0, named=True)
        by_cat = {r["category"]: r for r in group.iter_rows(named=True)}
        order = [c for c in CATEGORY_ORDER if c in by_cat] + sorted(c for c in by_cat if c not in CATEGORY_ORDER
                                                                    and c not in ("overlap", "idle"))
        order += [c for c in ("overlap", "idle") if c in by_cat]
        out.append({"run_id": run_id, "batch": batch, "level": first["level"], "steps": first["steps"],
                    "ranks": first["ranks"], "step_ms": first["step_ms"], "median_ms": first["median_step_ms"],
                    "idle_pct": first["idle_pct"], "segments": [by_cat[c] for c in order]})
    return out


def section_breakdown(data: ReportData) -> str:
    bars = _bar_rows(data.batch)
    if not bars:
        return ('<section id="breakdown"><h2>Where the step time goes</h2><p class="empty">No steps with GPU '
                f'activity for phase {esc(data.phase)}.</p></section>')
    parts = ['<section id="breakdown"><h2>Where the step time goes</h2>']
    seen: list[str] = []
    for run_id, run_bars in _by_run(bars):
        label_w, note_w, width = 90, 330, 1100
        x0, x1 = label_w, width - note_w
        row_h, gap, top = 22, 10, 10
        vmax = max(b["step_ms"] for b in run_bars)
        ticks = nice_ticks(vmax)
        scale = (x1 - x0) / ticks[-1]
        height = top + len(run_bars) * (row_h + gap) + 36
        svg = Svg(width, height, f"Milliseconds per step by category, {data.run_name(run_id)}", "bars breakdown")
        y_axis = top + len(run_bars) * (row_h + gap)
        svg.x_axis(x0, x1, y_axis, top - 4, ticks, scale, "ms per step (mean over steps and ranks; the bar is the "
                   "step's GPU wall time)")
        for i, b in enumerate(run_bars):
            y = top + i * (row_h + gap)
            svg.text(x0 - 8, y + row_h / 2 + 4, (f"{b['level']} " if b["level"] else "") + batch_label(b["batch"]),
                     "end", "label")
            x = x0
            marks = []
            for seg in b["segments"]:
                ms = seg["ms_per_step"] or 0.0
                w = ms * scale
                cat = seg["category"]
                if cat not in seen:
                    seen.append(cat)
                title = f"{cat}: {num(ms)} ms/step, {num(seg['pct_of_step'], 2)} % of the step"
                if seg["kernel_ms_per_step"] is not None:
                    title += (f"; kernel time {num(seg['kernel_ms_per_step'])} ms/step, "
                              f"{num(seg['calls_per_step'], 1)} calls/step")
                marks.append(
                    f'<rect class="seg {css_class(cat)}" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" '
                    f'data-run="{attr(run_id)}" data-batch="{attr(b["batch"])}" data-category="{esc(cat)}" '
                    f'data-ms="{attr(seg["ms_per_step"])}" data-pct="{attr(seg["pct_of_step"])}">'
                    f"<title>{esc(title)}</title></rect>")
                x += w
            svg.add(f'<g class="bar" data-run="{attr(run_id)}" data-batch="{attr(b["batch"])}" '
                    f'data-step-ms="{attr(b["step_ms"])}" data-x0="{x0}" data-scale="{scale!r}">' + "".join(marks)
                    + "</g>")
            svg.text(x1 + 10, y + row_h / 2 + 4,
                     f"{num(b['step_ms'])} ms (median {num(b['median_ms'])}) · {_plural(b['steps'], 'step')} × "
                     f"{b['ranks']} rank{'s' if b['ranks'] != 1 else ''} · idle {num(b['idle_pct'], 1)} %", "start",
                     "note")
        parts.append(figure(
            f"Milliseconds per step by category — {data.run_name(run_id)}",
            "Exclusive GPU time per category (only that category running, over all streams), then <b>overlap</b> "
            "(two or more categories at once) and <b>idle</b> (no GPU activity): together the step's wall time. "
            "Means over the steps of all ranks (<code>k25trace report</code>).",
            svg.render()))
        parts.append(_breakdown_table(run_id, run_bars))
    parts.append(legend([(css_class(c), c) for c in _legend_order(seen)]))
    parts.append("</section>")
    return "".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _breakdown_table(run_id: str, run_bars: list[dict[str, Any]]) -> str:
    cats: list[str] = []
    for b in run_bars:
        for seg in b["segments"]:
            if seg["category"] not in cats:
                cats.append(seg["category"])
    cells = {(b["batch"], s["category"]): s for b in run_bars for s in b["segments"]}
    headers = [("category", "l")] + [((f"{b['level']} " if b["level"] else "") + batch_label(b["batch"])
                                      + " ms/step (%)", "r") for b in run_bars]
    rows = []
    for cat in cats:
        row = [f'<span class="sw {css_class(cat)}"></span> {esc(cat)}']
        for b in run_bars:
            s = cells.get((b["batch"], cat))
            row.append("" if s is None else
                       f'<span data-run="{attr(run_id)}" data-batch="{attr(b["batch"])}" data-category="{esc(cat)}" '
                       f'data-ms="{attr(s["ms_per_step"])}">{num(s["ms_per_step"])}</span> '
                       f'<span class="muted">({num(s["pct_of_step"], 1)} %)</span>')
        rows.append(row)
    rows.append(["<b>step</b>"] + [f"<b>{num(b['step_ms'])}</b>" for b in run_bars])
    return f'<details><summary>The numbers</summary>{table(headers, rows, "numbers")}</details>'


def _by_run(bars: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for b in bars:
        out.setdefault(b["run_id"], []).append(b)
    return list(out.items())


_Points = list[tuple[str, str, list[tuple[int, float, str]], str]]  # (series key, colour, (batch, value, tip)s, dash)


def section_scaling(data: ReportData) -> str:
    """Decode step time and throughput against batch size, per run; TPOT and output tok/s of capture levels."""
    bars = [b for b in _bar_rows(data.batch) if b["batch"] is not None and b["batch"] > 0]
    if not bars:
        return ""
    # a capture level is a run of its own: group levels of one capture into one series (by capture dir)
    series: dict[str, list[dict[str, Any]]] = {}
    for b in bars:
        series.setdefault(_series_key(data, b["run_id"]), []).append(b)
    batches = sorted({b["batch"] for b in bars})
    time_series, tput_series, legend_items = _scaling_series(data, series)
    kind = "Decode step" if data.phase == "decode" else f"Step ({data.phase} steps)"
    charts = ('<div class="row">' + _scaling_chart(f"{kind} time vs batch size", "ms per step", time_series, batches)
              + _scaling_chart(f"{kind} throughput vs batch size", "tokens per second", tput_series, batches)
              + "</div>")
    leg = '<ul class="legend">' + "".join(
        f'<li><span class="sw" style="background:{c}"></span>{esc(t)}</li>' for c, t in legend_items) + "</ul>"
    body = figure(f"{kind} time and throughput vs batch size",
                  "Left: GPU wall time of a decode step (mean and median over steps and ranks). Right: tokens per "
                  "second if the GPU did nothing but these steps (batch size ÷ mean step time: one token per request "
                  "per step) and, for capture levels, the output tok/s the clients measured. TPOT and measured tok/s "
                  "come from <code>capture_levels</code> and are drawn at the level's most frequent decode batch "
                  "size.", charts + leg)
    return (f'<section id="scaling"><h2>{esc(kind)} time vs batch size</h2>{body}'
            f"{_scaling_levels_table(data, bars)}</section>")


def _scaling_series(data: ReportData, series: dict[str, list[dict[str, Any]]]) -> tuple[_Points, _Points,
                                                                                        list[tuple[str, str]]]:
    """The points of the two scaling charts, per series (mean and median step time; GPU tok/s; and a capture
    level's TPOT p50 and measured output tok/s at its main batch size), and the legend lines."""
    levels = {r["run_id"]: r for r in data.levels.iter_rows(named=True)}
    time_series: _Points = []
    tput_series: _Points = []
    legend_items: list[tuple[str, str]] = []
    for i, (key, pts) in enumerate(series.items()):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        name = _series_name(data, key)
        mean = [(b["batch"], b["step_ms"], f"{name}, batch {b['batch']}: mean step {num(b['step_ms'])} ms "
                 f"({b['steps']} steps)") for b in pts]
        median = [(b["batch"], b["median_ms"], f"{name}, batch {b['batch']}: median step {num(b['median_ms'])} ms")
                  for b in pts]
        tput = [(b["batch"], round(b["batch"] * 1000.0 / b["step_ms"], 1),
                 f"{name}, batch {b['batch']}: {num(b['batch'] * 1000.0 / b['step_ms'], 0)} tok/s "
                 "(batch ÷ mean step time)") for b in pts if b["step_ms"]]
        time_series += [(f"{key}|mean", color, mean, ""), (f"{key}|median", color, median, "4 3")]
        tput_series.append((f"{key}|gpu_tok_s", color, tput, ""))
        legend_items.append((color, f"{name}: mean step (solid), median (dashed)"))
        tpot, measured = [], []
        for b in pts:
            lv = levels.get(b["run_id"])
            if lv is None or b["batch"] != _main_batch(data, b["run_id"]):
                continue
            if lv["tpot_p50_ms"] is not None:
                tpot.append((b["batch"], lv["tpot_p50_ms"], f"{name}, level {lv['level']} (concurrency "
                             f"{lv['concurrency']}): TPOT p50 {num(lv['tpot_p50_ms'])} ms, p90 "
                             f"{num(lv['tpot_p90_ms'])} ms"))
            if lv["output_tok_s"] is not None:
                measured.append((b["batch"], lv["output_tok_s"], f"{name}, level {lv['level']}: measured "
                                 f"{num(lv['output_tok_s'], 0)} output tok/s"))
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
    svg.add(f'<g class="axis"><line x1="{x0}" x2="{x1}" y1="{y1}" y2="{y1}"/>'
            f'<line x1="{x0}" x2="{x0}" y1="{y0}" y2="{y1}"/></g>')
    for b in batches:
        svg.text(xpos(b), y1 + 14, str(b), "middle", "tick")
    svg.text((x0 + x1) / 2, y1 + 32, "decode batch size (requests per step, log scale)", "middle", "unit")
    svg.text(14, (y0 + y1) / 2, unit, "middle", "unit", f' transform="rotate(-90 14 {(y0 + y1) / 2:.1f})"')
    for kind, color, pts, dash in points:
        pts = sorted(pts)
        if len(pts) > 1:
            path = " ".join(f"{'M' if i == 0 else 'L'}{xpos(b):.1f},{y1 - v * scale:.1f}" for i, (b, v, _) in
                            enumerate(pts))
            svg.add(f'<path d="{path}" fill="none" stroke="{color}" stroke-width="1.8"'
                    + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")
        for b, v, tip in pts:
            svg.add(f'<circle class="pt" cx="{xpos(b):.1f}" cy="{y1 - v * scale:.1f}" r="4" fill="{color}" '
                    f'data-series="{esc(kind)}" data-batch="{attr(b)}" data-value="{attr(v)}"><title>{esc(tip)}</title>'
                    f"</circle>")
    return svg.render()


def _scaling_levels_table(data: ReportData, bars: list[dict[str, Any]]) -> str:
    """The capture levels: concurrency, main decode batch size and its step time, TPOT, TTFT, tok/s ("" if none)."""
    rows = []
    for r in data.levels.iter_rows(named=True):
        main = _main_batch(data, r["run_id"])
        rows.append([esc(data.run_name(r["run_id"])), esc(r["level"]), esc(r["concurrency"]),
                     esc(main), num(_step_ms_at(bars, r["run_id"], main)),
                     num(r["tpot_p50_ms"]), num(r["tpot_p90_ms"]), num(r["ttft_p50_ms"]),
                     num(r["output_tok_s"], 0), esc(r["requests"]), esc(r["errors"])])
    return "" if not rows else table(
        [("run", "l"), ("level", "l"), ("concurrency", "r"), ("main batch", "r"), ("step ms", "r"),
         ("TPOT p50 ms", "r"), ("TPOT p90 ms", "r"), ("TTFT p50 ms", "r"), ("output tok/s", "r"), ("requests", "r"),
         ("errors", "r")], rows, "levels")


def _series_key(data: ReportData, run_id: str) -> str:
    """Capture levels of one capture (same directory and world size) form one series; other runs are their own."""
    row = data.runs.filter(pl.col("run_id") == run_id)
    if not row.is_empty() and row["capture_dir"][0] is not None:
        return f"{row['capture_dir'][0]}#ws{row['world_size'][0]}"
    return run_id


def _series_name(data: ReportData, key: str) -> str:
    if key in set(data.runs["run_id"].to_list()):
        return data.run_name(key)
    capture, _, world = key.rpartition("#ws")
    name = capture.rstrip("/").rsplit("/", 1)[-1]
    return f"{name} (TP{world})" if world not in ("None", "1", "") else name


def _main_batch(data: ReportData, run_id: str) -> int | None:
    """The batch size a run spent most steps at (ties: the one nearest its capture level's concurrency)."""
    rows = data.batch.filter((pl.col("run_id") == run_id) & pl.col("batch_size").is_not_null())
    if rows.is_empty():
        return None
    run = data.runs.filter(pl.col("run_id") == run_id)
    concurrency = run["concurrency"][0] if not run.is_empty() else None
    counts = {r["batch_size"]: r["steps"] for r in rows.iter_rows(named=True)}
    return min(counts, key=lambda b: (-counts[b], abs(b - concurrency) if concurrency else b, b))


def _step_ms_at(bars: list[dict[str, Any]], run_id: str, batch: int | None) -> float | None:
    return next((b["step_ms"] for b in bars if b["run_id"] == run_id and b["batch"] == batch), None)


def section_comm(data: ReportData) -> str:
    if data.comm.is_empty():
        single = data.runs.filter(pl.col("ranks") > 1).is_empty()
        why = "every run has one rank" if single else "no collective could be paired across ranks"
        return (f'<section id="comm"><h2>Collectives across ranks</h2><p class="empty">Nothing to show: {why}.'
                "</p></section>")
    parts = ['<section id="comm"><h2>Collectives across ranks</h2>']
    for (run_id,), group in _groups(data.comm, ["run_id"]):
        rows = list(group.iter_rows(named=True))
        label_w, note_w, width = 150, 440, 1100
        x0, x1 = label_w, width - note_w
        row_h, gap, top = 20, 10, 10
        ticks = nice_ticks(max(r["ms_per_step"] or 0 for r in rows))
        scale = (x1 - x0) / ticks[-1]
        height = top + len(rows) * (row_h + gap) + 36
        svg = Svg(width, height, f"Collective time per step, transfer vs wait, {data.run_name(run_id)}", "bars comm")
        svg.x_axis(x0, x1, top + len(rows) * (row_h + gap), top - 4, ticks, scale,
                   "ms per step (mean over ranks): transfer + wait")
        for i, r in enumerate(rows):
            y = top + i * (row_h + gap)
            svg.text(x0 - 8, y + row_h / 2 + 4, (f"{r['level']} " if r["level"] else "")
                     + f"{batch_label(r['batch_size'])} {r['category']}", "end", "label")
            parts_ms: list[tuple[str, str, Any, str | None]] = [
                ("transfer", "transfer", r["transfer_ms_per_step"], None),
                *((part, label, r[column], colour) for column, part, label, colour in WAIT_PARTS)]
            x = x0
            for part, label, ms, colour in parts_ms:
                ms = ms or 0.0
                w = ms * scale
                fill = f'class="{css_class(r["category"])}"' if colour is None else f'fill="{colour}"'
                svg.add(f'<rect {fill} x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" data-run="{attr(run_id)}" '
                        f'data-batch="{attr(r["batch_size"])}" data-category="{esc(r["category"])}" '
                        f'data-part="{part}" data-ms="{attr(ms)}"><title>{esc(label)}: {num(ms)} ms/step'
                        f"</title></rect>")
                x += w
            straggler = ("no wait" if r["straggler_rank"] is None else
                         f"straggler rank {r['straggler_rank']} ({num(r['straggler_wait_pct'], 0)} % of the wait)")
            svg.text(x1 + 10, y + row_h / 2 + 4, f"wait {num(r['wait_pct'], 1)} % · {straggler} · last most often: "
                     f"rank {r['last_rank']} ({num(r['last_pct'], 0)} %)", "start", "note")
        leg = ('<ul class="legend">'
               f'<li><span class="sw {css_class(rows[0]["category"])}"></span>transfer (shortest duration across '
               "ranks, in the collective's colour)</li><li>wait, by why the late rank was late:</li>"
               + "".join(f'<li><span class="sw" style="background:{colour}"></span>{esc(label)}</li>'
                         for _, _, label, colour in WAIT_PARTS) + "</ul>")
        parts.append(figure(
            f"Transfer vs wait per step — {data.run_name(run_id)}",
            "Each paired collective's <b>transfer</b> is its shortest duration across ranks; the rest of each rank's "
            "duration is <b>wait</b> for the rank that arrived last. The wait is split by why that rank was late, "
            "from what it did since the previous collective against the rank that was on time: its <b>host "
            "launched late</b> (host-bound idle, launch overhead), it waited on a host <b>sync</b>, it ran "
            "<b>longer GPU work</b>, it <b>waited on the device</b> (a stream, event or graph edge), or <b>other</b> "
            "(e.g. at the run's first collective, with none before it to compare). The <b>straggler</b> is the "
            "rank whose lateness caused the most wait (<code>report --by comm</code>).", svg.render() + leg))
        trs = []
        for r in rows:
            trs.append([esc(f"{r['level']} " if r["level"] else "") + esc(batch_label(r["batch_size"])),
                        f'<span class="sw {css_class(r["category"])}"></span> {esc(r["category"])}',
                        esc(r["steps"]), num(r["calls_per_step"], 1), num(r["ms_per_step"]),
                        num(r["transfer_ms_per_step"]), num(r["wait_ms_per_step"]), num(r["wait_pct"], 1),
                        f"{num(r['skew_p50_us'], 1)} / {num(r['skew_p90_us'], 1)} / {num(r['skew_max_us'], 1)}",
                        f'<b data-run="{attr(run_id)}" data-batch="{attr(r["batch_size"])}" '
                        f'data-category="{esc(r["category"])}" data-straggler="{attr(r["straggler_rank"])}">'
                        f"{esc('—' if r['straggler_rank'] is None else r['straggler_rank'])}</b>",
                        num(r["straggler_wait_ms_per_step"]), num(r["straggler_wait_pct"], 1),
                        esc(r["last_rank"]), num(r["last_pct"], 1), esc(r["alignment"] or "—")])
        parts.append(table([("batch", "l"), ("collective", "l"), ("steps", "r"), ("calls/step", "r"),
                            ("ms/step", "r"), ("transfer ms", "r"), ("wait ms", "r"), ("wait %", "r"),
                            ("skew p50/p90/max µs", "r"), ("straggler", "r"), ("its wait ms/step", "r"),
                            ("its share %", "r"), ("last rank", "r"), ("last %", "r"), ("alignment", "l")],
                           trs, "numbers"))
        why_rows = []
        for r in rows:
            keys = (f'data-run="{attr(run_id)}" data-batch="{attr(r["batch_size"])}" '
                    f'data-category="{esc(r["category"])}"')
            why_rows.append([esc(f"{r['level']} " if r["level"] else "") + esc(batch_label(r["batch_size"])),
                        f'<span class="sw {css_class(r["category"])}"></span> {esc(r["category"])}',
                        num(r["wait_ms_per_step"]),
                        f'<span {keys} data-why-late="{attr(r["why_late"])}">{esc(r["why_late"] or "—")}</span>']
                       + [f'<span {keys} data-column="{column}" data-ms="{attr(r[column])}">{num(r[column])}</span>'
                          for column, *_ in WAIT_PARTS + WAIT_POSITIONS])
        parts.append(f"<h3>Why the late rank was late — {esc(data.run_name(run_id))}</h3>")
        parts.append(table([("batch", "l"), ("collective", "l"), ("wait ms", "r"), ("why late", "l")]
                           + [(label.split(" (")[0], "r") for _, _, label, _ in WAIT_PARTS]
                           + [(label, "r") for _, label in WAIT_POSITIONS], why_rows, "numbers why"))
        parts.append('<p class="muted">The wait split (ms per step): by why the late rank was late, then by position '
                     "only (<code>report --by comm</code>'s launch_wait / gpu_wait).</p>")
    parts.append("</section>")
    return "".join(parts)


IDLE_PARTS = [("host_ms", "host"), ("sync_ms", "sync"), ("launch_overhead_ms", "launch"), ("device_ms", "device"),
              ("unknown_ms", "unknown")]
BETWEEN_PARTS = [("between_host_ms", "host"), ("between_sync_ms", "sync"), ("between_launch_ms", "launch"),
                 ("between_device_ms", "device"), ("between_busy_ms", "busy")]


def section_idle(data: ReportData) -> str:
    if data.idle.is_empty():
        return ""
    parts = ['<section id="idle"><h2>Why the GPU is idle</h2>']
    for (run_id,), group in _groups(data.idle, ["run_id"]):
        rows = list(group.iter_rows(named=True))
        label_w, note_w, width = 150, 300, 1100
        x0, x1 = label_w, width - note_w
        row_h, gap, top = 16, 6, 10
        vmax = max(max(r["idle_ms"] or 0, sum(r[c] or 0 for c, _ in BETWEEN_PARTS)) for r in rows)
        ticks = nice_ticks(vmax)
        scale = (x1 - x0) / ticks[-1]
        lines = len(rows) * 2
        height = top + lines * (row_h + gap) + len(rows) * 6 + 36
        svg = Svg(width, height, f"GPU idle time per step by cause, {data.run_name(run_id)}", "bars idle")
        y = top
        for r in rows:
            for kind, spec, total_label in (("in_step", IDLE_PARTS, f"idle in the step {num(r['idle_ms'])} ms "
                                             f"({num(r['idle_pct'], 1)} % of {num(r['wall_ms'])})"),
                                            ("between", BETWEEN_PARTS, f"between steps {num(r['between_ms'])} ms "
                                             f"({num(r['between_pct_of_span'], 1)} % of the GPU span)")):
                svg.text(x0 - 8, y + row_h / 2 + 4, f"{batch_label(r['batch_size'])} "
                         + ("in step" if kind == "in_step" else "between"), "end", "label")
                x = x0
                for column, cause in spec:
                    ms = r[column] or 0.0
                    w = ms * scale
                    svg.add(f'<rect class="{css_class("idle:" + cause)}" x="{x:.2f}" y="{y}" width="{w:.2f}" '
                            f'height="{row_h}" data-run="{attr(run_id)}" data-batch="{attr(r["batch_size"])}" '
                            f'data-kind="{kind}" data-column="{column}" data-ms="{attr(r[column])}">'
                            f"<title>{esc(IDLE_CAUSE_LABELS[cause])}: {num(ms)} ms/step</title></rect>")
                    x += w
                svg.text(x1 + 10, y + row_h / 2 + 4, total_label, "start", "note")
                y += row_h + gap
            y += 6
        svg.x_axis(x0, x1, y, top - 4, ticks, scale, "ms per step (mean over steps and ranks)")
        parts.append(figure(
            f"Idle time per step by cause — {data.run_name(run_id)}",
            "Every hole in a step's GPU activity, and every hole before it since the previous step, classified by "
            "the activity that ends it and its launch call: <b>host-bound</b> (launched after the GPU went idle), "
            "<b>after a host sync</b>, <b>launch overhead</b> (launch call start → GPU start) and <b>device-bound</b> "
            "(launched before: a dependency) (<code>report --by idle</code>).", svg.render()))
    parts.append(legend([(css_class("idle:" + c), IDLE_CAUSE_LABELS[c]) for c in IDLE_CAUSE_COLORS]))
    trs = [[esc(data.run_name(r["run_id"])), esc(batch_label(r["batch_size"])), esc(r["steps"]), num(r["wall_ms"]),
            num(r["idle_ms"]), num(r["host_ms"]), num(r["sync_ms"]), num(r["launch_overhead_ms"]), num(r["device_ms"]),
            num(r["unknown_ms"]), num(r["between_ms"]), num(r["between_pct_of_span"], 2)]
           for r in data.idle.iter_rows(named=True)]
    parts.append("<details><summary>The numbers</summary>" + table(
        [("run", "l"), ("batch", "l"), ("steps", "r"), ("wall ms", "r"), ("idle ms", "r"), ("host", "r"),
         ("sync", "r"), ("launch overhead", "r"), ("device", "r"), ("unknown", "r"), ("between ms", "r"),
         ("between % of span", "r")], trs, "numbers") + "</details></section>")
    return "".join(parts)


def section_distribution(data: ReportData) -> str:
    frame = data.step_times
    if frame.is_empty():
        return ""
    parts = ['<section id="distribution"><h2>Step-time distribution</h2>']
    for (run_id,), run_frame in _groups(frame, ["run_id"]):
        panels = _groups(run_frame, ["level", "batch_size"])
        pw, ph = 170, 230
        width = max(1, len(panels)) * pw + 50
        svg = Svg(width, ph + 20, f"Step wall time per batch size, {data.run_name(run_id)}", "dist")
        ranks = sorted(set(run_frame["rank"].to_list()))
        for k, ((level, batch), group) in enumerate(panels):
            px = 50 + k * pw
            values = group["wall_ms"].to_list()
            q1, med, q3 = (_quantile(values, q) for q in (0.25, 0.5, 0.75))
            iqr = q3 - q1
            lo_fence, hi_fence = q1 - 1.5 * iqr, q3 + 1.5 * iqr
            inside = [v for v in values if lo_fence <= v <= hi_fence] or values
            vmin, vmax = min(values), max(values)
            pad = (vmax - vmin) * 0.08 or max(vmax * 0.05, 0.01)
            lo, hi = max(0.0, vmin - pad), vmax + pad
            top, bottom = 24, ph - 24

            def ypos(v: float, lo: float = lo, hi: float = hi, top: int = top, bottom: int = bottom) -> float:
                return bottom - (v - lo) / (hi - lo) * (bottom - top)

            n_steps, n_ranks = group["step_index"].n_unique(), group["rank"].n_unique()
            svg.text(px + pw / 2 - 10, 14, ((f"{level} " if level else "") + batch_label(batch)
                                            + f" · {_plural(n_steps, 'step')} × {_plural(n_ranks, 'rank')}"),
                     "middle", "label")
            svg.add(f'<line class="axisline" x1="{px}" x2="{px}" y1="{top}" y2="{bottom}"/>')
            yticks = _range_ticks(lo, hi)
            for t in yticks:
                svg.add(f'<line class="gridline" x1="{px}" x2="{px + pw - 30}" y1="{ypos(t):.1f}" y2="{ypos(t):.1f}"/>')
                svg.text(px - 4, ypos(t) + 3, tick_label(t, yticks), "end", "tick")
            bx, bw = px + 20, pw - 70
            svg.add(f'<rect class="box" x="{bx}" y="{ypos(q3):.1f}" width="{bw}" '
                    f'height="{max(ypos(q1) - ypos(q3), 1):.1f}" '
                    f'data-run="{attr(run_id)}" data-batch="{attr(batch)}" data-q1="{q1!r}" data-median="{med!r}" '
                    f'data-q3="{q3!r}"><title>median {num(med)} ms, quartiles {num(q1)} – {num(q3)} ms</title></rect>')
            svg.add(f'<line class="median" x1="{bx}" x2="{bx + bw}" y1="{ypos(med):.1f}" y2="{ypos(med):.1f}"/>')
            wlo, whi = min(inside), max(inside)
            cx = bx + bw / 2
            svg.add(f'<line class="whisker" x1="{cx}" x2="{cx}" y1="{ypos(whi):.1f}" y2="{ypos(q3):.1f}"/>'
                    f'<line class="whisker" x1="{cx}" x2="{cx}" y1="{ypos(q1):.1f}" y2="{ypos(wlo):.1f}"/>')
            for r in group.iter_rows(named=True):
                v = r["wall_ms"]
                outlier = v < lo_fence or v > hi_fence
                slot = ranks.index(r["rank"]) if r["rank"] in ranks else 0
                x = bx + 6 + (bw - 12) * ((slot + 0.5) / max(1, len(ranks))) + ((r["step_index"] % 5) - 2) * 1.5
                fill = OUTLIER_COLOR if outlier else RUN_COLORS[slot % len(RUN_COLORS)]
                svg.add(f'<circle class="step{" outlier" if outlier else ""}" cx="{x:.1f}" cy="{ypos(v):.1f}" '
                        f'r="{4 if outlier else 3}" fill="{fill}" data-run="{attr(run_id)}" data-batch="{attr(batch)}" '
                        f'data-rank="{attr(r["rank"])}" data-step="{attr(r["step_index"])}" data-ms="{attr(v)}">'
                        f"<title>rank {esc(r['rank'])}, step {esc(r['step_index'])}: {num(v)} ms"
                        + (" (outlier)" if outlier else "") + "</title></circle>")
                if outlier:  # labelled on the side of the dot that stays inside the panel
                    right = x - px < pw / 2
                    svg.text(x + 6 if right else x - 6, ypos(v) + 3, f"{num(v)} ms (r{r['rank']} s{r['step_index']})",
                             "start" if right else "end", "outlier")
        svg.text(12, ph / 2, "ms per step", "middle", "unit", f' transform="rotate(-90 12 {ph / 2:.1f})"')
        leg = ('<ul class="legend">' + "".join(
            f'<li><span class="sw dot" style="background:{RUN_COLORS[i % len(RUN_COLORS)]}"></span>rank {esc(r)}</li>'
            for i, r in enumerate(ranks)) + f'<li><span class="sw dot" style="background:{OUTLIER_COLOR}"></span>'
            "outlier (beyond 1.5 × the interquartile range)</li></ul>")
        parts.append(figure(f"Step wall time per batch size — {data.run_name(run_id)}",
                            "One dot per step and rank (GPU wall time); the box spans the quartiles, the line is the "
                            "median, whiskers reach the last step within 1.5 × IQR. Each panel has its own scale.",
                            svg.render() + leg))
    parts.append("</section>")
    return "".join(parts)


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _range_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    first = math.ceil(lo / step) * step
    out = []
    t = first
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def section_timeline(data: ReportData) -> str:
    if not data.timelines:
        return ""
    parts = ['<section id="timeline"><h2>One step on every rank</h2>']
    seen: list[str] = []
    runs: dict[str, list[Timeline]] = {}
    for t in data.timelines:
        runs.setdefault(t.run_id, []).append(t)
    for run_id, timelines in runs.items():
        for t in timelines:
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
            x0 = label_w
            px = TIMELINE_WIDTH / t.buckets
            for i, lane in enumerate(t.lanes):
                y = top + i * (lane_h + gap)
                svg.text(x0 - 8, y + lane_h / 2 + 4, f"rank {lane.rank}", "end", "label")
                by_cat: dict[str, list[tuple[int, int]]] = {}
                for a, b, cat in lane.segments:
                    by_cat.setdefault(cat, []).append((a, b))
                marks = []
                for cat in _legend_order(list(by_cat)):
                    if cat not in seen:
                        seen.append(cat)
                    spans = by_cat[cat]
                    columns = sum(b - a for a, b in spans)
                    d = "".join(f"M{_g(x0 + a * px)} {y}h{_g((b - a) * px)}v{lane_h}h-{_g((b - a) * px)}z"
                                for a, b in spans)
                    marks.append(f'<path class="{css_class(cat)}" d="{d}" data-category="{esc(cat)}" '
                                 f'data-columns="{columns}"><title>rank {esc(lane.rank)} · {esc(_slice_label(cat))}: '
                                 f"{columns} of {t.buckets} columns (≈ {num(columns * span_ms / t.buckets)} ms)"
                                 "</title></path>")
                start_x = x0 + (lane.start_ns - t.start_ns) / 1e6 * scale
                end_x = x0 + (lane.end_ns - t.start_ns) / 1e6 * scale
                svg.add(f'<g class="lane" data-run="{attr(run_id)}" data-batch="{attr(t.batch_size)}" '
                        f'data-step="{attr(t.step_index)}" data-rank="{attr(lane.rank)}" '
                        f'data-wall-ns="{attr(lane.wall_ns)}" '
                        f'data-start-ns="{attr(lane.start_ns)}" data-end-ns="{attr(lane.end_ns)}" '
                        f'data-offset-ns="{attr(lane.offset_ns)}" '
                        f'data-window-start-ns="{attr(t.start_ns)}" data-window-end-ns="{attr(t.end_ns)}" '
                        f'data-x-start="{start_x:.2f}" data-x-end="{end_x:.2f}" data-wait-ns="{attr(lane.wait_ns)}">'
                        + "".join(marks) + "</g>")
                note = f"{num(lane.wall_ns / 1e6)} ms"
                if lane.collectives:
                    note += f" · waited {num(lane.wait_ns / 1e6)} ms"
                svg.text(x0 + TIMELINE_WIDTH + 8, y + lane_h / 2 + 4, note, "start", "note")
            svg.x_axis(x0, x0 + TIMELINE_WIDTH, top + len(t.lanes) * (lane_h + gap), top - 4, ticks, scale,
                       "ms from the step's first GPU activity on any rank (reference rank's clock)")
            aligned = [ln for ln in t.lanes if ln.aligned]
            clock = ("clocks aligned to rank " + str(min(ln.rank for ln in t.lanes)) + "'s (offsets "
                     + ", ".join(f"rank {ln.rank} {ln.offset_ns / 1e3:+,.3f} µs" for ln in t.lanes) + ")"
                     if aligned else ("one rank" if len(t.lanes) == 1
                                      else "clocks not aligned (no paired collectives)"))
            why = (f"step {t.step_index}: the one of {t.candidates} whose wall time ({num(t.wall_ms)} ms, mean over "
                   f"ranks) is nearest the median ({num(t.median_wall_ms)} ms)")
            if t.inferred:
                why += "; steps inferred from idle gaps, so the ranks' steps are paired by index only"
            caught = sum(ln.wait_ns for ln in t.lanes)
            parts.append(figure(
                f"{data.run_name(run_id, t.level)} — {batch_label(t.batch_size)}: step {t.step_index} on "
                f"{len(t.lanes)} rank{'s' if len(t.lanes) != 1 else ''}",
                f"{esc(why)}; {esc(clock)}. Each pixel column shows the category that ran longest there, or why the "
                f"GPU was idle; blank before a rank's first and after its last GPU activity of the step. "
                + (f"Collective wait in this step: {num(caught / 1e6)} ms over all ranks. " if caught else "")
                + "Open it in Perfetto: <code>k25trace export perfetto --db "
                + esc(_shell_quote(data.source) if data.source else "FILE")
                + f" --run {esc(_shell_quote(data.run_name(run_id)))} --steps {esc(t.step_index)} -o step.json</code>.",
                svg.render()))
    parts.append(legend([(css_class(c), _slice_label(c)) for c in _legend_order(seen)]))
    parts.append("</section>")
    return "".join(parts)


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _g(value: float) -> str:
    """A coordinate, short: 212, 212.5, 212.33."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _slice_label(category: str) -> str:
    if category == "idle":
        return "idle"
    if category.startswith("idle:"):
        return "idle: " + IDLE_CAUSE_LABELS.get(category[5:], category[5:])
    return category


def _legend_order(categories: list[str]) -> list[str]:
    cats = [c for c in CATEGORY_ORDER if c in categories]
    cats += sorted(c for c in categories if c not in CATEGORY_ORDER and not c.startswith("idle"))
    cats += [c for c in ["idle"] + [f"idle:{k}" for k in IDLE_CAUSE_COLORS] if c in categories]
    return cats


def section_kernels(data: ReportData) -> str:
    if data.kernels.is_empty():
        return ""
    rows = list(data.kernels.iter_rows(named=True))
    vmax = max(r["ms_per_step"] or 0 for r in rows) or 1.0
    trs = []
    for i, r in enumerate(rows):
        w = 120 * (r["ms_per_step"] or 0) / vmax
        trs.append([str(i + 1), f'<span class="sw {css_class(r["category"])}"></span> {esc(r["category"])}',
                    f'<span class="kname" title="{esc(r["short_name"])}">{esc(_shorten(r["short_name"], 72))}</span>',
                    f'<span data-kernel="{esc(r["short_name"])}" data-category="{esc(r["category"])}" '
                    f'data-ms="{attr(r["ms_per_step"])}">{num(r["ms_per_step"])}</span>',
                    f'<svg width="124" height="10" class="inline"><rect class="{css_class(r["category"])}" x="0" y="1" '
                    f'width="{w:.1f}" height="8"/></svg>',
                    num(r["pct_of_step"], 2), num(r["calls_per_step"], 1), num(r["mean_us"], 2), num(r["min_us"], 2),
                    num(r["max_us"], 2)])
    return ('<section id="kernels"><h2>Top kernels</h2>'
            + figure(f"The {len(rows)} kernels that take the most time",
                     "Summed kernel time per step over the selected steps of every run and rank, by short name "
                     f"(<code>report --by kernel --top {esc(data.top)}</code>).",
                     table([("#", "r"), ("category", "l"), ("kernel", "l"), ("ms/step", "r"), ("", "l"),
                            ("% of step", "r"), ("calls/step", "r"), ("mean µs", "r"), ("min µs", "r"),
                            ("max µs", "r")], trs, "numbers kernels"))
            + "</section>")


def _shorten(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# ------------------------------------------------------------------------------------------------- the page

SCRIPT = """
(function () {
  var items = document.querySelectorAll('[data-legend]');
  function focus(cls, on) {
    document.querySelectorAll('svg [class*="c-"], .sw').forEach(function (el) {
      var c = el.getAttribute('class') || '';
      if (c.indexOf('c-') < 0) return;
      el.classList.toggle('dim', on && c.split(' ').indexOf(cls) < 0);
    });
  }
  items.forEach(function (li) {
    li.addEventListener('mouseenter', function () { focus(li.dataset.legend, true); });
    li.addEventListener('mouseleave', function () { focus(li.dataset.legend, false); });
  });
})();
"""


def style() -> str:
    classes = "".join(f".c-{c.replace('_', '-')}{{fill:{color};background:{color}}}"
                      for c, color in CATEGORY_COLORS.items())
    classes += f".c-idle{{fill:{IDLE_COLOR};background:{IDLE_COLOR}}}"
    classes += "".join(f".c-idle-{k}{{fill:{v};background:{v}}}" for k, v in IDLE_CAUSE_COLORS.items())
    return """
:root{--fg:#1f2328;--muted:#57606a;--line:#d0d7de}
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;\
color:var(--fg);margin:0;background:#fff}
main{max-width:1180px;margin:0 auto;padding:12px 24px 48px}
h1{font-size:22px;margin:10px 0 2px}\
h2{font-size:18px;margin:30px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
h3{font-size:15px;margin:10px 0 2px}p{margin:4px 0}\
code{font-size:12.5px;background:#f6f8fa;padding:0 3px;border-radius:3px;white-space:nowrap}
.muted,figcaption p{color:var(--muted)}figcaption p{font-size:12.5px;max-width:1000px}
.note{background:#fff8c5;border:1px solid #d4a72c;padding:6px 10px;border-radius:4px;margin:6px 0}
.empty{font-style:italic;color:var(--muted)}
nav{font-size:13px;margin:6px 0}nav a{margin-right:12px;color:#0969da;text-decoration:none}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
th,td{padding:2px 8px;border-bottom:1px solid #eaeef2;text-align:right;white-space:nowrap}
th{font-weight:600;background:#f6f8fa}td.l,th.l{text-align:left}
table.why th{white-space:normal;vertical-align:bottom}table.why td:nth-child(4){white-space:normal;min-width:260px}
details{margin:4px 0 10px}summary{cursor:pointer;color:#0969da;font-size:13px}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0;font-size:12.5px;list-style:none;padding:0}
.legend li{display:flex;align-items:center;gap:5px;cursor:default}
.sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px}.sw.dot{border-radius:6px}
figure{margin:10px 0 16px}.row{display:flex;flex-wrap:wrap;gap:16px}
svg{display:block;font-size:11px;overflow:visible}svg.inline{display:inline-block}
svg text{fill:#1f2328}svg text.tick,svg text.unit,svg text.note{fill:#57606a}svg text.label{font-weight:600}
svg text.outlier{fill:#c0392b;font-size:10px}
.axis line,.axisline{stroke:#8c959f}.grid line,.gridline{stroke:#eaeef2}
.box{fill:#eef1f4;stroke:#8c959f}.median{stroke:#1f2328;stroke-width:2}.whisker{stroke:#8c959f}
.scroll{overflow-x:auto;max-width:100%}.gantt path{shape-rendering:crispEdges}
.kname{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12px}
.dim{opacity:.12}
footer{margin-top:36px;font-size:12px;color:var(--muted)}
""" + classes


def render(data: ReportData, title: str | None = None) -> str:
    """The whole page as one string."""
    title = title or "k25trace report"
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in data.notes)
    sections = [section_runs(data), section_breakdown(data), section_scaling(data), section_comm(data),
                section_idle(data), section_distribution(data), section_timeline(data), section_kernels(data)]
    nav_items = [("runs", "Runs"), ("breakdown", "Breakdown"), ("scaling", "Step time vs batch"),
                 ("comm", "Collectives"), ("idle", "Idle"), ("distribution", "Distribution"),
                 ("timeline", "Timeline"), ("kernels", "Top kernels")]
    body = "".join(sections)
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in nav_items if f'id="{a}"' in body)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<meta name=\"generator\" content=\"k25trace {esc(__version__)}\"><title>{esc(title)}</title>"
        f"<style>{style()}</style></head><body><main>"
        f"<h1>{esc(title)}</h1>"
        f'<p class="muted">{esc(data.source)} · {esc(data.phase)} steps · generated {generated} by k25trace '
        f"{esc(__version__)}</p><nav>{nav}</nav>{notes}{body}"
        "<footer>Self-contained: no network, no external files. The same numbers on the command line: "
        "<code>k25trace report --db FILE [--by comm|idle|kernel|step]</code>.</footer>"
        f"</main><script>{SCRIPT}</script></body></html>"
    )


def build(con: duckdb.DuckDBPyConnection, *, source: str = "", phase: str | None = None, top: int = 20,
          title: str | None = None) -> tuple[str, ReportData]:
    """Collect and render: (the page, the data it shows)."""
    data = collect(con, source=source, phase=phase, top=top)
    return render(data, title), data


# ------------------------------------------------------------------------------------------------- comparison

VERDICT_COLORS = {"slower": "#c0392b", "faster": "#1e8449", "only in A": "#7f8c8d", "only in B": "#7f8c8d",
                  "negligible": "#8c959f", "within noise": "#8c959f"}


def _page(title: str, subtitle: str, notes: list[str], sections: list[str], nav_items: list[tuple[str, str]]) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(sections)
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in nav_items if f'id="{a}"' in body)
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<meta name=\"generator\" content=\"k25trace {esc(__version__)}\"><title>{esc(title)}</title>"
        f"<style>{style()}</style></head><body><main><h1>{esc(title)}</h1>"
        f'<p class="muted">{esc(subtitle)} · generated {generated} by k25trace {esc(__version__)}</p>'
        f"<nav>{nav}</nav>" + "".join(f'<p class="note">{esc(n)}</p>' for n in notes) + body
        + "<footer>Self-contained: no network, no external files. The same numbers on the command line: "
        "<code>k25trace compare … [--by category|kernel|step|comm|macro]</code>.</footer>"
        f"</main><script>{SCRIPT}</script></body></html>")


def render_comparison(comparison: Any, title: str | None = None) -> str:
    """A :class:`.compare.Comparison` as a page: the verdict, the sides, per step group the time by category
    of A beside B and what changed (delta per category with its 95 % interval, coloured by verdict), the step
    time, the collectives, the kernels that changed and the capture figures."""
    title = title or "k25trace comparison"
    sides = comparison.sides
    changes = comparison.changes()
    verdict = (f'<section id="verdict"><h2>Verdict: {esc(comparison.verdict)}</h2><p class="muted">'
               f"{esc(comparison.summary())}</p>"
               + ("<ul>" + "".join(f"<li>{esc(c)}</li>" for c in changes[:15]) + "</ul>" if changes else "")
               + (f'<p class="muted">… and {len(changes) - 15} more (the tables below)</p>'
                  if len(changes) > 15 else "")
               + table([(c, "l") for c in sides.columns],
                       [[esc("—" if v is None else v) for v in r] for r in sides.iter_rows()]) + "</section>")
    sections = [verdict, _compare_categories(comparison), _compare_table(
        "steps", "Step time", "Wall time percentiles over the steps of every rank, and the mean wall and busy time "
        "per step (a step of several ranks averaged over them for the test).", comparison.steps,
        ["group", "metric", "steps_a", "steps_b", "ms_a", "ms_b", "delta_ms", "delta_pct", "ci95_ms", "p_value",
         "verdict"]),
        _compare_table("comm", "Collectives across ranks", "Transfer and wait (launch / GPU) per step, A against B "
                       "(report --by comm on each side).", comparison.comm,
                       ["group", "category", "metric", "ms_a", "ms_b", "delta_ms", "delta_pct", "ci95_ms", "p_value",
                        "verdict"]),
        _compare_kernels(comparison),
        _compare_table("macro", "Capture levels", "What the clients measured (aggregates: no test).",
                       comparison.macro, list(comparison.macro.columns))]
    nav = [("verdict", "Verdict"), ("categories", "By category"), ("steps", "Step time"), ("comm", "Collectives"),
           ("kernels", "Kernels"), ("macro", "Capture levels")]
    subtitle = " vs ".join(f"{r['side']}: {r['runs'] or r['source']} [{r['selection']}]"
                           for r in sides.iter_rows(named=True))
    return _page(title, subtitle, list(comparison.notes), sections, nav)


def _compare_categories(comparison: Any) -> str:
    frame = comparison.categories
    if frame.is_empty():
        return ('<section id="categories"><h2>By category</h2><p class="empty">No step group on both sides.</p>'
                "</section>")
    parts = ['<section id="categories"><h2>By category</h2>']
    for (phase, group), rows in _groups(frame, ["phase", "group"]):
        by_cat = {r["category"]: r for r in rows.iter_rows(named=True)}
        order = [c for c in CATEGORY_ORDER if c in by_cat] + sorted(
            c for c in by_cat if c not in CATEGORY_ORDER and c not in ("overlap", "idle"))
        order += [c for c in ("overlap", "idle") if c in by_cat]
        totals = {side: sum((by_cat[c][f"ms_{side}"] or 0.0) for c in order) for side in ("a", "b")}
        label_w, note_w, width = 60, 200, 1100
        x0, x1 = label_w, width - note_w
        ticks = nice_ticks(max(totals.values()) or 1.0)
        scale = (x1 - x0) / ticks[-1]
        svg = Svg(width, 2 * 32 + 46, f"Milliseconds per step by category, A and B, {group}", "bars compare")
        svg.x_axis(x0, x1, 10 + 2 * 32, 6, ticks, scale, "ms per step (exclusive by category, overlap and idle: the "
                   "step's wall time)")
        for i, side in enumerate(("a", "b")):
            y = 10 + i * 32
            svg.text(x0 - 8, y + 15, side.upper(), "end", "label")
            x = x0
            for c in order:
                ms = by_cat[c][f"ms_{side}"] or 0.0
                svg.add(f'<rect class="seg {css_class(c)}" x="{x:.2f}" y="{y}" width="{ms * scale:.2f}" height="22" '
                        f'data-group="{esc(group)}" data-side="{side.upper()}" data-category="{esc(c)}" '
                        f'data-ms="{attr(by_cat[c][f"ms_{side}"])}"><title>{esc(c)}: {num(ms)} ms/step ({side.upper()})'
                        "</title></rect>")
                x += ms * scale
            svg.text(x1 + 10, y + 15, f"{num(totals[side])} ms/step", "start", "note")
        # what changed: delta per category, its 95 % interval, coloured by verdict
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
            dsvg.add(f'<line class="gridline" x1="{x:.1f}" x2="{x:.1f}" y1="4" '
                     f'y2="{len(ranked) * (row_h + gap) + 4}"/>')
            dsvg.text(x, len(ranked) * (row_h + gap) + 18, f"{t:+g}" if t else "0", "middle", "tick")
        dsvg.text(zero, len(ranked) * (row_h + gap) + 34, "B − A, ms per step (whiskers: 95 % interval)", "middle",
                  "unit")
        for i, c in enumerate(ranked):
            r = by_cat[c]
            y = 6 + i * (row_h + gap)
            d = r["delta_ms"] or 0.0
            w = d / lim * half
            changed = r["verdict"] in ("slower", "faster", "only in A", "only in B")
            pct = "new" if r["delta_pct"] is None else f"{r['delta_pct']:+.1f} %"
            dsvg.text(x0 + 100, y + 12, c, "end", "label")
            dsvg.add(f'<rect class="{css_class(c)}" x="{min(zero, zero + w):.2f}" y="{y}" width="{abs(w):.2f}" '
                     f'height="{row_h}" opacity="{1 if changed else 0.35}" data-group="{esc(group)}" '
                     f'data-category="{esc(c)}" data-delta="{attr(r["delta_ms"])}" data-verdict="{esc(r["verdict"])}">'
                     f"<title>{esc(c)}: {num(r['ms_a'])} → {num(r['ms_b'])} ms/step ({d:+.4f} ms, {esc(pct)}), "
                     f"{esc(r['verdict'])}</title></rect>")
            if r["ci95_ms"]:
                lo = zero + (d - r["ci95_ms"]) / lim * half
                hi = zero + (d + r["ci95_ms"]) / lim * half
                dsvg.add(f'<line class="whisker" x1="{max(lo, x0 + 104):.1f}" x2="{min(hi, x1):.1f}" '
                         f'y1="{y + row_h / 2}" y2="{y + row_h / 2}"/>')
            weight = ' font-weight="600"' if changed else ""
            dsvg.add(f'<text x="{x1 + 10}" y="{y + 12}" '
                     f'style="fill:{VERDICT_COLORS.get(r["verdict"], "#57606a")}"{weight}>'
                     f"{esc(r['verdict'])} ({esc(pct)})</text>")
        dsvg.add(f'<line class="axisline" x1="{zero:.1f}" x2="{zero:.1f}" y1="2" '
                 f'y2="{len(ranked) * (row_h + gap) + 6}"/>')
        parts.append(figure(f"{group} ({phase}): A {num(totals['a'])} ms → B {num(totals['b'])} ms per step",
                            f"{esc(by_cat[order[0]]['steps_a'])} steps in A, {esc(by_cat[order[0]]['steps_b'])} in B. "
                            "Top: each "
                            "side's step by category. Bottom: the change per category, largest first; bright bars "
                            "changed (Welch's t-test, Holm-adjusted), faint ones are within noise or negligible.",
                            svg.render() + dsvg.render()))
    seen = [c for c in CATEGORY_ORDER + ["overlap", "idle"] if c in set(frame["category"].to_list())]
    parts.append(legend([(css_class(c), c) for c in seen]))
    parts.append("</section>")
    return "".join(parts)


def _cell(value: Any, column: str) -> str:
    if value is None:
        return "—"
    if column == "p_value":
        return esc(f"{value:.3f}" if value >= 0.001 else f"{value:.1e}")
    if column == "verdict":
        color = VERDICT_COLORS.get(value)
        return f'<b style="color:{color}">{esc(value)}</b>' if value in VERDICT_COLORS and value not in (
            "within noise", "negligible") else esc(value)
    if column == "delta_pct":
        return esc(f"{value:+.1f} %")
    if column == "delta_ms":
        return esc(f"{value:+.4f}")
    if column == "category":
        return f'<span class="sw {css_class(value)}"></span> {esc(value)}'
    if isinstance(value, float):
        return esc(f"{value:,.4f}".rstrip("0").rstrip("."))
    return esc(_shorten(str(value), 90))


def _compare_table(anchor: str, title: str, caption: str, frame: pl.DataFrame, columns: list[str]) -> str:
    if frame.is_empty():
        return ""
    columns = [c for c in columns if c in frame.columns]
    rows = [[_cell(r[c], c) for c in columns] for r in frame.iter_rows(named=True)]
    aligns = [(c, "l" if c in ("group", "metric", "category", "verdict", "name_a", "name_b", "match", "level")
               else "r") for c in columns]
    return (f'<section id="{anchor}"><h2>{esc(title)}</h2><p class="muted">{esc(caption)}</p>'
            + table(aligns, rows, "numbers") + "</section>")


def _compare_kernels(comparison: Any, top: int = 12) -> str:
    frame = comparison.kernels
    if frame.is_empty():
        return ""
    from k25trace.analysis.compare import top_kernels

    kept, hidden = top_kernels(frame, top)
    body = _compare_table("kernels", "Kernels", "Matched by exact name, else by name family, else only in A / only "
                          f"in B; every changed kernel and the {top} largest others per group"
                          + (f" ({hidden} more rows within noise or negligible: k25trace compare --by kernel)."
                             if hidden else "."), kept,
                          ["group", "match", "category", "name_a", "name_b", "calls_a", "calls_b", "us_per_call_a",
                           "us_per_call_b", "ms_a", "ms_b", "delta_ms", "delta_pct", "p_value", "verdict"])
    return body
