"""Stacked horizontal bars and a timeline strip in category colours, drawn as Rich text."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from rich.text import Text

from k25trace.render.colors import category_color
from k25trace.tui.cells import LineText, flow
from k25trace.tui.widgets.steady import SteadyStatic

BLOCK = "█"
IDLE = "·"
IDLE_CAUSES = {  # timeline glyphs for idle slices by cause (queries/gaps_build.sql)
    "idle:host": ("h", "host-bound"),
    "idle:sync": ("s", "after a host sync"),
    "idle:launch": ("l", "launch overhead"),
    "idle:device": ("d", "device-bound"),
    "idle:unknown": (IDLE, "idle"),
}


def category_text(category: str) -> Text:
    """A category name in its colour, for table cells and legends."""
    if category == "idle":
        return LineText(category, style="dim")
    return LineText(category, style=f"bold {category_color(category)}")


def stacked_bar(shares: Sequence[tuple[str, float]], width: int) -> Text:
    """One bar ``width`` cells long split by (category, percent) shares; rounding goes to the largest share."""
    cells = [(category, max(0.0, share or 0.0) * width / 100.0) for category, share in shares]
    counts = [int(round(c)) for _, c in cells]
    if counts and sum(counts) != width and sum(c for _, c in cells) > 0:
        largest = max(range(len(cells)), key=lambda i: cells[i][1])
        counts[largest] = max(0, counts[largest] + width - sum(counts))
    bar = Text()
    for (category, _), count in zip(cells, counts, strict=True):
        if count <= 0:
            continue
        if category == "idle":
            bar.append(IDLE * count, style="dim")
        else:
            bar.append(BLOCK * count, style=category_color(category))
    return bar


def legend(categories: Sequence[str], width: int = 0) -> Text:
    """``■ gemm  ■ attention …`` for the categories given, on lines of ``width`` cells at most (0: one line), no
    item cut in two."""
    items = []
    for category in categories:
        if category == "idle":
            items.append(Text(IDLE + " idle", style="dim"))
        elif category in IDLE_CAUSES:
            glyph, meaning = IDLE_CAUSES[category]
            items.append(Text(f"{glyph} {meaning}", style="dim"))
        else:
            item = Text("■ ", style=category_color(category))
            item.append(category)
            items.append(item)
    return flow(items, width)


class CategoryBars(SteadyStatic):
    """Labelled stacked bars, one per row: ``label  ███▒▒··  NN ms``, and a legend under them."""

    DEFAULT_CSS = """
    CategoryBars { height: auto; }
    """

    def show_bars(
        self,
        rows: Sequence[tuple[str, Sequence[tuple[str, float]], str]],
        *,
        width: int = 60,
        empty_message: str = "nothing to draw",
    ) -> None:
        """Draw ``(label, [(category, percent), …], note)`` rows; ``empty_message`` when there are none. The bars
        are ``width`` cells long at most, shorter when label, bar and note would not fit on one line."""
        if not rows:
            self.update(Text(empty_message, style="italic"))
            return
        label_width = max(len(label) for label, _, _ in rows)
        room = self.content_region.width or (self.app.size.width - 4 if self.is_attached else 0)
        if room:  # one line per bar: the bar gives way to the label and the note (a scrollbar may take 2 cells)
            width = max(10, min(width, room - 4 - label_width - max(len(note) for _, _, note in rows)))
        text = Text()
        seen: list[str] = []
        for label, shares, note in rows:
            text.append(label.rjust(label_width) + " ", style="bold")
            text.append_text(stacked_bar(shares, width))
            text.append(" " + note + "\n")
            seen.extend(c for c, share in shares if c not in seen and (share or 0) > 0)
        text.append_text(legend(seen, room))
        self.update(text)


class Timeline(SteadyStatic):
    """A one-line strip of a step: each cell is the category that ran longest in that slice of time."""

    DEFAULT_CSS = """
    Timeline { height: auto; }
    """

    def show_slices(self, slices: Sequence[str], *, caption: str = "") -> None:
        """Draw the slices (category names, ``idle`` for gaps) followed by a legend."""
        if not slices:
            self.update(Text("no GPU activity in this step", style="italic"))
            return
        text = Text()
        for category, run in itertools.groupby(slices):  # one span per run of a category: fewer to draw
            count = len(list(run))
            if category == "idle":
                text.append(IDLE * count, style="dim")
            elif category in IDLE_CAUSES:
                text.append(IDLE_CAUSES[category][0] * count, style="dim")
            else:
                text.append(BLOCK * count, style=category_color(category))
        if caption:
            text.append("\n" + caption, style="dim")
        text.append("\n")
        text.append_text(legend(list(dict.fromkeys(slices)), self.content_region.width))
        self.update(text)
