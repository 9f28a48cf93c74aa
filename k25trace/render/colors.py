"""Category colours: mid-tone hues that read on dark and on light terminals; idle is drawn as a dim dot."""

from __future__ import annotations

CATEGORY_COLORS: dict[str, str] = {
    "allreduce": "#d64545",
    "all2all": "#b5482a",
    "comm_other": "#e08a2e",
    "marlin_gemm": "#2e6fd1",
    "quant_gemm": "#4f9ce0",
    "gemm": "#6a5acd",
    "moe_routing": "#9b59b6",
    "attention": "#2e9e5b",
    "norm": "#c9a227",
    "rotary": "#17a2b8",
    "activation": "#7cb342",
    "quantize": "#5c8a8a",
    "embedding": "#8d6e63",
    "elementwise": "#a1887f",
    "sampling": "#e056a0",
    "memcpy": "#78909c",
    "memset": "#90a4ae",
    "other": "#9e9e9e",
    "overlap": "#b07cc6",
}
"""Colour of each category (``idle`` has none: it is drawn as ``·``)."""

FALLBACK_COLOR = "#bdbdbd"


def category_color(category: str | None) -> str:
    """The colour a category is drawn in (unknown categories get a neutral grey)."""
    return CATEGORY_COLORS.get(category or "other", FALLBACK_COLOR)
