"""``k25trace html`` takes the step filters of ``report`` (--rank, --trace, --batch, --run) on the real two-H200 TP2
traces (two runs, graph and eager, batch 1/8/64): with --rank N every per-rank number of the page (breakdown, idle,
kernels, layers, the step dots, the timeline's lanes) is ``report --rank N --format json``'s, and rank 0's differ from
rank 1's; the sections that pair ranks (findings, collectives, layer lateness) stay those of all ranks and say so;
--batch and --run keep exactly their steps; a filter that selects nothing is an error naming what exists, and no file
is written."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from k25trace.cli import cli
from share_fixtures import tp2_database


class Marks(HTMLParser):
    """Every element's tag and attributes, in document order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def having(self, tag: str, *names: str, **values: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.elements
            if t == tag
            and all(n in a for n in names)
            and all(a.get(k.replace("_", "-")) == v for k, v in values.items())
        ]


def _batch(value: str) -> int | None:
    return None if value == "" else int(value)


@pytest.fixture(scope="module")
def tp2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tp2_database(tmp_path_factory)


@pytest.fixture(scope="module")
def pages(tp2: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[str, Marks]]:
    """The page with no filter, --rank 0, --rank 1, --batch 8 and --run graph."""
    out = {}
    folder = tmp_path_factory.mktemp("html-filters")
    for name, args in {
        "all": [],
        "rank0": ["--rank", "0"],
        "rank1": ["--rank", "1"],
        "batch8": ["--batch", "8"],
        "graph": ["--run", "graph (TP2)"],
    }.items():
        path = folder / f"{name}.html"
        result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "-o", str(path), *args])
        assert result.exit_code == 0, result.output
        text = path.read_text(encoding="utf-8")
        marks = Marks()
        marks.feed(text)
        out[name] = (text, marks)
    return out


def report(db_path: Path, *args: str) -> list[dict]:
    result = CliRunner().invoke(cli, ["report", "--db", str(db_path), "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _breakdown(marks: Marks) -> dict[tuple[str, int | None, str], float]:
    return {
        (a["data-run"], _batch(a["data-batch"]), a["data-category"]): float(a["data-ms"])
        for a in marks.having("rect", "data-ms")
        if "seg" in a.get("class", "").split()
    }


def _idle(marks: Marks) -> dict[tuple[str, int | None, str], float]:
    return {
        (a["data-run"], _batch(a["data-batch"]), a["data-column"]): float(a["data-ms"] or 0)
        for a in marks.having("rect", "data-kind", "data-column")
    }


def _layers(marks: Marks) -> dict[tuple[str, int | None, str], float]:
    out, chart = {}, None
    for tag, a in marks.elements:
        if tag == "g" and a.get("class") == "segs":
            chart = (a["data-run"], _batch(a["data-batch"]))
        elif tag == "path" and a.get("class") == "hit" and chart is not None:
            out[(*chart, a["data-segment"])] = float(a["data-wall-ms"])
    return out


@pytest.mark.parametrize("rank", [0, 1])
def test_rank_gives_that_ranks_numbers_in_every_per_rank_section(
    tp2: Path, pages: dict[str, tuple[str, Marks]], rank: int
) -> None:
    text, marks = pages[f"rank{rank}"]
    # the breakdown: report --rank N
    want = {(r["run_id"], r["batch_size"], r["category"]): r["ms_per_step"] for r in report(tp2, "--rank", str(rank))}
    assert _breakdown(marks) == want
    # idle: report --by idle --rank N
    idle = {}
    for r in report(tp2, "--by", "idle", "--rank", str(rank)):
        for column in ("host_ms", "sync_ms", "launch_overhead_ms", "device_ms", "unknown_ms", "between_host_ms"):
            idle[(r["run_id"], r["batch_size"], column)] = r[column]
    got_idle = _idle(marks)
    assert {k: v for k, v in got_idle.items() if k in idle} == idle
    # the top kernels: report --by kernel --rank N
    kernels = {r["short_name"]: r["ms_per_step"] for r in report(tp2, "--by", "kernel", "--rank", str(rank))}
    assert {a["data-kernel"]: float(a["data-ms"]) for a in marks.having("span", "data-kernel")} == kernels
    # the layers: report --by layer --rank N (its wall_ms rounded to 0.1 µs)
    labels = {r["run"]: r["run_id"] for r in report(tp2, "--by", "layer-late")}
    layers = {
        (labels[r["run"]], r["batch_size"], r["segment"]): r["wall_ms"]
        for r in report(tp2, "--by", "layer", "--rank", str(rank))
    }
    got_layers = _layers(marks)
    assert set(got_layers) == set(layers) and len(layers) == 3 * (61 + 2) + 3 * (8 + 2)
    assert all(round(got_layers[k], 4) == pytest.approx(v, abs=1e-9) for k, v in layers.items())
    # the step dots and the timeline's lanes: that rank's only
    assert {a["data-rank"] for a in marks.having("circle", "data-step")} == {str(rank)}
    assert {a["data-rank"] for a in marks.having("g", "data-rank", **{"class": "lane"})} == {str(rank)}
    assert f"tp2.duckdb · decode steps · rank {rank} ·" in text
    assert f"Only the steps of rank {rank}." in text


def test_the_two_ranks_differ_and_the_cross_rank_sections_are_of_all_ranks(
    pages: dict[str, tuple[str, Marks]],
) -> None:
    (_, zero), (_, one), (_, whole) = pages["rank0"], pages["rank1"], pages["all"]
    a, b = _breakdown(zero), _breakdown(one)
    assert a.keys() == b.keys() and sum(abs(a[k] - b[k]) > 1e-3 for k in a) > 10
    la, lb = _layers(zero), _layers(one)
    assert la.keys() == lb.keys()
    assert {k[:2] for k in la if abs(la[k] - lb[k]) > 1e-3} == {k[:2] for k in la}  # in every chart
    # the collectives and the findings pair the ranks: the same as without --rank, and the page says so
    for tag, attr in (("rect", "data-part"), ("li", "data-saving-ms")):
        for page in (zero, one):
            assert [x[attr] for x in page.having(tag, attr)] == [x[attr] for x in whole.having(tag, attr)]
            assert [x.get("data-ms") for x in page.having(tag, attr)] == [
                x.get("data-ms") for x in whole.having(tag, attr)
            ]
    for name in ("rank0", "rank1"):
        text = pages[name][0]
        assert "Across all ranks of each run, not only the rank or trace chosen" in text
        assert "Of every rank of each run, not only the rank or trace chosen" in text
        assert "The late ranks are across all ranks of each run" in text


def test_batch_keeps_its_steps_in_every_section(tp2: Path, pages: dict[str, tuple[str, Marks]]) -> None:
    text, marks = pages["batch8"]
    want = {(r["run_id"], r["batch_size"], r["category"]): r["ms_per_step"] for r in report(tp2, "--batch", "8")}
    assert _breakdown(marks) == want and {b for _, b, _ in want} == {8}
    assert {b for _, b, _ in _layers(marks)} == {8} and {b for _, b, _ in _idle(marks)} == {8}
    for tag, attr in (("circle", "data-step"), ("g", "data-step"), ("rect", "data-part")):
        assert {a["data-batch"] for a in marks.having(tag, attr, "data-batch")} == {"8"}, tag
    findings = report(tp2, "--by", "findings", "--batch", "8")["groups"]
    assert [(g["run_id"], str(g["batch_size"])) for g in findings] == [
        (a["data-run-id"], a["data-batch-size"]) for a in marks.having("div", "data-run-id")
    ]
    assert [str(f["saving_ms"] if f["saving_ms"] is not None else "") for g in findings for f in g["findings"]] == [
        a["data-saving-ms"] for a in marks.having("li", "data-saving-ms")
    ]
    kernels = {r["short_name"]: r["ms_per_step"] for r in report(tp2, "--by", "kernel", "--batch", "8")}
    assert {a["data-kernel"]: float(a["data-ms"]) for a in marks.having("span", "data-kernel")} == kernels
    assert "· decode steps · batch size 8 ·" in text


def test_run_keeps_that_run_alone(tp2: Path, pages: dict[str, tuple[str, Marks]]) -> None:
    text, marks = pages["graph"]
    graph = next(r["run_id"] for r in report(tp2) if r["run_id"].endswith("/graph#ws2"))
    want = {(r["run_id"], r["batch_size"], r["category"]): r["ms_per_step"] for r in report(tp2, "--run", "graph")}
    assert _breakdown(marks) == want and {r for r, _, _ in want} == {graph}
    assert {r for r, _, _ in _layers(marks)} == {graph}
    assert {a["data-run"] for a in marks.having("g", "data-step")} == {graph}
    assert "· run graph (TP2) ·" in text and "eager (TP2)" not in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--rank", "7"], "no rank 7: ranks 0–1"),
        (["--trace", "99"], "no trace 99: traces 1–4"),
        (["--batch", "3"], "no decode steps of batch size 3: batch sizes present: 1: 9 engine steps (18 rank-steps)"),
        (["--run", "nosuch"], "no run matches --run 'nosuch'. Runs: eager (TP2) = "),
        (["--rank", "1", "--trace", "1"], "trace 1 is rank 0, not rank 1"),
    ],
)
def test_a_filter_that_selects_nothing_is_an_error_and_writes_nothing(
    tp2: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "page.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "-o", str(out), *args])
    assert result.exit_code == 1 and message in result.stderr, result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []
    out.write_text("kept")  # an existing file stays as it was
    result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "-o", str(out), *args])
    assert result.exit_code == 1 and out.read_text() == "kept" and list(tmp_path.iterdir()) == [out]


def test_a_comparison_refuses_the_report_filters(tp2: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    args = ["html", "--db", str(tp2), "--a", "run=eager", "--b", "run=graph", "--rank", "0", "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2 and "--rank chooses the steps of the report page" in result.output
    assert not out.exists()


def test_trace_keeps_that_trace_and_its_run(tp2: Path, tmp_path: Path) -> None:
    """--trace 1 (rank 0 of the graph run): its own numbers, and the cross-rank sections of its run alone."""
    out = tmp_path / "trace1.html"
    result = CliRunner().invoke(cli, ["html", "--db", str(tp2), "--trace", "1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text(encoding="utf-8")
    marks = Marks()
    marks.feed(text)
    want = {(r["run_id"], r["batch_size"], r["category"]): r["ms_per_step"] for r in report(tp2, "--trace", "1")}
    assert _breakdown(marks) == want and len({r for r, _, _ in want}) == 1
    (run,) = {r for r, _, _ in want}
    assert {a["data-run"] for a in marks.having("rect", "data-part")} == {run}  # the collectives of its run
    assert {a["data-run-id"] for a in marks.having("div", "data-run-id")} == {run}  # and its findings
    assert "· trace 1, run graph (TP2) ·" in text
