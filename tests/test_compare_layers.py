"""`k25trace compare --by layer` against truth computed here: the H200 layer twins (eager with a record_function per
layer, and the same program as one CUDA graph per step), whose layer boundaries come from tests/data/h200-layers/
truth.json and whose times come from the raw JSON; the TP2 CUDA-graph fixture, batch 1 against batch 8 (two ranks:
the per-step value is the mean of the ranks' step_layers rows, checked against the raw JSON in test_layers.py);
a synthetic pair where one rank arrives late at one layer's all-reduce; and the pairs whose layers must not be
paired (other layer counts, no layer split)."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from decimal import Decimal
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from test_compare import load, run_cli, side
from test_layers import raw_steps

from k25trace import synth
from k25trace.analysis.compare import STANDS_OUT, compare, segment_order
from k25trace.render.html import render_comparison
from k25trace.synth.config import Delay

DATA = Path(__file__).parent / "data"
LAYERS = DATA / "h200-layers"
TP2 = DATA / "h200x2-decode-loop"
KIMI = Path(__file__).resolve().parents[1] / "k25trace" / "samples" / "kimi-k25-synthetic-tp2"
MARKER = re.compile(r"^execute_context_0\(0\)_generation_(\d+)\((\d+)\)$")
MIRROR = {"slower": "faster", "faster": "slower"}


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjustment, written out here (not k25trace.stats.holm)."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def marker_batches(path: Path) -> list[int]:
    """The batch size of each step marker, in time order (raw_steps' order)."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        events = json.load(fh, parse_float=Decimal)["traceEvents"]
    markers = sorted(
        (e["ts"], MARKER.match(e["name"]))
        for e in events
        if e.get("cat") == "user_annotation" and MARKER.match(e.get("name", ""))
    )
    return [int(m.group(1)) for _, m in markers]


def twin_walls(folder: str) -> dict[int, dict[str, list[float]]]:
    """Per batch size and segment label, each step's segment wall in ms from the raw JSON: truth.json's [start, end)
    activity indices give the segments; a segment's window runs from its first activity's start (pre: the step's
    first) to the next segment's first start (post: to the step's last end)."""
    truth = json.loads((LAYERS / "truth.json").read_text())["sets"]["marlin"]["batches"]
    (path,) = sorted((LAYERS / folder).glob("*.pt.trace.json.gz"))
    out: dict[int, dict[str, list[float]]] = {}
    for batch, step in zip(marker_batches(path), raw_steps(path), strict=True):
        acts = step["acts"]
        segments = truth[str(batch)]["segments"]
        starts = [acts[0][0]] + [acts[s][0] for _, s, _ in segments[1:]]
        ends = starts[1:] + [max(a[1] for a in acts)]
        for (name, _, _), start, end in zip(segments, starts, ends, strict=True):
            label = name.rsplit(".", 1)[-1]
            out.setdefault(batch, {}).setdefault(label, []).append((end - start) / 1e6)
    return out


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> dict[str, Path]:
    if not (LAYERS / "truth.json").exists():
        pytest.skip("tests/data/h200-layers is not there")
    tmp = tmp_path_factory.mktemp("compare-layers-twins")
    return {name: load(tmp / f"{name}.duckdb", LAYERS / name) for name in ("eager", "graph")}


def test_twins_layer_medians_and_welch_against_the_raw_json(twins: dict[str, Path]) -> None:
    """Eager against its CUDA-graph twin: every segment of every batch size, median A and B from the raw JSON, the
    Welch p against scipy, Holm-adjusted over the table's rows."""
    stats = pytest.importorskip("scipy.stats")
    result = compare(side("A", twins["eager"]), side("B", twins["graph"]))
    frame = result.layers
    walls_a, walls_b = twin_walls("eager"), twin_walls("graph")
    labels = ["pre", *map(str, range(16)), "post"]
    assert frame["group"].unique(maintain_order=True).to_list() == ["bs=1", "bs=8", "bs=64"]
    raw_p = []
    for row in frame.iter_rows(named=True):
        batch = int(row["group"].removeprefix("bs="))
        a, b = walls_a[batch][row["segment"]], walls_b[batch][row["segment"]]
        assert (row["steps_a"], row["steps_b"]) == (len(a), len(b)) == (4, 6)
        assert row["ms_a"] == pytest.approx(statistics.median(a), abs=1e-4)
        assert row["ms_b"] == pytest.approx(statistics.median(b), abs=1e-4)
        assert row["delta_ms"] == pytest.approx(statistics.median(b) - statistics.median(a), abs=2e-4)
        raw_p.append(float(stats.ttest_ind(b, a, equal_var=False).pvalue))
    for row, p in zip(frame.iter_rows(named=True), holm(raw_p), strict=True):
        assert row["p_value"] == pytest.approx(p, rel=5e-3, abs=1e-12)
    for group in ("bs=1", "bs=8", "bs=64"):
        part = frame.filter(pl.col("group") == group)
        assert part["segment"].to_list() == labels  # numeric order: 10 after 9, post last
        assert part["kind"].to_list() == ["pre", "dense", *["moe"] * 15, "post"]
    assert sorted(labels, key=segment_order) == labels and sorted(["post", "10", "pre", "9"], key=segment_order) == [
        "pre",
        "9",
        "10",
        "post",
    ]


def test_twins_json_csv_and_terminal(twins: dict[str, Path]) -> None:
    """--format json carries the layer rows (all tables and --by layer), CSV one row per segment, and the terminal
    table opens with the verdict, fits 120 columns and caps the 54 rows at 40 unless --all."""
    base = ["compare", str(twins["eager"]), str(twins["graph"])]
    whole = json.loads(run_cli(*base, "--format", "json").stdout)
    rows = json.loads(run_cli(*base, "--by", "layer", "--format", "json").stdout)
    assert whole["layers"] == rows and len(rows) == 3 * 18
    assert {r["segment"] for r in rows} == {"pre", "post", *map(str, range(16))}
    csv = run_cli(*base, "--by", "layer", "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("phase,group,segment,kind,steps_a,steps_b,ms_a,ms_b,delta_ms") and len(csv) == 55
    table = run_cli(*base, "--by", "layer", "--format", "table")
    lines = table.stdout.splitlines()
    assert table.returncode == 0 and lines[0].startswith("Verdict: ")
    assert max(len(line.rstrip()) for line in lines) <= 120
    body = [line for line in lines if line.startswith("│ bs=")]
    assert len(body) == 40 and "14 of 54 layer rows left out, the least changed (--all shows all)" in table.stdout
    every = [line for line in run_cli(*base, "--by", "layer", "--format", "table", "--all").stdout.splitlines()]
    assert len([line for line in every if line.startswith("│ bs=")]) == 54


def tp2_graph_walls(con, batch: int) -> dict[str, list[float]]:
    """Per segment label, each step's wall in ms: the mean of the two ranks' step_layers rows of the step."""
    rows = con.execute(
        """select l.label, l.step_index, avg(l.wall_ns) from step_layers l join steps s using (trace_id, step_index)
           where s.phase = 'decode' and s.batch_size = ? and l.evidence != 'none' group by all order by 2""",
        [batch],
    ).fetchall()
    out: dict[str, list[float]] = {}
    for label, _, wall in rows:
        out.setdefault(label, []).append(float(wall) / 1e6)
    return out


def test_tp2_graph_batch_1_against_batch_8(tmp_path: Path) -> None:
    """Two ranks, 61 layers: one row per segment, the step's value the ranks' mean, Welch against scipy."""
    stats = pytest.importorskip("scipy.stats")
    path = load(tmp_path / "graph.duckdb", TP2 / "graph")
    a, b = side("A", path, batch=1), side("B", path, batch=8)
    frame = compare(a, b).layers
    assert frame["segment"].to_list() == ["pre", *map(str, range(61)), "post"]
    assert set(frame["group"]) == {"A batch=1 ↔ B batch=8"}
    wa, wb = tp2_graph_walls(a.con, 1), tp2_graph_walls(a.con, 8)
    raw_p = []
    for row in frame.iter_rows(named=True):
        xa, xb = wa[row["segment"]], wb[row["segment"]]
        assert (row["steps_a"], row["steps_b"]) == (len(xa), len(xb)) == (6, 6)
        assert row["ms_a"] == pytest.approx(float(np.median(xa)), abs=1e-4)
        assert row["ms_b"] == pytest.approx(float(np.median(xb)), abs=1e-4)
        raw_p.append(float(stats.ttest_ind(xb, xa, equal_var=False).pvalue))
    for row, p in zip(frame.iter_rows(named=True), holm(raw_p), strict=True):
        assert row["p_value"] == pytest.approx(p, rel=5e-3, abs=1e-12)


SYNTH = dict(ranks=2, batch_sizes=(1,), steps_per_batch=8, layers=8, prefill=False, empty_steps=0, seed=3)


def test_one_late_layer_stands_out(tmp_path: Path) -> None:
    """Rank 0 arrives 400 µs late at collective 11 of every step. The generator writes the embedding's all-reduce
    (collective 0), then two per layer, so collective 11 is layer 5's first: layer 5 is ~0.4 ms slower and stands
    out; every other segment is within noise. compare B A mirrors it."""
    truth = synth.generate(tmp_path / "late", **SYNTH, delays=[Delay(0, 400.0, ordinals=frozenset({11}))])
    synth.generate(tmp_path / "plain", **SYNTH)
    late = [c for c in truth["collectives"] if any(c["delay_ns"])]
    assert {c["k"] for c in late} == {11} and len(late) == 8
    layer = (11 - 1) // 2
    pa = load(tmp_path / "plain.duckdb", tmp_path / "plain")
    pb = load(tmp_path / "late.duckdb", tmp_path / "late")
    result = compare(side("A", pa), side("B", pb))
    frame = result.layers
    hit = frame.filter(pl.col("segment") == str(layer)).row(0, named=True)
    assert hit["verdict"] == "slower" and hit["flag"] == STANDS_OUT
    assert hit["delta_ms"] == pytest.approx(0.4, abs=0.03)
    others = frame.filter(pl.col("segment") != str(layer))
    assert set(others["verdict"]) == {"within noise"} and others["flag"].null_count() == others.height
    assert f"bs=1: layer {layer} slower, stands out" in "\n".join(result.changes())
    mirrored = compare(side("A", pb), side("B", pa)).layers
    assert mirrored["segment"].to_list() == frame["segment"].to_list()
    assert mirrored["verdict"].to_list() == [MIRROR.get(v, v) for v in frame["verdict"].to_list()]
    assert mirrored["flag"].to_list() == frame["flag"].to_list()
    assert mirrored["delta_ms"].to_list() == [-d if d else d for d in frame["delta_ms"].to_list()]
    # the comparison page: one bar per segment with the table's delta, layer 5's outlined, its row in the table
    page = render_comparison(result)
    bars = re.findall(
        r'<rect x="[^"]*" y="[^"]*" width="[^"]*" height="[^"]*" style="[^"]*" opacity="[^"]*"'
        r'( stroke="#111" stroke-width="2")? data-group="bs=1" data-segment="([^"]+)" '
        r'data-delta="([^"]*)"',
        page,
    )
    assert [b[1] for b in bars] == frame["segment"].to_list()
    assert [float(b[2]) for b in bars] == pytest.approx(frame["delta_ms"].to_list())
    assert [b[1] for b in bars if b[0]] == [str(layer)]
    assert "bs=1 (decode): 8 layers, 1 segment changed, layer 5 stands out" in page


def test_other_layer_counts_are_never_paired(tmp_path: Path) -> None:
    """The Kimi synthetic sample (61 layers) against the TP2 eager fixture (8): no layer rows, one note naming
    both counts and the groups; the terminal says why instead of an empty table."""
    kimi = load(tmp_path / "kimi.duckdb", KIMI)
    eager = load(tmp_path / "eager.duckdb", TP2 / "eager")
    result = compare(side("A", kimi), side("B", eager))
    assert result.layers.is_empty() and result.groups == 2  # batch 1 and 64 on both sides
    notes = [n for n in result.notes if n.startswith("layers")]
    assert notes == [
        "layers of bs=1, bs=64: not compared: A has 61 layers per step, B 8 (another model or another layer split: "
        "layers are paired by index only when the counts agree)"
    ]
    table = run_cli("compare", str(kimi), str(eager), "--by", "layer", "--format", "table")
    assert table.returncode == 0 and "Nothing to compare: layers of bs=1, bs=64: not compared" in table.stdout
    assert "layers of bs=1, bs=64" in table.stderr  # with the other notes
    assert run_cli("compare", str(kimi), str(eager), "--format", "json").stdout.count('"layers": []') == 1
    assert "Not compared in bs=1, bs=64: A has 61 layers per step, B 8" in render_comparison(result)


def test_a_side_without_layer_split(tmp_path: Path) -> None:
    """Two layers repeat too few times for a layer signature (at least 4 occurrences, docs/methods.md): that side's
    steps are unsegmented, and the note gives the stored reason."""
    synth.generate(tmp_path / "two", **{**SYNTH, "layers": 2, "steps_per_batch": 3})
    synth.generate(tmp_path / "eight", **{**SYNTH, "steps_per_batch": 3})
    two = load(tmp_path / "two.duckdb", tmp_path / "two")
    eight = load(tmp_path / "eight.duckdb", tmp_path / "eight")
    con = side("A", two).con
    reasons = con.execute("select distinct reason from step_layers where evidence = 'none'").fetchall()
    assert (
        len(reasons) == 1
        and con.execute("select count(*) from step_layers where evidence != 'none'").fetchone()[0] == 0
    )
    result = compare(side("A", two), side("B", eight))
    assert result.layers.is_empty()
    assert f"layers of bs=1: not compared: A none of its 3 steps is split into layers ({reasons[0][0]})" in result.notes
