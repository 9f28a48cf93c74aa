"""Typed reads of JSON that may be damaged: each read keeps a well-formed value and names what is not.

The manifest's entries (:mod:`k25trace.capture.manifest`) read themselves through a :class:`Checker`: a field of the
wrong type reads as its default, and the checker records a problem (a JSON path and what was found).
"""

from __future__ import annotations

from typing import Any

INT_MAX = 2**31 - 1  # capture_levels integer columns
BIGINT_MAX = 2**63 - 1
SHA256_DIGITS = frozenset("0123456789abcdef")


def kind(v: object) -> str:
    """What a JSON value is, as a message says it ("an object", "null", ...)."""
    return {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "an integer",
        float: "a number",
    }.get(type(v), type(v).__name__)


def _at(where: str, key: str) -> str:
    """The JSON path of ``key`` in the object at ``where`` ("" for the top level)."""
    return f"{where}.{key}" if where else key


class Checker:
    """The problems found so far, and reads of one key of a JSON object each (None when absent or bad)."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def int_(self, obj: dict, key: str, where: str, lo: int = 0, hi: int = INT_MAX) -> int | None:
        v = obj.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(_at(where, key), f"expected an integer, got {kind(v)}")
            return None
        if not lo <= v <= hi:
            self.bad(_at(where, key), f"{v} is out of range ({lo}..{hi})")
            return None
        return v

    def num(self, obj: dict, key: str, where: str) -> float | None:
        v = obj.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.bad(_at(where, key), f"expected a number, got {kind(v)}")
            return None
        if v != v or v in (float("inf"), float("-inf")) or abs(v) > 1e300:
            self.bad(_at(where, key), f"{v} is not a finite number")
            return None
        return float(v)

    def str_(self, obj: dict, key: str, where: str) -> str | None:
        v = obj.get(key)
        if v is None:
            return None
        if not isinstance(v, str):
            self.bad(_at(where, key), f"expected a string, got {kind(v)}")
            return None
        return v

    def bool_(self, obj: dict, key: str, where: str) -> bool | None:
        v = obj.get(key)
        if v is None:
            return None
        if not isinstance(v, bool):
            self.bad(_at(where, key), f"expected true or false, got {kind(v)}")
            return None
        return v

    def obj(self, obj: dict, key: str, where: str) -> dict:
        v = obj.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(_at(where, key), f"expected an object, got {kind(v)}")
            return {}
        return v

    def list_(self, obj: dict, key: str, where: str) -> list[Any]:
        v = obj.get(key)
        if v is None:
            return []
        if not isinstance(v, list):
            self.bad(_at(where, key), f"expected a list, got {kind(v)}")
            return []
        return v

    def strs(self, obj: dict, key: str, where: str) -> list[str]:
        """A list of strings (items of another type are left out)."""
        out = []
        for i, v in enumerate(self.list_(obj, key, where)):
            if isinstance(v, str):
                out.append(v)
            else:
                self.bad(f"{_at(where, key)}[{i}]", f"expected a string, got {kind(v)}")
        return out

    def ints(self, obj: dict, key: str, where: str) -> list[int]:
        """A list of integers from 0 (items of another type, or negative, are left out)."""
        out = []
        for i, v in enumerate(self.list_(obj, key, where)):
            if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT_MAX:
                out.append(v)
            else:
                self.bad(f"{_at(where, key)}[{i}]", f"{v!r} is not an integer from 0")
        return out

    def sha256(self, obj: dict, key: str, where: str) -> str | None:
        sha = self.str_(obj, key, where)
        if sha is not None and (len(sha) != 64 or not set(sha) <= SHA256_DIGITS):
            self.bad(_at(where, key), f"{sha[:80]!r} is not a sha256 hex digest")
            return None
        return sha

    def batches(self, obj: dict, key: str, where: str) -> dict[int, int] | None:
        """A decode-batch histogram ``{"<batch size>": steps}`` with int keys; None when absent."""
        if obj.get(key) is None:
            return None
        out: dict[int, int] = {}
        for k, v in self.obj(obj, key, where).items():
            try:
                b = int(k)
            except ValueError:
                b = -1
            if b < 1 or isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self.bad(_at(where, key), f"{k!r}: {v!r} is not batch size -> step count")
                continue
            out[b] = v
        return out
