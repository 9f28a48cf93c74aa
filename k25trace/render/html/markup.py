"""The page's building blocks: escaping, numbers, class tokens, the palette, an SVG canvas, the one bar-chart frame,
figures, tables and legends."""

from __future__ import annotations

import hashlib
import html as _html
import math
import re
from dataclasses import dataclass
from typing import Any

from k25trace.render.colors import CATEGORY_COLORS

CATEGORY_ORDER = [c for c in CATEGORY_COLORS if c != "overlap"]
"""Categories in drawing order (the TUI's palette order); then ``overlap`` and ``idle`` close every bar."""

IDLE_COLOR = "#dcdcdc"
IDLE_CAUSE_COLORS = {  # pale tints: idle is the absence of work, drawn lighter than any category
    "host": "#f0a8a8",
    "sync": "#f6cf8e",
    "launch": "#c9b6ee",
    "device": "#a9cdee",
    "unknown": "#e3e3e3",
    "busy": "#b8b8b8",  # GPU work of no step, between steps
}
IDLE_CAUSE_LABELS = {
    "host": "host-bound",
    "sync": "after a host sync",
    "launch": "launch overhead",
    "device": "device-bound",
    "unknown": "unknown",
    "busy": "GPU work of no step",
}
RUN_COLORS = ["#1f2937", "#0f766e", "#7c3aed", "#b45309", "#be185d", "#0369a1"]
OUTLIER_COLOR = "#c0392b"
VERDICT_COLORS = {
    "slower": "#c0392b",
    "faster": "#1e8449",
    "only in A": "#7f8c8d",
    "only in B": "#7f8c8d",
    "negligible": "#8c959f",
    "within noise": "#8c959f",
}

KNOWN_CLASSES = frozenset([*CATEGORY_COLORS, "idle", *(f"idle:{k}" for k in IDLE_CAUSE_COLORS)])
"""Categories and idle causes whose class name is their own name (``attention`` → ``c-attention``)."""


def esc(value: Any) -> str:
    """Text or an attribute value with ``&<>"'`` escaped (``None`` is empty)."""
    return _html.escape("" if value is None else str(value), quote=True)


def num(value: float | None, digits: int | None = None) -> str:
    """A number for text: ms with precision by size (1.234, 12.34, 123.4)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if digits is None:
        a = abs(value)
        digits = 3 if a < 10 else 2 if a < 100 else 1
    return f"{value:,.{digits}f}"


def attr(value: Any) -> str:
    """A value for a data-* attribute, exactly as the report's JSON has it (floats by repr)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return esc(value)


def css_class(category: str | None) -> str:
    """A safe CSS class token for a category or an idle cause: ``c-attention``, ``idle:host`` → ``c-idle-host``.

    Only the built-in categories keep their name; any other category (a user's rules, a database someone sent)
    gets ``c-u-<its letters and digits, at most 24>-<8 hex digits of its SHA-256>``: one token of ``[a-z0-9-]``,
    the same on every chart of every page, distinct for distinct names. The raw name never reaches a ``class``.
    The sections call it as ``markup.css_class`` (looked up when drawing: a test swaps it for the old one)."""
    name = category or "other"
    if name in KNOWN_CLASSES:
        return "c-" + name.replace(":", "-").replace("_", "-")
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24].strip("-")
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"c-u-{slug + '-' if slug else ''}{digest}"


def nice_ticks(vmax: float, n: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``vmax`` (about ``n`` of them)."""
    if vmax <= 0 or not math.isfinite(vmax):
        return [0.0, 1.0]
    raw = vmax / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    count = math.ceil(vmax / step - 1e-9)
    return [round(i * step, 10) for i in range(count + 1)]


def range_ticks(lo: float, hi: float, n: int = 4) -> list[float]:
    """Round tick values within ``lo`` … ``hi`` (about ``n`` of them; just ``lo`` for an empty range)."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    first = math.ceil(lo / step) * step
    out = []
    t = first
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def tick_label(v: float, ticks: list[float] | None = None) -> str:
    """A tick value with as many decimals as the tick step needs (280.5, 281, 281.5, not 280, 281, 282)."""
    step = abs(ticks[1] - ticks[0]) if ticks and len(ticks) > 1 else abs(v) or 1.0
    decimals = next((d for d in range(7) if abs(round(step, d) - step) < 1e-9 * max(1.0, step)), 6)
    return f"{v:,.{decimals}f}"


def batch_label(batch: int | None) -> str:
    """``bs=8``, or ``bs=?`` for steps of no known batch size."""
    return "bs=?" if batch is None else f"bs={batch}"


def plural(n: int, word: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def shorten(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, the last an ellipsis when cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


def coord(value: float) -> str:
    """A coordinate, short: 212, 212.5, 212.33."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def slice_label(category: str) -> str:
    """A timeline slice's words: its category, or ``idle: <why>``."""
    if category == "idle":
        return "idle"
    if category.startswith("idle:"):
        return "idle: " + IDLE_CAUSE_LABELS.get(category[5:], category[5:])
    return category


def legend_order(categories: list[str]) -> list[str]:
    """Categories in drawing order: the palette's, any others by name, then idle and its causes."""
    cats = [c for c in CATEGORY_ORDER if c in categories]
    cats += sorted(c for c in categories if c not in CATEGORY_ORDER and not c.startswith("idle"))
    cats += [c for c in ["idle"] + [f"idle:{k}" for k in IDLE_CAUSE_COLORS] if c in categories]
    return cats


class Svg:
    """A small SVG canvas: parts are appended as markup."""

    def __init__(self, width: float, height: float, label: str, cls: str = "") -> None:
        self.width, self.height, self.label, self.cls = width, height, label, cls
        self.parts: list[str] = []

    def add(self, markup: str) -> None:
        """Append ready markup."""
        self.parts.append(markup)

    def text(self, x: float, y: float, content: str, anchor: str = "start", cls: str = "", extra: str = "") -> None:
        """Append a ``<text>`` of ``content`` (escaped here)."""
        c = f' class="{cls}"' if cls else ""
        a = "" if anchor == "start" else f' text-anchor="{anchor}"'
        self.add(f'<text x="{x:.1f}" y="{y:.1f}"{a}{c}{extra}>{esc(content)}</text>')

    def x_axis(self, x0: float, x1: float, y: float, top: float, ticks: list[float], scale: float, unit: str) -> None:
        """Vertical grid lines from ``top`` to ``y``, tick labels under ``y`` and the unit centred below them."""
        self.add(
            '<g class="grid">'
            + "".join(
                f'<line x1="{x0 + t * scale:.1f}" x2="{x0 + t * scale:.1f}" y1="{top:.1f}" y2="{y:.1f}"/>'
                for t in ticks
            )
            + "</g>"
        )
        self.add(f'<g class="axis"><line x1="{x0:.1f}" x2="{x1:.1f}" y1="{y:.1f}" y2="{y:.1f}"/></g>')
        for t in ticks:
            self.text(x0 + t * scale, y + 13, tick_label(t, ticks), "middle", "tick")
        self.text((x0 + x1) / 2, y + 28, unit, "middle", "unit")

    def render(self) -> str:
        """The ``<svg>`` element."""
        c = f' class="{self.cls}"' if self.cls else ""
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width:.0f}" height="{self.height:.0f}" '
            f'viewBox="0 0 {self.width:.0f} {self.height:.0f}" role="img" aria-label="{esc(self.label)}"{c}>'
            + "".join(self.parts)
            + "</svg>"
        )


@dataclass
class BarFrame:
    """A horizontal bar chart: its canvas, labels left of ``x0``, bars from ``x0`` at ``scale`` px per ms, notes
    right of ``x1``, rows from ``top`` down to the axis at ``axis_y``."""

    svg: Svg
    x0: int
    x1: int
    top: int
    axis_y: int
    ticks: list[float]
    scale: float

    def axis(self, unit: str) -> None:
        """The x axis under the rows, its grid lines up to just above them and ``unit`` under it."""
        self.svg.x_axis(self.x0, self.x1, self.axis_y, self.top - 4, self.ticks, self.scale, unit)


def bar_frame(
    label: str, cls: str, *, vmax: float, rows_height: int, label_w: int, note_w: int, top: int = 10, width: int = 1100
) -> BarFrame:
    """The frame of every bar chart of the pages: ``rows_height`` px of rows and a 0 … ``vmax`` ms scale."""
    x0, x1 = label_w, width - note_w
    ticks = nice_ticks(vmax)
    scale = (x1 - x0) / ticks[-1]
    svg = Svg(width, top + rows_height + 36, label, cls)
    return BarFrame(svg=svg, x0=x0, x1=x1, top=top, axis_y=top + rows_height, ticks=ticks, scale=scale)


def legend(items: list[tuple[str, str]]) -> str:
    """An HTML legend: (css class, label) pairs; entries of categories highlight them across the page."""
    lis = "".join(
        f'<li data-legend="{esc(cls)}"><span class="sw {esc(cls)}"></span>{esc(label)}</li>' for cls, label in items
    )
    return f'<ul class="legend">{lis}</ul>'


def figure(title: str, caption: str, body: str, cls: str = "chart") -> str:
    """A ``<figure>``: its title (escaped), its caption (markup) and its body."""
    return f'<figure class="{cls}"><figcaption><h3>{esc(title)}</h3><p>{caption}</p></figcaption>{body}</figure>'


def table(headers: list[tuple[str, str]], rows: list[list[str]], cls: str = "") -> str:
    """headers: (label, 'l' | 'r'); rows of ready cell markup (``<td>`` added here, aligned like the header)."""
    head = "".join(f'<th class="{a}">{esc(h)}</th>' for h, a in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="{a}">{cell}</td>' for cell, (_, a) in zip(row, headers, strict=True)) + "</tr>"
        for row in rows
    )
    c = f' class="{cls}"' if cls else ""
    return f'<div class="scroll"><table{c}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
