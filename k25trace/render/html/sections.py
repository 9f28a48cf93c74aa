"""The page's sections on the step's parts: the runs, where the step time goes, the collectives across ranks, why
the GPU is idle, and the top kernels."""

from __future__ import annotations

from typing import Any

import polars as pl

from k25trace.analysis import page_data
from k25trace.analysis.page_data import Bar, ReportData, groups
from k25trace.render.html import markup
from k25trace.render.html.markup import (
    CATEGORY_ORDER,
    IDLE_CAUSE_COLORS,
    IDLE_CAUSE_LABELS,
    attr,
    bar_frame,
    batch_label,
    esc,
    figure,
    legend,
    legend_order,
    num,
    plural,
    shorten,
    table,
)

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
IDLE_PARTS = [
    ("host_ms", "host"),
    ("sync_ms", "sync"),
    ("launch_overhead_ms", "launch"),
    ("device_ms", "device"),
    ("unknown_ms", "unknown"),
]
BETWEEN_PARTS = [
    ("between_host_ms", "host"),
    ("between_sync_ms", "sync"),
    ("between_launch_ms", "launch"),
    ("between_device_ms", "device"),
    ("between_busy_ms", "busy"),
]


def section_runs(data: ReportData) -> str:
    """The runs: ranks, GPUs, steps, batch sizes, where the steps come from and the clock alignment."""
    rows = []
    for r in data.runs.iter_rows(named=True):
        batches = ", ".join(str(b) for b in (r["batch_sizes"] or [])) or "—"
        align = r["alignment"] or ("one rank" if r["ranks"] == 1 else "not aligned")
        if r["residual_p90_us"] is not None:
            align += f" (p90 residual {num(r['residual_p90_us'], 2)} µs)"
        rows.append(
            [
                f'<span title="{esc(r["run_id"])}">{esc(data.run_name(r["run_id"], r["level"]))}</span>',
                esc(r["ranks"]),
                esc(r["world_size"] if r["world_size"] is not None else "?"),
                esc(r["devices"]),
                esc(r["steps"]),
                esc(r["decode_steps"]),
                esc(batches),
                esc("inferred from idle gaps" if r["inferred"] else "markers"),
                esc(align),
            ]
        )
    return (
        '<section id="runs"><h2>Runs</h2><p class="muted">A run is the ranks of one capture level or one '
        "directory of rank files (<code>trace_runs</code>); hover a name for its full id.</p>"
        + table(
            [
                ("run", "l"),
                ("ranks", "r"),
                ("world size", "r"),
                ("GPU", "l"),
                ("steps", "r"),
                ("decode steps", "r"),
                ("batch sizes", "l"),
                ("steps from", "l"),
                ("clock alignment", "l"),
            ],
            rows,
        )
        + "</section>"
    )


def section_breakdown(data: ReportData) -> str:
    """Stacked bars of the step time by category per run and batch size, with their numbers."""
    bars = page_data.bars(data.batch, CATEGORY_ORDER)
    if not bars:
        return (
            '<section id="breakdown"><h2>Where the step time goes</h2><p class="empty">No steps with GPU '
            f"activity for phase {esc(data.phase)}.</p></section>"
        )
    parts = ['<section id="breakdown"><h2>Where the step time goes</h2>']
    seen: list[str] = []
    for run_id, run_bars in _by_run(bars):
        row_h, gap = 22, 10
        frame = bar_frame(
            f"Milliseconds per step by category, {data.run_name(run_id)}",
            "bars breakdown",
            vmax=max(b.step_ms for b in run_bars),
            rows_height=len(run_bars) * (row_h + gap),
            label_w=90,
            note_w=330,
        )
        svg, x0, x1, scale = frame.svg, frame.x0, frame.x1, frame.scale
        frame.axis("ms per step (mean over steps and ranks; the bar is the step's GPU wall time)")
        for i, b in enumerate(run_bars):
            y = frame.top + i * (row_h + gap)
            svg.text(
                x0 - 8, y + row_h / 2 + 4, (f"{b.level} " if b.level else "") + batch_label(b.batch), "end", "label"
            )
            x: float = x0
            marks = []
            for seg in b.segments:
                ms = seg["ms_per_step"] or 0.0
                w = ms * scale
                cat = seg["category"]
                if cat not in seen:
                    seen.append(cat)
                title = f"{cat}: {num(ms)} ms/step, {num(seg['pct_of_step'], 2)} % of the step"
                if seg["kernel_ms_per_step"] is not None:
                    title += (
                        f"; kernel time {num(seg['kernel_ms_per_step'])} ms/step, "
                        f"{num(seg['calls_per_step'], 1)} calls/step"
                    )
                marks.append(
                    f'<rect class="seg {markup.css_class(cat)}" x="{x:.2f}" y="{y}" width="{w:.2f}" '
                    f'height="{row_h}" data-run="{attr(run_id)}" data-batch="{attr(b.batch)}" '
                    f'data-category="{esc(cat)}" data-ms="{attr(seg["ms_per_step"])}" '
                    f'data-pct="{attr(seg["pct_of_step"])}"><title>{esc(title)}</title></rect>'
                )
                x += w
            svg.add(
                f'<g class="bar" data-run="{attr(run_id)}" data-batch="{attr(b.batch)}" '
                f'data-step-ms="{attr(b.step_ms)}" data-x0="{x0}" data-scale="{scale!r}">' + "".join(marks) + "</g>"
            )
            svg.text(
                x1 + 10,
                y + row_h / 2 + 4,
                f"{num(b.step_ms)} ms (median {num(b.median_ms)}) · {plural(b.steps, 'rank-step')} on "
                f"{b.ranks} rank{'s' if b.ranks != 1 else ''} · idle {num(b.idle_pct, 1)} %",
                "start",
                "note",
            )
        parts.append(
            figure(
                f"Milliseconds per step by category — {data.run_name(run_id)}",
                "Exclusive GPU time per category (only that category running, over all streams), then <b>overlap</b> "
                "(two or more categories at once) and <b>idle</b> (no GPU activity): together the step's wall time. "
                "Means over the steps of all ranks (<code>k25trace report</code>).",
                svg.render(),
            )
        )
        parts.append(_breakdown_table(run_id, run_bars))
    parts.append(legend([(markup.css_class(c), c) for c in legend_order(seen)]))
    parts.append("</section>")
    return "".join(parts)


def _breakdown_table(run_id: str, run_bars: list[Bar]) -> str:
    cats: list[str] = []
    for b in run_bars:
        for seg in b.segments:
            if seg["category"] not in cats:
                cats.append(seg["category"])
    cells = {(b.batch, s["category"]): s for b in run_bars for s in b.segments}
    headers = [("category", "l")] + [
        ((f"{b.level} " if b.level else "") + batch_label(b.batch) + " ms/step (%)", "r") for b in run_bars
    ]
    rows = []
    for cat in cats:
        row = [f'<span class="sw {markup.css_class(cat)}"></span> {esc(cat)}']
        for b in run_bars:
            s = cells.get((b.batch, cat))
            row.append(
                ""
                if s is None
                else f'<span data-run="{attr(run_id)}" data-batch="{attr(b.batch)}" data-category="{esc(cat)}" '
                f'data-ms="{attr(s["ms_per_step"])}">{num(s["ms_per_step"])}</span> '
                f'<span class="muted">({num(s["pct_of_step"], 1)} %)</span>'
            )
        rows.append(row)
    rows.append(["<b>step</b>"] + [f"<b>{num(b.step_ms)}</b>" for b in run_bars])
    return f"<details><summary>The numbers</summary>{table(headers, rows, 'numbers')}</details>"


def _by_run(bars: list[Bar]) -> list[tuple[str, list[Bar]]]:
    out: dict[str, list[Bar]] = {}
    for b in bars:
        out.setdefault(b.run_id, []).append(b)
    return list(out.items())


def section_comm(data: ReportData) -> str:
    """Per run, each collective's time per step as transfer and wait, the wait split by why the late rank was
    late, and the straggler; with the numbers of ``report --by comm``."""
    if data.comm.is_empty():
        single = data.runs.filter(pl.col("ranks") > 1).is_empty()
        why = "every run has one rank" if single else "no collective could be paired across ranks"
        return (
            f'<section id="comm"><h2>Collectives across ranks</h2><p class="empty">Nothing to show: {why}.'
            "</p></section>"
        )
    parts = ['<section id="comm"><h2>Collectives across ranks</h2>']
    if data.filters.per_rank:
        parts.append(
            '<p class="note">Across all ranks of each run, not only the rank or trace chosen: a collective pairs '
            "the ranks, and one rank's wait is another's lateness.</p>"
        )
    for (run_id,), group in groups(data.comm, ["run_id"]):
        rows = list(group.iter_rows(named=True))
        parts.append(_comm_chart(data, run_id, rows))
        parts.append(_comm_table(run_id, rows))
        parts.append(f"<h3>Why the late rank was late — {esc(data.run_name(run_id))}</h3>")
        parts.append(_why_late_table(run_id, rows))
        parts.append(
            '<p class="muted">The wait split (ms per step): by why the late rank was late, then by position '
            "only (<code>report --by comm</code>'s launch_wait / gpu_wait).</p>"
        )
    parts.append("</section>")
    return "".join(parts)


def _comm_chart(data: ReportData, run_id: str, rows: list[dict[str, Any]]) -> str:
    row_h, gap = 20, 10
    frame = bar_frame(
        f"Collective time per step, transfer vs wait, {data.run_name(run_id)}",
        "bars comm",
        vmax=max(r["ms_per_step"] or 0 for r in rows),
        rows_height=len(rows) * (row_h + gap),
        label_w=150,
        note_w=440,
    )
    svg, x0, x1, scale = frame.svg, frame.x0, frame.x1, frame.scale
    frame.axis("ms per step (mean over ranks): transfer + wait")
    for i, r in enumerate(rows):
        y = frame.top + i * (row_h + gap)
        svg.text(
            x0 - 8,
            y + row_h / 2 + 4,
            (f"{r['level']} " if r["level"] else "") + f"{batch_label(r['batch_size'])} {r['category']}",
            "end",
            "label",
        )
        parts_ms: list[tuple[str, str, Any, str | None]] = [
            ("transfer", "transfer", r["transfer_ms_per_step"], None),
            *((part, label, r[column], colour) for column, part, label, colour in WAIT_PARTS),
        ]
        x: float = x0
        for part, label, ms, colour in parts_ms:
            ms = ms or 0.0
            w = ms * scale
            fill = f'class="{markup.css_class(r["category"])}"' if colour is None else f'fill="{colour}"'
            svg.add(
                f'<rect {fill} x="{x:.2f}" y="{y}" width="{w:.2f}" height="{row_h}" data-run="{attr(run_id)}" '
                f'data-batch="{attr(r["batch_size"])}" data-category="{esc(r["category"])}" '
                f'data-part="{part}" data-ms="{attr(ms)}"><title>{esc(label)}: {num(ms)} ms/step'
                f"</title></rect>"
            )
            x += w
        straggler = (
            "no wait"
            if r["straggler_rank"] is None
            else f"straggler rank {r['straggler_rank']} ({num(r['straggler_wait_pct'], 0)} % of the wait)"
        )
        svg.text(
            x1 + 10,
            y + row_h / 2 + 4,
            f"wait {num(r['wait_pct'], 1)} % · {straggler} · last most often: "
            f"rank {r['last_rank']} ({num(r['last_pct'], 0)} %)",
            "start",
            "note",
        )
    leg = (
        '<ul class="legend">'
        f'<li><span class="sw {markup.css_class(rows[0]["category"])}"></span>transfer (shortest duration across '
        "ranks, in the collective's colour)</li><li>wait, by why the late rank was late:</li>"
        + "".join(
            f'<li><span class="sw" style="background:{colour}"></span>{esc(label)}</li>'
            for _, _, label, colour in WAIT_PARTS
        )
        + "</ul>"
    )
    return figure(
        f"Transfer vs wait per step — {data.run_name(run_id)}",
        "Each paired collective's <b>transfer</b> is its shortest duration across ranks; the rest of each rank's "
        "duration is <b>wait</b> for the rank that arrived last. The wait is split by why that rank was late, "
        "from what it did since the previous collective against the rank that was on time: its <b>host "
        "launched late</b> (host-bound idle, launch overhead), it waited on a host <b>sync</b>, it ran "
        "<b>longer GPU work</b>, it <b>waited on the device</b> (a stream, event or graph edge), or <b>other</b> "
        "(e.g. at the run's first collective, with none before it to compare). The <b>straggler</b> is the "
        "rank whose lateness caused the most wait (<code>report --by comm</code>).",
        svg.render() + leg,
    )


def _comm_table(run_id: str, rows: list[dict[str, Any]]) -> str:
    trs = []
    for r in rows:
        trs.append(
            [
                esc(f"{r['level']} " if r["level"] else "") + esc(batch_label(r["batch_size"])),
                f'<span class="sw {markup.css_class(r["category"])}"></span> {esc(r["category"])}',
                esc(r["steps"]),
                num(r["calls_per_step"], 1),
                num(r["ms_per_step"]),
                num(r["transfer_ms_per_step"]),
                num(r["wait_ms_per_step"]),
                num(r["wait_pct"], 1),
                f"{num(r['skew_p50_us'], 1)} / {num(r['skew_p90_us'], 1)} / {num(r['skew_max_us'], 1)}",
                f'<b data-run="{attr(run_id)}" data-batch="{attr(r["batch_size"])}" '
                f'data-category="{esc(r["category"])}" data-straggler="{attr(r["straggler_rank"])}">'
                f"{esc('—' if r['straggler_rank'] is None else r['straggler_rank'])}</b>",
                num(r["straggler_wait_ms_per_step"]),
                num(r["straggler_wait_pct"], 1),
                esc(r["last_rank"]),
                num(r["last_pct"], 1),
                esc(r["alignment"] or "—"),
            ]
        )
    return table(
        [
            ("batch", "l"),
            ("collective", "l"),
            ("steps", "r"),
            ("calls/step", "r"),
            ("ms/step", "r"),
            ("transfer ms", "r"),
            ("wait ms", "r"),
            ("wait %", "r"),
            ("skew p50/p90/max µs", "r"),
            ("straggler", "r"),
            ("its wait ms/step", "r"),
            ("its share %", "r"),
            ("last rank", "r"),
            ("last %", "r"),
            ("alignment", "l"),
        ],
        trs,
        "numbers",
    )


def _why_late_table(run_id: str, rows: list[dict[str, Any]]) -> str:
    why_rows = []
    for r in rows:
        keys = f'data-run="{attr(run_id)}" data-batch="{attr(r["batch_size"])}" data-category="{esc(r["category"])}"'
        why_rows.append(
            [
                esc(f"{r['level']} " if r["level"] else "") + esc(batch_label(r["batch_size"])),
                f'<span class="sw {markup.css_class(r["category"])}"></span> {esc(r["category"])}',
                num(r["wait_ms_per_step"]),
                f'<span {keys} data-why-late="{attr(r["why_late"])}">{esc(r["why_late"] or "—")}</span>',
            ]
            + [
                f'<span {keys} data-column="{column}" data-ms="{attr(r[column])}">{num(r[column])}</span>'
                for column, *_ in WAIT_PARTS + WAIT_POSITIONS
            ]
        )
    return table(
        [("batch", "l"), ("collective", "l"), ("wait ms", "r"), ("why late", "l")]
        + [(label.split(" (")[0], "r") for _, _, label, _ in WAIT_PARTS]
        + [(label, "r") for _, label in WAIT_POSITIONS],
        why_rows,
        "numbers why",
    )


def section_idle(data: ReportData) -> str:
    """Per run, the idle time per step by cause, in the step and between steps, with its numbers."""
    if data.idle.is_empty():
        return ""
    parts = ['<section id="idle"><h2>Why the GPU is idle</h2>']
    for (run_id,), group in groups(data.idle, ["run_id"]):
        parts.append(_idle_chart(data, run_id, list(group.iter_rows(named=True))))
    parts.append(legend([(markup.css_class("idle:" + c), IDLE_CAUSE_LABELS[c]) for c in IDLE_CAUSE_COLORS]))
    parts.append(_idle_table(data) + "</section>")
    return "".join(parts)


def _idle_chart(data: ReportData, run_id: str, rows: list[dict[str, Any]]) -> str:
    """One run's figure: per batch size a bar of the idle in the step and one of the idle between steps, by cause."""
    row_h, gap = 16, 6
    frame = bar_frame(
        f"GPU idle time per step by cause, {data.run_name(run_id)}",
        "bars idle",
        vmax=max(max(r["idle_ms"] or 0, sum(r[c] or 0 for c, _ in BETWEEN_PARTS)) for r in rows),
        rows_height=len(rows) * 2 * (row_h + gap) + len(rows) * 6,
        label_w=150,
        note_w=300,
    )
    svg, x0, x1, scale = frame.svg, frame.x0, frame.x1, frame.scale
    y = frame.top
    for r in rows:
        for kind, spec, total_label in (
            (
                "in_step",
                IDLE_PARTS,
                f"idle in the step {num(r['idle_ms'])} ms ({num(r['idle_pct'], 1)} % of {num(r['wall_ms'])})",
            ),
            (
                "between",
                BETWEEN_PARTS,
                f"between steps {num(r['between_ms'])} ms ({num(r['between_pct_of_span'], 1)} % of the GPU span)",
            ),
        ):
            svg.text(
                x0 - 8,
                y + row_h / 2 + 4,
                f"{batch_label(r['batch_size'])} " + ("in step" if kind == "in_step" else "between"),
                "end",
                "label",
            )
            x: float = x0
            for column, cause in spec:
                ms = r[column] or 0.0
                w = ms * scale
                svg.add(
                    f'<rect class="{markup.css_class("idle:" + cause)}" x="{x:.2f}" y="{y}" '
                    f'width="{w:.2f}" height="{row_h}" data-run="{attr(run_id)}" '
                    f'data-batch="{attr(r["batch_size"])}" data-kind="{kind}" data-column="{column}" '
                    f'data-ms="{attr(r[column])}"><title>{esc(IDLE_CAUSE_LABELS[cause])}: {num(ms)} ms/step'
                    "</title></rect>"
                )
                x += w
            svg.text(x1 + 10, y + row_h / 2 + 4, total_label, "start", "note")
            y += row_h + gap
        y += 6
    frame.axis("ms per step (mean over steps and ranks)")
    return figure(
        f"Idle time per step by cause — {data.run_name(run_id)}",
        "Every hole in a step's GPU activity, and every hole before it since the previous step, classified by "
        "the activity that ends it and its launch call: <b>host-bound</b> (launched after the GPU went idle), "
        "<b>after a host sync</b>, <b>launch overhead</b> (launch call start → GPU start) and "
        "<b>device-bound</b> "
        "(launched before: a dependency) (<code>report --by idle</code>).",
        svg.render(),
    )


def _idle_table(data: ReportData) -> str:
    """The numbers of ``report --by idle``, one row per run and batch size."""
    trs = [
        [
            esc(data.run_name(r["run_id"])),
            esc(batch_label(r["batch_size"])),
            esc(r["steps"]),
            num(r["wall_ms"]),
            num(r["idle_ms"]),
            num(r["host_ms"]),
            num(r["sync_ms"]),
            num(r["launch_overhead_ms"]),
            num(r["device_ms"]),
            num(r["unknown_ms"]),
            num(r["between_ms"]),
            num(r["between_pct_of_span"], 2),
        ]
        for r in data.idle.iter_rows(named=True)
    ]
    return (
        "<details><summary>The numbers</summary>"
        + table(
            [
                ("run", "l"),
                ("batch", "l"),
                ("steps", "r"),
                ("wall ms", "r"),
                ("idle ms", "r"),
                ("host", "r"),
                ("sync", "r"),
                ("launch overhead", "r"),
                ("device", "r"),
                ("unknown", "r"),
                ("between ms", "r"),
                ("between % of span", "r"),
            ],
            trs,
            "numbers",
        )
        + "</details>"
    )


def section_kernels(data: ReportData) -> str:
    """The top kernels by time per step, each with a small bar."""
    if data.kernels.is_empty():
        return ""
    rows = list(data.kernels.iter_rows(named=True))
    vmax = max(r["ms_per_step"] or 0 for r in rows) or 1.0
    trs = []
    for i, r in enumerate(rows):
        w = 120 * (r["ms_per_step"] or 0) / vmax
        cls = markup.css_class(r["category"])
        trs.append(
            [
                str(i + 1),
                f'<span class="sw {cls}"></span> {esc(r["category"])}',
                f'<span class="kname" title="{esc(r["short_name"])}">{esc(shorten(r["short_name"], 72))}</span>',
                f'<span data-kernel="{esc(r["short_name"])}" data-category="{esc(r["category"])}" '
                f'data-ms="{attr(r["ms_per_step"])}">{num(r["ms_per_step"])}</span>',
                f'<svg width="124" height="10" class="inline"><rect class="{cls}" x="0" y="1" '
                f'width="{w:.1f}" height="8"/></svg>',
                num(r["pct_of_step"], 2),
                num(r["calls_per_step"], 1),
                num(r["mean_us"], 2),
                num(r["min_us"], 2),
                num(r["max_us"], 2),
            ]
        )
    return (
        '<section id="kernels"><h2>Top kernels</h2>'
        + figure(
            f"The {len(rows)} kernels that take the most time",
            "Summed kernel time per step over the selected steps of every run and rank, by short name "
            f"(<code>report --by kernel --top {esc(data.top)}</code>).",
            table(
                [
                    ("#", "r"),
                    ("category", "l"),
                    ("kernel", "l"),
                    ("ms/step", "r"),
                    ("", "l"),
                    ("% of step", "r"),
                    ("calls/step", "r"),
                    ("mean µs", "r"),
                    ("min µs", "r"),
                    ("max µs", "r"),
                ],
                trs,
                "numbers kernels",
            ),
        )
        + "</section>"
    )
