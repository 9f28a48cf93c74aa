"""The overview opens with the findings (issue 31): a pilot reads the panel's text and checks it against what the raw
trace JSON says, read without k25trace (tests/findings_truth.py): on the real eager 2-GPU pair the waited-on rank,
why it was late and the wait as the saving; on the H200 eager trace host-bound idle and the launch overhead CUDA
graphs would remove, and not on its CUDA-graph twin."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest
from findings_truth import has_graph_launch, raw_allreduce_wait, raw_wait_by_late_rank

from k25trace.tui.app import K25TraceApp

from .conftest import DATA, SIZE, load_database, text_of, wait_for_workers

pytestmark = pytest.mark.asyncio

PAIR = DATA / "h200x2-decode-loop" / "eager"
GAPS = DATA / "h200-gaps"
_SAVES = re.compile(r"saves up to ([\d,]+\.\d{3}) ms/step \((\d+\.\d) %\) (without the wait|[a-z ]+)")


@pytest.fixture(scope="module")
def pair_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load_database(tmp_path_factory.mktemp("findings-pair") / "pair.duckdb", [PAIR], files=2)


@pytest.fixture(scope="module")
def gaps_dbs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return {
        name: load_database(tmp_path_factory.mktemp(f"findings-{name}") / f"{name}.duckdb", [GAPS / name], files=1)
        for name in ("eager", "graph")
    }


async def _panel(db: Path) -> tuple[str, int, bool]:
    """The findings panel's text once every query is done, the panel's width, and whether it heads the screen."""
    app = K25TraceApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        text = text_of(app, "#findings")
        panel = app.screen.query_one("#findings-scroll")
        above = panel.region.y < app.screen.query_one("#overview").region.y
        return text, app.screen.query_one("#findings").size.width, above


def _sections(text: str) -> dict[int, str]:
    """The panel's text per batch size, from the group headings ('…, batch size 8: …'), whitespace folded."""
    parts = re.split(r"^(.*, batch size (\d+): .*)$", text, flags=re.M)
    return {int(parts[i + 1]): " ".join((parts[i] + parts[i + 2]).split()) for i in range(1, len(parts) - 2, 3)}


async def test_the_pair_panel_names_the_waited_on_rank_why_and_the_wait_as_saving(pair_db: Path) -> None:
    text, width, above = await _panel(pair_db)
    assert above and text.startswith("Findings, ranked by the most each fix alone could bring")
    assert max(len(line) for line in text.splitlines()) <= min(width, 120)
    raw = raw_allreduce_wait(PAIR)
    late = raw_wait_by_late_rank(PAIR)
    sections = _sections(text)
    assert sorted(sections) == sorted(raw) == [1, 8, 64]
    for batch, section in sections.items():
        (wait,) = [m for m in _SAVES.finditer(section) if m.group(3) == "without the wait"]
        assert abs(Decimal(wait.group(1).replace(",", "")) - raw[batch]) <= Decimal("0.0006"), (batch, wait.group(1))
        for rank, caused in late[batch].items():  # each late rank with the wait it caused
            shown = re.search(rf"Rank {rank} caused ([\d,]+\.\d{{3}}) ms/step", section)
            assert shown is not None, (batch, rank)
            assert abs(Decimal(shown.group(1).replace(",", "")) - caused) <= Decimal("0.0006"), (batch, rank)
    one = sections[1]
    (worst,) = [r for r, w in late[1].items() if w == max(late[1].values())]
    first = re.search(r"Rank (\d+) caused", one)
    assert first is not None and int(first.group(1)) == worst == 0  # the waited-on rank is named first
    assert "1. All-reduce:" in one and "its host launched late" in one  # the wait ranks first, with its cause
    assert "report --by comm, --by comm-site" in one


async def test_the_eager_panel_names_host_bound_idle_and_launch_overhead(gaps_dbs: dict[str, Path]) -> None:
    assert not has_graph_launch(GAPS / "eager")
    text, width, above = await _panel(gaps_dbs["eager"])
    assert above and max(len(line) for line in text.splitlines()) <= min(width, 120)
    for batch, section in _sections(text).items():
        assert "waiting for the host to launch work" in section, batch
        assert "without CUDA graphs: their launch overhead" in section, batch
        assert "with CUDA graphs (launch overhead only)" in section, batch


async def test_the_graph_panel_does_not_credit_graphs(gaps_dbs: dict[str, Path]) -> None:
    assert has_graph_launch(GAPS / "graph")
    text, _, above = await _panel(gaps_dbs["graph"])
    sections = _sections(text)
    assert above and sections
    for section in sections.values():
        assert "without CUDA graphs" not in section and "CUDA graphs would remove" not in section
        assert "CUDA-graph replays record no shapes" in section
