"""Golden CSV output of every ``k25trace report --by VIEW``: a safety net for refactoring the report code and SQL.

Two databases are built once per module, through the front door (``pipeline.connect`` + ``pipeline.load_paths``):

* ``samples``: the traces bundled in ``k25trace/samples/`` (what ``k25trace demo`` loads). Every view is run with
  the default phase and with ``--phase all``; ``--by sol`` uses ``tests/data/models/kimi-k2-thinking`` (the bundled
  Kimi pair is Kimi-shaped) with ``--context 1024``.
* ``x2``: the two-H200 eager traces of ``tests/data/h200x2-decode-loop/eager`` (recorded shapes, real NCCL) plus
  the measured all-reduce floor ``allreduce_bench_kimi.json`` imported with ``k25trace bench import``: the views
  that need a bench table (``floor``, ``comm-bw``, ``sol``) or shapes (``roofline``) see real data here. ``--by sol``
  uses ``tests/data/models/decode-loop-8l`` (the model of those traces).

Each view goes through the CLI (``click.testing.CliRunner`` on ``k25trace.cli.cli`` with ``--format csv``), and
its stdout must equal ``tests/golden/report_<db>_<view>[_all].csv`` byte for byte: the golden files pin what users
see. The only rewrite is of machine paths, which live in run ids: the samples folder becomes ``<samples>`` and
``tests/data`` becomes ``<tests-data>``, so the files do not depend on where the checkout is.

Updating: when a change is *meant* to change a report, regenerate with ::

    K25TRACE_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_report_golden.py -p no:cacheprovider

then review ``git diff tests/golden/`` line by line (every changed number should be explained by the change) and
commit the golden files with the change. Without the variable, a missing golden file is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

import k25trace
from k25trace.cli import cli
from share_fixtures import load_into

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
DATA = HERE / "data"
SAMPLES = Path(k25trace.__file__).resolve().parent / "samples"
X2 = DATA / "h200x2-decode-loop"
MODELS = DATA / "models"
UPDATE = os.environ.get("K25TRACE_UPDATE_GOLDEN") == "1"

VIEWS = (
    "batch",
    "category",
    "step",
    "rank",
    "kernel",
    "idle",
    "timeline",
    "comm",
    "comm-site",
    "comm-bw",
    "rank-comm",
    "floor",
    "roofline",
    "sol",
    "findings",
    "layer",
    "layer-late",
)
GOLDEN_VIEWS = tuple(v for v in VIEWS if v != "findings")  # findings' evidence names the --db path (test_findings)
EXTRA = {  # options a view needs beyond --by (per database)
    ("samples", "sol"): ["--model-config", str(MODELS / "kimi-k2-thinking" / "config.json"), "--context", "1024"],
    ("x2", "sol"): ["--model-config", str(MODELS / "decode-loop-8l" / "config.json"), "--context", "1024"],
}
CASES = (
    [("samples", view, None) for view in GOLDEN_VIEWS]
    + [("samples", view, "all") for view in GOLDEN_VIEWS]
    + [("x2", view, None) for view in GOLDEN_VIEWS]
)


def test_the_golden_cases_cover_every_view() -> None:
    from k25trace.analysis.report import VIEWS as REPORT_VIEWS

    assert set(REPORT_VIEWS) == set(VIEWS), "a report view was added or removed: add it to VIEWS here"


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("golden")
    samples = root / "samples.duckdb"
    load_into(samples, sorted(SAMPLES.rglob("*.json.gz")))
    x2 = root / "x2.duckdb"
    load_into(x2, sorted((X2 / "eager").rglob("*.json.gz")))
    out = CliRunner().invoke(cli, ["bench", "import", str(X2 / "allreduce_bench_kimi.json"), "--db", str(x2)])
    assert out.exit_code == 0, out.output
    return {"samples": samples, "x2": x2}


def _portable(text: str) -> str:
    for path, name in ((SAMPLES, "<samples>"), (DATA, "<tests-data>")):
        text = text.replace(str(path), name)
    return text


@pytest.mark.parametrize(("db", "view", "phase"), CASES, ids=[f"{d}-{v}" + (f"-{p}" if p else "") for d, v, p in CASES])
def test_report_csv_matches_golden(databases: dict[str, Path], db: str, view: str, phase: str | None) -> None:
    args = ["report", "--db", str(databases[db]), "--by", view, "--format", "csv", *EXTRA.get((db, view), [])]
    if phase:
        args += ["--phase", phase]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (result.output, result.exception)
    got = _portable(result.stdout)
    golden = GOLDEN / f"report_{db}_{view}{'_' + phase if phase else ''}.csv"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        if not golden.exists() or golden.read_text(encoding="utf-8") != got:
            golden.write_text(got, encoding="utf-8")
        return
    assert golden.exists(), f"{golden} is missing: run with K25TRACE_UPDATE_GOLDEN=1 and review it"
    expected = golden.read_text(encoding="utf-8")
    assert got == expected, f"`k25trace {' '.join(args[:1] + args[3:])}` differs from {golden.name}"
