"""A table of lines drawn in advance: for the tables the step screen refills on every key press."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

PAD = 1
"""Blank cells on each side of a line, as a DataTable pads its cells."""


def text_strip(console: Console, text: Text, width: int, pad: int = 0) -> Strip:
    """``text`` drawn once as a strip ``width`` cells wide, ``pad`` blank cells each side, its own styles only (the
    widget's are laid over it when painted)."""
    segments = list(text.render(console, end=""))
    if pad:
        segments = [Segment(" " * pad), *segments, Segment(" " * pad)]
    return Strip(segments).extend_cell_length(width)


DRAWN_ROWS = 64
"""Rows :func:`draw_lines` draws in advance: more than a screen shows (the rest are drawn when first visible)."""


class Drawn:
    """Lines drawn in advance (off the UI thread: a worker has time between key presses) for
    :meth:`LineTable.set_lines`: the table's width for them with ``header``, the strips of the first rows, and
    those strips as painted (the table's style laid over them, cut to its width) for ``painted_for``."""

    __slots__ = ("header", "painted", "painted_for", "strips", "width")

    def __init__(
        self,
        header: Text,
        width: int,
        strips: list[Strip],
        painted: list[Strip] | None = None,
        painted_for: tuple[Style, int] | None = None,
    ) -> None:
        self.header = header
        self.width = width
        self.strips = strips
        self.painted = painted or []
        self.painted_for = painted_for
        """(the table's style, its width in cells) the painted strips are for."""


def draw_lines(
    console: Console,
    header: Text,
    lines: Sequence[Text],
    rows: int = DRAWN_ROWS,
    paint_for: tuple[Style, int] | None = None,
) -> Drawn:
    """What a :class:`LineTable` would draw for ``header`` and ``lines`` (its width, its first ``rows`` strips),
    worked out in advance; with ``paint_for`` (the table's style and width: :meth:`LineTable.paint_key`) also
    how a paint lays those strips out at the top left."""
    width = max([header.cell_len + 2 * PAD, *(line.cell_len + 2 * PAD for line in lines)])
    strips = [text_strip(console, line, width, PAD) for line in lines[:rows]]
    if paint_for is None or not paint_for[1]:
        return Drawn(header, width, strips)
    style, cells = paint_for
    painted = [strip.apply_style(style).crop_extend(0, cells, style) for strip in strips]
    return Drawn(header, width, strips, painted, paint_for)


class LineTable(ScrollView, can_focus=True):
    """A header line and one line per row, each row with an optional key; a row cursor; Enter (or a click on the
    cursor's row) posts :class:`LineTable.RowSelected`.

    It looks and moves as a one-column DataTable with ``cursor_type="row"``, but draws far less: a DataTable
    re-measures and re-renders every visible cell through Rich's pipeline on each refill, which was a third of
    the step screen's time per step move. Here a row is turned into a :class:`Strip` the first time it is
    visible, and painting is cropping that strip and laying the cursor's style over it. A worker may draw the rows
    in advance, painted for the table's style and width (:func:`draw_lines`): a refill then paints rows drawn
    already. The lines are Rich :class:`Text` (one line each, never wrapped); keys are strings (or None).
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Select", show=False),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home,ctrl+home", "first", "First row", show=False),
        Binding("end,ctrl+end", "last", "Last row", show=False),
        Binding("left", "scroll_left", "Scroll left", show=False),
        Binding("right", "scroll_right", "Scroll right", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {"line-table--header", "line-table--cursor"}

    DEFAULT_CSS = """
    LineTable {
        background: $surface;
        color: $foreground;
        height: auto;
        max-height: 100%;
        &:focus {
            background-tint: $foreground 5%;
            & > .line-table--cursor {
                background: $block-cursor-background;
                color: $block-cursor-foreground;
                text-style: $block-cursor-text-style;
            }
            & > .line-table--header {
                background-tint: $foreground 5%;
            }
        }
        & > .line-table--header {
            text-style: bold;
            background: $panel;
            color: $foreground;
        }
        &:ansi > .line-table--header {
            background: ansi_bright_blue;
            color: ansi_default;
        }
        & > .line-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
    }
    """

    cursor_row: reactive[int] = reactive(0, always_update=True)
    """The row under the cursor (0 when the table is empty)."""

    class RowSelected(Message):
        """Enter on a row, or a click on the cursor's row."""

        def __init__(self, table: LineTable, row: int, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.row = row
            self.key = key

        @property
        def control(self) -> LineTable:
            return self.table

    def __init__(self, *, keep_rows: bool = False, **kwargs: Any) -> None:
        """``keep_rows``: the table stays as tall as the most rows it has held (blank rows below fewer), so that
        refills of fewer rows do not lay the screen out again; ``name``, ``id``, ``classes`` and ``disabled`` as
        for any widget."""
        super().__init__(**kwargs)
        self.keep_rows = keep_rows
        self._most_rows = 0
        """The most rows the table has held."""
        self._header = Text()
        self._lines: list[Text] = []
        self._keys: list[str | None] = []
        self._strips: dict[int, Strip] = {}
        """Rows drawn so far (row -> its strip: padded, the line's own styles only; the widget's and the cursor's
        are laid over it when painted, so a theme change needs no new strips), dropped on a refill."""
        self._header_strip: Strip | None = None
        self._painted: dict[int, Strip] = {}
        """Rows as painted at the top left for :attr:`_painted_for` (drawn in advance: :class:`Drawn`)."""
        self._painted_for: tuple[Style, int] | None = None
        self._paint_style: Style | None = None
        """The widget's style while one paint draws its rows (:meth:`render_lines`), else None."""
        self._width = 0
        """Cells of the widest line, the header included, padding included."""

    # contents

    @property
    def row_count(self) -> int:
        return len(self._lines)

    def line(self, row: int) -> Text:
        """The line of a row."""
        return self._lines[row]

    def key(self, row: int) -> str | None:
        """The key of a row."""
        return self._keys[row]

    def set_lines(
        self, header: Text, lines: Sequence[Text], keys: list[str | None] | None = None, drawn: Drawn | None = None
    ) -> None:
        """Replace the header and every row; the cursor goes back to the first row, the view to the top left.
        ``drawn``: :func:`draw_lines` of the same header and lines, when a worker drew them already."""
        if drawn is not None and drawn.header is not header:
            raise ValueError("drawn: drawn for another header")
        self._header = header
        self._header_strip = None
        self._lines, self._keys, self._strips = [], [], {}
        self._painted, self._painted_for = {}, None
        self._width = header.cell_len + 2 * PAD if drawn is None else drawn.width
        if self.scroll_offset != (0, 0):
            self.scroll_to(0, 0, animate=False)
        self.add_lines(lines, keys, measured=drawn is not None)
        if drawn is not None:
            self._strips = dict(enumerate(drawn.strips))
            self._painted, self._painted_for = dict(enumerate(drawn.painted)), drawn.painted_for
        self.cursor_row = 0

    def paint_key(self) -> tuple[Style, int]:
        """What rows painted in advance must be painted for: the table's style and its width in cells."""
        return self.rich_style, self.size.width

    def add_lines(self, lines: Sequence[Text], keys: list[str | None] | None = None, *, measured: bool = False) -> None:
        """Append rows (``keys`` as long as ``lines``, when given; ``measured``: the table is as wide as they
        need already)."""
        if keys is not None and len(keys) != len(lines):
            raise ValueError(f"{len(lines)} lines but {len(keys)} keys")
        self._lines.extend(lines)
        self._keys.extend(keys if keys is not None else [None] * len(lines))
        width = self._width if measured else max([self._width, *(line.cell_len + 2 * PAD for line in lines)])
        if width != self._width:  # a wider line widens every row
            self._width, self._strips, self._header_strip = width, {}, None
            self._painted, self._painted_for = {}, None
        self._most_rows = max(self._most_rows, len(self._lines))
        rows = self._most_rows if self.keep_rows else len(self._lines)
        self._resize(Size(self._width, rows + 1))
        self.refresh()

    def _resize(self, size: Size) -> None:
        """Set the virtual size. Textual lays the whole screen out again on any change of it; a change of width
        alone that shows or hides no scroll bar changes nothing outside the table, and only its scroll bars are
        updated (the kernel table's width follows its longest name, a new one on most step moves)."""
        old = self.virtual_size
        if size == old:
            return
        if old.height == size.height and self.container_size:
            room = self.container_size.width
            if self.show_vertical_scrollbar:
                room -= self.styles.scrollbar_size_vertical
            if (size.width > room) == self.show_horizontal_scrollbar:
                self.set_reactive(LineTable.virtual_size, size)
                self._scroll_update(size)
                return
        self.virtual_size = size

    def _scroll_update(self, virtual_size: Size) -> None:
        """Textual's, less its repaint of each scroll bar: a scroll bar repaints itself when its sizes or position
        change (they are reactive), and a step move that keeps them (same rows, same width) repaints none."""
        self._refresh_scrollbars()
        width, height = self.container_size
        if self.show_vertical_scrollbar and self.styles.scrollbar_size_vertical:
            self.vertical_scrollbar.window_virtual_size = virtual_size.height
            self.vertical_scrollbar.window_size = height - self.scrollbar_size_horizontal
        if self.show_horizontal_scrollbar and self.styles.scrollbar_size_horizontal:
            self.horizontal_scrollbar.window_virtual_size = virtual_size.width
            self.horizontal_scrollbar.window_size = width - self.scrollbar_size_vertical
        self.scroll_x = self.validate_scroll_x(self.scroll_x)
        self.scroll_y = self.validate_scroll_y(self.scroll_y)

    # drawing

    def _strip(self, text: Text) -> Strip:
        """A line as a strip ``self._width`` cells wide: padded, its own styles only."""
        return text_strip(self.app.console, text, self._width, PAD)

    def render_lines(self, crop: Region) -> list[Strip]:
        """Every row of one paint: the widget's style is worked out once for them all (it walks the ancestors'
        backgrounds; per row it was a sixth of a step move's drawing)."""
        self._paint_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._paint_style = None

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        base = self._paint_style if self._paint_style is not None else self.rich_style
        if y == 0:
            if self._header_strip is None:
                self._header_strip = self._strip(self._header)
            strip = self._header_strip.apply_style(base + self.get_component_rich_style("line-table--header"))
        else:
            row = y - 1 + scroll_y
            if row >= len(self._lines):
                return Strip.blank(width, base)
            cached = self._strips.get(row)
            if cached is None:
                cached = self._strips[row] = self._strip(self._lines[row])
            strip = cached
            if row != self.cursor_row and scroll_x == 0 and self._painted_for == (base, width):
                painted = self._painted.get(row)
                if painted is not None:
                    return painted
            if row == self.cursor_row:  # over the line's own colours, as a DataTable draws its cursor
                cursor = self.get_component_rich_style("line-table--cursor")
                strip = Strip(Segment.apply_style(iter(strip), base, post_style=cursor), strip.cell_length)
            else:
                strip = strip.apply_style(base)
        return strip.crop_extend(scroll_x, scroll_x + width, base)

    # the cursor

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._lines) - 1))

    def watch_cursor_row(self) -> None:
        self.scroll_to_cursor()
        self.refresh()

    def scroll_to_cursor(self) -> None:
        """Scroll so that the cursor's row is visible below the header."""
        visible = max(1, self.scrollable_content_region.height - 1)
        row, top = self.cursor_row, round(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False)

    def move_cursor(self, row: int) -> None:
        self.cursor_row = row

    def action_cursor_up(self) -> None:
        self.cursor_row -= 1

    def action_cursor_down(self) -> None:
        self.cursor_row += 1

    def action_page_up(self) -> None:
        self.cursor_row -= max(1, self.scrollable_content_region.height - 1)

    def action_page_down(self) -> None:
        self.cursor_row += max(1, self.scrollable_content_region.height - 1)

    def action_first(self) -> None:
        self.cursor_row = 0

    def action_last(self) -> None:
        self.cursor_row = len(self._lines) - 1

    def action_select_cursor(self) -> None:
        if self._lines:
            self.post_message(self.RowSelected(self, self.cursor_row, self._keys[self.cursor_row]))

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def on_click(self, event: events.Click) -> None:
        """A click moves the cursor to its row; a click on the cursor's row selects it."""
        if event.y < 1:
            return
        row = event.y - 1 + round(self.scroll_y)
        if row >= len(self._lines):
            return
        event.stop()
        if row == self.cursor_row:
            self.action_select_cursor()
        else:
            self.cursor_row = row
