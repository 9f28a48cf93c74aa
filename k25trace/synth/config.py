"""The generator's options: :class:`Config` (every keyword of ``generate``, defined once) and :class:`Delay`."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, fields
from typing import Any, Iterable, Sequence

from k25trace.errors import K25Error
from k25trace.synth.kernels import CATEGORIES, KERNEL_CATEGORY

BASE_EPOCH_NS = 1767189312_000_000_000  # true time of the first step (an arbitrary 2026 wall time)

# Config field metadata: which options truth.json's "params" records
_NEVER = {"params": "never"}  # recorded elsewhere (delays) or not deciding the content (workers)
_IF_CHANGED = {"params": "if_changed"}  # the known-change options: recorded only when one is used


class SynthError(K25Error, ValueError):
    """An invalid generator option (also a ``ValueError``, which is what ``generate`` raised before)."""


@dataclass
class Delay:
    """Make ``rank`` arrive ``delay_us`` late at selected collectives (all if steps/ordinals/every are None)."""

    rank: int
    delay_us: float
    steps: frozenset[int] | None = None  # step indices (truth "index"), None = every step with collectives
    ordinals: frozenset[int] | None = None  # collective ordinals k within the step
    every: int | None = None  # every K-th collective (k % K == 0)

    def applies(self, step: int, k: int) -> bool:
        if self.steps is not None and step not in self.steps:
            return False
        if self.ordinals is not None and k not in self.ordinals:
            return False
        if self.every is not None and k % self.every != 0:
            return False
        return True

    @property
    def delay_ns(self) -> int:
        return int(round(self.delay_us * 1000))

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "delay_ns": self.delay_ns,
            "steps": sorted(self.steps) if self.steps is not None else None,
            "ordinals": sorted(self.ordinals) if self.ordinals is not None else None,
            "every": self.every,
        }


def as_delay(spec: Any) -> Delay:
    """A :class:`Delay` from a Delay, a dict ``{rank, delay_us, steps?, ordinals?, every?}`` or a tuple
    ``(rank, delay_us[, steps[, ordinals[, every]]])``."""
    if isinstance(spec, Delay):
        return spec
    if isinstance(spec, dict):
        steps = spec.get("steps")
        ords = spec.get("ordinals")
        return Delay(
            int(spec["rank"]),
            float(spec["delay_us"]),
            frozenset(steps) if steps is not None else None,
            frozenset(ords) if ords is not None else None,
            spec.get("every"),
        )
    spec = tuple(spec)
    steps = frozenset(spec[2]) if len(spec) > 2 and spec[2] is not None else None
    ords = frozenset(spec[3]) if len(spec) > 3 and spec[3] is not None else None
    every = int(spec[4]) if len(spec) > 4 and spec[4] is not None else None
    return Delay(int(spec[0]), float(spec[1]), steps, ords, every)


@dataclass
class Config:
    """Every option of the generator; ``generate(out_dir, **options)`` takes exactly these keywords.

    ``__post_init__`` checks them (:class:`SynthError`) and normalises a few: ``steps_per_batch`` given as one
    number becomes one per batch size, ``delays`` become :class:`Delay` items, sequences become tuples.
    Values are otherwise kept as given (truth.json records them as given).

    ``clock_offsets_us``: per-rank offsets (µs), one number N (rank i gets N·i/(ranks-1)), or None for random
    offsets within ±``max_clock_offset_us`` (rank 0 always 0). ``target_gz_mb`` pads every rank file to
    about that many MB (10^6 bytes) compressed (or uncompressed when ``gzip=False``). ``workers`` > 1 writes
    ranks in parallel processes.

    For comparisons with a known change: ``category_scale`` ``{category: factor}`` makes every op of a category
    take ``factor`` × its time (``{"attention": 1.2}``: attention 20 % slower); ``kernel_rename`` ``{name: new}``
    writes an op under another name (same duration and category: one kernel replaced by another);
    ``noise_seed`` keeps ``seed``'s GPUs (per-rank speed, clock offsets, base times) and draws other jitter and
    timings: the same workload run again. All default to the unchanged generator.

    The field order is the order of truth.json's ``params``.
    """

    ranks: int = 8
    batch_sizes: Sequence[int] = (1, 64, 256)
    steps_per_batch: int | Sequence[int] = 20  # decode steps per batch size: one number, or one per size
    layers: int = 61
    first_k_dense: int = 1
    prefill: bool = True  # a piecewise prefill step before each batch-size group
    prompt_len: int = 512
    max_prefill_tokens: int = 8192
    empty_steps: int = 1  # execute_context_0(0)_generation_0(0) steps after each group
    context_len: int = 1024
    allreduce: str = "nccl"  # nccl | custom
    ar_bus_gbps: float = 20.0
    ar_latency_us: float = 24.0
    delays: Iterable[Any] = field(default=(), metadata=_NEVER)  # truth.json "delays"
    clock_offsets_us: float | Sequence[float] | None = None  # params: the offsets used
    max_clock_offset_us: float = field(default=2000.0, metadata=_NEVER)
    jitter: float = 0.03
    target_gz_mb: float | None = None
    gzip: bool = True
    compresslevel: int = 1
    workers: int = field(default=1, metadata=_NEVER)
    seed: int = 0
    category_scale: dict[str, float] | None = field(default=None, metadata=_IF_CHANGED)
    kernel_rename: dict[str, str] | None = field(default=None, metadata=_IF_CHANGED)
    noise_seed: int | None = field(default=None, metadata=_IF_CHANGED)  # None: the noise follows ``seed``
    base_epoch_ns: int = field(default=BASE_EPOCH_NS, metadata=_NEVER)

    def __post_init__(self) -> None:
        if self.allreduce not in ("nccl", "custom"):
            raise SynthError("allreduce must be 'nccl' or 'custom'")
        self.batch_sizes = tuple(self.batch_sizes)
        if isinstance(self.steps_per_batch, int):
            self.steps_per_batch = (self.steps_per_batch,) * len(self.batch_sizes)
        self.steps_per_batch = tuple(self.steps_per_batch)
        if self.clock_offsets_us is not None and not isinstance(self.clock_offsets_us, (int, float)):
            self.clock_offsets_us = tuple(self.clock_offsets_us)
            if len(self.clock_offsets_us) != self.ranks:
                raise SynthError(f"clock_offsets_us has {len(self.clock_offsets_us)} values for {self.ranks} ranks")
        self.delays = tuple(as_delay(d) for d in self.delays)
        for d in self.delays:
            if not 0 <= d.rank < self.ranks:
                raise SynthError(f"delay rank {d.rank} out of range")
        self.category_scale = dict(self.category_scale or {})
        self.kernel_rename = dict(self.kernel_rename or {})
        self._check_changes()

    def _check_changes(self) -> None:
        for cat, factor in (self.category_scale or {}).items():
            if cat not in CATEGORIES:
                raise SynthError(f"category_scale: unknown category {cat!r}; one of {', '.join(CATEGORIES)}")
            if not (math.isfinite(factor) and factor > 0):
                raise SynthError(f"category_scale: factor for {cat} must be a positive number, not {factor}")
        renames = self.kernel_rename or {}
        for old, new in renames.items():
            if old not in KERNEL_CATEGORY:
                raise SynthError(f"kernel_rename: {old[:80]!r} is not a kernel the generator writes")
            if not new or new in KERNEL_CATEGORY or list(renames.values()).count(new) > 1:
                raise SynthError(f"kernel_rename: the new name {new[:80]!r} must be non-empty and new")

    @property
    def changed(self) -> bool:
        """True when a known-change option is used (truth.json then records them)."""
        return bool(self.category_scale or self.kernel_rename or self.noise_seed is not None)

    def clock_offsets_ns(self, rng: random.Random) -> list[int]:
        """Per-rank clock offsets (ns); random ones are drawn from ``rng`` (the run's metadata stream)."""
        offsets = self.clock_offsets_us
        if offsets is None:
            limit = self.max_clock_offset_us
            return [0] + [int(rng.uniform(-limit, limit) * 1000) for _ in range(self.ranks - 1)]
        if isinstance(offsets, (int, float)):
            return [int(float(offsets) * 1000 * i / max(1, self.ranks - 1)) for i in range(self.ranks)]
        return [int(round(float(x) * 1000)) for x in offsets]

    def params(self, clock_offsets_ns: Sequence[int]) -> dict[str, Any]:
        """truth.json's ``params``: the options as given, the clock offsets as used (µs)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            when = f.metadata.get("params")
            if when == "never" or (when == "if_changed" and not self.changed):
                continue
            value = getattr(self, f.name)
            if f.name == "clock_offsets_us":
                value = [o / 1000 for o in clock_offsets_ns]
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out
