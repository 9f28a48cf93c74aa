"""SQL: run ad-hoc SQL on the (read-only) database, with the schema and the named queries at hand."""

from __future__ import annotations

from typing import ClassVar

import duckdb
import polars as pl
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import DataTable, Header, Input, Label, TextArea, Tree

from k25trace import db
from k25trace.analysis import browse
from k25trace.errors import K25Error
from k25trace.tui.messages import SchemaLoaded, SqlLoaded
from k25trace.tui.screens.base import BrowseScreen
from k25trace.tui.widgets import SteadyFooter, fill_table

CELL_CHARS = 1000  # longer text (a 20 MB kernel name) is cut: a DataTable measures every cell it holds
DEFAULT_SQL = (
    "select category, count(*) as calls, round(sum(dur_ns) / 1e6, 3) as ms\nfrom kernels\ngroup by all\n"
    "order by ms desc"
)


class SqlScreen(BrowseScreen):
    """Editor, parameters, results; the left column lists the named queries and the schema."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "run_sql", "Run", priority=True),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="sql-screen"):
            with Vertical(id="sql-side"):
                yield Label("[b]Named queries[/b] (Enter: load)")
                yield DataTable(id="named-queries", cursor_type="row")
                yield Label("[b]Schema[/b]")
                yield Tree("database", id="schema")
            with Vertical(id="sql-main"):
                yield TextArea(DEFAULT_SQL, id="editor", language=None, show_line_numbers=True)
                yield Input(placeholder="parameters: name=value … (for $name in the SQL; null for NULL)", id="params")
                yield Label("ctrl+r: run   ctrl+g: cancel a running query", id="status")
                yield DataTable(id="results", zebra_stripes=True)
        yield SteadyFooter()

    def on_mount(self) -> None:
        catalog = browse.query_catalog()
        fill_table(self.query_one("#named-queries", DataTable), catalog.select("name", "params"), key_column="name")
        self.fetch(SchemaLoaded, browse.schema_columns)
        self.query_one("#editor", TextArea).focus()

    @on(SchemaLoaded)
    def show_schema(self, message: SchemaLoaded) -> None:
        tree = self.query_one("#schema", Tree)
        tree.clear()
        tree.root.expand()
        for (table_name,), columns in message.result.group_by(["table_name"], maintain_order=True):
            node = tree.root.add(escape(str(table_name)))
            for row in columns.iter_rows(named=True):
                node.add_leaf(f"{escape(str(row['column_name']))} [dim]{escape(str(row['data_type']))}[/dim]")

    @on(SqlLoaded)
    def show_rows(self, message: SqlLoaded) -> None:
        result = message.result
        table = self.query_one("#results", DataTable)
        fill_table(table, result.frame)
        rows = result.frame.height
        self.set_status(
            f"{rows}{'+' if result.truncated else ''} row(s) in {message.elapsed_ms:.0f} ms"
            + (f" — showing the first {rows}" if result.truncated else "")
        )

    @on(DataTable.RowSelected, "#named-queries")
    def load_named_query(self, event: DataTable.RowSelected) -> None:
        """Put a named query's SQL in the editor and its parameters, with sample values, in the params line."""
        name = str(event.row_key.value)
        self.query_one("#editor", TextArea).text = browse.named_query_text(name)
        query_params = [
            p.strip().lstrip("$") for p in browse.query_catalog().filter(name=name)["params"][0].split(",") if p.strip()
        ]
        defaults = {"phase": "decode", "top": "20", "limit": "100", "pattern": "gemm"}
        self.query_one("#params", Input).value = " ".join(f"{p}={defaults.get(p, 'null')}" for p in query_params)
        self.set_status(f"loaded [b]{name}[/b] — ctrl+r to run")

    def action_run_sql(self) -> None:
        sql = self.query_one("#editor", TextArea).text
        try:
            params = browse.parse_params(self.query_one("#params", Input).value)
        except K25Error as exc:
            self.set_status(str(exc), error=True)
            return
        self.set_status("running… (ctrl+g: cancel)")
        self.run_sql(sql, params)

    def run_sql(self, sql: str, params: dict[str, object]) -> None:
        """Run the editor's SQL in a worker (group ``sql``) on a cursor of its own; ctrl+g interrupts it. Whatever goes
        wrong ends in the status line (never "running…" for ever): a DuckDB error, SQL with no statement, a value
        that cannot be shown. No file can be read or written (see :func:`k25trace.db.forbid_external_access`)."""
        self.fetch(SqlLoaded, lambda cursor: user_rows(cursor, sql, params), group="sql", explain=explain_failure)


def user_rows(cursor: duckdb.DuckDBPyConnection, sql: str, params: dict[str, object]) -> db.SqlResult:
    """The rows to show (at most SQL_ROW_CAP, cells cut at CELL_CHARS), every DuckDB type as text if need be: the one
    ad-hoc SQL path, :func:`k25trace.db.run_sql`; SQL whose last statement returns nothing shows no rows."""
    result = db.run_sql(cursor, sql, params, cap=browse.SQL_ROW_CAP, max_chars=CELL_CHARS)
    return result if result is not None else db.SqlResult(pl.DataFrame(), False, frozenset())


def explain_failure(exc: BaseException) -> str:
    """A DuckDB or polars error (its panics are BaseExceptions), or anything else, as one line for the status (with
    the read-only guard's reason when it refused the SQL)."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    hint = db.read_only_hint(exc).strip()
    return lines[0] + (" " + hint if hint and hint not in lines[0] else "")
