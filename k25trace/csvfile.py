"""The CSV files k25trace keeps as data (kernel rules, device peaks): ``#`` lines and blank lines are comments, the
first other line is the header, and every error names the file (and the row, counted from 1 after the header)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k25trace.errors import K25Error


@dataclass(frozen=True)
class CsvRow:
    """One data row: its number (1 = the first row after the header), its fields by column, surplus fields."""

    number: int
    fields: dict[str, str | None]
    extra: list[str]


@dataclass(frozen=True)
class CsvTable:
    """A parsed file: the header's column names and the data rows in file order."""

    columns: list[str]
    rows: list[CsvRow]


def read_commented_csv(
    path: Path, *, columns: Sequence[str], required: str, unreadable: str, no_header: str, noun: str
) -> CsvTable:
    """Parse ``path``: ``unreadable`` / ``no_header`` start the errors for an unreadable file / a header without the
    ``required`` column, ``noun`` names the file's kind in the error for a column not in ``columns``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise K25Error(f"{path}: {unreadable}: {getattr(exc, 'strerror', None) or exc}") from exc
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    reader = csv.DictReader(lines)
    if reader.fieldnames is None or required not in reader.fieldnames:
        raise K25Error(f"{path}: {no_header} {','.join(columns)}")
    unknown = [c for c in reader.fieldnames if c not in columns]
    if unknown:
        raise K25Error(f"{path}: unknown {noun} column(s) {unknown}; expected {','.join(columns)}")
    rows = []
    for number, row in enumerate(reader, start=1):
        extra: Any = row.pop(None, None)  # type: ignore[call-overload, unused-ignore]  # csv: surplus fields
        rows.append(CsvRow(number, dict(row), list(extra or [])))
    return CsvTable(list(reader.fieldnames), rows)
