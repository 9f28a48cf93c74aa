"""The step screen's layer strip: one line, one cell per segment of a step (pre, its layers, post), the current one
highlighted, the slow layers flagged; the step screen moves the current segment and shows its kernels."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.text import Text
from textual.strip import Strip
from textual.widget import Widget

from k25trace.tui.cells import LineText
from k25trace.tui.widgets.lines import text_strip

KINDS = {"dense": ("d", "cyan"), "moe": ("m", "magenta"), "other": ("o", "yellow")}
"""A layer's glyph and colour by kind (step_layers.kind)."""

SLOW = ("!", "bold red")
"""The glyph of a slow layer (busy 1.15x or more its kind's median layer in the step: browse_step_layers)."""

EVIDENCE = {"annotation": "from layer annotations", "sequence": "from the kernel sequence"}

KEYS = ",/. move"

LEGEND = "   d dense · m moe · ! slow"


def segment_name(segment: Mapping[str, Any]) -> str:
    """``layer 17``, ``pre`` or ``post``."""
    return "layer " + str(segment["label"]) if segment.get("layer") is not None else str(segment["label"])


def segment_glyph(segment: Mapping[str, Any]) -> tuple[str, str]:
    """The cell of one segment: its glyph and style."""
    if segment.get("layer") is None:
        return str(segment["label"]), "bold"
    if segment.get("slow"):
        return SLOW
    return KINDS.get(str(segment["kind"]), ("?", ""))


def segment_summary(segment: Mapping[str, Any]) -> str:
    """The current segment in a few words: ``layer 5 (moe) 0.623 ms, 1.26x its kind, slow``."""
    text = segment_name(segment) + (f" ({segment['kind']})" if segment.get("layer") is not None else "")
    text += f" {float(segment['wall_ms'] or 0):.3f} ms"
    if segment.get("vs_kind") is not None:
        text += f", {float(segment['vs_kind']):.2f}x its kind" + (", slow" if segment.get("slow") else "")
    return text


def visible_range(count: int, current: int | None, cells: int) -> tuple[int, int]:
    """The segments [start, end) that fit in ``cells`` cells, around the current one."""
    if count <= cells:
        return 0, count
    middle = 0 if current is None else current
    start = max(0, min(count - cells, middle - cells // 2))
    return start, start + cells


def strip_text(segments: Sequence[Mapping[str, Any]], current: int | None, width: int) -> Text:
    """The strip as one line of ``width`` cells at most: ``layers: 24 from the kernel sequence  pre mmm…m post``,
    the current segment (``current``: an index into ``segments``; None: the whole step), the keys and, when there
    is room, the legend; an unsegmented step (one ``step`` row, or none) says ``not segmented: <why>``."""
    line = LineText(no_wrap=True, overflow="ellipsis")
    line.append("layers: ", style="bold")
    if len(segments) < 2:
        reason = segments[0].get("reason") if segments else "no layer segmentation stored (load the trace again)"
        line.append(f"not segmented: {reason or 'unknown'}", style="dim")
        return line
    first = segments[0]
    line.append(f"{first['layers']} {EVIDENCE.get(str(first['evidence']), str(first['evidence']))}  ")
    layers = [s for s in segments if s.get("layer") is not None]
    here = None if current is None else segments[current]
    tail = "   " + (segment_name(here) if here is not None else "whole step") + f"   ({KEYS})"
    room = max(10, width - line.cell_len - len(tail) - len("pre  post ") - 2)
    if len(layers) + len(LEGEND) <= room:
        tail += LEGEND
    index = None if here is None or here.get("layer") is None else layers.index(here)
    start, end = visible_range(len(layers), index, room)
    pre, post = segments[0], segments[-1]
    cells: list[tuple[str, str, bool]] = [(*segment_glyph(pre), pre is here), (" " + ("…" if start else ""), "", False)]
    cells += [(*segment_glyph(layer), layer is here) for layer in layers[start:end]]
    cells += [(("…" if end < len(layers) else "") + " ", "", False), (*segment_glyph(post), post is here)]
    for glyph, style, is_here in cells:
        line.append(glyph, style=(style + " reverse").strip() if is_here else style)
    line.append(tail, style="dim" if here is None else "")
    line.truncate(width, overflow="ellipsis")
    return line


class LayerStrip(Widget):
    """One line: a step's segments, the current one highlighted (:func:`strip_text`)."""

    DEFAULT_CSS = """
    LayerStrip {
        height: 1;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 — Textual's keyword
        super().__init__(id=id)
        self.segments: list[dict[str, Any]] = []
        self.current: int | None = None
        self._drawn: tuple[int, Strip] | None = None
        """The line drawn for the current segments (its width, its strip: the line's own styles only)."""

    def show_segments(self, segments: list[dict[str, Any]], current: int | None) -> None:
        """Show a step's segments (browse_step_layers rows) with ``current`` (an index into them, or None)."""
        self.segments = segments
        self.current = current
        self._drawn = None
        self.refresh()

    def render(self) -> Text:
        """The strip as text (what :meth:`render_line` draws)."""
        return strip_text(self.segments, self.current, self.size.width or 150)

    def render_line(self, y: int) -> Strip:
        """The line, drawn once per segments and width: through Textual's generic path one line of ~60 styled
        cells took a third of a step move's drawing."""
        width = self.size.width
        base = self.rich_style
        if y != 0:
            return Strip.blank(width, base)
        if self._drawn is None or self._drawn[0] != width:
            self._drawn = (width, text_strip(self.app.console, self.render(), width))
        return self._drawn[1].apply_style(base).crop(0, width)
