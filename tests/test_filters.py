"""`k25trace report` filters that select nothing, and filters a view cannot honour (issue 28.4).

On the real TP2 eager pair (tests/data/h200x2-decode-loop/eager): which ranks, traces and phases exist is read
from the raw JSON here (distributedInfo.rank, the vLLM step markers), not from k25trace; every filter that
selects nothing must be an `error:` line naming what exists, exit 1, nothing on stdout.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from helpers import DATA
from k25trace.analysis.report import view_filters
from k25trace.cli import cli
from k25trace.vocab import VIEWS

X2_EAGER = DATA / "h200x2-decode-loop" / "eager"
GAPS = DATA / "h200-gaps"
MODEL = DATA / "models" / "decode-loop-8l" / "config.json"


def _raw_ranks_and_phases(folder: Path) -> tuple[list[int], set[str]]:
    ranks, phases = [], set()
    for f in sorted(folder.glob("*.json.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            trace = json.load(fh)
        ranks.append(trace["distributedInfo"]["rank"])
        for e in trace["traceEvents"]:
            m = re.fullmatch(r"execute_context_(\d+)\(\d+\)_generation_(\d+)\(\d+\)", str(e.get("name", "")))
            if e.get("cat") == "user_annotation" and m:
                ctx, gen = int(m.group(1)), int(m.group(2))
                phases.add("decode" if ctx == 0 and gen else "prefill" if gen == 0 else "mixed")
    return ranks, phases


@pytest.fixture(scope="module")
def x2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("filters") / "x2.duckdb"
    result = CliRunner().invoke(cli, ["load", str(X2_EAGER), "--db", str(path), "-q"])
    assert result.exit_code == 0, result.output
    return path


def _report(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["report", "--db", str(db), "--format", "csv", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_fixture_is_what_the_messages_say() -> None:
    ranks, phases = _raw_ranks_and_phases(X2_EAGER)
    assert sorted(ranks) == [0, 1] and phases == {"decode"}


@pytest.mark.parametrize("view", ["batch", "category", "step", "kernel", "timeline", "roofline"])
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--rank", "99"), "error: no rank 99: ranks 0–1"),
        (("--rank", "-1"), "error: no rank -1: ranks 0–1"),
        (("--trace", "999"), "error: no trace 999: traces 1–2"),
        (
            ("--phase", "prefill"),
            "error: no prefill steps: phases present: decode 9 engine steps (18 rank-steps); use "
            "--phase decode or --phase all",
        ),
        (
            ("--phase", "prefill", "--rank", "1"),
            "error: no prefill steps (rank 1): phases present: decode 9 engine steps "
            "(9 rank-steps); use --phase decode or --phase all",
        ),
        (
            ("--batch", "3"),
            "error: no decode steps of batch size 3: batch sizes present: 1: 3 engine steps (6 rank-steps), "
            "8: 3 engine steps (6 rank-steps), 64: 3 engine steps (6 rank-steps)",
        ),
        (("--run", "nope"), f"error: no run matches --run 'nope'. Runs: eager (TP2) = {X2_EAGER.resolve()}#ws2"),
    ],
)
def test_a_filter_that_selects_nothing_says_what_exists(
    x2: Path, view: str, args: tuple[str, ...], message: str
) -> None:
    if "--rank" in args and "rank" not in view_filters(view):
        pytest.skip("the view refuses --rank (tested below)")
    if args[0] in ("--batch", "--run") and "batch_size" not in view_filters(view):
        pytest.skip("the view refuses --batch and --run (tested in test_filters_everywhere)")
    code, out, err = _report(x2, "--by", view, *args)
    assert code == 1 and out == "" and err.strip() == message


def test_sol_with_a_filter_that_selects_nothing(x2: Path) -> None:
    code, out, err = _report(x2, "--by", "sol", "--model-config", str(MODEL), "--rank", "99")
    assert code == 1 and out == "" and err.strip() == "error: no rank 99: ranks 0–1"


def test_views_refuse_the_filters_they_cannot_honour(x2: Path) -> None:
    """`--by comm --rank 0` and `--rank 1` would print the same rows (the view sums every rank of a run): refused.
    (`--by idle` honours them now: tested below.)"""
    refusing = [v for v in VIEWS if "rank" not in view_filters(v)]
    assert {"comm", "comm-site", "comm-bw", "rank-comm", "floor", "rank", "layer-late", "findings"} == set(refusing)
    for view in refusing:
        code, out, err = _report(x2, "--by", view, "--rank", "0")
        assert code == 1 and out == "", view
        assert err.startswith(f"error: --by {view} does not take --rank: it sums every rank of a run"), err
        assert "timeline" in err  # names the views that do take it
    code, _, err = _report(x2, "--by", "comm", "--trace", "1")
    assert code == 1 and "does not take --trace" in err


def test_options_of_other_views_are_refused(x2: Path) -> None:
    for args in (
        ("--by", "batch", "--context", "10"),
        ("--by", "idle", "--model-config", str(MODEL)),
        ("--by", "step", "--quant", "experts=w4a16-g32"),
        ("--by", "timeline", "--top", "3"),
    ):
        code, out, err = _report(x2, *args)
        assert code == 1 and out == "" and "does not take" in err, args


def test_a_rank_and_trace_that_disagree(x2: Path) -> None:
    code, _, err = _report(x2, "--by", "step", "--rank", "0", "--trace", "2")
    assert code == 1 and "trace 2 is rank 1, not rank 0" in err
    code, out, _ = _report(x2, "--by", "step", "--rank", "1", "--trace", "2")
    assert code == 0 and len(out.splitlines()) == 1 + 9  # 9 decode steps of rank 1 (3 per batch size)


def test_filters_that_match_still_print(x2: Path) -> None:
    for view in ("timeline", "step", "kernel", "batch"):
        zero = _report(x2, "--by", view, "--rank", "0")
        one = _report(x2, "--by", view, "--rank", "1")
        assert zero[0] == one[0] == 0 and zero[1] and one[1] and zero[1] != one[1], view


def test_the_duplicate_rank_warning_prints_a_folder_name_literally(tmp_path: Path) -> None:
    """Two files of one folder claim rank 0; the folder is named like Rich markup: printed as it is."""
    folder = tmp_path / "[red]run"
    folder.mkdir()
    for f in [*(GAPS / "eager").glob("*.json.gz"), *(GAPS / "graph").glob("*.json.gz")]:
        shutil.copy(f, folder / f.name)
    db = tmp_path / "dup.duckdb"
    assert CliRunner().invoke(cli, ["load", str(tmp_path), "--db", str(db), "-q"]).exit_code == 0
    code, _, err = _report(db)
    warning = [line for line in err.splitlines() if "files claim rank 0" in line]
    assert code == 0 and len(warning) == 1 and warning[0].startswith("warning: [red]run: 2 files claim rank 0")


def _raw_idle_per_batch(path: Path) -> tuple[int, dict[int, dict[str, float]]]:
    """One rank's decode steps from its raw JSON, by independent code: a step holds the GPU activities launched
    (the CUDA call of the same correlation id) from its vLLM marker's start to the next marker's; its wall is the
    first activity's start to the last one's end, busy the union of the activities, idle wall - busy. Per batch
    size (the marker's generation token count): steps and the means in ms."""
    from decimal import Decimal

    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh, parse_float=Decimal)
    events = trace["traceEvents"]
    markers = []
    for e in events:
        m = re.fullmatch(r"execute_context_0\(0\)_generation_(\d+)\((\d+)\)", str(e.get("name", "")))
        if e.get("cat") == "user_annotation" and m:
            markers.append((e["ts"], int(m.group(2))))
    markers.sort()
    launched = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launched.setdefault(e["args"]["correlation"], e["ts"])
    per_step: dict[int, list] = {}
    for e in events:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            ts = launched.get(e["args"].get("correlation"))
            before = [i for i, (start, _) in enumerate(markers) if ts is not None and start <= ts]
            if before:
                per_step.setdefault(before[-1], []).append((e["ts"], e["ts"] + e["dur"]))
    groups: dict[int, list[tuple[Decimal, Decimal]]] = {}
    for i, spans in per_step.items():
        spans.sort()
        busy, (lo, hi) = Decimal(0), spans[0]
        for a, b in spans[1:]:
            if a > hi:
                busy, lo, hi = busy + hi - lo, a, b
            else:
                hi = max(hi, b)
        busy += hi - lo
        wall = max(b for _, b in spans) - spans[0][0]
        groups.setdefault(markers[i][1], []).append((wall, busy))
    out = {
        batch: {
            "steps": len(v),
            "wall_ms": float(sum(w for w, _ in v) / len(v)) / 1e3,
            "busy_ms": float(sum(b for _, b in v) / len(v)) / 1e3,
            "idle_ms": float(sum(w - b for w, b in v) / len(v)) / 1e3,
        }
        for batch, v in groups.items()
    }
    return trace["distributedInfo"]["rank"], out


def _csv_rows(text: str) -> list[dict[str, str]]:
    import csv
    import io

    return list(csv.DictReader(io.StringIO(text)))


def test_idle_honours_rank_and_trace(x2: Path) -> None:
    """`report --by idle --rank R` / `--trace T` (refused since 7646929, and before that the same rows for every
    rank): each rank's rows are that rank's alone. Steps, wall, busy and idle per batch size from the raw JSON
    (_raw_idle_per_batch); the idle split by cause from that rank's gpu_gaps rows, summed here in plain SQL."""
    import duckdb

    raw = dict(_raw_idle_per_batch(f) for f in sorted(X2_EAGER.glob("*.json.gz")))
    assert sorted(raw) == [0, 1]
    con = duckdb.connect(str(x2), read_only=True)
    causes = {
        (rank, batch): vals
        for rank, batch, *vals in con.execute("""
        select traces.rank, steps.batch_size,
               sum(gpu_gaps.host_ns) / count(distinct steps.step_index) / 1e6,
               sum(gpu_gaps.launch_ns) / count(distinct steps.step_index) / 1e6,
               sum(gpu_gaps.device_ns) / count(distinct steps.step_index) / 1e6
        from gpu_gaps join steps using (trace_id, step_index) join traces using (trace_id)
        where not gpu_gaps.between_steps and steps.phase = 'decode'
        group by all""").fetchall()
    }
    traces = dict(con.execute("select rank, trace_id from traces").fetchall())
    con.close()
    tables = {}
    for rank in (0, 1):
        for args in (("--rank", str(rank)), ("--trace", str(traces[rank]))):
            code, out, err = _report(x2, "--by", "idle", *args)
            assert code == 0, err
            rows = {int(r["batch_size"]): r for r in _csv_rows(out)}
            tables[rank, args[0]] = out
            assert sorted(rows) == sorted(raw[rank]) == [1, 8, 64]
            for batch, truth in raw[rank].items():
                row = rows[batch]
                assert int(row["steps"]) == truth["steps"] == 3
                for col in ("wall_ms", "busy_ms", "idle_ms"):
                    assert float(row[col]) == round(truth[col], 4), (rank, batch, col)
                host, launch, device = causes[rank, batch]
                assert float(row["host_ms"]) == round(host, 4)
                assert float(row["launch_overhead_ms"]) == round(launch, 4)
                assert float(row["device_ms"]) == round(device, 4)
        assert tables[rank, "--rank"] == tables[rank, "--trace"]
    assert tables[0, "--rank"] != tables[1, "--rank"]
    assert raw[0][1]["idle_ms"] - raw[1][1]["idle_ms"] > 5  # rank 0's host is the slow one: the ranks differ


def test_the_idle_line_under_a_rank_s_report_is_that_rank_s(x2: Path) -> None:
    """Issue 31 item 3: the idle line under `report --rank 0` said 13.64 ms/step (both ranks) while the table above
    it said 25.13. Now the caption is `--by idle --rank 0`'s row, and equals the table's idle row."""
    for rank in ("0", "1"):
        result = CliRunner().invoke(cli, ["report", "--db", str(x2), "--rank", rank, "--format", "table"])
        assert result.exit_code == 0, result.output
        text = " ".join(result.stdout.split())
        captions = re.findall(r"idle (\d+\.\d+) ms/step = host-bound (\d+\.\d+)", text)
        idle_rows = re.findall(r"│ idle │ (\d+\.\d+) │", text)
        _, out, _ = _report(x2, "--by", "idle", "--rank", rank)
        rows = _csv_rows(out)
        assert [c for c, _ in captions] == [f"{float(r['idle_ms']):.3f}" for r in rows]
        assert [h for _, h in captions] == [f"{float(r['host_ms']):.3f}" for r in rows]
        assert [f"{float(x):.3f}" for x in idle_rows] == [c for c, _ in captions]
