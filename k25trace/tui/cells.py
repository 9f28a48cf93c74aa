"""Table cells: values as Rich Text so kernel names with ``[`` stay literal and floats keep their precision."""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Span, Text


def cell(value: object) -> Text:
    """A DataTable cell for a query value: NULL → blank, numbers right-aligned, strings never parsed as markup."""
    if value is None:
        return LineText("")
    if isinstance(value, Text):
        return value
    if isinstance(value, bool):
        return LineText("yes" if value else "no")
    if isinstance(value, float):
        return LineText(f"{value:,.3f}", justify="right")
    if isinstance(value, int):
        return LineText(str(value), justify="right")
    return LineText(str(value))


NAME_CELL_CAP = 300
"""Characters of a kernel name drawn in a table cell (a trace may hold a 20 MB name: drawn whole, it froze the step
screen for seconds per key press)."""

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def printable(text: str, *, one_line: bool = False) -> str:
    """Control characters (an escape sequence in a name would reach the terminal) as ``\\xHH``; tab and newline
    too when ``one_line``."""
    return (_LINE_CONTROL if one_line else _CONTROL).sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def name_cell(name: str, cap: int = NAME_CELL_CAP) -> str:
    """A name for one line of a table: :func:`printable` on one line (a newline must not break it), cut at ``cap``
    characters with how many were left out."""
    shown = printable(name[:cap], one_line=True)
    return shown if len(name) <= cap else f"{shown}… ({len(name) - cap:,} more characters)"


class LineText(Text):
    """A one-line Text that a DataTable measures and draws without Rich's wrapping machinery: the table measures
    every new cell and renders every visible one on each change, and for a single line that fits, wrapping,
    justifying and re-joining change nothing. Drawn exactly as a plain Text is (same segments)."""

    _width: int | None = None

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        width = self.cell_width
        return Measurement(width, width)

    @property
    def cell_width(self) -> int:
        """Cells the line takes on screen (measured once)."""
        if self._width is None:
            self._width = self.cell_len
        return self._width

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterable[Segment]:
        justify = self.justify or options.justify
        if (
            "\n" in self.plain
            or "\t" in self.plain
            or self.cell_width > options.max_width
            or justify not in (None, "default", "right")
            or (justify == "right" and self.plain.endswith(" "))
        ):
            yield from super().__rich_console__(console, options)
            return
        # what Text.__rich_console__ makes of a line that fits: padded on the left when right-justified, then joined
        # into a new Text in which its own style becomes a span under its spans
        line: Text = self
        pad = options.max_width - self.cell_width if justify == "right" else 0
        if pad:
            line = self.copy()
            line.pad_left(pad)
        if line.style:
            line = Text(line.plain, spans=[Span(0, len(line), line.style), *line.spans])
        yield from line.render(console, end=self.end)


def flow(items: Iterable[Text], width: int, separator: str = "  ") -> Text:
    """``items`` on as few lines as ``width`` cells allow, each whole on one line (a label's own wrapping splits
    ``156.466 ms`` or ``■ gemm`` at its space); an item wider than ``width`` has a line of its own. ``width`` 0:
    one line."""
    text = Text()
    used = 0
    for item in items:
        if used and width and used + len(separator) + item.cell_len > width:
            text.append("\n")
            used = 0
        elif used:
            text.append(separator)
            used += len(separator)
        text.append_text(item)
        used += item.cell_len
    return text
