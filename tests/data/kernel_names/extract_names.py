"""Write the distinct GPU activity names of a Kineto trace, with their calls and summed durations, as a TSV.

    python3 tests/data/kernel_names/extract_names.py TRACE.json[.gz] SOURCE > OUT.tsv

One row per (kind, Collective name, name): kind from the event category (kernel / gpu_memcpy / gpu_memset), calls,
dur_ns = the sum of the events' ``dur`` (µs, read as exact decimals) × 1000, and the category column left for a
person to fill in by reading the name. Independent of k25trace (only the standard library).
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from decimal import Decimal

KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}


def main(path: str, source: str) -> None:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    agg: dict[tuple[str, str, str], list] = defaultdict(lambda: [0, Decimal(0)])
    for e in events:
        kind = KINDS.get(e.get("cat"))
        if kind is None or "dur" not in e:
            continue
        coll = (e.get("args") or {}).get("Collective name") or ""
        row = agg[(kind, coll, e["name"])]
        row[0] += 1
        row[1] += Decimal(e["dur"])
    out = sys.stdout
    out.write("source\tkind\tcollective_name\tcategory\tcalls\tdur_ns\tname\n")
    for (kind, coll, name), (calls, dur_us) in sorted(agg.items(), key=lambda kv: (-kv[1][1], kv[0])):
        out.write(f"{source}\t{kind}\t{coll}\t?\t{calls}\t{int(dur_us * 1000)}\t{name}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
