"""The words the front ends share, each defined once: step phases, report views, output formats.

The CLI's choices, the TUI's filters and the report layer's checks are all built from these tuples, so that a
phase or a view cannot be known to one front end and not to another. Plain tuples of strings (Python 3.10 has no
``StrEnum``): the values go into SQL parameters, click choices and messages exactly as they are. Nothing heavy is
imported here (``k25trace bench`` runs on GPU machines that may have only torch and click).
"""

from __future__ import annotations

from k25trace.errors import K25Error

ALL = "all"
"""The phase filter that selects the steps of every phase."""

STEP_PHASES = ("decode", "prefill", "mixed", "unknown", "empty")
"""The values of ``steps.phase``."""

PHASES = (ALL, *STEP_PHASES)
"""What ``--phase`` (and the TUI's phase filter, cycled in this order) takes: every phase, or one."""

VIEW_HELP = {
    "batch": "per batch size (and capture level)",
    "findings": "the ranked findings per run and batch size: what costs the step, the most each fix could save "
    "(ms/step, % of the step; savings overlap, never added up) and the view that shows it",
    "category": "all steps together",
    "step": "one line per step",
    "rank": "per rank (with the collective wait/transfer split on a terminal)",
    "kernel": "the top kernels",
    "idle": "why the GPU is idle (host-bound, sync, launch overhead, device-bound; between steps)",
    "timeline": "one line per step, the whole GPU timeline accounted for, suspicious steps flagged",
    "comm": "collectives across ranks (transfer vs wait, why the late rank was late, skew, the straggler = the rank "
    "causing the most wait)",
    "comm-site": "per call site (k-th collective of a step): wait, late rank",
    "comm-bw": "bus bandwidth of the observed transfers per message size, beside the bench floor",
    "rank-comm": "per rank wait suffered and caused, lateness",
    "floor": "observed AllReduce per step against the `k25trace bench allreduce` floor (efficiency)",
    "layer": "per decoder layer inside the step (median ms, categories, slow layers, outlier steps)",
    "layer-late": "per layer and rank: how often and how late the rank reached the layer's collectives, and why",
    "roofline": "each op with recorded shapes against the GPU's peaks (TFLOP/s, GB/s, % of peak, compute- or "
    "memory-bound), unmodelled ops named",
    "sol": "each decode step against its lower bound from --model-config (weights, KV cache, all-reduce)",
}
"""The views of ``k25trace report --by`` with what each shows (the CLI's help is built from this)."""

VIEWS = tuple(VIEW_HELP)
"""The report views, in the order the help lists them."""

CROSS_RANK_VIEWS = ("rank", "comm", "comm-site", "comm-bw", "rank-comm", "floor", "layer-late")
"""Views whose figures depend on the clock alignment of the ranks (the report warns when it is poor)."""

FORMATS = ("table", "csv", "json", "markdown")
"""Output formats of every command that prints rows (``--format``)."""

COMPARE_MATCHES = ("auto", "batch", "level", "side")
"""How ``k25trace compare`` (and ``html --vs``) pairs the steps of its two sides (``--match``)."""

COMPARE_TABLES = ("category", "kernel", "step", "layer", "comm", "macro")
"""The tables of a comparison (``compare --by``, which also takes ``all``)."""


def check_phase(phase: str) -> str:
    """``phase`` when it is one of :data:`PHASES`, else a :class:`K25Error` listing them."""
    if phase not in PHASES:
        raise K25Error(f"unknown phase {phase!r}; one of {', '.join(PHASES)}")
    return phase


def check_view(view: str) -> str:
    """``view`` when it is one of :data:`VIEWS`, else a :class:`K25Error` listing them."""
    if view not in VIEWS:
        raise K25Error(f"unknown view {view!r}; one of {', '.join(VIEWS)}")
    return view
