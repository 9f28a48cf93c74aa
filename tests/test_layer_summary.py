"""The answer above `report --by layer`'s table: per run and batch size, the slowest layer (median GPU work per
step) against the median layer, the layers slow against their kind and those with outlier steps, checked against
medians the test takes itself from the step_layers rows (which tests/test_layers.py checks against the raw JSON)."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest

from share_fixtures import load_into

ROOT = Path(__file__).resolve().parent.parent
TP2 = ROOT / "tests" / "data" / "h200x2-decode-loop"
LINE = re.compile(
    r"^(?P<run>.+), batch size (?P<batch>\d+): (?P<n>\d+) (?P<kind>\w+) layers; slowest: layer (?P<layer>\d+), "
    r"(?P<ms>[\d.]+) ms of GPU work per step, (?P<ratio>[\d.]+)× the median layer$"
)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("layer_summary") / "tp2.duckdb"
    load_into(path, [TP2 / "eager", TP2 / "graph"])
    return path


def _truth(db: Path) -> dict[tuple[str, int], dict]:
    """Per (run label, batch size): each layer's median busy ns over its decode rank-steps, and its kind."""
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "select r.run_label, s.batch_size, l.label, l.kind, l.busy_ns from step_layers l "
        "join steps s using (trace_id, step_index) join trace_runs r using (trace_id) "
        "where s.phase = 'decode' and not s.is_empty and l.layer is not null and l.evidence != 'none'"
    ).fetchall()
    con.close()
    busy: dict[tuple[str, int], dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    kinds: dict[tuple[str, int], dict[str, str]] = defaultdict(dict)
    for run, batch, label, kind, ns in rows:
        busy[(run, batch)][label].append(ns)
        kinds[(run, batch)][label] = kind
    out = {}
    for key, per_label in busy.items():
        medians = {label: statistics.median(v) for label, v in per_label.items()}
        by_kind = defaultdict(list)
        for label, m in medians.items():
            by_kind[kinds[key][label]].append(m)
        kind_median = {k: statistics.median(v) for k, v in by_kind.items()}
        slow = sorted((label for label, m in medians.items() if m >= 1.1 * kind_median[kinds[key][label]]), key=int)
        out[key] = {"medians": medians, "all": statistics.median(medians.values()), "slow": slow}
    return out


def test_the_layer_view_opens_with_its_answer(db: Path) -> None:
    env = {**os.environ, "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-m", "k25trace", "report", "--db", str(db), "--by", "layer", "--format", "table"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    truth = _truth(db)
    heads = [(i, LINE.match(line)) for i, line in enumerate(lines) if LINE.match(line)]
    assert len(heads) == len(truth) == 6  # eager and graph, batch sizes 1, 8, 64
    assert heads[-1][0] < next(i for i, line in enumerate(lines) if line.startswith("┏"))  # above the table
    for i, m in heads:
        t = truth[(m["run"], int(m["batch"]))]
        assert int(m["n"]) == len(t["medians"])
        slowest = max(t["medians"], key=lambda label: (t["medians"][label], -int(label)))
        assert m["layer"] == slowest
        assert m["ms"] == f"{round(t['medians'][slowest] / 1e6, 4):.3f}"
        assert m["ratio"] == f"{round(t['medians'][slowest] / t['all'], 3):.2f}"
        detail = lines[i + 1]
        if t["slow"]:
            assert detail.startswith(f"  slow against its kind: {', '.join(t['slow'])}"), detail
        else:
            assert detail.startswith("  no layer ≥ 10 % over its kind"), detail
    assert all(len(line) <= 120 for line in lines)
