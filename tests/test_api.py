"""The Python API: the examples of docs/api.md run as written, and each frame equals the CLI's CSV of the view."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import k25trace

ROOT = Path(__file__).resolve().parent.parent
PAIR = ROOT / "tests" / "data" / "h200x2-decode-loop" / "eager"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("api") / "run.duckdb"
    summary = k25trace.load(str(PAIR), db=str(path))  # str paths, as a notebook passes them
    assert [r.status for r in summary.results] == ["loaded", "loaded"]
    return path


def _cli_csv(db: Path, *args: str) -> pl.DataFrame:
    done = subprocess.run(
        [sys.executable, "-m", "k25trace.cli", "report", "--db", str(db), "--format", "csv", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return pl.read_csv(io.StringIO(done.stdout), infer_schema_length=None)


@pytest.mark.parametrize(
    ("method", "args", "kwargs"),
    [
        ("breakdown", [], {}),
        ("steps", ["--rank", "1"], {"rank": 1}),
        ("kernels", ["--top", "7"], {"top": 7}),
        ("idle", [], {}),
        ("comm", [], {}),
    ],
)
def test_each_frame_is_the_cli_s(database: Path, method: str, args: list[str], kwargs: dict) -> None:
    view = {"breakdown": "batch", "steps": "step", "kernels": "kernel"}.get(method, method)
    expected = _cli_csv(database, "--by", view, *args)
    with k25trace.open(database) as run:
        frame = getattr(run, method)(**kwargs)
    assert frame.height == expected.height > 0
    assert frame.columns == expected.columns
    for column in expected.columns:  # the CSV rounds nothing: same values, column by column
        got, want = frame[column].to_list(), expected[column].to_list()
        pairs = zip(got, want, strict=True)
        assert [None if g is None else type(w)(g) if w is not None else g for g, w in pairs] == want, column


def test_batch_keeps_one_batch_size_and_a_view_without_one_says_so(database: Path) -> None:
    with k25trace.open(database) as run:
        every = run.breakdown()
        one = run.breakdown(batch=8)
        assert set(every["batch_size"]) == {1, 8, 64}
        assert one.height > 0 and set(one["batch_size"]) == {8}
        assert one.height == every.filter(pl.col("batch_size") == 8).height
        with pytest.raises(k25trace.api.K25Error, match="batch"):
            run.kernels(batch=8)


def test_open_is_read_only(database: Path) -> None:
    before = database.read_bytes()
    with k25trace.open(database) as run:
        with pytest.raises(k25trace.api.K25Error):
            run.sql("create table mine (x int)")
    assert database.read_bytes() == before


def test_open_names_a_missing_database(tmp_path: Path) -> None:
    with pytest.raises(k25trace.api.K25Error, match="no such database"):
        k25trace.open(tmp_path / "missing.duckdb")


def test_import_k25trace_stays_cheap() -> None:
    code = "import sys, k25trace; print(sorted(m for m in ('duckdb', 'polars', 'pyarrow') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_docs_examples_run(tmp_path: Path) -> None:
    """Every python block of docs/api.md, in order, in one namespace, from a folder holding the repo's data."""
    text = (ROOT / "docs" / "api.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 4
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        namespace: dict = {}
        for block in blocks:
            exec(compile(block, str(ROOT / "docs" / "api.md"), "exec"), namespace)  # noqa: S102
    finally:
        os.chdir(cwd)
    assert namespace["result"].verdict not in ("nothing compared",)
    assert namespace["allreduce"].height == 3  # batch sizes 1, 8 and 64
