"""Device peaks for the speed-of-light views: ``queries/device_peaks.csv`` (documented in its header), matched per
trace from the device name and its ``deviceProperties`` entry; a ``--peaks FILE`` with the same columns is tried
first."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from k25trace.csvfile import read_commented_csv
from k25trace.db import queries_dir, query_frame
from k25trace.errors import K25Error

PEAK_COLUMNS = (
    "device",
    "name_pattern",
    "compute",
    "sms",
    "memory_gb",
    "bf16_tflops",
    "fp8_tflops",
    "int8_tops",
    "fp4_tflops",
    "tf32_tflops",
    "fp32_tflops",
    "hbm_gbps",
    "interconnect_gbps",
    "interconnect",
    "source",
)
NUMERIC_PEAKS = (
    "bf16_tflops",
    "fp8_tflops",
    "int8_tops",
    "fp4_tflops",
    "tf32_tflops",
    "fp32_tflops",
    "hbm_gbps",
    "interconnect_gbps",
)
#: which peak column a compute dtype runs at (W4A16/W8A16 dequantize to 16 bit: bf16)
COMPUTE_PEAK = {
    "bf16": "bf16_tflops",
    "fp16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "int8": "int8_tops",
    "fp4": "fp4_tflops",
    "tf32": "tf32_tflops",
    "fp32": "fp32_tflops",
}


@dataclass(frozen=True)
class Peaks:
    """One row of a peaks file: how to recognise the device, and its dense datasheet peaks."""

    device: str
    name_pattern: str | None
    compute: str | None
    sms: int | None
    memory_gb: float | None
    values: dict[str, float | None]
    interconnect: str
    source: str
    origin: str  # 'builtin' or 'user:<file>'

    def peak(self, column: str) -> float | None:
        return self.values.get(column)

    def matches(self, name: str | None, props: dict[str, Any] | None) -> bool:
        props = props or {}
        if self.name_pattern and not re.search(self.name_pattern, name or props.get("name") or "", re.IGNORECASE):
            return False
        if self.compute:
            have = f"{props.get('computeMajor')}.{props.get('computeMinor')}"
            if have != self.compute:
                return False
        if self.sms is not None and props.get("numSms") != self.sms:
            return False
        if self.memory_gb is not None:
            mem = props.get("totalGlobalMem")
            if not isinstance(mem, (int, float)) or abs(mem / 1e9 - self.memory_gb) > 0.1 * self.memory_gb:
                return False
        return bool(self.name_pattern or self.compute or self.sms is not None or self.memory_gb is not None)


def builtin_peaks_path() -> Path:
    return queries_dir() / "device_peaks.csv"


def read_peaks(path: Path, *, origin: str | None = None) -> list[Peaks]:
    """Parse a peaks CSV (``#`` lines are comments); errors name the file and line."""
    origin = origin or f"user:{path}"
    table = read_commented_csv(
        path,
        columns=PEAK_COLUMNS,
        required="device",
        unreadable="cannot read the peaks file",
        no_header="a peaks file needs a header line with the columns",
        noun="peaks",
    )
    out = []
    for line in table.rows:
        row = line.fields
        where = f"{path}: row {line.number} ({row.get('device') or '?'})"
        if line.extra:
            raise K25Error(f"{where}: more fields than columns")

        def num(col: str, row: dict[str, str | None] = row, where: str = where) -> float | None:  # bound now
            value = (row.get(col) or "").strip()
            if not value:
                return None
            try:
                number = float(value)
            except ValueError:
                raise K25Error(f"{where}: {col} {value!r} is not a number") from None
            if not math.isfinite(number) or number <= 0:
                raise K25Error(f"{where}: {col} {value!r} must be a positive number")
            return number

        pattern = (row.get("name_pattern") or "").strip() or None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise K25Error(f"{where}: bad name_pattern {pattern!r}: {exc}") from None
        compute = (row.get("compute") or "").strip() or None
        if compute and not re.fullmatch(r"\d+\.\d+", compute):
            raise K25Error(f"{where}: compute {compute!r} must read major.minor (e.g. 9.0)")
        sms = num("sms")
        peaks = Peaks(
            device=(row.get("device") or "").strip(),
            name_pattern=pattern,
            compute=compute,
            sms=int(sms) if sms is not None else None,
            memory_gb=num("memory_gb"),
            values={c: num(c) for c in NUMERIC_PEAKS},
            interconnect=(row.get("interconnect") or "").strip(),
            source=(row.get("source") or "").strip(),
            origin=origin,
        )
        if not peaks.device:
            raise K25Error(f"{where}: the device column is empty")
        if not (pattern or compute or sms is not None or peaks.memory_gb is not None):
            raise K25Error(f"{where}: give at least one of name_pattern, compute, sms, memory_gb")
        out.append(peaks)
    return out


def load_peaks(user_file: Path | None = None) -> list[Peaks]:
    """The peaks rows in matching order: the user's file (if any), then the built-in ``queries/device_peaks.csv``."""
    rows = read_peaks(user_file) if user_file is not None else []
    return rows + read_peaks(builtin_peaks_path(), origin="builtin")


def match_peaks(rows: Sequence[Peaks], name: str | None, props: dict[str, Any] | None) -> Peaks | None:
    """The first row that matches the device, or None."""
    for row in rows:
        if row.matches(name, props):
            return row
    return None


def device_props(device_properties: str | None, device: int | None) -> dict[str, Any] | None:
    """The ``deviceProperties`` entry of the device a trace's kernels ran on (else the first entry)."""
    if not device_properties:
        return None
    try:
        entries = json.loads(device_properties)
    except ValueError:
        return None
    if isinstance(entries, dict):
        entries = [entries]
    if not isinstance(entries, list) or not entries:
        return None
    for entry in entries:
        if isinstance(entry, dict) and device is not None and entry.get("id") == device:
            return entry
    return entries[0] if isinstance(entries[0], dict) else None


def run_devices(con: duckdb.DuckDBPyConnection, peaks: Sequence[Peaks]) -> dict[tuple[str, str | None], Peaks | None]:
    """Per (run_id, device_name): the matched peaks row (None when no row matches)."""
    out: dict[tuple[str, str | None], Peaks | None] = {}
    for r in query_frame(con, "sol_devices").iter_rows(named=True):
        key = (r["run_id"], r["device_name"])
        if out.get(key) is None:
            out[key] = match_peaks(peaks, r["device_name"], device_props(r["device_properties"], r["device"]))
    return out
