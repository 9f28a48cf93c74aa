"""Event structs and decoding: msgspec structs that keep only the fields we store, the tagged-union fast
path that drops whole categories in C, and the forgiving fallbacks (generic structs, orjson) with exact error
positions."""

from __future__ import annotations

import bisect
import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar, Literal, Union

import msgspec
import orjson

from k25trace.errors import TraceError

GPU_CATS = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
}
LAUNCH_CATS = {"cuda_runtime", "cuda_driver", "Runtime", "Driver"}
ANNOTATION_CATS = {"user_annotation", "gpu_user_annotation"}
KNOWN_SKIPPED = {
    "ac2g",
    "fwdbwd",
    "Trace",
    "overhead",
    "cpu_instant_event",
    "python_function",
    "Python",
    "cuda_profiler_range",
    "gpu_mem",
    "cpu_mem",
    "memory",
    "Memory",
    "mtia_ccp_events",
    "privateuse1_runtime",
    "privateuse1_driver",
    "cuda_sync",
    "Sync",
    "Activity Buffer Request",
    "Overhead",
}

# ---------------------------------------------------------------------------------------------------------------
# Event structs: only the fields we keep; msgspec skips everything else without building objects.


class Args(msgspec.Struct, omit_defaults=True):
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    stream: int | None = None
    device: int | None = None
    grid: list[int] | None = None
    block: list[int] | None = None
    registers: int | None = msgspec.field(name="registers per thread", default=None)
    shared_memory: int | None = msgspec.field(name="shared memory", default=None)
    blocks_per_sm: float | None = msgspec.field(name="blocks per SM", default=None)
    warps_per_sm: float | None = msgspec.field(name="warps per SM", default=None)
    occupancy: float | None = msgspec.field(name="est. achieved occupancy %", default=None)
    bytes: Any = None  # some traces write it as a string
    cbid: int | None = None
    collective_name: Any = msgspec.field(name="Collective name", default=None)
    in_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    out_nelems: Any = msgspec.field(name="Out msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    dtype: Any = None
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    pg_ranks: Any = msgspec.field(name="Process Group Ranks", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))  # raw JSON text, b"" if absent


class Event(msgspec.Struct):
    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float | None = None  # ints stay ints: old traces carry absolute µs beyond float64's exact range
    dur: int | float | None = None
    args: Args | None = None


_EMPTY_ARGS = Args()
_DECODER = msgspec.json.Decoder(list[Event])


# Fast path: a tagged union on "cat". Categories we don't store decode into empty structs, so their keys are
# skipped in C without building strings (python_function events are 50-90 % of a default vLLM trace). A chunk
# with a category outside this list, an event without "cat", or a kept event that is not a timed complete event
# falls back to the generic Event decoder.


class _Tagged(msgspec.Struct, tag_field="cat"):
    pass


class _LaunchArgs(msgspec.Struct):
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    cbid: int | None = None


class _OpArgs(msgspec.Struct):
    external_id: int | None = msgspec.field(name="External id", default=None)
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw(b""))


class _Timed(_Tagged, kw_only=True):
    """A kept event: a complete event ("X", or no phase) with a time. Anything else (another phase, no ts, a null
    ts) fails validation in C, and the chunk takes the generic decoder, which counts such events as skipped."""

    ph: Literal["X"] | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: int | float
    dur: int | float | None = None


class _Gpu(_Timed):
    args: Args | None = None


class _Launch(_Timed):
    args: _LaunchArgs | None = None


class _Op(_Timed):
    args: _OpArgs | None = None


def _tagged(base: type, cat: str) -> type:
    return msgspec.defstruct(
        f"_T_{cat}", [], bases=(base,), tag=cat, namespace={"cat": cat, "__annotations__": {"cat": ClassVar[str]}}
    )


_GPU_TYPES = [_tagged(_Gpu, c) for c in ("kernel", "gpu_memcpy", "gpu_memset")]
_LAUNCH_TYPES = [_tagged(_Launch, c) for c in ("cuda_runtime", "cuda_driver")]
_OP_TYPES = [_tagged(_Op, "cpu_op")]
_ANN_TYPES = [_tagged(_Launch, c) for c in ("user_annotation", "gpu_user_annotation")]
_SKIP_CATS = ("ac2g", "fwdbwd", "Trace", "overhead", "cpu_instant_event", "cuda_sync", "gpu_mem", "cpu_mem")
_SKIP_TYPES = [_tagged(_Tagged, c) for c in _SKIP_CATS]
_PY_TYPES = (_tagged(_Tagged, "python_function"), _tagged(_Timed, "python_function"))  # dropped / kept
_SKIP_TYPE_SET = frozenset(_SKIP_TYPES) | {_PY_TYPES[0]}
_TAGGED_KEPT = tuple(_GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES) + (
    _PY_TYPES[1],
)  # kept python: with keep_python
_KEEP_TYPE = {
    t: t not in _SKIP_TYPE_SET
    for t in _GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + list(_PY_TYPES)
}.__getitem__
_FAST_DECODER = msgspec.json.Decoder(
    list[Union[tuple(_GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + [_PY_TYPES[0]])]]  # type: ignore[misc]
)
_FAST_DECODER_PY = msgspec.json.Decoder(
    list[Union[tuple(_GPU_TYPES + _LAUNCH_TYPES + _OP_TYPES + _ANN_TYPES + _SKIP_TYPES + [_PY_TYPES[1]])]]  # type: ignore[misc]
)


class _GuessedCut(Exception):
    """A chunk cut at a guessed event boundary did not decode: cut it again, exactly."""


_BYTE_RE = re.compile(r"\s*\(byte (\d+)\)")
_MAX_DEPTH = 1024  # orjson's limit; msgspec stops at Python's recursion limit (~1,000 minus the stack in use)


def _byte_of(exc: BaseException) -> int | None:
    m = _BYTE_RE.search(str(exc))
    return int(m.group(1)) if m else None


def _reason(exc: BaseException) -> str:
    return _BYTE_RE.sub("", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)


def _decode_chunk(
    path: Path,
    data: bytes | bytearray | memoryview,
    keep_python: bool = False,
    where: tuple[int, int, list[int]] | None = None,
) -> list[Any]:
    """Decode ``[event, …]`` (as the splitter returns it). ``where`` is (events before, byte offset, event
    starts) for an exactly cut chunk, None for a guessed cut (any failure then raises :class:`_GuessedCut`)."""
    try:
        return (_FAST_DECODER_PY if keep_python else _FAST_DECODER).decode(data)
    except msgspec.ValidationError:
        pass  # a category outside the tagged union, or an event without one: generic structs
    except (msgspec.DecodeError, RecursionError) as exc:
        return _decode_odd(path, data, where, exc)
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        pass  # a field of an unexpected type somewhere in this chunk: take the slow, forgiving path
    except (msgspec.DecodeError, RecursionError) as exc:
        return _decode_odd(path, data, where, exc)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return _decode_odd(path, data, where, exc)
    return [_loose_event(e) for e in raw]


def _decode_odd(path: Path, data: Any, where: tuple[int, int, list[int]] | None, exc: BaseException) -> list[Any]:
    """A chunk msgspec cannot decode: a wrong guessed cut, nesting deeper than msgspec's recursion limit (orjson
    goes to 1,024), NaN/Infinity (not JSON, but Python writes them; the stdlib reads them and the events are then
    skipped for their times), or invalid JSON, reported with the event and byte where it goes wrong."""
    if where is None:
        raise _GuessedCut() from exc
    raw: Any = None
    deep = isinstance(exc, RecursionError)
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc2:
        deep = deep or "depth" in str(exc2) or "recursion" in str(exc2)
        try:
            raw = json.loads(bytes(data))
        except (ValueError, RecursionError):
            pass
        if raw is None:
            events_before, offset, starts = where
            if deep:
                pos = _char_to_byte(data, exc2.pos)
                raise TraceError(
                    str(path),
                    f"an event nested deeper than {_MAX_DEPTH:,} levels "
                    f"{_at(events_before, offset, starts, pos)}: not loaded",
                ) from None
            found = _byte_of(exc) if not isinstance(exc, RecursionError) else None
            pos = found if found is not None else _char_to_byte(data, exc2.pos)
            reason = _reason(exc) if isinstance(exc, msgspec.DecodeError) else str(exc2).split(":")[0]
            raise TraceError(
                str(path), f"invalid JSON in traceEvents {_at(events_before, offset, starts, pos)}: {reason}"
            ) from None
    if not isinstance(raw, list):
        raise TraceError(str(path), "invalid JSON in traceEvents")
    return [_loose_event(e) for e in raw]


def _char_to_byte(data: Any, pos: int) -> int:
    """Byte position of character ``pos`` of UTF-8 ``data``."""
    return len(bytes(data).decode("utf-8", "replace")[:pos].encode("utf-8"))


def _at(events_before: int, offset: int, starts: list[int], pos: int) -> str:
    index = max(0, bisect.bisect_right(starts, pos) - 1)
    return f"at event {events_before + index:,} (byte {offset + pos - 1:,} of the decompressed JSON)"


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _num(v: Any, typ: type) -> Any:
    if v is None or isinstance(v, bool):
        return None
    try:
        if isinstance(v, str):
            v = float(v) if typ is int else typ(v)
        if typ is int:
            if isinstance(v, float) and not math.isfinite(v):
                return None
            v = int(v)
            return v if _INT64[0] <= v <= _INT64[1] else None
        if isinstance(v, (int, float)):
            return typ(v)
    except (ValueError, OverflowError):
        return None
    return None


def _time(v: Any) -> int | float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return v
    if isinstance(v, str):
        try:
            return int(v) if v.lstrip("-").isdigit() else float(v)
        except ValueError:
            return None
    return None


def _dumps(v: Any) -> str | None:
    """JSON text of a decoded value; None if it cannot be written (orjson stops at 255 levels and 64-bit ints)."""
    try:
        return orjson.dumps(v).decode()
    except TypeError:
        try:
            return json.dumps(v, ensure_ascii=False)
        except (ValueError, TypeError, RecursionError):
            return None


def _loose_event(raw: Any) -> Event:
    """Build an Event from a dict of arbitrary types (fields of the wrong type become NULL)."""
    if not isinstance(raw, dict):
        return Event()
    a = raw.get("args")
    args = None
    if isinstance(a, dict):
        dims = _dumps(a["Input Dims"]) if "Input Dims" in a else None
        args = Args(
            correlation=_num(a.get("correlation"), int),
            external_id=_num(a.get("External id"), int),
            stream=_num(a.get("stream"), int),
            device=_num(a.get("device"), int),
            grid=a.get("grid") if isinstance(a.get("grid"), list) else None,
            block=a.get("block") if isinstance(a.get("block"), list) else None,
            registers=_num(a.get("registers per thread"), int),
            shared_memory=_num(a.get("shared memory"), int),
            blocks_per_sm=_num(a.get("blocks per SM"), float),
            warps_per_sm=_num(a.get("warps per SM"), float),
            occupancy=_num(a.get("est. achieved occupancy %"), float),
            bytes=_num(a.get("bytes"), int),
            cbid=_num(a.get("cbid"), int),
            collective_name=a.get("Collective name"),
            in_nelems=a.get("In msg nelems"),
            out_nelems=a.get("Out msg nelems"),
            group_size=a.get("Group size"),
            dtype=a.get("dtype"),
            pg_name=a.get("Process Group Name"),
            pg_ranks=a.get("Process Group Ranks"),
            input_dims=msgspec.Raw(dims.encode()) if dims is not None else msgspec.Raw(b""),
        )
    pid, tid = raw.get("pid"), raw.get("tid")
    return Event(
        ph=raw.get("ph") if isinstance(raw.get("ph"), str) else None,
        cat=raw.get("cat") if isinstance(raw.get("cat"), str) else None,
        name=raw.get("name") if isinstance(raw.get("name"), str) else None,
        pid=pid if isinstance(pid, (int, str)) and not isinstance(pid, bool) else None,
        tid=tid if isinstance(tid, (int, str)) and not isinstance(tid, bool) else None,
        ts=_time(raw.get("ts")),
        dur=_time(raw.get("dur")),
        args=args,
    )
