"""SteadyLabel: the step screen's labels, refilled on every step move, lay the screen out only when their height
changes, and always show what they were given (read back from the screen's own rendering)."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.containers import Vertical

from k25trace.tui.widgets import SteadyFooter, SteadyLabel

from .conftest import count_layouts

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
    app = LabelsApp()
    async with app.run_test(size=(60, 10)) as pilot:
        layouts = count_layouts(monkeypatch, SteadyLabel)
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


async def test_a_label_that_keeps_its_height_grows_but_never_shrinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With keep_height (the step screen's timeline, category bar and ranks line) a taller content lays the screen
    out once; shorter ones after it are painted in place, blank lines below them, the label below staying put."""
    app = LabelsApp()
    async with app.run_test(size=(60, 10)) as pilot:
        layouts = count_layouts(monkeypatch, SteadyLabel)
        top = app.query_one("#top", SteadyLabel)
        top.keep_height = True
        top.update("a label that wraps onto a second line here")
        await pilot.pause()
        assert layouts and set(layouts) == {"top"} and top.size.height == 2
        layouts.clear()
        for text in ("short", "[b]also short[/b]", "a label that wraps onto a second line too"):
            top.update(text)
            await pilot.pause()
            assert layouts == [] and top.size.height == 2, text
        assert shown(app)[:3] == ["a label that wraps onto a", "second line too", "below"]
        top.update("one")
        await pilot.pause()
        assert layouts == [] and shown(app)[:3] == ["one", "", "below"]
        top.update("three lines: a label that wraps onto a second line and a third one")
        await pilot.pause()
        assert layouts and set(layouts) == {"top"} and top.size.height == 3


class FooterApp(App[None]):
    """Two buttons over a footer: focus moves between them without changing the keys shown; x adds a key."""

    BINDINGS = [("q", "quit", "Quit"), ("x", "add_key", "Add")]
    FOOTER: type = SteadyFooter

    def compose(self) -> ComposeResult:
        from textual.widgets import Button

        yield Button("one")
        yield Button("two")
        yield self.FOOTER()

    def action_add_key(self) -> None:
        self.bind("y", "bell", description="Ring")
        self.refresh_bindings()


async def test_the_footer_is_built_again_only_when_its_keys_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """It draws what Textual's Footer draws (the bottom line compared), and is built again only when the keys
    to show change: not when focus moves between widgets that bring no keys of their own."""
    from textual.widgets import Footer

    builds: list[str] = []
    compose = SteadyFooter.compose

    def counting(self: SteadyFooter) -> ComposeResult:
        builds.append("build")
        return compose(self)

    monkeypatch.setattr(SteadyFooter, "compose", counting)

    async def session(footer: type, keys: list[str]) -> tuple[str, int]:
        """The bottom line after ``keys``, and the builds of the footer while they were pressed."""
        app = FooterApp()
        app.FOOTER = footer
        async with app.run_test(size=(60, 8)) as pilot:
            await pilot.pause()
            before = len(builds)
            for key in keys:
                await pilot.press(key)
                await pilot.pause()
            return app.screen._compositor.render_strips()[-1].text, len(builds) - before

    for keys in (["tab"], ["tab", "tab", "tab"], ["tab", "x", "tab"]):
        steady, steady_builds = await session(SteadyFooter, keys)
        textual, _ = await session(Footer, keys)
        assert steady == textual, keys
        assert "Quit" in steady and ("Ring" in steady) == ("x" in keys)
        assert steady_builds == keys.count("x"), (keys, steady_builds)
