"""The TUI's import direction: screens and widgets never import the app or call it to navigate (they post the
messages of k25trace.tui.messages), and no worker result is routed by a string key."""

from __future__ import annotations

import ast
from pathlib import Path

import k25trace.tui

TUI = Path(k25trace.tui.__file__).parent
APP_METHODS = {
    "open_steps",
    "open_step",
    "open_kernel",
    "next_rank_trace",
    "rank_of",
    "ranks",
    "query_cursor",
    "mark_painted",
    "browse_app",
}


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (TUI / folder).glob("*.py"))


def test_screens_and_widgets_do_not_import_the_app() -> None:
    for path in modules("screens", "widgets"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "k25trace.tui.app", f"{path.name} imports the app"
                assert not (node.module == "k25trace.tui" and any(a.name == "app" for a in node.names)), path.name
            elif isinstance(node, ast.Import):
                assert all(a.name != "k25trace.tui.app" for a in node.names), f"{path.name} imports the app"


def test_screens_do_not_call_the_app_to_navigate_or_query() -> None:
    for path in modules("screens", "widgets"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "app":
                assert node.attr not in APP_METHODS, f"{path.name} calls app.{node.attr}"
            if isinstance(node, ast.Attribute):
                assert node.attr != "browse_app", f"{path.name} reaches into the app class"


def test_results_are_routed_by_type() -> None:
    """No handler tells results apart by comparing a message's request with a string."""
    for path in modules("screens"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(isinstance(side, ast.Attribute) and side.attr == "request" for side in sides):
                    assert not any(isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides), (
                        f"{path.name}:{node.lineno} routes a result by a string"
                    )
