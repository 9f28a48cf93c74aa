"""Table cells: values as Rich Text so kernel names with ``[`` stay literal and floats keep their precision."""

from __future__ import annotations

from rich.text import Text


def cell(value: object) -> object:
    """A DataTable cell for a query value: NULL → blank, numbers right-aligned, strings never parsed as markup."""
    if value is None:
        return Text("")
    if isinstance(value, Text):
        return value
    if isinstance(value, bool):
        return Text("yes" if value else "no")
    if isinstance(value, float):
        return Text(f"{value:,.3f}", justify="right")
    if isinstance(value, int):
        return Text(str(value), justify="right")
    return Text(str(value))
