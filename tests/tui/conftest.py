"""Fixtures and helpers for the TUI tests: small real-trace databases built once, and one way to wait for the app.

Paths are relative to this file (``tests/data``); databases are loaded through :func:`k25trace.pipeline.load_paths`.
"""

from __future__ import annotations

import asyncio
import difflib
import html
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.message import Message
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import DataTable, Label, Static
from textual.worker import Worker, WorkerCancelled, WorkerFailed, WorkerState

from k25trace import pipeline
from k25trace.tui.widgets import LineTable

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
TRACES = DATA / "traces"
SAMPLES = [
    REPO / "k25trace" / "samples" / name
    for name in (
        "sglang-mi300x-decode/sglang_Qwen3-8B_decode.json.gz",
        "vllm-b200-tp8-rank0-eager/eager_trace.json.gz",
        "vllm-mi300x-decode-fullgraph/graph_execution.json.gz",
        "vllm-mi300x-prefilldecode-piecewise/graph_execution.json.gz",
    )
]
"""The four real-GPU samples the package ships, traces 1–4 of :func:`trace_db` in this order (the tests count their
rows; the overview lists runs by path, so these come before the two-rank run of ``tests/data``)."""
KIMI = REPO / "k25trace" / "samples" / "kimi-k25-synthetic-tp2"
"""The synthetic Kimi-K2.5 TP2 pair bundled for the demo."""
TWO_RANK = [
    TRACES / "hta-2rank-sendrecv" / "sampled_rank-0.json.gz",
    TRACES / "hta-2rank-sendrecv" / "sampled_rank-1.json.gz",
]
SIZE = (150, 48)
"""Terminal size of every Pilot test and snapshot."""


def load_database(path: Path, paths: list[Path], *, files: int | None = None) -> Path:
    """A new database at ``path`` with every trace under ``paths`` loaded; checks that each file (``files`` of
    them, when given) was loaded."""
    con = pipeline.connect(path)
    try:
        results, _ = pipeline.load_paths(con, paths)
    finally:
        con.close()
    assert [r.status for r in results] == ["loaded"] * (len(results) if files is None else files), [
        (r.path, r.status, r.message) for r in results
    ]
    return path


@pytest.fixture(scope="session")
def trace_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database of the four samples (traces 1–4, one step each) and hta-2rank-sendrecv (traces 5, 6)."""
    return load_database(tmp_path_factory.mktemp("tui") / "k25trace-test.duckdb", [*SAMPLES, *TWO_RANK])


@pytest.fixture(scope="session")
def empty_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database with the schema and no traces."""
    path = tmp_path_factory.mktemp("tui-empty") / "empty.duckdb"
    pipeline.connect(path).close()
    return path


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs and the editor do not blink, so snapshots are the same every run."""
    from textual.widgets import Input, TextArea

    monkeypatch.setattr(Input, "cursor_blink", False, raising=False)
    monkeypatch.setattr(TextArea, "cursor_blink", False, raising=False)


SVG_TEXT = re.compile(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>')


def svg_lines(svg: str) -> list[str]:
    """The text of a Textual SVG screenshot, one string per terminal row (styles dropped)."""
    rows: dict[float, list[tuple[float, str]]] = {}
    for match in SVG_TEXT.finditer(svg):
        rows.setdefault(float(match[2]), []).append((float(match[1]), html.unescape(match[3])))
    return ["".join(text for _, text in sorted(row)).replace("\xa0", " ").rstrip() for _, row in sorted(rows.items())]


@pytest.fixture
def snap_compare(snap_compare, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN001, ANN201
    """The plugin's ``snap_compare``, which on a mismatch also prints the rows whose text differs, so that a failure
    on CI (where the HTML report is out of reach) says what changed; a difference in colour alone prints no rows."""
    import textual._doc

    screenshots: list[str] = []
    take = textual._doc.take_svg_screenshot

    def take_and_keep(*args: Any, **kwargs: Any) -> str:
        screenshots.append(take(*args, **kwargs))
        return screenshots[-1]

    monkeypatch.setattr(textual._doc, "take_svg_screenshot", take_and_keep)
    node = request.node
    name = ".".join(part for part in (getattr(node.cls, "__name__", None), node.originalname) if part)
    expected_path = Path(node.path).parent / "__snapshots__" / Path(node.path).stem / f"{name}.svg"

    def compare(*args: Any, **kwargs: Any) -> bool:
        matched = snap_compare(*args, **kwargs)
        if not matched and screenshots and expected_path.exists():
            expected = svg_lines(expected_path.read_text())
            diff = difflib.unified_diff(expected, svg_lines(screenshots[-1]), "expected", "actual", lineterm="", n=1)
            print(f"text rows that differ from {expected_path.name} (none: colours only):", *diff, sep="\n")
        return matched

    return compare


# ------------------------------------------------------------------------------------------- waiting for the app


def busy_workers(pilot: Pilot) -> list[Worker[Any]]:
    return [w for w in pilot.app.workers if w.state in (WorkerState.PENDING, WorkerState.RUNNING)]


def queued_messages(pilot: Pilot) -> int:
    """Messages waiting in the app's, the screens' and the active screen's widgets' queues (a worker's result posted
    but not handled yet)."""
    app = pilot.app
    widgets = app.screen.walk_children(Widget)
    return sum(pump.message_queue_size for pump in (app, *app.screen_stack, *widgets))


async def wait_for_workers(pilot: Pilot) -> None:
    """Wait until every worker has finished and the messages it posted are handled, including workers that those
    handlers start (the overview's second part, the step screen's read-ahead, which starts after a refresh): done
    when a whole pause starts none and leaves no message queued.

    Textual's own pause waits for the process to look idle by its CPU time, which a busy machine fools (the process
    waits for a core, not for work); so the queues are checked, not only paused on."""
    while True:
        for worker in busy_workers(pilot):
            try:
                await worker.wait()
            except (WorkerCancelled, WorkerFailed):  # superseded, or failed: the app shows the error
                pass
        await pilot.pause()
        if busy_workers(pilot) or queued_messages(pilot):
            continue
        await pilot.pause()
        if not busy_workers(pilot) and not queued_messages(pilot):
            return


async def wait_until(condition: Callable[[], object], *, timeout: float = 30.0) -> None:
    """Poll ``condition`` between turns of the event loop until it holds (fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
        await asyncio.sleep(0.005)


async def navigate(pilot: Pilot, message: Message) -> None:
    """Post a navigation message to the app (as a screen would) and wait for the new screen's data."""
    pilot.app.post_message(message)
    await pilot.pause()
    await wait_for_workers(pilot)


class Posted:
    """A Textual message hook (``app.run_test(message_hook=...)``) that keeps the messages of the given types, once
    each (a bubbling message reaches several receivers)."""

    def __init__(self, *kinds: type[Message]) -> None:
        self.kinds = kinds
        self.messages: list[Message] = []

    def __call__(self, message: Message) -> None:
        if isinstance(message, self.kinds) and not any(m is message for m in self.messages):
            self.messages.append(message)


# ---------------------------------------------------------------------------------------------- reading widgets


def text_of(app: Any, selector: str) -> str:
    widget = app.screen.query_one(selector)
    assert isinstance(widget, (Label, Static))
    return str(widget.render())


def table(app: Any, selector: str) -> DataTable:
    return app.screen.query_one(selector, DataTable)


def lines_of(app: Any, selector: str) -> LineTable:
    """The step screen's tables of pre-drawn lines (#kernels, #categories)."""
    return app.screen.query_one(selector, LineTable)


def rows_of(app: Any, selector: str) -> list[dict[str, str]]:
    """A table's rows as {column label: cell text}."""
    t = table(app, selector)
    columns = [str(c.label) for c in t.columns.values()]
    return [
        dict(zip(columns, (str(getattr(v, "plain", v)) for v in t.get_row_at(i)), strict=True))
        for i in range(t.row_count)
    ]


def count_layouts(monkeypatch: pytest.MonkeyPatch, kind: type[Widget]) -> list[str | None]:
    """From now on, the id of each widget of ``kind`` that asks Textual for a layout, once per request (the list
    returned grows as they come)."""
    layouts: list[str | None] = []
    refresh = Widget.refresh

    def counting(self: Widget, *regions: Any, layout: bool = False, **kwargs: Any) -> Any:
        if layout and isinstance(self, kind):
            layouts.append(self.id)
        return refresh(self, *regions, layout=layout, **kwargs)

    monkeypatch.setattr(Widget, "refresh", counting)
    return layouts
