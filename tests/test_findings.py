"""Findings (analysis.findings, issue 31 item 1) on real traces: the waited-on rank and why it was late, with the
saving equal to the wait `report --by comm` measures and that wait re-read from the raw JSON; host-bound idle and
the launch overhead CUDA graphs would remove on the eager H200 trace, and not on its CUDA-graph twin; the measured
floor when a bench is stored; a prefill-only single rank of TP8."""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from findings_truth import has_graph_launch, raw_allreduce_wait, raw_wait_by_late_rank
from rich.console import Console

from helpers import B200, DATA, MI300X_FULL, SGLANG
from k25trace import db, pipeline
from k25trace.analysis import findings, floor, report
from k25trace.cli import cli
from k25trace.render import findings as findings_view

PAIR = DATA / "h200x2-decode-loop"
GAPS = DATA / "h200-gaps"


def _load(tmp_path_factory: pytest.TempPathFactory, name: str, paths: list[Path]) -> db.duckdb.DuckDBPyConnection:
    con = db.connect(tmp_path_factory.mktemp(name) / f"{name}.duckdb")
    pipeline.load_paths(con, paths)
    return con


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):
    return _load(tmp_path_factory, "pair", [PAIR / "eager"])


@pytest.fixture(scope="module")
def eager(tmp_path_factory: pytest.TempPathFactory):
    return _load(tmp_path_factory, "eager", [GAPS / "eager"])


@pytest.fixture(scope="module")
def graph(tmp_path_factory: pytest.TempPathFactory):
    return _load(tmp_path_factory, "graph", [GAPS / "graph"])


def _groups(result: findings.Findings) -> dict[int | None, findings.FindingGroup]:
    assert len({g.run_id for g in result.groups}) == 1
    return {g.batch_size: g for g in result.groups}


def _kinds(group: findings.FindingGroup) -> dict[str, list[findings.Finding]]:
    out: dict[str, list[findings.Finding]] = {}
    for f in group.findings:
        out.setdefault(f.kind, []).append(f)
    return out


# --------------------------------------------------------------------------------- the real eager 2-GPU pair


def test_pair_names_the_waited_on_rank_its_cause_and_the_wait_as_saving(pair) -> None:
    result = findings.findings(pair, db="pair.duckdb", min_pct=0.0)
    assert result.phase == "decode" and not result.notes
    groups = _groups(result)
    comm = {
        r["batch_size"]: r
        for r in report.breakdown(pair, by="comm").iter_rows(named=True)
        if r["category"] == "allreduce"
    }
    raw = raw_allreduce_wait(PAIR / "eager")
    assert sorted(groups) == sorted(comm) == sorted(raw) == [1, 8, 64]
    for batch, group in groups.items():
        (wait,) = [f for f in _kinds(group)["collective_wait"] if f.figures["category"] == "allreduce"]
        # the saving is the wait --by comm measures, and that wait is the raw JSON's
        assert wait.saving_ms == comm[batch]["wait_ms_per_step"]
        assert abs(Decimal(str(wait.saving_ms)) - raw[batch]) < Decimal("0.00006"), (batch, wait.saving_ms, raw[batch])
        assert wait.saving_label == "without the wait"
        assert wait.saving_pct == round(100 * wait.saving_ms / group.step_ms, 2)
        assert wait.evidence == (
            "k25trace report --db pair.duckdb --by comm; k25trace report --db pair.duckdb --by comm-site"
        )
    # batch 1: rank 0 makes rank 1 wait (README: its host is what is slow)
    b1 = _kinds(_groups(findings.findings(pair))[1])["collective_wait"][0]  # the default list: first
    late = b1.figures["late_ranks"]
    assert late[0]["late_rank"] == 0 and late[0]["wait_ms_per_step"] > 0.9 * b1.saving_ms
    assert "Rank 0 caused 12.888 ms/step of it (91 %): its host launched late (4.367 ms/step)" in b1.sentence
    assert "8.410 ms/step at the run's first collective" in b1.sentence
    assert "first collective" in b1.trust  # its cause is unknown: the trust note says so
    # the late ranks' parts add up to the wait (to the 4-decimal rounding of each)
    for group in groups.values():
        for f in _kinds(group).get("collective_wait", []):
            parts = f.figures["late_ranks"]
            assert abs(sum(p["wait_ms_per_step"] for p in parts) - f.saving_ms) < 1e-4 * (len(parts) + 1)
            for p in parts:
                split = sum(
                    p[c]
                    for c in (
                        "host_ms_per_step",
                        "sync_ms_per_step",
                        "gpu_work_ms_per_step",
                        "device_ms_per_step",
                        "first_ms_per_step",
                        "unexplained_ms_per_step",
                    )
                )
                assert abs(split - p["wait_ms_per_step"]) < 1e-3


def test_pair_cause_split_follows_the_documented_definition(pair) -> None:
    """Per late rank, the host part of the wait = Σ over its collectives of mean wait × (host + launch) / lateness
    (README, 'Why the late rank was late'), recomputed here from the collectives and collective_causes tables."""
    rows = pair.execute("""
        select c.pair_step, c.ordinal, avg(c.wait_ns), arg_max(c.rank, c.is_late::int),
               any_value(s.batch_size), any_value(cc.host_ns + cc.launch_ns), any_value(cc.lateness_ns),
               any_value(cc.gpu_ns), any_value(cc.has_interval)
        from collectives c join steps s using (trace_id, step_index)
        left join collective_causes cc using (run_id, pair_step, category, ordinal)
        where c.category = 'allreduce' and s.phase = 'decode'
        group by c.pair_step, c.ordinal""").fetchall()
    sums: dict[tuple[int, int], list[float]] = {}
    steps: dict[int, set[int]] = {}
    for pair_step, _, wait, late, batch, host, lateness, gpu, has_interval in rows:
        acc = sums.setdefault((batch, late), [0.0, 0.0, 0.0, 0.0])
        acc[0] += float(wait)
        if lateness:
            acc[1] += float(wait) * host / lateness
            acc[2] += float(wait) * gpu / lateness
        if has_interval is False:
            acc[3] += float(wait)
        steps.setdefault(batch, set()).add(pair_step)
    groups = _groups(findings.findings(pair, min_pct=0.0))
    for batch, group in groups.items():
        (wait,) = [f for f in _kinds(group)["collective_wait"] if f.figures["category"] == "allreduce"]
        for p in wait.figures["late_ranks"]:
            acc = sums[(batch, p["late_rank"])]
            n = len(steps[batch])
            assert p["wait_ms_per_step"] == pytest.approx(acc[0] / n / 1e6, abs=6e-5)
            assert p["host_ms_per_step"] == pytest.approx(acc[1] / n / 1e6, abs=6e-5)
            assert p["gpu_work_ms_per_step"] == pytest.approx(acc[2] / n / 1e6, abs=6e-5)
            assert p["first_ms_per_step"] == pytest.approx(acc[3] / n / 1e6, abs=6e-5)


def test_pair_transfer_against_the_measured_floor(tmp_path: Path) -> None:
    """With the H200 bench rows stored, the transfer is set against the kernel floor of `report --by floor`."""
    con = db.connect(tmp_path / "floor.duckdb")
    pipeline.load_paths(con, [PAIR / "eager"])
    floor.write_rows(con, floor.read_rows(PAIR / "allreduce_bench_kimi.json"))
    groups = _groups(findings.findings(con, min_pct=0.0))
    floors = {r["batch_size"]: r for r in report.breakdown(con, by="floor").iter_rows(named=True)}
    comm = {
        r["batch_size"]: r
        for r in report.breakdown(con, by="comm").iter_rows(named=True)
        if r["category"] == "allreduce"
    }
    for batch, group in groups.items():
        (transfer,) = [f for f in _kinds(group)["collective_transfer"] if f.figures["category"] == "allreduce"]
        assert floors[batch]["floor_kernel_ms"] is not None
        expected = max(comm[batch]["transfer_ms_per_step"] - floors[batch]["floor_kernel_ms"], 0.0)
        assert transfer.saving_ms == pytest.approx(expected, abs=1e-9)
        assert transfer.saving_label == "at the measured floor"
        assert "its data transfer takes" in transfer.sentence and "measured floor" in transfer.sentence
        assert "bench allreduce" in transfer.sentence
    con.close()


def test_pair_without_a_floor_uses_a_labelled_bandwidth_only_bound(pair) -> None:
    groups = _groups(findings.findings(pair, min_pct=0.0))
    transfer = next(f for f in _kinds(groups[64])["collective_transfer"] if f.figures["category"] == "allreduce")
    assert transfer.saving_ms is None  # latency left out: never ranked as a saving
    assert "bandwidth-only bound" in transfer.sentence and "bandwidth-only bound" in transfer.trust
    link = transfer.figures["link_gbps"]
    assert link == 450.0  # H200 SXM, queries/device_peaks.csv
    # 17 all-reduces of 917,504 B per step on 2 ranks: 2(n-1)/n = 1
    assert transfer.figures["bound_ms_per_step"] == pytest.approx(17 * 917504 / (link * 1e9) * 1e3, rel=1e-6)


# ----------------------------------------------------------------------------- the H200 eager / graph twins


def test_eager_h200_names_host_bound_idle_and_launch_overhead(eager) -> None:
    assert not has_graph_launch(GAPS / "eager")
    idle = {r["batch_size"]: r for r in report.breakdown(eager, by="idle").iter_rows(named=True)}
    for batch, group in _groups(findings.findings(eager, db="e.duckdb")).items():
        kinds = _kinds(group)
        (host,) = kinds["idle_host"]
        assert host.saving_ms == idle[batch]["host_ms"] and "host" in host.sentence
        (graphs,) = kinds["cuda_graphs"]
        assert graphs.saving_ms == idle[batch]["launch_overhead_ms"] > 0
        assert "without CUDA graphs" in graphs.sentence and "launch overhead" in graphs.sentence
        assert graphs.saving_label == "with CUDA graphs (launch overhead only)"
        assert "idle_launch" not in kinds  # the same time is not listed twice
        savings = [f.saving_ms for f in group.findings if f.saving_ms is not None]
        assert savings == sorted(savings, reverse=True)
    b1 = _groups(findings.findings(eager))[1]
    assert [f.kind for f in b1.findings[:2]] == ["idle_host", "cuda_graphs"]


def test_graph_twin_does_not_credit_graphs_with_launch_overhead(graph) -> None:
    assert has_graph_launch(GAPS / "graph")
    for group in _groups(findings.findings(graph, min_pct=0.0)).values():
        assert "cuda_graphs" not in _kinds(group)
        assert not any("CUDA graphs would" in f.sentence for f in group.findings)
        # shapes of CUDA-graph replays are unknown without an eager twin: said, not guessed
        (nobound,) = _kinds(group)["kernels_no_bound"]
        assert "CUDA-graph replays record no shapes" in nobound.sentence and nobound.saving_ms is None
        assert "kernels_sol" not in _kinds(group)


@pytest.mark.parametrize("trace", [MI300X_FULL, SGLANG], ids=["vllm-mi300x-fullgraph", "sglang-mi300x"])
def test_rocm_graph_kernels_without_grid_are_said_to_be_unmatched_not_unrecorded(tmp_path: Path, trace: Path) -> None:
    """ROCm traces give graph-replayed kernels no grid or block: the gemm kernels have no minimum because they
    cannot be matched, not because shapes were not recorded (the advice 'record_shapes=True' would not help)."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    (launch,) = [e for e in events if e.get("name") == "hipGraphLaunch"]
    replayed = [
        e for e in events if e.get("cat") == "kernel" and e["args"].get("correlation") == launch["args"]["correlation"]
    ]
    assert replayed and not any("grid" in e["args"] for e in replayed)
    con = db.connect(tmp_path / "rocm.duckdb")
    pipeline.load_paths(con, [trace])
    (group,) = findings.findings(con, min_pct=0.0).groups
    (nobound,) = _kinds(group)["kernels_no_bound"]
    assert "no grid or block to match them with an eager step's kernels" in nobound.sentence, nobound.sentence
    assert "record_shapes" not in nobound.sentence and nobound.saving_ms is None
    con.close()


def test_kernels_against_their_hardware_minimum(eager) -> None:
    """gemm kernels above their minimum = Σ over the ops with shapes of max(time − sol, 0) (report --by roofline)."""
    from k25trace.analysis import sol

    roof = sol.roofline(eager)
    for batch, group in _groups(findings.findings(eager, min_pct=0.0)).items():
        (gemm,) = [f for f in _kinds(group)["kernels_sol"] if f.figures["category"] == "gemm"]
        rows = [
            r
            for r in roof.iter_rows(named=True)
            if r["batch_size"] == batch and r["category"] == "gemm" and r["sol_us"] is not None
        ]
        expected = sum(max(r["ms_per_step"] - r["sol_us"] * r["calls_per_step"] / 1e3, 0.0) for r in rows)
        assert gemm.saving_ms == pytest.approx(expected, abs=1e-4)
        assert gemm.saving_label == "at the hardware minimum (ops with shapes)"
        largest = _kinds(group)["largest_category"][0]
        assert largest.figures["category"] == "gemm" and "hardware minimum" in largest.sentence


# ------------------------------------------------------------------------------ B200 prefill, one rank of TP8


def test_b200_prefill_single_rank(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "b200.duckdb")
    pipeline.load_paths(con, [B200])
    result = findings.findings(con)
    assert result.phase == "all" and "no decode steps" in result.notes[0] and "prefill 1" in result.notes[0]
    (group,) = result.groups
    kinds = _kinds(group)
    assert (
        "collective_unpaired" in kinds
        and "1 of the run's 8 ranks was loaded" in kinds["collective_unpaired"][0].sentence
    )
    assert "collective_wait" not in kinds
    assert all("--phase all" in f.evidence for f in group.findings)
    assert any("one slow step" in n for n in group.notes)
    con.close()


# ------------------------------------------------------------------------------------------------- as data


def test_frame_and_json(pair) -> None:
    result = findings.findings(pair)
    frame = findings.findings_frame(result)
    assert frame.height == sum(len(g.findings) for g in result.groups)
    assert set(frame["kind"].to_list()) <= set(findings.KINDS)
    text = json.dumps(findings.as_dict(result), allow_nan=False)
    back = json.loads(text)
    assert back["overlap"] == findings.OVERLAP and "not added up" in back["overlap"]
    assert back["groups"][0]["findings"][0]["sentence"] == result.groups[0].findings[0].sentence
    for f in (f for g in result.groups for f in g.findings):
        assert "None" not in f.sentence and "nan" not in f.sentence.lower()
        assert f.saving_ms is None or f.saving_ms >= 0


# ------------------------------------------------------------------------------------------------ the terminal

_FIGURE = re.compile(r"(?:< )?\d[\d,]*(?:\.\d+)?(?: (?:ms/step|ms|µs|%))?")
"""A figure of a sentence: a number with its unit (and its sign), which the terminal must keep on one line."""
_SAVES = re.compile(r"saves up to ([\d,]+\.\d{3}) ms/step \((\d+\.\d) %\)")


def _file_db(tmp_path_factory: pytest.TempPathFactory, name: str, folder: Path) -> Path:
    path = tmp_path_factory.mktemp(name) / f"{name}.duckdb"
    con = db.connect(path)
    pipeline.load_paths(con, [folder])
    con.close()
    return path


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _file_db(tmp_path_factory, "pair-file", PAIR / "eager")


@pytest.fixture(scope="module")
def gaps_dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {name: _file_db(tmp_path_factory, f"gaps-{name}", GAPS / name) for name in ("eager", "graph")}


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def _before_the_tables(stdout: str) -> str:
    """The default report's text before its first per-batch table (its title line, then the table's top border)."""
    lines = stdout.splitlines(keepends=True)
    border = next((i for i, line in enumerate(lines) if line.lstrip().startswith("┏")), None)
    assert border is not None and border > 1, stdout[:2000]
    return "".join(lines[: border - 1])


@pytest.mark.parametrize("width", [120, 80])
def test_terminal_lines_fit_and_keep_every_figure_whole(pair, eager, graph, width: int) -> None:
    for con in (pair, eager, graph):
        result = findings.findings(con, db="x.duckdb", min_pct=0.0)
        console = Console(width=width, record=True, force_terminal=False, color_system=None)
        findings_view.print_findings(result, console, per_group=None, more="k25trace report --db x --by findings")
        lines = console.export_text().splitlines()
        assert max(len(line) for line in lines) <= width
        for group in result.groups:
            assert any(line.startswith(group.heading[: width - 10]) for line in lines)
            for f in group.findings:
                for figure in _FIGURE.findall(f.sentence):
                    assert any(figure in line for line in lines), (width, figure, f.sentence)
                if f.saving_ms is not None:
                    assert any(
                        f"saves up to {f.saving_ms:,.3f} ms/step ({f.saving_pct:.1f} %)" in line for line in lines
                    ), (width, f.kind)
        # a wrapped line never ends inside a number that the next line goes on with
        for this, after in zip(lines, lines[1:], strict=False):
            if re.search(r"\d[.,]?$", this):
                assert not re.match(r"\s*(?:[\d.,]|ms\b|ms/|%|µs)", after), (this, after)


def test_terminal_shows_at_most_five_per_group_and_says_how_to_see_the_rest(pair) -> None:
    result = findings.findings(pair, db="x.duckdb", min_pct=0.0)
    text = findings_view.findings_text(result, 120, more="k25trace report --db x.duckdb --by findings").plain
    numbered = re.findall(r"^ +(\d+)\. ", text, flags=re.M)
    assert numbered and max(int(n) for n in numbered) <= findings_view.PER_GROUP
    for group in result.groups:
        assert len(group.findings) > 5  # min_pct 0: every finding kept, so the list was cut
        assert findings_view.shown(group, 5)[-1].kind == "largest_category"
    assert text.count("more: k25trace report --db x.duckdb --by findings") == len(result.groups)
    assert result.overlap in " ".join(text.split())


def test_default_table_report_opens_with_the_findings_on_the_pair(pair_db: Path) -> None:
    """On the real eager pair: before the per-batch tables, per batch size its heading and ranked findings; the
    wait's saving is the all-reduce wait re-read from the raw JSON, and the late rank the one the raw durations
    name."""
    code, out, _ = _invoke("report", "--db", str(pair_db), "--format", "table")
    assert code == 0
    head = _before_the_tables(out)
    assert head.startswith("Findings, ranked by the most each fix alone could bring")
    raw = raw_allreduce_wait(PAIR / "eager")
    late = raw_wait_by_late_rank(PAIR / "eager")
    con = pipeline.connect(pair_db, read_only=True)
    try:
        result = findings.findings(con, db=str(pair_db))
    finally:
        con.close()
    positions = [head.index(g.heading) for g in result.groups]
    assert positions == sorted(positions) and [g.batch_size for g in result.groups] == [1, 8, 64]
    sections = [head[a:b] for a, b in zip(positions, [*positions[1:], len(head)], strict=True)]
    for group, section in zip(result.groups, sections, strict=True):
        flat = " ".join(section.split())
        assert " 1. " + " ".join(group.findings[0].sentence.split())[:60] in flat
        if group.batch_size != 1:
            continue
        # batch size 1: the wait comes first, names rank 0 (the raw JSON's late rank) and why
        (worst,) = [r for r, w in late[1].items() if w == max(late[1].values())]
        assert worst == 0 and f"Rank {worst} caused" in flat and "its host launched late" in flat
        saves = _SAVES.search(flat)
        assert saves is not None and "without the wait" in flat[saves.end() : saves.end() + 20]
        assert abs(Decimal(saves.group(1).replace(",", "")) - raw[1]) <= Decimal("0.0006"), (saves.group(1), raw[1])
        assert "report --by comm, --by comm-site" in flat
    # scripts keep the table they had: csv (the default off a terminal) and json carry no findings
    code, csv_out, _ = _invoke("report", "--db", str(pair_db))
    assert code == 0 and csv_out.startswith("run_id,") and "Findings" not in csv_out and "saves up to" not in csv_out
    code, json_out, _ = _invoke("report", "--db", str(pair_db), "--format", "json")
    assert code == 0 and json.loads(json_out)[0]["category"]


def test_default_table_report_names_host_bound_idle_and_launch_overhead_only_when_eager(gaps_dbs) -> None:
    assert not has_graph_launch(GAPS / "eager") and has_graph_launch(GAPS / "graph")
    code, out, _ = _invoke("report", "--db", str(gaps_dbs["eager"]), "--format", "table")
    head = " ".join(_before_the_tables(out).split())
    assert code == 0 and head.startswith("Findings")
    assert "1. The GPU sits idle" in head and "waiting for the host to launch work" in head  # ranked first at bs 1
    assert "without CUDA graphs: their launch overhead" in head and "with CUDA graphs (launch overhead only)" in head
    code, out, _ = _invoke("report", "--db", str(gaps_dbs["graph"]), "--format", "table")
    head = " ".join(_before_the_tables(out).split())
    assert code == 0 and head.startswith("Findings")
    assert "without CUDA graphs" not in head and "CUDA graphs would remove" not in head
    assert "CUDA-graph replays record no shapes" in head


def test_by_findings_json_is_as_dict_and_csv_the_frame(pair_db: Path) -> None:
    code, out, _ = _invoke("report", "--db", str(pair_db), "--by", "findings", "--format", "json")
    assert code == 0
    con = pipeline.connect(pair_db, read_only=True)
    try:
        result = findings.findings(con, db=str(pair_db))
    finally:
        con.close()
    assert json.loads(out) == findings.as_dict(result)
    code, out, _ = _invoke("report", "--db", str(pair_db), "--by", "findings", "--format", "csv")
    assert code == 0 and out == findings.findings_frame(result).write_csv()
    code, out, _ = _invoke("report", "--db", str(pair_db), "--by", "findings", "--format", "table")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("Findings") and max(len(line) for line in lines) <= 120
    total = sum(len(g.findings) for g in result.groups)
    assert len(re.findall(r"^ +\d+\. ", out, flags=re.M)) == total  # every finding, not five per group


def test_by_findings_refuses_per_rank_filters(pair_db: Path) -> None:
    for args in (("--rank", "0"), ("--trace", "1"), ("--top", "3")):
        code, out, err = _invoke("report", "--db", str(pair_db), "--by", "findings", *args)
        assert code == 1 and out == "" and "--by findings does not take" in err, args
    code, out, err = _invoke("report", "--db", str(pair_db), "--format", "table", "--rank", "0")
    assert code == 0 and not out.startswith("Findings") and "the findings are of whole runs" in err


# ---------------------------------------------------------------------------------------------------- the page


def test_the_html_page_opens_with_the_findings(pair) -> None:
    """The page's first section is the findings: every finding's sentence in rank order, its saving as data, the
    all-reduce wait's equal to the raw JSON's (batch size 1: named first, rank 0 the late rank)."""
    import html

    from k25trace.render import html as page

    text, _ = page.build(pair, source="pair.duckdb")
    sections = re.findall(r'<section id="([\w-]+)"', text)
    assert sections[0] == "findings" and sections[1] == "runs"
    assert text.index('href="#findings"') < text.index('href="#runs"')
    section = html.unescape(text[text.index('<section id="findings">') : text.index('<section id="runs">')])
    result = findings.findings(pair, db="pair.duckdb")
    at = 0
    for group in result.groups:
        at = section.index(group.heading, at)
        for f in group.findings:
            at = section.index(f.sentence, at)
    raw = raw_allreduce_wait(PAIR / "eager")
    items = re.findall(r'<li data-kind="([\w_]+)" data-saving-ms="([^"]*)"', section)
    waits = [Decimal(ms) for kind, ms in items if kind == "collective_wait"]
    assert len(waits) == 3 and all(abs(w - raw[b]) < Decimal("0.00006") for w, b in zip(waits, (1, 8, 64), strict=True))
    assert items[0][0] == "collective_wait" and "Rank 0 caused" in section and result.overlap in section
