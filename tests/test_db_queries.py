"""The query files' headers: which comment lines are header fields and which are the summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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


WRAPPED_TEXT = """\
-- name: {name}
-- The collectives of one trace.
-- reads: gpu_events,
--   kernel_names
-- grain: one row per collective per rank; the late rank's row first
--   (ties: the lowest rank)
--   and nothing else
-- params: $trace_id,
--   $top
-- Prose again: a flush line ends the field.
--   an indented line after prose stays prose
select name_id from gpu_events where trace_id = $trace_id limit $top
"""


def test_a_wrapped_field_keeps_its_continuation_lines(tmp_path: Path) -> None:
    query = query_files.parse_query_file(write_query(tmp_path, "wrapped", WRAPPED_TEXT))
    assert query.reads == ("gpu_events", "kernel_names")
    assert (
        query.grain
        == "one row per collective per rank; the late rank's row first (ties: the lowest rank) and nothing else"
    )
    assert query.params == ("trace_id", "top")
    assert query.summary == (
        "The collectives of one trace. Prose again: a flush line ends the field. an indented line after prose stays prose"
    )


def _opening_comments(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return lines


def test_every_query_file_header_keeps_its_fields_and_prose_lines() -> None:
    """Truth from the files' text: an opening comment line is a field when it starts with a known key, the
    continuation of the field above when it is indented (``--`` then two spaces or more) right after a field or a
    continuation, otherwise its words are in the summary."""
    keys = ("name", "creates", "reads", "params", "optional", "grain")
    queries = db.named_queries()
    assert set(queries) == {p.stem for p in db.queries_dir().glob("*.sql")}
    prose_fields = continued = 0
    for name, query in queries.items():
        fields: dict[str, list[str]] = {}
        prose: list[str] = []
        field_key = None
        for line in _opening_comments(query.path.read_text(encoding="utf-8")):
            text = line.lstrip("- ").rstrip()
            key = re.match(r"([a-z_]+)\s*:", text)
            if key and key.group(1) in keys:
                field_key = key.group(1)
                fields.setdefault(field_key, []).append(text.split(":", 1)[1].strip())
            elif field_key and line.startswith("--  ") and text:
                fields[field_key].append(text)
                continued += 1
            else:
                field_key = None
                if text:
                    prose.append(text)
                    prose_fields += bool(key)
        assert query.header == {k: " ".join(v) for k, v in fields.items()}, name
        assert query.summary == " ".join(prose), name
    assert prose_fields >= 5  # browse_kernel's "correlation:", report_comm_site's "why_late:", …
    assert continued >= 8  # collectives (2), steps_build (2), layers_build (2), report_comm, browse_step_categories


def test_the_wrapped_fields_of_the_query_files() -> None:
    """The fields that wrap in the files, read as their authors meant them."""
    queries = db.named_queries()
    assert queries["report_comm"].reads[-1] == "comm_alignment"
    assert queries["report_comm"].summary.endswith(
        "(pairing = 'whole trace'; batch_size NULL; wait_kind unknown, so launch + gpu wait is 0 there)."
    )
    categories = queries["browse_step_categories"].grain
    assert categories.endswith("'gap before step' (GPU idle since the previous step)"), categories
    assert "gap before step" not in queries["browse_step_categories"].summary
    collectives = queries["collectives"]
    assert collectives.creates.endswith("comm_alignment (table: how much to trust the figures of each run, see below)")
    assert collectives.grain.endswith("; comm_alignment = one row per multi-rank run with collectives")
    assert collectives.summary.count("trace_runs is THE definition of a run") == 1
    steps_build = queries["steps_build"]
    assert "steps (rows for one trace), step_categories (rows for one trace)" in steps_build.creates
    assert steps_build.grain.endswith(
        "_step_intervals = one row per elementary interval between consecutive category on/off points within a step"
    )
    layers_build = queries["layers_build"]
    assert layers_build.grain.endswith("step_layer_categories = one row per segment per category present")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs")
def test_duckdb_threads_stay_within_the_cpus_allowed(tmp_path: Path) -> None:
    """Under ``taskset`` (or a container's cpuset) DuckDB still starts a thread per CPU of the machine; a database
    k25trace opens, new or existing, read-only or not, gets one per CPU this process may run on; an instance whose
    configuration is locked opens with the threads it has."""
    code = """
import os, sys, duckdb
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from k25trace import db
def threads(con):
    return con.execute("select current_setting('threads')").fetchone()[0]
path = sys.argv[1]
print(threads(duckdb.connect()), threads(db.connect(None)), end=" ")
con = db.connect(path)
print(threads(con), end=" ")
con.close()
print(threads(db.connect(path, read_only=True)), end=" ")
locked = duckdb.connect(path + ".locked")
locked.execute("set lock_configuration = true")
print(threads(db.connect(path + ".locked")))  # its threads cannot change: opened as they are
"""
    run = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "t.duckdb")], capture_output=True, text=True, check=True
    )
    duckdb_default, in_memory, new_file, read_only, locked = map(int, run.stdout.split())
    assert (in_memory, new_file, read_only) == (1, 1, 1), run.stdout
    assert locked == duckdb_default >= 1
