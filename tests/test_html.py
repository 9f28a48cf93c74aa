"""``k25trace html`` on real traces (two H200s, TP2, CUDA graphs and eager): the page is self-contained and small,
every number it draws equals ``k25trace report --format json`` (and the bars are drawn to scale), the timeline shows
the median step of each batch size on every rank on the aligned clock, TPOT and tok/s of a capture level appear,
and the page opens in a real headless Chromium with no console error, draws its charts in the TUI's colours and
makes no request at all."""

from __future__ import annotations

import json
import os
import re
import time
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from chromium import Browser, chromium_path, png_size
from k25trace import db
from k25trace.cli import cli
from k25trace.render import html
from k25trace.render.colors import CATEGORY_COLORS
from share_fixtures import CAPTURE_STATS, capture_database, graph_database, tp2_database

# ------------------------------------------------------------------------------------------------ helpers


class Marks(HTMLParser):
    """Every element of the page with its attributes, in document order, and the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.stack: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def find(self, tag: str | None = None, **wanted: str) -> list[dict[str, str]]:
        out = []
        for t, a in self.elements:
            if tag is not None and t != tag:
                continue
            if all(
                (a.get(k.replace("_", "-")) == v) if v is not True else (k.replace("_", "-") in a)
                for k, v in wanted.items()
            ):
                out.append(a)
        return out


def parse(page: str) -> Marks:
    marks = Marks()
    marks.feed(page)
    return marks


def report_json(db_path: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["report", "--db", str(db_path), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def batch_key(value: str) -> int | None:
    return None if value == "" else int(value)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tp2_database(tmp_path_factory)


@pytest.fixture(scope="module")
def page(tp2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    out = tmp_path_factory.mktemp("html") / "report.html"
    started = time.perf_counter()
    result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "-o", str(out)])
    seconds = time.perf_counter() - started
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.stderr and "2 run(s), 6 step timeline(s)" in result.stderr
    return out, out.read_text(encoding="utf-8"), seconds


# ------------------------------------------------------------------------------------------------ the file


def test_the_page_is_one_self_contained_small_file(page: tuple[Path, str, float]) -> None:
    path, text, seconds = page
    size = path.stat().st_size
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # a file to share, not a private temporary file
    print(f"\nHTML report of the TP2 graph+eager fixture: {size:,} bytes, written in {seconds:.2f} s")
    assert size < 500_000, size  # a few hundred KB: inline SVG, no library (394 KB with the layer charts)
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    marks = parse(text)
    # nothing is loaded from anywhere: no external script, stylesheet, image, font or frame
    assert not marks.find("link") and not marks.find("img") and not marks.find("iframe")
    assert all("src" not in a for _, a in marks.elements)
    assert all(not a.get("href", "#").strip() or a["href"].startswith("#") for t, a in marks.elements if t == "a")
    urls = set(re.findall(r"(?:https?:)?//[^\s\"'<>)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls  # the SVG namespace is a name, never fetched
    assert "@import" not in text and "url(" not in text
    # every chart is a figure with a title, a caption and its SVG
    figures = text.count("<figure")
    assert figures >= 12 and text.count("<figcaption><h3>") == figures
    assert len(marks.find("svg", role="img")) >= 12
    # every section is there, and the navigation points at them
    for section in ("runs", "breakdown", "scaling", "comm", "idle", "distribution", "timeline", "kernels"):
        assert marks.find("section", id=section), section
        assert marks.find("a", href=f"#{section}"), section


def test_breakdown_bars_are_the_report_numbers_drawn_to_scale(tp2: Path, page: tuple[Path, str, float]) -> None:
    rows = report_json(tp2)
    marks = parse(page[1])
    segs = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"]): a
        for a in marks.find("rect")
        if "seg" in a.get("class", "").split()
    }
    assert len(segs) == len(rows) > 0
    for r in rows:
        seg = segs[(r["run_id"], r["batch_size"], r["category"])]
        assert float(seg["data-ms"]) == r["ms_per_step"] and float(seg["data-pct"]) == r["pct_of_step"]
        assert f"c-{r['category'].replace('_', '-')}" in seg["class"]
    # each bar is the step's wall time: its segments, end to end, span step_ms on the axis's scale
    bars = marks.find("g", **{"class": "bar"})
    assert len(bars) == len({(r["run_id"], r["batch_size"]) for r in rows}) == 6
    for bar in bars:
        run, batch = bar["data-run"], batch_key(bar["data-batch"])
        first = next(r for r in rows if r["run_id"] == run and r["batch_size"] == batch)
        assert float(bar["data-step-ms"]) == first["step_ms"]
        scale, x0 = float(bar["data-scale"]), float(bar["data-x0"])
        mine = sorted(
            (float(a["x"]), float(a["width"]), a) for (rn, b, _), a in segs.items() if rn == run and b == batch
        )
        x = x0
        for sx, width, a in mine:
            assert abs(sx - x) < 0.02 and abs(width - float(a["data-ms"]) * scale) < 0.02
            x += width
        # Σ categories + overlap + idle = wall (the report's invariant, up to its 4-decimal rounding)
        assert abs((x - x0) / scale - first["step_ms"]) < 0.002 * len(mine)


def test_comm_idle_kernels_and_steps_are_the_report_numbers(tp2: Path, page: tuple[Path, str, float]) -> None:
    marks = parse(page[1])
    comm = report_json(tp2, "--by", "comm")
    assert comm
    parts = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"], a["data-part"]): float(a["data-ms"])
        for a in marks.find("rect", data_part=True)
    }
    stragglers = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"]): a["data-straggler"]
        for a in marks.find("b", data_straggler=True)
    }
    for r in comm:
        key = (r["run_id"], r["batch_size"], r["category"])
        assert parts[key + ("transfer",)] == r["transfer_ms_per_step"]
        assert stragglers[key] == ("" if r["straggler_rank"] is None else str(r["straggler_rank"]))
    # the real traces' straggler at batch 8 and 64 of the graph run is rank 0 (README, test_h200x2_traces)
    graph = next(r["run_id"] for r in comm if r["run_id"].endswith("graph#ws2"))
    assert stragglers[(graph, 8, "allreduce")] == stragglers[(graph, 64, "allreduce")] == "0"

    idle = report_json(tp2, "--by", "idle")
    drawn = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-column"]): a["data-ms"]
        for a in marks.find("rect", data_column=True)
    }
    assert len(drawn) == 10 * len(idle)
    for r in idle:
        for column in (
            "host_ms",
            "sync_ms",
            "launch_overhead_ms",
            "device_ms",
            "unknown_ms",
            "between_host_ms",
            "between_sync_ms",
            "between_launch_ms",
            "between_device_ms",
            "between_busy_ms",
        ):
            assert float(drawn[(r["run_id"], r["batch_size"], column)]) == r[column], column

    kernels = report_json(tp2, "--by", "kernel")
    shown = [(a["data-kernel"], a["data-category"], float(a["data-ms"])) for a in marks.find("span", data_kernel=True)]
    assert shown == [(r["short_name"], r["category"], r["ms_per_step"]) for r in kernels] and len(shown) == 20

    steps = report_json(tp2, "--by", "step")
    con = db.connect(tp2, read_only=True)
    run_of = dict(con.execute("select trace_id, run_id from trace_runs").fetchall())
    con.close()
    expected = sorted(
        (run_of[r["trace_id"]], r["rank"], r["step_index"], r["wall_ms"]) for r in steps if not r["is_empty"]
    )
    dots = sorted(
        (a["data-run"], int(a["data-rank"]), int(a["data-step"]), float(a["data-ms"]))
        for a in marks.find("circle", data_step=True)
    )
    assert dots == expected and len(dots) == 36 + 18
    # the outlier is visible: the graph run's first batch-1 step carries the ranks' 142 ms start skew
    outliers = [a for a in marks.find("circle", data_step=True) if "outlier" in a["class"]]
    assert any(
        a["data-run"].endswith("graph#ws2")
        and a["data-batch"] == "1"
        and a["data-step"] == "0"
        and float(a["data-ms"]) > 100
        for a in outliers
    )


WAIT_WORDS = {
    "wait_host_ms_per_step": "host launched late",
    "wait_sync_ms_per_step": "sync",
    "wait_gpu_work_ms_per_step": "longer GPU work",
    "wait_device_ms_per_step": "waited on the device",
    "wait_other_ms_per_step": "other (e.g. at the run's first collective)",
}


def test_the_wait_is_split_by_why_the_late_rank_was_late(tp2: Path, page: tuple[Path, str, float]) -> None:
    """The collectives section draws report --by comm's cause split of the wait (not the old 'GPU wait' by
    position), lists it with the why_late sentence and the position split under position words; on the real eager
    TP2 pair the causes are not all in one part."""
    marks = parse(page[1])
    text = " ".join(" ".join(marks.text).split())
    comm = report_json(tp2, "--by", "comm")
    bars = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"], a["data-part"]): a["data-ms"]
        for a in marks.find("rect", data_part=True)
    }
    cells = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"], a["data-column"]): a["data-ms"]
        for a in marks.find("span", data_column=True)
    }
    why = {
        (a["data-run"], batch_key(a["data-batch"]), a["data-category"]): a["data-why-late"]
        for a in marks.find("span", data_why_late=True)
    }
    assert len(why) == len(comm) and len(cells) == 7 * len(comm)
    assert {k[3] for k in bars} == {"transfer", "wait_host", "wait_sync", "wait_gpu_work", "wait_device", "wait_other"}
    for r in comm:
        key = (r["run_id"], r["batch_size"], r["category"])
        for column in WAIT_WORDS:
            assert float(bars[key + (column.removesuffix("_ms_per_step"),)]) == r[column], column
            assert float(cells[key + (column,)]) == r[column], column
        for column in ("launch_wait_ms_per_step", "gpu_wait_ms_per_step"):
            assert float(cells[key + (column,)]) == r[column], column
        # the five parts are the whole wait (report rounds each to 4 decimals)
        assert abs(sum(r[c] for c in WAIT_WORDS) - r["wait_ms_per_step"]) <= 5e-4 * 6
        assert why[key] == (r["why_late"] or "") and (r["why_late"] or "—") in text
    eager = [r for r in comm if r["run_id"].endswith("eager#ws2")]
    assert len(eager) == 6 and all(r["why_late"] for r in eager)
    # batch 8's all-reduces: the late rank's host launched late and its GPU work ran longer, both drawn
    bs8 = next(r for r in eager if r["batch_size"] == 8 and r["category"] == "allreduce")
    assert bs8["wait_host_ms_per_step"] > 0.1 and bs8["wait_gpu_work_ms_per_step"] > 0.1
    assert bs8["why_late"].startswith("host launched late")
    for words in [
        *WAIT_WORDS.values(),
        "wait at the step's first collective",
        "wait at a later collective",
        "why the late rank was late",
    ]:
        assert words in text, words
    assert "GPU wait" not in text and "GPU work between collectives differed" not in text
    assert "launch wait" not in text


def test_timeline_is_the_median_step_on_every_rank_on_the_aligned_clock(
    tp2: Path, page: tuple[Path, str, float]
) -> None:
    con = db.connect(tp2, read_only=True)
    steps = con.execute(
        "select trace_runs.run_id, steps.batch_size, steps.step_index, steps.rank, steps.wall_ns, steps.gpu_start_ns, "
        "steps.gpu_end_ns, coalesce(rank_offsets.offset_ns, 0) from steps join trace_runs using (trace_id) "
        "left join rank_offsets using (run_id, trace_id) where steps.phase = 'decode' and not steps.is_empty"
    ).fetchall()
    offsets = dict(con.execute("select rank, offset_ns from rank_offsets where run_id like '%graph#ws2'").fetchall())
    con.close()
    assert offsets[0] == 0 and offsets[1] != 0  # the alignment moves rank 1, so the test can see it applied
    # the median step of each run and batch size, worked out here from the steps table
    walls: dict[tuple, dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    facts = {}
    for run, batch, step, rank, wall, start, end, off in steps:
        walls[(run, batch)][step].append(wall)
        facts[(run, step, rank)] = (wall, start - off, end - off)
    chosen = {}
    for key, by_step in walls.items():
        means = {s: sum(w) / len(w) for s, w in by_step.items()}
        ordered = sorted(means.values())
        n = len(ordered)
        median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
        chosen[key] = min(means, key=lambda s: (abs(means[s] - median), s))

    lanes = parse(page[1]).find("g", **{"class": "lane"})
    assert len(lanes) == 2 * 6  # 2 ranks × (3 batch sizes × 2 runs)
    for lane in lanes:
        run, batch = lane["data-run"], int(lane["data-batch"])
        step, rank = int(lane["data-step"]), int(lane["data-rank"])
        assert step == chosen[(run, batch)]
        wall, start, end = facts[(run, step, rank)]
        assert (int(lane["data-wall-ns"]), int(lane["data-start-ns"]), int(lane["data-end-ns"])) == (wall, start, end)
        window = [(facts[(run, step, r)][1], facts[(run, step, r)][2]) for r in (0, 1)]
        assert int(lane["data-window-start-ns"]) == min(s for s, _ in window)
        assert int(lane["data-window-end-ns"]) == max(e for _, e in window)
    # the drawn slices: inside each rank's own window, in category colours, AllReduce on every lane
    text = page[1]
    for lane_markup in re.findall(r'<g class="lane"[^>]*>.*?</g>', text):
        attrs = dict(re.findall(r'(data-[a-z-]+)="([^"]*)"', lane_markup.split(">", 1)[0]))
        xs = [(float(x), float(w)) for x, w in re.findall(r"M([\d.]+) [\d.]+h([\d.]+)", lane_markup)]
        assert xs
        assert min(x for x, _ in xs) >= float(attrs["data-x-start"]) - 1.0
        assert max(x + w for x, w in xs) <= float(attrs["data-x-end"]) + 1.0
        cats = set(re.findall(r'data-category="([^"]+)"', lane_markup))
        assert "allreduce" in cats and "gemm" in cats
        assert sum(int(c) for c in re.findall(r'data-columns="(\d+)"', lane_markup)) == sum(round(w) for _, w in xs)


def test_capture_levels_add_tpot_and_measured_throughput(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    path = capture_database(tmp_path_factory)
    out = tmp_path / "capture.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    marks = parse(out.read_text(encoding="utf-8"))
    points = {
        (a["data-series"].split("|")[1], int(a["data-batch"])): float(a["data-value"])
        for a in marks.find("circle", data_series=True)
    }
    # level c8 ran batch 1, 8 and 64 (8 steps each): TPOT and tok/s are drawn at the batch nearest its concurrency
    assert points[("tpot_p50", 8)] == CAPTURE_STATS["tpot_ms"]["p50"]
    assert points[("measured_tok_s", 8)] == CAPTURE_STATS["output_tok_s"]
    rows = report_json(path)
    for batch in (1, 8, 64):
        step_ms = next(r["step_ms"] for r in rows if r["batch_size"] == batch)
        assert points[("mean", batch)] == step_ms
        assert points[("gpu_tok_s", batch)] == round(batch * 1000.0 / step_ms, 1)
    text = " ".join(marks.text)
    assert "TPOT p50 ms" in text and "31.50" in text and "33.25" in text and "512" in text
    # one rank: nothing to say across ranks, and it says so
    assert "every run has one rank" in text


def test_a_database_without_steps_gives_a_page_that_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.duckdb"
    db.connect(path).close()
    result = CliRunner().invoke(cli, ["html", "--db", str(path), "-o", "-"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("<!DOCTYPE html>") and "No steps with GPU activity" in result.stdout


def test_render_is_headless_and_reuses_the_tui_colours(tmp_path_factory: pytest.TempPathFactory) -> None:
    con = db.connect(graph_database(tmp_path_factory), read_only=True)
    text, data = html.build(con, source="graph.duckdb", phase="decode", top=5)
    con.close()
    assert data.kernels.height == 5 and [t.batch_size for t in data.timelines] == [1, 8, 64]
    for category, color in CATEGORY_COLORS.items():
        assert f".c-{category.replace('_', '-')}{{fill:{color};" in text
    assert isinstance(data.batch, pl.DataFrame)


# ------------------------------------------------------------------------------------------------ the browser


def _rgb(hex_color: str) -> str:
    h = hex_color.lstrip("#")
    return f"rgb({int(h[0:2], 16)}, {int(h[2:4], 16)}, {int(h[4:6], 16)})"


@pytest.mark.skipif(
    chromium_path() is None, reason="needs a Chromium browser on PATH (Debian: apt-get install chromium)"
)
def test_the_page_opens_in_chromium_and_draws_its_charts(page: tuple[Path, str, float], tmp_path: Path) -> None:
    path, text, _ = page
    shot = Path(os.environ.get("K25_SCREENSHOT_DIR", tmp_path)) / "report.png"
    with Browser(width=1280, height=900) as browser:
        browser.open(path.as_uri())
        assert browser.problems() == []
        assert browser.requests() == [path.as_uri()]  # offline: the page fetched nothing but itself
        # every chart is laid out with a real size, and the marks are there
        sizes = browser.evaluate(
            "[...document.querySelectorAll('svg[role=img]')].map(s => "
            "[s.getBoundingClientRect().width, s.getBoundingClientRect().height])"
        )
        assert len(sizes) >= 12 and all(w > 100 and h > 40 for w, h in sizes), sizes
        counts = browser.evaluate(
            "({seg: document.querySelectorAll('rect.seg').length, "
            "lanes: document.querySelectorAll('g.lane').length, "
            "paths: document.querySelectorAll('g.lane path').length, "
            "dots: document.querySelectorAll('circle[data-step]').length, "
            "legend: document.querySelectorAll('[data-legend]').length})"
        )
        assert counts["seg"] == text.count('class="seg ') and counts["lanes"] == 12 and counts["dots"] == 54
        assert counts["paths"] >= 12 * 3 and counts["legend"] >= 10
        # the colours drawn are the TUI's
        for category in ("allreduce", "gemm", "elementwise"):
            fill = browser.evaluate(f"getComputedStyle(document.querySelector('rect.c-{category}')).fill")
            assert fill == _rgb(CATEGORY_COLORS[category]), (category, fill)
        # pointing at a legend entry dims every other category, leaving it
        browser.evaluate("document.querySelector('[data-legend=c-gemm]').dispatchEvent(new Event('mouseenter'))")
        dimmed = browser.evaluate(
            "[document.querySelectorAll('.dim').length, document.querySelectorAll('.c-gemm.dim').length]"
        )
        assert dimmed[0] > 20 and dimmed[1] == 0
        browser.evaluate("document.querySelector('[data-legend=c-gemm]').dispatchEvent(new Event('mouseleave'))")
        assert browser.evaluate("document.querySelectorAll('.dim').length") == 0
        browser.screenshot(shot)
        stats = browser.image_stats(shot)
        assert browser.problems() == []
    width, height = png_size(shot)
    assert (width, height) == (stats["width"], stats["height"]) and width >= 1200 and height > 2500
    # not blank: many colours (categories, idle causes, text) and a real share of the page inked
    assert stats["colors"] > 40 and stats["ink"] > 0.05, stats


def test_mixed_runs_single_ranks_and_inferred_steps(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    """The bundled samples (SGLang, vLLM B200 eager, MI300X graph and piecewise, a synthetic TP2) and HTA's two-rank
    trace without step markers (steps inferred, batch size unknown, clocks poorly aligned), every phase."""
    from share_fixtures import samples_database

    path = samples_database(tmp_path_factory)
    out = tmp_path / "samples.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(path), "--phase", "all", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "cross-rank wait and straggler figures are approximate" in result.stderr
    text = out.read_text(encoding="utf-8")
    marks = parse(text)
    rows = report_json(path, "--phase", "all")
    bars = {(a["data-run"], batch_key(a["data-batch"])) for a in marks.find("g", **{"class": "bar"})}
    assert bars == {(r["run_id"], r["batch_size"]) for r in rows} and len({r for r, _ in bars}) == 6
    assert any(b is None for _, b in bars)  # the inferred steps of the HTA trace: no batch size, drawn as bs=?
    lanes = marks.find("g", **{"class": "lane"})
    assert {a["data-run"] for a in lanes} == {r for r, _ in bars}
    assert "paired by index only" in text and "cross-rank wait and straggler figures are approximate" in text
    if chromium_path() is not None:
        with Browser(width=1280, height=900) as browser:
            browser.open(out.as_uri())
            assert browser.problems() == [] and browser.requests() == [out.as_uri()]


# ------------------------------------------------------------------------------------------------ comparison


@pytest.fixture(scope="module")
def comparison(tp2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("compare") / "compare.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "--a", "run=eager", "--b", "run=graph", "-o", str(out)])
    assert result.exit_code == 0, result.output
    expected = CliRunner().invoke(
        cli, ["compare", "--db", str(tp2), "--a", "run=eager", "--b", "run=graph", "--format", "json"]
    )
    assert expected.exit_code == 0, expected.output
    truth = json.loads(expected.stdout)  # the page says the verdict k25trace compare says
    assert re.fullmatch(r"\d+ changes", truth["verdict"]) and f", {truth['verdict']}, in " in result.stderr
    return out, truth


def test_the_comparison_page_draws_the_compare_numbers(comparison: tuple[Path, dict]) -> None:
    out, expected = comparison
    text = out.read_text(encoding="utf-8")
    marks = parse(text)
    assert f"Verdict: {expected['verdict']}" in text
    segs = {
        (a["data-group"], a["data-side"], a["data-category"]): float(a["data-ms"])
        for a in marks.find("rect", data_side=True)
    }
    deltas = {
        (a["data-group"], a["data-category"]): (float(a["data-delta"]), a["data-verdict"])
        for a in marks.find("rect", data_delta=True)
    }
    assert len(segs) == 2 * len(expected["categories"]) and len(deltas) == len(expected["categories"]) == 33
    for r in expected["categories"]:
        assert (
            segs[(r["group"], "A", r["category"])] == r["ms_a"] and segs[(r["group"], "B", r["category"])] == r["ms_b"]
        )
        assert deltas[(r["group"], r["category"])] == (r["delta_ms"], r["verdict"])
    # the graph run's GEMMs are slower at every batch size (61 layers against 8): drawn as changed, at full opacity
    for group in ("bs=1", "bs=8", "bs=64"):
        gemm = next(
            a for a in marks.find("rect", data_delta=True) if a["data-group"] == group and a["data-category"] == "gemm"
        )
        assert gemm["data-verdict"] == "slower" and gemm["opacity"] == "1"
    for section in ("verdict", "categories", "steps", "comm", "kernels"):
        assert marks.find("section", id=section), section
    body = " ".join(marks.text)
    for row in expected["steps"]:
        assert f"{row['ms_a']:,.4f}".rstrip("0").rstrip(".") in body


@pytest.mark.skipif(
    chromium_path() is None, reason="needs a Chromium browser on PATH (Debian: apt-get install chromium)"
)
def test_the_comparison_page_opens_in_chromium(comparison: tuple[Path, dict], tmp_path: Path) -> None:
    out, _ = comparison
    with Browser(width=1280, height=900) as browser:
        browser.open(out.as_uri())
        assert browser.problems() == [] and browser.requests() == [out.as_uri()]
        sizes = browser.evaluate(
            "[...document.querySelectorAll('svg[role=img]')].map(s => "
            "s.getBoundingClientRect().width * s.getBoundingClientRect().height)"
        )
        assert len(sizes) == 6 and min(sizes) > 10_000
        shot = browser.screenshot(tmp_path / "compare.png")
        stats = browser.image_stats(shot)
    assert stats["colors"] > 20 and stats["ink"] > 0.03, stats
