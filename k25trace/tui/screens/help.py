"""Help: every key of every screen, built from their BINDINGS so the list cannot go stale."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


def key_table(sections: list[tuple[str, list[BindingType]]]) -> Text:
    """One section per screen, one line per binding (key, description); plain Text, since keys include [ and ]."""
    text = Text()
    for title, bindings in sections:
        text.append(title + "\n", style="bold")
        for binding in bindings:
            if not isinstance(binding, Binding):
                continue
            keys = ", ".join(
                k.strip().replace("right_square_bracket", "]").replace("left_square_bracket", "[")
                for k in binding.key.split(",")
            )
            text.append(f"  {keys:<22} ", style="bold")
            text.append(f"{binding.description or binding.action}\n")
        text.append("\n")
    text.append("Mouse\n", style="bold")
    text.append(
        "  click a row to select it, click it again to open it; click a column header in Steps to sort;\n"
        "  click the keys in the footer"
    )
    return text


class HelpScreen(ModalScreen[None]):
    """A modal listing every key; any of escape, q or ? closes it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,question_mark", "app.pop_screen", "Close"),
    ]

    def __init__(self, sections: list[tuple[str, list[BindingType]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Static(
                Text("k25trace tui — keys  (escape closes)\n\n", style="bold") + key_table(self.sections),
                id="help-text",
            )
