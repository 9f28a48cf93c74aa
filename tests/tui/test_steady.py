"""SteadyLabel: the step screen's labels, refilled on every step move, lay the screen out only when their height
changes, and always show what they were given (read back from the screen's own rendering)."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.widget import Widget

from k25trace.tui.widgets import SteadyLabel

pytestmark = pytest.mark.asyncio

WIDTH = 30


class LabelsApp(App[None]):
    CSS = f"Vertical {{ width: {WIDTH}; height: auto; }}"

    def compose(self) -> ComposeResult:
        with Vertical():
            yield SteadyLabel("first", id="top")
            yield SteadyLabel("below", id="below")


def shown(app: App[None]) -> list[str]:
    """The screen's first lines as drawn (the compositor's strips), right spaces cut."""
    return [strip.text.rstrip() for strip in app.screen._compositor.render_strips()[:4]]


async def test_layout_only_when_the_height_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    layouts: list[str | None] = []
    refresh = Widget.refresh

    def counting(self: Widget, *regions: object, layout: bool = False, **kwargs: object) -> object:
        if layout and isinstance(self, SteadyLabel):
            layouts.append(self.id)
        return refresh(self, *regions, layout=layout, **kwargs)  # type: ignore[arg-type]

    app = LabelsApp()
    async with app.run_test(size=(60, 10)) as pilot:
        monkeypatch.setattr(Widget, "refresh", counting)
        top = app.query_one("#top", SteadyLabel)
        assert shown(app)[:2] == ["first", "below"]

        top.update("second, as high")  # one line still: painted in place
        await pilot.pause()
        assert layouts == [] and shown(app)[:2] == ["second, as high", "below"]

        top.update("second, as high")  # the same content: nothing at all
        assert layouts == []

        long = "a label that wraps onto a second line here"  # 42 cells in 30: two lines
        top.update(long)
        await pilot.pause()
        assert layouts and set(layouts) == {"top"} and top.size.height == 2
        assert shown(app)[:3] == ["a label that wraps onto a", "second line here", "below"]

        layouts.clear()
        top.update("[b]short[/b] again")  # back to one line: laid out, the label below moves up
        await pilot.pause()
        assert layouts and set(layouts) == {"top"} and top.size.height == 1
        assert shown(app)[:2] == ["short again", "below"]
