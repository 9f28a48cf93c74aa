"""``CAPTURE_DIR/manifest.json``: what was captured, written atomically after every level.

Shape (the loader reads it; keys may be added, never renamed): :class:`Manifest` and the entries it holds, one
definition each for the runner that writes them (``to_json``) and the readers (``from_json``)::

    {"k25trace_capture": 1, "k25trace_version", "name", "server_url", "vllm_version", "model", "max_model_len",
     "server_args": {...}|null, "started_at", "finished_at", "complete": bool, "status", "error", "settings",
     "levels": [{"name": "c64", "concurrency": 64, "dir": "c64", "profiled": bool,
                 "started_at", "stopped_at", "start_status", "start_detail", "stop_status", "stop_seconds",
                 "stop_detail", "stats": {...}|null,
                 "files": [{"path", "rank", "world_size", "frontend", "size", "sha256", "valid", "problem",
                            "vllm_version", "step_markers", "decode_batch_sizes": {"<batch>": steps}}],
                 "missing_ranks": [...], "extra_files": [{"path", "size", "sha256"}], "world_size", "warnings",
                 "requests_file", "profile_prefix", "status",
                 "decode_batch_sizes_seen": {"<batch>": steps}|null, "decode_batch_sizes_rank",
                 "max_decode_batch_seen", "max_running_requests", "running_requests_samples",
                 "running_requests_note", "reached_concurrency": bool|null}]}

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from k25trace.capture.json_check import BIGINT_MAX, INT_MAX, Checker, kind

MANIFEST = "manifest.json"
FORMAT = 1
__all__ = [
    "BIGINT_MAX",
    "INT_MAX",
    "CheckedManifest",
    "Distribution",
    "ExtraFile",
    "LevelStats",
    "Manifest",
    "ManifestFile",
    "ManifestLevel",
    "check_manifest",
    "level_rows",
    "new_manifest",
    "read_manifest",
    "write_manifest",
]


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def k25trace_version() -> str:
    from k25trace import __version__  # the one version string (pyproject reads it from there too)

    return __version__


# --- the entries, written and read -------------------------------------------------------------------
#
# One definition each: the runner fills them in and writes ``to_json()``; the readers build them with ``from_json``,
# which never raises on the content (a manifest is a text file in a directory users copy, edit and merge): a field
# of the wrong type reads as its default and the :class:`Checker` names it. Keys a manifest lacks (written by an
# older capture) read as their defaults. ``k25trace load`` and ``capture --force`` read through them.


def _batch_json(batches: dict[int, int] | None) -> dict[str, int] | None:
    return None if batches is None else {str(b): n for b, n in batches.items()}


@dataclass
class Distribution:
    """A latency distribution of a level (ms) over ``n`` values; all None without values."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    n: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, c: Checker, raw: dict, where: str) -> Distribution:
        return cls(
            mean=c.num(raw, "mean", where),
            p50=c.num(raw, "p50", where),
            p90=c.num(raw, "p90", where),
            p99=c.num(raw, "p99", where),
            n=c.int_(raw, "n", where, 0, BIGINT_MAX),
        )


_STATS_INT = ("requests", "completed", "errors", "input_tokens", "max_in_flight")
_STATS_NUM = ("duration_s", "output_tok_s", "request_throughput")
_DISTS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


@dataclass
class LevelStats:
    """A level's request statistics (``capture.load.level_stats``); latencies in ms."""

    requests: int | None = None
    completed: int | None = None
    errors: int | None = None
    output_tokens: int | None = None
    input_tokens: int | None = None
    duration_s: float | None = None
    output_tok_s: float | None = None
    request_throughput: float | None = None
    max_in_flight: int | None = None
    aborted: bool | None = None
    ttft_ms: Distribution = field(default_factory=Distribution)
    tpot_ms: Distribution = field(default_factory=Distribution)
    itl_ms: Distribution = field(default_factory=Distribution)
    e2e_ms: Distribution = field(default_factory=Distribution)
    first_errors: list[str] = field(default_factory=list)  # the first distinct errors (at most 5)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, c: Checker, raw: dict, where: str) -> LevelStats:
        fields: dict[str, Any] = {k: c.int_(raw, k, where) for k in _STATS_INT}
        fields["output_tokens"] = c.int_(raw, "output_tokens", where, 0, BIGINT_MAX)
        fields.update({k: c.num(raw, k, where) for k in _STATS_NUM})
        fields["aborted"] = c.bool_(raw, "aborted", where)
        for k in _DISTS:
            fields[k] = Distribution.from_json(c, c.obj(raw, k, where), f"{where}.{k}")
        fields["first_errors"] = c.strs(raw, "first_errors", where)
        return cls(**fields)


@dataclass
class ManifestFile:
    """A level's trace file, copied into the capture (a field read from a damaged manifest may be None)."""

    path: str  # relative to the capture directory, e.g. "c64/dp0_…rank0.….pt.trace.json.gz"
    rank: int | None = None
    world_size: int | None = None
    frontend: bool | None = None
    size: int | None = None
    sha256: str | None = None  # hex digest of the copy
    valid: bool | None = None  # complete and well-formed when captured
    problem: str | None = None  # why not, when not valid
    vllm_version: str | None = None
    step_markers: int | None = None  # engine-step markers in the trace
    decode_batch_sizes: dict[int, int] | None = None  # decode batch size -> steps (from the step markers)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "decode_batch_sizes": _batch_json(self.decode_batch_sizes)}

    @classmethod
    def from_json(cls, c: Checker, f: object, where: str) -> ManifestFile | None:
        if not isinstance(f, dict):
            c.bad(where, f"expected an object, got {kind(f)}")
            return None
        path = c.str_(f, "path", where)
        if path is None:
            if "path" not in f:
                c.bad(f"{where}.path", "missing")
            return None
        return cls(
            path,
            rank=c.int_(f, "rank", where),
            world_size=c.int_(f, "world_size", where, 1),
            frontend=c.bool_(f, "frontend", where),
            size=c.int_(f, "size", where, 0, BIGINT_MAX),
            sha256=c.sha256(f, "sha256", where),
            valid=c.bool_(f, "valid", where),
            problem=c.str_(f, "problem", where),
            vllm_version=c.str_(f, "vllm_version", where),
            step_markers=c.int_(f, "step_markers", where, 0, BIGINT_MAX),
            decode_batch_sizes=c.batches(f, "decode_batch_sizes", where),
        )


@dataclass
class ExtraFile:
    """A file that rides along with a level's traces (the key-averages tables)."""

    path: str
    size: int | None = None
    sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, c: Checker, f: object, where: str) -> ExtraFile | None:
        path = c.str_(f, "path", where) if isinstance(f, dict) else None
        if not isinstance(f, dict) or path is None:
            c.bad(where, "expected an object with a path")
            return None
        return cls(path, c.int_(f, "size", where, 0, BIGINT_MAX), c.sha256(f, "sha256", where))


def _entries(c: Checker, raw: object, where: str, read: Any) -> list:
    """The well-formed entries of a JSON list (``read(c, item, where)``, None for a damaged one)."""
    if raw is not None and not isinstance(raw, list):
        c.bad(where, f"expected a list, got {kind(raw)}")
        return []
    return [e for j, item in enumerate(raw or []) if (e := read(c, item, f"{where}[{j}]")) is not None]


@dataclass
class ManifestLevel:
    """One concurrency level: started by the runner, filled in as the level runs, rewritten after every step."""

    name: str
    concurrency: int | None = None
    dir: str = ""  # directory of the level's files, inside the capture ("c64"); the name when not given
    profiled: bool | None = None
    started_at: str | None = None
    stopped_at: str | None = None
    start_status: str | None = None  # "200", or "timeout"/"reset" for a start that went unanswered
    start_detail: str | None = None
    stop_status: str | None = None
    stop_seconds: float | None = None
    stop_detail: str | None = None
    stats: LevelStats | None = None  # None until the level's load ran
    files: list[ManifestFile] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    extra_files: list[ExtraFile] = field(default_factory=list)
    world_size: int | None = None
    warnings: list[str] = field(default_factory=list)
    requests_file: str | None = None
    profile_prefix: str | None = None
    status: str | None = "running"
    decode_batch_sizes_seen: dict[int, int] | None = None  # decode batch size -> steps (lowest rank's trace)
    decode_batch_sizes_rank: int | None = None
    max_decode_batch_seen: int | None = None
    max_running_requests: int | None = None
    running_requests_samples: int | None = 0
    running_requests_note: str | None = None  # why /metrics gave no running-requests gauge
    reached_concurrency: bool | None = None

    def __post_init__(self) -> None:
        self.dir = self.dir or self.name

    def file(self, rel: str) -> ManifestFile | None:
        return next((f for f in self.files if f.path == rel), None)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            stats=None if self.stats is None else self.stats.to_json(),
            files=[f.to_json() for f in self.files],
            extra_files=[e.to_json() for e in self.extra_files],
            decode_batch_sizes_seen=_batch_json(self.decode_batch_sizes_seen),
        )
        return out

    @classmethod
    def from_json(cls, c: Checker, lv: object, where: str) -> ManifestLevel | None:
        if not isinstance(lv, dict):
            c.bad(where, f"expected an object, got {kind(lv)}")
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
        stats = c.obj(lv, "stats", where)

        def text(key: str) -> str | None:
            return c.str_(lv, key, where)

        def count(key: str) -> int | None:
            return c.int_(lv, key, where)

        return cls(
            name,
            concurrency=c.int_(lv, "concurrency", where, 1),
            dir=d or name,
            profiled=c.bool_(lv, "profiled", where),
            started_at=text("started_at"),
            stopped_at=text("stopped_at"),
            start_status=text("start_status"),
            start_detail=text("start_detail"),
            stop_status=text("stop_status"),
            stop_seconds=c.num(lv, "stop_seconds", where),
            stop_detail=text("stop_detail"),
            stats=LevelStats.from_json(c, stats, f"{where}.stats") if stats else None,
            files=_entries(c, lv.get("files"), f"{where}.files", ManifestFile.from_json),
            missing_ranks=c.ints(lv, "missing_ranks", where),
            extra_files=_entries(c, lv.get("extra_files"), f"{where}.extra_files", ExtraFile.from_json),
            world_size=c.int_(lv, "world_size", where, 1),
            warnings=c.strs(lv, "warnings", where),
            requests_file=text("requests_file"),
            profile_prefix=text("profile_prefix"),
            status=text("status"),
            decode_batch_sizes_seen=c.batches(lv, "decode_batch_sizes_seen", where),
            decode_batch_sizes_rank=count("decode_batch_sizes_rank"),
            max_decode_batch_seen=count("max_decode_batch_seen"),
            max_running_requests=count("max_running_requests"),
            running_requests_samples=count("running_requests_samples"),
            running_requests_note=text("running_requests_note"),
            reached_concurrency=c.bool_(lv, "reached_concurrency", where),
        )


@dataclass
class Manifest:
    """The whole manifest: the server and model captured, the run's settings and state, its levels."""

    name: str | None = None
    server_url: str | None = None
    vllm_version: str | None = None
    model: str | None = None
    max_model_len: int | None = None  # from /v1/models: what `report --by sol --context` may take
    server_args: dict[str, Any] | None = None
    started_at: str | None = None
    finished_at: str | None = None
    complete: bool | None = False
    status: str | None = "running"
    error: str | None = None  # why a failed run ended
    settings: dict[str, Any] = field(default_factory=dict)
    levels: list[ManifestLevel] = field(default_factory=list)
    k25trace_capture: int | None = FORMAT
    k25trace_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        head = {"k25trace_capture": self.k25trace_capture, "k25trace_version": self.k25trace_version}
        body = {k: v for k, v in asdict(self).items() if k not in head}
        return {**head, **body, "levels": [lv.to_json() for lv in self.levels]}

    @classmethod
    def from_json(cls, c: Checker, data: dict, levels_raw: list) -> Manifest:
        """The manifest ``data`` (a JSON object whose ``levels`` is the list ``levels_raw``); a level listed twice
        (by name or directory) keeps its first entry."""
        levels: list[ManifestLevel] = []
        for i, lv in enumerate(levels_raw):
            cl = ManifestLevel.from_json(c, lv, f"levels[{i}]")
            if cl is None:
                continue
            if any(o.name == cl.name or o.dir == cl.dir for o in levels):
                c.bad(f"levels[{i}]", f"level {cl.name!r} (directory {cl.dir!r}) is listed twice; the first is kept")
                continue
            levels.append(cl)

        def text(key: str) -> str | None:
            return c.str_(data, key, "")

        args = c.obj(data, "server_args", "") if data.get("server_args") is not None else None
        return cls(
            name=text("name"),
            server_url=text("server_url"),
            vllm_version=text("vllm_version"),
            model=text("model"),
            max_model_len=c.int_(data, "max_model_len", "", 1, BIGINT_MAX),
            server_args=args,
            started_at=text("started_at"),
            finished_at=text("finished_at"),
            complete=c.bool_(data, "complete", ""),
            status=text("status"),
            error=text("error"),
            settings=c.obj(data, "settings", ""),
            levels=levels,
            k25trace_capture=c.int_(data, "k25trace_capture", "", 0, BIGINT_MAX),
            k25trace_version=text("k25trace_version"),
        )


def new_manifest(
    name: str,
    server_url: str,
    vllm_version: str | None,
    model: str,
    server_args: dict | None,
    settings: dict,
    max_model_len: int | None = None,
) -> Manifest:
    """The manifest at the start of a run (no level yet, status "running")."""
    return Manifest(
        name=name,
        server_url=server_url,
        vllm_version=vllm_version,
        model=model,
        max_model_len=max_model_len,
        server_args=server_args,
        started_at=now_iso(),
        settings=settings,
        k25trace_version=k25trace_version(),
    )


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


@dataclass
class CheckedManifest:
    """A capture directory's manifest as far as it can be trusted.

    ``data`` is the JSON object as read (for the ``captures`` table); ``manifest`` its well-formed part
    (:class:`Manifest`, None when not usable) and ``levels`` its well-formed level entries (:class:`ManifestLevel`:
    a field of the wrong type reads as its default, a damaged file entry or level entry is left out);
    ``problems`` says what was wrong, each as ``manifest.json: <where>: <what>``. ``usable`` is False
    when nothing in it can be used (not JSON, not an object, ``levels`` not a list): its traces are then plain
    files."""

    path: Path
    data: dict | None
    levels: list[ManifestLevel]
    problems: list[str]
    usable: bool
    manifest: Manifest | None = None

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
        return CheckedManifest(path, None, [], [f"the top level is {kind(data)}, not an object"], False)
    if "k25trace_capture" not in data:
        return None
    c = Checker()
    if constants:
        c.bad("(document)", f"{len(constants)} non-JSON constant(s) {sorted(set(constants))} read as null")
    levels_raw = data.get("levels")
    if not isinstance(levels_raw, list):
        c.bad("levels", "missing" if levels_raw is None else f"expected a list, got {kind(levels_raw)}")
        return CheckedManifest(path, data, [], c.problems, False)
    manifest = Manifest.from_json(c, data, levels_raw)
    return CheckedManifest(path, data, manifest.levels, c.problems, True, manifest)


# capture_levels' columns after capture_dir, in table order; level_rows() adds the item-4 ones after them
LEVEL_COLUMNS = (
    "level",
    "concurrency",
    "requests",
    "errors",
    "output_tokens",
    "duration_s",
    "output_tok_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "tpot_p99_ms",
    "itl_p50_ms",
    "itl_p90_ms",
    "itl_p99_ms",
)


def level_rows(m: CheckedManifest) -> list[dict]:
    """One row per level for ``capture_levels`` (column name -> value, every value well-typed): the
    :data:`LEVEL_COLUMNS`, then ``max_decode_batch_seen`` and ``max_running_requests``."""
    rows = []
    for lv in m.levels:
        st = lv.stats or LevelStats()
        row = {
            "level": lv.name,
            "concurrency": lv.concurrency,
            "requests": st.requests,
            "errors": st.errors,
            "output_tokens": st.output_tokens,
            "duration_s": st.duration_s,
            "output_tok_s": st.output_tok_s,
        }
        for metric in ("ttft", "tpot", "itl"):
            dist = getattr(st, f"{metric}_ms")
            for q in ("p50", "p90", "p99"):
                row[f"{metric}_{q}_ms"] = getattr(dist, q)
        row["max_decode_batch_seen"] = lv.max_decode_batch_seen
        row["max_running_requests"] = lv.max_running_requests
        rows.append(row)
    return rows
