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
from k25trace.cli import cli
from k25trace.report import view_filters
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
@pytest.mark.parametrize(("args", "message"), [
    (("--rank", "99"), "error: no rank 99: ranks 0–1"),
    (("--rank", "-1"), "error: no rank -1: ranks 0–1"),
    (("--trace", "999"), "error: no trace 999: traces 1–2"),
    (("--phase", "prefill"), "error: no prefill steps: phases present: decode 18"),
    (("--phase", "prefill", "--rank", "1"), "error: no prefill steps (rank 1): phases present: decode 9"),
])
def test_a_filter_that_selects_nothing_says_what_exists(x2: Path, view: str, args: tuple[str, ...],
                                                        message: str) -> None:
    if "--rank" in args and "rank" not in view_filters(view):
        pytest.skip("the view refuses --rank (tested below)")
    code, out, err = _report(x2, "--by", view, *args)
    assert code == 1 and out == "" and err.strip() == message


def test_sol_with_a_filter_that_selects_nothing(x2: Path) -> None:
    code, out, err = _report(x2, "--by", "sol", "--model-config", str(MODEL), "--rank", "99")
    assert code == 1 and out == "" and err.strip() == "error: no rank 99: ranks 0–1"


def test_views_refuse_the_filters_they_cannot_honour(x2: Path) -> None:
    """`--by idle --rank 0` and `--rank 1` printed the same rows (idle sums every rank of a run): refused."""
    refusing = [v for v in VIEWS if "rank" not in view_filters(v)]
    assert {"idle", "comm", "comm-site", "comm-bw", "rank-comm", "floor", "rank"} == set(refusing)
    for view in refusing:
        code, out, err = _report(x2, "--by", view, "--rank", "0")
        assert code == 1 and out == "", view
        assert err.startswith(f"error: --by {view} does not take --rank: it sums every rank of a run"), err
        assert "timeline" in err  # names the views that do take it
    code, _, err = _report(x2, "--by", "idle", "--trace", "1")
    assert code == 1 and "does not take --trace" in err


def test_options_of_other_views_are_refused(x2: Path) -> None:
    for args in (("--by", "batch", "--context", "10"), ("--by", "idle", "--model-config", str(MODEL)),
                 ("--by", "step", "--quant", "experts=w4a16-g32"), ("--by", "timeline", "--top", "3")):
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
