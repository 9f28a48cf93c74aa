"""Options checked before anything runs (issue 28.2/28.3): each bad value is refused naming the option, exit
non-zero, no traceback; `bench allreduce` without torch says how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from k25trace.analysis import floor as bench
from k25trace.cli import cli
from k25trace.errors import K25Error

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--count", "0"], "--count"),
        (["--count", "-5"], "--count"),
        (["--hidden", "0"], "--hidden"),
        (["--hidden", "-7168"], "--hidden"),
        (["--timeout", "0"], "--timeout"),
        (["--timeout", "-1"], "--timeout"),
        (["--timeout", "nan"], "--timeout"),
        (["--timeout", "inf"], "--timeout"),
        (["--batch-sizes", "a,b"], "--batch-sizes"),
        (["--batch-sizes", "0"], "--batch-sizes"),
        (["--batch-sizes", ","], "--batch-sizes"),
        (["--sizes", "1e30"], "--sizes '1e30'"),
        (["--sizes", "6G"], "--sizes '6G'"),
        (["--sizes", "0"], "--sizes '0'"),
        (["--sizes", "1e309"], "--sizes '1e309'"),
        (["--hidden", "131072", "--batch-sizes", "8192"], "--hidden 131072"),
    ],
)
def test_bench_options_are_checked_before_anything_runs(args: list[str], option: str) -> None:
    result = CliRunner().invoke(cli, ["bench", "allreduce", "--backend", "gloo", *args])
    assert result.exit_code in (1, 2) and option in result.output, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


SMALL_BENCH = [
    "--backend",
    "gloo",
    "--world-size",
    "1",
    "--sizes",
    "1024",
    "--count",
    "1",
    "--iters",
    "1",
    "--warmup",
    "0",
    "--bursts",
    "1",
    "--timeout",
    "10",
    "--no-graph",
]
"""As short as a bench gets: a bad value let through by mistake fails the test in seconds, not after a bench."""


@pytest.mark.parametrize(("option", "bound"), [("--iters", 100_000), ("--bursts", 10_000), ("--warmup", 100_000)])
@pytest.mark.parametrize("value", [str(10**30), "bound+1"])
def test_bench_iterations_are_bounded(option: str, bound: int, value: str) -> None:
    """`--iters 10**30` and `--bursts 10**30` were taken and started a bench; the bound is in the help and the
    error, which names the option."""
    value = str(bound + 1) if value == "bound+1" else value
    args = [x for i, x in enumerate(SMALL_BENCH) if x != option and (i == 0 or SMALL_BENCH[i - 1] != option)]
    result = CliRunner().invoke(cli, ["bench", "allreduce", *args, option, value])
    assert result.exit_code == 2, result.output
    assert f"'{option}'" in result.output and f"{bound}" in result.output, result.output
    assert "bench:" not in result.output  # nothing started
    helptext = CliRunner().invoke(cli, ["bench", "allreduce", "--help"]).output
    assert f"{bound:,}" in " ".join(helptext.split()), helptext


def test_every_bench_allreduce_option_has_help() -> None:
    from k25trace.bench_cli import allreduce

    missing = [p.opts[0] for p in allreduce.params if isinstance(p, click.Option) and not p.help]
    assert missing == []


def test_sizes_beyond_the_bound_name_it() -> None:
    assert bench.parse_size("1G") == 1 << 30
    with pytest.raises(K25Error, match=r"'6G' is more than 1,073,741,824 bytes \(1 GiB\)"):
        bench.parse_size("6G")
    specs = [{"size_bytes": 1 << 30, "count": 1}] * 64
    with pytest.raises(
        K25Error, match="64 size\\(s\\) totalling 68,719,476,736 bytes need .* more than half this machine's memory"
    ):
        bench.check_memory(specs, backend="gloo", world_size=2)
    bench.check_memory([{"size_bytes": 14336, "count": 1}], backend="gloo", world_size=2)  # fits


def test_bench_without_torch_says_how_to_install_it(tmp_path: Path) -> None:
    """A torch that cannot be imported (a stand-in package that raises as a missing module does)."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "k25trace", "bench", "allreduce", "--sizes", "14K"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: bench allreduce needs PyTorch") and "pip install torch" in lines[0]


def test_the_bench_runs_alone_as_a_module() -> None:
    """`python3 -m k25trace.bench_cli allreduce` (benchmarks/device_tp2.sh, the torch.distributed launcher path): its
    help, and a bad value as one `error:` line, exit 1, before anything starts."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    helped = subprocess.run(
        [sys.executable, "-m", "k25trace.bench_cli", "allreduce", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert helped.returncode == 0 and "Usage: k25trace bench allreduce" in helped.stdout, helped.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "k25trace.bench_cli", "allreduce", "--sizes", "6G"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert bad.returncode == 1 and bad.stderr.strip().splitlines() == [
        "error: --sizes '6G' is more than 1,073,741,824 bytes (1 GiB): the largest message benched (a decode step's "
        "all-reduces are KiB to MiB)"
    ], bad.stderr


@pytest.mark.parametrize("top", ["-1", "-30"])
def test_compare_top_must_not_be_negative(top: str) -> None:
    result = CliRunner().invoke(cli, ["compare", "a.duckdb", "b.duckdb", "--top", top])
    assert result.exit_code == 2 and "--top" in result.output and "x>=0" in result.output


def test_report_top_must_be_positive(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["report", "--db", str(tmp_path / "x.duckdb"), "--by", "kernel", "--top", "-1"])
    assert result.exit_code == 2 and "--top" in result.output and not (tmp_path / "x.duckdb").exists()
