"""Fixtures for the TUI tests: a small real-trace database (bundled samples + a two-rank trace), built once."""

from __future__ import annotations

from pathlib import Path

import pytest

from k25trace import db

REPO = Path(__file__).resolve().parents[2]
# the four real-GPU samples (the synthetic Kimi pair bundled for the demo is left out: the tests count these)
SAMPLES = sorted(p for p in (REPO / "k25trace" / "samples").glob("*/*.json.gz") if "synthetic" not in p.parent.name)
TWO_RANK_DIRS = [Path("/work/shared/traces/hta-2rank-sendrecv"), REPO / "tests" / "data" / "traces" / "hta-2rank-sendrecv"]


def two_rank_traces() -> list[Path]:
    for folder in TWO_RANK_DIRS:
        files = sorted(folder.glob("sampled_rank-*.json.gz"))
        if len(files) == 2:
            return files
    return []


@pytest.fixture(scope="session")
def trace_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of the bundled samples (traces 1–4, one step each) and hta-2rank-sendrecv (traces 5, 6)."""
    from k25trace.cli import run_load

    two_rank = two_rank_traces()
    if not two_rank:
        pytest.skip("hta-2rank-sendrecv traces not found")
    path = tmp_path_factory.mktemp("tui") / "k25trace-test.duckdb"
    con, failed = run_load(path, [*SAMPLES, *two_rank], quiet=True)
    con.close()
    assert failed == 0
    return path


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the schema and no traces."""
    path = tmp_path_factory.mktemp("tui-empty") / "empty.duckdb"
    db.connect(path).close()
    return path


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs and the editor do not blink, so snapshots are the same every run."""
    from textual.widgets import Input, TextArea

    monkeypatch.setattr(Input, "cursor_blink", False, raising=False)
    monkeypatch.setattr(TextArea, "cursor_blink", False, raising=False)
