"""What a trace file says about itself, as the loader stores it: rank, base time, device, metadata, and the
warnings about the events it did not store."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from k25trace.errors import TraceError
from k25trace.ingest.columns import _Columns, _int_or_none
from k25trace.ingest.events import _dumps

TABLE_WORDS = {
    "gpu": ("GPU activity", "GPU activities"),
    "launch": ("launch", "launches"),
    "ann": ("annotation", "annotations"),
    "ops": ("CPU op", "CPU ops"),
    "py": ("python function", "python functions"),
}


def base_time(meta: dict[str, Any], path: Path) -> int:
    """The file's baseTimeNanoseconds (0 when absent); one that is no time in ns fails the file."""
    raw_base = meta.get("baseTimeNanoseconds")
    base = _int_or_none(raw_base)
    if raw_base is not None and (base is None or not 0 <= base < (1 << 62)):
        raise TraceError(str(path), f"baseTimeNanoseconds is {str(raw_base)[:40]}: not a time in ns")
    return base or 0


def device_name(devices: list[Any] | None, main_device: int | None, rank: int) -> str | None:
    """The name of the GPU most activities ran on, from deviceProperties (the rank's entry if no activity says)."""
    if not devices:
        return None
    dev_index = main_device if main_device is not None else rank
    match = [d for d in devices if isinstance(d, dict) and d.get("id") == dev_index]
    name = (match[0] if match else devices[0] if isinstance(devices[0], dict) else {}).get("name") or None
    if name is not None and not isinstance(name, str):
        name = _dumps(name)
    return name


def metadata_text(meta: dict[str, Any], shown: str, warnings: list[str]) -> str:
    """The file's other top-level keys as JSON text; keys nested too deep to write are dropped (with a warning)."""
    known_keys = {"traceEvents", "distributedInfo", "deviceProperties", "baseTimeNanoseconds"}
    metadata = {k: v for k, v in meta.items() if k not in known_keys}
    text = _dumps(metadata)
    if text is None:
        kept = {k: v for k, v in metadata.items() if _dumps(v) is not None}
        dropped = sorted(set(metadata) - set(kept))
        warnings.append(f"{shown}: metadata not stored (nested too deep to write as JSON): {', '.join(dropped)[:200]}")
        text = _dumps(kept) or "{}"
    return text


def skipped_counts(cols: _Columns) -> dict[str, int]:
    """traces.skipped: events skipped per category, plus the rows dropped as bad time, negative or duplicate."""
    skipped = dict(cols.skipped)
    for label, prefix in (
        ("(bad time)", "bad_time:"),
        ("(negative duration)", "negative_dur:"),
        ("(duplicate)", "duplicate:"),
    ):
        n = sum(v for k, v in cols.problems.items() if k.startswith(prefix))
        if n:
            skipped[label] = n
    return skipped


def span_text(ns: int) -> str:
    """A long time span as hours, or days past one."""
    seconds = ns / 1e9
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    return f"{seconds / 3_600:.1f} h"


def problem_warnings(shown: str, problems: Counter[str], gpu_n: int, frontend: bool) -> list[str]:
    """One line per kind of event the loader did not store, with counts per table (most first; ties in the order of
    the tables' keys, whichever step counted them first)."""
    out = []

    def per_table(prefix: str) -> tuple[int, str]:
        parts = {k[len(prefix) :]: v for k, v in problems.items() if k.startswith(prefix) and v}
        text = ", ".join(
            f"{v:,} {TABLE_WORDS.get(k, (k, k))[v != 1]}"
            for k, v in sorted(parts.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        return sum(parts.values()), text

    n, text = per_table("bad_time:")
    if n:
        out.append(
            f"{shown}: skipped {n:,} event(s) whose ts or dur is no time (NaN, Infinity, or beyond 64-bit ns, "
            f"e.g. 1e16 µs): {text}"
        )
    n, text = per_table("negative_dur:")
    if n:
        out.append(f"{shown}: skipped {n:,} event(s) with a negative duration: {text}")
    n, text = per_table("duplicate:")
    if n:
        out.append(
            f"{shown}: dropped {n:,} exact duplicate event(s) (every stored field equal to an earlier event's; "
            f"the first is kept): {text}"
        )
    no_ts = problems.get("gpu_no_ts", 0)
    not_x = problems.get("gpu_not_X", 0)
    bad_gpu = problems.get("bad_time:gpu", 0) + problems.get("negative_dur:gpu", 0)
    if gpu_n == 0:
        reasons = []
        if no_ts:
            reasons.append(f"its {no_ts:,} kernel/memcpy/memset event(s) have no ts")
        if not_x:
            reasons.append(f"{not_x:,} are not complete ('X') events")
        if bad_gpu:
            reasons.append(f"{bad_gpu:,} have no usable time (above)")
        if reasons:
            out.append(f"{shown}: no GPU events stored: {'; '.join(reasons)}; loaded its CPU events")
        else:
            out.append(
                f"{shown}: no GPU events in the file (CPU-only trace{', front end' if frontend else ''}); "
                "loaded its CPU events"
            )
    elif no_ts or not_x:
        what = " and ".join(
            x for x in (f"{no_ts:,} without ts" if no_ts else "", f"{not_x:,} not 'X'" if not_x else "") if x
        )
        out.append(f"{shown}: skipped GPU events {what}")
    return out


RANK_NAME_RE = re.compile(r"(?:^|[^A-Za-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def rank_of(dist: dict[str, Any] | None, file_name: str) -> tuple[int, int | None, str]:
    """(rank, world size, where the rank came from): distributedInfo; else vLLM's file name
    (``dp0_pp0_tp1_dcp0_ep1_rank1.<ns>.pt.trace.json.gz``, older ``…rank1…``), world size unknown; else rank 0 of 1
    (a single-process trace)."""
    world = _int_or_none(dist.get("world_size")) if dist else None
    rank = _int_or_none(dist.get("rank")) if dist else None
    if rank is not None and 0 <= rank < (1 << 31):
        return rank, world, "distributedInfo"
    found = RANK_NAME_RE.findall(file_name)
    if found and int(found[-1]) < (1 << 31):
        return int(found[-1]), world, "file_name"
    return 0, world if world is not None else 1, "default"
