"""How a named query's rows reach polars: through Arrow's C stream (no pyarrow import), with the same rows as the
cursor gives, also when the connection holds an unread result of an earlier execute()."""

from __future__ import annotations

import subprocess
import sys

from k25trace import db


def test_query_frame_reads_past_an_unread_result() -> None:
    con = db.connect(None)
    try:
        expected = con.execute(
            "select table_name, column_name, data_type, column_index from duckdb_columns() "
            "where schema_name = 'main' and not internal order by table_name, column_index"
        ).fetchall()
        assert len(expected) > 100  # the public schema's columns
        con.execute("select * from range(100000)")
        assert con.fetchone() == (0,)  # the rest of this result is left unread
        frame = db.query_frame(con, "browse_schema")
        assert frame.rows() == expected
        assert frame.columns == ["table_name", "column_name", "data_type", "column_index"]
    finally:
        con.close()


def test_a_report_query_imports_neither_pyarrow_nor_numpy() -> None:
    code = (
        "import sys\n"
        "from k25trace import db\n"
        "con = db.connect(None)\n"
        "frame = db.query_frame(con, 'browse_schema')\n"
        "assert frame.height > 100, frame\n"
        "print(sorted(m for m in ('pyarrow', 'numpy', 'pandas') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
