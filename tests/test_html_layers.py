"""The per-layer chart of ``k25trace html`` on real traces: the one-H200 layer twins (eager with a
``record_function`` per layer, and one CUDA graph per step), the two-H200 TP2 decode loop, and the Kimi-K2.5
synthetic sample (61 layers).

Every column's numbers (its ``data-*`` attributes and its hover title) are compared with medians computed here, in
Python, from the database's ``step_layers`` / ``step_layer_categories`` rows (which tests/test_layers.py checks
against the raw JSON to the ns); the odd layer's wall, GPU work and Marlin time are recomputed from the raw trace
JSON alone (json + Decimal); the column count is the layer count + 2 (pre, post); the odd layer of the twins is the
one flagged; the late rank of each segment of the TP2 run is ``report --by layer-late``'s; a database whose steps
could not be segmented says why in one line; the page opens in Chromium with the 61 layer numbers readable.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import defaultdict
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from chromium import Browser, chromium_path
from k25trace import db
from k25trace.cli import cli
from share_fixtures import load_into, tp2_database

DATA = Path(__file__).parent / "data"
LAYERS = DATA / "h200-layers"
KIMI = Path(__file__).parent.parent / "k25trace" / "samples" / "kimi-k25-synthetic-tp2"
HTA = DATA / "traces" / "hta-2rank-sendrecv"
MARKER = re.compile(r"^execute_context_0\(0\)_generation_(\d+)\((\d+)\)$")
MARLIN = re.compile(r"marlin::Marlin<")


class Charts(HTMLParser):
    """The per-layer charts of a page: per chart (``g.segs``: its run and batch size) its columns in order, each
    the attributes of its hover target (``path.hit``) and its title's lines; the section's text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.charts: dict[tuple[str, int | None], list[dict]] = {}
        self.chart: list[dict] | None = None
        self.in_title = False
        self.in_section = False
        self.text: list[str] = []
        self.labels: list[tuple[str, str]] = []  # (class, text) of the layer numbers
        self.in_label: str | None = None
        self.lt = False  # inside the layer numbers' group

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "section":
            self.in_section = a.get("id") == "layers"
        if tag == "g" and a.get("class") == "segs":
            self.chart = self.charts.setdefault((a["data-run"], _batch(a["data-batch"])), [])
        elif tag == "path" and a.get("class") == "hit" and self.chart is not None:
            self.chart.append({**a, "title": ""})
        elif tag == "title" and self.chart:
            self.in_title = True
        elif tag == "text" and self.in_section and self.lt:
            self.in_label = a.get("class", "")
        if tag == "g" and a.get("class") == "lt":
            self.lt = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "g":
            self.chart, self.lt = None, False
        elif tag == "title":
            self.in_title = False
        elif tag == "section":
            self.in_section = False

    def handle_data(self, data: str) -> None:
        if self.in_title and self.chart:
            self.chart[-1]["title"] += data
        if self.in_label is not None:
            self.labels.append((self.in_label, data))
            self.in_label = None
        if self.in_section:
            self.text.append(data)


def _batch(value: str) -> int | None:
    return None if value == "" else int(value)


def page(db_path: Path, out: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["html", "--db", str(db_path), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    return out.read_text(encoding="utf-8")


def charts(text: str) -> Charts:
    parsed = Charts()
    parsed.feed(text)
    return parsed


def title_parts(title: str) -> dict[str, str]:
    """The category lines of a column's title: {category: its ms as written}."""
    return {m[1]: m[2] for m in re.finditer(r"^([a-z_0-9]+) (\d+\.\d{4})$", title, re.M)}


def truth(db_path: Path) -> dict[tuple[str, int | None], dict]:
    """Per run and batch size, from the stored rows alone: the layer count, and per segment label (in step
    order) the medians over its decode rank-steps of wall, busy, each category's exclusive time (0 where it did not
    run), overlap and idle, in ns, and its most common kind."""
    con = db.connect(db_path, read_only=True)
    rows = con.execute(
        """select r.run_id, s.batch_size, l.trace_id, l.step_index, l.segment_index, l.label, l.kind, l.layers,
                  l.wall_ns, l.busy_ns, l.idle_ns, l.overlap_ns
           from step_layers l join steps s using (trace_id, step_index) join trace_runs r using (trace_id)
           where s.phase = 'decode' and not s.is_empty and l.evidence != 'none'"""
    ).fetchall()
    cats = defaultdict(dict)
    for t, k, seg, cat, busy in con.execute(
        "select trace_id, step_index, segment_index, category, busy_ns from step_layer_categories"
    ).fetchall():
        cats[(t, k, seg)][cat] = busy
    con.close()
    groups: dict[tuple[str, int | None], dict] = {}
    for run, batch, t, k, seg, label, kind, layers, wall, busy, idle, overlap in rows:
        g = groups.setdefault((run, batch), {"layers": set(), "segments": {}})
        g["layers"].add(layers)
        s = g["segments"].setdefault(label, {"index": seg, "rows": []})
        s["rows"].append(
            {
                "wall": wall,
                "busy": busy,
                "idle": idle,
                "overlap": overlap,
                "kind": kind,
                **{f"cat:{c}": v for c, v in cats[(t, k, seg)].items()},
            }
        )
    out = {}
    for key, g in groups.items():
        (layers,) = g["layers"]
        segments = {}
        for label, s in sorted(g["segments"].items(), key=lambda kv: kv[1]["index"]):
            rs = s["rows"]
            names = {c for r in rs for c in r if c.startswith("cat:")}
            med = {c[4:]: statistics.median([r.get(c, 0) for r in rs]) for c in names}
            med |= {c: statistics.median([r[c] for r in rs]) for c in ("overlap", "idle")}
            segments[label] = {
                "wall": statistics.median([r["wall"] for r in rs]),
                "busy": statistics.median([r["busy"] for r in rs]),
                "parts": {c: v for c, v in med.items() if v},
                "kind": statistics.mode(r["kind"] for r in rs),
                "steps": len(rs),
            }
        out[key] = {"layers": layers, "segments": segments}
    return out


# ------------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The marlin and bf16 layer twins: eager (annotated) and graph, each folder a run."""
    path = tmp_path_factory.mktemp("html-layers") / "twins.duckdb"
    load_into(path, [LAYERS / d for d in ("eager", "graph", "bf16-eager", "bf16-graph")])
    return path


@pytest.fixture(scope="module")
def kimi(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("html-kimi") / "kimi.duckdb"
    load_into(path, sorted(KIMI.glob("*.json.gz")))
    return path


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tp2_database(tmp_path_factory)


def _fixture(name: str, request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue(name)


# ------------------------------------------------------------------------------------------------ the numbers


@pytest.mark.parametrize("name, runs, layer_counts", [("twins", 4, {16}), ("tp2", 2, {8, 61}), ("kimi", 1, {61})])
def test_every_column_is_the_median_of_its_step_layers_rows(
    name: str, runs: int, layer_counts: set[int], request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    db_path = _fixture(name, request)
    want = truth(db_path)
    got = charts(page(db_path, tmp_path / "page.html")).charts
    assert set(got) == set(want) and len({run for run, _ in got}) == runs
    assert {w["layers"] for w in want.values()} == layer_counts
    for key, columns in got.items():
        w = want[key]
        # pre, every layer in order, post: the layer count + 2
        assert [c["data-segment"] for c in columns] == ["pre", *map(str, range(w["layers"])), "post"]
        assert len(columns) == w["layers"] + 2
        for c in columns:
            seg = w["segments"][c["data-segment"]]
            assert float(c["data-wall-ms"]) == pytest.approx(seg["wall"] / 1e6, abs=1e-12), (key, c)
            assert float(c["data-busy-ms"]) == pytest.approx(seg["busy"] / 1e6, abs=1e-12), (key, c)
            assert c["data-kind"] == seg["kind"]
            # the title carries every stacked part, each the median to 0.1 µs, and nothing else
            assert title_parts(c["title"]) == {cat: f"{ns / 1e6:.4f}" for cat, ns in seg["parts"].items()}, (key, c)
            assert f"wall {seg['wall'] / 1e6:.4f} ms, GPU work {seg['busy'] / 1e6:.4f}" in c["title"]


def _raw_eager(folder: Path) -> dict[int, list[list[tuple[int, int, str]]]]:
    """Per batch size, its profiled steps' GPU activities (start ns, end ns, name) in GPU start order: those whose
    launching runtime call starts inside the step marker's CPU range (the order truth.json's indexes are into)."""
    (path,) = sorted(folder.glob("*.pt.trace.json.gz"))
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        trace = json.load(fh, parse_float=Decimal)
    base = int(trace.get("baseTimeNanoseconds", 0))

    def ns(v: Decimal | int) -> int:
        return int((Decimal(v) * 1000).to_integral_value())

    events = trace["traceEvents"]
    launch = {
        e["args"]["correlation"]: ns(e["ts"])
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    markers = [e for e in events if e.get("cat") == "user_annotation" and MARKER.match(e.get("name", ""))]
    acts = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in e]
    out: dict[int, list] = defaultdict(list)
    for m in sorted(markers, key=lambda e: e["ts"]):
        lo, hi = ns(m["ts"]), ns(m["ts"]) + ns(m["dur"])
        step = [
            (base + ns(a["ts"]), base + ns(a["ts"]) + ns(a["dur"]), a["name"])
            for a in acts
            if lo <= launch.get(a["args"].get("correlation"), -1) <= hi
        ]
        out[int(MARKER.match(m["name"])[1])].append(sorted(step))
    return out


def _window_figures(step: list[tuple[int, int, str]], start: int, end: int) -> tuple[int, int]:
    """(GPU-busy ns, Marlin-only ns) of [start, end): the union of the step's activities clipped to it, and the
    time when only Marlin kernels ran."""
    cuts = sorted({start, end, *(t for s, e, _ in step for t in (s, e) if start < t < end)})
    busy = marlin = 0
    for a, b in zip(cuts, cuts[1:], strict=False):
        running = [name for s, e, name in step if s < b and e > a]
        busy += (b - a) if running else 0
        marlin += (b - a) if running and all(MARLIN.search(n) for n in running) else 0
    return busy, marlin


def test_the_odd_layer_recomputed_from_the_raw_json(twins: Path, tmp_path: Path) -> None:
    """Layer 5 (and the median layer 9) of the annotated eager run: its wall (its first kernel's start to layer
    6's), its GPU work and its Marlin time, per step from the raw JSON, then the median over the batch size's
    steps, are what its column says."""
    truth_json = json.loads((LAYERS / "truth.json").read_text())
    raw = _raw_eager(LAYERS / "eager")
    got = charts(page(twins, tmp_path / "page.html", "--run", "eager")).charts
    (run,) = {r for r, _ in got}
    for batch in (1, 8, 64):
        columns = {c["data-segment"]: c for c in got[(run, batch)]}
        segments = {name: (s, e) for name, s, e in truth_json["sets"]["marlin"]["batches"][str(batch)]["segments"]}
        for layer in (truth_json["odd_layer"], 9):
            walls, busies, marlins = [], [], []
            for step in raw[batch]:
                start = step[segments[f"model.layers.{layer}"][0]][0]
                end = step[segments[f"model.layers.{layer + 1}"][0]][0]
                busy, marlin = _window_figures(step, start, end)
                walls.append(end - start)
                busies.append(busy)
                marlins.append(marlin)
            assert len(walls) == 4
            column = columns[str(layer)]
            assert float(column["data-wall-ms"]) == pytest.approx(statistics.median(walls) / 1e6, abs=1e-12)
            assert float(column["data-busy-ms"]) == pytest.approx(statistics.median(busies) / 1e6, abs=1e-12)
            assert title_parts(column["title"])["marlin_gemm"] == f"{statistics.median(marlins) / 1e6:.4f}"


def test_the_odd_layer_is_the_one_flagged(twins: Path, tmp_path: Path) -> None:
    """In every chart of the four runs (eager and graph, marlin and bf16) layer 5 alone carries the slow flag, its
    number is drawn in red, and the sentence above the chart names it the slowest."""
    odd = str(json.loads((LAYERS / "truth.json").read_text())["odd_layer"])
    text = page(twins, tmp_path / "page.html")
    parsed = charts(text)
    assert len(parsed.charts) == 12  # 4 runs × 3 batch sizes
    for key, columns in parsed.charts.items():
        assert [c["data-segment"] for c in columns if c.get("data-flag") == "slow"] == [odd], key
        assert [c["data-kind"] for c in columns[1:-1]] == ["dense"] + ["moe"] * 15
        assert " · slow" in columns[int(odd) + 1]["title"]
    assert {t for cls, t in parsed.labels if cls == "slow"} == {odd}
    section = "".join(parsed.text)
    assert section.count(f"Layer {odd} is the slowest") == 12


def test_the_late_rank_of_each_segment_is_report_layer_late(tp2: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "--db", str(tp2), "--by", "layer-late", "--format", "json"])
    assert result.exit_code == 0, result.output
    latest: dict[tuple[str, int, str], dict] = {}
    for r in json.loads(result.stdout):
        key = (r["run_id"], r["batch_size"], r["segment"])
        if key not in latest or r["lateness_ms"] > latest[key]["lateness_ms"]:
            latest[key] = r
    got = charts(page(tp2, tmp_path / "page.html")).charts
    seen = 0
    for (run, batch), columns in got.items():
        for c in columns:
            want = latest.get((run, batch, c["data-segment"]))
            late = re.search(r"^late: rank (\d+) (\d+)× (\d+\.\d{4}) ms", c["title"], re.M)
            assert (late is None) == (want is None), c
            if want is not None:
                assert late is not None
                seen += 1
                assert int(late[1]) == want["late_rank"] and int(late[2]) == want["late_collectives"]
                assert late[3] == f"{want['lateness_ms']:.4f}"
    assert seen > 150  # most segments of both TP2 runs had a late rank


def test_steps_that_were_not_segmented_say_why(tmp_path: Path) -> None:
    """HTA's two-rank trace has no step markers and no repeating kernel sequence: no chart, one line with the
    reason stored for its steps (step_layers.reason) and where the method is described."""
    path = tmp_path / "hta.duckdb"
    load_into(path, sorted(HTA.glob("*.json.gz")))
    con = db.connect(path, read_only=True)
    ((reason, steps),) = con.execute(
        "select reason, count(*) from step_layers where evidence = 'none' group by all"
    ).fetchall()
    con.close()
    text = page(path, tmp_path / "page.html")
    parsed = charts(text)
    assert parsed.charts == {}
    section = "".join(parsed.text)
    assert f"no step segmented into layers — {reason} ({steps} rank-steps)" in section
    assert "docs/methods.md, Layers" in section and text.count("data-unsegmented=") == 1


@pytest.mark.skipif(
    chromium_path() is None, reason="needs a Chromium browser on PATH (Debian: apt-get install chromium)"
)
def test_61_layers_stay_readable_in_chromium(kimi: Path, tmp_path: Path) -> None:
    """The Kimi sample's three charts of 63 columns: drawn at their size, in the TUI's colours, every column with
    its tooltip, and the layer numbers under them never overlapping."""
    out = tmp_path / "kimi.html"
    page(kimi, out)
    with Browser(width=1400, height=1000) as browser:
        browser.open(out.as_uri())
        assert browser.problems() == [] and browser.requests() == [out.as_uri()]
        figures = browser.evaluate(
            "[...document.querySelectorAll('svg.layers')].map(s => [s.getBoundingClientRect().width, "
            "s.querySelectorAll('path.hit').length, s.querySelectorAll('path.hit > title').length])"
        )
        assert figures == [[1100, 63, 63]] * 3
        overlaps = browser.evaluate(
            "[...document.querySelectorAll('svg.layers')].map(s => { const r = [...s.querySelectorAll('.lt text')]"
            ".map(t => t.getBBox()); let n = 0; for (let i = 1; i < r.length; i++) "
            "if (r[i].x < r[i - 1].x + r[i - 1].width) n++; return [r.length, n]; })"
        )
        assert overlaps == [[63, 0]] * 3, overlaps
        fill = browser.evaluate("getComputedStyle(document.querySelector('svg.layers path.c-allreduce')).fill")
        assert fill == "rgb(214, 69, 69)"  # CATEGORY_COLORS['allreduce'], #d64545
        assert browser.problems() == []


def test_a_pre_far_taller_than_the_layers_is_cut_and_labelled(tmp_path: Path) -> None:
    """The SGLang MI300X sample's pre segment holds ~464 ms of idle (a host sync) against layers of ~0.3 ms: the
    axis stops just above the tallest layer, the pre column is cut at the top with its total written beside it,
    and its numbers stay whole."""
    path = tmp_path / "sglang.duckdb"
    load_into(path, sorted((KIMI.parent / "sglang-mi300x-decode").glob("*.json.gz")))
    want = truth(path)
    text = page(path, tmp_path / "page.html")
    ((key, columns),) = charts(text).charts.items()
    pre, layers = want[key]["segments"]["pre"], [s for k, s in want[key]["segments"].items() if k.isdigit()]
    tallest = max(sum(s["parts"].values()) for s in layers)
    assert sum(pre["parts"].values()) > 100 * tallest
    assert float(columns[0]["data-wall-ms"]) == pytest.approx(pre["wall"] / 1e6, abs=1e-12)
    assert f"{sum(pre['parts'].values()) / 1e6:,.1f} ms ↑" in text and 'class="cut"' in text
    ticks = [float(t) for t in re.findall(r'class="tick">([\d.]+)</text>', text.split('class="layers"')[1])]
    assert tallest / 1e6 <= max(ticks) < 2 * tallest / 1e6
