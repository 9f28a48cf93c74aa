"""Trace files in the server's ``torch_profiler_dir``: which are new, which are complete, copy them safely.

A torch-profiler trace is complete when (torch exports plain JSON to a temp file, then gzips it under the
final name as it goes, so a file that exists is not yet a finished one):

- ``*.json.gz``: the gzip stream reads to its end-of-stream marker with a good CRC (torch writes the
  ``.gz`` progressively under its final name, so a file being written fails with "Compressed file
  ended before the end-of-stream marker was reached"), and the JSON inside closes with ``}``;
- ``*.json``: the JSON closes with ``}``; ``*.tmp`` (Kineto's in-progress name) is never complete.

Everything here streams: a 1 GB trace is never held in memory.  The rank and world size come from the
``distributedInfo`` metadata near the head of the JSON (or, failing that, its tail), the front-end
(API-server) trace is recognised by ``.async_llm.`` in its name.

Standard library only: this module runs next to the server and the loader may reuse it.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path

CHUNK = 1 << 20  # 1 MiB
OUT_MAX = 1 << 20  # most decompressed bytes per step
HEAD_BYTES = 4 << 20  # decompressed bytes searched for metadata before giving up on the head
TAIL_BYTES = 256 << 10  # decompressed bytes kept from the end (metadata may follow traceEvents)

TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json")
CARRY_MAX = 4 << 20  # most bytes of one unfinished event kept between chunks by the marker scan
_DP_IN_NAME = re.compile(r"(?:^|[_.-])dp(\d+)_pp\d+_tp\d+")
_RANK_IN_NAME = re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:[._-]|$)")
_DIST_KEY = b'"distributedInfo"'


@dataclass
class TraceCheck:
    """Result of :func:`check_trace_file`; ``ok`` means complete and well-formed."""

    ok: bool
    problem: str | None
    rank: int | None
    world_size: int | None
    frontend: bool
    size: int = 0
    metadata: dict = field(default_factory=dict)
    steps: "StepScan | None" = None  # engine-step markers (worker traces)


def is_trace_name(name: str) -> bool:
    """True for a finished-name torch-profiler trace (``*.pt.trace.json[.gz]``); ``*.tmp`` is not one."""
    return name.endswith(TRACE_SUFFIXES)


def is_frontend_name(name: str) -> bool:
    """The API-server (AsyncLLM) trace, ``<host>_<pid>.async_llm.<ns>.pt.trace.json.gz``: CPU only, no kernels."""
    return ".async_llm." in name


def rank_from_name(name: str) -> int | None:
    """Rank as written in the file name (``…_rank3.`` or ``…-rank-3.``); None when absent.

    Only a fallback: 0.11.0 names carry no rank, ``distributedInfo`` is the reliable source."""
    stem = name.split(".pt.trace.json")[0]
    matches = _RANK_IN_NAME.findall(stem.split(".")[0]) or _RANK_IN_NAME.findall(stem)
    return int(matches[-1]) if matches else None


def dp_from_name(name: str) -> int | None:
    """The data-parallel rank vLLM writes into a worker trace's name (``dp1_pp0_tp0_…``); None when absent."""
    m = _DP_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def _extract_object(buf: bytes, key: bytes) -> dict | None:
    """Parse the JSON object that follows ``key:`` in ``buf``; None when absent or cut off."""
    i = buf.find(key)
    if i < 0:
        return None
    j = buf.find(b"{", i + len(key))
    if j < 0:
        return None
    # Allow only whitespace and the colon between the key and the object.
    if buf[i + len(key) : j].strip() not in (b":",):
        return None
    text = buf[j:].decode("utf-8", "replace")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def _extract_scalar(buf: bytes, key: str) -> object | None:
    m = re.search(rb'"' + re.escape(key.encode()) + rb'"\s*:\s*("(?:[^"\\]|\\.)*"|-?\d+)', buf)
    if not m:
        return None
    try:
        return json.loads(m.group(1))
    except ValueError:
        return None


def _read_stream(path: Path):
    """Yield decompressed chunks of the file (gzip or plain); gzip errors propagate."""
    if path.name.endswith(".gz"):
        # zlib directly rather than gzip.GzipFile: same checks (CRC, length, end marker), fewer copies.
        with open(path, "rb") as f:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            while True:
                raw = f.read(CHUNK)
                if not raw:
                    break
                while raw:
                    if d.eof:
                        if not raw.strip(b"\x00"):
                            break  # padding after the last member
                        d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # gzip allows concatenated members
                    out = d.decompress(raw, OUT_MAX)  # bounded: JSON can compress 100:1
                    if out:
                        yield out
                    raw = d.unused_data if d.eof else d.unconsumed_tail
            if not d.eof:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    else:
        with open(path, "rb") as f:
            while True:
                raw = f.read(CHUNK)
                if not raw:
                    break
                yield raw


# --- engine-step markers ---------------------------------------------------------------------------
# The forms queries/step_markers.sql parses (the loader's step table), matched the same way here:
# vLLM execute_context_N(T)_generation_M(U) (token fields may be odd), the detailed
# execute_T_context_N(sq…)_generation_M(sq…), legacy execute_new_N_cached_M, SGLang step[MODE … bs=N].

_MARKER_NAME = re.compile(rb'"name"\s*:\s*"((?:execute_|step\[)[^"]*)"')
_MARKER_CAT = re.compile(rb'"cat"\s*:\s*"(gpu_user_annotation|user_annotation)"')
_PID = re.compile(rb'"pid"\s*:\s*("[^"]*"|-?\d+)')
_TID = re.compile(rb'"tid"\s*:\s*("[^"]*"|-?\d+)')
_NATIVE = re.compile(r"^execute_context_([0-9]+)\(([^)]*)\)_generation_([0-9]+)\(([^)]*)\)")
_DETAILED = re.compile(r"^execute_([0-9]+)_context_([0-9]+)\(sq([0-9]+)[^)]*\)_generation_([0-9]+)\(sq([0-9]+)[^)]*\)")
_LEGACY = re.compile(r"^execute_new_([0-9]+)_cached_([0-9]+)")
_SGLANG = re.compile(r"^step\[([A-Za-z]+)[^\]]*?bs=([0-9]+)")


def parse_step_marker(name: str) -> tuple[str, int | None, int | None] | None:
    """``(family, ctx_reqs, gen_reqs)`` of an engine-step marker (family ``vllm`` or ``sglang``); None
    when ``name`` is not one.  A decode step has ``ctx_reqs == 0 < gen_reqs``; its batch is ``gen_reqs``."""
    m = _NATIVE.match(name)
    if m:
        return "vllm", int(m.group(1)), int(m.group(3))
    m = _DETAILED.match(name)
    if m:
        return "vllm", int(m.group(2)), int(m.group(4))
    m = _LEGACY.match(name)
    if m:
        return "vllm", int(m.group(1)), int(m.group(2))
    m = _SGLANG.match(name)
    if m:
        mode, bs = m.group(1).upper(), int(m.group(2))
        if mode == "DECODE":
            return "sglang", 0, bs
        if mode in ("PREFILL", "EXTEND"):
            return "sglang", bs, 0
        return "sglang", None, None  # MIXED: neither
    return None


@dataclass
class StepScan:
    """Engine-step markers of one trace, as the loader's step table will count them: the CPU
    ``user_annotation`` markers (vLLM's over SGLang's when both), else the GPU copies of the stream that
    carries the most.  ``decode_batches`` maps a decode step's batch size (requests) to its step count."""

    source: str | None  # vllm | sglang | gpu_annotation | None (no markers)
    steps: int
    decode_batches: dict[int, int]

    @property
    def max_decode_batch(self) -> int | None:
        return max(self.decode_batches) if self.decode_batches else None


class _MarkerScan:
    """Streams the decompressed JSON once; keeps counters only (never the events)."""

    def __init__(self) -> None:
        # (kind, family or stream) -> (steps, {decode batch: steps})
        self.cpu: dict[str, tuple[int, dict[int, int]]] = {}
        self.gpu: dict[tuple, tuple[int, dict[int, int]]] = {}
        self.carry = b""

    def feed(self, chunk: bytes, final: bool = False) -> None:
        buf = self.carry + chunk if self.carry else chunk
        # cut at the last '{': every event header before it is whole (a header holds no braces)
        cut = len(buf) if final else buf.rfind(b"{")
        if cut < 0:
            self.carry = buf[-CARRY_MAX:]
            return
        self.carry = buf[cut:][:CARRY_MAX]
        for m in _MARKER_NAME.finditer(buf, 0, cut):
            lo = max(buf.rfind(b"{", 0, m.start()), buf.rfind(b"}", 0, m.start())) + 1
            hi_open, hi_close = buf.find(b"{", m.end()), buf.find(b"}", m.end())
            hi = min(x for x in (hi_open, hi_close, len(buf)) if x >= 0)
            header = buf[lo:hi]
            cat = _MARKER_CAT.search(header)
            if cat is None:
                continue
            parsed = parse_step_marker(m.group(1).decode("utf-8", "replace"))
            if parsed is None:
                continue
            family, ctx, gen = parsed
            if cat.group(1) == b"user_annotation":
                key: object = family
                table: dict = self.cpu
            else:
                pid, tid = _PID.search(header), _TID.search(header)
                key = (pid.group(1) if pid else None, tid.group(1) if tid else None)
                table = self.gpu
            n, hist = table.get(key, (0, {}))
            if ctx == 0 and gen:
                hist[gen] = hist.get(gen, 0) + 1
            table[key] = (n + 1, hist)

    def result(self) -> StepScan:
        self.feed(b"", final=True)
        if self.cpu:
            family = "vllm" if "vllm" in self.cpu else "sglang"
            n, hist = self.cpu[family]
            return StepScan(family, n, dict(sorted(hist.items())))
        if self.gpu:
            key = sorted(self.gpu, key=lambda k: (-self.gpu[k][0], str(k)))[0]
            n, hist = self.gpu[key]
            return StepScan("gpu_annotation", n, dict(sorted(hist.items())))
        return StepScan(None, 0, {})


def scan_step_markers(path: str | os.PathLike) -> StepScan:
    """The engine-step markers of a trace file, by streaming it (see :class:`StepScan`)."""
    scan = _MarkerScan()
    for chunk in _read_stream(Path(path)):
        scan.feed(chunk)
    return scan.result()


def check_trace_file(path: str | os.PathLike, scan_steps: bool = True) -> TraceCheck:
    """Stream the whole file once and say whether it is a complete trace; read rank/world size, and
    (``scan_steps``, worker traces) count the engine-step markers by decode batch size."""
    p = Path(path)
    frontend = is_frontend_name(p.name)
    name_rank = None if frontend else rank_from_name(p.name)
    try:
        size = p.stat().st_size
    except OSError as e:
        return TraceCheck(False, f"cannot stat: {e.strerror or e}", name_rank, None, frontend)
    if p.name.endswith(".tmp"):
        return TraceCheck(False, "still being written (.tmp)", name_rank, None, frontend, size)
    if not is_trace_name(p.name):
        return TraceCheck(False, "not a *.pt.trace.json[.gz] file", name_rank, None, frontend, size)
    if size == 0:
        return TraceCheck(False, "empty file", name_rank, None, frontend, size)

    head = bytearray()
    head_done = False
    tail = b""
    first = None
    last = None
    problem = None
    scan = _MarkerScan() if scan_steps and not frontend else None
    try:
        for chunk in _read_stream(p):
            if scan is not None:
                scan.feed(chunk)
            if not head_done:
                start = max(0, len(head) - 16)
                head += chunk[: HEAD_BYTES - len(head)]
                idx = head.find(b'"traceEvents"', start)
                if idx >= 0:
                    del head[idx:]  # metadata before the events is all we want from the head
                    head_done = True
                elif len(head) >= HEAD_BYTES:
                    head_done = True
            if first is None:
                s = chunk[:256].lstrip() or chunk.lstrip()
                if s:
                    first = s[:1]
            s = chunk[-256:].rstrip() or chunk.rstrip()
            if s:
                last = s[-1:]
            tail = (tail + chunk[-TAIL_BYTES:])[-TAIL_BYTES:]
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as e:
        problem = f"incomplete or corrupt gzip: {e}"
    meta = _metadata(bytes(head), tail)
    dist = meta.get("distributedInfo") or {}
    rank = dist.get("rank") if isinstance(dist.get("rank"), int) else None
    world = dist.get("world_size") if isinstance(dist.get("world_size"), int) else None
    if rank is None and not frontend:
        rank = name_rank
    if problem is None:
        if first != b"{":
            problem = "not a JSON object (does not start with '{')"
        elif last != b"}":
            problem = "JSON does not close (file cut short)"
    steps = scan.result() if scan is not None and problem is None else None
    return TraceCheck(problem is None, problem, rank, world, frontend, size, meta, steps)


def _metadata(head: bytes, tail: bytes) -> dict:
    """Top-level metadata found before ``traceEvents`` or after it (the tail window)."""
    meta: dict = {}
    before = head.split(b'"traceEvents"', 1)[0]
    for region in (before, tail):
        if "distributedInfo" not in meta:
            d = _extract_object(region, _DIST_KEY)
            if d is not None:
                meta["distributedInfo"] = d
        for key in ("vllm_version", "baseTimeNanoseconds", "schemaVersion"):
            if key not in meta:
                v = _extract_scalar(region, key)
                if v is not None:
                    meta[key] = v
    return meta


# --- the trace directory --------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """A file's size and mtime when the directory was looked at (a change means: still being written)."""

    size: int
    mtime_ns: int


def snapshot(trace_dir: str | os.PathLike) -> dict[str, Seen]:
    """Names (with size/mtime) of every file directly in the trace dir, trace or not."""
    out: dict[str, Seen] = {}
    try:
        with os.scandir(os.fspath(trace_dir)) as it:
            for e in it:
                try:
                    if e.is_file():
                        st = e.stat()
                        out[str(e.name)] = Seen(st.st_size, st.st_mtime_ns)
                except OSError:
                    continue
    except FileNotFoundError:
        pass
    return out


def snapshot_one(path: str | os.PathLike) -> Seen | None:
    """:class:`Seen` of one file; None when it is gone."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return Seen(st.st_size, st.st_mtime_ns)


def new_files(before: dict[str, Seen], now: dict[str, Seen], prefix: str | None = None) -> list[str]:
    """Files present now that were not there before (optionally only those starting with ``prefix``)."""
    names = [n for n in now if n not in before]
    if prefix:
        names = [n for n in names if n.startswith(prefix)]
    return sorted(names)


def copy_with_hash(src: str | os.PathLike, dst: str | os.PathLike) -> tuple[int, str]:
    """Copy in chunks to ``dst`` (via a temp name, then rename); return (bytes, sha256 hex)."""
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".part")
    h = hashlib.sha256()
    n = 0
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while True:
            b = fi.read(CHUNK)
            if not b:
                break
            h.update(b)
            fo.write(b)
            n += len(b)
        fo.flush()
        os.fsync(fo.fileno())
    shutil.copystat(src, tmp)
    os.replace(tmp, dst)
    return n, h.hexdigest()


def sha256_file(path: str | os.PathLike) -> str:
    """The sha256 hex digest of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(CHUNK)
            if not b:
                break
            h.update(b)
    return h.hexdigest()
