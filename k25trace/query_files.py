"""The named queries: the ``queries/*.sql`` files, their headers, their statements.

Every SQL statement the project runs lives in ``queries/*.sql`` (one query per file). Each file opens with a
header of comment lines: the summary in words, and the fields ``-- key: value`` of :data:`HEADER_KEYS`::

    -- name: steps
    -- creates: steps (table)
    -- reads: gpu_events, launches, annotations
    -- params: $trace_id
    -- grain: one row per engine step per trace

The parser checks that the declared parameters are the ``$name`` tokens the SQL uses. ``-- optional: $batch_size,
$run_id`` names declared parameters that are NULL when not given (filters added after callers were written). A
field wraps onto the comment lines right after it that are indented by two spaces or more (``--   more text``).
Any other comment line, ``-- word: text`` shaped or not, belongs to the summary. :mod:`k25trace.db` runs the
queries.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from k25trace.errors import K25Error

PARAM_RE = re.compile(r"(?<![:$\w])\$([A-Za-z_][A-Za-z0-9_]*)")
"""A ``$name`` parameter in SQL text (not a ``::`` cast, not inside another name)."""

HEADER_KEYS = frozenset({"name", "creates", "reads", "params", "optional", "grain"})
"""The header's fields; any other comment line of the header is part of the summary."""

_HEADER_RE = re.compile(r"^--\s*([a-z_]+)\s*:\s*(.*)$")

_CONTINUATION_RE = re.compile(r"^-- {2,}\S")
"""A field's wrapped text: the comment line right after it, indented by two spaces or more after ``--``."""


def queries_dir() -> Path:
    """Where the SQL files are: ``k25trace/queries`` (a link to the checkout's ``queries/``, a folder in the wheel)."""
    here = Path(__file__).resolve().parent / "queries"
    if here.is_dir():
        return here
    raise K25Error(f"the SQL files are missing from this installation (no folder {here})")


@dataclass(frozen=True)
class NamedQuery:
    """One ``queries/*.sql`` file: its header fields and its SQL text."""

    name: str
    path: Path
    sql: str
    summary: str = ""
    creates: str = ""
    reads: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    grain: str = ""
    optional: tuple[str, ...] = ()
    header: dict[str, str] = field(default_factory=dict)

    @property
    def is_report(self) -> bool:
        """A query that returns rows (no ``creates:``), as opposed to one that builds a table."""
        return not self.creates


def _split_header(text: str) -> tuple[dict[str, str], list[str]]:
    """The header fields (a repeated key's values joined) and the summary lines of a query file's opening
    comments."""
    header: dict[str, str] = {}
    summary_lines: list[str] = []
    open_key: str | None = None  # the field the previous line belonged to (its continuation lines are indented)
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        match = _HEADER_RE.match(line)
        if match and match.group(1) in HEADER_KEYS:
            key, value = match.group(1), match.group(2).strip()
            header[key] = (header[key] + " " + value).strip() if key in header else value
            open_key = key
        elif open_key is not None and _CONTINUATION_RE.match(line):
            header[open_key] = (header[open_key] + " " + line[2:].strip()).strip()
        else:
            open_key = None
            if line.strip("- "):
                summary_lines.append(line.lstrip("- ").rstrip())
    return header, summary_lines


def _names(field_text: str) -> tuple[str, ...]:
    """``"$a, $b"`` → ``("a", "b")``."""
    return tuple(p.strip().lstrip("$") for p in field_text.split(",") if p.strip())


def parse_query_file(path: Path) -> NamedQuery:
    """Read one query file; K25Error when its header's name or parameters do not match the file and its SQL."""
    text = path.read_text(encoding="utf-8")
    header, summary_lines = _split_header(text)
    name = header.get("name", path.stem)
    if name != path.stem:
        raise K25Error(f"{path}: header name {name!r} does not match the file name")
    declared = tuple(p for p in _names(header.get("params", "")) if p != "none")
    used = sorted(set(PARAM_RE.findall(strip_sql_comments(text))))
    if sorted(set(declared)) != used:
        raise K25Error(f"{path}: header declares params {sorted(set(declared))} but the SQL uses {used}")
    reads = tuple(r.strip() for r in header.get("reads", "").split(",") if r.strip())
    optional = _names(header.get("optional", ""))
    if not set(optional) <= set(declared):
        raise K25Error(f"{path}: header's optional params {sorted(set(optional) - set(declared))} are not declared")
    return NamedQuery(
        name=name,
        path=path,
        sql=text,
        summary=" ".join(summary_lines),
        creates=header.get("creates", ""),
        reads=reads,
        params=declared,
        grain=header.get("grain", ""),
        header=header,
        optional=optional,
    )


def split_statements(sql: str) -> list[str]:
    """Split a query file into statements at semicolons that end a line (the project's SQL style)."""
    parts = re.split(r";[ \t]*(?:--[^\n]*)?\n", sql + "\n")
    return [p for p in parts if strip_sql_comments(p).strip()]


def strip_sql_comments(text: str) -> str:
    """The SQL text with every ``--`` comment cut off its line."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


@functools.lru_cache(maxsize=1)
def named_queries() -> dict[str, NamedQuery]:
    """All ``queries/*.sql`` files by name."""
    return {p.stem: parse_query_file(p) for p in sorted(queries_dir().glob("*.sql"))}


def get_query(name: str) -> NamedQuery:
    """The named query ``name``; K25Error naming the known ones when there is none."""
    queries = named_queries()
    if name not in queries:
        raise K25Error(f"no query named {name!r}; known: {', '.join(sorted(queries))}")
    return queries[name]
