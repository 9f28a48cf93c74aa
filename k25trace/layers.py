"""Layers: split every step of a trace into ``pre``, its transformer layers and ``post``; the per-layer view.

All segmentation is SQL (``queries/layers_sequence.sql``, ``layers_infer.sql``, ``layers_build.sql``; README
"Layers"): layer annotations (``model.layers.N`` ranges around the launches) when the trace has them, else the
layers inferred from the step's repeating kernel sequence (also when the whole step is one CUDA graph). The layer
count and the dense/MoE pattern come from the model config kept by ``k25trace load --model-config`` when there is
one (read here from ``meta`` as stored: its ``num_hidden_layers``, ``first_k_dense_replace``, ``moe_layer_freq``,
``n_routed_experts``/``num_experts``, also inside a ``text_config``). This module runs the files for one trace and
returns the per-layer frames; it prints nothing.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import duckdb

from k25trace.db import query_frame, run_query
from k25trace.vocab import check_phase

if TYPE_CHECKING:
    import polars as pl  # the frames; polars itself is imported when rows are fetched (not during a load)

__all__ = ["build_layers", "config_layers", "layer_breakdown", "layer_lateness"]


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 20 else None


def config_layers(con: duckdb.DuckDBPyConnection) -> dict[str, int | None]:
    """The segmentation's parameters from the stored model config: ``layers`` (num_hidden_layers), ``dense_layers``
    (first_k_dense_replace; all layers for a model without experts), ``moe_every`` (moe_layer_freq); all None when
    no config is stored or it lacks a layer count."""
    none: dict[str, int | None] = {"layers": None, "dense_layers": None, "moe_every": None}
    rows = dict(run_query(con, "meta_get", {"prefix": "model_config"}).fetchall())
    try:
        raw = json.loads(rows["model_config"]) if rows.get("model_config") else None
    except (ValueError, RecursionError):
        return none
    if not isinstance(raw, dict):
        return none
    text = raw.get("text_config")
    cfg: dict[str, Any] = text if isinstance(text, dict) else raw
    layers = _whole(cfg.get("num_hidden_layers"))
    if not layers:
        return none
    experts = next(
        (e for e in (_whole(cfg.get(k)) for k in ("n_routed_experts", "num_experts", "num_local_experts")) if e), None
    )
    dense = _whole(cfg.get("first_k_dense_replace"))
    return {
        "layers": layers,
        "dense_layers": (dense or 0) if experts else layers,
        "moe_every": _whole(cfg.get("moe_layer_freq")) or 1,
    }


def build_layers(con: duckdb.DuckDBPyConnection, trace_id: int) -> None:
    """(Re)build the ``step_layers`` and ``step_layer_categories`` rows of one trace from its steps (call after
    :func:`k25trace.steps.build_steps`, in the same transaction)."""
    params = config_layers(con)
    run_query(con, "layers_sequence", {"trace_id": trace_id})
    run_query(con, "layers_infer", {"trace_id": trace_id, **params})
    run_query(con, "layers_build", {"trace_id": trace_id})


def layer_breakdown(
    con: duckdb.DuckDBPyConnection, *, phase: str = "decode", rank: int | None = None, trace_id: int | None = None
) -> "pl.DataFrame":
    """``report --by layer``: per run, batch size and segment (pre, each layer, post) of the segmented steps of
    ``phase``: median ms, kind, the category split, against the median layer, outliers with their step; for
    multi-rank runs, which rank arrives late at the layer's collectives (``queries/layers_report.sql``)."""
    return query_frame(con, "layers_report", {"phase": check_phase(phase), "rank": rank, "trace_id": trace_id})


def layer_lateness(con: duckdb.DuckDBPyConnection, *, phase: str = "decode") -> "pl.DataFrame":
    """Per multi-rank run, batch size, layer and rank: how often and how late the rank arrived last at the layer's
    collectives, and why (``collective_causes`` mapped to the layer that holds each collective;
    ``queries/layers_lateness.sql``)."""
    return query_frame(con, "layers_lateness", {"phase": check_phase(phase)})
