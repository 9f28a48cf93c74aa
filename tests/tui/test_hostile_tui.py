"""The TUI on hostile input (issue 11): the SQL panel with every DuckDB type, SQL with no statement and file
access (items 13, 17); the kernel screen with a 20 MB kernel name (item 21). Each used to crash the panel's worker
(status stuck on "running…"), write a file, or freeze the screen."""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Label, Static

from k25trace import pipeline
from k25trace.tui.app import K25TraceApp
from k25trace.tui.cells import NAME_CELL_CAP, name_cell
from k25trace.tui.messages import OpenKernel, OpenStep
from k25trace.tui.screens.kernel import NAME_CAP, PAGE_CHARS, KernelScreen, LongTextScreen, describe_kernel, printable
from k25trace.tui.screens.sql import CELL_CHARS, SqlScreen
from k25trace.tui.screens.step import StepScreen

from .conftest import DATA, SIZE, lines_of, load_database, navigate, wait_for_workers

HOSTILE = DATA / "hostile-sql"
LONG = 20_000_000


def status(app: K25TraceApp) -> str:
    return str(app.screen.query_one("#status", Label).render())


async def run_sql(pilot: Pilot, text: str) -> None:
    app = pilot.app
    if not isinstance(app.screen, SqlScreen):
        await wait_for_workers(pilot)
        await pilot.press("e")
        await wait_for_workers(pilot)
    app.screen.query_one("#editor").text = text  # type: ignore[attr-defined]
    await pilot.press("ctrl+r")
    await wait_for_workers(pilot)


def results(app: K25TraceApp) -> DataTable:
    return app.screen.query_one("#results", DataTable)


def row_cells(app: K25TraceApp, row: int = 0) -> dict[str, str]:
    table = results(app)
    names = [str(column.label) for column in table.columns.values()]
    return dict(zip(names, [getattr(c, "plain", str(c)) for c in table.get_row_at(row)], strict=True))


# ------------------------------------------------------------------------------------------ SQL panel (13, 17)


@pytest.mark.asyncio
async def test_sql_panel_shows_intervals_unions_and_far_dates(empty_db: Path) -> None:
    """INTERVAL and UNION made polars raise in the worker and an infinite timestamp made it panic: the status
    stayed "running…" (or the app died). Now they show as DuckDB writes them."""
    app = K25TraceApp(empty_db)
    async with app.run_test(size=SIZE) as pilot:
        await run_sql(
            pilot,
            "select interval '1 year 3 days' as i, union_value(n := 2)::union(n int, s varchar) as u, "
            "'infinity'::timestamp as t, 340282366920938463463374607431768211455::uhugeint as big, "
            "sum(x) as s, [1, 2] as l, 'a'::blob as b from range(3) t(x)",
        )
        assert "running" not in status(app) and "1 row(s)" in status(app)
        assert row_cells(app) == {
            "i": "1 year 3 days",
            "u": "2",
            "t": "infinity",
            "big": "340282366920938463463374607431768211455",
            "s": "3",
            "l": "[1, 2]",
            "b": "a",
        }
        await run_sql(pilot, "select * from test_all_types()")
        assert "3 row(s)" in status(app) and results(app).row_count == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("text", ["", "   \n", "-- only a comment", "/* block */", ";"])
async def test_sql_panel_blank_or_comment_only_is_a_message(empty_db: Path, text: str) -> None:
    app = K25TraceApp(empty_db)
    async with app.run_test(size=SIZE) as pilot:
        await run_sql(pilot, text)
        assert "running" not in status(app)
        assert "query failed" in status(app) and ("nothing to run" in status(app) or "no SQL statement" in status(app))


@pytest.mark.asyncio
async def test_sql_panel_writes_and_reads_no_file(empty_db: Path, tmp_path: Path) -> None:
    """Item 17, in the TUI: `COPY … TO` and `EXPORT DATABASE` wrote files from the SQL panel."""
    (tmp_path / "secret.txt").write_text("not for SQL")
    app = K25TraceApp(empty_db)
    async with app.run_test(size=SIZE) as pilot:
        for text in (
            f"copy (select 1) to '{tmp_path / 'out.csv'}'",
            f"export database '{tmp_path / 'exported'}'",
            f"attach '{tmp_path / 'other.duckdb'}' as other",
            f"select * from read_text('{tmp_path / 'secret.txt'}')",
        ):
            await run_sql(pilot, text)
            assert "query failed" in status(app) and "Permission Error" in status(app) and "read-only" in status(app)
        await run_sql(pilot, "set enable_external_access = true")
        assert "query failed" in status(app) and "locked" in status(app)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.txt"]
        # the app's own queries still run after the panel locked the connection down
        app.action_home()
        await pilot.pause()
        app.screen.action_reload()  # type: ignore[attr-defined]
        await wait_for_workers(pilot)
        assert "no traces yet" in status(app)
        await run_sql(pilot, "select 41 + 1 as answer")
        assert row_cells(app) == {"answer": "42"}


@pytest.mark.asyncio
async def test_sql_panel_cuts_a_20_mb_string(empty_db: Path) -> None:
    app = K25TraceApp(empty_db)
    async with app.run_test(size=SIZE) as pilot:
        await run_sql(pilot, f"select repeat('x', {LONG}) as name, 7 as n")
        cells = row_cells(app)
        assert cells["n"] == "7"
        assert cells["name"] == "x" * CELL_CHARS + f"… ({LONG - CELL_CHARS} more characters)"


# -------------------------------------------------------------------------------------- kernel screen (item 21)


@pytest.fixture(scope="module")
def long_name_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-kernel trace whose middle kernel gets a 20 MB full name and a 20 MB short name (loading such a
    trace takes the loader ≈ 10 s; the kernel screen only reads the database, so the name is set in place),
    with control characters in it (an escape sequence must not reach the terminal)."""
    path = load_database(tmp_path_factory.mktemp("long-name") / "long.duckdb", [HOSTILE / "long_name.json"], files=1)
    con = pipeline.connect(path)
    con.execute(
        "update kernel_names set name = 'void hostile<' || repeat('x', $n) || '\x1b[31m>(int)', "
        "short_name = repeat('s', $n) where name = 'void hostile_kernel_1<int>(int)'",
        {"n": LONG},
    )
    con.close()
    return path


async def open_long_kernel(pilot: Pilot) -> tuple[int, int, int]:
    app: K25TraceApp = pilot.app  # type: ignore[assignment]
    await wait_for_workers(pilot)
    cursor = app.con.cursor()
    ((trace_id, event_id, start_ns),) = cursor.execute(
        "select trace_id, event_id, start_ns from gpu_events join kernel_names using (name_id) "
        "where length(name) > 1000"
    ).fetchall()
    cursor.close()
    await navigate(pilot, OpenKernel(trace_id, event_id, start_ns))
    return trace_id, event_id, start_ns


@pytest.mark.asyncio
async def test_kernel_screen_draws_only_the_start_of_a_20_mb_name(long_name_db: Path) -> None:
    """Item 21: the whole 20 MB name went into one Static (≈ 25–40 s frozen). Now NAME_CAP characters are drawn."""
    app = K25TraceApp(long_name_db)
    async with app.run_test(size=SIZE) as pilot:
        await open_long_kernel(pilot)
        assert isinstance(app.screen, KernelScreen)
        info = str(app.screen.query_one("#kernel-info", Static).render())
        assert len(info) < 3 * NAME_CAP
        full = len("void hostile<") + LONG + len("\x1b[31m>(int)")
        assert f"… {full - NAME_CAP:,} more characters" in info and f"… ({LONG - NAME_CAP:,} more characters)" in info
        assert "f: read the full name" in info and "category: other" in info
        assert app.screen.full_name is not None and len(app.screen.full_name) == full


@pytest.mark.asyncio
async def test_kernel_full_name_pages_and_file(
    long_name_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    app = K25TraceApp(long_name_db)
    async with app.run_test(size=SIZE) as pilot:
        trace_id, event_id, _ = await open_long_kernel(pilot)
        kernel_screen = app.screen
        full = kernel_screen.full_name  # type: ignore[attr-defined]
        pages = -(-len(full) // PAGE_CHARS)
        await pilot.press("f")
        await pilot.pause()
        assert isinstance(app.screen, LongTextScreen)
        assert status(app).startswith(f"page 1 of {pages:,}: characters 1–{PAGE_CHARS:,} of {len(full):,}")
        assert str(app.screen.query_one("#long-text", Static).render()).startswith("void hostile<xxx")
        await pilot.press("n", "n")
        assert status(app).startswith(f"page 3 of {pages:,}")
        await pilot.press("p", "p", "p", "p")  # stops at the first page
        assert status(app).startswith("page 1 of")
        app.screen.page = pages - 2  # type: ignore[attr-defined]
        await pilot.press("n", "n")  # stops at the last page, which shows the escape sequence as text
        assert status(app).startswith(f"page {pages:,} of {pages:,}")
        last = str(app.screen.query_one("#long-text", Static).render())
        assert last.endswith("\\x1b[31m>(int)") and "\x1b" not in last
        await pilot.press("w")
        await pilot.pause()
        (written,) = tmp_path.glob(f"k25trace-kernel-{trace_id}-{event_id}-*.txt")
        assert written.read_text(encoding="utf-8") == full
        written.unlink()
        await pilot.press("escape")
        assert app.screen is kernel_screen
        await pilot.press("w")  # from the kernel screen too
        await pilot.pause()
        (written,) = tmp_path.glob("k25trace-kernel-*.txt")
        assert written.read_text(encoding="utf-8") == full


def test_describe_kernel_leaves_short_names_whole() -> None:
    row = {
        key: None
        for key in (
            "category",
            "kind",
            "trace_id",
            "rank",
            "step_index",
            "device",
            "stream",
            "dur_us",
            "launch_name",
            "launch_api",
            "launch_to_start_us",
            "is_graph",
            "correlation",
            "grid_x",
            "grid_y",
            "grid_z",
            "block_x",
            "block_y",
            "block_z",
            "registers",
            "shared_mem_bytes",
            "blocks_per_sm",
            "warps_per_sm",
            "occupancy_pct",
            "bytes",
            "collective_name",
            "msg_in_nelems",
            "msg_out_nelems",
            "msg_dtype",
            "group_size",
            "pg_name",
            "pg_ranks",
        )
    }
    row.update(short_name="gemm", name="void gemm<[/x]>(int)")
    text = describe_kernel(row).plain
    assert text.startswith("gemm\nvoid gemm<[/x]>(int)\n\n") and "more characters" not in text
    row.update(name="n" * (NAME_CAP + 5))
    assert f"{'n' * NAME_CAP}… 5 more characters" in describe_kernel(row).plain
    assert printable("a\x1b[0m\tb\nc\x7f") == "a\\x1b[0m\tb\nc\\x7f"


def test_long_name_fixture_is_what_the_loader_made(long_name_db: Path) -> None:
    con = duckdb.connect(str(long_name_db), read_only=True)
    lengths = sorted(n for (n,) in con.execute("select length(name) from kernel_names").fetchall())
    con.close()
    assert lengths[-1] == len("void hostile<") + LONG + len("\x1b[31m>(int)") and len(lengths) == 3


def test_name_cell_is_one_printable_line_cut_at_its_cap() -> None:
    assert name_cell("gemm<[/x]>") == "gemm<[/x]>"
    assert name_cell("a\x1b[31mb\tc\nd\x7f") == "a\\x1b[31mb\\x09c\\x0ad\\x7f"
    assert name_cell("s" * (NAME_CELL_CAP + 7)) == "s" * NAME_CELL_CAP + "… (7 more characters)"
    assert name_cell("x" * NAME_CELL_CAP) == "x" * NAME_CELL_CAP


@pytest.mark.asyncio
async def test_step_screen_and_search_draw_a_20_mb_short_name_cut(long_name_db: Path) -> None:
    """The step screen drew the whole 20 MB short name in the kernel's line (seconds per key press)."""
    app = K25TraceApp(long_name_db)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for_workers(pilot)
        cursor = app.con.cursor()
        ((trace_id, step_index),) = cursor.execute(
            "select trace_id, step_index from gpu_events join kernel_names using (name_id) "
            "where length(short_name) > 1000"
        ).fetchall()
        cursor.close()
        await navigate(pilot, OpenStep(trace_id, step_index))
        assert isinstance(app.screen, StepScreen)
        kernels = lines_of(app, "#kernels")
        lines = [kernels.line(i).plain for i in range(kernels.row_count)]
        long = [line for line in lines if "more characters" in line]
        assert len(long) == 1 and long[0].endswith(f"{'s' * NAME_CELL_CAP}… ({LONG - NAME_CELL_CAP:,} more characters)")
        assert max(len(line) for line in lines) < NAME_CELL_CAP + 100
        await pilot.press("escape", "escape", "slash", *"sss", "enter")
        await wait_for_workers(pilot)
        results = app.screen.query_one("#results", DataTable)
        cells = [str(getattr(results.get_row_at(i)[0], "plain", "")) for i in range(results.row_count)]
        assert cells == [f"{'s' * NAME_CELL_CAP}… ({LONG - NAME_CELL_CAP:,} more characters)"]
