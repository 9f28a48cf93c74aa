"""The page's first section: the findings (:mod:`k25trace.analysis.findings`) per run and batch size, ranked by the
most each fix alone could bring, each with its sentence, its saving, the commands that show it and its caveat."""

from __future__ import annotations

from k25trace.analysis.findings import Finding, FindingGroup, Findings
from k25trace.render.findings import saving_text
from k25trace.render.html.markup import attr, esc


def _finding(finding: Finding) -> str:
    commands = " ".join(f"<code>{esc(c)}</code>" for c in finding.evidence.split("; ") if c)
    caveat = f'<p class="muted">caveat: {esc(finding.trust)}</p>' if finding.trust else ""
    return (
        f'<li data-kind="{esc(finding.kind)}" data-saving-ms="{attr(finding.saving_ms)}" '
        f'data-saving-pct="{attr(finding.saving_pct)}"><p>{esc(finding.sentence)}</p>'
        f"<p><b>{esc(saving_text(finding))}</b> · {commands}</p>{caveat}</li>"
    )


def _group(group: FindingGroup) -> str:
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in group.notes)
    items = "".join(_finding(f) for f in group.findings)
    left = (
        f'<p class="muted">{group.left_out} finding{"" if group.left_out == 1 else "s"} below 1 % of the step '
        "left out.</p>"
        if group.left_out
        else ""
    )
    body = f"<ol>{items}</ol>" if items else '<p class="empty">Nothing above 1 % of the step.</p>'
    return (
        f'<div class="findings" data-run-id="{esc(group.run_id)}" data-batch-size="{attr(group.batch_size)}">'
        f"<h3>{esc(group.heading)}</h3>{notes}{body}{left}</div>"
    )


def section_findings(result: Findings, whole_runs: bool = False) -> str:
    """The findings section (``id="findings"``): the overlap rule, the notes, then one ranked list per group
    (``whole_runs``: the page is of one rank or trace, and the findings say they are of every rank)."""
    notes = "".join(f'<p class="note">{esc(n)}</p>' for n in result.notes)
    if whole_runs:
        notes = (
            '<p class="note">Of every rank of each run, not only the rank or trace chosen: a rank\'s wait is '
            "another rank's lateness.</p>" + notes
        )
    groups = "".join(_group(g) for g in result.groups) or (
        f'<p class="empty">No findings: no {esc(result.phase)} steps with GPU activity.</p>'
    )
    return (
        '<section id="findings"><h2>Findings</h2><p class="muted">Ranked by the most each fix alone could '
        f"bring (<code>report --by findings</code>). {esc(result.overlap)}</p>{notes}{groups}</section>"
    )
