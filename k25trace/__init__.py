"""k25trace: where the time of a large-model decode step goes.

Pipeline (one module per stage, all headless and importable):
capture (``capture/``, installed as ``k25trace.capture``) -> ingest -> classify -> steps -> crossrank -> layers
-> analysis (frames and typed results) -> render (terminal, HTML, export) and the front ends (cli, tui, api).

The notebook API (:mod:`k25trace.api`): ``k25trace.open(db)``, ``k25trace.load(paths, db=...)``,
``k25trace.compare(a, b)``. They are imported on first use, so ``import k25trace`` stays cheap (the loader's
decode processes import this package).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("open", "load", "compare", "Run", "LoadSummary")


def __getattr__(name: str) -> Any:
    if name in _API or name == "api":
        import importlib

        api = importlib.import_module("k25trace.api")  # sets k25trace.api, so "api" asks only once
        return api if name == "api" else getattr(api, name)
    raise AttributeError(f"module 'k25trace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
