"""Damaged ``manifest.json`` files (issue 11 item 15): every shape gets a clear message, never a traceback."""

from __future__ import annotations

import json
import math

import pytest

from k25trace.capture.manifest import (
    LEVEL_COLUMNS,
    Distribution,
    ExtraFile,
    LevelStats,
    Manifest,
    ManifestFile,
    ManifestLevel,
    check_manifest,
    level_rows,
    write_manifest,
)
from k25trace.capture.runner import EXIT_ERROR, EXIT_OK

SHA = "ab" * 32


def good() -> dict:
    return {
        "k25trace_capture": 1,
        "name": "x",
        "complete": True,
        "levels": [
            {
                "name": "c2",
                "concurrency": 2,
                "dir": "c2",
                "profiled": True,
                "status": "done",
                "stats": {
                    "requests": 2,
                    "completed": 2,
                    "errors": 0,
                    "output_tokens": 8,
                    "duration_s": 0.5,
                    "output_tok_s": 16.0,
                    "ttft_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
                    "tpot_ms": {"p50": 0.5, "p90": 0.6, "p99": 0.7},
                    "itl_ms": {"p50": 0.4, "p90": 0.5, "p99": 0.6},
                },
                "decode_batch_sizes_seen": {"1": 3, "2": 5},
                "max_decode_batch_seen": 2,
                "max_running_requests": 2,
                "files": [
                    {
                        "path": "c2/rank0.1.pt.trace.json.gz",
                        "rank": 0,
                        "world_size": 1,
                        "frontend": False,
                        "size": 10,
                        "sha256": SHA,
                        "valid": True,
                        "problem": None,
                    }
                ],
            },
            {"name": "c4", "concurrency": 4, "dir": "c4", "stats": None, "files": []},
        ],
    }


def _write(d, text):
    d.mkdir(parents=True, exist_ok=True)
    (d / "manifest.json").write_bytes(text if isinstance(text, bytes) else text.encode())


def _edit(fn) -> str:
    m = good()
    fn(m)
    return json.dumps(m)


def test_good_manifest_reads_clean(tmp_path):
    write_manifest(tmp_path, good())
    m = check_manifest(tmp_path)
    assert m.usable and m.problems == []
    level, entry = m.locate("c2/rank0.1.pt.trace.json.gz")
    assert (level.name, level.concurrency, entry.sha256, entry.valid, entry.rank) == ("c2", 2, SHA, True, 0)
    assert m.locate("c4/other.pt.trace.json.gz") == (m.levels[1], None)
    assert m.locate("elsewhere/x.pt.trace.json.gz") == (None, None)
    # the same as plain dicts, for a caller not on the typed entries yet
    assert m.lookup("c2/rank0.1.pt.trace.json.gz")[0]["name"] == "c2"
    assert m.lookup("c2/rank0.1.pt.trace.json.gz")[1]["sha256"] == SHA
    assert m.lookup("c4/other.pt.trace.json.gz")[1] is None and m.lookup("x/y.gz") == (None, None)
    assert m.levels[0].stats.ttft_ms.p90 == 2.0 and m.levels[1].stats is None  # "stats": null: no load ran
    rows = level_rows(m)
    assert [r["level"] for r in rows] == ["c2", "c4"] and list(rows[0])[: len(LEVEL_COLUMNS)] == list(LEVEL_COLUMNS)
    assert rows[0]["ttft_p90_ms"] == 2.0 and rows[0]["max_decode_batch_seen"] == 2 and rows[1]["requests"] is None
    assert m.levels[0].decode_batch_sizes_seen == {1: 3, 2: 5}
    assert json.loads(m.json_text()) == good()


def test_one_definition_writes_and_reads_every_key(tmp_path):
    # what the runner writes (to_json) reads back (from_json) as the same entries; keys an older manifest lacks
    # read as their defaults
    level = ManifestLevel(
        "c2",
        2,
        profiled=True,
        start_status="200",
        start_detail=None,
        stop_status="500",
        stop_seconds=1.5,
        stop_detail="engine dead",
        world_size=2,
        running_requests_note="404",
        stats=LevelStats(
            requests=2,
            completed=2,
            aborted=False,
            ttft_ms=Distribution(1.0, 1.0, 2.0, 3.0, 2),
            first_errors=["HTTP 503"],
        ),
        files=[
            ManifestFile(
                "c2/rank0.1.pt.trace.json.gz",
                rank=0,
                world_size=2,
                frontend=False,
                size=10,
                sha256=SHA,
                valid=True,
                vllm_version="0.11",
                step_markers=7,
                decode_batch_sizes={2: 7},
            )
        ],
        missing_ranks=[1],
        extra_files=[ExtraFile("c2/x.txt", 3, SHA)],
        warnings=["w"],
        decode_batch_sizes_seen={2: 7},
        decode_batch_sizes_rank=0,
        max_decode_batch_seen=2,
    )
    manifest = Manifest(name="x", status="incomplete", error="boom", levels=[level, ManifestLevel("c4", 4)])
    write_manifest(tmp_path, manifest.to_json())
    m = check_manifest(tmp_path)
    assert m.problems == [] and m.levels == manifest.levels and m.manifest == manifest
    assert m.data["levels"][0]["decode_batch_sizes_seen"] == {"2": 7} and m.data["error"] == "boom"
    old = check_manifest_of(tmp_path / "old", {"k25trace_capture": 1, "levels": [{"name": "c8"}]})
    assert old.problems == [] and old.levels == [ManifestLevel("c8", status=None, running_requests_samples=None)]
    assert old.manifest.status is None and old.manifest.settings == {} and old.levels[0].dir == "c8"


def check_manifest_of(d, data):
    _write(d, json.dumps(data))
    return check_manifest(d)


def test_no_manifest_or_someone_elses(tmp_path):
    assert check_manifest(tmp_path) is None
    _write(tmp_path, '{"name": "another tool"}')
    assert check_manifest(tmp_path) is None


# (shape, what the message must say, usable) — the shapes that crashed `load` or `capture --force`
UNUSABLE = [
    ("{not json", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    ("", "not JSON"),
    (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    ("[1, 2]", "the top level is a list, not an object"),
    ('"c2"', "the top level is a string, not an object"),
    ('{"k25trace_capture": 1, "levels": 5}', "levels: expected a list, got an integer"),
    ('{"k25trace_capture": 1, "levels": "c2"}', "levels: expected a list, got a string"),
    ('{"k25trace_capture": 1, "levels": {"c2": {}}}', "levels: expected a list, got an object"),
    ('{"k25trace_capture": 1}', "levels: missing"),
    ("[" * 100_000, "not JSON"),
]


@pytest.mark.parametrize("text,why", UNUSABLE)
def test_unusable_manifest(tmp_path, text, why):
    _write(tmp_path, text)
    m = check_manifest(tmp_path)
    assert m is not None and not m.usable and m.levels == []
    assert why in m.summary(), m.problems
    assert level_rows(m) == []


PARTLY = [
    (
        _edit(lambda m: m.__setitem__("levels", ["c2", None, good()["levels"][1]])),
        ["levels[0]: expected an object, got a string", "levels[1]: expected an object, got null"],
        ["c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].__setitem__("files", "c2/x")),
        ["levels[0].files: expected a list, got a string"],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].__setitem__("files", [1, {}, {"path": 7}])),
        [
            "levels[0].files[0]: expected an object, got an integer",
            "levels[0].files[1].path: missing",
            "levels[0].files[2].path: expected a string, got an integer",
        ],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0]["files"][0].update(sha256=5, valid="no", rank="0", size=-1)),
        [
            "levels[0].files[0].rank: expected an integer, got a string",
            "levels[0].files[0].size: -1 is out of range",
            "levels[0].files[0].sha256: expected a string, got an integer",
            "levels[0].files[0].valid: expected true or false, got a string",
        ],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0]["files"][0].update(sha256="zz")),
        ["levels[0].files[0].sha256: 'zz' is not a sha256 hex digest"],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].update(stats="fast", concurrency="two")),
        [
            "levels[0].concurrency: expected an integer, got a string",
            "levels[0].stats: expected an object, got a string",
        ],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].update(concurrency=2**70)),
        ["levels[0].concurrency: 1180591620717411303424 is out of range"],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0]["stats"].update(requests=True, ttft_ms="x", tpot_ms={"p50": "1"})),
        [
            "levels[0].stats.requests: expected an integer, got a boolean",
            "levels[0].stats.ttft_ms: expected an object",
            "levels[0].stats.tpot_ms.p50: expected a number, got a string",
        ],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].update(name=["c2"], dir=3)),
        ["levels[0].name: expected a string, got a list"],
        ["c4"],
    ),
    (
        _edit(lambda m: m["levels"][0].update(dir="../../etc")),
        ["levels[0].dir: '../../etc' is not a directory inside the capture"],
        ["c2", "c4"],
    ),
    (_edit(lambda m: m["levels"].append(dict(m["levels"][0]))), ["levels[2]: level 'c2'"], ["c2", "c4"]),
    (
        _edit(lambda m: m["levels"][0].update(decode_batch_sizes_seen={"x": 1, "2": "5"}, max_running_requests=-1)),
        ["levels[0].decode_batch_sizes_seen: 'x': 1", "levels[0].max_running_requests: -1 is out of range"],
        ["c2", "c4"],
    ),
    (
        _edit(lambda m: m["levels"][0]["stats"].update(duration_s=math.nan, output_tok_s=math.inf)),
        ["(document): 2 non-JSON constant(s) ['Infinity', 'NaN'] read as null"],
        ["c2", "c4"],
    ),
]


@pytest.mark.parametrize("text,whys,levels", PARTLY)
def test_partly_damaged_manifest_keeps_what_is_sound(tmp_path, text, whys, levels):
    _write(tmp_path, text)
    m = check_manifest(tmp_path)
    assert m.usable
    flat = "\n".join(m.problems)
    for why in whys:
        assert why in flat, (why, m.problems)
    assert [lv.name for lv in m.levels] == levels
    rows = level_rows(m)
    for r in rows:  # every value has the column's type: DuckDB's insert cannot fail on it
        assert isinstance(r["level"], str)
        for k in (
            "concurrency",
            "requests",
            "errors",
            "output_tokens",
            "max_decode_batch_seen",
            "max_running_requests",
        ):
            assert r[k] is None or (type(r[k]) is int and 0 <= r[k] < 2**63), (k, r[k])
        for k in LEVEL_COLUMNS[5:]:
            assert r[k] is None or (type(r[k]) is float and math.isfinite(r[k])), (k, r[k])
    for lv in m.levels:
        for f in lv.files:
            assert isinstance(f.path, str) and f.sha256 in (None, SHA) and f.valid in (None, True, False)
    json.loads(m.json_text())  # storable


# ------------------------------------------------------------------------------- capture --force


@pytest.mark.parametrize(
    "text,why",
    [
        ("[1, 2]", "the top level is a list, not an object"),
        ('{"k25trace_capture": 1, "levels": ["c2"]}', "levels[0]: expected an object, got a string"),
        ('{"k25trace_capture": 1, "levels": 5}', "levels: expected a list, got an integer"),
        ("{not json", "not JSON"),
    ],
)
def test_force_over_a_damaged_manifest_is_a_clear_error(fake, run_cap, tmp_path, text, why):
    # `old.get(...)` / `lv.get(...)` on a list or a string crashed `capture --force` with a traceback
    s = fake()
    out = tmp_path / "cap"
    _write(out, text)
    (out / "c2").mkdir()
    (out / "c2" / "keep.txt").write_text("mine")
    rc, _, err, _ = run_cap(s, force=True)
    flat = " ".join(err.split())
    assert rc == EXIT_ERROR and "Traceback" not in err
    assert f"{out / 'manifest.json'} is damaged" in flat and why in flat and "nothing was removed" in flat
    assert (out / "manifest.json").read_bytes() == text.encode() and (out / "c2" / "keep.txt").exists()
    assert s.start_calls == 0


def test_force_over_a_foreign_manifest_is_refused(fake, run_cap, tmp_path):
    s = fake()
    _write(tmp_path / "cap", '{"name": "another tool"}')
    rc, _, err, _ = run_cap(s, force=True)
    assert rc == EXIT_ERROR and "not a k25trace capture manifest" in err
    assert (tmp_path / "cap" / "manifest.json").read_text() == '{"name": "another tool"}'


def test_force_over_a_sound_manifest_replaces_its_levels(fake, run_cap, tmp_path):
    s = fake()
    out = tmp_path / "cap"
    assert run_cap(s, concurrency=[3])[0] == EXIT_OK and (out / "c3").is_dir()
    (out / "mine").mkdir()
    rc, _, err, m = run_cap(s, force=True)
    assert rc == EXIT_OK, err
    assert not (out / "c3").exists() and (out / "c2").is_dir() and (out / "mine").is_dir()


# ------------------------------------------------------------------------------- k25trace load
# The loader of capture directories (k25trace.ingest) reads manifests through capture.manifest.check_manifest:
# each of these shapes once crashed it or loaded silently.

LOAD_SHAPES = {
    "not-json": "{not json",
    "json-array": "[1, 2]",
    "levels-not-a-list": '{"k25trace_capture": 1, "levels": 5}',
    "level-entry-a-string": '{"k25trace_capture": 1, "levels": ["c2"]}',
    "level-entry-null": '{"k25trace_capture": 1, "levels": [null]}',
    "files-not-a-list": _edit(lambda m: m["levels"][0].update(files="c2/x")),
    "file-entry-an-int": _edit(lambda m: m["levels"][0].update(files=[1])),
    "file-entry-without-path": _edit(lambda m: m["levels"][0].update(files=[{"valid": "yes"}])),
    "sha256-an-int": _edit(lambda m: m["levels"][0]["files"][0].update(sha256=5)),
    "stats-a-string": _edit(lambda m: m["levels"][0].update(stats="fast")),
    "concurrency-a-string": _edit(lambda m: m["levels"][0].update(concurrency="two")),
    "concurrency-2**70": _edit(lambda m: m["levels"][0].update(concurrency=2**70)),
}


@pytest.mark.parametrize("shape", list(LOAD_SHAPES))
def test_load_of_a_damaged_capture_still_loads_its_traces(tmp_path, shape):
    from fakevllm import write_trace
    from k25trace import db, pipeline

    cap = tmp_path / "cap"
    (cap / "c2").mkdir(parents=True)
    write_trace(cap / "c2" / "rank0.1.pt.trace.json.gz", 0, 2)
    write_trace(cap / "c2" / "rank1.2.pt.trace.json.gz", 1, 2)
    _write(cap, LOAD_SHAPES[shape])
    con = db.connect(tmp_path / "x.duckdb")
    results, notes = pipeline.load_paths(con, [cap])
    assert [r.status for r in results] == ["loaded", "loaded"], [(r.status, r.message) for r in results]
    assert any(str(cap / "manifest.json") in n and "damaged" in n for n in notes), notes
    assert con.execute("select count(*) from traces").fetchone()[0] == 2
