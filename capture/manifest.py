"""``CAPTURE_DIR/manifest.json``: what was captured, written atomically after every level.

Shape (the loader reads it; keys may be added, never renamed)::

    {"k25trace_capture": 1, "k25trace_version", "name", "server_url", "vllm_version", "model",
     "server_args": {...}|null, "started_at", "finished_at", "complete": bool,
     "levels": [{"name": "c64", "concurrency": 64, "dir": "c64", "profiled": bool,
                 "started_at", "stopped_at", "stop_status", "stop_seconds",
                 "stats": {...}, "files": [{"path", "rank", "world_size", "frontend", "size",
                                            "sha256", "valid", "problem"}],
                 "missing_ranks": [...]}]}
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path

MANIFEST = "manifest.json"
FORMAT = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def k25trace_version() -> str:
    try:
        from importlib.metadata import version

        return version("k25trace")
    except Exception:  # not installed: read it from the source tree without importing the package
        init = Path(__file__).resolve().parent.parent / "k25trace" / "__init__.py"
        try:
            for line in init.read_text().splitlines():
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
        except OSError:
            pass
        return "unknown"


def new_manifest(name: str, server_url: str, vllm_version: str | None, model: str,
                 server_args: dict | None, settings: dict) -> dict:
    return {
        "k25trace_capture": FORMAT,
        "k25trace_version": k25trace_version(),
        "name": name,
        "server_url": server_url,
        "vllm_version": vllm_version,
        "model": model,
        "server_args": server_args,
        "started_at": now_iso(),
        "finished_at": None,
        "complete": False,
        "status": "running",
        "settings": settings,
        "levels": [],
    }


def write_manifest(capture_dir: str | os.PathLike, manifest: dict) -> Path:
    """Write via a temp file in the same directory, fsync, then rename: never a half-written manifest."""
    d = Path(capture_dir)
    d.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=d)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=2, sort_keys=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / MANIFEST)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return d / MANIFEST


def read_manifest(capture_dir: str | os.PathLike) -> dict:
    with open(Path(capture_dir) / MANIFEST) as f:
        return json.load(f)
