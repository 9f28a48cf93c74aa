"""``k25trace synth``: the click command over :func:`~k25trace.synth.driver.generate`, and its option parsers."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterable

import click

from k25trace.synth.config import Delay
from k25trace.synth.driver import generate
from k25trace.synth.kernels import KERNEL_CATEGORY


def _parse_int_set(spec: str) -> frozenset[int] | None:
    if spec in ("", "all", "*"):
        return None
    vals: set[int] = set()
    for part in spec.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            vals.update(range(int(a), int(b) + 1))
        else:
            vals.add(int(part))
    return frozenset(vals)


def parse_delay(spec: str) -> Delay:
    """``RANK:US[:STEPS[:ORDINALS]]``; STEPS/ORDINALS: ``all``, ``3,5-7``; ORDINALS ``%K`` = every K-th."""
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 4:
        raise click.BadParameter(f"delay {spec!r}: expected RANK:US[:STEPS[:ORDINALS]]")
    try:
        steps = _parse_int_set(parts[2]) if len(parts) > 2 else None
        ordinals, every = None, None
        if len(parts) > 3:
            if parts[3].startswith("%"):
                every = int(parts[3][1:])
            else:
                ordinals = _parse_int_set(parts[3])
        return Delay(int(parts[0]), float(parts[1]), steps, ordinals, every)
    except ValueError as exc:
        raise click.BadParameter(f"delay {spec!r}: {exc}") from exc


def parse_scales(specs: Iterable[str]) -> dict[str, float]:
    """``["attention=1.2"]`` → ``{"attention": 1.2}``."""
    out: dict[str, float] = {}
    for spec in specs:
        cat, sep, factor = spec.partition("=")
        try:
            if not sep:
                raise ValueError("expected CATEGORY=FACTOR")
            out[cat.strip()] = float(factor)
        except ValueError as exc:
            raise click.BadParameter(f"scale {spec!r}: {exc}") from exc
    return out


def parse_renames(specs: Iterable[str]) -> dict[str, str]:
    """``["act_and_mul_kernel=void vllm::silu_and_mul_kernel<…>(…)"]`` → ``{full old name: new name}``; OLD is a
    part of exactly one of the generator's kernel names."""
    out: dict[str, str] = {}
    for spec in specs:
        old, sep, new = spec.partition("=")
        hits = [name for name in KERNEL_CATEGORY if old and old in name]
        if not sep or not new:
            raise click.BadParameter(f"rename {spec!r}: expected OLD=NEW")
        if len(hits) != 1:
            raise click.BadParameter(
                f"rename {spec!r}: {old!r} is in {len(hits)} of the generator's kernel names; "
                "give a part of exactly one"
            )
        out[hits[0]] = new
    return out


@click.command("synth")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory (trace files + truth.json).",
)
@click.option("--ranks", default=8, show_default=True, type=int, help="Tensor-parallel ranks: one trace file each.")
@click.option("--batch-sizes", default="1,64,256", show_default=True, help="Comma list of decode batch sizes.")
@click.option(
    "--steps",
    "steps",
    default="20",
    show_default=True,
    help="Decode steps per batch size (one number or a comma list).",
)
@click.option("--layers", default=61, show_default=True, type=int, help="Transformer layers per step (Kimi-K2.5: 61).")
@click.option(
    "--first-k-dense", default=1, show_default=True, type=int, help="Leading dense (non-MoE) layers (Kimi-K2.5: 1)."
)
@click.option(
    "--prefill/--no-prefill",
    default=True,
    show_default=True,
    help="A piecewise prefill step before each batch-size group.",
)
@click.option(
    "--empty-steps",
    default=1,
    show_default=True,
    type=int,
    help="execute_context_0(0)_generation_0(0) steps after each group.",
)
@click.option(
    "--context-len",
    default=1024,
    show_default=True,
    type=int,
    help="Tokens in each request's KV cache (sets attention times).",
)
@click.option(
    "--allreduce",
    type=click.Choice(["nccl", "custom"]),
    default="nccl",
    show_default=True,
    help="All-reduce kernels to write: NCCL's or vLLM's custom all-reduce.",
)
@click.option("--delay", "delays", multiple=True, help="RANK:US[:STEPS[:ORDINALS|%K]] (repeatable).")
@click.option(
    "--clock-offset-us",
    default=None,
    help="Max random per-rank clock offset (one number) or a comma list of per-rank offsets (µs).",
)
@click.option("--target-gz-mb", type=float, default=None, help="Pad each rank file to about this size (MB).")
@click.option("--gzip/--no-gzip", default=True, show_default=True, help="Write .pt.trace.json.gz (else plain JSON).")
@click.option("--workers", default=1, show_default=True, type=int, help="Processes writing rank files.")
@click.option("--seed", default=0, show_default=True, type=int, help="Random seed (same seed, same files).")
@click.option(
    "--scale",
    "scales",
    multiple=True,
    metavar="CATEGORY=FACTOR",
    help="Every op of a category takes FACTOR x its time (attention=1.2: 20 % slower; repeatable).",
)
@click.option(
    "--rename",
    "renames",
    multiple=True,
    metavar="OLD=NEW",
    help="Write the kernel whose name contains OLD (one of the generator's) as NEW (repeatable).",
)
@click.option(
    "--noise-seed",
    type=int,
    default=None,
    help="Same GPUs and clocks as --seed, other jitter and timings (the same workload run again).",
)
def command(
    out_dir: Path,
    ranks: int,
    batch_sizes: str,
    steps: str,
    layers: int,
    first_k_dense: int,
    prefill: bool,
    empty_steps: int,
    context_len: int,
    allreduce: str,
    delays: tuple[str, ...],
    clock_offset_us: str | None,
    target_gz_mb: float | None,
    gzip: bool,
    workers: int,
    seed: int,
    scales: tuple[str, ...],
    renames: tuple[str, ...],
    noise_seed: int | None,
) -> None:
    """Generate synthetic Kimi-K2.5 TP-N vLLM traces with ground truth (truth.json).

    \b
    Example:
        k25trace synth --out /tmp/tp2 --ranks 2 --steps 5 --delay 1:150:all:%9 --clock-offset-us 300
    """
    bs = [int(x) for x in batch_sizes.split(",") if x]
    st = [int(x) for x in steps.split(",") if x]
    offs: Any = None
    max_off = 2000.0
    if clock_offset_us is not None:
        vals = [float(x) for x in clock_offset_us.split(",") if x]
        if len(vals) == 1:
            max_off = vals[0]
        else:
            offs = vals
    t0 = time.perf_counter()
    truth = generate(
        out_dir,
        ranks=ranks,
        batch_sizes=bs,
        steps_per_batch=st if len(st) > 1 else st[0],
        layers=layers,
        first_k_dense=first_k_dense,
        prefill=prefill,
        empty_steps=empty_steps,
        context_len=context_len,
        allreduce=allreduce,
        delays=[parse_delay(d) for d in delays],
        clock_offsets_us=offs,
        max_clock_offset_us=max_off,
        target_gz_mb=target_gz_mb,
        gzip=gzip,
        workers=workers,
        seed=seed,
        progress=True,
        category_scale=parse_scales(scales),
        kernel_rename=parse_renames(renames),
        noise_seed=noise_seed,
    )
    for ri in truth["ranks"]:
        size = ri["gz_bytes"] if ri["gz_bytes"] is not None else ri["bytes"]
        click.echo(f"{ri['file']}\t{size / 1e6:.1f} MB\t{ri['events']} events", err=True)
    click.echo(
        f"synth: {len(truth['steps'])} steps, {len(truth['collectives'])} collectives, "
        f"{time.perf_counter() - t0:.1f} s -> {out_dir / 'truth.json'}",
        err=True,
    )
