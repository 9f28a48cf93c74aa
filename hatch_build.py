"""Build hook: compile the chunk scanner (k25trace/ingest/_scan.c, plain C, no Python headers) into
k25trace/ingest/_scan.so when k25trace is installed.

The compiler is the one the ``ziglang`` wheel brings (a build requirement, so a fresh machine needs no compiler of
its own), else the machine's ``cc``. If neither works the install still succeeds, without the scanner: the loader
then decodes every chunk with msgspec (same tables, slower), and says nothing else changes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = "k25trace/ingest/_scan.c"
TARGET = "k25trace/ingest/_scan.so"
FLAGS = ["-O3", "-shared", "-fPIC", "-std=c99"]


def _compilers() -> list[list[str]]:
    out = []
    try:
        import ziglang  # noqa: F401  # the ziglang wheel: a C compiler from the package registry

        out.append([sys.executable, "-m", "ziglang", "cc", "-mcpu=baseline"])  # runs on any x86-64 / arm64
    except ImportError:
        pass
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            out.append([name])
    return out


def _works(library: Path) -> bool:
    try:
        return hasattr(ctypes.CDLL(str(library)), "k25_scan")
    except OSError:
        return False


def compile_scanner(source: Path, target: Path) -> str | None:
    """Compile ``source`` into ``target``; the compiler used, or None (each failure is printed to stderr)."""
    for compiler in _compilers():
        with tempfile.TemporaryDirectory() as tmp:
            built = Path(tmp) / target.name
            env = dict(os.environ)
            for attempt in range(2):  # the second time with zig's caches in a fresh directory
                if attempt:
                    env["ZIG_GLOBAL_CACHE_DIR"] = env["ZIG_LOCAL_CACHE_DIR"] = str(Path(tmp) / "zig-cache")
                try:
                    done = subprocess.run(
                        [*compiler, *FLAGS, "-o", str(built), str(source)],
                        env=env,
                        capture_output=True,
                        text=True,
                        timeout=600,
                        check=False,
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    print(f"k25trace: {' '.join(compiler)}: {exc}", file=sys.stderr)
                    break
                if done.returncode == 0 and _works(built):
                    target.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(built, target)
                    return " ".join(compiler)
                print(
                    f"k25trace: {' '.join(compiler)} could not build the scanner:\n{done.stderr[-2000:]}",
                    file=sys.stderr,
                )
                if "ziglang" not in compiler:
                    break
    return None


class CustomBuildHook(BuildHookInterface):  # type: ignore[type-arg]
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if version == "editable":  # the source tree is imported: the library goes next to scan.py
            target = root / TARGET
        else:
            self._tmp = tempfile.mkdtemp(prefix="k25trace-scanner-")
            target = Path(self._tmp) / Path(TARGET).name
        used = compile_scanner(root / SOURCE, target)
        if used is None:
            print(
                "k25trace: installed without the compiled scanner: loads decode every chunk with msgspec (same "
                "tables, slower)",
                file=sys.stderr,
            )
            return
        print(f"k25trace: chunk scanner compiled with {used}", file=sys.stderr)
        build_data["pure_python"] = False
        build_data["infer_tag"] = True
        if version != "editable":
            build_data["force_include"][str(target)] = TARGET

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        tmp = getattr(self, "_tmp", None)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
