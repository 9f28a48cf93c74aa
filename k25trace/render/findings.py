"""The findings (:mod:`k25trace.analysis.findings`) laid out for a terminal: per run and batch size its heading, then
the ranked findings, each one sentence with its figures, the most it could save and the views that show it.

Lines are wrapped here, at word boundaries with a hanging indent, to at most 120 columns (fewer on a narrower
console); a number is never split from its unit or its sign (``< 0.001``, ``12.3 %``, ``4.367 ms``) nor an option
from its value (``--by comm``), and a line is never wider than the width asked for. The TUI's overview and
``k25trace report`` print the same lines.
"""

from __future__ import annotations

import re
import shlex
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from rich.console import Console
from rich.text import Text

from k25trace.analysis.findings import Finding, FindingGroup, Findings, as_dict, findings_frame
from k25trace.render import output

__all__ = [
    "MAX_WIDTH",
    "PER_GROUP",
    "all_command",
    "evidence_views",
    "finding_lines",
    "findings_text",
    "print_findings",
    "saving_text",
    "shown",
    "write",
]

MAX_WIDTH = 120
"""The widest the findings are laid out, however wide the terminal (longer lines read badly)."""

PER_GROUP = 5
"""Findings shown per run and batch size in the default report (``report --by findings`` shows them all)."""

_NBSP = "\u00a0"  # binds a number to its unit while wrapping; a plain space again in the output
_UNITS = r"(?:ms/step|ms|µs|us|ns|MB|GB/s|GB|B|%|×|ranks?|rank-steps?|engine steps?|steps?|kernels)"
_NUMBER_UNIT = re.compile(r"(\d) (?=" + _UNITS + r"(?![\w/-]))")
_SIGN_NUMBER = re.compile(r"([<>≤≥~]) (?=\d)")
_OPTION = re.compile(r"(--by|--phase) (?=[\w-])")  # an option stays with its value
_VIEW = re.compile(r"--by ([\w-]+)")
_PHASE = re.compile(r"--phase ([\w-]+)")


def saving_text(finding: Finding) -> str:
    """'saves up to 14.192 ms/step (43.3 %) without the wait', or what the finding says instead of a saving."""
    if finding.saving_ms is None:
        label = finding.saving_label
        return "no saving computed" + (f": {label}" if label and label != "no saving computed" else "")
    pct = "" if finding.saving_pct is None else f" ({finding.saving_pct:.1f} %)"
    return f"saves up to {finding.saving_ms:,.3f} ms/step{pct} {finding.saving_label}".rstrip()


def evidence_views(evidence: str) -> str:
    """The views of an evidence text of ``k25trace report`` commands, short: '--by comm, --by comm-site' (with
    '(--phase all)' when the commands take a phase); the text as it is when it names no view."""
    views = _VIEW.findall(evidence)
    if not views:
        return evidence
    phases = sorted(set(_PHASE.findall(evidence)))
    listed = ", ".join(f"--by {v}" for v in dict.fromkeys(views))
    return f"report {listed}" + (f" (--phase {phases[0]})" if len(phases) == 1 else "")


def shown(group: FindingGroup, per_group: int | None) -> tuple[Finding, ...]:
    """The findings of ``group`` shown when at most ``per_group`` are (None: all): the first in rank order, keeping
    the largest category (which has no saving and ranks last) in place of the last of them."""
    items = group.findings
    if per_group is None or len(items) <= per_group:
        return items
    top = list(items[:per_group])
    largest = next((f for f in items if f.kind == "largest_category"), None)
    if largest is not None and largest not in top and per_group > 1:
        top[-1] = largest
    return tuple(top)


def _wrap(text: str, width: int, first: str, rest: str, *, break_words: bool = False) -> list[str]:
    """``text`` wrapped to ``width`` at spaces, the first line after ``first``, the next after ``rest``; numbers
    stay with their units and signs."""
    bound = _SIGN_NUMBER.sub(r"\1" + _NBSP, _NUMBER_UNIT.sub(r"\1" + _NBSP, " ".join(text.split())))
    bound = _OPTION.sub(r"\1" + _NBSP, bound)
    lines = textwrap.wrap(
        bound,
        width=max(width, len(first) + 8),
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=break_words,
        break_on_hyphens=False,
    )
    out = []
    for line in lines:
        line = line.replace(_NBSP, " ")
        while len(line) > width:  # one unbreakable word longer than the line (a bound number and unit never is)
            out.append(line[:width])
            line = rest + line[width:]
        out.append(line)
    return out


def _group_lines(group: FindingGroup, width: int, per_group: int | None, more: str | None) -> Iterable[Text]:
    yield from (Text(line, style="bold") for line in _wrap(group.heading, width, "", "  "))
    for note in group.notes:
        yield from (Text(line, style="yellow") for line in _wrap(note, width, "  note: ", "        "))
    items = shown(group, per_group)
    if not items:
        yield Text("  nothing above 1 % of the step" if group.left_out else "  no findings", style="dim")
    for i, finding in enumerate(items, 1):
        number = f"{i:>3}. "
        indent = " " * len(number)
        yield from (Text(line) for line in _wrap(finding.sentence, width, number, indent))
        tail = f"{saving_text(finding)} · {evidence_views(finding.evidence)}"
        yield from (
            Text(line, style="green" if finding.saving_ms is not None else "cyan")
            for line in _wrap(tail, width, indent + "→ ", indent + "  ", break_words=True)
        )
        if finding.trust:
            yield from (
                Text(line, style="dim")
                for line in _wrap(f"caveat: {finding.trust}", width, indent + "  ", indent + "  ")
            )
    hidden = len(group.findings) - len(items)
    left = []
    if hidden:
        left.append(f"{hidden} more" + (f": {more}" if more else ""))
    if group.left_out:
        left.append(f"{group.left_out} below 1 % of the step left out")
    if left:
        yield from (
            Text(line, style="dim")
            for line in _wrap("; ".join(left) + ")", width, "     (", "      ", break_words=True)
        )


def finding_lines(
    result: Findings, width: int = MAX_WIDTH, *, per_group: int | None = PER_GROUP, more: str | None = None
) -> list[Text]:
    """Every line of the findings laid out at ``width`` columns (at most :data:`MAX_WIDTH`): a title with the
    overlap rule, the notes, then per group its heading and at most ``per_group`` findings (None: all); ``more`` is
    the command that shows them all, named under a group whose list was cut."""
    width = max(min(width, MAX_WIDTH), 40)
    lines = [
        Text(line, style="bold underline")
        for line in _wrap("Findings, ranked by the most each fix alone could bring", width, "", "  ")
    ]
    lines += [Text(line, style="dim") for line in _wrap(result.overlap, width, "", "")]
    for note in result.notes:
        lines += [Text(line, style="yellow") for line in _wrap(note, width, "note: ", "      ")]
    for group in result.groups:
        lines.append(Text(""))
        lines += list(_group_lines(group, width, per_group, more))
    if not result.groups:
        lines.append(Text(f"no {result.phase} steps with GPU activity: no findings"))
    return lines


def findings_text(
    result: Findings, width: int = MAX_WIDTH, *, per_group: int | None = PER_GROUP, more: str | None = None
) -> Text:
    """:func:`finding_lines` as one rich Text (lines joined by newlines), for a TUI panel or a page."""
    return Text("\n").join(finding_lines(result, width, per_group=per_group, more=more))


def print_findings(
    result: Findings, console: Console, *, per_group: int | None = PER_GROUP, more: str | None = None
) -> None:
    """Print the findings on ``console`` at its width (at most :data:`MAX_WIDTH`), then a blank line."""
    for line in finding_lines(result, console.width, per_group=per_group, more=more):
        console.print(line, soft_wrap=True, highlight=False)
    console.print()


def all_command(db: str | Path, phase: str) -> str:
    """The command that lists every finding of a database (``report --by findings``), as the user would type it."""
    return f"k25trace report --db {shlex.quote(str(db))} --by findings" + (
        "" if phase == "decode" else f" --phase {phase}"
    )


def write(result: Findings, fmt: str, out: IO[str] | None = None) -> None:
    """``report --by findings``: JSON is :func:`~k25trace.analysis.findings.as_dict` exactly, CSV and Markdown
    :func:`~k25trace.analysis.findings.findings_frame`, a table every finding laid out at the terminal's width."""
    out = out or sys.stdout
    if fmt == "json":
        output.write_json(as_dict(result), out)
    elif fmt in ("csv", "markdown"):
        output.write(findings_frame(result), fmt, out)
    else:
        print_findings(result, Console(file=out, width=None if out.isatty() else MAX_WIDTH), per_group=None)
