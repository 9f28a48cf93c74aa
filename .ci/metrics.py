"""Structure figures of a k25trace checkout: the numbers the architecture issue asks to quote before and after.

    python3 .ci/metrics.py [ROOT]

Prints: the largest module, functions over 80 lines (def line to the end of the body, decorators excluded), import
cycles between project modules (top-level and function-level imports alike; TYPE_CHECKING imports count too, as
import-linter counts them), ruff findings with the review's rule set (A,B,E,F,I, 120 columns, no project config),
and duplicate pairs (the `duplicates` command, 6+ lines) when it is installed.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path


def modules(root: Path) -> dict[str, Path]:
    out = {}
    for base in ("k25trace", "capture"):
        for path in sorted((root / base).rglob("*.py")):
            if path.is_symlink() or any(p.is_symlink() for p in path.relative_to(root).parents if p != Path(".")):
                continue
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts[0] == "capture":
                parts.insert(0, "k25trace")  # installed as k25trace.capture
            out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            base = base.replace("capture.", "k25trace.capture.") if base.startswith("capture") else base
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t and t != name and not name.startswith(t + "."):
                out.add(t)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def long_functions(path: Path, limit: int = 80) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                out.append((length, f"{path}:{node.lineno} {node.name}"))
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    mods = modules(root)
    sizes = sorted(
        ((len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(root))) for p in mods.values()),
        reverse=True,
    )
    print(
        f"modules: {len(mods)}; largest: {sizes[0][1]} ({sizes[0][0]} lines); next: "
        + ", ".join(f"{n} ({c})" for c, n in sizes[1:4])
    )
    longs = sorted((f for p in mods.values() for f in long_functions(p)), reverse=True)
    total = sum(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        for p in mods.values()
        for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))
    )
    print(
        f"functions over 80 lines: {len(longs)} of {total}"
        + "".join(f"\n  {n} {where.replace(str(root) + '/', '')}" for n, where in longs)
    )
    known = set(mods)
    graph = {name: imports_of(name, path, known) for name, path in mods.items()}
    found = cycles(graph)
    print(f"import cycles: {len(found)}" + "".join(f"\n  {' <-> '.join(c)}" for c in found))
    if shutil.which("ruff"):
        res = subprocess.run(
            [
                "ruff",
                "check",
                "--no-cache",
                "--isolated",
                "--select",
                "A,B,E,F,I",
                "--line-length",
                "120",
                "--statistics",
                "--exclude",
                "tests/data",
                ".",
            ],
            cwd=root,
            capture_output=True,
            text=True,
        )
        lines = [ln for ln in res.stdout.splitlines() if ln.strip() and ln.split()[0].isdigit()]
        print(
            f"ruff findings (A,B,E,F,I, 120 columns, isolated): {sum(int(ln.split()[0]) for ln in lines)}"
            + "".join(f"\n  {ln}" for ln in lines[:8])
        )
    if shutil.which("duplicates"):
        res = subprocess.run(
            ["duplicates", "--repo", str(root), "--most", "3", "--seconds", "120"], capture_output=True, text=True
        )
        print("duplicates: " + (res.stdout.splitlines() or ["?"])[0])


if __name__ == "__main__":
    main()
