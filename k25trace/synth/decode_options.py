"""The decode loop's options (its command's flags, one field each) and its progress log, shared by its modules."""

from __future__ import annotations

import sys
from dataclasses import dataclass


def log(rank: int, msg: str) -> None:
    """One progress line of a rank, on stderr."""
    print(f"[decode_loop rank {rank}] {msg}", file=sys.stderr, flush=True)


@dataclass
class DecodeLoopOptions:
    """Everything a run needs (the command's flags, one field each); handed to every rank's process."""

    out: str
    world_size: int = 0
    layers: int = 4
    batch_sizes: str = "1,8,64"
    steps: int = 8
    warmup: int = 3
    hidden: int = 7168
    heads: int = 64
    q_lora_rank: int = 1536
    kv_lora_rank: int = 512
    rope_dim: int = 64
    nope_dim: int = 128
    v_dim: int = 128
    experts: int = 384
    top_k: int = 8
    moe_intermediate: int = 2048
    vocab: int = 163840
    context: int = 1024
    delay_rank: int | None = None
    delay_ms: float = 0.0
    delay_every: int = 4
    gpu_delay_rank: int | None = None
    gpu_delay_us: float = 0.0
    gpu_delay_site: int = 1
    gpu_delay_every: int = 2
    gpu_delay_offset: int = 1
    eager: bool = False
    inject_gaps: bool = False
    host_gap_us: float = 500.0
    gap_layer: int | None = None
    record_shapes: bool = False
    layer_annotations: bool = False
    dense_layers: int = 0
    dense_intermediate: int = 18432
    odd_layer: int | None = None
    odd_factor: int = 2
    marlin: bool = False
    marlin_src: str = ".marlin"
    marlin_build: str | None = None
    device: str = "cuda"
    dtype: str = "bfloat16"
    seed: int = 0
    master_port: int = 29533

    def batch_size_list(self) -> list[int]:
        return [int(b) for b in self.batch_sizes.split(",") if b.strip()]
