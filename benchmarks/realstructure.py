"""Real-structure benchmark input: real torch.profiler traces tiled in time to a full-size rank file.

    python3 benchmarks/realstructure.py OUT_DIR [--mix dense|b200] [--gz-mb 80] [--ranks 8]

The synthetic generator (``k25trace synth``) writes few, large events (437 bytes each); real vLLM traces have
many more, smaller ones (``cpu_op``, ``cuda_runtime``, ``python_function``, ``ac2g`` flows) and that is what
load speed depends on. This script repeats real traces back to back until a rank file reaches ``--gz-mb`` of
gzip, shifting each copy's ``ts`` past the previous one and its correlation / ``External id`` values past the
previous copy's largest, so every copy pairs its own launches and kernels. The events themselves (names, args,
stacks, field order) are the recorded ones, written compactly by orjson (Kineto's spaces after ``:`` and
``,`` are not kept: fewer bytes per event than the original, the per-event work is the same).

Mixes (sources are the real traces in ``../shared/traces``, or ``tests/data`` / ``k25trace/samples`` copies):

* ``b200``: the vLLM B200 TP8 rank 0, eager, with Python stacks (578 bytes/event, 62 % ``python_function``).
* ``dense``: that rank + six of the vLLM MI300X piecewise-graph trace (python stacks, graph launches) + two of the
  A100 trace with NCCL metadata (CPU-op and runtime heavy): ~276 bytes/event, close to the 239 bytes/event of
  the real H100 TP4 vLLM rank the load-speed issue was measured on.

Ranks differ in ``distributedInfo.rank``, ``baseTimeNanoseconds`` (3 ms apart) and nothing else. Output:
``OUT_DIR/rank<r>.<mix>.pt.trace.json.gz`` (a header gzip member per rank, then the body member all ranks share,
compressed once: a gzip file may hold several members and every reader decompresses them as one stream);
progress on stderr; the file list and sizes on stdout.
"""

from __future__ import annotations

import argparse
import gzip
import sys
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
B200 = "vllm-b200-tp8-rank0-eager/eager_trace.json.gz"
PIECEWISE = "vllm-mi300x-prefilldecode-piecewise/graph_execution.json.gz"
A100 = "hta-a100-nccl-metadata/nccl_data.json.gz"
MIXES = {"b200": [(B200, 1)], "dense": [(B200, 1), (PIECEWISE, 6), (A100, 2)]}


def _source(rel: str) -> Path:
    for base in (SHARED, ROOT / "tests" / "data" / "traces", ROOT / "k25trace" / "samples"):
        for cand in (base / rel, *base.glob(f"*/{Path(rel).name}")):
            if cand.is_file():
                return cand
    raise SystemExit(f"source trace {rel} not found under {SHARED} or the repository's copies")


class _Part:
    """One source trace, ready to be re-emitted with shifted times and ids."""

    def __init__(self, path: Path) -> None:
        doc = orjson.loads(gzip.open(path).read())
        self.meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        # metadata events (ph "M": process and thread names, no "cat") come once, at the end of a real file
        self.tail = [e for e in doc["traceEvents"] if "cat" not in e]
        self.events = [e for e in doc["traceEvents"] if "cat" in e]
        self.base_ns = int(self.meta.get("baseTimeNanoseconds") or 0)
        timed = [e for e in self.events if isinstance(e.get("ts"), (int, float))]
        self.t0 = min(e["ts"] for e in timed)
        self.t1 = max(e["ts"] + (e.get("dur") or 0) for e in timed)
        ids = [0]
        for e in self.events:
            a = e.get("args")
            if isinstance(a, dict):
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        ids.append(a[key])
            if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                ids.append(e["id"])
        self.max_id = max(ids)

    def emit(self, start_us: float, id_shift: int) -> bytes:
        """The events as JSON text (no brackets), times moved to start at ``start_us`` (relative to the output's
        base), ids shifted by ``id_shift``."""
        shift = start_us - self.t0
        out = []
        for e in self.events:
            e = dict(e)
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] = round(e["ts"] + shift, 3)
            a = e.get("args")
            if isinstance(a, dict) and ("correlation" in a or "External id" in a):
                a = dict(a)
                for key in ("correlation", "External id"):
                    if isinstance(a.get(key), int):
                        a[key] += id_shift
                e["args"] = a
            if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
                e["id"] += id_shift
            out.append(orjson.dumps(e))
        return b",\n".join(out)


def write_body(out: Path, parts: list[tuple[_Part, int]], gz_bytes: int) -> tuple[int, int]:
    """The events, tiled until the gzip output reaches ``gz_bytes``, then the metadata events and the end of the
    document, as one gzip member; returns (events, JSON bytes)."""
    events = raw = 0
    t = 0.0
    id_shift = 0
    # zlib level 6, as torch.profiler / vLLM write their .json.gz: the same events per MB of gzip as a real file
    with open(out, "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", compresslevel=6) as gz:
        sep = b""
        while fh.tell() < gz_bytes:
            for part, copies in parts:
                for _ in range(copies):
                    text = part.emit(t, id_shift)
                    gz.write(sep + text)
                    raw += len(sep) + len(text)
                    sep = b",\n"
                    events += len(part.events)
                    t += (part.t1 - part.t0) + 50.0  # 50 µs between copies
                    id_shift += part.max_id + 1
            print(f"  {fh.tell() / 1e6:.1f} MB gz, {events:,} events", file=sys.stderr)
        seen: set[bytes] = set()
        for part, _ in parts:
            for e in part.tail:
                text = orjson.dumps(e)
                if text not in seen:
                    seen.add(text)
                    gz.write(sep + text)
                    raw += len(sep) + len(text)
                    events += 1
        gz.write(b"\n]}")
        raw += 3
    return events, raw


def write_rank(out: Path, body: Path, parts: list[tuple[_Part, int]], rank: int, world: int) -> int:
    """A rank file: its own header (distributedInfo.rank, baseTimeNanoseconds) as one gzip member, then the shared
    body member (a gzip file may hold several members; every reader decompresses them as one stream). Returns the
    header's JSON bytes."""
    meta = dict(parts[0][0].meta)
    meta["distributedInfo"] = {**(meta.get("distributedInfo") or {}), "rank": rank, "world_size": world}
    meta["baseTimeNanoseconds"] = parts[0][0].base_ns + rank * 3_000_000
    head = orjson.dumps(meta)[:-1] + b', "traceEvents": [\n'
    with open(out, "wb") as fh:
        fh.write(gzip.compress(head, compresslevel=6))
        with open(body, "rb") as src:
            while block := src.read(16 << 20):
                fh.write(block)
    return len(head)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--mix", choices=sorted(MIXES), default="dense")
    parser.add_argument("--gz-mb", type=float, default=80.0)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    parts = [(_Part(_source(rel)), copies) for rel, copies in MIXES[args.mix]]
    body = args.out / f".body.{args.mix}.{args.gz_mb:g}.gz"
    events, raw = 0, 0
    for rank in range(args.ranks):
        path = args.out / f"rank{rank}.{args.mix}.pt.trace.json.gz"
        if path.exists():
            print(f"{path} exists, kept", file=sys.stderr)
            continue
        if not body.exists():
            tmp_body = body.with_suffix(".tmp")
            events, raw = write_body(tmp_body, parts, int(args.gz_mb * 1e6))
            tmp_body.rename(body)
        tmp = path.with_suffix(".tmp")
        head = write_rank(tmp, body, parts, rank, args.ranks)
        tmp.rename(path)
        shown = (
            f"\t{(raw + head) / 1e6:.0f} MB JSON\t{events} events\t{(raw + head) / events:.0f} bytes/event"
            if events
            else ""
        )
        print(f"{path}\t{path.stat().st_size / 1e6:.1f} MB gz{shown}")


if __name__ == "__main__":
    main()
