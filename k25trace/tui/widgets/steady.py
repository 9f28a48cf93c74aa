"""Labels and strips that a screen refills on every key press without laying the whole screen out again."""

from __future__ import annotations

from typing import Any

from textual.visual import Visual, VisualType, visualize
from textual.widgets import Label, Static


class SteadyStatic(Static):
    """A Static as wide as its container whose :meth:`update` asks Textual for a layout only when the new content
    is taller or shorter than the old.

    A Static's ``update()`` lays the screen out again by default. A layout repaints every widget whose size or
    scroll state it touches, scroll bars included: on the step screen that was most of the drawing of a step
    move, for labels whose size had not changed. Content equal to what is shown is not drawn again at all.
    """

    DEFAULT_CSS = """
    SteadyStatic { width: 1fr; height: auto; }
    """

    _shown: Any = None
    """The content last given to :meth:`update` (None before the first)."""

    def update(self, content: VisualType = "", *, layout: bool | None = None) -> None:
        """Show ``content``; ``layout``: None (the default) lays the screen out only when the height changes."""
        if layout is not None:
            self._shown = content
            super().update(content, layout=layout)
            return
        if self._shown is not None and content == self._shown:
            return
        self._shown = content
        visual = visualize(self, content, markup=self._render_markup)  # once: Static.update takes a Visual as is
        super().update(visual, layout=self._height_changes(visual))

    def _height_changes(self, visual: Visual) -> bool:
        """Whether ``visual`` takes another number of lines than the widget has now, at its current width (True
        before the widget has a size)."""
        width, height = self.content_size
        if not width or not height:
            return True
        return visual.get_height(self.styles, width) != height  # type: ignore[arg-type]  # as Textual passes them


class SteadyLabel(SteadyStatic, Label):
    """A :class:`~textual.widgets.Label` (styled as one) that is as wide as its container and updates as a
    :class:`SteadyStatic`."""

    DEFAULT_CSS = """
    SteadyLabel { width: 1fr; height: auto; }
    """
