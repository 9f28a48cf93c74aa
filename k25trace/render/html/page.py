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
from k25trace.analysis.page_data import ReportData
from k25trace.render.colors import CATEGORY_COLORS
from k25trace.render.html.findings import section_findings
from k25trace.render.html.markup import IDLE_CAUSE_COLORS, IDLE_COLOR, esc
from k25trace.render.html.sections import section_breakdown, section_comm, section_idle, section_kernels, section_runs
from k25trace.render.html.step_sections import (
    TIMELINE_WIDTH,
    section_distribution,
    section_scaling,
    section_timeline,
)

REPORT_COMMAND = "k25trace report --db FILE [--by comm|idle|kernel|step]"
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
    sections = [section_findings(found)] if found is not None else []
    sections += [
        section_runs(data),
        section_breakdown(data),
        section_scaling(data),
        section_comm(data),
        section_idle(data),
        section_distribution(data),
        section_timeline(data),
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
        ("kernels", "Top kernels"),
    ]
    return shell(
        title or "k25trace report",
        f"{data.source} · {data.phase} steps",
        data.notes,
        sections,
        nav_items,
        REPORT_COMMAND,
    )


def build(
    con: duckdb.DuckDBPyConnection,
    *,
    source: str = "",
    phase: str | None = None,
    top: int = 20,
    title: str | None = None,
) -> tuple[str, ReportData]:
    """Collect and render: (the page, the data it shows)."""
    data = page_data.collect(con, source=source, phase=phase, top=top, buckets=TIMELINE_WIDTH)
    return render(data, title, findings.findings(con, phase=data.phase, db=source or "FILE")), data
