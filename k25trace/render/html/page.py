"""The page shell (``page.html``, ``page.css``, ``page.js``: files of this package, filled by ``string.Template``)
and the report page of ``k25trace html``."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import cache
from importlib.resources import files
from string import Template

import duckdb

from k25trace import __version__
from k25trace.analysis import findings, page_data
from k25trace.analysis.page_data import PageFilters, ReportData
from k25trace.render.colors import CATEGORY_COLORS
from k25trace.render.html.findings import section_findings
from k25trace.render.html.layer_sections import section_layers
from k25trace.render.html.markup import IDLE_CAUSE_COLORS, IDLE_COLOR, esc
from k25trace.render.html.sections import section_breakdown, section_comm, section_idle, section_kernels, section_runs
from k25trace.render.html.step_sections import (
    TIMELINE_WIDTH,
    section_distribution,
    section_scaling,
    section_timeline,
)

REPORT_COMMAND = "k25trace report --db FILE [--by comm|idle|kernel|step|layer]"
"""The command line the report page's footer names for the same numbers."""


@cache
def asset(name: str) -> str:
    """A static part of the page, as the package holds it."""
    return files(__package__ or __name__).joinpath(name).read_text(encoding="utf-8")


def style() -> str:
    """The page's CSS: ``page.css``, then a fill and background class per category and idle cause."""
    classes = "".join(
        f".c-{c.replace('_', '-')}{{fill:{color};background:{color}}}" for c, color in CATEGORY_COLORS.items()
    )
    classes += f".c-idle{{fill:{IDLE_COLOR};background:{IDLE_COLOR}}}"
    classes += "".join(f".c-idle-{k}{{fill:{v};background:{v}}}" for k, v in IDLE_CAUSE_COLORS.items())
    return asset("page.css") + classes


def shell(
    title: str, subtitle: str, notes: list[str], sections: list[str], nav_items: list[tuple[str, str]], command: str
) -> str:
    """A whole page of every kind: its title, subtitle, notes, sections, a link to each section present, and the
    command line that prints the same numbers (``command``, markup) in the footer."""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    body = "".join(sections)
    nav = "".join(f'<a href="#{a}">{esc(t)}</a>' for a, t in nav_items if f'id="{a}"' in body)
    template = Template(asset("page.html").removesuffix("\n"))
    return template.substitute(
        version=esc(__version__),
        title=esc(title),
        style=style(),
        subtitle=esc(subtitle),
        generated=generated,
        nav=nav,
        notes="".join(f'<p class="note">{esc(n)}</p>' for n in notes),
        body=body,
        command=command,
        script=asset("page.js"),
    )


def render(data: ReportData, title: str | None = None, found: findings.Findings | None = None) -> str:
    """The whole page as one string (headed by the findings ``found``, when given)."""
    sections = [section_findings(found, whole_runs=data.filters.per_rank)] if found is not None else []
    sections += [
        section_runs(data),
        section_breakdown(data),
        section_scaling(data),
        section_comm(data),
        section_idle(data),
        section_distribution(data),
        section_timeline(data),
        section_layers(data),
        section_kernels(data),
    ]
    nav_items = [
        ("findings", "Findings"),
        ("runs", "Runs"),
        ("breakdown", "Breakdown"),
        ("scaling", "Step time vs batch"),
        ("comm", "Collectives"),
        ("idle", "Idle"),
        ("distribution", "Distribution"),
        ("timeline", "Timeline"),
        ("layers", "Layers"),
        ("kernels", "Top kernels"),
    ]
    chosen = filter_text(data)
    return shell(
        title or "k25trace report",
        f"{data.source} · {data.phase} steps" + (f" · {chosen}" if chosen else ""),
        data.notes + _filter_notes(data, chosen),
        sections,
        nav_items,
        REPORT_COMMAND + (f" {filter_options(data.filters)}" if chosen else ""),
    )


def filter_text(data: ReportData) -> str:
    """The filters applied, in words (empty without any): ``rank 0, batch size 8, run graph (TP2)``."""
    f = data.filters
    return ", ".join(
        part
        for part in (
            f"rank {f.rank}" if f.rank is not None else "",
            f"trace {f.trace_id}" if f.trace_id is not None else "",
            f"batch size {f.batch_size}" if f.batch_size is not None else "",
            f"run {data.run_name(f.run_id)}" if f.run_id is not None else "",
        )
        if part
    )


def filter_options(f: PageFilters) -> str:
    """The same filters as ``report`` options."""
    return " ".join(
        f"{option} {value}"
        for option, value in (
            ("--rank", f.rank),
            ("--trace", f.trace_id),
            ("--batch", f.batch_size),
            ("--run", f.run_id),
        )
        if value is not None
    )


def _filter_notes(data: ReportData, chosen: str) -> list[str]:
    """The page's note on its filters: what every section shows, and which sections stay across all ranks."""
    if not chosen:
        return []
    note = f"Only the steps of {chosen}."
    if data.filters.per_rank:
        note += (
            " The findings, the collectives and the late ranks of the layers are across all ranks of each run: they "
            "set one rank against the others. Every other section is of the rank or trace chosen."
        )
    return [note]


def build(
    con: duckdb.DuckDBPyConnection,
    *,
    source: str = "",
    phase: str | None = None,
    top: int = 20,
    title: str | None = None,
    filters: PageFilters | None = None,
) -> tuple[str, ReportData]:
    """Collect and render: (the page, the data it shows), of the steps ``filters`` select."""
    data = page_data.collect(con, source=source, phase=phase, top=top, buckets=TIMELINE_WIDTH, filters=filters)
    found = page_data.chosen_findings(findings.findings(con, phase=data.phase, db=source or "FILE"), data.filters)
    return render(data, title, found), data
