"""Every terminal view at 120 columns: golden text of each ``report --by`` view, ``compare`` and ``sql --list`` on the
real two-H200 eager pair (``tests/data/h200x2-decode-loop/eager``, with its bench floor; compared with its CUDA-graph
twin) and on the real B200 trace (``k25trace/samples/vllm-b200-tp8-rank0-eager``, one prefill step: ``--phase all``).

Each view goes through the CLI (``CliRunner``, ``COLUMNS=120``, ``--format table``) from the databases' folder, so
that the paths it prints (``--db x2.duckdb``) and the lines they wrap do not depend on the checkout. Besides the
goldens: no line is wider than the console, and no number is split or cut: every number in a table cell is a whole
number of the view's JSON output (as a table writes it).

Updating: ``K25TRACE_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_terminal_views.py -p no:cacheprovider``, then
review ``git diff tests/golden/terminal/``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from rich.cells import cell_len

import k25trace
from k25trace.cli import cli
from k25trace.render.output import _cell
from k25trace.vocab import VIEWS
from share_fixtures import load_into

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "terminal"
X2 = HERE / "data" / "h200x2-decode-loop"
MODELS = HERE / "data" / "models"
B200 = Path(k25trace.__file__).resolve().parent / "samples" / "vllm-b200-tp8-rank0-eager"
UPDATE = os.environ.get("K25TRACE_UPDATE_GOLDEN") == "1"
WIDTH = 120

EXTRA = {  # options a view needs beyond --by, per database
    ("x2", "sol"): ["--model-config", str(MODELS / "decode-loop-8l" / "config.json"), "--context", "1024"],
    ("b200", "sol"): ["--model-config", str(MODELS / "kimi-k2-thinking" / "config.json"), "--context", "1024"],
}
PHASE = {"x2": [], "b200": ["--phase", "all"]}  # the B200 trace has one prefill step and no decode step


def _report_args(db: str, view: str) -> list[str]:
    return ["report", "--db", f"{db}.duckdb", "--by", view, *PHASE[db], *EXTRA.get((db, view), [])]


CASES: dict[str, list[str]] = {
    **{f"{db}_{view}": _report_args(db, view) for db in ("x2", "b200") for view in VIEWS},
    "x2_compare": ["compare", "x2.duckdb", "x2-graph.duckdb"],
    "b200_compare": ["compare", "b200.duckdb", "b200.duckdb", "--phase", "all"],
    "x2_sql-list": ["sql", "--db", "x2.duckdb", "--list"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The databases, each loaded once: x2 (eager pair + bench floor), x2-graph (its twin), b200."""
    root = tmp_path_factory.mktemp("terminal")
    load_into(root / "x2.duckdb", sorted((X2 / "eager").glob("*.json.gz")))
    load_into(root / "x2-graph.duckdb", sorted((X2 / "graph").glob("*.json.gz")))
    load_into(root / "b200.duckdb", sorted(B200.glob("*.json.gz")))
    out = CliRunner().invoke(
        cli, ["bench", "import", str(X2 / "allreduce_bench_kimi.json"), "--db", str(root / "x2.duckdb")]
    )
    assert out.exit_code == 0, out.output
    return root


def _run(folder: Path, args: list[str], fmt: str = "table") -> tuple[int, str, str]:
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner(env={"COLUMNS": str(WIDTH)}).invoke(cli, [*args, "--format", fmt])
    finally:
        os.chdir(cwd)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def shown(folder: Path) -> dict[str, str]:
    """Every case's text as the golden holds it: stdout with trailing blanks cut, or the exit status and stderr."""
    texts = {}
    for name, args in CASES.items():
        code, out, err = _run(folder, args)
        text = "\n".join(line.rstrip() for line in out.splitlines()) + "\n"
        texts[name] = text if code == 0 else f"{text.strip()}\nexit {code}: {err.strip()}\n".lstrip("\n")
    return texts


@pytest.mark.parametrize("name", list(CASES))
def test_view_matches_golden(shown: dict[str, str], name: str) -> None:
    golden = GOLDEN / f"{name}.txt"
    # a view may refuse (exit 1 with its reason), never fail inside: no golden holds a query's error
    assert "error: query " not in shown[name] and "Traceback" not in shown[name], shown[name]
    if UPDATE:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        if not golden.exists() or golden.read_text(encoding="utf-8") != shown[name]:
            golden.write_text(shown[name], encoding="utf-8")
        return
    assert golden.exists(), f"{golden} is missing: run with K25TRACE_UPDATE_GOLDEN=1 and review it"
    expected = golden.read_text(encoding="utf-8")
    assert shown[name] == expected, f"`k25trace {' '.join(CASES[name])}` differs"


def test_no_line_is_wider_than_the_console(shown: dict[str, str]) -> None:
    wide = {
        name: max(cell_len(line) for line in text.splitlines())
        for name, text in shown.items()
        if not text.startswith("exit ")
    }
    assert wide and all(width <= WIDTH for width in wide.values()), {n: w for n, w in wide.items() if w > WIDTH}


NUMBER = re.compile(r"(?<![\w.,…+-])-?\d[\d,]*(?:\.\d+)?(?![\w.,…])")
"""A whole number as a table writes it (thousands separated by commas), not part of a word or of a longer number."""


def _values(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for item in value.values():
            yield from _values(item)
    elif isinstance(value, list):
        for item in value:
            yield from _values(item)
    else:
        yield value


def _numbers(values: Any) -> set[str]:
    """Every number the JSON output holds, as a table cell writes it and as text, commas left out."""
    found: set[str] = set()
    for value in _values(values):
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)):
            found |= {_cell(value).replace(",", ""), str(value)}
            if isinstance(value, float):
                found |= {_cell(round(value, 3)).replace(",", ""), f"{value:.3f}"}
        else:
            found |= {n.replace(",", "") for n in NUMBER.findall(str(value))}
    return found


def _cell_numbers(text: str) -> list[str]:
    """The numbers in the table cells of a text (rows between │ rules; titles, captions and prose left out)."""
    return [
        n.replace(",", "")
        for line in text.splitlines()
        if line.startswith("│")
        for cell in line.strip("│").split("│")
        for n in NUMBER.findall(cell)
    ]


ALSO = {f"{db}_rank": _report_args(db, "rank-comm") for db in ("x2", "b200")}
"""The JSON of the tables a view prints below its own (``--by rank``: the collectives per rank)."""


@pytest.mark.parametrize("name", [n for n in CASES if not n.endswith(("sql-list", "findings"))])
def test_no_number_is_split(folder: Path, shown: dict[str, str], name: str) -> None:
    """A number cut across two lines ("27." over "1337") or cut short ("27.13…") is no number of the JSON output
    (the findings are prose, rounded for reading: test_findings checks their figures)."""
    if shown[name].startswith("exit "):
        pytest.skip(f"`k25trace {' '.join(CASES[name])}` prints no table: {shown[name].strip()}")
    whole: set[str] = set()
    for args in (CASES[name], ALSO.get(name)):
        if args is not None:
            code, out, err = _run(folder, args, "json")
            assert code == 0 or args is not CASES[name], err
            whole |= _numbers(json.loads(out)) if code == 0 else set()
    cells = _cell_numbers(shown[name])
    assert cells, "no numbers in the table"
    assert not [n for n in cells if n not in whole], "numbers in the table that the JSON does not hold"


def test_sql_list_leaves_out_what_k25trace_runs_itself(folder: Path) -> None:
    _, listed, err = _run(folder, ["sql", "--db", "x2.duckdb", "--list"], "csv")
    _, everything, _ = _run(folder, ["sql", "--db", "x2.duckdb", "--list", "--all"], "csv")
    names = {line.split(",")[0] for line in listed.splitlines()[1:]}
    every = {line.split(",")[0] for line in everything.splitlines()[1:]}
    assert {"report_breakdown", "report_kernels", "browse_steps", "runs"} <= names
    assert not names & {
        "meta_set",
        "meta_get",
        "ingest_commit",
        "gaps_build",
        "steps_build",
        "kernel_rules_install",
        "settings_lock",
        "compare_select",
        "floor_bench_insert",
    }
    assert {"meta_set", "ingest_commit", "gaps_build", "kernel_rules_install"} <= every and names < every
    assert "--list --all" in err
