"""Shared test helpers: paths of the real test traces and an independent reading of their JSON."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
TRACES = DATA / "traces"  # the real traces only the tests use (HTA's)
SAMPLES = Path(__file__).resolve().parents[1] / "k25trace" / "samples"  # the real traces the package ships (demo)

B200 = SAMPLES / "vllm-b200-tp8-rank0-eager" / "eager_trace.json.gz"
MI300X_FULL = SAMPLES / "vllm-mi300x-decode-fullgraph" / "graph_execution.json.gz"
MI300X_PIECEWISE = SAMPLES / "vllm-mi300x-prefilldecode-piecewise" / "graph_execution.json.gz"
SGLANG = SAMPLES / "sglang-mi300x-decode" / "sglang_Qwen3-8B_decode.json.gz"
HTA_RANK0 = TRACES / "hta-2rank-sendrecv" / "sampled_rank-0.json.gz"
HTA_RANK1 = TRACES / "hta-2rank-sendrecv" / "sampled_rank-1.json.gz"
HTA_NCCL = TRACES / "hta-a100-nccl-metadata" / "nccl_data.json.gz"
ALL_REAL = [B200, MI300X_FULL, MI300X_PIECEWISE, SGLANG, HTA_RANK0, HTA_RANK1, HTA_NCCL]


def read_exact(path: Path) -> dict[str, Any]:
    """The trace with numbers parsed as Decimal (stdlib json), independent of the loader's parser."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh, parse_float=Decimal)


def expected_counts(trace: dict[str, Any]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for event in trace["traceEvents"]:
        if event.get("ph") != "X" or "ts" not in event:
            continue
        counts[event.get("cat")] += 1
    return counts


def expected_ns(trace: dict[str, Any], value: Any) -> int:
    """Exact integer ns of a µs value: Decimal arithmetic, no float anywhere."""
    return int((Decimal(value) * 1000).to_integral_value())
