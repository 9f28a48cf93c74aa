"""What the findings tests check against, read from the raw trace JSON without k25trace (stdlib json, Decimal):
the all-reduce wait per decode batch size of a multi-rank folder, the rank that caused it, and whether a trace
launched CUDA graphs."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from helpers import read_exact

_BATCH = re.compile(r"generation_(\d+)\(")


def _allreduce_durations(folder: Path) -> dict[int, list[tuple[int, list[Decimal]]]]:
    """Per rank, per execute_ step in time order: (batch size, the durations of its all-reduce kernels in µs). A
    kernel belongs to the execute_ marker during which the host launched it (correlation → the runtime call), so an
    all-reduce launched after the last marker belongs to no step."""
    per_rank: dict[int, list[tuple[int, list[Decimal]]]] = {}
    for path in sorted(folder.iterdir()):
        trace = read_exact(path)
        rank = trace["distributedInfo"]["rank"]
        events = trace["traceEvents"]
        markers = sorted(
            (e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("execute_")),
            key=lambda e: e["ts"],
        )
        launches = {
            e["args"]["correlation"]: e["ts"]
            for e in events
            if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
        }
        steps: list[tuple[int, list[Decimal]]] = []
        for m in markers:
            found = _BATCH.search(m["name"])
            assert found is not None, m["name"]
            steps.append((int(found.group(1)), []))
        kernels = sorted(
            (e for e in events if e.get("cat") == "kernel" and e.get("args", {}).get("Collective name") == "allreduce"),
            key=lambda e: e["ts"],
        )
        for k in kernels:
            t = launches[k["args"]["correlation"]]
            for i, m in enumerate(markers):
                if m["ts"] <= t <= m["ts"] + m["dur"]:
                    steps[i][1].append(Decimal(k["dur"]))
                    break
        per_rank[rank] = steps
    ranks = sorted(per_rank)
    assert len(ranks) > 1 and len({len(per_rank[r]) for r in ranks}) == 1
    return per_rank


def raw_allreduce_wait(folder: Path) -> dict[int, Decimal]:
    """Per decode batch size: the all-reduce wait per engine step, mean over ranks (README: each paired collective's
    wait on a rank = its duration − the shortest duration across ranks; the k-th all-reduce of a step is paired
    across ranks), in ms."""
    return {b: sum(w.values(), Decimal(0)) for b, w in raw_wait_by_late_rank(folder).items()}


def raw_wait_by_late_rank(folder: Path) -> dict[int, dict[int, Decimal]]:
    """Per decode batch size, per late rank (the one whose all-reduce was the shortest: the others waited for it),
    the wait it caused per engine step, mean over ranks, in ms."""
    per_rank = _allreduce_durations(folder)
    ranks = sorted(per_rank)
    caused: dict[int, dict[int, Decimal]] = {}
    steps: dict[int, int] = {}
    for i, (batch, _) in enumerate(per_rank[ranks[0]]):
        durations = [per_rank[r][i][1] for r in ranks]
        assert len({len(d) for d in durations}) == 1 and all(per_rank[r][i][0] == batch for r in ranks)
        steps[batch] = steps.get(batch, 0) + 1
        mine = caused.setdefault(batch, {})
        for k in range(len(durations[0])):
            column = [d[k] for d in durations]
            shortest = min(column)
            late = ranks[column.index(shortest)]
            mine[late] = mine.get(late, Decimal(0)) + sum(column) / len(ranks) - shortest
    return {b: {r: w / steps[b] / 1000 for r, w in by_rank.items()} for b, by_rank in caused.items()}  # µs -> ms


def has_graph_launch(folder: Path) -> bool:
    """Whether the one trace of ``folder`` launched a CUDA graph."""
    (path,) = folder.iterdir()
    return any(
        e.get("cat") == "cuda_runtime" and e.get("name") in ("cudaGraphLaunch", "cudaGraphLaunch_v10000")
        for e in read_exact(path)["traceEvents"]
    )
