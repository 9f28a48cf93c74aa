"""LineTable: the step screen's table of pre-drawn lines, driven in a small app by real key presses and clicks."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.app import App, ComposeResult

from k25trace.tui.widgets import LineTable

from .conftest import count_layouts

pytestmark = pytest.mark.asyncio

ROWS = 50
VISIBLE = 9
"""Rows visible below the header: the table is 10 lines high."""


class LinesApp(App[None]):
    CSS = "LineTable { height: 10; width: 40; }"

    def __init__(self) -> None:
        super().__init__()
        self.selected: list[tuple[int, str | None]] = []

    def compose(self) -> ComposeResult:
        yield LineTable(id="table")

    def on_mount(self) -> None:
        table = self.query_one(LineTable)
        table.set_lines(
            Text("row   name"), [Text(f"{i:>3}   name-{i}") for i in range(ROWS)], [f"k{i}" for i in range(ROWS)]
        )
        table.focus()

    def on_line_table_row_selected(self, event: LineTable.RowSelected) -> None:
        self.selected.append((event.row, event.key))


def screen_lines(app: App[None]) -> list[str]:
    """What the table shows, line by line (the header first)."""
    table = app.query_one(LineTable)
    return [table.render_line(y).text.strip() for y in range(table.scrollable_content_region.height)]


async def test_keys_move_the_cursor_and_the_view_follows_it() -> None:
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        assert table.row_count == ROWS and table.cursor_row == 0
        assert screen_lines(app)[:2] == ["row   name", "0   name-0"]
        await pilot.press("down", "down")
        assert table.cursor_row == 2 and table.scroll_y == 0
        await pilot.press(*["down"] * 10)  # past the bottom of the view: it scrolls, the header stays
        assert table.cursor_row == 12
        lines = screen_lines(app)
        assert lines[0] == "row   name" and lines[-1] == "12   name-12" and len(lines) == VISIBLE + 1
        await pilot.press("pagedown")
        assert table.cursor_row == 12 + VISIBLE
        await pilot.press("end")
        assert table.cursor_row == ROWS - 1 and screen_lines(app)[-1] == f"{ROWS - 1}   name-{ROWS - 1}"
        await pilot.press("down")  # clamped
        assert table.cursor_row == ROWS - 1
        await pilot.press("pageup")
        assert table.cursor_row == ROWS - 1 - VISIBLE
        await pilot.press("home")
        assert table.cursor_row == 0 and screen_lines(app)[1] == "0   name-0"
        await pilot.press("up")
        assert table.cursor_row == 0


async def test_enter_and_a_click_on_the_cursor_row_select_it_with_its_key() -> None:
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.selected == [(1, "k1")]
        await pilot.click(LineTable, offset=(2, 4))  # line 4 = row 3: moves the cursor there, selects nothing
        await pilot.pause()
        assert table.cursor_row == 3 and app.selected == [(1, "k1")]
        await pilot.click(LineTable, offset=(2, 4))  # again: selects it
        await pilot.pause()
        assert app.selected == [(1, "k1"), (3, "k3")]
        await pilot.click(LineTable, offset=(2, 0))  # the header selects nothing
        await pilot.pause()
        assert table.cursor_row == 3 and len(app.selected) == 2


async def test_refill_resets_cursor_and_view_and_add_lines_keeps_them() -> None:
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        await pilot.press("end")
        assert table.scroll_y > 0
        table.add_lines([Text("extra")], ["x"])
        await pilot.pause()
        assert table.row_count == ROWS + 1 and table.cursor_row == ROWS - 1 and table.key(ROWS) == "x"
        table.set_lines(Text("h"), [Text("a"), Text("b")])
        await pilot.pause()
        assert (table.cursor_row, table.scroll_y, table.row_count, table.key(1)) == (0, 0, 2, None)
        assert screen_lines(app)[:3] == ["h", "a", "b"]
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected == [(0, None)]
        table.set_lines(Text("h"), [])
        await pilot.press("enter", "down")  # nothing to select or move to
        await pilot.pause()
        assert table.row_count == 0 and table.cursor_row == 0 and app.selected == [(0, None)]
        with pytest.raises(ValueError, match="2 lines but 1 keys"):
            table.add_lines([Text("a"), Text("b")], ["only one"])


async def test_a_wide_line_scrolls_sideways_under_a_header_that_scrolls_with_it() -> None:
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        table.set_lines(Text("header-" + "h" * 80), [Text("x" * 70 + "END")])
        await pilot.pause()
        assert table.virtual_size.width == 7 + 80 + 2 and table.max_scroll_x > 0
        assert "END" not in table.render_line(1).text
        await pilot.press(*["right"] * 60)
        assert "END" in table.render_line(1).text and table.render_line(0).text.strip().startswith("h")


async def test_the_cursor_row_is_drawn_over_the_lines_own_colours() -> None:
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        table.set_lines(Text("h"), [Text.assemble(("red", "red"), " plain"), Text.assemble(("red", "red"))])
        await pilot.pause()
        cursor = table.get_component_rich_style("line-table--cursor")
        on_cursor = [s for s in table.render_line(1) if s.text.strip()]
        assert on_cursor and all(s.style is not None and s.style.color == cursor.color for s in on_cursor)
        other = [s for s in table.render_line(2) if s.text == "red"]
        assert other and other[0].style is not None and other[0].style.color is not None
        assert other[0].style.color.name == "red"


async def test_lines_drawn_in_advance_paint_exactly_as_lines_drawn_on_screen() -> None:
    """Rows drawn and painted off the UI thread (draw_lines, as the step screen's read-ahead worker does) paint the
    same cells and styles as the same rows drawn while painting; rows past the drawn ones, the cursor's row and a
    table of another style or width are drawn while painting."""
    from k25trace.tui.widgets.lines import draw_lines

    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        header = Text("row   name, drawn in advance")
        lines = [Text(f"{i:>3}   ") + Text(f"name-{i}", style="bold red") for i in range(ROWS)]
        table.set_lines(header, lines)
        await pilot.pause()
        await pilot.press("down")  # the cursor on the second row
        plain = [table.render_line(y) for y in range(VISIBLE + 1)]
        style, cells = table.paint_key()
        for paint_for in ((style, cells), (style, 25), None):
            drawn = draw_lines(app.console, header, lines, rows=5, paint_for=paint_for)
            assert drawn.width == max(line.cell_len for line in [header, *lines]) + 2
            table.set_lines(header, lines, drawn=drawn)
            table.cursor_row = 1
            await pilot.pause()
            assert (len(table._painted), table._painted_for) == ((5, paint_for) if paint_for else (0, None))
            assert [table.render_line(y) for y in range(VISIBLE + 1)] == plain
        with pytest.raises(ValueError, match="another header"):
            table.set_lines(Text("another"), lines, drawn=drawn)
        table.set_lines(header, lines)  # drawn on screen again: nothing painted in advance is kept
        assert (table._painted, table._painted_for) == ({}, None)


async def test_a_table_is_laid_out_again_only_when_its_rows_or_scroll_bars_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refill lays the screen out again when the table's rows (with keep_rows: its most rows) or its scroll bars
    change; a change of width alone repaints it, its horizontal scroll bar updated to the new width."""
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        table.keep_rows = True
        layouts = count_layouts(monkeypatch, LineTable)
        header = Text("row   name")
        wide = [Text(f"{i:>3}   " + "w" * (40 + i)) for i in range(5)]  # wider than the table: a scroll bar
        table.set_lines(header, wide)
        await pilot.pause()
        assert table.show_horizontal_scrollbar and table.virtual_size == (6 + 44 + 2, ROWS + 1)
        layouts.clear()
        wider = [Text(f"{i:>3}   " + "w" * (50 + i)) for i in range(5)]
        table.set_lines(header, wider)  # wider still, as many rows kept: no layout, the scroll bar follows
        await pilot.pause()
        assert layouts == [] and table.virtual_size.width == 6 + 54 + 2
        assert table.horizontal_scrollbar.window_virtual_size == table.virtual_size.width
        narrow = [Text(f"{i:>3}   n-{i}") for i in range(3)]
        table.set_lines(header, narrow)  # fits: the scroll bar goes, a layout
        await pilot.pause()
        assert layouts and not table.show_horizontal_scrollbar and table.virtual_size.height == ROWS + 1
        lines = screen_lines(app)
        assert lines[:4] == ["row   name", "0   n-0", "1   n-1", "2   n-2"] and lines[4:] == [""] * (VISIBLE - 3)
        layouts.clear()
        table.set_lines(header, [Text(f"{i:>3}   m-{i}0") for i in range(2)])  # one cell wider, fewer rows
        await pilot.pause()
        assert layouts == [] and table.virtual_size.height == ROWS + 1
        assert not LineTable().keep_rows


async def test_a_scroll_bar_is_painted_again_when_a_refill_changes_it_and_only_then() -> None:
    """The table repaints its scroll bars through their sizes (reactive), not on every refill: a step move that
    keeps the rows and the width asks no scroll bar to repaint (a scroll bar's repaint was a tenth of a step
    move); one that changes either repaints that bar, with the new sizes."""
    app = LinesApp()
    async with app.run_test(size=(60, 12)) as pilot:
        table = app.query_one(LineTable)
        table.set_lines(Text("header"), [Text("x" * 60)] * ROWS)
        await pilot.pause()
        bars = {"vertical": table.vertical_scrollbar, "horizontal": table.horizontal_scrollbar}
        asked = {name: 0 for name in bars}
        for name, bar in bars.items():
            refresh = bar.refresh

            def counted(*args, name=name, refresh=refresh, **kwargs):  # type: ignore[no-untyped-def]
                asked[name] += 1
                return refresh(*args, **kwargs)

            bar.refresh = counted  # type: ignore[method-assign]

        async def refill(width: int, rows: int) -> dict[str, int]:
            before = dict(asked)
            table.set_lines(Text("header"), [Text("y" * width)] * rows)
            await pilot.pause()
            return {name: asked[name] - before[name] for name in bars}

        assert await refill(60, ROWS) == {"vertical": 0, "horizontal": 0}  # new lines, same sizes
        changed = await refill(90, ROWS)
        assert changed["horizontal"] > 0 and changed["vertical"] == 0
        assert table.horizontal_scrollbar.window_virtual_size == 92
        changed = await refill(90, 2 * ROWS)
        assert changed["vertical"] > 0 and changed["horizontal"] == 0
        assert table.vertical_scrollbar.window_virtual_size == 2 * ROWS + 1
