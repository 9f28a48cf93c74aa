"""The query files' headers: which comment lines are header fields and which are the summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from k25trace import db, query_files
from k25trace.errors import K25Error

QUERY_TEXT = """\
-- name: {name}
-- The kernels of one trace, longest first.
-- correlation: the CPU call joined on it says which launch it was.
-- reads: gpu_events,
-- reads: kernel_names
-- params: $trace_id, $top
-- optional: $top
-- grain: one row per kernel name
select name_id from gpu_events where trace_id = $trace_id limit coalesce($top, 10)
"""


def write_query(folder: Path, name: str, text: str = QUERY_TEXT) -> Path:
    path = folder / f"{name}.sql"
    path.write_text(text.format(name=name), encoding="utf-8")
    return path


def test_a_comment_line_shaped_like_a_field_is_summary(tmp_path: Path) -> None:
    query = query_files.parse_query_file(write_query(tmp_path, "kernels_of_trace"))
    assert query.summary == (
        "The kernels of one trace, longest first. correlation: the CPU call joined on it says which launch it was."
    )
    assert "correlation" not in query.header
    assert set(query.header) == {"name", "reads", "params", "optional", "grain"}
    assert query.reads == ("gpu_events", "kernel_names")  # a repeated field's values are joined
    assert query.params == ("trace_id", "top")
    assert query.optional == ("top",)
    assert query.grain == "one row per kernel name"
    assert query.is_report


def test_header_checks(tmp_path: Path) -> None:
    with pytest.raises(K25Error, match="does not match the file name"):
        query_files.parse_query_file(write_query(tmp_path, "other", QUERY_TEXT.replace("{name}", "kernels")))
    undeclared = QUERY_TEXT.replace("-- params: $trace_id, $top", "-- params: $trace_id")
    with pytest.raises(K25Error, match=r"declares params \['trace_id'\] but the SQL uses \['top', 'trace_id'\]"):
        query_files.parse_query_file(write_query(tmp_path, "undeclared", undeclared))
    stray_optional = QUERY_TEXT.replace("-- optional: $top", "-- optional: $top, $rank")
    with pytest.raises(K25Error, match=r"optional params \['rank'\] are not declared"):
        query_files.parse_query_file(write_query(tmp_path, "stray_optional", stray_optional))


def test_every_query_file_summary_keeps_its_prose_lines() -> None:
    """Truth from the files' text: each opening comment line is a field when it starts with a known key,
    otherwise its words are in the summary."""
    queries = db.named_queries()
    assert set(queries) == {p.stem for p in db.queries_dir().glob("*.sql")}
    prose_fields = 0
    for name, query in queries.items():
        assert set(query.header) <= {"name", "creates", "reads", "params", "optional", "grain"}, name
        for line in query.path.read_text(encoding="utf-8").splitlines():
            if not line.startswith("--"):
                break
            text = line.lstrip("- ").rstrip()
            key = re.match(r"([a-z_]+)\s*:", text)
            if key and key.group(1) in ("name", "creates", "reads", "params", "optional", "grain"):
                assert text.split(":", 1)[1].strip() in query.header[key.group(1)], (name, line)
            elif text:
                assert text in query.summary, (name, line)
                prose_fields += bool(key)
    assert prose_fields >= 5  # browse_kernel's "correlation:", report_comm_site's "why_late:", …
