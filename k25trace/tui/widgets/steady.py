"""Labels, strips and the footer: refilled on every key press without laying the whole screen out again."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.visual import Visual, VisualType, visualize
from textual.widgets import Footer, Label, Static
from textual.widgets._footer import FooterKey


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

    keep_height = False
    """Whether the widget keeps the tallest height its content has had (it does not shrink for shorter content):
    set per widget (``widget.keep_height = True``) where contents of varying height follow each other, as on every
    step move, so that the screen is not laid out again, nor the widgets below moved, each time the height
    changes."""

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
        lines = visual.get_height(self.styles, width)  # type: ignore[arg-type]  # as Textual passes them
        if not self.keep_height:
            return lines != height
        if lines > height:
            self.styles.min_height = lines  # from now on (this widget has no padding or border)
            return True
        return False


class SteadyLabel(SteadyStatic, Label):
    """A :class:`~textual.widgets.Label` (styled as one) that is as wide as its container and updates as a
    :class:`SteadyStatic`."""

    DEFAULT_CSS = """
    SteadyLabel { width: 1fr; height: auto; }
    """


class SteadyFooter(Footer):
    """Textual's Footer, built again only when the keys it shows change, each key styled once.

    Textual's Footer builds all its keys again on every change of the screen's bindings (focus moves, a screen
    mounts: four or five times before the overview's first paint), and each new key restyles itself twice (its
    ``compact`` starts True and is bound to the footer's False). Together that was 20–40 ms of the first paint.
    What is shown is the same.
    """

    _shown_keys: tuple | None = None
    """The keys the footer was last built with (None before it was built with any)."""

    def _keys_to_show(self) -> tuple:
        """What the footer would show now: each shown binding with its state, and whether the palette key shows."""
        shown = tuple(
            (binding.key, binding.description, binding.action, binding.group, enabled, tooltip)
            for (_, binding, enabled, tooltip) in self.screen.active_bindings.values()
            if binding.show
        )
        return (*shown, self.show_command_palette)

    def compose(self) -> ComposeResult:
        self._shown_keys = self._keys_to_show() if self._bindings_ready else None
        for widget in super().compose():
            if isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):  # the palette key: unbound
                widget.set_reactive(FooterKey.compact, self.compact)  # as its data binding will set it
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        self._bindings_ready = True
        if screen.app.app_focus and self.is_attached and screen is self.screen:
            self.call_after_refresh(self._recompose_if_changed)

    async def _recompose_if_changed(self) -> None:
        """Build the keys again if the bindings to show are not those shown."""
        if self.is_attached and self._keys_to_show() != self._shown_keys:
            await self.recompose()
