"""``CAPTURE_DIR/manifest.json``: what was captured, written atomically after every level.

Shape (the loader reads it; keys may be added, never renamed)::

    {"k25trace_capture": 1, "k25trace_version", "name", "server_url", "vllm_version", "model",
     "server_args": {...}|null, "started_at", "finished_at", "complete": bool,
     "levels": [{"name": "c64", "concurrency": 64, "dir": "c64", "profiled": bool,
                 "started_at", "stopped_at", "start_status", "stop_status", "stop_seconds",
                 "stats": {...}, "files": [{"path", "rank", "world_size", "frontend", "size",
                                            "sha256", "valid", "problem",
                                            "step_markers", "decode_batch_sizes": {"<batch>": steps}}],
                 "missing_ranks": [...],
                 "decode_batch_sizes_seen": {"<batch>": steps}|null, "decode_batch_sizes_rank",
                 "max_decode_batch_seen", "max_running_requests", "running_requests_samples",
                 "reached_concurrency": bool|null, "warnings": [...]}]}

``start_status`` is "200", or "timeout"/"reset" for a start that went unanswered (the run then ends);
``decode_batch_sizes_seen`` counts the decode steps per batch size in the lowest rank's trace (from its
step markers), ``max_decode_batch_seen`` is the largest decode batch (data-parallel groups added up),
``max_running_requests`` the largest ``vllm:num_requests_running`` polled from ``/metrics`` during the load.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
FORMAT = 1


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def k25trace_version() -> str:
    from k25trace import __version__  # the one version string (pyproject reads it from there too)

    return __version__


def new_manifest(name: str, server_url: str, vllm_version: str | None, model: str,
                 server_args: dict | None, settings: dict, max_model_len: int | None = None) -> dict:
    """The manifest at the start of a run (no level yet, status "running")."""
    return {
        "k25trace_capture": FORMAT,
        "k25trace_version": k25trace_version(),
        "name": name,
        "server_url": server_url,
        "vllm_version": vllm_version,
        "model": model,
        "max_model_len": max_model_len,  # from /v1/models: what `report --by sol --context` may take
        "server_args": server_args,
        "started_at": now_iso(),
        "finished_at": None,
        "complete": False,
        "status": "running",
        "settings": settings,
        "levels": [],
    }


def new_level(name: str, concurrency: int, profiled: bool) -> dict:
    """A level entry as the runner starts it: every key of the shape above, filled in as the level runs."""
    return {"name": name, "concurrency": concurrency, "dir": name, "profiled": profiled,
            "started_at": None, "stopped_at": None, "start_status": None, "stop_status": None,
            "stop_seconds": None,
            "stats": None, "files": [], "missing_ranks": [], "extra_files": [], "warnings": [],
            "requests_file": None, "profile_prefix": None, "status": "running",
            "decode_batch_sizes_seen": None, "decode_batch_sizes_rank": None, "max_decode_batch_seen": None,
            "max_running_requests": None, "running_requests_samples": 0, "reached_concurrency": None}


def file_entry(path: str, *, rank: int | None, world_size: int | None, frontend: bool, size: int,
               sha256: str | None, valid: bool, problem: str | None, vllm_version: str | None = None,
               step_markers: int | None = None, decode_batch_sizes: dict[str, int] | None = None) -> dict:
    """A level's ``files`` entry for a trace copied into the capture (``path`` relative to the capture)."""
    return {"path": path, "rank": rank, "world_size": world_size, "frontend": frontend, "size": size,
            "sha256": sha256, "valid": valid, "problem": problem, "vllm_version": vllm_version,
            "step_markers": step_markers, "decode_batch_sizes": decode_batch_sizes}


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
    """The manifest as plain JSON, trusted (for a capture this run wrote; :func:`check_manifest` otherwise)."""
    with open(Path(capture_dir) / MANIFEST) as f:
        return json.load(f)


# --- reading a manifest that may be damaged ------------------------------------------------------------
#
# A manifest is written by capture, but it is a text file in a directory users copy, edit and merge.  The
# readers below never raise on its content: they keep what is well-formed, name what is not (a JSON path
# and what was found), and leave the caller to warn.  ``k25trace load`` and ``capture --force`` use them.

INT_MAX = 2**31 - 1  # capture_levels integer columns
BIGINT_MAX = 2**63 - 1


def _kind(v: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def int_(self, obj: dict, key: str, where: str, lo: int = 0, hi: int = INT_MAX) -> int | None:
        v = obj.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(f"{where}.{key}", f"expected an integer, got {_kind(v)}")
            return None
        if not lo <= v <= hi:
            self.bad(f"{where}.{key}", f"{v} is out of range ({lo}..{hi})")
            return None
        return v

    def num(self, obj: dict, key: str, where: str) -> float | None:
        v = obj.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.bad(f"{where}.{key}", f"expected a number, got {_kind(v)}")
            return None
        if v != v or v in (float("inf"), float("-inf")) or abs(v) > 1e300:
            self.bad(f"{where}.{key}", f"{v} is not a finite number")
            return None
        return float(v)

    def str_(self, obj: dict, key: str, where: str) -> str | None:
        v = obj.get(key)
        if v is None:
            return None
        if not isinstance(v, str):
            self.bad(f"{where}.{key}", f"expected a string, got {_kind(v)}")
            return None
        return v

    def bool_(self, obj: dict, key: str, where: str) -> bool | None:
        v = obj.get(key)
        if v is None:
            return None
        if not isinstance(v, bool):
            self.bad(f"{where}.{key}", f"expected true or false, got {_kind(v)}")
            return None
        return v

    def obj(self, obj: dict, key: str, where: str) -> dict:
        v = obj.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(f"{where}.{key}", f"expected an object, got {_kind(v)}")
            return {}
        return v


_SHA256 = frozenset("0123456789abcdef")
_STATS_INT = ("requests", "completed", "errors", "input_tokens", "max_in_flight")
_STATS_NUM = ("duration_s", "output_tok_s", "request_throughput")
_DISTS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


@dataclass(frozen=True)
class ManifestFile:
    """A level's file entry as far as it can be trusted (a field of the wrong type is None)."""

    path: str                  # relative to the capture directory, e.g. "c64/dp0_…rank0.….pt.trace.json.gz"
    rank: int | None
    world_size: int | None
    frontend: bool | None
    size: int | None
    sha256: str | None         # hex digest of the copy
    valid: bool | None         # complete and well-formed when captured
    problem: str | None        # why not, when not valid


@dataclass(frozen=True)
class Distribution:
    """A latency distribution of a level (ms)."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class LevelStats:
    """A level's request statistics (``capture.load.summarize``); latencies in ms."""

    requests: int | None
    completed: int | None
    errors: int | None
    input_tokens: int | None
    max_in_flight: int | None
    output_tokens: int | None
    duration_s: float | None
    output_tok_s: float | None
    request_throughput: float | None
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution


@dataclass(frozen=True)
class ManifestLevel:
    """A level entry as far as it can be trusted: every field has its type or is None."""

    name: str
    concurrency: int | None
    dir: str                   # directory of the level's files, inside the capture ("c64")
    profiled: bool | None
    status: str | None
    stats: LevelStats
    files: tuple[ManifestFile, ...]
    decode_batch_sizes_seen: dict[int, int] | None   # decode batch size -> steps (lowest rank's trace)
    max_decode_batch_seen: int | None
    max_running_requests: int | None

    def file(self, rel: str) -> ManifestFile | None:
        return next((f for f in self.files if f.path == rel), None)


def _clean_file(c: _Checker, f: object, where: str) -> ManifestFile | None:
    if not isinstance(f, dict):
        c.bad(where, f"expected an object, got {_kind(f)}")
        return None
    path = c.str_(f, "path", where)
    if path is None:
        if "path" not in f:
            c.bad(f"{where}.path", "missing")
        return None
    sha = c.str_(f, "sha256", where)
    if sha is not None and (len(sha) != 64 or not set(sha) <= _SHA256):
        c.bad(f"{where}.sha256", f"{sha[:80]!r} is not a sha256 hex digest")
        sha = None
    return ManifestFile(path, rank=c.int_(f, "rank", where), world_size=c.int_(f, "world_size", where, 1),
                        frontend=c.bool_(f, "frontend", where), size=c.int_(f, "size", where, 0, BIGINT_MAX),
                        sha256=sha, valid=c.bool_(f, "valid", where), problem=c.str_(f, "problem", where))


def _clean_stats(c: _Checker, lv: dict, where: str) -> LevelStats:
    raw = c.obj(lv, "stats", where)
    w = f"{where}.stats"
    fields: dict[str, Any] = {k: c.int_(raw, k, w) for k in _STATS_INT}
    fields["output_tokens"] = c.int_(raw, "output_tokens", w, 0, BIGINT_MAX)
    fields.update({k: c.num(raw, k, w) for k in _STATS_NUM})
    for k in _DISTS:
        d = c.obj(raw, k, w)
        fields[k] = Distribution(**{p: c.num(d, p, f"{w}.{k}") for p in ("mean", "p50", "p90", "p99")})
    return LevelStats(**fields)


def _clean_batches(c: _Checker, lv: dict, where: str) -> dict[int, int] | None:
    if lv.get("decode_batch_sizes_seen") is None:
        return None
    raw = c.obj(lv, "decode_batch_sizes_seen", where)
    out: dict[int, int] = {}
    for k, v in raw.items():
        try:
            b = int(k)
        except ValueError:
            b = -1
        if b < 1 or isinstance(v, bool) or not isinstance(v, int) or v < 0:
            c.bad(f"{where}.decode_batch_sizes_seen", f"{k!r}: {v!r} is not batch size -> step count")
            continue
        out[b] = v
    return out


def _clean_level(c: _Checker, lv: object, where: str) -> ManifestLevel | None:
    if not isinstance(lv, dict):
        c.bad(where, f"expected an object, got {_kind(lv)}")
        return None
    name = c.str_(lv, "name", where)
    if not name:
        if lv.get("name") in (None, ""):
            c.bad(f"{where}.name", "missing or empty")
        return None
    d = c.str_(lv, "dir", where)
    if d is not None and (not d or d.startswith("/") or ".." in d.split("/")):
        c.bad(f"{where}.dir", f"{d!r} is not a directory inside the capture")
        d = None
    files_raw = lv.get("files")
    files: list[ManifestFile] = []
    if files_raw is not None and not isinstance(files_raw, list):
        c.bad(f"{where}.files", f"expected a list, got {_kind(files_raw)}")
    else:
        for j, f in enumerate(files_raw or []):
            cf = _clean_file(c, f, f"{where}.files[{j}]")
            if cf is not None:
                files.append(cf)
    return ManifestLevel(name, concurrency=c.int_(lv, "concurrency", where, 1), dir=d or name,
                         profiled=c.bool_(lv, "profiled", where), status=c.str_(lv, "status", where),
                         stats=_clean_stats(c, lv, where), files=tuple(files),
                         decode_batch_sizes_seen=_clean_batches(c, lv, where),
                         max_decode_batch_seen=c.int_(lv, "max_decode_batch_seen", where),
                         max_running_requests=c.int_(lv, "max_running_requests", where))


@dataclass
class CheckedManifest:
    """A capture directory's manifest as far as it can be trusted.

    ``data`` is the JSON object as read (for the ``captures`` table); ``levels`` holds the well-formed
    level entries (:class:`ManifestLevel`: a field of the wrong type is None, a damaged file entry or level
    entry is left out); ``problems`` says what was wrong, each as ``manifest.json: <where>: <what>``.
    ``usable`` is False when nothing in it can be used (not JSON, not an object, ``levels`` not a list):
    its traces are then plain files."""

    path: Path
    data: dict | None
    levels: list[ManifestLevel]
    problems: list[str]
    usable: bool

    def locate(self, rel: str) -> tuple[ManifestLevel | None, ManifestFile | None]:
        """(level, file entry) of a path relative to the capture directory: the level whose directory holds it
        (None when none does) and its entry there (None when the level does not list it)."""
        for lv in self.levels:
            if rel.startswith(lv.dir.rstrip("/") + "/"):
                return lv, lv.file(rel)
        return None, None

    def lookup(self, rel: str) -> tuple[dict | None, dict | None]:
        """:meth:`locate` as plain dicts (the fields by name), for callers not yet on the typed entries."""
        level, entry = self.locate(rel)
        return (None if level is None else asdict(level)), (None if entry is None else asdict(entry))

    def json_text(self) -> str | None:
        """``data`` as standard JSON text (integers of any size; no NaN), for the ``captures`` table."""
        return None if self.data is None else json.dumps(self.data, allow_nan=False)

    def summary(self, most: int = 3) -> str:
        """One line: the first problems and how many more."""
        head = "; ".join(self.problems[:most])
        more = len(self.problems) - most
        return head + (f" (+{more} more)" if more > 0 else "")


def check_manifest(capture_dir: str | os.PathLike) -> CheckedManifest | None:
    """Read ``capture_dir/manifest.json`` without trusting it.

    None when there is no such file or it is a JSON object that is not a capture manifest (no
    ``k25trace_capture`` key: another tool's ``manifest.json``).  Otherwise a :class:`CheckedManifest`,
    never an exception for its content."""
    path = Path(capture_dir) / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return CheckedManifest(path, None, [], [f"cannot read it ({e.strerror or e})"], False)
    constants: list[str] = []

    def constant(name: str) -> None:  # NaN, Infinity: Python's json takes them, JSON (and DuckDB) do not
        constants.append(name)
        return None

    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=constant)
    except UnicodeDecodeError as e:
        return CheckedManifest(path, None, [], [f"not UTF-8 text (byte {e.start})"], False)
    except (ValueError, RecursionError) as e:
        why = f"{e.msg} at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
        return CheckedManifest(path, None, [], [f"not JSON ({why})"], False)
    if not isinstance(data, dict):
        return CheckedManifest(path, None, [], [f"the top level is {_kind(data)}, not an object"], False)
    if "k25trace_capture" not in data:
        return None
    c = _Checker()
    if constants:
        c.bad("(document)", f"{len(constants)} non-JSON constant(s) {sorted(set(constants))} read as null")
    levels_raw = data.get("levels")
    if not isinstance(levels_raw, list):
        c.bad("levels", "missing" if levels_raw is None else f"expected a list, got {_kind(levels_raw)}")
        return CheckedManifest(path, data, [], c.problems, False)
    levels: list[ManifestLevel] = []
    for i, lv in enumerate(levels_raw):
        cl = _clean_level(c, lv, f"levels[{i}]")
        if cl is None:
            continue
        if any(o.name == cl.name or o.dir == cl.dir for o in levels):
            c.bad(f"levels[{i}]", f"level {cl.name!r} (directory {cl.dir!r}) is listed twice; the first is kept")
            continue
        levels.append(cl)
    return CheckedManifest(path, data, levels, c.problems, True)


# capture_levels' columns after capture_dir, in table order; level_rows() adds the item-4 ones after them
LEVEL_COLUMNS = ("level", "concurrency", "requests", "errors", "output_tokens", "duration_s", "output_tok_s",
                 "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
                 "itl_p50_ms", "itl_p90_ms", "itl_p99_ms")


def level_rows(m: CheckedManifest) -> list[dict]:
    """One row per level for ``capture_levels`` (column name -> value, every value well-typed): the
    :data:`LEVEL_COLUMNS`, then ``max_decode_batch_seen`` and ``max_running_requests``."""
    rows = []
    for lv in m.levels:
        st = lv.stats
        row = {"level": lv.name, "concurrency": lv.concurrency, "requests": st.requests, "errors": st.errors,
               "output_tokens": st.output_tokens, "duration_s": st.duration_s, "output_tok_s": st.output_tok_s}
        for metric in ("ttft", "tpot", "itl"):
            dist = getattr(st, f"{metric}_ms")
            for q in ("p50", "p90", "p99"):
                row[f"{metric}_{q}_ms"] = getattr(dist, q)
        row["max_decode_batch_seen"] = lv.max_decode_batch_seen
        row["max_running_requests"] = lv.max_running_requests
        rows.append(row)
    return rows
