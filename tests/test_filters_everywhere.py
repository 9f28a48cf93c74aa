"""Issue 31 items 3-5: the step filters (--rank, --trace, --batch, --run) mean the same in every view and in the
footers under the tables; one wording for steps (engine steps, rank-steps); commands that would produce nothing
useful say why and exit 1 without writing anything.

Truth comes from the raw JSON (the vLLM step markers, distributedInfo) of the real TP2 eager pair
(tests/data/h200x2-decode-loop/eager), its CUDA-graph twin, and the real B200 rank-0 trace (one prefill step).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import B200, DATA
from k25trace.analysis.report import view_filters
from k25trace.cli import cli
from k25trace.vocab import VIEWS

EAGER = DATA / "h200x2-decode-loop" / "eager"
GRAPH = DATA / "h200x2-decode-loop" / "graph"
MODEL = DATA / "models" / "decode-loop-8l" / "config.json"
MARKER = re.compile(r"execute_context_(\d+)\([^)]*\)_generation_(\d+)\([^)]*\)")  # token fields vary (B200)


def raw_markers(path: Path) -> dict:
    """A trace file's rank, world size and its vLLM step markers as (phase, requests) pairs, from the raw JSON."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    steps = []
    for e in trace["traceEvents"]:
        m = MARKER.fullmatch(str(e.get("name", ""))) if e.get("cat") == "user_annotation" else None
        if m:
            ctx, gen = int(m.group(1)), int(m.group(2))
            steps.append(("decode" if ctx == 0 else "prefill" if gen == 0 else "mixed", ctx + gen))
    info = trace["distributedInfo"]
    return {"rank": info["rank"], "world_size": info["world_size"], "steps": steps}


@pytest.fixture(scope="module")
def raw() -> dict[int, dict]:
    return {m["rank"]: m for m in (raw_markers(f) for f in sorted(EAGER.glob("*.json.gz")))}


def _load(path: Path, *sources: Path) -> Path:
    result = CliRunner().invoke(cli, ["load", *map(str, sources), "--db", str(path), "-q"])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture(scope="module")
def x2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _load(tmp_path_factory.mktemp("everywhere") / "x2.duckdb", EAGER)


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _load(tmp_path_factory.mktemp("everywhere") / "both.duckdb", EAGER, GRAPH)


@pytest.fixture(scope="module")
def b200(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _load(tmp_path_factory.mktemp("everywhere") / "b200.duckdb", B200)


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def report(db: Path, *args: str) -> tuple[int, str, str]:
    return run("report", "--db", str(db), "--format", "csv", *args)


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def extra_args(view: str) -> list[str]:
    return ["--model-config", str(MODEL)] if view == "sol" else []


def test_the_fixture_is_what_the_tests_say(raw: dict[int, dict]) -> None:
    assert sorted(raw) == [0, 1]
    for r in raw.values():
        assert Counter(r["steps"]) == {("decode", 1): 3, ("decode", 8): 3, ("decode", 64): 3}


# ------------------------------------------------------------------------------------------------------ --rank


RANK_VIEWS = [v for v in VIEWS if "rank" in view_filters(v)]


@pytest.mark.parametrize("view", RANK_VIEWS)
def test_rank_changes_every_per_rank_view(x2: Path, raw: dict[int, dict], view: str) -> None:
    outputs = {}
    for rank in (0, 1):
        code, out, err = report(x2, "--by", view, "--rank", str(rank), *extra_args(view))
        assert code == 0, err
        outputs[rank] = rows(out)
        if outputs[rank] and "rank" in outputs[rank][0]:
            assert {r["rank"] for r in outputs[rank]} == {str(rank)}, view
        if view in ("step", "timeline"):  # one row per decode step of that rank
            assert Counter(int(r["batch_size"]) for r in outputs[rank]) == Counter(
                b for p, b in raw[rank]["steps"] if p == "decode"
            )
        if view in ("batch", "idle"):  # steps per batch size = that rank's markers
            per_batch = {int(r["batch_size"]): int(r["steps"]) for r in outputs[rank]}
            assert per_batch == dict(Counter(b for p, b in raw[rank]["steps"] if p == "decode"))
    assert outputs[0] and outputs[1] and outputs[0] != outputs[1], view


# ----------------------------------------------------------------------------------------------------- --batch


BATCH_VIEWS = [v for v in VIEWS if "batch_size" in view_filters(v)]


@pytest.mark.parametrize("view", BATCH_VIEWS)
def test_batch_selects_exactly_the_steps_of_that_batch_size(x2: Path, raw: dict[int, dict], view: str) -> None:
    code, everything, err = report(x2, "--by", view)
    assert code == 0, err
    code, out, err = report(x2, "--by", view, "--batch", "8")
    assert code == 0, err
    chosen = rows(out)
    assert chosen
    if "batch_size" in chosen[0]:
        assert {r["batch_size"] for r in chosen} == {"8"}, view

        # a view of rows per batch size: its rows of batch 8 are what --batch 8 prints, exactly
        # (layer-late's `cause` is DuckDB's mode(), whose pick among tied causes varies from run to run)
        def stable(frame: list[dict[str, str]]) -> list[dict[str, str]]:
            return [{k: v for k, v in r.items() if not (view == "layer-late" and k == "cause")} for r in frame]

        assert stable(chosen) == stable([r for r in rows(everything) if r["batch_size"] == "8"]), view
    truth = sum(Counter(b for p, b in raw[rank]["steps"] if p == "decode")[8] for rank in raw)  # rank-steps
    if view in ("step", "timeline"):
        assert len(chosen) == truth == 6
    if view in ("rank", "rank-comm"):  # per rank: the rank's steps of batch 8 alone
        assert {int(r["steps"]) for r in chosen} == {truth // 2}
    if view in ("category", "kernel", "rank", "rank-comm"):
        assert chosen != rows(everything), view


def test_batch_and_run_are_refused_where_the_view_cannot_honour_them(x2: Path) -> None:
    for view in ("sol", "roofline"):
        for option, value in (("--batch", "8"), ("--run", "eager")):
            code, out, err = report(x2, "--by", view, option, value, *extra_args(view))
            assert code == 1 and out == ""
            assert err.startswith(f"error: --by {view} does not take {option}: ") and "timeline" in err, err


def test_a_batch_size_that_is_not_there_names_those_that_are(x2: Path) -> None:
    for view in ("batch", "comm", "step", "findings"):
        code, out, err = report(x2, "--by", view, "--batch", "3")
        assert code == 1 and out == ""
        assert err.strip() == (
            "error: no decode steps of batch size 3: batch sizes present: 1: 3 engine steps (6 "
            "rank-steps), 8: 3 engine steps (6 rank-steps), 64: 3 engine steps (6 rank-steps)"
        )


def test_the_footers_use_the_table_s_filters(x2: Path) -> None:
    """The idle caption under `report --batch 8 --rank 1` is `--by idle --batch 8 --rank 1`'s row; the second
    table of `--by rank --batch 8` (collectives per rank) holds batch 8's steps alone."""
    code, out, err = run("report", "--db", str(x2), "--batch", "8", "--rank", "1", "--format", "table")
    assert code == 0, err
    text = " ".join(out.split())
    assert len(re.findall(r"batch size \d+: ", text)) == 1
    assert re.search(
        r"batch size 8: mean step [\d.]+ ms \(median [\d.]+\), idle [\d.]+ % 3 engine steps on 1 rank ", text
    )
    caption = re.findall(r"idle (\d+\.\d+) ms/step = host-bound (\d+\.\d+)", text)
    (idle,) = rows(report(x2, "--by", "idle", "--batch", "8", "--rank", "1")[1])
    assert caption == [(f"{float(idle['idle_ms']):.3f}", f"{float(idle['host_ms']):.3f}")]
    code, out, err = run("report", "--db", str(x2), "--by", "rank", "--batch", "8", "--format", "json")
    assert code == 0, err
    code, table, err = run("report", "--db", str(x2), "--by", "rank", "--batch", "8", "--format", "table")
    comm = rows(report(x2, "--by", "rank-comm", "--batch", "8")[1])
    unfiltered = rows(report(x2, "--by", "rank-comm")[1])
    assert comm != unfiltered and {r["steps"] for r in comm} == {"3"}
    assert "Collectives per rank" in table and f"{float(comm[0]['wait_ms_per_step']):.4f}".rstrip("0") in table


# ------------------------------------------------------------------------------------------------------- --run


def test_run_selects_one_run_as_if_it_were_alone(x2: Path, both: Path) -> None:
    code, out, err = report(both, "--by", "batch")
    assert code == 0 and len({r["run_id"] for r in rows(out)}) == 2
    for view in ("batch", "idle", "comm", "step", "layer"):
        alone = report(x2, "--by", view)
        for name in ("eager (TP2)", "h200x2-decode-loop/eager#"):  # its label, a part of its id
            chosen = report(both, "--by", view, "--run", name)
            assert chosen[0] == 0 and chosen[1] == alone[1], (view, name)
    code, out, err = report(both, "--run", "h200x2")
    assert code == 1 and out == "" and "matches 2 runs" in err and "graph (TP2)" in err and "eager (TP2)" in err
    code, out, err = report(both, "--run", "nope")
    assert code == 1 and err.startswith("error: no run matches --run 'nope'. Runs: ")


# ------------------------------------------------------------------------------------------ one word for steps


def test_every_front_end_counts_engine_steps_and_rank_steps_alike(
    x2: Path, raw: dict[int, dict], tmp_path: Path
) -> None:
    engine = Counter(b for p, b in raw[0]["steps"] if p == "decode")  # every rank saw every step
    assert engine == Counter(b for p, b in raw[1]["steps"] if p == "decode")
    code, out, err = run("report", "--db", str(x2), "--format", "table")
    assert code == 0, err
    text = " ".join(out.split())
    for batch, n in engine.items():
        assert f"batch size {batch}: {n} engine steps × 2 ranks ({2 * n} rank-steps), mean step" in text  # findings
        table_title = rf"batch size {batch}: mean step [\d.]+ ms \(median [\d.]+\), idle [\d.]+ % "
        assert re.search(table_title + rf"{n} engine steps × 2 ranks \({2 * n} rank-steps\)", text), batch
    assert "rank(s)" not in text
    page = tmp_path / "page.html"
    code, _, err = run("html", "--db", str(x2), "-o", str(page))
    assert code == 0, err
    html = page.read_text(encoding="utf-8")
    assert "6 rank-steps on 2 ranks" in html and "3 engine steps × 2 ranks" in html
    assert "6 steps × 2 ranks" not in html
    code, _, err = run("compare", str(x2), str(x2), "--by", "step", "--format", "csv")
    assert code == 0 and f"{sum(engine.values())} decode engine steps" in err, err


# ------------------------------------------------------------------------------------- empty results say why


def test_the_b200_trace_has_one_prefill_step_and_no_decode_step() -> None:
    m = raw_markers(B200)
    assert m["steps"] == [("prefill", 1)] and m["rank"] == 0 and m["world_size"] == 8


NO_DECODE = (
    "error: no decode steps: phases present: prefill 1 engine step (1 rank-step); use --phase prefill or --phase all"
)


def test_html_without_decode_steps_writes_nothing_and_says_why(b200: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    code, out, err = run("html", "--db", str(b200), "-o", str(page))
    assert code == 1 and out == "" and err.strip() == NO_DECODE
    assert not page.exists()
    code, _, err = run("html", "--db", str(b200), "-o", str(page), "--phase", "all")
    assert code == 0 and page.exists() and "1 run(s)" in err


def test_report_views_without_decode_steps_say_why(b200: Path) -> None:
    for view in ("batch", "step", "comm", "findings", "kernel"):
        code, out, err = report(b200, "--by", view)
        assert code == 1 and out == "" and err.strip() == NO_DECODE, view


def test_a_cross_rank_view_of_one_loaded_rank_says_so(b200: Path) -> None:
    for view in ("comm", "comm-site", "rank-comm", "layer-late"):
        code, out, err = report(b200, "--by", view, "--phase", "prefill")
        assert code == 1 and out == "", view
        assert err.strip() == (
            f"error: --by {view} pairs the collectives of a run's ranks, and each run here has "
            "one rank loaded (of world size 8): load every rank's trace of the run into the "
            "database"
        )


def test_compare_without_decode_steps_says_why(b200: Path) -> None:
    code, out, err = run("compare", str(b200), str(b200))
    assert code == 1 and out == ""
    assert "has no decode steps with GPU activity" in err and "--phase all" in err


def test_export_perfetto_of_an_empty_database_writes_nothing(tmp_path: Path, x2: Path) -> None:
    from k25trace import db

    empty = tmp_path / "empty.duckdb"
    db.connect(empty).close()
    out = tmp_path / "steps.json"
    code, _, err = run("export", "perfetto", "--db", str(empty), "-o", str(out))
    assert code == 1 and not out.exists()
    assert err.strip() == "error: no traces in the database: load some first (`k25trace load TRACE... --db FILE`)"
    code, _, err = run("export", "perfetto", "--db", str(x2), "-o", str(out), "--batch", "3")
    assert code == 1 and not out.exists() and "batch sizes present: 1: 3 engine steps" in err
    code, _, err = run("report", "--db", str(empty))
    assert code == 1 and "no traces in the database" in err
